/* The SGEMM reference of `lipt bench` (gemm_ref.h) on the library's private kernels. */
#include "gemm_ref.h"

#include "autograd/kctx.h"
#include "kernels/kernels.h"

int gemm_ref_lib(int lib, int N, const float *A, const float *B, float *C) {
    return lipt_sgemm_lib(lib, 0, 0, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
}

void gemm_ref_at_precision(lipt_ctx *ctx, int N, const float *A, const float *B, float *C) {
    lipt_gemm_p(LIPT_KC(ctx), 0, 0, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
}
