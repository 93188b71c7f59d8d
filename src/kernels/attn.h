/* Private: the attention kernels below the ops (issue 50): one head's block of query rows (logits, softmax, P v) that
 * the attention ops' forward and the incremental decoder share, the L2 logits' own terms and tied values, and what
 * the ops' per-(batch, head) loops share (the job, the parallel test, the relative bias' gradient). Raw pointers and a
 * lipt_kctx only: no tape. The ops (src/ops/attention_*.c) drive them, the materialising and the tiled kernels
 * (attn_full.c, attn_tiled.c) included; attention_dp.c and attention_l2.c call these instead of each other. */
#ifndef LIPT_KERNELS_ATTN_H
#define LIPT_KERNELS_ATTN_H

#include <math.h>
#include <stddef.h>

#include "kernels/kctx.h"
#include "lipt/logit_map.h"

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

/* The logits' scale a: logit (i, j) = a q_i·k_j (DP, a = 1/s) or a q_i·k_j - |k_j|²/s (L2, a = 2/s), s = √d. */
static inline float lipt_attn_logit_scale(int l2, int d) {
    const double inv_s = 1.0 / sqrt((double)d);
    return (float)((l2 ? 2.0 : 1.0) * inv_s);
}

/* The logits row[0..n) of query i (n = i + 1 when causal) into probabilities, in place: through the logit map when
 * map is given (map->forward_row with parameter mp; DP logits only, before any bias), + rel[i - j] when rel is given
 * (the head's relative bias, causal only), - kn[j] when kn is given (L2's |k_j|²/s), softmax; row[n..len) set to 0.
 * Returns the row's logit spread (max - min of what the softmax saw) when want_spread, else 0. */
float lipt_attn_probs_row(float *row, int i, int n, int len, const float *kn, const float *rel,
                          const lipt_logit_map *map, float mp, int want_spread);

/* One head's keys and values, for a block of its query rows. */
typedef struct {
    const float *k, *v;    /* key and value rows from position 0, row stride ld */
    const void *kpk, *vpk; /* at a low precision, their converted copies (lipt_lowp_pack_p at the same offsets), or
                            * NULL: the products convert them */
    const float *kt;       /* float32: the keys transposed, [d, ldkt], for the logits' product; or NULL */
    int ldkt;
    const float *kn;       /* L2: kn[j] = |k_j|²/s (lipt_attn_l2_key_norms), else NULL */
    const float *rel;      /* the head's relative-position bias (logit (i, j) gets rel[i - j]), or NULL */
    int ld, d, causal;
    float alpha;           /* lipt_attn_logit_scale */
    const lipt_logit_map *map; /* the map of the DP logits (include/lipt/logit_map.h), or NULL: none */
    float map_param;
} lipt_attn_head;

/* Query rows [i0, i1) of a head against its keys [0, nc) (nc = i1 when causal), at ctx's precision: the logits as
 * one product, lipt_attn_probs_row on each row, and o = P v as one product. q: query row i0 (row stride h->ld), qpk
 * its converted copy or NULL; P: row i0 of the probabilities (row stride ldp, columns up to ldp written); ppk: at a
 * low precision, where the probabilities are converted as they are made (row stride nc), or NULL; o: output row i0
 * (row stride ldo). Returns the largest logit spread when want_spread, else 0. The kernel of the attention ops
 * (lipt_attn_forward) and the decoder's block of new rows. */
float lipt_attn_rows(lipt_kctx *ctx, const lipt_attn_head *h, const float *q, const void *qpk, int i0, int i1, int nc,
                     float *P, int ldp, void *ppk, float *o, int ldo, int want_spread);

/* One query row i = n - 1 of a causal head against its n keys, with plain loops instead of products (a product of
 * one row costs more to set up than it computes): row[0..n) receives the probabilities (as lipt_attn_probs_row), o[0..d)
 * the output Σ_j P_j v_j, accumulated in double. bf16: q, k, the probabilities and v rounded to bf16 first, as the
 * low-precision products round them. acc: d doubles of scratch. The decoder's one new token. */
void lipt_attn_query_row(const lipt_attn_head *h, const float *q, int n, int bf16, float *row, double *acc, float *o);

/* lipt_gemm_p, with A or B taken pre-packed when apk / bpk is given (lda / ldb then its row stride). */
void lipt_attn_gemm(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, const void *apk,
                    int lda, const float *B, const void *bpk, int ldb, float beta, float *C, int ldc);
/* Whether a row loop of the attention runs on the caller's threads: only outside the heads' parallel region and for
 * enough work. Inside it the loops use no parallel construct at all: even one whose if clause is false sets up and
 * tears down a one-thread libgomp team, and every causal row block of every head met two (about 2,000 a step). */
int lipt_attn_rows_par(int i0, int i1, int nc);

