/* norm_inf: forward against double loops (both transposes, several block counts, threaded sizes), the subgradient
 * by finite differences away from ties and sign changes, the first-argmax rule at ties, and accumulation. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Reference ‖W_b‖_∞ (transpose 0) or ‖W_bᵀ‖_∞ (transpose 1), with the first argmax (row, or global column). */
static double ref_norm(const float *w, int R, int C, int b, int cb, int transpose, int *arg) {
    double best = -1;
    if (!transpose) {
        for (int i = 0; i < R; i++) {
            double s = 0;
            for (int j = b * cb; j < (b + 1) * cb; j++) s += fabs((double)w[i * C + j]);
            if (s > best) { best = s; *arg = i; }
        }
    } else {
        for (int j = b * cb; j < (b + 1) * cb; j++) {
            double s = 0;
            for (int i = 0; i < R; i++) s += fabs((double)w[i * C + j]);
            if (s > best) { best = s; *arg = j; }
        }
    }
    return best;
}

typedef struct { int transpose, nb; } ni_args;

static lipt_tensor *build_ni(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    ni_args *a = user;
    return lipt_norm_inf(ctx, in[0], a->transpose, a->nb);
}

/* R, C, n_blocks */
static const int shapes[][3] = {{1, 1, 1}, {1, 7, 1}, {7, 1, 1}, {1, 6, 3}, {5, 6, 1}, {5, 6, 2}, {5, 6, 3},
                                {5, 6, 6}, {17, 12, 3}, {17, 12, 4}, {13, 9, 1}, {33, 20, 5}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(test_norm_inf_forward) {
    double worst = 0;
    int n = 0;
    for (size_t si = 0; si < N_SHAPES + 2; si++)
        for (int tr = 0; tr < 2; tr++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                /* the last two shapes are big enough for the threaded loops */
                int R = si < N_SHAPES ? shapes[si][0] : 300;
                int C = si < N_SHAPES ? shapes[si][1] : 256;
                int nb = si < N_SHAPES ? shapes[si][2] : (si == N_SHAPES ? 1 : 4), cb = C / nb;
                lipt_rng rng;
                lipt_rng_seed(&rng, 100 * seed + si);
                lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 0);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = lipt_norm_inf(&ctx, W, tr, nb);
                ck_assert_int_eq(o->ndim, 1);
                ck_assert_int_eq(o->shape[0], nb);
                for (int b = 0; b < nb; b++) {
                    int arg;
                    double ref = ref_norm(W->data, R, C, b, cb, tr, &arg);
                    double e = fabs(o->data[b] - ref) / ref;
                    if (e > worst) worst = e;
                    ck_assert_msg(e < 1e-6, "R%d C%d nb%d tr%d block %d: %.8g vs %.8g", R, C, nb, tr, b, o->data[b],
                                  ref);
                    n++;
                }
                lipt_ctx_free(&ctx);
                tu_free(W);
            }
    printf("norm_inf forward: %d block norms, worst rel err %.3e (tol 1e-6)\n", n, worst);
}
END_TEST

START_TEST(test_norm_inf_gradcheck) {
    double worst = 0;
    for (size_t si = 0; si < N_SHAPES; si++)
        for (int tr = 0; tr < 2; tr++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                int R = shapes[si][0], C = shapes[si][1], nb = shapes[si][2], cb = C / nb;
                lipt_rng rng;
                lipt_rng_seed(&rng, 900 * seed + 10 * si + tr);
                lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 1);
                /* away from the kinks: |w| >= 0.2 (no sign change under the FD step of 1e-2) and the winning row or
                 * column of each block scaled up by 1.3 (no change of argmax) */
                for (int k = 0; k < R * C; k++) W->data[k] = copysignf(0.2f + fabsf(W->data[k]), W->data[k]);
                for (int b = 0; b < nb; b++) {
                    int arg;
                    ref_norm(W->data, R, C, b, cb, tr, &arg);
                    if (!tr)
                        for (int j = b * cb; j < (b + 1) * cb; j++) W->data[arg * C + j] *= 1.3f;
                    else
                        for (int i = 0; i < R; i++) W->data[i * C + arg] *= 1.3f;
                }
                char label[64];
                snprintf(label, sizeof label, "norm_inf R%d C%d nb%d tr%d s%d", R, C, nb, tr, (int)seed);
                ni_args args = {tr, nb};
                double g = tu_gradcheck(label, build_ni, &args, (lipt_tensor *[]){W}, 1,
                                        &(tu_gradcheck_opts){.seed = seed, .eps = 1e-2, .tol = 3e-3});
                if (g > worst) worst = g;
                tu_free(W);
            }
    printf("norm_inf gradcheck: worst rel err %.3e (tol 3e-3)\n", worst);
}
END_TEST

