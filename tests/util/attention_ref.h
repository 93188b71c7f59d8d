/* Shared by the attention tests: the naive SPEC §1 reference, the test shapes, and the checks DP and L2 both run. */
#ifndef LIPT_TEST_ATTENTION_REF_H
#define LIPT_TEST_ATTENTION_REF_H

/* static inline throughout, so that it needs no CMake line and a test that skips a helper gets no warning. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NSH(a) (sizeof(a) / sizeof((a)[0]))
#define IDX(b, t, c) (((size_t)(b) * T + (t)) * D + (c)) /* element (b, t, c) of a [B,T,D] tensor */

/* lipt_attention_dp, lipt_attention_l2 and lipt_attention_l2_tied: (q, k, v) or (q, wq, wv), then H and causal. */
typedef lipt_tensor *(*attn_op)(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal);

typedef struct {
    attn_op op;
    int H, causal;
} attn_args;

static inline lipt_tensor *attn_build(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    const attn_args *a = user;
    return a->op(ctx, in[0], in[1], in[2], a->H, a->causal);
}
static inline lipt_tensor *attn_build_kq(lipt_ctx *ctx, lipt_tensor **in, void *user) { /* k is q: aliased grads */
    const attn_args *a = user;
    return a->op(ctx, in[0], in[0], in[1], a->H, a->causal);
}
static inline lipt_tensor *attn_build_self(lipt_ctx *ctx, lipt_tensor **in, void *user) { /* q = k = v */
    const attn_args *a = user;
    return a->op(ctx, in[0], in[0], in[0], a->H, a->causal);
}

/* Straight from SPEC §1: per (b,h), logits L_ij = q_i·k_j / s (DP) or -|q_i - k_j|² / s (l2) over j <= i
 * (causal), each through map(L, p) when map is given (a logit map's reference, include/lipt/logit_map.h),
 * P = softmax(L), out_h = P V_h, with V given in double ([B,T,D], head h in columns h*d..). */
