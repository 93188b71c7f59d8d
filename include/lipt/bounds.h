/* defines: Lipschitz upper bounds of the attention kinds (tied L2, SPEC §2; clipped-dp), as differentiable
 * functions of the weights (the contractive attention divides by them on every forward pass), the choice of
 * bound per config (lipt_attn_bound), and Lambert W0, which the bounds use.
 * Weights use lipt's layout y = x W, W [in, out]: W^{Q,h} is the D×d column block h of wq. */
#ifndef LIPT_BOUNDS_H
#define LIPT_BOUNDS_H

#include "lipt/config.h"
#include "lipt/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lambert W0 on [-1/e, inf) (Halley iteration, double) and its derivative W/(x(1+W)). Not tensor ops:
 * the bounds use them on the constant N. */
double lipt_lambert_w0(double x);
double lipt_lambert_w0_deriv(double x);

/* φ⁻¹(N−1) = W0((N−1)/e), with φ(x) = x e^{x+1}. (The bounds use a proven upper bound of it.) */
double lipt_phi_inv(double y);

/* An upper bound of φ⁻¹(y) for an integer-valued y >= 0 (y = N − 1): W0's value raised until w e^{w+1} >= y is
 * proven (at most about 4e-12 relative above the root). */
double lipt_phi_inv_up(double y);

/* An upper bound of the exact product a b of nonnegative doubles (rounded to nearest, then the next double up): a
 * certificate formed from an upper bound and a factor (lipt lipschitz) stays an upper bound. */
double lipt_bound_mul_up(double a, double b);

/* Every bound below is a true upper bound of its formula at the exact norms of the float weights, rounded outward
 * (src/core/outward.h; docs/RELIABILITY.md, "Certificates rounded outward"): the float value of the tensor is the
 * smallest float >= an outward-rounded double evaluation. Gradients are those of the formula. */

/* ∞-norm bound: (4 φ⁻¹(N−1) + 1/s) ‖W^{Oᵀ}‖_∞ max_h(‖W^{Q,h}‖_∞ ‖W^{Q,hᵀ}‖_∞) max_h ‖W^{V,hᵀ}‖_∞
 * -> one-element tensor. wq, wv, wo [D,D]; H heads; N the sequence length the bound covers (it also covers
 * causal masking and any shorter sequence: the bound grows with N).
 * In the row layout the Jacobian of X ↦ X W is I_N ⊗ Wᵀ, so ‖W^{Oᵀ}‖_∞ and ‖W^{V,hᵀ}‖_∞ are max abs COLUMN sums
 * of wo and of wv's column blocks (lipt_norm_inf with transpose = 1); tests/test_lipschitz_bounds.c shows the
 * row-sum reading violated numerically. Subgradients at the argmax rows/columns. */
lipt_tensor *lipt_bound_l2_inf(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N);

/* Persistent power-iteration vectors for the spectral norms of the bounds (sizes for D, H: uq [H*D], vq [D],
 * uv [H*D], vv [D], uo [D], vo [D], and for clipped-dp uk [H*D], vk [D]); owned by the caller (model buffers).
 * The values of the spectral norms are certified upper bounds (lipt_spectral_norm_ub, Gram iteration with
 * gram_iters squarings, or with LIPT_SPECTRAL_CHOLESKY or'd in the Cholesky-verified bound first; <= 0 means
 * LIPT_SPECTRAL_UB_ITERS_REPORT, the converged setting); the vectors only give the gradient u vᵀ. */
typedef struct {
    float *uq, *vq, *uv, *vv, *uo, *vo, *uk, *vk;
    int gram_iters;
} lipt_bound_vectors;

/* 2-norm bound: (√N / s)(4 φ⁻¹(N−1) + 1) √(Σ_h ‖W^{Q,h}‖₂⁴ ‖W^{V,h}‖₂²) ‖W^O‖₂ -> one element.
 * Runs `iters` power-iteration rounds on the persistent vectors first (0: use them as they are; they only
 * steer the gradient). The spectral norms are certified upper bounds (Gram iteration, vec->gram_iters), so the
 * result is a true upper bound at any iters. The exponent 4 is required (the ‖W^{Q,h}‖₂² reading is
 * violated numerically when ‖W^Q‖₂ > 1). Gradients through dσ/dW = u vᵀ with the vectors held fixed. */
