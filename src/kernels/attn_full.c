/* The materialising attention of kernels/attn.h (moved from src/ops/attention_dp.c, issue 50): per (batch, head)
 * the logits, the causal softmax and P v in blocks of rows, keeping the T×T probabilities for the backward, and that
 * backward. The untied and tied ops (src/ops/attention_*.c) run it on a lipt_attn_job. */
#include "kernels/attn.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"

/* At a low precision (--precision) the op's q, k, v (and in the backward dout) are packed once, whole, for every
 * head's products, instead of once per product: a head's k and v enter both row blocks of a causal head, dout and
 * the logit gradient two products each. NULL members: float32, or not packed. */
typedef struct {
    const void *q, *k, *v, *dout;
} attn_packed;

/* Causal rows are processed in blocks so that a block of rows [i0, i1) only touches columns [0, i1):
 * roughly halves the GEMM work of the masked triangle for long sequences. 32 rows: at T = 128 (d = 64, the heads'
 * products of one layer on two threads) forward + backward took 7.3 ms against 8.2 with 64-row blocks and 11.5
 * with none; at T = 256 and 512 32 rows were also the faster (2-5 %); 16 rows were no faster than 32. */
static int row_block(int T, int causal) { return (causal && T >= 64) ? 32 : (T > 0 ? T : 1); }

