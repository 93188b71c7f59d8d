/* weight_projection: after an optimizer step, the weights of every certified branch over its budget rescaled so that
 * the branch's certified bound is at its budget, instead of the forward dividing by the bound (issue 49, lever 2).
 *
 * Which weights, by what. A branch the forward multiplies by its factor f = 1/max(1, UB/c) < 1 computes f·g(X):
 * - attention: every certified bound (clipped-dp's ‖W^O‖₂ √(Σ_h (‖W^{V,h}‖₂ (1 + 2τ_h))²), tied L2's in the ∞-, 2- and
 *   token-wise norms) is homogeneous of degree 1 in W^V and of degree 1 in W^O, and the map is linear in each of them.
 *   Scaling both by √f scales the bound by √f·√f = f (UB → c) and the map by f: the same function, now with factor
 *   1. W^Q and W^K are left alone: clipped-dp's bound holds them in 1 + 2τ_h (not homogeneous: no power of their
 *   scale divides the bound by a given amount), tied L2's in ‖W^{Q,h}‖² (degree 2, exponent e_Q with 2 e_Q + e_V +
 *   e_O = 1 would do), and in both they set the attention pattern, which a rescale would change.
 * - feed-forward: W1 by its own factor f1 = 1/max(1, σ1/c1) (c1 = 1 with ffn_full_budget, else c) and W2 by
 *   f2 = 1/max(1, σ2/c): exactly the normalised weights the forward multiplies by, so again the same function.
 * Each scale is taken (1 - 2^-20) smaller, so that the rounding of the rescaled entries and of the next certificate
 * leave the factor at 1 or within about 1e-6 of it. The forward still certifies the weights it uses and divides by
 * what it finds (factor ≈ 1): the certificate stays a proof of the weights used. Adam's moments are not touched. */
#include "lipt/model.h"

#include <math.h>

#define PROJECT_SHRINK (1.0 - 0x1p-20)

static void scale_weights(lipt_tensor *w, double s) {
    float *x = w->data;
    const size_t n = w->numel;
#pragma omp parallel for if (n >= (1u << 16)) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
}

int lipt_model_project_weights(lipt_model *m, double *min_factor) {
    const lipt_config *c = &m->cfg;
    if (min_factor) *min_factor = 1.0;
    if (!m->invertible || c->n_layers <= 0) return 0;
    lipt_ctx *ctx = &m->scratch;
    lipt_no_grad_push(ctx);
    /* the factors of the weights as they are after the step, as the next forward would compute them */
    const lipt_layer_certs *cc = lipt_model_certify(ctx, m);
    const float c1 = c->ffn_full_budget ? 1.0f : c->c;
    int n = 0;
    double lo = 1.0;
    for (int l = 0; l < c->n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        lipt_tensor *fa = cc && cc[l].attn_fac ? cc[l].attn_fac : lipt_model_attn_factor(ctx, m, l, 0, NULL);
        const double f[3] = {fa->data[0], lipt_contract_factor(ctx, cc[l].ffn_sigma[0], c1)->data[0],
                             lipt_contract_factor(ctx, cc[l].ffn_sigma[1], c->c)->data[0]};
        if (f[0] < 1) {
            const double s = sqrt(f[0] * PROJECT_SHRINK);
            scale_weights(L->wv, s);
            scale_weights(L->wo, s);
            n++;
        }
        for (int k = 1; k <= 2; k++)
            if (f[k] < 1) {
                scale_weights(k == 1 ? L->w1 : L->w2, f[k] * PROJECT_SHRINK);
                n++;
            }
        for (int k = 0; k < 3; k++) lo = f[k] < lo ? f[k] : lo;
    }
    lipt_ctx_reset(ctx);
    lipt_no_grad_pop(ctx);
    if (min_factor) *min_factor = lo;
    return n;
}
