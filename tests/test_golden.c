/* Golden files: lipt against its PyTorch re-implementation (tests/golden/) for every variant: logits, loss and
 * every gradient; three AdamW steps with the norm refresh of the training loop (per-step losses, every parameter
 * and buffer after them); the invertible models' normalisers (certified Gram-iteration spectral norms) and
 * inversion, including clipped-dp attention with and without the relative-position bias, and ActNorm; the
 * maxmin activation, the full ffn budget and the MLP head on the invertible model; coupling blocks (and their
 * exact inversion) on the DP model; DP with a logit map (the soft cap). Plus
 * controls showing the comparisons catch a perturbed weight, a skipped refresh, a wrong weight decay, a perturbed
 * relative-position bias or ActNorm scale, and a different gram_iters. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/model.h"
#include "lipt/invert.h"
#include "lipt/optim.h"
#include "lipt/train.h"

/* Relative error per tensor: max |lipt - torch| / max |torch| (floor below). */
#define GOLD_TOL 1e-4
#define GOLD_FLOOR 1e-6

/* ------------------------------------------------------------------ golden file reader (format version 1)
 * "LIPTGOLD" | u32 version | u32 n | n entries | u64 FNV-1a-64 of every preceding byte.
 * Entry: u32 name_len | name | u32 dtype | u32 ndim | u32 shape[ndim] | payload (little-endian). */
enum { DT_F32 = 1, DT_I32 = 2, DT_F64 = 3, DT_TEXT = 4 };

typedef struct {
    char *name;
    int dtype, ndim;
    int shape[LIPT_MAX_DIMS];
    size_t numel;
    void *data; /* float, int32_t, double, or NUL-terminated text; own allocation (aligned for its type) */
} gold_entry;

typedef struct {
    char path[1024];
    int n;
    gold_entry *e;
} gold_file;

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void gold_free(gold_file *g) {
    for (int i = 0; i < g->n; i++) {
        free(g->e[i].name);
        free(g->e[i].data);
    }
    free(g->e);
    g->e = NULL;
    g->n = 0;
}

/* 1: loaded; 0: absent (message in why); aborts the test on a malformed file. */
static int gold_load(const char *stem, gold_file *g, char *why, size_t wlen) {
    memset(g, 0, sizeof *g);
    const char *src = getenv("LIPT_SOURCE_DIR");
    snprintf(g->path, sizeof g->path, "%s/tests/golden/%s.bin", src ? src : ".", stem);
    FILE *f = fopen(g->path, "rb");
    if (!f) {
        snprintf(why, wlen, "%s not found", g->path);
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_msg(len >= 24, "%s: %ld bytes, too short for a golden file", g->path, len);
    unsigned char *b = malloc((size_t)len);
    ck_assert_msg(fread(b, 1, (size_t)len, f) == (size_t)len, "%s: short read", g->path);
    fclose(f);
    ck_assert_msg(memcmp(b, "LIPTGOLD", 8) == 0, "%s: bad magic", g->path);
    uint64_t h = 0xCBF29CE484222325ull, stored = 0;
    for (long i = 0; i < len - 8; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    for (int i = 7; i >= 0; i--) stored = stored << 8 | b[len - 8 + i];
    ck_assert_msg(h == stored, "%s: checksum mismatch (corrupt file; regenerate it)", g->path);
    ck_assert_msg(rd_u32(b + 8) == 1, "%s: format version %u, this test reads 1", g->path, rd_u32(b + 8));
    g->n = (int)rd_u32(b + 12);
    ck_assert_msg(g->n > 0 && g->n < 100000, "%s: %d entries", g->path, g->n);
    g->e = calloc((size_t)g->n, sizeof *g->e);
    size_t pos = 16, end = (size_t)len - 8;
#define NEED(k) ck_assert_msg(pos + (k) <= end, "%s: truncated entry %d", g->path, i)
    for (int i = 0; i < g->n; i++) {
        gold_entry *e = &g->e[i];
        NEED(4);
        uint32_t nl = rd_u32(b + pos);
        pos += 4;
        NEED(nl + 8);
        e->name = malloc(nl + 1);
        memcpy(e->name, b + pos, nl);
        e->name[nl] = 0;
        pos += nl;
        e->dtype = (int)rd_u32(b + pos);
        e->ndim = (int)rd_u32(b + pos + 4);
        pos += 8;
        ck_assert_msg(e->dtype >= DT_F32 && e->dtype <= DT_TEXT && e->ndim >= 0 && e->ndim <= LIPT_MAX_DIMS,
                      "%s: entry %s: dtype %d ndim %d", g->path, e->name, e->dtype, e->ndim);
        NEED(4u * e->ndim);
        e->numel = 1;
        for (int k = 0; k < e->ndim; k++) {
            e->shape[k] = (int)rd_u32(b + pos + 4 * k);
            e->numel *= (size_t)e->shape[k];
        }
        pos += 4u * e->ndim;
        size_t isz = e->dtype == DT_F64 ? 8 : e->dtype == DT_TEXT ? 1 : 4;
        NEED(e->numel * isz);
        e->data = malloc(e->numel * isz + 1);
        memcpy(e->data, b + pos, e->numel * isz); /* little-endian host assumed (x86, arm64) */
        if (e->dtype == DT_TEXT) ((char *)e->data)[e->numel] = 0;
        pos += e->numel * isz;
    }
#undef NEED
    ck_assert_msg(pos == end, "%s: %zu trailing bytes", g->path, end - pos);
    free(b);
    return 1;
}

static const gold_entry *gold_find(const gold_file *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->e[i].name, name) == 0) return &g->e[i];
    return NULL;
}

