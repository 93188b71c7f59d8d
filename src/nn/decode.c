/* Incremental decoding with per-layer key/value caches (lipt_model_forward's blocks, one new row or block of rows at
 * a time, through the row kernels of src/kernels/rows.h) and window sliding at seq_len. Every attention kind: dp
 * (with the kind's logit map, if any), l2, l2-tied, contractive-l2, and clipped-dp (rows clipped to the ball of radius
 * R before the projections, relative position bias by window position), pre- and post-LN, coupling blocks (with their
 * grid) and the invertible model's optional ActNorm: each block as its description says (block_plan.h). The
 * next-token sampler is in sample.c. */
#include "lipt/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/block_plan.h"

/* Work (B*H*T*d) above which the one-token attention runs its (sequence, head) loop in parallel. */
#define DEC_ATTN_PAR_MIN 65536.0

typedef struct {
    float *k, *v;        /* [B, T, D]: dp/l2 key and value rows; tied: query rows (= keys) and rows Q_h M_h */
    float *kn;           /* [B, H, T]: |k_j|²/s per head (l2 and tied), else NULL */
    float *M;            /* [H, d, d]: M_h = W^{Q,h}ᵀ W^{V,h} / s (tied), else NULL */
    const float *w1, *w2;/* feed-forward weights: the model's, or (contractive) copies times their factor */
    const float *wo;     /* W^O: the model's, or (contractive attention) a copy times 1/max(1, UB/c) */
    float *rel;          /* [H, T]: LIPT_REL_BIAS_GAIN * rel (clipped-dp with rel_bias), the logit bias at distance
                          * i - j within the window, else NULL */
    float *an_scale;     /* [D]: exp(actnorm.log_scale) (actnorm), else NULL */
} dec_layer;

struct lipt_decoder {
    const lipt_model *m;
    int B, T, D, H, d, F, V;
    int l2, tied;        /* logits -|q-k|²/s (l2 and tied); keys are the queries, values Q_h M_h (tied) */
    const lipt_attn_info *ai; /* the kind's row: its logit map goes to every head (cached_head) */
    int clip;            /* clipped-dp: queries, keys and values from the rows clipped to radius R */
    float R;
    int len;             /* tokens in every window */
    long slides;
    dec_layer *layers;
    int *tok;            /* [B, T] window token ids */
    /* scratch for up to T new rows per sequence (row r = b*n + i) */
    float *x, *u, *q, *att, *g, *h;   /* [B*T, D] except h [B*T, F] */
    float *P;            /* max(B*H*T, T*T): attention probabilities */
    double *acc;         /* [B*D]: one-token P·V accumulators, d per (sequence, head) */
    float *lnrow;        /* [B, D] */
    float *hrow;         /* [B, head_hidden] (MLP head), else NULL */
    float *logits;       /* [B, V] */
    void *slab;
    size_t bytes;
    lipt_arena scratch;  /* the kernels' scratch (bf16 products pack operands there) */
    lipt_kctx kc;        /* the model's precision for the products, with its low-precision state and scratch */
    int lowp;            /* precision is not float32: the one-token attention rounds its operands to bf16 too */
};

/* ---------------------------------------------------------------- memory layout */

/* Two passes over the same layout: sizing (base NULL) then assignment; every piece 64-byte aligned. */
typedef struct { char *base; size_t off; } planner;

static void *take(planner *p, size_t bytes) {
    void *r = p->base ? p->base + p->off : NULL;
    p->off += (bytes + 63) & ~(size_t)63;
    return r;
}
#define TAKEF(p, n) ((float *)take((p), (size_t)(n) * sizeof(float)))

