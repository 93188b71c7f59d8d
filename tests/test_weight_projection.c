/* weight_projection (issue 49, lever 2; src/nn/project.c): after an optimizer step every certified branch over its
 * budget has its weights rescaled so that its bound is at the budget. Checked here: on small invertible models of
 * every certified bound (clipped-dp, tied L2 in the ∞-, 2- and token-wise norms; the feed-forward at the full budget
 * and at c²) whose weights were inflated far over budget, one projection brings every factor to within 1e-5 of 1 and
 * every bound at its budget, with weight_projection = 1 the same function (the rescale is what the factors did), with 2
 * one scale for W^Q, W^K, W^V, W^O; training steps with weight_projection = 1 or 2 (Adam at a large rate, and Muon)
 * leave every factor at ~1 after every step, while the same
 * steps without it leave factors far below 1 (the control); a model inside its budget is left bit for bit. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/model.h"
#include "lipt/optim.h"
#include "lipt/train.h"

#define FACTOR_TOL 1e-5

static const char *const cfg_texts[] = {
    /* the shipped design (models/ablation/f-clipdp-rel-maxmin.cfg) at test size */
    "vocab_size = 20\nd_model = 32\nn_heads = 4\nd_ff = 64\nn_layers = 2\nseq_len = 12\nattention = clipped-dp\n"
    "ffn = contractive\nactivation = maxmin\nffn_full_budget = 1\nlip_norm = inf2\nrel_bias = 1\n",
    /* ... with the Cholesky-verified spectral norms (the converged PTB recipe's setting) */
    "vocab_size = 20\nd_model = 32\nn_heads = 4\nd_ff = 64\nn_layers = 2\nseq_len = 12\nattention = clipped-dp\n"
    "ffn = contractive\nactivation = maxmin\nffn_full_budget = 1\nlip_norm = inf2\nspectral_bound = cholesky\n",
    /* the paper's contractive tied L2 in its three norms (W^Q enters squared; W^V, W^O once) */
    "vocab_size = 20\nd_model = 24\nn_heads = 2\nd_ff = 48\nn_layers = 2\nseq_len = 10\nattention = contractive-l2\n"
    "ffn = contractive\nactivation = relu\nlip_norm = inf\n",
    "vocab_size = 20\nd_model = 24\nn_heads = 2\nd_ff = 48\nn_layers = 2\nseq_len = 10\nattention = contractive-l2\n"
    "ffn = contractive\nactivation = lipswish\nlip_norm = 2\n",
    "vocab_size = 20\nd_model = 24\nn_heads = 2\nd_ff = 48\nn_layers = 2\nseq_len = 10\nattention = contractive-l2\n"
    "ffn = contractive\nactivation = elu\nlip_norm = inf2\nactnorm = 1\n",
};
#define N_CFGS (int)(sizeof cfg_texts / sizeof cfg_texts[0])

static void load_cfg(int i, int projection, lipt_config *cfg) {
    lipt_error err = {0};
    ck_assert_msg(lipt_config_parse(cfg, cfg_texts[i], "test.cfg", &err) == LIPT_OK, "config %d: %s", i, err.msg);
    cfg->weight_projection = projection;
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "config %d: %s", i, err.msg);
}

/* The smallest of every branch's factors (attention, W1, W2) at the current weights, as `lipt lipschitz` reports
 * them (lipt_model_layer_lipschitz: each layer certified on its own, not through lipt_model_certify). */
static double min_factor(lipt_model *m) {
    double lo = 1;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_layer_lipschitz ll;
        lipt_model_layer_lipschitz(m, l, 0, &ll);
        lo = fmin(lo, fmin(ll.attn_factor, fmin(ll.ffn_factor1, ll.ffn_factor2)));
    }
    return lo;
}

/* Multiply the weights that enter the branches' bounds (not W^Q, W^K: their scale sets the attention pattern). */
static void inflate(lipt_model *m, double s) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        lipt_tensor *w[] = {L->wv, L->wo, L->w1, L->w2};
        for (int k = 0; k < 4; k++)
            for (size_t i = 0; i < w[k]->numel; i++) w[k]->data[i] = (float)(w[k]->data[i] * s * (1 + 0.3 * k));
    }
}

static void batch(const lipt_config *cfg, uint64_t seed, int B, int *in, int *tg) {
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    for (int i = 0; i < B * cfg->seq_len; i++) {
        in[i] = (int)lipt_rng_below(&r, (uint64_t)cfg->vocab_size);
        tg[i] = (int)lipt_rng_below(&r, (uint64_t)cfg->vocab_size);
    }
}

/* The last block's output (before the final LayerNorm) on ids[B*T], or with embed the embeddings (the blocks'
 * input), into a malloc'd copy. */