static const gold_entry *gold_get(const gold_file *g, const char *name, int dtype) {
    const gold_entry *e = gold_find(g, name);
    ck_assert_msg(e, "%s: no entry %s", g->path, name);
    ck_assert_msg(e->dtype == dtype, "%s: entry %s has dtype %d, expected %d", g->path, name, e->dtype, dtype);
    return e;
}

static int count_prefix(const gold_file *g, const char *prefix) {
    int n = 0;
    for (int i = 0; i < g->n; i++) n += strncmp(g->e[i].name, prefix, strlen(prefix)) == 0;
    return n;
}

/* The golden tensor prefix + t->name, which must have t's shape. */
static const float *gold_tensor(const gold_file *g, const char *prefix, const lipt_tensor *t) {
    char name[160], a[64];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    const gold_entry *e = gold_get(g, name, DT_F32);
    int same = e->ndim == t->ndim;
    for (int k = 0; same && k < t->ndim; k++) same = e->shape[k] == t->shape[k];
    ck_assert_msg(same, "%s: %s has %d dims / %zu elements, lipt's %s is %s", g->path, name, e->ndim, e->numel,
                  t->name, lipt_shape_str(t, a, sizeof a));
    return e->data;
}

/* ------------------------------------------------------------------ the model from a golden file */

typedef struct {
    gold_file g;
    lipt_config cfg;
    lipt_model m;
    int B, T;
    const int *ids, *targets;
    lipt_adamw_config adamw;
    int steps;
} golden;

/* Every parameter and buffer of the model from prefix ("param/" or "final/"); the file must hold exactly
 * the model's set. */
static void load_values(golden *G, const char *prefix) {
    lipt_params *p = &G->m.params;
    ck_assert_msg(count_prefix(&G->g, prefix) == p->n, "%s: %d tensors under %s, the lipt model has %d",
                  G->g.path, count_prefix(&G->g, prefix), prefix, p->n);
    for (int k = 0; k < p->n; k++)
        memcpy(p->list[k]->data, gold_tensor(&G->g, prefix, p->list[k]), p->list[k]->numel * sizeof(float));
}

/* 1 with G set up; 0 when the file is absent (after printing why). */
static int golden_open(golden *G, const char *stem) {
    memset(G, 0, sizeof *G);
    char why[1200];
    if (!gold_load(stem, &G->g, why, sizeof why)) {
        printf("golden %s: SKIPPED: %s (regenerate with /usr/bin/python3 tests/golden/make_golden.py)\n", stem, why);
        return 0;
    }
    lipt_error err = {0};
    const char *text = gold_get(&G->g, "config", DT_TEXT)->data;
    ck_assert_msg(lipt_config_parse(&G->cfg, text, G->g.path, &err) == LIPT_OK, "config: %s", err.msg);
    ck_assert_msg(lipt_model_init(&G->m, &G->cfg, &err) == LIPT_OK, "model init: %s", err.msg);
    const gold_entry *ids = gold_get(&G->g, "ids", DT_I32), *tg = gold_get(&G->g, "targets", DT_I32);
    ck_assert_msg(ids->ndim == 2 && tg->ndim == 2 && ids->numel == tg->numel, "%s: ids/targets must be [B,T]",
                  G->g.path);
    G->B = ids->shape[0];
    G->T = ids->shape[1];
    G->ids = ids->data;
    G->targets = tg->data;
    const gold_entry *ad = gold_get(&G->g, "adamw", DT_F64);
    ck_assert_int_eq((int)ad->numel, 5);
    const double *a = ad->data;
    G->adamw = (lipt_adamw_config){.lr = a[0], .beta1 = a[1], .beta2 = a[2], .eps = a[3], .weight_decay = a[4]};
    G->steps = ((const int32_t *)gold_get(&G->g, "steps", DT_I32)->data)[0];
    load_values(G, "param/");
    return 1;
}

