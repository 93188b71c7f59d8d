/* The tape: recording, gradient buffers, the reverse walk, arena tensors. */
#include "lipt/autograd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

void lipt_ctx_init(lipt_ctx *ctx, size_t arena_bytes, uint64_t seed) {
    memset(ctx, 0, sizeof *ctx);
    lipt_arena_init(&ctx->arena, arena_bytes);
    lipt_rng_seed(&ctx->rng, seed);
    const char *tiled = getenv("LIPT_ATTN_TILED"); /* auto (default) | 0 | 1 */
    ctx->attn_tiled = tiled && !strcmp(tiled, "0") ? 0 : tiled && !strcmp(tiled, "1") ? 1 : -1;
}

void lipt_ctx_free(lipt_ctx *ctx) {
    lipt_arena_free(&ctx->arena);
    lipt_lowp_free(ctx->lowp);
    memset(ctx, 0, sizeof *ctx);
}

lipt_status lipt_ctx_set_precision(lipt_ctx *ctx, lipt_precision p, lipt_error *err) {
    lipt_kctx k = {.precision = ctx->precision, .lowp = ctx->lowp, .arena = &ctx->arena};
    const lipt_status st = lipt_kctx_set_precision(&k, p, err);
    ctx->precision = k.precision;
    ctx->lowp = k.lowp;
    return st;
}

void lipt_ctx_reset(lipt_ctx *ctx) {
    lipt_arena_reset(&ctx->arena);
    ctx->tape = NULL;
    ctx->n_nodes = 0;
}

static lipt_tensor *tensor_struct(lipt_ctx *ctx, int ndim, const int *shape) {
    LIPT_CHECK(ndim >= 0 && ndim <= LIPT_MAX_DIMS, "tensor with %d dims (at most %d)", ndim, LIPT_MAX_DIMS);
    lipt_tensor *t = lipt_arena_alloc(&ctx->arena, sizeof *t);
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        LIPT_CHECK(shape[i] >= 0, "negative dimension %d", shape[i]);
        t->shape[i] = shape[i];
    }
    t->numel = lipt_shape_numel(ndim, shape);
    return t;
}

lipt_tensor *lipt_tensor_new(lipt_ctx *ctx, int ndim, const int *shape) {
    lipt_tensor *t = tensor_struct(ctx, ndim, shape);
    t->data = lipt_arena_alloc(&ctx->arena, t->numel * sizeof(float));
    return t;
}

lipt_tensor *lipt_tensor_zeros(lipt_ctx *ctx, int ndim, const int *shape) {
    lipt_tensor *t = tensor_struct(ctx, ndim, shape);
    t->data = lipt_arena_calloc(&ctx->arena, t->numel * sizeof(float));
    return t;
}

lipt_tensor *lipt_tensor_like(lipt_ctx *ctx, const lipt_tensor *t) { return lipt_tensor_new(ctx, t->ndim, t->shape); }
lipt_tensor *lipt_tensor_1d(lipt_ctx *ctx, int n0) { return lipt_tensor_new(ctx, 1, (int[]){n0}); }
lipt_tensor *lipt_tensor_2d(lipt_ctx *ctx, int n0, int n1) { return lipt_tensor_new(ctx, 2, (int[]){n0, n1}); }
lipt_tensor *lipt_tensor_3d(lipt_ctx *ctx, int n0, int n1, int n2) { return lipt_tensor_new(ctx, 3, (int[]){n0, n1, n2}); }

lipt_tensor *lipt_tensor_wrap(lipt_ctx *ctx, float *data, int ndim, const int *shape) {
    lipt_tensor *t = tensor_struct(ctx, ndim, shape);
    t->data = data;
    return t;
}

lipt_tensor *lipt_reshape(lipt_ctx *ctx, lipt_tensor *t, int ndim, const int *shape) {
    lipt_tensor *v = tensor_struct(ctx, ndim, shape);
    LIPT_CHECK(v->numel == t->numel, "reshape of %zu elements to %zu", t->numel, v->numel);
    lipt_tensor *root = lipt_tensor_root(t);
    v->data = t->data;
    v->grad = root->grad;
    v->base = root;
    v->requires_grad = t->requires_grad;
    v->name = t->name;
    return v;
}

int lipt_should_record(const lipt_ctx *ctx, int n, lipt_tensor *const *in) {
    if (ctx->no_grad > 0) return 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad) return 1;
    return 0;
}

double lipt_profile_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void lipt_profile_op_end(lipt_ctx *ctx, int op) {
    lipt_profile *p = ctx->profile;
    if (!p || p->in_backward) return;
    const double t = lipt_profile_now();
    p->fwd[op] += t - p->mark;
    p->mark = t;
}

