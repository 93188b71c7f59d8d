/* Activation recomputation (lipt_recompute, lipt train --recompute): the same bits as the plain tape for every
 * model family (losses, gradients and weights after AdamW steps, dropout on, both attention kernels), the same to
 * float rounding with the feed-forward in pieces, less arena memory, and the generic op: finite differences, an
 * input used outside the segment, nesting, segments without anything to record. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lipt/model.h"
#include "lipt/train.h"

/* ------------------------------------------------------------------ whole models */

typedef struct {
    double loss[3];
    float *slab;       /* parameters after the steps */
    float *grad;       /* gradient of the last step (before clipping's scale is applied: the step's own buffer) */
    size_t n, peak;    /* floats in the slab; arena high-water mark in bytes */
} run_out;

/* Three AdamW steps of `cfg` on fixed random batches, with or without recomputation (feed-forward pieces of
 * `rows` tokens; 0: the default). */
static void run_steps(const lipt_config *cfg, int recompute, int rows, int tiled, run_out *o) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 7);
    ctx.recompute = recompute;
    ctx.recompute_rows = rows;
    ctx.attn_tiled = tiled;
    tu_train_steps(cfg, &ctx, 3, o->loss, &o->slab, &o->grad, &o->n, NULL);
    o->peak = ctx.arena.peak;
    lipt_ctx_free(&ctx);
}

static void small(lipt_config *cfg, const char *path, const char *const *kv) {
    lipt_error err = {0};
    lipt_config_default(cfg);
    ck_assert_msg(lipt_config_load(cfg, path, &err) == LIPT_OK, "%s: %s", path, err.msg);
    const char *shrink[] = {"d_model", "16", "n_heads", "2", "d_ff", "32", "n_layers", "3", "seq_len", "24", NULL};
    for (int i = 0; shrink[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, shrink[i], shrink[i + 1], &err) == LIPT_OK, "%s: %s", shrink[i], err.msg);
    for (int i = 0; kv && kv[i]; i += 2)
        ck_assert_msg(lipt_config_set(cfg, kv[i], kv[i + 1], &err) == LIPT_OK, "%s: %s", kv[i], err.msg);
    ck_assert_msg(lipt_config_validate(cfg, &err) == LIPT_OK, "%s: %s", path, err.msg);
}

START_TEST(test_models_same_bits) {
    static const char *const dropout[] = {"dropout", "0.2", NULL};
    static const char *const wide[] = {"d_model", "32", "n_heads", "4", NULL};
    const struct { const char *cfg; const char *const *kv; } cases[] = {
        {"models/ptb-dp.cfg", NULL},
        {"models/ptb-dp.cfg", dropout},           /* the rerun draws the same masks */
        {"models/ptb-dp-post.cfg", NULL},
        {"models/ptb-l2.cfg", NULL},
        {"models/ptb-l2-tied.cfg", dropout},
        {"models/ptb-contractive-l2.cfg", NULL},  /* bound factors inside the segment */
        {"models/ptb-contractive.cfg", wide},     /* the invertible model: clipping, rel bias, spectral norms */
        {"models/ablation/e-coupling-dp.cfg", NULL},
        {"models/ablation/c-clipdp-rel-actnorm.cfg", NULL},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        lipt_config cfg;
        small(&cfg, cases[k].cfg, cases[k].kv);
        for (int tiled = 0; tiled <= 1; tiled++) {
            run_out a, b;
            run_steps(&cfg, 0, 0, tiled, &a);
            run_steps(&cfg, 1, 0, tiled, &b);
            for (int s = 0; s < 3; s++)
                ck_assert_msg(a.loss[s] == b.loss[s], "%s tiled %d step %d: loss %.9g plain, %.9g recomputed",
                              cases[k].cfg, tiled, s, a.loss[s], b.loss[s]);
            ck_assert_msg(memcmp(a.grad, b.grad, sizeof(float) * a.n) == 0, "%s tiled %d: gradients differ",
                          cases[k].cfg, tiled);
            ck_assert_msg(memcmp(a.slab, b.slab, sizeof(float) * a.n) == 0, "%s tiled %d: weights differ",
                          cases[k].cfg, tiled);
            ck_assert_msg(b.peak < a.peak, "%s: arena peak %zu recomputed, %zu plain", cases[k].cfg, b.peak, a.peak);
            if (tiled == 0)
                printf("%-42s loss %.6f  arena peak %7zu B plain, %7zu B recomputed (%.2f)\n", cases[k].cfg, a.loss[2],
                       a.peak, b.peak, (double)b.peak / (double)a.peak);
            free(a.slab);
            free(a.grad);
            free(b.slab);
            free(b.grad);
        }
    }
}
END_TEST