static void golden_close(golden *G) {
    lipt_model_free(&G->m);
    gold_free(&G->g);
}

static double rel_err(const float *got, const float *ref, size_t n) { return tu_max_rel_err_f(got, ref, n, GOLD_FLOOR); }

static void upd(double *worst, double e) {
    if (!(e <= *worst)) *worst = e; /* NaN sticks */
}

/* Forward + backward at the loaded values: errors of logits, loss, each gradient (into gerr[k]). */
static void forward_backward(golden *G, double *e_logits, double *e_loss, double *gerr) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    ctx.training = 1; /* as in training (dropout is 0 in the golden recipe) */
    lipt_tensor *logits = NULL, *loss = NULL;
    lipt_error err = {0};
    ck_assert_msg(lipt_model_forward(&ctx, &G->m, G->ids, G->B, G->T, G->targets, &logits, &loss, &err) == LIPT_OK,
                  "forward: %s", err.msg);
    const gold_entry *gl = gold_get(&G->g, "logits", DT_F32);
    ck_assert_msg(gl->numel == logits->numel, "logits: %zu elements, golden %zu", logits->numel, gl->numel);
    *e_logits = rel_err(logits->data, gl->data, gl->numel);
    *e_loss = rel_err(loss->data, gold_get(&G->g, "loss", DT_F32)->data, 1);
    lipt_params_zero_grad(&G->m.params);
    lipt_backward(&ctx, loss);
    lipt_params *p = &G->m.params;
    for (int k = 0; k < p->n; k++) {
        gerr[k] = -1; /* buffers: no gradient */
        if (p->flags[k] & LIPT_PARAM_BUFFER) continue;
        gerr[k] = rel_err(p->list[k]->grad, gold_tensor(&G->g, "grad/", p->list[k]), p->list[k]->numel);
    }
    lipt_ctx_free(&ctx);
}

typedef struct {
    int skip_refresh;        /* controls: leave out lipt_model_refresh_norms */
    double weight_decay;     /* < 0: the file's */
} train_opts;

/* lipt_train_step, the step of `lipt train`, without clipping: forward, zero_grad, backward, AdamW, refresh.
 * Returns the worst step-loss error; ferr[k] the error of each tensor after the steps. */
static double train_steps(golden *G, const train_opts *o, double *ferr) {
    load_values(G, "param/");
    /* fresh optimizer state: AdamW moments live in the slab */
    lipt_params *p = &G->m.params;
    memset(p->m, 0, p->n_train * sizeof(float));
    memset(p->v, 0, p->n_train * sizeof(float));
    lipt_adamw_config ac = G->adamw;
    if (o->weight_decay >= 0) ac.weight_decay = o->weight_decay;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &ac);
    const gold_entry *sl = gold_get(&G->g, "step_loss", DT_F32);
    ck_assert_int_eq((int)sl->numel, G->steps);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    float *losses = malloc((size_t)G->steps * sizeof(float));
    for (int s = 0; s < G->steps; s++) {
        /* the shipped step (lipt train's): no clipping, one process */
        const lipt_step_opts so = {ac.lr, 0.0, o->skip_refresh ? 0 : G->cfg.power_iters, NULL, 0, 0, NULL, 0};
        lipt_step_result sr;
        lipt_error err = {0};
        ck_assert_msg(lipt_train_step(&ctx, &G->m, &opt, G->ids, G->targets, G->B, G->T, &so, &sr, &err) == LIPT_OK,
                      "train step %d: %s", s, err.msg);
        losses[s] = (float)sr.loss;
    }
    double e = rel_err(losses, sl->data, (size_t)G->steps);
    for (int k = 0; k < p->n; k++)
        ferr[k] = rel_err(p->list[k]->data, gold_tensor(&G->g, "final/", p->list[k]), p->list[k]->numel);
    free(losses);
    lipt_ctx_free(&ctx);
    return e;
}

