/* Muon: momentum whose update direction is orthogonalised by a Newton–Schulz iteration, for the hidden layers' weight
 * matrices (include/lipt/optim.h); the other tensors stay with AdamW.
 *
 * The certificate stays a proof. Muon, like AdamW, changes the stored, unconstrained weights; the constraint is applied
 * to whatever they are in every forward pass: the contractive feed-forward multiplies W by 1 / max(1, sigma_ub(W) / c)
 * with sigma_ub a certified upper bound (Gram iteration) of the current W (src/nn/forward.c, feed_forward), and the
 * contractive attentions scale their output by a factor from a bound computed from the current weights
 * (lipt_model_certify, lipt_contract_factor). The power-iteration vectors only steer the gradient, never the bound. So
 * no property of the update is needed for the bound to hold, and lipt_model_refresh_after_step runs after a Muon step
 * as after an AdamW one. */
#include "lipt/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* The quintic's coefficients: a large slope at 0 (small singular values grow fast), the iteration's fixed points
 * spread around 1 (singular values end in about [0.7, 1.2], not exactly 1: speed over precision, as Muon chooses). */
#define NS_A 3.4445f
#define NS_B (-4.7750f)
#define NS_C 2.0315f
/* an orthogonal R x C matrix (singular values 1) has RMS 1/sqrt(max(R, C)): this times sqrt(max) gives RMS 0.2 */
#define MUON_RMS 0.2
/* Below this many floats a parallel region costs more than it saves. */
#define MUON_PAR_MIN 32768

lipt_muon_config lipt_muon_defaults(void) {
    return (lipt_muon_config){.momentum = 0.95, .nesterov = 1, .ns_steps = 5, .weight_decay = 0.0};
}

lipt_status lipt_muon_config_check(const lipt_muon_config *c, lipt_error *err) {
    if (!(c->momentum >= 0 && c->momentum < 1))
        return lipt_fail(err, LIPT_ERR_ARG, "muon: momentum %g must be in [0, 1)", c->momentum);
    if (c->ns_steps < 1 || c->ns_steps > 100)
        return lipt_fail(err, LIPT_ERR_ARG, "muon: Newton-Schulz steps %d must be in [1, 100]", c->ns_steps);
    if (!isfinite(c->weight_decay) || c->weight_decay < 0)
        return lipt_fail(err, LIPT_ERR_ARG, "muon: weight decay %g must be >= 0", c->weight_decay);
    return LIPT_OK;
}

int lipt_muon_takes(const lipt_tensor *t, int flags) {
    return !(flags & (LIPT_PARAM_BUFFER | LIPT_PARAM_NO_DECAY)) && t->ndim == 2 && t->shape[0] > 0 &&
           t->shape[1] > 0 && t->name && strncmp(t->name, "layers.", 7) == 0;
}

size_t lipt_muon_work_floats(int R, int C) {
    const size_t r = (size_t)(R < C ? R : C), n = (size_t)R * (size_t)C;
    return 2 * n + 2 * r * r; /* X, Y [R, C]; A, B [r, r] */
}

/* work's X holds D [R, C]: normalised in place, then the iterations; returns the buffer that holds the result. */
static float *newton_schulz(int R, int C, int steps, float *work) {
    const size_t n = (size_t)R * (size_t)C;
    const int wide = R <= C, r = wide ? R : C;
    float *X = work, *Y = X + n, *A = Y + n, *B = A + (size_t)r * r;
    double ss = 0; /* serial: the same sum on any thread count */
    for (size_t i = 0; i < n; i++) ss += (double)X[i] * X[i];
    const float inv = (float)(1.0 / (sqrt(ss) + 1e-7));
#pragma omp parallel for schedule(static) if (n >= MUON_PAR_MIN)
    for (size_t i = 0; i < n; i++) X[i] *= inv;
    for (int it = 0; it < steps; it++) {
        /* A: the Gram matrix on the short side, X Xᵀ (wide) or Xᵀ X (tall, the transposed problem without a copy) */
        if (wide) lipt_gemm(0, 1, r, r, C, 1.0f, X, C, X, C, 0.0f, A, r);
        else lipt_gemm(1, 0, r, r, R, 1.0f, X, C, X, C, 0.0f, A, r);
        /* B = b A + c A A */
        memcpy(B, A, (size_t)r * r * sizeof *B);
        lipt_gemm(0, 0, r, r, r, NS_C, A, r, A, r, NS_B, B, r);
        /* Y = a X + B X (wide) or a X + X B (tall; B is symmetric) */
        memcpy(Y, X, n * sizeof *Y);
        if (wide) lipt_gemm(0, 0, R, C, r, 1.0f, B, r, X, C, NS_A, Y, C);
        else lipt_gemm(0, 0, R, C, r, 1.0f, X, C, B, r, NS_A, Y, C);
        float *s = X;
        X = Y;
        Y = s;
    }
    if (X != work) memcpy(work, X, n * sizeof *X); /* the result always at the start of work */
    return work;
}

