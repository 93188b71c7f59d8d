/* Shared by the element-wise ops and lipt_linear: the broadcast-row reduction of a gradient. */
#ifndef LIPT_OPS_REDUCE_IMPL_H
#define LIPT_OPS_REDUCE_IMPL_H

#include <stddef.h>

/* db[j] += sign * sum_r g[r*P + j] (* w[r*P + j] when w is given), in double: the sums run over every row. */
void lipt_reduce_rows_acc(float *db, const float *g, const float *w, size_t rows, size_t P, double sign);

#endif
