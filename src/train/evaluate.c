/* Bits per character and next-character accuracy over a split: windows from the data layer's iterator, batched,
 * no-grad. */
#include "lipt/evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LN2 0.69314718055994530942

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The model's prediction from one row of logits: the first largest (ties go to the lowest id). */
static int argmax_row(const float *x, int V) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

void lipt_eval_protocol_str(const lipt_eval_opts *o, char *buf, size_t len) {
    if (o->stride >= o->T) snprintf(buf, len, "non-overlapping windows of %d", o->T);
    else snprintf(buf, len, "sliding windows of %d, stride %d", o->T, o->stride);
}

lipt_status lipt_evaluate(lipt_ctx *ctx, const lipt_model *m, const lipt_tok *tok, size_t n, const lipt_eval_opts *o,
                          lipt_eval_result *r, lipt_error *err) {
    memset(r, 0, sizeof *r);
    if (o->T < 1 || o->T > m->cfg.seq_len)
        return lipt_fail(err, LIPT_ERR_ARG, "evaluation window %d must be in [1, seq_len = %d]", o->T, m->cfg.seq_len);
    if (o->max_symbols && n > o->max_symbols + 1) n = o->max_symbols + 1;
    lipt_eval_iter it;
    lipt_status st = lipt_eval_iter_init(&it, n, o->T, o->stride, err);
    if (st != LIPT_OK) return st;
    int B = o->batch > 0 ? o->batch : 1;
    size_t total_windows = lipt_eval_iter_count(&it);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)B * o->T), *tg = malloc(sizeof(int32_t) * (size_t)B * o->T);
    double *row = malloc(sizeof(double) * (size_t)B * o->T);
    lipt_eval_window *w = malloc(sizeof *w * (size_t)B);
    if (!in || !tg || !row || !w) {
        free(in); free(tg); free(row); free(w);
        return lipt_fail(err, LIPT_ERR_NOMEM, "evaluation buffers");
    }
    double t0 = now_s(), last_print = 0;
    int training = ctx->training;
    ctx->training = 0;
    lipt_no_grad_push(ctx);
    const int nranks = o->dist ? o->dist->size : 1, rank = o->dist ? o->dist->rank : 0;
    lipt_eval_window pending;
    int have_pending = lipt_eval_iter_next(&it, &pending);
    for (size_t k = 0; have_pending; k++) {
        /* a batch of consecutive windows of one length */
        int nb = 0, len = pending.len;
        while (have_pending && nb < B && pending.len == len) {
            w[nb] = pending;
            lipt_eval_window_fill(tok, &w[nb], in + (size_t)nb * len, tg + (size_t)nb * len);
            nb++;
            have_pending = lipt_eval_iter_next(&it, &pending);
        }
        r->windows += (size_t)nb;
        if ((int)(k % (size_t)nranks) != rank) continue; /* another rank scores this batch */
        lipt_ctx_reset(ctx);
        lipt_tensor *h = lipt_model_hidden(ctx, m, in, nb, len);
        lipt_tensor *logits = lipt_model_logits(ctx, m, h);
        lipt_cross_entropy(ctx, logits, tg, row);
        const int V = lipt_last_dim(logits);
        for (int b = 0; b < nb; b++)
            for (int t = w[b].score_from; t < len; t++) {
                const size_t i = (size_t)b * len + t;
                r->nll_sum += row[i];
                r->correct += argmax_row(logits->data + i * (size_t)V, V) == tg[i];
                r->symbols++;
            }
        if (o->progress) {
            double now = now_s();
            if (now - last_print > 0.5 || !have_pending) {
                double rate = nranks * r->symbols / fmax(now - t0, 1e-9);
                fprintf(stderr, "\r  eval %zu/%zu windows  bpc %.4f  acc %.4f  %.0f sym/s%s   ", r->windows,
                        total_windows, r->nll_sum / fmax(1, r->symbols) / LN2,
                        (double)r->correct / fmax(1, r->symbols), rate, nranks > 1 ? " (rank 0's share)" : "");
                last_print = now;
            }
        }
    }
    if (o->progress) fputc('\n', stderr);
    lipt_no_grad_pop(ctx);
    lipt_ctx_reset(ctx);
    ctx->training = training;
    if (nranks > 1) {
        /* symbol counts are exact in a double up to 2^53 */
        double s[3] = {r->nll_sum, (double)r->symbols, (double)r->correct};
        lipt_status ds = lipt_dist_sum_f64(o->dist, s, 3, err);
        if (ds != LIPT_OK) {
            free(in); free(tg); free(row); free(w);
            return ds;
        }
        r->nll_sum = s[0];
        r->symbols = (size_t)s[1];
        r->correct = (size_t)s[2];
    }
    r->seconds = now_s() - t0;
    r->nll = r->symbols ? r->nll_sum / r->symbols : NAN;
    r->bpc = r->nll / LN2;
    r->accuracy = r->symbols ? (double)r->correct / (double)r->symbols : NAN;
    free(in); free(tg); free(row); free(w);
    if (r->symbols == 0) return lipt_fail(err, LIPT_ERR_ARG, "the split has no symbols to score (check --data-split)");
    if (!isfinite(r->nll_sum))
        return lipt_fail(err, LIPT_ERR_NUMERIC, "evaluation produced a non-finite loss (the model's weights may have diverged)");
    return LIPT_OK;
}
