/* Private: the one way lipt calls single-precision GEMM (row-major; OpenBLAS, or oneDNN's sgemm for large
 * products: src/kernels/gemm.c), for the ops in src/ops/, the certificates and the decoder; lipt_gemm_p (gemm_p.h) is
 * the same product at the precision of a kernel context (--precision), which the model's own products (matmul,
 * linear, attention, the decoder) go through. Bounds, spectral norms, Jacobians and inversion call lipt_gemm (or
 * BLAS on one thread: blas.h) directly: they never see bf16. */
#ifndef LIPT_KERNELS_GEMM_H
#define LIPT_KERNELS_GEMM_H

#include "kernels/gemm_cut.h"
#include "kernels/kctx.h"

/* C = alpha op(A) op(B) + beta C with op(A) [M,K], op(B) [K,N], C [M,N] and row strides lda, ldb, ldc; op
 * transposes when ta / tb. An empty product (M or N <= 0) returns at once: BLAS would reject its strides.
 * Which library computes it depends on the shape only (src/kernels/gemm.c): OpenBLAS's sgemm, or, in builds with
 * oneDNN, oneDNN's for products from LIPT_GEMM_DNNL_MIN multiply-adds; either way in blocks fixed by the shape
 * (lipt_gemm_cut_fixed), each one single-thread call. The results are the same bits on any --threads, whichever
 * kernels the libraries picked for the CPU (OPENBLAS_CORETYPE, oneDNN's ISA); on another kernel set they differ
 * within the float32 bound. */
void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
/* lipt_gemm, then rows(rows_arg, r0, r1) over every row of C exactly once: for a cut by rows on the thread that
 * computed the block, right after it, while the block is in that thread's cache (the linear layer's bias and
 * activation); for a cut by columns after all blocks, in runs of 32 rows. rows must treat each row on its own (its
 * results may not depend on how the rows are grouped): then the bits are lipt_gemm's followed by the pass. */
typedef void (*lipt_gemm_rows_fn)(void *arg, int r0, int r1);
void lipt_gemm_rows(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc, lipt_gemm_rows_fn rows, void *rows_arg);

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
void lipt_gemm_ksplit(lipt_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc);
/* C [M,N] (row stride ldc) += the nk - 1 partial sums at P ([M,N] each, dense, chunk 1 first), each entry in chunk
 * order by one thread (several outside a parallel region): lipt_gemm_ksplit's last pass, and bf16's (gemm_lowp.c). */
void lipt_gemm_ksplit_sum(int M, int N, int nk, const float *P, float *C, int ldc);

#endif