static void layout(lipt_decoder *s, planner *p) {
    const size_t B = (size_t)s->B, T = (size_t)s->T, D = (size_t)s->D, H = (size_t)s->H, d = (size_t)s->d,
                 F = (size_t)s->F, V = (size_t)s->V, R = B * T;
    const int nl = s->m->cfg.n_layers;
    s->layers = take(p, (size_t)(nl > 0 ? nl : 1) * sizeof(dec_layer));
    for (int l = 0; l < nl; l++) {
        dec_layer tmp, *L = p->base ? &s->layers[l] : &tmp;
        lipt_half_desc hd[2];
        lipt_block_halves(&s->m->cfg, l, hd);
        L->k = TAKEF(p, R * D);
        L->v = TAKEF(p, R * D);
        L->kn = s->l2 ? TAKEF(p, B * H * T) : NULL;
        L->M = s->tied ? TAKEF(p, H * d * d) : NULL;
        L->rel = s->m->layers[l].rel ? TAKEF(p, H * T) : NULL;
        L->an_scale = lipt_half_has(&hd[1], LIPT_STEP_ACTNORM) ? TAKEF(p, D) : NULL;
        if (hd[0].scale == LIPT_SCALE_WO) L->wo = TAKEF(p, D * D);
        if (hd[1].scale == LIPT_SCALE_W1W2) {
            L->w1 = TAKEF(p, D * F);
            L->w2 = TAKEF(p, F * D);
        }
    }
    s->tok = take(p, R * sizeof(int));
    s->x = TAKEF(p, R * D);
    s->u = TAKEF(p, R * D);
    s->q = TAKEF(p, R * D);
    s->att = TAKEF(p, R * D);
    s->g = TAKEF(p, R * D);
    s->h = TAKEF(p, R * F);
    s->P = TAKEF(p, B * H * T > T * T ? B * H * T : T * T);
    s->acc = take(p, B * D * sizeof(double));
    s->lnrow = TAKEF(p, B * D);
    s->hrow = s->m->head_w1 ? TAKEF(p, B * s->m->cfg.head_hidden) : NULL;
    s->logits = TAKEF(p, B * V);
}

/* ---------------------------------------------------------------- creation */

lipt_status lipt_decoder_create(const lipt_model *m, int batch, lipt_decoder **out, lipt_error *err) {
    *out = NULL;
    const lipt_config *c = &m->cfg;
    if (batch < 1 || batch > 65536) return lipt_fail(err, LIPT_ERR_ARG, "decoder: batch %d outside [1, 65536]", batch);
    lipt_decoder *s = lipt_xcalloc(1, sizeof *s);
    s->m = m;
    s->B = batch;
    s->T = c->seq_len;
    s->D = c->d_model;
    s->H = c->n_heads;
    s->d = c->d_model / c->n_heads;
    s->F = c->d_ff;
    s->V = c->vocab_size;
    const lipt_attn_info *ai = lipt_attn_info_of(c->attention);
    s->ai = ai;
    s->l2 = ai->l2_logits;
    s->clip = ai->clip_rows;
    s->R = s->clip ? lipt_config_clip_radius(c) : 0.0f;
    s->tied = ai->tied;
    planner p = {NULL, 0};
    layout(s, &p);
    s->slab = lipt_xaligned(p.off);
    memset(s->slab, 0, p.off);
    p.base = s->slab;
    p.off = 0;
    layout(s, &p);
    s->bytes = sizeof *s + p.off;
    lipt_arena_init(&s->scratch, 4096);
    s->kc = (lipt_kctx){.precision = LIPT_PRECISION_FLOAT32, .arena = &s->scratch};
    const lipt_status pst = lipt_kctx_set_precision(&s->kc, c->precision, err);
    if (pst != LIPT_OK) {
        lipt_decoder_free(s);
        return pst;
    }
    s->lowp = c->precision != LIPT_PRECISION_FLOAT32;

    /* Normalisers: the very ops the forward pass uses, on the same weights and vectors (no iterations). */
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 0);
    lipt_no_grad_push(&ctx);
    const int D = s->D, H = s->H, F = s->F;
    for (int l = 0; l < c->n_layers; l++) {
        const lipt_layer *W = &m->layers[l];
        dec_layer *L = &s->layers[l];
        lipt_half_desc hd[2];
        lipt_block_halves(c, l, hd);
        if (hd[0].scale == LIPT_SCALE_WO) {
            const float fa = lipt_model_attn_factor(&ctx, m, l, 0, NULL)->data[0];
            float *wo = (float *)L->wo; /* the forward scales W^O by the factor (lipt_mul): the same rounding */
            for (size_t i = 0; i < (size_t)D * D; i++) wo[i] = W->wo->data[i] * fa;
        } else {
            L->wo = W->wo->data;
        }
        if (hd[1].scale == LIPT_SCALE_W1W2) {
            const int g = lipt_config_gram_arg(c);
            const float f1 = lipt_contract_factor(
                                 &ctx, lipt_spectral_norm_ub(&ctx, W->w1, W->sn1_u->data, W->sn1_v->data, 1, 0, g),
                                 hd[1].scale_c[0])
                                 ->data[0];
            const float f2 = lipt_contract_factor(
                                 &ctx, lipt_spectral_norm_ub(&ctx, W->w2, W->sn2_u->data, W->sn2_v->data, 1, 0, g),
                                 hd[1].scale_c[1])
                                 ->data[0];
            /* the forward multiplies the weights (not the products) by the factor: same rounding here */
            float *w1 = (float *)L->w1, *w2 = (float *)L->w2;
            for (size_t i = 0; i < (size_t)D * F; i++) w1[i] = W->w1->data[i] * f1;
            for (size_t i = 0; i < (size_t)F * D; i++) w2[i] = W->w2->data[i] * f2;
        } else {
            L->w1 = W->w1->data;
            L->w2 = W->w2->data;
        }
        if (L->rel) { /* as lipt_scale(rel, LIPT_REL_BIAS_GAIN) in the forward pass; rel is [H, seq_len = T] */
            const float *r = W->rel->data;
            for (size_t i = 0; i < (size_t)H * s->T; i++) L->rel[i] = LIPT_REL_BIAS_GAIN * r[i];
        }
        if (L->an_scale) /* as lipt_exp */
            for (int j = 0; j < D; j++) L->an_scale[j] = expf(W->an_s->data[j]);
        if (s->tied) lipt_attn_l2_tied_M(&s->kc, W->wq->data, W->wv->data, D, H, L->M); /* as the forward's */
        lipt_ctx_reset(&ctx);
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    *out = s;
    return LIPT_OK;
}

