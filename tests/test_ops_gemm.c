/* src/kernels/gemm.c, lipt_gemm: the product every float32 matmul in lipt runs on. Against a double reference within
 * the float32 bound (K + 2) u (|alpha| Σ|a b| + |beta c|), u = 2^-24, on shapes on both sides of the size from which
 * oneDNN takes over (in builds with it), cut by rows and by columns, all four transposes, padded row strides, alpha 1
 * and 1/8, beta 0 (C not read: it starts as NaN), 1 and -0.5, with the columns past N untouched; the same bits on 1
 * 2 and 3 threads, again on the same count, and from inside a parallel region (whatever kernels OpenBLAS runs:
 * tests/kernels_test.sh runs this suite under OPENBLAS_CORETYPE Prescott, Haswell and SkylakeX); lipt_gemm_cut_fixed,
 * the blocks of OpenBLAS's products; lipt_gemm_gemv, the decoder's one-row product, the same ways; and lipt_sgemm_lib,
 * the two libraries' own sgemm (their own threading: within the bound, no promise about bits); lipt_gemm_p's weight
 * gradients (lipt_gemm_ksplit), the same ways. */
#include "testutil.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

typedef struct { int M, N, K; } shape;

/* above LIPT_GEMM_DNNL_MIN multiply-adds: cut (lipt_gemm_cut_fixed) by rows (M >= N) or by columns into blocks whose
 * last one is shorter (300 x 257 x 129 differed on 1, 2 and 3 threads on oneDNN's AVX2 kernels when the blocks
 * followed the threads), a long sum (K 2000, as the weights' gradients), one block (oneDNN would thread it itself);
 * then four below it: one block, one block that OpenBLAS would thread by itself (128 x 128 x 64 differed on 1, 2 and
 * 3 threads on its Haswell kernels), and three blocks of rows and of columns */
static const shape shapes[] = {{300, 257, 129}, {64, 1100, 96},  {2100, 40, 64}, {96, 80, 2000}, {16, 12, 24000},
                               {33, 70, 50},    {128, 128, 64}, {512, 256, 24}, {20, 700, 200}};
static const float alphas[] = {1.0f, 0.125f}, betas[] = {0.0f, 1.0f, -0.5f};

static float *filled(lipt_rng *rng, size_t n) {
    float *p = malloc(n * sizeof(float));
    lipt_rng_fill_normal(rng, p, n, 1.0f);
    return p;
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float *A, *B, *C0;
    double *S, *SA; /* Σ a b and Σ |a b| per element of C, in double */
} gcase;

static void case_make(gcase *g, lipt_rng *rng, int ta, int tb, shape s, int pad) {
    g->ta = ta, g->tb = tb, g->M = s.M, g->N = s.N, g->K = s.K;
    g->lda = (ta ? s.M : s.K) + pad, g->ldb = (tb ? s.K : s.N) + pad, g->ldc = s.N + pad;
    g->A = filled(rng, (size_t)(ta ? s.K : s.M) * g->lda);
    g->B = filled(rng, (size_t)(tb ? s.N : s.K) * g->ldb);
    g->C0 = filled(rng, (size_t)s.M * g->ldc);
    g->S = malloc(sizeof(double) * (size_t)s.M * s.N);
    g->SA = malloc(sizeof(double) * (size_t)s.M * s.N);
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            double sum = 0, sa = 0;
            for (int k = 0; k < g->K; k++) {
                const double a = ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
                const double b = tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
                sum += a * b, sa += fabs(a * b);
            }
            g->S[(size_t)i * g->N + j] = sum, g->SA[(size_t)i * g->N + j] = sa;
        }
}

static void case_free(gcase *g) { free(g->A), free(g->B), free(g->C0), free(g->S), free(g->SA); }

