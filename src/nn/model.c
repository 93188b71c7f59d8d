/* The Transformer's parameters: registration per variant, initialisation, power-iteration refresh, normaliser reports. */
#include "lipt/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/bounds.h"
#include "lipschitz/spectral_impl.h"
#include "nn/block_plan.h"

static lipt_tensor *add_param(lipt_params *p, int layer, const char *field, int ndim, const int *shape, int flags) {
    char name[96];
    if (layer >= 0) snprintf(name, sizeof name, "layers.%d.%s", layer, field);
    else snprintf(name, sizeof name, "%s", field);
    return lipt_param_add(p, name, ndim, shape, flags);
}

/* The LayerNorm `ln` (1 or 2) of layer l, as the block description names it. */
static void add_ln(lipt_params *p, lipt_layer *L, int l, int ln, int D) {
    char g[16], b[16];
    snprintf(g, sizeof g, "ln%d.gamma", ln);
    snprintf(b, sizeof b, "ln%d.beta", ln);
    lipt_tensor *tg = add_param(p, l, g, 1, (int[]){D}, LIPT_PARAM_NO_DECAY);
    lipt_tensor *tb = add_param(p, l, b, 1, (int[]){D}, LIPT_PARAM_NO_DECAY);
    if (ln == 1) L->ln1_g = tg, L->ln1_b = tb;
    else L->ln2_g = tg, L->ln2_b = tb;
}

static const char *const bound_vec_names[8] = {"attn.bound.uq", "attn.bound.vq", "attn.bound.uv", "attn.bound.vv",
                                               "attn.bound.uo", "attn.bound.vo", "attn.bound.uk", "attn.bound.vk"};

/* Registration order is the checkpoint order: tok_emb, pos_emb, each layer (its buffers last), ln_f, head. */
static void register_params(lipt_model *m) {
    const lipt_config *c = &m->cfg;
    lipt_params *p = &m->params;
    const int D = c->d_model, F = c->d_ff, V = c->vocab_size, H = c->n_heads;
    const int ND = LIPT_PARAM_NO_DECAY, BUF = LIPT_PARAM_BUFFER;
    const lipt_attn_info *ai = lipt_attn_info_of(c->attention);
    m->tok_emb = add_param(p, -1, "tok_emb", 2, (int[]){V, D}, ND);
    m->pos_emb = add_param(p, -1, "pos_emb", 2, (int[]){c->seq_len, D}, ND);
    for (int l = 0; l < c->n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        lipt_half_desc hd[2]; /* the norms and the ActNorm the block description uses */
        lipt_block_halves(c, l, hd);
        if (lipt_half_ln(&hd[0])) add_ln(p, L, l, lipt_half_ln(&hd[0]), D);
        L->wq = add_param(p, l, "attn.wq", 2, (int[]){D, D}, 0);
        if (ai->has_wk) L->wk = add_param(p, l, "attn.wk", 2, (int[]){D, D}, 0);
        L->wv = add_param(p, l, "attn.wv", 2, (int[]){D, D}, 0);
        L->wo = add_param(p, l, "attn.wo", 2, (int[]){D, D}, 0);
        L->bo = add_param(p, l, "attn.bo", 1, (int[]){D}, ND);
        if (ai->rel_bias && c->rel_bias)
            L->rel = add_param(p, l, "attn.rel_bias", 2, (int[]){H, c->seq_len}, ND);
        if (lipt_half_ln(&hd[1])) add_ln(p, L, l, lipt_half_ln(&hd[1]), D);
        L->w1 = add_param(p, l, "ffn.w1", 2, (int[]){D, F}, 0);
        L->b1 = add_param(p, l, "ffn.b1", 1, (int[]){F}, ND);
        L->w2 = add_param(p, l, "ffn.w2", 2, (int[]){F, D}, 0);
        L->b2 = add_param(p, l, "ffn.b2", 1, (int[]){D}, ND);
        if (c->activation == LIPT_ACT_LIPSWISH) L->beta = add_param(p, l, "ffn.beta", 1, (int[]){1}, ND);
        if (hd[1].scale == LIPT_SCALE_W1W2) { /* the power-iteration vectors of the factors' sigmas */
            L->sn1_u = add_param(p, l, "ffn.sn1.u", 1, (int[]){D}, BUF);
            L->sn1_v = add_param(p, l, "ffn.sn1.v", 1, (int[]){F}, BUF);
            L->sn2_u = add_param(p, l, "ffn.sn2.u", 1, (int[]){F}, BUF);
            L->sn2_v = add_param(p, l, "ffn.sn2.v", 1, (int[]){D}, BUF);
        }
        if (lipt_half_has(&hd[1], LIPT_STEP_ACTNORM)) {
            L->an_s = add_param(p, l, "actnorm.log_scale", 1, (int[]){D}, ND);
            L->an_b = add_param(p, l, "actnorm.bias", 1, (int[]){D}, ND);
        }
        {
            /* sizes from bounds.h: uq [H*D], vq [D], uv [H*D], vv [D], uo [D], vo [D], uk [H*D], vk [D] */
            const int n[8] = {H * D, D, H * D, D, D, D, H * D, D};
            for (int i = 0; i < lipt_attn_bound_vector_count(c); i++)
                L->bv[i] = add_param(p, l, bound_vec_names[i], 1, (int[]){n[i]}, BUF);
        }
    }
    m->lnf_g = add_param(p, -1, "ln_f.gamma", 1, (int[]){D}, ND);
    m->lnf_b = add_param(p, -1, "ln_f.beta", 1, (int[]){D}, ND);
    if (c->head_hidden > 0) {
        m->head_w1 = add_param(p, -1, "head.w1", 2, (int[]){D, c->head_hidden}, 0);
        m->head_b1 = add_param(p, -1, "head.b1", 1, (int[]){c->head_hidden}, ND);
    }
    m->head_w = add_param(p, -1, "head.w", 2, (int[]){c->head_hidden > 0 ? c->head_hidden : D, V}, 0);
    m->head_b = add_param(p, -1, "head.b", 1, (int[]){V}, ND);
}

