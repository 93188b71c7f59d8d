/* The tiled (online-softmax) attention kernels: every op (dp, l2, tied l2, dp with the relative bias) forced onto
 * them against the same op on the materialising kernel (output, every gradient, the logit spread) over shapes with
 * T = 1, T not a multiple of the tile, several column tiles per row (T > 512) and peaked rows; finite differences,
 * aliased gradients, accumulation, exact causality and threads on the tiled path alone; the auto rule and
 * LIPT_ATTN_TILED. */
#include "attention_ref.h"

#include <stdlib.h>

/* The ops with the kernel forced: the attn_op signature of attention_ref.h, so its checks run unchanged. */
static lipt_tensor *dp_tiled(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal) {
    ctx->attn_tiled = 1;
    return lipt_attention_dp(ctx, a, b, c, H, causal);
}
static lipt_tensor *l2_tiled(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal) {
    ctx->attn_tiled = 1;
    return lipt_attention_l2(ctx, a, b, c, H, causal);
}
static lipt_tensor *tied_tiled(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal) {
    ctx->attn_tiled = 1;
    return lipt_attention_l2_tied(ctx, a, b, c, H, causal);
}

enum { K_DP, K_L2, K_TIED, K_REL, K_COUNT };
static const char *kind_name[K_COUNT] = {"dp", "l2", "l2_tied", "dp_rel"};

/* The op of `kind` on in[0..2] (and in[3] = rel for K_REL; causal is then implied). */
static lipt_tensor *run_kind(lipt_ctx *ctx, int kind, lipt_tensor **in, int H, int causal) {
    switch (kind) {
    case K_DP: return lipt_attention_dp(ctx, in[0], in[1], in[2], H, causal);
    case K_L2: return lipt_attention_l2(ctx, in[0], in[1], in[2], H, causal);
    case K_TIED: return lipt_attention_l2_tied(ctx, in[0], in[1], in[2], H, causal);
    default: return lipt_attention_dp_rel(ctx, in[0], in[1], in[2], in[3], H);
    }
}

typedef struct {
    float *out, *grad[4];
    float spread;
} run_result;

/* One forward (attn_stats on) and backward seeded with `seed` on the kernel `tiled`; copies the output and the
 * gradients of the n_in inputs. Checks on the tape that the op took that kernel. */
static void run_once(int kind, lipt_tensor **in, int n_in, int H, int causal, int tiled, const float *seed,
                     run_result *r) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    ctx.attn_tiled = tiled;
    ctx.attn_stats = 1;
    ctx.attn_logit_spread = 0;
    lipt_tensor *o = run_kind(&ctx, kind, in, H, causal);
    ck_assert_msg(ctx.tape && ctx.tape->iarg[2] == tiled, "%s: the op did not take the forced kernel",
                  kind_name[kind]);
    lipt_backward_seeded(&ctx, o, seed);
    r->out = malloc(o->numel * sizeof(float));
    memcpy(r->out, o->data, o->numel * sizeof(float));
    for (int i = 0; i < n_in; i++) {
        r->grad[i] = malloc(in[i]->numel * sizeof(float));
        memcpy(r->grad[i], in[i]->grad, in[i]->numel * sizeof(float));
        in[i]->grad = NULL;
    }
    r->spread = ctx.attn_logit_spread;
    lipt_ctx_free(&ctx);
}

/* The inputs of `kind` at shape {B,T,D,H}: q, k, v N(0, 1) (q scaled by qscale) or q, W^Q, W^V for the tied op, and
 * rel [H, T + 3] N(0, 1) for K_REL. Returns the number of inputs. */
static int kind_inputs(int kind, const int s[4], float qscale, uint64_t seed, lipt_tensor **in) {
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    attn_inputs(&rng, kind == K_TIED, (const int[]){s[0], s[1], s[2]}, 7, in);
    for (size_t x = 0; x < in[0]->numel; x++) in[0]->data[x] *= qscale;
    if (kind != K_REL) return 3;
    in[3] = tu_tensor(&rng, 2, (const int[]){s[3], s[1] + 3}, 1.0f, 1);
    return 4;
}

