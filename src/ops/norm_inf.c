/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_norm_inf(lipt_ctx *ctx, lipt_tensor *w, int transpose, int n_blocks) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "norm_inf");
}
void lipt_norm_inf_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "norm_inf");
}

