/* Private: the activations' passes below the ops (issue 50; moved from src/ops/activation.c and maxmin.c): GELU and
 * MaxMin forward over arrays, their backward rows, and their backward fused with the bias's column sums, shared by
 * lipt_gelu, lipt_maxmin and the fused lipt_linear_gelu, lipt_linear_maxmin (src/ops/matmul.c). Fixed chunks: the
 * same bits on any thread count. */
#ifndef LIPT_KERNELS_ACT_H
#define LIPT_KERNELS_ACT_H

#include <stddef.h>

#include "kernels/kctx.h"
#include "kernels/vmath.h"

/* Below this many elements an activation's loop runs on one thread (exp/erf make these loops heavier than add). */
#define LIPT_ACT_PAR_MIN ((size_t)1 << 14)

/* The activations split their work in chunks of LIPT_ACT_CHUNK floats (a multiple of the vector width), so the
 * result does not depend on the thread count. */
#define LIPT_ACT_CHUNK ((size_t)4096)

/* Chunks of n floats, and the length of chunk c. */
static inline size_t lipt_act_nchunk(size_t n) { return (n + LIPT_ACT_CHUNK - 1) / LIPT_ACT_CHUNK; }
static inline size_t lipt_act_chunk_len(size_t n, size_t c) {
    return n - c * LIPT_ACT_CHUNK < LIPT_ACT_CHUNK ? n - c * LIPT_ACT_CHUNK : LIPT_ACT_CHUNK;
}

/* y = x Φ(x) over n floats (y may be x) on the context's threads, in fixed chunks; der, if not NULL, receives
 * GELU'(x) = Φ(x) + x φ(x) for the backward. */
void lipt_gelu_pass(const float *x, float *y, float *der, size_t n);
/* lipt_gelu_pass that also writes y converted for the products when pk is given (ctx at a low precision; pk from
 * lipt_lowp_arena_buf; ctx may be NULL without pk), each chunk while it is in cache: the consumer's conversion
 * would read y back from memory. */
void lipt_gelu_pass_pk(const lipt_kctx *ctx, const float *x, float *y, float *der, size_t n, void *pk);

/* GELU's backward over rows x P floats, dx = g GELU'(x) stored (not accumulated), with der = GELU'(x) as
 * lipt_gelu_pass saved it; and, when db is given, db[j] += Σ_r dx[r*P + j] in the same pass: summed in double by
 * fixed chunks of rows, the chunks in order (the same bits on any thread count; within float rounding of
 * lipt_reduce_rows_acc's row-order sum). Scratch in ctx's arena, released on return. pk: as lipt_rows_colsum's
 * (dx converted for the next products at a low precision), or NULL; dx NULL: not stored (only db and pk). */
void lipt_gelu_grad_colsum(lipt_kctx *ctx, const float *der, const float *g, float *dx, size_t rows, size_t P,
                           float *db, void *pk);

/* y = maxmin(a) over n floats (n even; y may be a), on the context's threads. */
void lipt_maxmin_pass(const float *a, float *y, size_t n);

/* MaxMin's backward over rows x P floats (P even): dx = the gradient g routed back through maxmin at its input a,
 * stored (not accumulated); and, when db is given, db[j] += Σ_r dx[r*P + j] in the same pass, summed in double by
 * fixed chunks of rows as lipt_gelu_grad_colsum; pk as there. */
void lipt_maxmin_grad_colsum(lipt_kctx *ctx, const float *a, const float *g, float *dx, size_t rows, size_t P,
                             float *db, void *pk);

/* dx[0..n) (+)= the gradient g routed back through maxmin at its input a (n floats from an even offset), one thread;
 * ix: lipt_pair_swap_idx() (kernels/rows.h). */
void lipt_maxmin_grad(const float *a, const float *g, float *dx, size_t n, int fresh, lipt_vi ix);

/* dx = g GELU'(x) over n floats, one thread (+= unless fresh); der = GELU'(x) = Φ(x) + x φ(x) as the forward
 * saved it. */
static inline void lipt_gelu_grad(const float *der, const float *g, float *dx, size_t n, int fresh) {
    if (fresh)
        for (size_t i = 0; i < n; i++) dx[i] = g[i] * der[i];
    else
        for (size_t i = 0; i < n; i++) dx[i] += g[i] * der[i];
}

#endif
