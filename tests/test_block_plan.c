/* A block described once (issue 50, item 2; src/nn/block_plan.h): for every model kind (dp, tied L2, the invertible
 * clipped-dp model with and without ActNorm, the coupling control, certified coupling, post-LN) the description's
 * steps, scale and inverse as expected, and every walker of it agreeing: the incremental decoder with the forward's
 * logits, the model inversion recovering the input, the reversible backward with store-all's gradients (coupling bit
 * for bit, fixed point to the iteration's tolerance), and the non-invertible kinds refused by both. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/decode.h"
#include "lipt/invert.h"
#include "lipt/model.h"
#include "nn/block_plan.h"

typedef struct {
    const char *label;
    const char *kv[20];         /* settings over the small base, NULL-terminated */
    const char *steps[2];       /* the halves' steps (describe()) */
    lipt_scale_kind scale[2];
    lipt_inverse_kind inverse;
} kind;

static const kind kinds[] = {
    {"dp", {"attention", "dp", NULL}, {"L1 B +", "L2 B +"}, {LIPT_SCALE_NONE, LIPT_SCALE_NONE}, LIPT_INVERSE_NONE},
    {"l2-tied", {"attention", "l2-tied", "dropout", "0.1", NULL}, {"L1 B D +", "L2 B D +"},
     {LIPT_SCALE_NONE, LIPT_SCALE_NONE}, LIPT_INVERSE_NONE},
    {"post-LN", {"attention", "dp", "norm", "post", NULL}, {"B + L1", "B + L2"}, {LIPT_SCALE_NONE, LIPT_SCALE_NONE},
     LIPT_INVERSE_NONE},
    {"clipped-dp", {"attention", "clipped-dp", "ffn", "contractive", "lip_norm", "inf2", "activation", "relu", NULL}, {"B +", "B +"},
     {LIPT_SCALE_WO, LIPT_SCALE_W1W2}, LIPT_INVERSE_FIXED_POINT},
    {"clipped-dp actnorm",
     {"attention", "clipped-dp", "ffn", "contractive", "lip_norm", "inf2", "activation", "elu", "actnorm", "1", NULL},
     {"B +", "B + A"}, {LIPT_SCALE_WO, LIPT_SCALE_W1W2}, LIPT_INVERSE_FIXED_POINT},
    {"coupling control", {"attention", "dp", "coupling", "1", "coupling_grid", "16", NULL},
     {"K1 L1 B K0 G16 +", "K0 L2 B K1 G16 +"}, {LIPT_SCALE_NONE, LIPT_SCALE_NONE}, LIPT_INVERSE_SUBTRACT},
    {"coupling control, no grid", {"attention", "dp", "coupling", "1", NULL}, {"K1 L1 B K0 +", "K0 L2 B K1 +"},
     {LIPT_SCALE_NONE, LIPT_SCALE_NONE}, LIPT_INVERSE_SUBTRACT},
    {"certified coupling actnorm",
     {"attention", "clipped-dp", "ffn", "contractive", "lip_norm", "inf2", "activation", "maxmin", "ffn_full_budget",
      "1", "coupling", "1", "coupling_grid", "16", "actnorm", "1", NULL},
     {"K1 B K0 G16 +", "K0 B K1 G16 + A"}, {LIPT_SCALE_WO, LIPT_SCALE_W1W2}, LIPT_INVERSE_SUBTRACT},
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

static void config_of(const kind *k, lipt_config *cfg) {
    static const char *const base[] = {"vocab_size", "13", "d_model", "16", "n_heads", "2",  "d_ff", "32",
                                       "n_layers",   "2",  "seq_len", "12", "init_seed", "7", NULL};
    lipt_error err = {0};
    lipt_config_default(cfg);
    for (int i = 0; base[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, base[i], base[i + 1], &err) == LIPT_OK, "%s: %s", base[i], err.msg);
    for (int i = 0; k->kv[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, k->kv[i], k->kv[i + 1], &err) == LIPT_OK, "%s %s: %s", k->label, k->kv[i],
                      err.msg);
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "%s: %s", k->label, err.msg);
}

