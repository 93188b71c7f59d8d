/* The multi-head attention kernel shared by every kind (per (batch, head): logits, causal softmax, P·V, and the
 * backward), the untied (q, k, v) op driver, and the DP ops. The L2 logits' own terms live in attention_l2.c. */
#include "attention_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* Causal rows are processed in blocks so that a block of rows [i0, i1) only touches columns [0, i1):
 * roughly halves the GEMM work of the masked triangle for long sequences. 32 rows: at T = 128 (d = 64, the heads'
 * products of one layer on two threads) forward + backward took 7.3 ms against 8.2 with 64-row blocks and 11.5
 * with none; at T = 256 and 512 32 rows were also the faster (2-5 %); 16 rows were no faster than 32. */
static int row_block(int T, int causal) { return (causal && T >= 64) ? 32 : (T > 0 ? T : 1); }

static void check_qkv(const char *op, const lipt_tensor *q, const lipt_tensor *k, const lipt_tensor *v, int H) {
    char a[64], b[64], c[64];
    LIPT_CHECK(q->ndim == 3, "%s: q must be [B,T,D], got %s", op, lipt_shape_str(q, a, 64));
    LIPT_CHECK(lipt_same_shape(q, k) && lipt_same_shape(q, v), "%s: q %s, k %s, v %s differ", op,
               lipt_shape_str(q, a, 64), lipt_shape_str(k, b, 64), lipt_shape_str(v, c, 64));
    LIPT_CHECK(H >= 1 && q->shape[2] >= 1 && q->shape[2] % H == 0, "%s: D = %d not divisible into %d heads", op,
               q->shape[2], H);
}

/* At a low precision (--precision) the op's q, k, v (and in the backward dout) are packed once, whole, for every
 * head's products, instead of once per product: a head's k and v enter both row blocks of a causal head, dout and
 * the logit gradient two products each. NULL members: float32, or not packed. */
typedef struct {
    const void *q, *k, *v, *dout;
} attn_packed;

static attn_packed pack_qkv(lipt_ctx *ctx, const lipt_attn_job *j) {
    lipt_kctx *kc = LIPT_KC(ctx);
    attn_packed pk = {NULL, NULL, NULL, NULL};
    if (ctx->precision == LIPT_PRECISION_FLOAT32) return pk;
    const int BT = j->B * j->T, ld = lipt_attn_ld(j);
    /* Each packed copy keeps the job's row stride, so a head's operand sits at the same offset in both */
    if (ld != j->D) { /* q, k, v side by side in rows of 3D: one copy of the rows */
        LIPT_CHECK(ld == 3 * j->D && j->k == j->q + j->D && j->v == j->q + 2 * j->D,
                   "attention: row stride %d with D = %d is not a packed q, k, v", ld, j->D);
        pk.q = j->qkv_lowp ? j->qkv_lowp : lipt_lowp_pack_arena(kc, j->q, BT, ld, ld);
        pk.k = lipt_lowp_at(kc, pk.q, (size_t)j->D);
        pk.v = lipt_lowp_at(kc, pk.q, 2 * (size_t)j->D);
        return pk;
    }
    pk.q = j->q_lowp ? j->q_lowp : lipt_lowp_pack_arena(kc, j->q, BT, ld, ld);
    /* the tied kinds' keys are their queries */
    pk.k = j->k == j->q ? pk.q : lipt_lowp_pack_arena(kc, j->k, BT, ld, ld);
    pk.v = j->v_lowp ? j->v_lowp : lipt_lowp_pack_arena(kc, j->v, BT, ld, ld);
    return pk;
}

/* Row i of softmax_grad_rows. */
static inline void softmax_grad_row(const float *P, float *G, int T, int i, int nc, int causal) {
    const float *p = P + (size_t)i * T;
    float *g = G + (size_t)i * T;
    const int n = causal ? i + 1 : T;
    const float cf = (float)lipt_dot_f64(p, g, (size_t)n);
    for (int j = 0; j < n; j += LIPT_VW) {
        const size_t len = lipt_vlanes((size_t)j, (size_t)n);
        lipt_vstore_n(g + j, lipt_vload_n(p + j, len) * (lipt_vload_n(g + j, len) - cf), len);
    }
    for (int j = n; j < nc; j++) g[j] = 0.0f;
}

