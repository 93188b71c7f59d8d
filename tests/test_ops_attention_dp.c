/* attention_dp: forward against a naive triple loop of SPEC §1 (causal and full), backward against finite
 * differences over shapes with odd D and H, T = 1 and B > 1, exact causality, large inputs, threads. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int H, causal; } dp_args;

static lipt_tensor *build_dp(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    dp_args *a = user;
    return lipt_attention_dp(ctx, in[0], in[1], in[2], a->H, a->causal);
}
static lipt_tensor *build_dp_self(lipt_ctx *ctx, lipt_tensor **in, void *user) { /* q = k = v: gradients alias */
    dp_args *a = user;
    return lipt_attention_dp(ctx, in[0], in[0], in[0], a->H, a->causal);
}

/* Straight from SPEC §1: per (b,h), P = softmax(q_h k_hᵀ / s) over j <= i (causal), out_h = P v_h. */
static void ref_dp(const float *q, const float *k, const float *v, int B, int T, int D, int H, int causal,
                   double *out) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *lg = malloc((size_t)(T ? T : 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const int n = causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double dot = 0;
                    for (int c = 0; c < d; c++)
                        dot += (double)q[((size_t)b * T + i) * D + h * d + c] * k[((size_t)b * T + j) * D + h * d + c];
                    lg[j] = dot / s;
                    if (lg[j] > mx) mx = lg[j];
                }
                for (int j = 0; j < n; j++) sum += (lg[j] = exp(lg[j] - mx));
                for (int c = 0; c < d; c++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += lg[j] / sum * v[((size_t)b * T + j) * D + h * d + c];
                    out[((size_t)b * T + i) * D + h * d + c] = o;
                }
            }
    free(lg);
}

/* {B, T, D, H}: size-1 dims, odd D and H, B > 1, a parallel-size case and a long causal one (row blocks). */
static const int fwd_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 5, 6, 3}, {1, 7, 5, 1}, {3, 4, 8, 2},
                                    {2, 33, 32, 4}, {1, 130, 8, 2}, {2, 200, 6, 3}};
static const int grad_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 3, 6, 3}, {1, 5, 5, 1},
                                     {2, 4, 8, 2}, {1, 9, 6, 2}, {1, 130, 4, 2}};

