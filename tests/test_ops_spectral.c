/* spectral_norm: forward against the largest singular value from a long double eigensolver (per column block),
 * zero-vector re-seeding, monotone convergence of the persistent vectors over repeated calls, the saved copies of
 * u and v, accumulation, and the gradient u vᵀ by finite differences with the vectors held fixed (iters = 0).
 * spectral_ub / spectral_norm_ub: the Gram-iteration bound never below the exact sigma, within r^(1/2^(t+2)) of it,
 * special inputs, the op's gradient and power vectors, thread invariance, timings; with LIPT_SPECTRAL_CHOLESKY the
 * Cholesky-verified bound on the same cases, and its proof step against spectra known exactly. */
#include "testutil.h"

#include "lipschitz/spectral_impl.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Largest eigenvalue of the symmetric n×n matrix A (destroyed), in long double (x87: u = 2^-64): Householder
 * reduction to tridiagonal form, then bisection on the Sturm count down to adjacent long doubles. Both steps are
 * backward stable, so the error is a small multiple of n u ‖A‖ (below 1e-16 relative for the top eigenvalue of the
 * Gram matrices here), and it costs (4/3) n³ rather than cyclic Jacobi's ~20 n³ (the suite's references took 60 % of
 * its time with Jacobi). */
static long double max_eig_ld(long double *A, int n) {
    long double *d = malloc((size_t)n * sizeof *d), *e = calloc((size_t)n, sizeof *e);
    long double *v = malloc((size_t)n * sizeof *v), *w = malloc((size_t)n * sizeof *w);
    for (int k = 0; k + 2 < n; k++) { /* zero column k below its subdiagonal: A <- H A H, H = I - beta v vᵀ */
        long double xn = 0;
        for (int i = k + 1; i < n; i++) xn += A[i * n + k] * A[i * n + k];
        xn = sqrtl(xn);
        const long double x0 = A[(k + 1) * n + k], alpha = x0 > 0 ? -xn : xn;
        long double vv = 0;
        for (int i = k + 1; i < n; i++) v[i] = A[i * n + k] - (i == k + 1 ? alpha : 0), vv += v[i] * v[i];
        if (vv == 0) continue;
        const long double beta = 2 / vv;
        long double vp = 0;
        for (int i = k + 1; i < n; i++) { /* w = beta A v, over the trailing block */
            long double s = 0;
            for (int j = k + 1; j < n; j++) s += A[i * n + j] * v[j];
            w[i] = beta * s, vp += v[i] * w[i];
        }
        const long double K = beta * vp / 2;
        for (int i = k + 1; i < n; i++) w[i] -= K * v[i];
        for (int i = k + 1; i < n; i++)
            for (int j = k + 1; j < n; j++) A[i * n + j] -= v[i] * w[j] + w[i] * v[j];
        A[(k + 1) * n + k] = alpha;
    }
    long double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        d[i] = A[i * n + i];
        if (i + 1 < n) e[i] = A[(i + 1) * n + i];
    }
    for (int i = 0; i < n; i++) { /* Gershgorin interval */
        const long double r = fabsl(e[i]) + (i ? fabsl(e[i - 1]) : 0);
        lo = i == 0 || d[i] - r < lo ? d[i] - r : lo;
        hi = i == 0 || d[i] + r > hi ? d[i] + r : hi;
    }
    for (int it = 0; it < 400; it++) { /* invariant: fewer than n eigenvalues below lo, all n below or at hi */
        const long double mid = lo + (hi - lo) / 2;
        if (mid <= lo || mid >= hi) break;
        int below = 0;
        long double q = 1;
        for (int i = 0; i < n; i++) {
            q = d[i] - mid - (i ? e[i - 1] * e[i - 1] / q : 0);
            if (q == 0) q = -LDBL_MIN; /* a zero pivot: perturb by the least amount */
            below += q < 0;
        }
        if (below == n) hi = mid; else lo = mid;
    }
    free(d), free(e), free(v), free(w);
    return hi;
}

static double ref_sigma_f(const float *w, int R, int C, int c0, int cb);
/* Reference ‖W_b‖₂ for the R×cb column block b of w [R, C] (ref_sigma_f below: the top eigenvalue of the smaller Gram
 * matrix, accumulated and reduced in long double). */
static double ref_sigma(const float *w, int R, int C, int b, int cb) { return ref_sigma_f(w, R, C, b * cb, cb); }

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
    printf("spectral forward: %zu shapes x 3 seeds, worst rel err vs reference %.3e (tol 2e-6), worst ||u|,|v|-1| %.3e\n",
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

/* ---- spectral_ub / spectral_norm_ub: certified upper bounds by Gram iteration ----
 * The reference is max_eig_ld (above) on a Gram matrix accumulated in long double, so its relative error (~1e-16 or
 * less) is far below the 1e-12 the assertions allow it. */

/* Exact-to-~1e-16 ‖W_b‖₂ of the R×cb block at column c0 of the double matrix w [R, C]. */
static double ref_sigma_ld(const double *w, int R, int C, int c0, int cb) {
    int rows = cb > R, n = rows ? R : cb;
    long double *G = malloc((size_t)n * n * sizeof(long double));
    for (int p = 0; p < n; p++)
        for (int q = p; q < n; q++) {
            long double s = 0;
            if (rows)
                for (int j = 0; j < cb; j++) s += (long double)w[(size_t)p * C + c0 + j] * w[(size_t)q * C + c0 + j];
            else
                for (int i = 0; i < R; i++) s += (long double)w[(size_t)i * C + c0 + p] * w[(size_t)i * C + c0 + q];
            G[p * n + q] = G[q * n + p] = s;
        }
    long double l = max_eig_ld(G, n);
    free(G);
    return (double)sqrtl(l > 0 ? l : 0);
}

static double ref_sigma_f(const float *w, int R, int C, int c0, int cb) {
    double *d = malloc((size_t)R * C * sizeof(double));
    for (size_t i = 0; i < (size_t)R * C; i++) d[i] = w[i];
    double s = ref_sigma_ld(d, R, C, c0, cb);
    free(d);
    return s;
}

/* k orthonormal columns of length n (row-major n×k), from Gaussian columns by modified Gram-Schmidt done twice. */
static void rand_orth(lipt_rng *rng, double *Q, int n, int k) {
    for (int i = 0; i < n * k; i++) Q[i] = lipt_rng_normal(rng);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < k; j++) {
            for (int l = 0; l < j; l++) {
                double d = 0;
                for (int i = 0; i < n; i++) d += Q[i * k + l] * Q[i * k + j];
                for (int i = 0; i < n; i++) Q[i * k + j] -= d * Q[i * k + l];
            }
            double s = 0;
            for (int i = 0; i < n; i++) s += Q[i * k + j] * Q[i * k + j];
            s = sqrt(s);
            for (int i = 0; i < n; i++) Q[i * k + j] /= s;
        }
}

enum { UB_GAUSS, UB_RANK, UB_DEGEN, UB_IDENT, UB_ZERO, UB_NONFINITE };

typedef struct {
    const char *name;
    int R, C, nb, kind, k; /* k: rank (UB_RANK), number of equal top singular values (UB_DEGEN) */
    double scale;
} ub_case;