/* G holds dP in rows [i0, i1), columns [0, nc); overwrite with dL = P ⊙ (dP − rowsum(dP ⊙ P)),
 * zero at masked entries. */
static void softmax_grad_rows(const float *P, float *G, int T, int i0, int i1, int nc, int causal) {
    if (!lipt_attn_rows_par(i0, i1, nc)) {
        for (int i = i0; i < i1; i++) softmax_grad_row(P, G, T, i, nc, causal);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i = i0; i < i1; i++) softmax_grad_row(P, G, T, i, nc, causal);
}

/* xt [d, T] (row stride T) = the head slice xh [T, d] (row stride ld) transposed. At float32 the products with kᵀ
 * and vᵀ take the transposed copy: OpenBLAS's small-matrix kernels run a row block's q kᵀ at about 145 GFLOP/s as
 * A Bᵀ and at about 215 as A B (32 × 128 × 64, one thread, Zen 4), and the copy is T·d floats per head against the
 * T²·d multiply-adds of the products it serves. */
static void head_transpose(const float *xh, int T, int ld, int d, float *xt) {
    /* tiles of 16 rows × LIPT_VW columns: the rows in by vector loads, each output row out as 16 contiguous floats
     * (one float at a time, a quarter of the step's attention time went into this loop) */
    float tile[16 * LIPT_VW];
    for (int t0 = 0; t0 < T; t0 += 16) {
        const int nt = T - t0 < 16 ? T - t0 : 16;
        for (int c0 = 0; c0 < d; c0 += LIPT_VW) {
            const int nc = d - c0 < LIPT_VW ? d - c0 : LIPT_VW;
            for (int t = 0; t < nt; t++) {
                const lipt_vf v = lipt_vload_n(xh + (size_t)(t0 + t) * ld + c0, (size_t)nc);
                memcpy(tile + t * LIPT_VW, &v, sizeof v);
            }
            for (int c = 0; c < nc; c++) {
                float *o = xt + (size_t)(c0 + c) * T + t0;
                for (int t = 0; t < nt; t++) o[t] = tile[t * LIPT_VW + c];
            }
        }
    }
}

/* Returns the largest logit spread of the head's rows when want_spread (else 0). The products run at ctx's
 * precision (from any thread: lipt_gemm_p keeps per-thread scratch). kt: [d, T] scratch for kᵀ (float32), or NULL.
 * ppk: at a low precision, the head's probabilities converted as the softmax writes them (packed_P), else NULL. */
static float head_forward(lipt_ctx *ctx, const lipt_attn_job *j, const attn_packed *pk, int bh, float *P, void *ppk,
                          float *kn, float *kt, float *out, int want_spread) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int T = j->T, D = j->D, d = D / j->H, b = bh / j->H, h = bh % j->H, ld = lipt_attn_ld(j);
    /* off: the output's offset (row stride D); offi: q, k, v's and their packed copies' (row stride ld) */
    const size_t off = (size_t)b * T * D + (size_t)h * d, offi = (size_t)b * T * ld + (size_t)h * d;
    const float *qh = j->q + offi, *kh = j->k + offi;
    float *oh = out + off;
    const double inv_s = 1.0 / sqrt((double)d);
    if (j->l2) lipt_attn_l2_key_norms(kh, T, ld, d, inv_s, kn);
    if (kt) head_transpose(kh, T, ld, d, kt);
    const lipt_attn_head hd = {.k = kh, .v = j->v + offi, .kpk = lipt_lowp_at(kc, pk->k, offi),
                               .vpk = lipt_lowp_at(kc, pk->v, offi), .kt = kt, .ldkt = T, .kn = j->l2 ? kn : NULL,
                               .rel = j->rel ? j->rel + (size_t)h * j->rel_stride : NULL, .ld = ld, .d = d,
                               .causal = j->causal, .alpha = lipt_attn_logit_scale(j->l2, d), .map = j->map,
                               .map_param = j->map_param};
    const int rb = row_block(T, j->causal);
    float spread = 0;
    for (int i0 = 0; i0 < T; i0 += rb) {
        const int i1 = i0 + rb < T ? i0 + rb : T;
        void *pb = ppk ? (void *)lipt_lowp_at(kc, ppk, (size_t)i0 * T) : NULL;
        const float sp = lipt_attn_rows(kc, &hd, qh + (size_t)i0 * ld, lipt_lowp_at(kc, pk->q, offi + (size_t)i0 * ld),
                                        i0, i1, j->causal ? i1 : T, P + (size_t)i0 * T, T, pb, oh + (size_t)i0 * D, D,
                                        want_spread);
        if (sp > spread || sp != sp) spread = sp;
    }
    return spread;
}

