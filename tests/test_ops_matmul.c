/* matmul: forward against a naive double loop, backward against finite differences,
 * for 2-D (all four transpose combinations), batched and linear (N-D times matrix) forms; the fused linear layer
 * x w + b against the reference and against matmul + add; the fused GELU(x w + b) against the reference and
 * against gelu(linear). */
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

/* The layers compared below, selected by *(int *)user, on in = {x, w, b}. */
enum { LINEAR, MATMUL_ADD, LINEAR_GELU, GELU_LINEAR, LINEAR_MAXMIN, MAXMIN_LINEAR };
static lipt_tensor *build_layer(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    switch (*(const int *)user) {
    case MATMUL_ADD: return lipt_add(ctx, lipt_matmul(ctx, in[0], in[1], 0, 0), in[2]);
    case LINEAR_GELU: return lipt_linear_gelu(ctx, in[0], in[1], in[2]);
    case GELU_LINEAR: return lipt_gelu(ctx, lipt_linear(ctx, in[0], in[1], in[2]));
    case LINEAR_MAXMIN: return lipt_linear_maxmin(ctx, in[0], in[1], in[2]);
    case MAXMIN_LINEAR: return lipt_maxmin(ctx, lipt_linear(ctx, in[0], in[1], in[2]));
    default: return lipt_linear(ctx, in[0], in[1], in[2]);
    }
}

/* The inputs of a linear layer of shape s = {Bt, T, K, N}: x [Bt,T,K], w [K,N] (standard deviation wstd), b [N],
 * all requiring grad, from rng seeded with seed (and left to draw more). */
static void linear_inputs(lipt_rng *rng, uint64_t seed, const int *s, float wstd, lipt_tensor **in) {
    lipt_rng_seed(rng, seed);
    in[0] = tu_tensor(rng, 3, (int[]){s[0], s[1], s[2]}, 1.0f, 1);
    in[1] = tu_tensor(rng, 2, (int[]){s[2], s[3]}, wstd, 1);
    in[2] = tu_tensor(rng, 1, (int[]){s[3]}, 1.0f, 1);
}

/* ref [M,N] = x w + b in double (M rows of x). */
static double *ref_linear(lipt_tensor *const *in, int M, int N, int K) {
    double *ref = malloc((size_t)M * N * sizeof(double));
    ref_mm(in[0], in[1], 1, M, N, K, 0, 0, 0, ref);
    for (size_t i = 0; i < (size_t)M * N; i++) ref[i] += in[2]->data[i % (size_t)N];
    return ref;
}

/* in[k]'s gradients after a backward of build_layer(in) (kind) seeded with r, on top of gradients pre-filled with 0.25 (the
 * backward must accumulate), at `threads` threads; g[k] is malloc'ed (NULL for an input that needs none). */
static void grads_of(int kind, lipt_tensor **in, const float *r, int threads, float **g) {
    lipt_set_threads(threads);
    for (int k = 0; k < 3; k++) {
        g[k] = in[k]->requires_grad ? malloc(in[k]->numel * sizeof(float)) : NULL;
        for (size_t j = 0; g[k] && j < in[k]->numel; j++) g[k][j] = 0.25f;
        in[k]->grad = g[k];
    }
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_backward_seeded(&ctx, build_layer(&ctx, in, &kind), r);
    for (int k = 0; k < 3; k++) in[k]->grad = NULL;
    lipt_ctx_free(&ctx);
    lipt_set_threads(2);
}

/* The finite-difference check of build_layer (kind) on a linear layer's inputs (small outputs only), then frees
 * them. */
static void linear_gradcheck_free(const char *op, int kind, lipt_tensor **in, uint64_t seed) {
    const int N = in[1]->shape[1];
    char label[64];
    snprintf(label, sizeof label, "%s %dx%dx%d->%d", op, in[0]->shape[0], in[0]->shape[1], in[0]->shape[2], N);
    if (in[0]->numel / (size_t)in[0]->shape[2] * (size_t)N <= 4096)
        tu_gradcheck(label, build_layer, &kind, in, 3, &(tu_gradcheck_opts){.seed = seed});
    for (int k = 0; k < 3; k++) tu_free(in[k]);
}

/* The fused x w + b: forward against the double reference, the same bits as matmul followed by add, gradients of
 * x, w and b by finite differences and equal to those of matmul + add, accumulating into existing gradients. */
