/* softmax over the last dim (max subtracted), backward dx = y (dy - sum(dy y)). */
#include "lipt/ops.h"

#include <math.h>

#include "kernels/kernels.h"

#define SM_PAR_MIN 16384

/* Backward reads the output y itself (node->out->data), so nothing extra is saved. iarg: 0 V. */
lipt_tensor *lipt_softmax(lipt_ctx *ctx, lipt_tensor *x) {
    char s[64];
    LIPT_CHECK(x->ndim >= 1, "softmax: x has no dims");
    const int V = lipt_last_dim(x);
    LIPT_CHECK(V > 0, "softmax: last dim is 0 in %s", lipt_shape_str(x, s, 64));
    const size_t rows = lipt_rows(x);
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    const float *X = x->data;
    float *Y = out->data;
#pragma omp parallel for schedule(static) if (x->numel >= SM_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        const float *xr = X + (size_t)r * V;
        float *yr = Y + (size_t)r * V;
        float m = xr[0];
        for (int j = 1; j < V; j++) m = xr[j] > m ? xr[j] : m;
        double sum = 0;
        for (int j = 0; j < V; j++) {
            double e = exp((double)xr[j] - m);
            yr[j] = (float)e;
            sum += e;
        }
        const double inv = 1.0 / sum;
        for (int j = 0; j < V; j++) yr[j] = (float)(yr[j] * inv);
    }
    lipt_node *node = lipt_record(ctx, LIPT_OP_SOFTMAX, out, 1, (lipt_tensor *[]){x});
    if (node) node->iarg[0] = V;
    return out;
}

void lipt_softmax_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const int V = node->iarg[0];
    const size_t rows = lipt_rows(node->out);
    const float *Y = node->out->data, *G = node->out->grad;
#pragma omp parallel for schedule(static) if (node->out->numel >= SM_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        const float *yr = Y + (size_t)r * V, *gr = G + (size_t)r * V;
        float *dxr = dx + (size_t)r * V;
        const double dot = lipt_dot_f64(gr, yr, (size_t)V);
        for (int j = 0; j < V; j++) dxr[j] += (float)(yr[j] * (gr[j] - dot));
    }
}