static float *hidden(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, size_t *n, int embed) {
    lipt_no_grad_push(ctx);
    lipt_tensor *h = (embed ? lipt_model_embed : lipt_model_hidden)(ctx, m, ids, B, m->cfg.seq_len);
    *n = h->numel;
    float *out = malloc(sizeof(float) * h->numel);
    memcpy(out, h->data, sizeof(float) * h->numel);
    lipt_ctx_reset(ctx);
    lipt_no_grad_pop(ctx);
    return out;
}

/* max_i |a_i - b_i| / max_i |b_i - x_i|: the change of the blocks' output relative to what the blocks add to their
 * input x (the embeddings) */
static double rel_change(const float *a, const float *b, const float *x, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i] - x[i]));
    return d / s;
}

/* Every branch at its budget: its bound (attention UB, σ1, σ2) within FACTOR_TOL below the budget, and not above. */
static void check_at_budget(lipt_model *m, int i, int mode) {
    const double c = m->cfg.c, c1 = m->cfg.ffn_full_budget ? 1.0 : c;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_layer_lipschitz ll;
        lipt_model_layer_lipschitz(m, l, 0, &ll);
        const double r[3] = {ll.attn_bound / c, ll.sigma1 / c1, ll.sigma2 / c};
        for (int k = 0; k < 3; k++)
            ck_assert_msg(r[k] >= 1 - FACTOR_TOL && r[k] <= 1, "config %d, mode %d, layer %d, %s: bound / budget %.9f",
                          i, mode, l, k == 0 ? "attention" : k == 1 ? "W1" : "W2", r[k]);
    }
}

static double frob(const lipt_tensor *w) {
    double s = 0;
    for (size_t i = 0; i < w->numel; i++) s += (double)w->data[i] * w->data[i];
    return sqrt(s);
}

/* One projection of an inflated model (config i, weight_projection = mode): every factor to ~1 and every bound at its
 * budget; mode 1 the same function (returned: the largest change of the blocks' output relative to what they add),
 * mode 2 one scale for W^Q, W^K, W^V, W^O, between sqrt(f) and f^(1/4) of the attention's factor f. */
static double project_case(int i, int mode, double *after) {
    enum { B = 3 };
    lipt_config cfg;
    load_cfg(i, mode, &cfg);
    lipt_model m;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "%s", err.msg);
    inflate(&m, 12.0);
    lipt_model_refresh_norms(&m, 50);
    const double before = min_factor(&m);
    ck_assert_msg(before < 0.5, "config %d: inflated weights should be far over budget (factor %g)", i, before);
    lipt_layer_lipschitz l0;
    lipt_model_layer_lipschitz(&m, 0, 0, &l0);
    const double q0 = frob(m.layers[0].wq), v0 = frob(m.layers[0].wv);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 3);
    int in[B * 12], tg[B * 12];
    batch(&cfg, 11, B, in, tg);
    size_t nh;
    float *h0 = hidden(&ctx, &m, in, B, &nh, 0), *x0 = hidden(&ctx, &m, in, B, &nh, 1);
    double seen;
    const int n = lipt_model_project_weights(&m, &seen);
    ck_assert_msg(n == 3 * cfg.n_layers, "config %d: %d weight groups rescaled, want %d", i, n, 3 * cfg.n_layers);
    ck_assert_msg(fabs(seen - before) <= 1e-6 * before, "config %d: smallest factor %.9g, lipschitz says %.9g", i,
                  seen, before);
    *after = min_factor(&m);
    ck_assert_msg(*after >= 1 - FACTOR_TOL && *after <= 1, "config %d mode %d: factor %.9g after the projection", i,
                  mode, *after);
    check_at_budget(&m, i, mode);
    float *h1 = hidden(&ctx, &m, in, B, &nh, 0);
    const double dl = rel_change(h1, h0, x0, nh);
    const double sq = frob(m.layers[0].wq) / q0, sv = frob(m.layers[0].wv) / v0, f = l0.attn_factor;
    printf("config %d, mode %d: smallest factor %.6f -> 1 - %.2e; layer 0 attention factor %.5f: W^Q x %.5f, W^V x "
           "%.5f; the blocks' output moved by %.2e of what they add\n", i, mode, before, 1 - *after, f, sq, sv, dl);
    if (mode == 1) {
        ck_assert_msg(dl <= 1e-5, "config %d: the projection changed the function (%.3e)", i, dl);
        ck_assert_msg(sq == 1 && fabs(sv - sqrt(f)) <= 1e-5, "config %d: W^Q x %.9g, W^V x %.9g", i, sq, sv);
    } else {
        ck_assert_msg(fabs(sq - sv) <= 1e-6 && sv >= sqrt(f) * (1 - 1e-5) && sv <= pow(f, 0.25) * (1 + 1e-5),
                      "config %d: W^Q x %.9g and W^V x %.9g: one scale in [sqrt(f), f^(1/4)] expected (f = %.9g)", i,
                      sq, sv, f);
    }
    /* idempotent: at the budget, a second projection leaves the weights bit for bit */
    float *copy = malloc(sizeof(float) * m.params.n_train);
    memcpy(copy, m.params.value, sizeof(float) * m.params.n_train);
    ck_assert_int_eq(lipt_model_project_weights(&m, &seen), 0);
    ck_assert_msg(seen == 1.0 && memcmp(copy, m.params.value, sizeof(float) * m.params.n_train) == 0,
                  "config %d: a second projection changed the weights (factor %.9g)", i, seen);
    free(copy);
    free(h0);
    free(h1);
    free(x0);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
    return dl;
}

