/* A block described once (issue 50, item 2): the two half-blocks of a Transformer block as lists of steps, made by
 * one function (lipt_block_halves, block_plan.c) from the configuration. The training forward and its recompute
 * (branch.c), the incremental decoder (decode.c), the model inversion (invert_model.c) and the reversible backward
 * (reversible.c) walk these lists; each evaluates a step its own way (tape ops, cached row kernels, the inverter),
 * but which steps a half has, and their order, come from here only. Adding a kind of half-block, a norm or a
 * map after the sum is a change to lipt_block_halves (and to the walkers' switch for a new step kind).
 *
 * A half-block maps x to y: the steps before LIPT_STEP_ADD build the branch g from x (g starts as x), ADD forms
 * x + g, the steps after it map that sum to y. Inversion undoes the steps after ADD from the last (each must be
 * invertible: ActNorm is, a LayerNorm is not) and then solves x + g(x) = y as `inverse` says. */
#ifndef LIPT_NN_BLOCK_PLAN_H
#define LIPT_NN_BLOCK_PLAN_H

#include "lipt/model.h"

typedef enum {
    LIPT_STEP_KEEP_HALF, /* arg: coupling, keep channels [0, D/2) (arg 0) or [D/2, D) (arg 1), zero the others */
    LIPT_STEP_LN,        /* arg: the layer's LayerNorm, 1 (ln1) or 2 (ln2); before ADD pre-LN, after it post-LN */
    LIPT_STEP_BRANCH,    /* the half's map (lipt_half_desc.which), scaled as lipt_half_desc.scale says */
    LIPT_STEP_DROPOUT,   /* training only (ctx->training and dropout > 0): identity at inference */
    LIPT_STEP_GRID,      /* arg: coupling_grid bits: rounded onto the residual stream's grid, so that ADD is exact */
    LIPT_STEP_ADD,       /* the residual sum x + g */
    LIPT_STEP_ACTNORM    /* x exp(log_scale) + bias, the layer's ActNorm */
} lipt_step_kind;

typedef enum {
    LIPT_SCALE_NONE,     /* the branch's weights as they are */
    LIPT_SCALE_WO,       /* attention: W^O times 1/max(1, UB/c[0]), UB the certified bound (lipt_model_attn_factor) */
    LIPT_SCALE_W1W2      /* feed-forward: W_i times 1/max(1, sigma(W_i)/c[i]), sigma certified by Gram iteration */
} lipt_scale_kind;

typedef enum {
    LIPT_INVERSE_NONE,        /* not invertible (pre-/post-LN variants without coupling) */
    LIPT_INVERSE_SUBTRACT,    /* coupling: g reads the half the sum leaves alone, x = y - g(y), one evaluation */
    LIPT_INVERSE_FIXED_POINT  /* g a contraction (certified): x = y - g(x) by fixed-point iteration */
} lipt_inverse_kind;

typedef struct {
    lipt_step_kind kind;
    int arg;
} lipt_step;

#define LIPT_HALF_MAX_STEPS 10

typedef struct {
    int which;                 /* LIPT_BRANCH_ATTN or LIPT_BRANCH_FFN: the map of the BRANCH step */
    int token_wise;            /* the branch maps each token alone: recomputed and inverted row by row */
    lipt_scale_kind scale;
    float scale_c[2];          /* the budgets of LIPT_SCALE_WO (c[0]) and LIPT_SCALE_W1W2 (c[0] for W1, c[1] W2) */
    lipt_inverse_kind inverse;
    int n_steps, add;          /* add: the index of the LIPT_STEP_ADD step */
    lipt_step step[LIPT_HALF_MAX_STEPS];
} lipt_half_desc;

/* The half-blocks of block `layer` (>= 0; every layer is alike today) of a model with configuration c, in the order
 * the forward runs them: out[0] the attention half, out[1] the feed-forward half. */
void lipt_block_halves(const lipt_config *c, int layer, lipt_half_desc out[2]);

/* The half (layer, which) alone (which: LIPT_BRANCH_ATTN or LIPT_BRANCH_FFN). */
lipt_half_desc lipt_block_half(const lipt_config *c, int layer, int which);

/* The steps after the residual sum undone from the last, on y (n floats, rows of d_model; z may be y) into z: each
 * must be invertible (ActNorm, in double). A half whose `inverse` is not LIPT_INVERSE_NONE has only such steps. */
void lipt_half_undo_after(const lipt_layer *L, const lipt_half_desc *h, const float *y, float *z, size_t n, int D);

/* A half with steps after its residual sum (then its inverse starts with lipt_half_undo_after). */
static inline int lipt_half_has_after(const lipt_half_desc *h) { return h->add < h->n_steps - 1; }

/* Whether h has a step of kind k; the LayerNorm h uses (an LIPT_STEP_LN's arg: 1 ln1, 2 ln2), 0 for none. The
 * parameters a layer registers follow from these. */
static inline int lipt_half_has(const lipt_half_desc *h, lipt_step_kind k) {
    for (int i = 0; i < h->n_steps; i++)
        if (h->step[i].kind == k) return 1;
    return 0;
}
static inline int lipt_half_ln(const lipt_half_desc *h) {
    for (int i = 0; i < h->n_steps; i++)
        if (h->step[i].kind == LIPT_STEP_LN) return h->step[i].arg;
    return 0;
}

/* The LayerNorm parameters that an LIPT_STEP_LN step names (arg 1: ln1, 2: ln2). */
static inline void lipt_step_ln(const lipt_layer *L, int arg, lipt_tensor **g, lipt_tensor **b) {
    *g = arg == 1 ? L->ln1_g : L->ln2_g;
    *b = arg == 1 ? L->ln1_b : L->ln2_b;
}

#endif
