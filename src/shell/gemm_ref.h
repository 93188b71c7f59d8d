/* The SGEMM reference of `lipt bench`: an N x N x N product by one of the libraries lipt's products run on, or at a
 * context's precision as the model's products compute it. The binary's window on the library's private kernels
 * (src/kernels/), so that train/ and eval/ see only include/ and the shell. */
#ifndef LIPT_SHELL_GEMM_REF_H
#define LIPT_SHELL_GEMM_REF_H

#include "lipt/autograd.h"

/* C = A B, all row-major N x N, by library lib: 0 OpenBLAS's sgemm, 1 oneDNN's sgemm, each on all threads
 * with its own partition. Returns 0, or -1 when the build has no such library (1 without oneDNN). */
int gemm_ref_lib(int lib, int N, const float *A, const float *B, float *C);

/* C = A B, all row-major N x N, through the model's product at ctx's precision (operand conversion included). */
void gemm_ref_at_precision(lipt_ctx *ctx, int N, const float *A, const float *B, float *C);

#endif