/* Tiled vs materialising on every op, both maskings, with the output, each gradient and the logit spread compared
 * relative to the reference's largest entry (tol 1e-5 for values and gradients, 1e-6 for the spread). A gradient's
 * scale is at least a tenth of the largest gradient entry of the case: at T = 1 the true gradient of q is zero,
 * which the materialising kernel gets exactly (p (g - p g) with p = 1) and the tiled one to rounding (g - dO·O). */
START_TEST(test_tiled_vs_materialised) {
    /* {B, T, D, H}: T = 1, odd D and H, T not a multiple of 64, several row blocks, and T > 512 (several column
     * tiles per row, a partial last one), B = 2, H = 1 and 4 */
    const int shapes[][4] = {{1, 1, 4, 1}, {2, 1, 8, 4}, {2, 5, 6, 3}, {2, 70, 8, 1},
                             {2, 300, 16, 4}, {1, 600, 8, 2}, {2, 1100, 16, 4}};
    double worst_out = 0, worst_grad = 0, worst_spread = 0;
    int n_cmp = 0, spread_bits = 0;
    for (int kind = 0; kind < K_COUNT; kind++)
        for (size_t si = 0; si < NSH(shapes); si++)
            for (int causal = kind == K_REL; causal < 2; causal++)
                for (int peaked = 0; peaked < 2; peaked++) {
                    if (peaked && shapes[si][1] < 300) continue;
                    lipt_tensor *in[4];
                    const int n_in = kind_inputs(kind, shapes[si], peaked ? 6.0f : 1.0f, 1000 + 10 * kind + si, in);
                    const size_t n = in[0]->numel;
                    float *seed = malloc(n * sizeof(float));
                    lipt_rng rng;
                    lipt_rng_seed(&rng, 77 + si);
                    lipt_rng_fill_normal(&rng, seed, n, 1.0f);
                    run_result P, Tl;
                    run_once(kind, in, n_in, shapes[si][3], causal, 0, seed, &P);
                    run_once(kind, in, n_in, shapes[si][3], causal, 1, seed, &Tl);
                    char what[96];
                    snprintf(what, sizeof what, "%s B%d T%d D%d H%d causal%d peaked%d", kind_name[kind],
                             shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], causal, peaked);
                    const double eo = tu_max_rel_err_f(Tl.out, P.out, n, 1e-6);
                    ck_assert_msg(eo < 1e-5, "%s: output rel err %.3e", what, eo);
                    worst_out = fmax(worst_out, eo);
                    double gscale = 0;
                    for (int i = 0; i < n_in; i++)
                        for (size_t x = 0; x < in[i]->numel; x++) gscale = fmax(gscale, fabs(P.grad[i][x]));
                    for (int i = 0; i < n_in; i++) {
                        const double eg = tu_max_rel_err_f(Tl.grad[i], P.grad[i], in[i]->numel, 0.1 * gscale);
                        ck_assert_msg(eg < 1e-5, "%s: gradient of input %d rel err %.3e", what, i, eg);
                        worst_grad = fmax(worst_grad, eg);
                        free(P.grad[i]);
                        free(Tl.grad[i]);
                    }
                    const double es = fabs((double)Tl.spread - P.spread) / fmax(fabs((double)P.spread), 1e-6);
                    ck_assert_msg(P.spread > 0 || shapes[si][1] == 1, "%s: no spread recorded", what);
                    ck_assert_msg(es < 1e-6, "%s: logit spread %.9g tiled vs %.9g", what, Tl.spread, P.spread);
                    worst_spread = fmax(worst_spread, es);
                    spread_bits += Tl.spread == P.spread;
                    n_cmp++;
                    free(P.out);
                    free(Tl.out);
                    free(seed);
                    for (int i = 0; i < n_in; i++) tu_free(in[i]);
                }
    printf("tiled vs materialising, %d cases: worst rel err output %.3e, gradients %.3e (tol 1e-5), logit spread "
           "%.3e (tol 1e-6, bit-equal in %d)\n",
           n_cmp, worst_out, worst_grad, worst_spread, spread_bits);
}
END_TEST

