/* lipt_gemm: the float32 GEMM every product in lipt runs on, and the choice of library behind it.
 *
 * OpenBLAS 0.3.21's sgemm reaches 140-190 GFLOP/s on the model's large products at 2 threads on the Zen 4 machines
 * (its packing and partition suit 1024^3 better than 2048 x 256 x 1024), oneDNN 2.6's sgemm 200-220 on most of them
 * (docs/PERFORMANCE.md has the table); on the attention's per-head blocks (a few hundred thousand multiply-adds, one
 * thread each) OpenBLAS's small-matrix kernels are faster. So products from LIPT_GEMM_DNNL_MIN multiply-adds go to
 * oneDNN when the build has it, the rest to OpenBLAS.
 *
 * oneDNN's own partition of a product between threads is its choice, and its gemm driver may split the sum over K
 * (then a product's bits would depend on the thread count). Instead the product is cut into fixed blocks of C's rows
 * (or columns) by its shape alone, and each block is one single-thread dnnl_sgemm; lipt's threads share the blocks.
 * The same call then gives the same bits on any number of threads, and inside a parallel region (an inactive nested
 * one) the blocks run in turn. This is as fast as oneDNN's own partition or faster on the model's shapes. */
#include "ops/gemm.h"

#ifdef LIPT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static void sgemm_openblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                           int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

#ifdef LIPT_HAVE_DNNL
/* Rows (or columns) per block for a side of `dim`: from the measured rates of the model's shapes at 2 threads,
 * 256-row blocks for 2048 rows, 128 for 512-1024 (an even number of blocks for 2 threads: 768 columns make 6), and at
 * least four blocks below that (multiples of 16, the kernels' vector width). */
static int block_side(int dim) {
    if (dim >= 2048) return 256;
    if (dim >= 512) return 128;
    int b = (dim + 3) / 4;
    return (b + 15) & ~15;
}

static void sgemm_dnnl_blocked(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                               const float *B, int ldb, float beta, float *C, int ldc) {
    const int by_rows = M >= N, dim = by_rows ? M : N, side = block_side(dim), nb = (dim + side - 1) / side;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int i = 0; i < nb; i++) {
        const int o = i * side, n = dim - o < side ? dim - o : side;
        const float *Ab = A, *Bb = B;
        float *Cb = C;
        int m = M, w = N;
        if (by_rows) {
            Ab = ta ? A + o : A + (size_t)o * lda;
            Cb = C + (size_t)o * ldc;
            m = n;
        } else {
            Bb = tb ? B + (size_t)o * ldb : B + o;
            Cb = C + o;
            w = n;
        }
        /* one thread per block: inside this region oneDNN runs single-threaded (omp_in_parallel), and with one
         * thread in all there is one */
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, w, K, alpha, Ab, lda, Bb, ldb, beta, Cb, ldc) !=
            dnnl_success)
            sgemm_openblas(ta, tb, m, w, K, alpha, Ab, lda, Bb, ldb, beta, Cb, ldc); /* arguments it rejects */
    }
}
#endif

int lipt_gemm_on_dnnl(int M, int N, int K) {
#ifdef LIPT_HAVE_DNNL
    return M > 0 && N > 0 && (double)M * N * K >= LIPT_GEMM_DNNL_MIN;
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

void lipt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef LIPT_HAVE_DNNL
    if (lipt_gemm_on_dnnl(M, N, K)) {
        sgemm_dnnl_blocked(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int lipt_sgemm_lib(int lib, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc) {
    if (lib == 0) {
        if (M > 0 && N > 0) sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
#ifdef LIPT_HAVE_DNNL
    if (lib == 1) {
        if (M > 0 && N > 0 &&
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != dnnl_success)
            return -1;
        return 0;
    }
#endif
    return -1;
}
