/* Incremental decoding with per-layer key/value caches (the maths of lipt_model_forward, one new row at a time),
 * window sliding at seq_len, and next-token sampling (greedy, temperature, top-k). Every attention kind: dp, l2,
 * l2-tied, contractive-l2, and clipped-dp (rows clipped to the ball of radius R before the projections, relative
 * position bias by window position), with the invertible model's optional ActNorm after each block. */
#include "lipt/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_impl.h"
#include "kernels/kernels.h"

/* Work (B*H*T*d) above which the one-token attention runs its (sequence, head) loop in parallel. */
#define DEC_ATTN_PAR_MIN 65536.0
#define LIPSWISH_SCALE 1.1f   /* as in src/ops/activation.c */

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
    int clip;            /* clipped-dp: queries, keys and values from the rows clipped to radius R */
    int contractive;     /* the attention's W^O is multiplied by its factor 1/max(1, UB/c) */
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
    lipt_ctx gemm;       /* the model's precision for the products (only its low-precision scratch is used) */
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

static void layout(lipt_decoder *s, planner *p, int contractive_ffn) {
    const size_t B = (size_t)s->B, T = (size_t)s->T, D = (size_t)s->D, H = (size_t)s->H, d = (size_t)s->d,
                 F = (size_t)s->F, V = (size_t)s->V, R = B * T;
    const int nl = s->m->cfg.n_layers;
    s->layers = take(p, (size_t)(nl > 0 ? nl : 1) * sizeof(dec_layer));
    for (int l = 0; l < nl; l++) {
        dec_layer tmp, *L = p->base ? &s->layers[l] : &tmp;
        L->k = TAKEF(p, R * D);
        L->v = TAKEF(p, R * D);
        L->kn = s->l2 ? TAKEF(p, B * H * T) : NULL;
        L->M = s->tied ? TAKEF(p, H * d * d) : NULL;
        L->rel = s->m->layers[l].rel ? TAKEF(p, H * T) : NULL;
        L->an_scale = s->m->layers[l].an_s ? TAKEF(p, D) : NULL;
        if (s->contractive) L->wo = TAKEF(p, D * D);
        if (contractive_ffn) {
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
    if (c->coupling)
        return lipt_fail(err, LIPT_ERR_ARG, "incremental decoding does not support coupling = 1 (an ablation control): "
                                             "sample with --no-cache");
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
    s->l2 = ai->l2_logits;
    s->clip = ai->clip_rows;
    s->R = s->clip ? lipt_config_clip_radius(c) : 0.0f;
    s->tied = ai->tied;
    s->contractive = ai->contractive;
    const int cffn = c->ffn == LIPT_FFN_CONTRACTIVE;
    planner p = {NULL, 0};
    layout(s, &p, cffn);
    s->slab = lipt_xaligned(p.off);
    memset(s->slab, 0, p.off);
    p.base = s->slab;
    p.off = 0;
    layout(s, &p, cffn);
    s->bytes = sizeof *s + p.off;
    lipt_ctx_init(&s->gemm, 4096, 0);
    const lipt_status pst = lipt_ctx_set_precision(&s->gemm, c->precision, err);
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
        if (s->contractive) {
            const float fa = lipt_model_attn_factor(&ctx, m, l, 0, NULL)->data[0];
            float *wo = (float *)L->wo; /* the forward scales W^O by the factor (lipt_mul): the same rounding */
            for (size_t i = 0; i < (size_t)D * D; i++) wo[i] = W->wo->data[i] * fa;
        } else {
            L->wo = W->wo->data;
        }
        if (cffn) {
            const int g = lipt_config_gram_arg(c);
            const float f1 = lipt_contract_factor(
                                 &ctx, lipt_spectral_norm_ub(&ctx, W->w1, W->sn1_u->data, W->sn1_v->data, 1, 0, g),
                                 c->ffn_full_budget ? 1.0f : c->c)
                                 ->data[0];
            const float f2 = lipt_contract_factor(
                                 &ctx, lipt_spectral_norm_ub(&ctx, W->w2, W->sn2_u->data, W->sn2_v->data, 1, 0, g), c->c)
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
        if (s->tied) lipt_attn_l2_tied_M(&s->gemm, W->wq->data, W->wv->data, D, H, L->M); /* as the forward's */
        lipt_ctx_reset(&ctx);
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    *out = s;
    return LIPT_OK;
}

void lipt_decoder_free(lipt_decoder *s) {
    if (!s) return;
    lipt_ctx_free(&s->gemm);
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

/* ---------------------------------------------------------------- row kernels */

/* As lipt_layernorm: two-pass mean and variance in double. */
static void layernorm_rows(const float *x, float *y, int rows, int D, const float *gamma, const float *beta, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        double mu = 0;
        for (int j = 0; j < D; j++) mu += xr[j];
        mu /= D;
        double var = 0;
        for (int j = 0; j < D; j++) {
            double t = xr[j] - mu;
            var += t * t;
        }
        var /= D;
        double rstd = 1.0 / sqrt(var + (double)eps);
        for (int j = 0; j < D; j++) yr[j] = (float)((xr[j] - mu) * rstd * gamma[j] + beta[j]);
    }
}

/* Post-LN: x <- LN(x) in place, through the scratch rows u (R x D). */
static void post_norm(float *x, float *u, int R, int D, const float *gamma, const float *beta, float eps) {
    layernorm_rows(x, u, R, D, gamma, beta, eps);
    memcpy(x, u, (size_t)R * D * sizeof(float));
}

/* As lipt_clip_rows: each row projected on the ball of radius R, the norm in double, the scale R/‖x‖ rounded
 * to float. */
static void clip_rows(const float *x, float *y, int rows, int D, float R) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        double acc = 0;
        for (int c = 0; c < D; c++) acc += (double)xr[c] * xr[c];
        const double nrm = sqrt(acc);
        if (nrm > R) {
            const float f = (float)(R / nrm);
            for (int c = 0; c < D; c++) yr[c] = xr[c] * f;
        } else if (yr != xr) {
            memcpy(yr, xr, (size_t)D * sizeof(float));
        }
    }
}

/* As src/ops/activation.c. */
static void activate(lipt_act_kind act, float beta, float *x, size_t n) {
    switch (act) {
    case LIPT_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0.0f;
        break;
    case LIPT_ACT_ELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : expm1f(x[i]);
        break;
    case LIPT_ACT_LIPSWISH:
        lipt_vlipswish(x, x, n, beta, LIPSWISH_SCALE);
        break;
    case LIPT_ACT_MAXMIN: /* as lipt_maxmin */
        for (size_t p = 0; p + 1 < n; p += 2) {
            const float u = x[p], v = x[p + 1];
            x[p] = u >= v ? u : v;
            x[p + 1] = u >= v ? v : u;
        }
        break;
    case LIPT_ACT_GELU:
    default:
        lipt_vgelu(x, x, NULL, n);
        break;
    }
}

/* y = x W (+ b) over rows, at the model's precision. */
static void linear_rows(lipt_decoder *s, const float *x, int rows, int K, const float *w, int N, const float *b,
                        float *y) {
    lipt_gemm_gemv_p(&s->gemm, 0, 0, rows, N, K, 1.0f, x, K, w, N, 0.0f, y, N);
    if (b)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < N; j++) y[(size_t)r * N + j] += b[j];
}

