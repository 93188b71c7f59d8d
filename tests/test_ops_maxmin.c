/* maxmin (GroupSort, groups of 2): forward against the definition, 1-Lipschitz and norm preserving, gradient by finite
 * differences away from ties, ties routed to one input. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static lipt_tensor *build_mm(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    return lipt_maxmin(ctx, in[0]);
}

START_TEST(test_maxmin) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 17);
    lipt_tensor *x = tu_tensor(&rng, 3, (int[]){2, 3, 8}, 1.0f, 1);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *y = lipt_maxmin(&ctx, x);
    double nx = 0, ny = 0;
    for (size_t p = 0; p < x->numel / 2; p++) {
        const float u = x->data[2 * p], v = x->data[2 * p + 1];
        ck_assert(y->data[2 * p] == fmaxf(u, v) && y->data[2 * p + 1] == fminf(u, v));
        nx += (double)u * u + (double)v * v;
        ny += (double)y->data[2 * p] * y->data[2 * p] + (double)y->data[2 * p + 1] * y->data[2 * p + 1];
    }
    ck_assert_msg(fabs(nx - ny) <= 1e-12 * nx, "norm not preserved");
    lipt_ctx_free(&ctx);
    tu_gradcheck_opts o = {8, 1e-4, 1e-3, 5};
    const double e = tu_gradcheck("maxmin", build_mm, NULL, &x, 1, &o);
    ck_assert_msg(e < 1e-3, "maxmin gradcheck %.3e", e);
    /* a tie: the gradient of each output goes to exactly one input, the total is conserved */
    lipt_tensor *t = tu_tensor(&rng, 1, (int[]){2}, 1.0f, 1);
    t->data[0] = t->data[1] = 0.5f;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *o2 = lipt_maxmin(&ctx, t);
    lipt_backward_seeded(&ctx, o2, (float[]){3.0f, 5.0f});
    const float *g = lipt_grad_of(&ctx, t);
    ck_assert(g[0] + g[1] == 8.0f && (g[0] == 3.0f || g[0] == 5.0f));
    lipt_ctx_free(&ctx);
    printf("maxmin: forward exact, norm preserved, gradcheck %.3e, ties routed to one input\n", e);
    tu_free(x);
    tu_free(t);
}
END_TEST

/* The (vectorised) op against the scalar selections, bit for bit, forward and backward: every length up to a few
 * vectors (tails), ties, signed zeros, infinities and NaNs in either position, on 1 and 2 threads (above the
 * parallel threshold too). */
START_TEST(test_maxmin_scalar_reference) {
    const float special[] = {0.0f, -0.0f, 1.0f, 1.0f, -2.0f, INFINITY, -INFINITY, NAN, 3.0f, NAN};
    const int lens[] = {2, 4, 6, 8, 10, 16, 18, 30, 34, 64, 70, 1 << 18};
    for (int threads = 1; threads <= 2; threads++) {
        lipt_set_threads(threads);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int n = lens[li];
            lipt_tensor *x = tu_tensor(NULL, 1, (int[]){n}, 0.0f, 1);
            for (int i = 0; i < n; i++)
                x->data[i] = i % 7 == 3 ? special[(i / 7) % 10] : (float)((i * 37) % 11) - 5.0f;
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 20, 1);
            lipt_tensor *y = lipt_maxmin(&ctx, x);
            float *seed = malloc(sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) seed[i] = (float)(i % 13) + 0.25f;
            lipt_backward_seeded(&ctx, y, seed);
            const float *dx = lipt_grad_of(&ctx, x);
            for (int p = 0; p < n / 2; p++) {
                const float u = x->data[2 * p], v = x->data[2 * p + 1];
                const float y0 = u >= v ? u : v, y1 = u >= v ? v : u;
                const int keep = u >= v;
                const float g0 = 0.0f + (keep ? seed[2 * p] : seed[2 * p + 1]);
                const float g1 = 0.0f + (keep ? seed[2 * p + 1] : seed[2 * p]);
                ck_assert(memcmp(&y->data[2 * p], &y0, 4) == 0 && memcmp(&y->data[2 * p + 1], &y1, 4) == 0);
                ck_assert(memcmp(&dx[2 * p], &g0, 4) == 0 && memcmp(&dx[2 * p + 1], &g1, 4) == 0);
            }
            free(seed);
            lipt_ctx_free(&ctx);
            tu_free(x);
        }
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_maxmin");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, test_maxmin);
    tcase_add_test(tc, test_maxmin_scalar_reference);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