static inline void attn_ref_map(const float *q, const float *k, const double *V, int B, int T, int D, int H,
                                int causal, int l2, double (*map)(double z, double p), double p, double *out) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *lg = malloc((size_t)(T ? T : 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const int n = causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double acc = 0;
                    for (int c = 0; c < d; c++) {
                        const float qc = q[IDX(b, i, h * d + c)], kc = k[IDX(b, j, h * d + c)];
                        if (l2) {
                            const double diff = (double)qc - kc;
                            acc += diff * diff;
                        } else {
                            acc += (double)qc * kc;
                        }
                    }
                    lg[j] = (l2 ? -acc : acc) / s;
                    if (map) lg[j] = map(lg[j], p);
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

static inline void attn_ref(const float *q, const float *k, const double *V, int B, int T, int D, int H, int causal,
                            int l2, double *out) {
    attn_ref_map(q, k, V, B, T, D, H, causal, l2, NULL, 0, out);
}

static inline double *attn_to_double(const float *x, size_t n) {
    double *y = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* {B, T, D, H}: size-1 dims, odd D and H, B > 1, a parallel-size case and long causal ones (row blocks). */
static const int fwd_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 5, 6, 3}, {1, 7, 5, 1}, {3, 4, 8, 2},
                                    {2, 33, 32, 4}, {1, 130, 8, 2}, {2, 200, 6, 3}};
static const int grad_shapes[][4] = {{1, 1, 1, 1}, {1, 1, 4, 2}, {2, 3, 6, 3}, {1, 5, 5, 1},
                                     {2, 4, 8, 2}, {1, 9, 6, 2}, {1, 130, 4, 2}};

/* W^Q entries of order D^{-1/2}: q = X W^Q has unit scale and the tied values Q_h M_h stay of order one. */
static inline float wq_std(int D) { return 1.5f / sqrtf((float)D); }

/* The three inputs, N(0,1) [B,T,D] (sh) each, or for the tied op q then W^Q (std wq_std) and W^V [D,D].
 * Bit i of grad_mask: whether in[i] requires grad. */
static inline void attn_inputs(lipt_rng *rng, int tied, const int sh[3], int grad_mask, lipt_tensor **in) {
    const int D = sh[2], wsh[2] = {D, D};
    const int g1 = (grad_mask >> 1) & 1, g2 = (grad_mask >> 2) & 1;
    in[0] = tu_tensor(rng, 3, sh, 1.0f, grad_mask & 1);
    in[1] = tied ? tu_tensor(rng, 2, wsh, wq_std(D), g1) : tu_tensor(rng, 3, sh, 1.0f, g1);
    in[2] = tied ? tu_tensor(rng, 2, wsh, 1.0f, g2) : tu_tensor(rng, 3, sh, 1.0f, g2);
}

/* The untied op against attn_ref over fwd_shapes, both maskings, two seeds (tol 1e-5); no-grad mode (per-thread
 * scratch instead of saved P) must give the same bits. `what` names the op in messages. Returns the worst error. */
static inline double attn_check_forward(attn_op op, int l2, const char *what) {
    double worst = 0;
    for (size_t si = 0; si < NSH(fwd_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const int B = fwd_shapes[si][0], T = fwd_shapes[si][1], D = fwd_shapes[si][2], H = fwd_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 31 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *in[3];
                attn_inputs(&rng, 0, sh, 7, in);
                const size_t n = in[0]->numel;
                double *vd = attn_to_double(in[2]->data, n), *ref = malloc(n * sizeof(double));
                attn_ref(in[0]->data, in[1]->data, vd, B, T, D, H, causal, l2, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *o = op(&ctx, in[0], in[1], in[2], H, causal);
                ck_assert_int_eq(o->ndim, 3);
                ck_assert_int_eq(o->shape[0], B);
                ck_assert_int_eq(o->shape[1], T);
                ck_assert_int_eq(o->shape[2], D);
                ck_assert(o->requires_grad);
                const double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "%s forward B%d T%d D%d H%d causal%d: rel err %.3e", what, B, T, D, H, causal,
                              e);
                if (e > worst) worst = e;
                lipt_no_grad_push(&ctx);
                lipt_tensor *o2 = op(&ctx, in[0], in[1], in[2], H, causal);
                lipt_no_grad_pop(&ctx);
                ck_assert(!o2->requires_grad);
                ck_assert_msg(memcmp(o->data, o2->data, n * sizeof(float)) == 0, "no-grad forward differs");
                lipt_ctx_free(&ctx);
                free(vd);
                free(ref);
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    return worst;
}

/* tu_gradcheck of op over grad_shapes, both maskings, three seeds (inputs as attn_inputs with `tied`, seeded
 * seed * seed_mul + shape index), labelled `name`; and if alias is given, of that aliased form (labelled
 * "name alias_name") fed with in[alias_in[0..n_alias-1]], its worst error in *worst_alias. Returns the worst. */
static inline double attn_check_grad(attn_op op, int tied, uint64_t seed_mul, const char *name, tu_build_fn alias,
                                     const char *alias_name, const int *alias_in, int n_alias, double *worst_alias) {
    double worst = 0;
    if (alias) *worst_alias = 0;
    for (size_t si = 0; si < NSH(grad_shapes); si++)
        for (int causal = 0; causal < 2; causal++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const int B = grad_shapes[si][0], T = grad_shapes[si][1], D = grad_shapes[si][2],
                          H = grad_shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * seed_mul + si);
                lipt_tensor *in[3], *ain[3];
                attn_inputs(&rng, tied, (const int[]){B, T, D}, 7, in);
                attn_args a = {op, H, causal};
                char label[96];
                snprintf(label, sizeof label, "%s B%d T%d D%d H%d causal%d s%d", name, B, T, D, H, causal, (int)seed);
                double g = tu_gradcheck(label, attn_build, &a, in, 3, &(tu_gradcheck_opts){.seed = seed, .tol = 5e-3});
                if (g > worst) worst = g;
                if (alias) {
                    for (int i = 0; i < n_alias; i++) ain[i] = in[alias_in[i]];
                    snprintf(label, sizeof label, "%s %s B%d T%d D%d H%d causal%d s%d", name, alias_name, B, T, D, H,
                             causal, (int)seed);
                    g = tu_gradcheck(label, alias, &a, ain, n_alias,
                                     &(tu_gradcheck_opts){.seed = seed + 10, .tol = 5e-3});
                    if (g > *worst_alias) *worst_alias = g;
                }
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    return worst;
}

/* Backward accumulates: with gradients already holding 1.5, it adds the same amount as from zero (H = 3).
 * The loss weights come from rng. `what` prefixes the messages. Returns the worst relative difference. */
static inline double attn_check_accumulates(attn_op op, lipt_tensor **in, int causal, lipt_rng *rng,
                                            const char *what) {
    double worst = 0;
    const size_t n = in[0]->numel;
    float *seed = malloc(n * sizeof(float)), *fresh[3], *pre[3];
    lipt_rng_fill_normal(rng, seed, n, 1.0f);
    for (int pass = 0; pass < 2; pass++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        for (int i = 0; i < 3; i++) {
            float *g = malloc(in[i]->numel * sizeof(float));
            for (size_t x = 0; x < in[i]->numel; x++) g[x] = pass ? 1.5f : 0.0f;
            (pass ? pre : fresh)[i] = g;
            in[i]->grad = g; /* lipt_grad_of accumulates into an existing buffer */
        }
        lipt_tensor *o = op(&ctx, in[0], in[1], in[2], 3, causal);
        lipt_backward_seeded(&ctx, o, seed);
        for (int i = 0; i < 3; i++) in[i]->grad = NULL;
        lipt_ctx_free(&ctx);
    }
    for (int i = 0; i < 3; i++) {
        for (size_t x = 0; x < in[i]->numel; x++) pre[i][x] -= 1.5f;
        const double e = tu_max_rel_err_f(pre[i], fresh[i], in[i]->numel, 1e-3);
        ck_assert_msg(e < 1e-5, "%sinput %d: backward does not accumulate (rel err %.3e)", what, i, e);
        if (e > worst) worst = e;
        free(pre[i]);
        free(fresh[i]);
    }
    free(seed);
    return worst;
}

/* Causal (H heads): changing rows t > t0 of the [B,T,D] inputs (in[0] only when tied: the others are weights)
 * leaves output rows <= t0 bit-identical, and a loss on rows <= t0 gives exactly zero gradient at rows > t0 while
 * the weights keep one. Perturbations and loss weights come from rng. `what` prefixes the messages. */
static inline void attn_check_causal_future(attn_op op, lipt_tensor **in, int tied, int H, int t0, lipt_rng *rng,
                                            const char *what) {
    const int B = in[0]->shape[0], T = in[0]->shape[1], D = in[0]->shape[2];
    const int nseq = tied ? 1 : 3; /* inputs with a time axis */
    const size_t n = in[0]->numel;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    float *o1 = malloc(n * sizeof(float));
    memcpy(o1, op(&ctx, in[0], in[1], in[2], H, 1)->data, n * sizeof(float));
    for (int i = 0; i < nseq; i++)
        for (int b = 0; b < B; b++)
            for (int t = t0 + 1; t < T; t++)
                for (int c = 0; c < D; c++) in[i]->data[IDX(b, t, c)] += 3.0f * lipt_rng_normal(rng);
    lipt_ctx_reset(&ctx);
    lipt_tensor *o = op(&ctx, in[0], in[1], in[2], H, 1);
    int changed_future = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < D; c++) {
                const size_t x = IDX(b, t, c);
                if (t <= t0)
                    ck_assert_msg(memcmp(&o->data[x], &o1[x], sizeof(float)) == 0,
                                  "%srow %d <= %d changed by a future input", what, t, t0);
                else if (o->data[x] != o1[x])
                    changed_future = 1;
            }
    ck_assert_msg(changed_future || t0 == T - 1, "future rows did not change at all");
    float *seed = calloc(n, sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t <= t0; t++)
            for (int c = 0; c < D; c++) seed[IDX(b, t, c)] = lipt_rng_normal(rng);
    lipt_backward_seeded(&ctx, o, seed);
    for (int i = 0; i < 3; i++) {
        double past = 0;
        if (i < nseq) {
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < D; c++) {
                        const float g = in[i]->grad[IDX(b, t, c)];
                        if (t > t0)
                            ck_assert_msg(g == 0.0f, "%sinput %d row %d > %d has gradient %g", what, i, t, t0, g);
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
}

/* One thread and two threads (the parallel (batch, head) loop) give the same bits, forward and backward (H = 4,
 * causal): the per-head products are single-thread lipt_gemm blocks, the row loops lipt's own. `what` prefixes the
 * messages. Returns the worst relative difference (0); leaves 2 threads set. */
static inline double attn_check_threads(attn_op op, lipt_tensor **in, const char *what) {
    const size_t n = in[0]->numel;
    float *res[2][4];
    for (int pass = 0; pass < 2; pass++) {
        lipt_set_threads(pass ? 2 : 1);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_tensor *o = op(&ctx, in[0], in[1], in[2], 4, 1);
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
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        const size_t m = i ? in[i - 1]->numel : n;
        const double e = tu_max_rel_err_f(res[1][i], res[0][i], m, 1e-6);
        ck_assert_msg(memcmp(res[1][i], res[0][i], m * sizeof(float)) == 0,
                      "%sthreads 1 vs 2 differ in %s (relative %.3e): not the same bits", what,
                      i ? "a gradient" : "the output", e);
        if (e > worst) worst = e;
        free(res[0][i]);
        free(res[1][i]);
    }
    return worst;
}

#endif
