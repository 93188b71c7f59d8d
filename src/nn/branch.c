/* The Transformer's residual branches: attention and feed-forward per variant; the training forward's walk of the
 * block description (block_plan.h: coupling halves, norms, dropout, grid, residual sum, ActNorm); and the half-block
 * that the forward, --memory recompute and --memory invert all run (issue 50: apart from forward.c, which drives the
 * blocks and calls the reversible chain, which calls these: no circle of files). */
#include "lipt/model.h"
#include "nn/block_plan.h"

static lipt_tensor *linear(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    return b ? lipt_linear(ctx, x, w, b) : lipt_matmul(ctx, x, w, 0, 0);
}

/* The normaliser 1/max(1, s/c) as a one-element tensor, differentiated through s. */
static lipt_tensor *contract(lipt_ctx *ctx, lipt_tensor *s, float c) { return lipt_contract_factor(ctx, s, c); }

/* Multi-head attention of x (already layer-normed for the pre-LN variants), with its output projection; what
 * differs between the kinds comes from their lipt_attn_info row. */
static lipt_tensor *attention(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x,
                              const lipt_layer_certs *cc, lipt_scale_kind scale) {
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
    if (scale != LIPT_SCALE_WO) return linear(ctx, a, L->wo, L->bo);
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
                                 const lipt_layer_certs *cc, const lipt_half_desc *hd) {
    lipt_tensor *w1 = L->w1, *w2 = L->w2;
    if (hd->scale == LIPT_SCALE_W1W2) {
        const int g = lipt_config_gram_arg(&m->cfg);
        lipt_tensor *sigma[2];
        if (cc && cc->ffn_sigma[0])
            sigma[0] = cc->ffn_sigma[0], sigma[1] = cc->ffn_sigma[1];
        else
            lipt_spectral_norm_ub_many(ctx, 2, (lipt_tensor *[]){L->w1, L->w2},
                                       (float *[]){L->sn1_u->data, L->sn2_u->data},
                                       (float *[]){L->sn1_v->data, L->sn2_v->data}, 0, g, sigma);
        w1 = lipt_mul(ctx, w1, contract(ctx, sigma[0], hd->scale_c[0]));
        w2 = lipt_mul(ctx, w2, contract(ctx, sigma[1], hd->scale_c[1]));
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

/* The branch g of half (layer, which) on x: the description's steps before its residual sum, each a tape op; train:
 * with the steps that training adds to the branch (dropout when ctx->training, the coupling_grid rounding). */
static lipt_tensor *branch_steps(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 const lipt_layer_certs *cc, int train) {
    LIPT_CHECK(layer >= 0 && layer < m->cfg.n_layers, "model branch: layer %d of %d", layer, m->cfg.n_layers);
    LIPT_CHECK(which == LIPT_BRANCH_ATTN || which == LIPT_BRANCH_FFN || which == LIPT_BRANCH_MHA, "model branch: which = %d", which);
    LIPT_CHECK(x->ndim == 3 && x->shape[2] == m->cfg.d_model && x->shape[1] <= m->cfg.seq_len,
               "model branch: x must be [B,T<=%d,%d]", m->cfg.seq_len, m->cfg.d_model);
    const lipt_layer *L = &m->layers[layer];
    const lipt_half_desc hd = lipt_block_half(&m->cfg, layer, which == LIPT_BRANCH_MHA ? LIPT_BRANCH_ATTN : which);
    if (which == LIPT_BRANCH_MHA) return attention(ctx, m, layer, x, cc, hd.scale); /* the map alone */
    for (int i = 0; i < hd.add; i++) {
        const lipt_step st = hd.step[i];
        switch (st.kind) {
        case LIPT_STEP_KEEP_HALF: x = lipt_mul(ctx, x, half_mask(ctx, m->cfg.d_model, st.arg)); break;
        case LIPT_STEP_LN: {
            lipt_tensor *g, *b;
            lipt_step_ln(L, st.arg, &g, &b);
            x = lipt_layernorm(ctx, x, g, b, m->cfg.ln_eps);
            break;
        }
        case LIPT_STEP_BRANCH:
            x = which == LIPT_BRANCH_ATTN ? attention(ctx, m, layer, x, cc, hd.scale) : feed_forward(ctx, m, L, x, cc, &hd);
            break;
        case LIPT_STEP_DROPOUT:
            if (train && ctx->training) x = lipt_dropout(ctx, x, m->cfg.dropout);
            break;
        case LIPT_STEP_GRID: /* on the residual stream's grid, so that the sum is exact */
            if (train) x = lipt_round_grid(ctx, x, st.arg);
            break;
        default: LIPT_CHECK(0, "model branch: step %d before the residual sum", (int)st.kind);
        }
    }
    return x;
}

lipt_tensor *lipt_model_branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x) {
    return branch_steps(ctx, m, layer, which, x, NULL, 0);
}

lipt_tensor *lipt_model_branch_fn(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    return branch_steps(ctx, r->model, r->layer, r->which, x, r->certs, 0);
}

/* The description's steps from the residual sum on. */
lipt_tensor *lipt_model_residual(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 lipt_tensor *g) {
    const lipt_layer *L = &m->layers[layer];
    const lipt_half_desc hd = lipt_block_half(&m->cfg, layer, which);
    for (int i = hd.add; i < hd.n_steps; i++) {
        const lipt_step st = hd.step[i];
        switch (st.kind) {
        case LIPT_STEP_ADD: x = lipt_add(ctx, x, g); break;
        case LIPT_STEP_LN: {
            lipt_tensor *lg, *lb;
            lipt_step_ln(L, st.arg, &lg, &lb);
            x = lipt_layernorm(ctx, x, lg, lb, m->cfg.ln_eps);
            break;
        }
        case LIPT_STEP_ACTNORM: x = lipt_add(ctx, lipt_mul(ctx, x, lipt_exp(ctx, L->an_s)), L->an_b); break;
        default: LIPT_CHECK(0, "model residual: step %d after the residual sum", (int)st.kind);
        }
    }
    return x;
}

lipt_tensor *lipt_model_branch_train(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    return branch_steps(ctx, r->model, r->layer, r->which, x, r->certs, 1);
}

lipt_tensor *lipt_model_half_block(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref) {
    const lipt_branch_ref *r = branch_ref;
    return lipt_model_residual(ctx, r->model, r->layer, r->which, x, lipt_model_branch_train(ctx, x, branch_ref));
}
