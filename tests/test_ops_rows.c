/* The ops' row functions (src/kernels/rows.h, src/kernels/attn.h), which the incremental decoder runs: LayerNorm,
 * the row clip and every activation give the ops' own bits row by row; the attention's block of query rows and its
 * one-query form match the attention ops (DP, L2, relative bias) row for row. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* rows x D inputs; D odd and wider than a vector, rows x D above the activations' chunk (4096 floats) */
#define ROWS 5
#define DW 1030

static void fill(lipt_rng *r, float *x, size_t n, float sd) {
    for (size_t i = 0; i < n; i++) x[i] = sd * lipt_rng_normal(r);
}

START_TEST(test_layernorm_clip_rows) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 11);
    const int D = 37;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 0);
    lipt_tensor *x = lipt_tensor_2d(&ctx, ROWS, D), *g = lipt_tensor_1d(&ctx, D), *b = lipt_tensor_1d(&ctx, D);
    fill(&rng, x->data, x->numel, 2.0f);
    for (int r = 0; r < ROWS; r++) x->data[(size_t)r * D] += 50.0f * r; /* a common offset in some rows */
    fill(&rng, g->data, (size_t)D, 1.0f);
    fill(&rng, b->data, (size_t)D, 1.0f);
    float y[DW];
    lipt_tensor *ln = lipt_layernorm(&ctx, x, g, b, 1e-5f);
    for (int r = 0; r < ROWS; r++) {
        lipt_layernorm_row(x->data + (size_t)r * D, y, D, g->data, b->data, 1e-5f);
        ck_assert_msg(memcmp(y, ln->data + (size_t)r * D, sizeof(float) * D) == 0, "layernorm row %d differs", r);
    }
    const float radii[] = {1.0f, 12.0f, 1e4f}; /* all, some, no rows clipped */
    int clipped = 0;
    for (int k = 0; k < 3; k++) {
        lipt_tensor *c = lipt_clip_rows(&ctx, x, radii[k]);
        for (int r = 0; r < ROWS; r++) {
            clipped += lipt_clip_row(x->data + (size_t)r * D, y, D, radii[k]) > 0;
            ck_assert_msg(memcmp(y, c->data + (size_t)r * D, sizeof(float) * D) == 0, "clip R %g row %d differs",
                          (double)radii[k], r);
        }
    }
    ck_assert_int_gt(clipped, ROWS);
    ck_assert_int_lt(clipped, 3 * ROWS);
    lipt_ctx_free(&ctx);
}
END_TEST

START_TEST(test_activation_rows) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 12);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 22, 0);
    lipt_tensor *x = lipt_tensor_2d(&ctx, ROWS, DW), *beta = lipt_tensor_1d(&ctx, 1);
    fill(&rng, x->data, x->numel, 3.0f);
    beta->data[0] = 0.7f;
    const lipt_act_kind kinds[] = {LIPT_ACT_RELU, LIPT_ACT_ELU, LIPT_ACT_GELU, LIPT_ACT_LIPSWISH, LIPT_ACT_MAXMIN};
    float *y = malloc(sizeof(float) * DW);
    for (int k = 0; k < 5; k++) {
        lipt_tensor *o = kinds[k] == LIPT_ACT_RELU       ? lipt_relu(&ctx, x)
                         : kinds[k] == LIPT_ACT_ELU      ? lipt_elu(&ctx, x)
                         : kinds[k] == LIPT_ACT_GELU     ? lipt_gelu(&ctx, x)
                         : kinds[k] == LIPT_ACT_LIPSWISH ? lipt_lipswish(&ctx, x, beta)
                                                         : lipt_maxmin(&ctx, x);
        for (int r = 0; r < ROWS; r++) {
            lipt_act_row(kinds[k], beta->data[0], x->data + (size_t)r * DW, y, DW);
            ck_assert_msg(memcmp(y, o->data + (size_t)r * DW, sizeof(float) * DW) == 0, "activation %d row %d differs",
                          (int)kinds[k], r);
        }
    }
    free(y);
    lipt_ctx_free(&ctx);
}
END_TEST

/* One head's rows of the attention ops against lipt_attn_rows (rows [i0, T) as the decoder's block of new rows) and
 * lipt_attn_query_row (the last row), for DP, L2 and DP with the relative bias. */
START_TEST(test_attention_rows) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 13);
    const int T = 19, H = 3, d = 5, D = H * d, i0 = 11;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 0);
    lipt_no_grad_push(&ctx);
    lipt_tensor *q = lipt_tensor_3d(&ctx, 1, T, D), *k = lipt_tensor_3d(&ctx, 1, T, D), *v = lipt_tensor_3d(&ctx, 1, T, D);
    lipt_tensor *rel = lipt_tensor_2d(&ctx, H, T);
    fill(&rng, q->data, q->numel, 1.5f);
    fill(&rng, k->data, k->numel, 1.5f);
    fill(&rng, v->data, v->numel, 1.0f);
    fill(&rng, rel->data, rel->numel, 1.0f);
    float P[19 * 19], o[19 * 15], kn[19], row[19];
    double acc[5];
    double worst = 0;
    for (int kind = 0; kind < 3; kind++) { /* 0 DP, 1 L2, 2 DP + relative bias */
        lipt_tensor *ref = kind == 0   ? lipt_attention_dp(&ctx, q, k, v, H, 1)
                           : kind == 1 ? lipt_attention_l2(&ctx, q, k, v, H, 1)
                                       : lipt_attention_dp_rel(&ctx, q, k, v, rel, H);
        for (int h = 0; h < H; h++) {
            if (kind == 1) lipt_attn_l2_key_norms(k->data + h * d, T, D, d, 1.0 / sqrt((double)d), kn);
            const lipt_attn_head hd = {.k = k->data + h * d, .v = v->data + h * d, .kn = kind == 1 ? kn : NULL,
                                       .rel = kind == 2 ? rel->data + (size_t)h * T : NULL, .ld = D, .d = d,
                                       .causal = 1, .alpha = lipt_attn_logit_scale(kind == 1, d)};
            lipt_attn_rows(LIPT_KC(&ctx), &hd, q->data + (size_t)i0 * D + h * d, NULL, i0, T, T, P, T, NULL, o, D, 0);
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
    }
    printf("attention rows (dp, l2, dp + rel; block and one query) against the ops: worst rel err %.2e\n", worst);
    ck_assert_msg(worst < 1e-5, "attention rows differ from the ops by %.3e", worst);
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_rows");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, test_layernorm_clip_rows);
    tcase_add_test(tc, test_activation_rows);
    tcase_add_test(tc, test_attention_rows);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
