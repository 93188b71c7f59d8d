/* clip_rows, attention_dp_rel and exp: forwards against double references (clipped and unclipped rows, the bias at
 * every distance, causal zeros), gradients by finite differences, bit-identical threads for the bias gradient. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float R; } clip_args;
static lipt_tensor *build_clip(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return lipt_clip_rows(ctx, in[0], ((clip_args *)user)->R);
}

START_TEST(test_clip_forward) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    /* rows of norm ~3 (D 9, std 1): R 1 clips all, R 3 about half, R 100 none */
    lipt_tensor *X = tu_tensor(&rng, 3, (int[]){2, 7, 9}, 1.0f, 0);
    const float Rs[] = {1.0f, 3.0f, 100.0f};
    double worst = 0;
    int clipped = 0, kept = 0;
    for (int k = 0; k < 3; k++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *y = lipt_clip_rows(&ctx, X, Rs[k]);
        for (int r = 0; r < 14; r++) {
            const float *x = X->data + r * 9;
            double s = 0;
            for (int c = 0; c < 9; c++) s += (double)x[c] * x[c];
            const double nrm = sqrt(s), f = nrm > Rs[k] ? Rs[k] / nrm : 1.0;
            if (f < 1) clipped++;
            else kept++;
            for (int c = 0; c < 9; c++) {
                double e = fabs(y->data[r * 9 + c] - x[c] * f) / fmax(1e-30, fabs(x[c] * f));
                worst = fmax(worst, e);
            }
            double yn = 0;
            for (int c = 0; c < 9; c++) yn += (double)y->data[r * 9 + c] * y->data[r * 9 + c];
            ck_assert_msg(sqrt(yn) <= Rs[k] * (1 + 1e-6), "row %d norm %g above R %g", r, sqrt(yn), (double)Rs[k]);
        }
        lipt_ctx_free(&ctx);
    }
    ck_assert_msg(clipped > 10 && kept > 10, "cases must cover both sides: %d clipped, %d kept", clipped, kept);
    ck_assert_msg(worst < 1e-6, "clip forward rel err %.3e", worst);
    printf("clip_rows forward: %d clipped and %d kept rows, worst rel err %.3e (tol 1e-6)\n", clipped, kept, worst);
    tu_free(X);
}
END_TEST

START_TEST(test_clip_grad) {
    double worst = 0;
    const float Rs[] = {0.5f, 2.5f, 50.0f};
    for (int k = 0; k < 3; k++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 11 + k);
        lipt_tensor *X = tu_tensor(&rng, 2, (int[]){6, 5}, 1.0f, 1);
        clip_args a = {Rs[k]};
        tu_gradcheck_opts o = {8, 1e-3, 5e-3, 3 + k};
        worst = fmax(worst, tu_gradcheck("clip_rows", build_clip, &a, &X, 1, &o));
        tu_free(X);
    }
    ck_assert_msg(worst < 5e-3, "clip gradcheck %.3e", worst);
    printf("clip_rows gradcheck (R 0.5, 2.5, 50): worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* ---- attention_dp_rel ---- */

typedef struct { int H; } rel_args;
static lipt_tensor *build_rel(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return lipt_attention_dp_rel(ctx, in[0], in[1], in[2], in[3], ((rel_args *)user)->H);
}

/* Naive double reference of causal DP attention with the relative bias. */
static void ref_rel(const lipt_tensor *q, const lipt_tensor *k, const lipt_tensor *v, const lipt_tensor *rel, int H,
                    double *out) {
    const int B = q->shape[0], T = q->shape[1], D = q->shape[2], d = D / H, S = rel->shape[1];
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int c = 0; c < d; c++)
                        s += (double)q->data[((size_t)b * T + i) * D + h * d + c] * k->data[((size_t)b * T + j) * D + h * d + c];
                    p[j] = s / sqrt((double)d) + rel->data[(size_t)h * S + (i - j)];
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++) z += (p[j] = exp(p[j] - mx));
                for (int c = 0; c < d; c++) {
                    double s = 0;
                    for (int j = 0; j <= i; j++) s += p[j] / z * v->data[((size_t)b * T + j) * D + h * d + c];
                    out[((size_t)b * T + i) * D + h * d + c] = s;
                }
            }
    free(p);
}

