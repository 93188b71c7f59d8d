/* Reversible training (--memory invert, lipt_reversible_chain, src/nn/reversible.c, src/invert/anderson.c): coupling
 * blocks train bit for bit as store-all (dropout on, reconstruction exact at every half-block), fixed-point blocks to
 * within the acceptance (cosine >= 0.9999, relative error <= 1e-4 per parameter tensor, dropout on), activation
 * memory that does not grow with depth, the refusals, and the accelerated solver against plain iteration. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/invert.h"
#include "lipt/model.h"
#include "lipt/train.h"

static void small(lipt_config *cfg, const char *path, const char *const *kv) {
    lipt_error err = {0};
    lipt_config_default(cfg);
    ck_assert_msg(lipt_config_load(cfg, path, &err) == LIPT_OK, "%s: %s", path, err.msg);
    const char *shrink[] = {"d_model", "32", "n_heads", "2", "d_ff", "64", "n_layers", "4", "seq_len", "24", NULL};
    for (int i = 0; shrink[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, shrink[i], shrink[i + 1], &err) == LIPT_OK, "%s: %s", shrink[i], err.msg);
    for (int i = 0; kv && kv[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, kv[i], kv[i + 1], &err) == LIPT_OK, "%s: %s", kv[i], err.msg);
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "%s: %s", path, err.msg);
}

typedef struct {
    double loss[3];
    float *slab, *grad;
    size_t n, peak;
} run_out;

/* steps AdamW steps of cfg; rev NULL: store-all, else --memory invert with rev's knobs (its statistics filled). */
static void run(const lipt_config *cfg, lipt_reversible *rev, int steps, run_out *o) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 7);
    ctx.rev = rev;
    tu_train_steps(cfg, &ctx, steps, o->loss, &o->slab, &o->grad, &o->n, NULL);
    o->peak = ctx.arena.peak;
    lipt_ctx_free(&ctx);
}

static void rev_with_arrays(lipt_reversible *rev, int cap) {
    lipt_reversible_defaults(rev);
    rev->cap = cap;
    rev->iters = calloc((size_t)cap, sizeof(int));
    rev->bound = calloc((size_t)cap, sizeof(double));
    rev->err_truth = calloc((size_t)cap, sizeof(double));
    rev->consistency = calloc((size_t)cap, sizeof(double));
}

static void rev_free(lipt_reversible *rev) {
    free(rev->iters);
    free(rev->bound);
    free(rev->err_truth);
    free(rev->consistency);
}

START_TEST(test_coupling_bit_identical) {
    static const char *const plain[] = {"coupling_grid", "16", NULL};
    static const char *const drop[] = {"coupling_grid", "16", "dropout", "0.2", NULL};
    const char *const *cases[] = {plain, drop};
    for (int k = 0; k < 2; k++) {
        lipt_config cfg;
        small(&cfg, "models/ablation/e-coupling-dp.cfg", cases[k]);
        run_out a, b;
        lipt_reversible rev;
        lipt_reversible_defaults(&rev);
        run(&cfg, NULL, 3, &a);
        run(&cfg, &rev, 3, &b);
        for (int s = 0; s < 3; s++)
            ck_assert_msg(a.loss[s] == b.loss[s], "case %d step %d: loss %.9g store, %.9g invert", k, s, a.loss[s],
                          b.loss[s]);
        ck_assert_msg(memcmp(a.grad, b.grad, sizeof(float) * a.n) == 0, "case %d: gradients differ", k);
        ck_assert_msg(memcmp(a.slab, b.slab, sizeof(float) * a.n) == 0, "case %d: weights differ", k);
        ck_assert_msg(rev.inversions == 3 * (2 * cfg.n_layers - 1) && rev.evaluations == rev.inversions,
                      "case %d: %ld inversions, %ld evaluations (one per rebuilt half-block)", k, rev.inversions,
                      rev.evaluations);
        ck_assert_msg(b.peak < a.peak, "case %d: arena peak %zu invert, %zu store", k, b.peak, a.peak);
        printf("coupling%s: loss %.6f, bit-identical; arena peak %zu B store, %zu B invert\n", k ? " + dropout" : "",
               a.loss[2], a.peak, b.peak);
        free(a.slab), free(a.grad), free(b.slab), free(b.grad);
    }
}
END_TEST

/* Every half-block's input rebuilt against the stored truth (a debug run): coupling exact, bit for bit. */
START_TEST(test_coupling_reconstruction_exact) {
    static const char *const kv[] = {"coupling_grid", "16", "dropout", "0.1", "n_layers", "6", NULL};
    lipt_config cfg;
    small(&cfg, "models/ablation/e-coupling-dp.cfg", kv);
    lipt_reversible rev;
    rev_with_arrays(&rev, 2 * cfg.n_layers);
    rev.debug_truth = 1;
    run_out a;
    run(&cfg, &rev, 1, &a);
    for (int k = 0; k < 2 * cfg.n_layers; k++) {
        ck_assert_msg(rev.err_truth[k] == 0.0, "half-block %d: rebuilt input off by %.3e", k, rev.err_truth[k]);
        ck_assert_msg(rev.consistency[k] == 0.0, "half-block %d: the rerun's output off by %.3e", k, rev.consistency[k]);
    }
    free(a.slab), free(a.grad);
    rev_free(&rev);
}
END_TEST

