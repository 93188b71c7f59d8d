/* weight_projection: after an optimizer step, the weights of every certified branch over its budget rescaled so that
 * the branch's certified bound is at its budget, instead of the forward dividing by the bound (issue 49, lever 2).
 *
 * Which weights, by what. A branch the forward multiplies by its factor f = 1/max(1, UB/c) < 1 computes f·g(X). For a
 * bound homogeneous of degree a_i in weight W_i, scaling each W_i by s_i scales it by Π s_i^{a_i}; the rescale needs
 * that product to be f.
 * - weight_projection = 1 (the same function): every certified attention bound (clipped-dp's
 *   ‖W^O‖₂ √(Σ_h (‖W^{V,h}‖₂ (1 + 2τ_h))²), τ_h = R²‖W^{Q,h}‖₂‖W^{K,h}‖₂/√d; tied L2's in the ∞-, 2- and token-wise
 *   norms, ∝ ‖W^Q‖² ‖W^V‖ ‖W^O‖) is of degree 1 in W^V and of degree 1 in W^O, and the map is linear in each: W^V and
 *   W^O by √f each give the bound times f and the map times f, the factor's own effect. W^Q and W^K are left alone,
 *   so the bound no longer pulls on them (the factor is 1, its gradient 0): they may grow, τ with them, and then
 *   W^V, W^O shrink to pay for it.
 * - weight_projection = 2 (one scale s for W^Q, W^K, W^V and W^O; the attention pattern softens): tied L2's bound is
 *   of degree 2 + 1 + 1 = 4 in them together, so s = f^{1/4}; clipped-dp's is s² ‖W^O‖ √(Σ_h (‖W^{V,h}‖(1 + 2 s² τ_h))²)
 *   at scale s, not homogeneous (between degree 2 for τ ≪ 1 and 4 for τ ≫ 1): s is solved by bisection in
 *   [√f, f^{1/4}] from the certified per-head norms, on the ratio to the bound at s = 1.
 * - feed-forward (both): W1 by its own factor f1 = 1/max(1, σ1/c1) (c1 = 1 with ffn_full_budget, else c) and W2 by
 *   f2 = 1/max(1, σ2/c): exactly the normalised weights the forward multiplies by, so the same function.
 * Each target is taken (1 - 2^-20) smaller, so that the rounding of the rescaled entries and of the next certificate
 * leave the factor at 1 or within about 1e-6 of it. The forward still certifies the weights it uses and divides by
 * what it finds (factor ≈ 1): the certificate stays a proof of the weights used. Adam's moments are not touched. */
#include "lipt/bounds.h"
#include "lipt/model.h"

#include <math.h>

#define PROJECT_SHRINK (1.0 - 0x1p-20)

static void scale_weights(lipt_tensor *w, double s) {
    if (!w) return;
    float *x = w->data;
    const size_t n = w->numel;
#pragma omp parallel for if (n >= (1u << 16)) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
}

/* clipped-dp, weight_projection = 2: the scale s of W^Q, W^K, W^V, W^O that multiplies the layer's bound by f, from
 * its certified per-head norms (the bound's ratio at s to that at 1; s² ≥ ratio ≥ s⁴ for s ≤ 1) */
static double clipped_common_scale(lipt_ctx *ctx, const lipt_model *m, lipt_layer *L, double f) {
    const lipt_config *c = &m->cfg;
    lipt_bound_vectors v;
    float *p[8];
    for (int i = 0; i < 8; i++) p[i] = L->bv[i] ? L->bv[i]->data : NULL;
    v.uq = p[0], v.vq = p[1], v.uv = p[2], v.vv = p[3], v.uo = p[4], v.vo = p[5], v.uk = p[6], v.vk = p[7];
    v.gram_iters = lipt_config_gram_arg(c);
    lipt_spectral_req req[LIPT_ATTN_BOUND_REQ_MAX];
    lipt_tensor *sig[LIPT_ATTN_BOUND_REQ_MAX];
    const int n = lipt_attn_bound_requests(c, L->wq, L->wk, L->wv, L->wo, &v, req);
    LIPT_CHECK(n == 4, "weight_projection: clipped-dp needs 4 certified norms, got %d", n);
    lipt_spectral_norm_ub_batch(ctx, n, req, sig);
    const int H = c->n_heads;
    const double R = lipt_config_clip_radius(c), coef = 2.0 * R * R / sqrt((double)(c->d_model / H));
    double lo = sqrt(f), hi = pow(f, 0.25), ub1 = 0;
    for (int h = 0; h < H; h++) {
        const double lh = sig[2]->data[h] * (1 + coef * sig[0]->data[h] * sig[1]->data[h]);
        ub1 += lh * lh;
    }
    for (int it = 0; it < 100 && ub1 > 0; it++) {
        const double s = 0.5 * (lo + hi);
        double u = 0;
        for (int h = 0; h < H; h++) {
            const double lh = sig[2]->data[h] * (1 + coef * s * s * sig[0]->data[h] * sig[1]->data[h]);
            u += lh * lh;
        }
        if (s * s * sqrt(u / ub1) <= f) lo = s;
        else hi = s;
    }
    return lo; /* the ratio at lo is <= f */
}

/* The attention of layer L, its factor f < 1, rescaled as weight_projection says. */
static void project_attention(lipt_ctx *ctx, const lipt_model *m, lipt_layer *L, double f) {
    const double t = f * PROJECT_SHRINK;
    if (m->cfg.weight_projection == 1) {
        scale_weights(L->wv, sqrt(t));
        scale_weights(L->wo, sqrt(t));
        return;
    }
    const int clipped = lipt_attn_info_of(m->cfg.attention)->bound == LIPT_ATTN_BOUND_CLIPPED_DP;
    const double s = clipped ? clipped_common_scale(ctx, m, L, t) : pow(t, 0.25);
    lipt_tensor *w[] = {L->wq, L->wk, L->wv, L->wo}; /* wk: clipped-dp only (NULL for tied L2) */
    for (int k = 0; k < 4; k++) scale_weights(w[k], s);
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
            project_attention(ctx, m, L, f[0]);
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
