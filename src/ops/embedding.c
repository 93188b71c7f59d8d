/* STUB: to be replaced by the real kernels. */
#include "lipt/ops.h"

lipt_tensor *lipt_embedding(lipt_ctx *ctx, lipt_tensor *table, const int *ids, int ndim, const int *out_shape) {
    (void)ctx;
    LIPT_DIE("op %s not implemented", "embedding");
}
void lipt_embedding_backward(lipt_ctx *ctx, lipt_node *node) {
    (void)ctx; (void)node;
    LIPT_DIE("backward of %s not implemented", "embedding");
}

