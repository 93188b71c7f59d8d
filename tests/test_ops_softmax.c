/* softmax and cross-entropy: forward against double references (rows sum to 1, stable at large logits;
 * mean NLL vs a double log-sum-exp at 1e-6 rel, per-row NLL), backward against double references of the
 * analytic gradients (with accumulation), finite-difference gradchecks incl. V=1 and a single row,
 * no-grad mode, and the abort on a target outside [0,V). */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int ndim, shape[4]; } sm_case;

/* Includes V=1, a single row, and sizes above the kernels' threading threshold. */
static const sm_case cases[] = {
    {2, {1, 1}}, {2, {1, 7}}, {2, {4, 1}}, {2, {4, 5}}, {3, {2, 3, 9}}, {1, {50}}, {3, {2, 9, 50}}, {2, {64, 300}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* Logits scaled by `scale` and shifted by `shift` (large shifts overflow a naive exp). */
static lipt_tensor *make_logits(uint64_t seed, const sm_case *c, float scale, float shift) {
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    lipt_tensor *X = tu_tensor(&rng, c->ndim, c->shape, scale, 1);
    for (size_t i = 0; i < X->numel; i++) X->data[i] += shift;
    return X;
}

static int *make_targets(uint64_t seed, size_t rows, int V) {
    lipt_rng rng;
    lipt_rng_seed(&rng, seed ^ 0xabcdef);
    int *t = malloc(rows * sizeof(int));
    for (size_t r = 0; r < rows; r++) t[r] = (int)lipt_rng_below(&rng, (uint64_t)V);
    return t;
}

/* Double-precision log-sum-exp of one row, max subtracted. */
static double ref_lse(const float *x, int V) {
    double m = x[0], s = 0;
    for (int j = 1; j < V; j++) m = fmax(m, x[j]);
    for (int j = 0; j < V; j++) s += exp((double)x[j] - m);
    return m + log(s);
}

static lipt_tensor *build_sm(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_softmax(ctx, in[0]);
}

static lipt_tensor *build_ce(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return lipt_cross_entropy(ctx, in[0], (const int *)user, NULL);
}

static const float scales[] = {1.0f, 5.0f, 1.0f};
static const float shifts[] = {0.0f, 0.0f, 1000.0f};

START_TEST(test_softmax_forward) {
    double worst = 0, worst_sum = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int k = 0; k < 3; k++) {
            lipt_tensor *X = make_logits(1 + ci, &cases[ci], scales[k], shifts[k]);
            int V = lipt_last_dim(X);
            size_t rows = lipt_rows(X), n = X->numel;
            double *ref = malloc(n * sizeof(double));
            for (size_t r = 0; r < rows; r++) {
                double l = ref_lse(X->data + r * V, V);
                for (int j = 0; j < V; j++) ref[r * V + j] = exp((double)X->data[r * V + j] - l);
            }
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *Y = lipt_softmax(&ctx, X);
            ck_assert(lipt_same_shape(X, Y));
            double e = tu_max_rel_err(Y->data, ref, n, 1e-6);
            ck_assert_msg(e < 1e-6, "softmax case %zu k %d: rel err %.3e", ci, k, e);
            if (e > worst) worst = e;
            for (size_t r = 0; r < rows; r++) {
                double s = 0;
                size_t bad = 0;
                for (int j = 0; j < V; j++) {
                    if (!(isfinite(Y->data[r * V + j]) && Y->data[r * V + j] >= 0)) bad++;
                    s += Y->data[r * V + j];
                }
                ck_assert_msg(bad == 0, "softmax case %zu k %d row %zu: %zu entries negative or not finite", ci, k, r, bad);
                ck_assert_msg(fabs(s - 1) < 1e-6, "softmax case %zu k %d row %zu sums to %.9f", ci, k, r, s);
                worst_sum = fmax(worst_sum, fabs(s - 1));
            }
            lipt_no_grad_push(&ctx);
            lipt_tensor *Y2 = lipt_softmax(&ctx, X);
            lipt_no_grad_pop(&ctx);
            ck_assert_int_eq((int)ctx.n_nodes, 1);
            ck_assert(memcmp(Y->data, Y2->data, n * sizeof(float)) == 0);
            lipt_ctx_free(&ctx);
            free(ref);
            tu_free(X);
        }
    printf("softmax forward: worst rel err %.3e (tol 1e-6), worst |row sum - 1| %.3e (tol 1e-6)\n", worst, worst_sum);
}
END_TEST

/* dx = y (dy - sum(dy y)) in double, accumulated onto a preset gradient. */
START_TEST(test_softmax_backward_exact) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int k = 0; k < 2; k++) { /* k = 1: logits around 1000 */
            lipt_tensor *X = make_logits(30 + ci, &cases[ci], 2.0f, k ? 1000.0f : 0.0f);
            int V = lipt_last_dim(X);
            size_t rows = lipt_rows(X), n = X->numel;
            lipt_rng rng;
            lipt_rng_seed(&rng, 40 + ci);
            float *dy = malloc(n * sizeof(float)), *pre = malloc(n * sizeof(float));
            lipt_rng_fill_normal(&rng, dy, n, 1.0f);
            lipt_rng_fill_normal(&rng, pre, n, 1.0f);
            double *ref = malloc(n * sizeof(double));
            for (size_t r = 0; r < rows; r++) {
                double l = ref_lse(X->data + r * V, V), dot = 0;
                for (int j = 0; j < V; j++) dot += dy[r * V + j] * exp((double)X->data[r * V + j] - l);
                for (int j = 0; j < V; j++) {
                    double y = exp((double)X->data[r * V + j] - l);
                    ref[r * V + j] = pre[r * V + j] + y * (dy[r * V + j] - dot);
                }
            }
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *Y = lipt_softmax(&ctx, X);
            X->grad = pre;
            lipt_backward_seeded(&ctx, Y, dy);
            double e = tu_max_rel_err(pre, ref, n, 1e-6);
            ck_assert_msg(e < 1e-5, "softmax case %zu k %d: dx rel err %.3e", ci, k, e);
            if (e > worst) worst = e;
            X->grad = NULL;
            lipt_ctx_free(&ctx);
            free(dy); free(pre); free(ref);
            tu_free(X);
        }
    printf("softmax backward: worst rel err vs double reference %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_softmax_gradcheck) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            lipt_tensor *X = make_logits(100 * seed + ci, &cases[ci], seed == 2 ? 3.0f : 1.0f, seed == 3 ? 8.0f : 0.0f);
            char label[64];
            snprintf(label, sizeof label, "softmax %zu rows V%d s%d", lipt_rows(X), lipt_last_dim(X), (int)seed);
            /* step 1e-2: with 1e-3 the float32 rounding of the outputs dominates; truncation stays ~1e-5 */
            double g = tu_gradcheck(label, build_sm, NULL, (lipt_tensor *[]){X}, 1,
                                    &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2, .eps = 1e-2});
            if (g > worst) worst = g;
            tu_free(X);
        }
    printf("softmax: worst gradient rel err %.3e (tol 1e-2)\n", worst);
}
END_TEST

