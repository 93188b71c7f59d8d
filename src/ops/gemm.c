/* lipt_gemm: the float32 GEMM every product in lipt runs on, and the choice of library behind it.
 *
 * OpenBLAS 0.3.21's sgemm reaches 140-190 GFLOP/s on the model's large products at 2 threads on the Zen 4 machines
 * (its packing and partition suit 1024^3 better than 2048 x 256 x 1024), oneDNN 2.6's sgemm 200-220 on most of them
 * (docs/PERFORMANCE.md has the table); on the attention's per-head blocks (a few hundred thousand multiply-adds, one
 * thread each) OpenBLAS's small-matrix kernels are faster. So products from LIPT_GEMM_DNNL_MIN multiply-adds go to
 * oneDNN when the build has it, the rest to OpenBLAS.
 *
 * oneDNN's own partition of a product between threads is its choice, and its gemm driver may split the sum over K
 * (then a product's bits would depend on the thread count). Instead the product is cut into blocks of C's rows (or
 * columns), two per thread, and each block is one single-thread dnnl_sgemm. A single-thread call sums each entry over
 * K the same way whatever the block's extent (checked bit for bit on the model's shapes with blocks of 16 to 4096
 * rows; test_ops_gemm checks 1, 2 and 3 threads and calls from inside a parallel region), so the bits do not depend on
 * the thread count. Two blocks per thread were 1.3 % faster than blocks of 128-256 rows over the model's products
 * at 2 threads, and as fast as oneDNN's own partition or faster. */
#include "ops/gemm.h"

#include <omp.h>

#ifdef LIPT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static void sgemm_openblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                           int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

#ifdef LIPT_HAVE_DNNL
static void sgemm_dnnl_blocked(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                               const float *B, int ldb, float beta, float *C, int ldc) {
    /* inside a parallel region (an inactive nested one) the product runs on the calling thread: one call */
    const lipt_gemm_cut cut = lipt_gemm_cut_for(M, N, omp_in_parallel() ? 1 : omp_get_max_threads());
#pragma omp parallel for schedule(static) if (cut.n > 1)
    for (int i = 0; i < cut.n; i++) {
        const lipt_gemm_block k = lipt_gemm_block_at(cut, i, ta, tb, M, N, lda, ldb, ldc);
        /* one thread per block: inside this region oneDNN runs single-threaded (omp_in_parallel), and with one
         * thread in all there is one */
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', k.m, k.w, K, alpha, A + k.a, lda, B + k.b, ldb, beta, C + k.c,
                       ldc) != dnnl_success) /* arguments it rejects */
            sgemm_openblas(ta, tb, k.m, k.w, K, alpha, A + k.a, lda, B + k.b, ldb, beta, C + k.c, ldc);
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