/* The untied ops on the tiled kernel against the naive double reference of SPEC §1 (attention_ref.h). */
START_TEST(test_tiled_forward_ref) {
    const double wd = attn_check_forward(dp_tiled, 0, "dp tiled"), wl = attn_check_forward(l2_tiled, 1, "l2 tiled");
    printf("tiled forward vs double reference: dp %.3e, l2 %.3e (tol 1e-5)\n", wd, wl);
}
END_TEST

/* Finite differences of the tiled kernel alone, including aliased gradients (q = k = v; k = q; the tied op, whose
 * kernel gets dq and dk as one pointer). */
START_TEST(test_tiled_gradcheck) {
    double wa_dp, wa_l2;
    const double wdp = attn_check_grad(dp_tiled, 0, 97, "dp tiled", attn_build_self, "q=k=v", (const int[]){0}, 1,
                                       &wa_dp);
    const double wl2 = attn_check_grad(l2_tiled, 0, 89, "l2 tiled", attn_build_kq, "k=q", (const int[]){0, 2}, 2,
                                       &wa_l2);
    const double wt = attn_check_grad(tied_tiled, 1, 131, "l2_tied tiled", NULL, NULL, NULL, 0, NULL);
    /* several column tiles per row: one long sequence per op and masking */
    double wlong = 0;
    attn_op ops[3] = {dp_tiled, l2_tiled, tied_tiled};
    for (int o = 0; o < 3; o++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 4000 + 2 * o + causal);
            lipt_tensor *in[3];
            attn_inputs(&rng, o == 2, (const int[]){1, 600, 4}, 7, in);
            attn_args a = {ops[o], 2, causal};
            char label[64];
            snprintf(label, sizeof label, "%s tiled T600 causal%d", o == 0 ? "dp" : o == 1 ? "l2" : "l2_tied", causal);
            wlong = fmax(wlong, tu_gradcheck(label, attn_build, &a, in, 3,
                                             &(tu_gradcheck_opts){.n_dirs = 4, .seed = 5, .tol = 5e-3}));
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("tiled gradcheck: dp %.3e (q=k=v %.3e), l2 %.3e (k=q %.3e), l2_tied %.3e, T = 600 %.3e (tol 5e-3)\n", wdp,
           wa_dp, wl2, wa_l2, wt, wlong);
}
END_TEST

typedef struct { int H; } rel_args;
static lipt_tensor *build_rel_tiled(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    ctx->attn_tiled = 1;
    return lipt_attention_dp_rel(ctx, in[0], in[1], in[2], in[3], ((rel_args *)user)->H);
}

/* The relative bias on the tiled kernel: finite differences for q, k, v and rel. */
START_TEST(test_tiled_rel_gradcheck) {
    const int shapes[][4] = {{1, 1, 2, 1}, {1, 4, 2, 1}, {2, 5, 6, 2}, {2, 70, 8, 4}, {1, 600, 4, 2}};
    double worst = 0;
    for (size_t si = 0; si < NSH(shapes); si++) {
        const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
        lipt_rng rng;
        lipt_rng_seed(&rng, 90 + si);
        lipt_tensor *in[4] = {tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1),
                              tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), tu_tensor(&rng, 2, (int[]){H, T + 2}, 1.0f, 1)};
        rel_args a = {H};
        char label[64];
        snprintf(label, sizeof label, "dp_rel tiled B%d T%d D%d H%d", B, T, D, H);
        worst = fmax(worst, tu_gradcheck(label, build_rel_tiled, &a, in, 4, &(tu_gradcheck_opts){8, 1e-3, 5e-3, 9}));
        for (int i = 0; i < 4; i++) tu_free(in[i]);
    }
    printf("dp_rel tiled gradcheck (q, k, v, rel): worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Accumulation into existing gradients, exact causality (a future change moves no earlier output bit and gets
 * exactly zero gradient, also when the change sits in the same tile), and 1 vs 2 threads. */