/* The documented cap on a model's memory (parameters, gradients, Adam moments, buffers): LIPT_MAX_MODEL_GB, default
 * 32, so that a mistyped size or a crafted checkpoint is an error instead of an abort or hours of swapping. */
static double model_cap_bytes(void) {
    const char *e = getenv("LIPT_MAX_MODEL_GB");
    const double gb = e && atof(e) > 0 ? atof(e) : 32.0;
    return gb * 1e9;
}

lipt_status lipt_config_param_floats(const lipt_config *cfg, size_t *n_train, size_t *n_buf, lipt_error *err) {
    lipt_status st = lipt_config_validate(cfg, err);
    if (st != LIPT_OK) return st;
    lipt_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.invertible = lipt_config_invertible(cfg);
    m.layers = lipt_xcalloc((size_t)(cfg->n_layers ? cfg->n_layers : 1), sizeof *m.layers);
    lipt_params_init(&m.params);
    register_params(&m); /* shapes only: nothing is allocated before lipt_params_finalize */
    *n_train = m.params.n_train;
    *n_buf = m.params.n_buf;
    lipt_params_free(&m.params);
    free(m.layers);
    return LIPT_OK;
}

lipt_status lipt_model_init(lipt_model *m, const lipt_config *cfg, lipt_error *err) {
    memset(m, 0, sizeof *m);
    lipt_status st = lipt_config_validate(cfg, err);
    if (st != LIPT_OK) return st;
    m->cfg = *cfg;
    m->invertible = lipt_config_invertible(cfg);
    m->layers = lipt_xcalloc((size_t)(cfg->n_layers ? cfg->n_layers : 1), sizeof *m->layers);
    lipt_params_init(&m->params);
    register_params(m);
    const double bytes = (4.0 * (double)m->params.n_train + (double)m->params.n_buf) * sizeof(float);
    if (bytes > model_cap_bytes()) {
        const size_t n = m->params.n_train;
        lipt_params_free(&m->params);
        free(m->layers);
        memset(m, 0, sizeof *m);
        return lipt_fail(err, LIPT_ERR_ARG,
                         "the model (d_model %d, %d layers, d_ff %d, vocab %d) has %zu parameters and needs %.1f GB for "
                         "them, their gradients and Adam state: above the cap of %.0f GB (set LIPT_MAX_MODEL_GB to raise "
                         "it)", cfg->d_model, cfg->n_layers, cfg->d_ff, cfg->vocab_size, n, bytes / 1e9,
                         model_cap_bytes() / 1e9);
    }
    lipt_params_finalize(&m->params);
    lipt_ctx_init(&m->scratch, 1 << 16, cfg->init_seed);
    lipt_model_init_weights(m, cfg->init_seed);
    return LIPT_OK;
}

