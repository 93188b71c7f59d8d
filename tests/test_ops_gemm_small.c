/* src/kernels/gemm_small.c, the register-tiled products of the tied L2 attention's heads: NN, NT and TN against a
 * double reference over d = 32, 64, 128 (and the vector width itself), odd M and K, row strides other than d, alpha
 * 1 and 1/8, beta 0 (C not read: it starts as NaN), 1 and 0.5; which shapes lipt_gemm_small_ok takes; that rows
 * computed in two parts (as threads would split them) give the same bits as in one call; and that
 * lipt_gemm_small_p at a low precision is lipt_gemm_p's product bit for bit. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

static float *filled(lipt_rng *rng, size_t n) {
    float *p = malloc(n * sizeof(float));
    lipt_rng_fill_normal(rng, p, n, 1.0f);
    return p;
}

/* Runs one product (C with row stride ldc, pre-filled with c0 or NaN when beta is 0) and returns the worst error
 * relative to the float32 bound (K + 2) u (|alpha| Σ|a b| + |beta c|), u = 2^-24: under 1 is within the bound. */
static double check_one(lipt_rng *rng, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float alpha,
                        float beta) {
    const int ar = ta ? K : M, br = tb ? N : K;
    float *A = filled(rng, (size_t)ar * lda), *B = filled(rng, (size_t)br * ldb), *C0 = filled(rng, (size_t)M * ldc);
    float *C = malloc((size_t)M * ldc * sizeof(float));
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = beta == 0.0f ? NAN : C0[i];
    ck_assert_msg(lipt_gemm_small_ok(ta, tb, M, N, K), "shape %d%d %dx%dx%d should be taken", ta, tb, M, N, K);
    lipt_gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0;
    const double u = ldexp(1.0, -24);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b, sa += fabs(a * b);
            }
            const double c0 = C0[(size_t)i * ldc + j], want = alpha * s + (beta == 0.0f ? 0 : beta * c0);
            const double bound = (K + 2) * u * (fabs(alpha) * sa + fabs(beta * c0)) + 1e-30;
            const double got = C[(size_t)i * ldc + j], e = fabs(got - want) / bound;
            ck_assert_msg(isfinite(got) && e < 1.0,
                          "ta%d tb%d M%d N%d K%d lda%d ldb%d ldc%d alpha %g beta %g: C[%d,%d] = %.9g, want %.9g "
                          "(error %.2f of the bound)",
                          ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, i, j, got, want, e);
            if (e > worst) worst = e;
        }
        /* columns past N in C's row stride are not written */
        for (int j = N; j < ldc; j++) {
            const float c = C[(size_t)i * ldc + j];
            ck_assert_msg(beta == 0.0f ? isnan(c) : c == C0[(size_t)i * ldc + j], "C[%d,%d] past N written", i, j);
        }
    }
    free(A), free(B), free(C0), free(C);
    return worst;
}

static const float alphas[] = {1.0f, 0.125f}, betas[] = {0.0f, 1.0f, 0.5f};

/* C[M, d] (+)= A[M, d] B[d, d] and A Bᵀ: the values Q_h M_h, dq += dV M_hᵀ, the weights' gradients. */
START_TEST(test_nn_nt) {
    double worst = 0;
    const int ds[] = {LIPT_VW, 32, 64, 128}, Ms[] = {1, 5, 37, 259, 2049};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (int tb = 0; tb < 2; tb++)
                for (int ai = 0; ai < 2; ai++)
                    for (int bi = 0; bi < 3; bi++) {
                        const int d = ds[di], M = Ms[mi];
                        if (d % LIPT_VW || (M > 1000 && d != 64)) continue; /* the full B·T = 2048 at d = 64 only */
                        if (tu_skip(di + mi + tb + ai + bi)) continue; /* 1 in tu_quick() under LIPT_TEST_QUICK */
                        lipt_rng rng;
                        lipt_rng_seed(&rng, 11 + 7 * di + 131 * mi + tb + 2 * ai + 5 * bi);
                        /* head blocks of a [M, 4d] matrix (stride 4d), or packed (stride d), or an odd stride */
                        const int lda = mi % 2 ? 4 * d : d + 3, ldc = bi == 1 ? d : 4 * d + 1, ldb = tb ? d + 1 : d;
                        const double e = check_one(&rng, 0, tb, M, d, d, lda, ldb, ldc, alphas[ai], betas[bi]);
                        if (e > worst) worst = e;
                    }
    printf("gemm_small NN / NT: worst error %.3f of the float32 bound\n", worst);
}
END_TEST

