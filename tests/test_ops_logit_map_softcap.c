/* The soft-cap logit map (src/ops/logit_map_softcap.c) through lipt_attention_dp_map: the forward against a naive
 * double loop on both kernels (the materialising one and the tiled one forced, T past one column tile included) with
 * the cap biting hard, and the cap changing the output (a kernel that skips the map fails the reference); finite
 * differences of the (q, k, v) and packed forms on both kernels; the decoder's row kernels (lipt_attn_rows, and
 * lipt_attn_query_row of one new token) against the op's rows; a huge cap giving plain DP attention, and no map
 * giving lipt_attention_dp's bits. */
#include "attention_ref.h"

#include <stdlib.h>

#include "ops/rows.h"

#define MAP (&lipt_logit_map_softcap)
#define CAP 1.5f /* small, so that inputs of unit scale already reach the tanh's curve */

static double map_ref(double z, double p) { return p * tanh(z / p); }

/* The reference: attn_ref's loop with each logit mapped, in double. */
static void map_attn_ref(const float *q, const float *k, const float *v, int B, int T, int D, int H, int causal,
                         double p, double *out) {
    const int d = D / H;
    const double s = sqrt((double)d);
    double *lg = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const int n = causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double acc = 0;
                    for (int c = 0; c < d; c++) acc += (double)q[IDX(b, i, h * d + c)] * k[IDX(b, j, h * d + c)];
                    lg[j] = map_ref(acc / s, p);
                    mx = lg[j] > mx ? lg[j] : mx;
                }
                for (int j = 0; j < n; j++) sum += (lg[j] = exp(lg[j] - mx));
                for (int c = 0; c < d; c++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += lg[j] / sum * v[IDX(b, j, h * d + c)];
                    out[IDX(b, i, h * d + c)] = o;
                }
            }
    free(lg);
}

/* The op with the kernel forced, in attention_ref.h's attn_op signature. */
static lipt_tensor *map_mat(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal) {
    ctx->attn_tiled = 0;
    return lipt_attention_dp_map(ctx, a, b, c, MAP, CAP, H, causal);
}
static lipt_tensor *map_tiled(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, lipt_tensor *c, int H, int causal) {
    ctx->attn_tiled = 1;
    return lipt_attention_dp_map(ctx, a, b, c, MAP, CAP, H, causal);
}

/* {B, T, D, H}: size-1 dims, odd heads, row blocks (T > 64) and two column tiles of the tiled kernel (T > 512). */
static const int shapes[][4] = {{1, 1, 4, 2}, {2, 5, 6, 3}, {1, 130, 8, 2}, {1, 600, 4, 1}};

START_TEST(test_forward) {
    double worst = 0, moved = 0;
    for (int tiled = 0; tiled < 2; tiled++)
        for (size_t si = 0; si < NSH(shapes); si++)
            for (int causal = 0; causal < 2; causal++) {
                const int B = shapes[si][0], T = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
                lipt_rng rng;
                lipt_rng_seed(&rng, 11 + si);
                const int sh[3] = {B, T, D};
                lipt_tensor *q = tu_tensor(&rng, 3, sh, 3.0f, 0), *k = tu_tensor(&rng, 3, sh, 3.0f, 0),
                            *v = tu_tensor(&rng, 3, sh, 1.0f, 0);
                const size_t n = q->numel;
                double *ref = malloc(n * sizeof(double));
                map_attn_ref(q->data, k->data, v->data, B, T, D, H, causal, CAP, ref);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 20, 1);
                lipt_tensor *o = (tiled ? map_tiled : map_mat)(&ctx, q, k, v, H, causal);
                const double e = tu_max_rel_err(o->data, ref, n, 1e-6);
                ck_assert_msg(e < 1e-5, "%s forward tiled%d B%d T%d D%d H%d causal%d: rel err %.3e", MAP->name, tiled,
                              B, T, D, H, causal, e);
                worst = e > worst ? e : worst;
                /* the map must matter at this scale: plain DP attention is far from the reference */
                ctx.attn_tiled = tiled;
                lipt_tensor *p = lipt_attention_dp(&ctx, q, k, v, H, causal);
                const double m = tu_max_rel_err(p->data, ref, n, 1e-6);
                if (si == 1) moved = moved == 0 || m < moved ? m : moved;
                lipt_ctx_free(&ctx);
                free(ref);
                tu_free(q), tu_free(k), tu_free(v);
            }
    ck_assert_msg(moved > 1e-2, "the map changes plain DP attention by only %.3e", moved);
    printf("%s forward (both kernels): worst rel err %.3e (tol 1e-5); plain DP differs by >= %.3e\n", MAP->name, worst,
           moved);
}
END_TEST

START_TEST(test_gradcheck) {
    const double wm = attn_check_grad(map_mat, 0, 53, MAP->name, NULL, NULL, NULL, 0, NULL);
    const double wt = attn_check_grad(map_tiled, 0, 59, "tiled", NULL, NULL, NULL, 0, NULL);
    printf("%s gradcheck: worst rel err %.3e materialising, %.3e tiled (tol 5e-3)\n", MAP->name, wm, wt);
}
END_TEST

typedef struct {
    int H, causal, tiled;
} packed_args;

