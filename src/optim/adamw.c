/* AdamW with decoupled weight decay, following torch.optim.AdamW's single-tensor CPU path. */
#include "lipt/optim.h"

#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"

lipt_adamw_config lipt_adamw_defaults(void) {
    return (lipt_adamw_config){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2};
}

lipt_status lipt_adamw_config_check(const lipt_adamw_config *c, lipt_error *err) {
    if (!isfinite(c->lr) || c->lr < 0) return lipt_fail(err, LIPT_ERR_ARG, "adamw: learning rate %g must be >= 0", c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return lipt_fail(err, LIPT_ERR_ARG, "adamw: beta1 %g must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return lipt_fail(err, LIPT_ERR_ARG, "adamw: beta2 %g must be in [0, 1)", c->beta2);
    if (!isfinite(c->eps) || c->eps <= 0) return lipt_fail(err, LIPT_ERR_ARG, "adamw: eps %g must be > 0", c->eps);
    /* the step runs in float32: an eps that rounds to 0 there divides by zero where a moment is 0, and the run would
     * "diverge" for a reason the message could not name */
    if ((float)c->eps <= 0.0f)
        return lipt_fail(err, LIPT_ERR_ARG, "adamw: eps %g becomes 0 as a float32 (the optimizer's arithmetic): give "
                         "at least 1.5e-45, or better a normal float32 such as 1e-30", c->eps);
    if (!isfinite(c->weight_decay) || c->weight_decay < 0)
        return lipt_fail(err, LIPT_ERR_ARG, "adamw: weight decay %g must be >= 0", c->weight_decay);
    return LIPT_OK;
}

void lipt_adamw_init(lipt_adamw *opt, const lipt_adamw_config *cfg) {
    opt->cfg = *cfg;
    opt->t = 0;
}

/* Below this many floats a parallel region costs more than it saves. */
#define ADAMW_PAR_MIN 32768

void lipt_adamw_step_lr(lipt_adamw *opt, lipt_params *p, double lr) { lipt_adamw_step_skip(opt, p, lr, NULL); }

void lipt_adamw_step_skip(lipt_adamw *opt, lipt_params *p, double lr, const unsigned char *skip) {
    LIPT_CHECK(p->finalized, "adamw: parameters not finalized");
    const lipt_adamw_config *c = &opt->cfg;
    opt->t++;
    const double t = (double)opt->t;
    /* Scalars as PyTorch derives them: in double, then rounded to float when they meet a float tensor. */
    const double bc1 = 1.0 - pow(c->beta1, t);
    const double bc2 = 1.0 - pow(c->beta2, t);
    const float decay_f = (float)(1.0 - lr * c->weight_decay);
    const int do_decay = c->weight_decay != 0.0;
    const float w1 = (float)(1.0 - c->beta1);          /* lerp weight */
    const int w1_small = fabsf(w1) < 0.5f;               /* torch's is_lerp_weight_small */
    const float b2 = (float)c->beta2;
    const float omb2 = (float)(1.0 - c->beta2);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float eps = (float)c->eps;
    const float neg_step = (float)(-(lr / bc1));
    float *restrict val = p->value, *restrict grad = p->grad, *restrict m = p->m, *restrict v = p->v;

#pragma omp parallel if (p->n_train >= ADAMW_PAR_MIN)
    for (int k = 0; k < p->n; k++) {
        if ((p->flags[k] & LIPT_PARAM_BUFFER) || (skip && skip[k])) continue;
        const lipt_tensor *tk = p->list[k];
        const long lo = (long)(tk->data - val), n = (long)tk->numel, nv = (n + LIPT_VW - 1) / LIPT_VW;
        const int decay = do_decay && !(p->flags[k] & LIPT_PARAM_NO_DECAY);
        /* LIPT_VW elements at a time, each lane the scalar formula's operations in its order (the same bits).
         * nowait: elements are independent, so threads may run ahead into the next tensor. */
#pragma omp for schedule(static) nowait
        for (long b = 0; b < nv; b++) {
            const long i = lo + b * LIPT_VW;
            const size_t len = lipt_vlanes((size_t)(b * LIPT_VW), (size_t)n);
            const lipt_vf g = lipt_vload_n(grad + i, len);
            lipt_vf x = lipt_vload_n(val + i, len), mi = lipt_vload_n(m + i, len), vi = lipt_vload_n(v + i, len);
            if (decay) x = x * decay_f;
            mi = w1_small ? mi + w1 * (g - mi) : g - (g - mi) * (1.0f - w1);
            vi = vi * b2;
            vi = vi + omb2 * g * g;
            const lipt_vf denom = lipt_vsqrt(vi) / bc2_sqrt + eps;
            x = x + neg_step * mi / denom;
            lipt_vstore_n(m + i, mi, len);
            lipt_vstore_n(v + i, vi, len);
            lipt_vstore_n(val + i, x, len);
        }
    }
}
