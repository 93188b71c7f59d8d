/* Lipschitz bounds in the token-wise mixed norm ‖X‖_{∞,2} = max_i ‖x_i‖₂ (the bounds the contractive layers divide
 * by, so they must be TRUE upper bounds): lipt_bound_clipped_dp (clipped-input DP attention, causal / unmasked /
 * relative-position bias) and lipt_bound_l2_inf2 (tied L2 attention), against exact Jacobians measured with
 * lipt_matrix_norm_inf2 (a lower bound of the induced norm) at random inputs of several scales, at inputs from the
 * ∞-norm ascent tool, and after a hill-climb on the inf2 lower measure itself. Also: the softmax-sensitivity lemma
 * of the clipped-dp derivation, the library bound values against double references, and a deliberately wrong bound
 * that must be violated (the test has teeth). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lipt/bounds.h"
#include "lipt/jacobian.h"

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------------------------------------- models */

typedef enum { M_CDP, M_CDP_REL, M_TIED } map_kind;
static const char *const mask_names[] = {"causal", "none", "relbias"};

typedef struct {
    map_kind kind;
    int N, D, H, causal;
    float R; /* clip radius (clipped-dp) */
    lipt_tensor *wq, *wk, *wv, *wo, *rel;
    lipt_bound_vectors vec;
    float *vecbuf;
} im_model;

/* clipped-dp: F(X) = DP-attention(clip(X) W^Q, clip(X) W^K, clip(X) W^V [+ rel bias]) W^O.
 * tied L2:    F(X) = L2-tied-attention(X W^Q; W^Q, W^V) W^O (as att_forward in test_lipschitz_bounds.c). */
static lipt_tensor *im_forward(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    im_model *m = user;
    lipt_tensor *x3 = lipt_reshape(ctx, x, 3, (int[]){1, m->N, m->D}), *a;
    if (m->kind == M_TIED) {
        lipt_tensor *q = lipt_matmul(ctx, x3, m->wq, 0, 0);
        a = lipt_attention_l2_tied(ctx, q, m->wq, m->wv, m->H, m->causal);
    } else {
        lipt_tensor *u = lipt_clip_rows(ctx, x3, m->R);
        lipt_tensor *q = lipt_matmul(ctx, u, m->wq, 0, 0), *k = lipt_matmul(ctx, u, m->wk, 0, 0),
                    *v = lipt_matmul(ctx, u, m->wv, 0, 0);
        a = m->kind == M_CDP_REL ? lipt_attention_dp_rel(ctx, q, k, v, m->rel, m->H)
                                 : lipt_attention_dp(ctx, q, k, v, m->H, m->causal);
    }
    lipt_tensor *out = lipt_matmul(ctx, a, m->wo, 0, 0);
    return lipt_reshape(ctx, out, 2, (int[]){m->N, m->D});
}

/* All 8 vectors: uq [H*D], vq [D], uv [H*D], vv [D], uo [D], vo [D], uk [H*D], vk [D]. */
static void vec_alloc(lipt_bound_vectors *v, float **buf, int D, int H) {
    const size_t hd = (size_t)H * D;
    float *b = malloc((3 * hd + 5 * (size_t)D) * sizeof(float));
    *v = (lipt_bound_vectors){b,          b + hd,          b + hd + D,          b + 2 * hd + D, b + 2 * hd + 2 * D,
                              b + 2 * hd + 3 * D, b + 2 * hd + 4 * D, b + 3 * hd + 4 * D, 0};
    *buf = b;
}

/* Power rounds through the bound under test (so every vector it uses moves) in chunks of 25 until its value is
 * stable to 1e-8 relative (at most 2000 rounds). An unconverged power iteration UNDERestimates σ, so this can only
 * make a violation appear, never hide one; the values are also checked against double references. */
static void im_converge(im_model *m) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    double prev = -1;
    for (int k = 0; k < 80; k++) {
        const double b = m->kind == M_TIED
                             ? lipt_bound_l2_inf2(&ctx, m->wq, m->wv, m->wo, m->H, m->N, &m->vec, 25)->data[0]
                             : lipt_bound_clipped_dp(&ctx, m->wq, m->wk, m->wv, m->wo, m->H, m->R, &m->vec, 25)->data[0];
        lipt_ctx_reset(&ctx);
        if (k >= 2 && fabs(b - prev) <= 1e-8 * b) break;
        prev = b;
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
}

/* Weights N(0, scale² / D); rel bias N(0, rel_std²) of shape [H, N + 3]; power-iteration vectors converged. */
static void im_init(im_model *m, map_kind kind, int N, int D, int H, int causal, float R, float scale, float rel_std,
                    uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->N = N; m->D = D; m->H = H; m->causal = kind == M_CDP_REL ? 1 : causal;
    m->R = R;
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    const float sd = scale / sqrtf((float)D);
    m->wq = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wk = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wv = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    m->wo = tu_tensor(&r, 2, (int[]){D, D}, sd, 0);
    if (kind == M_CDP_REL) m->rel = tu_tensor(&r, 2, (int[]){H, N + 3}, rel_std, 0);
    vec_alloc(&m->vec, &m->vecbuf, D, H);
    lipt_bound_vectors_init(&m->vec, D, H, seed + 1);
    im_converge(m);
}

static void im_free(im_model *m) {
    tu_free(m->wq); tu_free(m->wk); tu_free(m->wv); tu_free(m->wo); tu_free(m->rel);
    free(m->vecbuf);
}

