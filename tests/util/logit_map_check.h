/* Shared by the logit-map tests (tests/test_ops_logit_map_<name>.c): the checks every map of the DP attention logits
 * (include/lipt/logit_map.h) passes through lipt_attention_dp_map, given the map, a parameter at which it bites on
 * inputs of unit scale, and the map in double as the reference:
 *   lm_check_forward: the op against a naive double loop on both kernels (materialising, tiled forced; T past a row
 *     block and a column tile), and far from plain DP attention (a kernel that skips the map fails the reference);
 *   lm_check_grad: finite differences of the (q, k, v) and packed forms on both kernels, both maskings;
 *   lm_check_decoder_rows: the decoder's block of new rows (lipt_attn_rows) and its one new token
 *     (lipt_attn_query_row) with the map on the head, against the op's rows;
 *   lm_check_identity: at a parameter where the map is the identity on these logits, DP's forward and gradient (to
 *     float rounding); and the entry without a map, DP's bits. */
#ifndef LIPT_TEST_LOGIT_MAP_CHECK_H
#define LIPT_TEST_LOGIT_MAP_CHECK_H

#include "attention_ref.h"
#include "autograd/kctx.h"
#include "kernels/kernels.h"

typedef double (*lm_ref_fn)(double z, double p);

typedef struct {
    const lipt_logit_map *map;
    float p;
    int H, causal, tiled, packed;
} lm_args;

static inline lipt_tensor *lm_op(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    const lm_args *a = user;
    ctx->attn_tiled = a->tiled;
    return a->packed ? lipt_attention_dp_map_packed(ctx, in[0], a->map, a->p, a->H, a->causal)
                     : lipt_attention_dp_map(ctx, in[0], in[1], in[2], a->map, a->p, a->H, a->causal);
}

/* attn_ref with each logit through ref, in double. */
static inline void lm_attn_ref(lm_ref_fn ref, double p, const float *q, const float *k, const float *v, int B, int T,
                               int D, int H, int causal, double *out) {
    double *V = attn_to_double(v, (size_t)B * T * D);
    attn_ref_map(q, k, V, B, T, D, H, causal, 0, ref, p, out);
    free(V);
}

/* {B, T, D, H}: size-1 dims, odd heads, row blocks (T > 64) and two column tiles of the tiled kernel (T > 512).
 * q and k are drawn with std 3: their logits reach the map's curve at a parameter of about 1.5. */
static inline void lm_check_forward(const lipt_logit_map *map, float p, lm_ref_fn ref) {
    static const int shapes[][4] = {{1, 1, 4, 2}, {2, 5, 6, 3}, {1, 130, 8, 2}, {1, 600, 4, 1}};
    double worst = 0, moved = 0;
    for (int tiled = 0; tiled < 2; tiled++)
        for (size_t si = 0; si < NSH(shapes); si++)
            for (int causal = 0; causal < 2; causal++) {
                const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, 11 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *in[3] = {tu_tensor(&rng, 3, sh, 3.0f, 0), tu_tensor(&rng, 3, sh, 3.0f, 0),
                                      tu_tensor(&rng, 3, sh, 1.0f, 0)};
                const size_t n = in[0]->numel;
                double *want = malloc(n * sizeof(double));
                lm_attn_ref(ref, p, in[0]->data, in[1]->data, in[2]->data, B, T, D, H, causal, want);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 20, 1);
                lm_args a = {map, p, H, causal, tiled, 0};
                const double e = tu_max_rel_err(lm_op(&ctx, in, &a)->data, want, n, 1e-6);
                ck_assert_msg(e < 1e-5, "%s forward tiled%d B%d T%d D%d H%d causal%d: rel err %.3e", map->name, tiled,
                              B, T, D, H, causal, e);
                worst = e > worst ? e : worst;
                /* the map must matter at this scale: plain DP attention is far from the reference */
                const double m = tu_max_rel_err(lipt_attention_dp(&ctx, in[0], in[1], in[2], H, causal)->data, want,
                                                n, 1e-6);
                if (si == 1) moved = moved == 0 || m < moved ? m : moved;
                lipt_ctx_free(&ctx);
                free(want);
                for (int i = 0; i < 3; i++) tu_free(in[i]);
            }
    ck_assert_msg(moved > 1e-2, "%s changes plain DP attention by only %.3e", map->name, moved);
    printf("%s forward (both kernels): worst rel err %.3e (tol 1e-5); plain DP differs by >= %.3e\n", map->name, worst,
           moved);
}

/* Finite differences (step eps, tolerance tol: a map with kinks needs a small step, then float rounding a wider
 * tolerance) of the (q, k, v) form on shapes of a few heads and of causal row blocks, and of the packed form, on
 * both kernels. */
