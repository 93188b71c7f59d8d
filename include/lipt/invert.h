/* defines: fixed-point inversion of residual maps y = x + g(x) (SPEC §3), with a per-iteration trace, and
 * model inversion (lipt_model_invert: every block of an invertible model, then the nearest tokens). */
#ifndef LIPT_INVERT_H
#define LIPT_INVERT_H

#include "lipt/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A residual branch g: same shape in and out. Called in no-grad mode by the inverter. */
typedef lipt_tensor *(*lipt_branch_fn)(lipt_ctx *ctx, lipt_tensor *x, void *user);

typedef struct {
    double tol;        /* stop when ‖x_{k+1} - x_k‖ <= tol * max(1, ‖x_k‖) (relative) */
    int max_iter;      /* iteration cap */
    int row_width;     /* the norm ‖·‖ of the stopping rule: 0, the largest entry; W > 0, the token-wise norm, the largest
                        * 2-norm over rows of W entries (for maps certified in that norm) */
} lipt_fp_opts;

typedef struct {
    int iters;         /* iterations run */
    int converged;     /* 1 if the tolerance was met within the cap */
    double *err;       /* err[k] = ‖x_{k+1} - x_k‖ (opts' norm) after iteration k (k < iters); caller-owned, max_iter long, may be NULL */
    double final_err;
} lipt_fp_result;

/* Solve x + g(x) = y for x by x ← y − g(x) from x⁰ = y. Writes x into `x_out` (y->numel floats,
 * not in the arena). Resets nothing: the caller's arena holds temporaries; the inverter uses
 * lipt_arena marks internally so memory does not grow with the iteration count.
 * Returns LIPT_OK, or LIPT_ERR_NUMERIC when not converged (x_out then holds the last iterate,
 * `err` says how far it got) or when an iterate became non-finite. */
lipt_status lipt_fixed_point_invert(lipt_ctx *ctx, lipt_branch_fn g, void *user, const lipt_tensor *y,
                                    float *x_out, const lipt_fp_opts *opts, lipt_fp_result *res, lipt_error *err);

/* The model (lipt/model.h defines it; declared here so that this header does not need the model's). */
typedef struct lipt_model lipt_model;

/* Model inversion (SPEC §3): forward in no-grad mode to the last hidden state, undo the blocks from the top
 * (feed-forward map, then attention map, each by lipt_fixed_point_invert), subtract the positional
 * embedding, take the nearest token embedding per position (Euclidean). One sequence ids[T]. */
typedef struct {
    int n_layers, T, max_iter;
    int *iters;           /* [2*n_layers]: iterations of map (layer l, branch b) at 2*l + b */
    int *converged;       /* [2*n_layers] */
    double *err;          /* [2*n_layers*max_iter]: per-iteration change, map m at m*max_iter (first iters[m]) */
    int total_iters;
    int *tokens;          /* [T] recovered tokens (valid only when status is LIPT_OK) */
    int tokens_correct;   /* positions where tokens[t] == ids[t] */
    int exact;            /* tokens_correct == T */
    double max_abs_input_err;  /* max |x0_recovered - (tok_emb[ids] + pos_emb)| */
    int failed_layer, failed_branch;  /* the map that did not converge, or -1 */
    double failed_err;    /* its last change */
} lipt_model_invert_result;

/* Returns LIPT_OK with the result filled; LIPT_ERR_ARG for a model that is not invertible or bad ids;
 * LIPT_ERR_NUMERIC when a map does not converge (the message names the layer, branch, iterations and last
 * error; the result holds the trace up to there). Free the result with lipt_model_invert_result_free in
 * every case. opts NULL: tol 1e-6, max_iter 100. */
lipt_status lipt_model_invert(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, const lipt_fp_opts *opts,
                              lipt_model_invert_result *res, lipt_error *err);
void lipt_model_invert_result_free(lipt_model_invert_result *res);

#ifdef __cplusplus
}
#endif
#endif
