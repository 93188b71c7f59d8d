/* optim: AdamW against a scalar double reference (decay / no-decay / buffers), gradient clipping, lr schedules. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/optim.h"

/* A params set with decayed and no-decay tensors, two buffers, odd and size-1 dims, and one
 * tensor big enough that the parallel path runs. */
static void make_params(lipt_params *p, int with_big) {
    lipt_params_init(p);
    lipt_param_add(p, "w1", 2, (int[]){5, 7}, 0);
    lipt_param_add(p, "b1", 1, (int[]){7}, LIPT_PARAM_NO_DECAY);
    lipt_param_add(p, "u", 1, (int[]){3}, LIPT_PARAM_BUFFER);
    lipt_param_add(p, "w2", 4, (int[]){2, 3, 4, 1}, 0);
    lipt_param_add(p, "ln", 1, (int[]){1}, LIPT_PARAM_NO_DECAY);
    if (with_big) lipt_param_add(p, "big", 2, (int[]){301, 199}, 0);
    lipt_param_add(p, "v", 2, (int[]){1, 4}, LIPT_PARAM_BUFFER);
    lipt_params_finalize(p);
}

/* Values at a typical parameter scale, so float rounding of x stays well below the updates. */
static void fill_values(lipt_params *p, lipt_rng *rng) {
    lipt_rng_fill_normal(rng, p->value, p->n_train, 0.1f);
    lipt_rng_fill_normal(rng, p->buf, p->n_buf, 1.0f);
}

/* Gradients with a spread of scales so both the m/v terms and eps matter. */
static void fill_grads(lipt_params *p, lipt_rng *rng, int step) {
    for (size_t i = 0; i < p->n_train; i++) {
        float s = (i % 5 == 0) ? 1e-3f : (i % 5 == 1 ? 10.0f : 1.0f);
        p->grad[i] = s * lipt_rng_normal(rng) * (1.0f + 0.3f * (float)step);
    }
}

typedef struct {
    lipt_adamw_config cfg;
    const char *label;
} adam_case;

/* The textbook AdamW of the brief, in double. */
static void ref_step(double *x, double *m, double *v, const float *g, size_t n, int decay, const lipt_adamw_config *c,
                     double lr, int64_t t) {
    double bc1 = 1 - pow(c->beta1, (double)t), bc2 = 1 - pow(c->beta2, (double)t);
    for (size_t i = 0; i < n; i++) {
        if (decay) x[i] -= lr * c->weight_decay * x[i];
        m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
        v[i] = c->beta2 * v[i] + (1 - c->beta2) * (double)g[i] * g[i];
        double mh = m[i] / bc1, vh = v[i] / bc2;
        x[i] -= lr * mh / (sqrt(vh) + c->eps);
    }
}

