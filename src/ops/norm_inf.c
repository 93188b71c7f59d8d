/* norm_inf: induced infinity norms (max abs row sum, or max abs column sum) of column blocks, and backward. The
 * norms are upper bounds of the exact norms of the float weights (a certificate's factors, issue 51): each sum of
 * |w| in double keeps the exact error of every addition (lipt_ow_sum: none when every addition was exact, as for
 * float terms of similar size), and the float result is rounded up (lipt_float_up). */
#include "lipt/ops.h"

#include <math.h>

#include "core/outward.h"

#define NINF_PAR_WORK ((size_t)1 << 16)

/* First argmax; a NaN sum wins (and stays) so a diverged weight shows up in the norm. */
static void take_max(double s, int idx, double *best, int *arg) {
    if (isnan(*best)) return;
    if (!(s <= *best)) { *best = s; *arg = idx; }
}

/* iarg: 0 transpose, 1 n_blocks, 2 R, 3 C.  saved: int argmax per block (row index, or global column index). */
lipt_tensor *lipt_norm_inf(lipt_ctx *ctx, lipt_tensor *w, int transpose, int n_blocks) {
    char sw[64];
    LIPT_CHECK(w->ndim == 2, "norm_inf: w must be 2-D, got %s", lipt_shape_str(w, sw, 64));
    int R = w->shape[0], C = w->shape[1];
    LIPT_CHECK(R > 0 && C > 0, "norm_inf: empty w %s", lipt_shape_str(w, sw, 64));
    LIPT_CHECK(n_blocks >= 1 && C % n_blocks == 0, "norm_inf: %d blocks do not divide the %d columns of %s", n_blocks,
               C, lipt_shape_str(w, sw, 64));
    int cb = C / n_blocks;
    const float *W = w->data;

    lipt_tensor *out = lipt_tensor_1d(ctx, n_blocks);
    lipt_node *node = lipt_record(ctx, LIPT_OP_NORM_INF, out, 1, (lipt_tensor *[]){w});
    int *arg = node ? lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * sizeof(int)) : NULL;

    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    if (!arg) arg = lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * sizeof(int));
    if (!transpose) {
        /* rs[i, b] = sum_{j in block b} |W[i, j]| */
        double *rs = lipt_arena_alloc(&ctx->arena, (size_t)R * n_blocks * sizeof(double));
#pragma omp parallel for schedule(static) if ((size_t)R * C >= NINF_PAR_WORK)
        for (int i = 0; i < R; i++) {
            const float *row = W + (size_t)i * C;
            for (int b = 0; b < n_blocks; b++) {
                lipt_ow_sum s = {0, 0, 0};
                for (int j = b * cb; j < (b + 1) * cb; j++) lipt_ow_sum_add(&s, fabs((double)row[j]));
                rs[(size_t)i * n_blocks + b] = lipt_ow_sum_upper(&s, cb);
            }
        }
        for (int b = 0; b < n_blocks; b++) {
            double best = -1;
            arg[b] = 0;
            for (int i = 0; i < R; i++) take_max(rs[(size_t)i * n_blocks + b], i, &best, &arg[b]);
            out->data[b] = lipt_float_up(best);
        }
    } else {
        /* cs[j] = sum_i |W[i, j]|: threads take column chunks and stream the rows (each sum with its error terms,
         * then its upper bound in place) */
        double *cs = lipt_arena_alloc(&ctx->arena, (size_t)C * sizeof(double));
        const int chunk = 64;
        int n_chunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n_chunks > 1 && (size_t)R * C >= NINF_PAR_WORK)
        for (int k = 0; k < n_chunks; k++) {
            int j0 = k * chunk, j1 = j0 + chunk < C ? j0 + chunk : C;
            lipt_ow_sum acc[64];
            for (int j = j0; j < j1; j++) acc[j - j0] = (lipt_ow_sum){0, 0, 0};
            for (int i = 0; i < R; i++) {
                const float *row = W + (size_t)i * C;
                for (int j = j0; j < j1; j++) lipt_ow_sum_add(&acc[j - j0], fabs((double)row[j]));
            }
            for (int j = j0; j < j1; j++) cs[j] = lipt_ow_sum_upper(&acc[j - j0], R);
        }
        for (int b = 0; b < n_blocks; b++) {
            double best = -1;
            arg[b] = b * cb;
            for (int j = b * cb; j < (b + 1) * cb; j++) take_max(cs[j], j, &best, &arg[b]);
            out->data[b] = lipt_float_up(best);
        }
    }
    lipt_arena_release(&ctx->arena, mk);

    if (node) {
        node->saved = arg;
        node->iarg[0] = transpose;
        node->iarg[1] = n_blocks;
        node->iarg[2] = R;
        node->iarg[3] = C;
    }
    lipt_profile_op_end(ctx, LIPT_OP_NORM_INF); /* it recorded before computing */
    return out;
}

static float sgn(float x) { return (float)((x > 0) - (x < 0)); }

void lipt_norm_inf_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *w = node->in[0];
    float *dw = lipt_grad_of(ctx, w);
    if (!dw) return;
    int transpose = node->iarg[0], n_blocks = node->iarg[1], R = node->iarg[2], C = node->iarg[3], cb = C / n_blocks;
    const int *arg = node->saved;
    const float *g = node->out->grad, *W = w->data;
    /* d max_k s_k = ds_{argmax}; d|x| = sign(x) dx (0 at x = 0) */
    for (int b = 0; b < n_blocks; b++) {
        float gb = g[b];
        if (!transpose) {
            size_t off = (size_t)arg[b] * C;
            for (int j = b * cb; j < (b + 1) * cb; j++) dw[off + j] += gb * sgn(W[off + j]);
        } else {
            int j = arg[b];
            for (int i = 0; i < R; i++) dw[(size_t)i * C + j] += gb * sgn(W[(size_t)i * C + j]);
        }
    }
}
