/* "A certificate is a proof" (issue 51, item 5): every certified bound lipt computes, for every attention kind and
 * norm it certifies, against an independent evaluation of the same formula in long double from norms computed here
 * (exact absolute row / column sums; spectral norms from the long double Gram matrix by Jacobi's eigenvalue method;
 * φ⁻¹ by bisection), over random weights and shapes (several seeds, small and odd shapes, scales 1e-3 to 300, entries
 * spread over many binades so that the double sums are inexact). A check fails when lipt's bound is below the
 * oracle, when a factor times the oracle exceeds c, or when a certified spectral norm is below the oracle's σ.
 * The oracle is accurate to about 1e-18 relative, a float ulp is 6e-8: a planted round-to-nearest
 * (lipt_outward_test_nearest, the state before issue 51) must be caught, and test_planted_nearest_is_caught checks
 * that it is. LIPT_OUTWARD_PLANT_NEAREST=1 in the environment plants it for the property test itself (which then
 * fails: the demonstration). */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/outward.h"
#include "lipt/bounds.h"

typedef long double LD;

/* ---- the oracle ---- */

/* φ⁻¹(y), φ(w) = w e^{w+1}, by bisection in long double */
static LD ld_phi_inv(LD y) {
    if (y <= 0) return 0;
    LD lo = 0, hi = 1;
    while (hi * expl(hi + 1) < y) hi *= 2;
    for (int k = 0; k < 200; k++) {
        LD mid = 0.5L * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        if (mid * expl(mid + 1) < y) lo = mid;
        else hi = mid;
    }
    return 0.5L * (lo + hi);
}

/* max abs row sum (tr 0) or column sum (tr 1) of the R×cb block at column c0 of the row-major [R, C] w */
static LD ld_norm_inf(const float *w, int R, int C, int c0, int cb, int tr) {
    LD best = 0;
    for (int a = 0; a < (tr ? cb : R); a++) {
        LD s = 0;
        for (int b = 0; b < (tr ? R : cb); b++) s += fabsl((LD)(tr ? w[(size_t)b * C + c0 + a] : w[(size_t)a * C + c0 + b]));
        if (s > best) best = s;
    }
    return best;
}

/* largest eigenvalue of the symmetric n×n g (destroyed), cyclic Jacobi */
static LD ld_top_eig(LD *g, int n) {
    for (int sweep = 0; sweep < 100; sweep++) {
        LD off = 0, diag = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (i == j) diag += g[i * n + j] * g[i * n + j];
                else off += g[i * n + j] * g[i * n + j];
            }
        if (off <= 1e-40L * diag || off == 0) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                const LD apq = g[p * n + q];
                if (apq == 0) continue;
                const LD th = (g[q * n + q] - g[p * n + p]) / (2 * apq);
                const LD t = (th >= 0 ? 1 : -1) / (fabsl(th) + sqrtl(th * th + 1));
                const LD c = 1 / sqrtl(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    const LD gkp = g[k * n + p], gkq = g[k * n + q];
                    g[k * n + p] = c * gkp - s * gkq;
                    g[k * n + q] = s * gkp + c * gkq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    const LD gpk = g[p * n + k], gqk = g[q * n + k];
                    g[p * n + k] = c * gpk - s * gqk;
                    g[q * n + k] = s * gpk + c * gqk;
                }
            }
    }
    LD m = 0;
    for (int i = 0; i < n; i++) m = g[i * n + i] > m ? g[i * n + i] : m;
    return m;
}

/* spectral norm of the R×cb block at column c0: sqrt of the top eigenvalue of its long double Gram matrix (float
 * products are exact in long double's 64 bits) */
static LD ld_sigma(const float *w, int R, int C, int c0, int cb) {
    LD *g = malloc(sizeof(LD) * (size_t)cb * cb);
    for (int i = 0; i < cb; i++)
        for (int j = 0; j < cb; j++) {
            LD s = 0;
            for (int k = 0; k < R; k++) s += (LD)w[(size_t)k * C + c0 + i] * (LD)w[(size_t)k * C + c0 + j];
            g[i * cb + j] = s;
        }
    const LD e = ld_top_eig(g, cb);
    free(g);
    return sqrtl(e > 0 ? e : 0);
}