/* Normalisers of the invertible model at the initial values against the golden ones. */
static double check_lipschitz(golden *G) {
    static const char *const keys[6] = {"attn_bound", "attn_factor", "sigma1", "sigma2", "ffn_factor1", "ffn_factor2"};
    const int L = G->cfg.n_layers;
    double worst = 0;
    load_values(G, "param/");
    for (int l = 0; l < L; l++) {
        lipt_layer_lipschitz r;
        lipt_model_layer_lipschitz(&G->m, l, 0, &r);
        const double got[6] = {r.attn_bound, r.attn_factor, r.sigma1, r.sigma2, r.ffn_factor1, r.ffn_factor2};
        for (int k = 0; k < 6; k++) {
            char name[64];
            snprintf(name, sizeof name, "lipschitz/%s", keys[k]);
            const gold_entry *e = gold_get(&G->g, name, DT_F32);
            ck_assert_int_eq((int)e->numel, L);
            const double ref = ((const float *)e->data)[l], err = fabs(got[k] - ref) / fmax(fabs(ref), GOLD_FLOOR);
            upd(&worst, err);
            ck_assert_msg(err < GOLD_TOL, "layer %d %s: lipt %.7g, torch %.7g (rel err %.2e)", l, keys[k], got[k], ref,
                          err);
        }
        ck_assert_msg(r.attn_factor < 1 && r.ffn_factor1 < 1 && r.ffn_factor2 < 1,
                      "layer %d: the golden weights should make every normaliser active", l);
    }
    return worst;
}

/* Inversion of each golden sequence at the initial values: lipt_model_invert (tokens, iterations, input error),
 * and the recovered embedding input x0 by lipt_model_invert_hidden from the last hidden state. Returns the worst x0
 * error. */
