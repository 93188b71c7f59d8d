/* Private: power iteration on many matrices at once, for lipt_model_refresh_norms (src/nn/model.c); the rounding
 * helpers of the certified bounds (spectral_gram.c, spectral_verify.c), the Cholesky-verified bound of a Gram
 * matrix's largest eigenvalue (spectral_verify.c), and what the power iteration (spectral.c), the Gram-iteration bound
 * (spectral_gram.c) and the batch of certificates (spectral_cert.c) share. */
#ifndef LIPT_LIPSCHITZ_SPECTRAL_IMPL_H
#define LIPT_LIPSCHITZ_SPECTRAL_IMPL_H

#include <math.h>
#include <stddef.h>

#include "lipt/ops.h"

/* A row-major [R, C] matrix split into n_blocks column blocks, with its persistent power-iteration vectors
 * u [n_blocks*R] and v [C] (as lipt_spectral_norm takes them). */
typedef struct {
    const float *w;
    int R, C, n_blocks;
    float *u, *v;
} lipt_power_job;

/* `iters` rounds of lipt_spectral_norm's power iteration on every block of every job, leaving u and v exactly as
 * that many lipt_spectral_norm calls would (without computing the norms). The blocks run in parallel, each on one
 * thread; the jobs must not share vectors. */
void lipt_spectral_power_jobs(const lipt_power_job *jobs, int n_jobs, int iters);

/* The next double up: >= the exact value of an operation whose round-to-nearest result is x. */
static inline double lipt_ub_up(double x) { return nextafter(x, INFINITY); }

/* An upper bound of k uu / (1 - k uu) (gamma_k at unit roundoff uu); the factor 1 + 2^-40 covers the three
 * roundings of its evaluation. +inf (a useless but valid bound) for absurd k. */
static inline double lipt_ub_gamma_at(double k, double uu) {
    double ku = k * uu;
    return ku < 0.25 ? ku / (1 - ku) * (1 + 0x1p-40) : INFINITY;
}
static inline double lipt_ub_gamma(double k) { return lipt_ub_gamma_at(k, 0x1p-53); }
static inline double lipt_ub_gamma_f(double k) { return lipt_ub_gamma_at(k, 0x1p-24); }

/* Absolute slack for N underflowing terms, each off by at most a (doubled) half unit of 2^-1074. */
static inline double lipt_ub_tiny_slack(double N) { return ldexp(N, -1070); }

/* An upper bound of the exact sum of N nonnegative doubles from s, that sum computed in double in any order (the
 * error of any order of summation of N nonnegative terms is <= gamma_N of the sum). */
static inline double lipt_ub_sum_bound(double s, size_t N) {
    return lipt_ub_up(lipt_ub_up(s * lipt_ub_up(1 + 2 * lipt_ub_gamma((double)N))) + lipt_ub_tiny_slack((double)N));
}

/* H = A Aᵀ (trans 0: A the n×m float block at w, row stride lda) or AᵀA (trans 1: A the m×n block) in double, into
 * the row-major n×n c: its upper triangle (and some entries below it, which the caller mirrors over). Every entry is
 * a sum of m float products (exact in double) in double, in k order, so |c_ij - H_ij| <= gamma_m Σ_k |a_ik a_jk|,
 * and the result does not depend on the thread count (two threads share the rows outside a parallel region for
 * large work). xs: lipt_spectral_gram_scratch(n, m) doubles. */
void lipt_spectral_gram(int trans, int n, int m, const float *w, int lda, double *c, double *xs);
#define LIPT_SPECTRAL_GRAM_SLAB 8 /* rows of a thread's slab (spectral.c's tiles) */
/* Two slabs of m doubles per row, and a wide block's transpose (n m floats). */
static inline size_t lipt_spectral_gram_scratch(size_t n, size_t m) {
    return 2 * LIPT_SPECTRAL_GRAM_SLAB * m + (n * m + 1) / 2;
}

/* Lanczos steps at most of lipt_spectral_verify_top (fewer when it converges or the order is smaller). */
#define LIPT_LANCZOS_MAX 64

/* Doubles of scratch that lipt_spectral_verify_top needs for an n×n matrix. */
static inline size_t lipt_spectral_verify_scratch(int n) {
    return (size_t)n * n + (size_t)(LIPT_LANCZOS_MAX + 3) * n;
}