/* ---- cases ---- */

typedef struct {
    int D, H, N;
    float scale;
    uint64_t seed;
} ow_case;

/* Entries N(0, scale²/D), a sixth of them moved down 2^10..2^40 (the sums of |w| in double then round), and in some
 * seeds a few exact powers of two (ties of the rounding). */
static lipt_tensor *weights(lipt_rng *r, int D, float scale, int spread) {
    lipt_tensor *t = tu_tensor(r, 2, (int[]){D, D}, scale / sqrtf((float)D), 0);
    if (spread)
        for (size_t i = 0; i < t->numel; i++) {
            const uint64_t u = lipt_rng_u64(r);
            if (u % 6 == 0) t->data[i] = ldexpf(t->data[i], -(int)(10 + (u >> 8) % 31));
            else if (spread > 1 && u % 7 == 0) t->data[i] = ldexpf(1.0f, (int)((u >> 8) % 5) - 2);
        }
    return t;
}

typedef struct {
    int checks, fails;
    double worst; /* smallest lipt / oracle - 1 seen (negative: a failure) */
    char first[512];
} ow_stats;

static void note(ow_stats *st, int ok, double rel, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void note(ow_stats *st, int ok, double rel, const char *fmt, ...) {
    st->checks++;
    if (rel < st->worst) st->worst = rel;
    if (ok) return;
    if (st->fails++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->first, sizeof st->first, fmt, ap);
        va_end(ap);
    }
}

/* lipt's value `got` (an upper bound) against the oracle's `want` */
static void check_upper(ow_stats *st, const char *what, const ow_case *k, double got, LD want) {
    const int ok = (LD)got >= want;
    note(st, ok, want > 0 ? (double)(((LD)got - want) / want) : 0.0,
         "%s below the exact value: lipt %.9g < oracle %.12Lg (D%d H%d N%d scale %g seed %llu)", what, got, want, k->D,
         k->H, k->N, (double)k->scale, (unsigned long long)k->seed);
}

/* every certificate of one case: the ∞-norm components and bound, the spectral norms, the 2, ∞2 and clipped-dp
 * bounds, their contraction factors at several c */