static const ub_case ub_cases[] = {
    {"gauss 12x20", 12, 20, 1, UB_GAUSS, 0, 1},        {"gauss 12x20 nb4", 12, 20, 4, UB_GAUSS, 0, 1},
    {"gauss 64x64", 64, 64, 1, UB_GAUSS, 0, 1},        {"gauss 64x64 nb4", 64, 64, 4, UB_GAUSS, 0, 1},
    {"gauss 256x64", 256, 64, 1, UB_GAUSS, 0, 1},      {"gauss 256x64 nb4", 256, 64, 4, UB_GAUSS, 0, 1},
    {"gauss 64x256", 64, 256, 1, UB_GAUSS, 0, 1},      {"gauss 64x256 nb4", 64, 256, 4, UB_GAUSS, 0, 1},
    {"gauss 256x256", 256, 256, 1, UB_GAUSS, 0, 1},    {"gauss 256x256 nb4", 256, 256, 4, UB_GAUSS, 0, 1},
    {"gauss 256x1024", 256, 1024, 1, UB_GAUSS, 0, 1},  {"gauss 256x1024 nb4", 256, 1024, 4, UB_GAUSS, 0, 1},
    {"rank1 96x128", 96, 128, 1, UB_RANK, 1, 1},       {"rank3 64x256", 64, 256, 1, UB_RANK, 3, 1},
    {"rank3 64x256 nb4", 64, 256, 4, UB_RANK, 3, 1},   {"top2 64x64", 64, 64, 1, UB_DEGEN, 2, 1},
    {"top2 64x256 nb4", 64, 256, 4, UB_DEGEN, 2, 1},   {"top16 128x64", 128, 64, 1, UB_DEGEN, 16, 1},
    {"top16 256x256", 256, 256, 1, UB_DEGEN, 16, 1},   {"gauss 64x64 *1e-20", 64, 64, 1, UB_GAUSS, 0, 1e-20},
    {"gauss 64x64 *1e20", 64, 64, 1, UB_GAUSS, 0, 1e20}, {"gauss 12x20 *1e-40", 12, 20, 1, UB_GAUSS, 0, 1e-40},
    {"gauss 12x20 *1e36", 12, 20, 1, UB_GAUSS, 0, 1e36}, {"top16 64x64 *1e-20", 64, 64, 1, UB_DEGEN, 16, 1e-20},
    {"identity 1024", 1024, 1024, 1, UB_IDENT, 0, 1},
};
#define N_UB_CASES (sizeof ub_cases / sizeof ub_cases[0])

/* The case's float matrix [R, C]; degenerate and low-rank structure is built per column block. */
static float *ub_matrix(const ub_case *c, uint64_t seed) {
    int R = c->R, C = c->C, cb = C / c->nb;
    float *w = calloc((size_t)R * C, sizeof(float));
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    if (c->kind == UB_GAUSS) {
        for (size_t i = 0; i < (size_t)R * C; i++) w[i] = (float)(lipt_rng_normal(&rng) * c->scale);
    } else if (c->kind == UB_IDENT) {
        for (int i = 0; i < R && i < C; i++) w[(size_t)i * C + i] = 1.0f;
    } else if (c->kind == UB_RANK) {
        /* small integers times 2^-6: every product and sum is exact in float, so the rank is exactly k */
        for (int b = 0; b < c->nb; b++)
            for (int l = 0; l < c->k; l++) {
                int *a = malloc(R * sizeof(int)), *bb = malloc(cb * sizeof(int));
                for (int i = 0; i < R; i++) a[i] = (int)lipt_rng_below(&rng, 129) - 64;
                for (int j = 0; j < cb; j++) bb[j] = (int)lipt_rng_below(&rng, 129) - 64;
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < cb; j++) w[(size_t)i * C + b * cb + j] += (float)(a[i] * bb[j]) * 0x1p-6f;
                free(a);
                free(bb);
            }
    } else if (c->kind == UB_DEGEN) {
        /* U diag(s) Vᵀ with the top k singular values within 1e-9 of each other, rounded to float */
        int k = R < cb ? R : cb;
        double *U = malloc((size_t)R * k * sizeof(double)), *V = malloc((size_t)cb * k * sizeof(double));
        double *s = malloc(k * sizeof(double));
        for (int b = 0; b < c->nb; b++) {
            rand_orth(&rng, U, R, k);
            rand_orth(&rng, V, cb, k);
            for (int l = 0; l < k; l++)
                s[l] = l < c->k ? 1 - 1e-9 * l / (c->k - 1) : 0.95 * (1 - (double)l / k);
            for (int i = 0; i < R; i++)
                for (int j = 0; j < cb; j++) {
                    double x = 0;
                    for (int l = 0; l < k; l++) x += U[i * k + l] * s[l] * V[j * k + l];
                    w[(size_t)i * C + b * cb + j] = (float)(x * c->scale);
                }
        }
        free(U);
        free(V);
        free(s);
    }
    return w;
}

static const int ub_ts[] = {4, 6, 8, 10, LIPT_SPECTRAL_UB_ITERS_REPORT, 12};

/* gamma_n in float, n u_f / (1 - n u_f): the scale of the float squarings' error terms (spectral.c) */
static double gamma_f(int n) { return n * 0x1p-24 / (1 - n * 0x1p-24); }
#define N_UB_TS (int)(sizeof ub_ts / sizeof ub_ts[0])

/* bound >= sigma always (up to the reference's own error, 1e-12 relative), bound <= r^(1/2^(t+2)) sigma
 * (1 + 4 gamma_f(n)) for every t (the exact-arithmetic worst case plus the rounding margin of the float squarings,
 * measured up to 3e-5 on the 1024 identity), converged Gaussian blocks within 16 gamma_f(n) of sigma (measured 1e-4 at
 * n = 256), and <= (1 + 1e-3) sigma at t = LIPT_SPECTRAL_UB_ITERS_REPORT; prints bound/sigma - 1 per case (worst
 * block) and t, and the largest excess over r^(1/2^(t+2)). */