static attn_packed pack_qkv(lipt_kctx *ctx, const lipt_attn_job *j) {
    attn_packed pk = {NULL, NULL, NULL, NULL};
    if (ctx->precision == LIPT_PRECISION_FLOAT32) return pk;
    const int BT = j->B * j->T, ld = lipt_attn_ld(j);
    /* Each packed copy keeps the job's row stride, so a head's operand sits at the same offset in both */
    if (ld != j->D) { /* q, k, v side by side in rows of 3D: one copy of the rows */
        LIPT_CHECK(ld == 3 * j->D && j->k == j->q + j->D && j->v == j->q + 2 * j->D,
                   "attention: row stride %d with D = %d is not a packed q, k, v", ld, j->D);
        pk.q = j->qkv_lowp ? j->qkv_lowp : lipt_lowp_pack_arena(ctx, j->q, BT, ld, ld);
        pk.k = lipt_lowp_at(ctx, pk.q, (size_t)j->D);
        pk.v = lipt_lowp_at(ctx, pk.q, 2 * (size_t)j->D);
        return pk;
    }
    pk.q = j->q_lowp ? j->q_lowp : lipt_lowp_pack_arena(ctx, j->q, BT, ld, ld);
    /* the tied kinds' keys are their queries */
    pk.k = j->k == j->q ? pk.q : lipt_lowp_pack_arena(ctx, j->k, BT, ld, ld);
    pk.v = j->v_lowp ? j->v_lowp : lipt_lowp_pack_arena(ctx, j->v, BT, ld, ld);
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
static float head_forward(lipt_kctx *ctx, const lipt_attn_job *j, const attn_packed *pk, int bh, float *P, void *ppk,
                          float *kn, float *kt, float *out, int want_spread) {
    const int T = j->T, D = j->D, d = D / j->H, b = bh / j->H, h = bh % j->H, ld = lipt_attn_ld(j);
    /* off: the output's offset (row stride D); offi: q, k, v's and their packed copies' (row stride ld) */
    const size_t off = (size_t)b * T * D + (size_t)h * d, offi = (size_t)b * T * ld + (size_t)h * d;
    const float *qh = j->q + offi, *kh = j->k + offi;
    float *oh = out + off;
    const double inv_s = 1.0 / sqrt((double)d);
    if (j->l2) lipt_attn_l2_key_norms(kh, T, ld, d, inv_s, kn);
    if (kt) head_transpose(kh, T, ld, d, kt);
    const lipt_attn_head hd = {.k = kh, .v = j->v + offi, .kpk = lipt_lowp_at(ctx, pk->k, offi),
                               .vpk = lipt_lowp_at(ctx, pk->v, offi), .kt = kt, .ldkt = T, .kn = j->l2 ? kn : NULL,
                               .rel = j->rel ? j->rel + (size_t)h * j->rel_stride : NULL, .ld = ld, .d = d,
                               .causal = j->causal, .alpha = lipt_attn_logit_scale(j->l2, d), .map = j->map,
                               .map_param = j->map_param};
    const int rb = row_block(T, j->causal);
    float spread = 0;
    for (int i0 = 0; i0 < T; i0 += rb) {
        const int i1 = i0 + rb < T ? i0 + rb : T;
        void *pb = ppk ? (void *)lipt_lowp_at(ctx, ppk, (size_t)i0 * T) : NULL;
        const float sp = lipt_attn_rows(ctx, &hd, qh + (size_t)i0 * ld, lipt_lowp_at(ctx, pk->q, offi + (size_t)i0 * ld),
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

size_t lipt_attn_saved_P_bytes(const lipt_kctx *ctx, const lipt_attn_job *j) {
    const int low = ctx->precision != LIPT_PRECISION_FLOAT32;
    return P_float_bytes(j) + (low ? lipt_lowp_packed_bytes(ctx, j->B * j->H * j->T, j->T) : 0);
}

/* The converted copy behind kept probabilities P (NULL in float32). Each head's T·T elements hold its row blocks
 * (row_block) as the softmax converts them: the block of rows [i0, i1) and its nc columns at element i0·T of the
 * head, row stride nc. */
static void *packed_P(const lipt_kctx *ctx, const lipt_attn_job *j, const float *P) {
    return ctx->precision == LIPT_PRECISION_FLOAT32 ? NULL : (char *)P + P_float_bytes(j);
}

static void attn_forward(lipt_kctx *ctx, const lipt_attn_job *j, float *out, float *P_saved) {
    const int BH = j->B * j->H;
    const size_t TT = (size_t)j->T * j->T;
    if (BH == 0 || j->T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(ctx->arena);
    const int nthr = omp_get_max_threads();
    /* Without a tape the probabilities are needed only while a head is computed: one buffer per thread. */
    float *Pscr = P_saved ? NULL : lipt_arena_alloc(ctx->arena, (size_t)nthr * TT * sizeof(float));
    char *ppk = P_saved ? packed_P(ctx, j, P_saved) : lipt_lowp_arena_buf(ctx, nthr * j->T, j->T);
    float *kn = lipt_arena_alloc(ctx->arena, (size_t)nthr * j->T * sizeof(float));
    const int want = ctx->attn_spread != NULL, d = j->D / j->H;
    const attn_packed pk = pack_qkv(ctx, j);
    float *kt = pk.k ? NULL : lipt_arena_alloc(ctx->arena, (size_t)nthr * d * j->T * sizeof(float));
    float spread = 0;
#pragma omp parallel for schedule(static) reduction(max : spread) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++) {
        const int tid = omp_get_thread_num();
        float *P = P_saved ? P_saved + (size_t)bh * TT : Pscr + (size_t)tid * TT;
        void *pp = ppk ? (void *)lipt_lowp_at(ctx, ppk, (P_saved ? (size_t)bh : (size_t)tid) * TT) : NULL;
        const float sp = head_forward(ctx, j, &pk, bh, P, pp, kn + (size_t)tid * j->T,
                                      kt ? kt + (size_t)tid * d * j->T : NULL, out, want);
        if (sp > spread || sp != sp) spread = sp;
    }
    if (want && (spread > *ctx->attn_spread || spread != spread)) *ctx->attn_spread = spread;
    lipt_arena_release(ctx->arena, mark);
}

void lipt_attn_forward(lipt_kctx *ctx, const lipt_attn_job *j, float *out, float *P_saved) {
    /* the whole call: its per-head products run in its own parallel region (kernels/kctx.h) */
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    attn_forward(ctx, j, out, P_saved);
    lipt_kprof_end(ctx, acc, t0, 1);
}

/* A logit map's backward on the row block [i0, i0 + m) of a head (q, k and their packed copies at offset offi): the
 * logit gradient Gb (row stride T) times the map's derivative at the logits before the map, recomputed into Z [m, T]
 * (the kept P does not determine them: the softmax drops each row's constant). */
static void map_grad_rows(lipt_kctx *ctx, const lipt_attn_job *j, const attn_packed *pk, size_t offi, int i0, int m,
                          int nc, float alpha, float *Z, float *Gb) {
    const int T = j->T, ld = lipt_attn_ld(j), d = j->D / j->H;
    lipt_attn_gemm(ctx, 0, 1, m, nc, d, alpha, j->q + offi + (size_t)i0 * ld,
              lipt_lowp_at(ctx, pk->q, offi + (size_t)i0 * ld), ld, j->k + offi, lipt_lowp_at(ctx, pk->k, offi), ld,
              0.0f, Z, T);
    for (int r = 0; r < m; r++)
        j->map->grad_row(Z + (size_t)r * T, Gb + (size_t)r * T, j->causal ? i0 + r + 1 : T, j->map_param);
}

/* One (batch, head): with G = dL the logit gradient,
 *   dv = Pᵀ dO,  dP = dO vᵀ,  dq = a G k,  dk = a Gᵀ q  (a = 1/s for DP, 2/s for L2),
 *   and for L2 also dk_j -= a k_j Σ_i G_ij (from the -|k_j|² term); with a logit map, G times the map's derivative
 *   first (Z: scratch for a row block's logits). */
static void head_backward(lipt_kctx *ctx, const lipt_attn_job *j, const attn_packed *pk, int bh, const float *P,
                          const void *ppk, const float *dout, float *G, void *gpk, double *cs, float *vt, float *Z,
                          float *dq, float *dk, float *dv, double *drel_bh) {
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
        const void *dOpk = lipt_lowp_at(ctx, pk->dout, off + (size_t)i0 * D);
        const void *pb = lipt_lowp_at(ctx, ppk, (size_t)i0 * T); /* as the forward's softmax converted it */
        if (dvh) lipt_attn_gemm(ctx, 1, 0, nc, d, m, 1.0f, Pb, pb, pb ? nc : T, dOb, dOpk, D, 1.0f, dvh, ld);
        if (!need_g) continue;
        float *Gb = G + (size_t)i0 * T;
        if (vt) lipt_gemm_p(ctx, 0, 0, m, nc, d, 1.0f, dOb, D, vt, T, 0.0f, Gb, T);
        else lipt_attn_gemm(ctx, 0, 1, m, nc, d, 1.0f, dOb, dOpk, D, vh, lipt_lowp_at(ctx, pk->v, offi), ld, 0.0f, Gb, T);
        softmax_grad_rows(P, G, T, i0, i1, nc, j->causal);
        if (j->map) map_grad_rows(ctx, j, pk, offi, i0, m, nc, alpha, Z, Gb);
        if (drel_bh) /* causal only: logit (i, j) got rel[i - j] */
            for (int i = i0; i < i1; i++) {
                const float *g = G + (size_t)i * T;
                for (int c = 0; c <= i; c++) drel_bh[i - c] += g[c];
            }
        /* the logit gradient packed once for its two products (stride nc) */
        const void *Gpk = gpk && dqh && dkh ? gpk : NULL;
        if (Gpk) lipt_lowp_pack_p(ctx, Gb, m, nc, T, gpk);
        const int ldg = Gpk ? nc : T;
        if (dqh)
            lipt_attn_gemm(ctx, 0, 0, m, d, nc, alpha, Gb, Gpk, ldg, kh, lipt_lowp_at(ctx, pk->k, offi), ld, 1.0f,
                      dqh + (size_t)i0 * ld, ld);
        if (dkh)
            lipt_attn_gemm(ctx, 1, 0, nc, d, m, alpha, Gb, Gpk, ldg, qh + (size_t)i0 * ld,
                      lipt_lowp_at(ctx, pk->q, offi + (size_t)i0 * ld), ld, 1.0f, dkh, ld);
        if (need_cs) lipt_attn_l2_colsum(G, T, i0, i1, j->causal, cs);
    }
    if (need_cs) lipt_attn_l2_key_norm_grad(kh, T, ld, d, a, cs, dkh);
}

static void attn_backward_rel(lipt_kctx *ctx, const lipt_attn_job *j, const float *P, const float *dout, float *dq,
                              float *dk, float *dv, float *drel) {
    const int BH = j->B * j->H;
    const size_t TT = (size_t)j->T * j->T;
    if (!j->rel) drel = NULL;
    if ((!dq && !dk && !dv && !drel) || BH == 0 || j->T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(ctx->arena);
    const int nthr = omp_get_max_threads();
    float *G = (dq || dk || drel) ? lipt_arena_alloc(ctx->arena, (size_t)nthr * TT * sizeof(float)) : NULL;
    double *cs = lipt_arena_alloc(ctx->arena, (size_t)nthr * j->T * sizeof(double));
    /* one partial sum per (batch, head), reduced in batch order below: the same bits on any thread count */
    double *pr = drel ? lipt_arena_alloc(ctx->arena, (size_t)BH * j->T * sizeof(double)) : NULL;
    if (pr) memset(pr, 0, (size_t)BH * j->T * sizeof(double));
    attn_packed pk = pack_qkv(ctx, j);
    const void *ppk = packed_P(ctx, j, P);
    float *vt = pk.v ? NULL : lipt_arena_alloc(ctx->arena, (size_t)nthr * (j->D / j->H) * j->T * sizeof(float));
    const size_t zn = (size_t)row_block(j->T, j->causal) * j->T; /* a row block's logits, for a logit map */
    float *Z = j->map && G ? lipt_arena_alloc(ctx->arena, (size_t)nthr * zn * sizeof(float)) : NULL;
    size_t gpk_bytes = 0;
    char *gpk = NULL;
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        pk.dout = lipt_lowp_pack_arena(ctx, dout, j->B * j->T, j->D, j->D);
        gpk_bytes = lipt_lowp_packed_bytes(ctx, row_block(j->T, j->causal), j->T);
        if (dq && dk) gpk = lipt_arena_alloc(ctx->arena, (size_t)nthr * gpk_bytes);
    }
#pragma omp parallel for schedule(static) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++) {
        const int tid = omp_get_thread_num();
        head_backward(ctx, j, &pk, bh, P + (size_t)bh * TT, lipt_lowp_at(ctx, ppk, (size_t)bh * TT), dout,
                      G ? G + (size_t)tid * TT : NULL, gpk ? gpk + (size_t)tid * gpk_bytes : NULL,
                      cs + (size_t)tid * j->T, vt ? vt + (size_t)tid * (j->D / j->H) * j->T : NULL,
                      Z ? Z + (size_t)tid * zn : NULL, dq, dk, dv, pr ? pr + (size_t)bh * j->T : NULL);
    }
    if (pr) lipt_attn_rel_grad_reduce(j, pr, drel);
    lipt_arena_release(ctx->arena, mark);
}

void lipt_attn_backward_rel(lipt_kctx *ctx, const lipt_attn_job *j, const float *P, const float *dout, float *dq,
                            float *dk, float *dv, float *drel) {
    /* the whole call: its per-head products run in its own parallel region (kernels/kctx.h) */
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    attn_backward_rel(ctx, j, P, dout, dq, dk, dv, drel);
    lipt_kprof_end(ctx, acc, t0, 1);
}