static void run_case(const ow_case *k, ow_stats *st) {
    const int D = k->D, H = k->H, d = D / H, N = k->N;
    lipt_rng r;
    lipt_rng_seed(&r, k->seed);
    const int spread = (int)(k->seed % 3);
    lipt_tensor *wq = weights(&r, D, k->scale, spread), *wk = weights(&r, D, k->scale, spread),
                *wv = weights(&r, D, k->scale, spread), *wo = weights(&r, D, k->scale, spread);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    lipt_no_grad_push(&ctx);
    float *vb = calloc((size_t)(4 * H * D + 4 * D), sizeof(float));
    lipt_bound_vectors vec = {vb, vb + H * D, vb + H * D + D, vb + 2 * H * D + D, vb + 3 * H * D + D,
                              vb + 3 * H * D + 2 * D, vb + 3 * H * D + 3 * D, vb + 4 * H * D + 3 * D, 0};
    lipt_bound_vectors_init(&vec, D, H, k->seed + 7);
    const LD phi = ld_phi_inv((LD)(N - 1)), sd = sqrtl((LD)d);

    /* exact norms */
    LD qm = 0, vm = 0, sq[64], sk[64], sv[64];
    for (int h = 0; h < H; h++) {
        const LD qr = ld_norm_inf(wq->data, D, D, h * d, d, 0), qc = ld_norm_inf(wq->data, D, D, h * d, d, 1);
        const LD vc = ld_norm_inf(wv->data, D, D, h * d, d, 1);
        qm = qr * qc > qm ? qr * qc : qm;
        vm = vc > vm ? vc : vm;
        sq[h] = ld_sigma(wq->data, D, D, h * d, d);
        sk[h] = ld_sigma(wk->data, D, D, h * d, d);
        sv[h] = ld_sigma(wv->data, D, D, h * d, d);
    }
    const LD oc = ld_norm_inf(wo->data, D, D, 0, D, 1), so = ld_sigma(wo->data, D, D, 0, D);

    /* lipt_norm_inf against the exact sums */
    for (int tr = 0; tr < 2; tr++) {
        lipt_tensor *n = lipt_norm_inf(&ctx, wq, tr, H);
        for (int h = 0; h < H; h++) check_upper(st, tr ? "norm_inf(W^Q_h^T)" : "norm_inf(W^Q_h)", k, n->data[h],
                                                ld_norm_inf(wq->data, D, D, h * d, d, tr));
    }
    /* certified spectral norms (both spectral_bound settings) against σ */
    for (int chol = 0; chol < 2; chol++) {
        const int g = chol ? (3 | LIPT_SPECTRAL_CHOLESKY) : 3;
        lipt_tensor *s = lipt_spectral_norm_ub(&ctx, wq, vec.uq, vec.vq, H, 0, g);
        for (int h = 0; h < H; h++) check_upper(st, "spectral_norm_ub(W^Q_h)", k, s->data[h], sq[h]);
        check_upper(st, "spectral_norm_ub(W^O)", k, lipt_spectral_norm_ub(&ctx, wo, vec.uo, vec.vo, 1, 0, g)->data[0], so);
    }

    /* the bounds of every certified (kind, norm), each with its exact-norm formula */
    LD ssum2 = 0;
    for (int h = 0; h < H; h++) ssum2 += (sq[h] * sq[h] * sv[h]) * (sq[h] * sq[h] * sv[h]);
    const LD want_inf = (4 * phi + 1 / sd) * oc * qm * vm;
    const LD want_2 = sqrtl((LD)N) / sd * (4 * phi + 1) * sqrtl(ssum2) * so;
    const LD want_inf2 = (1 + 6 * phi) / sd * sqrtl(ssum2) * so;
    struct {
        const char *name;
        lipt_attn_kind kind;
        lipt_lipnorm_kind norm;
        float R;
        LD want;
    } b[5] = {
        {"contractive-l2 inf", LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_INF, 0, want_inf},
        {"contractive-l2 2", LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_2, 0, want_2},
        {"contractive-l2 inf2", LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_INF2, 0, want_inf2},
        {"clipped-dp inf2 R=sqrt(D)", LIPT_ATTN_CLIPPED_DP, LIPT_LIPNORM_INF2, 0, 0},
        {"clipped-dp inf2 R=0.7", LIPT_ATTN_CLIPPED_DP, LIPT_LIPNORM_INF2, 0.7f, 0},
    };
    for (int i = 3; i < 5; i++) {
        lipt_config cfg;
        lipt_config_default(&cfg);
        cfg.d_model = D;
        cfg.clip_radius = b[i].R;
        const LD R = (LD)lipt_config_clip_radius(&cfg); /* the float radius the forward pass clips to */
        LD s = 0;
        for (int h = 0; h < H; h++) {
            const LD lh = sv[h] * (1 + 2 * R * R / sd * sq[h] * sk[h]);
            s += lh * lh;
        }
        b[i].want = sqrtl(s) * so;
    }
    static const float cs[] = {0.9f, 0.5f, 0.97f, 0.123f};
    for (int i = 0; i < 5; i++) {
        lipt_config cfg;
        lipt_config_default(&cfg);
        cfg.attention = b[i].kind;
        cfg.lip_norm = b[i].norm;
        cfg.d_model = D;
        cfg.n_heads = H;
        cfg.seq_len = N;
        cfg.clip_radius = b[i].R;
        for (int chol = 0; chol < 2; chol++) {
            vec.gram_iters = chol ? (3 | LIPT_SPECTRAL_CHOLESKY) : 3;
            lipt_tensor *ub = lipt_attn_bound(&ctx, &cfg, wq, wk, wv, wo, N, &vec);
            char what[96];
            snprintf(what, sizeof what, "bound %s%s", b[i].name, chol ? " (cholesky)" : "");
            check_upper(st, what, k, ub->data[0], b[i].want);
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
                /* factor · (exact bound) <= c, and the printed certificate bound · factor >= the exact product */
                const float f = lipt_contract_factor(&ctx, ub, cs[j])->data[0];
                const LD prod = (LD)f * b[i].want;
                note(st, prod <= (LD)cs[j], (double)(((LD)cs[j] - prod) / (LD)cs[j]),
                     "factor %.9g of %s times the exact bound %.12Lg = %.12Lg > c = %.9g (D%d H%d N%d scale %g seed %llu)",
                     (double)f, what, b[i].want, prod, (double)cs[j], D, H, N, (double)k->scale,
                     (unsigned long long)k->seed);
                check_upper(st, "certificate bound x factor", k, lipt_bound_mul_up(ub->data[0], f), prod);
            }
        }
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    free(vb);
    tu_free(wq), tu_free(wk), tu_free(wv), tu_free(wo);
}