lipt_profile_split lipt_profile_split_of(const lipt_profile *p) {
    lipt_profile_split s = {0, 0, 0, 0, NAN};
    if (!p || p->steps <= 0) return s;
    const double per = 1e3 / (double)p->steps; /* seconds summed -> ms per step */
    for (int k = 0; k < LIPT_PHASE_COUNT; k++) s.step_ms += per * p->phase[k];
    s.products_ms = per * p->products;
    s.attention_ms = per * p->attention;
    s.outside_ms = s.step_ms - s.products_ms;
    if (s.step_ms > 0) s.outside_fraction = s.outside_ms / s.step_ms;
    return s;
}

lipt_node *lipt_record(lipt_ctx *ctx, lipt_op_id op, lipt_tensor *out, int n, lipt_tensor *const *in) {
    LIPT_CHECK(n <= LIPT_MAX_INPUTS, "op %s with %d inputs", lipt_ops[op].name, n);
    lipt_profile *p = ctx->profile;
    if (p && !p->in_backward) { /* every op ends by recording (or deciding not to): its forward ran since the last */
        const double t = lipt_profile_now();
        p->fwd[op] += t - p->mark;
        p->calls[op]++;
        p->mark = t;
    }
    if (!lipt_should_record(ctx, n, in)) return NULL;
    lipt_node *node = lipt_arena_alloc(&ctx->arena, sizeof *node);
    memset(node, 0, sizeof *node);
    node->op = op;
    node->n_in = n;
    for (int i = 0; i < n; i++) node->in[i] = in[i];
    node->out = out;
    out->requires_grad = 1;
    node->prev = ctx->tape;
    ctx->tape = node;
    ctx->n_nodes++;
    return node;
}

/* t's gradient buffer (the root's, shared by its views), allocated on first use: zeroed, or (zero = 0) left as the
 * arena gives it; *fresh tells whether it was allocated here. */
static float *grad_buffer(lipt_ctx *ctx, lipt_tensor *t, int zero, int *fresh) {
    *fresh = 0;
    if (!t || !t->requires_grad) return NULL;
    lipt_tensor *root = lipt_tensor_root(t);
    if (!root->grad) { /* views share the root's numel: writing all of t writes all of the root */
        const size_t bytes = root->numel * sizeof(float);
        root->grad = zero ? lipt_arena_calloc(&ctx->arena, bytes) : lipt_arena_alloc(&ctx->arena, bytes);
        *fresh = 1;
    }
    t->grad = root->grad;
    return t->grad;
}

float *lipt_grad_of(lipt_ctx *ctx, lipt_tensor *t) {
    int fresh;
    return grad_buffer(ctx, t, 1, &fresh);
}

float *lipt_grad_of_fresh(lipt_ctx *ctx, lipt_tensor *t, int *fresh) { return grad_buffer(ctx, t, 0, fresh); }

int lipt_grad_adopt(lipt_tensor *t, float *buf) {
    if (!t || !t->requires_grad || !buf) return 0;
    lipt_tensor *root = lipt_tensor_root(t);
    if (root->grad) return 0;
    root->grad = t->grad = buf;
    return 1;
}

static void walk(lipt_ctx *ctx) {
    lipt_profile *p = ctx->profile;
    const int nested = p && p->in_backward; /* a backward that walks a tape of its own (recompute) */
    if (p) p->in_backward = 1;
    for (lipt_node *n = ctx->tape; n; n = n->prev) {
        lipt_tensor *root = lipt_tensor_root(n->out);
        if (!root->grad) continue; /* nothing flowed into this output */
        n->out->grad = root->grad;
        const double t0 = p && !nested ? lipt_profile_now() : 0;
        lipt_ops[n->op].backward(ctx, n);
        if (p && !nested) p->bwd[n->op] += lipt_profile_now() - t0;
    }
    if (p && !nested) p->in_backward = 0;
}

void lipt_backward_seeded(lipt_ctx *ctx, lipt_tensor *out, const float *seed) {
    float *g = lipt_grad_of(ctx, out);
    LIPT_CHECK(g, "backward from a tensor that does not require grad");
    for (size_t i = 0; i < out->numel; i++) g[i] += seed ? seed[i] : 1.0f;
    walk(ctx);
}

void lipt_backward(lipt_ctx *ctx, lipt_tensor *loss) {
    LIPT_CHECK(loss->numel == 1, "backward from a loss of %zu elements (need 1)", loss->numel);
    lipt_backward_seeded(ctx, loss, NULL);
}
