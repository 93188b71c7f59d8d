/* defines: next-token sampling from a row of logits (greedy, temperature, top-k). */
#ifndef LIPT_SAMPLE_H
#define LIPT_SAMPLE_H

#include "lipt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Next-token choice from logits [n_logits], over ids [0, n_allowed) only (e.g. to exclude the unknown id).
 * temperature 0: greedy argmax (first maximum). Otherwise softmax(logits / temperature), restricted to the
 * top_k largest logits when top_k > 0 (ties at the k-th value are all kept), drawn with lipt_rng_uniform.
 * work: n_allowed floats of scratch. */
int lipt_sample_next(const float *logits, int n_allowed, double temperature, int top_k, lipt_rng *rng, float *work);

#ifdef __cplusplus
}
#endif
#endif