void lipt_model_free(lipt_model *m) {
    if (!m) return;
    lipt_params_free(&m->params);
    free(m->layers);
    lipt_ctx_free(&m->scratch);
    memset(m, 0, sizeof *m);
}

static void fill_const(lipt_tensor *t, float v) {
    if (t)
        for (size_t i = 0; i < t->numel; i++) t->data[i] = v;
}

static void fill_normal(lipt_rng *r, lipt_tensor *t, double std) {
    if (t) lipt_rng_fill_normal(r, t->data, t->numel, (float)std);
}

/* A random unit vector: a non-degenerate start for power iteration. */
static void fill_unit(lipt_rng *r, lipt_tensor *t) {
    if (!t) return;
    lipt_rng_fill_normal(r, t->data, t->numel, 1.0f);
    double s = 0;
    for (size_t i = 0; i < t->numel; i++) s += (double)t->data[i] * t->data[i];
    s = s > 0 ? 1.0 / sqrt(s) : 1.0;
    for (size_t i = 0; i < t->numel; i++) t->data[i] = (float)(t->data[i] * s);
}

static lipt_bound_vectors bound_vectors(const lipt_model *m, const lipt_layer *L, int gram_iters) {
    lipt_bound_vectors v;
    float *p[8] = {0};
    for (int i = 0; i < 8; i++) p[i] = L->bv[i] ? L->bv[i]->data : NULL;
    v.uq = p[0], v.vq = p[1], v.uv = p[2], v.vv = p[3], v.uo = p[4], v.vo = p[5], v.uk = p[6], v.vk = p[7];
    v.gram_iters = gram_iters > 0 ? gram_iters : lipt_config_gram_arg(&m->cfg);
    return v;
}

lipt_tensor *lipt_model_attn_bound(lipt_ctx *ctx, const lipt_model *m, int layer, int N, int gram_iters) {
    const lipt_config *c = &m->cfg;
    LIPT_CHECK(layer >= 0 && layer < c->n_layers, "attn_bound: layer %d of %d", layer, c->n_layers);
    LIPT_CHECK(lipt_attn_contractive(c->attention), "attn_bound: attention %s is not contractive",
               lipt_attn_name(c->attention));
    const lipt_layer *L = &m->layers[layer];
    lipt_bound_vectors v = bound_vectors(m, L, gram_iters);
    return lipt_attn_bound(ctx, c, L->wq, L->wk, L->wv, L->wo, N, &v);
}

lipt_tensor *lipt_model_attn_factor(lipt_ctx *ctx, const lipt_model *m, int layer, int gram_iters, lipt_tensor **ub) {
    lipt_tensor *b = lipt_model_attn_bound(ctx, m, layer, m->cfg.seq_len, gram_iters);
    if (ub) *ub = b;
    return lipt_contract_factor(ctx, b, m->cfg.c);
}

/* Whether a training forward sets the certified matrices' vectors to the certificates' top singular pairs
 * (lipt_spectral_req.steer): with the Cholesky-verified bound, whose Lanczos gives the pairs. Then the gradient u vᵀ
 * is that of sigma at the weights of the step, and no power iteration runs after it (lipt_model_refresh_after_step). */