START_TEST(test_adamw_reference) {
    const adam_case cases[] = {
        {{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1}, "defaults-ish wd 0.1"},
        {{.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3, .weight_decay = 0.0}, "no decay, eps 1e-3"},
        {{.lr = 5e-3, .beta1 = 0.3, .beta2 = 0.9, .eps = 1e-4, .weight_decay = 0.5}, "beta1 < 0.5 (lerp branch)"},
    };
    double worst_x = 0, worst_mv = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int with_big = 0; with_big < 2; with_big++) {
            const lipt_adamw_config *c = &cases[ci].cfg;
            lipt_error err = {0};
            ck_assert_int_eq(lipt_adamw_config_check(c, &err), LIPT_OK);
            lipt_params p;
            make_params(&p, with_big);
            lipt_rng rng;
            lipt_rng_seed(&rng, 42 + ci);
            fill_values(&p, &rng);
            size_t n = p.n_train;
            double *x = malloc(n * sizeof *x), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
            float *x0 = malloc(n * sizeof *x0), *buf0 = malloc(p.n_buf * sizeof *buf0);
            for (size_t i = 0; i < n; i++) x[i] = x0[i] = p.value[i];
            memcpy(buf0, p.buf, p.n_buf * sizeof *buf0);
            lipt_adamw opt;
            lipt_adamw_init(&opt, c);
            const int steps = 5;
            for (int s = 0; s < steps; s++) {
                fill_grads(&p, &rng, s);
                float *g0 = malloc(n * sizeof *g0);
                memcpy(g0, p.grad, n * sizeof *g0);
                double lr = c->lr * (1.0 - 0.1 * s); /* a schedule changes lr between steps */
                lipt_adamw_step_lr(&opt, &p, lr);
                ck_assert_int_eq((int)opt.t, s + 1);
                ck_assert_msg(memcmp(g0, p.grad, n * sizeof *g0) == 0, "adamw modified the gradients");
                for (int k = 0; k < p.n; k++) {
                    if (p.flags[k] & LIPT_PARAM_BUFFER) continue;
                    size_t off = (size_t)(p.list[k]->data - p.value);
                    int decay = !(p.flags[k] & LIPT_PARAM_NO_DECAY);
                    ref_step(x + off, m + off, v + off, g0 + off, p.list[k]->numel, decay, c, lr, opt.t);
                }
                free(g0);
            }
            /* Per tensor: the parameter change against the reference change, and m, v against theirs. */
            for (int k = 0; k < p.n; k++) {
                if (p.flags[k] & LIPT_PARAM_BUFFER) continue;
                const lipt_tensor *t = p.list[k];
                size_t off = (size_t)(t->data - p.value);
                double dmax = 0, derr = 0, mmax = 0, merr = 0, vmax = 0, verr = 0;
                for (size_t i = off; i < off + t->numel; i++) {
                    double dref = x[i] - x0[i], d = (double)p.value[i] - x0[i];
                    dmax = fmax(dmax, fabs(dref));
                    derr = fmax(derr, fabs(d - dref));
                    mmax = fmax(mmax, fabs(m[i]));
                    merr = fmax(merr, fabs(p.m[i] - m[i]));
                    vmax = fmax(vmax, fabs(v[i]));
                    verr = fmax(verr, fabs(p.v[i] - v[i]));
                }
                double ex = derr / dmax, emv = fmax(merr / mmax, verr / vmax);
                ck_assert_msg(ex < 1e-4, "%s: tensor %s update rel err %.3e", cases[ci].label, t->name, ex);
                ck_assert_msg(emv < 1e-5, "%s: tensor %s m/v rel err %.3e", cases[ci].label, t->name, emv);
                worst_x = fmax(worst_x, ex);
                worst_mv = fmax(worst_mv, emv);
            }
            ck_assert_msg(memcmp(buf0, p.buf, p.n_buf * sizeof *buf0) == 0, "adamw touched a buffer");
            free(x), free(m), free(v), free(x0), free(buf0);
            lipt_params_free(&p);
        }
    printf("adamw vs double reference: worst update rel err %.3e (tol 1e-4), worst m/v rel err %.3e (tol 1e-5)\n",
           worst_x, worst_mv);
}
END_TEST

/* The first bias-corrected step moves every decay-free coordinate by about lr (|m_hat| = |g| = sqrt(v_hat)). */
START_TEST(test_adamw_first_step) {
    lipt_params p;
    make_params(&p, 0);
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    fill_values(&p, &rng);
    fill_grads(&p, &rng, 0);
    float *x0 = malloc(p.n_train * sizeof *x0);
    memcpy(x0, p.value, p.n_train * sizeof *x0);
    lipt_adamw_config c = lipt_adamw_defaults();
    c.weight_decay = 0;
    c.lr = 1e-2;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &c);
    lipt_adamw_step(&opt, &p);
    double worst = 0;
    for (size_t i = 0; i < p.n_train; i++) {
        double d = (double)x0[i] - p.value[i];
        double want = c.lr * (p.grad[i] > 0 ? 1 : -1) * fabs(p.grad[i]) / (fabs(p.grad[i]) + c.eps);
        worst = fmax(worst, fabs(d - want) / c.lr);
    }
    ck_assert_msg(worst < 1e-4, "first step rel err %.3e", worst);
    printf("adamw first step: worst |dx - lr*sign(g)|/lr %.3e (tol 1e-4)\n", worst);
    free(x0);
    lipt_params_free(&p);
}
END_TEST

/* Same inputs, 1 and 2 threads: bit-identical parameters (resume-reproducibility needs this). */
START_TEST(test_adamw_threads_deterministic) {
    float *res[2];
    for (int th = 1; th <= 2; th++) {
        lipt_set_threads(th);
        lipt_params p;
        make_params(&p, 1);
        lipt_rng rng;
        lipt_rng_seed(&rng, 9);
        fill_values(&p, &rng);
        lipt_adamw_config c = lipt_adamw_defaults();
        lipt_adamw opt;
        lipt_adamw_init(&opt, &c);
        for (int s = 0; s < 3; s++) {
            fill_grads(&p, &rng, s);
            lipt_clip_grad_norm(&p, 1.0);
            lipt_adamw_step(&opt, &p);
        }
        res[th - 1] = malloc(p.n_train * sizeof(float));
        memcpy(res[th - 1], p.value, p.n_train * sizeof(float));
        size_t n = p.n_train;
        lipt_params_free(&p);
        if (th == 2) ck_assert_msg(memcmp(res[0], res[1], n * sizeof(float)) == 0, "1 and 2 threads differ");
    }
    free(res[0]);
    free(res[1]);
    lipt_set_threads(2);
}
END_TEST