START_TEST(test_spectral_ub_bounds) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    double min_excess = INFINITY, worst_report = 0;
    printf("spectral_ub: bound/sigma - 1 (worst block) for t =");
    for (int ti = 0; ti < N_UB_TS; ti++) printf(" %9d", ub_ts[ti]);
    printf("\n");
    for (size_t ci = 0; ci < N_UB_CASES; ci++) {
        const ub_case *c = &ub_cases[ci];
        int R = c->R, C = c->C, nb = c->nb, cb = C / nb, n = R < cb ? R : cb;
        float *w = ub_matrix(c, 4242 + ci);
        double worst[N_UB_TS] = {0}, over_theo = -INFINITY;
        for (int b = 0; b < nb; b++) {
            double sigma = c->kind == UB_IDENT ? 1.0 : ref_sigma_f(w, R, C, b * cb, cb);
            int r = c->kind == UB_RANK ? c->k : n;
            for (int ti = 0; ti < N_UB_TS; ti++) {
                int t = ub_ts[ti];
                double ub = lipt_spectral_ub(&ctx, w, R, C, b * cb, cb, t);
                double ex = ub / sigma - 1;
                min_excess = fmin(min_excess, ex);
                worst[ti] = fmax(worst[ti], ex);
                ck_assert_msg(ub >= sigma * (1 - 1e-12), "%s block %d t=%d: bound %.17g below sigma %.17g (%.3e)",
                              c->name, b, t, ub, sigma, ex);
                double theo = pow((double)r, ldexp(1.0, -(t + 2)));
                over_theo = fmax(over_theo, ub / (sigma * theo) - 1);
                ck_assert_msg(ub <= sigma * theo * (1 + 4 * gamma_f(n)),
                              "%s block %d t=%d: bound/sigma %.12g above r^(1/2^(t+2)) = %.12g (r = %d)", c->name, b,
                              t, ub / sigma, theo, r);
                if (c->kind == UB_GAUSS && t >= 8) /* the Gram bound has converged: the rest is rounding margin */
                    ck_assert_msg(ex <= 16 * gamma_f(n), "%s block %d t=%d: bound/sigma - 1 = %.3e > 16 gamma_f(%d)",
                                  c->name, b, t, ex, n);
                if (t == LIPT_SPECTRAL_UB_ITERS_REPORT) {
                    worst_report = fmax(worst_report, ex);
                    ck_assert_msg(ub <= sigma * (1 + 1e-3), "%s block %d t=%d: bound/sigma %.9g > 1.001", c->name, b, t,
                                  ub / sigma);
                }
            }
        }
        printf("  %-22s", c->name);
        for (int ti = 0; ti < N_UB_TS; ti++) printf(" %9.2e", worst[ti]);
        printf("   over r^(1/2^(t+2)): %9.2e\n", over_theo);
        free(w);
    }
    /* the identity is the Gram bound's worst case and its squarings are exact: the excess over 1024^(1/2^(t+2)) is
     * the margin the float squarings' error terms add, at most gamma_f(n) Σ_k 2^-(k+2) < gamma_f(n) / 2 here
     * (min(‖G‖_F, ‖|G|‖_∞) = rho at every level) */
    float *id = ub_matrix(&ub_cases[N_UB_CASES - 1], 0);
    double margin = lipt_spectral_ub(&ctx, id, 1024, 1024, 0, 1024, LIPT_SPECTRAL_UB_ITERS_REPORT) /
                        pow(1024.0, ldexp(1.0, -(LIPT_SPECTRAL_UB_ITERS_REPORT + 2))) - 1;
    free(id);
    printf("spectral_ub: %zu cases, smallest bound/sigma - 1 = %.3e (must be >= -1e-12), worst at t=%d %.3e "
           "(tol 1e-3); rounding margin on the 1024 identity at t=%d: %.3e\n", N_UB_CASES, min_excess,
           LIPT_SPECTRAL_UB_ITERS_REPORT, worst_report, LIPT_SPECTRAL_UB_ITERS_REPORT, margin);
    ck_assert_msg(margin >= 0 && margin < gamma_f(1024) / 2 + 1e-9, "identity margin %.3e", margin);
    lipt_ctx_free(&ctx);
}
END_TEST

/* lipt_spectral_gram against a long double reference, entrywise within the gamma_m bound the analysis assumes,
 * |c_ij - H_ij| <= gamma_m Σ_k |a_ik a_jk| (plus the reference's own error, below m 2^-63 of the same sum), on shapes
 * whose sides are not multiples of the tiles or of the vector width (n < 8, odd m, a block at a column offset), with
 * entries spread over 2^±20; and bitwise the same with 1 and 2 threads (256×1024 and 1024×256 take two threads). */
START_TEST(test_spectral_gram) {
    const int shp[][4] = {{1, 1, 0, 1},    {3, 3, 0, 3},     {5, 100, 0, 100}, {100, 5, 0, 5},     {13, 37, 0, 37},
                          {37, 13, 0, 13}, {67, 129, 0, 129}, {129, 67, 0, 67}, {9, 50, 7, 31},     {50, 40, 3, 17},
                          {256, 1024, 0, 1024}, {1024, 256, 0, 256}, {256, 300, 20, 64}, {255, 257, 1, 255}};
    lipt_rng rng;
    lipt_rng_seed(&rng, 4711);
    double worst = 0;
    for (size_t si = 0; si < sizeof shp / sizeof shp[0]; si++) {
        const int R = shp[si][0], C = shp[si][1], c0 = shp[si][2], cb = shp[si][3];
        const int trans = !(cb > R), n = trans ? cb : R, m = trans ? R : cb;
        float *w = malloc((size_t)R * C * sizeof(float));
        for (size_t i = 0; i < (size_t)R * C; i++)
            w[i] = ldexpf(lipt_rng_normal(&rng), (int)lipt_rng_below(&rng, 41) - 20);
        double *c[2], *xs = malloc(lipt_spectral_gram_scratch((size_t)n, (size_t)m) * sizeof(double));
        for (int pass = 0; pass < 2; pass++) {
            lipt_set_threads(pass + 1);
            c[pass] = malloc((size_t)n * n * sizeof(double));
            lipt_spectral_gram(trans, n, m, w + c0, C, c[pass], xs);
        }
        lipt_set_threads(2);
        const double g = m * 0x1p-53 / (1 - m * 0x1p-53);
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) {
                long double ref = 0, mag = 0;
                for (int k = 0; k < m; k++) {
                    const long double p = trans ? (long double)w[(size_t)k * C + c0 + i] * w[(size_t)k * C + c0 + j]
                                                : (long double)w[(size_t)i * C + c0 + k] * w[(size_t)j * C + c0 + k];
                    ref += p;
                    mag += fabsl(p);
                }
                const double x = c[0][(size_t)i * n + j], err = (double)fabsl(x - ref), tol = (double)mag * (g + m * 0x1p-63);
                ck_assert_msg(err <= tol, "%dx%d [%d, +%d): entry (%d, %d) = %.17g off by %.3e > %.3e", R, C, c0, cb, i, j,
                              x, err, tol);
                ck_assert_msg(memcmp(&x, &c[1][(size_t)i * n + j], sizeof x) == 0, "%dx%d: (%d, %d) differs on 2 threads",
                              R, C, i, j);
                if (mag > 0) worst = fmax(worst, err / ((double)mag * g));
            }
        free(c[0]);
        free(c[1]);
        free(xs);
        free(w);
    }
    printf("spectral gram: %zu shapes, worst entry error %.3f of gamma_m sum|a a|, 1 and 2 threads bitwise equal\n",
           sizeof shp / sizeof shp[0], worst);
}
END_TEST

/* The proof step alone: H = Q diag(λ) Qᵀ with λ_max = 1 (Q orthonormal, formed in double, so H's own top eigenvalue
 * is 1 to about 1e-15). Certifying μ = 1 - 1e-9 must fail (μ is below λ_max(H): "success" there would be a false
 * certificate); μ = 1 + 1e-9 must succeed, with a bound above μ only by the proof's margins. Spectra: a gap, the top
 * 8 within 1e-12 of each other, rank one (the rest 0), and n = 1. */
/* yᵀ H y for the n×n H, after checking that y is a unit vector (to 1e-12). */
static double ritz_quotient(const double *H, int n, const double *y) {
    double yy = 0, q = 0;
    for (int i = 0; i < n; i++) {
        yy += y[i] * y[i];
        double hy = 0;
        for (int j = 0; j < n; j++) hy += H[(size_t)i * n + j] * y[j];
        q += y[i] * hy;
    }
    ck_assert_msg(fabs(yy - 1) <= 1e-12, "Ritz vector of squared length %.17g", yy);
    return q;
}