static lipt_jac_map im_map(im_model *m) {
    /* parallel = 0: at these sizes (n <= 96) the OpenMP split of the rows costs more than it saves, and on shared
     * cores spinning threads slow it down badly */
    return (lipt_jac_map){im_forward, m, 2, {m->N, m->D}, 0};
}

/* The library's bound for the model's kind (iters 0: the converged vectors as they are). */
static double im_bound(im_model *m) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    double b = m->kind == M_TIED ? lipt_bound_l2_inf2(&ctx, m->wq, m->wv, m->wo, m->H, m->N, &m->vec, 0)->data[0]
                                 : lipt_bound_clipped_dp(&ctx, m->wq, m->wk, m->wv, m->wo, m->H, m->R, &m->vec, 0)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return b;
}

/* ------------------------------------------------------------------------------------------- references */

/* ‖B‖₂ of the column block [c0, c0+cb) of a row-major R×C float matrix, by power iteration on BᵀB in double. */
static double ref_block_sigma(const float *w, int R, int C, int c0, int cb) {
    double *v = malloc((size_t)cb * sizeof(double)), *t = malloc((size_t)R * sizeof(double));
    for (int j = 0; j < cb; j++) v[j] = 1.0 + 0.1 * j;
    double sig = 0;
    for (int it = 0; it < 5000; it++) {
        for (int i = 0; i < R; i++) {
            double s = 0;
            for (int j = 0; j < cb; j++) s += (double)w[(size_t)i * C + c0 + j] * v[j];
            t[i] = s;
        }
        double nv = 0;
        for (int j = 0; j < cb; j++) {
            double s = 0;
            for (int i = 0; i < R; i++) s += (double)w[(size_t)i * C + c0 + j] * t[i];
            v[j] = s;
            nv += s * s;
        }
        nv = sqrt(nv);
        double ns = sqrt(nv);
        if (!(nv > 0)) break;
        for (int j = 0; j < cb; j++) v[j] /= nv;
        if (fabs(ns - sig) <= 1e-15 * ns && it > 10) { sig = ns; break; }
        sig = ns;
    }
    free(v);
    free(t);
    return sig;
}

/* Double reference of the claimed bounds. lead_scale multiplies the attention factor's input-dependent part:
 * clipped-dp L_h = ‖W^V‖ (1 + lead_scale · 2τ_h); tied L2 L_h = (1 + lead_scale · 6 W0((N-1)/e)) ‖W^Q‖² ‖W^V‖/√d.
 * lead_scale = 1 is the claim, 0 the deliberately wrong bound of the teeth check. base (may be NULL) receives the
 * bound with the whole attention factor removed (‖W^O‖ √Σ_h b_h², b_h = ‖W^V‖ resp. ‖W^Q‖²‖W^V‖/√d). */
static double ref_bound(const im_model *m, double lead_scale, double *base, double *tau_max) {
    const int D = m->D, H = m->H, d = D / H;
    double s = 0, s0 = 0, tmax = 0;
    for (int h = 0; h < H; h++) {
        double sq = ref_block_sigma(m->wq->data, D, D, h * d, d), sv = ref_block_sigma(m->wv->data, D, D, h * d, d);
        double l, b0;
        if (m->kind == M_TIED) {
            b0 = sq * sq * sv / sqrt((double)d);
            l = (1 + lead_scale * 6 * lipt_lambert_w0((m->N - 1) / exp(1.0))) * b0;
        } else {
            double sk = ref_block_sigma(m->wk->data, D, D, h * d, d);
            double tau = (double)m->R * m->R * sq * sk / sqrt((double)d);
            tmax = fmax(tmax, tau);
            b0 = sv;
            l = sv * (1 + lead_scale * 2 * tau);
        }
        s += l * l;
        s0 += b0 * b0;
    }
    double so = ref_block_sigma(m->wo->data, D, D, 0, D);
    if (base) *base = so * sqrt(s0);
    if (tau_max) *tau_max = tmax;
    return so * sqrt(s);
}

/* ------------------------------------------------------------------------------------------- measurement */

typedef struct {
    lipt_jac_map map;
    size_t n;
    double *J;
    long n_jac;
} meter;

static meter meter_new(im_model *m) {
    meter mt = {im_map(m), 0, NULL, 0};
    mt.n = lipt_jac_numel(&mt.map);
    mt.J = malloc(mt.n * mt.n * sizeof(double));
    return mt;
}

/* inf2 lower bound of the exact Jacobian at x (and the row-sum upper estimate when upper != NULL). */
static double meter_inf2(meter *mt, const im_model *m, const float *x, double *upper) {
    lipt_error err = {0};
    lipt_status st = lipt_jacobian(&mt->map, x, mt->J, &err);
    ck_assert_msg(st == LIPT_OK, "jacobian failed: %s", err.msg);
    mt->n_jac++;
    double up = 0, lo = lipt_matrix_norm_inf2(mt->J, (size_t)m->N, (size_t)m->D, upper ? &up : NULL);
    ck_assert_msg(isfinite(lo), "inf2 lower not finite");
    if (upper) {
        ck_assert_msg(lo <= up * (1 + 1e-9) + 1e-300, "inf2 lower %.9g > its own upper %.9g", lo, up);
        *upper = up;
    }
    return lo;
}

