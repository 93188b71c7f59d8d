/* lipt bench's checks of a --memory mode against store-all: the paired step time (each timed run in the mode followed
 * by one in store-all, on a context of its own so that each arena's high-water mark stays that mode's) and the
 * gradient check (one step of each from the same initial weights and batch, compared per parameter tensor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "lipt/optim.h"
#include "lipt/train.h"

/* The store-all context of --paired-memory: as the bench's own, without recomputation or reconstruction. */
lipt_status bench_store_ctx_init(lipt_ctx *sctx, const bench *b, lipt_error *err) {
    lipt_ctx_init(sctx, (size_t)64 << 20, b->seed * 2654435761u + 1);
    sctx->training = 1;
    sctx->recompute = 0;
    sctx->rev = NULL;
    return lipt_ctx_set_precision(sctx, b->cfg.precision, err);
}

/* Ratios of the mode's seconds to store-all's, run by run: their median, and store-all's arena peak. */
void bench_finish_memory_pair(bench *b, const double *sec_mode, const double *sec_store, const lipt_ctx *sctx) {
    double *ratio = lipt_xmalloc(sizeof(double) * (size_t)b->runs);
    for (int r = 0; r < b->runs; r++) ratio[r] = sec_mode[r] / sec_store[r];
    b->memory_ratio = bench_median(ratio, b->runs);
    b->store_ms = 1e3 * bench_median(sec_store, b->runs) / b->steps;
    free(ratio);
    b->arena_store = (double)sctx->arena.peak / 1048576.0;
}

/* One training step of m (fresh: b's config and initialisation) on batch 0 with learning rate 0 and no clipping, so
 * that m's gradients are those of the initial weights; rev NULL: store-all. */
static lipt_status one_step(const bench *b, lipt_model *m, int recompute, lipt_reversible *rev, lipt_error *err) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)64 << 20, b->seed * 2654435761u + 1);
    ctx.training = 1;
    ctx.recompute = recompute;
    ctx.rev = rev;
    lipt_adamw_config acfg = lipt_adamw_defaults();
    acfg.lr = 0;
    lipt_adamw opt;
    lipt_adamw_init(&opt, &acfg);
    int32_t *in = lipt_xmalloc(sizeof(int32_t) * (size_t)b->B * b->T);
    int32_t *tg = lipt_xmalloc(sizeof(int32_t) * (size_t)b->B * b->T);
    bench_batch_ids(b, 0, in, tg);
    lipt_status st = lipt_ctx_set_precision(&ctx, b->cfg.precision, err);
    if (st == LIPT_OK) {
        const lipt_step_opts so = {0.0, 0.0, b->cfg.power_iters, NULL, 0, 0, NULL, 0};
        lipt_step_result sr;
        st = lipt_train_step(&ctx, m, &opt, in, tg, b->B, b->T, &so, &sr, err);
    }
    free(in);
    free(tg);
    lipt_ctx_free(&ctx);
    return st;
}

/* Per parameter tensor: cosine and relative error of the mode's gradient gm against store-all's gs. */
static void compare(grad_check *g, const lipt_params *ps, const float *gs, const float *gm) {
    g->done = 1;
    g->worst_cos = 1;
    g->worst_rel = 0;
    g->tensors = 0;
    for (int i = 0; i < ps->n; i++) {
        if (ps->flags[i] & LIPT_PARAM_BUFFER) continue;
        const lipt_tensor *t = ps->list[i];
        const size_t off = (size_t)(t->data - ps->value);
        double ab = 0, aa = 0, bb = 0, dd = 0;
        for (size_t j = 0; j < t->numel; j++) {
            const double x = gs[off + j], y = gm[off + j];
            ab += x * y, aa += x * x, bb += y * y, dd += (x - y) * (x - y);
        }
        if (aa == 0 && bb == 0) continue; /* a tensor the loss does not reach: nothing to compare */
        const double cosv = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0, rel = aa > 0 ? sqrt(dd / aa) : INFINITY;
        g->tensors++;
        if (cosv < g->worst_cos) {
            g->worst_cos = cosv;
            snprintf(g->worst_cos_name, sizeof g->worst_cos_name, "%s", t->name);
        }
        if (!(rel <= g->worst_rel)) {
            g->worst_rel = rel;
            snprintf(g->worst_rel_name, sizeof g->worst_rel_name, "%s", t->name);
        }
    }
}

lipt_status bench_grad_check(bench *b, lipt_error *err) {
    lipt_reversible rev; /* the bench's knobs, statistics of its own */
    lipt_reversible_defaults(&rev);
    rev.tol = b->rev.tol;
    rev.tol_lowp = b->rev.tol_lowp;
    rev.accel = b->rev.accel;
    rev.max_iter = b->rev.max_iter;
    rev.keep_every = b->rev.keep_every;
    lipt_model ms, mm;
    lipt_status st = lipt_model_init(&ms, &b->cfg, err);
    if (st != LIPT_OK) return st;
    if ((st = lipt_model_init(&mm, &b->cfg, err)) != LIPT_OK) {
        lipt_model_free(&ms);
        return st;
    }
    st = one_step(b, &ms, 0, NULL, err);
    if (st == LIPT_OK)
        st = one_step(b, &mm, b->memory == CLI_MEMORY_RECOMPUTE, b->memory == CLI_MEMORY_INVERT ? &rev : NULL, err);
    if (st == LIPT_OK) {
        compare(&b->gcheck, &ms.params, ms.params.grad, mm.params.grad);
        b->gcheck.evals_per_inversion = rev.inversions ? (double)rev.evaluations / (double)rev.inversions : 0;
        b->gcheck.worst_bound = rev.inversions ? rev.worst_bound : 0;
    }
    lipt_model_free(&ms);
    lipt_model_free(&mm);
    return st;
}