/* C from C0 (NaN when beta is 0), then lipt_gemm (lib < 0) or lipt_sgemm_lib(lib); returns a malloc'd C */
static float *case_run(const gcase *g, int lib, float alpha, float beta) {
    const size_t n = (size_t)g->M * g->ldc;
    float *C = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) C[i] = beta == 0.0f ? NAN : g->C0[i];
    if (lib < 0) lipt_gemm(g->ta, g->tb, g->M, g->N, g->K, alpha, g->A, g->lda, g->B, g->ldb, beta, C, g->ldc);
    else ck_assert_int_eq(lipt_sgemm_lib(lib, g->ta, g->tb, g->M, g->N, g->K, alpha, g->A, g->lda, g->B, g->ldb,
                                         beta, C, g->ldc), 0);
    return C;
}

/* the worst error of C relative to the bound (under 1 is within it); the columns past N must be untouched */
static double case_check(const gcase *g, const float *C, float alpha, float beta, const char *what) {
    const double u = ldexp(1.0, -24);
    double worst = 0;
    for (int i = 0; i < g->M; i++) {
        for (int j = 0; j < g->N; j++) {
            const double s = g->S[(size_t)i * g->N + j], sa = g->SA[(size_t)i * g->N + j];
            const double c0 = g->C0[(size_t)i * g->ldc + j], want = alpha * s + (beta == 0.0f ? 0 : beta * c0);
            const double bound = (g->K + 2) * u * (fabs(alpha) * sa + fabs(beta * c0)) + 1e-30;
            const double got = C[(size_t)i * g->ldc + j], e = fabs(got - want) / bound;
            if (!(isfinite(got) && e < 1.0)) /* ck_assert records every check it passes: millions here */
                ck_abort_msg("%s ta%d tb%d %dx%dx%d alpha %g beta %g: C[%d,%d] = %.9g, want %.9g (%.2f of the bound)",
                          what, g->ta, g->tb, g->M, g->N, g->K, alpha, beta, i, j, got, want, e);
            if (e > worst) worst = e;
        }
        for (int j = g->N; j < g->ldc; j++) {
            const float c = C[(size_t)i * g->ldc + j];
            if (!(beta == 0.0f ? isnan(c) : c == g->C0[(size_t)i * g->ldc + j]))
                ck_abort_msg("%s: C[%d,%d] past N written", what, i, j);
        }
    }
    return worst;
}

START_TEST(test_gemm_reference) {
    double worst = 0;
    int n = 0;
    float one = 0;
    const int have_dnnl = lipt_sgemm_lib(1, 0, 0, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &one, 1) == 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 101 + 13 * si + 3 * t);
            gcase g;
            case_make(&g, &rng, t & 1, t >> 1, shapes[si], (int)(si + t) % 3 * 5);
            for (int ai = 0; ai < 2; ai++)
                for (int bi = 0; bi < 3; bi++) {
                    float *C = case_run(&g, -1, alphas[ai], betas[bi]);
                    double e = case_check(&g, C, alphas[ai], betas[bi], "lipt_gemm");
                    free(C);
                    if (e > worst) worst = e;
                    /* the libraries' own sgemm: OpenBLAS always, oneDNN where the build has it */
                    for (int lib = 0; lib <= have_dnnl; lib++) {
                        C = case_run(&g, lib, alphas[ai], betas[bi]);
                        case_check(&g, C, alphas[ai], betas[bi], lib ? "dnnl_sgemm" : "cblas_sgemm");
                        free(C);
                    }
                    n++;
                }
            case_free(&g);
        }
    printf("lipt_gemm: %d cases within the float32 bound (worst %.3f of it); oneDNN's sgemm %s\n", n, worst,
           have_dnnl ? "checked too" : "not in this build");
}
END_TEST

/* The same bits on 1, 2 and 3 threads (the blocks follow the thread count), and from inside a parallel region (each
 * thread its own product, as the attention's per-head products run), for every shape. */
