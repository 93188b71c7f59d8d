/* Private: the ops' maths on one row (or one block of attention rows), which their forward passes run and the
 * incremental decoder (src/nn/decode.c) calls with its cached rows, so that each formula is written once. All run on
 * the calling thread. */
#ifndef LIPT_OPS_ROWS_H
#define LIPT_OPS_ROWS_H

#include <math.h>
#include <stddef.h>

#include "lipt/config.h"
#include "lipt/ops.h"

/* y[0..D) = LayerNorm(x) (lipt_layernorm's row: two-pass mean and variance in double); gamma, beta may be NULL. */
void lipt_layernorm_row(const float *x, float *y, int D, const float *gamma, const float *beta, float eps);

/* y = x projected on the ball of radius R (lipt_clip_rows' row; y may be x); returns the scale R/‖x‖ applied, or 0
 * when the row was inside the ball (y = x). */
float lipt_clip_row(const float *x, float *y, int D, float R);

/* y[0..n) = the activation of x (y may be x), as the ops lipt_relu, lipt_elu, lipt_gelu, lipt_lipswish (β = beta) and
 * lipt_maxmin (n even, pairs from x[0]) compute it; lipt_maxmin_row: MaxMin's pairs alone. */
void lipt_act_row(lipt_act_kind act, float beta, const float *x, float *y, size_t n);
void lipt_maxmin_row(const float *x, float *y, size_t n);

/* ---- attention (src/ops/attention_dp.c, attention_rows.c) ----
 * The logits' scale a: logit (i, j) = a q_i·k_j (DP, a = 1/s) or a q_i·k_j - |k_j|²/s (L2, a = 2/s), s = √d. */
static inline float lipt_attn_logit_scale(int l2, int d) {
    const double inv_s = 1.0 / sqrt((double)d);
    return (float)((l2 ? 2.0 : 1.0) * inv_s);
}

/* The logits row[0..n) of query i (n = i + 1 when causal) into probabilities, in place: through the logit map when
 * map is given (map->forward_row with parameter mp; DP logits only, before any bias), + rel[i - j] when rel is given
 * (the head's relative bias, causal only), - kn[j] when kn is given (L2's |k_j|²/s), softmax; row[n..len) set to 0.
 * Returns the row's logit spread (max - min of what the softmax saw) when want_spread, else 0. */
float lipt_attn_probs_row(float *row, int i, int n, int len, const float *kn, const float *rel,
                          const lipt_logit_map *map, float mp, int want_spread);

/* One head's keys and values, for a block of its query rows. */
typedef struct {
    const float *k, *v;    /* key and value rows from position 0, row stride ld */
    const void *kpk, *vpk; /* at a low precision, their converted copies (lipt_lowp_pack_p at the same offsets), or
                            * NULL: the products convert them */
    const float *kt;       /* float32: the keys transposed, [d, ldkt], for the logits' product; or NULL */
    int ldkt;
    const float *kn;       /* L2: kn[j] = |k_j|²/s (lipt_attn_l2_key_norms), else NULL */
    const float *rel;      /* the head's relative-position bias (logit (i, j) gets rel[i - j]), or NULL */
    int ld, d, causal;
    float alpha;           /* lipt_attn_logit_scale */
    const lipt_logit_map *map; /* the map of the DP logits (include/lipt/logit_map.h), or NULL: none */
    float map_param;
} lipt_attn_head;

/* Query rows [i0, i1) of a head against its keys [0, nc) (nc = i1 when causal), at ctx's precision: the logits as
 * one product, lipt_attn_probs_row on each row, and o = P v as one product. q: query row i0 (row stride h->ld), qpk
 * its converted copy or NULL; P: row i0 of the probabilities (row stride ldp, columns up to ldp written); ppk: at a
 * low precision, where the probabilities are converted as they are made (row stride nc), or NULL; o: output row i0
 * (row stride ldo). Returns the largest logit spread when want_spread, else 0. The kernel of the attention ops
 * (lipt_attn_forward) and the decoder's block of new rows. */
float lipt_attn_rows(lipt_ctx *ctx, const lipt_attn_head *h, const float *q, const void *qpk, int i0, int i1, int nc,
                     float *P, int ldp, void *ppk, float *o, int ldo, int want_spread);

/* One query row i = n - 1 of a causal head against its n keys, with plain loops instead of products (a product of
 * one row costs more to set up than it computes): row[0..n) receives the probabilities (as lipt_attn_probs_row), o[0..d)
 * the output Σ_j P_j v_j, accumulated in double. bf16: q, k, the probabilities and v rounded to bf16 first, as the
 * low-precision products round them. acc: d doubles of scratch. The decoder's one new token. */
void lipt_attn_query_row(const lipt_attn_head *h, const float *q, int n, int bf16, float *row, double *acc, float *o);

#endif