/* Per parameter tensor of m: cosine and relative error of b against a (flat gradients in the slab's layout). */
static void compare_tensors(const lipt_config *cfg, const float *a, const float *b, const char *label) {
    lipt_model m;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(&m, cfg, &err) == LIPT_OK, "%s", err.msg);
    double worst_cos = 1, worst_rel = 0;
    for (int i = 0; i < m.params.n; i++) {
        if (m.params.flags[i] & LIPT_PARAM_BUFFER) continue;
        const lipt_tensor *t = m.params.list[i];
        const size_t off = (size_t)(t->data - m.params.value);
        double ab = 0, aa = 0, bb = 0, dd = 0;
        for (size_t j = 0; j < t->numel; j++) {
            const double x = a[off + j], y = b[off + j];
            ab += x * y, aa += x * x, bb += y * y, dd += (x - y) * (x - y);
        }
        if (aa == 0 && bb == 0) continue;
        const double cosv = ab / sqrt(aa * bb), rel = sqrt(dd / aa);
        ck_assert_msg(cosv >= 0.9999 && rel <= 1e-4, "%s: %s cosine %.7f, relative error %.3e", label, t->name, cosv,
                      rel);
        if (cosv < worst_cos) worst_cos = cosv;
        if (rel > worst_rel) worst_rel = rel;
    }
    printf("%s: worst tensor cosine %.9f, relative error %.3e\n", label, worst_cos, worst_rel);
    lipt_model_free(&m);
}

START_TEST(test_fixed_point_gradients) {
    static const char *const l4[] = {NULL};
    static const char *const l8drop[] = {"n_layers", "8", "dropout", "0.05", NULL};
    const char *const *cases[] = {l4, l8drop};
    const char *names[] = {"fixed-point, 4 layers", "fixed-point, 8 layers, dropout 0.05"};
    for (int k = 0; k < 2; k++) {
        lipt_config cfg;
        small(&cfg, "models/ptb-contractive.cfg", cases[k]);
        lipt_reversible rev;
        rev_with_arrays(&rev, 2 * cfg.n_layers);
        run_out a, b;
        run(&cfg, NULL, 1, &a);
        run(&cfg, &rev, 1, &b);
        ck_assert_msg(fabs(a.loss[0] - b.loss[0]) == 0, "%s: loss %.9g store, %.9g invert", names[k], a.loss[0],
                      b.loss[0]);
        compare_tensors(&cfg, a.grad, b.grad, names[k]);
        ck_assert_msg(rev.unconverged == 0 && rev.worst_bound <= rev.tol, "%s: %ld unconverged, worst bound %.3e",
                      names[k], rev.unconverged, rev.worst_bound);
        printf("%s: %.2f evaluations per half-block, worst a-posteriori bound %.2e\n", names[k],
               (double)rev.evaluations / (double)rev.inversions, rev.worst_bound);
        free(a.slab), free(a.grad), free(b.slab), free(b.grad);
        rev_free(&rev);
    }
}
END_TEST

/* Activation memory does not grow with depth: what each added layer costs the arena's peak is at most 5 % of what
 * it costs store-all (measured at d_model 64, seq_len 128, batch 8 in docs/PERFORMANCE.md: 0.12 %). */
START_TEST(test_memory_flat_in_depth) {
    const char *paths[] = {"models/ptb-contractive.cfg", "models/ablation/e-coupling-dp.cfg"};
    for (int k = 0; k < 2; k++) {
        size_t peak[2][2];
        for (int d = 0; d < 2; d++) {
            const char *kv[] = {"n_layers", d ? "8" : "1", k ? "coupling_grid" : NULL, "16", NULL};
            lipt_config cfg;
            small(&cfg, paths[k], kv);
            for (int mode = 0; mode < 2; mode++) {
                lipt_reversible rev;
                lipt_reversible_defaults(&rev);
                run_out o;
                run(&cfg, mode ? &rev : NULL, 1, &o);
                peak[mode][d] = o.peak;
                free(o.slab), free(o.grad);
            }
        }
        const double per_store = ((double)peak[0][1] - (double)peak[0][0]) / 7;
        const double per_inv = ((double)peak[1][1] - (double)peak[1][0]) / 7;
        printf("%s: arena peak 1 -> 8 layers: store %zu -> %zu B, invert %zu -> %zu B: per layer %.0f B against "
               "%.0f B (%.1f %%)\n", paths[k], peak[0][0], peak[0][1], peak[1][0], peak[1][1], per_inv, per_store,
               100 * per_inv / per_store);
        ck_assert_msg(per_inv <= 0.05 * per_store, "%s: invert %.0f B per layer, store %.0f", paths[k], per_inv,
                      per_store);
    }
}
END_TEST