START_TEST(test_spectral_chol_certify) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 99);
    double worst_rq = INFINITY;
    static const int ns[] = {1, 7, 37, 64, 100, 256}; /* 37, 100: the blocked factorisation's partial panels and tiles */
    int checked = 0;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        double *Q = malloc((size_t)n * n * sizeof(double)), *H = malloc((size_t)n * n * sizeof(double));
        double *B = malloc((size_t)n * n * sizeof(double)), *lam = malloc((size_t)n * sizeof(double));
        for (int kind = 0; kind < 3; kind++) {
            rand_orth(&rng, Q, n, n);
            for (int l = 0; l < n; l++)
                lam[l] = l == 0 ? 1.0 : kind == 0 ? 0.9 * (1 - (double)l / n) : kind == 1 ? (l < 8 ? 1 - 1e-12 * l : 0.5) : 0.0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    double x = 0;
                    for (int l = 0; l < n; l++) x += Q[i * n + l] * lam[l] * Q[j * n + l];
                    H[(size_t)i * n + j] = x;
                }
            for (int i = 0; i < n; i++) /* exactly symmetric, as the Gram matrices are */
                for (int j = 0; j < i; j++) H[(size_t)i * n + j] = H[(size_t)j * n + i];
            double b = -1;
            for (size_t i = 0; i < (size_t)n * n; i++) B[i] = NAN; /* stale scratch must not reach the factor */
            ck_assert_msg(!lipt_spectral_chol_certify(H, n, 1 - 1e-9, B, &b),
                          "n %d kind %d: certified mu = 1 - 1e-9 below lambda_max = 1 (bound %.17g)", n, kind, b);
            ck_assert_msg(lipt_spectral_chol_certify(H, n, 1 + 1e-9, B, &b), "n %d kind %d: mu = 1 + 1e-9 not certified",
                          n, kind);
            /* above μ by the proof's margins: τ = gamma_{n+1} tr(B) <= (n+1) u n (μ + 1), and far less of the rest */
            const double tol = 2 * (n + 1) * 0x1p-53 * n * 2.0;
            ck_assert_msg(b >= 1 - 1e-12 && b <= 1 + 1e-9 + tol, "n %d kind %d: bound %.17g (tol %.2e)", n, kind, b, tol);
            double *work = malloc(lipt_spectral_verify_scratch(n) * sizeof(double));
            double *ritz = malloc((size_t)n * sizeof(double));
            const double top = lipt_spectral_verify_top(H, n, NULL, work, ritz);
            ck_assert_msg(top >= 1 - 1e-12 && top <= 1 + 1e-5, "n %d kind %d: verified top %.17g", n, kind, top);
            /* the Ritz vector: unit, and its Rayleigh quotient within the first margin of lambda_max = 1 (the
             * estimate that margin proved); for kind 0 (gap 0.1) that puts it within 1e-5 of the top eigenvector */
            double rq = ritz_quotient(H, n, ritz);
            ck_assert_msg(rq >= 1 - 1e-6, "n %d kind %d: Ritz vector's Rayleigh quotient %.17g", n, kind, rq);
            worst_rq = fmin(worst_rq, rq);
            /* Lanczos from a start vector: near the top eigenvector, the second one (nearly orthogonal to the top:
             * the retry from the fixed vector must still find it), zero (no start) */
            float *start = malloc((size_t)n * sizeof(float));
            for (int sk = 0; sk < 3; sk++) {
                for (int i = 0; i < n; i++)
                    start[i] = sk == 0 ? (float)(Q[i * n] + 1e-3 * lipt_rng_normal(&rng)) : sk == 1 && n > 1 ? (float)Q[i * n + 1] : 0.0f;
                const double ts = lipt_spectral_verify_top(H, n, start, work, sk == 2 ? NULL : ritz);
                ck_assert_msg(ts >= 1 - 1e-12 && ts <= 1 + 0x1p-20 + 1e-9, "n %d kind %d start %d: verified top %.17g",
                              n, kind, sk, ts);
                if (sk == 2) continue;
                rq = ritz_quotient(H, n, ritz);
                ck_assert_msg(rq >= 1 - 1e-6, "n %d kind %d start %d: Ritz Rayleigh quotient %.17g", n, kind, sk, rq);
                worst_rq = fmin(worst_rq, rq);
            }
            free(start);
            free(ritz);
            free(work);
            checked++;
        }
        /* NaN and a matrix whose top eigenvalue is above every tried μ: no proof */
        H[0] = NAN;
        double b;
        ck_assert(!lipt_spectral_chol_certify(H, n, 10, B, &b));
        free(Q);
        free(H);
        free(B);
        free(lam);
    }
    printf("spectral chol_certify: %d spectra, mu = 1 - 1e-9 rejected and 1 + 1e-9 certified within (n+1) u n (mu+1); "
           "Ritz vectors' Rayleigh quotients >= 1 - %.2e\n", checked, 1 - worst_rq);
}
END_TEST

/* spectral_bound = cholesky on every case of test_spectral_ub_bounds: never below sigma, and within 2^-21 (the first
 * margin, sqrt(1 + 2^-20)) plus 1e-9 of it, which also shows the proof was found without the Gram fallback; the op
 * (column blocks side by side) gives each block's value, rounded up to float. Prints the worst excess per case. */
START_TEST(test_spectral_ub_cholesky) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    const int arg = 8 | LIPT_SPECTRAL_CHOLESKY;
    double worst_all = 0, min_all = INFINITY;
    for (size_t ci = 0; ci < N_UB_CASES; ci++) {
        const ub_case *c = &ub_cases[ci];
        int R = c->R, C = c->C, nb = c->nb, cb = C / nb;
        float *w = ub_matrix(c, 4242 + ci);
        double worst = -INFINITY;
        lipt_tensor *W = lipt_tensor_2d(&ctx, R, C);
        memcpy(W->data, w, (size_t)R * C * sizeof(float));
        float *u = calloc((size_t)nb * R, sizeof(float)), *v = calloc(C, sizeof(float));
        lipt_tensor *op = lipt_spectral_norm_ub(&ctx, W, u, v, nb, 0, arg);
        for (int b = 0; b < nb; b++) {
            const double sigma = c->kind == UB_IDENT ? 1.0 : ref_sigma_f(w, R, C, b * cb, cb);
            const double ub = lipt_spectral_ub(&ctx, w, R, C, b * cb, cb, arg), ex = ub / sigma - 1;
            ck_assert_msg(ub >= sigma * (1 - 1e-12), "%s block %d: bound %.17g below sigma %.17g", c->name, b, ub, sigma);
            ck_assert_msg(ex <= 0x1p-21 + 1e-9, "%s block %d: bound/sigma - 1 = %.3e (Gram fallback?)", c->name, b, ex);
            const float f = (float)ub;
            ck_assert(op->data[b] == ((double)f < ub ? nextafterf(f, INFINITY) : f));
            worst = fmax(worst, ex);
            min_all = fmin(min_all, ex);
        }
        worst_all = fmax(worst_all, worst);
        printf("  cholesky %-22s bound/sigma - 1 = %9.2e\n", c->name, worst);
        free(u);
        free(v);
        free(w);
        lipt_ctx_reset(&ctx);
    }
    printf("spectral_ub cholesky: %zu cases, bound/sigma - 1 in [%.2e, %.2e] (must be >= -1e-12 and <= 2^-21 + 1e-9 = "
           "%.2e)\n", N_UB_CASES, min_all, worst_all, 0x1p-21 + 1e-9);
    lipt_ctx_free(&ctx);
}
END_TEST

/* Rank one with an exact closed form, a zero block, non-finite entries (in one block of four), and the reference
 * against the closed form. */