START_TEST(test_cross_entropy_forward) {
    double worst = 0, worst_row = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int k = 0; k < 3; k++) {
            lipt_tensor *X = make_logits(200 + ci, &cases[ci], scales[k], shifts[k]);
            int V = lipt_last_dim(X);
            size_t rows = lipt_rows(X);
            int *t = make_targets(ci * 3 + k, rows, V);
            double *ref_row = malloc(rows * sizeof(double)), ref = 0;
            for (size_t r = 0; r < rows; r++) {
                ref_row[r] = ref_lse(X->data + r * V, V) - X->data[r * V + t[r]];
                ref += ref_row[r];
            }
            ref /= (double)rows;
            double *row = malloc(rows * sizeof(double));
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *L = lipt_cross_entropy(&ctx, X, t, row);
            ck_assert_int_eq((int)L->numel, 1);
            ck_assert(L->requires_grad);
            /* V=1: the loss is exactly 0 */
            double e = fabs(L->data[0] - ref) / fmax(fabs(ref), 1e-6);
            if (V == 1) ck_assert(L->data[0] == 0.0f);
            ck_assert_msg(e < 1e-6, "cross-entropy case %zu k %d: %.9g vs ref %.9g (rel %.3e)", ci, k,
                          (double)L->data[0], ref, e);
            if (e > worst) worst = e;
            double wr = 0;
            for (size_t r = 0; r < rows; r++) wr = fmax(wr, fabs(row[r] - ref_row[r]) / fmax(fabs(ref_row[r]), 1e-6));
            ck_assert_msg(wr < 1e-9, "cross-entropy case %zu k %d: row NLL rel err %.3e", ci, k, wr);
            worst_row = fmax(worst_row, wr);
            /* no-grad mode: same value, no node, and the per-row scratch is released */
            lipt_no_grad_push(&ctx);
            size_t used = ctx.arena.used_total;
            lipt_tensor *L2 = lipt_cross_entropy(&ctx, X, t, NULL);
            size_t grew = ctx.arena.used_total - used;
            lipt_no_grad_pop(&ctx);
            ck_assert_int_eq((int)ctx.n_nodes, 1);
            ck_assert(!L2->requires_grad);
            ck_assert(L2->data[0] == L->data[0]);
            ck_assert_msg(grew <= 256, "cross-entropy no-grad kept %zu arena bytes", grew);
            lipt_ctx_free(&ctx);
            free(ref_row); free(row); free(t);
            tu_free(X);
        }
    printf("cross-entropy forward: worst mean-NLL rel err %.3e (tol 1e-6), worst row-NLL rel err %.3e (tol 1e-9)\n",
           worst, worst_row);
}
END_TEST

