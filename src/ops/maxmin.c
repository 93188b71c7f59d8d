/* maxmin: the GroupSort activation with groups of two (Anil, Lucas, Grosse 2019): each pair of channels (2k, 2k+1)
 * becomes (max, min). A permutation per pair, so it is 1-Lipschitz and preserves gradient norms, which makes
 * Lipschitz-constrained networks more expressive than ReLU does at the same bound. And backward. */
#include "lipt/ops.h"

#include "kernels/kernels.h"

lipt_tensor *lipt_maxmin(lipt_ctx *ctx, lipt_tensor *x) {
    char sx[64];
    LIPT_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] % 2 == 0, "maxmin: last dim of %s must be even",
               lipt_shape_str(x, sx, 64));
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_record(ctx, LIPT_OP_MAXMIN, out, 1, (lipt_tensor *[]){x});
    lipt_maxmin_pass(x->data, out->data, x->numel);
    lipt_profile_op_end(ctx, LIPT_OP_MAXMIN); /* it recorded before computing */
    return out;
}

void lipt_maxmin_backward(lipt_ctx *ctx, lipt_node *node) {
    int fresh;
    float *dx = lipt_grad_of_fresh(ctx, node->in[0], &fresh);
    if (!dx) return;
    const float *a = node->in[0]->data, *g = node->out->grad;
    const size_t n = node->out->numel, nv = (n + LIPT_VW - 1) / LIPT_VW;
    const lipt_vi ix = lipt_pair_swap_idx();
#pragma omp parallel for schedule(static) if (n >= (1u << 17))
    for (size_t b = 0; b < nv; b++) {
        const size_t i = b * LIPT_VW;
        lipt_maxmin_grad(a + i, g + i, dx + i, lipt_vlanes(i, n), fresh, ix);
    }
}
