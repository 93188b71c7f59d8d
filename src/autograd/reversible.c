/* lipt_reversible_chain: a chain of invertible segments kept as its input and output only; the backward reconstructs
 * each segment's input from its output, reruns the segment on a sub-tape and walks it (include/lipt/autograd.h). */
#include "lipt/autograd.h"

#include <math.h>
#include <string.h>

#include "autograd/segment_impl.h"

typedef struct {
    int n;
    lipt_segment_fn fn;
    lipt_segment_inv inv;
    lipt_segment_inv_taped inv_taped;
    void **args;
    lipt_rng *rng;          /* [n] the RNG before segment k: its dropout masks, replayed in inv and in the rerun */
    float **kept;           /* [n] true inputs kept (keep_every, debug_truth), NULL elsewhere */
    lipt_reversible *rev;   /* ctx->rev at the forward, or NULL */
    int n_outside;
    lipt_tensor **outside;  /* tensors from outside the chain the segments read and differentiate (certificates) */
} chain;

void lipt_reversible_defaults(lipt_reversible *rev) {
    memset(rev, 0, sizeof *rev);
    rev->tol = LIPT_REV_TOL;
    rev->tol_lowp = LIPT_REV_TOL_LOWP;
    rev->max_iter = LIPT_REV_MAX_ITER;
    rev->accel = LIPT_REV_ACCEL;
}

/* Whether the backward starts segment k from its kept true input (rather than a reconstruction). */
static int from_truth(const chain *c, int k) {
    const int every = c->rev ? c->rev->keep_every : 0;
    return k == 0 || (every > 0 && k % every == 0);
}

lipt_tensor *lipt_reversible_chain(lipt_ctx *ctx, int n, lipt_segment_fn fn, lipt_segment_inv inv,
                                   lipt_segment_inv_taped inv_taped, void *const *args, lipt_tensor *x, int n_outside,
                                   lipt_tensor *const *outside) {
    LIPT_CHECK(n >= 1 && fn && inv && args, "reversible chain: %d segments", n);
    if (!lipt_should_record(ctx, 1, &x)) {
        for (int k = 0; k < n; k++) x = fn(ctx, x, args[k]);
        return x;
    }
    chain *c = lipt_arena_alloc(&ctx->arena, sizeof *c);
    c->n = n;
    c->fn = fn;
    c->inv = inv;
    c->inv_taped = inv_taped;
    c->args = lipt_arena_alloc(&ctx->arena, (size_t)n * sizeof(void *));
    memcpy(c->args, args, (size_t)n * sizeof(void *));
    c->rng = lipt_arena_alloc(&ctx->arena, (size_t)n * sizeof(lipt_rng));
    c->kept = lipt_arena_calloc(&ctx->arena, (size_t)n * sizeof(float *));
    c->rev = ctx->rev;
    c->n_outside = n_outside;
    c->outside = NULL;
    if (n_outside > 0) {
        c->outside = lipt_arena_alloc(&ctx->arena, (size_t)n_outside * sizeof(lipt_tensor *));
        memcpy(c->outside, outside, (size_t)n_outside * sizeof(lipt_tensor *));
    }
    const size_t numel = x->numel, bytes = numel * sizeof(float);
    lipt_tensor *y = lipt_tensor_like(ctx, x);
    float *other = lipt_arena_alloc(&ctx->arena, bytes ? bytes : 1);
    const int debug = c->rev && c->rev->debug_truth;
    /* segment k writes y when n - 1 - k is even: the last one writes y */
    const float *cur = x->data;
    lipt_no_grad_push(ctx);
    for (int k = 0; k < n; k++) {
        c->rng[k] = ctx->rng;
        if (k > 0 && (debug || from_truth(c, k))) {
            c->kept[k] = lipt_arena_alloc(&ctx->arena, bytes ? bytes : 1);
            memcpy(c->kept[k], cur, bytes);
        }
        float *dst = (n - 1 - k) % 2 == 0 ? y->data : other;
        const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
        lipt_tensor *xk = lipt_tensor_wrap(ctx, (float *)cur, x->ndim, x->shape);
        const lipt_tensor *r = fn(ctx, xk, c->args[k]);
        LIPT_CHECK(r->numel == numel, "reversible chain: segment %d maps %zu elements to %zu", k, numel, r->numel);
        memcpy(dst, r->data, bytes);
        lipt_arena_release(&ctx->arena, mark);
        cur = dst;
    }
    lipt_no_grad_pop(ctx);
    lipt_node *node = lipt_record(ctx, LIPT_OP_REVERSIBLE, y, 1, &x);
    node->saved = c;
    return y;
}