START_TEST(test_spectral_ub_special) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    /* a bᵀ with small integers: sigma = |a| |b| */
    const int R = 40, C = 30;
    float *w = malloc(R * C * sizeof(float));
    long double na = 0, nbb = 0;
    int a[40], bv[30];
    lipt_rng rng;
    lipt_rng_seed(&rng, 12);
    for (int i = 0; i < R; i++) { a[i] = (int)lipt_rng_below(&rng, 201) - 100; na += (long double)a[i] * a[i]; }
    for (int j = 0; j < C; j++) { bv[j] = (int)lipt_rng_below(&rng, 201) - 100; nbb += (long double)bv[j] * bv[j]; }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) w[i * C + j] = (float)(a[i] * bv[j]);
    double exact = (double)sqrtl(na * nbb), ref = ref_sigma_f(w, R, C, 0, C);
    double worst = 0;
    for (int t = 0; t <= 14; t++) {
        double ub = lipt_spectral_ub(&ctx, w, R, C, 0, C, t);
        /* rank one: ‖G_k‖_F = rho at every level, so the margin is about gamma_f(n) / 2 + u_f sqrt(n) / 2 */
        ck_assert_msg(ub >= exact && ub <= exact * (1 + gamma_f(30) + 0x1p-24 * sqrt(30.0)), "rank one t=%d: %.17g vs %.17g",
                      t, ub, exact);
        worst = fmax(worst, ub / exact - 1);
    }
    printf("spectral_ub rank one (closed form): worst bound/sigma - 1 over t = 0..14: %.3e; long double "
           "reference off by %.3e\n", worst, fabs(ref / exact - 1));
    ck_assert(fabs(ref / exact - 1) < 1e-15);
    free(w);

    /* zero, NaN and inf: 0 and +inf for every t; through the op, only the affected block */
    lipt_tensor *W = tu_tensor(&rng, 2, (int[]){16, 32}, 1.0f, 0);
    float *u = calloc(4 * 16, sizeof(float)), *v = calloc(32, sizeof(float));
    for (int i = 0; i < 16; i++)
        for (int j = 8; j < 16; j++) W->data[i * 32 + j] = 0; /* block 1 all zero */
    for (int t = 0; t <= 12; t += 4) ck_assert(lipt_spectral_ub(&ctx, W->data, 16, 32, 8, 8, t) == 0);
    W->data[3 * 32 + 17] = NAN; /* block 2 */
    W->data[5 * 32 + 30] = INFINITY; /* block 3 */
    for (int t = 0; t <= 12; t += 4) {
        ck_assert(isinf(lipt_spectral_ub(&ctx, W->data, 16, 32, 16, 8, t)));
        ck_assert(isinf(lipt_spectral_ub(&ctx, W->data, 16, 32, 24, 8, t)));
        ck_assert(isinf(lipt_spectral_ub(&ctx, W->data, 16, 32, 0, 32, t)));
    }
    lipt_tensor *s = lipt_spectral_norm_ub(&ctx, W, u, v, 4, 0, 8);
    double ref0 = ref_sigma_f(W->data, 16, 32, 0, 8);
    ck_assert(s->data[0] >= ref0 && s->data[0] <= ref0 * 1.001);
    ck_assert(s->data[1] == 0 && isinf(s->data[2]) && s->data[2] > 0 && isinf(s->data[3]) && s->data[3] > 0);
    /* -0 counts as zero */
    float negz[6] = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};
    ck_assert(lipt_spectral_ub(&ctx, negz, 2, 3, 0, 3, 5) == 0);
    printf("spectral_ub special: zero block 0, NaN / inf blocks +inf (op: per block), rank one within gamma_f(30) + u_f sqrt(30) = %.2e\n",
           gamma_f(30) + 0x1p-24 * sqrt(30.0));
    free(u);
    free(v);
    tu_free(W);
    lipt_ctx_free(&ctx);
}
END_TEST

/* After 200 power rounds the backward u vᵀ matches the finite-difference gradient of the exact sigma (the value is a
 * bound, whose own finite differences are not the target). */
START_TEST(test_spectral_ub_grad) {
    const int R = 12, C = 20;
    double worst = 0;
    for (int nb = 1; nb <= 4; nb *= 4) {
        int cb = C / nb;
        lipt_rng rng;
        lipt_rng_seed(&rng, 808 + nb);
        lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 0.1f, 1);
        /* a planted spike per block: a clear gap between sigma_1 and sigma_2 */
        for (int i = 0; i < R; i++) {
            float ai = lipt_rng_normal(&rng);
            for (int j = 0; j < C; j++) W->data[i * C + j] += 0.3f * ai * (float)(1 + (j * 7) % 5);
        }
        float *u = calloc((size_t)nb * R, sizeof(float)), *v = calloc(C, sizeof(float)), g[4];
        for (int b = 0; b < nb; b++) g[b] = 0.5f + (float)b - 0.8f * (b == 2);
        float *grad = calloc((size_t)R * C, sizeof(float));
        W->grad = grad;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *s = lipt_spectral_norm_ub(&ctx, W, u, v, nb, 200, 10);
        ck_assert(s->requires_grad && ctx.n_nodes == 1);
        lipt_backward_seeded(&ctx, s, g);
        double *d = malloc((size_t)R * C * sizeof(double));
        for (int i = 0; i < R * C; i++) d[i] = W->data[i];
        const double eps = 1e-5;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                int b = j / cb;
                double x = d[i * C + j];
                d[i * C + j] = x + eps;
                double sp = ref_sigma_ld(d, R, C, b * cb, cb);
                d[i * C + j] = x - eps;
                double sm = ref_sigma_ld(d, R, C, b * cb, cb);
                d[i * C + j] = x;
                double fd = g[b] * (sp - sm) / (2 * eps), e = fabs(grad[i * C + j] - fd);
                worst = fmax(worst, e);
                ck_assert_msg(e < 1e-3, "nb%d dW[%d,%d] = %.8g, finite differences of sigma %.8g", nb, i, j,
                              grad[i * C + j], fd);
            }
        for (int b = 0; b < nb; b++) {
            double ref = ref_sigma_f(W->data, R, C, b * cb, cb);
            ck_assert(s->data[b] >= ref && s->data[b] <= ref * (1 + 1e-6));
        }
        free(d);
        W->grad = NULL;
        free(grad);
        free(u);
        free(v);
        lipt_ctx_free(&ctx);
        tu_free(W);
    }
    printf("spectral_norm_ub gradient after 200 power rounds vs finite differences of the exact sigma: worst abs err "
           "%.3e (tol 1e-3)\n", worst);
}
END_TEST

/* power_iters = 0 leaves u, v alone (and backward uses them); power_iters > 0 moves them exactly as spectral_norm
 * does; the saved copies survive later calls. */
