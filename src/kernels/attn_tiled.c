/* Attention without the T×T matrix: the same lipt_attn_job as lipt_attn_forward / lipt_attn_backward_rel, computed
 * tile by tile (rows [i0, i0 + TILE_R) × columns [j0, j0 + TILE_C)) with an online softmax. The forward keeps per
 * row only the final logit max and 1 / Σ e^(z - max); the backward recomputes each logit tile from q, k (+ rel,
 * key norms) and those two numbers. Memory per thread: two tiles, TILE_R × d accumulators and O(T) vectors. */
#include "kernels/attn.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"

/* TILE_C is a multiple of TILE_R: then a causal column block that starts before a row block's end starts at or
 * before its first row, so every row of a tile has at least one unmasked column. 64 × 512 was the fastest of
 * 32×64 .. 128×256 and 64×1024 in the timing harness of docs/PERFORMANCE.md (d = 64): fewer, larger GEMM calls
 * amortise OpenBLAS's packing, and two such tiles (256 KB) still fit the 512 KB L2. */
#define TILE_R 64
#define TILE_C 512
_Static_assert(TILE_C % TILE_R == 0, "TILE_C must be a multiple of TILE_R");

/* Unmasked columns of row i in the column block starting at j0 with nc columns. */
static inline int n_valid(int i, int j0, int nc, int causal) {
    if (!causal) return nc;
    const int n = i - j0 + 1;
    return n < 0 ? 0 : (n < nc ? n : nc);
}

/* One thread's scratch. */
typedef struct {
    float *S, *G;       /* [TILE_R, TILE_C]: logits then probabilities; dP then the logit gradient */
    float *Z;           /* [TILE_R, TILE_C]: the backward's logits before the logit map (with a map, else NULL) */
    float *acc;         /* [TILE_R, d]: unnormalised output rows (forward) */
    float *mx, *lo, *hi, *dr; /* [TILE_R]: running max, min and max for the spread, rowsum(dO ⊙ O) */
    double *l;          /* [TILE_R]: running Σ e^(z - mx) */
    float *kn;          /* [T]: L2 key norms */
    double *cs;         /* [T]: L2 column sums of the logit gradient */
} tile_scratch;

static tile_scratch *scratch_alloc(lipt_kctx *ctx, int nthr, int T, int d, int keep_z) {
    tile_scratch *w = lipt_arena_alloc(ctx->arena, (size_t)nthr * sizeof *w);
    for (int t = 0; t < nthr; t++) {
        w[t].S = lipt_arena_alloc(ctx->arena, (size_t)TILE_R * TILE_C * sizeof(float));
        w[t].G = lipt_arena_alloc(ctx->arena, (size_t)TILE_R * TILE_C * sizeof(float));
        w[t].Z = keep_z ? lipt_arena_alloc(ctx->arena, (size_t)TILE_R * TILE_C * sizeof(float)) : NULL;
        w[t].acc = lipt_arena_alloc(ctx->arena, (size_t)TILE_R * d * sizeof(float));
        w[t].mx = lipt_arena_alloc(ctx->arena, (size_t)4 * TILE_R * sizeof(float));
        w[t].lo = w[t].mx + TILE_R;
        w[t].hi = w[t].lo + TILE_R;
        w[t].dr = w[t].hi + TILE_R;
        w[t].l = lipt_arena_alloc(ctx->arena, (size_t)TILE_R * sizeof(double));
        w[t].kn = lipt_arena_alloc(ctx->arena, (size_t)(T > 0 ? T : 1) * sizeof(float));
        w[t].cs = lipt_arena_alloc(ctx->arena, (size_t)(T > 0 ? T : 1) * sizeof(double));
    }
    return w;
}

/* S (row stride TILE_C) = the logits of rows [i0, i0 + m) × columns [j0, j0 + nc) of head slices qh, kh (row stride
 * ld) of job j: alpha q·k, then through j's logit map, + rel[i - j] and - kn[j] on the unmasked entries, in the order
 * of the materialising kernel (same bits per entry as long as the GEMM rounds each dot product the same way). Masked
 * entries are left as they are. Z, if given, receives alpha q·k before the map (the map's backward needs it). */
