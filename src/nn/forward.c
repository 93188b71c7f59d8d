/* The Transformer's forward pass: embeddings, attention and feed-forward branches per variant, blocks, head, loss. */
#include "lipt/model.h"

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

/* The normaliser 1/max(1, s/c) as a one-element tensor, differentiated through s. */
static lipt_tensor *contract(lipt_ctx *ctx, lipt_tensor *s, float c) { return lipt_contract_factor(ctx, s, c); }

/* Multi-head attention of x (already layer-normed for the pre-LN variants), with its output projection; what
 * differs between the kinds comes from their lipt_attn_info row. */
static lipt_tensor *attention(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x,
                              const lipt_layer_certs *cc) {
    const lipt_config *c = &m->cfg;
    const lipt_attn_info *ai = lipt_attn_info_of(c->attention);
    const lipt_layer *L = &m->layers[layer];
    const int H = c->n_heads;
    if (ai->clip_rows) x = lipt_clip_rows(ctx, x, lipt_config_clip_radius(c)); /* q, k, v from the clipped rows */
    lipt_tensor *a;
    if (ai->tied) {
        a = lipt_attention_l2_tied(ctx, lipt_matmul(ctx, x, L->wq, 0, 0), L->wq, L->wv, H, 1);
    } else {
        /* q, k, v from one product with the weights side by side ([B,T,3D]), the attention reading its column
         * blocks: one GEMM of N = 3D instead of three of N = D, in the forward and both backward products */
        lipt_tensor *w = lipt_concat_cols(ctx, 3, (lipt_tensor *[]){L->wq, L->wk, L->wv});
        lipt_tensor *qkv = lipt_matmul(ctx, x, w, 0, 0);
        if (L->rel) /* DP logits plus the relative-position bias (registered only for kinds with rel_bias) */
            a = lipt_attention_dp_rel_packed(ctx, qkv, lipt_scale(ctx, L->rel, LIPT_REL_BIAS_GAIN), H);
        else if (ai->l2_logits) a = lipt_attention_l2_packed(ctx, qkv, H, 1);
        else a = lipt_attention_dp_map_packed(ctx, qkv, ai->logit_map, ai->logit_map_param, H, 1); /* map: or none */
    }
    if (!ai->contractive) return linear(ctx, a, L->wo, L->bo);
    /* contractive: F / max(1, UB/c), UB a certified bound at the current weights. The bias is a constant shift,
     * outside the bounded map. */
    lipt_tensor *fac = cc && cc->attn_fac ? cc->attn_fac : lipt_model_attn_factor(ctx, m, layer, 0, NULL);
    /* the factor scales W^O (D² floats), not the product ([B,T,D]: a pass forward and two backward), as the
     * feed-forward's factors scale their weights */
    return linear(ctx, a, lipt_mul(ctx, L->wo, fac), L->bo);
}

static lipt_tensor *activation(lipt_ctx *ctx, const lipt_model *m, const lipt_layer *L, lipt_tensor *x) {
    switch (m->cfg.activation) {
    case LIPT_ACT_RELU: return lipt_relu(ctx, x);
    case LIPT_ACT_ELU: return lipt_elu(ctx, x);
    case LIPT_ACT_LIPSWISH: return lipt_lipswish(ctx, x, L->beta);
    case LIPT_ACT_MAXMIN: return lipt_maxmin(ctx, x);
    case LIPT_ACT_GELU:
    default: return lipt_gelu(ctx, x);
    }
}

/* W2 act(W1 x + b1) + b2 per token; contractive: each W / max(1, sigma(W)/c), sigma a certified upper bound
 * (Gram iteration, cfg.gram_iters squarings) at the current weights, gradient u vᵀ from the persistent
 * power-iteration vectors (no rounds here: lipt_model_refresh_norms runs them). */