START_TEST(test_spectral_ub_power_vectors) {
    const int R = 9, C = 12, nb = 3, cb = 4;
    lipt_rng rng;
    lipt_rng_seed(&rng, 71);
    lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 1);
    float u[27], v[12], u0[27], v0[12], u2[27], v2[12], seed[3] = {1.5f, -0.25f, 2.0f};
    lipt_rng_fill_normal(&rng, u, 27, 1.0f);
    lipt_rng_fill_normal(&rng, v, 12, 1.0f);
    memcpy(u0, u, sizeof u);
    memcpy(v0, v, sizeof v);
    memcpy(u2, u, sizeof u);
    memcpy(v2, v, sizeof v);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *s = lipt_spectral_norm_ub(&ctx, W, u, v, nb, 0, 8);
    ck_assert(memcmp(u, u0, sizeof u) == 0 && memcmp(v, v0, sizeof v) == 0);
    for (int b = 0; b < nb; b++) {
        double ub = lipt_spectral_ub(&ctx, W->data, R, C, b * cb, cb, 8);
        ck_assert(s->data[b] >= ub && (double)nextafterf(s->data[b], 0) < ub); /* rounded up to float */
    }
    for (int i = 0; i < 27; i++) u[i] = -7.0f; /* backward must use the saved copies */
    float *grad = calloc(R * C, sizeof(float));
    W->grad = grad;
    lipt_backward_seeded(&ctx, s, seed);
    double worst = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            worst = fmax(worst, fabs(grad[i * C + j] - (double)seed[j / cb] * u0[(j / cb) * R + i] * v0[j]));
    ck_assert_msg(worst < 1e-6, "backward with power_iters = 0: err %.3e", worst);
    W->grad = NULL;
    free(grad);
    /* 5 rounds: the same vectors, bit for bit, as spectral_norm's */
    memcpy(u, u0, sizeof u);
    lipt_spectral_norm_ub(&ctx, W, u, v, nb, 5, 4);
    lipt_spectral_norm(&ctx, W, u2, v2, nb, 5);
    ck_assert(memcmp(u, u2, sizeof u) == 0 && memcmp(v, v2, sizeof v) == 0);
    /* no grad: nothing recorded */
    size_t nodes = ctx.n_nodes;
    lipt_no_grad_push(&ctx);
    s = lipt_spectral_norm_ub(&ctx, W, u, v, nb, 1, 4);
    lipt_no_grad_pop(&ctx);
    ck_assert(!s->requires_grad && ctx.n_nodes == nodes);
    printf("spectral_norm_ub power vectors: untouched at power_iters = 0 (backward err %.3e), identical to "
           "spectral_norm's after 5 rounds\n", worst);
    lipt_ctx_free(&ctx);
    tu_free(W);
}
END_TEST

/* Bitwise the same values (and power vectors) with 1 and 2 threads. */
START_TEST(test_spectral_ub_threads) {
    const int shapes_t[][3] = {{256, 1024, 1}, {256, 1024, 4}, {128, 512, 1}, {300, 90, 3}, {1024, 256, 1}};
    int n_cmp = 0;
    for (int si = 0; si < 5; si++) {
        int R = shapes_t[si][0], C = shapes_t[si][1], nb = shapes_t[si][2];
        lipt_rng rng;
        lipt_rng_seed(&rng, 90 + si);
        lipt_tensor *W = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 0);
        float *u[2], *v[2], out[2][4];
        double ub[2][3];
        for (int pass = 0; pass < 2; pass++) {
            lipt_set_threads(pass + 1);
            u[pass] = calloc((size_t)nb * R, sizeof(float));
            v[pass] = calloc(C, sizeof(float));
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *s = lipt_spectral_norm_ub(&ctx, W, u[pass], v[pass], nb, 5, 8);
            memcpy(out[pass], s->data, nb * sizeof(float));
            for (int k = 0; k < 3; k++) ub[pass][k] = lipt_spectral_ub(&ctx, W->data, R, C, 0, C / nb, 4 * k + 2);
            lipt_ctx_free(&ctx);
        }
        ck_assert_msg(memcmp(out[0], out[1], nb * sizeof(float)) == 0, "shape %d: op values differ", si);
        ck_assert_msg(memcmp(ub[0], ub[1], sizeof ub[0]) == 0, "shape %d: bounds differ: %.17g vs %.17g", si,
                      ub[0][0], ub[1][0]);
        ck_assert(memcmp(u[0], u[1], (size_t)nb * R * sizeof(float)) == 0);
        ck_assert(memcmp(v[0], v[1], C * sizeof(float)) == 0);
        n_cmp += nb + 3;
        for (int p = 0; p < 2; p++) {
            free(u[p]);
            free(v[p]);
        }
        tu_free(W);
    }
    lipt_set_threads(2);
    printf("spectral_ub threads: %d values bitwise identical with 1 and 2 threads\n", n_cmp);
}
END_TEST

/* lipt_spectral_norm_ub_many: the values of lipt_spectral_norm_ub one matrix at a time, bit for bit, on 1 and 2
 * threads, the same power vectors and the same gradients (a layer's W1 [256, 1024] and W2 [1024, 256], a small
 * pair, three matrices). */
START_TEST(test_spectral_ub_many) {
    const int sets[][3][2] = {{{256, 1024}, {1024, 256}, {0, 0}}, {{40, 24}, {24, 40}, {0, 0}},
                              {{128, 300}, {64, 64}, {300, 128}}};
    for (int si = 0; si < 3; si++)
        for (int thr = 1; thr <= 2; thr++) {
            lipt_set_threads(thr);
            const int n = sets[si][2][0] ? 3 : 2;
            lipt_rng rng;
            lipt_rng_seed(&rng, 300 + si);
            lipt_tensor *W[3];
            float *u[2][3], *v[2][3], *g[2][3];
            for (int i = 0; i < n; i++) {
                const int R = sets[si][i][0], C = sets[si][i][1];
                W[i] = tu_tensor(&rng, 2, (int[]){R, C}, 1.0f, 1);
                for (int k = 0; k < 2; k++) {
                    u[k][i] = calloc(R, sizeof(float));
                    v[k][i] = calloc(C, sizeof(float));
                    g[k][i] = calloc((size_t)R * C, sizeof(float));
                }
            }
            float val[2][3];
            for (int k = 0; k < 2; k++) { /* 0: one at a time, 1: many */
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *s[3];
                for (int i = 0; i < n; i++) W[i]->grad = g[k][i];
                if (k == 0)
                    for (int i = 0; i < n; i++) s[i] = lipt_spectral_norm_ub(&ctx, W[i], u[k][i], v[k][i], 1, 3, 6);
                else
                    lipt_spectral_norm_ub_many(&ctx, n, W, u[k], v[k], 3, 6, s);
                lipt_tensor *tot = s[0];
                for (int i = 1; i < n; i++) tot = lipt_add(&ctx, tot, s[i]);
                lipt_backward(&ctx, tot);
                for (int i = 0; i < n; i++) val[k][i] = s[i]->data[0], W[i]->grad = NULL;
                lipt_ctx_free(&ctx);
            }
            for (int i = 0; i < n; i++) {
                const size_t R = (size_t)W[i]->shape[0], C = (size_t)W[i]->shape[1];
                ck_assert_msg(memcmp(&val[0][i], &val[1][i], sizeof(float)) == 0, "set %d matrix %d (%d threads): "
                              "%.9g one at a time, %.9g side by side", si, i, thr, val[0][i], val[1][i]);
                ck_assert(val[0][i] > 0 && isfinite(val[0][i]));
                ck_assert(memcmp(u[0][i], u[1][i], R * sizeof(float)) == 0);
                ck_assert(memcmp(v[0][i], v[1][i], C * sizeof(float)) == 0);
                ck_assert(memcmp(g[0][i], g[1][i], R * C * sizeof(float)) == 0);
                for (int k = 0; k < 2; k++) free(u[k][i]), free(v[k][i]), free(g[k][i]);
                tu_free(W[i]);
            }
        }
    lipt_set_threads(2);
    printf("spectral_norm_ub_many: bounds, power vectors and gradients bitwise those of one matrix at a time\n");
}
END_TEST

