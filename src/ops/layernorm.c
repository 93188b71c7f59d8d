/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_layernorm(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *gamma, lipt_tensor *beta, float eps) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "layernorm");
}
void lipt_layernorm_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "layernorm");
}

