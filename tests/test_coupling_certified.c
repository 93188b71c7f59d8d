/* Coupling blocks with the invertible model's certified branches (coupling = 1 with attention = clipped-dp or
 * contractive-l2, ffn = contractive): each half-block y = x + g(x) changes only the half g does not read, so
 * x = y - g(y) exactly, and the branch's certificate L gives both directions (1 + L)-Lipschitz in its norm. Checked
 * here: the config is accepted (and still refused with an odd d_model); a model with weights inflated over budget
 * inverts to its embeddings in at most 2 iterations per map (one subtraction and the confirming one), bit for bit with
 * coupling_grid; at random pairs of inputs and at nearby pairs, every half-block and its inverse stay within 1 + L in
 * the token-wise norm; and each branch writes only its half. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/invert.h"
#include "lipt/model.h"

static const char *const base =
    "vocab_size = 20\nd_model = 32\nn_heads = 4\nd_ff = 64\nn_layers = 2\nseq_len = 10\nattention = clipped-dp\n"
    "ffn = contractive\nactivation = maxmin\nffn_full_budget = 1\nlip_norm = inf2\nrel_bias = 1\ncoupling = 1\n";

static void model_of(lipt_model *m, int grid) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", base, grid ? "coupling_grid = 16\n" : "");
    lipt_config cfg;
    lipt_error err = {0};
    ck_assert_msg(lipt_config_parse(&cfg, text, "coupling.cfg", &err) == LIPT_OK, "%s", err.msg);
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "%s", err.msg);
    for (int l = 0; l < cfg.n_layers; l++) { /* over budget: the factors act */
        lipt_layer *L = &m->layers[l];
        lipt_tensor *w[] = {L->wv, L->wo, L->w1, L->w2};
        for (int k = 0; k < 4; k++)
            for (size_t i = 0; i < w[k]->numel; i++) w[k]->data[i] *= 10.0f;
    }
}

START_TEST(test_config) {
    lipt_config cfg;
    lipt_error err = {0};
    ck_assert_msg(lipt_config_parse(&cfg, base, "ok.cfg", &err) == LIPT_OK, "%s", err.msg);
    ck_assert(cfg.coupling == 1 && lipt_config_invertible(&cfg));
    const char *odd = "d_model = 33\nn_heads = 3\nd_ff = 64\nattention = clipped-dp\nffn = contractive\n"
                      "activation = maxmin\nlip_norm = inf2\ncoupling = 1\n";
    ck_assert(lipt_config_parse(&cfg, odd, "odd.cfg", &err) == LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "even d_model") && strstr(err.msg, "certified"), "%s", err.msg);
    printf("refused: %s\n", err.msg);
}
END_TEST

/* Forward to the last hidden state and back: the embeddings, in at most 2 iterations per map. */
START_TEST(test_inversion_exact) {
    for (int grid = 0; grid <= 1; grid++) {
        lipt_model m;
        model_of(&m, grid);
        const int T = m.cfg.seq_len, D = m.cfg.d_model;
        int ids[10];
        for (int t = 0; t < T; t++) ids[t] = (t * 7 + 3) % m.cfg.vocab_size;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        lipt_no_grad_push(&ctx);
        lipt_tensor *x = lipt_model_embed(&ctx, &m, ids, 1, T);
        float *x0 = malloc(sizeof(float) * T * D), *h = malloc(sizeof(float) * T * D), *rec = malloc(sizeof(float) * T * D);
        memcpy(x0, x->data, sizeof(float) * T * D);
        memcpy(h, lipt_model_hidden(&ctx, &m, ids, 1, T)->data, sizeof(float) * T * D);
        lipt_ctx_reset(&ctx);
        lipt_no_grad_pop(&ctx);
        lipt_invert_trace tr;
        lipt_error err = {0};
        ck_assert_msg(lipt_model_invert_hidden(&ctx, &m, h, T, rec, NULL, &tr, &err) == LIPT_OK, "%s", err.msg);
        double e = 0, hmax = 1;
        for (int i = 0; i < T * D; i++) e = fmax(e, fabs((double)rec[i] - x0[i])), hmax = fmax(hmax, fabs(h[i]));
        int most = 0;
        for (int k = 0; k < 2 * m.cfg.n_layers; k++) most = tr.iters[k] > most ? tr.iters[k] : most;
        printf("coupling_grid %d: embeddings recovered within %.3e (the stream reaches %.3g), at most %d iterations per "
               "map\n", grid ? 16 : 0, e, hmax, most);
        ck_assert_msg(most <= 2, "a map took %d iterations", most);
        /* float sums: a rounding of the stream per map; on the grid every sum is exact */
        ck_assert_msg(grid ? e == 0 : e <= 2e-7 * hmax * 2 * m.cfg.n_layers, "inversion error %.3e (stream %.3g)", e, hmax);
        lipt_invert_trace_free(&tr);
        free(x0);
        free(h);
        free(rec);
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }
}
END_TEST