START_TEST(test_projection_brings_factors_to_one) {
    double worst_after = 1, worst_fn = 0;
    for (int mode = 1; mode <= 2; mode++)
        for (int i = 0; i < N_CFGS; i++) {
            double after;
            const double dl = project_case(i, mode, &after);
            worst_after = fmin(worst_after, after);
            if (mode == 1) worst_fn = fmax(worst_fn, dl);
        }
    printf("projection: every factor >= 1 - %.2e after it; weight_projection = 1 keeps the function within %.2e\n",
           1 - worst_after, worst_fn);
}
END_TEST

/* Training steps from inflated weights: with weight_projection = 1 or 2 every factor is ~1 after every step (Adam, and Muon
 * on the matrices); without it (the control) the factors stay far below 1. */
static double train_min_factor(int i, int projection, int muon, int steps, double *worst_step) {
    enum { B = 2 };
    lipt_config cfg;
    load_cfg(i, projection, &cfg);
    lipt_model m;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "%s", err.msg);
    inflate(&m, 12.0);
    lipt_model_refresh_norms(&m, 50);
    lipt_adamw_config ac = lipt_adamw_defaults();
    ac.lr = 1e-2;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &ac);
    lipt_muon mu;
    const lipt_muon_config mc = lipt_muon_defaults();
    if (muon) ck_assert_msg(lipt_muon_init(&mu, &mc, &m.params, &err) == LIPT_OK, "%s", err.msg);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 7);
    int in[B * 12], tg[B * 12];
    *worst_step = 1;
    for (int s = 0; s < steps; s++) {
        batch(&cfg, 100 + (uint64_t)s, B, in, tg);
        const lipt_step_opts so = {ac.lr, 1.0, cfg.power_iters, NULL, 0, 0, muon ? &mu : NULL, 0.02};
        lipt_step_result sr;
        ck_assert_msg(lipt_train_step(&ctx, &m, &opt, in, tg, B, cfg.seq_len, &so, &sr, &err) == LIPT_OK, "%s",
                      err.msg);
        *worst_step = fmin(*worst_step, min_factor(&m));
    }
    if (muon) lipt_muon_free(&mu);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
    return *worst_step;
}

START_TEST(test_projection_every_step) {
    for (int i = 0; i < N_CFGS; i++)
        for (int muon = 0; muon <= 1; muon++) {
            double on, on2, off;
            train_min_factor(i, 1, muon, 4, &on);
            train_min_factor(i, 2, muon, 4, &on2);
            train_min_factor(i, 0, muon, 4, &off);
            printf("config %d, %s: smallest factor after any of 4 steps %.6f with weight_projection = 1, %.6f with 2, "
                   "%.4f without\n", i, muon ? "Muon + AdamW" : "AdamW", on, on2, off);
            on = fmin(on, on2);
            ck_assert_msg(on >= 1 - FACTOR_TOL, "config %d%s: a factor %.9g after a projected step", i,
                          muon ? " (Muon)" : "", on);
            ck_assert_msg(off < 0.5, "control, config %d: without the projection a factor should stay low (%g)", i,
                          off);
        }
}
END_TEST

/* A model inside its budget (every factor 1) is left bit for bit. */
START_TEST(test_projection_inside_budget_untouched) {
    for (int i = 0; i < N_CFGS; i++) {
        lipt_config cfg;
        load_cfg(i, 1, &cfg);
        lipt_model m;
        lipt_error err = {0};
        ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "%s", err.msg);
        inflate(&m, 0.05); /* the paper's ∞-norm bound is over budget even at the initialisation */
        ck_assert_msg(min_factor(&m) == 1.0, "config %d: the deflated model should be inside its budget", i);
        float *copy = malloc(sizeof(float) * m.params.n_train);
        memcpy(copy, m.params.value, sizeof(float) * m.params.n_train);
        double seen;
        ck_assert_int_eq(lipt_model_project_weights(&m, &seen), 0);
        ck_assert(seen == 1.0);
        ck_assert_msg(memcmp(copy, m.params.value, sizeof(float) * m.params.n_train) == 0, "config %d changed", i);
        free(copy);
        lipt_model_free(&m);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("weight_projection");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_projection_brings_factors_to_one);
    tcase_add_test(tc, test_projection_every_step);
    tcase_add_test(tc, test_projection_inside_budget_untouched);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
