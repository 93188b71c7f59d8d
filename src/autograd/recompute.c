/* lipt_recompute: a segment of the graph kept as its output only, and run again in the backward (include/lipt/autograd.h). */
#include "lipt/autograd.h"

#include <string.h>

typedef struct {
    lipt_segment_fn fn;
    void *arg;
    lipt_rng rng; /* the RNG before the segment: the rerun draws the same dropout masks */
} segment;

lipt_tensor *lipt_recompute(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg) {
    if (!lipt_should_record(ctx, 1, &x)) return fn(ctx, x, arg);
    segment *s = lipt_arena_alloc(&ctx->arena, sizeof *s);
    s->fn = fn;
    s->arg = arg;
    s->rng = ctx->rng;
    /* The output lives below the mark; everything the segment allocates above it is given back at once. */
    lipt_tensor *y = lipt_tensor_like(ctx, x);
    const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_no_grad_push(ctx);
    const lipt_tensor *r = fn(ctx, x, arg);
    lipt_no_grad_pop(ctx);
    LIPT_CHECK(r->numel == y->numel, "recompute: the segment maps %zu elements to %zu (must keep the shape)", x->numel,
               r->numel);
    memcpy(y->data, r->data, y->numel * sizeof(float));
    lipt_arena_release(&ctx->arena, mark);
    lipt_node *node = lipt_record(ctx, LIPT_OP_RECOMPUTE, y, 1, &x);
    node->saved = s;
    return y;
}

static lipt_tensor *root_of(lipt_tensor *t) { return t->base ? t->base : t; }

/* Tensors from outside the segment (not xs, not made by a node of the sub-tape) that need a gradient and have no
 * buffer yet: a leaf whose gradient is allocated on first use. Allocated inside the sub-walk it would sit above the
 * mark and be released with it. Writes up to `cap` of them to out[] and returns how many there are. */
static int outside_without_grad(lipt_node *sub, const lipt_tensor *xs, lipt_tensor **out, int cap) {
    int n = 0;
    for (lipt_node *a = sub; a; a = a->prev)
        for (int i = 0; i < a->n_in; i++) {
            lipt_tensor *t = a->in[i] ? root_of(a->in[i]) : NULL;
            if (!t || !t->requires_grad || t->grad || t == xs) continue;
            int made_inside = 0, seen = 0;
            for (lipt_node *b = sub; b && !made_inside; b = b->prev) made_inside = root_of(b->out) == t;
            for (int k = 0; k < n && k < cap && !seen; k++) seen = out[k] == t;
            if (made_inside || seen) continue;
            if (n < cap) out[n] = t;
            n++;
        }
    return n;
}

/* Runs the segment again from x's values, recording a sub-tape of its own; returns its output, with *xs the leaf
 * standing for x. */
static lipt_tensor *rerun(lipt_ctx *ctx, const segment *s, lipt_tensor *x, lipt_tensor **xs) {
    const lipt_rng rng = ctx->rng;
    *xs = lipt_tensor_wrap(ctx, x->data, x->ndim, x->shape);
    (*xs)->requires_grad = 1;
    ctx->tape = NULL;
    ctx->rng = s->rng;
    lipt_tensor *y = s->fn(ctx, *xs, s->arg);
    ctx->rng = rng;
    return y;
}

#define OUTSIDE_MAX 64

void lipt_recompute_backward(lipt_ctx *ctx, lipt_node *node) {
    segment *s = node->saved;
    lipt_tensor *x = node->in[0];
    lipt_tensor *xroot = root_of(x), *yroot = root_of(node->out);
    /* x's gradient, allocated below the mark so that it outlives the sub-tape. When nothing has flowed into x yet,
     * it takes over the output's gradient buffer instead, dead once the sub-tape is seeded: a chain of segments then
     * holds one residual-stream gradient, not one per segment. */
    const int take_over = x->requires_grad && !xroot->grad && xroot->numel == yroot->numel;
    float *dx = take_over ? NULL : lipt_grad_of(ctx, x);
    lipt_node *const tape = ctx->tape;
    const size_t n_nodes = ctx->n_nodes;
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_tensor *xs;
    lipt_tensor *y = rerun(ctx, s, x, &xs);
    lipt_tensor *outside[OUTSIDE_MAX];
    const int n_out = outside_without_grad(ctx->tape, xs, outside, OUTSIDE_MAX);
    if (n_out > 0) {
        /* Rare (a model's parameters have their gradients in the slab): give those leaves gradient buffers below
         * the mark, then run the segment once more. */
        LIPT_CHECK(n_out <= OUTSIDE_MAX, "recompute: %d tensors from outside the segment without gradient buffers "
                   "(at most %d)", n_out, OUTSIDE_MAX);
        lipt_arena_release(&ctx->arena, mark);
        for (int i = 0; i < n_out; i++) lipt_grad_of(ctx, outside[i]);
        mark = lipt_arena_get_mark(&ctx->arena);
        y = rerun(ctx, s, x, &xs);
    }
    if (y->requires_grad) lipt_backward_seeded(ctx, y, node->out->grad);
    if (take_over) {
        dx = yroot->grad;
        if (xs->grad) memcpy(dx, xs->grad, x->numel * sizeof(float));
        else memset(dx, 0, x->numel * sizeof(float));
        xroot->grad = x->grad = dx;
    } else if (dx && xs->grad) {
        for (size_t i = 0; i < x->numel; i++) dx[i] += xs->grad[i];
    }
    ctx->tape = tape;
    ctx->n_nodes = n_nodes;
    lipt_arena_release(&ctx->arena, mark);
}
