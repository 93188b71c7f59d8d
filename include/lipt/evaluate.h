/* defines: bits-per-character and next-character accuracy evaluation of a model over a token array, with a stated
 * context protocol. */
#ifndef LIPT_EVALUATE_H
#define LIPT_EVALUATE_H

#include <stddef.h>

#include "lipt/data.h"
#include "lipt/dist.h"
#include "lipt/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int T;              /* window length (<= seq_len) */
    int stride;         /* == T: non-overlapping windows; < T: sliding, each later window scores its last `stride` targets */
    int batch;          /* windows per forward pass */
    size_t max_symbols; /* score only the first max_symbols symbols of the split (0: all) */
    int progress;       /* \r progress on stderr */
    lipt_dist *dist;    /* NULL or one rank: everything here; several: batch k on rank k mod size, sums reduced */
} lipt_eval_opts;

typedef struct {
    double nll_sum;     /* nats, summed over scored symbols */
    size_t symbols;     /* scored symbols */
    size_t windows;
    double seconds;
    double nll;         /* mean nats per symbol */
    double bpc;         /* nll / ln 2 */
    size_t correct;     /* scored symbols whose target is the argmax of the model's logits (ties: the lowest id) */
    double accuracy;    /* correct / symbols: next-character accuracy, in [0, 1] */
} lipt_eval_result;

/* tok, n: a split with its one context symbol in front (lipt_dataset_eval_tokens). No-grad; resets ctx.
 * The NLL and the accuracy are taken over the same scored positions, from the same forward pass. */
lipt_status lipt_evaluate(lipt_ctx *ctx, const lipt_model *m, const lipt_tok *tok, size_t n, const lipt_eval_opts *o,
                          lipt_eval_result *r, lipt_error *err);

/* "non-overlapping windows of 128" / "sliding windows of 128, stride 64" */
void lipt_eval_protocol_str(const lipt_eval_opts *o, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
