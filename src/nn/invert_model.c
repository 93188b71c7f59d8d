/* Model inversion (SPEC §3): a hidden state -> the blocks undone from the top by fixed-point iteration -> the
 * embedding input; from tokens, the forward pass first and the nearest tokens last. */
#include "lipt/invert.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/model.h"
#include "nn/block_plan.h"

void lipt_invert_trace_free(lipt_invert_trace *trace) {
    if (!trace) return;
    free(trace->iters);
    free(trace->converged);
    free(trace->err);
    memset(trace, 0, sizeof *trace);
    trace->failed_layer = trace->failed_branch = -1;
}

void lipt_model_invert_result_free(lipt_model_invert_result *res) {
    if (!res) return;
    lipt_invert_trace_free(&res->trace);
    free(res->tokens);
    memset(res, 0, sizeof *res);
    res->trace.failed_layer = res->trace.failed_branch = -1;
}

lipt_fp_opts lipt_model_invert_opts(const lipt_model *m, const lipt_fp_opts *opts) {
    lipt_fp_opts o = opts ? *opts : lipt_fp_opts_default();
    /* maps certified in the token-wise norm stop on the change in that norm */
    if (m->cfg.lip_norm == LIPT_LIPNORM_INF2) o.row_width = m->cfg.d_model;
    return o;
}

static const char *branch_name(int which) { return which == LIPT_BRANCH_ATTN ? "attention" : "feed-forward"; }

/* The checks every model inversion starts with: a model whose half-blocks invert (block_plan.h: the invertible model,
 * coupling blocks), the options o. */
static lipt_status invert_check(const lipt_model *m, const lipt_fp_opts *o, lipt_error *err) {
    lipt_half_desc hd[2];
    lipt_block_halves(&m->cfg, 0, hd);
    if (hd[0].inverse == LIPT_INVERSE_NONE || hd[1].inverse == LIPT_INVERSE_NONE)
        return lipt_fail(err, LIPT_ERR_ARG,
                         "model inversion needs the invertible model (attention = clipped-dp or contractive-l2, ffn = "
                         "contractive); "
                         "this one has attention = %s, ffn = %s",
                         lipt_attn_name(m->cfg.attention), lipt_ffn_name(m->cfg.ffn));
    if (o->max_iter < 1 || !(o->tol > 0))
        return lipt_fail(err, LIPT_ERR_ARG, "inversion: need tol > 0 and max_iter >= 1");
    return LIPT_OK;
}

/* The blocks undone from the top: y [T, D] is the last block's output on entry and the recovered embedding input on
 * success (x [T, D] scratch; the two may trade buffers, so both are passed by address). tr may be NULL. */
static lipt_status invert_blocks(lipt_ctx *ctx, const lipt_model *m, int T, const lipt_fp_opts *o, float **py,
                                 float **px, lipt_invert_trace *tr, lipt_error *err) {
    const int L = m->cfg.n_layers, D = m->cfg.d_model;
    const size_t n = (size_t)T * D;
    float *y = *py, *x = *px;
    lipt_status st = LIPT_OK;
    for (int l = L - 1; l >= 0 && st == LIPT_OK; l--) {
        lipt_half_desc hd[2];
        lipt_block_halves(&m->cfg, l, hd);
        /* the block's halves undone from the last: each its steps after the sum (ActNorm), then x + g(x) = y */
        for (int h = 1; h >= 0; h--) {
            const int which = hd[h].which, k = 2 * l + which;
            lipt_half_undo_after(&m->layers[l], &hd[h], y, y, n, D);
            lipt_branch_ref ref = {m, l, which, NULL};
            lipt_fp_result fr = {0, 0, tr ? tr->err + (size_t)k * o->max_iter : NULL, 0};
            lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
            lipt_tensor *yt = lipt_tensor_wrap(ctx, y, 3, (int[]){1, T, D});
            lipt_error inner = {LIPT_OK, ""};
            /* the branch as the forward adds it (not training: no dropout): on coupling_grid's grid, so that
             * y - g(x) undoes the exact sum */
            const lipt_branch_fn gfn = lipt_model_branch_train;
            if (o->accel) { /* the reversible-training solver: Anderson, the certificate's stopping rule */
                const int inf2 = m->cfg.lip_norm == LIPT_LIPNORM_INF2;
                const lipt_fp_accel_opts ao = {o->tol, o->max_iter, o->row_width, hd[h].token_wise ? T : 1,
                                               o->memory, inf2 ? lipt_config_reversible_lip(&m->cfg) : 0, 1};
                lipt_inv_info info;
                st = lipt_fixed_point_invert_accel(ctx, gfn, &ref, yt, x, &ao, &info, &inner);
                fr.iters = info.iters;
                fr.converged = info.converged;
                fr.final_err = info.bound;
                if (fr.err && info.iters > 0) fr.err[info.iters - 1] = info.bound;
            } else {
                st = lipt_fixed_point_invert(ctx, gfn, &ref, yt, x, o, &fr, &inner);
            }
            lipt_arena_release(&ctx->arena, mark);
            if (tr) {
                tr->iters[k] = fr.iters;
                tr->converged[k] = fr.converged && st == LIPT_OK;
                tr->total_iters += fr.iters;
            }
            if (st != LIPT_OK) {
                if (tr) {
                    tr->failed_layer = l;
                    tr->failed_branch = which;
                    tr->failed_err = fr.final_err;
                }
                st = lipt_fail(err, LIPT_ERR_NUMERIC,
                               "inversion of layer %d %s map did not converge: %d iterations, last change %.3e "
                               "(tol %.1e relative): %.300s",
                               l, branch_name(which), fr.iters, fr.final_err, o->tol, inner.msg);
                break;
            }
            float *t = y; /* this map's input is the next map's output */
            y = x;
            x = t;
        }
    }
    *py = y;
    *px = x;
    return st;
}