static void logits_tile(lipt_kctx *ctx, const lipt_attn_job *j, const float *qh, const float *kh, float alpha, int i0,
                        int m, int j0, int nc, const float *relh, const float *kn, float *S, float *Z) {
    const int ld = lipt_attn_ld(j), d = j->D / j->H;
    lipt_gemm_p(ctx, 0, 1, m, nc, d, alpha, qh + (size_t)i0 * ld, ld, kh + (size_t)j0 * ld, ld, 0.0f, S,
                TILE_C);
    if (!relh && !kn && !j->map) return;
    if (Z) memcpy(Z, S, (size_t)m * TILE_C * sizeof(float));
    for (int r = 0; r < m; r++) {
        const int i = i0 + r, n = n_valid(i, j0, nc, j->causal);
        float *z = S + (size_t)r * TILE_C;
        if (j->map) j->map->forward_row(z, n, j->map_param);
        if (relh)
            for (int c = 0; c < n; c++) z[c] += relh[i - j0 - c];
        if (kn)
            for (int c = 0; c < n; c++) z[c] -= kn[j0 + c];
    }
}

/* z[c] = e^(z[c] - mx) for c < n (the vector exp of the materialising softmax), 0 for n <= c < nc; returns
 * Σ e^(z[c] - mx) in double. */
static double exp_sum_row(float *z, int n, int nc, float mx) {
    const float ninf = -__builtin_inff();
    lipt_vd acc = {0};
    for (int c = 0; c < n; c += LIPT_VW) {
        const size_t len = lipt_vlanes((size_t)c, (size_t)n);
        const lipt_vf e = lipt_vexp(lipt_vload_fill(z + c, len, ninf) - mx);
        acc += __builtin_convertvector(e, lipt_vd);
        lipt_vstore_n(z + c, e, len);
    }
    if (n < nc) memset(z + n, 0, (size_t)(nc - n) * sizeof(float));
    return lipt_vd_sum(&acc);
}

/* max_c z[c] over c < n, n >= 1 (the vector max of the materialising softmax). */
static float row_max(const float *z, int n) {
    const float ninf = -__builtin_inff();
    lipt_vf mv = lipt_vset1(ninf);
    for (int c = 0; c < n; c += LIPT_VW)
        mv = lipt_vmax(mv, lipt_vload_fill(z + c, lipt_vlanes((size_t)c, (size_t)n), ninf));
    float mx = mv[0];
    for (int i = 1; i < LIPT_VW; i++) mx = mv[i] > mx ? mv[i] : mx;
    return mx;
}

/* The backward's probabilities: z[c] = e^(z[c] - mx) * il for c < n, 0 for n <= c < nc. */
static void prob_row(float *z, int n, int nc, float mx, float il) {
    for (int c = 0; c < n; c += LIPT_VW) {
        const size_t len = lipt_vlanes((size_t)c, (size_t)n);
        lipt_vstore_n(z + c, lipt_vexp(lipt_vload_n(z + c, len) - mx) * il, len);
    }
    if (n < nc) memset(z + n, 0, (size_t)(nc - n) * sizeof(float));
}

/* One (batch, head) forward: out rows and, if st_m / st_il are given, each row's logit max and 1 / Σ e^(z - max).
 * Returns the largest logit spread of the head's rows when want_spread (else 0). */