/* The L2 logits' own kernels (attn_l2.c), per head slice (row stride ld, head width d, s = √d):
 * key_norms: kn[t] = |k_t|² / s for T key rows, in double then rounded (the term subtracted from logit (i, t));
 * colsum: cs[j] += Σ_i G_ij over the rows [i0, i1) of the logit gradient G (row stride T, causal: j <= i);
 * key_norm_grad: that term's part of the key gradient, dk_t -= a cs_t k_t (a = 2/s);
 * tied_M: M_h = W^{Q,h}ᵀ W^{V,h} / s for every head, M [H,d,d], wq and wv [D,D] (the tied values are Q_h M_h), a
 * product of the model at ctx's precision. */
void lipt_attn_l2_key_norms(const float *kh, int T, int ld, int d, double inv_s, float *kn);
void lipt_attn_l2_colsum(const float *G, int T, int i0, int i1, int causal, double *cs);
void lipt_attn_l2_key_norm_grad(const float *kh, int T, int ld, int d, double a, const double *cs, float *dkh);
void lipt_attn_l2_tied_M(lipt_kctx *ctx, const float *wq, const float *wv, int D, int H, float *M);
/* The tied values V [rows, D] = Q_h M_h per head h, q [rows, D] (row strides D), at ctx's precision; qpk: at a low
 * precision q's converted copy (lipt_lowp_pack_p), or NULL. The heads run side by side on the context's threads when
 * the work is large enough (each head's product is the same call either way). gemv: products the small kernel does
 * not take go through lipt_gemm_gemv_p (sgemv for one row: the decoder's new token; the op passes 0). */
void lipt_attn_l2_tied_values(lipt_kctx *ctx, const float *q, const void *qpk, int rows, int D, int H, const float *M,
                              float *V, int gemv);

/* Shared by both kernels: whether the (batch, head) loop runs in parallel, and the relative-bias gradient summed
 * from per-(batch, head) partials pr [B*H*T] in batch order (the same bits on any thread count) into drel. */
int lipt_attn_use_par(const lipt_attn_job *job);
void lipt_attn_rel_grad_reduce(const lipt_attn_job *job, const double *pr, float *drel);

/* Whether the tied values' heads (lipt_attn_l2_tied_values, and the tied op's backward) run side by side, one head
 * per thread with a one-threaded product: [B*T, d] x [d, d] with d = 64 ran at about 70 GFLOP/s on two threads
 * through OpenBLAS's own threading (its threads synchronise around a product this thin), 4 % of a tied-L2 training
 * step. Each head's product is the same call either way. At float32 they go through lipt_gemm_small (no packing,
 * prefetched strided head blocks) when d fits its tile. */
int lipt_attn_heads_par(int H);

/* The materialising kernels (attn_full.c). out [B,T,D] = heads of P v. P_saved: lipt_attn_saved_P_bytes to keep
 * the probabilities for backward (B*H*T*T floats, masked entries exactly 0, at a low precision followed by their
 * converted copy), or NULL to use released scratch instead. The largest logit spread is raised into
 * *ctx->attn_spread when that is not NULL. */
void lipt_attn_forward(lipt_kctx *ctx, const lipt_attn_job *job, float *out, float *P_saved);
size_t lipt_attn_saved_P_bytes(const lipt_kctx *ctx, const lipt_attn_job *job);

/* Accumulates (+=) the gradients of q, k, v (each may be NULL, and they may alias) from dout [B,T,D] and the saved
 * P (with its converted copy at a low precision, as lipt_attn_forward kept them), and of the relative bias into
 * drel [H * rel_stride] (may be NULL). Scratch comes from the arena and is released before returning. */
void lipt_attn_backward_rel(lipt_kctx *ctx, const lipt_attn_job *job, const float *P, const float *dout, float *dq,
                            float *dk, float *dv, float *drel);

/* The tiled kernels (attn_tiled.c): the same job without the T×T matrix (online softmax over tiles of rows
 * and columns, the masked upper triangle skipped). stats: 2*B*H*T floats, per (batch, head, row) the logit max
 * (first B*H*T) then 1 / Σ_j e^(z_j - max) (next B*H*T), written by the forward when not NULL and read by the
 * backward, which also needs the forward's output `out` [B,T,D] (for rowsum(dO ⊙ O)). The backward accumulates
 * (+=) into dq, dk, dv (each may be NULL, and they may alias) and drel [H * rel_stride] (may be NULL). */
void lipt_attn_forward_tiled(lipt_kctx *ctx, const lipt_attn_job *job, float *out, float *stats);
void lipt_attn_backward_tiled(lipt_kctx *ctx, const lipt_attn_job *job, const float *stats, const float *out,
                              const float *dout, float *dq, float *dk, float *dv, float *drel);

#endif
