/* Private: the dispatcher of the model's products at a kernel context's precision (issue 50: apart from the block
 * runners it picks among, so that no GEMM file calls back into the one that called it): float32 through lipt_gemm or
 * the k-split (gemm.c, gemm_ksplit.c), the low precisions through lipt_gemm_lowp (gemm_lowp.c). */
#ifndef LIPT_KERNELS_GEMM_P_H
#define LIPT_KERNELS_GEMM_P_H

#include "kernels/gemm.h"
#include "kernels/lowp.h"

/* lipt_gemm at ctx->precision: float32 is lipt_gemm itself, or for a weight gradient lipt_gemm_ksplit; the others
 * lipt_gemm_lowp (kernels/lowp.h). Timed into ctx->products_s (lipt_kprof_begin, kernels/kctx.h). */
static inline void lipt_gemm_p(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    if (ctx->precision != LIPT_PRECISION_FLOAT32) lipt_gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (lipt_gemm_ksplit_wanted(ta, tb, M, N, K)) lipt_gemm_ksplit(ctx, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    lipt_kprof_end(ctx, acc, t0, 0);
}

/* lipt_gemm_packed at ctx->precision. */
static inline void lipt_gemm_packed_p(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, const float *A,
                                      const float *B, float *C, float beta) {
    lipt_gemm_p(ctx, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

/* lipt_gemm_gemv at ctx->precision (the sgemv shortcut is float32's; the low precisions take lipt_gemm_lowp). */
static inline void lipt_gemm_gemv_p(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    if (ctx->precision == LIPT_PRECISION_FLOAT32) lipt_gemm_gemv(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    lipt_kprof_end(ctx, acc, t0, 0);
}

#endif
