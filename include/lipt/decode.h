/* defines: incremental (key/value-cached) decoding of a lipt_model for generation (the sampler: lipt/sample.h). */
#ifndef LIPT_DECODE_H
#define LIPT_DECODE_H

#include "lipt/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A decoder state for `batch` sequences advanced in lockstep (each append adds the same number of tokens to
 * every sequence). Per layer it caches what later queries need from earlier positions: dp and l2 the key and
 * value rows (l2 also |k_j|²/s), l2-tied and contractive-l2 the query rows (they are the keys) and the value
 * rows Q_h M_h (with M_h = W^{Q,h}ᵀ W^{V,h}/s computed once). Appending one token then costs O(T·D) attention
 * work per layer plus the token's projections and feed-forward, instead of a forward pass over the prefix.
 *
 * The maths is that of lipt_model_forward in no-grad, non-training mode (no dropout): the contractive
 * attention's factor 1/max(1, UB/c) and the contractive feed-forward's 1/max(1, sigma/c) are computed once,
 * at creation, from the weights and the persistent power-iteration vectors as they are then. Changing the
 * model's weights afterwards needs a new state.
 *
 * All memory is allocated at creation (capacity seq_len positions per sequence); appends never allocate.
 *
 * Window: positions run 0 .. seq_len-1. When a sequence holds seq_len tokens and another arrives, the state
 * slides: it keeps the newest lipt_decoder_keep(seq_len) = seq_len/2 tokens, re-encodes them from scratch at
 * positions 0 .. keep-1 (the positional embedding is absolute, so cached rows cannot simply be shifted), and
 * appends the new token at position keep. The logits are therefore always exactly those of lipt_model_forward
 * on the current window (lipt_decoder_window). The re-encoding costs one prefix pass per seq_len/2 tokens. */
typedef struct lipt_decoder lipt_decoder;

/* Tokens kept by a slide (the same policy is used by `lipt sample --no-cache`). */
static inline int lipt_decoder_keep(int seq_len) { return seq_len / 2; }

/* batch >= 1. The model must stay alive (and unchanged) while the state is used. LIPT_ERR_ARG for a bad batch. */
lipt_status lipt_decoder_create(const lipt_model *m, int batch, lipt_decoder **out, lipt_error *err);
void lipt_decoder_free(lipt_decoder *d);
/* Forget every sequence (length 0); memory is kept. */
void lipt_decoder_reset(lipt_decoder *d);

/* Append n >= 1 tokens to every sequence: ids [batch*n], row-major [batch, n]. Long appends are processed in
 * blocks (sliding when the window is full). *logits (may be NULL) receives the logits for the token after the
 * last appended one, [batch, vocab_size] row-major, inside the state: valid until the next append or reset.
 * LIPT_ERR_ARG (state unchanged) for n < 1 or an id outside [0, vocab_size). */
lipt_status lipt_decoder_append(lipt_decoder *d, const int *ids, int n, const float **logits, lipt_error *err);

int lipt_decoder_len(const lipt_decoder *d);              /* tokens in the window now (0 .. seq_len) */
int lipt_decoder_batch(const lipt_decoder *d);
const int *lipt_decoder_window(const lipt_decoder *d, int b); /* the window's token ids of sequence b */
long lipt_decoder_slides(const lipt_decoder *d);          /* slides since creation or reset */
size_t lipt_decoder_bytes(const lipt_decoder *d);         /* heap bytes the state owns (fixed at creation) */

#ifdef __cplusplus
}
#endif
#endif