static lipt_tensor *feed_forward(lipt_ctx *ctx, const lipt_model *m, const lipt_layer *L, lipt_tensor *x,
                                 const lipt_layer_certs *cc) {
    lipt_tensor *w1 = L->w1, *w2 = L->w2;
    if (m->cfg.ffn == LIPT_FFN_CONTRACTIVE) {
        const float c = m->cfg.c;
        const int g = lipt_config_gram_arg(&m->cfg);
        /* full budget: W1 to 1, W2 to c, so Lip <= c (else both to c: c²) */
        const float c1 = m->cfg.ffn_full_budget ? 1.0f : c;
        lipt_tensor *sigma[2];
        if (cc && cc->ffn_sigma[0])
            sigma[0] = cc->ffn_sigma[0], sigma[1] = cc->ffn_sigma[1];
        else
            lipt_spectral_norm_ub_many(ctx, 2, (lipt_tensor *[]){L->w1, L->w2},
                                       (float *[]){L->sn1_u->data, L->sn2_u->data},
                                       (float *[]){L->sn1_v->data, L->sn2_v->data}, 0, g, sigma);
        w1 = lipt_mul(ctx, w1, contract(ctx, sigma[0], c1));
        w2 = lipt_mul(ctx, w2, contract(ctx, sigma[1], c));
    }
    /* GELU or MaxMin after a biased W1: one op (the same values; its backward sums the bias gradient in the
     * activation's backward pass) */
    lipt_tensor *h = !L->b1                                ? activation(ctx, m, L, linear(ctx, x, w1, L->b1))
                     : m->cfg.activation == LIPT_ACT_GELU   ? lipt_linear_gelu(ctx, x, w1, L->b1)
                     : m->cfg.activation == LIPT_ACT_MAXMIN ? lipt_linear_maxmin(ctx, x, w1, L->b1)
                                                            : activation(ctx, m, L, lipt_linear(ctx, x, w1, L->b1));
    return linear(ctx, h, w2, L->b2);
}

/* Coupling blocks: the channel mask of half `second` (0: channels [0, D/2), 1: [D/2, D)), a constant. */
static lipt_tensor *half_mask(lipt_ctx *ctx, int D, int second) {
    lipt_tensor *mk = lipt_tensor_1d(ctx, D);
    for (int j = 0; j < D; j++) mk->data[j] = (j >= D / 2) == (second != 0) ? 1.0f : 0.0f;
    return mk;
}

static lipt_tensor *plain_branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 const lipt_layer_certs *cc);

/* lipt_model_branch with the block's certificates (NULL: computed here) */
static lipt_tensor *branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                           const lipt_layer_certs *cc) {
    if (!m->cfg.coupling || which == LIPT_BRANCH_MHA) return plain_branch(ctx, m, layer, which, x, cc);
    /* additive coupling: the attention reads the second half and writes the first, the feed-forward reads the first
     * and writes the second, so each residual map is inverted exactly by one subtraction */
    const int D = m->cfg.d_model, attn = which == LIPT_BRANCH_ATTN;
    lipt_tensor *in = lipt_mul(ctx, x, half_mask(ctx, D, attn));
    return lipt_mul(ctx, plain_branch(ctx, m, layer, which, in, cc), half_mask(ctx, D, !attn));
}

lipt_tensor *lipt_model_branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x) {
    return branch(ctx, m, layer, which, x, NULL);
}

static lipt_tensor *plain_branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 const lipt_layer_certs *cc) {
    LIPT_CHECK(layer >= 0 && layer < m->cfg.n_layers, "model branch: layer %d of %d", layer, m->cfg.n_layers);
    LIPT_CHECK(which == LIPT_BRANCH_ATTN || which == LIPT_BRANCH_FFN || which == LIPT_BRANCH_MHA, "model branch: which = %d", which);
    LIPT_CHECK(x->ndim == 3 && x->shape[2] == m->cfg.d_model && x->shape[1] <= m->cfg.seq_len,
               "model branch: x must be [B,T<=%d,%d]", m->cfg.seq_len, m->cfg.d_model);
    const lipt_layer *L = &m->layers[layer];
    const float eps = m->cfg.ln_eps;
    if (which == LIPT_BRANCH_MHA) return attention(ctx, m, layer, x, cc);
    const int pre = !m->invertible && m->cfg.norm == LIPT_NORM_PRE; /* post-LN normalises after the sum instead */
    if (which == LIPT_BRANCH_ATTN) {
        lipt_tensor *in = pre ? lipt_layernorm(ctx, x, L->ln1_g, L->ln1_b, eps) : x;
        return attention(ctx, m, layer, in, cc);
    }
    lipt_tensor *in = pre ? lipt_layernorm(ctx, x, L->ln2_g, L->ln2_b, eps) : x;
    return feed_forward(ctx, m, L, in, cc);
}