static double check_inversion(golden *G) {
    const gold_entry *oe = gold_get(&G->g, "invert/opts", DT_F64), *ie = gold_get(&G->g, "invert/ids", DT_I32);
    const gold_entry *xe = gold_get(&G->g, "invert/x0", DT_F32), *xt = gold_get(&G->g, "invert/x0_true", DT_F32);
    const gold_entry *te = gold_get(&G->g, "invert/tokens", DT_I32), *it = gold_get(&G->g, "invert/iters", DT_I32);
    const lipt_fp_opts opts = {((const double *)oe->data)[0], (int)((const double *)oe->data)[1], 0, 0, 0};
    const int n_seq = ie->shape[0], T = ie->shape[1], D = G->cfg.d_model, L = G->cfg.n_layers;
    ck_assert_msg(xe->numel == (size_t)n_seq * T * D && it->numel == (size_t)n_seq * 2 * L, "invert entry shapes");
    load_values(G, "param/");
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    double worst = 0;
    /* make_golden.py inverts with python/lipt_torch.py's defaults: they must be lipt's */
    ck_assert_msg(opts.tol == LIPT_INVERT_TOL && opts.max_iter == LIPT_INVERT_MAX_ITER,
                  "invert/opts tol %g, max_iter %d: not lipt's defaults %g, %d (python/lipt_torch.py INVERT_TOL, "
                  "INVERT_MAX_ITER)", opts.tol, opts.max_iter, LIPT_INVERT_TOL, LIPT_INVERT_MAX_ITER);
    float *y = malloc((size_t)T * D * sizeof(float));
    for (int r = 0; r < n_seq; r++) {
        const int *ids = (const int *)ie->data + (size_t)r * T;
        const float *x0_ref = (const float *)xe->data + (size_t)r * T * D;
        const float *x0_true = (const float *)xt->data + (size_t)r * T * D;
        const int *tok_ref = (const int *)te->data + (size_t)r * T, *it_ref = (const int *)it->data + (size_t)r * 2 * L;
        lipt_model_invert_result res;
        lipt_error err = {0};
        lipt_status st = lipt_model_invert(&ctx, &G->m, ids, T, &opts, &res, &err);
        ck_assert_msg(st == LIPT_OK, "row %d: lipt_model_invert: %s", r, err.msg);
        for (int t = 0; t < T; t++)
            ck_assert_msg(res.tokens[t] == tok_ref[t], "row %d position %d: lipt recovered token %d, torch %d", r, t,
                          res.tokens[t], tok_ref[t]);
        double xmax = 0, torch_in_err = 0;
        for (int i = 0; i < T * D; i++) {
            xmax = fmax(xmax, fabs(x0_true[i]));
            torch_in_err = fmax(torch_in_err, fabs((double)x0_ref[i] - x0_true[i]));
        }
        ck_assert_msg(res.max_abs_input_err <= GOLD_TOL * xmax, "row %d: lipt's input error %.2e (torch's %.2e)", r,
                      res.max_abs_input_err, torch_in_err);
        printf("  inversion row %d: tokens exact; iterations per map lipt [", r);
        for (int k = 0; k < 2 * L; k++) printf("%s%d", k ? " " : "", res.trace.iters[k]);
        printf("] torch [");
        for (int k = 0; k < 2 * L; k++) printf("%s%d", k ? " " : "", it_ref[k]);
        printf("]; max|x0 - x0_true| lipt %.2e torch %.2e\n", res.max_abs_input_err, torch_in_err);
        for (int k = 0; k < 2 * L; k++)
            ck_assert_msg(abs(res.trace.iters[k] - it_ref[k]) <= 1, "row %d map %d: %d iterations, torch %d", r, k,
                          res.trace.iters[k], it_ref[k]);
        lipt_model_invert_result_free(&res);

        /* the recovered embedding input x0: the blocks undone from the last hidden state */
        lipt_no_grad_push(&ctx);
        lipt_tensor *h = lipt_model_embed(&ctx, &G->m, ids, 1, T);
        double e_true = rel_err(h->data, x0_true, (size_t)T * D);
        ck_assert_msg(e_true < GOLD_TOL, "row %d: embedding input rel err %.2e", r, e_true);
        for (int l = 0; l < L; l++) h = lipt_model_block(&ctx, &G->m, l, h);
        lipt_no_grad_pop(&ctx);
        st = lipt_model_invert_hidden(&ctx, &G->m, h->data, T, y, &opts, NULL, &err);
        ck_assert_msg(st == LIPT_OK, "row %d: lipt_model_invert_hidden: %s", r, err.msg);
        lipt_ctx_reset(&ctx);
        double e = rel_err(y, x0_ref, (size_t)T * D);
        upd(&worst, e);
        ck_assert_msg(e < GOLD_TOL, "row %d: recovered x0 rel err %.2e vs torch", r, e);
    }
    free(y);
    lipt_ctx_free(&ctx);
    return worst;
}

static double max_of(const double *e, int n) {
    double w = 0;
    for (int k = 0; k < n; k++)
        if (e[k] >= 0 || isnan(e[k])) upd(&w, e[k]);
    return w;
}

