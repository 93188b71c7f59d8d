/* The attention kernels of kernels/attn.h that work on rows: a head's block of query rows (products at the kernel
 * context's precision, the softmax of each row), one query row with plain loops (the decoder's new token), and what
 * the ops' per-(batch, head) loops share. Moved from src/ops/attention_dp.c and attention_rows.c (issue 50): the
 * three attention files called each other through them. */
#include "kernels/attn.h"

#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"

/* Work (T*T*d summed over heads) above which the (batch, head) loop runs in parallel, and the
 * number of row elements above which a softmax block is split over threads in the serial case. */
#define ATTN_PAR_MIN_WORK 65536.0
#define ATTN_ROWS_PAR_MIN 16384

int lipt_attn_use_par(const lipt_attn_job *j) {
    const int BH = j->B * j->H, d = j->D / j->H;
    return BH > 1 && (double)BH * j->T * j->T * d >= ATTN_PAR_MIN_WORK && lipt_blas_nests_safely();
}

void lipt_attn_gemm(lipt_kctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, const void *apk,
                    int lda, const float *B, const void *bpk, int ldb, float beta, float *C, int ldc) {
    if (apk || bpk) lipt_gemm_lowp_pk(ctx, ta, tb, M, N, K, alpha, A, lda, apk, B, ldb, bpk, beta, C, ldc);
    else lipt_gemm_p(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int lipt_attn_rows_par(int i0, int i1, int nc) {
    return !omp_in_parallel() && (long)(i1 - i0) * nc >= ATTN_ROWS_PAR_MIN;
}

float lipt_attn_probs_row(float *row, int i, int n, int len, const float *kn, const float *rel,
                          const lipt_logit_map *map, float mp, int want_spread) {
    float spread = 0;
    if (map) map->forward_row(row, n, mp);
    if (rel)
        for (int j = 0; j < n; j++) row[j] += rel[i - j];
    if (want_spread) { /* max - min of the logits the softmax sees (invariant to its row constant) */
        float lo = row[0] - (kn ? kn[0] : 0.0f), hi = lo;
        for (int j = 1; j < n; j++) {
            const float z = row[j] - (kn ? kn[j] : 0.0f);
            lo = z < lo ? z : lo;
            hi = z > hi ? z : hi;
        }
        spread = hi - lo;
    }
    lipt_vsoftmax_row(row, (size_t)n, kn);
    if (n < len) memset(row + n, 0, (size_t)(len - n) * sizeof(float));
    return spread;
}

/* Row i of softmax_rows; returns its logit spread when want_spread (else 0). */
static inline float softmax_row(const lipt_kctx *ctx, const lipt_attn_head *h, float *P, int T, int i, int i0, int nc,
                                 int want_spread, void *ppk) {
    float *row = P + (size_t)(i - i0) * T;
    const float spread =
        lipt_attn_probs_row(row, i, h->causal ? i + 1 : T, T, h->kn, h->rel, h->map, h->map_param, want_spread);
    if (ppk) lipt_lowp_pack_span(ctx, row, (size_t)nc, ppk, (size_t)(i - i0) * nc); /* while in cache */
    return spread;
}

/* Rows [i0, i1) of P (P at row i0, row stride T) hold logits in columns [0, nc); turn them into probabilities over
 * the unmasked columns (j <= i when h->causal) and write exact zeros to the rest of the row. h->map, if given, maps
 * them first; h->kn, if given, is subtracted per column (the |k_j|²/s term of L2); h->rel, if given (causal only),
 * adds rel[i - j] to logit (i, j). Returns the largest logit spread (NaN if any is), or 0. */
static float softmax_rows(const lipt_kctx *ctx, const lipt_attn_head *h, float *P, int T, int i0, int i1, int nc,
                           int want_spread, void *ppk) {
    float spread = 0;
    if (!lipt_attn_rows_par(i0, i1, nc)) {
        for (int i = i0; i < i1; i++) {
            const float sp = softmax_row(ctx, h, P, T, i, i0, nc, want_spread, ppk);
            if (sp > spread || sp != sp) spread = sp;
        }
        return spread;
    }
#pragma omp parallel for schedule(static) reduction(max : spread)
    for (int i = i0; i < i1; i++) {
        const float sp = softmax_row(ctx, h, P, T, i, i0, nc, want_spread, ppk);
        if (sp > spread || sp != sp) spread = sp;
    }
    return spread;
}

float lipt_attn_rows(lipt_kctx *ctx, const lipt_attn_head *h, const float *q, const void *qpk, int i0, int i1, int nc,
                     float *P, int ldp, void *ppk, float *o, int ldo, int want_spread) {
    const int m = i1 - i0, d = h->d;
    if (h->kt) lipt_gemm_p(ctx, 0, 0, m, nc, d, h->alpha, q, h->ld, h->kt, h->ldkt, 0.0f, P, ldp);
    else lipt_attn_gemm(ctx, 0, 1, m, nc, d, h->alpha, q, qpk, h->ld, h->k, h->kpk, h->ld, 0.0f, P, ldp);
    const float spread = softmax_rows(ctx, h, P, ldp, i0, i1, nc, want_spread, ppk);
    lipt_attn_gemm(ctx, 0, 0, m, d, nc, 1.0f, P, ppk, ppk ? nc : ldp, h->v, h->vpk, h->ld, 0.0f, o, ldo);
    return spread;
}

void lipt_attn_rel_grad_reduce(const lipt_attn_job *j, const double *pr, float *drel) {
    for (int h = 0; h < j->H; h++)
        for (int t = 0; t < j->T; t++) {
            double s = 0;
            for (int b = 0; b < j->B; b++) s += pr[((size_t)b * j->H + h) * j->T + t];
            drel[(size_t)h * j->rel_stride + t] += (float)s;
        }
}

/* The attention of one query row against a head's keys with plain loops (the incremental decoder's new token): the
 * logits and P·v that lipt_attn_rows computes as products, the probabilities by the kernel's own row function. */
void lipt_attn_query_row(const lipt_attn_head *h, const float *q, int n, int bf16, float *row, double *acc, float *o) {
    const int d = h->d, ld = h->ld;
    for (int j = 0; j < n; j++) {
        const float *kr = h->k + (size_t)j * ld;
        float dot = 0;
        if (bf16)
            for (int c = 0; c < d; c++) dot += lipt_bf16_round(q[c]) * lipt_bf16_round(kr[c]);
        else
            for (int c = 0; c < d; c++) dot += q[c] * kr[c];
        row[j] = h->alpha * dot;
    }
    lipt_attn_probs_row(row, n - 1, n, n, h->kn, h->rel, h->map, h->map_param, 0);
    for (int c = 0; c < d; c++) acc[c] = 0;
    for (int j = 0; j < n; j++) {
        const double pj = bf16 ? lipt_bf16_round(row[j]) : row[j];
        const float *vr = h->v + (size_t)j * ld;
        if (bf16)
            for (int c = 0; c < d; c++) acc[c] += pj * lipt_bf16_round(vr[c]);
        else
            for (int c = 0; c < d; c++) acc[c] += pj * vr[c];
    }
    for (int c = 0; c < d; c++) o[c] = (float)acc[c];
}