const float *lipt_muon_orthogonalise(const float *D, int R, int C, int steps, float *work) {
    memcpy(work, D, (size_t)R * (size_t)C * sizeof *work);
    return newton_schulz(R, C, steps, work);
}

lipt_status lipt_muon_init(lipt_muon *o, const lipt_muon_config *cfg, const lipt_params *p, lipt_error *err) {
    memset(o, 0, sizeof *o);
    LIPT_CHECK(p->finalized, "muon: parameters not finalized");
    lipt_status st = lipt_muon_config_check(cfg, err);
    if (st != LIPT_OK) return st;
    size_t work = 0;
    int n = 0;
    for (int k = 0; k < p->n; k++)
        if (lipt_muon_takes(p->list[k], p->flags[k])) {
            const size_t w = lipt_muon_work_floats(p->list[k]->shape[0], p->list[k]->shape[1]);
            if (w > work) work = w;
            n++;
        }
    if (n == 0)
        return lipt_fail(err, LIPT_ERR_ARG, "muon: the model has no hidden-layer weight matrix to orthogonalise "
                         "(no trainable 2-D layers.* tensor): use --optimizer adamw");
    o->cfg = *cfg;
    o->n_mat = n;
    o->mat = lipt_xmalloc((size_t)n * sizeof *o->mat);
    o->owned = lipt_xcalloc((size_t)p->n, 1);
    o->work = lipt_xaligned(work * sizeof *o->work);
    memset(o->work, 0, work * sizeof *o->work);
    n = 0;
    for (int k = 0; k < p->n; k++)
        if (lipt_muon_takes(p->list[k], p->flags[k])) {
            o->mat[n++] = k;
            o->owned[k] = 1;
        }
    return LIPT_OK;
}

void lipt_muon_free(lipt_muon *o) {
    if (!o) return;
    free(o->mat);
    free(o->owned);
    free(o->work);
    memset(o, 0, sizeof *o);
}

/* The momentum update and the direction, element by element (each independent: the same bits on any thread count). */
static void momentum(float *restrict m, const float *restrict g, float *restrict d, size_t n, float mu, int nesterov) {
#pragma omp parallel for schedule(static) if (n >= MUON_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        m[i] = mu * m[i] + g[i];
        d[i] = nesterov ? g[i] + mu * m[i] : m[i];
    }
}

void lipt_muon_step(lipt_muon *o, lipt_params *p, double lr) {
    LIPT_CHECK(p->finalized, "muon: parameters not finalized");
    const float mu = (float)o->cfg.momentum;
    const int decay = o->cfg.weight_decay != 0.0;
    const float decay_f = (float)(1.0 - lr * o->cfg.weight_decay);
    for (int j = 0; j < o->n_mat; j++) {
        const int k = o->mat[j];
        lipt_tensor *t = p->list[k];
        const int R = t->shape[0], C = t->shape[1];
        const size_t n = t->numel, off = (size_t)(t->data - p->value);
        float *restrict w = t->data;
        momentum(p->m + off, p->grad + off, o->work, n, mu, o->cfg.nesterov);
        const float *restrict u = newton_schulz(R, C, o->cfg.ns_steps, o->work);
        const float neg_step = (float)(-lr * MUON_RMS * sqrt((double)(R > C ? R : C)));
#pragma omp parallel for schedule(static) if (n >= MUON_PAR_MIN)
        for (size_t i = 0; i < n; i++) w[i] = (decay ? w[i] * decay_f : w[i]) + neg_step * u[i];
    }
}
