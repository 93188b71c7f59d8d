/* defines: one attention layer as a map for the synthetic experiments (tightness, invertibility), private to them. */
#ifndef LIPT_EVAL_EXP_ATTN_H
#define LIPT_EVAL_EXP_ATTN_H

#include <stdint.h>

#include "lipt/bounds.h"

typedef enum { EXP_ATT_L2_TIED, EXP_ATT_DP } exp_att_kind;

/* Weights of one attention layer, in their own context (no gradients: constants of the maps). */
typedef struct {
    lipt_ctx ctx;
    int D;
    lipt_tensor *wq, *wk, *wv, *wo;
} exp_att_weights;

/* "ones": every entry = scale; "random": N(0, scale² / D) (rows of about unit norm for scale 1). */
void exp_att_init(exp_att_weights *w, int D, int ones, double scale, uint64_t seed);
void exp_att_clone(exp_att_weights *dst, const exp_att_weights *src);
void exp_att_free(exp_att_weights *w);

/* F(X) = mult · Attn(X) W^O on X [N, D]: tied L2 (values X A_h W^{V,h}) or DP (its own W^K). */
typedef struct {
    exp_att_kind kind;
    int N, D, H, causal;
    const exp_att_weights *w;
    float mult;
} exp_att_map;

/* F as a lipt_jac_map / fixed-point callback; user is an exp_att_map. */
lipt_tensor *exp_att_forward(lipt_ctx *ctx, lipt_tensor *x, void *user);

/* The ∞-norm bound of SPEC §2 for these weights at sequence length N. */
double exp_att_bound_inf(const exp_att_weights *w, int H, int N);
/* The 2-norm bound; vec holds converged power-iteration vectors (iters rounds run first). */
double exp_att_bound_2(const exp_att_weights *w, int H, int N, lipt_bound_vectors *vec, int iters);

#endif
