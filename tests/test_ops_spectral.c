/* spectral_norm: forward against the largest singular value from a Jacobi eigensolver in double (per column block),
 * zero-vector re-seeding, monotone convergence of the persistent vectors over repeated calls, the saved copies of
 * u and v, accumulation, and the gradient u vᵀ by finite differences with the vectors held fixed (iters = 0). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest eigenvalue of the symmetric n×n matrix A (destroyed) by cyclic Jacobi rotations, in double. */
static double jacobi_max_eig(double *A, int n) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, tot = 0;
        for (int p = 0; p < n; p++)
            for (int q = 0; q < n; q++) {
                tot += A[p * n + q] * A[p * n + q];
                if (p != q) off += A[p * n + q] * A[p * n + q];
            }
        if (off <= 1e-30 * tot) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = A[p * n + q];
                if (apq == 0) continue;
                double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* A <- A J */
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = c * akp - s * akq;
                    A[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* A <- Jᵀ A */
                    double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = c * apk - s * aqk;
                    A[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, A[i * n + i]);
    return m;
}

/* Reference ‖W_b‖₂ for the R×cb column block b of w [R, C]: sqrt of the top eigenvalue of the smaller Gram matrix. */
static double ref_sigma(const float *w, int R, int C, int b, int cb) {
    int n = R < cb ? R : cb, rows = R < cb;
    double *G = calloc((size_t)n * n, sizeof(double));
    for (int p = 0; p < n; p++)
        for (int q = 0; q < n; q++) {
            double s = 0;
            if (rows) /* W Wᵀ */
                for (int j = 0; j < cb; j++) s += (double)w[p * C + b * cb + j] * w[q * C + b * cb + j];
            else /* Wᵀ W */
                for (int i = 0; i < R; i++) s += (double)w[i * C + b * cb + p] * w[i * C + b * cb + q];
            G[p * n + q] = s;
        }
    double l = jacobi_max_eig(G, n);
    free(G);
    return sqrt(l);
}

