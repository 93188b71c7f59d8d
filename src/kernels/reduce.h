/* Private: the reductions below the ops (issue 50; moved from src/ops/elementwise.c): column sums of row-major
 * gradients (a bias's gradient) and the sum of a float array in double, each in an order fixed by the shape (the same
 * bits on any thread count). The ops, the activations' fused backward passes and the optimiser's gradient norm use
 * them. */
#ifndef LIPT_KERNELS_REDUCE_H
#define LIPT_KERNELS_REDUCE_H

#include <stddef.h>

#include "kernels/kctx.h"
#include "kernels/vmath.h"

/* db[j] += sign * sum_r g[r*P + j] (* w[r*P + j] when w is given), in double: the sums run over every row. */
void lipt_reduce_rows_acc(float *db, const float *g, const float *w, size_t rows, size_t P, double sign);

/* acc[j / LIPT_VDW][j % LIPT_VDW] += g[j] (* w[j] when w is given, the product in double) for j < n: one row (or a
 * row's segment) added to column sums held in double. */
static inline void lipt_colsum_acc(lipt_vdh *acc, const float *g, const float *w, size_t n) {
    const size_t nv = n / LIPT_VDW;
    for (size_t k = 0; k < nv; k++) {
        lipt_vdh t = lipt_vdh_loadf(g + k * LIPT_VDW);
        if (w) t = t * lipt_vdh_loadf(w + k * LIPT_VDW);
        acc[k] += t;
    }
    for (size_t j = nv * LIPT_VDW; j < n; j++) acc[j / LIPT_VDW][j % LIPT_VDW] += w ? (double)g[j] * w[j] : g[j];
}

/* Rows of a backward pass and their column sums in one pass: row(r, arg, dst) writes dx's row r (P floats; every row
 * once) to dst, which is dx + r P, or with dx NULL a row of scratch (when only the converted copy and the sums are
 * wanted: at a low precision the products read the converted rows, and writing the float ones to memory cost as much
 * as the pass); with db given, db[j] += Σ_r dx[r*P + j] of the rows just written (still in L1), summed in double by
 * fixed chunks of LIPT_COLSUM_ROWS rows, the chunks' sums in order: the same bits on any thread count. Threads take
 * chunks when rows * P >= par_min. Row chunks, not lipt_reduce_rows_acc's column blocks: whole rows stream
 * contiguously (on [2048, 1024], 2 threads, a separate lipt_reduce_rows_acc took about as long as GELU's backward).
 * Scratch in ctx's arena, released on return. With pk given (ctx at a low precision; from lipt_lowp_arena_buf),
 * each row is also written converted for the products that read dx next, while in cache. */
#define LIPT_COLSUM_ROWS 64
void lipt_rows_colsum(lipt_kctx *ctx, float *dx, size_t rows, size_t P, float *db, size_t par_min,
                      void (*row)(size_t r, void *arg, float *dst), void *arg, void *pk);

/* Σ g[i] (* w[i] when w is given) of n floats, in double: fixed chunks (their bounds depend on n only) each summed in
 * vector lanes, then the chunks' sums in order: the same bits on any thread count. */
double lipt_sum_f32(const float *g, const float *w, size_t n);

#endif