/* The probabilities a forward keeps for the backward, P [B,H,T,T] floats (P_float_bytes, rounded up to a cache
 * line), followed at a low precision by their converted copy (packed_P): the forward's P v takes it, and the
 * backward's dv = Pᵀ dO, which converted P again. */
static size_t P_float_bytes(const lipt_attn_job *j) {
    return ((size_t)j->B * j->H * j->T * j->T * sizeof(float) + 63) & ~(size_t)63;
}

static size_t saved_P_bytes(const lipt_ctx *ctx, const lipt_attn_job *j) {
    const int low = ctx->precision != LIPT_PRECISION_FLOAT32;
    return P_float_bytes(j) + (low ? lipt_lowp_packed_bytes(LIPT_KC_READ(ctx), j->B * j->H * j->T, j->T) : 0);
}

/* The converted copy behind kept probabilities P (NULL in float32). Each head's T·T elements hold its row blocks
 * (row_block) as the softmax converts them: the block of rows [i0, i1) and its nc columns at element i0·T of the
 * head, row stride nc. */
static void *packed_P(const lipt_ctx *ctx, const lipt_attn_job *j, const float *P) {
    return ctx->precision == LIPT_PRECISION_FLOAT32 ? NULL : (char *)P + P_float_bytes(j);
}

void lipt_attn_forward(lipt_ctx *ctx, const lipt_attn_job *j, float *out, float *P_saved) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int BH = j->B * j->H;
    const size_t TT = (size_t)j->T * j->T;
    if (BH == 0 || j->T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    const int nthr = omp_get_max_threads();
    /* Without a tape the probabilities are needed only while a head is computed: one buffer per thread. */
    float *Pscr = P_saved ? NULL : lipt_arena_alloc(&ctx->arena, (size_t)nthr * TT * sizeof(float));
    char *ppk = P_saved ? packed_P(ctx, j, P_saved) : lipt_lowp_arena_buf(kc, nthr * j->T, j->T);
    float *kn = lipt_arena_alloc(&ctx->arena, (size_t)nthr * j->T * sizeof(float));
    const int want = ctx->attn_stats != 0, d = j->D / j->H;
    const attn_packed pk = pack_qkv(ctx, j);
    float *kt = pk.k ? NULL : lipt_arena_alloc(&ctx->arena, (size_t)nthr * d * j->T * sizeof(float));
    float spread = 0;
#pragma omp parallel for schedule(static) reduction(max : spread) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++) {
        const int tid = omp_get_thread_num();
        float *P = P_saved ? P_saved + (size_t)bh * TT : Pscr + (size_t)tid * TT;
        void *pp = ppk ? (void *)lipt_lowp_at(kc, ppk, (P_saved ? (size_t)bh : (size_t)tid) * TT) : NULL;
        const float sp = head_forward(ctx, j, &pk, bh, P, pp, kn + (size_t)tid * j->T,
                                      kt ? kt + (size_t)tid * d * j->T : NULL, out, want);
        if (sp > spread || sp != sp) spread = sp;
    }
    if (want && (spread > ctx->attn_logit_spread || spread != spread)) ctx->attn_logit_spread = spread;
    lipt_arena_release(&ctx->arena, mark);
}