static void run_variant(const char *stem) {
    golden G;
    if (!golden_open(&G, stem)) return;
    lipt_params *p = &G.m.params;
    double *gerr = calloc((size_t)p->n, sizeof(double)), *ferr = calloc((size_t)p->n, sizeof(double));
    double e_logits, e_loss;
    forward_backward(&G, &e_logits, &e_loss, gerr);
    const double e_steps = train_steps(&G, &(train_opts){0, -1}, ferr);
    const double e_grad = max_of(gerr, p->n), e_final = max_of(ferr, p->n);

    printf("golden %s (%s): attention %s, ffn %s, activation %s, lip_norm %s, power_iters %d, B %d T %d, %d steps\n",
           stem, G.g.path, lipt_attn_name(G.cfg.attention), lipt_ffn_name(G.cfg.ffn), lipt_act_name(G.cfg.activation),
           lipt_lipnorm_name(G.cfg.lip_norm), G.cfg.power_iters, G.B, G.T, G.steps);
    if (G.m.invertible)
        printf("  invertible: gram_iters %d, actnorm %d%s", G.cfg.gram_iters, G.cfg.actnorm,
               G.cfg.attention == LIPT_ATTN_CLIPPED_DP ? "" : "\n");
    if (G.cfg.attention == LIPT_ATTN_CLIPPED_DP)
        printf(", clip radius %.4g, rel_bias %d\n", (double)lipt_config_clip_radius(&G.cfg), G.cfg.rel_bias);
    if (G.cfg.ffn_full_budget || G.cfg.head_hidden || G.cfg.coupling)
        printf("  c %.4g, ffn_full_budget %d, head_hidden %d, coupling %d\n", (double)G.cfg.c, G.cfg.ffn_full_budget,
               G.cfg.head_hidden, G.cfg.coupling);
    printf("  %-26s %-8s %12s %14s\n", "tensor", "shape", "grad rel err", "after steps");
    for (int k = 0; k < p->n; k++) {
        char sh[64], gs[32];
        if (gerr[k] < 0) snprintf(gs, sizeof gs, "(buffer)");
        else snprintf(gs, sizeof gs, "%.2e", gerr[k]);
        printf("  %-26s %-8s %12s %14.2e\n", p->list[k]->name, lipt_shape_str(p->list[k], sh, sizeof sh), gs, ferr[k]);
    }
    double e_lip = -1, e_x0 = -1;
    if (G.m.invertible) e_lip = check_lipschitz(&G);
    if (G.m.invertible || G.cfg.coupling) e_x0 = check_inversion(&G); /* coupling blocks: exact inverse */
    printf("  worst rel err: logits %.2e, loss %.2e, grads %.2e, step losses %.2e, after %d AdamW steps %.2e", e_logits,
           e_loss, e_grad, e_steps, G.steps, e_final);
    if (G.m.invertible) printf(", normalisers %.2e", e_lip);
    if (e_x0 >= 0) printf(", inversion x0 %.2e", e_x0);
    printf(" (tol %.0e)\n", GOLD_TOL);
    fflush(stdout);

    ck_assert_msg(e_logits < GOLD_TOL, "%s: logits rel err %.2e", stem, e_logits);
    ck_assert_msg(e_loss < GOLD_TOL, "%s: loss rel err %.2e", stem, e_loss);
    for (int k = 0; k < p->n; k++) {
        ck_assert_msg(gerr[k] < GOLD_TOL, "%s: gradient of %s rel err %.2e", stem, p->list[k]->name, gerr[k]);
        ck_assert_msg(ferr[k] < GOLD_TOL, "%s: %s after %d steps rel err %.2e", stem, p->list[k]->name, G.steps,
                      ferr[k]);
    }
    ck_assert_msg(e_steps < GOLD_TOL, "%s: step losses rel err %.2e", stem, e_steps);
    free(gerr);
    free(ferr);
    golden_close(&G);
}

START_TEST(test_golden_dp) { run_variant("dp"); }
END_TEST
START_TEST(test_golden_l2) { run_variant("l2"); }
END_TEST
START_TEST(test_golden_l2_tied) { run_variant("l2-tied"); }
END_TEST
START_TEST(test_golden_contractive_inf) { run_variant("contractive-inf"); }
END_TEST
START_TEST(test_golden_contractive_2) { run_variant("contractive-2"); }
END_TEST
START_TEST(test_golden_contractive_inf2) { run_variant("contractive-inf2"); }
END_TEST
START_TEST(test_golden_clipped_dp) { run_variant("clipped-dp"); }
END_TEST
START_TEST(test_golden_clipped_dp_norel) { run_variant("clipped-dp-norel"); }
END_TEST
/* The file's config must set the options it is there for (a config text without them would test the defaults). */
static void expect_options(const char *stem, int act, int full_budget, int head_hidden, int coupling) {
    golden G;
    if (!golden_open(&G, stem)) return;
    ck_assert_msg((int)G.cfg.activation == act && G.cfg.ffn_full_budget == full_budget &&
                      G.cfg.head_hidden == head_hidden && G.cfg.coupling == coupling,
                  "%s: config has activation %s, ffn_full_budget %d, head_hidden %d, coupling %d", stem,
                  lipt_act_name(G.cfg.activation), G.cfg.ffn_full_budget, G.cfg.head_hidden, G.cfg.coupling);
    golden_close(&G);
}

START_TEST(test_golden_clipped_dp_maxmin) {
    expect_options("clipped-dp-maxmin", LIPT_ACT_MAXMIN, 1, 14, 0);
    run_variant("clipped-dp-maxmin");
}
END_TEST
START_TEST(test_golden_dp_coupling) {
    expect_options("dp-coupling", LIPT_ACT_GELU, 0, 0, 1);
    run_variant("dp-coupling");
}
END_TEST