void lipt_decoder_free(lipt_decoder *s) {
    if (!s) return;
    lipt_lowp_free(s->kc.lowp);
    lipt_arena_free(&s->scratch);
    free(s->slab);
    free(s);
}

void lipt_decoder_reset(lipt_decoder *s) {
    s->len = 0;
    s->slides = 0;
}

int lipt_decoder_len(const lipt_decoder *s) { return s->len; }
int lipt_decoder_batch(const lipt_decoder *s) { return s->B; }
long lipt_decoder_slides(const lipt_decoder *s) { return s->slides; }
size_t lipt_decoder_bytes(const lipt_decoder *s) { return s->bytes; }
const int *lipt_decoder_window(const lipt_decoder *s, int b) {
    LIPT_CHECK(b >= 0 && b < s->B, "decoder window: sequence %d of %d", b, s->B);
    return s->tok + (size_t)b * s->T;
}

/* ---------------------------------------------------------------- one block of new rows */

/* The model's maths, row by row, through the ops' own row kernels (src/kernels/rows.h, attn.h). */

/* y = x W (+ b) over rows, at the model's precision. */
static void linear_rows(lipt_decoder *s, const float *x, int rows, int K, const float *w, int N, const float *b,
                        float *y) {
    lipt_gemm_gemv_p(&s->kc, 0, 0, rows, N, K, 1.0f, x, K, w, N, 0.0f, y, N);
    if (b)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < N; j++) y[(size_t)r * N + j] += b[j];
}

static void layernorm_rows(const float *x, float *y, int rows, int D, const lipt_tensor *g, const lipt_tensor *b,
                           float eps) {
    for (int r = 0; r < rows; r++) lipt_layernorm_row(x + (size_t)r * D, y + (size_t)r * D, D, g->data, b->data, eps);
}

/* Post-LN: x <- LN(x) in place, through the scratch rows u (R x D). */
static void post_norm(float *x, float *u, int R, int D, const lipt_tensor *g, const lipt_tensor *b, float eps) {
    layernorm_rows(x, u, R, D, g, b, eps);
    memcpy(x, u, (size_t)R * D * sizeof(float));
}

/* x += g over n floats (the residual add). */
static void add_rows(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] + g[i];
}

