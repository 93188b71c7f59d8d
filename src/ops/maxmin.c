/* maxmin: the GroupSort activation with groups of two (Anil, Lucas, Grosse 2019): each pair of channels (2k, 2k+1)
 * becomes (max, min). A permutation per pair, so it is 1-Lipschitz and preserves gradient norms, which makes
 * Lipschitz-constrained networks more expressive than ReLU does at the same bound. And backward. */
#include "lipt/ops.h"

lipt_tensor *lipt_maxmin(lipt_ctx *ctx, lipt_tensor *x) {
    char sx[64];
    LIPT_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] % 2 == 0, "maxmin: last dim of %s must be even",
               lipt_shape_str(x, sx, 64));
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_record(ctx, LIPT_OP_MAXMIN, out, 1, (lipt_tensor *[]){x});
    const size_t pairs = x->numel / 2;
    const float *a = x->data;
    float *y = out->data;
#pragma omp parallel for schedule(static) if (pairs >= (1u << 16))
    for (size_t p = 0; p < pairs; p++) {
        const float u = a[2 * p], v = a[2 * p + 1];
        /* ties keep the order (u first), so the backward below routes each gradient to one input */
        y[2 * p] = u >= v ? u : v;
        y[2 * p + 1] = u >= v ? v : u;
    }
    return out;
}

void lipt_maxmin_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const float *a = node->in[0]->data, *g = node->out->grad;
    const size_t pairs = node->out->numel / 2;
#pragma omp parallel for schedule(static) if (pairs >= (1u << 16))
    for (size_t p = 0; p < pairs; p++) {
        const int keep = a[2 * p] >= a[2 * p + 1];
        dx[2 * p] += keep ? g[2 * p] : g[2 * p + 1];
        dx[2 * p + 1] += keep ? g[2 * p + 1] : g[2 * p];
    }
}