START_TEST(test_refusals) {
    lipt_error err = {0};
    lipt_config cfg;
    small(&cfg, "models/ptb-dp.cfg", NULL);
    ck_assert_int_eq(lipt_config_reversible_check(&cfg, &err), LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "--memory recompute") && strstr(err.msg, "attention = dp"), "%s", err.msg);
    static const char *const drop[] = {"dropout", "0.2", NULL}; /* 0.9 / 0.8 = 1.125 */
    small(&cfg, "models/ptb-contractive.cfg", drop);
    ck_assert_int_eq(lipt_config_reversible_check(&cfg, &err), LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "1.125") && strstr(err.msg, "dropout"), "%s", err.msg);
    small(&cfg, "models/ptb-contractive.cfg", NULL);
    ck_assert_int_eq(lipt_config_reversible_check(&cfg, &err), LIPT_OK);
    small(&cfg, "models/ablation/e-coupling-dp.cfg", drop); /* coupling: exact whatever the dropout */
    ck_assert_int_eq(lipt_config_reversible_check(&cfg, &err), LIPT_OK);
    static const char *const cdrop[] = {"coupling", "1", "dropout", "0.2", NULL}; /* certified coupling */
    small(&cfg, "models/ptb-contractive.cfg", cdrop);
    ck_assert_int_eq(lipt_config_reversible_check(&cfg, &err), LIPT_OK);
}
END_TEST

/* g(x) = A x per group, ‖A‖₂ = c: Anderson needs fewer evaluations than plain iteration, both meet the bound,
 * and the bound covers the true error. */
typedef struct {
    const float *A;
    int n;
} linmap;

static lipt_tensor *apply_linear(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    const linmap *L = user;
    lipt_tensor *y = lipt_tensor_like(ctx, x);
    const int G = (int)(x->numel / (size_t)L->n);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < L->n; i++) {
            double s = 0;
            for (int j = 0; j < L->n; j++) s += (double)L->A[i * L->n + j] * x->data[g * L->n + j];
            y->data[g * L->n + i] = (float)s;
        }
    return y;
}

START_TEST(test_anderson_against_plain) {
    const int n = 48, G = 3;
    const double c = 0.9;
    lipt_rng r;
    lipt_rng_seed(&r, 11);
    float *A = malloc(sizeof(float) * n * n);
    /* a symmetric A with spectrum in [-c, c] (slowest mode near c): I·c·cos of random phases, rotated */
    double *Q = malloc(sizeof(double) * n * n);
    for (int i = 0; i < n * n; i++) Q[i] = lipt_rng_normal(&r);
    for (int i = 0; i < n; i++) { /* Gram-Schmidt */
        for (int k = 0; k < i; k++) {
            double d = 0;
            for (int j = 0; j < n; j++) d += Q[i * n + j] * Q[k * n + j];
            for (int j = 0; j < n; j++) Q[i * n + j] -= d * Q[k * n + j];
        }
        double s = 0;
        for (int j = 0; j < n; j++) s += Q[i * n + j] * Q[i * n + j];
        for (int j = 0; j < n; j++) Q[i * n + j] /= sqrt(s);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += Q[k * n + i] * (c * cos(3.0 * k)) * Q[k * n + j];
            A[i * n + j] = (float)s;
        }
    linmap L = {A, n};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    lipt_tensor *x = lipt_tensor_new(&ctx, 2, (int[]){G, n}), *y;
    for (int i = 0; i < G * n; i++) x->data[i] = lipt_rng_normal(&r);
    y = lipt_add(&ctx, x, apply_linear(&ctx, x, &L));
    float *got = malloc(sizeof(float) * G * n);
    int iters[2];
    for (int m = 0; m < 2; m++) {
        const lipt_fp_accel_opts o = {1e-5, 400, 0, G, m ? 5 : 0, c, m};
        lipt_inv_info info;
        lipt_error err = {0};
        ck_assert_msg(lipt_fixed_point_invert_accel(&ctx, apply_linear, &L, y, got, &o, &info, &err) == LIPT_OK, "%s",
                      err.msg);
        double e = 0, xm = 0;
        for (int i = 0; i < G * n; i++) {
            e = fmax(e, fabs((double)got[i] - x->data[i]));
            xm = fmax(xm, fabs((double)x->data[i]));
        }
        ck_assert_msg(e / fmax(1, xm) <= info.bound * 1.01 + 1e-6, "memory %d: error %.3e above its bound %.3e",
                      o.memory, e / fmax(1, xm), info.bound);
        iters[m] = info.iters;
        printf("linear contraction c = %.1f, n = %d x %d groups: %s %d evaluations, bound %.2e, error %.2e\n", c, n, G,
               m ? "Anderson(5)" : "plain", info.iters, info.bound, e / fmax(1, xm));
    }
    ck_assert_msg(iters[1] * 2 < iters[0], "Anderson %d evaluations, plain %d", iters[1], iters[0]);
    lipt_ctx_free(&ctx);
    free(got), free(A), free(Q);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reversible");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_coupling_bit_identical);
    tcase_add_test(tc, test_coupling_reconstruction_exact);
    tcase_add_test(tc, test_fixed_point_gradients);
    tcase_add_test(tc, test_memory_flat_in_depth);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_anderson_against_plain);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