/* The batch, then the backward of Σ_k (k + 1) Σ_b out[k][b] (request 0 weighted 1): request k's gradient is
 * (k + 1) Σ_b u_b v_bᵀ (batch_grad_weight). */
static void batch_backward(lipt_ctx *ctx, int n, const lipt_spectral_req *req, lipt_tensor **out) {
    lipt_spectral_norm_ub_batch(ctx, n, req, out);
    lipt_tensor *tot = lipt_sum(ctx, out[0]);
    for (int k = 1; k < n; k++) tot = lipt_add(ctx, tot, lipt_scale(ctx, lipt_sum(ctx, out[k]), (float)(k + 1)));
    lipt_backward(ctx, tot);
}
static float batch_grad_weight(int k) { return (float)(k == 0 ? 1 : k + 1); }

/* lipt_spectral_ub of block b rounded up to float, as the batch stores it. */
static float ub_float(lipt_ctx *ctx, const float *w, int R, int C, int b, int cb, int gram) {
    const double x = lipt_spectral_ub(ctx, w, R, C, b * cb, cb, gram);
    float f = (float)x;
    if ((double)f < x) f = nextafterf(f, INFINITY);
    return f;
}

/* W's gradient is exactly gk Σ_b u_b v_bᵀ (nb column blocks). */
static void check_grad_uv(const lipt_tensor *W, int nb, const float *u, const float *v, float gk, int k) {
    const int R = W->shape[0], C = W->shape[1], cb = C / nb;
    for (int i = 0; i < R; i++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < cb; j++)
                ck_assert_msg(W->grad[(size_t)i * C + b * cb + j] == gk * u[(size_t)b * R + i] * v[b * cb + j],
                              "request %d grad (%d, %d)", k, i, b * cb + j);
}

/* lipt_spectral_norm_ub_batch: every block's value is lipt_spectral_ub of that block rounded up to float, bit for bit,
 * on 1 and 2 threads, for requests of mixed shapes, block counts and bound kinds (a model's W1, W2, W^O and head
 * blocks); the vectors are left alone and the gradient is Σ_b g_b u_b v_bᵀ per request. */
START_TEST(test_spectral_ub_batch) {
    enum { NR = 6 };
    const int shape[NR][3] = {{256, 1024, 1}, {1024, 256, 1}, {256, 256, 1}, {256, 256, 4}, {96, 96, 3}, {40, 24, 2}};
    const int gram[NR] = {8 | LIPT_SPECTRAL_CHOLESKY, 8 | LIPT_SPECTRAL_CHOLESKY, 6, 8 | LIPT_SPECTRAL_CHOLESKY, 4,
                          8 | LIPT_SPECTRAL_CHOLESKY};
    lipt_rng rng;
    lipt_rng_seed(&rng, 4242);
    lipt_tensor *W[NR];
    float *u[NR], *v[NR], *u0[NR], *v0[NR];
    lipt_spectral_req req[NR];
    for (int k = 0; k < NR; k++) {
        const int R = shape[k][0], C = shape[k][1], nb = shape[k][2];
        W[k] = tu_tensor(&rng, 2, (int[]){R, C}, 0.05f, 1);
        u[k] = malloc(sizeof(float) * (size_t)nb * R), v[k] = malloc(sizeof(float) * C);
        u0[k] = malloc(sizeof(float) * (size_t)nb * R), v0[k] = malloc(sizeof(float) * C);
        for (int i = 0; i < nb * R; i++) u0[k][i] = u[k][i] = (float)lipt_rng_normal(&rng);
        for (int i = 0; i < C; i++) v0[k][i] = v[k][i] = (float)lipt_rng_normal(&rng);
        req[k] = (lipt_spectral_req){W[k], u[k], v[k], nb, gram[k], 0};
    }
    int n_cmp = 0;
    for (int thr = 1; thr <= 2; thr++) {
        lipt_set_threads(thr);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *out[NR];
        for (int k = 0; k < NR; k++) W[k]->grad = calloc((size_t)W[k]->numel, sizeof(float));
        batch_backward(&ctx, NR, req, out);
        for (int k = 0; k < NR; k++) {
            const int R = shape[k][0], C = shape[k][1], nb = shape[k][2], cb = C / nb;
            ck_assert_int_eq(out[k]->numel, nb);
            for (int b = 0; b < nb; b++) {
                const float f = ub_float(&ctx, W[k]->data, R, C, b, cb, gram[k]);
                ck_assert_msg(memcmp(&f, &out[k]->data[b], sizeof f) == 0,
                              "request %d block %d (%d threads): batch %.9g, lipt_spectral_ub %.9g", k, b, thr,
                              (double)out[k]->data[b], (double)f);
                if (thr == 1) /* the same bound on 2 threads: test_spectral_ub_threads */
                    ck_assert(f >= ref_sigma(W[k]->data, R, C, b, cb) * (1 - 1e-6));
                n_cmp++;
            }
            ck_assert(memcmp(u[k], u0[k], sizeof(float) * (size_t)nb * R) == 0); /* vectors untouched */
            ck_assert(memcmp(v[k], v0[k], sizeof(float) * C) == 0);
            check_grad_uv(W[k], nb, u[k], v[k], batch_grad_weight(k), k);
            free(W[k]->grad);
            W[k]->grad = NULL;
        }
        lipt_ctx_free(&ctx);
    }
    for (int k = 0; k < NR; k++) free(u[k]), free(v[k]), free(u0[k]), free(v0[k]), tu_free(W[k]);
    lipt_set_threads(2);
    printf("spectral_norm_ub_batch: %d block bounds bitwise lipt_spectral_ub's on 1 and 2 threads, gradients u v^T\n",
           n_cmp);
}
END_TEST

/* lipt_spectral_norm_ub_batch with steer = 1: the same values, bit for bit (the bound is computed before the pair
 * moves); each Cholesky-certified block's pair becomes unit vectors with u_bᵀ W_b v_b within 1e-6 of the exact
 * sigma_b (the top singular pair at these weights, from random starts); a Gram-iteration block's pair gets exactly
 * one power round (lipt_spectral_norm_ub's); the gradient is Σ_b g_b u_b v_bᵀ with the new pair; the same bits on 1
 * and 2 threads. */