START_TEST(test_dp_forward) {
    double worst = 0;
    for (size_t si = 0; si < sizeof fwd_shapes / sizeof fwd_shapes[0]; si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const int B = fwd_shapes[si][0], T = fwd_shapes[si][1], D = fwd_shapes[si][2], H = fwd_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 31 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *q = tu_tensor(&rng, 3, sh, 1.0f, 1), *k = tu_tensor(&rng, 3, sh, 1.0f, 1),
                            *v = tu_tensor(&rng, 3, sh, 1.0f, 1);
                const size_t n = q->numel;
                double *ref = malloc(n * sizeof(double));
                ref_dp(q->data, k->data, v->data, B, T, D, H, causal, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = lipt_attention_dp(&ctx, q, k, v, H, causal);
                ck_assert_int_eq(o->ndim, 3);
                ck_assert_int_eq(o->shape[0], B);
                ck_assert_int_eq(o->shape[1], T);
                ck_assert_int_eq(o->shape[2], D);
                ck_assert(o->requires_grad);
                const double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "dp forward B%d T%d D%d H%d causal%d: rel err %.3e", B, T, D, H, causal, e);
                if (e > worst) worst = e;
                /* no-grad mode uses per-thread scratch instead of saved P: same numbers */
                lipt_no_grad_push(&ctx);
                lipt_tensor *o2 = lipt_attention_dp(&ctx, q, k, v, H, causal);
                lipt_no_grad_pop(&ctx);
                ck_assert(!o2->requires_grad);
                ck_assert_msg(memcmp(o->data, o2->data, n * sizeof(float)) == 0, "no-grad forward differs");
                lipt_ctx_free(&ctx);
                free(ref);
                tu_free(q);
                tu_free(k);
                tu_free(v);
            }
    printf("attention_dp forward: worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_dp_gradcheck) {
    double worst = 0, worst_alias = 0;
    for (size_t si = 0; si < sizeof grad_shapes / sizeof grad_shapes[0]; si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const int B = grad_shapes[si][0], T = grad_shapes[si][1], D = grad_shapes[si][2],
                          H = grad_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 97 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *in[3];
                for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
                dp_args a = {H, causal};
                char label[96];
                snprintf(label, sizeof label, "attention_dp B%d T%d D%d H%d causal%d s%d", B, T, D, H, causal,
                         (int)seed);
                double g = tu_gradcheck(label, build_dp, &a, in, 3, &(tu_gradcheck_opts){.seed = seed, .tol = 5e-3});
                if (g > worst) worst = g;
                snprintf(label, sizeof label, "attention_dp q=k=v B%d T%d D%d H%d causal%d s%d", B, T, D, H, causal,
                         (int)seed);
                g = tu_gradcheck(label, build_dp_self, &a, in, 1, &(tu_gradcheck_opts){.seed = seed + 10, .tol = 5e-3});
                if (g > worst_alias) worst_alias = g;
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    printf("attention_dp gradcheck: worst rel err %.3e, with q = k = v %.3e (tol 5e-3)\n", worst, worst_alias);
}
END_TEST

/* Only some inputs need a gradient: the others are skipped (lipt_grad_of gives NULL) and the rest stay right. */
START_TEST(test_dp_grad_subsets) {
    double worst = 0;
    for (int mask = 1; mask < 7; mask++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 500 + mask);
            const int sh[3] = {2, 6, 6};
            lipt_tensor *in[3];
            for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, (mask >> i) & 1);
            dp_args a = {3, causal};
            char label[96];
            snprintf(label, sizeof label, "attention_dp grads q%d k%d v%d causal%d", mask & 1, (mask >> 1) & 1,
                     (mask >> 2) & 1, causal);
            const double g = tu_gradcheck(label, build_dp, &a, in, 3, &(tu_gradcheck_opts){.seed = 9, .tol = 5e-3});
            if (g > worst) worst = g;
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_dp subset gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Backward accumulates: with gradients already holding values, it adds the same amount as from zero. */
START_TEST(test_dp_accumulates) {
    double worst = 0;
    for (int causal = 0; causal < 2; causal++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 99 + causal);
        const int sh[3] = {2, 130, 6};
        lipt_tensor *in[3];
        for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
        const size_t n = in[0]->numel;
        float *seed = malloc(n * sizeof(float)), *fresh[3], *pre[3];
        lipt_rng_fill_normal(&rng, seed, n, 1.0f);
        for (int pass = 0; pass < 2; pass++) {
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            for (int i = 0; i < 3; i++) {
                float *g = malloc(n * sizeof(float));
                for (size_t x = 0; x < n; x++) g[x] = pass ? 1.5f : 0.0f;
                (pass ? pre : fresh)[i] = g;
                in[i]->grad = g; /* lipt_grad_of accumulates into an existing buffer */
            }
            lipt_tensor *o = lipt_attention_dp(&ctx, in[0], in[1], in[2], 3, causal);
            lipt_backward_seeded(&ctx, o, seed);
            for (int i = 0; i < 3; i++) in[i]->grad = NULL;
            lipt_ctx_free(&ctx);
        }
        for (int i = 0; i < 3; i++) {
            for (size_t x = 0; x < n; x++) pre[i][x] -= 1.5f;
            const double e = tu_max_rel_err_f(pre[i], fresh[i], n, 1e-3);
            ck_assert_msg(e < 1e-5, "input %d: backward does not accumulate (rel err %.3e)", i, e);
            if (e > worst) worst = e;
            free(pre[i]);
            free(fresh[i]);
        }
        free(seed);
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("attention_dp accumulation into existing gradients: worst rel err %.3e\n", worst);
}
END_TEST

/* Causal: changing rows t > t0 of q, k, v leaves output rows <= t0 bit-identical, and a loss on rows <= t0
 * gives exactly zero gradient at rows > t0. */
START_TEST(test_dp_causal_future) {
    const int shapes[][5] = {{2, 7, 6, 3, 3}, {1, 130, 8, 2, 70}, {1, 5, 5, 1, 0}, {2, 9, 4, 4, 8}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3], t0 = shapes[si][4];
        lipt_rng rng;
        lipt_rng_seed(&rng, 77 + si);
        const int sh[3] = {B, T, D};
        lipt_tensor *in[3];
        for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
        const size_t n = in[0]->numel;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        float *o1 = malloc(n * sizeof(float));
        memcpy(o1, lipt_attention_dp(&ctx, in[0], in[1], in[2], H, 1)->data, n * sizeof(float));
        for (int i = 0; i < 3; i++)
            for (int b = 0; b < B; b++)
                for (int t = t0 + 1; t < T; t++)
                    for (int c = 0; c < D; c++) in[i]->data[((size_t)b * T + t) * D + c] += 3.0f * lipt_rng_normal(&rng);
        lipt_ctx_reset(&ctx);
        lipt_tensor *o = lipt_attention_dp(&ctx, in[0], in[1], in[2], H, 1);
        int changed_future = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < D; c++) {
                    const size_t x = ((size_t)b * T + t) * D + c;
                    if (t <= t0)
                        ck_assert_msg(memcmp(&o->data[x], &o1[x], sizeof(float)) == 0,
                                      "row %d <= %d changed by a future input", t, t0);
                    else if (o->data[x] != o1[x])
                        changed_future = 1;
                }
        ck_assert_msg(changed_future || t0 == T - 1, "future rows did not change at all");
        /* gradient of a loss on rows <= t0 */
        float *seed = calloc(n, sizeof(float));
        for (int b = 0; b < B; b++)
            for (int t = 0; t <= t0; t++)
                for (int c = 0; c < D; c++) seed[((size_t)b * T + t) * D + c] = lipt_rng_normal(&rng);
        lipt_backward_seeded(&ctx, o, seed);
        for (int i = 0; i < 3; i++) {
            double past = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < D; c++) {
                        const float g = in[i]->grad[((size_t)b * T + t) * D + c];
                        if (t > t0) ck_assert_msg(g == 0.0f, "input %d row %d > %d has gradient %g", i, t, t0, g);
                        else past += fabs(g);
                    }
            /* with t0 = 0 row 0 sees only itself (P = 1): q and k get no gradient there */
            ck_assert_msg((t0 == 0 && i < 2) || past > 0, "input %d: no gradient at past rows", i);
            in[i]->grad = NULL;
        }
        free(seed);
        free(o1);
        lipt_ctx_free(&ctx);
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    printf("attention_dp causal: future inputs change no earlier output bit and get exactly zero gradient\n");
}
END_TEST