START_TEST(test_gemm_threads_bitwise) {
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 907 + 5 * si + t);
            gcase g;
            case_make(&g, &rng, t & 1, t >> 1, shapes[si], 3);
            const size_t bytes = (size_t)g.M * g.ldc * sizeof(float);
            lipt_set_threads(1);
            float *C1 = case_run(&g, -1, 1.0f, 1.0f);
            lipt_set_threads(3);
            float *C3 = case_run(&g, -1, 1.0f, 1.0f);
            lipt_set_threads(2);
            float *C2 = case_run(&g, -1, 1.0f, 1.0f), *C2b = case_run(&g, -1, 1.0f, 1.0f);
            float *Cp[2] = {NULL, NULL};
#pragma omp parallel num_threads(2)
            Cp[omp_get_thread_num()] = case_run(&g, -1, 1.0f, 1.0f);
            ck_assert_msg(memcmp(C2, C2b, bytes) == 0, "ta%d tb%d %dx%dx%d: two runs on 2 threads differ", g.ta, g.tb,
                          g.M, g.N, g.K);
            ck_assert_msg(memcmp(C1, C2, bytes) == 0 && memcmp(C1, C3, bytes) == 0,
                          "ta%d tb%d %dx%dx%d: 1, 2 and 3 threads differ", g.ta, g.tb, g.M, g.N, g.K);
            for (int k = 0; k < 2; k++)
                ck_assert_msg(Cp[k] && memcmp(C1, Cp[k], bytes) == 0,
                              "ta%d tb%d %dx%dx%d: inside a parallel region (thread %d) differs", g.ta, g.tb, g.M, g.N,
                              g.K, k);
            free(C1), free(C2), free(C2b), free(C3), free(Cp[0]), free(Cp[1]);
            case_free(&g);
        }
}
END_TEST

/* lipt_gemm_cut_fixed (a function of the shape alone: no thread count goes in) covers the cut dimension once with
 * blocks whose side is a multiple of 16 (or the whole dimension), at most 256 unless the work floor asks for more,
 * and of at least LIPT_GEMM_BLOCK_WORK multiply-adds unless that takes the whole dimension. */
START_TEST(test_gemm_cut_fixed) {
    int n = 0;
    for (int M = 1; M <= 9000; M = M * 3 + 1)
        for (int N = 1; N <= 9000; N = N * 5 + 3)
            for (int K = 0; K <= 3000; K = K * 7 + 1) {
                const lipt_gemm_cut c = lipt_gemm_cut_fixed(M, N, K);
                const int dim = c.by_rows ? M : N, other = c.by_rows ? N : M;
                const double work = (double)c.side * other * (K > 0 ? K : 1);
                ck_assert_int_eq(c.by_rows, M >= N);
                ck_assert_msg(c.side >= 1 && c.side <= dim && (c.side % 16 == 0 || c.side == dim) && c.n >= 1 &&
                                  (long long)(c.n - 1) * c.side < dim && (long long)c.n * c.side >= dim &&
                                  (c.side <= 256 || work < LIPT_GEMM_BLOCK_WORK + 16.0 * other * (K > 0 ? K : 1)),
                              "%dx%dx%d: %d blocks of %d %s", M, N, K, c.n, c.side, c.by_rows ? "rows" : "columns");
                ck_assert_msg(c.side == dim || work >= LIPT_GEMM_BLOCK_WORK, "%dx%dx%d: blocks of %d %s, under the "
                              "work floor", M, N, K, c.side, c.by_rows ? "rows" : "columns");
                /* the blocks lipt_gemm_block_at makes tile C exactly */
                int covered = 0;
                for (int i = 0; i < c.n; i++) {
                    const lipt_gemm_block b = lipt_gemm_block_at(c, i, 0, 0, M, N, K, N, N);
                    const int ext = c.by_rows ? b.m : b.w;
                    ck_assert(ext >= 1 && (c.by_rows ? b.w == N : b.m == M));
                    ck_assert(b.c == (c.by_rows ? (size_t)covered * N : (size_t)covered));
                    covered += ext;
                }
                ck_assert_int_eq(covered, dim);
                n++;
            }
    printf("lipt_gemm_cut_fixed: %d shapes tiled exactly, blocks within the side cap and the work floor\n", n);
}
END_TEST

