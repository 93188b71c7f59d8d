/* Many certified spectral norms in one parallel batch (lipt_spectral_norm_ub_batch): one block's certificate per
 * thread, largest first, each the bound lipt_spectral_ub returns for its block (spectral_gram.c); and the ops that
 * go through it (lipt_spectral_norm_ub, _many: here rather than in spectral.c, whose steering this file calls). */
#include "lipt/ops.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "lipschitz/spectral_impl.h"

/* Upper bound for a float output: the nearest float may lie below. */
static float float_up(double x) {
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}

/* One certificate of a batch: block b of request k, and its work (for the schedule). */
typedef struct {
    int k, b;
    size_t work;
} cert_task;

static int cert_task_cmp(const void *x, const void *y) { /* larger work first; ties in request, block order */
    const cert_task *p = x, *q = y;
    if (p->work != q->work) return p->work < q->work ? 1 : -1;
    return p->k != q->k ? (p->k > q->k) - (p->k < q->k) : (p->b > q->b) - (p->b < q->b);
}

static void cert_task_run(const lipt_spectral_req *req, const cert_task *t, lipt_ub_scratch s, lipt_tensor **out) {
    const lipt_spectral_req *r = &req[t->k];
    const int R = r->w->shape[0], C = r->w->shape[1], cb = C / r->n_blocks;
    float *u = r->u + (size_t)t->b * R, *v = r->v + (size_t)t->b * cb;
    const float *start = cb > R ? u : v;
    double *ritz = r->steer ? s.pv : NULL;
    out[t->k]->data[t->b] =
        float_up(lipt_spectral_ub_core(r->w->data, R, C, t->b * cb, cb, r->gram_iters, start, s, ritz));
    if (ritz) lipt_spectral_steer_block(r->w->data, R, C, t->b, cb, ritz, ritz + (cb > R ? cb : R), u, v);
}

void lipt_spectral_norm_ub_batch(lipt_ctx *ctx, int n, const lipt_spectral_req *req, lipt_tensor **out) {
    LIPT_CHECK(n >= 0, "spectral_norm_ub_batch: %d requests", n);
    lipt_node **node = lipt_arena_alloc(&ctx->arena, (size_t)(n > 0 ? n : 1) * sizeof *node);
    int n_tasks = 0;
    for (int k = 0; k < n; k++) {
        const lipt_spectral_req *r = &req[k];
        lipt_spectral_check_args("spectral_norm_ub", r->w, r->u, r->v, r->n_blocks, 0);
        lipt_spectral_ub_check(r->w->shape[0], r->w->shape[1], 0, r->w->shape[1] / r->n_blocks, r->gram_iters);
        out[k] = lipt_tensor_1d(ctx, r->n_blocks);
        node[k] = lipt_record(ctx, LIPT_OP_SPECTRAL_NORM_UB, out[k], 1, (lipt_tensor *[]){r->w});
        n_tasks += r->n_blocks;
    }
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    cert_task *task = lipt_arena_alloc(&ctx->arena, (size_t)(n_tasks > 0 ? n_tasks : 1) * sizeof *task);
    size_t max_m = 0, max_n = 0, work = 0;
    int max_t = 0, chol = 0, steer = 0;
    for (int k = 0, t = 0; k < n; k++) {
        const int R = req[k].w->shape[0], cb = req[k].w->shape[1] / req[k].n_blocks, g = req[k].gram_iters;
        const size_t nn = (size_t)(cb > R ? R : cb), mm = (size_t)(cb > R ? cb : R), rc = (size_t)R * cb;
        max_m = mm > max_m ? mm : max_m;
        max_n = nn > max_n ? nn : max_n;
        max_t = (g & ~LIPT_SPECTRAL_CHOLESKY) > max_t ? (g & ~LIPT_SPECTRAL_CHOLESKY) : max_t;
        chol |= (g & LIPT_SPECTRAL_CHOLESKY) != 0;
        steer |= req[k].steer != 0;
        for (int b = 0; b < req[k].n_blocks; b++, t++) task[t] = (cert_task){k, b, rc * nn};
        work += (size_t)req[k].n_blocks * rc * nn;
    }
    /* The certificates side by side, one per thread, largest first from a dynamic schedule: a model's weights give
     * a few large ones (W1, W2, W^O) and many small head blocks, and one after the other the large ones' serial
     * steps (scaling, mirroring, Lanczos, the factorisation) idled the second thread. Inside the region gram_upper
     * runs its two products one after the other, which gives the bits of its two-thread split (which product forms
     * an entry depends only on the order), and lipt_spectral_gram runs on one thread (its entries do not depend on
     * the split): each bound is the one lipt_spectral_ub returns for its block. */
    qsort(task, (size_t)n_tasks, sizeof *task, cert_task_cmp);
    const int par = n_tasks > 1 && lipt_blas_nests_safely() && work >= LIPT_SPECTRAL_PAR_WORK && !omp_in_parallel();
    const int nt = par ? omp_get_max_threads() : 1;
    lipt_ub_scratch *sc = lipt_arena_alloc(&ctx->arena, (size_t)nt * sizeof *sc);
    for (int i = 0; i < nt; i++) sc[i] = lipt_ub_scratch_alloc_for(&ctx->arena, max_m, max_n, max_t, chol, steer);
    if (par) {
#pragma omp parallel num_threads(nt)
        {
            const lipt_ub_scratch s = sc[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < n_tasks; t++) cert_task_run(req, &task[t], s, out);
        }
    } else { /* not in a region: gram_upper's two-thread split would be a nested one, for which libgomp starts and
              * ends fresh threads every time (15 times slower for one 256×1024 block) */
        for (int t = 0; t < n_tasks; t++) cert_task_run(req, &task[t], sc[0], out);
    }
    lipt_arena_release(&ctx->arena, mk);
    lipt_profile_op_end(ctx, LIPT_OP_SPECTRAL_NORM_UB); /* it recorded before computing: the batch is its forward */
    for (int k = 0; k < n; k++)
        if (node[k])
            lipt_spectral_save_uv(ctx, node[k], req[k].u, req[k].v, req[k].n_blocks, req[k].w->shape[0],
                                  req[k].w->shape[1]);
}

