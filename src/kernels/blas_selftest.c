/* The GEMM self-test of the OpenBLAS kernels this process loaded (lipt_blas_selftest), and the hidden child command
 * that runs it (lipt_blas_selftest_main: `lipt --blas-selftest`, started by lipt_blas_verify with a candidate
 * OPENBLAS_CORETYPE, since OpenBLAS reads that variable only when it loads).
 *
 * Why: some OpenBLAS releases compute wrong results or crash with their AVX-512 kernels on CPUs newer than they are
 * (AMD Zen 5: sgemm_beta_COOPERLAKE crashes, wrong AVX-512 products in earlier releases), so a kernel set lipt
 * would pick or recommend is checked on the CPU first. The cases are the products lipt runs: row-major sgemm NN, NT
 * and TN with beta 0 (into a NaN-filled C: lipt stores into unzeroed buffers) and beta 1, padded strides, sizes from
 * 1 x 1 x 1 to products OpenBLAS threads itself, the same products cut into single-thread calls on OpenMP threads
 * (lipt_gemm's way), dgemm, and sgemv both ways. Each entry is compared with a double-accumulated reference within
 * the float rounding bound of a sum of K + 2 terms: |c - ref| <= (K + 2) u sum_k |a_ik b_kj| (+ |c0| for beta 1),
 * u = 2^-24 for float, 2^-53 for double; a kernel bug is far outside it. */
#include "lipt/core.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Declared by OpenBLAS's cblas.h too; repeated for headers without it. */
void openblas_set_num_threads(int num_threads);

/* Test hook (tests/blas_selftest_test.sh): "1" corrupts one entry of one product, as a bad kernel would; "crash"
 * raises SIGSEGV, as a kernel that crashes would. */
#define PLANT_VAR "LIPT_TEST_BLAS_SELFTEST_FAIL"

typedef struct {
    unsigned long long rng;
    int plant;            /* corrupt the next product's result once */
    char *detail;         /* the first failure, for the verdict */
    size_t n;
} st_ctx;

static double uniform(st_ctx *c) { /* in [-1, 1) */
    c->rng = c->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(c->rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* A [rows, cols] at row stride ld, of op(X) shape, filled at random. */
static void *operand(st_ctx *c, int rows, int cols, int ld, int dbl) {
    const size_t n = (size_t)rows * (size_t)ld;
    void *x = malloc((n ? n : 1) * (dbl ? sizeof(double) : sizeof(float)));
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        const double v = uniform(c);
        if (dbl) ((double *)x)[i] = v;
        else ((float *)x)[i] = (float)v;
    }
    (void)cols;
    return x;
}

static double at(const void *x, int dbl, size_t i) { return dbl ? ((const double *)x)[i] : ((const float *)x)[i]; }

/* Compare C [M,N] (stride ldc) with the reference of alpha = 1, op(A) op(B) + beta C0. 1 when within the bound. */
static int check(st_ctx *c, const char *what, int ta, int tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, double beta, const void *C0, const void *C, int ldc, int dbl) {
    const double u = dbl ? 0x1p-53 : 0x1p-24;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = at(A, dbl, ta ? (size_t)k * lda + i : (size_t)i * lda + k) *
                                 at(B, dbl, tb ? (size_t)j * ldb + k : (size_t)k * ldb + j);
                s += p;
                mag += fabs(p);
            }
            if (beta != 0) {
                s += beta * at(C0, dbl, (size_t)i * ldc + j);
                mag += fabs(beta * at(C0, dbl, (size_t)i * ldc + j));
            }
            const double got = at(C, dbl, (size_t)i * ldc + j), tol = (K + 2) * u * mag + 1e-300;
            if (!(fabs(got - s) <= tol)) {
                snprintf(c->detail, c->n, "%s %c%c %dx%dx%d beta %g: C[%d,%d] = %.9g, expected %.9g (tolerance %.2g)",
                         what, ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, beta, i, j, got, s, tol);
                return 0;
            }
        }
    return 1;
}

/* One product C = op(A) op(B) + beta C, M x N over K, strides padded by pad; blocks > 1: cut by rows of C into
 * that many single-thread calls on OpenMP threads, as lipt_gemm runs its products. */
