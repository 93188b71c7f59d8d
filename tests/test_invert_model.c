/* Model inversion from a hidden state (lipt_model_invert_hidden) against lipt_model_invert and the true embedding
 * input, its trace and errors; the inversion defaults in one place; the branch inputs (lipt_model_branch_inputs). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/invert.h"
#include "lipt/model.h"

/* A small invertible model: clipped-dp (lip_norm inf2) with ActNorm or contractive-l2 (lip_norm inf) without, its
 * feed-forward weights scaled up so that the normalisers are active and the ActNorm parameters away from identity. */
static void build(lipt_model *m, int clipped, int T) {
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = 17;
    cfg.d_model = 16;
    cfg.n_heads = 2;
    cfg.d_ff = 32;
    cfg.n_layers = 2;
    cfg.seq_len = T;
    cfg.attention = clipped ? LIPT_ATTN_CLIPPED_DP : LIPT_ATTN_CONTRACTIVE_L2;
    cfg.ffn = LIPT_FFN_CONTRACTIVE;
    cfg.activation = LIPT_ACT_LIPSWISH;
    cfg.lip_norm = clipped ? LIPT_LIPNORM_INF2 : LIPT_LIPNORM_INF;
    cfg.actnorm = clipped;
    cfg.c = 0.8f;
    cfg.init_seed = 5 + (uint64_t)clipped;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "model init: %s", err.msg);
    for (int l = 0; l < cfg.n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        for (size_t i = 0; i < L->w1->numel; i++) L->w1->data[i] *= 8.0f;
        for (size_t i = 0; i < L->w2->numel; i++) L->w2->data[i] *= 8.0f;
        if (L->an_s)
            for (int c = 0; c < cfg.d_model; c++) {
                L->an_s->data[c] = 0.05f * (float)((c % 5) - 2);
                L->an_b->data[c] = 0.1f * (float)((c % 3) - 1);
            }
    }
    lipt_model_refresh_norms(m, 300);
}

/* The model's last hidden state for ids[T] into h, and the embedding input into x0_true. */
static void hidden(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, float *h, float *x0_true) {
    const size_t n = (size_t)T * m->cfg.d_model;
    lipt_no_grad_push(ctx);
    lipt_tensor *x = lipt_model_embed(ctx, m, ids, 1, T);
    memcpy(x0_true, x->data, n * sizeof(float));
    for (int l = 0; l < m->cfg.n_layers; l++) x = lipt_model_block(ctx, m, l, x);
    memcpy(h, x->data, n * sizeof(float));
    lipt_no_grad_pop(ctx);
    lipt_ctx_reset(ctx);
}

START_TEST(test_defaults) {
    const lipt_fp_opts d = lipt_fp_opts_default();
    ck_assert(d.tol == LIPT_INVERT_TOL && d.max_iter == LIPT_INVERT_MAX_ITER && d.row_width == 0);
    /* the help texts print the constants themselves */
    ck_assert(strtod(LIPT_INVERT_STR(LIPT_INVERT_TOL), NULL) == LIPT_INVERT_TOL);
    ck_assert_int_eq(atoi(LIPT_INVERT_STR(LIPT_INVERT_MAX_ITER)), LIPT_INVERT_MAX_ITER);
    lipt_model m;
    for (int clipped = 0; clipped < 2; clipped++) {
        build(&m, clipped, 8);
        lipt_fp_opts o = lipt_model_invert_opts(&m, NULL);
        ck_assert(o.tol == LIPT_INVERT_TOL && o.max_iter == LIPT_INVERT_MAX_ITER);
        /* inf2 maps stop on the token-wise norm whatever the caller asks; the others on the caller's norm */
        ck_assert_int_eq(o.row_width, clipped ? m.cfg.d_model : 0);
        o = lipt_model_invert_opts(&m, &(lipt_fp_opts){1e-3, 7, 4, 0, 0});
        ck_assert(o.tol == 1e-3 && o.max_iter == 7);
        ck_assert_int_eq(o.row_width, clipped ? m.cfg.d_model : 4);
        lipt_model_free(&m);
    }
}
END_TEST