static ow_stats sweep(int verbose) {
    static const int shapes[][2] = {{1, 1}, {2, 1}, {3, 1}, {3, 3}, {4, 2}, {5, 1}, {6, 3}, {7, 7}, {8, 2}, {9, 3}, {12, 4}, {16, 4}};
    static const int Ns[] = {1, 2, 3, 7, 64, 129, 1000};
    static const float scales[] = {1e-3f, 0.1f, 1.0f, 3.7f, 300.0f};
    ow_stats st = {0, 0, INFINITY, ""};
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            const ow_case k = {shapes[s][0], shapes[s][1], Ns[(s + seed) % (sizeof Ns / sizeof Ns[0])],
                               scales[(s * 3 + seed) % (sizeof scales / sizeof scales[0])], seed * 1000 + s};
            run_case(&k, &st);
            n++;
        }
    if (verbose)
        printf("outward: %d cases, %d checks, %d below the exact value; smallest margin lipt/oracle - 1 = %.3e%s%s\n", n,
               st.checks, st.fails, st.worst, st.fails ? "\n  first: " : "", st.first);
    return st;
}

START_TEST(test_certificates_are_upper_bounds) {
    const char *plant = getenv("LIPT_OUTWARD_PLANT_NEAREST");
    lipt_outward_test_nearest = plant && strcmp(plant, "1") == 0;
    if (lipt_outward_test_nearest) printf("outward: LIPT_OUTWARD_PLANT_NEAREST=1: certificates rounded to nearest\n");
    const ow_stats st = sweep(1);
    lipt_outward_test_nearest = 0;
    fflush(stdout); /* a failing check ends the forked test before stdio would flush */
    ck_assert_msg(st.fails == 0, "%d of %d certificate checks below the exact value; first: %s", st.fails, st.checks,
                  st.first);
}
END_TEST

/* The test's power: with the planted round-to-nearest the same sweep must find bounds below the exact values. */
START_TEST(test_planted_nearest_is_caught) {
    lipt_outward_test_nearest = 1;
    const ow_stats st = sweep(0);
    lipt_outward_test_nearest = 0;
    printf("outward, planted round-to-nearest: %d of %d checks below the exact value (smallest margin %.3e)\n  first: %s\n",
           st.fails, st.checks, st.worst, st.first);
    ck_assert_msg(st.fails > 0, "the planted round-to-nearest went unnoticed in %d checks", st.checks);
}
END_TEST

/* φ⁻¹'s upper bound against the bisection, and how close it stays */
START_TEST(test_phi_inv_up) {
    double worst = 0;
    for (int N = 1; N <= 100000; N = N < 20 ? N + 1 : N * 3 / 2) {
        const double up = lipt_phi_inv_up(N - 1);
        const LD want = ld_phi_inv((LD)(N - 1));
        ck_assert_msg((LD)up >= want, "phi_inv_up(%d) = %.17g < %.20Lg", N - 1, up, want);
        if (want > 0) worst = fmax(worst, (double)(((LD)up - want) / want));
    }
    printf("phi_inv_up: above the bisection everywhere, by at most %.3e relative\n", worst);
    ck_assert(worst < 1e-10);
}
END_TEST

