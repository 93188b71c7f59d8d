/* defines: fixed-point inversion of residual maps y = x + g(x) (SPEC §3), with a per-iteration trace; the inversion
 * defaults; model inversion from a hidden state (lipt_model_invert_hidden: every block of an invertible model undone
 * from the top) and from tokens (lipt_model_invert: the forward pass, the blocks undone, then the nearest tokens). */
#ifndef LIPT_INVERT_H
#define LIPT_INVERT_H

#include "lipt/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A residual branch g: same shape in and out. Called in no-grad mode by the inverter. */
typedef lipt_tensor *(*lipt_branch_fn)(lipt_ctx *ctx, lipt_tensor *x, void *user);

/* The inversion defaults, used wherever the caller gives no options (lipt_fp_opts_default): the relative tolerance
 * and the iteration cap per map. LIPT_INVERT_STR writes them in help texts (LIPT_INVERT_STR(LIPT_INVERT_TOL) is
 * "1e-6"). python/lipt_torch.py's INVERT_TOL and INVERT_MAX_ITER hold the same values (the golden test checks that
 * tests/golden/ was made with them). */
#define LIPT_INVERT_TOL 1e-6
#define LIPT_INVERT_MAX_ITER 100
#define LIPT_INVERT_STR_(v) #v
#define LIPT_INVERT_STR(v) LIPT_INVERT_STR_(v)

typedef struct {
    double tol;        /* stop when ‖x_{k+1} - x_k‖ <= tol * max(1, ‖x_k‖) (relative) */
    int max_iter;      /* iteration cap */
    int row_width;     /* the norm ‖·‖ of the stopping rule: 0, the largest entry; W > 0, the token-wise norm, the largest
                        * 2-norm over rows of W entries (for maps certified in that norm) */
    int accel;         /* model inversion only: 0, this plain iteration (a trace per iteration); 1, the accelerated
                        * solver (lipt_fixed_point_invert_accel) with Anderson history `memory` (0: plain), stopped by
                        * the certificate's a-posteriori bound <= tol (no per-iteration trace: the bound at its end) */
    int memory;
} lipt_fp_opts;

/* {LIPT_INVERT_TOL, LIPT_INVERT_MAX_ITER, 0}: the largest entry as the norm. */
lipt_fp_opts lipt_fp_opts_default(void);

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

/* Accelerated inversion (reversible training): solve x + g(x) = y by Anderson mixing of the last `memory` residuals
 * (0: plain iteration x ← y − g(x)), separately for each of `groups` equal slices of y along its first dimension
 * (sequences, or tokens for a token-wise g: independent problems), from x⁰ = y. A slice stops when its a-posteriori bound
 * lip/(1 − lip) · ‖G(x) − x‖ / max(1, ‖x‖) ≤ tol, G(x) = y − g(x), ‖·‖ as lipt_fp_opts' row_width, and returns G(x),
 * whose distance to the true input that bound covers when lip is a certified Lipschitz constant of g in that norm
 * (lip = 0: the bound is the change itself, no certificate behind it). A step that raises a slice's residual above
 * its best drops the history (a plain step; counted in info->fallbacks). Memory: 2 (memory + 1) copies of y in ctx's
 * arena, released on return. info: evaluations of g, fallbacks, converged, the largest relative bound. Returns
 * LIPT_OK; LIPT_ERR_NUMERIC when a slice is not within tol after max_iter evaluations or a value is not finite
 * (x_out holds the last iterate); LIPT_ERR_ARG for bad options. */
typedef struct {
    double tol;
    int max_iter;
    int row_width;
    int groups;
    int memory;
    double lip;
    int compact;       /* evaluate g on the slices still iterating only, gathered ([active, T, D] for sequences,
                        * [active, 1, D] for tokens): for a g whose slices are independent and deterministic (no
                        * dropout mask drawn over the whole tensor) */
} lipt_fp_accel_opts;
#define LIPT_ACCEL_MEMORY 5 /* Anderson's history by default (SciPy's anderson: 5, torchdeq: 6) */
lipt_status lipt_fixed_point_invert_accel(lipt_ctx *ctx, lipt_branch_fn g, void *user, const lipt_tensor *y,
                                          float *x_out, const lipt_fp_accel_opts *o, lipt_inv_info *info,
                                          lipt_error *err);

