/* dropout: identity when not training or p = 0, the fraction dropped near p, survivors scaled by 1/(1-p),
 * masks repeatable from the RNG state (and equal with and without a tape), backward against the mask
 * (with accumulation), finite-difference gradchecks, and the abort on p outside [0,1). */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float p; } do_args;

/* tu_gradcheck makes its own context (training off): turn training on here. */
static lipt_tensor *build_do(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    do_args *a = user;
    ctx->training = 1;
    return lipt_dropout(ctx, in[0], a->p);
}

START_TEST(test_dropout_identity) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){3, 4}, 1.0f, 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 5);
    lipt_rng before = ctx.rng;
    ck_assert_ptr_eq(lipt_dropout(&ctx, X, 0.5f), X); /* not training */
    ctx.training = 1;
    ck_assert_ptr_eq(lipt_dropout(&ctx, X, 0.0f), X); /* p = 0 */
    ck_assert_int_eq((int)ctx.n_nodes, 0);
    ck_assert(memcmp(&before, &ctx.rng, sizeof before) == 0); /* no randomness consumed */
    lipt_tensor *Y = lipt_dropout(&ctx, X, 0.5f);
    ck_assert_ptr_ne(Y, X);
    ck_assert_int_eq((int)ctx.n_nodes, 1);
    ck_assert(lipt_same_shape(X, Y));
    lipt_ctx_free(&ctx);
    tu_free(X);
    printf("dropout identity: not training and p = 0 return the input, no node, RNG untouched\n");
}
END_TEST

START_TEST(test_dropout_statistics) {
    const float ps[] = {0.05f, 0.1f, 0.5f, 0.9f};
    const int n = 200003;
    double worst_sigma = 0, worst_scale = 0;
    lipt_rng rng;
    lipt_rng_seed(&rng, 2);
    lipt_tensor *X = tu_tensor(&rng, 2, (int[]){1, n}, 1.0f, 1);
    for (int i = 0; i < n; i++) if (X->data[i] == 0.0f) X->data[i] = 1.0f; /* zero only when dropped */
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
        for (int grad = 0; grad < 2; grad++) {
            float p = ps[pi];
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 100 + pi);
            ctx.training = 1;
            if (!grad) lipt_no_grad_push(&ctx);
            lipt_tensor *Y = lipt_dropout(&ctx, X, p);
            const float scale = 1.0f / (1.0f - p);
            size_t dropped = 0, off = 0;
            double es = 0;
            /* counted, not asserted per element: each Check assertion costs a pipe write */
            for (int i = 0; i < n; i++) {
                if (Y->data[i] == 0.0f) { dropped++; continue; }
                double e = fabs((double)Y->data[i] - (double)X->data[i] / (1.0 - p)) / fabs((double)X->data[i] / (1.0 - p));
                if (e > es) es = e;
                if (Y->data[i] != X->data[i] * scale) off++;
            }
            ck_assert_msg(off == 0, "dropout p %g: %zu survivors differ from x * (1/(1-p))", (double)p, off);
            double frac = (double)dropped / n, sd = sqrt(p * (1.0 - p) / n), z = fabs(frac - p) / sd;
            ck_assert_msg(z < 5, "dropout p %g: dropped fraction %.5f (%.1f sigma off)", (double)p, frac, z);
            ck_assert_msg(es < 2e-7, "dropout p %g: survivor scale rel err %.3e vs 1/(1-p)", (double)p, es);
            worst_sigma = fmax(worst_sigma, z);
            worst_scale = fmax(worst_scale, es);
            ck_assert_int_eq((int)ctx.n_nodes, grad ? 1 : 0);
            lipt_ctx_free(&ctx);
        }
    tu_free(X);
    printf("dropout statistics: worst |fraction - p| %.2f sigma (tol 5), worst survivor rel err vs x/(1-p) %.3e\n",
           worst_sigma, worst_scale);
}
END_TEST

