/* defines: fixed-point inversion of residual maps y = x + g(x) (SPEC §3), with a per-iteration trace. */
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

#ifdef __cplusplus
}
#endif
#endif
