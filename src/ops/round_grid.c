/* round_grid: values rounded to the nearest multiple of 2^-bits, the gradient passed straight through.
 *
 * Why: a coupling block adds a branch to the residual stream, and a float sum x + g is undone by y - g only when
 * it was exact. With x and g both multiples of q = 2^-bits and |x + g| < 2^(24 - bits), every sum is exact in
 * float32, so the coupling block inverts bit for bit (reversible training, --memory invert). The rounding moves a
 * value by at most q/2; its derivative, zero almost everywhere, is replaced by the identity (straight-through),
 * which is what the unrounded model's gradient is. */
#include "lipt/ops.h"

#include <math.h>

#define RG_PAR_MIN 32768

lipt_tensor *lipt_round_grid(lipt_ctx *ctx, lipt_tensor *x, int bits) {
    LIPT_CHECK(bits >= 1 && bits <= 40, "round_grid: %d bits (1..40)", bits);
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    const float up = ldexpf(1.0f, bits), down = ldexpf(1.0f, -bits); /* powers of two: exact scalings */
    const float *X = x->data;
    float *Y = out->data;
    const size_t n = x->numel;
#pragma omp parallel for schedule(static) if (n >= RG_PAR_MIN)
    for (long i = 0; i < (long)n; i++) Y[i] = rintf(X[i] * up) * down;
    lipt_record(ctx, LIPT_OP_ROUND_GRID, out, 1, (lipt_tensor *[]){x});
    return out;
}

void lipt_round_grid_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const float *G = node->out->grad;
    const size_t n = node->out->numel;
#pragma omp parallel for schedule(static) if (n >= RG_PAR_MIN)
    for (long i = 0; i < (long)n; i++) dx[i] += G[i];
}