/* max_i ‖a_i - b_i‖₂ over the T rows of width D */
static double tok_dist(const float *a, const float *b, int T, int D) {
    double best = 0;
    for (int t = 0; t < T; t++) {
        double s = 0;
        for (int j = 0; j < D; j++) s += ((double)a[t * D + j] - b[t * D + j]) * ((double)a[t * D + j] - b[t * D + j]);
        best = fmax(best, sqrt(s));
    }
    return best;
}

/* y = x + g(x) of half-block (l, which) at x [T, D], into y; g's output also checked to be zero on the half g reads */
static void half_block(lipt_ctx *ctx, const lipt_model *m, int l, int which, const float *x, float *y) {
    const int T = m->cfg.seq_len, D = m->cfg.d_model;
    lipt_no_grad_push(ctx);
    lipt_tensor *xt = lipt_tensor_3d(ctx, 1, T, D);
    memcpy(xt->data, x, sizeof(float) * T * D);
    const lipt_tensor *g = lipt_model_branch(ctx, m, l, which, xt);
    for (int i = 0; i < T * D; i++) {
        const int reads_first = which == LIPT_BRANCH_FFN, first = i % D < D / 2;
        if (first == reads_first) ck_assert_msg(g->data[i] == 0, "branch %d writes channel %d it reads", which, i % D);
        y[i] = x[i] + g->data[i];
    }
    lipt_ctx_reset(ctx);
    lipt_no_grad_pop(ctx);
}

START_TEST(test_bi_lipschitz) {
    lipt_model m;
    model_of(&m, 0);
    const int T = m.cfg.seq_len, D = m.cfg.d_model, n = T * D;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    lipt_rng r;
    lipt_rng_seed(&r, 9);
    float *x = malloc(sizeof(float) * n), *x2 = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n),
          *y2 = malloc(sizeof(float) * n);
    double worst_f = 0, worst_i = 0;
    for (int l = 0; l < m.cfg.n_layers; l++) {
        lipt_layer_lipschitz ll;
        lipt_model_layer_lipschitz(&m, l, 0, &ll);
        const double Lb[2] = {ll.attn_bound * ll.attn_factor, ll.sigma1 * ll.ffn_factor1 * ll.sigma2 * ll.ffn_factor2};
        for (int which = 0; which <= 1; which++)
            for (int trial = 0; trial < 40; trial++) {
                const double scale = trial % 2 ? 1e-2 : 3.0; /* nearby pairs and far ones */
                lipt_rng_fill_normal(&r, x, (size_t)n, 2.0f);
                lipt_rng_fill_normal(&r, x2, (size_t)n, (float)scale);
                for (int i = 0; i < n; i++) x2[i] += x[i];
                half_block(&ctx, &m, l, which, x, y);
                half_block(&ctx, &m, l, which, x2, y2);
                const double dx = tok_dist(x, x2, T, D), dy = tok_dist(y, y2, T, D), b = 1 + Lb[which];
                worst_f = fmax(worst_f, dy / (dx * b));
                worst_i = fmax(worst_i, dx / (dy * b));
                ck_assert_msg(dy <= b * dx * (1 + 1e-5) && dx <= b * dy * (1 + 1e-5),
                              "layer %d branch %d: |dy| %.6g, |dx| %.6g, 1 + L = %.6g", l, which, dy, dx, b);
            }
    }
    printf("bi-Lipschitz: forward at most %.3f and inverse at most %.3f of the bound 1 + L\n", worst_f, worst_i);
    free(x);
    free(x2);
    free(y);
    free(y2);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("coupling_certified");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_config);
    tcase_add_test(tc, test_inversion_exact);
    tcase_add_test(tc, test_bi_lipschitz);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