/* Before (the planted round-to-nearest: the code before issue 51, bit for bit) and after, for a few certificates */
START_TEST(test_before_after) {
    static const ow_case ks[] = {{16, 4, 64, 1.0f, 11}, {12, 4, 129, 3.7f, 12}, {7, 7, 1000, 0.1f, 13}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const ow_case *k = &ks[i];
        lipt_rng r;
        lipt_rng_seed(&r, k->seed);
        lipt_tensor *w[4];
        for (int j = 0; j < 4; j++) w[j] = weights(&r, k->D, k->scale, 1);
        float *vb = calloc((size_t)(4 * k->H * k->D + 4 * k->D), sizeof(float));
        const int H = k->H, D = k->D;
        lipt_bound_vectors vec = {vb, vb + H * D, vb + H * D + D, vb + 2 * H * D + D, vb + 3 * H * D + D,
                                  vb + 3 * H * D + 2 * D, vb + 3 * H * D + 3 * D, vb + 4 * H * D + 3 * D, 0};
        lipt_bound_vectors_init(&vec, D, H, 5);
        static const struct { lipt_attn_kind a; lipt_lipnorm_kind n; const char *name; } v[] = {
            {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_INF, "contractive-l2 inf "},
            {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_2, "contractive-l2 2   "},
            {LIPT_ATTN_CONTRACTIVE_L2, LIPT_LIPNORM_INF2, "contractive-l2 inf2"},
            {LIPT_ATTN_CLIPPED_DP, LIPT_LIPNORM_INF2, "clipped-dp inf2    "}};
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            lipt_config cfg;
            lipt_config_default(&cfg);
            cfg.attention = v[j].a, cfg.lip_norm = v[j].n, cfg.d_model = D, cfg.n_heads = H, cfg.seq_len = k->N;
            double ub[2], f[2], cert[2];
            for (int after = 0; after < 2; after++) {
                lipt_outward_test_nearest = !after;
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 20, 1);
                lipt_no_grad_push(&ctx);
                vec.gram_iters = 3 | LIPT_SPECTRAL_CHOLESKY;
                lipt_tensor *u = lipt_attn_bound(&ctx, &cfg, w[0], w[1], w[2], w[3], k->N, &vec);
                ub[after] = u->data[0];
                f[after] = lipt_contract_factor(&ctx, u, 0.9f)->data[0];
                cert[after] = after ? lipt_bound_mul_up(ub[1], f[1]) : ub[0] * f[0];
                lipt_no_grad_pop(&ctx);
                lipt_ctx_free(&ctx);
            }
            lipt_outward_test_nearest = 0;
            printf("D%-2d H%d N%-4d %s UB %.9g -> %.9g (%+d float ulps), factor %.9g -> %.9g, certificate %.10f -> "
                   "%.10f\n", D, H, k->N, v[j].name, ub[0], ub[1], (int)((float)ub[1] != (float)ub[0]
                   ? tu_max_ulps((float[]){(float)ub[1]}, (float[]){(float)ub[0]}, 1) : 0) * ((float)ub[1] < (float)ub[0] ? -1 : 1),
                   f[0], f[1], cert[0], cert[1]);
            ck_assert(ub[1] >= ub[0] || fabs(ub[1] - ub[0]) <= 4e-7 * ub[0]);
            ck_assert(fabs(ub[1] - ub[0]) <= 4e-7 * ub[0]); /* a few float ulps: not visibly looser */
        }
        free(vb);
        for (int j = 0; j < 4; j++) tu_free(w[j]);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("lipschitz_outward");
    TCase *tc = tcase_create("outward");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_phi_inv_up);
    tcase_add_test(tc, test_certificates_are_upper_bounds);
    tcase_add_test(tc, test_planted_nearest_is_caught);
    tcase_add_test(tc, test_before_after);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