static double vnorm(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

typedef struct { float *u, *v; int nb, iters; } sn_args;

static lipt_tensor *build_sn(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    sn_args *a = user;
    return lipt_spectral_norm(ctx, in[0], a->u, a->v, a->nb, a->iters);
}

/* R, C, n_blocks */
static const int shapes[][3] = {{1, 1, 1}, {1, 7, 1}, {7, 1, 1}, {5, 3, 1}, {3, 5, 1}, {17, 13, 1},
                                {9, 12, 3}, {8, 8, 4}, {1, 6, 3}, {6, 4, 4}, {32, 64, 4}, {23, 40, 5}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

START_TEST(test_spectral_forward) {
    double worst = 0, worst_unit = 0;
    for (size_t si = 0; si < N_SHAPES; si++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            int R = shapes[si][0], C = shapes[si][1], nb = shapes[si][2], cb = C / nb;
            lipt_rng rng;
            lipt_rng_seed(&rng, 1000 * seed + si);
            lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, seed == 3 ? 5.0f : 1.0f, 0);
            float *u = calloc((size_t)nb * R, sizeof(float)), *v = calloc((size_t)C, sizeof(float));
            if (seed != 2) { /* seed 2 starts from zero vectors (fresh model buffers) */
                lipt_rng_fill_normal(&rng, u, (size_t)nb * R, 1.0f);
                lipt_rng_fill_normal(&rng, v, (size_t)C, 1.0f);
            }
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *s = lipt_spectral_norm(&ctx, W, u, v, nb, 1000);
            ck_assert_int_eq(s->ndim, 1);
            ck_assert_int_eq(s->shape[0], nb);
            for (int b = 0; b < nb; b++) {
                double ref = ref_sigma(W->data, R, C, b, cb);
                double e = fabs(s->data[b] - ref) / ref;
                if (e > worst) worst = e;
                ck_assert_msg(e < 2e-6, "R%d C%d nb%d seed%d block %d: sigma %.8g vs ref %.8g (rel %.3e)", R, C, nb,
                              (int)seed, b, s->data[b], ref, e);
                double eu = fabs(vnorm(u + b * R, R) - 1), ev = fabs(vnorm(v + b * cb, cb) - 1);
                worst_unit = fmax(worst_unit, fmax(eu, ev));
                ck_assert_msg(eu < 1e-6 && ev < 1e-6, "vectors not unit: |u|-1 %.3e |v|-1 %.3e", eu, ev);
            }
            lipt_ctx_free(&ctx);
            free(u);
            free(v);
            tu_free(W);
        }
    printf("spectral forward: %zu shapes x 3 seeds, worst rel err vs Jacobi %.3e (tol 2e-6), worst ||u|,|v|-1| %.3e\n",
           N_SHAPES, worst, worst_unit);
}
END_TEST

/* Big enough to take the threaded paths; a planted rank-one spike per block keeps power iteration fast, and the
 * reference is a double power iteration in the test. */
START_TEST(test_spectral_large_threaded) {
    const int R = 300, C = 512;
    double worst = 0;
    for (int nb = 1; nb <= 4; nb *= 4) {
        int cb = C / nb;
        lipt_rng rng;
        lipt_rng_seed(&rng, 77 + nb);
        lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 0.05f, 0);
        float *a = malloc(R * sizeof(float)), *bv = malloc(C * sizeof(float));
        lipt_rng_fill_normal(&rng, a, R, 1.0f);
        lipt_rng_fill_normal(&rng, bv, C, 1.0f);
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) W->data[i * C + j] += 0.02f * a[i] * bv[j] * (1 + j / cb);
        float *u = calloc((size_t)nb * R, sizeof(float)), *v = calloc(C, sizeof(float));
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *s = lipt_spectral_norm(&ctx, W, u, v, nb, 200);
        for (int b = 0; b < nb; b++) {
            double *x = malloc(cb * sizeof(double)), *y = malloc(R * sizeof(double)), sig = 0;
            for (int j = 0; j < cb; j++) x[j] = 1.0 + 0.01 * j;
            for (int it = 0; it < 150; it++) {
                for (int i = 0; i < R; i++) {
                    y[i] = 0;
                    for (int j = 0; j < cb; j++) y[i] += (double)W->data[i * C + b * cb + j] * x[j];
                }
                for (int j = 0; j < cb; j++) x[j] = 0;
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < cb; j++) x[j] += (double)W->data[i * C + b * cb + j] * y[i];
                double xn = 0;
                for (int j = 0; j < cb; j++) xn += x[j] * x[j];
                xn = sqrt(xn);
                for (int j = 0; j < cb; j++) x[j] /= xn;
                sig = sqrt(xn); /* |Wᵀ W x_prev| -> σ² */
            }
            double e = fabs(s->data[b] - sig) / sig;
            if (e > worst) worst = e;
            ck_assert_msg(e < 2e-6, "large nb%d block %d: %.8g vs %.8g", nb, b, s->data[b], sig);
            free(x);
            free(y);
        }
        lipt_ctx_free(&ctx);
        free(a);
        free(bv);
        free(u);
        free(v);
        tu_free(W);
    }
    printf("spectral large (300x512, 1 and 4 blocks, threaded): worst rel err %.3e (tol 2e-6)\n", worst);
}
END_TEST

START_TEST(test_spectral_reseed) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    /* zero start: one round must already give a finite positive sigma and unit vectors */
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    lipt_tensor *W = tu_tensor(&rng, 2, (int[]){6, 9}, 1.0f, 0);
    float u[18] = {0}, v[9] = {0};
    lipt_tensor *s = lipt_spectral_norm(&ctx, W, u, v, 3, 1);
    for (int b = 0; b < 3; b++) {
        ck_assert_msg(isfinite(s->data[b]) && s->data[b] > 0, "block %d sigma %g after reseed", b, s->data[b]);
        ck_assert(fabs(vnorm(u + 6 * b, 6) - 1) < 1e-6 && fabs(vnorm(v + 3 * b, 3) - 1) < 1e-6);
    }
    /* the re-seed is deterministic */
    float u2[18] = {0}, v2[9] = {0};
    lipt_spectral_norm(&ctx, W, u2, v2, 3, 1);
    ck_assert(memcmp(u, u2, sizeof u) == 0 && memcmp(v, v2, sizeof v) == 0);
    /* iters = 0 on zero vectors: sigma 0, vectors untouched */
    float uz[6] = {0}, vz[9] = {0};
    s = lipt_spectral_norm(&ctx, W, uz, vz, 1, 0);
    ck_assert(s->data[0] == 0 && vnorm(uz, 6) == 0);

    /* u orthogonal to W's range: Wᵀu = 0 */
    lipt_tensor *Z = tu_tensor(NULL, 2, (int[]){3, 3}, 0, 0);
    Z->data[0] = 2.0f;
    float u3[3] = {0, 1, 0}, v3[3] = {0, 0, 1};
    s = lipt_spectral_norm(&ctx, Z, u3, v3, 1, 2); /* round 1 re-seeds v, round 2 aligns it */
    ck_assert_msg(fabs(s->data[0] - 2.0f) < 1e-6, "rank-one sigma %g, want 2", s->data[0]);
    ck_assert(fabs(fabsf(u3[0]) - 1) < 1e-6);
    /* W = 0: sigma 0, vectors stay finite unit vectors */
    Z->data[0] = 0;
    s = lipt_spectral_norm(&ctx, Z, u3, v3, 1, 3);
    ck_assert(s->data[0] == 0);
    ck_assert(fabs(vnorm(u3, 3) - 1) < 1e-6 && fabs(vnorm(v3, 3) - 1) < 1e-6);
    /* non-finite vectors are replaced rather than propagated */
    float un[3] = {NAN, 1, 0}, vn[3] = {0, 0, 0};
    Z->data[4] = 3.0f;
    s = lipt_spectral_norm(&ctx, Z, un, vn, 1, 2);
    ck_assert_msg(fabs(s->data[0] - 3.0f) < 1e-6, "sigma %g from NaN start, want 3", s->data[0]);
    printf("spectral reseed: zero, orthogonal, zero-matrix and NaN starts all give finite unit vectors\n");
    tu_free(Z);
    tu_free(W);
    lipt_ctx_free(&ctx);
}
END_TEST