/* A proven upper bound of the largest eigenvalue of the symmetric n×n double matrix H (row-major, both triangles
 * stored), or 0 when no proof was found (the caller then falls back on Gram iteration): a Lanczos estimate θ,
 * then lipt_spectral_chol_certify at μ = θ (1 + δ) for δ = 2^-20, 2^-13, 2^-6. Lanczos starts from `start` (n
 * floats: an approximate top eigenvector, e.g. the power iteration's; NULL: none), and again from a fixed dense
 * vector when that estimate is not proven at δ = 2^-20. Deterministic (fixed operation order): a function of H and
 * start. work: lipt_spectral_verify_scratch(n) doubles. ritz (n doubles, or NULL): when a bound is returned, the
 * unit Ritz vector of the proven estimate (Lanczos's approximation of H's top eigenvector: a direction for
 * gradients, no part of the proof), or NaN in ritz[0] when none could be formed. */
double lipt_spectral_verify_top(const double *H, int n, const float *start, double *work, double *ritz);

/* The proof step: if the floating-point Cholesky factorisation of B = fl(μ I - H) (H symmetric n×n, row-major, its
 * upper triangle read) runs to completion with positive pivots, returns 1 and *bound >= λ_max(H); else 0. B: n²
 * doubles of scratch (overwritten by the factor). The argument is in spectral_verify.c. */
int lipt_spectral_chol_certify(const double *H, int n, double mu, double *B, double *bound);

/* ---- shared by spectral.c, spectral_gram.c and spectral_cert.c ---- */

/* Work (multiply-adds) above which a loop is worth a thread team. */
#define LIPT_SPECTRAL_PAR_WORK ((size_t)1 << 17)

/* Shape and argument checks shared by spectral_norm and spectral_norm_ub (`op` names the caller in messages). */
void lipt_spectral_check_args(const char *op, lipt_tensor *w, const float *u, const float *v, int n_blocks, int iters);
/* Backward state of both ops: the persistent vectors move on at the next call, and backward needs the ones used
 * here.  iarg: 0 n_blocks, 1 R, 2 C.  saved: u copy [n_blocks*R], saved2: v copy [C]. */
void lipt_spectral_save_uv(lipt_ctx *ctx, lipt_node *node, const float *u, const float *v, int n_blocks, int R, int C);
/* `iters` power rounds on every block of w (R x C, n_blocks column blocks) from its persistent vectors u, v
 * (spectral.c), as the spectral norm ops run them before a certificate (spectral_cert.c). */
void lipt_spectral_power_all(lipt_ctx *ctx, const float *w, int R, int C, int n_blocks, float *u, float *v,
                             int iters);
/* A steered block's pair (lipt_spectral_req.steer) from the Ritz vector y into the block's u_b and v_b (spectral.c);
 * x: scratch of the other side's length. */
void lipt_spectral_steer_block(const float *w, int R, int C, int b, int cb, double *y, double *x, float *u, float *v);

/* lipt_spectral_ub's scratch: lipt_spectral_gram's slabs, the double Gram matrix g, the two float levels in h's storage
 * (2 n² floats), the exponents and error terms of each level. */
typedef struct {
    double *xs, *g, *h, *fk, *dk;
    int *ek;
    double *vw; /* lipt_spectral_verify_top's scratch (LIPT_SPECTRAL_CHOLESKY), else NULL */
    double *pv; /* a steered block's pair in double (lipt_spectral_steer_block): 3 m doubles, or NULL: none steers */
} lipt_ub_scratch;
/* Scratch from ar for any block whose larger side is at most m and whose Gram matrix has order at most n, with t
 * squarings at most, (chol) the Cholesky-verified bound and (steer) a steered pair. */
lipt_ub_scratch lipt_ub_scratch_alloc_for(lipt_arena *ar, size_t m, size_t n, int t, int chol, int steer);
/* The certified bound of the R×cb block at column c0 of the row-major [R, C] w (lipt_spectral_ub without the arena):
 * start, a Lanczos start or NULL; ritz (or NULL), the Ritz vector of a Cholesky proof, NaN in ritz[0] without one. */
double lipt_spectral_ub_core(const float *w, int R, int C, int c0, int cb, int gram_arg, const float *start,
                             lipt_ub_scratch sc_, double *ritz);
/* lipt_spectral_ub's argument checks. */
void lipt_spectral_ub_check(int R, int C, int c0, int cb, int gram_iters);

#endif