/* lipt_gemm_gemv's one-row products (sgemv in lipt_gemm_cut_fixed's blocks of columns): within the float32 bound,
 * the same bits on 1, 2 and 3 threads and twice on 2, for both layouts of B, widths from one block to several. */
START_TEST(test_gemm_gemv) {
    const shape rows[] = {{1, 1, 7}, {1, 77, 256}, {1, 1024, 256}, {1, 9000, 300}};
    double worst = 0;
    for (size_t si = 0; si < sizeof rows / sizeof rows[0]; si++)
        for (int tb = 0; tb < 2; tb++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 31 + 2 * si + tb);
            gcase g;
            case_make(&g, &rng, 0, tb, rows[si], 2);
            float *C[4];
            const int th[4] = {1, 2, 3, 2};
            for (int r = 0; r < 4; r++) {
                lipt_set_threads(th[r]);
                C[r] = malloc((size_t)g.ldc * sizeof(float));
                memcpy(C[r], g.C0, (size_t)g.ldc * sizeof(float));
                lipt_gemm_gemv(0, tb, 1, g.N, g.K, 0.5f, g.A, g.lda, g.B, g.ldb, 1.0f, C[r], g.ldc);
            }
            const double e = case_check(&g, C[0], 0.5f, 1.0f, "lipt_gemm_gemv");
            if (e > worst) worst = e;
            for (int r = 1; r < 4; r++)
                ck_assert_msg(memcmp(C[0], C[r], (size_t)g.ldc * sizeof(float)) == 0,
                              "gemv tb%d 1x%dx%d: %d threads differ from 1", tb, g.N, g.K, th[r]);
            for (int r = 0; r < 4; r++) free(C[r]);
            case_free(&g);
        }
    lipt_set_threads(2);
    printf("lipt_gemm_gemv: within the float32 bound (worst %.3f of it), the same bits on 1, 2 and 3 threads\n", worst);
}
END_TEST

/* lipt_gemm_p's weight-gradient products in float32 (lipt_gemm_ksplit: Aᵀ B cut along K, the partial sums added in
 * chunk order): within the float32 bound for alpha 1 and 1/8, beta 0 (C not read), 1 and -0.5, padded strides, an
 * even and an uneven last chunk, many chunks, the chunks as Cᵀ = Bᵀ A (A's row stride from 1024 floats); the same
 * bits on 1, 2 and 3 threads and twice on 2; inside a parallel construct the product is not cut (the arena is the
 * context's), so there it is lipt_gemm's; and the chunk size is a function of the shape: K, a multiple of 16, an
 * even number of chunks, none below 2048 or twice C's side. */
