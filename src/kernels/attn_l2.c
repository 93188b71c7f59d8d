/* The L2 attention's kernels of kernels/attn.h: the |k_j|²/s term of the logits and its gradient (which the
 * materialising and the tiled attention share), and the tied values Q_h M_h (the tied L2 op and the decoder). Moved
 * from src/ops/attention_l2.c (issue 50). */
#include "kernels/attn.h"

#include <math.h>
#include <omp.h>

#include "kernels/kernels.h"

/* Four rows at a time, each row's sum in column order (the bits of one running sum per row, without waiting on one
 * addition per element). */
void lipt_attn_l2_key_norms(const float *kh, int T, int ld, int d, double inv_s, float *kn) {
    int t = 0;
    for (; t + 4 <= T; t += 4) {
        const float *r0 = kh + (size_t)t * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int c = 0; c < d; c++) {
            a0 += (double)r0[c] * r0[c];
            a1 += (double)r1[c] * r1[c];
            a2 += (double)r2[c] * r2[c];
            a3 += (double)r3[c] * r3[c];
        }
        kn[t] = (float)(a0 * inv_s), kn[t + 1] = (float)(a1 * inv_s);
        kn[t + 2] = (float)(a2 * inv_s), kn[t + 3] = (float)(a3 * inv_s);
    }
    for (; t < T; t++) {
        const float *r = kh + (size_t)t * ld;
        double acc = 0;
        for (int c = 0; c < d; c++) acc += (double)r[c] * r[c];
        kn[t] = (float)(acc * inv_s);
    }
}

void lipt_attn_l2_colsum(const float *G, int T, int i0, int i1, int causal, double *cs) {
    for (int i = i0; i < i1; i++) {
        const float *g = G + (size_t)i * T;
        const int n = causal ? i + 1 : T;
        for (int c = 0; c < n; c++) cs[c] += g[c];
    }
}

void lipt_attn_l2_key_norm_grad(const float *kh, int T, int ld, int d, double a, const double *cs, float *dkh) {
    for (int t = 0; t < T; t++) {
        const float f = (float)(a * cs[t]);
        const float *kr = kh + (size_t)t * ld;
        float *dr = dkh + (size_t)t * ld;
        for (int c = 0; c < d; c++) dr[c] -= f * kr[c];
    }
}

static void tied_M(lipt_kctx *ctx, const float *wq, const float *wv, int D, int H, float *M) {
    const int d = D / H;
    const float inv_s = (float)(1.0 / sqrt((double)d));
    for (int h = 0; h < H; h++)
        lipt_gemm_small_p(ctx, 1, 0, d, d, D, inv_s, wq + (size_t)h * d, D, wv + (size_t)h * d, D, 0.0f,
                          M + (size_t)h * d * d, d);
}

void lipt_attn_l2_tied_M(lipt_kctx *ctx, const float *wq, const float *wv, int D, int H, float *M) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0); /* the heads' products as one (kernels/kctx.h) */
    tied_M(ctx, wq, wv, D, H, M);
    lipt_kprof_end(ctx, acc, t0, 0);
}

int lipt_attn_heads_par(int H) {
    return H > 1 && !omp_in_parallel() && omp_get_max_threads() > 1 && lipt_blas_nests_safely();
}

/* Work (multiply-adds) below which the heads' value products run on the calling thread: the decoder's one new row. */
#define TIED_PAR_MIN 65536.0

/* Head h of lipt_attn_l2_tied_values. */
static void tied_values_head(lipt_kctx *ctx, const float *q, const void *qpk, int rows, int D, int d, const float *M,
                             float *V, int gemv, int h) {
    const float *qh = q + (size_t)h * d, *Mh = M + (size_t)h * d * d;
    if (qpk)
        lipt_gemm_lowp_pk(ctx, 0, 0, rows, d, d, 1.0f, NULL, D, lipt_lowp_at(ctx, qpk, (size_t)h * d), Mh, d, NULL,
                          0.0f, V + (size_t)h * d, D);
    else if (gemv) lipt_gemm_gemv_p(ctx, 0, 0, rows, d, d, 1.0f, qh, D, Mh, d, 0.0f, V + (size_t)h * d, D);
    else lipt_gemm_small_p(ctx, 0, 0, rows, d, d, 1.0f, qh, D, Mh, d, 0.0f, V + (size_t)h * d, D);
}

static void tied_values(lipt_kctx *ctx, const float *q, const void *qpk, int rows, int D, int H, const float *M,
                        float *V, int gemv) {
    const int d = D / H;
    gemv = gemv && !(ctx->precision == LIPT_PRECISION_FLOAT32 && lipt_gemm_small_ok(0, 0, rows, d, d));
    /* a parallel construct only when it runs in parallel: even an if(false) one sets up a libgomp team (allocations
     * included), which the decoder would pay per token */
    if (lipt_attn_heads_par(H) && (double)rows * D * d >= TIED_PAR_MIN) {
#pragma omp parallel for schedule(static)
        for (int h = 0; h < H; h++) tied_values_head(ctx, q, qpk, rows, D, d, M, V, gemv, h);
    } else {
        for (int h = 0; h < H; h++) tied_values_head(ctx, q, qpk, rows, D, d, M, V, gemv, h);
    }
}

void lipt_attn_l2_tied_values(lipt_kctx *ctx, const float *q, const void *qpk, int rows, int D, int H, const float *M,
                              float *V, int gemv) {
    double t0, *acc = lipt_kprof_begin(ctx, &t0); /* the heads' products as one (kernels/kctx.h) */
    tied_values(ctx, q, qpk, rows, D, H, M, V, gemv);
    lipt_kprof_end(ctx, acc, t0, 0);
}