/* C[d, d] = Aᵀ B with A, B [K, d] blocks of [K, D]: dM_h = Q_hᵀ dV_h over B·T rows, and M_h = W^{Q,h}ᵀ W^{V,h}. */
START_TEST(test_tn) {
    double worst = 0;
    const int ds[] = {LIPT_VW, 32, 64, 128}, Ks[] = {1, 7, 131, 2047};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (int ai = 0; ai < 2; ai++)
                for (int bi = 0; bi < 3; bi++) {
                    const int d = ds[di], K = Ks[ki];
                    if (d % LIPT_VW || (K > 1000 && d != 64)) continue;
                    if (tu_skip(di + ki + ai + bi)) continue; /* 1 in tu_quick() under LIPT_TEST_QUICK */
                    lipt_rng rng;
                    lipt_rng_seed(&rng, 900 + 7 * di + 131 * ki + 2 * ai + 5 * bi);
                    const int lda = 4 * d, ldb = ki % 2 ? 4 * d : d + 5, ldc = bi == 2 ? d + 2 : d;
                    /* M below d too (and not a multiple of the tile height): a row block of the tile's tail */
                    for (int M = d; M >= d - 3 && M >= 1; M -= 3) {
                        const double e = check_one(&rng, 1, 0, M, d, K, lda, ldb, ldc, alphas[ai], betas[bi]);
                        if (e > worst) worst = e;
                    }
                }
    printf("gemm_small TN: worst error %.3f of the float32 bound\n", worst);
}
END_TEST

START_TEST(test_ok) {
    ck_assert(lipt_gemm_small_ok(0, 0, 2048, 64, 64));
    ck_assert(lipt_gemm_small_ok(0, 1, 2048, 64, 64));
    ck_assert(lipt_gemm_small_ok(1, 0, 64, 64, 2048));
    ck_assert(lipt_gemm_small_ok(0, 0, 5, LIPT_GS_MAX, 1000)); /* NN: K is not limited */
    ck_assert(!lipt_gemm_small_ok(1, 1, 64, 64, 64));
    ck_assert(!lipt_gemm_small_ok(0, 0, 64, LIPT_GS_MAX + LIPT_VW, 64));
    ck_assert(!lipt_gemm_small_ok(0, 0, 64, 64 + 1, 64));
    ck_assert(!lipt_gemm_small_ok(0, 0, 64, 2, 64));
    ck_assert(!lipt_gemm_small_ok(0, 1, 64, 64, LIPT_GS_MAX + 1));
    ck_assert(!lipt_gemm_small_ok(1, 0, LIPT_GS_MAX + 1, 64, 64));
    ck_assert(!lipt_gemm_small_ok(0, 0, 0, 64, 64));
    ck_assert(!lipt_gemm_small_ok(0, 0, 64, 64, 0));
}
END_TEST

/* Rows of C in two calls, split at a row that is not a multiple of the tile height, are the bits of one call: the
 * heads' products may be split across threads without changing the result. */
