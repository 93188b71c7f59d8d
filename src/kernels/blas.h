/* Private: the BLAS routines other than lipt_gemm's products that the certificates need (src/lipschitz), so that
 * only src/kernels names OpenBLAS. Each is the library routine itself (the same bits as calling it directly). */
#ifndef LIPT_KERNELS_BLAS_H
#define LIPT_KERNELS_BLAS_H

/* The upper triangle of C [n,n] (row stride ldc) = op(A) op(A)ᵀ, op(A) [n,m] = A (trans 0) or Aᵀ with A [m,n], beta
 * 0, on the calling thread alone: OpenBLAS would split ssyrk by the thread count, and how it splits can change an
 * entry's sum on some kernel sets. */
void lipt_ssyrk_upper_serial(int trans, int n, int m, const float *A, int lda, float *C, int ldc);
/* C = alpha op(A) op(B) + beta C as cblas_sgemm (row-major), on the calling thread alone, for the same reason. */
void lipt_sgemm_serial(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc);
/* y [M] = alpha A x + beta y with A [M,N] (row stride lda) in double: cblas_dgemv, on the caller's threads. */
void lipt_dgemv(int M, int N, double alpha, const double *A, int lda, const double *x, double beta, double *y);

#endif
