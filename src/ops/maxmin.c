/* maxmin: the GroupSort activation with groups of two (Anil, Lucas, Grosse 2019): each pair of channels (2k, 2k+1)
 * becomes (max, min). A permutation per pair, so it is 1-Lipschitz and preserves gradient norms, which makes
 * Lipschitz-constrained networks more expressive than ReLU does at the same bound. And backward. */
#include "lipt/ops.h"

#include "ops/activation_impl.h"
#include "ops/reduce_impl.h"
#include "ops/rows.h"
#include "kernels/kernels.h"

/* Both directions work on vectors of LIPT_VW floats, whole pairs (LIPT_VW is even; a vector starts at a multiple of
 * LIPT_VW, so at a pair's first element): a lane's partner is the lane next to it, and a lane keeps its own value
 * (forward) or gradient (backward) when the pair's order test u >= v (u the pair's first element) says so for its
 * position. Even lanes hold u: the max goes there, u itself when u >= v. Odd lanes hold v: the min goes there, v
 * itself when u >= v. These are exactly the scalar selections (ties keep the order, u first, so the backward routes
 * each gradient to one input; a NaN makes the test false, as in the scalar code), without their unpredictable
 * branches. */
static inline lipt_vi pair_swap_idx(void) {
    lipt_vi ix;
    for (int i = 0; i < LIPT_VW; i++) ix[i] = i ^ 1;
    return ix;
}

/* v with each pair of lanes swapped: gcc's __builtin_shuffle with the index vector; clang (the fuzz and sanitizer
 * builds) has only __builtin_shufflevector, whose indices must be constants. */
static inline lipt_vf pair_swap(lipt_vf v, lipt_vi ix) {
#if defined(__clang__)
    (void)ix;
#if LIPT_VW == 16
    return __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
#elif LIPT_VW == 8
    return __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
#else
    return __builtin_shufflevector(v, v, 1, 0, 3, 2);
#endif
#else
    return __builtin_shuffle(v, ix);
#endif
}

/* a's lanes and their partners sw: all ones where a lane keeps its own element */
static inline lipt_vi keep_mask(lipt_vf a, lipt_vf sw) {
    lipt_vi even;
    for (int i = 0; i < LIPT_VW; i++) even[i] = i % 2 == 0 ? -1 : 0;
    return (even & (a >= sw)) | (~even & (sw >= a));
}

void lipt_maxmin_row(const float *a, float *y, size_t n) {
    const lipt_vi ix = pair_swap_idx();
    for (size_t i = 0; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf av = lipt_vload_n(a + i, len), sw = pair_swap(av, ix);
        lipt_vstore_n(y + i, lipt_vsel(keep_mask(av, sw), av, sw), len);
    }
}

/* Pieces of MAXMIN_CHUNK floats (whole vectors, so whole pairs) per iteration of the threads' loop. */
#define MAXMIN_CHUNK ((size_t)LIPT_VW * 256)

/* y = maxmin(a) over n floats (n even; y may be a) on the context's threads. */
void lipt_maxmin_pass(const float *a, float *y, size_t n) {
    const size_t nchunk = (n + MAXMIN_CHUNK - 1) / MAXMIN_CHUNK;
#pragma omp parallel for schedule(static) if (n >= (1u << 17))
    for (size_t c = 0; c < nchunk; c++) {
        const size_t i = c * MAXMIN_CHUNK;
        lipt_maxmin_row(a + i, y + i, n - i < MAXMIN_CHUNK ? n - i : MAXMIN_CHUNK);
    }
}

lipt_tensor *lipt_maxmin(lipt_ctx *ctx, lipt_tensor *x) {
    char sx[64];
    LIPT_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] % 2 == 0, "maxmin: last dim of %s must be even",
               lipt_shape_str(x, sx, 64));
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_record(ctx, LIPT_OP_MAXMIN, out, 1, (lipt_tensor *[]){x});
    lipt_maxmin_pass(x->data, out->data, x->numel);
    lipt_profile_op_end(ctx, LIPT_OP_MAXMIN); /* it recorded before computing */
    return out;
}

/* dx[0..n) (+)= the gradient g routed back through maxmin at its input a (n floats from an even offset), one
 * thread. */
static void maxmin_grad(const float *a, const float *g, float *dx, size_t n, int fresh, lipt_vi ix) {
    for (size_t i = 0; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf av = lipt_vload_n(a + i, len), gv = lipt_vload_n(g + i, len);
        const lipt_vf r = lipt_vsel(keep_mask(av, pair_swap(av, ix)), gv, pair_swap(gv, ix));
        lipt_vstore_n(dx + i, fresh ? r : lipt_vload_n(dx + i, len) + r, len);
    }
}

void lipt_maxmin_backward(lipt_ctx *ctx, lipt_node *node) {
    int fresh;
    float *dx = lipt_grad_of_fresh(ctx, node->in[0], &fresh);
    if (!dx) return;
    const float *a = node->in[0]->data, *g = node->out->grad;
    const size_t n = node->out->numel, nv = (n + LIPT_VW - 1) / LIPT_VW;
    const lipt_vi ix = pair_swap_idx();
#pragma omp parallel for schedule(static) if (n >= (1u << 17))
    for (size_t b = 0; b < nv; b++) {
        const size_t i = b * LIPT_VW;
        maxmin_grad(a + i, g + i, dx + i, lipt_vlanes(i, n), fresh, ix);
    }
}

typedef struct {
    const float *a, *g;
    size_t P;
    lipt_vi ix;
} maxmin_rows;

static void maxmin_grad_row(size_t r, void *arg, float *dst) {
    const maxmin_rows *m = arg;
    maxmin_grad(m->a + r * m->P, m->g + r * m->P, dst, m->P, 1, m->ix);
}

void lipt_maxmin_grad_colsum(lipt_ctx *ctx, const float *a, const float *g, float *dx, size_t rows, size_t P,
                             float *db, void *pk) {
    LIPT_CHECK(P % 2 == 0, "maxmin_grad_colsum: odd row length %zu", P);
    maxmin_rows m = {a, g, P, pair_swap_idx()};
    lipt_rows_colsum(ctx, dx, rows, P, db, (size_t)1 << 17, maxmin_grad_row, &m, pk);
}
