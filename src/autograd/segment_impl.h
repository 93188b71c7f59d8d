/* Private to src/autograd: a segment's rerun in the backward (recompute.c, reversible.c; segment.c). */
#ifndef LIPT_AUTOGRAD_SEGMENT_IMPL_H
#define LIPT_AUTOGRAD_SEGMENT_IMPL_H

#include "lipt/autograd.h"

#define OUTSIDE_MAX 64

/* Tensors from outside the sub-tape ending at `sub` (not xs, not made by one of its nodes) that need a gradient and
 * have no buffer yet: up to `cap` of them in out[]; returns how many there are. */
int lipt_segment_outside_without_grad(lipt_node *sub, const lipt_tensor *xs, lipt_tensor **out, int cap);
/* fn(ctx, xk, arg) recorded on a sub-tape of its own (ctx->tape is NULL on entry: the caller restores it) from the
 * RNG state *rng, which is advanced as the forward advanced it; xk is made to require a gradient. */
lipt_tensor *lipt_segment_rerun(lipt_ctx *ctx, lipt_segment_fn fn, void *arg, lipt_tensor *xk, lipt_rng *rng);

#endif
