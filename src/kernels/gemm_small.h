/* Private: float32 products with one small operand (at most LIPT_GS_MAX columns), for the tied L2 attention's
 * per-head products ([B·T, d] x [d, d], the reduction [B·T, d]ᵀ x [B·T, d], [D, d] x [d, d]) with d a multiple of
 * the vector width. OpenBLAS packs both operands on every call, which at K = d = 64 costs about as much as the
 * product (50-70 GFLOP/s on one core against ~95 for a large SGEMM); these keep a tile of C in registers and read
 * the operands in place. Each element of C is one running sum over k in increasing order with fused multiply-adds,
 * then alpha and beta as BLAS applies them: the result does not depend on tiling or on how rows are split among
 * threads. */
#ifndef LIPT_KERNELS_GEMM_SMALL_H
#define LIPT_KERNELS_GEMM_SMALL_H

#include "kernels/gemm_p.h"

/* The widest small operand: N (and, transposed, its other side) up to this. */
#define LIPT_GS_MAX 128

/* Whether lipt_gemm_small takes this product: op(A) op(B) with ta, tb as lipt_gemm; not both transposed; N a
 * multiple of the vector width up to LIPT_GS_MAX; for tb, K up to LIPT_GS_MAX (B is transposed into a local copy);
 * for ta, M up to LIPT_GS_MAX (C is the small d x d result of a reduction over K). */
int lipt_gemm_small_ok(int ta, int tb, int M, int N, int K);

/* C = alpha op(A) op(B) + beta C exactly as lipt_gemm (C not read when beta is 0), for shapes lipt_gemm_small_ok
 * accepts; single-threaded. */
void lipt_gemm_small(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc);

/* lipt_gemm_p, through lipt_gemm_small when the context is float32 and the shape fits; the low precisions keep
 * lipt_gemm_p (their bf16 rounding of the operands). */
static inline void lipt_gemm_small_p(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                     int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0); /* lipt_gemm_p inside finds it taken: counted once */
    if (ctx->precision == LIPT_PRECISION_FLOAT32 && lipt_gemm_small_ok(ta, tb, M, N, K))
        lipt_gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm_p(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    lipt_kprof_end(ctx, acc, t0, 0);
}

#endif