lipt_tensor *lipt_bound_l2_2(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N,
                             lipt_bound_vectors *vec, int iters);

/* Tied L2 attention in the token-wise norm ‖X‖_{∞,2} = max_i ‖x_i‖₂ (CONTRACTIVE.md §2, checked by the exact-
 * Jacobian tests): UB = ‖W^O‖₂ √(Σ_h L_h²), L_h = (1 + 6 W₀((N−1)/e)) ‖W^{Q,h}‖₂² ‖W^{V,h}‖₂ / √d. Certified
 * spectral norms as in lipt_bound_l2_2 (uses uq, vq, uv, vv, uo, vo). */
lipt_tensor *lipt_bound_l2_inf2(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N,
                                lipt_bound_vectors *vec, int iters);

/* Clipped-input DP attention (attention = clipped-dp) in the token-wise norm: u_i = x_i min(1, R/‖x_i‖), causal
 * DP attention on u with any input-independent logit bias, values u W^V. Per head, with
 * τ_h = R² ‖W^{Q,h}‖₂ ‖W^{K,h}‖₂ / √d (the largest |logit| change scale), L_h = ‖W^{V,h}‖₂ (1 + 2 τ_h), and
 * UB = ‖W^O‖₂ √(Σ_h L_h²), for every N (models/README.md gives the derivation). Uses every vector of vec. */
lipt_tensor *lipt_bound_clipped_dp(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv, lipt_tensor *wo,
                                   int H, double R, lipt_bound_vectors *vec, int iters);

/* Fill bound vectors with a deterministic non-degenerate start (Gaussian, unit length per block) before the
 * first power iteration. */
void lipt_bound_vectors_init(lipt_bound_vectors *vec, int D, int H, uint64_t seed);

/* The certified bound of cfg's attention kind (lipt_attn_info_of(cfg->attention)->bound): clipped-dp's at radius
 * lipt_config_clip_radius(cfg) (any N), tied L2's in cfg->lip_norm at sequence length N (lipt_bound_l2_inf, _2,
 * _inf2). wk is used by clipped-dp only; vec must hold the lipt_attn_bound_vector_count(cfg) vectors the bound
 * needs. The one place that picks a bound function for a contractive attention; aborts for a kind without one. */
lipt_tensor *lipt_attn_bound(lipt_ctx *ctx, const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv,
                             lipt_tensor *wo, int N, lipt_bound_vectors *vec);
/* lipt_attn_bound in two steps, for callers that batch certificates (lipt_model_certify): the certified spectral
 * norms the bound needs as requests of lipt_spectral_norm_ub_batch (W^Q's head blocks, W^K's for clipped-dp,
 * W^V's, W^O; at most LIPT_ATTN_BOUND_REQ_MAX; 0 for the ∞-norm bound, which needs none), then the bound from the
 * batch's outputs for them, sig[k] for req[k]. The two together give lipt_attn_bound's values and gradients. */
#define LIPT_ATTN_BOUND_REQ_MAX 4
int lipt_attn_bound_requests(const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv,
                             lipt_tensor *wo, const lipt_bound_vectors *vec, lipt_spectral_req *req);
lipt_tensor *lipt_attn_bound_from(lipt_ctx *ctx, const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk,
                                  lipt_tensor *wv, lipt_tensor *wo, int N, lipt_tensor *const *sig);
/* How many of the vectors uq, vq, uv, vv, uo, vo, uk, vk (in that order) the attention bound of cfg's model uses:
 * 8 for clipped-dp, 6 for contractive tied L2 with lip_norm 2 or inf2, else 0 (non-contractive kinds: none). */
int lipt_attn_bound_vector_count(const lipt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