/* Rows N(0, (s²/D) I): row norms ≈ s (inside, near and outside the ball for s < R, s = R, s > R). */
static void fill_rows(lipt_rng *r, float *x, int N, int D, double s) {
    lipt_rng_fill_normal(r, x, (size_t)N * D, (float)(s / sqrt((double)D)));
}

/* Hill-climb on the inf2 lower measure: Gaussian perturbations of geometrically decreasing size (sigma0 → sigma0/100
 * per entry), kept when the measure increases. x is updated in place; returns the best value. */
static double hill_climb(meter *mt, const im_model *m, float *x, double cur, int steps, double sigma0, uint64_t seed) {
    const size_t n = mt->n;
    float *xt = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    for (int s = 0; s < steps; s++) {
        const double sig = sigma0 * pow(0.01, steps > 1 ? (double)s / (steps - 1) : 0);
        lipt_rng_fill_normal(&r, g, n, 1.0f);
        for (size_t i = 0; i < n; i++) xt[i] = x[i] + (float)(sig * g[i]);
        double v = meter_inf2(mt, m, xt, NULL);
        if (v > cur) {
            cur = v;
            memcpy(x, xt, n * sizeof(float));
        }
    }
    free(xt);
    free(g);
    return cur;
}

/* Top left singular vector (length D) of the column block [c0, c0+cb) of a row-major D×C matrix: the input direction
 * x with the largest ‖x W_b‖. Power iteration on B Bᵀ in double. */
static void ref_block_top_input(const float *w, int D, int C, int c0, int cb, double *u) {
    double *t = malloc((size_t)cb * sizeof(double));
    for (int i = 0; i < D; i++) u[i] = 1.0 + 0.37 * i;
    for (int it = 0; it < 3000; it++) {
        for (int j = 0; j < cb; j++) {
            double a = 0;
            for (int i = 0; i < D; i++) a += u[i] * w[(size_t)i * C + c0 + j];
            t[j] = a;
        }
        double nn = 0;
        for (int i = 0; i < D; i++) {
            double a = 0;
            for (int j = 0; j < cb; j++) a += (double)w[(size_t)i * C + c0 + j] * t[j];
            u[i] = a;
            nn += a * a;
        }
        nn = sqrt(nn);
        if (!(nn > 0)) break;
        for (int i = 0; i < D; i++) u[i] /= nn;
    }
    free(t);
}

/* Structured inputs, k = 0, 1, ...; returns 0 when there are no more.
 * clipped-dp: every row exactly inside the clip sphere, ‖x_i‖ = R (1 − 1e-4), random directions (the clip is the
 *   identity there and the logits reach their full range R² ‖A_h‖).
 * tied L2: the query row (the last: with the causal mask it sees every token) at 0 and the other rows clustered at
 *   t·u (u: the input direction of head 0's largest ‖x W^{Q,0}‖) with ‖q_j − q_i‖²/√d = a, a ∈ {1 + W0, 0.5 + W0,
 *   2 + W0} (a − 1 = W0((N−1)/e) maximises Σ_j P_ij a_ij, the quantity the derivation bounds), then alternating
 *   ±t·u; plus 1e-3 relative noise. */
static int structured_input(const im_model *m, int k, float *x, lipt_rng *r) {
    const int N = m->N, D = m->D;
    if (m->kind != M_TIED) {
        if (k >= 2) return 0;
        lipt_rng_fill_normal(r, x, (size_t)N * D, 1.0f);
        for (int i = 0; i < N; i++) {
            double nn = 0;
            for (int c = 0; c < D; c++) nn += (double)x[i * D + c] * x[i * D + c];
            const double f = m->R * (1 - 1e-4) / sqrt(nn);
            for (int c = 0; c < D; c++) x[i * D + c] = (float)(x[i * D + c] * f);
        }
        return 1;
    }
    if (k >= 4) return 0;
    const int d = D / m->H;
    double *u = malloc((size_t)D * sizeof(double));
    ref_block_top_input(m->wq->data, D, D, 0, d, u);
    const double sig = ref_block_sigma(m->wq->data, D, D, 0, d), W = lipt_lambert_w0((N - 1) / exp(1.0));
    const double a = (k == 1 ? 0.5 : k == 2 ? 2.0 : 1.0) + W, t = sqrt(a * sqrt((double)d)) / sig;
    lipt_rng_fill_normal(r, x, (size_t)N * D, (float)(1e-3 * t));
    for (int i = 0; i < N - 1; i++) {
        const double sgn = k == 3 && (i & 1) ? -1.0 : 1.0;
        for (int c = 0; c < D; c++) x[i * D + c] += (float)(sgn * t * u[c]);
    }
    free(u);
    return 1;
}

/* ------------------------------------------------------------------------------------------- the sweep */

enum { F_R001, F_R05, F_R1, F_R3, F_R100, F_STRUCT, F_ASC, F_HILL, N_FAM };
static const char *const fam_names[N_FAM] = {"r.01", "r.5", "r1", "r3", "r100", "struct", "ascent", "hill"};
static const double rand_scales[5] = {0.01, 0.5, 1.0, 3.0, 100.0};

typedef struct {
    double fam[N_FAM];    /* worst measured/UB per input family */
    double worst;         /* over all families */
    double up_ratio;      /* worst row-sum upper estimate / UB */
    double wrong_ratio;   /* worst measured / deliberately wrong bound */
    double implied;       /* worst implied constant (see the tests) */
    char cfg[128];        /* configuration of the worst ratio */
    int n_cfg;
} fam_stats;