static int product(st_ctx *c, int dbl, int ta, int tb, int M, int N, int K, double beta, int pad, int blocks) {
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    void *A = operand(c, ta ? K : M, 0, lda, dbl), *B = operand(c, tb ? N : K, 0, ldb, dbl);
    void *C0 = operand(c, M, N, ldc, dbl), *C = operand(c, M, N, ldc, dbl);
    int ok = A && B && C0 && C;
    if (!ok) snprintf(c->detail, c->n, "out of memory for the self-test");
    const size_t es = dbl ? sizeof(double) : sizeof(float), nc = (size_t)M * (size_t)ldc;
    if (ok && beta == 0) {
        for (size_t i = 0; i < nc; i++) { /* beta 0 must never read C */
            if (dbl) ((double *)C)[i] = NAN;
            else ((float *)C)[i] = NAN;
        }
    }
    if (ok && beta != 0) memcpy(C, C0, nc * es);
    const enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    const int side = (M + blocks - 1) / blocks;
#pragma omp parallel for schedule(static) num_threads(blocks) if (ok && blocks > 1)
    for (int b = 0; b < blocks; b++) {
        const int r0 = b * side, m = r0 + side > M ? M - r0 : side;
        if (!ok || m <= 0) continue;
        const size_t ao = ta ? (size_t)r0 : (size_t)r0 * lda, co = (size_t)r0 * ldc;
        if (dbl)
            cblas_dgemm(CblasRowMajor, oa, ob, m, N, K, 1.0, (const double *)A + ao, lda, B, ldb, beta,
                        (double *)C + co, ldc);
        else
            cblas_sgemm(CblasRowMajor, oa, ob, m, N, K, 1.0f, (const float *)A + ao, lda, B, ldb, (float)beta,
                        (float *)C + co, ldc);
    }
    if (ok && c->plant) { /* the planted bad kernel */
        if (dbl) ((double *)C)[0] += 1.0;
        else ((float *)C)[0] += 1.0f;
        c->plant = 0;
    }
    if (ok) ok = check(c, dbl ? "dgemm" : blocks > 1 ? "sgemm (per-thread blocks)" : "sgemm", ta, tb, M, N, K, A,
                       lda, B, ldb, beta, C0, C, ldc, dbl);
    free(A), free(B), free(C0), free(C);
    return ok;
}

/* sgemv y = op(A) x + beta y, A [M, K] (trans: y has K entries), checked as the M x 1 (or K x 1) product. */
static int gemv(st_ctx *c, int trans, int M, int K, double beta) {
    const int lda = K + 1, ny = trans ? K : M, nx = trans ? M : K;
    float *A = operand(c, M, K, lda, 0), *x = operand(c, nx, 1, 1, 0), *y0 = operand(c, ny, 1, 1, 0);
    float *y = operand(c, ny, 1, 1, 0);
    int ok = A && x && y0 && y;
    if (!ok) snprintf(c->detail, c->n, "out of memory for the self-test");
    if (ok) {
        memcpy(y, y0, (size_t)ny * sizeof *y);
        cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, M, K, 1.0f, A, lda, x, 1, (float)beta, y, 1);
        /* as a product: op(A) [ny, nx] times x [nx, 1] */
        ok = check(c, "sgemv", trans, 0, ny, 1, nx, A, lda, x, 1, beta, y0, y, 1, 0);
    }
    free(A), free(x), free(y0), free(y);
    return ok;
}

int lipt_blas_selftest(int threads, char *detail, size_t n) {
    st_ctx c = {0x5eedULL, 0, detail, n};
    const char *plant = getenv(PLANT_VAR);
    c.plant = plant && strcmp(plant, "1") == 0;
    if (plant && strcmp(plant, "crash") == 0) raise(SIGSEGV);
    if (n) detail[0] = 0;
    if (threads < 1) threads = 1;
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    /* small ones (the kernels' edge cases), odd ones, and products OpenBLAS threads (over 2^18 multiply-adds) */
    static const int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 64, 64}, {65, 127, 31}, {256, 192, 160}};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < 3; t++) /* NN, NT, TN */
            for (int b = 0; b < 2; b++)
                if (!product(&c, 0, t == 2, t == 1, sizes[s][0], sizes[s][1], sizes[s][2], b, (s + t) % 2 * 3, 1))
                    return 0;
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < 2; b++)
            if (!product(&c, 0, t == 2, t == 1, 200, 144, 96, b, 0, threads > 1 ? 2 * threads : 2) ||
                !product(&c, 1, t == 2, t == 1, 33, 17, 65, b, 1, 1) ||
                !product(&c, 1, t == 2, t == 1, 160, 128, 96, b, 0, 1))
                return 0;
    for (int t = 0; t < 2; t++)
        for (int b = 0; b < 2; b++)
            if (!gemv(&c, t, 3, 5, b) || !gemv(&c, t, 129, 257, b)) return 0;
    snprintf(detail, n, "sgemm NN/NT/TN beta 0 and 1, 1x1x1 to 256x192x160, per-thread blocks, dgemm, sgemv on "
             "%d threads", threads);
    return 1;
}

int lipt_blas_selftest_main(void) {
    char detail[LIPT_BLAS_DETAIL_MAX];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int threads = lipt_cpus_usable();
    threads = threads < 2 ? 2 : threads > 4 ? 4 : threads; /* threaded, whatever the machine */
    const int ok = lipt_blas_selftest(threads, detail, sizeof detail);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (ok) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), ", in %.0f ms", ms);
    printf("%s %.0f ms: %s\n", ok ? "pass" : "fail", ms, detail);
    fflush(stdout);
    return ok ? 0 : 1;
}