START_TEST(test_spectral_ub_batch_steer) {
    enum { NR = 5 };
    const int shape[NR][3] = {{128, 512, 1}, {512, 128, 1}, {96, 96, 3}, {64, 64, 1}, {40, 24, 2}};
    const int gram[NR] = {8 | LIPT_SPECTRAL_CHOLESKY, 8 | LIPT_SPECTRAL_CHOLESKY, 8 | LIPT_SPECTRAL_CHOLESKY,
                          8 | LIPT_SPECTRAL_CHOLESKY, 4};
    lipt_rng rng;
    lipt_rng_seed(&rng, 777);
    lipt_tensor *W[NR];
    float *u0[NR], *v0[NR], *u[2][NR], *v[2][NR];
    for (int k = 0; k < NR; k++) {
        const int R = shape[k][0], C = shape[k][1], nb = shape[k][2];
        W[k] = tu_tensor(&rng, 2, (int[]){R, C}, 0.05f, 1);
        u0[k] = malloc(sizeof(float) * (size_t)nb * R), v0[k] = malloc(sizeof(float) * C);
        for (int i = 0; i < nb * R; i++) u0[k][i] = (float)lipt_rng_normal(&rng);
        for (int i = 0; i < C; i++) v0[k][i] = (float)lipt_rng_normal(&rng);
    }
    double worst = 0;
    for (int thr = 1; thr <= 2; thr++) {
        lipt_set_threads(thr);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_spectral_req req[NR];
        lipt_tensor *out[NR];
        for (int k = 0; k < NR; k++) {
            const int R = shape[k][0], C = shape[k][1], nb = shape[k][2];
            u[thr - 1][k] = malloc(sizeof(float) * (size_t)nb * R), v[thr - 1][k] = malloc(sizeof(float) * C);
            memcpy(u[thr - 1][k], u0[k], sizeof(float) * (size_t)nb * R);
            memcpy(v[thr - 1][k], v0[k], sizeof(float) * C);
            req[k] = (lipt_spectral_req){W[k], u[thr - 1][k], v[thr - 1][k], nb, gram[k], 1};
            W[k]->grad = calloc((size_t)W[k]->numel, sizeof(float));
        }
        batch_backward(&ctx, NR, req, out);
        for (int k = 0; k < NR; k++) {
            const int R = shape[k][0], C = shape[k][1], nb = shape[k][2], cb = C / nb;
            const float *uk = u[thr - 1][k], *vk = v[thr - 1][k];
            for (int b = 0; b < nb; b++) {
                const float f = ub_float(&ctx, W[k]->data, R, C, b, cb, gram[k]);
                ck_assert_msg(memcmp(&f, &out[k]->data[b], sizeof f) == 0, "request %d block %d: value moved", k, b);
            }
            if (gram[k] & LIPT_SPECTRAL_CHOLESKY) {
                for (int b = 0; b < nb; b++) {
                    const float *ub = uk + (size_t)b * R, *vb = vk + (size_t)b * cb;
                    ck_assert(fabs(vnorm(ub, R) - 1) <= 1e-6 && fabs(vnorm(vb, cb) - 1) <= 1e-6);
                    double q = 0;
                    for (int i = 0; i < R; i++)
                        for (int j = 0; j < cb; j++) q += (double)ub[i] * W[k]->data[(size_t)i * C + b * cb + j] * vb[j];
                    const double sig = ref_sigma(W[k]->data, R, C, b, cb), rel = 1 - q / sig;
                    ck_assert_msg(rel <= 1e-6, "request %d block %d: u^T W v = %.9g against sigma %.9g", k, b, q, sig);
                    worst = fmax(worst, rel);
                }
            } else { /* one power round, as lipt_spectral_norm_ub(power_iters = 1) gives */
                float *pu = malloc(sizeof(float) * (size_t)nb * R), *pv = malloc(sizeof(float) * C);
                memcpy(pu, u0[k], sizeof(float) * (size_t)nb * R);
                memcpy(pv, v0[k], sizeof(float) * C);
                lipt_ctx c2;
                lipt_ctx_init(&c2, 1 << 16, 0);
                lipt_spectral_norm_ub(&c2, W[k], pu, pv, nb, 1, gram[k]);
                lipt_ctx_free(&c2);
                ck_assert(memcmp(pu, uk, sizeof(float) * (size_t)nb * R) == 0 && memcmp(pv, vk, sizeof(float) * C) == 0);
                free(pu), free(pv);
            }
            check_grad_uv(W[k], nb, uk, vk, batch_grad_weight(k), k);
            free(W[k]->grad);
            W[k]->grad = NULL;
        }
        lipt_ctx_free(&ctx);
    }
    for (int k = 0; k < NR; k++) {
        const int R = shape[k][0], C = shape[k][1], nb = shape[k][2];
        ck_assert(memcmp(u[0][k], u[1][k], sizeof(float) * (size_t)nb * R) == 0);
        ck_assert(memcmp(v[0][k], v[1][k], sizeof(float) * C) == 0);
        free(u[0][k]), free(u[1][k]), free(v[0][k]), free(v[1][k]), free(u0[k]), free(v0[k]), tu_free(W[k]);
    }
    lipt_set_threads(2);
    printf("spectral_norm_ub_batch steer: values unchanged, Ritz pairs within %.2e of sigma (u^T W v), the Gram "
           "block one power round, gradients u v^T, same bits on 1 and 2 threads\n", worst);
}
END_TEST

static double ub_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall time of lipt_spectral_ub over all blocks of a matrix, best and median of 7 (not asserted): 2 threads, then
 * 1 thread for comparison (on a loaded machine a thread team mostly measures the scheduler). */
START_TEST(test_spectral_ub_timing) {
    const int cfg[][3] = {{256, 1024, 1}, {256, 256, 1}, {128, 512, 1}, {256, 256, 4}};
    const int ts[] = {6, 8, 12};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 22, 1);
    printf("spectral_ub timing (ms, best / median of 7, all blocks):\n");
    for (int run = 0; run < 8; run++) {
        int ci = run / 2, threads = 2 - run % 2;
        lipt_set_threads(threads);
        int R = cfg[ci][0], C = cfg[ci][1], nb = cfg[ci][2], cb = C / nb;
        lipt_rng rng;
        lipt_rng_seed(&rng, 5 + ci);
        float *w = malloc((size_t)R * C * sizeof(float));
        lipt_rng_fill_normal(&rng, w, (size_t)R * C, 1.0f);
        printf("  %4dx%-4d in %d block%s of %4d columns, %d thread%s:", R, C, nb, nb > 1 ? "s" : " ", cb, threads,
               threads > 1 ? "s" : " ");
        for (int ti = 0; ti < 3; ti++) {
            double dt[7], sink = 0;
            lipt_spectral_ub(&ctx, w, R, C, 0, cb, ts[ti]); /* warm-up: arena and BLAS buffers */
            for (int rep = 0; rep < 7; rep++) {
                double t0 = ub_now();
                for (int b = 0; b < nb; b++) sink += lipt_spectral_ub(&ctx, w, R, C, b * cb, cb, ts[ti]);
                dt[rep] = ub_now() - t0;
            }
            for (int i = 1; i < 7; i++) /* insertion sort */
                for (int j = i; j > 0 && dt[j] < dt[j - 1]; j--) {
                    double x = dt[j];
                    dt[j] = dt[j - 1];
                    dt[j - 1] = x;
                }
            ck_assert(sink > 0);
            printf("  t=%-2d %7.2f / %7.2f", ts[ti], 1e3 * dt[0], 1e3 * dt[3]);
        }
        printf("\n");
        free(w);
    }
    lipt_set_threads(2);
    lipt_ctx_free(&ctx);
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
    TCase *tu = tcase_create("spectral_ub");
    tcase_set_timeout(tu, 600);
    tcase_add_test(tu, test_spectral_ub_bounds);
    tcase_add_test(tu, test_spectral_ub_special);
    tcase_add_test(tu, test_spectral_gram);
    tcase_add_test(tu, test_spectral_chol_certify);
    tcase_add_test(tu, test_spectral_ub_cholesky);
    tcase_add_test(tu, test_spectral_ub_grad);
    tcase_add_test(tu, test_spectral_ub_power_vectors);
    tcase_add_test(tu, test_spectral_ub_threads);
    tcase_add_test(tu, test_spectral_ub_many);
    tcase_add_test(tu, test_spectral_ub_batch);
    tcase_add_test(tu, test_spectral_ub_batch_steer);
    tcase_add_test(tu, test_spectral_ub_timing);
    suite_add_tcase(s, tu);
    return tu_run_suite(s);
}
