/* matmul: forward against a naive double loop, backward against finite differences,
 * for 2-D (all four transpose combinations), batched and linear (N-D times matrix) forms; the fused linear layer
 * x w + b against the reference and against matmul + add. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int ta, tb; } mm_args;

static lipt_tensor *build_mm(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    mm_args *a = user;
    return lipt_matmul(ctx, in[0], in[1], a->ta, a->tb);
}

/* Reference: C[b,i,j] = sum_k opA[b,i,k] opB[b,k,j], in double. */
static void ref_mm(const lipt_tensor *A, const lipt_tensor *B, int batch, int M, int N, int K, int ta, int tb,
                   int b_batched, double *C) {
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) {
                    float a = ta ? A->data[(size_t)b * M * K + (size_t)k * M + i] : A->data[(size_t)b * M * K + (size_t)i * K + k];
                    const float *Bb = B->data + (b_batched ? (size_t)b * K * N : 0);
                    float bv = tb ? Bb[(size_t)j * K + k] : Bb[(size_t)k * N + j];
                    s += (double)a * bv;
                }
                C[((size_t)b * M + i) * N + j] = s;
            }
}

static const int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {8, 1, 4}, {17, 13, 9}, {2, 33, 5}};

START_TEST(test_matmul_2d) {
    double worst_fwd = 0, worst_bwd = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (uint64_t seed = 1; seed <= 2; seed++) {
                    int M = sizes[si][0], N = sizes[si][1], K = sizes[si][2];
                    lipt_rng rng;
                    lipt_rng_seed(&rng, seed * 100 + si);
                    lipt_tensor *A = tu_tensor(&rng, 2, ta ? (int[]){K, M} : (int[]){M, K}, 1.0f, 1);
                    lipt_tensor *B = tu_tensor(&rng, 2, tb ? (int[]){N, K} : (int[]){K, N}, 1.0f, 1);
                    lipt_ctx ctx;
                    lipt_ctx_init(&ctx, 1 << 16, 1);
                    lipt_tensor *C = lipt_matmul(&ctx, A, B, ta, tb);
                    ck_assert_int_eq(C->shape[0], M);
                    ck_assert_int_eq(C->shape[1], N);
                    double *ref = malloc((size_t)M * N * sizeof(double));
                    ref_mm(A, B, 1, M, N, K, ta, tb, 0, ref);
                    double e = tu_max_rel_err(C->data, ref, (size_t)M * N, 1e-6);
                    ck_assert_msg(e < 1e-5, "forward rel err %.3e", e);
                    if (e > worst_fwd) worst_fwd = e;
                    free(ref);
                    lipt_ctx_free(&ctx);
                    char label[64];
                    snprintf(label, sizeof label, "matmul2d M%d N%d K%d ta%d tb%d s%d", M, N, K, ta, tb, (int)seed);
                    mm_args args = {ta, tb};
                    double g = tu_gradcheck(label, build_mm, &args, (lipt_tensor *[]){A, B}, 2,
                                            &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2});
                    if (g > worst_bwd) worst_bwd = g;
                    tu_free(A);
                    tu_free(B);
                }
    printf("matmul 2-D: worst forward rel err %.3e (tol 1e-5), worst gradient rel err %.3e (tol 1e-2)\n", worst_fwd,
           worst_bwd);
}
END_TEST

START_TEST(test_matmul_batched) {
    const int shapes[][4] = {{1, 1, 1, 1}, {3, 4, 5, 6}, {2, 7, 1, 3}, {5, 2, 9, 4}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int Bt = shapes[si][0], M = shapes[si][1], N = shapes[si][2], K = shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, 7 + si);
                lipt_tensor *A = tu_tensor(&rng, 3, ta ? (int[]){Bt, K, M} : (int[]){Bt, M, K}, 1.0f, 1);
                lipt_tensor *B = tu_tensor(&rng, 3, tb ? (int[]){Bt, N, K} : (int[]){Bt, K, N}, 1.0f, 1);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *C = lipt_matmul(&ctx, A, B, ta, tb);
                double *ref = malloc((size_t)Bt * M * N * sizeof(double));
                ref_mm(A, B, Bt, M, N, K, ta, tb, 1, ref);
                double e = tu_max_rel_err(C->data, ref, (size_t)Bt * M * N, 1e-6);
                ck_assert_msg(e < 1e-5, "batched forward rel err %.3e", e);
                free(ref);
                lipt_ctx_free(&ctx);
                char label[64];
                snprintf(label, sizeof label, "matmul batched %dx%dx%dx%d ta%d tb%d", Bt, M, N, K, ta, tb);
                mm_args args = {ta, tb};
                tu_gradcheck(label, build_mm, &args, (lipt_tensor *[]){A, B}, 2, &(tu_gradcheck_opts){.seed = 3 + si});
                tu_free(A);
                tu_free(B);
            }
}
END_TEST

