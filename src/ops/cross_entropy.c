/* cross_entropy: fused log-softmax + negative log-likelihood (mean over rows, nats), log-sum-exp in double. */
#include "lipt/ops.h"

#include <math.h>
#include <string.h>

#define CE_PAR_MIN 16384

/* saved: log-sum-exp per row (double), ids: targets (arena copy). iarg: 0 V. */
lipt_tensor *lipt_cross_entropy(lipt_ctx *ctx, lipt_tensor *logits, const int *targets, double *row_nll) {
    char s[64];
    LIPT_CHECK(logits->ndim >= 1, "cross_entropy: logits have no dims");
    const int V = lipt_last_dim(logits);
    LIPT_CHECK(V > 0, "cross_entropy: vocabulary size 0 in %s", lipt_shape_str(logits, s, 64));
    const size_t rows = lipt_rows(logits);
    LIPT_CHECK(rows > 0, "cross_entropy: no rows in %s", lipt_shape_str(logits, s, 64));
    LIPT_CHECK(targets, "cross_entropy: NULL targets");
    for (size_t i = 0; i < rows; i++)
        LIPT_CHECK(targets[i] >= 0 && targets[i] < V, "cross_entropy: target %d at row %zu outside [0,%d)",
                   targets[i], i, V);
    lipt_tensor *out = lipt_tensor_1d(ctx, 1);
    lipt_node *node = lipt_record(ctx, LIPT_OP_CROSS_ENTROPY, out, 1, (lipt_tensor *[]){logits});
    /* The per-row log-sum-exp is kept for backward when recording, else it is a scoped temporary. */
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    double *lse = lipt_arena_alloc(&ctx->arena, rows * sizeof(double));
    const float *X = logits->data;
#pragma omp parallel for schedule(static) if (logits->numel >= CE_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        const float *xr = X + (size_t)r * V;
        float m = xr[0];
        for (int j = 1; j < V; j++) m = xr[j] > m ? xr[j] : m;
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)xr[j] - m);
        lse[r] = m + log(sum);
    }
    /* Serial sum in row order: the mean does not depend on the thread count. */
    double total = 0;
    for (size_t r = 0; r < rows; r++) {
        double nll = lse[r] - X[r * V + targets[r]];
        if (row_nll) row_nll[r] = nll;
        total += nll;
    }
    out->data[0] = (float)(total / (double)rows);
    if (node) {
        int *t = lipt_arena_alloc(&ctx->arena, rows * sizeof(int));
        memcpy(t, targets, rows * sizeof(int));
        node->ids = t;
        node->saved = lse;
        node->iarg[0] = V;
    } else {
        lipt_arena_release(&ctx->arena, mark);
    }
    lipt_profile_op_end(ctx, LIPT_OP_CROSS_ENTROPY); /* it recorded before computing */
    return out;
}

void lipt_cross_entropy_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *logits = node->in[0];
    int fresh; /* every logit's gradient is written: = on a fresh buffer */
    float *dl = lipt_grad_of_fresh(ctx, logits, &fresh);
    if (!dl) return;
    const int V = node->iarg[0];
    const size_t rows = lipt_rows(logits);
    const double *lse = node->saved;
    const int *tg = node->ids;
    const float *X = logits->data;
    const double g = (double)node->out->grad[0] / (double)rows;
#pragma omp parallel for schedule(static) if (logits->numel >= CE_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        const float *xr = X + (size_t)r * V;
        float *dr = dl + (size_t)r * V;
        /* d mean NLL / d logit = (softmax - onehot) / rows */
        for (int j = 0; j < V; j++) {
            double p = exp((double)xr[j] - lse[r]);
            const float d = (float)((p - (j == tg[r] ? 1.0 : 0.0)) * g);
            dr[j] = fresh ? d : dr[j] + d;
        }
    }
}
