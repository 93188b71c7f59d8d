/* Fixed-point inversion of x + g(x) (SPEC §3, §4.2): geometric convergence at rate Lip(g) for contractive g
 * (linear maps and contractive L2 attention), failure reported for non-contractive g (2x, DP attention scaled
 * like the contractive one on large inputs), constant arena use, argument errors. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/bounds.h"
#include "lipt/invert.h"
#include "lipt/jacobian.h"

/* ------------------------------------------------------------------------------------------- branches */

typedef struct {
    int N, D;
    lipt_tensor *a; /* [D,D] */
    float mult;     /* g(x) = mult * x when a is NULL */
    int saw_grad;   /* set if g was ever called outside no-grad mode */
    int calls;
} lin_branch;

static lipt_tensor *lin_g(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    lin_branch *b = user;
    b->calls++;
    if (ctx->no_grad <= 0) b->saw_grad = 1;
    return b->a ? lipt_matmul(ctx, x, b->a, 0, 0) : lipt_scale(ctx, x, b->mult);
}

typedef struct {
    int N, D, H, causal, dp, bound; /* bound: 1 ∞-norm, 2 2-norm */
    float c;
    lipt_tensor *wq, *wk, *wv, *wo;
    lipt_bound_vectors vec;
    float *vecbuf;
} att_branch;

/* Contractive tied L2-MHA, or (dp) DP-MHA divided by the same factor max(1, UB/c) of its W^Q, W^V, W^O. */
static lipt_tensor *att_g(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    att_branch *m = user;
    lipt_tensor *x3 = lipt_reshape(ctx, x, 3, (int[]){1, m->N, m->D});
    lipt_tensor *q = lipt_matmul(ctx, x3, m->wq, 0, 0), *a;
    if (m->dp)
        a = lipt_attention_dp(ctx, q, lipt_matmul(ctx, x3, m->wk, 0, 0), lipt_matmul(ctx, x3, m->wv, 0, 0), m->H,
                              m->causal);
    else
        a = lipt_attention_l2_tied(ctx, q, m->wq, m->wv, m->H, m->causal);
    lipt_tensor *ub = m->bound == 1 ? lipt_bound_l2_inf(ctx, m->wq, m->wv, m->wo, m->H, m->N)
                                    : lipt_bound_l2_2(ctx, m->wq, m->wv, m->wo, m->H, m->N, &m->vec, 0);
    lipt_tensor *out = lipt_mul(ctx, lipt_matmul(ctx, a, m->wo, 0, 0), lipt_contract_factor(ctx, ub, m->c));
    return lipt_reshape(ctx, out, 2, (int[]){m->N, m->D});
}

static void att_init(att_branch *m, int N, int D, int H, int causal, int dp, int bound, float c, float wscale,
                     uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->N = N; m->D = D; m->H = H; m->causal = causal; m->dp = dp; m->bound = bound; m->c = c;
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    const float sd = wscale / sqrtf((float)D);
    m->wq = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wk = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wv = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wo = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    float *b = malloc((size_t)(2 * H * D + 4 * D) * sizeof(float));
    m->vec = (lipt_bound_vectors){b, b + H * D, b + H * D + D, b + 2 * H * D + D, b + 2 * H * D + 2 * D,
                                  b + 2 * H * D + 3 * D, NULL, NULL, 0};
    m->vecbuf = b;
    lipt_bound_vectors_init(&m->vec, D, H, seed + 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_bound_l2_2(&ctx, m->wq, m->wv, m->wo, H, N, &m->vec, 2000);
    lipt_ctx_free(&ctx);
}

/* Lip(F_c) <= UB / max(1, UB / c) = min(UB, c) in the bound's norm. */
static double att_lip(att_branch *m) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    double ub = m->bound == 1 ? lipt_bound_l2_inf(&ctx, m->wq, m->wv, m->wo, m->H, m->N)->data[0]
                              : lipt_bound_l2_2(&ctx, m->wq, m->wv, m->wo, m->H, m->N, &m->vec, 0)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return fmin(ub, (double)m->c);
}

static void att_free(att_branch *m) {
    tu_free(m->wq); tu_free(m->wk); tu_free(m->wv); tu_free(m->wo);
    free(m->vecbuf);
}