static void stats_init(fam_stats *s) {
    memset(s, 0, sizeof *s);
    s->implied = -INFINITY;
}

typedef struct {
    int hill_steps;     /* hill-climb steps */
    int asc_starts, asc_steps;
} sweep_budget;

typedef struct {
    double meas[N_FAM];
    double best, upper;
    float *x_best;
} cfg_result;

/* Measures m at every input family. ref_scale: the row norm the input scales are relative to (R, or for tied L2 the
 * scale where its logits are O(1)). */
static void run_config(im_model *m, meter *mt, double ref_scale, const sweep_budget *bu, uint64_t seed,
                       cfg_result *res) {
    const int N = m->N, D = m->D;
    const size_t n = (size_t)N * D;
    float *x = malloc(n * sizeof(float));
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    res->best = -1;
    res->upper = 0;
    for (int f = 0; f < 5; f++) {
        fill_rows(&r, x, N, D, rand_scales[f] * ref_scale);
        double up;
        res->meas[f] = meter_inf2(mt, m, x, &up);
        res->upper = fmax(res->upper, up);
        if (res->meas[f] > res->best) {
            res->best = res->meas[f];
            memcpy(res->x_best, x, n * sizeof(float));
        }
    }
    res->meas[F_STRUCT] = 0;
    for (int k = 0; structured_input(m, k, x, &r); k++) {
        double up, v = meter_inf2(mt, m, x, &up);
        res->upper = fmax(res->upper, up);
        res->meas[F_STRUCT] = fmax(res->meas[F_STRUCT], v);
        if (v > res->best) {
            res->best = v;
            memcpy(res->x_best, x, n * sizeof(float));
        }
    }
    /* (a) the ∞-norm ascent tool, measured in inf2 at its maximiser */
    lipt_ascent_opts o = lipt_ascent_defaults();
    o.starts = bu->asc_starts;
    o.steps = bu->asc_steps;
    o.input_scale = ref_scale / sqrt((double)D);
    o.lr = 0.05;
    o.seed = seed + 7;
    lipt_ascent_result ar = {0};
    lipt_error err = {0};
    ck_assert_msg(lipt_ascent_jac_inf(&mt->map, &o, x, &ar, &err) == LIPT_OK, "ascent: %s", err.msg);
    double up;
    res->meas[F_ASC] = meter_inf2(mt, m, x, &up);
    res->upper = fmax(res->upper, up);
    if (res->meas[F_ASC] > res->best) {
        res->best = res->meas[F_ASC];
        memcpy(res->x_best, x, n * sizeof(float));
    }
    /* (b) hill-climb on the inf2 measure from the best point so far; the step starts at half the rms entry */
    double rms = 0;
    for (size_t i = 0; i < n; i++) rms += (double)res->x_best[i] * res->x_best[i];
    rms = sqrt(rms / (double)n);
    memcpy(x, res->x_best, n * sizeof(float));
    res->meas[F_HILL] = hill_climb(mt, m, x, res->best, bu->hill_steps, 0.5 * fmax(rms, 1e-3 * ref_scale), seed + 11);
    memcpy(res->x_best, x, n * sizeof(float));
    meter_inf2(mt, m, x, &up);
    res->upper = fmax(res->upper, up);
    res->best = fmax(res->best, res->meas[F_HILL]);
    free(x);
}

static void stats_add(fam_stats *s, const cfg_result *res, double ub, double wrong, double implied, const char *cfg) {
    for (int f = 0; f < N_FAM; f++) s->fam[f] = fmax(s->fam[f], res->meas[f] / ub);
    if (res->best / ub > s->worst) {
        s->worst = res->best / ub;
        snprintf(s->cfg, sizeof s->cfg, "%s", cfg);
    }
    s->up_ratio = fmax(s->up_ratio, res->upper / ub);
    s->wrong_ratio = fmax(s->wrong_ratio, res->best / wrong);
    s->implied = fmax(s->implied, implied);
    s->n_cfg++;
}

static void print_header(const char *what) {
    printf("\n%-22s %4s", what, "cfgs");
    for (int f = 0; f < N_FAM; f++) printf(" %7s", fam_names[f]);
    printf(" %7s %8s %8s %8s  %s\n", "WORST", "upper/UB", "meas/bad", "implied", "worst configuration");
}

static void print_row(const char *label, const fam_stats *s) {
    printf("%-22s %4d", label, s->n_cfg);
    for (int f = 0; f < N_FAM; f++) printf(" %7.4f", s->fam[f]);
    printf(" %7.4f %8.4f %8.3f", s->worst, s->up_ratio, s->wrong_ratio);
    if (isfinite(s->implied)) printf(" %8.3f", s->implied);
    else printf(" %8s", "n/a");
    printf("  %s\n", s->cfg);
}

/* ------------------------------------------------------------------------------------------- lemma */

/* The softmax sensitivity of the clipped-dp derivation: for p = softmax(L) and any ΔL, the first-order change
 * ‖(diag p − p pᵀ) ΔL‖₁ ≤ max_j |ΔL_j|. The left side is convex in ΔL, so its maximum over the cube |ΔL_j| ≤ 1 is at a
 * sign vertex: enumerated exhaustively (N ≤ 10), at logits of several scales, plus finite differences of softmax. */