START_TEST(test_spectral_convergence) {
    double worst_drop = 0, worst_final = 0, worst_split = 0;
    const int cases[][3] = {{20, 15, 1}, {12, 30, 3}, {7, 7, 1}};
    for (size_t ci = 0; ci < 3; ci++) {
        int R = cases[ci][0], C = cases[ci][1], nb = cases[ci][2], cb = C / nb;
        lipt_rng rng;
        lipt_rng_seed(&rng, 31 + ci);
        lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 0);
        float *u = malloc(nb * R * sizeof(float)), *v = malloc(C * sizeof(float));
        lipt_rng_fill_normal(&rng, u, nb * R, 1.0f);
        lipt_rng_fill_normal(&rng, v, C, 1.0f);
        float *u5 = malloc(nb * R * sizeof(float)), *v5 = malloc(C * sizeof(float));
        memcpy(u5, u, nb * R * sizeof(float));
        memcpy(v5, v, C * sizeof(float));
        double ref[8], prev[8];
        for (int b = 0; b < nb; b++) { ref[b] = ref_sigma(W->data, R, C, b, cb); prev[b] = 0; }
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        for (int k = 1; k <= 300; k++) {
            lipt_ctx_reset(&ctx);
            lipt_tensor *s = lipt_spectral_norm(&ctx, W, u, v, nb, 1);
            for (int b = 0; b < nb; b++) {
                /* Rayleigh quotients of power iterates never decrease, and never pass the true norm */
                double drop = (prev[b] - s->data[b]) / ref[b];
                if (drop > worst_drop) worst_drop = drop;
                ck_assert_msg(drop < 1e-6, "case %zu block %d call %d: sigma fell %.8g -> %.8g", ci, b, k, prev[b],
                              s->data[b]);
                ck_assert_msg(s->data[b] <= ref[b] * (1 + 1e-6), "sigma %.8g above the true %.8g", s->data[b], ref[b]);
                prev[b] = s->data[b];
            }
            if (k == 5) {
                /* five calls of one round agree with one call of five rounds */
                lipt_tensor *s5 = lipt_spectral_norm(&ctx, W, u5, v5, nb, 5);
                for (int b = 0; b < nb; b++) {
                    double e = fabs(s5->data[b] - s->data[b]) / ref[b];
                    if (e > worst_split) worst_split = e;
                    ck_assert_msg(e < 1e-5, "5x1 vs 1x5 rounds: %.8g vs %.8g", s->data[b], s5->data[b]);
                }
            }
        }
        for (int b = 0; b < nb; b++) {
            double e = fabs(prev[b] - ref[b]) / ref[b];
            if (e > worst_final) worst_final = e;
            ck_assert_msg(e < 1e-5, "case %zu block %d: after 300 calls %.8g vs %.8g", ci, b, prev[b], ref[b]);
        }
        lipt_ctx_free(&ctx);
        free(u); free(v); free(u5); free(v5);
        tu_free(W);
    }
    printf("spectral convergence: worst relative drop between calls %.3e (tol 1e-6), worst final rel err %.3e "
           "(tol 1e-5), 5x1 vs 1x5 rounds %.3e\n", worst_drop, worst_final, worst_split);
}
END_TEST