/* Softmax of row[0..cnt) in place (the kernel of softmax_rows in src/ops/attention_dp.c), after
 * subtracting kn[j] when given; row[cnt..nc) set to 0. */
static void softmax_row(float *row, int cnt, int nc, const float *kn) {
    lipt_vsoftmax_row(row, (size_t)cnt, kn);
    for (int j = cnt; j < nc; j++) row[j] = 0.0f;
}

/* One query row (the newest position) of sequence b = bh / H, head h = bh % H against its nc cached rows:
 * plain loops, P·V accumulated in double; at a low precision q, k, P and v are rounded to bf16 as the products of the
 * forward pass round them. */
static void attend_one(lipt_decoder *s, const dec_layer *L, int bh, int nc, float alpha) {
    const int T = s->T, D = s->D, H = s->H, d = s->d, b = bh / H, h = bh % H;
    const float *qh = s->q + (size_t)b * D + (size_t)h * d;
    const float *Kh = L->k + (size_t)b * T * D + (size_t)h * d, *Vh = L->v + (size_t)b * T * D + (size_t)h * d;
    float *row = s->P + (size_t)bh * T;
    for (int j = 0; j < nc; j++) {
        const float *kr = Kh + (size_t)j * D;
        float dot = 0;
        if (s->lowp)
            for (int c = 0; c < d; c++) dot += lipt_bf16_round(qh[c]) * lipt_bf16_round(kr[c]);
        else
            for (int c = 0; c < d; c++) dot += qh[c] * kr[c];
        row[j] = alpha * dot;
    }
    if (L->rel) { /* the query is window position nc - 1 (softmax_rows in attention_dp.c: row[j] += rel[i - j]) */
        const float *rel = L->rel + (size_t)h * T;
        for (int j = 0; j < nc; j++) row[j] += rel[nc - 1 - j];
    }
    softmax_row(row, nc, nc, s->l2 ? L->kn + (size_t)bh * T : NULL);
    double *acc = s->acc + (size_t)b * D + (size_t)h * d;
    for (int c = 0; c < d; c++) acc[c] = 0;
    for (int j = 0; j < nc; j++) {
        const double pj = s->lowp ? lipt_bf16_round(row[j]) : row[j];
        const float *vr = Vh + (size_t)j * D;
        if (s->lowp)
            for (int c = 0; c < d; c++) acc[c] += pj * lipt_bf16_round(vr[c]);
        else
            for (int c = 0; c < d; c++) acc[c] += pj * vr[c];
    }
    float *o = s->att + (size_t)b * D + (size_t)h * d;
    for (int c = 0; c < d; c++) o[c] = (float)acc[c];
}

