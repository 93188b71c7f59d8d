/* defines: every differentiable op. Each returns its output tensor (in the context's arena)
 * and records itself on the tape unless in no-grad mode or no input requires grad.
 * Shape mismatches are programming errors and abort with a message naming the op.
 * Layout conventions: a linear map is y = x W with W [in, out]; multi-head tensors are
 * [B, T, D] with head h in columns h*d .. h*d+d-1 (d = D / H). */
#ifndef LIPT_OPS_H
#define LIPT_OPS_H

#include "lipt/autograd.h"
#include "lipt/logit_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Matrix products, all through cblas_sgemm.
 * 2-D:      a [M,K] (or [K,M] with ta), b [K,N] (or [N,K] with tb)        -> [M,N]
 * batched:  a [Bt,M,K], b [Bt,K,N] (same flags, per batch item)            -> [Bt,M,N]
 * linear:   a [..., K] with ndim >= 2 and b 2-D: rows of a times b       -> [..., N]  (ta must be 0) */
lipt_tensor *lipt_matmul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, int ta, int tb);

/* y = x w + b over rows: x [..., K] (ndim >= 2), w [K,N], b [N] -> [..., N]. One op instead of matmul + add: the
 * output starts as the bias rows and the GEMM adds onto it, and the gradient of y goes straight to the products. */
lipt_tensor *lipt_linear(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b);
/* GELU(x w + b) (exact erf, as lipt_gelu), shapes as lipt_linear: lipt_gelu(ctx, lipt_linear(ctx, x, w, b)) as one
 * op whose backward computes GELU's gradient and the bias's column sums in one pass (the feed-forward's first
 * layer). The same bits as the two ops, forward and the gradients of x and w; b's gradient, summed in another
 * order, within one float of theirs. */
lipt_tensor *lipt_linear_gelu(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b);
/* maxmin(x w + b), shapes as lipt_linear (N even): lipt_maxmin(ctx, lipt_linear(ctx, x, w, b)) as one op whose
 * backward routes the gradient and sums the bias's columns in one pass (the invertible model's feed-forward). The
 * same bits as the two ops, forward and the gradients of x and w; b's gradient within one float of theirs. */
lipt_tensor *lipt_linear_maxmin(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b);

/* Elementwise with row broadcasting: b has a's shape, or b.numel equals the product of a's
 * trailing dims (bias rows), or b has one element (a scalar). */
lipt_tensor *lipt_add(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b);
lipt_tensor *lipt_sub(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b);
lipt_tensor *lipt_mul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b);
lipt_tensor *lipt_scale(lipt_ctx *ctx, lipt_tensor *a, float s);
/* Reductions to one element (double accumulation). */
lipt_tensor *lipt_sum(lipt_ctx *ctx, lipt_tensor *a);
lipt_tensor *lipt_mean(lipt_ctx *ctx, lipt_tensor *a);
/* Largest element of a (subgradient to the first argmax). */
lipt_tensor *lipt_max(lipt_ctx *ctx, lipt_tensor *a);
lipt_tensor *lipt_sqrt(lipt_ctx *ctx, lipt_tensor *a);

/* Embedding lookup: table [V,D], ids[n] (copied) -> out shape (ndim, shape) whose last dim is D, numel n*D.
 * Backward scatter-adds into the table. Ids outside [0,V) abort (validate user data first). */
lipt_tensor *lipt_embedding(lipt_ctx *ctx, lipt_tensor *table, const int *ids, int ndim, const int *out_shape);

/* LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * gamma + beta; gamma, beta [D] (NULL: 1 and 0). */
lipt_tensor *lipt_layernorm(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *gamma, lipt_tensor *beta, float eps);

/* Activations. ELU with alpha = 1. GELU is the exact erf form (PyTorch's default).
 * LipSwish: x * sigmoid(beta x) / 1.1 with beta a one-element tensor (may require grad). */