lipt_status lipt_model_invert_hidden(lipt_ctx *ctx, const lipt_model *m, const float *h, int T, float *x0,
                                     const lipt_fp_opts *opts, lipt_invert_trace *trace, lipt_error *err) {
    if (trace) {
        memset(trace, 0, sizeof *trace);
        trace->failed_layer = trace->failed_branch = -1;
    }
    if (!ctx || !m || !h || !x0) return lipt_fail(err, LIPT_ERR_ARG, "model inversion: NULL argument");
    const lipt_fp_opts o = lipt_model_invert_opts(m, opts);
    lipt_status st = invert_check(m, &o, err);
    if (st != LIPT_OK) return st;
    if (T < 1 || T > m->cfg.seq_len)
        return lipt_fail(err, LIPT_ERR_ARG, "model inversion: T = %d positions, need 1..seq_len %d", T, m->cfg.seq_len);
    const int L = m->cfg.n_layers;
    if (trace) {
        trace->n_layers = L;
        trace->max_iter = o.max_iter;
        trace->iters = lipt_xcalloc((size_t)(2 * L), sizeof(int));
        trace->converged = lipt_xcalloc((size_t)(2 * L), sizeof(int));
        trace->err = lipt_xcalloc((size_t)(2 * L) * (size_t)o.max_iter, sizeof(double));
    }
    const size_t n = (size_t)T * m->cfg.d_model;
    float *y = lipt_xmalloc(n * sizeof(float)), *x = lipt_xmalloc(n * sizeof(float));
    memcpy(y, h, n * sizeof(float)); /* h is not read again: x0 may be h */
    const int training = ctx->training; /* no dropout, whatever mode the caller is in */
    ctx->training = 0;
    lipt_no_grad_push(ctx);
    st = invert_blocks(ctx, m, T, &o, &y, &x, trace, err);
    lipt_no_grad_pop(ctx);
    ctx->training = training;
    if (st == LIPT_OK) memcpy(x0, y, n * sizeof(float)); /* y is the recovered embedding input */
    free(x);
    free(y);
    return st;
}

/* The recovered embedding input y [T, D] against the true one x0: the largest entry error, and each position's
 * nearest token (token + position embedding, squared distance, ties to the lowest id). */
static lipt_status invert_tokens(const lipt_model *m, const int *ids, int T, const float *y, const float *x0,
                                 lipt_model_invert_result *res, lipt_error *err) {
    const int D = m->cfg.d_model, V = m->cfg.vocab_size;
    const size_t n = (size_t)T * D;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)y[i] - x0[i]);
        if (!(e <= worst)) worst = e; /* NaN shows */
    }
    res->max_abs_input_err = worst;
    const float *tok = m->tok_emb->data, *pos = m->pos_emb->data;
    for (int t = 0; t < T; t++) {
        const float *row = y + (size_t)t * D, *p = pos + (size_t)t * D;
        double best = DBL_MAX;
        int arg = -1;
        for (int v = 0; v < V; v++) {
            const float *e = tok + (size_t)v * D;
            double d2 = 0;
            for (int j = 0; j < D; j++) {
                double dj = (double)row[j] - p[j] - e[j];
                d2 += dj * dj;
            }
            if (d2 < best) best = d2, arg = v;
        }
        res->tokens[t] = arg;
        res->tokens_correct += arg == ids[t];
    }
    res->exact = res->tokens_correct == T;
    if (!isfinite(worst)) return lipt_fail(err, LIPT_ERR_NUMERIC, "inversion produced non-finite inputs");
    return LIPT_OK;
}

lipt_status lipt_model_invert(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, const lipt_fp_opts *opts,
                              lipt_model_invert_result *res, lipt_error *err) {
    memset(res, 0, sizeof *res);
    res->trace.failed_layer = res->trace.failed_branch = -1;
    const lipt_fp_opts o = lipt_model_invert_opts(m, opts);
    lipt_status st = invert_check(m, &o, err);
    if (st == LIPT_OK) st = lipt_model_check_ids(m, ids, 1, T, err);
    if (st != LIPT_OK) return st;
    res->T = T;
    res->tokens = lipt_xcalloc((size_t)T, sizeof(int));
    const size_t n = (size_t)T * m->cfg.d_model;
    float *x0 = lipt_xmalloc(n * sizeof(float)); /* the true input: embeddings of ids */
    float *y = lipt_xmalloc(n * sizeof(float));

    /* Forward without dropout, whatever mode the caller is in. */
    const int training = ctx->training;
    ctx->training = 0;
    lipt_no_grad_push(ctx);
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_tensor *h = lipt_model_embed(ctx, m, ids, 1, T);
    memcpy(x0, h->data, n * sizeof(float));
    for (int l = 0; l < m->cfg.n_layers; l++) h = lipt_model_block(ctx, m, l, h);
    memcpy(y, h->data, n * sizeof(float));
    lipt_arena_release(&ctx->arena, mark);
    lipt_no_grad_pop(ctx);
    ctx->training = training;

    st = lipt_model_invert_hidden(ctx, m, y, T, y, &o, &res->trace, err);
    if (st == LIPT_OK) st = invert_tokens(m, ids, T, y, x0, res, err); /* y is the recovered embedding input */
    free(x0);
    free(y);
    return st;
}