lipt_tensor *lipt_model_branch_fn(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    return branch(ctx, r->model, r->layer, r->which, x, r->certs);
}

lipt_tensor *lipt_model_residual(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 lipt_tensor *g) {
    const lipt_layer *L = &m->layers[layer];
    x = lipt_add(ctx, x, g);
    if (m->cfg.norm == LIPT_NORM_POST) /* post-LN: LN1 after the attention's sum, LN2 after the feed-forward's */
        x = which == LIPT_BRANCH_ATTN ? lipt_layernorm(ctx, x, L->ln1_g, L->ln1_b, m->cfg.ln_eps)
                                      : lipt_layernorm(ctx, x, L->ln2_g, L->ln2_b, m->cfg.ln_eps);
    if (which == LIPT_BRANCH_FFN && L->an_s) /* ActNorm closes the block: exact inverse */
        x = lipt_add(ctx, lipt_mul(ctx, x, lipt_exp(ctx, L->an_s)), L->an_b);
    return x;
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
        memcpy(x + (size_t)(2 * l) * n, h->data, n * sizeof(float));
        lipt_tensor *mid =
            lipt_model_residual(ctx, m, l, LIPT_BRANCH_ATTN, h, branch(ctx, m, l, LIPT_BRANCH_ATTN, h, NULL));
        memcpy(x + (size_t)(2 * l + 1) * n, mid->data, n * sizeof(float));
        h = lipt_model_residual(ctx, m, l, LIPT_BRANCH_FFN, mid, branch(ctx, m, l, LIPT_BRANCH_FFN, mid, NULL));
    }
    lipt_arena_release(&ctx->arena, mark);
    lipt_no_grad_pop(ctx);
    return LIPT_OK;
}

lipt_tensor *lipt_model_branch_train(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    const lipt_model *m = r->model;
    lipt_tensor *g = branch(ctx, m, r->layer, r->which, x, r->certs);
    if (m->cfg.dropout > 0 && ctx->training) g = lipt_dropout(ctx, g, m->cfg.dropout);
    /* coupling_grid: the branch on the residual stream's grid, so that the sum below is exact */
    return m->cfg.coupling_grid ? lipt_round_grid(ctx, g, m->cfg.coupling_grid) : g;
}

lipt_tensor *lipt_model_half_block(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    return lipt_model_residual(ctx, r->model, r->layer, r->which, x, lipt_model_branch_train(ctx, x, branch_ref));
}

lipt_tensor *lipt_model_block_certified(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x,
                                        const lipt_layer_certs *certs) {
    for (int which = LIPT_BRANCH_ATTN; which <= LIPT_BRANCH_FFN; which++) {
        if (ctx->recompute) { /* keep only the half-block's output; its inside is rerun in the backward */
            lipt_branch_ref *r = lipt_arena_alloc(&ctx->arena, sizeof *r);
            *r = (lipt_branch_ref){m, layer, which, certs};
            /* the feed-forward half is token-wise: it runs in pieces, so its d_ff-wide insides are bounded too */
            const int rows = ctx->recompute_rows > 0 ? ctx->recompute_rows : LIPT_RECOMPUTE_ROWS;
            x = which == LIPT_BRANCH_FFN ? lipt_recompute_rows(ctx, lipt_model_half_block, x, r, rows)
                                         : lipt_recompute(ctx, lipt_model_half_block, x, r);
        } else {
            x = lipt_model_half_block(ctx, x, &(lipt_branch_ref){m, layer, which, certs});
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