static int certs_steer(const lipt_config *c) { return (lipt_config_gram_arg(c) & LIPT_SPECTRAL_CHOLESKY) != 0; }

/* The vector sets lipt_model_certify certifies (and so steers, when certs_steer): the feed-forward's with a
 * contractive ffn, the attention's when its bound has spectral norms (not the ∞-norm bound). */
static void certified_sets(const lipt_model *m, int *attn, int *ffn) {
    const lipt_config *c = &m->cfg;
    *ffn = c->ffn == LIPT_FFN_CONTRACTIVE;
    *attn = 0;
    if (lipt_attn_contractive(c->attention) && c->n_layers > 0 && m->layers[0].bv[0]) {
        const lipt_layer *L = &m->layers[0];
        lipt_bound_vectors v = bound_vectors(m, L, 0);
        lipt_spectral_req probe[LIPT_ATTN_BOUND_REQ_MAX];
        *attn = lipt_attn_bound_requests(c, L->wq, L->wk, L->wv, L->wo, &v, probe) > 0;
    }
}

lipt_layer_certs *lipt_model_certify(lipt_ctx *ctx, const lipt_model *m) {
    const lipt_config *c = &m->cfg;
    const int n_layers = c->n_layers, attn = lipt_attn_contractive(c->attention),
              ffn = c->ffn == LIPT_FFN_CONTRACTIVE;
    if (n_layers <= 0 || (!attn && !ffn)) return NULL;
    enum { PER_LAYER = LIPT_ATTN_BOUND_REQ_MAX + 2 };
    lipt_layer_certs *cc = lipt_arena_calloc(&ctx->arena, (size_t)n_layers * sizeof *cc);
    lipt_spectral_req *req = lipt_arena_alloc(&ctx->arena, (size_t)n_layers * PER_LAYER * sizeof *req);
    lipt_tensor **sig = lipt_arena_alloc(&ctx->arena, (size_t)n_layers * PER_LAYER * sizeof *sig);
    int *first = lipt_arena_alloc(&ctx->arena, (size_t)n_layers * 2 * sizeof *first), n = 0;
    const int g = lipt_config_gram_arg(c), steer = ctx->training && certs_steer(c);
    for (int l = 0; l < n_layers; l++) {
        const lipt_layer *L = &m->layers[l];
        first[2 * l] = n;
        if (attn) {
            lipt_bound_vectors v = bound_vectors(m, L, 0);
            n += lipt_attn_bound_requests(c, L->wq, L->wk, L->wv, L->wo, &v, req + n);
        }
        first[2 * l + 1] = n;
        if (ffn) {
            req[n++] = (lipt_spectral_req){L->w1, L->sn1_u->data, L->sn1_v->data, 1, g, 0};
            req[n++] = (lipt_spectral_req){L->w2, L->sn2_u->data, L->sn2_v->data, 1, g, 0};
        }
    }
    for (int i = 0; i < n; i++) req[i].steer = steer;
    lipt_spectral_norm_ub_batch(ctx, n, req, sig);
    for (int l = 0; l < n_layers; l++) {
        const lipt_layer *L = &m->layers[l];
        /* the ∞-norm bound needs no certificate: left to the block, where its ops have always been recorded (the
         * tape's order sets the order in which a weight's gradient contributions are added) */
        if (attn && first[2 * l + 1] > first[2 * l])
            cc[l].attn_fac = lipt_contract_factor(
                ctx, lipt_attn_bound_from(ctx, c, L->wq, L->wk, L->wv, L->wo, c->seq_len, sig + first[2 * l]), c->c);
        if (ffn) cc[l].ffn_sigma[0] = sig[first[2 * l + 1]], cc[l].ffn_sigma[1] = sig[first[2 * l + 1] + 1];
    }
    return cc;
}

