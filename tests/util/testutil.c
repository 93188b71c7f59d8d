/* Shared test helpers: see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

lipt_tensor *tu_tensor(lipt_rng *rng, int ndim, const int *shape, float std, int requires_grad) {
    lipt_tensor *t = calloc(1, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(int));
    t->numel = lipt_shape_numel(ndim, shape);
    t->data = calloc(t->numel ? t->numel : 1, sizeof(float));
    if (rng) lipt_rng_fill_normal(rng, t->data, t->numel, std);
    t->requires_grad = requires_grad;
    return t;
}

void tu_free(lipt_tensor *t) {
    if (!t) return;
    free(t->data);
    free(t);
}

static double eval_loss(lipt_ctx *ctx, tu_build_fn build, void *user, lipt_tensor **in, const float *r, size_t *nout,
                        uint64_t rng_seed) {
    lipt_ctx_reset(ctx);
    lipt_rng_seed(&ctx->rng, rng_seed);
    lipt_no_grad_push(ctx);
    lipt_tensor *out = build(ctx, in, user);
    lipt_no_grad_pop(ctx);
    double L = 0;
    for (size_t i = 0; i < out->numel; i++) L += (double)r[i] * out->data[i];
    if (nout) *nout = out->numel;
    return L;
}

double tu_gradcheck(const char *label, tu_build_fn build, void *user, lipt_tensor **in, int n_in,
                    const tu_gradcheck_opts *opts) {
    tu_gradcheck_opts o = {6, 1e-3, 1e-2, 1234};
    if (opts) {
        if (opts->n_dirs) o.n_dirs = opts->n_dirs;
        if (opts->eps > 0) o.eps = opts->eps;
        if (opts->tol > 0) o.tol = opts->tol;
        if (opts->seed) o.seed = opts->seed;
    }
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    lipt_rng rng;
    lipt_rng_seed(&rng, o.seed);
    const uint64_t graph_seed = o.seed * 7919 + 17;

    /* one forward to learn the output size */
    lipt_rng_seed(&ctx.rng, graph_seed);
    lipt_no_grad_push(&ctx);
    size_t nout = build(&ctx, in, user)->numel;
    lipt_no_grad_pop(&ctx);
    float *r = malloc(nout * sizeof(float));
    lipt_rng_fill_normal(&rng, r, nout, 1.0f);

    /* analytic gradient */
    float **g = calloc((size_t)n_in, sizeof(float *));
    double gnorm = 0;
    lipt_ctx_reset(&ctx);
    lipt_rng_seed(&ctx.rng, graph_seed);
    for (int i = 0; i < n_in; i++) in[i]->grad = NULL;
    lipt_tensor *out = build(&ctx, in, user);
    ck_assert_msg(out->requires_grad, "%s: output does not require grad", label);
    lipt_backward_seeded(&ctx, out, r);
    for (int i = 0; i < n_in; i++) {
        if (!in[i]->requires_grad) continue;
        g[i] = calloc(in[i]->numel, sizeof(float));
        if (in[i]->grad) memcpy(g[i], in[i]->grad, in[i]->numel * sizeof(float));
        for (size_t j = 0; j < in[i]->numel; j++) gnorm += (double)g[i][j] * g[i][j];
        in[i]->grad = NULL; /* arena memory, gone at the next reset */
    }
    gnorm = sqrt(gnorm);

    double worst = 0;
    for (int d = 0; d < o.n_dirs; d++) {
        float **u = calloc((size_t)n_in, sizeof(float *));
        float **x0 = calloc((size_t)n_in, sizeof(float *));
        double an = 0;
        for (int i = 0; i < n_in; i++) {
            if (!in[i]->requires_grad) continue;
            size_t n = in[i]->numel;
            u[i] = malloc(n * sizeof(float));
            x0[i] = malloc(n * sizeof(float));
            memcpy(x0[i], in[i]->data, n * sizeof(float));
            lipt_rng_fill_normal(&rng, u[i], n, 1.0f);
            for (size_t j = 0; j < n; j++) an += (double)g[i][j] * u[i][j];
        }
        double Lp, Lm;
        for (int i = 0; i < n_in; i++)
            if (u[i]) for (size_t j = 0; j < in[i]->numel; j++) in[i]->data[j] = (float)(x0[i][j] + o.eps * u[i][j]);
        Lp = eval_loss(&ctx, build, user, in, r, NULL, graph_seed);
        for (int i = 0; i < n_in; i++)
            if (u[i]) for (size_t j = 0; j < in[i]->numel; j++) in[i]->data[j] = (float)(x0[i][j] - o.eps * u[i][j]);
        Lm = eval_loss(&ctx, build, user, in, r, NULL, graph_seed);
        for (int i = 0; i < n_in; i++)
            if (u[i]) memcpy(in[i]->data, x0[i], in[i]->numel * sizeof(float));
        double fd = (Lp - Lm) / (2 * o.eps);
        double denom = fmax(fmax(fabs(an), fabs(fd)), 0.05 * gnorm);
        if (denom == 0) denom = 1;
        double rel = fabs(an - fd) / denom;
        if (rel > worst) worst = rel;
        for (int i = 0; i < n_in; i++) { free(u[i]); free(x0[i]); }
        free(u);
        free(x0);
    }
    printf("gradcheck %-40s worst rel err %.3e (tol %.0e, %d dirs, eps %.0e)\n", label, worst, o.tol, o.n_dirs, o.eps);
    fflush(stdout);
    for (int i = 0; i < n_in; i++) free(g[i]);
    free(g);
    free(r);
    lipt_ctx_free(&ctx);
    ck_assert_msg(worst <= o.tol, "%s: gradient rel err %.3e > tol %.0e", label, worst, o.tol);
    return worst;
}