/* A logit map's backward on the row block [i0, i0 + m) of a head (q, k and their packed copies at offset offi): the
 * logit gradient Gb (row stride T) times the map's derivative at the logits before the map, recomputed into Z [m, T]
 * (the kept P does not determine them: the softmax drops each row's constant). */
static void map_grad_rows(lipt_ctx *ctx, const lipt_attn_job *j, const attn_packed *pk, size_t offi, int i0, int m,
                          int nc, float alpha, float *Z, float *Gb) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int T = j->T, ld = lipt_attn_ld(j), d = j->D / j->H;
    lipt_attn_gemm(kc, 0, 1, m, nc, d, alpha, j->q + offi + (size_t)i0 * ld,
              lipt_lowp_at(kc, pk->q, offi + (size_t)i0 * ld), ld, j->k + offi, lipt_lowp_at(kc, pk->k, offi), ld,
              0.0f, Z, T);
    for (int r = 0; r < m; r++)
        j->map->grad_row(Z + (size_t)r * T, Gb + (size_t)r * T, j->causal ? i0 + r + 1 : T, j->map_param);
}

/* One (batch, head): with G = dL the logit gradient,
 *   dv = Pᵀ dO,  dP = dO vᵀ,  dq = a G k,  dk = a Gᵀ q  (a = 1/s for DP, 2/s for L2),
 *   and for L2 also dk_j -= a k_j Σ_i G_ij (from the -|k_j|² term); with a logit map, G times the map's derivative
 *   first (Z: scratch for a row block's logits). */
static void head_backward(lipt_ctx *ctx, const lipt_attn_job *j, const attn_packed *pk, int bh, const float *P,
                          const void *ppk, const float *dout, float *G, void *gpk, double *cs, float *vt, float *Z,
                          float *dq, float *dk, float *dv, double *drel_bh) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int T = j->T, D = j->D, d = D / j->H, b = bh / j->H, h = bh % j->H, ld = lipt_attn_ld(j);
    /* off: dout's and its packed copy's offset (row stride D); offi: q, k, v's, their packed copies' and their
     * gradients' (row stride ld) */
    const size_t off = (size_t)b * T * D + (size_t)h * d, offi = (size_t)b * T * ld + (size_t)h * d;
    const float *qh = j->q + offi, *kh = j->k + offi, *vh = j->v + offi, *dOh = dout + off;
    float *dqh = dq ? dq + offi : NULL, *dkh = dk ? dk + offi : NULL, *dvh = dv ? dv + offi : NULL;
    const double a = (j->l2 ? 2.0 : 1.0) / sqrt((double)d);
    const float alpha = (float)a;
    const int need_g = dqh || dkh || drel_bh, need_cs = j->l2 && dkh;
    if (need_cs) memset(cs, 0, (size_t)T * sizeof(double));
    if (vt && need_g) head_transpose(vh, T, ld, d, vt); /* vt: as kt in head_forward */
    const int rb = row_block(T, j->causal);
    for (int i0 = 0; i0 < T; i0 += rb) {
        const int i1 = i0 + rb < T ? i0 + rb : T, m = i1 - i0, nc = j->causal ? i1 : T;
        const float *Pb = P + (size_t)i0 * T;
        const float *dOb = dOh + (size_t)i0 * D;
        const void *dOpk = lipt_lowp_at(kc, pk->dout, off + (size_t)i0 * D);
        const void *pb = lipt_lowp_at(kc, ppk, (size_t)i0 * T); /* as the forward's softmax converted it */
        if (dvh) lipt_attn_gemm(kc, 1, 0, nc, d, m, 1.0f, Pb, pb, pb ? nc : T, dOb, dOpk, D, 1.0f, dvh, ld);
        if (!need_g) continue;
        float *Gb = G + (size_t)i0 * T;
        if (vt) lipt_gemm_p(kc, 0, 0, m, nc, d, 1.0f, dOb, D, vt, T, 0.0f, Gb, T);
        else lipt_attn_gemm(kc, 0, 1, m, nc, d, 1.0f, dOb, dOpk, D, vh, lipt_lowp_at(kc, pk->v, offi), ld, 0.0f, Gb, T);
        softmax_grad_rows(P, G, T, i0, i1, nc, j->causal);
        if (j->map) map_grad_rows(ctx, j, pk, offi, i0, m, nc, alpha, Z, Gb);
        if (drel_bh) /* causal only: logit (i, j) got rel[i - j] */
            for (int i = i0; i < i1; i++) {
                const float *g = G + (size_t)i * T;
                for (int c = 0; c <= i; c++) drel_bh[i - c] += g[c];
            }
        /* the logit gradient packed once for its two products (stride nc) */
        const void *Gpk = gpk && dqh && dkh ? gpk : NULL;
        if (Gpk) lipt_lowp_pack_p(kc, Gb, m, nc, T, gpk);
        const int ldg = Gpk ? nc : T;
        if (dqh)
            lipt_attn_gemm(kc, 0, 0, m, d, nc, alpha, Gb, Gpk, ldg, kh, lipt_lowp_at(kc, pk->k, offi), ld, 1.0f,
                      dqh + (size_t)i0 * ld, ld);
        if (dkh)
            lipt_attn_gemm(kc, 1, 0, nc, d, m, alpha, Gb, Gpk, ldg, qh + (size_t)i0 * ld,
                      lipt_lowp_at(kc, pk->q, offi + (size_t)i0 * ld), ld, 1.0f, dkh, ld);
        if (need_cs) lipt_attn_l2_colsum(G, T, i0, i1, j->causal, cs);
    }
    if (need_cs) lipt_attn_l2_key_norm_grad(kh, T, ld, d, a, cs, dkh);
}