/* Exact subgradient: sign(W) on the first argmax row / column only, zero at zero entries, added to what is there. */
START_TEST(test_norm_inf_ties_and_accumulate) {
    /* 4×4, two blocks of 2 columns. Block 0: all four rows tie (abs sum 2) and both columns tie (4): the first
     * wins. Block 1: row 2 wins (sum 3, and it holds a zero entry, whose subgradient is 0), column 3 wins (4.25). */
    static const float w[16] = {
        1, -1, 0.5f, 0.5f,
        -1, 1, 0.25f, 0.25f,
        1, -1, 0.0f, 3.0f,
        -1, 1, 1.0f, -0.5f,
    };
    lipt_tensor *W = tu_tensor(NULL, 2, (int[]){4, 4}, 0, 1);
    memcpy(W->data, w, sizeof w);
    float seed[2] = {1.5f, -2.0f};
    for (int tr = 0; tr < 2; tr++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        float *grad = malloc(16 * sizeof(float));
        for (int k = 0; k < 16; k++) grad[k] = 10.0f;
        W->grad = grad;
        lipt_tensor *o = lipt_norm_inf(&ctx, W, tr, 2);
        const float want_o[2][2] = {{2.0f, 3.0f}, {4.0f, 4.25f}};
        ck_assert_msg(o->data[0] == want_o[tr][0] && o->data[1] == want_o[tr][1], "tr%d norms %g %g", tr, o->data[0],
                      o->data[1]);
        lipt_backward_seeded(&ctx, o, seed);
        float want[16];
        for (int k = 0; k < 16; k++) want[k] = 10.0f;
        const float *x = W->data;
#define SGN(v) ((float)(((v) > 0) - ((v) < 0)))
        if (!tr) {
            for (int j = 0; j < 2; j++) want[0 * 4 + j] += seed[0] * SGN(x[0 * 4 + j]); /* first of the tied rows */
            for (int j = 2; j < 4; j++) want[2 * 4 + j] += seed[1] * SGN(x[2 * 4 + j]); /* row 2, zero entry stays */
        } else {
            for (int i = 0; i < 4; i++) want[i * 4 + 0] += seed[0] * SGN(x[i * 4 + 0]); /* first of the tied columns */
            for (int i = 0; i < 4; i++) want[i * 4 + 3] += seed[1] * SGN(x[i * 4 + 3]);
        }
#undef SGN
        double worst = 0;
        for (int k = 0; k < 16; k++) worst = fmax(worst, fabs(grad[k] - want[k]));
        printf("norm_inf ties + accumulation tr%d: worst abs err %.3e (exact expected)\n", tr, worst);
        ck_assert_msg(worst == 0, "tr%d subgradient off by %.3e", tr, worst);
        W->grad = NULL;
        free(grad);
        lipt_ctx_free(&ctx);
    }
    /* no-grad mode records nothing */
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    lipt_tensor *o = lipt_norm_inf(&ctx, W, 1, 4);
    lipt_no_grad_pop(&ctx);
    ck_assert(!o->requires_grad && ctx.n_nodes == 0);
    lipt_ctx_free(&ctx);
    tu_free(W);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_norm_inf");
    TCase *tc = tcase_create("norm_inf");
    tcase_add_test(tc, test_norm_inf_forward);
    tcase_add_test(tc, test_norm_inf_gradcheck);
    tcase_add_test(tc, test_norm_inf_ties_and_accumulate);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
