/* Incremental decoding: cached logits equal lipt_model_forward on the same window for every variant (one token
 * at a time, blocks, batches; clipped-dp with and without its relative-position bias and ActNorm, at a radius
 * that clips every row and at the default one), the sliding window at seq_len, fixed memory with no heap
 * allocation per token, argument errors, and next-token sampling (greedy, temperature, top-k). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/decode.h"
#include "lipt/sample.h"
#include "lipt/model.h"

/* Heap-allocation counter: glibc lets a program replace malloc; forwarding to the __libc_ entry points keeps
 * glibc's free valid for every block. Not under AddressSanitizer, which owns malloc itself. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNT_MALLOC 1
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t s);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t a, size_t n);
static volatile size_t n_allocs; /* test-only instrumentation; volatile: GCC assumes malloc touches no globals */
void *malloc(size_t n) { n_allocs++; return __libc_malloc(n); }
void *calloc(size_t n, size_t s) { n_allocs++; return __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { n_allocs++; return __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { n_allocs++; return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { n_allocs++; return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n) {
    n_allocs++;
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12; /* ENOMEM */
}
#else
#define COUNT_MALLOC 0
static size_t n_allocs;
#endif

#define TOL 1e-5

typedef struct {
    const char *label;
    lipt_attn_kind attn;
    lipt_act_kind act;
    lipt_lipnorm_kind lipnorm;
    int V, D, H, F, L, N;
    int rel_bias, actnorm; /* clipped-dp options (rel_bias only read for clipped-dp) */
    float clip_radius;     /* clipped-dp: 0 = the default sqrt(d_model) */
    int post;              /* 1: post-LN blocks (norm = post) */
} variant;

static const variant variants[] = {
    {"dp/gelu", LIPT_ATTN_DP, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
    {"l2/relu", LIPT_ATTN_L2, LIPT_ACT_RELU, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
    {"l2-tied/elu", LIPT_ATTN_L2_TIED, LIPT_ACT_ELU, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
    {"contractive/lipswish/inf", LIPT_ATTN_CONTRACTIVE_L2, LIPT_ACT_LIPSWISH, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0,
     0.0f, 0},
    {"contractive/elu/2", LIPT_ATTN_CONTRACTIVE_L2, LIPT_ACT_ELU, LIPT_LIPNORM_2, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
    /* odd sizes: d = 5, one layer; and a model without blocks */
    {"dp/relu odd", LIPT_ATTN_DP, LIPT_ACT_RELU, LIPT_LIPNORM_INF, 7, 10, 2, 7, 1, 9, 0, 0, 0.0f, 0},
    {"l2-tied/gelu odd", LIPT_ATTN_L2_TIED, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 7, 10, 2, 7, 1, 9, 0, 0, 0.0f, 0},
    {"contractive/relu odd", LIPT_ATTN_CONTRACTIVE_L2, LIPT_ACT_RELU, LIPT_LIPNORM_2, 7, 10, 2, 7, 1, 9, 0, 0, 0.0f, 0},
    {"l2/gelu no layers", LIPT_ATTN_L2, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 7, 10, 2, 7, 0, 9, 0, 0, 0.0f, 0},
    /* clipped-dp (index CLIPPED_FIRST on): relative bias on/off, ActNorm on/off, radius 1 (every row clipped) and
     * the default sqrt(D) (some rows clipped) */
    {"clipped/relu rel R1", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_RELU, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 1, 0, 1.0f, 0},
    {"clipped/elu rel+an", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_ELU, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 1, 1, 0.0f, 0},
    {"clipped/lipswish an R1", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_LIPSWISH, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 0, 1,
     1.0f, 0},
    {"clipped/relu plain", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_RELU, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
    {"clipped/elu rel+an odd R1", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_ELU, LIPT_LIPNORM_INF2, 7, 10, 2, 7, 1, 9, 1, 1, 1.0f, 0},
    /* the shipped design: MaxMin with the full ffn budget (and here an MLP head: build_model sets them for maxmin) */
    {"clipped/maxmin rel+an head", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_MAXMIN, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 1, 1,
     0.0f, 0},
    /* ActNorm is an option of either invertible attention */
    {"contractive/elu/inf2 an", LIPT_ATTN_CONTRACTIVE_L2, LIPT_ACT_ELU, LIPT_LIPNORM_INF2, 11, 12, 3, 20, 2, 16, 0, 1,
     0.0f, 0},
    /* post-LN blocks */
    {"dp/gelu post-LN", LIPT_ATTN_DP, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 1},
    {"l2-tied/elu post-LN odd", LIPT_ATTN_L2_TIED, LIPT_ACT_ELU, LIPT_LIPNORM_INF, 7, 10, 2, 7, 1, 9, 0, 0, 0.0f, 1},
    /* a logit map (the soft cap) */
    {"dp-softcap/gelu", LIPT_ATTN_DP_SOFTCAP, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 11, 12, 3, 20, 2, 16, 0, 0, 0.0f, 0},
};
#define CLIPPED_FIRST 9
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

/* Parameters drawn wider than the initialisation (std 1/sqrt(fan-in), LayerNorm gains around 1, biases and
 * LayerNorm shifts nonzero) so that attention is far from uniform and every term matters; then the
 * power-iteration vectors are converged for the new weights. */
static void build_model(lipt_model *m, const variant *v, uint64_t seed) {
    lipt_config cfg;
    lipt_config_default(&cfg);
    cfg.vocab_size = v->V;
    cfg.d_model = v->D;
    cfg.n_heads = v->H;
    cfg.d_ff = v->F;
    cfg.n_layers = v->L;
    cfg.seq_len = v->N;
    cfg.attention = v->attn;
    cfg.ffn = lipt_attn_contractive(v->attn) ? LIPT_FFN_CONTRACTIVE : LIPT_FFN_STANDARD;
    cfg.activation = v->act;
    cfg.lip_norm = v->lipnorm;
    cfg.init_seed = seed;
    if (v->attn == LIPT_ATTN_CLIPPED_DP) {
        cfg.rel_bias = v->rel_bias;
        cfg.clip_radius = v->clip_radius;
    }
    cfg.actnorm = v->actnorm;
    cfg.norm = v->post ? LIPT_NORM_POST : LIPT_NORM_PRE;
    if (v->act == LIPT_ACT_MAXMIN) {
        cfg.ffn_full_budget = 1;
        cfg.head_hidden = 10;
    }
    lipt_error err = {0};
    ck_assert_msg(lipt_config_validate(&cfg, &err) == LIPT_OK, "%s config: %s", v->label, err.msg);
    ck_assert_msg(lipt_model_init(m, &cfg, &err) == LIPT_OK, "model init: %s", err.msg);
    lipt_rng r;
    lipt_rng_seed(&r, seed * 7919 + 1);
    for (int i = 0; i < m->params.n; i++) {
        lipt_tensor *t = m->params.list[i];
        if (m->params.flags[i] & LIPT_PARAM_BUFFER) continue;
        const char *nm = t->name;
        size_t ln = strlen(nm);
        if (strstr(nm, "attn.rel_bias")) {
            /* stored divided by LIPT_REL_BIAS_GAIN: logit biases of std 1.2, a different one per distance */
            lipt_rng_fill_normal(&r, t->data, t->numel, 0.15f);
        } else if (t->ndim == 2) {
            lipt_rng_fill_normal(&r, t->data, t->numel, (float)(1.0 / sqrt((double)t->shape[0])));
        } else if (ln >= 5 && strcmp(nm + ln - 5, "gamma") == 0) {
            for (size_t j = 0; j < t->numel; j++) t->data[j] = 1.0f + 0.3f * lipt_rng_normal(&r);
        } else if (strstr(nm, "ffn.beta")) {
            t->data[0] = 0.5f + (float)lipt_rng_uniform(&r);
        } else {
            lipt_rng_fill_normal(&r, t->data, t->numel, 0.3f);
        }
    }
    /* the invertible model has no LayerNorm: unit-scale embeddings keep its branches in their working range */
    if (m->invertible) {
        lipt_rng_fill_normal(&r, m->tok_emb->data, m->tok_emb->numel, 0.7f);
        lipt_rng_fill_normal(&r, m->pos_emb->data, m->pos_emb->numel, 0.7f);
    }
    lipt_model_refresh_norms(m, 300);
}

/* The normalisers must be active, else the contractive test would not test them. */
static void check_normalisers_active(lipt_model *m) {
    if (!m->invertible) return;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        lipt_layer_lipschitz ll;
        lipt_model_layer_lipschitz(m, l, 0, &ll);
        ck_assert_msg(ll.attn_factor < 0.999 && ll.ffn_factor1 < 0.999 && ll.ffn_factor2 < 0.999,
                      "layer %d normalisers inactive: %g %g %g", l, ll.attn_factor, ll.ffn_factor1, ll.ffn_factor2);
    }
}

/* Fraction of the attention branches' input rows (every layer, one random window) that clipped-dp clips: the
 * block inputs of the forward pass against the radius. -1 for the other kinds. */
static double clipped_fraction(lipt_model *m, uint64_t seed) {
    if (m->cfg.attention != LIPT_ATTN_CLIPPED_DP || m->cfg.n_layers == 0) return -1;
    const int T = m->cfg.seq_len, D = m->cfg.d_model;
    const double R = lipt_config_clip_radius(&m->cfg);
    int *ids = malloc(sizeof(int) * (size_t)T);
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    for (int t = 0; t < T; t++) ids[t] = (int)lipt_rng_below(&r, (uint64_t)m->cfg.vocab_size);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 0);
    lipt_no_grad_push(&ctx);
    lipt_tensor *x = lipt_model_embed(&ctx, m, ids, 1, T);
    long clipped = 0, rows = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        for (int t = 0; t < T; t++) {
            double n2 = 0;
            for (int j = 0; j < D; j++) n2 += (double)x->data[(size_t)t * D + j] * x->data[(size_t)t * D + j];
            clipped += sqrt(n2) > R;
            rows++;
        }
        x = lipt_model_block(&ctx, m, l, x);
    }
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    free(ids);
    return (double)clipped / (double)rows;
}

/* Worst relative error (to the row's scale) of the decoder's logits [B,V] against lipt_model_forward on the
 * decoder's current windows. */
static double compare_to_forward(lipt_ctx *ctx, const lipt_model *m, const lipt_decoder *dec, const float *logits) {
    const int B = lipt_decoder_batch(dec), T = lipt_decoder_len(dec), V = m->cfg.vocab_size;
    int *ids = malloc(sizeof(int) * (size_t)B * T);
    for (int b = 0; b < B; b++) memcpy(ids + (size_t)b * T, lipt_decoder_window(dec, b), sizeof(int) * (size_t)T);
    lipt_error err = {0};
    lipt_tensor *lg = NULL;
    lipt_no_grad_push(ctx);
    ck_assert_msg(lipt_model_forward(ctx, m, ids, B, T, NULL, &lg, NULL, &err) == LIPT_OK, "forward: %s", err.msg);
    lipt_no_grad_pop(ctx);
    double worst = 0;
    for (int b = 0; b < B; b++) {
        const float *ref = lg->data + ((size_t)b * T + T - 1) * V;
        double e = tu_max_rel_err_f(logits + (size_t)b * V, ref, (size_t)V, 1e-3);
        if (!(e <= worst)) worst = e;
    }
    lipt_ctx_reset(ctx);
    free(ids);
    return worst;
}

static void random_ids(lipt_rng *r, int *ids, size_t n, int V) {
    for (size_t i = 0; i < n; i++) ids[i] = (int)lipt_rng_below(r, (uint64_t)V);
}

/* Every position up to seq_len: one token at a time (batch 1 and 2), then a block prefill followed by single
 * tokens and a final block. */
START_TEST(test_matches_forward) {
    const variant *v = &variants[_i];
    lipt_set_threads(2);
    double worst_single = 0, worst_block = 0;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        lipt_model m;
        build_model(&m, v, seed);
        check_normalisers_active(&m);
        const double fc = clipped_fraction(&m, 500 + seed);
        if (fc >= 0) { /* clipping must happen (and the relative bias and ActNorm be non-trivial) */
            ck_assert_msg(fc > 0, "%s: no row clipped", v->label);
            if (m.cfg.clip_radius == 0) ck_assert_msg(fc < 1, "%s: default radius clips every row", v->label);
            printf("%s seed %d: %.0f%% of the attention inputs clipped (R = %g)\n", v->label, (int)seed, 100 * fc,
                   (double)lipt_config_clip_radius(&m.cfg));
            for (int l = 0; l < m.cfg.n_layers; l++) {
                const lipt_layer *W = &m.layers[l];
                ck_assert((W->rel != NULL) == (v->rel_bias != 0) && (W->an_s != NULL) == (v->actnorm != 0));
                if (W->rel) ck_assert(W->rel->data[1] != 0 && W->rel->data[0] != W->rel->data[1]);
                if (W->an_s) ck_assert(W->an_s->data[0] != 0 && W->an_b->data[0] != 0);
            }
        }
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 16, 1);
        lipt_rng r;
        lipt_rng_seed(&r, 100 + seed);
        const int N = v->N;
        for (int B = 1; B <= 2; B++) {
            lipt_decoder *dec;
            lipt_error err = {0};
            ck_assert(lipt_decoder_create(&m, B, &dec, &err) == LIPT_OK);
            int *seq = malloc(sizeof(int) * (size_t)B * N), step[2];
            random_ids(&r, seq, (size_t)B * N, v->V);
            const float *lg;
            for (int t = 0; t < N; t++) {
                for (int b = 0; b < B; b++) step[b] = seq[(size_t)b * N + t];
                ck_assert(lipt_decoder_append(dec, step, 1, &lg, &err) == LIPT_OK);
                ck_assert_int_eq(lipt_decoder_len(dec), t + 1);
                double e = compare_to_forward(&ctx, &m, dec, lg);
                if (!(e <= worst_single)) worst_single = e;
                ck_assert_msg(e <= TOL, "%s B=%d position %d: rel err %.3g", v->label, B, t, e);
            }
            ck_assert_int_eq(lipt_decoder_slides(dec), 0);
            /* block prefill of p tokens, singles, then a closing block of 3 */
            lipt_decoder_reset(dec);
            const int p = N / 2 + 1;
            int *blk = malloc(sizeof(int) * (size_t)B * N);
            for (int b = 0; b < B; b++) memcpy(blk + (size_t)b * p, seq + (size_t)b * N, sizeof(int) * (size_t)p);
            ck_assert(lipt_decoder_append(dec, blk, p, &lg, &err) == LIPT_OK);
            double e = compare_to_forward(&ctx, &m, dec, lg);
            if (!(e <= worst_block)) worst_block = e;
            ck_assert_msg(e <= TOL, "%s B=%d prefill %d: rel err %.3g", v->label, B, p, e);
            int t = p;
            for (; t < N - 3; t++) {
                for (int b = 0; b < B; b++) step[b] = seq[(size_t)b * N + t];
                ck_assert(lipt_decoder_append(dec, step, 1, &lg, &err) == LIPT_OK);
                e = compare_to_forward(&ctx, &m, dec, lg);
                if (!(e <= worst_single)) worst_single = e;
                ck_assert_msg(e <= TOL, "%s B=%d after prefill, position %d: rel err %.3g", v->label, B, t, e);
            }
            const int k = N - t;
            for (int b = 0; b < B; b++) memcpy(blk + (size_t)b * k, seq + (size_t)b * N + t, sizeof(int) * (size_t)k);
            ck_assert(lipt_decoder_append(dec, blk, k, &lg, &err) == LIPT_OK);
            ck_assert_int_eq(lipt_decoder_len(dec), N);
            for (int b = 0; b < B; b++)
                ck_assert(memcmp(lipt_decoder_window(dec, b), seq + (size_t)b * N, sizeof(int) * (size_t)N) == 0);
            e = compare_to_forward(&ctx, &m, dec, lg);
            if (!(e <= worst_block)) worst_block = e;
            ck_assert_msg(e <= TOL, "%s B=%d closing block: rel err %.3g", v->label, B, e);
            free(blk);
            free(seq);
            lipt_decoder_free(dec);
        }
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }
    printf("decode vs forward %-26s worst rel err: single tokens %.2e, blocks %.2e\n", v->label, worst_single,
           worst_block);
}
END_TEST

/* Beyond seq_len: the window keeps the newest seq_len/2 tokens, re-encoded at positions 0.., and the logits are
 * those of the forward pass on that window. Appends of random sizes cross the boundary inside a block. */
START_TEST(test_sliding) {
    lipt_set_threads(2);
    const int lens[3] = {8, 7, 1};
    /* the four main kinds, then clipped-dp with the bias (a window restarts its distances at 0) and ActNorm */
    const int which[] = {0, 1, 2, 3, CLIPPED_FIRST, CLIPPED_FIRST + 1, CLIPPED_FIRST + 3};
    double worst = 0, worst_clipped = 0;
    for (int wi = 0; wi < (int)(sizeof which / sizeof which[0]); wi++)
        for (int li = 0; li < 3; li++) {
            const int vi = which[wi];
            variant v = variants[vi];
            v.N = lens[li];
            lipt_model m;
            build_model(&m, &v, 5 + (uint64_t)vi);
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_rng r;
            lipt_rng_seed(&r, 77 + (uint64_t)vi);
            lipt_decoder *dec;
            lipt_error err = {0};
            ck_assert(lipt_decoder_create(&m, 1, &dec, &err) == LIPT_OK);
            int win[16], wlen = 0;
            long slides = 0;
            const int keep = lipt_decoder_keep(v.N);
            ck_assert_int_eq(keep, v.N / 2);
            for (int mode = 0; mode < 2; mode++) {
                lipt_decoder_reset(dec);
                wlen = 0;
                slides = 0;
                for (int fed = 0; fed < 4 * v.N + 3;) {
                    int n = mode == 0 ? 1 : 1 + (int)lipt_rng_below(&r, (uint64_t)(v.N + 4));
                    int ids[32];
                    random_ids(&r, ids, (size_t)n, v.V);
                    for (int i = 0; i < n; i++) { /* the documented policy, independently */
                        if (wlen == v.N) {
                            memmove(win, win + (v.N - keep), sizeof(int) * (size_t)keep);
                            wlen = keep;
                            slides++;
                        }
                        win[wlen++] = ids[i];
                    }
                    const float *lg;
                    ck_assert(lipt_decoder_append(dec, ids, n, &lg, &err) == LIPT_OK);
                    fed += n;
                    ck_assert_int_eq(lipt_decoder_len(dec), wlen);
                    ck_assert_int_eq(lipt_decoder_slides(dec), slides);
                    ck_assert(memcmp(lipt_decoder_window(dec, 0), win, sizeof(int) * (size_t)wlen) == 0);
                    double e = compare_to_forward(&ctx, &m, dec, lg);
                    double *w = v.attn == LIPT_ATTN_CLIPPED_DP ? &worst_clipped : &worst;
                    if (!(e <= *w)) *w = e;
                    ck_assert_msg(e <= TOL, "%s seq_len %d mode %d after %d tokens: rel err %.3g", v.label, v.N, mode,
                                  fed, e);
                }
                ck_assert_msg(slides >= 3, "only %ld slides", slides);
            }
            lipt_decoder_free(dec);
            lipt_ctx_free(&ctx);
            lipt_model_free(&m);
        }
    printf("sliding window (seq_len 8, 7, 1; four variants) worst rel err %.2e; clipped-dp (3 variants) %.2e\n",
           worst, worst_clipped);
}
END_TEST

/* Many heads and a long window: the one-token attention runs its (sequence, head) loop on several threads
 * once B*H*T*d >= 65536 (here 4*8*T*8: from T = 256 on). */
START_TEST(test_parallel_heads) {
    lipt_set_threads(2);
    const variant v[3] = {
        {"l2-tied wide", LIPT_ATTN_L2_TIED, LIPT_ACT_GELU, LIPT_LIPNORM_INF, 13, 64, 8, 32, 1, 264, 0, 0, 0.0f, 0},
        {"dp wide", LIPT_ATTN_DP, LIPT_ACT_RELU, LIPT_LIPNORM_INF, 13, 64, 8, 32, 1, 264, 0, 0, 0.0f, 0},
        {"clipped-dp rel+an wide", LIPT_ATTN_CLIPPED_DP, LIPT_ACT_RELU, LIPT_LIPNORM_INF2, 13, 64, 8, 32, 1, 264, 1, 1,
         0.0f, 0}};
    enum { B = 4 };
    for (int vi = 0; vi < 3; vi++) {
        lipt_model m;
        build_model(&m, &v[vi], 11);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        lipt_rng r;
        lipt_rng_seed(&r, 12);
        lipt_decoder *dec;
        lipt_error err = {0};
        ck_assert(lipt_decoder_create(&m, B, &dec, &err) == LIPT_OK);
        const int N = v[vi].N;
        int *seq = malloc(sizeof(int) * (size_t)B * N);
        random_ids(&r, seq, (size_t)B * N, v[vi].V);
        /* a 200-token prefill (block path), then single tokens; compare where the parallel path runs */
        int *blk = malloc(sizeof(int) * (size_t)B * 200);
        for (int b = 0; b < B; b++) memcpy(blk + (size_t)b * 200, seq + (size_t)b * N, sizeof(int) * 200);
        const float *lg;
        ck_assert(lipt_decoder_append(dec, blk, 200, &lg, &err) == LIPT_OK);
        double worst = 0;
        for (int t = 200; t < N; t++) {
            int step[B];
            for (int b = 0; b < B; b++) step[b] = seq[(size_t)b * N + t];
            ck_assert(lipt_decoder_append(dec, step, 1, &lg, &err) == LIPT_OK);
            if (t < N - 10) continue;
            double e = compare_to_forward(&ctx, &m, dec, lg);
            if (!(e <= worst)) worst = e;
            ck_assert_msg(e <= TOL, "%s position %d: rel err %.3g", v[vi].label, t, e);
        }
        printf("decode vs forward %-26s (B=4, 8 heads, T=%d, 2 threads) worst rel err %.2e\n", v[vi].label, N, worst);
        free(blk);
        free(seq);
        lipt_decoder_free(dec);
        lipt_ctx_free(&ctx);
        lipt_model_free(&m);
    }
}
END_TEST

/* After warm-up, appends (including slides) allocate nothing and the state's size does not change. */
START_TEST(test_memory_fixed) {
    lipt_set_threads(1);
    const int which[] = {0, 1, 2, 3, CLIPPED_FIRST + 1};
    for (int wi = 0; wi < (int)(sizeof which / sizeof which[0]); wi++) {
        const int vi = which[wi];
        lipt_model m;
        build_model(&m, &variants[vi], 3);
        lipt_decoder *dec;
        lipt_error err = {0};
        ck_assert(lipt_decoder_create(&m, 2, &dec, &err) == LIPT_OK);
        const size_t bytes = lipt_decoder_bytes(dec);
        const int N = m.cfg.seq_len;
        int ids[2] = {1, 2}, blk[2 * 5] = {0, 1, 2, 3, 4, 4, 3, 2, 1, 0};
        const float *lg;
        ck_assert(lipt_decoder_append(dec, ids, 1, &lg, &err) == LIPT_OK); /* warm-up (BLAS, OpenMP) */
        /* no Check assertion inside the counted loop: they allocate */
        int bad = 0;
        size_t before = n_allocs;
        for (int t = 0; t < 5 * N; t++) {
            ids[0] = t % m.cfg.vocab_size;
            ids[1] = (3 * t + 1) % m.cfg.vocab_size;
            bad |= lipt_decoder_append(dec, ids, 1, &lg, &err) != LIPT_OK;
            if (t % 7 == 0) bad |= lipt_decoder_append(dec, blk, 5, &lg, &err) != LIPT_OK;
        }
        size_t grew = n_allocs - before;
        ck_assert(!bad);
        ck_assert_uint_eq(lipt_decoder_bytes(dec), bytes);
        ck_assert(lipt_decoder_slides(dec) >= 5);
        printf("%s: %zu bytes of state, %ld slides, %zu heap allocations in %d appends%s\n", variants[vi].label, bytes,
               lipt_decoder_slides(dec), grew, 5 * N + (5 * N + 6) / 7, COUNT_MALLOC ? "" : " (not counted here)");
        ck_assert_msg(grew == 0, "%zu allocations during appends", grew);
        lipt_decoder_free(dec);
        lipt_model_free(&m);
    }
#if COUNT_MALLOC
    size_t c0 = n_allocs;
    void *volatile p = malloc(16);
    ck_assert_uint_eq(n_allocs - c0, 1); /* the counter works */
    free(p);
#endif
}
END_TEST

START_TEST(test_errors) {
    lipt_model m;
    build_model(&m, &variants[0], 1);
    lipt_decoder *dec = NULL;
    lipt_error err = {0};
    ck_assert(lipt_decoder_create(&m, 0, &dec, &err) == LIPT_ERR_ARG);
    ck_assert_ptr_null(dec);
    ck_assert(lipt_decoder_create(&m, 1, &dec, &err) == LIPT_OK);
    int ids[3] = {1, 2, 3};
    const float *lg = NULL;
    ck_assert(lipt_decoder_append(dec, ids, 2, &lg, &err) == LIPT_OK);
    ck_assert(lipt_decoder_append(dec, ids, 0, &lg, &err) == LIPT_ERR_ARG);
    ids[2] = m.cfg.vocab_size;
    ck_assert(lipt_decoder_append(dec, ids, 3, &lg, &err) == LIPT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "token id 11") != NULL, "message: %s", err.msg);
    ids[2] = -1;
    ck_assert(lipt_decoder_append(dec, ids, 3, &lg, &err) == LIPT_ERR_ARG);
    ck_assert_int_eq(lipt_decoder_len(dec), 2); /* unchanged */
    lipt_decoder_free(dec);
    lipt_model_free(&m);
}
END_TEST

START_TEST(test_sampling) {
    lipt_rng r;
    lipt_rng_seed(&r, 42);
    float work[8];
    const float lg[6] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 9.0f};
    /* greedy: first maximum over the allowed ids (id 5 excluded) */
    ck_assert_int_eq(lipt_sample_next(lg, 5, 0.0, 0, &r, work), 1);
    ck_assert_int_eq(lipt_sample_next(lg, 6, 0.0, 3, &r, work), 5);
    /* temperature 1: frequencies match softmax (4 standard deviations per id) */
    enum { DRAWS = 40000 };
    int count[6] = {0};
    for (int i = 0; i < DRAWS; i++) count[lipt_sample_next(lg, 5, 1.0, 0, &r, work)]++;
    double z = 0, p[5];
    for (int i = 0; i < 5; i++) z += exp(lg[i]);
    double worst_sd = 0;
    for (int i = 0; i < 5; i++) {
        p[i] = exp(lg[i]) / z;
        double sd = sqrt(DRAWS * p[i] * (1 - p[i])), dev = fabs(count[i] - DRAWS * p[i]) / sd;
        if (dev > worst_sd) worst_sd = dev;
    }
    ck_assert_int_eq(count[5], 0);
    ck_assert_msg(worst_sd < 4.0, "frequencies off by %.2f sd", worst_sd);
    /* temperature 0.5 sharpens: p ∝ exp(2 l) */
    memset(count, 0, sizeof count);
    for (int i = 0; i < DRAWS; i++) count[lipt_sample_next(lg, 5, 0.5, 0, &r, work)]++;
    z = 0;
    for (int i = 0; i < 5; i++) z += exp(2 * lg[i]);
    for (int i = 0; i < 5; i++) {
        double pi = exp(2 * lg[i]) / z, sd = sqrt(DRAWS * pi * (1 - pi)) + 1e-9;
        ck_assert_msg(fabs(count[i] - DRAWS * pi) / sd < 4.5, "T=0.5 id %d: %d draws, expected %.0f", i, count[i],
                      DRAWS * pi);
    }
    /* top-k 3 over {0.5, 2, -1, 1.5, 2}: ids 1, 3, 4 only, renormalised */
    memset(count, 0, sizeof count);
    for (int i = 0; i < DRAWS; i++) count[lipt_sample_next(lg, 5, 1.0, 3, &r, work)]++;
    ck_assert_int_eq(count[0] + count[2] + count[5], 0);
    double z3 = exp(2.0) * 2 + exp(1.5), p3 = exp(1.5) / z3;
    ck_assert_msg(fabs(count[3] - DRAWS * p3) / sqrt(DRAWS * p3 * (1 - p3)) < 4.0, "top-k id 3: %d", count[3]);
    /* top-k 1 with a tie at the top keeps both tied ids */
    memset(count, 0, sizeof count);
    for (int i = 0; i < 2000; i++) count[lipt_sample_next(lg, 5, 1.0, 1, &r, work)]++;
    ck_assert_int_eq(count[1] + count[4], 2000);
    ck_assert(count[1] > 800 && count[4] > 800);
    /* top-k larger than the vocabulary: plain sampling */
    int seen = 0;
    for (int i = 0; i < 2000; i++) seen |= 1 << lipt_sample_next(lg, 5, 1.0, 50, &r, work);
    ck_assert_int_eq(seen, 31);
    printf("sampling: softmax frequencies within %.2f sd\n", worst_sd);
}
END_TEST

int main(void) {
    Suite *s = suite_create("nn_decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matches_forward, 0, N_VARIANTS);
    tcase_add_test(tc, test_sliding);
    tcase_add_test(tc, test_parallel_heads);
    tcase_add_test(tc, test_memory_fixed);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_sampling);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