lipt_tensor *lipt_relu(lipt_ctx *ctx, lipt_tensor *x);
lipt_tensor *lipt_elu(lipt_ctx *ctx, lipt_tensor *x);
lipt_tensor *lipt_gelu(lipt_ctx *ctx, lipt_tensor *x);
lipt_tensor *lipt_lipswish(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *beta);

/* Softmax over the last dim. */
lipt_tensor *lipt_softmax(lipt_ctx *ctx, lipt_tensor *x);
/* Fused log-softmax + negative log-likelihood: logits [..., V], targets[rows] -> mean NLL in nats
 * (one element). If row_nll is non-NULL, each row's NLL is also written there (double). */
lipt_tensor *lipt_cross_entropy(lipt_ctx *ctx, lipt_tensor *logits, const int *targets, double *row_nll);

/* Inverted dropout with probability p, mask drawn from ctx->rng; identity unless ctx->training. */
lipt_tensor *lipt_dropout(lipt_ctx *ctx, lipt_tensor *x, float p);
/* x rounded to the nearest multiple of 2^-bits (1..40), the gradient straight through (coupling_grid: exact sums). */
lipt_tensor *lipt_round_grid(lipt_ctx *ctx, lipt_tensor *x, int bits);

/* n (1 .. LIPT_MAX_INPUTS) 2-D tensors [K, N_i] side by side: [K, Σ N_i]. */
lipt_tensor *lipt_concat_cols(lipt_ctx *ctx, int n, lipt_tensor *const *ts);

/* Causal (or full) multi-head attention, fused. q, k, v [B,T,D], H heads, d = D/H, s = sqrt(d).
 * Output [B,T,D]: the heads concatenated, before the output projection.
 * DP: P = softmax(q kᵀ / s).   L2: P = softmax(-|q_i - k_j|² / s) (SPEC §1, untied).
 * Row i attends to j <= i when causal (the diagonal is always kept). */
lipt_tensor *lipt_attention_dp(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal);
lipt_tensor *lipt_attention_l2(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal);
/* The same on q, k, v packed side by side: qkv [B,T,3D] is x [W^Q W^K W^V] (one product of the three weights
 * concatenated, lipt_concat_cols), q, k, v its column blocks 0, D, 2D. The gradient flows to qkv. */
lipt_tensor *lipt_attention_dp_packed(lipt_ctx *ctx, lipt_tensor *qkv, int H, int causal);
lipt_tensor *lipt_attention_l2_packed(lipt_ctx *ctx, lipt_tensor *qkv, int H, int causal);
/* DP attention with a logit map (include/lipt/logit_map.h): P = softmax(f(q kᵀ / s)), f = map with parameter p (which
 * the map must accept); map NULL: lipt_attention_dp, bit for bit. Recorded as attention_dp (the node keeps the map
 * for the backward); (q, k, v) or packed qkv as above. */
lipt_tensor *lipt_attention_dp_map(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v,
                                   const lipt_logit_map *map, float p, int H, int causal);
lipt_tensor *lipt_attention_dp_map_packed(lipt_ctx *ctx, lipt_tensor *qkv, const lipt_logit_map *map, float p, int H,
                                          int causal);
/* Tied L2 attention (the Lipschitz one): q = X W^Q [B,T,D], wq = W^Q [D,D], wv = W^V [D,D].
 * Per head P = softmax(-|q_i - q_j|² / s), values Q_h M_h with M_h = W^{Q,h}ᵀ W^{V,h} / s,
 * which equals X A_h W^{V,h}. Gradients flow to q, wq and wv. */
lipt_tensor *lipt_attention_l2_tied(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *wq, lipt_tensor *wv, int H, int causal);
/* Causal DP attention with a learned relative-position logit bias: rel [H, S], S >= T; logit (i, j) of head h is
 * q_i·k_j / s + rel[h, i - j]. The bias does not depend on the input (no cost in a Lipschitz bound). Gradients flow
 * to q, k, v and rel. */
lipt_tensor *lipt_attention_dp_rel(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, lipt_tensor *rel,
                                   int H);