/* iarg, saved, saved2: as spectral_norm (lipt_spectral_save_uv). */
lipt_tensor *lipt_spectral_norm_ub(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int power_iters,
                                   int gram_iters) {
    lipt_spectral_check_args("spectral_norm_ub", w, u, v, n_blocks, power_iters);
    LIPT_CHECK(gram_iters >= 0, "spectral_norm_ub: gram_iters %d < 0", gram_iters);
    lipt_spectral_power_all(ctx, w->data, w->shape[0], w->shape[1], n_blocks, u, v, power_iters);
    lipt_tensor *out;
    lipt_spectral_norm_ub_batch(ctx, 1, &(lipt_spectral_req){w, u, v, n_blocks, gram_iters, 0}, &out);
    return out;
}

void lipt_spectral_norm_ub_many(lipt_ctx *ctx, int n, lipt_tensor *const *w, float *const *u, float *const *v,
                                int power_iters, int gram_iters, lipt_tensor **out) {
    LIPT_CHECK(n >= 0 && n <= LIPT_SPECTRAL_MANY_MAX, "spectral_norm_ub_many: %d matrices (at most %d)", n,
               LIPT_SPECTRAL_MANY_MAX);
    LIPT_CHECK(gram_iters >= 0, "spectral_norm_ub_many: gram_iters %d < 0", gram_iters);
    lipt_spectral_req req[LIPT_SPECTRAL_MANY_MAX];
    for (int i = 0; i < n; i++) {
        lipt_spectral_check_args("spectral_norm_ub_many", w[i], u[i], v[i], 1, power_iters);
        lipt_spectral_power_all(ctx, w[i]->data, w[i]->shape[0], w[i]->shape[1], 1, u[i], v[i], power_iters);
        req[i] = (lipt_spectral_req){w[i], u[i], v[i], 1, gram_iters, 0};
    }
    lipt_spectral_norm_ub_batch(ctx, n, req, out);
}