START_TEST(test_rel_forward) {
    const int shapes[][4] = {{1, 1, 1, 1}, {1, 5, 4, 1}, {2, 7, 6, 2}, {3, 9, 8, 4}, {2, 130, 8, 2}};
    double worst = 0;
    for (int si = 0; si < 5; si++) {
        const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3], S = T + 3;
        lipt_rng rng;
        lipt_rng_seed(&rng, 40 + si);
        lipt_tensor *q = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 0), *k = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 0);
        lipt_tensor *v = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 0), *rel = tu_tensor(&rng, 2, (int[]){H, S}, 2.0f, 0);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        lipt_tensor *o = lipt_attention_dp_rel(&ctx, q, k, v, rel, H);
        double *ref = malloc(o->numel * sizeof(double));
        ref_rel(q, k, v, rel, H, ref);
        worst = fmax(worst, tu_max_rel_err(o->data, ref, o->numel, 1e-3));
        free(ref);
        lipt_ctx_free(&ctx);
        tu_free(q); tu_free(k); tu_free(v); tu_free(rel);
    }
    ck_assert_msg(worst < 1e-5, "attention_dp_rel forward rel err %.3e", worst);
    printf("attention_dp_rel forward (5 shapes up to T 130, row blocks): worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_rel_grad) {
    const int shapes[][4] = {{1, 4, 2, 1}, {2, 5, 6, 2}, {2, 6, 8, 4}};
    double worst = 0;
    for (int si = 0; si < 3; si++) {
        const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3], S = T + 2;
        lipt_rng rng;
        lipt_rng_seed(&rng, 70 + si);
        lipt_tensor *in[4] = {tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1),
                              tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), tu_tensor(&rng, 2, (int[]){H, S}, 1.0f, 1)};
        rel_args a = {H};
        tu_gradcheck_opts o = {8, 1e-3, 5e-3, 9 + si};
        worst = fmax(worst, tu_gradcheck("attention_dp_rel", build_rel, &a, in, 4, &o));
        for (int i = 0; i < 4; i++) tu_free(in[i]);
    }
    ck_assert_msg(worst < 5e-3, "attention_dp_rel gradcheck %.3e", worst);
    printf("attention_dp_rel gradcheck (q, k, v, rel): worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* The bias gradient is reduced in batch order: the same bits on 1 and 2 threads. */
START_TEST(test_rel_threads) {
    const int B = 8, T = 70, D = 32, H = 4, S = 80;
    float *g[2];
    for (int run = 0; run < 2; run++) {
        lipt_set_threads(run + 1);
        lipt_rng rng;
        lipt_rng_seed(&rng, 123);
        lipt_tensor *q = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), *k = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1);
        lipt_tensor *v = tu_tensor(&rng, 3, (int[]){B, T, D}, 1.0f, 1), *rel = tu_tensor(&rng, 2, (int[]){H, S}, 1.0f, 1);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 22, 1);
        lipt_tensor *o = lipt_attention_dp_rel(&ctx, q, k, v, rel, H);
        lipt_backward(&ctx, lipt_sum(&ctx, lipt_mul(&ctx, o, o)));
        g[run] = malloc((size_t)H * S * sizeof(float));
        memcpy(g[run], lipt_grad_of(&ctx, rel), (size_t)H * S * sizeof(float));
        lipt_ctx_free(&ctx);
        tu_free(q); tu_free(k); tu_free(v); tu_free(rel);
    }
    lipt_set_threads(2);
    ck_assert_msg(memcmp(g[0], g[1], (size_t)H * S * sizeof(float)) == 0, "rel gradient differs between 1 and 2 threads");
    /* distances beyond T - 1 are never used: exactly zero gradient */
    for (int h = 0; h < H; h++)
        for (int t = T; t < S; t++) ck_assert(g[0][h * S + t] == 0.0f);
    printf("attention_dp_rel: bias gradient bit-identical on 1 and 2 threads; unused distances get exactly 0\n");
    free(g[0]);
    free(g[1]);
}
END_TEST

static lipt_tensor *build_exp(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_exp(ctx, in[0]);
}

START_TEST(test_exp) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 3);
    lipt_tensor *x = tu_tensor(&rng, 1, (int[]){17}, 2.0f, 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *y = lipt_exp(&ctx, x);
    for (int i = 0; i < 17; i++) ck_assert(fabs(y->data[i] - exp(x->data[i])) <= 1e-6 * exp(x->data[i]));
    lipt_ctx_free(&ctx);
    tu_gradcheck_opts o = {6, 1e-3, 2e-3, 1};
    double e = tu_gradcheck("exp", build_exp, NULL, &x, 1, &o);
    ck_assert_msg(e < 2e-3, "exp gradcheck %.3e", e);
    printf("exp: forward within 1e-6 of double, gradcheck %.3e\n", e);
    tu_free(x);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_clip_rel");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_clip_forward);
    tcase_add_test(tc, test_clip_grad);
    tcase_add_test(tc, test_rel_forward);
    tcase_add_test(tc, test_rel_grad);
    tcase_add_test(tc, test_rel_threads);
    tcase_add_test(tc, test_exp);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