/* The feed-forward half in pieces (the batch is 2 sequences of 24 tokens): whole sequences (24 rows), runs within
 * a sequence with a short last one (10 rows: 10, 10, 4), and single tokens. Same losses and gradients to float
 * rounding (the weights' gradients are summed piece by piece), the same dropout masks. */
START_TEST(test_models_in_pieces) {
    static const char *const dropout[] = {"dropout", "0.2", NULL};
    const struct { const char *cfg; const char *const *kv; } cases[] = {
        {"models/ptb-dp.cfg", dropout},
        {"models/ptb-l2-tied.cfg", NULL},
        {"models/ptb-contractive.cfg", NULL},
        {"models/ablation/e-coupling-dp.cfg", NULL},
    };
    const int rows[] = {24, 10, 1};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        lipt_config cfg;
        small(&cfg, cases[k].cfg, cases[k].kv);
        run_out a;
        run_steps(&cfg, 0, 0, -1, &a);
        for (int i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
            run_out b;
            run_steps(&cfg, 1, rows[i], -1, &b);
            const double eg = tu_max_rel_err_f(b.grad, a.grad, a.n, 1e-6);
            const double ew = tu_max_rel_err_f(b.slab, a.slab, a.n, 1e-6);
            printf("%-36s pieces of %2d: loss %.9f vs %.9f, gradient off %.2e, weights off %.2e\n", cases[k].cfg,
                   rows[i], b.loss[2], a.loss[2], eg, ew);
            for (int s = 0; s < 3; s++)
                ck_assert_msg(fabs(a.loss[s] - b.loss[s]) <= 1e-6 * fabs(a.loss[s]), "%s rows %d step %d: loss %.9g vs %.9g",
                              cases[k].cfg, rows[i], s, b.loss[s], a.loss[s]);
            ck_assert_msg(eg < 1e-5, "%s rows %d: gradient off by %g", cases[k].cfg, rows[i], eg);
            ck_assert_msg(ew < 1e-5, "%s rows %d: weights off by %g", cases[k].cfg, rows[i], ew);
            free(b.slab);
            free(b.grad);
        }
        free(a.slab);
        free(a.grad);
    }
}
END_TEST

/* Deeper models: the memory kept between forward and backward no longer grows with the layers' insides. */
START_TEST(test_memory_scales) {
    static const char *const deep[] = {"n_layers", "8", "d_model", "32", "n_heads", "4", "d_ff", "128", "seq_len", "64",
                                       NULL};
    lipt_config cfg;
    small(&cfg, "models/ptb-dp.cfg", deep);
    run_out a, b;
    run_steps(&cfg, 0, 0, -1, &a);
    run_steps(&cfg, 1, 0, -1, &b);
    printf("8 layers: arena peak %zu B plain, %zu B recomputed\n", a.peak, b.peak);
    ck_assert_msg(b.peak * 3 < a.peak, "recomputation keeps %zu of %zu bytes (expected < 1/3)", b.peak, a.peak);
    free(a.slab);
    free(a.grad);
    free(b.slab);
    free(b.grad);
}
END_TEST

/* ------------------------------------------------------------------ the generic op */

typedef struct { lipt_tensor *w1, *w2; int nested; } seg_arg;

/* gelu(x W1) W2 + x: a residual segment with two parameters. */
static lipt_tensor *seg_inner(lipt_ctx *ctx, lipt_tensor *x, void *p) {
    seg_arg *a = p;
    return lipt_add(ctx, lipt_matmul(ctx, lipt_gelu(ctx, lipt_matmul(ctx, x, a->w1, 0, 0)), a->w2, 0, 0), x);
}

/* The segment twice; with `nested`, each application is itself a recomputed segment. */
static lipt_tensor *seg_outer(lipt_ctx *ctx, lipt_tensor *x, void *p) {
    seg_arg *a = p;
    if (!a->nested) return seg_inner(ctx, seg_inner(ctx, x, p), p);
    return lipt_recompute(ctx, seg_inner, lipt_recompute(ctx, seg_inner, x, p), p);
}

typedef struct { seg_arg seg; int mode; } build_arg; /* mode 0: plain, 1: recompute, 2: recompute and nested */

