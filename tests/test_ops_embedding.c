/* embedding: forward gather is an exact copy, backward scatter-add (repeated ids accumulate) against a double
 * reference, finite-difference gradchecks, the ids copy, no-grad mode and the abort on bad ids. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int V, D, ndim, shape[4]; } emb_case;

/* Includes V=1, D=1, a single id, and one size above the kernels' threading threshold. */
static const emb_case cases[] = {
    {1, 1, 2, {1, 1}},        {1, 4, 3, {2, 3, 4}},  {3, 1, 2, {6, 1}},     {7, 5, 3, {2, 3, 5}},
    {50, 16, 3, {4, 9, 16}},  {5, 33, 2, {11, 33}},  {50, 64, 3, {8, 128, 64}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

typedef struct { const int *ids; int ndim; const int *shape; } emb_args;

static lipt_tensor *build_emb(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    emb_args *a = user;
    return lipt_embedding(ctx, in[0], a->ids, a->ndim, a->shape);
}

static int *random_ids(lipt_rng *rng, size_t n, int V) {
    int *ids = malloc((n ? n : 1) * sizeof(int));
    for (size_t i = 0; i < n; i++) ids[i] = (int)lipt_rng_below(rng, (uint64_t)V);
    return ids;
}

static size_t n_ids(const emb_case *c) { return lipt_shape_numel(c->ndim, c->shape) / (size_t)c->D; }

START_TEST(test_embedding_forward) {
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const emb_case *c = &cases[ci];
        lipt_rng rng;
        lipt_rng_seed(&rng, 10 + ci);
        size_t n = n_ids(c);
        lipt_tensor *T = tu_tensor(&rng, 2, (int[]){c->V, c->D}, 1.0f, 1);
        int *ids = random_ids(&rng, n, c->V);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *Y = lipt_embedding(&ctx, T, ids, c->ndim, c->shape);
        ck_assert_int_eq(Y->ndim, c->ndim);
        for (int d = 0; d < c->ndim; d++) ck_assert_int_eq(Y->shape[d], c->shape[d]);
        ck_assert(Y->requires_grad);
        ck_assert_int_eq((int)ctx.n_nodes, 1);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < c->D; j++)
                if (Y->data[i * c->D + j] != T->data[(size_t)ids[i] * c->D + j]) bad++;
        ck_assert_msg(bad == 0, "embedding case %zu: %zu elements differ from the table rows", ci, bad);
        /* no node in no-grad mode, nor when the table needs no grad */
        lipt_no_grad_push(&ctx);
        lipt_tensor *Y2 = lipt_embedding(&ctx, T, ids, c->ndim, c->shape);
        lipt_no_grad_pop(&ctx);
        ck_assert_int_eq((int)ctx.n_nodes, 1);
        ck_assert(!Y2->requires_grad);
        ck_assert(memcmp(Y->data, Y2->data, Y->numel * sizeof(float)) == 0);
        T->requires_grad = 0;
        lipt_embedding(&ctx, T, ids, c->ndim, c->shape);
        ck_assert_int_eq((int)ctx.n_nodes, 1);
        lipt_ctx_free(&ctx);
        free(ids);
        tu_free(T);
    }
    printf("embedding forward: all %zu cases exact copies\n", N_CASES);
}
END_TEST

/* Backward against a double scatter-add, accumulating onto a preset gradient, with the caller's ids
 * overwritten between forward and backward (backward must use its own copy). */
