/* concat_cols: 2-D tensors [K, N_i] side by side as one [K, Σ N_i], and its backward. It lets one product
 * x [W^Q W^K W^V] replace three (src/nn/forward.c): the copy is of weights (D × 3D floats per layer), small next to
 * the product it saves. */
#include "lipt/ops.h"

#include <string.h>

lipt_tensor *lipt_concat_cols(lipt_ctx *ctx, int n, lipt_tensor *const *ts) {
    char a[64], b[64];
    LIPT_CHECK(n >= 1 && n <= LIPT_MAX_INPUTS, "concat_cols: %d tensors (need 1 .. %d)", n, LIPT_MAX_INPUTS);
    const int K = ts[0]->ndim == 2 ? ts[0]->shape[0] : -1;
    int N = 0;
    for (int i = 0; i < n; i++) {
        LIPT_CHECK(ts[i]->ndim == 2 && ts[i]->shape[0] == K, "concat_cols: tensor %d is %s, tensor 0 %s (need [K, N_i])",
                   i, lipt_shape_str(ts[i], a, 64), lipt_shape_str(ts[0], b, 64));
        N += ts[i]->shape[1];
    }
    lipt_tensor *out = lipt_tensor_2d(ctx, K, N);
    for (int r = 0, c = 0; r < K; r++, c = 0)
        for (int i = 0; i < n; i++) {
            const int w = ts[i]->shape[1];
            memcpy(out->data + (size_t)r * N + c, ts[i]->data + (size_t)r * w, (size_t)w * sizeof(float));
            c += w;
        }
    lipt_record(ctx, LIPT_OP_CONCAT_COLS, out, n, ts);
    return out;
}

void lipt_concat_cols_backward(lipt_ctx *ctx, lipt_node *node) {
    const lipt_tensor *out = node->out;
    const int K = out->shape[0], N = out->shape[1];
    for (int i = 0, c = 0; i < node->n_in; c += node->in[i]->shape[1], i++) {
        float *g = lipt_grad_of(ctx, node->in[i]);
        if (!g) continue;
        const int w = node->in[i]->shape[1];
        for (int r = 0; r < K; r++) {
            const float *src = out->grad + (size_t)r * N + c;
            float *dst = g + (size_t)r * w;
            for (int j = 0; j < w; j++) dst[j] += src[j];
        }
    }
}