START_TEST(test_tiled_properties) {
    attn_op ops[3] = {dp_tiled, l2_tiled, tied_tiled};
    double worst_acc = 0, worst_thr = 0;
    for (int o = 0; o < 3; o++) {
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 300 + 2 * o + causal);
            lipt_tensor *in[3];
            attn_inputs(&rng, o == 2, (const int[]){2, 130, 6}, 7, in);
            worst_acc = fmax(worst_acc, attn_check_accumulates(ops[o], in, causal, &rng, "tiled "));
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
        const int shapes[][5] = {{2, 7, 6, 3, 3}, {1, 600, 8, 2, 300}, {1, 5, 4, 1, 0}}; /* B T D H t0 */
        for (size_t si = 0; si < NSH(shapes); si++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 500 + 10 * o + si);
            lipt_tensor *in[3];
            attn_inputs(&rng, o == 2, shapes[si], 7, in);
            attn_check_causal_future(ops[o], in, o == 2, shapes[si][3], shapes[si][4], &rng, "tiled ");
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
        lipt_rng rng;
        lipt_rng_seed(&rng, 31337 + o);
        lipt_tensor *in[3];
        attn_inputs(&rng, o == 2, (const int[]){3, 40, 24}, 7, in);
        worst_thr = fmax(worst_thr, attn_check_threads(ops[o], in, "tiled "));
        lipt_set_threads(2);
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("tiled: accumulation worst rel err %.3e, causality exact, threads 1 vs 2 worst rel diff %.3e\n", worst_acc,
           worst_thr);
}
END_TEST

/* Auto picks the tiled kernel from T = 1024 on (the measured crossover); LIPT_ATTN_TILED sets the default. */
START_TEST(test_tiled_selection) {
    const char *vals[] = {NULL, "auto", "0", "1", "bogus"};
    const int want[] = {-1, -1, 0, 1, -1};
    for (int i = 0; i < 5; i++) {
        if (vals[i]) setenv("LIPT_ATTN_TILED", vals[i], 1);
        else unsetenv("LIPT_ATTN_TILED");
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        ck_assert_msg(ctx.attn_tiled == want[i], "LIPT_ATTN_TILED=%s gives %d", vals[i] ? vals[i] : "(unset)",
                      ctx.attn_tiled);
        lipt_ctx_free(&ctx);
    }
    unsetenv("LIPT_ATTN_TILED");
    for (int T = 1023; T <= 1024; T++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 7);
        lipt_tensor *in[3];
        attn_inputs(&rng, 0, (const int[]){1, T, 2}, 7, in);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_attention_dp(&ctx, in[0], in[1], in[2], 1, 1);
        ck_assert_msg(ctx.tape->iarg[2] == (T >= 1024), "auto at T = %d took the %s kernel", T,
                      ctx.tape->iarg[2] ? "tiled" : "materialising");
        lipt_ctx_free(&ctx);
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("tiled selection: LIPT_ATTN_TILED parsed, auto switches at T = 1024\n");
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_tiled");
    TCase *tc = tcase_create("attention_tiled");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiled_vs_materialised);
    tcase_add_test(tc, test_tiled_forward_ref);
    tcase_add_test(tc, test_tiled_gradcheck);
    tcase_add_test(tc, test_tiled_rel_gradcheck);
    tcase_add_test(tc, test_tiled_properties);
    tcase_add_test(tc, test_tiled_selection);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