/* The model (lipt/model.h defines it; declared here so that this header does not need the model's). */
typedef struct lipt_model lipt_model;

/* The options a model inversion runs with: *opts (NULL: lipt_fp_opts_default()), with the row width of the norm the
 * model's maps are certified in: d_model for lip_norm = inf2 (the token-wise norm; clipped-dp, and contractive-l2
 * with inf2), else opts' own (0 by default: the largest entry). */
lipt_fp_opts lipt_model_invert_opts(const lipt_model *m, const lipt_fp_opts *opts);

/* The per-map trace of a model inversion. Map k = 2*layer + branch (branch LIPT_BRANCH_ATTN 0, LIPT_BRANCH_FFN 1);
 * the maps run from the top, k = 2*n_layers - 1 first, and those not reached keep iters 0. The arrays belong to the
 * trace: free it with lipt_invert_trace_free. */
typedef struct {
    int n_layers, max_iter;
    int *iters;           /* [2*n_layers]: iterations of map k */
    int *converged;       /* [2*n_layers]: 1 if map k met the tolerance within the cap */
    double *err;          /* [2*n_layers*max_iter]: map k's change after each iteration, in the stopping norm
                           * (lipt_model_invert_opts), at k*max_iter (the first iters[k] are set, the rest 0) */
    int total_iters;      /* sum of iters */
    int failed_layer, failed_branch;  /* the map that did not converge, or -1 */
    double failed_err;    /* its last change */
} lipt_invert_trace;
void lipt_invert_trace_free(lipt_invert_trace *trace);

/* Model inversion from a hidden state (SPEC §3): h [T, d_model] floats, the last block's output for one sequence of
 * T <= seq_len positions (before the final LayerNorm: lipt_model_hidden), back to the blocks' input, the token plus
 * positional embedding sum, written to x0 [T, d_model] (caller-owned; x0 may be h, which is read once at the start).
 * Per block from the top: ActNorm undone exactly, then the feed-forward map, then the attention map, each by
 * lipt_fixed_point_invert over lipt_model_branch_fn with lipt_model_invert_opts(m, opts). Runs in no-grad mode
 * without dropout; ctx's arena holds only temporaries, released before it returns. trace: NULL, or filled (its arrays
 * allocated here; free it with lipt_invert_trace_free in every case).
 * Returns LIPT_OK (x0 written); LIPT_ERR_ARG for a model that is neither invertible nor coupling, T out of range or bad
 * options; LIPT_ERR_NUMERIC when a map does not converge or meets a non-finite value (the message names the layer,
 * branch, iterations and last change; x0 is then unspecified and the trace holds the maps up to there). */
lipt_status lipt_model_invert_hidden(lipt_ctx *ctx, const lipt_model *m, const float *h, int T, float *x0,
                                     const lipt_fp_opts *opts, lipt_invert_trace *trace, lipt_error *err);

/* Model inversion from tokens: one sequence ids[T] forward in no-grad mode without dropout to the last hidden state,
 * lipt_model_invert_hidden, then pos_emb subtracted and the nearest token embedding per position (Euclidean, ties to
 * the lowest id). */
typedef struct {
    lipt_invert_trace trace;
    int T;
    int *tokens;          /* [T] recovered tokens (valid only when status is LIPT_OK) */
    int tokens_correct;   /* positions where tokens[t] == ids[t] */
    int exact;            /* tokens_correct == T */
    double max_abs_input_err;  /* max |x0_recovered - (tok_emb[ids] + pos_emb)| */
} lipt_model_invert_result;

/* Returns LIPT_OK with the result filled; LIPT_ERR_ARG for a model that is not invertible, bad ids or options;
 * LIPT_ERR_NUMERIC when a map does not converge (as lipt_model_invert_hidden; the result's trace holds the maps up to
 * there). Free the result with lipt_model_invert_result_free in every case. opts NULL: lipt_fp_opts_default(). */
lipt_status lipt_model_invert(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, const lipt_fp_opts *opts,
                              lipt_model_invert_result *res, lipt_error *err);
void lipt_model_invert_result_free(lipt_model_invert_result *res);

#ifdef __cplusplus
}
#endif
#endif