/* The steps of h as text: K<half> keep, L<n> LayerNorm, B branch, D dropout, G<bits> grid, + sum, A ActNorm. */
static void describe(const lipt_half_desc *h, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < h->n_steps && o < cap; i++) {
        const lipt_step s = h->step[i];
        const char *sep = i ? " " : "";
        switch (s.kind) {
        case LIPT_STEP_KEEP_HALF: o += (size_t)snprintf(out + o, cap - o, "%sK%d", sep, s.arg); break;
        case LIPT_STEP_LN: o += (size_t)snprintf(out + o, cap - o, "%sL%d", sep, s.arg); break;
        case LIPT_STEP_BRANCH: o += (size_t)snprintf(out + o, cap - o, "%sB", sep); break;
        case LIPT_STEP_DROPOUT: o += (size_t)snprintf(out + o, cap - o, "%sD", sep); break;
        case LIPT_STEP_GRID: o += (size_t)snprintf(out + o, cap - o, "%sG%d", sep, s.arg); break;
        case LIPT_STEP_ADD: o += (size_t)snprintf(out + o, cap - o, "%s+", sep); break;
        case LIPT_STEP_ACTNORM: o += (size_t)snprintf(out + o, cap - o, "%sA", sep); break;
        }
    }
}

START_TEST(test_description) {
    const kind *k = &kinds[_i];
    lipt_config cfg;
    config_of(k, &cfg);
    for (int l = 0; l < cfg.n_layers; l++) {
        lipt_half_desc hd[2];
        lipt_block_halves(&cfg, l, hd);
        for (int h = 0; h < 2; h++) {
            char text[128];
            describe(&hd[h], text, sizeof text);
            ck_assert_msg(strcmp(text, k->steps[h]) == 0, "%s layer %d half %d: \"%s\", expected \"%s\"", k->label, l,
                          h, text, k->steps[h]);
            ck_assert_int_eq(hd[h].which, h);
            ck_assert_int_eq(hd[h].token_wise, h == LIPT_BRANCH_FFN);
            ck_assert_msg(hd[h].scale == k->scale[h], "%s half %d: scale %d", k->label, h, (int)hd[h].scale);
            ck_assert_msg(hd[h].inverse == k->inverse, "%s half %d: inverse %d", k->label, h, (int)hd[h].inverse);
            ck_assert_int_eq(hd[h].step[hd[h].add].kind, LIPT_STEP_ADD);
        }
    }
    ck_assert_int_eq(lipt_config_reversible(&cfg), k->inverse != LIPT_INVERSE_NONE);
}
END_TEST

/* The model of kind k with its LayerNorm, bias and ActNorm parameters moved off their initial values (so that every
 * step of the description matters). */
static void build(const kind *k, lipt_model *m) {
    lipt_config cfg;
    config_of(k, &cfg);
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "%s: %s", k->label, err.msg);
    lipt_rng r;
    lipt_rng_seed(&r, 11);
    for (int i = 0; i < m->params.n; i++) {
        lipt_tensor *t = m->params.list[i];
        if (t->ndim != 1 || (m->params.flags[i] & LIPT_PARAM_BUFFER)) continue;
        for (size_t j = 0; j < t->numel; j++) t->data[j] += 0.1f * lipt_rng_normal(&r);
    }
}

/* The decoder (cached row kernels, one token at a time) against the forward (tape ops) at every position. */
START_TEST(test_decoder_walks_as_forward) {
    const kind *k = &kinds[_i];
    lipt_model m;
    build(k, &m);
    const int T = m.cfg.seq_len, V = m.cfg.vocab_size;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_rng r;
    lipt_rng_seed(&r, 3);
    int ids[64];
    for (int t = 0; t < T; t++) ids[t] = (int)lipt_rng_below(&r, (uint64_t)V);
    lipt_error err = {0};
    lipt_decoder *dec;
    ck_assert_msg(lipt_decoder_create(&m, 1, &dec, &err) == LIPT_OK, "%s: %s", k->label, err.msg);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        const float *lg;
        ck_assert(lipt_decoder_append(dec, &ids[t], 1, &lg, &err) == LIPT_OK);
        lipt_tensor *ref = NULL;
        lipt_no_grad_push(&ctx);
        ck_assert(lipt_model_forward(&ctx, &m, ids, 1, t + 1, NULL, &ref, NULL, &err) == LIPT_OK);
        lipt_no_grad_pop(&ctx);
        const double e = tu_max_rel_err_f(lg, ref->data + (size_t)t * V, (size_t)V, 1e-3);
        if (!(e <= worst)) worst = e;
        lipt_ctx_reset(&ctx);
    }
    printf("%s: decoder against forward, worst relative error %.3g\n", k->label, worst);
    ck_assert_msg(worst <= 1e-5, "%s: decoder off the forward by %.3g", k->label, worst);
    lipt_decoder_free(dec);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
}
END_TEST

