/* The row kernels of kernels/rows.h: LayerNorm's, the ball projection's and the activations' row, which the ops'
 * forward passes and the decoder share. */
#include "kernels/rows.h"

#include <math.h>

#include "kernels/kernels.h"

void lipt_layernorm_row(const float *x, float *y, int D, const float *gamma, const float *beta, float eps) {
    double mu, rstd;
    lipt_ln_row(x, y, D, gamma, beta, eps, &mu, &rstd);
}

float lipt_clip_row(const float *xr, float *yr, int D, float R) {
    const double nrm = sqrt(lipt_dot_f64(xr, NULL, (size_t)D));
    if (nrm > R) {
        const float f = (float)(R / nrm);
        for (int c = 0; c < D; c++) yr[c] = xr[c] * f;
        return f;
    }
    if (yr != xr) memcpy(yr, xr, (size_t)D * sizeof(float));
    return 0.0f;
}

void lipt_act_row(lipt_act_kind act, float beta, const float *x, float *y, size_t n) {
    switch (act) {
    case LIPT_ACT_RELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
        break;
    case LIPT_ACT_ELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : expm1f(x[i]);
        break;
    case LIPT_ACT_LIPSWISH:
        lipt_vlipswish(x, y, n, beta, LIPT_LIPSWISH_SCALE);
        break;
    case LIPT_ACT_MAXMIN:
        lipt_maxmin_row(x, y, n);
        break;
    case LIPT_ACT_GELU:
    default:
        lipt_vgelu(x, y, NULL, n);
        break;
    }
}

void lipt_maxmin_row(const float *a, float *y, size_t n) {
    const lipt_vi ix = lipt_pair_swap_idx();
    for (size_t i = 0; i < n; i += LIPT_VW) {
        const size_t len = lipt_vlanes(i, n);
        const lipt_vf av = lipt_vload_n(a + i, len), sw = lipt_pair_swap(av, ix);
        lipt_vstore_n(y + i, lipt_vsel(lipt_pair_keep_mask(av, sw), av, sw), len);
    }
}
