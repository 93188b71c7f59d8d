/* The attention of one query row against a head's keys with plain loops (the incremental decoder's new token): the
 * logits and P·v that lipt_attn_rows computes as products, the probabilities by the kernel's own row function. */
#include "ops/rows.h"

#include "kernels/kernels.h"

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