START_TEST(test_linear_fused) {
    const int shapes[][4] = {{2, 3, 5, 4},  {1, 1, 3, 1},     {1, 1, 1, 6},
                             {3, 7, 8, 11}, {4, 40, 33, 70}, {2, 128, 64, 520}, {4, 256, 64, 96}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int Bt = shapes[si][0], T = shapes[si][1], K = shapes[si][2], N = shapes[si][3];
        lipt_rng rng;
        lipt_tensor *in[3];
        linear_inputs(&rng, 21 + si, shapes[si], 1.0f, in);
        lipt_tensor *X = in[0], *W = in[1], *Bv = in[2];
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = lipt_linear(&ctx, X, W, Bv), *Y2 = lipt_matmul(&ctx, X, W, 0, 0);
        Y2 = lipt_add(&ctx, Y2, Bv);
        ck_assert(Y->ndim == 3 && Y->shape[0] == Bt && Y->shape[1] == T && Y->shape[2] == N);
        const size_t n = (size_t)Bt * T * N;
        double *ref = ref_linear(in, Bt * T, N, K);
        const double e = tu_max_rel_err(Y->data, ref, n, 1e-6);
        ck_assert_msg(e < 1e-5, "linear forward rel err %.3e", e);
        ck_assert_msg(memcmp(Y->data, Y2->data, n * sizeof(float)) == 0, "linear differs from matmul + add");
        free(ref);
        lipt_ctx_free(&ctx);

        /* gradients: fused against unfused, both on top of gradients pre-filled with 0.25 */
        float *r = malloc(n * sizeof(float));
        lipt_rng_fill_normal(&rng, r, n, 1.0f);
        float *g[2][3];
        for (int fused = 0; fused < 2; fused++) grads_of(fused ? LINEAR : MATMUL_ADD, in, r, 2, g[fused]);
        for (int k = 0; k < 3; k++) {
            const double ek = tu_max_rel_err_f(g[1][k], g[0][k], in[k]->numel, 1e-6);
            ck_assert_msg(ek < 1e-5, "linear gradient of input %d differs from matmul + add by %.3e", k, ek);
            free(g[0][k]);
            free(g[1][k]);
        }
        free(r);
        linear_gradcheck_free("linear", LINEAR, in, 9 + si);
    }
}
END_TEST

/* The activation after a double x w + b, in place over M rows of N: GELU (exact erf) or MaxMin. */
static void ref_activation(int fused, double *ref, size_t M, size_t N) {
    for (size_t i = 0; i < M * N; i++) {
        if (fused == LINEAR_GELU) {
            ref[i] *= 0.5 * erfc(-ref[i] / sqrt(2.0));
        } else if (i % 2 == 0) {
            const double u = ref[i], v = ref[i + 1];
            ref[i] = fmax(u, v), ref[i + 1] = fmin(u, v);
        }
    }
}

/* act(x w + b) in one op (fused: LINEAR_GELU or LINEAR_MAXMIN, unfused the two ops): forward against the double
 * reference, and the bits of act(lipt_linear(...)) forward (recorded and no-grad) and backward (x and w gradients;
 * b's, summed in another order, within one float), accumulating into existing gradients, on 1 and on 2 threads,
 * with b or x and w frozen; every gradient the same bits on 1 and 2 threads; gradients by finite differences.
 * Shapes with small N (the bias sum's narrow case), odd widths (vector tails; GELU only, MaxMin needs N even),
 * M N above the parallel thresholds, and two products on oneDNN in builds with it (the bias and the activation as
 * lipt_gemm_rows's pass: 256 x 520 x 64 cut by columns, 1024 x 96 x 64 by rows with a shorter last block). */