START_TEST(test_softmax_sensitivity) {
    double worst = 0, worst_fd = 0;
    lipt_rng r;
    lipt_rng_seed(&r, 4242);
    for (int N = 1; N <= 10; N++)
        for (int trial = 0; trial < 30; trial++) {
            double L[10], p[10], dL[10];
            const double sc = trial < 10 ? 0.1 : trial < 20 ? 1.0 : 5.0;
            double mx = -INFINITY, z = 0;
            for (int j = 0; j < N; j++) {
                L[j] = sc * lipt_rng_normal(&r);
                mx = fmax(mx, L[j]);
            }
            for (int j = 0; j < N; j++) z += (p[j] = exp(L[j] - mx));
            for (int j = 0; j < N; j++) p[j] /= z;
            for (unsigned mask = 0; mask < (1u << N); mask++) {
                double mean = 0, l1 = 0;
                for (int j = 0; j < N; j++) mean += p[j] * (dL[j] = (mask >> j & 1) ? 1.0 : -1.0);
                for (int j = 0; j < N; j++) l1 += p[j] * fabs(dL[j] - mean);
                worst = fmax(worst, l1);
                ck_assert_msg(l1 <= 1 + 1e-12, "softmax sensitivity %.6g > 1 at N = %d", l1, N);
            }
            /* finite (not infinitesimal) changes: ‖softmax(L + ΔL) − softmax(L)‖₁ ≤ max|ΔL| along the segment */
            double pl[10], zl = 0, h = 0.3 * sc, mx2 = -INFINITY;
            for (int j = 0; j < N; j++) mx2 = fmax(mx2, L[j] + h * ((j & 1) ? 1 : -1));
            for (int j = 0; j < N; j++) zl += (pl[j] = exp(L[j] + h * ((j & 1) ? 1 : -1) - mx2));
            double d1 = 0;
            for (int j = 0; j < N; j++) d1 += fabs(pl[j] / zl - p[j]);
            worst_fd = fmax(worst_fd, d1 / h);
            ck_assert(d1 <= h * (1 + 1e-12));
        }
    printf("softmax sensitivity sup ||dP||_1 / max|dL| over sign vertices: %.6f (claim <= 1; 4s(1-s) at the vertices); "
           "finite steps %.6f\n",
           worst, worst_fd);
}
END_TEST

/* ------------------------------------------------------------------------------------------- clipped-dp */

typedef struct {
    int N, D, H;
} shape3;

static const shape3 shapes[] = {{2, 2, 1}, {4, 4, 1}, {5, 4, 2}, {8, 6, 2}, {8, 8, 4}, {12, 4, 1}};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
static const float wscales[] = {0.1f, 0.5f, 1.0f, 3.0f, 10.0f};
enum { N_WSC = 5 };

/* Hill-climb and ascent budget by problem size n = N·D (a step costs one exact Jacobian, n products, plus the inf2
 * measure); heavy for the first seed at weight scales >= 1, where the maps are far from linear and the search
 * matters (at small scales random inputs already sit at the worst ratio). */
static sweep_budget budget_for(size_t n, int heavy, int mult) {
    sweep_budget b;
    if (n <= 16) b = (sweep_budget){heavy ? 100 : 30, 2, 30};
    else if (n <= 32) b = (sweep_budget){heavy ? 50 : 15, 2, 20};
    else b = (sweep_budget){heavy ? 24 : 6, 1, 15};
    b.hill_steps *= mult;
    b.asc_steps *= mult;
    return b;
}

