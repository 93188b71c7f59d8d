/* lipt_recompute: a segment of the graph kept as its output only, and run again in the backward (include/lipt/autograd.h). */
#include "lipt/autograd.h"

#include <string.h>

#include "autograd/segment_impl.h"

typedef struct {
    lipt_segment_fn fn;
    void *arg;
    lipt_rng rng;   /* the RNG before the segment: the rerun draws the same dropout masks */
    int chunk_rows; /* row-wise segments: rows per piece (0: the whole input at once) */
} segment;

/* The pieces a segment runs on. x is [..., T, D]: rows of D, in sequences of T. With no chunking, or when x has at
 * most chunk_rows rows, one piece of x's own shape. Otherwise pieces of whole sequences [k, T, D] when a sequence
 * fits (k = chunk_rows / T), else [1, n, D] runs of one sequence: shapes a row-wise function accepts either way. */
typedef struct {
    size_t row_elems, rows, seq_rows, per; /* D; all rows; T; rows per piece */
    int whole;
} pieces;

static pieces pieces_of(const lipt_tensor *x, int chunk_rows) {
    pieces p = {0};
    p.row_elems = x->ndim ? (size_t)x->shape[x->ndim - 1] : 1;
    p.rows = p.row_elems ? x->numel / p.row_elems : 0;
    p.seq_rows = x->ndim >= 2 ? (size_t)x->shape[x->ndim - 2] : p.rows;
    p.whole = chunk_rows <= 0 || p.rows <= (size_t)chunk_rows || p.seq_rows == 0;
    if (p.whole) p.per = p.rows;
    else if (p.seq_rows <= (size_t)chunk_rows) p.per = (size_t)chunk_rows / p.seq_rows * p.seq_rows;
    else p.per = (size_t)chunk_rows;
    return p;
}

/* Piece k as a tensor over `data` (x's values or its gradient), or NULL past the end. *r0: its first row. */
static lipt_tensor *piece(lipt_ctx *ctx, const lipt_tensor *x, const pieces *p, size_t k, float *data, size_t *r0) {
    if (p->whole) {
        if (k > 0) return NULL;
        *r0 = 0;
        return lipt_tensor_wrap(ctx, data, x->ndim, x->shape);
    }
    size_t start;
    int n_seq = 1, n_rows;
    if (p->seq_rows <= p->per) { /* whole sequences */
        start = k * p->per;
        if (start >= p->rows) return NULL;
        const size_t n = p->rows - start < p->per ? p->rows - start : p->per;
        n_seq = (int)(n / p->seq_rows);
        n_rows = (int)p->seq_rows;
    } else { /* runs within one sequence: ceil(T / per) pieces per sequence */
        const size_t per_seq = (p->seq_rows + p->per - 1) / p->per, seq = k / per_seq, off = (k % per_seq) * p->per;
        start = seq * p->seq_rows + off;
        if (start >= p->rows) return NULL;
        n_rows = (int)(p->seq_rows - off < p->per ? p->seq_rows - off : p->per);
    }
    *r0 = start;
    return lipt_tensor_wrap(ctx, data + start * p->row_elems, 3, (int[]){n_seq, n_rows, (int)p->row_elems});
}

static lipt_tensor *recompute(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg, int chunk_rows) {
    if (!lipt_should_record(ctx, 1, &x)) return fn(ctx, x, arg);
    segment *s = lipt_arena_alloc(&ctx->arena, sizeof *s);
    s->fn = fn;
    s->arg = arg;
    s->rng = ctx->rng;
    s->chunk_rows = chunk_rows;
    /* The output lives below the mark; everything the segment allocates above it is given back piece by piece. The
     * forward runs on the same pieces as the backward will, so that the rerun reproduces these values exactly. */
    lipt_tensor *y = lipt_tensor_like(ctx, x);
    const pieces p = pieces_of(x, chunk_rows);
    lipt_no_grad_push(ctx);
    size_t r0;
    for (size_t k = 0;; k++) {
        const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
        lipt_tensor *xk = piece(ctx, x, &p, k, x->data, &r0);
        if (!xk) break;
        const lipt_tensor *r = fn(ctx, xk, arg);
        LIPT_CHECK(r->numel == xk->numel, "recompute: the segment maps %zu elements to %zu (must keep the shape)",
                   xk->numel, r->numel);
        memcpy(y->data + r0 * p.row_elems, r->data, r->numel * sizeof(float));
        lipt_arena_release(&ctx->arena, mark);
    }
    lipt_no_grad_pop(ctx);
    lipt_node *node = lipt_record(ctx, LIPT_OP_RECOMPUTE, y, 1, &x);
    node->saved = s;
    return y;
}