START_TEST(test_adamw_config_check) {
    lipt_error err = {0};
    lipt_adamw_config c = lipt_adamw_defaults();
    ck_assert_int_eq(lipt_adamw_config_check(&c, &err), LIPT_OK);
    c.beta1 = 1.0;
    ck_assert_int_eq(lipt_adamw_config_check(&c, &err), LIPT_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "beta1"));
    c = lipt_adamw_defaults();
    c.eps = 0;
    ck_assert_int_eq(lipt_adamw_config_check(&c, &err), LIPT_ERR_ARG);
    c = lipt_adamw_defaults();
    c.lr = NAN;
    ck_assert_int_eq(lipt_adamw_config_check(&c, &err), LIPT_ERR_ARG);
    printf("adamw config check: last message: %s\n", err.msg);
}
END_TEST

static double ref_norm(const lipt_params *p) {
    double s = 0;
    for (size_t i = 0; i < p->n_train; i++) s += (double)p->grad[i] * p->grad[i];
    return sqrt(s);
}

START_TEST(test_clip) {
    double worst = 0;
    for (int with_big = 0; with_big < 2; with_big++) {
        lipt_params p;
        make_params(&p, with_big);
        lipt_rng rng;
        lipt_rng_seed(&rng, 77 + with_big);
        fill_grads(&p, &rng, 0);
        lipt_rng_fill_normal(&rng, p.buf, p.n_buf, 100.0f); /* buffers must not count */
        size_t n = p.n_train;
        float *g0 = malloc(n * sizeof *g0);
        memcpy(g0, p.grad, n * sizeof *g0);
        double nref = ref_norm(&p);
        double got = lipt_grad_norm(&p);
        double e = fabs(got - nref) / nref;
        ck_assert_msg(e < 1e-12, "norm rel err %.3e", e);
        worst = fmax(worst, e);

        /* Above the norm: nothing changes. */
        double r = lipt_clip_grad_norm(&p, 2 * nref);
        ck_assert_msg(fabs(r - nref) / nref < 1e-12, "returned norm");
        ck_assert_msg(memcmp(g0, p.grad, n * sizeof *g0) == 0, "unclipped grads changed");

        /* Below: every gradient scaled by max/(norm+1e-6), new norm = max. */
        double max_norm = nref / 3;
        r = lipt_clip_grad_norm(&p, max_norm);
        ck_assert_msg(fabs(r - nref) / nref < 1e-12, "returned norm after clip");
        float scale = (float)(max_norm / (nref + 1e-6));
        for (size_t i = 0; i < n; i++) ck_assert_msg(p.grad[i] == g0[i] * scale, "grad %zu not scaled", i);
        double after = ref_norm(&p);
        e = fabs(after - max_norm) / max_norm;
        ck_assert_msg(e < 1e-6, "clipped norm %.9g want %.9g", after, max_norm);
        worst = fmax(worst, e);

        /* max_norm <= 0 only measures. */
        memcpy(p.grad, g0, n * sizeof *g0);
        lipt_clip_grad_norm(&p, 0);
        ck_assert_msg(memcmp(g0, p.grad, n * sizeof *g0) == 0, "max_norm 0 changed grads");

        /* Non-finite: reported, gradients left alone. */
        p.grad[n - 1] = NAN;
        memcpy(g0, p.grad, n * sizeof *g0);
        r = lipt_clip_grad_norm(&p, 1.0);
        ck_assert_msg(isnan(r), "NaN grad gave norm %g", r);
        ck_assert_msg(memcmp(g0, p.grad, n * sizeof *g0) == 0, "NaN norm changed grads");
        p.grad[n - 1] = INFINITY;
        r = lipt_clip_grad_norm(&p, 1.0);
        ck_assert_msg(isinf(r) && r > 0, "inf grad gave norm %g", r);
        ck_assert_float_eq(p.grad[0], g0[0]);
        free(g0);
        lipt_params_free(&p);
    }
    printf("clip: worst rel err (norm, clipped norm) %.3e (tol 1e-6)\n", worst);
}
END_TEST