static lipt_tensor *build(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    build_arg *b = user;
    b->seg.w1 = in[1];
    b->seg.w2 = in[2];
    b->seg.nested = b->mode == 2;
    lipt_tensor *x = in[0];
    lipt_tensor *y = b->mode ? lipt_recompute(ctx, seg_outer, x, &b->seg) : seg_outer(ctx, x, &b->seg);
    /* x also feeds the output directly: its gradient has a part from outside the segment */
    return lipt_mul(ctx, y, lipt_add(ctx, x, x));
}

START_TEST(test_op_gradients) {
    lipt_rng r;
    lipt_rng_seed(&r, 3);
    lipt_tensor *x = tu_tensor(&r, 2, (int[]){6, 5}, 1.0f, 1);
    lipt_tensor *w1 = tu_tensor(&r, 2, (int[]){5, 7}, 0.5f, 1);
    lipt_tensor *w2 = tu_tensor(&r, 2, (int[]){7, 5}, 0.5f, 1);
    lipt_tensor *in[3] = {x, w1, w2};
    for (int mode = 0; mode <= 2; mode++) {
        build_arg b = {{0}, mode};
        char label[64];
        snprintf(label, sizeof label, "recompute mode %d", mode);
        const double e = tu_gradcheck(label, build, &b, in, 3, NULL);
        ck_assert_msg(e < 1e-2, "%s: finite-difference error %g", label, e);
    }
    /* and the three modes give the same bits */
    float *g[3][3];
    for (int mode = 0; mode <= 2; mode++) {
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 4096, 1);
        for (int i = 0; i < 3; i++) in[i]->grad = NULL; /* allocated in the arena on first use */
        build_arg b = {{0}, mode};
        lipt_tensor *out = build(&ctx, in, &b);
        lipt_backward(&ctx, lipt_sum(&ctx, out));
        for (int i = 0; i < 3; i++) {
            g[mode][i] = malloc(in[i]->numel * sizeof(float));
            memcpy(g[mode][i], in[i]->grad, in[i]->numel * sizeof(float));
            in[i]->grad = NULL;
        }
        lipt_ctx_free(&ctx);
    }
    /* The weights feed only the segment: same bits. x's gradient adds the segment's part as one sum to the part
     * from outside, a different rounding order: float rounding apart. */
    for (int mode = 1; mode <= 2; mode++)
        for (int i = 0; i < 3; i++) {
            if (i == 0) {
                const double e = tu_max_rel_err_f(g[mode][i], g[0][i], in[i]->numel, 1e-6);
                ck_assert_msg(e < 1e-6, "mode %d: x's gradient off by %g", mode, e);
            } else {
                ck_assert_msg(memcmp(g[0][i], g[mode][i], in[i]->numel * sizeof(float)) == 0,
                              "mode %d: weight %d's gradient differs", mode, i);
            }
            free(g[mode][i]);
        }
    for (int i = 0; i < 3; i++) free(g[0][i]);
    tu_free(x);
    tu_free(w1);
    tu_free(w2);
}
END_TEST

/* Nothing to record (no-grad mode, or no input needing a gradient): the segment simply runs. */
START_TEST(test_op_without_grad) {
    lipt_rng r;
    lipt_rng_seed(&r, 4);
    lipt_tensor *x = tu_tensor(&r, 2, (int[]){4, 5}, 1.0f, 0);
    lipt_tensor *w1 = tu_tensor(&r, 2, (int[]){5, 3}, 0.5f, 0);
    lipt_tensor *w2 = tu_tensor(&r, 2, (int[]){3, 5}, 0.5f, 0);
    seg_arg a = {w1, w2, 0};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 4096, 1);
    lipt_tensor *y0 = seg_outer(&ctx, x, &a);
    lipt_tensor *y1 = lipt_recompute(&ctx, seg_outer, x, &a);
    ck_assert_uint_eq(ctx.n_nodes, 0);
    ck_assert(memcmp(y0->data, y1->data, y0->numel * sizeof(float)) == 0);
    lipt_ctx_free(&ctx);
    tu_free(x);
    tu_free(w1);
    tu_free(w2);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("recompute");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_op_gradients);
    tcase_add_test(tc, test_op_without_grad);
    tcase_add_test(tc, test_models_same_bits);
    tcase_add_test(tc, test_models_in_pieces);
    tcase_add_test(tc, test_memory_scales);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
