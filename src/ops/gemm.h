/* Private: the one way lipt calls single-precision GEMM (row-major; OpenBLAS, or oneDNN's sgemm for large products:
 * src/ops/gemm.c), for the kernels in src/ops/ and the decoder; and lipt_gemm_p, the same product at the precision of a context (--precision), which the model's own
 * products (matmul, linear, attention, the decoder) go through. Bounds, spectral norms, Jacobians and inversion call
 * lipt_gemm (or BLAS) directly: they never see bf16. */
#ifndef LIPT_OPS_GEMM_H
#define LIPT_OPS_GEMM_H

#include <cblas.h>

#include "ops/lowp.h"

/* C = alpha op(A) op(B) + beta C with op(A) [M,K], op(B) [K,N], C [M,N] and row strides lda, ldb, ldc; op
 * transposes when ta / tb. An empty product (M or N <= 0) returns at once: BLAS would reject its strides.
 * Which library computes it depends on the shape only (src/ops/gemm.c): OpenBLAS's sgemm, or, in builds with oneDNN,
 * products from LIPT_GEMM_DNNL_MIN multiply-adds as fixed blocks of oneDNN's sgemm. Never on the thread count, so
 * results are the same bits on any --threads. */
void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
#define LIPT_GEMM_DNNL_MIN ((double)(1 << 22))
/* 1 when lipt_gemm computes an M x N product over K through oneDNN (whose beta = 0 never reads C, so a caller may
 * store into an unzeroed buffer; OpenBLAS's sgemm runs beta = 0 as a zeroing pass of its own), else 0. */
int lipt_gemm_on_dnnl(int M, int N, int K);

/* The two libraries' own sgemm, as a reference rate (lipt bench's SGEMM): lipt_sgemm_lib(0, ...) is cblas_sgemm,
 * lipt_sgemm_lib(1, ...) oneDNN's dnnl_sgemm on all threads with its own partition; returns 0, or -1 when the build
 * has no such library (1 without oneDNN). */
int lipt_sgemm_lib(int lib, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc);

/* lipt_gemm on packed operands (row strides their widths), alpha 1: C [M,N] = op(A) op(B) + beta C. */
static inline void lipt_gemm_packed(int ta, int tb, int M, int N, int K, const float *A, const float *B, float *C,
                                    float beta) {
    lipt_gemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

/* lipt_gemm, except that one row of A (M = 1, no transpose: the decoder's usual case, one token) goes through
 * sgemv: OpenBLAS's sgemm packs its operands, which costs more than the product at these sizes. sgemv may round
 * differently from sgemm: for results that must match a forward pass to rounding, not bit for bit. */
static inline void lipt_gemm_gemv(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 1 && N > 0 && !ta) {
        if (tb) cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, B, ldb, A, 1, beta, C, 1);
        else cblas_sgemv(CblasRowMajor, CblasTrans, K, N, alpha, B, ldb, A, 1, beta, C, 1);
        return;
    }
    lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* lipt_gemm at ctx->precision: float32 is lipt_gemm itself (one branch), the others lipt_gemm_lowp (ops/lowp.h). */
static inline void lipt_gemm_p(lipt_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (ctx->precision == LIPT_PRECISION_FLOAT32) lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* lipt_gemm_packed at ctx->precision. */
static inline void lipt_gemm_packed_p(lipt_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A,
                                      const float *B, float *C, float beta) {
    lipt_gemm_p(ctx, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

/* lipt_gemm_gemv at ctx->precision (the sgemv shortcut is float32's; the low precisions take lipt_gemm_lowp). */
static inline void lipt_gemm_gemv_p(lipt_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (ctx->precision == LIPT_PRECISION_FLOAT32) lipt_gemm_gemv(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#endif