/* Head h of sequence b in layer L's cache, as the attention kernel reads it (keys from window position 0). */
static lipt_attn_head cached_head(const lipt_decoder *s, const dec_layer *L, int b, int h) {
    const size_t off = (size_t)b * s->T * s->D + (size_t)h * s->d;
    return (lipt_attn_head){.k = L->k + off, .v = L->v + off, .kn = s->l2 ? L->kn + ((size_t)b * s->H + h) * s->T : NULL,
                            .rel = L->rel ? L->rel + (size_t)h * s->T : NULL, .ld = s->D, .d = s->d, .causal = 1,
                            .alpha = lipt_attn_logit_scale(s->l2, s->d), .map = s->ai->logit_map,
                            .map_param = s->ai->logit_map_param};
}

/* One query (the newest position) of sequence b = bh / H, head h = bh % H, against its nc cached rows. */
static void attend_one(lipt_decoder *s, const dec_layer *L, int bh, int nc) {
    const int D = s->D, H = s->H, d = s->d, b = bh / H, h = bh % H;
    const lipt_attn_head hd = cached_head(s, L, b, h);
    const size_t o = (size_t)b * D + (size_t)h * d;
    lipt_attn_query_row(&hd, s->q + o, nc, s->lowp, s->P + (size_t)bh * s->T, s->acc + o, s->att + o);
}

/* Attention of the n new rows of every sequence (queries in s->q, keys/values already in the cache at positions
 * 0 .. len+n-1) -> s->att [B*n, D], heads concatenated. */
