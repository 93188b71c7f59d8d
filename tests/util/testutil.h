/* defines: shared test helpers: persistent test tensors, the finite-difference gradient check, relative errors. */
#ifndef LIPT_TESTUTIL_H
#define LIPT_TESTUTIL_H

#include <check.h>
#include <stdio.h>

#include "lipt/lipt.h"

/* A test tensor outside any arena (survives lipt_ctx_reset), filled N(0, std²); free with tu_free. */
lipt_tensor *tu_tensor(lipt_rng *rng, int ndim, const int *shape, float std, int requires_grad);
void tu_free(lipt_tensor *t);

/* Builds the op's output from the inputs; called many times on fresh tapes. */
typedef lipt_tensor *(*tu_build_fn)(lipt_ctx *ctx, lipt_tensor **in, void *user);

typedef struct {
    int n_dirs;        /* random directions per check (default 6) */
    double eps;        /* central-difference step (default 1e-3) */
    double tol;        /* worst relative error allowed (default 1e-2) */
    uint64_t seed;     /* directions and output weights */
} tu_gradcheck_opts;

/* Checks the backward of `build` against central finite differences of L = Σ_i r_i out_i (r random,
 * L accumulated in double) along n_dirs random directions over all inputs that require grad.
 * The context's RNG is re-seeded identically before every evaluation (so dropout masks repeat).
 * Returns the worst relative error |an - fd| / max(|an|, |fd|, 0.05 |g|), prints it with `label`. */
double tu_gradcheck(const char *label, tu_build_fn build, void *user, lipt_tensor **in, int n_in,
                    const tu_gradcheck_opts *opts);

/* max_i |a_i - b_i| / max(max_i |b_i|, floor): relative to the reference's scale. */
double tu_max_rel_err(const float *a, const double *ref, size_t n, double floor);
double tu_max_rel_err_f(const float *a, const float *ref, size_t n, double floor);
/* max_i of the distance from a_i to b_i counted in floats (0: equal, 1: neighbours; INT64_MAX if one is NaN and
 * the other not). */
int64_t tu_max_ulps(const float *a, const float *b, size_t n);

/* Path of a file in ../shared/data (or $LIPT_SHARED_DATA), or NULL if absent. */
const char *tu_shared_data(const char *rel, char *buf, size_t len);

/* The sweep stride: 1, or N when LIPT_TEST_QUICK=N (scripts/test.sh's quick mode sets 4 for the sanitizer run; a
 * value that is not a number above 1 means 2). The suites whose randomised sweeps dominate the suite's time under the
 * sanitizers then take the configurations whose index sum is a multiple of N (a diagonal pattern, so every axis value
 * is still met when the other axes span N residues); the release run and --full always take all of them. */
int tu_quick(void);
/* 1 when the configuration with index sum idx is to be skipped: idx % tu_quick() != 0. */
int tu_skip(int idx);

/* Runs a suite with CK_NORMAL output and returns the process exit code. */
int tu_run_suite(Suite *s);

/* steps AdamW steps (lr 3e-3, clip 1) of a model built from cfg, in ctx (the caller's settings: recompute, profile,
 * kernels), on random batches of 2 rows from a generator seeded with 5: each step's loss into loss[steps], the
 * parameters after them (and the last step's gradient, when grad is not NULL) into malloc'd copies of *n floats;
 * the seconds spent in lipt_train_step into *wall (when not NULL). */
void tu_train_steps(const lipt_config *cfg, lipt_ctx *ctx, int steps, double *loss, float **slab, float **grad,
                    size_t *n, double *wall);

#endif
