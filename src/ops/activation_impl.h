/* Private: GELU's pass, for lipt_gelu and the fused ops that end in a GELU. */
#ifndef LIPT_OPS_ACTIVATION_IMPL_H
#define LIPT_OPS_ACTIVATION_IMPL_H

#include <stddef.h>

/* y = x Φ(x) over n floats (y may be x) on the context's threads, in fixed chunks; cdf, if not NULL, receives Φ(x)
 * for the backward. */
void lipt_gelu_pass(const float *x, float *y, float *cdf, size_t n);

#endif