/* max |a - b| / max(1, max |b|) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]), v = fabs((double)b[i]);
        if (!(e <= d)) d = e; /* NaN shows */
        if (v > m) m = v;
    }
    return d / fmax(1.0, m);
}

/* Segment k's input rebuilt from its output ycur into xbuf, with its statistics. */
static void reconstruct(lipt_ctx *ctx, chain *c, int k, const lipt_tensor *like, float *ycur, float *xbuf) {
    lipt_reversible *rev = c->rev;
    const lipt_rng outer = ctx->rng;
    const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_tensor *yt = lipt_tensor_wrap(ctx, ycur, like->ndim, like->shape);
    lipt_inv_info info = {0, 0, 0, 0, 0};
    lipt_error e = {LIPT_OK, ""};
    ctx->rng = c->rng[k];
    lipt_no_grad_push(ctx);
    const lipt_status st = c->inv(ctx, yt, xbuf, c->args[k], &info, &e);
    lipt_no_grad_pop(ctx);
    ctx->rng = outer;
    lipt_arena_release(&ctx->arena, mark);
    if (!rev) return;
    rev->inversions++;
    rev->evaluations += info.iters;
    rev->work += info.work;
    rev->fallbacks += info.fallbacks;
    rev->unconverged += !info.converged;
    if (!(info.bound <= rev->worst_bound)) rev->worst_bound = info.bound;
    if (k < rev->cap && rev->iters) rev->iters[k] = info.iters;
    if (k < rev->cap && rev->bound) rev->bound[k] = info.bound;
    /* not converged within the budget: the best iterate stands and is counted; no answer at all (not finite, a
     * branch that does not contract here) fails the step */
    if (st != LIPT_OK && !isfinite(info.bound) && rev->status == LIPT_OK) {
        rev->status = st;
        rev->err = e;
    }
}

/* Segment k rerun on a sub-tape from xin and walked from g (its output's gradient); g becomes its input's gradient. */
static void rerun_segment(lipt_ctx *ctx, chain *c, int k, const lipt_tensor *like, float *xin, const float *ycur,
                          float *g) {
    const size_t numel = like->numel;
    lipt_node *const tape = ctx->tape;
    const size_t n_nodes = ctx->n_nodes;
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_rng rng = c->rng[k];
    lipt_tensor *xk = lipt_tensor_wrap(ctx, xin, like->ndim, like->shape);
    lipt_tensor *y = lipt_segment_rerun(ctx, c->fn, c->args[k], xk, &rng);
    lipt_tensor *outside[OUTSIDE_MAX];
    const int n_out = lipt_segment_outside_without_grad(ctx->tape, xk, outside, OUTSIDE_MAX);
    if (n_out > 0) { /* a tensor the caller did not list: its gradient buffer below the mark, then once more */
        LIPT_CHECK(n_out <= OUTSIDE_MAX, "reversible chain: %d outside tensors without gradient buffers", n_out);
        lipt_arena_release(&ctx->arena, mark);
        for (int i = 0; i < n_out; i++) lipt_grad_of(ctx, outside[i]);
        mark = lipt_arena_get_mark(&ctx->arena);
        rng = c->rng[k];
        xk = lipt_tensor_wrap(ctx, xin, like->ndim, like->shape);
        y = lipt_segment_rerun(ctx, c->fn, c->args[k], xk, &rng);
    }
    lipt_reversible *rev = c->rev;
    if (rev && rev->consistency && k < rev->cap) rev->consistency[k] = rel_diff(y->data, ycur, numel);
    if (y->requires_grad) lipt_backward_seeded(ctx, y, g);
    if (xk->grad) memcpy(g, xk->grad, numel * sizeof(float));
    else memset(g, 0, numel * sizeof(float));
    ctx->tape = tape;
    ctx->n_nodes = n_nodes;
    lipt_arena_release(&ctx->arena, mark);
}

