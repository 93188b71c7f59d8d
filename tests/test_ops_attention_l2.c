/* attention_l2 and attention_l2_tied: forward against naive loops of SPEC §1 (logits -|q_i - k_j|²/s, tied values
 * Q_h W^{Q,h}ᵀ W^{V,h}/s and the equivalent P X A_h W^{V,h}), tied = untied with k = q and those values, backward
 * against finite differences (odd D and H, T = 1, B > 1, aliased inputs, input subsets), exact causality. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int H, causal; } l2_args;

static lipt_tensor *build_l2(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    l2_args *a = user;
    return lipt_attention_l2(ctx, in[0], in[1], in[2], a->H, a->causal);
}
static lipt_tensor *build_l2_kq(lipt_ctx *ctx, lipt_tensor **in, void *user) { /* k is q: aliased gradients */
    l2_args *a = user;
    return lipt_attention_l2(ctx, in[0], in[0], in[1], a->H, a->causal);
}
static lipt_tensor *build_tied(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    l2_args *a = user;
    return lipt_attention_l2_tied(ctx, in[0], in[1], in[2], a->H, a->causal);
}

#define IDX(b, t, c) (((size_t)(b) * T + (t)) * D + (c))

/* Straight from SPEC §1: L_ij = -|q_i - k_j|² / s over j <= i (causal), P = softmax(L), out_h = P V_h,
 * with V given in double ([B,T,D], head h in columns h*d..). */
static void ref_l2(const float *q, const float *k, const double *V, int B, int T, int D, int H, int causal,
                   double *out) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *lg = malloc((size_t)(T ? T : 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const int n = causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double dist = 0;
                    for (int c = 0; c < d; c++) {
                        const double diff = (double)q[IDX(b, i, h * d + c)] - k[IDX(b, j, h * d + c)];
                        dist += diff * diff;
                    }
                    lg[j] = -dist / s;
                    if (lg[j] > mx) mx = lg[j];
                }
                for (int j = 0; j < n; j++) sum += (lg[j] = exp(lg[j] - mx));
                for (int c = 0; c < d; c++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += lg[j] / sum * V[IDX(b, j, h * d + c)];
                    out[IDX(b, i, h * d + c)] = o;
                }
            }
    free(lg);
}

/* Tied values in double: V_h = Q_h M_h, M_h[a][c] = Σ_r W^Q[r][h d + a] W^V[r][h d + c] / s. */
static void ref_tied_values(const float *q, const float *wq, const float *wv, int B, int T, int D, int H, double *V) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *M = malloc((size_t)d * d * sizeof(double));
    for (int h = 0; h < H; h++) {
        for (int a = 0; a < d; a++)
            for (int c = 0; c < d; c++) {
                double m = 0;
                for (int r = 0; r < D; r++) m += (double)wq[(size_t)r * D + h * d + a] * wv[(size_t)r * D + h * d + c];
                M[a * d + c] = m / s;
            }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < d; c++) {
                    double x = 0;
                    for (int a = 0; a < d; a++) x += (double)q[IDX(b, t, h * d + a)] * M[a * d + c];
                    V[IDX(b, t, h * d + c)] = x;
                }
    }
    free(M);
}

static double *to_double(const float *x, size_t n) {
    double *y = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* {B, T, D, H}: size-1 dims, odd D and H, B > 1, a parallel-size case and long causal ones (row blocks). */
static const int fwd_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 5, 6, 3}, {1, 7, 5, 1}, {3, 4, 8, 2},
                                    {2, 33, 32, 4}, {1, 130, 8, 2}, {2, 200, 6, 3}};
static const int grad_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 3, 6, 3}, {1, 5, 5, 1},
                                     {2, 4, 8, 2}, {1, 9, 6, 2}, {1, 130, 4, 2}};
#define NSH(a) (sizeof(a) / sizeof((a)[0]))

/* W^Q entries of order D^{-1/2}: q = X W^Q has unit scale and the tied values Q_h M_h stay of order one. */
static float wq_std(int D) { return 1.5f / sqrtf((float)D); }

