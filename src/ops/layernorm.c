/* layernorm over the last dim, fused forward and backward (mean and rstd saved per row). */
#include "lipt/ops.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Elements below which a single thread is faster. */
#define LN_PAR_MIN 16384

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* saved: mean, saved2: rstd (float per row). iarg: 0 D. farg: 0 eps.
 * gamma and beta may be NULL (weight 1, bias 0). */
lipt_tensor *lipt_layernorm(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *gamma, lipt_tensor *beta, float eps) {
    lipt_kctx *kc = LIPT_KC(ctx);
    char s1[64], s2[64];
    LIPT_CHECK(x->ndim >= 1, "layernorm: x has no dims");
    const int D = lipt_last_dim(x);
    LIPT_CHECK(D > 0, "layernorm: last dim is 0 in %s", lipt_shape_str(x, s1, 64));
    LIPT_CHECK(!gamma || gamma->numel == (size_t)D, "layernorm: gamma %s for x %s", lipt_shape_str(gamma, s1, 64),
               lipt_shape_str(x, s2, 64));
    LIPT_CHECK(!beta || beta->numel == (size_t)D, "layernorm: beta %s for x %s", lipt_shape_str(beta, s1, 64),
               lipt_shape_str(x, s2, 64));
    LIPT_CHECK(eps >= 0.0f, "layernorm: eps %g < 0", (double)eps);
    const size_t rows = lipt_rows(x);
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    lipt_node *node = lipt_record(ctx, LIPT_OP_LAYERNORM, out, 3, (lipt_tensor *[]){x, gamma, beta});
    float *mean_s = NULL, *rstd_s = NULL;
    if (node) {
        mean_s = lipt_arena_alloc(&ctx->arena, rows * sizeof(float));
        rstd_s = lipt_arena_alloc(&ctx->arena, rows * sizeof(float));
        node->saved = mean_s;
        node->saved2 = rstd_s;
        node->iarg[0] = D;
        node->farg[0] = eps;
    }
    const float *X = x->data, *W = gamma ? gamma->data : NULL, *Bv = beta ? beta->data : NULL;
    float *Y = out->data;
    /* at a low precision the output is also written converted for the products that read it (the attention's
     * projections, the feed-forward's W1), each row while it is in cache */
    void *pk = lipt_lowp_arena_buf(kc, (int)rows, D);
    out->lowp = pk;
#pragma omp parallel for schedule(static) if (x->numel >= LN_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        float *yr = Y + (size_t)r * D;
        double mu, rstd;
        lipt_ln_row(X + (size_t)r * D, yr, D, W, Bv, eps, &mu, &rstd);
        if (pk) lipt_lowp_pack_span(kc, yr, (size_t)D, pk, (size_t)r * D);
        if (mean_s) {
            mean_s[r] = (float)mu;
            rstd_s[r] = (float)rstd;
        }
    }
    lipt_profile_op_end(ctx, LIPT_OP_LAYERNORM); /* it recorded before computing */
    return out;
}

void lipt_layernorm_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    int fresh; /* every row of dx is written: = on a fresh buffer */
    float *dx = lipt_grad_of_fresh(ctx, x, &fresh), *dg = lipt_grad_of(ctx, gamma), *db = lipt_grad_of(ctx, beta);
    if (!dx && !dg && !db) return;
    const int D = node->iarg[0];
    const size_t rows = lipt_rows(x);
    const float *X = x->data, *G = node->out->grad, *W = gamma ? gamma->data : NULL;
    const float *mean_s = node->saved, *rstd_s = node->saved2;
    /* gamma/beta sums over rows: per-thread double partials, reduced serially in thread order
     * (no races, and deterministic for a given thread count). */
    const int nt = omp_get_max_threads();
    double *part = NULL;
    if (dg || db) part = lipt_arena_calloc(&ctx->arena, (size_t)nt * 2 * D * sizeof(double));
#pragma omp parallel if (x->numel >= LN_PAR_MIN)
    {
        const int t = omp_get_thread_num();
        double *pg = part ? part + (size_t)t * 2 * D : NULL, *pb = pg ? pg + D : NULL;
#pragma omp for schedule(static)
        for (long r = 0; r < (long)rows; r++) {
            const float *xr = X + (size_t)r * D, *gr = G + (size_t)r * D;
            const double mu = mean_s[r], rstd = rstd_s[r];
            if (pg) {
                int j = 0;
                for (; j + LIPT_VDW <= D; j += LIPT_VDW) {
                    lipt_vdh a, b;
                    memcpy(&a, pg + j, sizeof a);
                    memcpy(&b, pb + j, sizeof b);
                    const lipt_vdh g = lipt_vdh_loadf(gr + j);
                    a += g * ((lipt_vdh_loadf(xr + j) - mu) * rstd);
                    b += g;
                    memcpy(pg + j, &a, sizeof a);
                    memcpy(pb + j, &b, sizeof b);
                }
                for (; j < D; j++) {
                    pg[j] += (double)gr[j] * ((xr[j] - mu) * rstd);
                    pb[j] += gr[j];
                }
            }
            if (dx) {
                /* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma */
                double sg, sgx;
                lipt_ln_row_grad_sums(gr, W, xr, D, mu, rstd, &sg, &sgx);
                sg /= D;
                sgx /= D;
                float *dxr = dx + (size_t)r * D;
                int j = 0;
                for (; j + LIPT_VDW <= D; j += LIPT_VDW) {
                    lipt_vdh g = lipt_vdh_loadf(gr + j);
                    if (W) g = g * lipt_vdh_loadf(W + j);
                    const lipt_vdh xh = (lipt_vdh_loadf(xr + j) - mu) * rstd;
                    const lipt_vfh upd = __builtin_convertvector(rstd * (g - sg - xh * sgx), lipt_vfh);
                    lipt_vfh_store(dxr + j, fresh ? upd : lipt_vfh_load(dxr + j) + upd);
                }
                for (; j < D; j++) {
                    double g = W ? (double)gr[j] * W[j] : gr[j];
                    double xh = (xr[j] - mu) * rstd;
                    const float upd = (float)(rstd * (g - sg - xh * sgx));
                    dxr[j] = fresh ? upd : dxr[j] + upd;
                }
            }
        }
    }
    if (part) {
        for (int j = 0; j < D; j++) {
            double sg = 0, sb = 0;
            for (int t = 0; t < nt; t++) { /* slots of idle threads stay zero */
                sg += part[(size_t)t * 2 * D + j];
                sb += part[(size_t)t * 2 * D + D + j];
            }
            if (dg) dg[j] += (float)sg;
            if (db) db[j] += (float)sb;
        }
    }
}