START_TEST(test_gemm_ksplit) {
    const shape ks[] = {{96, 80, 2048}, {64, 48, 3000}, {16, 12, 24000}, {200, 33, 4100}, {1030, 40, 2064}};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)64 << 20, 1);
    double worst = 0;
    int cut = 0, transposed = 0;
    for (size_t si = 0; si < sizeof ks / sizeof ks[0]; si++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 5003 + si);
        gcase g;
        case_make(&g, &rng, 1, 0, ks[si], (int)si % 2 * 7);
        const int kc = lipt_gemm_ksplit_chunk(g.M, g.N, g.K);
        cut += lipt_gemm_ksplit_wanted(1, 0, g.M, g.N, g.K);
        transposed += lipt_gemm_ksplit_transposed(g.lda, g.ldb);
        const size_t n = (size_t)g.M * g.ldc, bytes = n * sizeof(float);
        for (int ai = 0; ai < 2; ai++)
            for (int bi = 0; bi < 3; bi++) {
                float *C[5];
                const int th[4] = {1, 2, 3, 2};
                for (int r = 0; r < 5; r++) {
                    C[r] = malloc(bytes);
                    for (size_t i = 0; i < n; i++) C[r][i] = betas[bi] == 0.0f ? NAN : g.C0[i];
                }
                for (int r = 0; r < 4; r++) {
                    lipt_set_threads(th[r]);
                    lipt_gemm_p(LIPT_KC(&ctx), 1, 0, g.M, g.N, g.K, alphas[ai], g.A, g.lda, g.B, g.ldb, betas[bi], C[r],
                                g.ldc);
                }
                const double e = case_check(&g, C[0], alphas[ai], betas[bi], "lipt_gemm_p (K cut)");
                if (e > worst) worst = e;
                for (int r = 1; r < 4; r++)
                    ck_assert_msg(memcmp(C[0], C[r], bytes) == 0, "%dx%dx%d, K in chunks of %d: %d threads differ "
                                  "from 1", g.M, g.N, g.K, kc, th[r]);
                float *Cg = case_run(&g, -1, alphas[ai], betas[bi]);
#pragma omp parallel num_threads(1)
                lipt_gemm_p(LIPT_KC(&ctx), 1, 0, g.M, g.N, g.K, alphas[ai], g.A, g.lda, g.B, g.ldb, betas[bi], C[4],
                            g.ldc);
                ck_assert_msg(memcmp(Cg, C[4], bytes) == 0, "%dx%dx%d: inside a parallel construct lipt_gemm_p is "
                              "not lipt_gemm", g.M, g.N, g.K);
                free(Cg);
                for (int r = 0; r < 5; r++) free(C[r]);
            }
        case_free(&g);
    }
    lipt_set_threads(2);
    lipt_ctx_free(&ctx);
    if (lipt_gemm_on_dnnl(96, 80, 2048)) ck_assert_int_eq(cut, 5); /* else no product is cut so: all lipt_gemm */
    ck_assert_int_eq(transposed, 1); /* the last shape: A's rows 1030 floats apart, the chunks as Cᵀ = Bᵀ A */
    for (int K = 1; K <= 40000; K = K * 3 + 7)
        for (int side = 1; side <= 3000; side = side * 2 + 5) {
            const int kc = lipt_gemm_ksplit_chunk(side, 7, K), nk = kc > 0 ? (K + kc - 1) / kc : 0;
            if (K < 2048 || K < 2 * side) {
                ck_assert_int_eq(kc, 0);
                continue;
            }
            ck_assert_msg(kc % 16 == 0 && nk >= 2 && (long long)(nk - 1) * kc < K && kc >= 512 && kc <= 1040,
                          "K %d, side %d: chunks of %d (%d)", K, side, kc, nk);
            ck_assert_int_eq(kc, lipt_gemm_ksplit_chunk(7, side, K)); /* the larger side decides, not which */
        }
    printf("lipt_gemm_p, weight gradients cut along K: %d products (%d as Cᵀ = Bᵀ A) within the float32 bound (worst "
           "%.3f of it), the same bits on 1, 2 and 3 threads\n", cut, transposed, worst);
}
END_TEST

START_TEST(test_sgemm_lib_unknown) {
    float one = 1.0f;
    ck_assert_int_eq(lipt_sgemm_lib(2, 0, 0, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &one, 1), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_gemm");
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 120); /* a few seconds alone */
    tcase_add_test(tc, test_gemm_reference);
    tcase_add_test(tc, test_gemm_threads_bitwise);
    tcase_add_test(tc, test_gemm_cut_fixed);
    tcase_add_test(tc, test_gemm_gemv);
    tcase_add_test(tc, test_gemm_ksplit);
    tcase_add_test(tc, test_sgemm_lib_unknown);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
