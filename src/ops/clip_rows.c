/* clip_rows: each row projected onto the Euclidean ball of radius R (x · min(1, R/‖x‖)), and backward. */
#include "lipt/ops.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#define CLIP_PAR_WORK ((size_t)1 << 15)

/* Row norms in double: the scale of a clipped row is R/‖x‖, stored per row for backward (0 marks "not clipped"). */
lipt_tensor *lipt_clip_rows(lipt_ctx *ctx, lipt_tensor *x, float R) {
    char sx[64];
    LIPT_CHECK(x->ndim >= 1 && x->numel > 0, "clip_rows: empty x %s", lipt_shape_str(x, sx, 64));
    LIPT_CHECK(R > 0 && isfinite(R), "clip_rows: radius %g must be positive and finite", (double)R);
    const int D = x->shape[x->ndim - 1];
    const size_t rows = x->numel / (size_t)D;
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_node *node = lipt_record(ctx, LIPT_OP_CLIP_ROWS, out, 1, (lipt_tensor *[]){x});
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    float *scale = lipt_arena_alloc(&ctx->arena, rows * sizeof(float));
#pragma omp parallel for schedule(static) if (x->numel >= CLIP_PAR_WORK)
    for (size_t r = 0; r < rows; r++) {
        scale[r] = lipt_clip_row(x->data + r * D, out->data + r * D, D, R);
    }
    if (node) {
        node->saved = scale;
        node->iarg[0] = D;
        node->farg[0] = R;
    } else {
        lipt_arena_release(&ctx->arena, mk);
    }
    lipt_profile_op_end(ctx, LIPT_OP_CLIP_ROWS); /* it recorded before computing */
    return out;
}

/* Clipped row y = R x/‖x‖: dx = (R/‖x‖)(dy − x̂ (x̂·dy)), x̂ = x/‖x‖ = y/R. Unclipped: dx = dy. */
void lipt_clip_rows_backward(lipt_ctx *ctx, lipt_node *node) {
    int fresh; /* every row is written: = on a fresh buffer */
    float *dx = lipt_grad_of_fresh(ctx, node->in[0], &fresh);
    if (!dx) return;
    const int D = node->iarg[0];
    const double R = node->farg[0];
    const float *scale = node->saved, *y = node->out->data, *dy = node->out->grad;
    const size_t rows = node->out->numel / (size_t)D;
#pragma omp parallel for schedule(static) if (node->out->numel >= CLIP_PAR_WORK)
    for (size_t r = 0; r < rows; r++) {
        const float *yr = y + r * D, *gr = dy + r * D;
        float *dr = dx + r * D;
        if (scale[r] == 0.0f) {
            if (fresh) memcpy(dr, gr, (size_t)D * sizeof(float));
            else for (int c = 0; c < D; c++) dr[c] += gr[c];
            continue;
        }
        const double k = lipt_dot_f64(yr, gr, (size_t)D) / (R * R); /* x̂·dy / R, so that x̂ (x̂·dy) = y k */
        const float f = scale[r];
        if (fresh) for (int c = 0; c < D; c++) dr[c] = f * (float)(gr[c] - yr[c] * k);
        else for (int c = 0; c < D; c++) dr[c] += f * (float)(gr[c] - yr[c] * k);
    }
}