START_TEST(test_clipped_dp_inf2) {
    const double t0 = wall();
    fam_stats fam[3][N_WSC], by_shape[N_SHAPES], by_R[4], total;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < N_WSC; b++) stats_init(&fam[a][b]);
    for (int a = 0; a < N_SHAPES; a++) stats_init(&by_shape[a]);
    for (int a = 0; a < 4; a++) stats_init(&by_R[a]);
    stats_init(&total);
    int n_viol = 0;
    double worst_val_err = 0;
    long n_jac = 0;
    char worst_viol[200] = "";
    for (int si = 0; si < N_SHAPES; si++) {
        const shape3 s = shapes[si];
        const double Rs[4] = {0.5, 1.0, sqrt((double)s.D), 5.0};
        const char *const Rn[4] = {"0.5", "1", "sqrtD", "5"};
        const int seeds = 2;
        for (int ri = 0; ri < 4; ri++)
            for (int sc = 0; sc < N_WSC; sc++)
                for (int mk = 0; mk < 3; mk++)
                    for (int sd = 0; sd < seeds; sd++) {
                        if (tu_skip(ri + sc + mk + sd)) continue; /* 1 in tu_quick() under LIPT_TEST_QUICK */
                        const uint64_t seed = 10000 + (uint64_t)si * 1000 + ri * 200 + sc * 20 + mk * 5 + sd;
                        im_model m;
                        /* mask: 0 causal, 1 unmasked, 2 causal + relative-position bias (std 1, or 5 on seed 1) */
                        im_init(&m, mk == 2 ? M_CDP_REL : M_CDP, s.N, s.D, s.H, mk == 0, (float)Rs[ri], wscales[sc],
                                sd == 1 ? 5.0f : 1.0f, seed);
                        const double ub = im_bound(&m);
                        double base, tau;
                        const double ref = ref_bound(&m, 1.0, &base, &tau);
                        const double wrong = ref_bound(&m, 0.0, NULL, NULL);
                        const double verr = fabs(ub - ref) / ref;
                        worst_val_err = fmax(worst_val_err, verr);
                        ck_assert_msg(verr < 1e-4, "clipped-dp bound %.8g vs double reference %.8g", ub, ref);
                        meter mt = meter_new(&m);
                        cfg_result res;
                        res.x_best = malloc(mt.n * sizeof(float));
                        sweep_budget bu = budget_for(mt.n, sd == 0 && wscales[sc] >= 1, 1);
                        run_config(&m, &mt, Rs[ri], &bu, seed * 31 + 3, &res);
                        n_jac += mt.n_jac;
                        /* implied coefficient of τ for one head: measured = ‖W^O‖‖W^V‖ (1 + c τ) -> c (claim: 2) */
                        const double implied = s.H == 1 && tau > 0 ? (res.best / base - 1) / tau : -INFINITY;
                        char cfg[128];
                        snprintf(cfg, sizeof cfg, "N%d D%d H%d R=%s w%g %s seed%d", s.N, s.D, s.H, Rn[ri],
                                 (double)wscales[sc], mask_names[mk], sd);
                        stats_add(&fam[mk][sc], &res, ub, wrong, implied, cfg);
                        stats_add(&by_shape[si], &res, ub, wrong, implied, cfg);
                        stats_add(&by_R[ri], &res, ub, wrong, implied, cfg);
                        stats_add(&total, &res, ub, wrong, implied, cfg);
                        if (!(res.best <= ub * (1 + 1e-5))) {
                            n_viol++;
                            printf("VIOLATION clipped-dp %s: measured %.8g > UB %.8g (ratio %.6f)\n", cfg, res.best, ub,
                                   res.best / ub);
                            if (!worst_viol[0] || res.best / ub >= total.worst)
                                snprintf(worst_viol, sizeof worst_viol, "%s ratio %.6f", cfg, res.best / ub);
                        }
                        free(res.x_best);
                        free(mt.J);
                        im_free(&m);
                    }
        printf("clipped-dp shape (%d,%d,%d) done: worst ratio %.4f (%.1f s)\n", s.N, s.D, s.H, by_shape[si].worst,
               wall() - t0);
        fflush(stdout);
    }
    printf("\nclipped-dp: Lip_{inf,2} <= ||W^O|| sqrt(sum_h (||W^V_h|| (1 + 2 R^2 ||W^Q_h|| ||W^K_h|| / sqrt d))^2)\n"
           "columns: worst measured(inf2 lower)/UB per input family (r<s>: random rows of norm ~s*R; struct: rows on the "
           "clip sphere; ascent: inf-norm ascent tool; hill: hill-climb on inf2), upper/UB: row-sum upper estimate / UB (informational), "
           "meas/bad: measured / bound with (1+2tau) -> 1, implied: (measured/(||W^O|| ||W^V||) - 1)/tau for H = 1 "
           "(claim 2)\n");
    print_header("mask / weight scale");
    for (int mk = 0; mk < 3; mk++)
        for (int sc = 0; sc < N_WSC; sc++) {
            char label[40];
            snprintf(label, sizeof label, "%s w%g", mask_names[mk], (double)wscales[sc]);
            print_row(label, &fam[mk][sc]);
        }
    print_header("shape (N,D,H)");
    for (int si = 0; si < N_SHAPES; si++) {
        char label[40];
        snprintf(label, sizeof label, "(%d,%d,%d)", shapes[si].N, shapes[si].D, shapes[si].H);
        print_row(label, &by_shape[si]);
    }
    print_header("clip radius");
    const char *const Rl[4] = {"R=0.5", "R=1", "R=sqrt(D)", "R=5"};
    for (int ri = 0; ri < 4; ri++) print_row(Rl[ri], &by_R[ri]);
    print_header("all");
    print_row("clipped-dp", &total);
    printf("clipped-dp: %d configurations, %ld exact Jacobians, bound values vs double reference worst rel err %.2e, "
           "%d violations, %.1f s\n",
           total.n_cfg, n_jac, worst_val_err, n_viol, wall() - t0);
    ck_assert_msg(n_viol == 0, "clipped-dp bound VIOLATED in %d configurations (worst: %s)", n_viol, worst_viol);
}
END_TEST

/* ------------------------------------------------------------------------------------------- tied L2 inf2 */

/* The claim is UNVERIFIED (research notes); the test measures it and fails on any violation. For reference, a short
 * argument for a per-head factor: with z = q / d^{1/4} the head is g(z)_i = Σ_j P_ij z_j, P_ij ∝ exp(−‖z_i − z_j‖²), and
 * Δg_i = Σ_j P_ij Δz_j + Cov_P(ΔL_i·, z_· − z_i) with |ΔL_ij| ≤ 4 ‖z_i − z_j‖ when ‖Δz‖_{∞,2} ≤ 1; Cauchy–Schwarz
 * gives ‖Cov‖ ≤ 4 Σ_j P_ij ‖z_i − z_j‖² ≤ 4 W0((N−1)/e), i.e. 1 + 4 W0 in place of 1 + 6 W0. The "implied" column is
 * the constant the measurements need (the test does not assume either). */
static const shape3 l2_shapes[] = {{2, 2, 1}, {4, 4, 1}, {5, 4, 2}, {8, 6, 2}, {8, 8, 4}, {12, 4, 1}, {10, 8, 2}};
enum { N_L2_SHAPES = sizeof l2_shapes / sizeof l2_shapes[0] };

