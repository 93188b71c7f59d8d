/* Private: the one way lipt calls single-precision GEMM (row-major; OpenBLAS, or oneDNN's sgemm for large
 * products: src/ops/gemm.c), for the kernels in src/ops/ and the decoder; and lipt_gemm_p, the same product at the
 * precision of a context (--precision), which the model's own products (matmul, linear, attention, the decoder) go through. Bounds, spectral norms, Jacobians and inversion call
 * lipt_gemm (or BLAS) directly: they never see bf16. */
#ifndef LIPT_OPS_GEMM_H
#define LIPT_OPS_GEMM_H

#include <cblas.h>

#include "ops/lowp.h"

/* C = alpha op(A) op(B) + beta C with op(A) [M,K], op(B) [K,N], C [M,N] and row strides lda, ldb, ldc; op
 * transposes when ta / tb. An empty product (M or N <= 0) returns at once: BLAS would reject its strides.
 * Which library computes it depends on the shape only (src/ops/gemm.c): OpenBLAS's sgemm, or, in builds with oneDNN,
 * products from LIPT_GEMM_DNNL_MIN multiply-adds as blocks of oneDNN's sgemm (lipt_gemm_cut_for). The results are
 * the same bits on any --threads. */
void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
#define LIPT_GEMM_DNNL_MIN ((double)(1 << 22))
/* 1 when lipt_gemm computes an M x N product over K through oneDNN (whose beta = 0 never reads C, so a caller may
 * store into an unzeroed buffer; OpenBLAS's sgemm runs beta = 0 as a zeroing pass of its own), else 0. */
int lipt_gemm_on_dnnl(int M, int N, int K);

/* How a large product is cut for the threads (lipt_gemm's oneDNN path, the bf16 products): into blocks of C's rows
 * (when M >= N) or columns, two per thread of nt, their sides multiples of 16 floats (the kernels' vectors); one
 * block when nt is 1. */
typedef struct {
    int by_rows, side, n; /* n blocks of `side` rows or columns, the last one shorter */
} lipt_gemm_cut;

static inline lipt_gemm_cut lipt_gemm_cut_for(int M, int N, int nt) {
    const int by_rows = M >= N, dim = by_rows ? M : N;
    const int side = nt <= 1 ? dim : ((dim + 2 * nt - 1) / (2 * nt) + 15) & ~15;
    return (lipt_gemm_cut){by_rows, side, (dim + side - 1) / side};
}

/* Block i of a cut: its rows m and columns w of C, and the element offsets of its part of A, B, C and the bias (N
 * floats) in operands with row strides lda, ldb, ldc (for packed copies kept at those strides too). */
typedef struct {
    int m, w;
    size_t a, b, c, bias;
} lipt_gemm_block;

static inline lipt_gemm_block lipt_gemm_block_at(lipt_gemm_cut cut, int i, int ta, int tb, int M, int N, int lda,
                                                 int ldb, int ldc) {
    const int o = i * cut.side, dim = cut.by_rows ? M : N, n = dim - o < cut.side ? dim - o : cut.side;
    lipt_gemm_block k = {M, N, 0, 0, 0, 0};
    if (cut.by_rows) { /* rows o.. of op(A): columns of a transposed A */
        k.m = n;
        k.a = ta ? (size_t)o : (size_t)o * lda;
        k.c = (size_t)o * ldc;
    } else {
        k.w = n;
        k.b = tb ? (size_t)o * ldb : (size_t)o;
        k.c = k.bias = (size_t)o;
    }
    return k;
}

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
