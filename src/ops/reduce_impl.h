/* Shared by the element-wise ops and lipt_linear: the broadcast-row reduction of a gradient; and the gradient
 * norm's sum of squares. */
#ifndef LIPT_OPS_REDUCE_IMPL_H
#define LIPT_OPS_REDUCE_IMPL_H

#include <stddef.h>

/* db[j] += sign * sum_r g[r*P + j] (* w[r*P + j] when w is given), in double: the sums run over every row. */
void lipt_reduce_rows_acc(float *db, const float *g, const float *w, size_t rows, size_t P, double sign);

/* Σ g[i] (* w[i] when w is given) of n floats, in double: fixed chunks (their bounds depend on n only) each summed in
 * vector lanes, then the chunks' sums in order: the same bits on any thread count. */
double lipt_sum_f32(const float *g, const float *w, size_t n);

#endif
