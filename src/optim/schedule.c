/* Learning-rate schedules: constant, warmup + inverse square root, warmup + cosine to a floor. */
#include "lipt/optim.h"

#include <math.h>
#include <string.h>

double lipt_lr_at(const lipt_lr_schedule *s, int64_t step) {
    const double k = (double)(step < 0 ? 0 : step) + 1.0; /* steps taken after this one */
    const double W = (double)s->warmup;
    switch (s->kind) {
    case LIPT_LR_CONSTANT:
        return W > 0 && k < W ? s->lr * k / W : s->lr;
    case LIPT_LR_INVSQRT: {
        const double w = W > 0 ? W : 1.0;
        return s->lr * fmin(k / w, sqrt(w / k));
    }
    case LIPT_LR_COSINE: {
        if (W > 0 && k < W) return s->lr * k / W;
        const double span = (double)s->total - W;
        if (span <= 0) return s->min_lr;
        /* progress 0 at the last warmup step, 1 at step total-1: the run ends on the floor. */
        double prog = (k - W) / span;
        if (prog > 1) prog = 1;
        if (prog < 0) prog = 0;
        return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(3.14159265358979323846 * prog));
    }
    }
    return s->lr;
}

lipt_status lipt_lr_schedule_check(const lipt_lr_schedule *s, lipt_error *err) {
    if (!isfinite(s->lr) || s->lr < 0) return lipt_fail(err, LIPT_ERR_ARG, "lr schedule: lr %g must be >= 0", s->lr);
    if (s->warmup < 0)
        return lipt_fail(err, LIPT_ERR_ARG, "lr schedule: warmup %lld must be >= 0", (long long)s->warmup);
    if (s->kind == LIPT_LR_COSINE) {
        if (s->total <= s->warmup)
            return lipt_fail(err, LIPT_ERR_ARG, "lr schedule: cosine needs total steps (%lld) > warmup (%lld)",
                             (long long)s->total, (long long)s->warmup);
        if (!isfinite(s->min_lr) || s->min_lr < 0 || s->min_lr > s->lr)
            return lipt_fail(err, LIPT_ERR_ARG, "lr schedule: cosine floor %g must be in [0, lr=%g]", s->min_lr, s->lr);
    } else if (s->kind != LIPT_LR_CONSTANT && s->kind != LIPT_LR_INVSQRT) {
        return lipt_fail(err, LIPT_ERR_ARG, "lr schedule: unknown kind %d", (int)s->kind);
    }
    return LIPT_OK;
}

lipt_status lipt_lr_kind_parse(const char *name, lipt_lr_kind *out, lipt_error *err) {
    if (!strcmp(name, "constant")) *out = LIPT_LR_CONSTANT;
    else if (!strcmp(name, "invsqrt") || !strcmp(name, "rsqrt")) *out = LIPT_LR_INVSQRT;
    else if (!strcmp(name, "cosine")) *out = LIPT_LR_COSINE;
    else
        return lipt_fail(err, LIPT_ERR_ARG, "unknown lr schedule '%s' (expected constant, invsqrt or cosine)", name);
    return LIPT_OK;
}

const char *lipt_lr_kind_name(lipt_lr_kind k) {
    switch (k) {
    case LIPT_LR_CONSTANT: return "constant";
    case LIPT_LR_INVSQRT: return "invsqrt";
    case LIPT_LR_COSINE: return "cosine";
    }
    return "unknown";
}