START_TEST(test_embedding_backward_exact) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (int mode = 0; mode < 2; mode++) { /* mode 1: every id the same (maximal repetition) */
            const emb_case *c = &cases[ci];
            lipt_rng rng;
            lipt_rng_seed(&rng, 20 + ci);
            size_t n = n_ids(c), tn = (size_t)c->V * c->D;
            lipt_tensor *T = tu_tensor(&rng, 2, (int[]){c->V, c->D}, 1.0f, 1);
            int *ids = random_ids(&rng, n, c->V);
            if (mode) for (size_t i = 0; i < n; i++) ids[i] = c->V - 1;
            float *dy = malloc(n * c->D * sizeof(float));
            lipt_rng_fill_normal(&rng, dy, n * c->D, 1.0f);
            float *pre = malloc(tn * sizeof(float));
            lipt_rng_fill_normal(&rng, pre, tn, 1.0f);
            double *ref = malloc(tn * sizeof(double));
            for (size_t k = 0; k < tn; k++) ref[k] = pre[k];
            for (size_t i = 0; i < n; i++)
                for (int j = 0; j < c->D; j++) ref[(size_t)ids[i] * c->D + j] += dy[i * c->D + j];

            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *Y = lipt_embedding(&ctx, T, ids, c->ndim, c->shape);
            for (size_t i = 0; i < n; i++) ids[i] = (int)((ids[i] + 1) % c->V); /* clobber the caller's ids */
            if (c->V == 1) memset(ids, 0x7f, n * sizeof(int)); /* no other valid id: make them invalid */
            float *g = malloc(tn * sizeof(float));
            memcpy(g, pre, tn * sizeof(float));
            T->grad = g; /* backward must add onto this */
            lipt_backward_seeded(&ctx, Y, dy);
            ck_assert_ptr_eq(T->grad, g);
            double e = tu_max_rel_err(g, ref, tn, 1e-6);
            /* float accumulation of up to n terms in id order */
            ck_assert_msg(e < 1e-5, "embedding case %zu mode %d: table grad rel err %.3e", ci, mode, e);
            if (e > worst) worst = e;
            T->grad = NULL;
            lipt_ctx_free(&ctx);
            free(g); free(ref); free(pre); free(dy); free(ids);
            tu_free(T);
        }
    printf("embedding backward: worst table-grad rel err vs double scatter-add %.3e (tol 1e-5)\n", worst);
}
END_TEST

START_TEST(test_embedding_gradcheck) {
    double worst = 0;
    for (size_t ci = 0; ci < N_CASES; ci++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            const emb_case *c = &cases[ci];
            lipt_rng rng;
            lipt_rng_seed(&rng, 100 * seed + ci);
            size_t n = n_ids(c);
            lipt_tensor *T = tu_tensor(&rng, 2, (int[]){c->V, c->D}, 1.0f, 1);
            int *ids = random_ids(&rng, n, c->V);
            if (n >= 2) ids[n - 1] = ids[0]; /* at least one repeat */
            emb_args a = {ids, c->ndim, c->shape};
            char label[64];
            snprintf(label, sizeof label, "embedding V%d D%d n%zu s%d", c->V, c->D, n, (int)seed);
            double g = tu_gradcheck(label, build_emb, &a, (lipt_tensor *[]){T}, 1,
                                    &(tu_gradcheck_opts){.seed = seed, .tol = 1e-2});
            if (g > worst) worst = g;
            free(ids);
            tu_free(T);
        }
    printf("embedding: worst gradient rel err %.3e (tol 1e-2)\n", worst);
}
END_TEST

static void bad_id_run(int bad) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *T = tu_tensor(&rng, 2, (int[]){4, 3}, 1.0f, 1);
    int ids[3] = {0, bad, 1};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_embedding(&ctx, T, ids, 2, (int[]){3, 3});
}

START_TEST(test_embedding_id_too_large) { bad_id_run(4); }
END_TEST
START_TEST(test_embedding_id_negative) { bad_id_run(-1); }
END_TEST
START_TEST(test_embedding_bad_shape) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 1);
    lipt_tensor *T = tu_tensor(&rng, 2, (int[]){4, 3}, 1.0f, 1);
    int ids[3] = {0, 1, 2};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 12, 1);
    lipt_embedding(&ctx, T, ids, 2, (int[]){1, 9}); /* last dim 9 != D 3 */
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_embedding");
    TCase *tc = tcase_create("embedding");
    tcase_add_test(tc, test_embedding_forward);
    tcase_add_test(tc, test_embedding_backward_exact);
    tcase_add_test(tc, test_embedding_gradcheck);
    tcase_add_test_raise_signal(tc, test_embedding_id_too_large, SIGABRT);
    tcase_add_test_raise_signal(tc, test_embedding_id_negative, SIGABRT);
    tcase_add_test_raise_signal(tc, test_embedding_bad_shape, SIGABRT);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
