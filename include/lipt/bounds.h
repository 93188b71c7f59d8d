/* defines: Lipschitz upper bounds of tied L2 multi-head attention (SPEC §2), as differentiable
 * functions of the weights (the contractive attention divides by them on every forward pass).
 * Weights use lipt's layout y = x W, W [in, out]: W^{Q,h} is the D×d column block h of wq. */
#ifndef LIPT_BOUNDS_H
#define LIPT_BOUNDS_H

#include "lipt/ops.h"

/* φ⁻¹(N−1) = W0((N−1)/e), with φ(x) = x e^{x+1}. */
double lipt_phi_inv(double y);

/* ∞-norm bound: (4 φ⁻¹(N−1) + 1/s) ‖W^{Oᵀ}‖_∞ max_h(‖W^{Q,h}‖_∞ ‖W^{Q,hᵀ}‖_∞) max_h ‖W^{V,hᵀ}‖_∞
 * -> one-element tensor. wq, wv, wo [D,D]; H heads; N the sequence length the bound covers (it also covers
 * causal masking and any shorter sequence: the bound grows with N).
 * In the row layout the Jacobian of X ↦ X W is I_N ⊗ Wᵀ, so ‖W^{Oᵀ}‖_∞ and ‖W^{V,hᵀ}‖_∞ are max abs COLUMN sums
 * of wo and of wv's column blocks (lipt_norm_inf with transpose = 1); tests/test_lipschitz_bounds.c shows the
 * row-sum reading violated numerically. Subgradients at the argmax rows/columns. */
lipt_tensor *lipt_bound_l2_inf(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N);

/* Persistent power-iteration vectors for the spectral norms in the 2-norm bound (sizes for D, H:
 * uq [H*D], vq [D], uv [H*D], vv [D], uo [D], vo [D]); owned by the caller (model buffers). */
typedef struct { float *uq, *vq, *uv, *vv, *uo, *vo; } lipt_bound_vectors;

/* 2-norm bound: (√N / s)(4 φ⁻¹(N−1) + 1) √(Σ_h ‖W^{Q,h}‖₂⁴ ‖W^{V,h}‖₂²) ‖W^O‖₂ -> one element.
 * Runs `iters` power-iteration rounds on the persistent vectors first (0: use them as they are, e.g. inside
 * a forward pass after the vectors were refreshed). The exponent 4 is required (the ‖W^{Q,h}‖₂² reading is
 * violated numerically when ‖W^Q‖₂ > 1). Gradients through dσ/dW = u vᵀ with the vectors held fixed, exact
 * once they have converged. */
lipt_tensor *lipt_bound_l2_2(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N,
                             lipt_bound_vectors *vec, int iters);

/* Fill bound vectors with a deterministic non-degenerate start (Gaussian, unit length per block) before the
 * first power iteration. */
void lipt_bound_vectors_init(lipt_bound_vectors *vec, int D, int H, uint64_t seed);

#endif
