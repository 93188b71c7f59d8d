/* The step profile (lipt_profile, lipt bench --profile): timing changes no bit of a training run (losses, weights
 * after AdamW steps); the phases add up to no more than the steps' wall time and cover most of it; the ops' forward
 * times fit inside the forward phase and their backward times inside the backward phase; every op the model runs is
 * counted once per call (the loss once a step) and its backward timed; with --recompute the ops a backward reruns are
 * not counted as forward calls. For the DP model and the invertible model (certificates in the forward).
 * The products' time (lipt_profile.products, lipt_profile_split_of: lipt bench --profile's products and outside): more
 * than nothing and less than the step on the DP, tied L2 and invertible models, the attention kernels' part of it
 * above nothing and within it, products + outside = the step, the fraction outside in (0, 1); and at the kernels
 * (src/kernels/kctx.h), a product nested in a timed one is not timed again (the sum stays within the wall time of
 * the outer calls), a product inside a parallel region is not timed, and no kernel context is left changed. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"


enum { STEPS = 3 };

typedef struct {
    double loss[STEPS];
    float *slab; /* parameters after the steps */
    size_t n;
    double wall; /* seconds spent in lipt_train_step */
} run_out;

static void run_steps(const lipt_config *cfg, lipt_profile *prof, int recompute, run_out *o) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 7);
    ctx.profile = prof;
    ctx.recompute = recompute;
    tu_train_steps(cfg, &ctx, STEPS, o->loss, &o->slab, NULL, &o->n, &o->wall);
    lipt_ctx_free(&ctx);
}

static void small(lipt_config *cfg, const char *path) {
    lipt_error err = {0};
    lipt_config_default(cfg);
    ck_assert_msg(lipt_config_load(cfg, path, &err) == LIPT_OK, "%s: %s", path, err.msg);
    const char *shrink[] = {"d_model", "32", "n_heads", "2", "d_ff", "64", "n_layers", "2", "seq_len", "24", NULL};
    for (int i = 0; shrink[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, shrink[i], shrink[i + 1], &err) == LIPT_OK, "%s: %s", shrink[i], err.msg);
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "%s: %s", path, err.msg);
}

START_TEST(test_profile_step) {
    static const char *const cfgs[] = {"models/ptb-dp.cfg", "models/ptb-contractive.cfg"};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++)
        for (int recompute = 0; recompute < 2; recompute++) {
            lipt_config cfg;
            small(&cfg, cfgs[ci]);
            run_out plain, timed;
            lipt_profile prof;
            memset(&prof, 0, sizeof prof);
            run_steps(&cfg, NULL, recompute, &plain);
            run_steps(&cfg, &prof, recompute, &timed);
            ck_assert_uint_eq(plain.n, timed.n);
            ck_assert_msg(memcmp(plain.loss, timed.loss, sizeof plain.loss) == 0 &&
                              memcmp(plain.slab, timed.slab, sizeof(float) * plain.n) == 0,
                          "%s recompute %d: the profile changed the run", cfgs[ci], recompute);
            ck_assert_int_eq(prof.steps, STEPS);
            ck_assert_int_eq(prof.in_backward, 0);
            double phases = 0, fwd = 0, bwd = 0;
            for (int k = 0; k < LIPT_PHASE_COUNT; k++) {
                ck_assert(prof.phase[k] >= 0);
                phases += prof.phase[k];
            }
            for (int op = 0; op < LIPT_OP_COUNT; op++) {
                ck_assert(prof.fwd[op] >= 0 && prof.bwd[op] >= 0 && prof.calls[op] >= 0);
                fwd += prof.fwd[op], bwd += prof.bwd[op];
            }
            ck_assert_msg(phases <= timed.wall + 1e-6 && phases >= 0.5 * timed.wall,
                          "%s: phases %.6f s of %.6f s in the steps", cfgs[ci], phases, timed.wall);
            ck_assert_msg(fwd <= prof.phase[LIPT_PHASE_FORWARD] + 1e-6 && fwd > 0, "%s: ops' forward %.6f s, phase "
                          "%.6f s", cfgs[ci], fwd, prof.phase[LIPT_PHASE_FORWARD]);
            ck_assert_msg(bwd <= prof.phase[LIPT_PHASE_BACKWARD] + 1e-6 && bwd > 0, "%s: ops' backward %.6f s, phase "
                          "%.6f s", cfgs[ci], bwd, prof.phase[LIPT_PHASE_BACKWARD]);
            /* the loss once a step; the embedding twice with dropout off (tokens, positions) or once */
            ck_assert_int_eq(prof.calls[LIPT_OP_CROSS_ENTROPY], STEPS);
            ck_assert(prof.bwd[LIPT_OP_CROSS_ENTROPY] > 0);
            ck_assert(prof.calls[LIPT_OP_EMBEDDING] >= STEPS && prof.calls[LIPT_OP_EMBEDDING] % STEPS == 0);
            /* the feed-forward's input projection, fused (linear + GELU or MaxMin) */
            const int ffn = cfg.ffn == LIPT_FFN_STANDARD ? LIPT_OP_LINEAR_GELU : LIPT_OP_LINEAR_MAXMIN;
            if (!recompute)
                ck_assert_msg(prof.calls[ffn] == (long)STEPS * cfg.n_layers && prof.bwd[ffn] > 0,
                              "%s: %s %ld calls", cfgs[ci], lipt_ops[ffn].name, prof.calls[ffn]);
            else /* recorded once inside the recompute segments (their rerun in the backward is not a forward) */
                ck_assert_msg(prof.calls[ffn] == (long)STEPS * cfg.n_layers && prof.calls[LIPT_OP_RECOMPUTE] > 0,
                              "%s recompute: %s %ld calls, recompute %ld", cfgs[ci], lipt_ops[ffn].name,
                              prof.calls[ffn], prof.calls[LIPT_OP_RECOMPUTE]);
            free(plain.slab);
            free(timed.slab);
        }
    printf("lipt_profile: the same bits with and without it; phases within the steps' wall time, ops within their "
           "phases (dp and invertible, with and without recompute)\n");
}
END_TEST

