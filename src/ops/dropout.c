/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_dropout(lipt_ctx *ctx, lipt_tensor *x, float p) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "dropout");
}
void lipt_dropout_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "dropout");
}