void lipt_attn_backward_rel(lipt_ctx *ctx, const lipt_attn_job *j, const float *P, const float *dout, float *dq,
                            float *dk, float *dv, float *drel) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int BH = j->B * j->H;
    const size_t TT = (size_t)j->T * j->T;
    if (!j->rel) drel = NULL;
    if ((!dq && !dk && !dv && !drel) || BH == 0 || j->T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    const int nthr = omp_get_max_threads();
    float *G = (dq || dk || drel) ? lipt_arena_alloc(&ctx->arena, (size_t)nthr * TT * sizeof(float)) : NULL;
    double *cs = lipt_arena_alloc(&ctx->arena, (size_t)nthr * j->T * sizeof(double));
    /* one partial sum per (batch, head), reduced in batch order below: the same bits on any thread count */
    double *pr = drel ? lipt_arena_alloc(&ctx->arena, (size_t)BH * j->T * sizeof(double)) : NULL;
    if (pr) memset(pr, 0, (size_t)BH * j->T * sizeof(double));
    attn_packed pk = pack_qkv(ctx, j);
    const void *ppk = packed_P(ctx, j, P);
    float *vt = pk.v ? NULL : lipt_arena_alloc(&ctx->arena, (size_t)nthr * (j->D / j->H) * j->T * sizeof(float));
    const size_t zn = (size_t)row_block(j->T, j->causal) * j->T; /* a row block's logits, for a logit map */
    float *Z = j->map && G ? lipt_arena_alloc(&ctx->arena, (size_t)nthr * zn * sizeof(float)) : NULL;
    size_t gpk_bytes = 0;
    char *gpk = NULL;
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        pk.dout = lipt_lowp_pack_arena(kc, dout, j->B * j->T, j->D, j->D);
        gpk_bytes = lipt_lowp_packed_bytes(kc, row_block(j->T, j->causal), j->T);
        if (dq && dk) gpk = lipt_arena_alloc(&ctx->arena, (size_t)nthr * gpk_bytes);
    }
