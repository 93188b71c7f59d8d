/* Private: the ops' maths on one row, which their forward passes run and the incremental decoder (src/nn/decode.c)
 * calls with its cached rows, so that each formula is written once (src/kernels/rows.c; moved from src/ops, issue 50).
 * All run on the calling thread. */
#ifndef LIPT_KERNELS_ROWS_H
#define LIPT_KERNELS_ROWS_H

#include <math.h>
#include <stddef.h>

#include "kernels/vmath.h"
#include "lipt/config.h"

/* y[0..D) = LayerNorm(x) (lipt_layernorm's row: two-pass mean and variance in double); gamma, beta may be NULL. */
void lipt_layernorm_row(const float *x, float *y, int D, const float *gamma, const float *beta, float eps);

/* y = x projected on the ball of radius R (lipt_clip_rows' row; y may be x); returns the scale R/‖x‖ applied, or 0
 * when the row was inside the ball (y = x). */
float lipt_clip_row(const float *x, float *y, int D, float R);

/* y[0..n) = the activation of x (y may be x), as the ops lipt_relu, lipt_elu, lipt_gelu, lipt_lipswish (β = beta) and
 * lipt_maxmin (n even, pairs from x[0]) compute it; lipt_maxmin_row: MaxMin's pairs alone. */
void lipt_act_row(lipt_act_kind act, float beta, const float *x, float *y, size_t n);
void lipt_maxmin_row(const float *x, float *y, size_t n);

#define LIPT_LIPSWISH_SCALE 1.1f                     /* max of d/dx x·sigmoid(x) is ~1.0998, so /1.1 makes it 1-Lipschitz */

/* Both directions work on vectors of LIPT_VW floats, whole pairs (LIPT_VW is even; a vector starts at a multiple of
 * LIPT_VW, so at a pair's first element): a lane's partner is the lane next to it, and a lane keeps its own value
 * (forward) or gradient (backward) when the pair's order test u >= v (u the pair's first element) says so for its
 * position. Even lanes hold u: the max goes there, u itself when u >= v. Odd lanes hold v: the min goes there, v
 * itself when u >= v. These are exactly the scalar selections (ties keep the order, u first, so the backward routes
 * each gradient to one input; a NaN makes the test false, as in the scalar code), without their unpredictable
 * branches. */
static inline lipt_vi lipt_pair_swap_idx(void) {
    lipt_vi ix;
    for (int i = 0; i < LIPT_VW; i++) ix[i] = i ^ 1;
    return ix;
}

/* v with each pair of lanes swapped: gcc's __builtin_shuffle with the index vector; clang (the fuzz and sanitizer
 * builds) has only __builtin_shufflevector, whose indices must be constants. */
static inline lipt_vf lipt_pair_swap(lipt_vf v, lipt_vi ix) {
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
static inline lipt_vi lipt_pair_keep_mask(lipt_vf a, lipt_vf sw) {
    lipt_vi even;
    for (int i = 0; i < LIPT_VW; i++) even[i] = i % 2 == 0 ? -1 : 0;
    return (even & (a >= sw)) | (~even & (sw >= a));
}

#endif