START_TEST(test_spectral_gradcheck) {
    double worst = 0;
    for (size_t si = 0; si < N_SHAPES; si++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            int R = shapes[si][0], C = shapes[si][1], nb = shapes[si][2];
            lipt_rng rng;
            lipt_rng_seed(&rng, 500 * seed + si);
            lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 1);
            float *u = calloc((size_t)nb * R, sizeof(float)), *v = calloc(C, sizeof(float));
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_no_grad_push(&ctx);
            lipt_spectral_norm(&ctx, W, u, v, nb, 20); /* warm-up */
            lipt_no_grad_pop(&ctx);
            lipt_ctx_free(&ctx);
            char label[64];
            snprintf(label, sizeof label, "spectral R%d C%d nb%d s%d", R, C, nb, (int)seed);
            sn_args args = {u, v, nb, 0};
            double g = tu_gradcheck(label, build_sn, &args, (lipt_tensor *[]){W}, 1,
                                    &(tu_gradcheck_opts){.seed = seed, .eps = 1e-2, .tol = 3e-3});
            if (g > worst) worst = g;
            free(u);
            free(v);
            tu_free(W);
        }
    printf("spectral gradcheck (iters=0 after warm-up): worst rel err %.3e (tol 3e-3)\n", worst);
}
END_TEST

/* Backward uses the vectors of the forward call, even when the persistent ones move on before backward runs;
 * it adds to an existing gradient; no-grad mode records nothing. */
START_TEST(test_spectral_saved_and_accumulate) {
    const int R = 5, C = 6, nb = 2, cb = 3;
    lipt_rng rng;
    lipt_rng_seed(&rng, 9);
    lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 1);
    float u[10], v[6], uf[10], vf[6], g0[30], seed[2] = {0.7f, -1.3f};
    lipt_rng_fill_normal(&rng, u, 10, 1.0f);
    lipt_rng_fill_normal(&rng, v, 6, 1.0f);
    for (int i = 0; i < 30; i++) g0[i] = 0.25f * (float)i;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *s = lipt_spectral_norm(&ctx, W, u, v, nb, 3);
    ck_assert(s->requires_grad && ctx.n_nodes == 1);
    memcpy(uf, u, sizeof u);
    memcpy(vf, v, sizeof v);
    /* the persistent vectors change before backward */
    lipt_no_grad_push(&ctx);
    size_t nodes = ctx.n_nodes;
    lipt_tensor *s2 = lipt_spectral_norm(&ctx, W, u, v, nb, 4);
    ck_assert(!s2->requires_grad && ctx.n_nodes == nodes);
    lipt_no_grad_pop(&ctx);
    for (int i = 0; i < 10; i++) u[i] = 100.0f;
    float *grad = malloc(30 * sizeof(float));
    memcpy(grad, g0, sizeof g0);
    W->grad = grad;
    lipt_backward_seeded(&ctx, s, seed);
    double worst = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            int b = j / cb;
            double want = g0[i * C + j] + (double)seed[b] * uf[b * R + i] * vf[j];
            worst = fmax(worst, fabs(grad[i * C + j] - want));
        }
    printf("spectral saved vectors + accumulation: worst abs err %.3e (tol 1e-6)\n", worst);
    ck_assert_msg(worst < 1e-6, "dW != g0 + dsigma u vᵀ (err %.3e)", worst);
    W->grad = NULL;
    free(grad);
    /* an input without requires_grad records nothing */
    W->requires_grad = 0;
    nodes = ctx.n_nodes;
    s = lipt_spectral_norm(&ctx, W, u, v, nb, 1);
    ck_assert(!s->requires_grad && ctx.n_nodes == nodes);
    lipt_ctx_free(&ctx);
    tu_free(W);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_spectral");
    TCase *tc = tcase_create("spectral");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_spectral_forward);
    tcase_add_test(tc, test_spectral_large_threaded);
    tcase_add_test(tc, test_spectral_reseed);
    tcase_add_test(tc, test_spectral_convergence);
    tcase_add_test(tc, test_spectral_gradcheck);
    tcase_add_test(tc, test_spectral_saved_and_accumulate);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
