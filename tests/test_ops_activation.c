/* activations: ReLU, ELU, exact GELU and LipSwish (with a learnable beta): forward against double references
 * (and published PyTorch GELU values), backward against finite differences, accumulation (+=) into existing
 * gradients, the long beta-gradient reduction, and x == beta aliasing. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-2
#define PI_D 3.14159265358979323846

typedef enum { A_RELU, A_ELU, A_GELU, A_LIPSWISH, A_COUNT } act_id;
static const char *const act_names[A_COUNT] = {"relu", "elu", "gelu", "lipswish"};

static double ref_sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

static double ref_act(act_id id, double x, double beta) {
    switch (id) {
    case A_RELU: return x > 0 ? x : 0;
    case A_ELU: return x > 0 ? x : exp(x) - 1;
    case A_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return x * ref_sigmoid(beta * x) / 1.1;
    }
}

typedef struct { act_id id; } act_args;

/* in[0] = x, in[1] = beta (lipswish only) */
static lipt_tensor *build_act(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    switch (((act_args *)user)->id) {
    case A_RELU: return lipt_relu(ctx, in[0]);
    case A_ELU: return lipt_elu(ctx, in[0]);
    case A_GELU: return lipt_gelu(ctx, in[0]);
    default: return lipt_lipswish(ctx, in[0], in[1]);
    }
}

/* Gradient of build at the inputs for output weights r, optionally on top of gradients pre-filled with `pre`. */
static float **grads_at(tu_build_fn build, void *user, lipt_tensor **in, int n_in, const float *r, const float *pre) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    float **buf = calloc((size_t)n_in, sizeof *buf);
    for (int i = 0; i < n_in; i++) {
        in[i]->grad = NULL;
        if (pre && in[i]->requires_grad) {
            buf[i] = malloc(in[i]->numel * sizeof(float));
            for (size_t j = 0; j < in[i]->numel; j++) buf[i][j] = *pre;
            in[i]->grad = buf[i];
        }
    }
    lipt_tensor *out = build(&ctx, in, user);
    lipt_backward_seeded(&ctx, out, r);
    float **g = calloc((size_t)n_in, sizeof *g);
    for (int i = 0; i < n_in; i++) {
        if (!in[i]->requires_grad) continue;
        g[i] = calloc(in[i]->numel, sizeof(float));
        if (in[i]->grad) memcpy(g[i], in[i]->grad, in[i]->numel * sizeof(float));
        in[i]->grad = NULL;
        free(buf[i]);
    }
    free(buf);
    lipt_ctx_free(&ctx);
    return g;
}

/* Backward must add into gradients that already hold something (pre-filled with 1.5: result 1.5 more). */
static double check_accumulates(const char *label, tu_build_fn build, void *user, lipt_tensor **in, int n_in,
                                size_t nout) {
    float *r = malloc(nout * sizeof(float));
    lipt_rng rng;
    lipt_rng_seed(&rng, 31);
    lipt_rng_fill_normal(&rng, r, nout, 1.0f);
    const float pre = 1.5f;
    float **g0 = grads_at(build, user, in, n_in, r, NULL), **g1 = grads_at(build, user, in, n_in, r, &pre);
    double worst = 0;
    for (int i = 0; i < n_in; i++) {
        if (g0[i])
            for (size_t j = 0; j < in[i]->numel; j++) {
                double want = (double)g0[i][j] + pre, e = fabs(g1[i][j] - want) / fmax(1.0, fabs(want));
                if (!(e <= worst)) worst = e;
            }
        free(g0[i]);
        free(g1[i]);
    }
    free(g0);
    free(g1);
    free(r);
    ck_assert_msg(worst < 1e-5, "%s: backward does not accumulate into existing gradients (err %.3e)", label, worst);
    return worst;
}

typedef struct { int nd, s[4]; } shape_case;
static const shape_case shapes[] = {{1, {1}}, {1, {13}}, {2, {3, 5}}, {3, {2, 1, 9}}, {4, {2, 3, 1, 4}}, {3, {1, 1, 1}}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])
static const float betas[] = {1.0f, 0.37f, 2.5f, -0.8f};

