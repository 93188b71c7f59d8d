/* embedding: row gather from a [V,D] table by integer ids, backward scatter-adds into the table. */
#include "lipt/ops.h"

#include <string.h>

/* Work (floats moved) below which threading costs more than it saves. */
#define EMB_PAR_MIN 32768
/* Column chunk per thread in backward: one 64-byte line of floats, so threads rarely share lines. */
#define EMB_COL_CHUNK 16

/* iarg: 0 n (ids), 1 V, 2 D */
lipt_tensor *lipt_embedding(lipt_ctx *ctx, lipt_tensor *table, const int *ids, int ndim, const int *out_shape) {
    char s[64];
    LIPT_CHECK(table->ndim == 2, "embedding: table must be [V,D], got %s", lipt_shape_str(table, s, 64));
    const int V = table->shape[0], D = table->shape[1];
    LIPT_CHECK(ndim >= 1 && ndim <= LIPT_MAX_DIMS, "embedding: output with %d dims", ndim);
    LIPT_CHECK(out_shape[ndim - 1] == D, "embedding: output last dim %d differs from table width %d (table %s)",
               out_shape[ndim - 1], D, lipt_shape_str(table, s, 64));
    lipt_tensor *out = lipt_tensor_new(ctx, ndim, out_shape);
    const size_t n = D ? out->numel / (size_t)D : lipt_shape_numel(ndim - 1, out_shape);
    LIPT_CHECK(n <= (size_t)2147483647, "embedding: %zu ids", n);
    LIPT_CHECK(n == 0 || ids, "embedding: NULL ids");
    /* Validate serially before the copy so the abort names the first bad position. */
    for (size_t i = 0; i < n; i++)
        LIPT_CHECK(ids[i] >= 0 && ids[i] < V, "embedding: id %d at position %zu outside [0,%d)", ids[i], i, V);
    const float *T = table->data;
    float *Y = out->data;
#pragma omp parallel for schedule(static) if (n * (size_t)D >= EMB_PAR_MIN)
    for (long i = 0; i < (long)n; i++)
        memcpy(Y + (size_t)i * D, T + (size_t)ids[i] * D, (size_t)D * sizeof(float));
    lipt_node *node = lipt_record(ctx, LIPT_OP_EMBEDDING, out, 1, (lipt_tensor *[]){table});
    if (node) {
        /* The caller's id buffer may be reused before backward runs. */
        int *copy = lipt_arena_alloc(&ctx->arena, (n ? n : 1) * sizeof(int));
        if (n) memcpy(copy, ids, n * sizeof(int));
        node->ids = copy;
        node->iarg[0] = (int)n;
        node->iarg[1] = V;
        node->iarg[2] = D;
    }
    lipt_profile_op_end(ctx, LIPT_OP_EMBEDDING); /* it recorded before computing */
    return out;
}

void lipt_embedding_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dT = lipt_grad_of(ctx, node->in[0]);
    if (!dT) return;
    const int n = node->iarg[0], D = node->iarg[2];
    const int *ids = node->ids;
    const float *G = node->out->grad;
    const int n_chunks = (D + EMB_COL_CHUNK - 1) / EMB_COL_CHUNK;
    /* Each thread owns a band of columns and walks every id in order, so repeated ids
     * accumulate without races and in the same order whatever the thread count. */
#pragma omp parallel for schedule(static) if ((size_t)n * D >= EMB_PAR_MIN && n_chunks > 1)
    for (int c = 0; c < n_chunks; c++) {
        const int j0 = c * EMB_COL_CHUNK, j1 = j0 + EMB_COL_CHUNK < D ? j0 + EMB_COL_CHUNK : D;
        for (int i = 0; i < n; i++) {
            float *dst = dT + (size_t)ids[i] * D;
            const float *src = G + (size_t)i * D;
            for (int j = j0; j < j1; j++) dst[j] += src[j];
        }
    }
}
