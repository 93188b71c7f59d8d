/* Private: the per-(batch, head) attention kernels shared by attention_dp.c and attention_l2.c, and the L2
 * logits' own kernels (also used by the decoder). */
#ifndef LIPT_OPS_ATTENTION_IMPL_H
#define LIPT_OPS_ATTENTION_IMPL_H

#include "lipt/ops.h"

/* One multi-head attention over [B,T,D] tensors, head h in columns h*d .. h*d+d-1 (row stride D).
 * Logits per head: DP  q_i·k_j / s;  L2  (2 q_i·k_j - |k_j|²) / s, which is -|q_i - k_j|² / s
 * up to the row constant -|q_i|² / s (it cancels in the softmax and its gradient is zero). */
typedef struct {
    int B, T, D, H, causal, l2;
    const float *q, *k, *v;
    /* Optional relative-position logit bias (causal only): rel[h * rel_stride + (i - j)] is added to logit (i, j)
     * of head h. A constant of the input, so it costs nothing in a Lipschitz bound. NULL: none. */
    const float *rel;
    int rel_stride;
    /* Row stride of q, k, v and of their gradients; 0 means D. Any other value must be 3D, with k = q + D and
     * v = q + 2D: the column blocks of one [B,T,3D] projection (one product of the three weights side by side
     * instead of three). The output and its gradient keep row stride D. */
    int ld;
    /* At a low precision, the [B·T, 3D] rows of a packed q, k, v already converted for the products (as
     * lipt_lowp_pack_p packs them: the projection's lipt_tensor.lowp, written by the forward op for its backward),
     * or NULL: converted by the kernels themselves. */
    const void *qkv_lowp;
    /* Likewise for separate q (and k, when k is q) and v of row stride D: packed by the op that made them and kept
     * for its backward (the tied L2 attention), or NULL. */
    const void *q_lowp, *v_lowp;
    /* The map applied to the DP logits before the softmax (include/lipt/logit_map.h) with its parameter, or NULL:
     * none. Only without l2 and rel (the op checks). */
    const lipt_logit_map *map;
    float map_param;
} lipt_attn_job;

/* The row stride of a job's q, k, v and their gradients. */
static inline int lipt_attn_ld(const lipt_attn_job *j) { return j->ld ? j->ld : j->D; }

/* The L2 logits' own kernels (attention_l2.c), per head slice (row stride ld, head width d, s = √d):
 * key_norms: kn[t] = |k_t|² / s for T key rows, in double then rounded (the term subtracted from logit (i, t));
 * colsum: cs[j] += Σ_i G_ij over the rows [i0, i1) of the logit gradient G (row stride T, causal: j <= i);
 * key_norm_grad: that term's part of the key gradient, dk_t -= a cs_t k_t (a = 2/s);
 * tied_M: M_h = W^{Q,h}ᵀ W^{V,h} / s for every head, M [H,d,d], wq and wv [D,D] (the tied values are Q_h M_h), a
 * product of the model at ctx's precision. */
void lipt_attn_l2_key_norms(const float *kh, int T, int ld, int d, double inv_s, float *kn);
void lipt_attn_l2_colsum(const float *G, int T, int i0, int i1, int causal, double *cs);
void lipt_attn_l2_key_norm_grad(const float *kh, int T, int ld, int d, double a, const double *cs, float *dkh);
void lipt_attn_l2_tied_M(lipt_ctx *ctx, const float *wq, const float *wv, int D, int H, float *M);
/* The tied values V [rows, D] = Q_h M_h per head h, q [rows, D] (row strides D), at ctx's precision; qpk: at a low
 * precision q's converted copy (lipt_lowp_pack_p), or NULL. The heads run side by side on the context's threads when
 * the work is large enough (each head's product is the same call either way). gemv: products the small kernel does
 * not take go through lipt_gemm_gemv_p (sgemv for one row: the decoder's new token; the op passes 0). */