/* Post-LN blocks: the file must say norm = post, and the same weights run as pre-LN blocks must be noticed. */
static void run_post(const char *stem) {
    golden G;
    if (golden_open(&G, stem)) {
        ck_assert_msg(G.cfg.norm == LIPT_NORM_POST, "%s: config has norm = %s", stem, lipt_norm_name(G.cfg.norm));
        lipt_params *p = &G.m.params;
        double *gerr = calloc((size_t)p->n, sizeof(double)), e_logits, e_loss;
        G.m.cfg.norm = LIPT_NORM_PRE;
        forward_backward(&G, &e_logits, &e_loss, gerr);
        const double e = fmax(e_logits, max_of(gerr, p->n));
        ck_assert_msg(e > 10 * GOLD_TOL, "%s: pre-LN blocks in place of post-LN went unnoticed (err %.2e)", stem, e);
        printf("golden control (%s): norm = pre instead of post -> err %.2e (must exceed %.0e)\n", stem, e,
               10 * GOLD_TOL);
        free(gerr);
        golden_close(&G);
    }
    run_variant(stem);
}
START_TEST(test_golden_dp_softcap) { run_variant("dp-softcap"); }
END_TEST
START_TEST(test_golden_dp_post) { run_post("dp-post"); }
END_TEST
START_TEST(test_golden_l2_tied_post) { run_post("l2-tied-post"); }
END_TEST

/* The comparisons can fail: one weight moved by 1e-2, the refresh left out, the weight decay changed. */
START_TEST(test_golden_controls) {
    golden G;
    if (!golden_open(&G, "contractive-2")) return;
    lipt_params *p = &G.m.params;
    double *gerr = calloc((size_t)p->n, sizeof(double)), *ferr = calloc((size_t)p->n, sizeof(double));
    double e_logits, e_loss;

    G.m.layers[0].wq->data[5] += 1e-2f;
    forward_backward(&G, &e_logits, &e_loss, gerr);
    const double e_pert = max_of(gerr, p->n);
    ck_assert_msg(e_pert > 10 * GOLD_TOL, "a 1e-2 change of layers.0.attn.wq went unnoticed (grad err %.2e)", e_pert);

    train_steps(&G, &(train_opts){1, -1}, ferr);
    double e_buf = 0;
    for (int k = 0; k < p->n; k++)
        if (p->flags[k] & LIPT_PARAM_BUFFER) upd(&e_buf, ferr[k]);
    ck_assert_msg(e_buf > 10 * GOLD_TOL, "skipping the norm refresh went unnoticed (buffer err %.2e)", e_buf);

    train_steps(&G, &(train_opts){0, 0.0}, ferr);
    const double e_wd = max_of(ferr, p->n);
    ck_assert_msg(e_wd > 10 * GOLD_TOL, "weight decay 0 instead of 0.1 went unnoticed (err %.2e)", e_wd);
    printf("golden controls (contractive-2): perturbed wq -> grad err %.2e; no refresh -> buffer err %.2e; "
           "no weight decay -> param err %.2e (each must exceed %.0e)\n",
           e_pert, e_buf, e_wd, 10 * GOLD_TOL);
    free(gerr);
    free(ferr);
    golden_close(&G);
}
END_TEST

/* The clipped-dp pieces are compared: one relative-position bias entry or one ActNorm log-scale moved by 1e-2, or
 * the certified spectral norms computed with 1 Gram squaring instead of the file's 8, must each be noticed. */
START_TEST(test_golden_controls_clipped_dp) {
    golden G;
    if (!golden_open(&G, "clipped-dp")) return;
    lipt_params *p = &G.m.params;
    double *gerr = calloc((size_t)p->n, sizeof(double));
    double e_logits, e_loss, e[3];
    ck_assert_int_eq(G.cfg.gram_iters, 8);

    G.m.layers[0].rel->data[1] += 1e-2f; /* head 0, distance 1 */
    forward_backward(&G, &e_logits, &e_loss, gerr);
    e[0] = fmax(e_logits, max_of(gerr, p->n));
    load_values(&G, "param/");
    G.m.layers[1].an_s->data[3] += 1e-2f;
    forward_backward(&G, &e_logits, &e_loss, gerr);
    e[1] = fmax(e_logits, max_of(gerr, p->n));
    load_values(&G, "param/");
    G.m.cfg.gram_iters = 1;
    forward_backward(&G, &e_logits, &e_loss, gerr);
    e[2] = fmax(e_logits, max_of(gerr, p->n));
    G.m.cfg.gram_iters = G.cfg.gram_iters;
    static const char *const what[3] = {"a 1e-2 change of layers.0.attn.rel_bias",
                                        "a 1e-2 change of layers.1.actnorm.log_scale", "gram_iters 1 instead of 8"};
    for (int k = 0; k < 3; k++) ck_assert_msg(e[k] > 10 * GOLD_TOL, "%s went unnoticed (err %.2e)", what[k], e[k]);
    printf("golden controls (clipped-dp): perturbed rel_bias -> err %.2e; perturbed actnorm -> err %.2e; "
           "gram_iters 1 -> err %.2e (each must exceed %.0e)\n",
           e[0], e[1], e[2], 10 * GOLD_TOL);
    free(gerr);
    golden_close(&G);
}
END_TEST