START_TEST(test_schedules) {
    const double lr = 1e-3;
    struct { lipt_lr_schedule s; int64_t step; double want; } cases[] = {
        {{LIPT_LR_CONSTANT, lr, 0, 0, 0}, 0, lr},
        {{LIPT_LR_CONSTANT, lr, 0, 0, 0}, 12345, lr},
        {{LIPT_LR_CONSTANT, lr, 4, 0, 0}, 0, lr * 0.25},
        {{LIPT_LR_CONSTANT, lr, 4, 0, 0}, 3, lr},
        {{LIPT_LR_CONSTANT, lr, 4, 0, 0}, 100, lr},
        /* invsqrt, W = 4: (s+1)/4 up to s = 3, then sqrt(4/(s+1)) */
        {{LIPT_LR_INVSQRT, lr, 4, 0, 0}, 0, lr * 0.25},
        {{LIPT_LR_INVSQRT, lr, 4, 0, 0}, 1, lr * 0.5},
        {{LIPT_LR_INVSQRT, lr, 4, 0, 0}, 3, lr},
        {{LIPT_LR_INVSQRT, lr, 4, 0, 0}, 15, lr * 0.5},
        {{LIPT_LR_INVSQRT, lr, 4, 0, 0}, 99, lr * 0.2},
        {{LIPT_LR_INVSQRT, lr, 0, 0, 0}, 0, lr},
        {{LIPT_LR_INVSQRT, lr, 0, 0, 0}, 3, lr * 0.5},
        /* cosine, W = 10, total 110, floor lr/10: the cosine runs over steps 9..109 */
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 0, lr * 0.1},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 4, lr * 0.5},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 9, lr},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 59, lr / 10 + 0.5 * (lr - lr / 10)},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 34, lr / 10 + 0.5 * (lr - lr / 10) * (1 + cos(3.14159265358979323846 * 0.25))},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 109, lr / 10},
        {{LIPT_LR_COSINE, lr, 10, 110, lr / 10}, 5000, lr / 10},
        {{LIPT_LR_COSINE, lr, 0, 4, 0}, 1, 0.5 * lr},
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lipt_error err = {0};
        ck_assert_int_eq(lipt_lr_schedule_check(&cases[i].s, &err), LIPT_OK);
        double got = lipt_lr_at(&cases[i].s, cases[i].step);
        double e = fabs(got - cases[i].want) / cases[i].want;
        ck_assert_msg(e < 1e-12, "%s W=%lld step %lld: lr %.10g want %.10g", lipt_lr_kind_name(cases[i].s.kind),
                      (long long)cases[i].s.warmup, (long long)cases[i].step, got, cases[i].want);
        worst = fmax(worst, e);
    }
    /* Cosine decreases monotonically after warmup. */
    lipt_lr_schedule cs = {LIPT_LR_COSINE, lr, 10, 110, lr / 10};
    for (int64_t s = 10; s < 120; s++) ck_assert(lipt_lr_at(&cs, s) <= lipt_lr_at(&cs, s - 1));
    lipt_error err = {0};
    lipt_lr_schedule bad = {LIPT_LR_COSINE, lr, 10, 10, 0};
    ck_assert_int_eq(lipt_lr_schedule_check(&bad, &err), LIPT_ERR_ARG);
    bad = (lipt_lr_schedule){LIPT_LR_INVSQRT, lr, -1, 0, 0};
    ck_assert_int_eq(lipt_lr_schedule_check(&bad, &err), LIPT_ERR_ARG);
    lipt_lr_kind k;
    ck_assert_int_eq(lipt_lr_kind_parse("cosine", &k, &err), LIPT_OK);
    ck_assert_int_eq(k, LIPT_LR_COSINE);
    ck_assert_int_eq(lipt_lr_kind_parse("invsqrt", &k, &err), LIPT_OK);
    ck_assert_int_eq(k, LIPT_LR_INVSQRT);
    ck_assert_int_eq(lipt_lr_kind_parse("linear", &k, &err), LIPT_ERR_ARG);
    printf("schedules: worst rel err %.3e (tol 1e-12); bad name: %s\n", worst, err.msg);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, test_adamw_reference);
    tcase_add_test(tc, test_adamw_first_step);
    tcase_add_test(tc, test_adamw_threads_deterministic);
    tcase_add_test(tc, test_adamw_config_check);
    tcase_add_test(tc, test_clip);
    tcase_add_test(tc, test_schedules);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
