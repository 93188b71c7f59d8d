/* layernorm over the last dim, fused forward and backward (mean and rstd saved per row). */
#include "lipt/ops.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Elements below which a single thread is faster. */
#define LN_PAR_MIN 16384

#include "kernels/kernels.h"
#include "ops/rows.h"

/* Row sums in double with LN_LANES independent partial sums, added in a fixed order at the end: the same
 * accuracy as one running double sum, but the lanes live in vector registers (a single accumulator is a serial
 * chain the compiler may not reorder). Lane l sums the elements j ≡ l (mod LN_LANES) of the row's full blocks; the
 * tail is summed first, then the lanes in order. Every loop below is written with vector types (gcc -O2 does not
 * vectorise these loops by itself), each element going through the scalar formula's operations in its order. */
#define LN_LANES 8
#define LN_NV (LN_LANES / LIPT_VDW) /* vectors per block of LN_LANES */

static inline double lanes_total(double s, const lipt_vdh *acc) {
    for (int l = 0; l < LN_LANES; l++) s += acc[l / LIPT_VDW][l % LIPT_VDW];
    return s;
}

static inline double row_sum(const float *x, int D) {
    lipt_vdh acc[LN_NV] = {{0}};
    int j = 0;
    for (; j + LN_LANES <= D; j += LN_LANES)
        for (int k = 0; k < LN_NV; k++) acc[k] += lipt_vdh_loadf(x + j + k * LIPT_VDW);
    double s = 0;
    for (; j < D; j++) s += x[j];
    return lanes_total(s, acc);
}

static inline double row_sq_dev(const float *x, int D, double mu) {
    lipt_vdh acc[LN_NV] = {{0}};
    int j = 0;
    for (; j + LN_LANES <= D; j += LN_LANES)
        for (int k = 0; k < LN_NV; k++) {
            const lipt_vdh d = lipt_vdh_loadf(x + j + k * LIPT_VDW) - mu;
            acc[k] += d * d;
        }
    double s = 0;
    for (; j < D; j++) s += (x[j] - mu) * (x[j] - mu);
    return lanes_total(s, acc);
}

/* sum_j g_j and sum_j g_j xhat_j with g = dy * gamma (gamma may be NULL), xhat = (x - mu) rstd. */
static inline void row_grad_sums(const float *gr, const float *W, const float *xr, int D, double mu, double rstd,
                                 double *sg_out, double *sgx_out) {
    lipt_vdh ag[LN_NV] = {{0}}, ax[LN_NV] = {{0}};
    int j = 0;
    for (; j + LN_LANES <= D; j += LN_LANES)
        for (int k = 0; k < LN_NV; k++) {
            const int o = j + k * LIPT_VDW;
            lipt_vdh g = lipt_vdh_loadf(gr + o);
            if (W) g = g * lipt_vdh_loadf(W + o);
            ag[k] += g;
            ax[k] += g * ((lipt_vdh_loadf(xr + o) - mu) * rstd);
        }
    double sg = 0, sgx = 0;
    for (; j < D; j++) {
        const double g = W ? (double)gr[j] * W[j] : gr[j];
        sg += g;
        sgx += g * ((xr[j] - mu) * rstd);
    }
    for (int l = 0; l < LN_LANES; l++) sg += ag[l / LIPT_VDW][l % LIPT_VDW], sgx += ax[l / LIPT_VDW][l % LIPT_VDW];
    *sg_out = sg;
    *sgx_out = sgx;
}

/* yr = (float)(((x - mu) rstd) * gamma + beta), gamma and beta optional. */
static inline void row_normalise(const float *xr, const float *W, const float *Bv, int D, double mu, double rstd,
                                 float *yr) {
    int j = 0;
    for (; j + LIPT_VDW <= D; j += LIPT_VDW) {
        lipt_vdh h = (lipt_vdh_loadf(xr + j) - mu) * rstd;
        if (W) h *= lipt_vdh_loadf(W + j);
        if (Bv) h += lipt_vdh_loadf(Bv + j);
        lipt_vdh_storef(yr + j, h);
    }
    for (; j < D; j++) {
        double h = (xr[j] - mu) * rstd;
        if (W) h *= W[j];
        if (Bv) h += Bv[j];
        yr[j] = (float)h;
    }
}

/* One row: two-pass mean and variance in double (robust to a large common offset); *mu and *rstd receive them. */
static inline void layernorm_row(const float *xr, float *yr, int D, const float *W, const float *Bv, float eps,
                                 double *mu, double *rstd) {
    const double m = row_sum(xr, D) / D, var = row_sq_dev(xr, D, m) / D;
    const double rs = 1.0 / sqrt(var + (double)eps);
    row_normalise(xr, W, Bv, D, m, rs, yr);
    *mu = m;
    *rstd = rs;
}

void lipt_layernorm_row(const float *x, float *y, int D, const float *gamma, const float *beta, float eps) {
    double mu, rstd;
    layernorm_row(x, y, D, gamma, beta, eps, &mu, &rstd);
}

/* saved: mean, saved2: rstd (float per row). iarg: 0 D. farg: 0 eps.
 * gamma and beta may be NULL (weight 1, bias 0). */
lipt_tensor *lipt_layernorm(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *gamma, lipt_tensor *beta, float eps) {
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
    void *pk = lipt_lowp_arena_buf(ctx, (int)rows, D);
    out->lowp = pk;
#pragma omp parallel for schedule(static) if (x->numel >= LN_PAR_MIN)
    for (long r = 0; r < (long)rows; r++) {
        float *yr = Y + (size_t)r * D;
        double mu, rstd;
        layernorm_row(X + (size_t)r * D, yr, D, W, Bv, eps, &mu, &rstd);
        if (pk) lipt_lowp_pack_span(ctx, yr, (size_t)D, pk, (size_t)r * D);
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
                row_grad_sums(gr, W, xr, D, mu, rstd, &sg, &sgx);
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
