/* What a segment's rerun in the backward needs, shared by lipt_recompute and lipt_reversible (segment_impl.h). */
#include "lipt/autograd.h"

#include "autograd/segment_impl.h"

/* Tensors from outside the segment (not xs, not made by a node of the sub-tape) that need a gradient and have no
 * buffer yet: a leaf whose gradient is allocated on first use. Allocated inside the sub-walk it would sit above the
 * mark and be released with it. Writes up to `cap` of them to out[] and returns how many there are. */
int lipt_segment_outside_without_grad(lipt_node *sub, const lipt_tensor *xs, lipt_tensor **out, int cap) {
    int n = 0;
    for (lipt_node *a = sub; a; a = a->prev)
        for (int i = 0; i < a->n_in; i++) {
            lipt_tensor *t = a->in[i] ? lipt_tensor_root(a->in[i]) : NULL;
            if (!t || !t->requires_grad || t->grad || t == xs) continue;
            int made_inside = 0, seen = 0;
            for (lipt_node *b = sub; b && !made_inside; b = b->prev) made_inside = lipt_tensor_root(b->out) == t;
            for (int k = 0; k < n && k < cap && !seen; k++) seen = out[k] == t;
            if (made_inside || seen) continue;
            if (n < cap) out[n] = t;
            n++;
        }
    return n;
}

/* Runs the segment on piece xk of x again, recording a sub-tape of its own from the RNG state *rng (advanced as the
 * forward advanced it); returns its output. */
lipt_tensor *lipt_segment_rerun(lipt_ctx *ctx, lipt_segment_fn fn, void *arg, lipt_tensor *xk, lipt_rng *rng) {
    const lipt_rng outer = ctx->rng;
    xk->requires_grad = 1;
    ctx->tape = NULL;
    ctx->rng = *rng;
    lipt_tensor *y = fn(ctx, xk, arg);
    *rng = ctx->rng;
    ctx->rng = outer;
    return y;
}