static float head_forward(lipt_kctx *ctx, const lipt_attn_job *j, int bh, float *out, float *st_m, float *st_il,
                          tile_scratch *w, int want_spread) {
    const int T = j->T, D = j->D, d = D / j->H, b = bh / j->H, h = bh % j->H, ld = lipt_attn_ld(j);
    /* off: the output's offset (row stride D); offi: q, k, v's (row stride ld) */
    const size_t off = (size_t)b * T * D + (size_t)h * d, offi = (size_t)b * T * ld + (size_t)h * d;
    const float *qh = j->q + offi, *kh = j->k + offi, *vh = j->v + offi;
    float *oh = out + off;
    const double inv_s = 1.0 / sqrt((double)d);
    const float alpha = lipt_attn_logit_scale(j->l2, d);
    const float *relh = j->rel ? j->rel + (size_t)h * j->rel_stride : NULL;
    if (j->l2) lipt_attn_l2_key_norms(kh, T, ld, d, inv_s, w->kn);
    const float *kn = j->l2 ? w->kn : NULL;
    float spread = 0;
    for (int i0 = 0; i0 < T; i0 += TILE_R) {
        const int i1 = i0 + TILE_R < T ? i0 + TILE_R : T, m = i1 - i0, ncol = j->causal ? i1 : T;
        for (int r = 0; r < m; r++) {
            w->mx[r] = -__builtin_inff();
            w->l[r] = 0;
        }
        memset(w->acc, 0, (size_t)m * d * sizeof(float));
        for (int j0 = 0; j0 < ncol; j0 += TILE_C) {
            const int nc = j0 + TILE_C < ncol ? TILE_C : ncol - j0;
            logits_tile(ctx, j, qh, kh, alpha, i0, m, j0, nc, relh, kn, w->S, NULL);
            for (int r = 0; r < m; r++) {
                const int n = n_valid(i0 + r, j0, nc, j->causal);
                float *z = w->S + (size_t)r * TILE_C;
                if (n == 0) { /* not reached with TILE_C % TILE_R == 0, kept for safety */
                    memset(z, 0, (size_t)nc * sizeof(float));
                    continue;
                }
                const float tmax = row_max(z, n);
                if (want_spread) { /* the comparisons of the materialising kernel, seeded by the row's first logit */
                    float lo = j0 == 0 ? z[0] : w->lo[r], hi = j0 == 0 ? z[0] : w->hi[r];
                    for (int c = 0; c < n; c++) {
                        lo = z[c] < lo ? z[c] : lo;
                        hi = z[c] > hi ? z[c] : hi;
                    }
                    w->lo[r] = lo;
                    w->hi[r] = hi;
                }
                /* a new row max rescales what was summed so far; e^(old - new) in double, once per row and tile */
                const float mnew = tmax > w->mx[r] ? tmax : w->mx[r];
                if (mnew != w->mx[r] && j0 > 0) {
                    const double sc = exp((double)w->mx[r] - mnew);
                    const float scf = (float)sc;
                    w->l[r] *= sc;
                    float *a = w->acc + (size_t)r * d;
                    for (int c = 0; c < d; c++) a[c] *= scf;
                }
                w->mx[r] = mnew;
                w->l[r] += exp_sum_row(z, n, nc, mnew);
            }
            lipt_gemm_p(ctx, 0, 0, m, d, nc, 1.0f, w->S, TILE_C, vh + (size_t)j0 * ld, ld, 1.0f, w->acc, d);
        }
        for (int r = 0; r < m; r++) {
            const float inv = (float)(1.0 / w->l[r]);
            const float *a = w->acc + (size_t)r * d;
            float *o = oh + (size_t)(i0 + r) * D;
            for (int c = 0; c < d; c++) o[c] = a[c] * inv;
            if (st_m) {
                st_m[i0 + r] = w->mx[r];
                st_il[i0 + r] = inv;
            }
            if (want_spread) {
                const float sp = w->hi[r] - w->lo[r];
                if (sp > spread || sp != sp) spread = sp;
            }
        }
    }
    return spread;
}