lipt_tensor *lipt_attention_dp_rel_packed(lipt_ctx *ctx, lipt_tensor *qkv, lipt_tensor *rel, int H);
/* Each row (last dim) projected onto the Euclidean ball of radius R: x · min(1, R / ‖x‖₂). 1-Lipschitz per row. */
lipt_tensor *lipt_clip_rows(lipt_ctx *ctx, lipt_tensor *x, float R);
/* GroupSort with groups of 2: channel pairs (2k, 2k+1) -> (max, min); last dim even. 1-Lipschitz. */
lipt_tensor *lipt_maxmin(lipt_ctx *ctx, lipt_tensor *x);
/* Element-wise e^x (float32 expf). */
lipt_tensor *lipt_exp(lipt_ctx *ctx, lipt_tensor *x);

/* Spectral norms of the column blocks of w [R, C] (n_blocks blocks of C/n_blocks columns), by power
 * iteration with persistent vectors u [n_blocks*R] and v [C] (updated in place, `iters` rounds,
 * none when iters = 0) -> [n_blocks] (sigma_b = u_bᵀ W_b v_b). Gradient dsigma/dW = u vᵀ (u, v held fixed). */
lipt_tensor *lipt_spectral_norm(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int iters);
/* Certified upper bound of the spectral norm sigma of the R×cb block at column offset c0 of the row-major float
 * matrix w [R, C] (row stride C), by Gram iteration (Delattre, Barthélemy, Araujo, Allauzen, ICML 2023):
 * G = W_bᵀW_b or W_bW_bᵀ (the smaller side, formed in double), squared t = gram_iters times in float with
 * power-of-two rescaling, and sigma <= ‖G^(2^t)‖_F^(1/2^(t+1)).  As ‖G^(2^t)‖_F = (Σ_j sigma_j^(2^(t+2)))^(1/2), in
 * exact arithmetic the bound is >= sigma always and <= r^(1/2^(t+2)) sigma for a block of rank r.  The returned value
 * also carries an argued margin for the rounding (γ_n bounds per product, double for G and float for the squarings,
 * propagated through the squarings and roots; spectral_gram.c), so it is >= the exact sigma of the stored float block
 * (IEEE round-to-nearest assumed).  The margin is that of the float squarings, about γ_f,n min(r_s, κ²) / 4 relative
 * (γ_f,n = n 2^-24, r_s the stable rank and κ = ‖|G|‖_∞ / ‖G‖₂ of the normalised Gram matrix): measured 3e-6 on
 * rank-one blocks, 3e-5 on the 1024 identity, 1e-4 on Gaussian 256×1024 blocks.  +inf if the block has a non-finite
 * entry, 0 if it is all zero.  Scratch about (R·cb / 2 + 16 max(R, cb) + 2 n²) doubles, n = min(R, cb), from ctx's
 * arena, released before returning; cost about max(R, cb) n² / 2 multiply-adds in double for G (register tiles
 * straight from the float block, src/lipschitz/spectral_gram.c) and t n³ / 2 through cblas_ssyrk (from n = 128 on: two
 * ssyrk and an sgemm side by side).
 * With LIPT_SPECTRAL_CHOLESKY or'd into gram_iters the bound is first sought the faster, tighter way: a Lanczos
 * estimate θ of λ_max(G), then μ = θ (1 + δ), δ = 2^-20 (2^-13, 2^-6 if that fails), proven >= λ_max(G) by a
 * floating-point Cholesky factorisation of μ I - G (the argument in spectral_verify.c): sigma <= sqrt(μ + margins),
 * within about δ/2 of sigma, at n³/6 multiply-adds instead of t n³/2; Gram iteration only when no μ is proven. */
double lipt_spectral_ub(lipt_ctx *ctx, const float *w, int R, int C, int c0, int cb, int gram_iters);
/* A flag or'd into the gram_iters arguments of the certified spectral norms: try the Cholesky-verified bound first
 * (config key spectral_bound = cholesky; lipt_config_gram_arg). The low bits stay the Gram squarings of the
 * fallback. */
