/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_attention_dp(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "attention_dp");
}
void lipt_attention_dp_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "attention_dp");
}