START_TEST(test_l2_tied_inf2) {
    const double t0 = wall();
    fam_stats fam[2][N_WSC], by_shape[N_L2_SHAPES], total;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < N_WSC; b++) stats_init(&fam[a][b]);
    for (int a = 0; a < N_L2_SHAPES; a++) stats_init(&by_shape[a]);
    stats_init(&total);
    int n_viol = 0;
    double worst_val_err = 0, worst_kappa = 0;
    long n_jac = 0;
    char worst_viol[200] = "", worst_kappa_cfg[128] = "";
    for (int si = 0; si < N_L2_SHAPES; si++) {
        const shape3 s = l2_shapes[si];
        const int seeds = s.N * s.D <= 16 ? 4 : 3;
        const double Wn = lipt_lambert_w0((s.N - 1) / exp(1.0));
        for (int sc = 0; sc < N_WSC; sc++)
            for (int causal = 1; causal >= 0; causal--)
                for (int sd = 0; sd < seeds; sd++) {
                    if (tu_skip(sc + causal + sd)) continue; /* 1 in tu_quick() under LIPT_TEST_QUICK */
                    const uint64_t seed = 50000 + (uint64_t)si * 1000 + sc * 40 + causal * 10 + sd;
                    im_model m;
                    /* seed 1 (and 3): W^Q gets an extra factor 3 (resp. 1/3) over the other weights, so the ‖W^Q‖²
                     * power is tested separately from the common scale (large ‖W^Q‖: sharp L2 attention) */
                    im_init(&m, M_TIED, s.N, s.D, s.H, causal, 0.0f, wscales[sc], 0.0f, seed);
                    const float qf = sd == 1 ? 3.0f : sd == 3 ? 1.0f / 3 : 1.0f;
                    if (qf != 1.0f) {
                        for (size_t i = 0; i < m.wq->numel; i++) m.wq->data[i] *= qf;
                        im_converge(&m);
                    }
                    const double ub = im_bound(&m);
                    double base;
                    const double ref = ref_bound(&m, 1.0, &base, NULL);
                    const double wrong = base; /* (1 + 6 W0) -> 1 */
                    const double verr = fabs(ub - ref) / ref;
                    worst_val_err = fmax(worst_val_err, verr);
                    ck_assert_msg(verr < 1e-4, "l2 inf2 bound %.8g vs double reference %.8g", ub, ref);
                    /* inputs relative to the row norm at which the logits are O(1): ‖x W^Q‖ ~ d^{1/4} */
                    const int d = s.D / s.H;
                    double sq = 0;
                    for (int h = 0; h < s.H; h++) sq = fmax(sq, ref_block_sigma(m.wq->data, s.D, s.D, h * d, d));
                    const double ref_scale = pow((double)d, 0.25) / sq;
                    meter mt = meter_new(&m);
                    cfg_result res;
                    res.x_best = malloc(mt.n * sizeof(float));
                    /* the unverified bound: twice the search budget */
                    sweep_budget bu = budget_for(mt.n, (sd == 0 || sd == 1) && wscales[sc] >= 1, 2);
                    run_config(&m, &mt, ref_scale, &bu, seed * 17 + 5, &res);
                    n_jac += mt.n_jac;
                    /* κ = measured / base is the effective attention factor; implied constant c in (1 + c W0) */
                    const double kappa = res.best / base;
                    const double implied = s.N > 1 ? (kappa - 1) / Wn : -INFINITY;
                    char cfg[128];
                    snprintf(cfg, sizeof cfg, "N%d D%d H%d w%g WQx%.3g %s seed%d", s.N, s.D, s.H, (double)wscales[sc],
                             (double)qf, causal ? "causal" : "none", sd);
                    if (kappa > worst_kappa) {
                        worst_kappa = kappa;
                        snprintf(worst_kappa_cfg, sizeof worst_kappa_cfg, "%s", cfg);
                    }
                    stats_add(&fam[causal ? 0 : 1][sc], &res, ub, wrong, implied, cfg);
                    stats_add(&by_shape[si], &res, ub, wrong, implied, cfg);
                    stats_add(&total, &res, ub, wrong, implied, cfg);
                    if (!(res.best <= ub * (1 + 1e-5))) {
                        n_viol++;
                        printf("VIOLATION l2-tied inf2 %s: measured %.8g > UB %.8g (ratio %.6f; factor needed %.4f vs "
                               "1 + 6 W0 = %.4f)\n",
                               cfg, res.best, ub, res.best / ub, kappa, 1 + 6 * Wn);
                        if (!worst_viol[0] || res.best / ub >= total.worst)
                            snprintf(worst_viol, sizeof worst_viol, "%s ratio %.6f", cfg, res.best / ub);
                    }
                    free(res.x_best);
                    free(mt.J);
                    im_free(&m);
                }
        printf("l2-tied shape (%d,%d,%d) done: worst ratio %.4f (%.1f s)\n", s.N, s.D, s.H, by_shape[si].worst,
               wall() - t0);
        fflush(stdout);
    }
    printf("\ntied L2: Lip_{inf,2} <= ||W^O|| sqrt(sum_h L_h^2), L_h = (1 + 6 W0((N-1)/e)) ||W^Q_h||^2 ||W^V_h|| / sqrt d\n"
           "columns as for clipped-dp (r<s>: rows of norm ~s*d^{1/4}/||W^Q||; struct: query at 0, "
           "the others clustered at logit distance ~1 + W0 along W^Q's top direction); meas/bad: measured / bound with "
           "(1 + 6 W0) -> 1; implied: (measured/base - 1)/W0((N-1)/e), the constant in place of 6 the data need\n");
    print_header("mask / weight scale");
    for (int c = 0; c < 2; c++)
        for (int sc = 0; sc < N_WSC; sc++) {
            char label[40];
            snprintf(label, sizeof label, "%s w%g", c == 0 ? "causal" : "none", (double)wscales[sc]);
            print_row(label, &fam[c][sc]);
        }
    print_header("shape (N,D,H)");
    for (int si = 0; si < N_L2_SHAPES; si++) {
        char label[40];
        snprintf(label, sizeof label, "(%d,%d,%d)", l2_shapes[si].N, l2_shapes[si].D, l2_shapes[si].H);
        print_row(label, &by_shape[si]);
    }
    print_header("all");
    print_row("l2-tied inf2", &total);
    printf("l2-tied inf2: %d configurations, %ld exact Jacobians, bound values vs double reference worst rel err %.2e, "
           "largest effective factor measured/base %.4f (%s), largest implied constant %.3f (claim 6), %d violations, "
           "%.1f s\n",
           total.n_cfg, n_jac, worst_val_err, worst_kappa, worst_kappa_cfg, total.implied, n_viol, wall() - t0);
    ck_assert_msg(n_viol == 0, "l2-tied inf2 bound VIOLATED in %d configurations (worst: %s)", n_viol, worst_viol);
}
END_TEST