/* Attention of the n new rows of every sequence (queries in s->q, keys/values already in the cache at positions
 * 0 .. len+n-1) -> s->att [B*n, D], heads concatenated. */
static void attend(lipt_decoder *s, const dec_layer *L, int n) {
    const int B = s->B, T = s->T, D = s->D, H = s->H, d = s->d, len = s->len, nc = len + n;
    const double inv_s = 1.0 / sqrt((double)d);
    const float alpha = (float)((s->l2 ? 2.0 : 1.0) * inv_s);
    if (n == 1) {
        /* one query per (sequence, head). Only enter an OpenMP region when it runs in parallel: a serial
         * region still costs libgomp a team allocation per call. */
        const int BH = B * H;
        if (BH > 1 && (double)BH * nc * d >= DEC_ATTN_PAR_MIN) {
#pragma omp parallel for schedule(static)
            for (int bh = 0; bh < BH; bh++) attend_one(s, L, bh, nc, alpha);
        } else {
            for (int bh = 0; bh < BH; bh++) attend_one(s, L, bh, nc, alpha);
        }
        return;
    }
    /* a block of rows (prompt, re-encoding after a slide): GEMMs as in head_forward, causal inside the block */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *qh = s->q + (size_t)b * n * D + (size_t)h * d;
            const float *Kh = L->k + (size_t)b * T * D + (size_t)h * d, *Vh = L->v + (size_t)b * T * D + (size_t)h * d;
            const float *kn = s->l2 ? L->kn + ((size_t)b * H + h) * T : NULL;
            const float *rel = L->rel ? L->rel + (size_t)h * T : NULL;
            lipt_gemm_gemv_p(&s->gemm, 0, 1, n, nc, d, alpha, qh, D, Kh, D, 0.0f, s->P, T);
            for (int i = 0; i < n; i++) {
                float *row = s->P + (size_t)i * T;
                const int pi = len + i; /* window position of the query */
                if (rel)
                    for (int j = 0; j <= pi; j++) row[j] += rel[pi - j];
                softmax_row(row, pi + 1, nc, kn);
            }
            lipt_gemm_gemv_p(&s->gemm, 0, 0, n, d, nc, 1.0f, s->P, T, Vh, D, 0.0f,
                             s->att + (size_t)b * n * D + (size_t)h * d, D);
        }
}