void lipt_model_init_weights(lipt_model *m, uint64_t seed) {
    const lipt_config *c = &m->cfg;
    const int D = c->d_model, H = c->n_heads, d = D / H;
    lipt_rng rng;
    lipt_rng_seed(&rng, seed);
    memset(m->params.slab, 0, (4 * m->params.n_train + m->params.n_buf) * sizeof(float));
    /* Without LayerNorm in the branches nothing rescales the residual stream, so the invertible model's
     * token + position sum starts with unit-variance entries (the scale LN gives the pre-LN variants'
     * branch inputs): each std 1/sqrt(2). */
    const double emb_std = m->invertible ? sqrt(0.5) : 0.02;
    const double out_std = 0.02 / sqrt(2.0 * (c->n_layers > 0 ? c->n_layers : 1)); /* GPT-2 residual scaling */
    /* L2 logits -|q_i - q_j|^2 / sqrt(d) with unit-scale inputs: q entries have variance D std^2 = d^{-1/2},
     * so |q_i - q_j|^2 ~ 2 d^{1/2} and the logits start near -2 (SPEC §1), not -2 sqrt(d). */
    const double l2_std = 1.0 / (sqrt((double)D) * pow((double)d, 0.25));
    const lipt_attn_info *ai = lipt_attn_info_of(c->attention);
    fill_normal(&rng, m->tok_emb, emb_std);
    fill_normal(&rng, m->pos_emb, emb_std);
    for (int l = 0; l < c->n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        fill_const(L->ln1_g, 1.0f);
        fill_const(L->ln2_g, 1.0f);
        double qk_std = 0.02;
        if (ai->qk_init == LIPT_QK_INIT_L2) qk_std = l2_std;
        if (ai->qk_init == LIPT_QK_INIT_CLIPPED) {
            /* logits u_i W^Q W^Kᵀ u_j / √d with |u| <= R = √D: std (D √d)^{-1/2} / 2 gives the bound's
             * τ = R² ‖W^Q_h‖ ‖W^K_h‖ / √d ≈ 2.3 at D = 128 and 256 (‖W_h‖ ≈ std (√D + √d)): soft attention whose
             * division by the bound starts mild */
            qk_std = 0.5 / sqrt((double)D * sqrt((double)d));
        }
        fill_normal(&rng, L->wq, qk_std);
        fill_normal(&rng, L->wk, qk_std);
        fill_normal(&rng, L->wv, 0.02);
        fill_normal(&rng, L->wo, out_std);
        fill_normal(&rng, L->w1, 0.02);
        fill_normal(&rng, L->w2, out_std);
        fill_const(L->beta, 1.0f);
        fill_unit(&rng, L->sn1_u);
        fill_unit(&rng, L->sn1_v);
        fill_unit(&rng, L->sn2_u);
        fill_unit(&rng, L->sn2_v);
        if (L->rel) {
            /* ALiBi-like start: head h prefers recent tokens with slope 2^{-8(h+1)/H} per step of distance */
            const int S = c->seq_len;
            for (int h = 0; h < H; h++) {
                const double slope = pow(2.0, -8.0 * (h + 1) / H);
                for (int t = 0; t < S; t++) L->rel->data[(size_t)h * S + t] = (float)(-slope * t / LIPT_REL_BIAS_GAIN);
            }
        }
        /* an_s, an_b stay 0: ActNorm starts as the identity */
        if (L->bv[0]) {
            lipt_bound_vectors v = bound_vectors(m, L, 0);
            lipt_bound_vectors_init(&v, D, H, seed * 1000003u + (uint64_t)l);
        }
    }
    fill_const(m->lnf_g, 1.0f);
    fill_normal(&rng, m->head_w1, 0.02);
    fill_normal(&rng, m->head_w, 0.02);
    lipt_model_refresh_norms(m, 100);
}