#pragma omp parallel for schedule(static) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++) {
        const int tid = omp_get_thread_num();
        head_backward(ctx, j, &pk, bh, P + (size_t)bh * TT, lipt_lowp_at(kc, ppk, (size_t)bh * TT), dout,
                      G ? G + (size_t)tid * TT : NULL, gpk ? gpk + (size_t)tid * gpk_bytes : NULL,
                      cs + (size_t)tid * j->T, vt ? vt + (size_t)tid * (j->D / j->H) * j->T : NULL,
                      Z ? Z + (size_t)tid * zn : NULL, dq, dk, dv, pr ? pr + (size_t)bh * j->T : NULL);
    }
    if (pr) lipt_attn_rel_grad_reduce(j, pr, drel);
    lipt_arena_release(&ctx->arena, mark);
}

float *lipt_attn_forward_op(lipt_ctx *ctx, const lipt_attn_job *j, float *out, int keep, int *tiled) {
    *tiled = lipt_attn_use_tiled(ctx, j->T);
    /* tiled: the row stats [2,B,H,T]; else P [B,H,T,T] */
    float *saved = !keep ? NULL
                   : *tiled ? lipt_arena_alloc(&ctx->arena, (size_t)j->B * j->H * j->T * 2 * sizeof(float))
                            : lipt_arena_alloc(&ctx->arena, saved_P_bytes(ctx, j));
    if (*tiled) lipt_attn_forward_tiled(ctx, j, out, saved);
    else lipt_attn_forward(ctx, j, out, saved);
    return saved;
}

void lipt_attn_backward_op(lipt_ctx *ctx, const lipt_attn_job *j, const lipt_node *node, float *dq, float *dk,
                           float *dv, float *drel) {
    if (node->iarg[2]) lipt_attn_backward_tiled(ctx, j, node->saved, node->out->data, node->out->grad, dq, dk, dv, drel);
    else lipt_attn_backward_rel(ctx, j, node->saved, node->out->grad, dq, dk, dv, drel);
}

/* ---------------------------------------------------------------- the untied ops
 * Their q, k, v come as three [B,T,D] tensors (inputs 0..2), or packed: one [B,T,3D] tensor (input 0), the product
 * of x with the three weights side by side, whose column blocks 0, D, 2D are q, k, v (row stride 3D). One product of
 * N = 3D instead of three of N = D packs x once and runs nearer the GEMM rate (forward, dx and dW alike). The op
 * records iarg 3 = packed; a relative bias, when there is one, is the last input. */

static void check_packed(const char *op, const lipt_tensor *qkv, int H) {
    char a[64];
    LIPT_CHECK(qkv->ndim == 3 && qkv->shape[2] >= 3 && qkv->shape[2] % 3 == 0,
               "%s: packed qkv must be [B,T,3D], got %s", op, lipt_shape_str(qkv, a, 64));
    const int D = qkv->shape[2] / 3;
    LIPT_CHECK(H >= 1 && D % H == 0, "%s: D = %d not divisible into %d heads", op, D, H);
}

/* The job of an untied op's q, k, v inputs (see above); rel: the bias, or NULL; map: the logit map, or NULL. */
static lipt_attn_job untied_job(lipt_tensor *const *in, int packed, int H, int causal, int l2, const lipt_tensor *rel,
                                const lipt_logit_map *map, float mp) {
    LIPT_CHECK(!map || (!l2 && !rel), "attention: logit map %s with %s (a map takes DP logits without a bias)",
               map ? map->name : "", l2 ? "L2 logits" : "a relative-position bias");
    const lipt_tensor *x = in[0];
    const int D = packed ? x->shape[2] / 3 : x->shape[2];
    const float *q = x->data;
    return (lipt_attn_job){.B = x->shape[0], .T = x->shape[1], .D = D, .H = H, .causal = causal != 0, .l2 = l2,
                           .q = q, .k = packed ? q + D : in[1]->data, .v = packed ? q + 2 * D : in[2]->data,
                           .rel = rel ? rel->data : NULL, .rel_stride = rel ? rel->shape[1] : 0,
                           .ld = packed ? 3 * D : D, .qkv_lowp = packed ? x->lowp : NULL, .map = map,
                           .map_param = mp};
}