START_TEST(test_invert_hidden) {
    const int T = 8;
    for (int clipped = 0; clipped < 2; clipped++) {
        lipt_model m;
        build(&m, clipped, T);
        const int D = m.cfg.d_model, L = m.cfg.n_layers;
        const size_t n = (size_t)T * D;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        int ids[8];
        for (int t = 0; t < T; t++) ids[t] = (5 * t + 3 * clipped) % m.cfg.vocab_size;
        float *h = malloc(n * sizeof(float)), *x0_true = malloc(n * sizeof(float));
        float *x0 = malloc(n * sizeof(float)), *x0b = malloc(n * sizeof(float));
        hidden(&ctx, &m, ids, T, h, x0_true);

        lipt_invert_trace tr;
        lipt_error err = {0};
        const size_t used = ctx.arena.used_total;
        ck_assert_msg(lipt_model_invert_hidden(&ctx, &m, h, T, x0, NULL, &tr, &err) == LIPT_OK, "%s", err.msg);
        ck_assert(ctx.arena.used_total == used && ctx.no_grad == 0 && ctx.training == 0);
        double e = 0;
        for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)x0[i] - x0_true[i]));
        printf("invert_hidden %s: max |x0 - x0_true| %.2e, %d iterations in all\n",
               clipped ? "clipped-dp inf2 actnorm" : "contractive-l2 inf", e, tr.total_iters);
        ck_assert_msg(e <= 1e-4, "x0 error %g", e);
        ck_assert(tr.n_layers == L && tr.max_iter == LIPT_INVERT_MAX_ITER && tr.failed_layer == -1);
        int total = 0;
        for (int k = 0; k < 2 * L; k++) {
            ck_assert(tr.converged[k] && tr.iters[k] >= 1);
            ck_assert(isfinite(tr.err[(size_t)k * tr.max_iter + tr.iters[k] - 1]));
            total += tr.iters[k];
        }
        ck_assert_int_eq(total, tr.total_iters);

        /* lipt_model_invert runs the same inversion: the same trace, bit for bit */
        lipt_model_invert_result res;
        ck_assert_msg(lipt_model_invert(&ctx, &m, ids, T, NULL, &res, &err) == LIPT_OK, "%s", err.msg);
        ck_assert(res.exact && res.trace.total_iters == tr.total_iters);
        ck_assert(memcmp(res.trace.iters, tr.iters, sizeof(int) * 2 * L) == 0);
        ck_assert(memcmp(res.trace.err, tr.err, sizeof(double) * 2 * L * tr.max_iter) == 0);
        lipt_model_invert_result_free(&res);

        /* without a trace, and in place (x0 = h): the same bits */
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T, x0b, NULL, NULL, &err) == LIPT_OK);
        ck_assert(memcmp(x0, x0b, n * sizeof(float)) == 0);
        memcpy(x0b, h, n * sizeof(float));
        ck_assert(lipt_model_invert_hidden(&ctx, &m, x0b, T, x0b, NULL, NULL, &err) == LIPT_OK);
        ck_assert(memcmp(x0, x0b, n * sizeof(float)) == 0);

        /* too few iterations: the top feed-forward map fails, named in the message and the trace */
        lipt_invert_trace_free(&tr);
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T, x0b, &(lipt_fp_opts){1e-6, 1, 0, 0, 0}, &tr, &err) ==
                  LIPT_ERR_NUMERIC);
        ck_assert(tr.failed_layer == L - 1 && tr.failed_branch == LIPT_BRANCH_FFN && tr.iters[2 * L - 1] == 1);
        ck_assert(tr.total_iters == 1 && !tr.converged[2 * L - 1]);
        ck_assert_msg(strstr(err.msg, "layer 1 feed-forward map did not converge"), "%s", err.msg);
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T, x0b, &(lipt_fp_opts){1e-6, 1, 0, 0, 0}, NULL, &err) ==
                  LIPT_ERR_NUMERIC);
        ck_assert(ctx.no_grad == 0);

        /* bad arguments: refused, the trace empty and safe to free */
        lipt_invert_trace_free(&tr);
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, 0, x0b, NULL, &tr, &err) == LIPT_ERR_ARG);
        ck_assert(tr.iters == NULL && tr.failed_layer == -1);
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T + 1, x0b, NULL, &tr, &err) == LIPT_ERR_ARG);
        ck_assert(strstr(err.msg, "seq_len"));
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T, x0b, &(lipt_fp_opts){0, 10, 0, 0, 0}, &tr, &err) == LIPT_ERR_ARG);
        h[3] = NAN; /* a non-finite hidden state: the top map reports it */
        ck_assert(lipt_model_invert_hidden(&ctx, &m, h, T, x0b, NULL, &tr, &err) == LIPT_ERR_NUMERIC);
        lipt_invert_trace_free(&tr);
        lipt_invert_trace_free(&tr);

        free(h);
        free(x0_true);
        free(x0);
        free(x0b);
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }

    /* a model that is not invertible is refused */
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = 11;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.d_ff = 16;
    cfg.n_layers = 1;
    cfg.seq_len = 4;
    lipt_model m;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_init(&m, &cfg, &err) == LIPT_OK, "%s", err.msg);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    float h[32] = {0}, x0[32];
    lipt_invert_trace tr;
    ck_assert(lipt_model_invert_hidden(&ctx, &m, h, 4, x0, NULL, &tr, &err) == LIPT_ERR_ARG);
    ck_assert(strstr(err.msg, "invertible"));
    lipt_invert_trace_free(&tr);
    lipt_ctx_free(&ctx);
    lipt_model_free(&m);
}
END_TEST