/* dlogits = (softmax - onehot) dout / rows, with dout != 1 and a preset gradient. */
START_TEST(test_cross_entropy_backward_exact) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int k = 0; k < 2; k++) { /* k = 1: logits around 1000 */
            lipt_tensor *X = make_logits(300 + ci, &cases[ci], 3.0f, k ? 1000.0f : 0.0f);
            int V = lipt_last_dim(X);
            size_t rows = lipt_rows(X), n = X->numel;
            int *t = make_targets(ci, rows, V);
            lipt_rng rng;
            lipt_rng_seed(&rng, 40 + ci);
            float *pre = malloc(n * sizeof(float));
            lipt_rng_fill_normal(&rng, pre, n, 0.01f);
            const float dout = 2.5f;
            double *ref = malloc(n * sizeof(double));
            for (size_t r = 0; r < rows; r++) {
                double l = ref_lse(X->data + r * V, V);
                for (int j = 0; j < V; j++)
                    ref[r * V + j] = pre[r * V + j] +
                                     (exp((double)X->data[r * V + j] - l) - (j == t[r])) * dout / (double)rows;
            }
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *L = lipt_cross_entropy(&ctx, X, t, NULL);
            for (size_t r = 0; r < rows; r++) t[r] = (t[r] + 1) % V; /* backward must use its own copy */
            X->grad = pre;
            lipt_backward_seeded(&ctx, L, &dout);
            double e = tu_max_rel_err(pre, ref, n, 1e-6);
            ck_assert_msg(e < 1e-5, "cross-entropy case %zu k %d: dlogits rel err %.3e", ci, k, e);
            if (e > worst) worst = e;
            X->grad = NULL;
            lipt_ctx_free(&ctx);
            free(pre); free(ref); free(t);
            tu_free(X);
        }
    printf("cross-entropy backward: worst rel err vs double reference %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_cross_entropy_gradcheck) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            lipt_tensor *X = make_logits(400 * seed + ci, &cases[ci], seed == 2 ? 3.0f : 1.0f, seed == 3 ? 8.0f : 0.0f);
            int *t = make_targets(seed * 10 + ci, lipt_rows(X), lipt_last_dim(X));
            char label[64];
            snprintf(label, sizeof label, "cross-entropy %zu rows V%d s%d", lipt_rows(X), lipt_last_dim(X), (int)seed);
            /* step 1e-2: the loss is one float32, whose rounding would dominate a 1e-3 step */
            double g = tu_gradcheck(label, build_ce, t, (lipt_tensor *[]){X}, 1,
                                    &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2, .eps = 1e-2});
            if (g > worst) worst = g;
            free(t);
            tu_free(X);
        }
    printf("cross-entropy: worst gradient rel err %.3e (tol 1e-2)\n", worst);
}
END_TEST

static void bad_target_run(int bad) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){3, 4}, 1.0f, 1);
    int t[3] = {0, 3, bad};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_cross_entropy(&ctx, X, t, NULL);
}
START_TEST(test_cross_entropy_target_too_large) { bad_target_run(4); }
END_TEST
START_TEST(test_cross_entropy_target_negative) { bad_target_run(-1); }
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_softmax");
    TCase *tc = tcase_create("softmax");
    tcase_add_test(tc, test_softmax_forward);
    tcase_add_test(tc, test_softmax_backward_exact);
    tcase_add_test(tc, test_softmax_gradcheck);
    suite_add_tcase(s, tc);
    TCase *tc2 = tcase_create("cross_entropy");
    tcase_add_test(tc2, test_cross_entropy_forward);
    tcase_add_test(tc2, test_cross_entropy_backward_exact);
    tcase_add_test(tc2, test_cross_entropy_gradcheck);
    tcase_add_test_raise_signal(tc2, test_cross_entropy_target_too_large, SIGABRT);
    tcase_add_test_raise_signal(tc2, test_cross_entropy_target_negative, SIGABRT);
    suite_add_tcase(s, tc2);
    return tu_run_suite(s);
}