/* Record and run an untied op: n_qkv inputs (3, or packed 1) then rel if given. saved: P [B,H,T,T], or with iarg 2
 * set the tiled kernels' row stats [2,B,H,T]; saved2: the logit map (a static descriptor, never written through: the
 * pointer's const is dropped only to fit the node's field), or NULL. iarg: 0 H, 1 causal, 2 tiled; farg: 0 the map's
 * parameter. */
static lipt_tensor *untied_op(lipt_ctx *ctx, lipt_op_id op, int l2, lipt_tensor *const *qkv, int n_qkv,
                              lipt_tensor *rel, const lipt_logit_map *map, float mp, int H, int causal) {
    lipt_tensor *in[LIPT_MAX_INPUTS] = {NULL};
    for (int i = 0; i < n_qkv; i++) in[i] = qkv[i];
    in[n_qkv] = rel;
    const int n_in = n_qkv + (rel != NULL);
    /* a packed q, k, v at a low precision, recorded: converted once here, kept with the projection's output for the
     * backward's products (which converted it again) */
    if (n_qkv == 1 && ctx->precision != LIPT_PRECISION_FLOAT32 && !qkv[0]->lowp && qkv[0]->numel > 0 &&
        lipt_should_record(ctx, n_in, in))
        qkv[0]->lowp = lipt_lowp_pack_arena(LIPT_KC(ctx), qkv[0]->data, (int)lipt_rows(qkv[0]), lipt_last_dim(qkv[0]),
                                            lipt_last_dim(qkv[0]));
    const lipt_attn_job job = untied_job(qkv, n_qkv == 1, H, causal, l2, rel, map, mp);
    lipt_tensor *out = lipt_tensor_3d(ctx, job.B, job.T, job.D);
    lipt_node *node = lipt_record(ctx, op, out, n_in, in);
    int tiled;
    float *saved = lipt_attn_forward_op(ctx, &job, out->data, node != NULL, &tiled);
    if (node) {
        node->saved = saved;
        node->iarg[0] = H;
        node->iarg[1] = job.causal;
        node->iarg[2] = tiled;
        node->saved2 = (void *)map;
        node->farg[0] = mp;
    }
    lipt_profile_op_end(ctx, op); /* it recorded before computing */
    return out;
}

static void untied_backward(lipt_ctx *ctx, lipt_node *node, int l2, int has_rel) {
    const int packed = node->n_in - has_rel == 1;
    lipt_tensor *rel = has_rel ? node->in[node->n_in - 1] : NULL;
    const lipt_attn_job job = untied_job(node->in, packed, node->iarg[0], node->iarg[1], l2, rel,
                                         (const lipt_logit_map *)node->saved2, node->farg[0]);
    float *dq, *dk, *dv;
    if (packed) {
        float *g = lipt_grad_of(ctx, node->in[0]);
        dq = g, dk = g ? g + job.D : NULL, dv = g ? g + 2 * job.D : NULL;
    } else {
        dq = lipt_grad_of(ctx, node->in[0]), dk = lipt_grad_of(ctx, node->in[1]), dv = lipt_grad_of(ctx, node->in[2]);
    }
    lipt_attn_backward_op(ctx, &job, node, dq, dk, dv, rel ? lipt_grad_of(ctx, rel) : NULL);
}

lipt_tensor *lipt_attn_qkv(lipt_ctx *ctx, int l2, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    check_qkv(l2 ? "attention_l2" : "attention_dp", q, k, v, H);
    return untied_op(ctx, l2 ? LIPT_OP_ATTENTION_L2 : LIPT_OP_ATTENTION_DP, l2, (lipt_tensor *[]){q, k, v}, 3, NULL,
                     NULL, 0, H, causal);
}

