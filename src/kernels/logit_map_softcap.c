/* The logit soft cap (Gemma 2): f(z) = p tanh(z / p), which keeps every logit in (-p, p) and leaves small ones nearly
 * unchanged; f'(z) = 1 - tanh²(z / p). A logit map (include/lipt/logit_map.h), run by the DP attention kernels
 * (src/kernels/attn_*.c), so it lives beside them. */
#include <math.h>

#include "lipt/logit_map.h"

static void softcap_row(float *z, int n, float p) {
    const float inv = 1.0f / p;
    for (int j = 0; j < n; j++) z[j] = p * tanhf(z[j] * inv);
}

static void softcap_grad_row(const float *x, float *g, int n, float p) {
    const float inv = 1.0f / p;
    for (int j = 0; j < n; j++) {
        const float t = tanhf(x[j] * inv);
        g[j] *= 1.0f - t * t;
    }
}

static int softcap_param_ok(float p) { return p > 0; }

const lipt_logit_map lipt_logit_map_softcap = {
    .name = "softcap",
    .forward_row = softcap_row,
    .grad_row = softcap_grad_row,
    .param_ok = softcap_param_ok,
    .param_rule = "a cap > 0",
};