START_TEST(test_dropout_determinism) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 3);
    lipt_tensor *X = tu_tensor(&rng, 3, (int[]){2, 5, 31}, 1.0f, 1);
    size_t n = X->numel, bytes = n * sizeof(float);
    lipt_ctx a, b;
    lipt_ctx_init(&a, 1 << 16, 42);
    lipt_ctx_init(&b, 1 << 16, 42);
    a.training = b.training = 1;
    lipt_tensor *Ya = lipt_dropout(&a, X, 0.3f);
    lipt_no_grad_push(&b); /* same mask whether or not a node is recorded */
    lipt_tensor *Yb = lipt_dropout(&b, X, 0.3f);
    lipt_no_grad_pop(&b);
    ck_assert(memcmp(Ya->data, Yb->data, bytes) == 0);
    ck_assert(memcmp(&a.rng, &b.rng, sizeof a.rng) == 0); /* and the RNG advanced identically */
    /* the next call draws a fresh mask */
    lipt_tensor *Ya2 = lipt_dropout(&a, X, 0.3f);
    ck_assert(memcmp(Ya->data, Ya2->data, bytes) != 0);
    /* re-seeding repeats it; another seed does not */
    lipt_rng_seed(&a.rng, 42);
    lipt_tensor *Ya3 = lipt_dropout(&a, X, 0.3f);
    ck_assert(memcmp(Ya->data, Ya3->data, bytes) == 0);
    lipt_rng_seed(&a.rng, 43);
    lipt_tensor *Ya4 = lipt_dropout(&a, X, 0.3f);
    ck_assert(memcmp(Ya->data, Ya4->data, bytes) != 0);
    lipt_ctx_free(&a);
    lipt_ctx_free(&b);
    tu_free(X);
    printf("dropout determinism: same RNG state -> same mask (tape or not), new state -> new mask\n");
}
END_TEST

/* dx = dy * mask / (1-p), the mask read off the output (x has no zeros), onto a preset gradient. */
START_TEST(test_dropout_backward_exact) {
    const int sizes[] = {1, 7, 100, 40000};
    double worst = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        lipt_rng rng;
        lipt_rng_seed(&rng, 4 + si);
        lipt_tensor *X = tu_tensor(&rng, 1, (int[]){n}, 1.0f, 1);
        for (int i = 0; i < n; i++) if (X->data[i] == 0.0f) X->data[i] = 1.0f;
        float *dy = malloc(n * sizeof(float)), *pre = malloc(n * sizeof(float));
        lipt_rng_fill_normal(&rng, dy, n, 1.0f);
        lipt_rng_fill_normal(&rng, pre, n, 1.0f);
        double *ref = malloc(n * sizeof(double));
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 9 + si);
        ctx.training = 1;
        const float p = 0.25f;
        lipt_tensor *Y = lipt_dropout(&ctx, X, p);
        for (int i = 0; i < n; i++) ref[i] = pre[i] + (Y->data[i] != 0.0f ? dy[i] / (1.0 - p) : 0.0);
        X->grad = pre;
        lipt_backward_seeded(&ctx, Y, dy);
        double e = tu_max_rel_err(pre, ref, n, 1e-6);
        ck_assert_msg(e < 1e-6, "dropout n %d: dx rel err %.3e", n, e);
        if (e > worst) worst = e;
        X->grad = NULL;
        lipt_ctx_free(&ctx);
        free(dy); free(pre); free(ref);
        tu_free(X);
    }
    printf("dropout backward: worst rel err vs mask reference %.3e (tol 1e-6)\n", worst);
}
END_TEST

START_TEST(test_dropout_gradcheck) {
    const int shapes[][3] = {{1, 1, 1}, {1, 3, 5}, {2, 3, 7}, {1, 17, 33}, {4, 16, 64}};
    const float ps[] = {0.1f, 0.5f, 0.8f};
    double worst = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 100 * seed + si);
                lipt_tensor *X = tu_tensor(&rng, 3, shapes[si], 1.0f, 1);
                do_args a = {ps[pi]};
                char label[64];
                snprintf(label, sizeof label, "dropout %dx%dx%d p%.1f s%d", shapes[si][0], shapes[si][1], shapes[si][2],
                         (double)ps[pi], (int)seed);
                double g = tu_gradcheck(label, build_do, &a, (lipt_tensor *[]){X}, 1,
                                        &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2});
                if (g > worst) worst = g;
                tu_free(X);
            }
    printf("dropout: worst gradient rel err %.3e (tol 1e-2)\n", worst);
}
END_TEST

static void bad_p_run(float p, int training) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *X = tu_tensor(&rng, 1, (int[]){4}, 1.0f, 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    ctx.training = training;
    lipt_dropout(&ctx, X, p);
}
START_TEST(test_dropout_p_one) { bad_p_run(1.0f, 1); }
END_TEST
START_TEST(test_dropout_p_negative) { bad_p_run(-0.1f, 1); }
END_TEST
START_TEST(test_dropout_p_nan_eval) { bad_p_run(NAN, 0); } /* checked even when not training */
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_dropout");
    TCase *tc = tcase_create("dropout");
    tcase_add_test(tc, test_dropout_identity);
    tcase_add_test(tc, test_dropout_statistics);
    tcase_add_test(tc, test_dropout_determinism);
    tcase_add_test(tc, test_dropout_backward_exact);
    tcase_add_test(tc, test_dropout_gradcheck);
    tcase_add_test_raise_signal(tc, test_dropout_p_one, SIGABRT);
    tcase_add_test_raise_signal(tc, test_dropout_p_negative, SIGABRT);
    tcase_add_test_raise_signal(tc, test_dropout_p_nan_eval, SIGABRT);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
