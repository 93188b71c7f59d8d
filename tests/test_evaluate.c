/* lipt_evaluate: NLL, BPC and next-character accuracy against hand computations on a model whose predictions are
 * known (no blocks; the logits depend only on the position in the window, or not at all), over the three window
 * protocols (non-overlapping, sliding with stride 2 and 3), and the tie rule of the argmax (the lowest id). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "lipt/evaluate.h"
#include "lipt/model.h"

enum { V = 4, N = 4 };

/* 10 targets after one context symbol */
static const lipt_tok toks[11] = {0, 2, 0, 3, 1, 2, 1, 3, 1, 2, 0};

/* A model without blocks, vocabulary 4, width 4, seq_len 4: logits = LN(tok_emb[x] + pos_emb[t]) head_w + head_b. */
static void build(lipt_model *m) {
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = V;
    cfg.d_model = 4;
    cfg.n_heads = 1;
    cfg.d_ff = 8;
    cfg.n_layers = 0;
    cfg.seq_len = N;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "model init: %s", err.msg);
    memset(m->tok_emb->data, 0, m->tok_emb->numel * sizeof(float));
    memset(m->pos_emb->data, 0, m->pos_emb->numel * sizeof(float));
    memset(m->head_w->data, 0, m->head_w->numel * sizeof(float));
    memset(m->head_b->data, 0, m->head_b->numel * sizeof(float));
    for (int d = 0; d < 4; d++) {
        m->lnf_g->data[d] = 1;
        m->lnf_b->data[d] = 0;
    }
}

static lipt_eval_result run(const lipt_model *m, int T, int S, int batch) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)1 << 20, 1);
    lipt_eval_opts o = {T, S, batch, 0, 0, NULL};
    lipt_eval_result r;
    lipt_error err = {0};
    ck_assert_msg(lipt_evaluate(&ctx, m, toks, 11, &o, &r, &err) == LIPT_OK, "evaluate: %s", err.msg);
    lipt_ctx_free(&ctx);
    ck_assert_uint_eq(r.symbols, 10); /* every protocol scores targets 1 .. 10 once */
    return r;
}

START_TEST(test_accuracy_by_position) {
    /* pos_emb[t] = e_t, head_w[d][v] = 1 iff v = pred[d]: the final LayerNorm maps e_t to a at t and b elsewhere, so
     * the logit of pred[t] is a and every other logit b: position t in a window predicts pred[t] */
    const int pred[N] = {2, 0, 3, 1};
    lipt_model m;
    build(&m);
    for (int t = 0; t < N; t++) {
        m.pos_emb->data[t * 4 + t] = 1;
        m.head_w->data[t * V + pred[t]] = 1;
    }
    const double eps = (double)m.cfg.ln_eps, sd = sqrt(3.0 / 16.0 + eps), a = 0.75 / sd, b = -0.25 / sd;
    const double lse = log(exp(a) + 3 * exp(b)), nll_hit = lse - a, nll_miss = lse - b;
    /* by hand, targets 2 0 3 1 | 2 1 3 1 | 2 0:
     *  window 4, stride 4: positions 0123 0123 01 -> predictions 2031 2031 20: 4 + 3 + 2 = 9 right
     *  window 4, stride 2: windows at 0 (scores positions 0-3), 2, 4, 6 (each scores positions 2-3): targets 1-4
     *    against 2031 (4), targets 5-6 (2 1) against 31 (1), 7-8 (3 1) against 31 (2), 9-10 (2 0) against 31 (0): 7
     *  window 4, stride 3: windows at 0 (positions 0-3), 3 and 6 (positions 1-3): 4, then 2 1 3 against 031 and
     *    1 2 0 against 031: 0 and 0 -> 4 */
    const struct { int T, S, batch; size_t correct; } cases[] = {{4, 4, 3, 9}, {4, 4, 1, 9}, {4, 2, 3, 7}, {4, 3, 2, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const lipt_eval_result r = run(&m, cases[c].T, cases[c].S, cases[c].batch);
        const double k = (double)cases[c].correct, nll = (k * nll_hit + (10 - k) * nll_miss) / 10;
        printf("window %d stride %d batch %d: accuracy %.4f (hand %.4f), nll %.6f (hand %.6f), bpc %.6f\n",
               cases[c].T, cases[c].S, cases[c].batch, r.accuracy, k / 10, r.nll, nll, r.bpc);
        ck_assert_uint_eq(r.correct, cases[c].correct);
        ck_assert(fabs(r.accuracy - k / 10) < 1e-15);
        ck_assert_msg(fabs(r.nll - nll) < 1e-5 * nll, "nll %.8f, by hand %.8f", r.nll, nll);
        ck_assert(fabs(r.bpc - r.nll / log(2.0)) < 1e-12);
    }
    lipt_model_free(&m);
}
END_TEST

START_TEST(test_accuracy_ties) {
    /* head_w = 0, head_b = (0, 1, 0, 1): every position predicts a tie of ids 1 and 3, which goes to 1; the targets
     * hold three 1s (and two 3s: 0.2 if ties went to the highest id) */
    lipt_model m;
    build(&m);
    m.head_b->data[1] = m.head_b->data[3] = 1;
    const double lse = log(2 + 2 * exp(1.0));
    double nll = 0;
    for (int i = 1; i <= 10; i++) nll += lse - m.head_b->data[toks[i]];
    nll /= 10;
    const int prot[3][2] = {{4, 4}, {4, 2}, {3, 1}};
    for (int c = 0; c < 3; c++) {
        const lipt_eval_result r = run(&m, prot[c][0], prot[c][1], 2);
        ck_assert_uint_eq(r.correct, 3);
        ck_assert(fabs(r.accuracy - 0.3) < 1e-15);
        ck_assert_msg(fabs(r.nll - nll) < 1e-5 * nll, "nll %.8f, by hand %.8f", r.nll, nll);
    }
    printf("ties: accuracy 0.3 (the lowest id of a tie) in three protocols\n");
    lipt_model_free(&m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("evaluate");
    TCase *tc = tcase_create("evaluate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_accuracy_by_position);
    tcase_add_test(tc, test_accuracy_ties);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