START_TEST(test_activations) {
    double worst_fwd[A_COUNT] = {0}, worst_bwd[A_COUNT] = {0}, worst_acc = 0;
    for (int id = 0; id < A_COUNT; id++)
        for (size_t si = 0; si < N_SHAPES; si++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 100 * (uint64_t)id + 10 * si + seed);
                /* std 2 reaches the saturated tails of GELU and LipSwish and the flat part of ELU */
                lipt_tensor *X = tu_tensor(&rng, shapes[si].nd, shapes[si].s, 2.0f, 1);
                /* ReLU: keep finite-difference points away from the kink at 0 */
                if (id == A_RELU)
                    for (size_t i = 0; i < X->numel; i++) X->data[i] += X->data[i] >= 0 ? 0.1f : -0.1f;
                lipt_tensor *Beta = tu_tensor(NULL, 1, (int[]){1}, 0, seed != 4); /* seed 4: a fixed beta */
                Beta->data[0] = betas[seed - 1];
                act_args u = {(act_id)id};
                lipt_tensor *in[2] = {X, Beta};
                int n_in = id == A_LIPSWISH ? 2 : 1;

                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *Y = build_act(&ctx, in, &u);
                ck_assert(lipt_same_shape(Y, X));
                double *ref = malloc(X->numel * sizeof(double));
                for (size_t i = 0; i < X->numel; i++) ref[i] = ref_act((act_id)id, X->data[i], Beta->data[0]);
                double e = tu_max_rel_err(Y->data, ref, X->numel, 1e-6);
                ck_assert_msg(e < FWD_TOL, "%s forward rel err %.3e", act_names[id], e);
                if (e > worst_fwd[id]) worst_fwd[id] = e;
                free(ref);
                lipt_ctx_free(&ctx);

                char label[96], sx[32];
                snprintf(label, sizeof label, "%s %s s%d%s", act_names[id], lipt_shape_str(X, sx, sizeof sx), (int)seed,
                         id == A_LIPSWISH ? (seed == 4 ? " beta fixed" : " beta learnt") : "");
                double g = tu_gradcheck(label, build_act, &u, in, n_in,
                                        &(tu_gradcheck_opts){.seed = seed + 7 * si, .tol = GRAD_TOL});
                if (g > worst_bwd[id]) worst_bwd[id] = g;
                if (seed <= 2) {
                    double ea = check_accumulates(label, build_act, &u, in, n_in, X->numel);
                    if (ea > worst_acc) worst_acc = ea;
                }
                tu_free(X);
                tu_free(Beta);
            }
    for (int id = 0; id < A_COUNT; id++)
        printf("%s: worst forward rel err %.3e (tol %.0e), worst gradient rel err %.3e (tol %.0e)\n", act_names[id],
               worst_fwd[id], FWD_TOL, worst_bwd[id], GRAD_TOL);
    printf("activations: worst accumulation err %.3e\n", worst_acc);
}
END_TEST

/* Exact-erf GELU, as PyTorch's nn.GELU() (approximate='none'); the tanh form misses these by >= 1e-5. */
START_TEST(test_gelu_reference_values) {
    const double xs[] = {-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0};
    const double want[] = {-5.919525869479969e-09, -0.00404969409489031, -0.15865525393145707, -0.15426876936299344,
                           0.0, 0.34573123063700656, 0.8413447460685429, 1.9544997361036416};
    lipt_tensor *X = tu_tensor(NULL, 1, (int[]){8}, 0, 0);
    for (int i = 0; i < 8; i++) X->data[i] = (float)xs[i];
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *Y = lipt_gelu(&ctx, X);
    double worst = 0;
    for (int i = 0; i < 8; i++) {
        /* per element relative error (the left tail included), with a float-rounding floor */
        double e = fabs(Y->data[i] - want[i]) / fmax(fabs(want[i]), 1e-30);
        if (want[i] == 0) e = fabs(Y->data[i]);
        ck_assert_msg(e < 1e-5, "gelu(%g) = %.9g, want %.9g", xs[i], (double)Y->data[i], want[i]);
        if (e > worst) worst = e;
    }
    printf("gelu vs PyTorch values: worst per-element rel err %.3e (tol 1e-5)\n", worst);
    lipt_ctx_free(&ctx);
    tu_free(X);
}
END_TEST

/* GELU's backward through the op (the derivative the forward saves, on 2 threads) on a dense grid of 2^21 points
 * over [-8, 8], g = 1: the error of dx relative to Φ(x) + |x| φ(x) (GELU' crosses zero near x = -0.75), below
 * 1.4e-7 where the forward's tables apply (|x| < 3.9375; measured 1.25e-7) and 6e-6 beyond (the erfcc form and
 * exp, as the backward computed them before; measured 1.1e-6). */