static lipt_tensor *build_packed(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    const packed_args *a = user;
    ctx->attn_tiled = a->tiled;
    return lipt_attention_dp_map_packed(ctx, in[0], MAP, CAP, a->H, a->causal);
}

/* The packed form, which the model's forward pass uses, on both kernels. */
START_TEST(test_packed_gradcheck) {
    double worst = 0;
    for (int tiled = 0; tiled < 2; tiled++)
        for (int causal = 0; causal < 2; causal++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 70 + 2 * tiled + causal);
            lipt_tensor *qkv = tu_tensor(&rng, 3, (const int[]){2, 9, 18}, 1.5f, 1);
            packed_args a = {3, causal, tiled};
            char label[64];
            snprintf(label, sizeof label, "%s packed tiled%d causal%d", MAP->name, tiled, causal);
            const double g =
                tu_gradcheck(label, build_packed, &a, &qkv, 1, &(tu_gradcheck_opts){.seed = 5, .tol = 5e-3});
            worst = g > worst ? g : worst;
            tu_free(qkv);
        }
    printf("%s packed gradcheck: worst rel err %.3e (tol 5e-3)\n", MAP->name, worst);
}
END_TEST

/* The decoder's kernels with the map on the head: its block of new rows (lipt_attn_rows) and its one new token
 * (lipt_attn_query_row) against the rows of the op the training forward runs. */
START_TEST(test_decoder_rows) {
    const int T = 19, H = 3, d = 5, D = H * d, i0 = 11;
    lipt_rng rng;
    lipt_rng_seed(&rng, 17);
    const int sh[3] = {1, T, D};
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 3.0f, 0), *k = tu_tensor(&rng, 3, sh, 3.0f, 0),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 0);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 0);
    lipt_no_grad_push(&ctx);
    lipt_tensor *ref = lipt_attention_dp_map(&ctx, q, k, v, MAP, CAP, H, 1);
    float P[19 * 19], o[19 * 15], row[19];
    double acc[5], worst = 0;
    for (int h = 0; h < H; h++) {
        const lipt_attn_head hd = {.k = k->data + h * d, .v = v->data + h * d, .ld = D, .d = d, .causal = 1,
                                   .alpha = lipt_attn_logit_scale(0, d), .map = MAP, .map_param = CAP};
        lipt_attn_rows(&ctx, &hd, q->data + (size_t)i0 * D + h * d, NULL, i0, T, T, P, T, NULL, o, D, 0);
        for (int i = i0; i < T; i++)
            for (int c = 0; c < d; c++) {
                const double a = o[(size_t)(i - i0) * D + c], b = ref->data[(size_t)i * D + h * d + c];
                worst = fmax(worst, fabs(a - b) / fmax(1e-3, fabs(b)));
            }
        lipt_attn_query_row(&hd, q->data + (size_t)(T - 1) * D + h * d, T, 0, row, acc, o);
        for (int c = 0; c < d; c++) {
            const double b = ref->data[(size_t)(T - 1) * D + h * d + c];
            worst = fmax(worst, fabs(o[c] - b) / fmax(1e-3, fabs(b)));
        }
    }
    printf("%s decoder rows (block and one query) against the op: worst rel err %.2e\n", MAP->name, worst);
    ck_assert_msg(worst < 1e-5, "%s decoder rows differ from the op by %.3e", MAP->name, worst);
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    tu_free(q), tu_free(k), tu_free(v);
}
END_TEST

/* A cap far beyond the logits leaves them as they are: plain DP attention, forward and gradients (to float
 * rounding); and the map entry without a map is lipt_attention_dp, bit for bit. */
START_TEST(test_plain_limits) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 23);
    const int sh[3] = {2, 7, 6}, H = 2;
    lipt_tensor *q = tu_tensor(&rng, 3, sh, 1.0f, 1), *k = tu_tensor(&rng, 3, sh, 1.0f, 1),
                *v = tu_tensor(&rng, 3, sh, 1.0f, 1);
    const size_t n = q->numel;
    float *out[3], *gq[3]; /* dp, the map entry without a map, the map with a huge parameter */
    for (int r = 0; r < 3; r++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 0);
        lipt_tensor *o = r == 0   ? lipt_attention_dp(&ctx, q, k, v, H, 1)
                         : r == 1 ? lipt_attention_dp_map(&ctx, q, k, v, NULL, 0, H, 1)
                                  : lipt_attention_dp_map(&ctx, q, k, v, MAP, 1e6f, H, 1);
        q->grad = k->grad = v->grad = NULL; /* arena memory of the previous context */
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
    ck_assert_msg(e < 1e-5, "%s with a huge parameter differs from dp by %.3e", MAP->name, e);
    ck_assert_msg(eg < 1e-4, "%s with a huge parameter: q's gradient differs from dp's by %.3e", MAP->name, eg);
    printf("%s with parameter 1e6 against dp: forward %.2e, q gradient %.2e; no map: dp's bits\n", MAP->name, e, eg);
    free(pd), free(g0);
    for (int r = 0; r < 3; r++) free(out[r]), free(gq[r]);
    tu_free(q), tu_free(k), tu_free(v);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_logit_map_softcap");
    TCase *tc = tcase_create("logit_map_softcap");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_forward);
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_packed_gradcheck);
    tcase_add_test(tc, test_decoder_rows);
    tcase_add_test(tc, test_plain_limits);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
