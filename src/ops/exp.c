/* exp: element-wise exponential (ActNorm's positive scale exp(s)), and backward. */
#include "lipt/ops.h"

#include <math.h>

lipt_tensor *lipt_exp(lipt_ctx *ctx, lipt_tensor *x) {
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_record(ctx, LIPT_OP_EXP, out, 1, (lipt_tensor *[]){x});
    for (size_t i = 0; i < x->numel; i++) out->data[i] = expf(x->data[i]);
    lipt_profile_op_end(ctx, LIPT_OP_EXP); /* it recorded before computing */
    return out;
}

/* d exp(x) = exp(x) dx: the output is the derivative. */
void lipt_exp_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const float *y = node->out->data, *g = node->out->grad;
    for (size_t i = 0; i < node->out->numel; i++) dx[i] += g[i] * y[i];
}