#define LIPT_SPECTRAL_CHOLESKY (1 << 16)
/* Squarings that bring lipt_spectral_ub within 1e-3 of sigma in the worst case for rank <= 1024 (all singular values
 * equal): 1024^(1/2^(t+2)) <= 1.001 needs 2^(t+2) >= ln 1024 / ln 1.001 = 6935, so t = 11 (factor 1.00085; t = 10
 * gives 1.0017). */
#define LIPT_SPECTRAL_UB_ITERS_REPORT 11
/* Certified upper bounds (lipt_spectral_ub, rounded up to float) of the spectral norms of the column blocks of
 * w [R, C] -> [n_blocks].  Also runs `power_iters` rounds (0: none, u and v untouched) of lipt_spectral_norm's
 * power iteration on the persistent u [n_blocks*R], v [C]; the gradient is that of lipt_spectral_norm,
 * dsigma_b/dW_b = u_b v_bᵀ with those vectors held fixed: the bound is not differentiated, the power estimate of
 * sigma stands in for it (they agree at convergence up to the bound's slack). */
lipt_tensor *lipt_spectral_norm_ub(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int power_iters,
                                   int gram_iters);
/* lipt_spectral_norm_ub(ctx, w[i], u[i], v[i], 1, power_iters, gram_iters) into out[i] for each i < n (at most
 * LIPT_SPECTRAL_MANY_MAX): the same values, bit for bit, and the same gradients, with the n certificates computed
 * side by side, one matrix per thread (a layer's W1 and W2). */
#define LIPT_SPECTRAL_MANY_MAX 8
void lipt_spectral_norm_ub_many(lipt_ctx *ctx, int n, lipt_tensor *const *w, float *const *u, float *const *v,
                                int power_iters, int gram_iters, lipt_tensor **out);
/* One matrix of lipt_spectral_norm_ub_batch: w [R, C] in n_blocks column blocks, its persistent vectors u
 * [n_blocks*R], v [C] (the gradient's) and the gram_iters argument of its bounds. steer = 0: u and v are left as
 * they are. steer = 1: after its bound, each block's pair is set to the certificate's estimate of its top singular
 * pair at these weights (with LIPT_SPECTRAL_CHOLESKY: Lanczos's Ritz vector of the Gram matrix, the other side by
 * one product with the block; a block without a Cholesky proof gets one power-iteration round instead), so the
 * gradient u vᵀ is that of sigma at the weights the bound is of, and the vectors start the next call's Lanczos:
 * no power iteration is needed between calls. */
typedef struct {
    lipt_tensor *w;
    float *u, *v;
    int n_blocks, gram_iters, steer;
} lipt_spectral_req;
/* lipt_spectral_norm_ub(ctx, req[k].w, req[k].u, req[k].v, req[k].n_blocks, 0, req[k].gram_iters) into out[k] for
 * each k < n: the same values, bit for bit, and the same gradients, with every block's certificate of every
 * request in one parallel loop (one certificate per thread, largest first): a model's certificates at once. */
void lipt_spectral_norm_ub_batch(lipt_ctx *ctx, int n, const lipt_spectral_req *req, lipt_tensor **out);
/* Induced infinity norms of the column blocks of w [R, C]: transpose = 0 gives ‖W_b‖_∞ (max abs row
 * sum), transpose = 1 gives ‖W_bᵀ‖_∞ (max abs column sum) -> [n_blocks]. Subgradient at the argmax. Each value is
 * the smallest float >= the exact norm of the float weights (outward rounding: a certificate's factor). */
lipt_tensor *lipt_norm_inf(lipt_ctx *ctx, lipt_tensor *w, int transpose, int n_blocks);
/* Contraction factor 1 / max(1, x / c) of a one-element x (the soft normaliser of SPEC §1, §3), rounded down: the
 * float factor times x is <= c exactly, so an upper bound x of a map's constant certifies factor · map at c. */
lipt_tensor *lipt_contract_factor(lipt_ctx *ctx, lipt_tensor *x, float c);

#ifdef __cplusplus
}
#endif
#endif