double tu_max_rel_err(const float *a, const double *ref, size_t n, double floor) {
    double scale = floor, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        if (!(e <= worst)) worst = e; /* NaN propagates as worst */
    }
    return worst / scale;
}

double tu_max_rel_err_f(const float *a, const float *ref, size_t n, double floor) {
    double scale = floor, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        if (!(e <= worst)) worst = e;
    }
    return worst / scale;
}

/* The float's position on a line where consecutive floats are 1 apart (-0 and +0 both at 0). */
static int64_t ulp_line(float x) {
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

int64_t tu_max_ulps(const float *a, const float *b, size_t n) {
    int64_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INT64_MAX;
        const int64_t d = ulp_line(a[i]) - ulp_line(b[i]);
        if (d > worst || -d > worst) worst = d > 0 ? d : -d;
    }
    return worst;
}

const char *tu_shared_data(const char *rel, char *buf, size_t len) {
    const char *roots[3] = {getenv("LIPT_SHARED_DATA"), NULL, NULL};
    char alt[1024];
    const char *src = getenv("LIPT_SOURCE_DIR");
    snprintf(alt, sizeof alt, "%s/../shared/data", src ? src : ".");
    roots[1] = alt;
    roots[2] = "../shared/data";
    for (int i = 0; i < 3; i++) {
        if (!roots[i]) continue;
        snprintf(buf, len, "%s/%s", roots[i], rel);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

int tu_quick(void) {
    const char *q = getenv("LIPT_TEST_QUICK");
    if (!q || !*q || strcmp(q, "0") == 0) return 1;
    char *end;
    const long n = strtol(q, &end, 10);
    return *end == '\0' && n > 1 && n <= 64 ? (int)n : 2;
}

int tu_skip(int idx) { return idx % tu_quick() != 0; }

int tu_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void tu_train_steps(const lipt_config *cfg, lipt_ctx *ctx, int steps, double *loss, float **slab, float **grad,
                    size_t *n, double *wall) {
    lipt_error err = {0};
    lipt_model m;
    ck_assert_msg(lipt_model_init(&m, cfg, &err) == LIPT_OK, "model init: %s", err.msg);
    lipt_adamw_config acfg = lipt_adamw_defaults();
    acfg.lr = 3e-3;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &acfg);
    const int B = 2, T = cfg->seq_len, V = cfg->vocab_size;
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    lipt_rng r;
    lipt_rng_seed(&r, 5);
    if (wall) *wall = 0;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B * T; i++) {
            in[i] = (int)lipt_rng_below(&r, (uint64_t)V);
            tg[i] = (int)lipt_rng_below(&r, (uint64_t)V);
        }
        const lipt_step_opts so = {acfg.lr, 1.0, cfg->power_iters, NULL, 0, 0, NULL, 0};
        lipt_step_result sr;
        const double t0 = lipt_profile_now();
        ck_assert_msg(lipt_train_step(ctx, &m, &opt, in, tg, B, T, &so, &sr, &err) == LIPT_OK, "step: %s", err.msg);
        if (wall) *wall += lipt_profile_now() - t0;
        loss[s] = sr.loss;
    }
    *n = m.params.n_train;
    *slab = malloc(sizeof(float) * *n);
    memcpy(*slab, m.params.value, sizeof(float) * *n);
    if (grad) {
        *grad = malloc(sizeof(float) * *n);
        memcpy(*grad, m.params.grad, sizeof(float) * *n);
    }
    free(in);
    free(tg);
    lipt_model_free(&m);
}