void lipt_attn_l2_tied_values(lipt_ctx *ctx, const float *q, const void *qpk, int rows, int D, int H, const float *M,
                              float *V, int gemv);

/* The untied attention op: attention_dp (l2 = 0) or attention_l2 (l2 = 1) of [B,T,D] q, k, v with H heads, or
 * (_packed) of their column blocks in one [B,T,3D] tensor, recorded on the tape under that op; and its backward. */
lipt_tensor *lipt_attn_qkv(lipt_ctx *ctx, int l2, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal);
lipt_tensor *lipt_attn_qkv_packed(lipt_ctx *ctx, int l2, lipt_tensor *qkv, int H, int causal);
void lipt_attn_qkv_backward(lipt_ctx *ctx, lipt_node *node, int l2);

/* out [B,T,D] = heads of P v. P_saved: B*H*T*T floats to keep the probabilities for backward
 * (masked entries exactly 0), at a low precision followed by their converted copy (lipt_attn_forward_op allocates
 * both), or NULL to use released scratch instead. */
void lipt_attn_forward(lipt_ctx *ctx, const lipt_attn_job *job, float *out, float *P_saved);

/* Accumulates (+=) the gradients of q, k, v (each may be NULL, and they may alias) from dout [B,T,D] and the saved
 * P (with its converted copy at a low precision, as lipt_attn_forward kept them), and of the relative bias into
 * drel [H * rel_stride] (may be NULL). Scratch comes from the arena and is released before returning. */
void lipt_attn_backward_rel(lipt_ctx *ctx, const lipt_attn_job *job, const float *P, const float *dout, float *dq,
                            float *dk, float *dv, float *drel);

/* The tiled kernels (attention_tiled.c): the same job without the T×T matrix (online softmax over tiles of rows
 * and columns, the masked upper triangle skipped). stats: 2*B*H*T floats, per (batch, head, row) the logit max
 * (first B*H*T) then 1 / Σ_j e^(z_j - max) (next B*H*T), written by the forward when not NULL and read by the
 * backward, which also needs the forward's output `out` [B,T,D] (for rowsum(dO ⊙ O)). The backward accumulates
 * (+=) into dq, dk, dv (each may be NULL, and they may alias) and drel [H * rel_stride] (may be NULL). */
void lipt_attn_forward_tiled(lipt_ctx *ctx, const lipt_attn_job *job, float *out, float *stats);
void lipt_attn_backward_tiled(lipt_ctx *ctx, const lipt_attn_job *job, const float *stats, const float *out,
                              const float *dout, float *dq, float *dk, float *dv, float *drel);
/* Whether an op of sequence length T takes the tiled kernels: ctx->attn_tiled when 0 or 1, else (auto) T >= the
 * measured crossover. The ops record the choice in node->iarg[2] (saved: stats instead of P). */
int lipt_attn_use_tiled(const lipt_ctx *ctx, int T);

/* What the ops call: the forward through the kernel lipt_attn_use_tiled picks, keeping (keep set) what its backward
 * needs in a new arena buffer, returned (NULL when not kept); *tiled tells which kernel ran (the ops store it in
 * iarg 2). lipt_attn_backward_op: the backward of that kernel, from the node's saved buffer, output and its gradient. */
float *lipt_attn_forward_op(lipt_ctx *ctx, const lipt_attn_job *job, float *out, int keep, int *tiled);
void lipt_attn_backward_op(lipt_ctx *ctx, const lipt_attn_job *job, const lipt_node *node, float *dq, float *dk,
                           float *dv, float *drel);

/* Shared by both kernels: whether the (batch, head) loop runs in parallel, and the relative-bias gradient summed
 * from per-(batch, head) partials pr [B*H*T] in batch order (the same bits on any thread count) into drel. */
int lipt_attn_use_par(const lipt_attn_job *job);
void lipt_attn_rel_grad_reduce(const lipt_attn_job *job, const double *pr, float *drel);

#endif