/* y = x + g(x) into a caller tensor of ctx (grad-free). */
static lipt_tensor *forward_residual(lipt_ctx *ctx, lipt_branch_fn g, void *user, const float *x, int N, int D) {
    lipt_tensor *xt = lipt_tensor_2d(ctx, N, D);
    memcpy(xt->data, x, (size_t)N * D * sizeof(float));
    lipt_no_grad_push(ctx);
    lipt_tensor *gx = g(ctx, xt, user);
    lipt_no_grad_pop(ctx);
    lipt_tensor *y = lipt_tensor_2d(ctx, N, D);
    for (int i = 0; i < N * D; i++) y->data[i] = x[i] + gx->data[i];
    return y;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Inverts y = x + g(x) and checks: converged, the Banach a-posteriori error bound
 * |x_k - x*| <= L/(1-L) |x_k - x_{k-1}| (plus float rounding), and, when rate_exact, err_k <= L^k err_0. */
static void check_inversion(const char *label, lipt_branch_fn g, void *user, const float *x, int N, int D, double L,
                            int rate_exact, int print_trace, double *worst_rate) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *y = forward_residual(&ctx, g, user, x, N, D);
    const size_t n = (size_t)N * D;
    float *xr = malloc(n * sizeof(float));
    double errs[200];
    lipt_fp_opts o = {1e-6, 200, 0, 0, 0};
    lipt_fp_result res = {0, 0, errs, 0};
    lipt_error err = {0};
    lipt_status st = lipt_fixed_point_invert(&ctx, g, user, y, xr, &o, &res, &err);
    ck_assert_msg(st == LIPT_OK, "%s: %s", label, err.msg);
    ck_assert(res.converged && res.iters >= 1 && res.final_err == errs[res.iters - 1]);
    const double scale = fmax(1.0, max_abs(x, n));
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)xr[i] - x[i]));
    e /= scale;
    const double post = L / (1 - L) * res.final_err / scale + 2e-6;
    printf("%-44s L %.2f: %3d iterations, final step %.2e, |x_rec - x|/max(1,|x|) %.2e (bound %.2e)\n", label, L,
           res.iters, res.final_err, e, post);
    ck_assert_msg(e <= post, "%s: reconstruction error %.3e above the Banach bound %.3e", label, e, post);
    ck_assert_msg(e <= 1e-5, "%s: reconstruction error %.3e", label, e);
    /* geometric rate: err_k <= L^k err_0, up to float rounding of the iterates (a few ulps of |x|) */
    double worst = 0;
    for (int k = 0; k < res.iters; k++) {
        const double lim = pow(L, k) * errs[0] * (1 + 1e-4) + 4e-7 * scale;
        if (rate_exact) ck_assert_msg(errs[k] <= lim, "%s: err_%d = %.3e > L^k err_0 = %.3e", label, k, errs[k], lim);
        if (k > 0 && errs[k] > 1e-5 * scale) worst = fmax(worst, pow(errs[k] / errs[0], 1.0 / k));
    }
    if (worst_rate) *worst_rate = fmax(*worst_rate, worst);
    if (print_trace) {
        printf("  err per iteration:");
        for (int k = 0; k < res.iters; k++) printf(" %.2e", errs[k]);
        printf("\n  observed rate (err_k/err_0)^(1/k) up to %.3f vs L = %.2f\n", worst, L);
    }
    ck_assert(ctx.no_grad == 0);
    free(xr);
    lipt_ctx_free(&ctx);
}

/* ------------------------------------------------------------------------------------------- tests */

START_TEST(test_fp_linear) {
    /* g(X) = X A in the row layout has Lip_∞ = max abs column sum of A; scale A to exactly L */
    const double Ls[] = {0.3, 0.6, 0.9};
    const int shapes[][2] = {{1, 1}, {4, 3}, {16, 8}};
    for (int li = 0; li < 3; li++)
        for (int si = 0; si < 3; si++) {
            const int N = shapes[si][0], D = shapes[si][1];
            lipt_rng r;
            lipt_rng_seed(&r, 10 + li * 3 + si);
            lin_branch b = {N, D, tu_tensor(&r, 2, (int[]){D, D}, 1.0f, 0), 0, 0, 0};
            double cs = 0;
            for (int j = 0; j < D; j++) {
                double s = 0;
                for (int i = 0; i < D; i++) s += fabs((double)b.a->data[i * D + j]);
                cs = fmax(cs, s);
            }
            for (int i = 0; i < D * D; i++) b.a->data[i] = (float)(b.a->data[i] * Ls[li] / cs);
            float *x = malloc((size_t)N * D * sizeof(float));
            lipt_rng_fill_normal(&r, x, (size_t)N * D, 2.0f);
            char label[64];
            snprintf(label, sizeof label, "linear N%d D%d", N, D);
            check_inversion(label, lin_g, &b, x, N, D, Ls[li], 1, si == 2 && li == 2, NULL);
            ck_assert_msg(!b.saw_grad, "the branch was called with gradients on");
            free(x);
            tu_free(b.a);
        }
}
END_TEST

