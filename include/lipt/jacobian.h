/* defines: exact Jacobians of shape-preserving maps X ↦ f(X) by vector-Jacobian products, their induced ∞- and
 * 2-norms, and gradient ascent on those norms over the input (lower bounds on Lip, SPEC §4.1 and §6). */
#ifndef LIPT_JACOBIAN_H
#define LIPT_JACOBIAN_H

#include "lipt/invert.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The map under study. f is called on a private context (grad mode, not training) with x of the given shape
 * (requires_grad set) and must return a tensor of the same numel, as a deterministic function of x.
 * Tensors f reaches through `user` (weights) are treated as constants: while a Jacobian tool runs their
 * requires_grad flags are cleared (and restored before it returns), so no gradient reaches them and a
 * parameter slab's gradients are left untouched. Do not use f's weights from another thread meanwhile.
 * parallel = 1 declares that f may run concurrently on several private contexts (it only reads what `user`
 * points to: e.g. spectral norms with iters = 0); full-Jacobian passes (n products) then split the rows over
 * the OpenMP threads when BLAS calls nest safely (lipt_blas_nests_safely). 0 keeps every call on one thread. */
typedef struct {
    lipt_branch_fn f;
    void *user;
    int ndim;
    int shape[LIPT_MAX_DIMS];
    int parallel;
} lipt_jac_map;

/* Number of input (= output) elements n of the map. */
size_t lipt_jac_numel(const lipt_jac_map *m);

/* Exact Jacobian at x (n floats): J[r*n + c] = ∂f(x)_r / ∂x_c (row-major n × n, double), from one forward
 * and n vector-Jacobian products (row r is the gradient of f_r). LIPT_ERR_NUMERIC if a value is not finite,
 * LIPT_ERR_ARG if f changes the number of elements. */
lipt_status lipt_jacobian(const lipt_jac_map *m, const float *x, double *J, lipt_error *err);
/* Rows rows[0..k) of the Jacobian at x into out (k × n, row-major). */
lipt_status lipt_jacobian_rows(const lipt_jac_map *m, const float *x, const size_t *rows, size_t k, double *out,
                               lipt_error *err);
/* ‖J(x)‖_∞ = max_r Σ_c |J_rc| without storing J (n vector-Jacobian products); argmax_row may be NULL. */
lipt_status lipt_jacobian_norm_inf_at(const lipt_jac_map *m, const float *x, double *norm, size_t *argmax_row,
                                      lipt_error *err);

/* Induced norms of a dense row-major m × n matrix: max abs row sum, and the largest singular value (Lanczos on
 * JᵀJ with full reorthogonalisation, at most 400 steps, until the Ritz residual r satisfies r ≤ 1e-9 σ² or
 * r² ≤ 1e-13 σ² gap: σ is accurate to about 1e-9 relative, or to the width of a cluster of top singular values,
 * and does not exceed the true value beyond rounding). u [m] and v [n] receive the top singular pair
 * (J v = σ u, unit vectors) when non-NULL. */
double lipt_matrix_norm_inf(const double *J, size_t m, size_t n);
double lipt_matrix_norm_2(const double *J, size_t m, size_t n, double *u, double *v);

/* The operator norm of an N·D square Jacobian (tokens of width D, token-major) in the token-wise mixed norm
 * ‖X‖_{∞,2} = max_i ‖x_i‖₂, the norm clipped-dp and the inf2 bounds certify in. Returns a LOWER bound (the best
 * value of an alternating maximisation per output token, each attained by a feasible input direction), and in
 * *upper (may be NULL) the upper bound max_i Σ_k ‖J_ik‖₂ (block norms by lipt_matrix_norm_2). */
double lipt_matrix_norm_inf2(const double *J, size_t N, size_t D, double *upper);

/* Gradient ascent (Adam) on ‖J_f(X)‖ over X from random starts.
 * ∞-norm: the objective is the largest absolute row sum; its gradient along the current best row i with sign
 *   vector s = sign(J_i·) is the Hessian-vector product H_{f_i} s, taken as the central difference
 *   (∇f_i(X + εs) − ∇f_i(X − εs)) / 2ε of two exact row gradients. Each step follows `candidates` rows (the
 *   largest row sums of the last full scan), so a step costs candidates + 2 vector-Jacobian products,
 *   independent of n; full scans (n products) happen at each start, every `rescan_every` steps, and at the end.
 * 2-norm: the objective is uᵀ J v with (u, v) tracked by one power-iteration round per step (Jᵀu exact,
 *   J v by a central difference); its gradient is H_{uᵀf} v = (∇(uᵀf)(X + εv) − ∇(uᵀf)(X − εv)) / 2ε.
 * Every reported value is an exact row sum or ‖Jᵀu‖ with unit u (or an exact norm), i.e. a true lower bound
 * on Lip_p(f) up to float rounding; the final best point is re-measured with the full Jacobian when n ≤ max_exact.
 * Cost hint for long sequences (n = N·D in the thousands): a full scan is n backward passes, so set
 * max_exact below n (or give `rows`) to keep the ∞ ascent at candidates + 2 products per step. */
typedef struct {
    int starts;           /* random starts */
    int steps;            /* Adam steps per start */
    double lr;            /* Adam step size, in units of input_scale */
    double input_scale;   /* starts are N(0, input_scale²) entries */
    double fd_eps;        /* central-difference step, relative to the rms (∞) or the 2-norm (2) of X */
    int candidates;       /* ∞: rows followed per step */
    const size_t *rows;   /* ∞: if non-NULL, follow exactly these `candidates` rows (no scans during the ascent).
                           * Unmasked attention is permutation-equivariant, so one fixed row loses nothing there;
                           * with the causal mask the last row sees every token. */
    int rescan_every;     /* ∞: full row scan every this many steps (0: only at each start and at the end) */
    int power_init;       /* 2: power rounds at a start when n > max_exact (else the exact top pair is used) */
    size_t max_exact;     /* full Jacobians (scans, exact start pair, final re-measure) only when n ≤ max_exact */
    const float *x0;      /* if non-NULL, the first start is this point (n floats) instead of a random one */
    uint64_t seed;
} lipt_ascent_opts;

/* starts 8, steps 100, lr 0.05, input_scale 1, fd_eps 1e-3, candidates 4, rows NULL, rescan_every 0,
 * power_init 30, max_exact 4096, x0 NULL, seed 1. */
lipt_ascent_opts lipt_ascent_defaults(void);

typedef struct {
    double best;          /* largest norm found (at x_best) */
    double best_random;   /* largest norm at the random starts before any step */
    int best_start;       /* start that produced best */
    int n_diverged;       /* starts ended early by a non-finite value (their best so far is kept) */
    long n_forward, n_vjp;/* work done */
    double *start_best;   /* caller-owned, `starts` long, or NULL: the best norm of each start */
} lipt_ascent_result;

/* x_best (n floats, may be NULL) receives the maximiser. res->start_best is read as a caller buffer. */
lipt_status lipt_ascent_jac_inf(const lipt_jac_map *m, const lipt_ascent_opts *opts, float *x_best,
                                lipt_ascent_result *res, lipt_error *err);
lipt_status lipt_ascent_jac_2(const lipt_jac_map *m, const lipt_ascent_opts *opts, float *x_best,
                              lipt_ascent_result *res, lipt_error *err);

#ifdef __cplusplus
}
#endif
#endif