static void check_linear_act(const char *name, int fused, int unfused, const int (*shapes)[4], size_t n_shapes,
                             uint64_t seed) {
    double worst = 0;
    int64_t worst_ulps = 0;
    for (size_t si = 0; si < n_shapes; si++) {
        int Bt = shapes[si][0], T = shapes[si][1], K = shapes[si][2], N = shapes[si][3];
        lipt_rng rng;
        lipt_tensor *in[3];
        linear_inputs(&rng, seed + si, shapes[si], 0.5f, in);
        lipt_tensor *X = in[0], *W = in[1], *Bv = in[2];
        const size_t n = (size_t)Bt * T * N;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = build_layer(&ctx, in, &fused), *Y2 = build_layer(&ctx, in, &unfused);
        ck_assert(Y->ndim == 3 && Y->shape[0] == Bt && Y->shape[1] == T && Y->shape[2] == N && Y->requires_grad);
        double *ref = ref_linear(in, Bt * T, N, K);
        ref_activation(fused, ref, (size_t)Bt * T, (size_t)N);
        const double e = tu_max_rel_err(Y->data, ref, n, 1e-6);
        ck_assert_msg(e < 1e-5, "%s forward rel err %.3e", name, e);
        if (e > worst) worst = e;
        ck_assert_msg(memcmp(Y->data, Y2->data, n * sizeof(float)) == 0, "%s differs from the two ops", name);
        lipt_no_grad_push(&ctx);
        lipt_tensor *Y3 = build_layer(&ctx, in, &fused);
        lipt_no_grad_pop(&ctx);
        ck_assert_msg(!Y3->requires_grad && memcmp(Y->data, Y3->data, n * sizeof(float)) == 0,
                      "%s without grad differs", name);
        free(ref);
        lipt_ctx_free(&ctx);

        float *r = malloc(n * sizeof(float));
        lipt_rng_fill_normal(&rng, r, n, 1.0f);
        for (int mode = 0; mode < 3; mode++) { /* 0: all train, 1: b frozen, 2: only b trains */
            X->requires_grad = W->requires_grad = mode != 2;
            Bv->requires_grad = mode != 1;
            float *g[4][3]; /* [threads 2, 1][unfused, fused][input] */
            for (int v = 0; v < 4; v++) grads_of(v & 1 ? fused : unfused, in, r, 2 - v / 2, g[v]);
            for (int k = 0; k < 3; k++) {
                for (int v = 0; v < 4 && g[0][k]; v += 2) {
                    /* the bias sum adds in another order (double, by chunks of rows): within one float of it */
                    const int64_t u = tu_max_ulps(g[v + 1][k], g[v][k], in[k]->numel);
                    if (k == 2 && u > worst_ulps) worst_ulps = u;
                    ck_assert_msg(u <= (k == 2), "%s %dx%dx%d->%d mode %d: gradient of input %d differs from the two "
                                  "ops by %lld floats (%d threads)", name, Bt, T, K, N, mode, k, (long long)u,
                                  2 - v / 2);
                }
                /* every gradient, the fused op's and the two ops', the same bits on 1 and 2 threads: the products
                 * (lipt_gemm: blocks fixed by the shape) and the bias sums (fixed chunks of rows) do not depend on the
                 * thread count, whatever kernels OpenBLAS runs (tests/kernels_test.sh) */
                for (int v = 0; v < 2 && g[0][k]; v++)
                    ck_assert_msg(memcmp(g[v][k], g[v + 2][k], in[k]->numel * sizeof(float)) == 0,
                                  "%s %dx%dx%d->%d mode %d: the %s gradient of input %d differs on 1 and 2 threads",
                                  name, Bt, T, K, N, mode, v ? "fused op's" : "two ops'", k);
                for (int v = 0; v < 4; v++) free(g[v][k]);
            }
        }
        X->requires_grad = W->requires_grad = Bv->requires_grad = 1;
        free(r);
        if (fused == LINEAR_MAXMIN) /* MaxMin has a kink wherever a pair ties: finite differences straddle them; its
                                     * gradient is the two ops' (above), which test_ops_maxmin checks */
            for (int k = 0; k < 3; k++) tu_free(in[k]);
        else
            linear_gradcheck_free(name, fused, in, seed + 100 + si);
    }
    printf("%s: forward within %.3e of the double reference (tol 1e-5); forward and x, w gradients the bits of the two "
           "ops, b's within %lld floats (tol 1)\n", name, worst, (long long)worst_ulps);
}

START_TEST(test_linear_gelu) {
    static const int shapes[][4] = {{2, 3, 5, 4},     {1, 1, 3, 1},     {3, 7, 8, 11}, {4, 40, 33, 70},
                                    {2, 48, 40, 520}, {2, 128, 64, 520}, {4, 256, 64, 96}};
    check_linear_act("linear_gelu", LINEAR_GELU, GELU_LINEAR, shapes, sizeof shapes / sizeof shapes[0], 41);
}
END_TEST

START_TEST(test_linear_maxmin) {
    static const int shapes[][4] = {{2, 3, 5, 4},     {1, 1, 3, 2},     {3, 7, 8, 18}, {4, 40, 33, 70},
                                    {2, 48, 40, 520}, {2, 128, 64, 520}, {4, 256, 64, 96}};
    check_linear_act("linear_maxmin", LINEAR_MAXMIN, MAXMIN_LINEAR, shapes, sizeof shapes / sizeof shapes[0], 61);
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
    tcase_add_test(tc, test_linear_gelu);
    tcase_add_test(tc, test_linear_maxmin);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