START_TEST(test_profile_products) {
    static const char *const cfgs[] = {"models/ptb-dp.cfg", "models/ptb-l2-tied.cfg", "models/ptb-contractive.cfg"};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        lipt_config cfg;
        small(&cfg, cfgs[ci]);
        run_out timed;
        lipt_profile prof;
        memset(&prof, 0, sizeof prof);
        run_steps(&cfg, &prof, 0, &timed);
        free(timed.slab);
        const lipt_profile_split sp = lipt_profile_split_of(&prof);
        double phases = 0;
        for (int k = 0; k < LIPT_PHASE_COUNT; k++) phases += prof.phase[k];
        ck_assert_double_eq_tol(sp.step_ms, 1e3 * phases / STEPS, 1e-9 * sp.step_ms);
        ck_assert_msg(sp.products_ms > 0 && sp.products_ms < sp.step_ms, "%s: products %.4f ms of a %.4f ms step",
                      cfgs[ci], sp.products_ms, sp.step_ms);
        ck_assert_msg(sp.attention_ms > 0 && sp.attention_ms <= sp.products_ms, "%s: attention kernels %.4f ms, "
                      "products %.4f ms", cfgs[ci], sp.attention_ms, sp.products_ms);
        ck_assert_msg(fabs(sp.products_ms + sp.outside_ms - sp.step_ms) <= 1e-9 * sp.step_ms,
                      "%s: products %.6f + outside %.6f != step %.6f", cfgs[ci], sp.products_ms, sp.outside_ms,
                      sp.step_ms);
        ck_assert_msg(sp.outside_fraction > 0 && sp.outside_fraction < 1 &&
                          fabs(sp.outside_fraction - sp.outside_ms / sp.step_ms) < 1e-12,
                      "%s: outside fraction %g", cfgs[ci], sp.outside_fraction);
        printf("%s (small): step %.3f ms, products %.3f ms (attention kernels %.3f), outside %.1f%%\n", cfgs[ci],
               sp.step_ms, sp.products_ms, sp.attention_ms, 100 * sp.outside_fraction);
    }
    lipt_profile none;
    memset(&none, 0, sizeof none);
    ck_assert(isnan(lipt_profile_split_of(&none).outside_fraction) && isnan(lipt_profile_split_of(NULL).outside_fraction));
}
END_TEST

/* The kernels' products clock: n products of [M,K] x [K,N] through lipt_gemm_small_p on k, whose shape (N not a
 * multiple of the vector width) it passes to lipt_gemm_p: the nested call must not add its time again. Returns the
 * wall time of the n calls. */
static double small_p_calls(lipt_kctx *k, int n, int M, int N, int K, const float *A, const float *B, float *C) {
    const double t0 = lipt_kprof_now();
    for (int i = 0; i < n; i++) lipt_gemm_small_p(k, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    return lipt_kprof_now() - t0;
}

START_TEST(test_profile_kernels) {
    enum { M = 160, N = 99, K = 96, CALLS = 40 }; /* N odd: not a multiple of any vector width */
    ck_assert(!lipt_gemm_small_ok(0, 0, M, N, K));
    lipt_rng r;
    lipt_rng_seed(&r, 3);
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * 2 * M * N);
    lipt_rng_fill_normal(&r, A, (size_t)M * K, 1.0f);
    lipt_rng_fill_normal(&r, B, (size_t)K * N, 1.0f);
    lipt_arena arena;
    lipt_arena_init(&arena, 1 << 16);
    double ps = 0, as = 0;
    lipt_kctx k = {.precision = LIPT_PRECISION_FLOAT32, .arena = &arena, .products_s = &ps, .attention_s = &as};
    small_p_calls(&k, 2, M, N, K, A, B, C); /* warm-up */
    ps = 0;
    const double wall = small_p_calls(&k, CALLS, M, N, K, A, B, C);
    /* counted once: at most the calls' wall time (twice it if the nested lipt_gemm_p added its time again), and
     * most of it (the loop adds nothing but calls) */
    ck_assert_msg(ps > 0.5 * wall && ps <= wall, "products %.6f s in %.6f s of calls", ps, wall);
    ck_assert(k.products_s == &ps && as == 0);
    ps = 0;
    lipt_kctx kn = k; /* without a profile: nothing timed, nothing written */
    kn.products_s = kn.attention_s = NULL;
    small_p_calls(&kn, 2, M, N, K, A, B, C);
    ck_assert(ps == 0 && kn.products_s == NULL);
    /* inside an active parallel region: not timed (two threads would add to one sum) */
    int team = 0;
#pragma omp parallel num_threads(2) reduction(max : team)
    {
        team = omp_get_num_threads();
        lipt_gemm_p(&k, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C + (size_t)omp_get_thread_num() % 2 * M * N, N);
    }
    if (team > 1) ck_assert_msg(ps == 0, "products %.6f s timed inside a parallel region", ps);
    ck_assert(k.products_s == &ps);
    lipt_arena_free(&arena);
    free(A);
    free(B);
    free(C);
    printf("kernel products clock: counted once (%d calls nested in lipt_gemm_small_p), none inside a parallel "
           "region (team of %d)\n", CALLS, team);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_add_test(tc, test_profile_step);
    tcase_add_test(tc, test_profile_products);
    tcase_add_test(tc, test_profile_kernels);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