START_TEST(test_fp_attention) {
    const float cs[] = {0.5f, 0.7f, 0.9f};
    const int shapes[][3] = {{16, 8, 2}, {32, 16, 4}};
    double worst_rate[3] = {0, 0, 0};
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < 2; si++)
            for (int causal = 0; causal < 2; causal++)
                for (int bound = 1; bound <= 2; bound++) {
                    const int N = shapes[si][0], D = shapes[si][1], H = shapes[si][2];
                    att_branch m;
                    att_init(&m, N, D, H, causal, 0, bound, cs[ci], 1.0f, 20 + si * 2 + causal);
                    float *x = malloc((size_t)N * D * sizeof(float));
                    lipt_rng r;
                    lipt_rng_seed(&r, 30 + ci);
                    lipt_rng_fill_normal(&r, x, (size_t)N * D, 3.0f);
                    char label[80];
                    snprintf(label, sizeof label, "contractive L2 (%s) N%d D%d H%d %s", bound == 1 ? "inf" : "2", N,
                             D, H, causal ? "causal" : "full");
                    /* the ∞ bound makes Lip_∞(g) <= c, the norm of the error trace: the rate is then exact */
                    check_inversion(label, att_g, &m, x, N, D, att_lip(&m), bound == 1,
                                    ci == 2 && si == 0 && causal && bound == 1, &worst_rate[ci]);
                    free(x);
                    att_free(&m);
                }
    printf("contractive attention, random inputs: observed rates %.3f, %.3f, %.3f for c = 0.5, 0.7, 0.9\n",
           worst_rate[0], worst_rate[1], worst_rate[2]);
    /* Where the bound is nearly tight (tiny N, D) and at inputs that maximise |J|_inf by gradient ascent, the
     * iteration runs close to its worst rate c: the geometric bound err_k <= c^k err_0 is then a real constraint. */
    const int tight[][3] = {{2, 1, 1}, {3, 2, 1}};
    double tight_rate[3] = {0, 0, 0};
    for (int ci = 0; ci < 3; ci++)
        for (int si = 0; si < 2; si++)
            for (int causal = 0; causal < 2; causal++) {
                const int N = tight[si][0], D = tight[si][1], H = tight[si][2];
                att_branch m;
                att_init(&m, N, D, H, causal, 0, 1, cs[ci], 3.0f, 80 + si * 2 + causal);
                lipt_jac_map map = {att_g, &m, 2, {N, D}, 1};
                lipt_ascent_opts o = lipt_ascent_defaults();
                o.starts = 4;
                o.steps = 60;
                o.input_scale = 1.0 / 3;
                float x[6];
                lipt_ascent_result ar = {0};
                lipt_error err = {0};
                ck_assert_msg(lipt_ascent_jac_inf(&map, &o, x, &ar, &err) == LIPT_OK, "%s", err.msg);
                char label[80];
                snprintf(label, sizeof label, "contractive L2 (inf) N%d D%d %s, |J|_inf %.3f", N, D,
                         causal ? "causal" : "full", ar.best);
                const double L = att_lip(&m);
                ck_assert(ar.best < L);
                double rate = 0;
                check_inversion(label, att_g, &m, x, N, D, L, 1, ci == 2 && si == 0 && !causal, &rate);
                tight_rate[ci] = fmax(tight_rate[ci], rate);
                att_free(&m);
            }
    printf("contractive attention, ascended inputs: observed rates %.3f, %.3f, %.3f for c = 0.5, 0.7, 0.9\n",
           tight_rate[0], tight_rate[1], tight_rate[2]);
    ck_assert_msg(tight_rate[2] > 0.3, "ascended inputs did not slow the iteration (rate %.3f)", tight_rate[2]);
}
END_TEST

