/* Private: LayerNorm's row maths (issue 50: below the op, shared with the decoder), static inline so that the op's
 * loops inline them as before. */
#ifndef LIPT_KERNELS_LAYERNORM_ROW_H
#define LIPT_KERNELS_LAYERNORM_ROW_H

#include <math.h>

#include "kernels/vmath.h"

/* Row sums in double with LIPT_LN_LANES independent partial sums, added in a fixed order at the end: the same
 * accuracy as one running double sum, but the lanes live in vector registers (a single accumulator is a serial
 * chain the compiler may not reorder). Lane l sums the elements j ≡ l (mod LIPT_LN_LANES) of the row's full blocks; the
 * tail is summed first, then the lanes in order. Every loop below is written with vector types (gcc -O2 does not
 * vectorise these loops by itself), each element going through the scalar formula's operations in its order. */
#define LIPT_LN_LANES 8
#define LIPT_LN_NV (LIPT_LN_LANES / LIPT_VDW) /* vectors per block of LIPT_LN_LANES */

static inline double lipt_ln_lanes_total(double s, const lipt_vdh *acc) {
    for (int l = 0; l < LIPT_LN_LANES; l++) s += acc[l / LIPT_VDW][l % LIPT_VDW];
    return s;
}

static inline double lipt_ln_row_sum(const float *x, int D) {
    lipt_vdh acc[LIPT_LN_NV] = {{0}};
    int j = 0;
    for (; j + LIPT_LN_LANES <= D; j += LIPT_LN_LANES)
        for (int k = 0; k < LIPT_LN_NV; k++) acc[k] += lipt_vdh_loadf(x + j + k * LIPT_VDW);
    double s = 0;
    for (; j < D; j++) s += x[j];
    return lipt_ln_lanes_total(s, acc);
}

static inline double lipt_ln_row_sq_dev(const float *x, int D, double mu) {
    lipt_vdh acc[LIPT_LN_NV] = {{0}};
    int j = 0;
    for (; j + LIPT_LN_LANES <= D; j += LIPT_LN_LANES)
        for (int k = 0; k < LIPT_LN_NV; k++) {
            const lipt_vdh d = lipt_vdh_loadf(x + j + k * LIPT_VDW) - mu;
            acc[k] += d * d;
        }
    double s = 0;
    for (; j < D; j++) s += (x[j] - mu) * (x[j] - mu);
    return lipt_ln_lanes_total(s, acc);
}

/* sum_j g_j and sum_j g_j xhat_j with g = dy * gamma (gamma may be NULL), xhat = (x - mu) rstd. */
static inline void lipt_ln_row_grad_sums(const float *gr, const float *W, const float *xr, int D, double mu, double rstd,
                                 double *sg_out, double *sgx_out) {
    lipt_vdh ag[LIPT_LN_NV] = {{0}}, ax[LIPT_LN_NV] = {{0}};
    int j = 0;
    for (; j + LIPT_LN_LANES <= D; j += LIPT_LN_LANES)
        for (int k = 0; k < LIPT_LN_NV; k++) {
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
    for (int l = 0; l < LIPT_LN_LANES; l++) sg += ag[l / LIPT_VDW][l % LIPT_VDW], sgx += ax[l / LIPT_VDW][l % LIPT_VDW];
    *sg_out = sg;
    *sgx_out = sgx;
}

/* yr = (float)(((x - mu) rstd) * gamma + beta), gamma and beta optional. */
static inline void lipt_ln_row_normalise(const float *xr, const float *W, const float *Bv, int D, double mu, double rstd,
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
static inline void lipt_ln_row(const float *xr, float *yr, int D, const float *W, const float *Bv, float eps,
                                 double *mu, double *rstd) {
    const double m = lipt_ln_row_sum(xr, D) / D, var = lipt_ln_row_sq_dev(xr, D, m) / D;
    const double rs = 1.0 / sqrt(var + (double)eps);
    lipt_ln_row_normalise(xr, W, Bv, D, m, rs, yr);
    *mu = m;
    *rstd = rs;
}

#endif