static void attend(lipt_decoder *s, const dec_layer *L, int n) {
    const int B = s->B, T = s->T, D = s->D, H = s->H, d = s->d, len = s->len, nc = len + n;
    if (n == 1) {
        /* one query per (sequence, head). Only enter an OpenMP region when it runs in parallel: a serial
         * region still costs libgomp a team allocation per call. */
        const int BH = B * H;
        if (BH > 1 && (double)BH * nc * d >= DEC_ATTN_PAR_MIN) {
#pragma omp parallel for schedule(static)
            for (int bh = 0; bh < BH; bh++) attend_one(s, L, bh, nc);
        } else {
            for (int bh = 0; bh < BH; bh++) attend_one(s, L, bh, nc);
        }
        return;
    }
    /* a block of rows (prompt, re-encoding after a slide): the kernel's block of query rows [len, nc) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const lipt_attn_head hd = cached_head(s, L, b, h);
            const size_t o = (size_t)b * n * D + (size_t)h * d;
            lipt_attn_rows(&s->kc, &hd, s->q + o, NULL, len, nc, nc, s->P, T, NULL, s->att + o, D, 0);
        }
}

/* The new rows' queries, and their keys and values (and L2's |k|²/s) into the cache at positions len .. len+n-1;
 * in: the branch's input rows (after LayerNorm or the clip). */
static void project_rows(lipt_decoder *s, const lipt_layer *W, const dec_layer *L, const float *in, int n) {
    const int B = s->B, T = s->T, D = s->D, H = s->H, d = s->d, len = s->len;
    linear_rows(s, in, B * n, D, W->wq->data, D, NULL, s->q);
    for (int b = 0; b < B; b++) {
        const float *inb = in + (size_t)b * n * D, *qb = s->q + (size_t)b * n * D;
        float *kc = L->k + ((size_t)b * T + len) * D, *vc = L->v + ((size_t)b * T + len) * D;
        if (s->tied) { /* keys are the queries, values Q_h M_h */
            memcpy(kc, qb, (size_t)n * D * sizeof(float));
            lipt_attn_l2_tied_values(&s->kc, qb, NULL, n, D, H, L->M, vc, 1);
        } else {
            lipt_gemm_gemv_p(&s->kc, 0, 0, n, D, D, 1.0f, inb, D, W->wk->data, D, 0.0f, kc, D);
            lipt_gemm_gemv_p(&s->kc, 0, 0, n, D, D, 1.0f, inb, D, W->wv->data, D, 0.0f, vc, D);
        }
        if (s->l2)
            for (int h = 0; h < H; h++)
                lipt_attn_l2_key_norms(kc + (size_t)h * d, n, D, d, 1.0 / sqrt((double)d),
                                       L->kn + ((size_t)b * H + h) * T + len);
    }
}

/* The attention branch of layer l on the R = B*n rows in -> s->g: the clip (clipped-dp), the queries and the cache's
 * keys and values, the attention, W^O (scaled at creation when the description says so). */
static void attention_rows(lipt_decoder *s, int l, const float *in, int n) {
    const lipt_layer *W = &s->m->layers[l];
    const dec_layer *L = &s->layers[l];
    const int R = s->B * n, D = s->D;
    if (s->clip) { /* clipped-dp: q, k, v from the clipped rows (in place when in is s->u) */
        for (int r = 0; r < R; r++) lipt_clip_row(in + (size_t)r * D, s->u + (size_t)r * D, D, s->R);
        in = s->u;
    }
    project_rows(s, W, L, in, n);
    attend(s, L, n);
    linear_rows(s, s->att, R, D, L->wo, D, W->bo->data, s->g);
}

/* The feed-forward branch of layer l on the R = B*n rows in -> s->g. */
static void feed_forward_rows(lipt_decoder *s, int l, const float *in, int n) {
    const lipt_config *c = &s->m->cfg;
    const lipt_layer *W = &s->m->layers[l];
    const dec_layer *L = &s->layers[l];
    const int R = s->B * n, D = s->D, F = s->F;
    linear_rows(s, in, R, D, L->w1, F, W->b1->data, s->h);
    for (int r = 0; r < R; r++) /* row by row: MaxMin's pairs start at each row (d_ff is even) */
        lipt_act_row(c->activation, W->beta ? W->beta->data[0] : 1.0f, s->h + (size_t)r * F, s->h + (size_t)r * F,
                     (size_t)F);
    linear_rows(s, s->h, R, F, L->w2, D, W->b2->data, s->g);
}

/* The half-block hd of layer l on the R = B*n rows of s->x: the block description's steps through the row kernels,
 * each with the rounding of the forward's op. Before the residual sum the branch moves between the scratch rows
 * (s->u, s->att: free until the attention writes s->att, after its input is read) and s->g; after it, s->x. */
static void half_rows(lipt_decoder *s, int l, const lipt_half_desc *hd, int n) {
    const lipt_model *m = s->m;
    const lipt_layer *W = &m->layers[l];
    const dec_layer *L = &s->layers[l];
    const int R = s->B * n, D = s->D;
    const float *g = s->x; /* the branch so far: the half's input */
    for (int i = 0; i < hd->n_steps; i++) {
        const lipt_step st = hd->step[i];
        float *out = g == s->u ? s->att : s->u;
        switch (st.kind) {
        case LIPT_STEP_KEEP_HALF: /* as lipt_mul by the 0/1 channel mask */
            for (int r = 0; r < R; r++)
                for (int j = 0; j < D; j++)
                    out[(size_t)r * D + j] = g[(size_t)r * D + j] * ((j >= D / 2) == (st.arg != 0) ? 1.0f : 0.0f);
            g = out;
            break;
        case LIPT_STEP_LN: {
            lipt_tensor *lg, *lb;
            lipt_step_ln(W, st.arg, &lg, &lb);
            if (i < hd->add) {
                layernorm_rows(g, out, R, D, lg, lb, m->cfg.ln_eps);
                g = out;
            } else {
                post_norm(s->x, s->u, R, D, lg, lb, m->cfg.ln_eps);
            }
            break;
        }
        case LIPT_STEP_BRANCH:
            if (hd->which == LIPT_BRANCH_ATTN) attention_rows(s, l, g, n);
            else feed_forward_rows(s, l, g, n);
            g = s->g;
            break;
        case LIPT_STEP_DROPOUT: break; /* inference */
        case LIPT_STEP_GRID: {         /* as lipt_round_grid */
            const float up = ldexpf(1.0f, st.arg), down = ldexpf(1.0f, -st.arg);
            for (size_t k = 0; k < (size_t)R * D; k++) out[k] = rintf(g[k] * up) * down;
            g = out;
            break;
        }
        case LIPT_STEP_ADD: add_rows(s->x, g, (size_t)R * D); break;
        case LIPT_STEP_ACTNORM: { /* lipt_mul by exp(log_scale), then lipt_add of the bias */
            const float *as = L->an_scale, *ab = W->an_b->data;
            for (int r = 0; r < R; r++) {
                float *xr = s->x + (size_t)r * D;
                for (int j = 0; j < D; j++) {
                    const float t = xr[j] * as[j];
                    xr[j] = t + ab[j];
                }
            }
            break;
        }
        }
    }
}

/* Logits of each sequence's last new row (row n-1 of its block) into s->logits, as lipt_model_logits. */
static void head_logits(lipt_decoder *s, int n) {
    const lipt_model *m = s->m;
    const int B = s->B, D = s->D, V = s->V;
    for (int b = 0; b < B; b++)
        lipt_layernorm_row(s->x + ((size_t)b * n + n - 1) * D, s->lnrow + (size_t)b * D, D, m->lnf_g->data,
                           m->lnf_b->data, m->cfg.ln_eps);
    if (m->head_w1) { /* the MLP head: GELU(ln W1 + b1) W + b */
        const int Fh = m->cfg.head_hidden;
        linear_rows(s, s->lnrow, B, D, m->head_w1->data, Fh, m->head_b1->data, s->hrow);
        lipt_act_row(LIPT_ACT_GELU, 1.0f, s->hrow, s->hrow, (size_t)B * Fh);
        linear_rows(s, s->hrow, B, Fh, m->head_w->data, V, m->head_b->data, s->logits);
    } else {
        linear_rows(s, s->lnrow, B, D, m->head_w->data, V, m->head_b->data, s->logits);
    }
}

/* Append n tokens (1 <= n <= T - len) to every sequence: ids[b*ld + i]. Logits of each sequence's last new row
 * into s->logits when want_logits. */
static void run_block(lipt_decoder *s, const int *ids, int ld, int n, int want_logits) {
    const lipt_model *m = s->m;
    const int B = s->B, T = s->T, D = s->D, len = s->len;
    LIPT_CHECK(n >= 1 && len + n <= T, "decoder: block of %d at length %d (capacity %d)", n, len, T);
    /* token + position embedding; window ids */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const int id = ids[(size_t)b * ld + i];
            s->tok[(size_t)b * T + len + i] = id;
            const float *te = m->tok_emb->data + (size_t)id * D, *pe = m->pos_emb->data + (size_t)(len + i) * D;
            float *xr = s->x + ((size_t)b * n + i) * D;
            for (int j = 0; j < D; j++) xr[j] = te[j] + pe[j];
            if (m->cfg.coupling_grid) { /* as lipt_model_embed: the stream starts on the grid */
                const float up = ldexpf(1.0f, m->cfg.coupling_grid), down = ldexpf(1.0f, -m->cfg.coupling_grid);
                for (int j = 0; j < D; j++) xr[j] = rintf(xr[j] * up) * down;
            }
        }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_half_desc hd[2];
        lipt_block_halves(&m->cfg, l, hd);
        for (int k = 0; k < 2; k++) half_rows(s, l, &hd[k], n);
    }
    s->len = len + n;
    if (want_logits) head_logits(s, n);
}