START_TEST(test_gelu_grad_dense) {
    const int n = 1 << 21;
    lipt_tensor *X = tu_tensor(NULL, 1, (int[]){n}, 0, 1);
    for (int i = 0; i < n; i++) X->data[i] = (float)(-8.0 + 16.0 * i / (n - 1));
    float *ones = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) ones[i] = 1.0f;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)64 << 20, 1);
    lipt_tensor *Y = lipt_gelu(&ctx, X);
    X->grad = NULL;
    lipt_backward_seeded(&ctx, Y, ones);
    double worst[2] = {0};
    for (int i = 0; i < n; i++) {
        const double x = X->data[i], P = 0.5 * erfc(-x / sqrt(2.0)), ph = exp(-0.5 * x * x) / sqrt(2 * PI_D);
        const double e = fabs(X->grad[i] - (P + x * ph)) / (P + fabs(x) * ph);
        const int tail = !(fabs(x) < 3.9375);
        if (!(e <= worst[tail])) worst[tail] = e;
    }
    printf("gelu backward, dense grid: worst error / (Phi + |x| phi) %.3e for |x| < 3.9375, %.3e beyond\n", worst[0],
           worst[1]);
    ck_assert_msg(worst[0] < 1.4e-7, "gelu backward error %.3e", worst[0]);
    ck_assert_msg(worst[1] < 6e-6, "gelu backward error %.3e (tail)", worst[1]);
    lipt_ctx_free(&ctx);
    free(ones);
    tu_free(X);
}
END_TEST

/* Large tensors (parallel paths): forward, dx and the beta gradient (a sum over every element, in double). */
START_TEST(test_large) {
    const size_t n = 600001;
    lipt_rng rng;
    lipt_rng_seed(&rng, 2024);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){1, (int)n}, 1.5f, 1);
    lipt_tensor *Beta = tu_tensor(NULL, 1, (int[]){1}, 0, 1);
    Beta->data[0] = 0.9f;
    float *r = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = 0.5f + 0.25f * (float)lipt_rng_uniform(&rng); /* all positive: no cancellation */
    double *ref = malloc(n * sizeof(double)), *dref = malloc(n * sizeof(double));
    for (int id = 0; id < A_COUNT; id++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        act_args u = {(act_id)id};
        lipt_tensor *Y = build_act(&ctx, (lipt_tensor *[]){X, Beta}, &u);
        const double b = Beta->data[0];
        double dbeta = 0;
        for (size_t i = 0; i < n; i++) {
            double x = X->data[i];
            ref[i] = ref_act((act_id)id, x, b);
            double d;
            switch (id) {
            case A_RELU: d = x > 0; break;
            case A_ELU: d = x > 0 ? 1 : exp(x); break;
            case A_GELU: d = 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * PI_D); break;
            default: {
                double s = ref_sigmoid(b * x);
                d = (s + b * x * s * (1 - s)) / 1.1;
                dbeta += r[i] * x * x * s * (1 - s) / 1.1;
            }
            }
            dref[i] = r[i] * d;
        }
        double ef = tu_max_rel_err(Y->data, ref, n, 1e-6);
        X->grad = Beta->grad = NULL;
        lipt_backward_seeded(&ctx, Y, r);
        double ed = tu_max_rel_err(X->grad, dref, n, 1e-6);
        double eb = id == A_LIPSWISH ? fabs(Beta->grad[0] - dbeta) / fabs(dbeta) : 0;
        printf("%s large (%zu): forward rel err %.3e, dx rel err %.3e%s", act_names[id], n, ef, ed,
               id == A_LIPSWISH ? "" : "\n");
        if (id == A_LIPSWISH) printf(", dbeta rel err %.3e (tol 1e-5)\n", eb);
        ck_assert_msg(ef < FWD_TOL, "%s large forward rel err %.3e", act_names[id], ef);
        ck_assert_msg(ed < 1e-5, "%s large dx rel err %.3e", act_names[id], ed);
        ck_assert_msg(eb < 1e-5, "lipswish dbeta rel err %.3e", eb);
        X->grad = Beta->grad = NULL;
        lipt_ctx_free(&ctx);
    }
    free(ref);
    free(dref);
    free(r);
    tu_free(X);
    tu_free(Beta);
}
END_TEST