/* Every branch input: the first attention's is the embedding, every feed-forward's is the one before plus its
 * attention, every later attention's the previous block's output (ActNorm included), the last block's output is
 * lipt_model_hidden's. */
START_TEST(test_branch_inputs) {
    const int T = 8;
    for (int clipped = 0; clipped < 2; clipped++) {
        lipt_model m;
        build(&m, clipped, T);
        const int D = m.cfg.d_model, L = m.cfg.n_layers;
        const size_t n = (size_t)T * D;
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        int ids[8];
        for (int t = 0; t < T; t++) ids[t] = (3 * t + 1) % m.cfg.vocab_size;
        float *x = malloc(2 * (size_t)L * n * sizeof(float)), *h = malloc(n * sizeof(float));
        float *x0 = malloc(n * sizeof(float));
        hidden(&ctx, &m, ids, T, h, x0);
        lipt_error err = {0};
        const size_t used = ctx.arena.used_total;
        ck_assert_msg(lipt_model_branch_inputs(&ctx, &m, ids, T, x, &err) == LIPT_OK, "%s", err.msg);
        ck_assert(ctx.arena.used_total == used && ctx.no_grad == 0);
        ck_assert(memcmp(x, x0, n * sizeof(float)) == 0);
        double worst = 0;
        lipt_no_grad_push(&ctx);
        for (int k = 0; k < 2 * L; k++) {
            const int l = k / 2, which = k % 2;
            const float *in = x + (size_t)k * n, *next = k + 1 < 2 * L ? x + (size_t)(k + 1) * n : h;
            lipt_tensor *xt = lipt_tensor_wrap(&ctx, (float *)in, 3, (int[]){1, T, D});
            lipt_tensor *out = lipt_model_residual(&ctx, &m, l, which, xt, lipt_model_branch(&ctx, &m, l, which, xt));
            for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)out->data[i] - next[i]));
        }
        lipt_no_grad_pop(&ctx);
        printf("branch inputs %s: worst |residual(x_k) - x_{k+1}| %.2e\n", clipped ? "clipped-dp" : "contractive-l2",
               worst);
        ck_assert_msg(worst <= 1e-5, "branch inputs off by %g", worst);
        ids[2] = m.cfg.vocab_size; /* out of range: refused with a message */
        ck_assert(lipt_model_branch_inputs(&ctx, &m, ids, T, x, &err) == LIPT_ERR_ARG);
        free(x);
        free(h);
        free(x0);
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }
}
END_TEST

int main(void) {
    lipt_set_threads(1);
    Suite *s = suite_create("invert_model");
    TCase *tc = tcase_create("invert_model");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_invert_hidden);
    tcase_add_test(tc, test_branch_inputs);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