/* Keep the newest keep tokens of every window and re-encode them at positions 0 .. keep-1. */
static void slide(lipt_decoder *s) {
    const int T = s->T, keep = lipt_decoder_keep(T);
    for (int b = 0; b < s->B; b++) memmove(s->tok + (size_t)b * T, s->tok + (size_t)b * T + (T - keep), (size_t)keep * sizeof(int));
    s->len = 0;
    s->slides++;
    if (keep > 0) run_block(s, s->tok, T, keep, 0);
}

lipt_status lipt_decoder_append(lipt_decoder *s, const int *ids, int n, const float **logits, lipt_error *err) {
    if (n < 1) return lipt_fail(err, LIPT_ERR_ARG, "decoder: append of %d tokens (need at least 1)", n);
    for (size_t i = 0; i < (size_t)s->B * n; i++)
        if (ids[i] < 0 || ids[i] >= s->V)
            return lipt_fail(err, LIPT_ERR_ARG, "decoder: token id %d (sequence %zu, token %zu) outside [0, vocab_size = %d)",
                             ids[i], i / (size_t)n, i % (size_t)n, s->V);
    for (int off = 0; off < n;) {
        if (s->len == s->T) slide(s);
        const int room = s->T - s->len, k = n - off < room ? n - off : room;
        run_block(s, ids + off, n, k, off + k == n);
        off += k;
    }
    if (logits) *logits = s->logits;
    return LIPT_OK;
}