lipt_tensor *lipt_attn_qkv_packed(lipt_ctx *ctx, int l2, lipt_tensor *qkv, int H, int causal) {
    check_packed(l2 ? "attention_l2" : "attention_dp", qkv, H);
    return untied_op(ctx, l2 ? LIPT_OP_ATTENTION_L2 : LIPT_OP_ATTENTION_DP, l2, (lipt_tensor *[]){qkv}, 1, NULL, NULL,
                     0, H, causal);
}

void lipt_attn_qkv_backward(lipt_ctx *ctx, lipt_node *node, int l2) { untied_backward(ctx, node, l2, 0); }

lipt_tensor *lipt_attention_dp(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    return lipt_attn_qkv(ctx, 0, q, k, v, H, causal);
}

lipt_tensor *lipt_attention_dp_packed(lipt_ctx *ctx, lipt_tensor *qkv, int H, int causal) {
    return lipt_attn_qkv_packed(ctx, 0, qkv, H, causal);
}

void lipt_attention_dp_backward(lipt_ctx *ctx, lipt_node *node) { lipt_attn_qkv_backward(ctx, node, 0); }

/* DP attention with a logit map: the attention_dp op, its node keeping the map (untied_op). */
static void check_map(const lipt_logit_map *map, float p) {
    LIPT_CHECK(!map || (isfinite(p) && (!map->param_ok || map->param_ok(p))),
               "attention_dp_map: logit map %s with parameter %g (expected %s)", map ? map->name : "", (double)p,
               map && map->param_rule ? map->param_rule : "a finite number");
}

lipt_tensor *lipt_attention_dp_map(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v,
                                   const lipt_logit_map *map, float p, int H, int causal) {
    check_qkv("attention_dp_map", q, k, v, H);
    check_map(map, p);
    return untied_op(ctx, LIPT_OP_ATTENTION_DP, 0, (lipt_tensor *[]){q, k, v}, 3, NULL, map, p, H, causal);
}

lipt_tensor *lipt_attention_dp_map_packed(lipt_ctx *ctx, lipt_tensor *qkv, const lipt_logit_map *map, float p, int H,
                                          int causal) {
    check_packed("attention_dp_map", qkv, H);
    check_map(map, p);
    return untied_op(ctx, LIPT_OP_ATTENTION_DP, 0, (lipt_tensor *[]){qkv}, 1, NULL, map, p, H, causal);
}

/* DP attention with a learned relative-position logit bias, causal. rel [H, S] with S >= T: logit (i, j) of
 * head h gets rel[h, i - j]. */
static lipt_tensor *dp_rel(lipt_ctx *ctx, lipt_tensor *const *qkv, int n_qkv, lipt_tensor *rel, int H) {
    const int T = qkv[0]->shape[1]; /* the callers checked q's (or qkv's) shape */
    char a[64];
    LIPT_CHECK(rel->ndim == 2 && rel->shape[0] == H && rel->shape[1] >= T,
               "attention_dp_rel: rel must be [H = %d, S >= T = %d], got %s", H, T, lipt_shape_str(rel, a, 64));
    return untied_op(ctx, LIPT_OP_ATTENTION_DP_REL, 0, qkv, n_qkv, rel, NULL, 0, H, 1);
}

lipt_tensor *lipt_attention_dp_rel(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, lipt_tensor *rel,
                                   int H) {
    check_qkv("attention_dp_rel", q, k, v, H);
    return dp_rel(ctx, (lipt_tensor *[]){q, k, v}, 3, rel, H);
}

lipt_tensor *lipt_attention_dp_rel_packed(lipt_ctx *ctx, lipt_tensor *qkv, lipt_tensor *rel, int H) {
    check_packed("attention_dp_rel", qkv, H);
    return dp_rel(ctx, (lipt_tensor *[]){qkv}, 1, rel, H);
}

void lipt_attention_dp_rel_backward(lipt_ctx *ctx, lipt_node *node) { untied_backward(ctx, node, 0, 1); }