/* The inversion (from the top, each half's steps after the sum undone, then x + g(x) = y) recovers the input. */
START_TEST(test_inversion_walks_back) {
    const kind *k = &kinds[_i];
    lipt_model m;
    build(k, &m);
    const int T = m.cfg.seq_len;
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    int ids[64];
    for (int t = 0; t < T; t++) ids[t] = (t * 5 + 1) % m.cfg.vocab_size;
    lipt_model_invert_result res;
    lipt_error err = {0};
    const lipt_status st = lipt_model_invert(&ctx, &m, ids, T, NULL, &res, &err);
    if (k->inverse == LIPT_INVERSE_NONE) {
        ck_assert_msg(st == LIPT_ERR_ARG, "%s: inversion not refused", k->label);
    } else {
        ck_assert_msg(st == LIPT_OK, "%s: %s", k->label, err.msg);
        printf("%s: inverted, input error %.3g, %d iterations\n", k->label, res.max_abs_input_err,
               res.trace.total_iters);
        ck_assert_msg(res.exact && res.max_abs_input_err <= 1e-4, "%s: %d of %d tokens, input error %.3g", k->label,
                      res.tokens_correct, T, res.max_abs_input_err);
    }
    lipt_model_invert_result_free(&res);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
}
END_TEST

/* The reversible backward (each half rebuilt from its output as the description says) against store-all. */
START_TEST(test_reversible_walks_back) {
    const kind *k = &kinds[_i];
    lipt_config cfg;
    config_of(k, &cfg);
    lipt_error err = {0};
    if (k->inverse == LIPT_INVERSE_NONE) {
        ck_assert_msg(lipt_config_reversible_check(&cfg, &err) == LIPT_ERR_ARG, "%s: --memory invert not refused",
                      k->label);
        return;
    }
    ck_assert_msg(lipt_config_reversible_check(&cfg, &err) == LIPT_OK, "%s: %s", k->label, err.msg);
    double loss[2][1];
    float *slab[2], *grad[2];
    size_t n[2];
    lipt_reversible rev;
    lipt_reversible_defaults(&rev);
    for (int run = 0; run < 2; run++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 4096, 7);
        ctx.rev = run ? &rev : NULL;
        tu_train_steps(&cfg, &ctx, 1, loss[run], &slab[run], &grad[run], &n[run], NULL);
        lipt_ctx_free(&ctx);
    }
    ck_assert(n[0] == n[1] && rev.inversions == 2 * cfg.n_layers - 1);
    double dd = 0, aa = 0;
    for (size_t i = 0; i < n[0]; i++) {
        const double d = (double)grad[1][i] - grad[0][i];
        dd += d * d, aa += (double)grad[0][i] * grad[0][i];
    }
    const double rel = sqrt(dd / aa);
    printf("%s: reversible gradients against store-all, relative error %.3g\n", k->label, rel);
    if (k->inverse == LIPT_INVERSE_SUBTRACT && cfg.coupling_grid) /* exact sums: the same bits */
        ck_assert_msg(loss[0][0] == loss[1][0] && memcmp(grad[0], grad[1], n[0] * sizeof(float)) == 0,
                      "%s: not bit for bit", k->label);
    else
        ck_assert_msg(rel <= 1e-4, "%s: gradients off by %.3g", k->label, rel);
    for (int run = 0; run < 2; run++) free(slab[run]), free(grad[run]);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("block_plan");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_description, 0, N_KINDS);
    tcase_add_loop_test(tc, test_decoder_walks_as_forward, 0, N_KINDS);
    tcase_add_loop_test(tc, test_inversion_walks_back, 0, N_KINDS);
    tcase_add_loop_test(tc, test_reversible_walks_back, 0, N_KINDS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
