/* lipt_train_step: the one training step every driver runs (include/lipt/train.h). */
#include "lipt/train.h"

#include <math.h>

lipt_status lipt_train_step(lipt_ctx *ctx, lipt_model *m, lipt_adamw *opt, const int *in, const int *tg, int B, int T,
                            const lipt_step_opts *o, lipt_step_result *r, lipt_error *err) {
    r->loss = r->grad_norm = NAN;
    r->flag_any = o->flag != 0;
    ctx->training = 1;
    lipt_profile *p = ctx->profile; /* lipt bench --profile: the phases' times */
    double t = p ? lipt_profile_now() : 0;
    lipt_profile_mark(p);
#define PHASE(k)                                                                                                    \
    do {                                                                                                            \
        if (p) {                                                                                                    \
            const double now = lipt_profile_now();                                                                  \
            p->phase[k] += now - t;                                                                                 \
            t = now;                                                                                                \
        }                                                                                                           \
    } while (0)
    lipt_tensor *loss = NULL;
    lipt_status st = lipt_model_forward(ctx, m, in, B, T, tg, NULL, &loss, err);
    PHASE(LIPT_PHASE_FORWARD);
    if (st != LIPT_OK) {
        lipt_ctx_reset(ctx);
        return st;
    }
    const int K = o->dist ? o->dist->size : 1;
    /* ranks agree on the mean loss and on the flag, so that they finish this step and stop together */
    double agree[2] = {loss->data[0], o->flag ? 1.0 : 0.0};
    if (o->dist && (st = lipt_dist_sum_f64(o->dist, agree, 2, err)) != LIPT_OK) {
        lipt_ctx_reset(ctx);
        return st;
    }
    r->loss = agree[0] / K;
    r->flag_any = K > 1 ? agree[1] > 0 : o->flag != 0;
    if (!isfinite(r->loss)) {
        lipt_ctx_reset(ctx);
        return lipt_fail(err, LIPT_ERR_NUMERIC, "the loss is %g", r->loss);
    }
    lipt_params_zero_grad(&m->params);
    if (ctx->rev) ctx->rev->status = LIPT_OK;
    lipt_backward(ctx, loss);
    if (ctx->rev && ctx->rev->status != LIPT_OK) { /* a block input could not be rebuilt: no update from it */
        lipt_ctx_reset(ctx);
        return lipt_fail(err, ctx->rev->status, "--memory invert: %.400s (train with --memory recompute, or raise "
                         "--invert-tol)", ctx->rev->err.msg);
    }
    /* the gradient of the global batch: the mean of the ranks' (no-op on one rank) */
    if (o->dist &&
        (st = lipt_dist_mean_f32(o->dist, m->params.grad, m->params.n_train, o->bucket ? o->bucket : (size_t)4 << 20,
                                 err)) != LIPT_OK) {
        lipt_ctx_reset(ctx);
        return st;
    }
    PHASE(LIPT_PHASE_BACKWARD);
    r->grad_norm = lipt_clip_grad_norm(&m->params, o->clip);
    lipt_ctx_reset(ctx);
    PHASE(LIPT_PHASE_CLIP);
    if (!isfinite(r->grad_norm)) return lipt_fail(err, LIPT_ERR_NUMERIC, "the gradient norm is %g", r->grad_norm);
    if (o->muon) lipt_muon_step(o->muon, &m->params, o->muon_lr);
    lipt_adamw_step_skip(opt, &m->params, o->lr, o->muon ? o->muon->owned : NULL);
    PHASE(LIPT_PHASE_OPTIMIZER);
    /* weights back to their Lipschitz budget (the same function): before the power rounds, which then see them */
    if (m->cfg.weight_projection) lipt_model_project_weights(m, NULL);
    lipt_model_refresh_after_step(m, o->power_iters);
    PHASE(LIPT_PHASE_REFRESH);
#undef PHASE
    if (p) p->steps++;
    return LIPT_OK;
}