START_TEST(test_fp_noncontractive) {
    const int N = 4, D = 3;
    float x[12];
    lipt_rng r;
    lipt_rng_seed(&r, 40);
    lipt_rng_fill_normal(&r, x, 12, 1.0f);
    lin_branch b = {N, D, NULL, 2.0f, 0, 0};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *y = forward_residual(&ctx, lin_g, &b, x, N, D);
    float xr[12];
    double errs[1000];
    lipt_fp_result res = {0, 0, errs, 0};
    lipt_error err = {0};
    /* g = 2x: the error doubles every iteration */
    lipt_status st = lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, &(lipt_fp_opts){1e-6, 50, 0, 0, 0}, &res, &err);
    printf("g = 2x, cap 50: %s: %s\n", lipt_status_name(st), err.msg);
    ck_assert_int_eq(st, LIPT_ERR_NUMERIC);
    ck_assert(!res.converged && res.iters == 50 && strstr(err.msg, "not converged"));
    ck_assert(errs[49] > 1e12 * errs[0]);
    for (int i = 0; i < 12; i++) ck_assert(isfinite(xr[i]));
    /* with a larger cap the iterate overflows: reported as non-finite, x_out keeps the last finite iterate */
    st = lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, &(lipt_fp_opts){1e-6, 1000, 0, 0, 0}, &res, &err);
    printf("g = 2x, cap 1000: %s after %d iterations: %s\n", lipt_status_name(st), res.iters, err.msg);
    ck_assert_int_eq(st, LIPT_ERR_NUMERIC);
    ck_assert(!res.converged && res.iters < 1000 && strstr(err.msg, "non-finite"));
    for (int i = 0; i < 12; i++) ck_assert(isfinite(xr[i]));
    ck_assert(ctx.no_grad == 0);
    lipt_ctx_free(&ctx);

    /* DP attention divided by the contractive factor of its weights, on inputs where its Jacobian is large:
     * the last token (which sees all others, also under the causal mask) sits at the origin and attends
     * uniformly while the others are far out, so its ∂g/∂x grows like t². The same inputs through the contractive
     * L2 attention invert. */
    const float cs[] = {0.5f, 0.7f, 0.9f};
    int failed = 0, cases = 0;
    for (int ci = 0; ci < 3; ci++)
        for (int causal = 0; causal < 2; causal++) {
            const int n = 8 * 8;
            att_branch dp, l2;
            att_init(&dp, 8, 8, 2, causal, 1, 1, cs[ci], 1.0f, 50 + causal);
            att_init(&l2, 8, 8, 2, causal, 0, 1, cs[ci], 1.0f, 50 + causal);
            float xa[64], xo[64];
            lipt_rng_seed(&r, 60 + ci);
            lipt_rng_fill_normal(&r, xa, n, 100.0f);
            for (int j = 0; j < 8; j++) xa[7 * 8 + j] = 0;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *yd = forward_residual(&ctx, att_g, &dp, xa, 8, 8);
            lipt_fp_result rd = {0, 0, errs, 0};
            st = lipt_fixed_point_invert(&ctx, att_g, &dp, yd, xo, &(lipt_fp_opts){1e-6, 100, 0, 0, 0}, &rd, &err);
            double e = 0;
            for (int i = 0; i < n; i++) e = fmax(e, fabs((double)xo[i] - xa[i]));
            printf("DP (scaled, c = %.1f, %s), inputs x100: %s after %d iterations, last step %.3e, |x_rec - x| %.3e\n",
                   (double)cs[ci], causal ? "causal" : "full", lipt_status_name(st), rd.iters, rd.final_err, e);
            cases++;
            if (st == LIPT_ERR_NUMERIC && !rd.converged) failed++;
            lipt_tensor *yl = forward_residual(&ctx, att_g, &l2, xa, 8, 8);
            lipt_fp_result rl = {0, 0, NULL, 0};
            st = lipt_fixed_point_invert(&ctx, att_g, &l2, yl, xo, &(lipt_fp_opts){1e-6, 100, 0, 0, 0}, &rl, &err);
            ck_assert_msg(st == LIPT_OK, "contractive L2 on the same inputs: %s", err.msg);
            printf("  contractive L2 on the same inputs: converged in %d iterations\n", rl.iters);
            lipt_ctx_free(&ctx);
            att_free(&dp);
            att_free(&l2);
        }
    printf("scaled DP attention failed to invert in %d of %d cases\n", failed, cases);
    ck_assert_msg(failed == cases, "scaled DP attention inverted in %d of %d cases", cases - failed, cases);
}
END_TEST