/* DP logits grow without bound (SPEC §1, Theorem 3.1) but the softmax must stay finite: each output is a
 * convex combination of value rows. */
START_TEST(test_dp_large_inputs) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 4242);
    const int sh[3] = {2, 17, 8};
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 200.0f, 0), *k = tu_tensor(&rng, 3, sh, 200.0f, 0),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 0);
    float vmax = 0;
    for (size_t i = 0; i < v->numel; i++) vmax = fmaxf(vmax, fabsf(v->data[i]));
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    for (int causal = 0; causal < 2; causal++) {
        lipt_tensor *o = lipt_attention_dp(&ctx, q, k, v, 2, causal);
        double *ref = malloc(o->numel * sizeof(double));
        ref_dp(q->data, k->data, v->data, 2, 17, 8, 2, causal, ref);
        for (size_t i = 0; i < o->numel; i++) {
            ck_assert_msg(isfinite(o->data[i]) && fabsf(o->data[i]) <= vmax * (1 + 1e-6f), "non-convex output %g",
                          o->data[i]);
        }
        /* near-one-hot rows: the argmax can flip on float rounding of huge logits, so only a loose check */
        const double e = tu_max_rel_err(o->data, ref, o->numel, 1e-6);
        printf("attention_dp large logits causal%d: rel err vs double %.3e\n", causal, e);
        free(ref);
    }
    lipt_ctx_free(&ctx);
    tu_free(q);
    tu_free(k);
    tu_free(v);
}
END_TEST

/* One thread and two threads (the parallel (batch, head) loop) agree, forward and backward. */
START_TEST(test_dp_threads) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 31337);
    const int sh[3] = {3, 40, 24};
    lipt_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
    const size_t n = in[0]->numel;
    float *res[2][4];
    for (int pass = 0; pass < 2; pass++) {
        lipt_set_threads(pass ? 2 : 1);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *o = lipt_attention_dp(&ctx, in[0], in[1], in[2], 4, 1);
        float *seed = malloc(n * sizeof(float));
        lipt_rng r2;
        lipt_rng_seed(&r2, 5);
        lipt_rng_fill_normal(&r2, seed, n, 1.0f);
        lipt_backward_seeded(&ctx, o, seed);
        res[pass][0] = malloc(n * sizeof(float));
        memcpy(res[pass][0], o->data, n * sizeof(float));
        for (int i = 0; i < 3; i++) {
            res[pass][i + 1] = malloc(n * sizeof(float));
            memcpy(res[pass][i + 1], in[i]->grad, n * sizeof(float));
            in[i]->grad = NULL;
        }
        free(seed);
        lipt_ctx_free(&ctx);
    }
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        const double e = tu_max_rel_err_f(res[1][i], res[0][i], n, 1e-6);
        ck_assert_msg(e < 1e-6, "threads 1 vs 2 differ in %s: %.3e", i ? "a gradient" : "the output", e);
        if (e > worst) worst = e;
        free(res[0][i]);
        free(res[1][i]);
    }
    printf("attention_dp threads 1 vs 2: worst rel diff %.3e\n", worst);
    lipt_set_threads(2);
    for (int i = 0; i < 3; i++) tu_free(in[i]);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_dp");
    TCase *tc = tcase_create("attention_dp");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dp_forward);
    tcase_add_test(tc, test_dp_gradcheck);
    tcase_add_test(tc, test_dp_grad_subsets);
    tcase_add_test(tc, test_dp_accumulates);
    tcase_add_test(tc, test_dp_causal_future);
    tcase_add_test(tc, test_dp_large_inputs);
    tcase_add_test(tc, test_dp_threads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