/* Append n tokens (1 <= n <= T - len) to every sequence: ids[b*ld + i]. Logits of each sequence's last new row
 * into s->logits when want_logits. */
static void run_block(lipt_decoder *s, const int *ids, int ld, int n, int want_logits) {
    const lipt_model *m = s->m;
    const lipt_config *c = &m->cfg;
    const int B = s->B, T = s->T, D = s->D, H = s->H, d = s->d, F = s->F, V = s->V, len = s->len, R = B * n;
    const double inv_s = 1.0 / sqrt((double)d);
    const float eps = c->ln_eps;
    LIPT_CHECK(n >= 1 && len + n <= T, "decoder: block of %d at length %d (capacity %d)", n, len, T);
    /* token + position embedding; window ids */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const int id = ids[(size_t)b * ld + i];
            s->tok[(size_t)b * T + len + i] = id;
            const float *te = m->tok_emb->data + (size_t)id * D, *pe = m->pos_emb->data + (size_t)(len + i) * D;
            float *xr = s->x + ((size_t)b * n + i) * D;
            for (int j = 0; j < D; j++) xr[j] = te[j] + pe[j];
        }
    for (int l = 0; l < c->n_layers; l++) {
        const lipt_layer *W = &m->layers[l];
        const dec_layer *L = &s->layers[l];
        /* ---- attention branch ---- */
        const float *in = s->x;
        const int pre = !m->invertible && c->norm == LIPT_NORM_PRE, post = c->norm == LIPT_NORM_POST;
        if (pre) {
            layernorm_rows(s->x, s->u, R, D, W->ln1_g->data, W->ln1_b->data, eps);
            in = s->u;
        }
        if (s->clip) { /* clipped-dp (invertible: no LayerNorm before) */
            clip_rows(in, s->u, R, D, s->R);
            in = s->u;
        }
        linear_rows(s, in, R, D, W->wq->data, D, NULL, s->q);
        for (int b = 0; b < B; b++) {
            const float *inb = in + (size_t)b * n * D, *qb = s->q + (size_t)b * n * D;
            float *kc = L->k + ((size_t)b * T + len) * D, *vc = L->v + ((size_t)b * T + len) * D;
            if (s->tied) {
                memcpy(kc, qb, (size_t)n * D * sizeof(float));
                for (int h = 0; h < H; h++)
                    lipt_gemm_gemv_p(&s->gemm, 0, 0, n, d, d, 1.0f, qb + (size_t)h * d, D, L->M + (size_t)h * d * d, d,
                                     0.0f, vc + (size_t)h * d, D);
            } else {
                lipt_gemm_gemv_p(&s->gemm, 0, 0, n, D, D, 1.0f, inb, D, W->wk->data, D, 0.0f, kc, D);
                lipt_gemm_gemv_p(&s->gemm, 0, 0, n, D, D, 1.0f, inb, D, W->wv->data, D, 0.0f, vc, D);
            }
            if (s->l2) /* |k|²/s of the n new keys, per head */
                for (int h = 0; h < H; h++)
                    lipt_attn_l2_key_norms(kc + (size_t)h * d, n, D, d, inv_s, L->kn + ((size_t)b * H + h) * T + len);
        }
        attend(s, L, n);
        linear_rows(s, s->att, R, D, L->wo, D, W->bo->data, s->g);
        for (int r = 0; r < R; r++) { /* the residual add */
            const float *gr = s->g + (size_t)r * D;
            float *xr = s->x + (size_t)r * D;
            for (int j = 0; j < D; j++) xr[j] = xr[j] + gr[j];
        }
        if (post) post_norm(s->x, s->u, R, D, W->ln1_g->data, W->ln1_b->data, eps);
        /* ---- feed-forward branch ---- */
        in = s->x;
        if (pre) {
            layernorm_rows(s->x, s->u, R, D, W->ln2_g->data, W->ln2_b->data, eps);
            in = s->u;
        }
        linear_rows(s, in, R, D, L->w1, F, W->b1->data, s->h);
        activate(c->activation, W->beta ? W->beta->data[0] : 1.0f, s->h, (size_t)R * F);
        linear_rows(s, s->h, R, F, L->w2, D, W->b2->data, s->g);
        for (size_t i = 0; i < (size_t)R * D; i++) s->x[i] = s->x[i] + s->g[i];
        if (post) post_norm(s->x, s->u, R, D, W->ln2_g->data, W->ln2_b->data, eps);
        if (L->an_scale) { /* ActNorm: lipt_mul by exp(log_scale), then lipt_add of the bias */
            const float *as = L->an_scale, *ab = W->an_b->data;
            for (int r = 0; r < R; r++) {
                float *xr = s->x + (size_t)r * D;
                for (int j = 0; j < D; j++) {
                    const float t = xr[j] * as[j];
                    xr[j] = t + ab[j];
                }
            }
        }
    }
    s->len = len + n;
    if (!want_logits) return;
    for (int b = 0; b < B; b++)
        layernorm_rows(s->x + ((size_t)b * n + n - 1) * D, s->lnrow + (size_t)b * D, 1, D, m->lnf_g->data,
                       m->lnf_b->data, eps);
    if (m->head_w1) { /* as lipt_model_logits: GELU(ln W1 + b1) W + b */
        const int Fh = c->head_hidden;
        linear_rows(s, s->lnrow, B, D, m->head_w1->data, Fh, m->head_b1->data, s->hrow);
        activate(LIPT_ACT_GELU, 1.0f, s->hrow, (size_t)B * Fh);
        linear_rows(s, s->hrow, B, Fh, m->head_w->data, V, m->head_b->data, s->logits);
    } else {
        linear_rows(s, s->lnrow, B, D, m->head_w->data, V, m->head_b->data, s->logits);
    }
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

/* ---------------------------------------------------------------- sampling */

/* The k-th largest (k in [1, n]) of a[0..n) by quickselect; reorders a. */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1;
    const int target = k - 1;
    while (lo < hi) {
        const float pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                const float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (target <= j) hi = j;
        else if (target >= i) lo = i;
        else break;
    }
    return a[target];
}

int lipt_sample_next(const float *logits, int n, double temperature, int top_k, lipt_rng *rng, float *work) {
    LIPT_CHECK(n >= 1, "sample: %d allowed ids", n);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(temperature > 0)) return best;
    float thr = -INFINITY;
    if (top_k > 0 && top_k < n) {
        memcpy(work, logits, (size_t)n * sizeof(float));
        thr = kth_largest(work, n, top_k);
    }
    const double mx = logits[best], invt = 1.0 / temperature;
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] >= thr) sum += exp((logits[i] - mx) * invt);
    const double u = lipt_rng_uniform(rng) * sum;
    double cum = 0;
    int last = best;
    for (int i = 0; i < n; i++)
        if (logits[i] >= thr) {
            cum += exp((logits[i] - mx) * invt);
            last = i;
            if (u < cum) return i;
        }
    return last; /* rounding: u landed at the very end */
}