/* The new options are compared: in clipped-dp-maxmin, the ffn normalised with c for W1 too (ffn_full_budget 0),
 * relu in place of maxmin, and one head.w1 weight moved by 1e-2; in dp-coupling, plain blocks (coupling 0). Each
 * must be noticed. */
START_TEST(test_golden_controls_new_options) {
    double e[4] = {-1, -1, -1, -1}, e_logits, e_loss;
    golden G;
    if (golden_open(&G, "clipped-dp-maxmin")) {
        lipt_params *p = &G.m.params;
        double *gerr = calloc((size_t)p->n, sizeof(double));
        ck_assert(G.cfg.ffn_full_budget == 1 && G.cfg.activation == LIPT_ACT_MAXMIN && G.m.head_w1);
        G.m.cfg.ffn_full_budget = 0;
        forward_backward(&G, &e_logits, &e_loss, gerr);
        e[0] = fmax(e_logits, max_of(gerr, p->n));
        G.m.cfg.ffn_full_budget = 1;
        G.m.cfg.activation = LIPT_ACT_RELU;
        forward_backward(&G, &e_logits, &e_loss, gerr);
        e[1] = fmax(e_logits, max_of(gerr, p->n));
        G.m.cfg.activation = LIPT_ACT_MAXMIN;
        G.m.head_w1->data[7] += 1e-2f;
        forward_backward(&G, &e_logits, &e_loss, gerr);
        e[2] = fmax(e_logits, max_of(gerr, p->n));
        free(gerr);
        golden_close(&G);
    }
    if (golden_open(&G, "dp-coupling")) {
        lipt_params *p = &G.m.params;
        double *gerr = calloc((size_t)p->n, sizeof(double));
        ck_assert_int_eq(G.cfg.coupling, 1);
        G.m.cfg.coupling = 0;
        forward_backward(&G, &e_logits, &e_loss, gerr);
        e[3] = fmax(e_logits, max_of(gerr, p->n));
        free(gerr);
        golden_close(&G);
    }
    static const char *const what[4] = {"ffn_full_budget 0 instead of 1", "relu instead of maxmin",
                                        "a 1e-2 change of head.w1", "coupling 0 instead of 1"};
    for (int k = 0; k < 4; k++)
        ck_assert_msg(e[k] < 0 || e[k] > 10 * GOLD_TOL, "%s went unnoticed (err %.2e)", what[k], e[k]);
    printf("golden controls (new options): ffn_full_budget 0 -> err %.2e; relu for maxmin -> err %.2e; perturbed "
           "head.w1 -> err %.2e; coupling 0 -> err %.2e (each must exceed %.0e; -1: file absent)\n",
           e[0], e[1], e[2], e[3], 10 * GOLD_TOL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_golden_dp);
    tcase_add_test(tc, test_golden_l2);
    tcase_add_test(tc, test_golden_l2_tied);
    tcase_add_test(tc, test_golden_contractive_inf);
    tcase_add_test(tc, test_golden_contractive_2);
    tcase_add_test(tc, test_golden_contractive_inf2);
    tcase_add_test(tc, test_golden_clipped_dp);
    tcase_add_test(tc, test_golden_clipped_dp_norel);
    tcase_add_test(tc, test_golden_clipped_dp_maxmin);
    tcase_add_test(tc, test_golden_dp_coupling);
    tcase_add_test(tc, test_golden_dp_softcap);
    tcase_add_test(tc, test_golden_dp_post);
    tcase_add_test(tc, test_golden_l2_tied_post);
    tcase_add_test(tc, test_golden_controls);
    tcase_add_test(tc, test_golden_controls_clipped_dp);
    tcase_add_test(tc, test_golden_controls_new_options);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
