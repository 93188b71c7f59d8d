/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_relu(lipt_ctx *ctx, lipt_tensor *x) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "relu");
}
void lipt_relu_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "relu");
}

lipt_tensor *lipt_elu(lipt_ctx *ctx, lipt_tensor *x) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "elu");
}
void lipt_elu_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "elu");
}

lipt_tensor *lipt_gelu(lipt_ctx *ctx, lipt_tensor *x) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "gelu");
}
void lipt_gelu_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "gelu");
}

lipt_tensor *lipt_lipswish(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *beta) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "lipswish");
}
void lipt_lipswish_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "lipswish");
}