static void attn_forward_tiled(lipt_kctx *ctx, const lipt_attn_job *j, float *out, float *stats) {
    const int BH = j->B * j->H, T = j->T;
    if (BH == 0 || T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(ctx->arena);
    const int nthr = omp_get_max_threads();
    tile_scratch *w = scratch_alloc(ctx, nthr, T, j->D / j->H, 0);
    const int want = ctx->attn_spread != NULL;
    float spread = 0;
#pragma omp parallel for schedule(static) reduction(max : spread) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++) {
        float *sm = stats ? stats + (size_t)bh * T : NULL, *si = stats ? stats + ((size_t)BH + bh) * T : NULL;
        const float sp = head_forward(ctx, j, bh, out, sm, si, w + omp_get_thread_num(), want);
        if (sp > spread || sp != sp) spread = sp;
    }
    if (want && (spread > *ctx->attn_spread || spread != spread)) *ctx->attn_spread = spread;
    lipt_arena_release(ctx->arena, mark);
}

void lipt_attn_forward_tiled(lipt_kctx *ctx, const lipt_attn_job *j, float *out, float *stats) {
    /* the whole call: its per-head products run in its own parallel region (kernels/kctx.h) */
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    attn_forward_tiled(ctx, j, out, stats);
    lipt_kprof_end(ctx, acc, t0, 1);
}

/* One (batch, head) backward, tile by tile. With P recomputed as e^(z - max) / Σ and Dr_i = dO_i · O_i
 * (= Σ_j P_ij dP_ij), the logit gradient is G = P ⊙ (dP − Dr), dP = dO vᵀ (with a logit map, times its derivative
 * at the logits before it, kept in w->Z); then as the materialising kernel:
 *   dv += Pᵀ dO,  dq += a G k,  dk += a Gᵀ q,  drel[i - j] += G_ij,  L2: dk_j -= a k_j Σ_i G_ij.
 * dq, dk, dv may alias: they are only ever added to, never read. */
static void head_backward(lipt_kctx *ctx, const lipt_attn_job *j, int bh, const float *st_m, const float *st_il,
                          const float *out, const float *dout, tile_scratch *w, float *dq, float *dk, float *dv,
                          double *drel_bh) {
    const int T = j->T, D = j->D, d = D / j->H, b = bh / j->H, h = bh % j->H, ld = lipt_attn_ld(j);
    /* off: out's and dout's offset (row stride D); offi: q, k, v's and their gradients' (row stride ld) */
    const size_t off = (size_t)b * T * D + (size_t)h * d, offi = (size_t)b * T * ld + (size_t)h * d;
    const float *qh = j->q + offi, *kh = j->k + offi, *vh = j->v + offi, *dOh = dout + off, *oh = out + off;
    float *dqh = dq ? dq + offi : NULL, *dkh = dk ? dk + offi : NULL, *dvh = dv ? dv + offi : NULL;
    const double inv_s = 1.0 / sqrt((double)d), a = (j->l2 ? 2.0 : 1.0) * inv_s;
    const float alpha = (float)a;
    const float *relh = j->rel ? j->rel + (size_t)h * j->rel_stride : NULL;
    const int need_g = dqh || dkh || drel_bh, need_cs = j->l2 && dkh;
    if (j->l2) lipt_attn_l2_key_norms(kh, T, ld, d, inv_s, w->kn);
    const float *kn = j->l2 ? w->kn : NULL;
    if (need_cs) memset(w->cs, 0, (size_t)T * sizeof(double));
    for (int i0 = 0; i0 < T; i0 += TILE_R) {
        const int i1 = i0 + TILE_R < T ? i0 + TILE_R : T, m = i1 - i0, ncol = j->causal ? i1 : T;
        const float *dOb = dOh + (size_t)i0 * D;
        if (need_g)
            for (int r = 0; r < m; r++) {
                const float *g = dOb + (size_t)r * D, *o = oh + (size_t)(i0 + r) * D;
                w->dr[r] = (float)lipt_dot_f64(g, o, (size_t)d);
            }
        for (int j0 = 0; j0 < ncol; j0 += TILE_C) {
            const int nc = j0 + TILE_C < ncol ? TILE_C : ncol - j0;
            float *S = w->S, *G = w->G;
            logits_tile(ctx, j, qh, kh, alpha, i0, m, j0, nc, relh, kn, S, w->Z);
            for (int r = 0; r < m; r++)
                prob_row(S + (size_t)r * TILE_C, n_valid(i0 + r, j0, nc, j->causal), nc, st_m[i0 + r],
                         st_il[i0 + r]);
            if (dvh) lipt_gemm_p(ctx, 1, 0, nc, d, m, 1.0f, S, TILE_C, dOb, D, 1.0f, dvh + (size_t)j0 * ld, ld);
            if (!need_g) continue;
            lipt_gemm_p(ctx, 0, 1, m, nc, d, 1.0f, dOb, D, vh + (size_t)j0 * ld, ld, 0.0f, G, TILE_C);
            for (int r = 0; r < m; r++) {
                const int i = i0 + r, n = n_valid(i, j0, nc, j->causal);
                const float *p = S + (size_t)r * TILE_C, dr = w->dr[r];
                float *g = G + (size_t)r * TILE_C;
                for (int c = 0; c < n; c++) g[c] = p[c] * (g[c] - dr);
                if (w->Z) j->map->grad_row(w->Z + (size_t)r * TILE_C, g, n, j->map_param);
                for (int c = n; c < nc; c++) g[c] = 0.0f;
                if (drel_bh) /* causal only: logit (i, j) got rel[i - j] */
                    for (int c = 0; c < n; c++) drel_bh[i - j0 - c] += g[c];
                if (need_cs)
                    for (int c = 0; c < n; c++) w->cs[j0 + c] += g[c];
            }
            if (dqh)
                lipt_gemm_p(ctx, 0, 0, m, d, nc, alpha, G, TILE_C, kh + (size_t)j0 * ld, ld, 1.0f,
                            dqh + (size_t)i0 * ld, ld);
            if (dkh)
                lipt_gemm_p(ctx, 1, 0, nc, d, m, alpha, G, TILE_C, qh + (size_t)i0 * ld, ld, 1.0f,
                            dkh + (size_t)j0 * ld, ld);
        }
    }
    if (need_cs) lipt_attn_l2_key_norm_grad(kh, T, ld, d, a, w->cs, dkh);
}