START_TEST(test_row_split_bitwise) {
    const int M = 1031, d = 64, ld = 4 * d;
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    float *A = filled(&rng, (size_t)M * ld), *B = filled(&rng, (size_t)d * d), *C1 = filled(&rng, (size_t)M * ld);
    float *C2 = malloc((size_t)M * ld * sizeof(float));
    memcpy(C2, C1, (size_t)M * ld * sizeof(float));
    for (int tb = 0; tb < 2; tb++) {
        lipt_gemm_small(0, tb, M, d, d, 0.5f, A, ld, B, d, 1.0f, C1, ld);
        const int m1 = 517;
        lipt_gemm_small(0, tb, m1, d, d, 0.5f, A, ld, B, d, 1.0f, C2, ld);
        lipt_gemm_small(0, tb, M - m1, d, d, 0.5f, A + (size_t)m1 * ld, ld, B, d, 1.0f, C2 + (size_t)m1 * ld, ld);
        ck_assert_msg(memcmp(C1, C2, (size_t)M * ld * sizeof(float)) == 0, "tb%d: split rows differ", tb);
    }
    /* TN: the rows of dM in two calls (a split of its d rows) */
    float *dM1 = malloc((size_t)d * d * sizeof(float)), *dM2 = malloc((size_t)d * d * sizeof(float));
    lipt_gemm_small(1, 0, d, d, M, 1.0f, A, ld, C1, ld, 0.0f, dM1, d);
    lipt_gemm_small(1, 0, 29, d, M, 1.0f, A, ld, C1, ld, 0.0f, dM2, d);
    lipt_gemm_small(1, 0, d - 29, d, M, 1.0f, A + 29, ld, C1, ld, 0.0f, dM2 + (size_t)29 * d, d);
    ck_assert_msg(memcmp(dM1, dM2, (size_t)d * d * sizeof(float)) == 0, "TN: split rows differ");
    free(A), free(B), free(C1), free(C2), free(dM1), free(dM2);
}
END_TEST

/* At bf16-emulated, lipt_gemm_small_p is lipt_gemm_p (the operands rounded to bf16), not the float32 kernel. */
START_TEST(test_lowp_falls_back) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    ck_assert(lipt_ctx_set_precision(&ctx, LIPT_PRECISION_BF16_EMULATED, NULL) == LIPT_OK);
    const int M = 300, d = 64, ld = 4 * d;
    lipt_rng rng;
    lipt_rng_seed(&rng, 8);
    float *A = filled(&rng, (size_t)M * ld), *B = filled(&rng, (size_t)d * d), *C1 = filled(&rng, (size_t)M * ld);
    float *C2 = malloc((size_t)M * ld * sizeof(float)), *C3 = malloc((size_t)M * ld * sizeof(float));
    memcpy(C2, C1, (size_t)M * ld * sizeof(float));
    memcpy(C3, C1, (size_t)M * ld * sizeof(float));
    lipt_gemm_small_p(LIPT_KC(&ctx), 0, 0, M, d, d, 1.0f, A, ld, B, d, 1.0f, C1, ld);
    lipt_gemm_p(LIPT_KC(&ctx), 0, 0, M, d, d, 1.0f, A, ld, B, d, 1.0f, C2, ld);
    ck_assert_msg(memcmp(C1, C2, (size_t)M * ld * sizeof(float)) == 0, "bf16-emulated: not lipt_gemm_p's product");
    /* and it did round: the float32 kernel's product differs */
    lipt_gemm_small(0, 0, M, d, d, 1.0f, A, ld, B, d, 1.0f, C3, ld);
    ck_assert(memcmp(C1, C3, (size_t)M * ld * sizeof(float)) != 0);
    free(A), free(B), free(C1), free(C2), free(C3);
    lipt_ctx_free(&ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_gemm_small");
    TCase *tc = tcase_create("gemm_small");
    tcase_set_timeout(tc, 120); /* a few seconds alone; more on a loaded machine */
    tcase_add_test(tc, test_nn_nt);
    tcase_add_test(tc, test_tn);
    tcase_add_test(tc, test_ok);
    tcase_add_test(tc, test_row_split_bitwise);
    tcase_add_test(tc, test_lowp_falls_back);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
