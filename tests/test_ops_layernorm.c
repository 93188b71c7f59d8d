/* layernorm: forward against a double reference (1e-5 rel), backward against a double reference of the
 * analytic gradient (x, gamma, beta; accumulation onto preset grads), finite-difference gradchecks over
 * shapes incl. D=1 and a single row, gamma/beta absent, and a size that takes the threaded path. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int ndim, shape[4]; } ln_case;

static const ln_case cases[] = {
    {2, {1, 1}}, {2, {1, 7}}, {2, {5, 1}}, {2, {3, 5}}, {3, {2, 3, 8}}, {2, {4, 33}}, {1, {6}}, {2, {64, 300}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

typedef struct { float eps; int use_gamma, use_beta; } ln_args;

static lipt_tensor *build_ln(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    ln_args *a = user;
    return lipt_layernorm(ctx, in[0], a->use_gamma ? in[1] : NULL, a->use_beta ? in[2] : NULL, a->eps);
}

/* Inputs with a common offset (the mean must be subtracted accurately) and gamma around 1. */
static void make_inputs(uint64_t seed, const ln_case *c, lipt_tensor **X, lipt_tensor **G, lipt_tensor **B) {
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    int D = c->shape[c->ndim - 1];
    *X = tu_tensor(&rng, c->ndim, c->shape, 1.5f, 1);
    for (size_t i = 0; i < (*X)->numel; i++) (*X)->data[i] += 3.0f;
    *G = tu_tensor(&rng, 1, (int[]){D}, 0.5f, 1);
    for (int j = 0; j < D; j++) (*G)->data[j] += 1.0f;
    *B = tu_tensor(&rng, 1, (int[]){D}, 0.5f, 1);
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta, biased variance, in double. */
static void ref_forward(const lipt_tensor *X, const float *g, const float *b, float eps, double *Y, double *xh,
                        double *rstd) {
    int D = lipt_last_dim(X);
    size_t rows = lipt_rows(X);
    for (size_t r = 0; r < rows; r++) {
        const float *x = X->data + r * D;
        double mu = 0, var = 0;
        for (int j = 0; j < D; j++) mu += x[j];
        mu /= D;
        for (int j = 0; j < D; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= D;
        double rs = 1.0 / sqrt(var + eps);
        rstd[r] = rs;
        for (int j = 0; j < D; j++) {
            xh[r * D + j] = (x[j] - mu) * rs;
            Y[r * D + j] = xh[r * D + j] * (g ? g[j] : 1.0) + (b ? b[j] : 0.0);
        }
    }
}

START_TEST(test_layernorm_forward) {
    const float epss[] = {1e-5f, 1e-3f};
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int ei = 0; ei < 2; ei++)
            for (int affine = 0; affine < 2; affine++) {
                const ln_case *c = &cases[ci];
                lipt_tensor *X, *G, *B;
                make_inputs(1 + ci, c, &X, &G, &B);
                size_t n = X->numel, rows = lipt_rows(X);
                double *ref = malloc(n * sizeof(double)), *xh = malloc(n * sizeof(double));
                double *rs = malloc(rows * sizeof(double));
                ref_forward(X, affine ? G->data : NULL, affine ? B->data : NULL, epss[ei], ref, xh, rs);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *Y = lipt_layernorm(&ctx, X, affine ? G : NULL, affine ? B : NULL, epss[ei]);
                ck_assert(lipt_same_shape(X, Y));
                double e = tu_max_rel_err(Y->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "layernorm case %zu eps %g affine %d: forward rel err %.3e", ci,
                              (double)epss[ei], affine, e);
                if (e > worst) worst = e;
                /* no-grad mode gives the same values and records nothing */
                lipt_no_grad_push(&ctx);
                lipt_tensor *Y2 = lipt_layernorm(&ctx, X, affine ? G : NULL, affine ? B : NULL, epss[ei]);
                lipt_no_grad_pop(&ctx);
                ck_assert_int_eq((int)ctx.n_nodes, 1);
                ck_assert(memcmp(Y->data, Y2->data, n * sizeof(float)) == 0);
                lipt_ctx_free(&ctx);
                free(ref); free(xh); free(rs);
                tu_free(X); tu_free(G); tu_free(B);
            }
    printf("layernorm forward: worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

/* dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma; dgamma = sum dy xhat; dbeta = sum dy. */
START_TEST(test_layernorm_backward_exact) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const ln_case *c = &cases[ci];
        lipt_tensor *X, *G, *B;
        make_inputs(50 + ci, c, &X, &G, &B);
        int D = lipt_last_dim(X);
        size_t n = X->numel, rows = lipt_rows(X);
        const float eps = 1e-5f;
        double *y = malloc(n * sizeof(double)), *xh = malloc(n * sizeof(double));
        double *rs = malloc(rows * sizeof(double));
        ref_forward(X, G->data, B->data, eps, y, xh, rs);
        lipt_rng rng;
        lipt_rng_seed(&rng, 77 + ci);
        float *dy = malloc(n * sizeof(float));
        lipt_rng_fill_normal(&rng, dy, n, 1.0f);
        float *pre_x = malloc(n * sizeof(float)), *pre_g = malloc(D * sizeof(float)), *pre_b = malloc(D * sizeof(float));
        lipt_rng_fill_normal(&rng, pre_x, n, 1.0f);
        lipt_rng_fill_normal(&rng, pre_g, D, 1.0f);
        lipt_rng_fill_normal(&rng, pre_b, D, 1.0f);
        double *pure = malloc(n * sizeof(double)), *rdx = malloc(n * sizeof(double)), *rdg = malloc(D * sizeof(double)), *rdb = malloc(D * sizeof(double));
        for (int j = 0; j < D; j++) { rdg[j] = pre_g[j]; rdb[j] = pre_b[j]; }
        for (size_t r = 0; r < rows; r++) {
            double mg = 0, mgx = 0;
            for (int j = 0; j < D; j++) {
                double g = (double)dy[r * D + j] * G->data[j];
                mg += g;
                mgx += g * xh[r * D + j];
                rdg[j] += (double)dy[r * D + j] * xh[r * D + j];
                rdb[j] += dy[r * D + j];
            }
            mg /= D;
            mgx /= D;
            for (int j = 0; j < D; j++) {
                double g = (double)dy[r * D + j] * G->data[j];
                pure[r * D + j] = rs[r] * (g - mg - xh[r * D + j] * mgx);
                rdx[r * D + j] = pre_x[r * D + j] + pure[r * D + j];
            }
        }
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = lipt_layernorm(&ctx, X, G, B, eps);
        /* preset gradients: backward must accumulate onto them */
        X->grad = pre_x; G->grad = pre_g; B->grad = pre_b;
        lipt_backward_seeded(&ctx, Y, dy);
        double ex = tu_max_rel_err(pre_x, rdx, n, 1e-6), eg = tu_max_rel_err(pre_g, rdg, D, 1e-6),
               eb = tu_max_rel_err(pre_b, rdb, D, 1e-6);
        ck_assert_msg(ex < 1e-5 && eg < 1e-5 && eb < 1e-5, "layernorm case %zu: grad rel err x %.3e gamma %.3e beta %.3e",
                      ci, ex, eg, eb);
        worst = fmax(worst, fmax(ex, fmax(eg, eb)));
        X->grad = G->grad = B->grad = NULL;
        /* only x requires grad: gamma/beta get nothing, dx is unchanged */
        lipt_ctx_reset(&ctx);
        G->requires_grad = B->requires_grad = 0;
        Y = lipt_layernorm(&ctx, X, G, B, eps);
        lipt_backward_seeded(&ctx, Y, dy);
        ck_assert_ptr_null(G->grad);
        ck_assert_ptr_null(B->grad);
        double ex2 = tu_max_rel_err(X->grad, pure, n, 1e-6);
        ck_assert_msg(ex2 < 1e-5, "layernorm case %zu x-only: dx rel err %.3e", ci, ex2);
        X->grad = NULL;
        lipt_ctx_free(&ctx);
        free(y); free(xh); free(rs); free(dy); free(pre_x); free(pre_g); free(pre_b); free(pure); free(rdx); free(rdg); free(rdb);
        tu_free(X); tu_free(G); tu_free(B);
    }
    printf("layernorm backward: worst rel err vs double reference %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_layernorm_gradcheck) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            const ln_case *c = &cases[ci];
            lipt_tensor *X, *G, *B;
            make_inputs(1000 * seed + ci, c, &X, &G, &B);
            ln_args a = {seed == 3 ? 1e-3f : 1e-5f, 1, 1};
            char label[64];
            snprintf(label, sizeof label, "layernorm %zu rows D%d s%d", lipt_rows(X), lipt_last_dim(X), (int)seed);
            double g = tu_gradcheck(label, build_ln, &a, (lipt_tensor *[]){X, G, B}, 3,
                                    &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2});
            if (g > worst) worst = g;
            /* x alone, without gamma and beta */
            ln_args a2 = {1e-5f, 0, 0};
            snprintf(label, sizeof label, "layernorm %zu rows D%d s%d no affine", lipt_rows(X), lipt_last_dim(X),
                     (int)seed);
            g = tu_gradcheck(label, build_ln, &a2, (lipt_tensor *[]){X}, 1, &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2});
            if (g > worst) worst = g;
            tu_free(X); tu_free(G); tu_free(B);
        }
    printf("layernorm: worst gradient rel err %.3e (tol 1e-2)\n", worst);
}
END_TEST

START_TEST(test_layernorm_bad_gamma) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){3, 4}, 1.0f, 1);
    lipt_tensor *G = tu_tensor(&rng, 1, (int[]){5}, 1.0f, 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_layernorm(&ctx, X, G, NULL, 1e-5f);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_layernorm");
    TCase *tc = tcase_create("layernorm");
    tcase_add_test(tc, test_layernorm_forward);
    tcase_add_test(tc, test_layernorm_backward_exact);
    tcase_add_test(tc, test_layernorm_gradcheck);
    tcase_add_test_raise_signal(tc, test_layernorm_bad_gamma, SIGABRT);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
