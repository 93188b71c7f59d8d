/* dropout: inverted dropout with a mask drawn from ctx->rng, saved for backward. */
#include "lipt/ops.h"

#include <stdint.h>

#define DO_PAR_MIN 32768

/* saved: keep mask (one byte per element). farg: 0 scale 1/(1-p). */
lipt_tensor *lipt_dropout(lipt_ctx *ctx, lipt_tensor *x, float p) {
    LIPT_CHECK(p >= 0.0f && p < 1.0f, "dropout: p = %g outside [0,1)", (double)p);
    if (!ctx->training || p == 0.0f) return x;
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_node *node = lipt_record(ctx, LIPT_OP_DROPOUT, out, 1, (lipt_tensor *[]){x});
    const float scale = 1.0f / (1.0f - p);
    const size_t n = x->numel;
    const float *X = x->data;
    float *Y = out->data;
    /* The mask is drawn serially, one uniform per element whether or not a node is recorded,
     * so it is a pure function of the RNG state and the RNG advances the same way in both modes. */
    if (node) {
        uint8_t *mask = lipt_arena_alloc(&ctx->arena, n ? n : 1);
        for (size_t i = 0; i < n; i++) mask[i] = lipt_rng_uniform(&ctx->rng) >= (double)p;
        node->saved = mask;
        node->farg[0] = scale;
#pragma omp parallel for schedule(static) if (n >= DO_PAR_MIN)
        for (long i = 0; i < (long)n; i++) Y[i] = mask[i] ? X[i] * scale : 0.0f;
    } else {
        for (size_t i = 0; i < n; i++) Y[i] = lipt_rng_uniform(&ctx->rng) >= (double)p ? X[i] * scale : 0.0f;
    }
    lipt_profile_op_end(ctx, LIPT_OP_DROPOUT); /* it recorded before computing */
    return out;
}

void lipt_dropout_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const uint8_t *mask = node->saved;
    const float scale = node->farg[0], *G = node->out->grad;
    const size_t n = node->out->numel;
#pragma omp parallel for schedule(static) if (n >= DO_PAR_MIN)
    for (long i = 0; i < (long)n; i++)
        if (mask[i]) dx[i] += G[i] * scale;
}
