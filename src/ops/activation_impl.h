/* Private: the activations' passes shared by lipt_gelu, lipt_maxmin and the fused lipt_linear_gelu,
 * lipt_linear_maxmin (src/ops/matmul.c). */
#ifndef LIPT_OPS_ACTIVATION_IMPL_H
#define LIPT_OPS_ACTIVATION_IMPL_H

#include <stddef.h>

#include "lipt/autograd.h"

/* y = x Φ(x) over n floats (y may be x) on the context's threads, in fixed chunks; der, if not NULL, receives
 * GELU'(x) = Φ(x) + x φ(x) for the backward. */
void lipt_gelu_pass(const float *x, float *y, float *der, size_t n);
/* lipt_gelu_pass that also writes y converted for the products when pk is given (ctx at a low precision; pk from
 * lipt_lowp_arena_buf; ctx may be NULL without pk), each chunk while it is in cache: the consumer's conversion
 * would read y back from memory. */
void lipt_gelu_pass_pk(const lipt_ctx *ctx, const float *x, float *y, float *der, size_t n, void *pk);

/* GELU's backward over rows x P floats, dx = g GELU'(x) stored (not accumulated), with der = GELU'(x) as
 * lipt_gelu_pass saved it; and, when db is given, db[j] += Σ_r dx[r*P + j] in the same pass: summed in double by
 * fixed chunks of rows, the chunks in order (the same bits on any thread count; within float rounding of
 * lipt_reduce_rows_acc's row-order sum). Scratch in ctx's arena, released on return. pk: as lipt_rows_colsum's
 * (dx converted for the next products at a low precision), or NULL; dx NULL: not stored (only db and pk). */
void lipt_gelu_grad_colsum(lipt_ctx *ctx, const float *der, const float *g, float *dx, size_t rows, size_t P,
                           float *db, void *pk);

/* y = maxmin(a) over n floats (n even; y may be a), on the context's threads. */
void lipt_maxmin_pass(const float *a, float *y, size_t n);

/* MaxMin's backward over rows x P floats (P even): dx = the gradient g routed back through maxmin at its input a,
 * stored (not accumulated); and, when db is given, db[j] += Σ_r dx[r*P + j] in the same pass, summed in double by
 * fixed chunks of rows as lipt_gelu_grad_colsum; pk as there. */
void lipt_maxmin_grad_colsum(lipt_ctx *ctx, const float *a, const float *g, float *dx, size_t rows, size_t P,
                             float *db, void *pk);

#endif