START_TEST(test_l2_forward) {
    double worst = 0;
    for (size_t si = 0; si < NSH(fwd_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const int B = fwd_shapes[si][0], T = fwd_shapes[si][1], D = fwd_shapes[si][2], H = fwd_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 31 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *q = tu_tensor(&rng, 3, sh, 1.0f, 1), *k = tu_tensor(&rng, 3, sh, 1.0f, 1),
                            *v = tu_tensor(&rng, 3, sh, 1.0f, 1);
                const size_t n = q->numel;
                double *vd = to_double(v->data, n), *ref = malloc(n * sizeof(double));
                ref_l2(q->data, k->data, vd, B, T, D, H, causal, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = lipt_attention_l2(&ctx, q, k, v, H, causal);
                ck_assert_int_eq(o->ndim, 3);
                ck_assert_int_eq(o->shape[0], B);
                ck_assert_int_eq(o->shape[1], T);
                ck_assert_int_eq(o->shape[2], D);
                const double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "l2 forward B%d T%d D%d H%d causal%d: rel err %.3e", B, T, D, H, causal, e);
                if (e > worst) worst = e;
                lipt_no_grad_push(&ctx);
                lipt_tensor *o2 = lipt_attention_l2(&ctx, q, k, v, H, causal);
                lipt_no_grad_pop(&ctx);
                ck_assert_msg(memcmp(o->data, o2->data, n * sizeof(float)) == 0, "no-grad forward differs");
                lipt_ctx_free(&ctx);
                free(vd);
                free(ref);
                tu_free(q);
                tu_free(k);
                tu_free(v);
            }
    printf("attention_l2 (untied) forward: worst rel err %.3e (tol 1e-5)\n", worst);
}
END_TEST

/* Tied forward against (a) the SPEC formula from q, wq, wv, (b) the untied op with k = q and v = Q_h M_h,
 * (c) P X A_h W^{V,h} from X with q = X W^Q. */
START_TEST(test_tied_forward) {
    double worst_ref = 0, worst_untied = 0, worst_x = 0;
    for (size_t si = 0; si < NSH(fwd_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const int B = fwd_shapes[si][0], T = fwd_shapes[si][1], D = fwd_shapes[si][2], H = fwd_shapes[si][3];
                const int d = D / H;
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 53 + si);
                const int sh[3] = {B, T, D}, wsh[2] = {D, D};
                lipt_tensor *X = tu_tensor(&rng, 3, sh, 1.0f, 0);
                lipt_tensor *wq = tu_tensor(&rng, 2, wsh, wq_std(D), 1), *wv = tu_tensor(&rng, 2, wsh, 1.0f, 1);
                lipt_tensor *q = tu_tensor(NULL, 3, sh, 0.0f, 1);
                const size_t n = q->numel;
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < T; t++)
                        for (int c = 0; c < D; c++) {
                            double x = 0;
                            for (int r = 0; r < D; r++) x += (double)X->data[IDX(b, t, r)] * wq->data[(size_t)r * D + c];
                            q->data[IDX(b, t, c)] = (float)x;
                        }
                double *V = malloc(n * sizeof(double)), *ref = malloc(n * sizeof(double));
                ref_tied_values(q->data, wq->data, wv->data, B, T, D, H, V);
                ref_l2(q->data, q->data, V, B, T, D, H, causal, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = lipt_attention_l2_tied(&ctx, q, wq, wv, H, causal);
                ck_assert_int_eq(o->shape[0], B);
                ck_assert_int_eq(o->shape[1], T);
                ck_assert_int_eq(o->shape[2], D);
                double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied forward B%d T%d D%d H%d causal%d: rel err %.3e", B, T, D, H, causal, e);
                if (e > worst_ref) worst_ref = e;
                lipt_no_grad_push(&ctx);
                lipt_tensor *o2 = lipt_attention_l2_tied(&ctx, q, wq, wv, H, causal);
                lipt_no_grad_pop(&ctx);
                ck_assert_msg(memcmp(o->data, o2->data, n * sizeof(float)) == 0, "no-grad tied forward differs");

                /* (b) untied op with k = q and the tied values */
                lipt_tensor *vt = tu_tensor(NULL, 3, sh, 0.0f, 0);
                for (size_t i = 0; i < n; i++) vt->data[i] = (float)V[i];
                lipt_tensor *ou = lipt_attention_l2(&ctx, q, q, vt, H, causal);
                e = tu_max_rel_err_f(o->data, ou->data, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied vs untied(k=q, v=QM) B%d T%d D%d H%d causal%d: %.3e", B, T, D, H,
                              causal, e);
                if (e > worst_untied) worst_untied = e;

                /* (c) f^h(X) = P X A_h W^{V,h} with A_h = W^{Q,h} W^{Q,h}ᵀ / s formed explicitly (D×D) */
                double *XA = malloc(n * sizeof(double)), *A = malloc((size_t)D * D * sizeof(double));
                double *xa = malloc((size_t)D * sizeof(double));
                const double s = sqrt((double)d);
                for (int h = 0; h < H; h++) {
                    for (int r = 0; r < D; r++)
                        for (int u = 0; u < D; u++) {
                            double acc = 0;
                            for (int a = 0; a < d; a++)
                                acc += (double)wq->data[(size_t)r * D + h * d + a] * wq->data[(size_t)u * D + h * d + a];
                            A[(size_t)r * D + u] = acc / s;
                        }
                    for (int b = 0; b < B; b++)
                        for (int t = 0; t < T; t++) {
                            for (int u = 0; u < D; u++) {
                                double acc = 0;
                                for (int r = 0; r < D; r++) acc += (double)X->data[IDX(b, t, r)] * A[(size_t)r * D + u];
                                xa[u] = acc;
                            }
                            for (int c = 0; c < d; c++) {
                                double acc = 0;
                                for (int u = 0; u < D; u++) acc += xa[u] * wv->data[(size_t)u * D + h * d + c];
                                XA[IDX(b, t, h * d + c)] = acc;
                            }
                        }
                }
                /* P from the float q the op saw (q = X W^Q rounded), values from X directly */
                double *refx = malloc(n * sizeof(double));
                ref_l2(q->data, q->data, XA, B, T, D, H, causal, refx);
                free(A);
                free(xa);
                e = tu_max_rel_err(o->data, refx, n, 1e-6);
                ck_assert_msg(e < 1e-5, "tied vs P X A W^V B%d T%d D%d H%d causal%d: %.3e", B, T, D, H, causal, e);
                if (e > worst_x) worst_x = e;
                free(XA);
                free(refx);
                lipt_ctx_free(&ctx);
                free(V);
                free(ref);
                tu_free(vt);
                tu_free(X);
                tu_free(q);
                tu_free(wq);
                tu_free(wv);
            }
    printf("attention_l2_tied forward: worst rel err %.3e vs SPEC formula, %.3e vs untied(k=q, v=QM), %.3e vs "
           "P X A W^V (tol 1e-5)\n",
           worst_ref, worst_untied, worst_x);
}
END_TEST

START_TEST(test_l2_gradcheck) {
    double worst = 0, worst_alias = 0;
    for (size_t si = 0; si < NSH(grad_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const int B = grad_shapes[si][0], T = grad_shapes[si][1], D = grad_shapes[si][2],
                          H = grad_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 97 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *in[3];
                for (int i = 0; i < 3; i++) in[i] = tu_tensor(&rng, 3, sh, 1.0f, 1);
                l2_args a = {H, causal};
                char label[96];
                snprintf(label, sizeof label, "attention_l2 B%d T%d D%d H%d causal%d s%d", B, T, D, H, causal,
                         (int)seed);
                double g = tu_gradcheck(label, build_l2, &a, in, 3, &(tu_gradcheck_opts){.seed = seed, .tol = 5e-3});
                if (g > worst) worst = g;
                snprintf(label, sizeof label, "attention_l2 k=q B%d T%d D%d H%d causal%d s%d", B, T, D, H, causal,
                         (int)seed);
                g = tu_gradcheck(label, build_l2_kq, &a, (lipt_tensor *[]){in[0], in[2]}, 2,
                                 &(tu_gradcheck_opts){.seed = seed + 10, .tol = 5e-3});
                if (g > worst_alias) worst_alias = g;
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    printf("attention_l2 gradcheck: worst rel err %.3e, with k aliasing q %.3e (tol 5e-3)\n", worst, worst_alias);
}
END_TEST

START_TEST(test_tied_gradcheck) {
    double worst = 0;
    for (size_t si = 0; si < NSH(grad_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const int B = grad_shapes[si][0], T = grad_shapes[si][1], D = grad_shapes[si][2],
                          H = grad_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 131 + si);
                const int sh[3] = {B, T, D}, wsh[2] = {D, D};
                lipt_tensor *in[3] = {tu_tensor(&rng, 3, sh, 1.0f, 1), tu_tensor(&rng, 2, wsh, wq_std(D), 1),
                                      tu_tensor(&rng, 2, wsh, 1.0f, 1)};
                l2_args a = {H, causal};
                char label[96];
                snprintf(label, sizeof label, "attention_l2_tied B%d T%d D%d H%d causal%d s%d", B, T, D, H, causal,
                         (int)seed);
                const double g =
                    tu_gradcheck(label, build_tied, &a, in, 3, &(tu_gradcheck_opts){.seed = seed, .tol = 5e-3});
                if (g > worst) worst = g;
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    printf("attention_l2_tied gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Only some inputs need a gradient (the others get lipt_grad_of = NULL and are skipped). */
START_TEST(test_grad_subsets) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++)
        for (int mask = 1; mask < 7; mask++)
            for (int causal = 0; causal < 2; causal++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 700 + mask + 10 * tied);
                const int sh[3] = {2, 6, 6}, wsh[2] = {6, 6};
                lipt_tensor *in[3];
                in[0] = tu_tensor(&rng, 3, sh, 1.0f, mask & 1);
                in[1] = tied ? tu_tensor(&rng, 2, wsh, wq_std(6), (mask >> 1) & 1)
                             : tu_tensor(&rng, 3, sh, 1.0f, (mask >> 1) & 1);
                in[2] = tied ? tu_tensor(&rng, 2, wsh, 1.0f, (mask >> 2) & 1)
                             : tu_tensor(&rng, 3, sh, 1.0f, (mask >> 2) & 1);
                l2_args a = {3, causal};
                char label[96];
                snprintf(label, sizeof label, "attention_%s grads %d%d%d causal%d", tied ? "l2_tied" : "l2",
                         mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, causal);
                const double g = tu_gradcheck(label, tied ? build_tied : build_l2, &a, in, 3,
                                              &(tu_gradcheck_opts){.seed = 9, .tol = 5e-3});
                if (g > worst) worst = g;
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    printf("attention_l2 / l2_tied subset gradcheck: worst rel err %.3e (tol 5e-3)\n", worst);
}
END_TEST

/* Backward accumulates: with gradients already holding values, it adds the same amount as from zero. */
START_TEST(test_accumulates) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 99 + causal + 2 * tied);
            const int sh[3] = {2, 130, 6}, wsh[2] = {6, 6};
            lipt_tensor *in[3];
            in[0] = tu_tensor(&rng, 3, sh, 1.0f, 1);
            in[1] = tied ? tu_tensor(&rng, 2, wsh, wq_std(6), 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
            in[2] = tied ? tu_tensor(&rng, 2, wsh, 1.0f, 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
            const size_t n = in[0]->numel;
            float *seed = malloc(n * sizeof(float)), *fresh[3], *pre[3];
            lipt_rng_fill_normal(&rng, seed, n, 1.0f);
            for (int pass = 0; pass < 2; pass++) {
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                for (int i = 0; i < 3; i++) {
                    float *g = malloc(in[i]->numel * sizeof(float));
                    for (size_t x = 0; x < in[i]->numel; x++) g[x] = pass ? 1.5f : 0.0f;
                    (pass ? pre : fresh)[i] = g;
                    in[i]->grad = g; /* lipt_grad_of accumulates into an existing buffer */
                }
                lipt_tensor *o = tied ? lipt_attention_l2_tied(&ctx, in[0], in[1], in[2], 3, causal)
                                      : lipt_attention_l2(&ctx, in[0], in[1], in[2], 3, causal);
                lipt_backward_seeded(&ctx, o, seed);
                for (int i = 0; i < 3; i++) in[i]->grad = NULL;
                lipt_ctx_free(&ctx);
            }
            for (int i = 0; i < 3; i++) {
                for (size_t x = 0; x < in[i]->numel; x++) pre[i][x] -= 1.5f;
                const double e = tu_max_rel_err_f(pre[i], fresh[i], in[i]->numel, 1e-3);
                ck_assert_msg(e < 1e-5, "%s input %d: backward does not accumulate (rel err %.3e)",
                              tied ? "tied" : "untied", i, e);
                if (e > worst) worst = e;
                free(pre[i]);
                free(fresh[i]);
            }
            free(seed);
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_l2 / l2_tied accumulation into existing gradients: worst rel err %.3e\n", worst);
}
END_TEST

/* Causal: changing rows t > t0 of the [B,T,D] inputs leaves output rows <= t0 bit-identical, and a loss on
 * rows <= t0 gives exactly zero gradient at rows > t0 (the weights of the tied op keep a gradient). */
START_TEST(test_causal_future) {
    const int shapes[][5] = {{2, 7, 6, 3, 3}, {1, 130, 8, 2, 70}, {1, 5, 5, 1, 0}, {2, 9, 4, 4, 8}};
    for (int tied = 0; tied < 2; tied++)
        for (size_t si = 0; si < NSH(shapes); si++) {
            const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3], t0 = shapes[si][4];
            lipt_rng rng;
            lipt_rng_seed(&rng, 77 + si);
            const int sh[3] = {B, T, D}, wsh[2] = {D, D};
            lipt_tensor *in[3];
            in[0] = tu_tensor(&rng, 3, sh, 1.0f, 1);
            in[1] = tied ? tu_tensor(&rng, 2, wsh, wq_std(D), 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
            in[2] = tied ? tu_tensor(&rng, 2, wsh, 1.0f, 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
            const int nseq = tied ? 1 : 3; /* inputs with a time axis */
            const size_t n = in[0]->numel;
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            float *o1 = malloc(n * sizeof(float));
            lipt_tensor *o = tied ? lipt_attention_l2_tied(&ctx, in[0], in[1], in[2], H, 1)
                                  : lipt_attention_l2(&ctx, in[0], in[1], in[2], H, 1);
            memcpy(o1, o->data, n * sizeof(float));
            for (int i = 0; i < nseq; i++)
                for (int b = 0; b < B; b++)
                    for (int t = t0 + 1; t < T; t++)
                        for (int c = 0; c < D; c++) in[i]->data[IDX(b, t, c)] += 3.0f * lipt_rng_normal(&rng);
            lipt_ctx_reset(&ctx);
            o = tied ? lipt_attention_l2_tied(&ctx, in[0], in[1], in[2], H, 1)
                     : lipt_attention_l2(&ctx, in[0], in[1], in[2], H, 1);
            int changed_future = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < D; c++) {
                        const size_t x = IDX(b, t, c);
                        if (t <= t0)
                            ck_assert_msg(memcmp(&o->data[x], &o1[x], sizeof(float)) == 0,
                                          "%s: row %d <= %d changed by a future input", tied ? "tied" : "untied", t,
                                          t0);
                        else if (o->data[x] != o1[x])
                            changed_future = 1;
                    }
            ck_assert_msg(changed_future || t0 == T - 1, "future rows did not change at all");
            float *seed = calloc(n, sizeof(float));
            for (int b = 0; b < B; b++)
                for (int t = 0; t <= t0; t++)
                    for (int c = 0; c < D; c++) seed[IDX(b, t, c)] = lipt_rng_normal(&rng);
            lipt_backward_seeded(&ctx, o, seed);
            for (int i = 0; i < 3; i++) {
                double past = 0;
                if (i < nseq) {
                    for (int b = 0; b < B; b++)
                        for (int t = 0; t < T; t++)
                            for (int c = 0; c < D; c++) {
                                const float g = in[i]->grad[IDX(b, t, c)];
                                if (t > t0)
                                    ck_assert_msg(g == 0.0f, "%s: input %d row %d > %d has gradient %g",
                                                  tied ? "tied" : "untied", i, t, t0, g);
                                else
                                    past += fabs(g);
                            }
                } else {
                    for (size_t x = 0; x < in[i]->numel; x++) past += fabs(in[i]->grad[x]);
                }
                /* with t0 = 0 row 0 sees only itself (P = 1): untied q and k get no gradient there */
                ck_assert_msg((t0 == 0 && !tied && i < 2) || past > 0, "input %d: no gradient at past rows", i);
                in[i]->grad = NULL;
            }
            free(seed);
            free(o1);
            lipt_ctx_free(&ctx);
            for (int i = 0; i < 3; i++) tu_free(in[i]);
        }
    printf("attention_l2 / l2_tied causal: future inputs change no earlier output bit and get exactly zero "
           "gradient\n");
}
END_TEST

/* One thread and two threads (the parallel (batch, head) loop) agree, forward and backward. */
START_TEST(test_threads) {
    double worst = 0;
    for (int tied = 0; tied < 2; tied++) {
        lipt_rng rng;
        lipt_rng_seed(&rng, 31337 + tied);
        const int sh[3] = {3, 40, 24}, wsh[2] = {24, 24};
        lipt_tensor *in[3];
        in[0] = tu_tensor(&rng, 3, sh, 1.0f, 1);
        in[1] = tied ? tu_tensor(&rng, 2, wsh, wq_std(24), 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
        in[2] = tied ? tu_tensor(&rng, 2, wsh, 1.0f, 1) : tu_tensor(&rng, 3, sh, 1.0f, 1);
        const size_t n = in[0]->numel;
        float *res[2][4];
        for (int pass = 0; pass < 2; pass++) {
            lipt_set_threads(pass ? 2 : 1);
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *o = tied ? lipt_attention_l2_tied(&ctx, in[0], in[1], in[2], 4, 1)
                                  : lipt_attention_l2(&ctx, in[0], in[1], in[2], 4, 1);
            float *seed = malloc(n * sizeof(float));
            lipt_rng r2;
            lipt_rng_seed(&r2, 5);
            lipt_rng_fill_normal(&r2, seed, n, 1.0f);
            lipt_backward_seeded(&ctx, o, seed);
            res[pass][0] = malloc(n * sizeof(float));
            memcpy(res[pass][0], o->data, n * sizeof(float));
            for (int i = 0; i < 3; i++) {
                res[pass][i + 1] = malloc(in[i]->numel * sizeof(float));
                memcpy(res[pass][i + 1], in[i]->grad, in[i]->numel * sizeof(float));
                in[i]->grad = NULL;
            }
            free(seed);
            lipt_ctx_free(&ctx);
        }
        for (int i = 0; i < 4; i++) {
            const size_t m = i ? in[i - 1]->numel : n;
            const double e = tu_max_rel_err_f(res[1][i], res[0][i], m, 1e-6);
            ck_assert_msg(e < 1e-5, "%s: threads 1 vs 2 differ in %s: %.3e", tied ? "tied" : "untied",
                          i ? "a gradient" : "the output", e);
            if (e > worst) worst = e;
            free(res[0][i]);
            free(res[1][i]);
        }
        for (int i = 0; i < 3; i++) tu_free(in[i]);
    }
    lipt_set_threads(2);
    printf("attention_l2 / l2_tied threads 1 vs 2: worst rel diff %.3e\n", worst);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_attention_l2");
    TCase *tc = tcase_create("attention_l2");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_l2_forward);
    tcase_add_test(tc, test_tied_forward);
    tcase_add_test(tc, test_l2_gradcheck);
    tcase_add_test(tc, test_tied_gradcheck);
    tcase_add_test(tc, test_grad_subsets);
    tcase_add_test(tc, test_accumulates);
    tcase_add_test(tc, test_causal_future);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