lipt_tensor *lipt_recompute(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg) {
    return recompute(ctx, fn, x, arg, 0);
}

lipt_tensor *lipt_recompute_rows(lipt_ctx *ctx, lipt_segment_fn fn, lipt_tensor *x, void *arg, int chunk_rows) {
    return recompute(ctx, fn, x, arg, chunk_rows);
}


void lipt_recompute_backward(lipt_ctx *ctx, lipt_node *node) {
    segment *s = node->saved;
    lipt_tensor *x = node->in[0];
    lipt_tensor *xroot = lipt_tensor_root(x), *yroot = lipt_tensor_root(node->out);
    /* x's gradient, allocated below the marks so that it outlives the sub-tapes. When nothing has flowed into x yet,
     * it takes over the output's gradient buffer instead: each piece's rows of it are dead once that piece's sub-tape
     * is seeded, so a chain of segments holds one residual-stream gradient, not one per segment. */
    const int take_over = x->requires_grad && !xroot->grad && xroot->numel == yroot->numel;
    float *dx = take_over ? yroot->grad : lipt_grad_of(ctx, x);
    lipt_node *const tape = ctx->tape;
    const size_t n_nodes = ctx->n_nodes;
    const pieces p = pieces_of(x, s->chunk_rows);
    lipt_rng rng = s->rng;
    size_t r0;
    for (size_t k = 0;; k++) {
        lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
        const lipt_rng rng_k = rng;
        lipt_tensor *xk = piece(ctx, x, &p, k, x->data, &r0);
        if (!xk) break;
        lipt_tensor *y = lipt_segment_rerun(ctx, s->fn, s->arg, xk, &rng);
        lipt_tensor *outside[OUTSIDE_MAX];
        const int n_out = lipt_segment_outside_without_grad(ctx->tape, xk, outside, OUTSIDE_MAX);
        if (n_out > 0) {
            /* Rare (a model's parameters have their gradients in the slab): give those leaves gradient buffers below
             * the mark, then run the piece once more. */
            LIPT_CHECK(n_out <= OUTSIDE_MAX, "recompute: %d tensors from outside the segment without gradient buffers "
                       "(at most %d)", n_out, OUTSIDE_MAX);
            lipt_arena_release(&ctx->arena, mark);
            for (int i = 0; i < n_out; i++) lipt_grad_of(ctx, outside[i]);
            mark = lipt_arena_get_mark(&ctx->arena);
            rng = rng_k;
            xk = piece(ctx, x, &p, k, x->data, &r0);
            y = lipt_segment_rerun(ctx, s->fn, s->arg, xk, &rng);
        }
        const size_t off = r0 * p.row_elems;
        if (y->requires_grad) lipt_backward_seeded(ctx, y, node->out->grad + off);
        if (take_over) {
            if (xk->grad) memcpy(dx + off, xk->grad, xk->numel * sizeof(float));
            else memset(dx + off, 0, xk->numel * sizeof(float));
        } else if (dx && xk->grad) {
            for (size_t i = 0; i < xk->numel; i++) dx[off + i] += xk->grad[i];
        }
        ctx->tape = tape;
        ctx->n_nodes = n_nodes;
        lipt_arena_release(&ctx->arena, mark);
    }
    if (take_over) xroot->grad = x->grad = dx;
}