/* after_step: leave out the vector sets the training forward's certificates set (certs_steer) */
static void refresh_norms(lipt_model *m, int iters, int after_step) {
    const lipt_config *c = &m->cfg;
    if (iters <= 0 || !m->invertible) return;
    int skip_attn = 0, skip_ffn = 0; /* the sets the step's forward has set */
    if (after_step && certs_steer(c)) certified_sets(m, &skip_attn, &skip_ffn);
    if (skip_ffn && (skip_attn || c->n_layers <= 0 || !m->layers[0].bv[0])) return; /* nothing left to advance */
    /* Every matrix's power iteration at once (the blocks of all the layers in one parallel loop: most are too small
     * to split on their own), with the same results as one lipt_spectral_norm per matrix. */
    const int H = c->n_heads;
    lipt_power_job *jobs = lipt_xmalloc(sizeof *jobs * 6 * (size_t)(c->n_layers > 0 ? c->n_layers : 1));
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        lipt_layer *L = &m->layers[l];
        if (!skip_ffn) {
            jobs[n++] = (lipt_power_job){L->w1->data, L->w1->shape[0], L->w1->shape[1], 1, L->sn1_u->data, L->sn1_v->data};
            jobs[n++] = (lipt_power_job){L->w2->data, L->w2->shape[0], L->w2->shape[1], 1, L->sn2_u->data, L->sn2_v->data};
        }
        if (L->bv[0] && !skip_attn) {
            /* the bound vectors only steer gradients (the values divided by are certified whatever their state):
             * advance them by power iteration alone, without computing the bound */
            const int D = L->wq->shape[0];
            jobs[n++] = (lipt_power_job){L->wq->data, D, D, H, L->bv[0]->data, L->bv[1]->data};
            if (L->bv[6]) jobs[n++] = (lipt_power_job){L->wk->data, D, D, H, L->bv[6]->data, L->bv[7]->data};
            jobs[n++] = (lipt_power_job){L->wv->data, D, D, H, L->bv[2]->data, L->bv[3]->data};
            jobs[n++] = (lipt_power_job){L->wo->data, D, D, 1, L->bv[4]->data, L->bv[5]->data};
        }
    }
    lipt_spectral_power_jobs(jobs, n, iters);
    free(jobs);
}

void lipt_model_refresh_norms(lipt_model *m, int iters) { refresh_norms(m, iters, 0); }

void lipt_model_refresh_after_step(lipt_model *m, int iters) { refresh_norms(m, iters, 1); }

void lipt_model_layer_lipschitz(lipt_model *m, int layer, int gram_iters, lipt_layer_lipschitz *out) {
    const lipt_config *c = &m->cfg;
    LIPT_CHECK(layer >= 0 && layer < c->n_layers, "layer %d of %d", layer, c->n_layers);
    memset(out, 0, sizeof *out);
    out->attn_factor = out->ffn_factor1 = out->ffn_factor2 = 1.0;
    if (!m->invertible) return;
    lipt_layer *L = &m->layers[layer];
    lipt_ctx *ctx = &m->scratch;
    lipt_no_grad_push(ctx);
    const int g = gram_iters > 0 ? gram_iters : lipt_config_gram_arg(c);
    lipt_tensor *ub;
    out->attn_factor = lipt_model_attn_factor(ctx, m, layer, g, &ub)->data[0];
    out->attn_bound = ub->data[0];
    lipt_tensor *s[2];
    lipt_spectral_norm_ub_many(ctx, 2, (lipt_tensor *[]){L->w1, L->w2}, (float *[]){L->sn1_u->data, L->sn2_u->data},
                               (float *[]){L->sn1_v->data, L->sn2_v->data}, 0, g, s);
    lipt_tensor *s1 = s[0], *s2 = s[1];
    out->sigma1 = s1->data[0];
    out->sigma2 = s2->data[0];
    out->ffn_factor1 = lipt_contract_factor(ctx, s1, c->ffn_full_budget ? 1.0f : c->c)->data[0];
    out->ffn_factor2 = lipt_contract_factor(ctx, s2, c->c)->data[0];
    lipt_ctx_reset(ctx);
    lipt_no_grad_pop(ctx);
}
