/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_softmax(lipt_ctx *ctx, lipt_tensor *x) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "softmax");
}
void lipt_softmax_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "softmax");
}

