/* The certificates' BLAS routines (kernels/blas.h): thin wrappers, so that the BLAS header stays in src/kernels. */
#include "kernels/blas.h"

#include <cblas.h>

#include "kernels/gemm.h"

void lipt_ssyrk_upper_serial(int trans, int n, int m, const float *A, int lda, float *C, int ldc) {
    const int saved = lipt_blas_serial_begin();
    cblas_ssyrk(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, n, m, 1.0f, A, lda, 0.0f, C, ldc);
    lipt_blas_serial_end(saved);
}

void lipt_sgemm_serial(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    const int saved = lipt_blas_serial_begin();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
    lipt_blas_serial_end(saved);
}

void lipt_dgemv(int M, int N, double alpha, const double *A, int lda, const double *x, double beta, double *y) {
    cblas_dgemv(CblasRowMajor, CblasNoTrans, M, N, alpha, A, lda, x, 1, beta, y, 1);
}
