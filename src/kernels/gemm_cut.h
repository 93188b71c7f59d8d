/* Private: how lipt_gemm and the bf16 products cut a product into single-thread library calls, and how such a call
 * is kept on one thread (issue 50: the bottom of the GEMM files, which the block runners gemm.c, gemm_ksplit.c and
 * gemm_lowp.c share and which calls none of them). Inline rules on shapes only. */
#ifndef LIPT_KERNELS_GEMM_CUT_H
#define LIPT_KERNELS_GEMM_CUT_H

#include <omp.h>
#include <stddef.h>

/* Products from this many multiply-adds go through oneDNN in builds with it (lipt_gemm_on_dnnl). */
#define LIPT_GEMM_DNNL_MIN ((double)(1 << 22))
/* 1 when lipt_gemm computes an M x N product over K through oneDNN (whose beta = 0 never reads C, so a caller may
 * store into an unzeroed buffer; OpenBLAS's sgemm runs beta = 0 as a zeroing pass of its own), else 0. */
static inline int lipt_gemm_on_dnnl(int M, int N, int K) {
#ifdef LIPT_HAVE_DNNL
    return M > 0 && N > 0 && (double)M * N * K >= LIPT_GEMM_DNNL_MIN;
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

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

#endif