/* Segment k rebuilt and recorded in one pass by inv_taped, walked from g (which becomes its input's gradient): 0 when
 * inv_taped does not apply (nothing done). */
static int taped_inverse(lipt_ctx *ctx, chain *c, int k, const lipt_tensor *like, float *ycur, float *xbuf, float *g) {
    const size_t numel = like->numel;
    lipt_node *const tape = ctx->tape;
    const size_t n_nodes = ctx->n_nodes;
    const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    const lipt_rng outer = ctx->rng;
    ctx->tape = NULL;
    ctx->rng = c->rng[k];
    lipt_tensor *in[2] = {NULL, NULL};
    int n_in = 0;
    lipt_tensor *yt = lipt_tensor_wrap(ctx, ycur, like->ndim, like->shape);
    lipt_tensor *out = c->inv_taped(ctx, yt, xbuf, c->args[k], in, &n_in);
    ctx->rng = outer;
    if (out) {
        lipt_reversible *rev = c->rev;
        if (rev) {
            rev->inversions++;
            rev->evaluations++;
            rev->work += 1;
            if (rev->consistency && k < rev->cap) rev->consistency[k] = rel_diff(out->data, ycur, numel);
        }
        if (out->requires_grad) lipt_backward_seeded(ctx, out, g);
        memset(g, 0, numel * sizeof(float));
        for (int i = 0; i < n_in; i++)
            if (in[i]->grad)
                for (size_t e = 0; e < numel; e++) g[e] += in[i]->grad[e];
    }
    ctx->tape = tape;
    ctx->n_nodes = n_nodes;
    lipt_arena_release(&ctx->arena, mark);
    return out != NULL;
}

void lipt_reversible_backward(lipt_ctx *ctx, lipt_node *node) {
    chain *c = node->saved;
    lipt_tensor *x = node->in[0], *y = node->out;
    const size_t numel = x->numel, bytes = numel * sizeof(float);
    for (int i = 0; i < c->n_outside; i++) lipt_grad_of(ctx, c->outside[i]); /* below every mark of the walk */
    /* three activations, whatever the depth: the output being undone, the input being rebuilt, the gradient */
    float *ycur = lipt_arena_alloc(&ctx->arena, bytes ? bytes : 1), *xbuf = lipt_arena_alloc(&ctx->arena, bytes ? bytes : 1);
    float *g = lipt_arena_alloc(&ctx->arena, bytes ? bytes : 1);
    memcpy(ycur, y->data, bytes);
    memcpy(g, y->grad, bytes);
    const int debug = c->rev && c->rev->debug_truth;
    for (int k = c->n - 1; k >= 0; k--) {
        const float *truth = k == 0 ? x->data : c->kept[k];
        float *xin;
        if (c->inv_taped && !from_truth(c, k) && !debug && taped_inverse(ctx, c, k, x, ycur, xbuf, g)) {
            float *t = ycur;
            ycur = xbuf;
            xbuf = t;
            continue;
        }
        if (!from_truth(c, k) || debug) {
            reconstruct(ctx, c, k, x, ycur, xbuf);
            if (debug && c->rev->err_truth && k < c->rev->cap) c->rev->err_truth[k] = rel_diff(xbuf, truth, numel);
        }
        if (from_truth(c, k)) {
            memcpy(xbuf, truth, bytes); /* the rerun marks its input as differentiable: not the tape's own x */
        }
        xin = xbuf;
        rerun_segment(ctx, c, k, x, xin, ycur, g);
        float *t = ycur; /* this segment's input is the next one's output */
        ycur = xin;
        xbuf = t;
    }
    if (!lipt_grad_adopt(x, g)) {
        float *dx = lipt_grad_of(ctx, x);
        if (dx)
            for (size_t i = 0; i < numel; i++) dx[i] += g[i];
    }
}
