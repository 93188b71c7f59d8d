/* Private: the one way lipt calls single-precision GEMM (row-major; OpenBLAS, or oneDNN's sgemm for large
 * products: src/kernels/gemm.c), for the ops in src/ops/, the certificates and the decoder; and lipt_gemm_p, the same
 * product at the precision of a context (--precision), which the model's own products (matmul, linear, attention,
 * the decoder) go through. Bounds, spectral norms, Jacobians and inversion call lipt_gemm (or BLAS on one thread: lipt_blas_serial)
 * directly: they never see bf16. */
#ifndef LIPT_KERNELS_GEMM_H
#define LIPT_KERNELS_GEMM_H

#include <cblas.h>
#include <omp.h>

#include "kernels/lowp.h"

/* C = alpha op(A) op(B) + beta C with op(A) [M,K], op(B) [K,N], C [M,N] and row strides lda, ldb, ldc; op
 * transposes when ta / tb. An empty product (M or N <= 0) returns at once: BLAS would reject its strides.
 * Which library computes it depends on the shape only (src/kernels/gemm.c): OpenBLAS's sgemm, or, in builds with
 * oneDNN, oneDNN's for products from LIPT_GEMM_DNNL_MIN multiply-adds; either way in blocks fixed by the shape
 * (lipt_gemm_cut_fixed), each one single-thread call. The results are the same bits on any --threads, whichever
 * kernels the libraries picked for the CPU (OPENBLAS_CORETYPE, oneDNN's ISA); on another kernel set they differ
 * within the float32 bound. */
void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
#define LIPT_GEMM_DNNL_MIN ((double)(1 << 22))
/* lipt_gemm, then rows(rows_arg, r0, r1) over every row of C exactly once: for a cut by rows on the thread that
 * computed the block, right after it, while the block is in that thread's cache (the linear layer's bias and
 * activation); for a cut by columns after all blocks, in runs of 32 rows. rows must treat each row on its own (its
 * results may not depend on how the rows are grouped): then the bits are lipt_gemm's followed by the pass. */
typedef void (*lipt_gemm_rows_fn)(void *arg, int r0, int r1);
void lipt_gemm_rows(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc, lipt_gemm_rows_fn rows, void *rows_arg);
/* 1 when lipt_gemm computes an M x N product over K through oneDNN (whose beta = 0 never reads C, so a caller may
 * store into an unzeroed buffer; OpenBLAS's sgemm runs beta = 0 as a zeroing pass of its own), else 0. */
int lipt_gemm_on_dnnl(int M, int N, int K);

/* How a cut runs: n blocks of `side` rows (by_rows) or columns of C, the last one shorter; each block is one
 * single-thread library call. */
typedef struct {
    int by_rows, side, n;
} lipt_gemm_cut;

/* The bf16 products' cut (gemm_lowp.c): blocks of C's rows (when M >= N) or columns, two per thread of nt, their sides
 * multiples of 16 floats (the kernels' vectors); one block when nt is 1. The blocks follow the thread count, and so
 * may an entry's sum (oneDNN's kernels take a block's tail differently): bf16 products are not promised the same bits
 * on another thread count (docs/RELIABILITY.md). */
static inline lipt_gemm_cut lipt_gemm_cut_for(int M, int N, int nt) {
    const int by_rows = M >= N, dim = by_rows ? M : N;
    const int side = nt <= 1 ? dim : ((dim + 2 * nt - 1) / (2 * nt) + 15) & ~15;
    return (lipt_gemm_cut){by_rows, side, (dim + side - 1) / side};
}

/* lipt_gemm's cut, for both libraries: blocks that depend on the shape only, never on the thread count. A library's
 * own threading splits a product by the thread count, and a single-thread call's sum for an entry can depend on the
 * block it falls in (where the kernels' tails are): OpenBLAS's Haswell and Prescott kernels gave different bits on
 * 1, 2 and 3 threads on 128 x 128 x 64, oneDNN's AVX2 ones on 2 and 3 blocks of 300 x 257 x 129 (their AVX-512 ones
 * and OpenBLAS's SkylakeX and Zen kernels happened to agree). With the blocks fixed, every thread count makes the same
 * calls. The side: 256 rows (or columns) from 2048, 128 from 512, a quarter below (the blocks the model's large
 * products ran fastest in at 2 threads on oneDNN, within 1.3 % of two blocks per thread), a multiple of 16 floats (the
 * kernels' vectors), but at least LIPT_GEMM_BLOCK_WORK multiply-adds (OpenBLAS itself runs products up to 2^18 on one
 * thread: each call packs its operands, which smaller blocks would repeat too often). A side fixed by the shape also
 * caps how many threads share a product (2048 rows: 8 blocks). */