/* lipswish(b, b): a one-element x that is also beta; both gradient terms must land in the same buffer. */
static lipt_tensor *build_lipswish_alias(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_lipswish(ctx, in[0], in[0]);
}
/* beta shared by two lipswish calls on different inputs: its gradient accumulates over both */
static lipt_tensor *build_lipswish_shared(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_add(ctx, lipt_lipswish(ctx, in[0], in[2]), lipt_lipswish(ctx, in[1], in[2]));
}

START_TEST(test_lipswish_alias_and_shared_beta) {
    const float bs[] = {0.7f, -1.3f, 2.0f};
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        lipt_tensor *B = tu_tensor(NULL, 1, (int[]){1}, 0, 1);
        B->data[0] = bs[k];
        /* analytic: y = b σ(b²)/1.1, dy/db = (σ + 2b² σ(1-σ)) / 1.1 */
        double b = bs[k], s = ref_sigmoid(b * b), want = (s + 2 * b * b * s * (1 - s)) / 1.1;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = lipt_lipswish(&ctx, B, B);
        B->grad = NULL;
        lipt_backward(&ctx, Y);
        double e = fabs(B->grad[0] - want) / fabs(want);
        ck_assert_msg(e < 1e-5, "lipswish(b, b)' = %g, want %g", (double)B->grad[0], want);
        B->grad = NULL;
        lipt_ctx_free(&ctx);
        char label[64];
        snprintf(label, sizeof label, "lipswish alias x=beta=%g", (double)bs[k]);
        double g = tu_gradcheck(label, build_lipswish_alias, NULL, (lipt_tensor *[]){B}, 1,
                                &(tu_gradcheck_opts){.seed = 1 + (uint64_t)k, .tol = GRAD_TOL});
        if (g > worst) worst = g;
        lipt_rng rng;
        lipt_rng_seed(&rng, 60 + (uint64_t)k);
        lipt_tensor *X1 = tu_tensor(&rng, 2, (int[]){3, 4}, 1.5f, 1), *X2 = tu_tensor(&rng, 2, (int[]){3, 4}, 1.5f, 1);
        snprintf(label, sizeof label, "lipswish shared beta=%g", (double)bs[k]);
        g = tu_gradcheck(label, build_lipswish_shared, NULL, (lipt_tensor *[]){X1, X2, B}, 3,
                         &(tu_gradcheck_opts){.seed = 5 + (uint64_t)k, .tol = GRAD_TOL});
        if (g > worst) worst = g;
        tu_free(X1);
        tu_free(X2);
        tu_free(B);
    }
    printf("lipswish alias / shared beta: worst gradient rel err %.3e\n", worst);
}
END_TEST

START_TEST(test_relu_at_zero_and_no_grad) {
    /* subgradient 0 at exactly 0, as PyTorch */
    lipt_tensor *X = tu_tensor(NULL, 1, (int[]){3}, 0, 1);
    X->data[0] = -1.0f;
    X->data[1] = 0.0f;
    X->data[2] = 2.0f;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *Y = lipt_relu(&ctx, X);
    X->grad = NULL;
    lipt_backward_seeded(&ctx, Y, (float[]){1, 1, 1});
    ck_assert_float_eq(X->grad[0], 0.0f);
    ck_assert_float_eq(X->grad[1], 0.0f);
    ck_assert_float_eq(X->grad[2], 1.0f);
    X->grad = NULL;
    lipt_ctx_reset(&ctx);
    lipt_tensor *Beta = tu_tensor(NULL, 1, (int[]){1}, 0, 1);
    Beta->data[0] = 1.0f;
    lipt_no_grad_push(&ctx);
    Y = lipt_lipswish(&ctx, lipt_gelu(&ctx, lipt_elu(&ctx, lipt_relu(&ctx, X))), Beta);
    lipt_no_grad_pop(&ctx);
    ck_assert_int_eq((int)ctx.n_nodes, 0);
    ck_assert_int_eq(Y->requires_grad, 0);
    lipt_ctx_free(&ctx);
    tu_free(X);
    tu_free(Beta);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_activation");
    TCase *tc = tcase_create("activation");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_activations);
    tcase_add_test(tc, test_gelu_reference_values);
    tcase_add_test(tc, test_gelu_grad_dense);
    tcase_add_test(tc, test_large);
    tcase_add_test(tc, test_lipswish_alias_and_shared_beta);
    tcase_add_test(tc, test_relu_at_zero_and_no_grad);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