START_TEST(test_matmul_linear) {
    /* x [B,T,K] times W [K,N] and times Wᵀ with W [N,K] */
    const int shapes[][4] = {{2, 3, 5, 4}, {1, 1, 3, 2}, {3, 7, 8, 11}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int tb = 0; tb < 2; tb++) {
            int Bt = shapes[si][0], T = shapes[si][1], K = shapes[si][2], N = shapes[si][3];
            lipt_rng rng;
            lipt_rng_seed(&rng, 11 + si);
            lipt_tensor *X = tu_tensor(&rng, 3, (int[]){Bt, T, K}, 1.0f, 1);
            lipt_tensor *W = tu_tensor(&rng, 2, tb ? (int[]){N, K} : (int[]){K, N}, 1.0f, 1);
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *Y = lipt_matmul(&ctx, X, W, 0, tb);
            ck_assert_int_eq(Y->ndim, 3);
            ck_assert_int_eq(Y->shape[2], N);
            double *ref = malloc((size_t)Bt * T * N * sizeof(double));
            ref_mm(X, W, 1, Bt * T, N, K, 0, tb, 0, ref);
            double e = tu_max_rel_err(Y->data, ref, (size_t)Bt * T * N, 1e-6);
            ck_assert_msg(e < 1e-5, "linear forward rel err %.3e", e);
            free(ref);
            lipt_ctx_free(&ctx);
            char label[64];
            snprintf(label, sizeof label, "matmul linear %dx%dx%d->%d tb%d", Bt, T, K, N, tb);
            mm_args args = {0, tb};
            tu_gradcheck(label, build_mm, &args, (lipt_tensor *[]){X, W}, 2, &(tu_gradcheck_opts){.seed = 5 + si});
            tu_free(X);
            tu_free(W);
        }
}
END_TEST

static lipt_tensor *build_linear(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_linear(ctx, in[0], in[1], in[2]);
}

static lipt_tensor *build_matmul_add(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_add(ctx, lipt_matmul(ctx, in[0], in[1], 0, 0), in[2]);
}

/* The fused x w + b: forward against the double reference, the same bits as matmul followed by add, gradients of
 * x, w and b by finite differences and equal to those of matmul + add, accumulating into existing gradients. */
START_TEST(test_linear_fused) {
    const int shapes[][4] = {{2, 3, 5, 4}, {1, 1, 3, 1}, {1, 1, 1, 6}, {3, 7, 8, 11}, {4, 40, 33, 70}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int Bt = shapes[si][0], T = shapes[si][1], K = shapes[si][2], N = shapes[si][3];
        lipt_rng rng;
        lipt_rng_seed(&rng, 21 + si);
        lipt_tensor *X = tu_tensor(&rng, 3, (int[]){Bt, T, K}, 1.0f, 1);
        lipt_tensor *W = tu_tensor(&rng, 2, (int[]){K, N}, 1.0f, 1);
        lipt_tensor *Bv = tu_tensor(&rng, 1, (int[]){N}, 1.0f, 1);
        lipt_tensor *in[3] = {X, W, Bv};
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = lipt_linear(&ctx, X, W, Bv), *Y2 = lipt_matmul(&ctx, X, W, 0, 0);
        Y2 = lipt_add(&ctx, Y2, Bv);
        ck_assert(Y->ndim == 3 && Y->shape[0] == Bt && Y->shape[1] == T && Y->shape[2] == N);
        const size_t n = (size_t)Bt * T * N;
        double *ref = malloc(n * sizeof(double));
        ref_mm(X, W, 1, Bt * T, N, K, 0, 0, 0, ref);
        for (size_t i = 0; i < n; i++) ref[i] += Bv->data[i % (size_t)N];
        const double e = tu_max_rel_err(Y->data, ref, n, 1e-6);
        ck_assert_msg(e < 1e-5, "linear forward rel err %.3e", e);
        ck_assert_msg(memcmp(Y->data, Y2->data, n * sizeof(float)) == 0, "linear differs from matmul + add");
        free(ref);
        lipt_ctx_free(&ctx);

        /* gradients: fused against unfused, both on top of gradients pre-filled with 0.25 */
        float *r = malloc(n * sizeof(float));
        lipt_rng_fill_normal(&rng, r, n, 1.0f);
        float *g[2][3];
        for (int fused = 0; fused < 2; fused++) {
            float *pre[3];
            for (int k = 0; k < 3; k++) {
                pre[k] = malloc(in[k]->numel * sizeof(float));
                for (size_t j = 0; j < in[k]->numel; j++) pre[k][j] = 0.25f;
                in[k]->grad = pre[k];
            }
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *out = fused ? build_linear(&ctx, in, NULL) : build_matmul_add(&ctx, in, NULL);
            lipt_backward_seeded(&ctx, out, r);
            for (int k = 0; k < 3; k++) g[fused][k] = pre[k], in[k]->grad = NULL;
            lipt_ctx_free(&ctx);
        }
        for (int k = 0; k < 3; k++) {
            const double ek = tu_max_rel_err_f(g[1][k], g[0][k], in[k]->numel, 1e-6);
            ck_assert_msg(ek < 1e-5, "linear gradient of input %d differs from matmul + add by %.3e", k, ek);
            free(g[0][k]);
            free(g[1][k]);
        }
        free(r);
        char label[64];
        snprintf(label, sizeof label, "linear %dx%dx%d->%d", Bt, T, K, N);
        if (n <= 4096) tu_gradcheck(label, build_linear, NULL, in, 3, &(tu_gradcheck_opts){.seed = 9 + si});
        tu_free(X);
        tu_free(W);
        tu_free(Bv);
    }
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_matmul");
    TCase *tc = tcase_create("matmul");
    tcase_add_test(tc, test_matmul_2d);
    tcase_add_test(tc, test_matmul_batched);
    tcase_add_test(tc, test_matmul_linear);
    tcase_add_test(tc, test_linear_fused);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
