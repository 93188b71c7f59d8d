/* Activations: ReLU, ELU (alpha 1), exact-erf GELU and LipSwish x·sigmoid(βx)/1.1, each with its backward; and
 * lipt_act_row, every activation of the model (MaxMin's pairs from maxmin.c) on one row, which the ops' forward
 * passes and the incremental decoder run. */
#include "lipt/ops.h"

#include <math.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* lipt_act_row over n floats on the context's threads, in the fixed chunks (the same bits on any thread count). */
static void act_pass(lipt_act_kind act, float beta, const float *x, float *y, size_t n) {
    const size_t nchunk = lipt_act_nchunk(n);
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        const size_t i = c * LIPT_ACT_CHUNK;
        lipt_act_row(act, beta, x + i, y + i, lipt_act_chunk_len(n, c));
    }
}

/* ---------------------------------------------------------------- ReLU */

lipt_tensor *lipt_relu(lipt_ctx *ctx, lipt_tensor *x) {
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    const size_t n = x->numel;
    act_pass(LIPT_ACT_RELU, 1.0f, x->data, out->data, n);
    lipt_record(ctx, LIPT_OP_RELU, out, 1, (lipt_tensor *[]){x});
    return out;
}

/* Subgradient 0 at x = 0, as in PyTorch. */
void lipt_relu_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const size_t n = node->in[0]->numel;
    const float *xi = node->in[0]->data, *g = node->out->grad;
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++)
        if (xi[i] > 0) dx[i] += g[i];
}

/* ---------------------------------------------------------------- ELU */

lipt_tensor *lipt_elu(lipt_ctx *ctx, lipt_tensor *x) {
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    const size_t n = x->numel;
    act_pass(LIPT_ACT_ELU, 1.0f, x->data, out->data, n);
    lipt_record(ctx, LIPT_OP_ELU, out, 1, (lipt_tensor *[]){x});
    return out;
}

void lipt_elu_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const size_t n = node->in[0]->numel;
    const float *xi = node->in[0]->data, *g = node->out->grad;
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) dx[i] += xi[i] > 0 ? g[i] : g[i] * expf(xi[i]);
}

/* ---------------------------------------------------------------- GELU */

/* The exact-erf GELU x Φ(x), with Φ from src/kernels/vmath.h (vectorised; a third of an evaluation step was the
 * scalar GELU and its expf). */
lipt_tensor *lipt_gelu(lipt_ctx *ctx, lipt_tensor *x) {
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    const size_t n = x->numel;
    lipt_node *node = lipt_record(ctx, LIPT_OP_GELU, out, 1, (lipt_tensor *[]){x});
    /* keep GELU'(x) for the backward: the forward's tables give it for a few more multiplies, and the backward then
     * streams two arrays instead of three and evaluates nothing */
    float *der = node ? lipt_arena_alloc(&ctx->arena, n * sizeof(float)) : NULL;
    if (node) node->saved = der;
    lipt_gelu_pass(x->data, out->data, der, n);
    lipt_profile_op_end(ctx, LIPT_OP_GELU); /* it recorded before computing */
    return out;
}

void lipt_gelu_backward(lipt_ctx *ctx, lipt_node *node) {
    int fresh;
    float *dx = lipt_grad_of_fresh(ctx, node->in[0], &fresh);
    if (!dx) return;
    const size_t n = node->in[0]->numel, nchunk = lipt_act_nchunk(n);
    const float *g = node->out->grad, *der = node->saved;
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        const size_t i = c * LIPT_ACT_CHUNK;
        lipt_gelu_grad(der + i, g + i, dx + i, lipt_act_chunk_len(n, c), fresh);
    }
}

/* ---------------------------------------------------------------- LipSwish */

/* farg: 0 β at forward time (backward recomputes the sigmoid instead of saving it) */
lipt_tensor *lipt_lipswish(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *beta) {
    char sb[64];
    LIPT_CHECK(beta->numel == 1, "lipswish: beta %s must have one element", lipt_shape_str(beta, sb, sizeof sb));
    const float bt = beta->data[0];
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    act_pass(LIPT_ACT_LIPSWISH, bt, x->data, out->data, x->numel);
    lipt_node *node = lipt_record(ctx, LIPT_OP_LIPSWISH, out, 2, (lipt_tensor *[]){x, beta});
    if (node) node->farg[0] = bt;
    return out;
}

/* With s = sigmoid(βx):  dy/dx = (s + βx s(1-s)) / 1.1,  dy/dβ = x² s(1-s) / 1.1, summed in double per chunk and
 * the chunks in order (the same bits on any thread count). */
void lipt_lipswish_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *x = node->in[0], *beta = node->in[1];
    float *dx = lipt_grad_of(ctx, x);
    float *dbeta = lipt_grad_of(ctx, beta);
    if (!dx && !dbeta) return;
    const size_t n = x->numel, nchunk = lipt_act_nchunk(n);
    const float bt = node->farg[0];
    const float *xi = x->data, *g = node->out->grad;
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    double *part = dbeta ? lipt_arena_alloc(&ctx->arena, nchunk * sizeof(double)) : NULL;
#pragma omp parallel for if (n >= LIPT_ACT_PAR_MIN) schedule(static)
    for (size_t c = 0; c < nchunk; c++) {
        const size_t end = c * LIPT_ACT_CHUNK + lipt_act_chunk_len(n, c);
        lipt_vd acc = {0};
        for (size_t i = c * LIPT_ACT_CHUNK; i < end; i += LIPT_VW) {
            const size_t len = lipt_vlanes(i, end);
            const lipt_vf v = lipt_vload_n(xi + i, len), gv = lipt_vload_n(g + i, len);
            const lipt_vf sg = lipt_vsigmoid(v * bt), ds = sg * (1.0f - sg);
            if (dx)
                lipt_vstore_n(dx + i, lipt_vload_n(dx + i, len) + gv * (sg + v * bt * ds) / LIPT_LIPSWISH_SCALE, len);
            if (part) acc += __builtin_convertvector(gv * (v * v * ds), lipt_vd); /* padding lanes have g = 0 */
        }
        if (part) part[c] = lipt_vd_sum(&acc);
    }
    /* after the loop, so x == beta (a one-element x) accumulates both terms */
    if (dbeta) {
        double sb = 0;
        for (size_t c = 0; c < nchunk; c++) sb += part[c];
        dbeta[0] += (float)(sb / LIPT_LIPSWISH_SCALE);
    }
    lipt_arena_release(&ctx->arena, mark);
}