static void attn_backward_tiled(lipt_kctx *ctx, const lipt_attn_job *j, const float *stats, const float *out,
                                const float *dout, float *dq, float *dk, float *dv, float *drel) {
    const int BH = j->B * j->H, T = j->T;
    if (!j->rel) drel = NULL;
    if ((!dq && !dk && !dv && !drel) || BH == 0 || T == 0) return;
    lipt_arena_mark mark = lipt_arena_get_mark(ctx->arena);
    const int nthr = omp_get_max_threads();
    tile_scratch *w = scratch_alloc(ctx, nthr, T, j->D / j->H, j->map && (dq || dk));
    /* one partial sum per (batch, head), reduced in batch order below: the same bits on any thread count */
    double *pr = drel ? lipt_arena_calloc(ctx->arena, (size_t)BH * T * sizeof(double)) : NULL;
#pragma omp parallel for schedule(static) if (lipt_attn_use_par(j))
    for (int bh = 0; bh < BH; bh++)
        head_backward(ctx, j, bh, stats + (size_t)bh * T, stats + ((size_t)BH + bh) * T, out, dout,
                      w + omp_get_thread_num(), dq, dk, dv, pr ? pr + (size_t)bh * T : NULL);
    if (pr) lipt_attn_rel_grad_reduce(j, pr, drel);
    lipt_arena_release(ctx->arena, mark);
}

void lipt_attn_backward_tiled(lipt_kctx *ctx, const lipt_attn_job *j, const float *stats, const float *out,
                              const float *dout, float *dq, float *dk, float *dv, float *drel) {
    /* the whole call: its per-head products run in its own parallel region (kernels/kctx.h) */
    double t0, *acc = lipt_kprof_begin(ctx, &t0);
    attn_backward_tiled(ctx, j, stats, out, dout, dq, dk, dv, drel);
    lipt_kprof_end(ctx, acc, t0, 1);
}
