/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_spectral_norm(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int iters) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "spectral_norm");
}
void lipt_spectral_norm_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "spectral_norm");
}