static inline void lm_check_grad(const lipt_logit_map *map, float p, double eps, double tol) {
    static const int shapes[][4] = {{2, 9, 6, 3}, {1, 66, 4, 2}}; /* the second: causal row blocks (T > 64) */
    double worst = 0;
    for (int tiled = 0; tiled < 2; tiled++)
        for (int packed = 0; packed < 2; packed++)
            for (size_t si = 0; si < NSH(shapes); si++)
                for (int causal = (int)si; causal < 2; causal++) {
                    const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2];
                    lipt_rng rng;
                    lipt_rng_seed(&rng, 90 + 4 * si + 2 * tiled + packed);
                    lipt_tensor *in[3] = {NULL, NULL, NULL};
                    if (packed) in[0] = tu_tensor(&rng, 3, (const int[]){B, T, 3 * D}, 1.5f, 1);
                    else attn_inputs(&rng, 0, (const int[]){B, T, D}, 7, in);
                    lm_args a = {map, p, shapes[si][3], causal, tiled, packed};
                    char label[80];
                    snprintf(label, sizeof label, "%s tiled%d packed%d T%d causal%d", map->name, tiled, packed, T,
                             causal);
                    const double g = tu_gradcheck(label, lm_op, &a, in, packed ? 1 : 3,
                                                  &(tu_gradcheck_opts){.seed = 3, .tol = tol, .eps = eps});
                    worst = g > worst ? g : worst;
                    for (int i = 0; i < 3; i++) tu_free(in[i]);
                }
    printf("%s gradcheck: worst rel err %.3e (tol %.0e, step %.0e)\n", map->name, worst, tol, eps);
}

static inline void lm_check_decoder_rows(const lipt_logit_map *map, float p) {
    const int T = 19, H = 3, d = 5, D = H * d, i0 = 11;
    lipt_rng rng;
    lipt_rng_seed(&rng, 17);
    const int sh[3] = {1, T, D};
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 3.0f, 0), *k = tu_tensor(&rng, 3, sh, 3.0f, 0),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 0);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 0);
    lipt_no_grad_push(&ctx);
    lipt_tensor *want = lipt_attention_dp_map(&ctx, q, k, v, map, p, H, 1);
    float P[19 * 19], o[19 * 15], row[19];
    double acc[5], worst = 0;
    for (int h = 0; h < H; h++) {
        const lipt_attn_head hd = {.k = k->data + h * d, .v = v->data + h * d, .ld = D, .d = d, .causal = 1,
                                   .alpha = lipt_attn_logit_scale(0, d), .map = map, .map_param = p};
        lipt_attn_rows(LIPT_KC(&ctx), &hd, q->data + (size_t)i0 * D + h * d, NULL, i0, T, T, P, T, NULL, o, D, 0);
        for (int i = i0; i < T; i++)
            for (int c = 0; c < d; c++) {
                const double a = o[(size_t)(i - i0) * D + c], b = want->data[(size_t)i * D + h * d + c];
                worst = fmax(worst, fabs(a - b) / fmax(1e-3, fabs(b)));
            }
        lipt_attn_query_row(&hd, q->data + (size_t)(T - 1) * D + h * d, T, 0, row, acc, o);
        for (int c = 0; c < d; c++) {
            const double b = want->data[(size_t)(T - 1) * D + h * d + c];
            worst = fmax(worst, fabs(o[c] - b) / fmax(1e-3, fabs(b)));
        }
    }
    printf("%s decoder rows (block and one query) against the op: worst rel err %.2e\n", map->name, worst);
    ck_assert_msg(worst < 1e-5, "%s decoder rows differ from the op by %.3e", map->name, worst);
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    tu_free(q), tu_free(k), tu_free(v);
}

static inline void lm_check_identity(const lipt_logit_map *map, float p_identity) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 23);
    const int sh[3] = {2, 7, 6}, H = 2;
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 1.0f, 1), *k = tu_tensor(&rng, 3, sh, 1.0f, 1),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 1);
    const size_t n = q->numel;
    float *out[3], *gq[3]; /* dp, the map entry without a map, the map at p_identity */
    for (int r = 0; r < 3; r++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 0);
        q->grad = k->grad = v->grad = NULL; /* arena memory of the previous context */
        lipt_tensor *o = r == 0   ? lipt_attention_dp(&ctx, q, k, v, H, 1)
                         : r == 1 ? lipt_attention_dp_map(&ctx, q, k, v, NULL, 0, H, 1)
                                  : lipt_attention_dp_map(&ctx, q, k, v, map, p_identity, H, 1);
        lipt_backward(&ctx, lipt_sum(&ctx, lipt_mul(&ctx, o, o)));
        out[r] = malloc(n * sizeof(float)), gq[r] = malloc(n * sizeof(float));
        memcpy(out[r], o->data, n * sizeof(float));
        memcpy(gq[r], q->grad, n * sizeof(float));
        lipt_ctx_free(&ctx);
        q->grad = k->grad = v->grad = NULL;
    }
    ck_assert_msg(memcmp(out[0], out[1], n * sizeof(float)) == 0 && memcmp(gq[0], gq[1], n * sizeof(float)) == 0,
                  "the map entry without a map differs from dp");
    double *pd = attn_to_double(out[0], n), *g0 = attn_to_double(gq[0], n);
    const double e = tu_max_rel_err(out[2], pd, n, 1e-6), eg = tu_max_rel_err(gq[2], g0, n, 1e-6);
    ck_assert_msg(e < 1e-5, "%s at parameter %g differs from dp by %.3e", map->name, (double)p_identity, e);
    ck_assert_msg(eg < 1e-4, "%s at parameter %g: q's gradient differs from dp's by %.3e", map->name,
                  (double)p_identity, eg);
    printf("%s at parameter %g against dp: forward %.2e, q gradient %.2e; no map: dp's bits\n", map->name,
           (double)p_identity, e, eg);
    free(pd), free(g0);
    for (int r = 0; r < 3; r++) free(out[r]), free(gq[r]);
    tu_free(q), tu_free(k), tu_free(v);
}

#endif