/* ------------------------------------------------------------------------------------------- teeth */

/* The same machinery must catch a false bound: clipped-dp with (1 + 2τ_h) replaced by 1 (the value path only) is
 * violated at some input once W^Q, W^K are large; the true bound still holds at that input. The tied L2 variant
 * with (1 + 6 W0) replaced by 1 is checked the same way. */
START_TEST(test_teeth) {
    const double t0 = wall();
    const struct { map_kind kind; shape3 s; float scale, R; int causal; } cases[] = {
        {M_CDP, {2, 2, 1}, 3.0f, 1.0f, 1},      {M_CDP, {2, 2, 1}, 10.0f, 1.0f, 0},
        {M_CDP, {4, 4, 1}, 3.0f, 2.0f, 1},      {M_CDP_REL, {4, 4, 1}, 10.0f, 1.0f, 1},
        {M_TIED, {2, 2, 1}, 3.0f, 0.0f, 0},     {M_TIED, {4, 4, 1}, 3.0f, 0.0f, 1},
    };
    double worst_bad[2] = {0, 0};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const shape3 s = cases[ci].s;
        im_model m;
        im_init(&m, cases[ci].kind, s.N, s.D, s.H, cases[ci].causal, cases[ci].R, cases[ci].scale, 1.0f, 777 + ci);
        const double ub = im_bound(&m);
        double base;
        ref_bound(&m, 1.0, &base, NULL);
        const double bad = m.kind == M_TIED ? base : ref_bound(&m, 0.0, NULL, NULL);
        meter mt = meter_new(&m);
        cfg_result res;
        res.x_best = malloc(mt.n * sizeof(float));
        double ref_scale = m.R;
        if (m.kind == M_TIED) ref_scale = pow((double)s.D / s.H, 0.25) / ref_block_sigma(m.wq->data, s.D, s.D, 0, s.D);
        sweep_budget bu = {150, 2, 30};
        run_config(&m, &mt, ref_scale, &bu, 900 + ci, &res);
        const int k = m.kind == M_TIED;
        worst_bad[k] = fmax(worst_bad[k], res.best / bad);
        char rtxt[24] = "";
        if (m.kind != M_TIED) snprintf(rtxt, sizeof rtxt, " R%g", (double)cases[ci].R);
        printf("teeth %-8s N%d D%d H%d w%g%s %s: measured %.5g, wrong bound %.5g (ratio %.3f), true UB %.5g (ratio "
               "%.4f)\n",
               m.kind == M_TIED ? "l2-tied" : m.kind == M_CDP_REL ? "cdp-rel" : "cdp", s.N, s.D, s.H,
               (double)cases[ci].scale, rtxt, m.causal ? "causal" : "none", res.best, bad,
               res.best / bad, ub, res.best / ub);
        ck_assert_msg(res.best <= ub * (1 + 1e-5), "true bound violated in the teeth case: %.8g > %.8g", res.best, ub);
        free(res.x_best);
        free(mt.J);
        im_free(&m);
    }
    printf("teeth: largest measured / deliberately wrong bound: clipped-dp %.3f, tied L2 %.3f (must be > 1) (%.1f s)\n",
           worst_bad[0], worst_bad[1], wall() - t0);
    ck_assert_msg(worst_bad[0] > 1.05, "the wrong clipped-dp bound (1+2tau -> 1) was not violated (%.4f)", worst_bad[0]);
    ck_assert_msg(worst_bad[1] > 1.05, "the wrong tied-L2 bound (1+6W0 -> 1) was not violated (%.4f)", worst_bad[1]);
}
END_TEST

int main(void) {
    lipt_set_threads(1); /* every map here is tiny and measured serially (parallel = 0): no OpenMP team overhead */
    Suite *s = suite_create("lipschitz_inf2");
    /* one case per test so that CK_RUN_CASE can pick one */
    struct { const char *name; const TTest *test; } cases[] = {
        {"softmax_sensitivity", test_softmax_sensitivity},
        {"teeth", test_teeth},
        {"clipped_dp_inf2", test_clipped_dp_inf2},
        {"l2_tied_inf2", test_l2_tied_inf2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return tu_run_suite(s);
}