#define LIPT_GEMM_BLOCK_WORK ((double)(1 << 20))

static inline lipt_gemm_cut lipt_gemm_cut_fixed(int M, int N, int K) {
    const int by_rows = M >= N, dim = by_rows ? M : N, other = by_rows ? N : M;
    long long side = dim >= 2048 ? 256 : dim >= 512 ? 128 : ((long long)dim + 3) / 4;
    const double floor_side = LIPT_GEMM_BLOCK_WORK / ((double)(other > 0 ? other : 1) * (K > 0 ? K : 1));
    if (floor_side >= dim) side = dim;
    else if ((double)side < floor_side) {
        side = (long long)floor_side;
        if ((double)side < floor_side) side++; /* rounded up */
    }
    side = (side + 15) & ~15LL;
    if (side > dim) side = dim;
    if (side < 1) side = 1;
    return (lipt_gemm_cut){by_rows, (int)side, (int)((dim + side - 1) / side)};
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
 * sgemv, in blocks of C's columns fixed by the shape as lipt_gemm's (the same bits on any --threads): OpenBLAS's
 * sgemm packs its operands, which costs more than the product at these sizes. sgemv may round differently from
 * sgemm: for results that must match a forward pass to rounding, not bit for bit. */
void lipt_gemm_gemv(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);

/* A library call on the calling thread only, between lipt_blas_serial_begin and lipt_blas_serial_end(its value):
 * OpenBLAS's OpenMP build and oneDNN (OpenMP runtime) take the thread count of each call from the caller's
 * omp_get_max_threads() (and run one thread inside an active parallel region), so setting the caller's count to 1
 * for the call, and back, leaves the libraries' own state alone. For calls whose result must not depend on how the
 * library would split them (lipt_gemm's blocks, the spectral norms' Gram products). */
static inline int lipt_blas_serial_begin(void) {
    const int nt = omp_get_max_threads();
    if (nt > 1) omp_set_num_threads(1);
    return nt;
}
static inline void lipt_blas_serial_end(int nt) {
    if (nt > 1) omp_set_num_threads(nt);
}

/* One block of lipt_gemm as the library call it makes: oneDNN's sgemm in builds with oneDNN (OpenBLAS for arguments
 * it rejects), else OpenBLAS's; on the threads the caller's omp_get_max_threads() gives (lipt_blas_serial_begin for
 * one). */
void lipt_sgemm_block(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc);

/* The weight gradients' products (src/kernels/gemm_ksplit.c): C [M,N] = alpha Aᵀ B + beta C with A [K,M] and B [K,N]
 * (row strides lda, ldb) cut along K into chunks of lipt_gemm_ksplit_chunk (fixed by the shape), the partial sums
 * in ctx's arena, added in chunk order: the same bits on any --threads. lipt_gemm_ksplit_wanted: whether lipt_gemm_p
 * runs a product so (A transposed, B not, oneDNN's size, K at least 2048 and twice C's larger side, outside a
 * parallel construct). */
int lipt_gemm_ksplit_chunk(int M, int N, int K);
/* 1 when lipt_gemm_ksplit computes the chunks as Cᵀ = Bᵀ A (A's row stride lda of 1024 floats or more, and above
 * B's ldb), 0 when as C = Aᵀ B. */
int lipt_gemm_ksplit_transposed(int lda, int ldb);
int lipt_gemm_ksplit_wanted(int ta, int tb, int M, int N, int K);
void lipt_gemm_ksplit(lipt_ctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc);
/* C [M,N] (row stride ldc) += the nk - 1 partial sums at P ([M,N] each, dense, chunk 1 first), each entry in chunk
 * order by one thread (several outside a parallel region): lipt_gemm_ksplit's last pass, and bf16's (gemm_lowp.c). */
void lipt_gemm_ksplit_sum(int M, int N, int nk, const float *P, float *C, int ldc);

/* lipt_gemm at ctx->precision: float32 is lipt_gemm itself, or for a weight gradient lipt_gemm_ksplit; the others
 * lipt_gemm_lowp (kernels/lowp.h). */
static inline void lipt_gemm_p(lipt_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (ctx->precision != LIPT_PRECISION_FLOAT32) lipt_gemm_lowp(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (lipt_gemm_ksplit_wanted(ta, tb, M, N, K)) lipt_gemm_ksplit(ctx, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else lipt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