/* A branch with the attention's allocations whose iteration never settles: x_{k+1} = y + x_k - 1e-3 F_c(x_k). */
static lipt_tensor *drift_g(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    return lipt_sub(ctx, lipt_scale(ctx, att_g(ctx, x, user), 1e-3f), x);
}

START_TEST(test_fp_memory) {
    att_branch m;
    att_init(&m, 16, 8, 2, 1, 0, 1, 0.9f, 1.0f, 70);
    float x[128], xr[128];
    lipt_rng r;
    lipt_rng_seed(&r, 71);
    lipt_rng_fill_normal(&r, x, 128, 2.0f);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_tensor *y = forward_residual(&ctx, att_g, &m, x, 16, 8);
    const size_t used0 = ctx.arena.used_total;
    const int caps[] = {5, 60, 5, 200};
    size_t peak_first = 0, mallocs_first = 0;
    for (int i = 0; i < 4; i++) {
        lipt_fp_result res = {0, 0, NULL, 0};
        lipt_error err = {0};
        /* never converges: runs to the cap */
        lipt_status st = lipt_fixed_point_invert(&ctx, drift_g, &m, y, xr, &(lipt_fp_opts){1e-6, caps[i], 0, 0, 0}, &res, &err);
        ck_assert(st == LIPT_ERR_NUMERIC && res.iters == caps[i]);
        printf("%3d iterations: arena used %zu bytes (before %zu), peak %zu, block mallocs %zu\n", res.iters,
               ctx.arena.used_total, used0, ctx.arena.peak, ctx.arena.n_block_mallocs);
        ck_assert_msg(ctx.arena.used_total == used0, "arena grew from %zu to %zu", used0, ctx.arena.used_total);
        if (i == 0) {
            peak_first = ctx.arena.peak;
            mallocs_first = ctx.arena.n_block_mallocs;
        } else {
            ck_assert_msg(ctx.arena.peak == peak_first, "peak grew with iterations: %zu -> %zu", peak_first,
                          ctx.arena.peak);
            ck_assert_msg(ctx.arena.n_block_mallocs == mallocs_first, "arena kept allocating blocks");
        }
    }
    lipt_ctx_free(&ctx);
    att_free(&m);
}
END_TEST

static lipt_tensor *bad_shape_g(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    (void)user;
    (void)x;
    return lipt_tensor_zeros(ctx, 1, (int[]){3});
}

START_TEST(test_fp_args) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lin_branch b = {2, 2, NULL, 0.5f, 0, 0};
    lipt_tensor *y = lipt_tensor_zeros(&ctx, 2, (int[]){2, 2});
    float xr[4];
    lipt_error err = {0};
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, NULL, xr, NULL, NULL, &err), LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, &(lipt_fp_opts){1e-6, 0, 0, 0, 0}, NULL, &err),
                     LIPT_ERR_ARG);
    printf("max_iter 0: %s\n", err.msg);
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, &(lipt_fp_opts){-1, 10, 0, 0, 0}, NULL, &err),
                     LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, y, y->data, NULL, NULL, &err), LIPT_ERR_ARG);
    printf("aliasing: %s\n", err.msg);
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, bad_shape_g, NULL, y, xr, NULL, NULL, &err), LIPT_ERR_ARG);
    printf("shape: %s\n", err.msg);
    y->data[1] = NAN;
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, NULL, NULL, &err), LIPT_ERR_NUMERIC);
    y->data[1] = 0;
    ck_assert(ctx.no_grad == 0);
    /* defaults (opts NULL): g = x/2 of y = 0 converges at once to 0; iterations counted */
    lipt_fp_result res = {0, 0, NULL, 0};
    ck_assert_int_eq(lipt_fixed_point_invert(&ctx, lin_g, &b, y, xr, NULL, &res, &err), LIPT_OK);
    ck_assert(res.converged && res.iters == 1 && xr[0] == 0);
    lipt_ctx_free(&ctx);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("invert_fixed_point");
    struct { const char *name; const TTest *test; } cases[] = {
        {"linear", test_fp_linear},
        {"attention", test_fp_attention},
        {"noncontractive", test_fp_noncontractive},
        {"memory", test_fp_memory},
        {"args", test_fp_args},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return tu_run_suite(s);
}
