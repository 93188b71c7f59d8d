/* The Transformer's forward pass: embeddings, the blocks (the branches are in branch.c), head, loss. */
#include "lipt/model.h"
#include "nn/block_plan.h"

#include <string.h>

static lipt_tensor *linear(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    return b ? lipt_linear(ctx, x, w, b) : lipt_matmul(ctx, x, w, 0, 0);
}

lipt_status lipt_model_check_ids(const lipt_model *m, const int *ids, int B, int T, lipt_error *err) {
    if (B < 1) return lipt_fail(err, LIPT_ERR_ARG, "batch size %d (need at least 1)", B);
    if (T < 1 || T > m->cfg.seq_len)
        return lipt_fail(err, LIPT_ERR_ARG, "sequence length %d outside [1, seq_len = %d]", T, m->cfg.seq_len);
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return lipt_fail(err, LIPT_ERR_ARG, "token id %d at position %zu (batch row %zu) outside [0, vocab_size = %d)",
                             ids[i], i % (size_t)T, i / (size_t)T, m->cfg.vocab_size);
    return LIPT_OK;
}

lipt_tensor *lipt_model_embed(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T) {
    const int D = m->cfg.d_model;
    LIPT_CHECK(B >= 1 && T >= 1 && T <= m->cfg.seq_len, "model embed: B %d T %d (seq_len %d)", B, T, m->cfg.seq_len);
    lipt_tensor *tok = lipt_embedding(ctx, m->tok_emb, ids, 3, (int[]){B, T, D});
    int *pos = lipt_arena_alloc(&ctx->arena, (size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) pos[t] = t;
    /* [T,D] positional rows broadcast over the batch (lipt_add's trailing-dims rule) */
    lipt_tensor *pe = lipt_embedding(ctx, m->pos_emb, pos, 2, (int[]){T, D});
    lipt_tensor *x = lipt_add(ctx, tok, pe);
    /* coupling_grid: the residual stream starts on the grid its sums stay exact on */
    return m->cfg.coupling_grid ? lipt_round_grid(ctx, x, m->cfg.coupling_grid) : x;
}
lipt_status lipt_model_branch_inputs(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, float *x,
                                     lipt_error *err) {
    lipt_status st = lipt_model_check_ids(m, ids, 1, T, err);
    if (st != LIPT_OK) return st;
    const size_t n = (size_t)T * m->cfg.d_model;
    lipt_no_grad_push(ctx);
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    lipt_tensor *h = lipt_model_embed(ctx, m, ids, 1, T);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_half_desc hd[2];
        lipt_block_halves(&m->cfg, l, hd);
        for (int k = 0; k < 2; k++) {
            memcpy(x + (size_t)(2 * l + hd[k].which) * n, h->data, n * sizeof(float));
            h = lipt_model_residual(ctx, m, l, hd[k].which, h, lipt_model_branch(ctx, m, l, hd[k].which, h));
        }
    }
    lipt_arena_release(&ctx->arena, mark);
    lipt_no_grad_pop(ctx);
    return LIPT_OK;
}
lipt_tensor *lipt_model_block_certified(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x,
                                        const lipt_layer_certs *certs) {
    lipt_half_desc hd[2];
    lipt_block_halves(&m->cfg, layer, hd);
    for (int k = 0; k < 2; k++) {
        lipt_branch_ref ref = {m, layer, hd[k].which, certs};
        if (ctx->recompute) { /* keep only the half-block's output; its inside is rerun in the backward */
            lipt_branch_ref *r = lipt_arena_alloc(&ctx->arena, sizeof *r);
            *r = ref;
            /* a token-wise half (the feed-forward) runs in pieces, so its d_ff-wide insides are bounded too */
            const int rows = ctx->recompute_rows > 0 ? ctx->recompute_rows : LIPT_RECOMPUTE_ROWS;
            x = hd[k].token_wise ? lipt_recompute_rows(ctx, lipt_model_half_block, x, r, rows)
                                 : lipt_recompute(ctx, lipt_model_half_block, x, r);
        } else {
            x = lipt_model_half_block(ctx, x, &ref);
        }
    }
    return x;
}

lipt_tensor *lipt_model_block(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x) {
    return lipt_model_block_certified(ctx, m, layer, x, NULL);
}

lipt_tensor *lipt_model_hidden(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T) {
    lipt_tensor *x = lipt_model_embed(ctx, m, ids, B, T);
    const lipt_layer_certs *cc = lipt_model_certify(ctx, m); /* all the blocks' certificates in one batch */
    if (ctx->rev && lipt_config_reversible(&m->cfg)) return lipt_model_blocks_reversible(ctx, m, x, cc);
    for (int l = 0; l < m->cfg.n_layers; l++) x = lipt_model_block_certified(ctx, m, l, x, cc ? &cc[l] : NULL);
    return x;
}

lipt_tensor *lipt_model_logits(lipt_ctx *ctx, const lipt_model *m, lipt_tensor *h) {
    lipt_tensor *n = lipt_layernorm(ctx, h, m->lnf_g, m->lnf_b, m->cfg.ln_eps);
    if (m->head_w1) n = lipt_gelu(ctx, linear(ctx, n, m->head_w1, m->head_b1)); /* the MLP head (head_hidden) */
    return linear(ctx, n, m->head_w, m->head_b);
}

lipt_status lipt_model_forward(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T, const int *targets,
                               lipt_tensor **logits, lipt_tensor **loss, lipt_error *err) {
    lipt_status st = lipt_model_check_ids(m, ids, B, T, err);
    if (st == LIPT_OK && targets) {
        st = lipt_model_check_ids(m, targets, B, T, err);
        if (st != LIPT_OK && err) {
            char msg[LIPT_ERRMSG_LEN];
            memcpy(msg, err->msg, sizeof msg);
            return lipt_fail(err, st, "targets: %.500s", msg);
        }
    }
    if (st != LIPT_OK) return st;
    lipt_tensor *lg = lipt_model_logits(ctx, m, lipt_model_hidden(ctx, m, ids, B, T));
    if (logits) *logits = lg;
    if (loss) *loss = targets ? lipt_cross_entropy(ctx, lg, targets, NULL) : NULL;
    return LIPT_OK;
}
