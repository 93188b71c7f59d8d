/* Spectral norms by power iteration (lipt_spectral_norm, per column block of a matrix, on persistent vectors) and
 * their backward, shared with the certified norms (lipt_spectral_norm_ub, _many: power rounds, then the certificates
 * of spectral_cert.c); the steered pair of a certified block (its Lanczos direction). */
#include "lipt/ops.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "lipschitz/spectral_impl.h"

/* Deterministic dense start in [-1, 1) (splitmix64 of the index): a generic direction is very unlikely to be
 * orthogonal to the top singular vector, unlike a basis vector. */
static double reseed_val(int which, int b, int j) {
    uint64_t z = ((uint64_t)(unsigned)(2 * b + which) << 32 | (uint64_t)(unsigned)j) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

/* Scales x to unit length; returns 0 (leaving x alone) when the norm is zero or not finite. */
static int normalise(double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    double nrm = sqrt(s);
    if (!(nrm > 0) || !isfinite(nrm)) return 0;
    for (int i = 0; i < n; i++) x[i] /= nrm;
    return 1;
}

/* The products of power iteration, in double. Each output element is summed in the order of the plain loop (so
 * the bits are those of one running sum), but the loops work on several independent sums at a time: a single
 * running sum in double waits one addition latency per element (gcc may not reorder it), which made these
 * products latency-bound. */
#define MV_ROWS 4 /* the loops below are written out for four rows */
_Static_assert(MV_ROWS == 4, "block_mv and block_sigma spell out four rows");

/* y[R] = W_b x, W_b the R×cb block at column offset c0 of a row-major [R, C] matrix: MV_ROWS rows at a time,
 * each row's dot product in column order. */
static void block_mv(const float *w, int R, int C, int c0, int cb, const double *x, double *y, int par) {
    const int ng = (R + MV_ROWS - 1) / MV_ROWS;
#pragma omp parallel for schedule(static) if (par && (size_t)R * cb >= LIPT_SPECTRAL_PAR_WORK)
    for (int gi = 0; gi < ng; gi++) {
        const int i0 = gi * MV_ROWS;
        if (i0 + MV_ROWS <= R) {
            const float *r0 = w + (size_t)i0 * C + c0, *r1 = r0 + C, *r2 = r1 + C, *r3 = r2 + C;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int j = 0; j < cb; j++) {
                s0 += (double)r0[j] * x[j];
                s1 += (double)r1[j] * x[j];
                s2 += (double)r2[j] * x[j];
                s3 += (double)r3[j] * x[j];
            }
            y[i0] = s0, y[i0 + 1] = s1, y[i0 + 2] = s2, y[i0 + 3] = s3;
        } else {
            for (int i = i0; i < R; i++) {
                const float *row = w + (size_t)i * C + c0;
                double s = 0;
                for (int j = 0; j < cb; j++) s += (double)row[j] * x[j];
                y[i] = s;
            }
        }
    }
}

/* Columns per chunk of block_mtv: the chunk's sums (4 KiB of doubles) stay in L1 while the rows stream through. */
#define MTV_CHUNK 512

/* y[cb] = W_bᵀ x, streaming rows (each y[j] summed in row order, one fused multiply-add per row as before: the same
 * bits as register-held sums of 32 columns); threads take column chunks so each writes its own slice of y. Chunks of
 * 32 columns read each row's 128 bytes at a stride of the row length (4 KiB for W1), which made this product about
 * three times slower than the row-wise block_mv on the same matrix. */
static void block_mtv(const float *w, int R, int C, int c0, int cb, const double *x, double *y, int par) {
    const int n_chunks = (cb + MTV_CHUNK - 1) / MTV_CHUNK;
#pragma omp parallel for schedule(static) if (par && n_chunks > 1 && (size_t)R * cb >= LIPT_SPECTRAL_PAR_WORK)
    for (int k = 0; k < n_chunks; k++) {
        const int j0 = k * MTV_CHUNK, j1 = j0 + MTV_CHUNK < cb ? j0 + MTV_CHUNK : cb;
        const int jv = j0 + (j1 - j0) / LIPT_VDW * LIPT_VDW;
        for (int j = j0; j < j1; j++) y[j] = 0;
        for (int i = 0; i < R; i++) {
            const float *row = w + (size_t)i * C + c0;
            const double ui = x[i];
            for (int j = j0; j < jv; j += LIPT_VDW) {
                lipt_vdh a;
                memcpy(&a, y + j, sizeof a);
                a += lipt_vdh_loadf(row + j) * ui;
                memcpy(y + j, &a, sizeof a);
            }
            for (int j = jv; j < j1; j++) y[j] += (double)row[j] * ui;
        }
    }
}

/* `iters` rounds v ← W_bᵀu/|.|, u ← W_b v/|.| for block b, in double, written back to the float vectors. */
static void power_block(const float *w, int R, int C, int b, int cb, float *u, float *v, int iters, double *du,
                        double *dv, int par) {
    int c0 = b * cb;
    for (int i = 0; i < R; i++) du[i] = u[i];
    for (int it = 0; it < iters; it++) {
        block_mtv(w, R, C, c0, cb, du, dv, par);
        if (!normalise(dv, cb)) {
            /* u is zero (fresh buffers) or orthogonal to W_b's range: restart from a fixed dense vector */
            for (int j = 0; j < cb; j++) dv[j] = reseed_val(0, b, j);
            normalise(dv, cb);
        }
        block_mv(w, R, C, c0, cb, dv, du, par);
        if (!normalise(du, R)) {
            /* v in W_b's null space, or W_b = 0: restart u from a fixed dense vector (the next round's
             * v = W_bᵀu is then generic); for W_b = 0 any unit pair is a valid subgradient */
            for (int i = 0; i < R; i++) du[i] = reseed_val(1, b, i);
            normalise(du, R);
        }
    }
    if (iters > 0) {
        for (int i = 0; i < R; i++) u[i] = (float)du[i];
        for (int j = 0; j < cb; j++) v[j] = (float)dv[j];
    }
}

/* sigma_b = u_bᵀ W_b v_b with the stored float vectors, so that d sigma / dW = u vᵀ holds exactly (the row dot
 * products MV_ROWS at a time, each in column order, then summed in row order). */
static double block_sigma(const float *w, int R, int C, int c0, int cb, const float *u, const float *v) {
    double s = 0;
    int i = 0;
    for (; i + MV_ROWS <= R; i += MV_ROWS) {
        const float *r0 = w + (size_t)i * C + c0, *r1 = r0 + C, *r2 = r1 + C, *r3 = r2 + C;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int j = 0; j < cb; j++) {
            a0 += (double)r0[j] * v[j];
            a1 += (double)r1[j] * v[j];
            a2 += (double)r2[j] * v[j];
            a3 += (double)r3[j] * v[j];
        }
        s += (double)u[i] * a0;
        s += (double)u[i + 1] * a1;
        s += (double)u[i + 2] * a2;
        s += (double)u[i + 3] * a3;
    }
    for (; i < R; i++) {
        const float *row = w + (size_t)i * C + c0;
        double r = 0;
        for (int j = 0; j < cb; j++) r += (double)row[j] * v[j];
        s += (double)u[i] * r;
    }
    return s;
}

/* Shape and argument checks shared by spectral_norm and spectral_norm_ub (`op` names the caller in messages). */
void lipt_spectral_check_args(const char *op, lipt_tensor *w, const float *u, const float *v, int n_blocks, int iters) {
    char sw[64];
    LIPT_CHECK(w->ndim == 2, "%s: w must be 2-D, got %s", op, lipt_shape_str(w, sw, 64));
    int R = w->shape[0], C = w->shape[1];
    LIPT_CHECK(R > 0 && C > 0, "%s: empty w %s", op, lipt_shape_str(w, sw, 64));
    LIPT_CHECK(n_blocks >= 1 && C % n_blocks == 0, "%s: %d blocks do not divide the %d columns of %s", op, n_blocks,
               C, lipt_shape_str(w, sw, 64));
    LIPT_CHECK(iters >= 0, "%s: iters %d < 0", op, iters);
    LIPT_CHECK(u && v, "%s: NULL power-iteration vector", op);
}

/* `iters` power rounds on every block's persistent vectors (threads over blocks when there are several). */
void lipt_spectral_power_all(lipt_ctx *ctx, const float *w, int R, int C, int n_blocks, float *u, float *v,
                             int iters) {
    if (iters <= 0) return;
    int cb = C / n_blocks;
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    double *du = lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * R * sizeof(double));
    double *dv = lipt_arena_alloc(&ctx->arena, (size_t)C * sizeof(double));
    int par_blocks = n_blocks > 1 && (size_t)R * C * (size_t)iters >= LIPT_SPECTRAL_PAR_WORK;
    if (par_blocks) {
#pragma omp parallel for schedule(static)
        for (int b = 0; b < n_blocks; b++)
            power_block(w, R, C, b, cb, u + (size_t)b * R, v + (size_t)b * cb, iters, du + (size_t)b * R,
                        dv + (size_t)b * cb, 0);
    } else {
        /* not inside a (one-thread) parallel region: the products' own loops then run on the thread pool, where
         * from a nested region libgomp would start and end fresh threads for every one of them */
        for (int b = 0; b < n_blocks; b++)
            power_block(w, R, C, b, cb, u + (size_t)b * R, v + (size_t)b * cb, iters, du + (size_t)b * R,
                        dv + (size_t)b * cb, 1);
    }
    lipt_arena_release(&ctx->arena, mk);
}

static size_t job_block_size(const lipt_power_job *J) { return (size_t)J->R * (size_t)(J->C / J->n_blocks); }

void lipt_spectral_power_jobs(const lipt_power_job *jobs, int n_jobs, int iters) {
    if (iters <= 0 || n_jobs <= 0) return;
    int n_tasks = 0, max_r = 0, max_cb = 0;
    size_t work = 0;
    for (int k = 0; k < n_jobs; k++) {
        const lipt_power_job *J = &jobs[k];
        LIPT_CHECK(J->w && J->u && J->v && J->R > 0 && J->C > 0 && J->n_blocks >= 1 && J->C % J->n_blocks == 0,
                   "spectral_power_jobs: job %d: [%d, %d] in %d blocks", k, J->R, J->C, J->n_blocks);
        n_tasks += J->n_blocks;
        max_r = J->R > max_r ? J->R : max_r;
        max_cb = J->C / J->n_blocks > max_cb ? J->C / J->n_blocks : max_cb;
        work += (size_t)J->R * J->C;
    }
    /* (job, block) pairs, largest blocks first so that a dynamic schedule ends evenly */
    int *task = lipt_xmalloc(sizeof(int) * 2 * (size_t)n_tasks);
    int t = 0;
    for (int k = 0; k < n_jobs; k++)
        for (int b = 0; b < jobs[k].n_blocks; b++, t++) task[2 * t] = k, task[2 * t + 1] = b;
    for (int a = 1; a < n_tasks; a++) { /* insertion sort by block size, descending; stable */
        const int k = task[2 * a], b = task[2 * a + 1];
        const size_t sz = job_block_size(&jobs[k]);
        int c = a;
        while (c > 0 && job_block_size(&jobs[task[2 * c - 2]]) < sz) {
            task[2 * c] = task[2 * c - 2], task[2 * c + 1] = task[2 * c - 1];
            c--;
        }
        task[2 * c] = k, task[2 * c + 1] = b;
    }
#pragma omp parallel if (n_tasks > 1 && work * (size_t)iters >= LIPT_SPECTRAL_PAR_WORK)
    {
        double *du = lipt_xmalloc(sizeof(double) * ((size_t)max_r + (size_t)max_cb)), *dv = du + max_r;
#pragma omp for schedule(dynamic, 1)
        for (int a = 0; a < n_tasks; a++) {
            const lipt_power_job *J = &jobs[task[2 * a]];
            const int b = task[2 * a + 1], cb = J->C / J->n_blocks;
            power_block(J->w, J->R, J->C, b, cb, J->u + (size_t)b * J->R, J->v + (size_t)b * cb, iters, du, dv, 0);
        }
        free(du);
    }
    free(task);
}

/* Backward state of both ops: the persistent vectors move on at the next call, and backward needs the ones used
 * here.  iarg: 0 n_blocks, 1 R, 2 C.  saved: u copy [n_blocks*R], saved2: v copy [C]. */
void lipt_spectral_save_uv(lipt_ctx *ctx, lipt_node *node, const float *u, const float *v, int n_blocks, int R, int C) {
    float *su = lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * R * sizeof(float));
    float *sv = lipt_arena_alloc(&ctx->arena, (size_t)C * sizeof(float));
    memcpy(su, u, (size_t)n_blocks * R * sizeof(float));
    memcpy(sv, v, (size_t)C * sizeof(float));
    node->saved = su;
    node->saved2 = sv;
    node->iarg[0] = n_blocks;
    node->iarg[1] = R;
    node->iarg[2] = C;
}

/* dW_b += dsigma_b u_b v_bᵀ with the saved vectors. */
static void uv_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dw = lipt_grad_of(ctx, node->in[0]);
    if (!dw) return;
    int n_blocks = node->iarg[0], R = node->iarg[1], C = node->iarg[2], cb = C / n_blocks;
    const float *su = node->saved, *sv = node->saved2, *g = node->out->grad;
#pragma omp parallel for schedule(static) if ((size_t)R * C >= LIPT_SPECTRAL_PAR_WORK)
    for (int i = 0; i < R; i++) {
        float *row = dw + (size_t)i * C;
        for (int b = 0; b < n_blocks; b++) {
            float gu = g[b] * su[(size_t)b * R + i];
            if (gu == 0) continue;
            const float *vb = sv + (size_t)b * cb;
            float *rb = row + (size_t)b * cb;
            for (int j = 0; j < cb; j++) rb[j] += gu * vb[j];
        }
    }
}

lipt_tensor *lipt_spectral_norm(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int iters) {
    lipt_spectral_check_args("spectral_norm", w, u, v, n_blocks, iters);
    int R = w->shape[0], C = w->shape[1], cb = C / n_blocks;

    lipt_tensor *out = lipt_tensor_1d(ctx, n_blocks);
    lipt_node *node = lipt_record(ctx, LIPT_OP_SPECTRAL_NORM, out, 1, (lipt_tensor *[]){w});

    lipt_spectral_power_all(ctx, w->data, R, C, n_blocks, u, v, iters);
#pragma omp parallel for schedule(static) if (n_blocks > 1 && (size_t)R * C >= LIPT_SPECTRAL_PAR_WORK)
    for (int b = 0; b < n_blocks; b++)
        out->data[b] = (float)block_sigma(w->data, R, C, b * cb, cb, u + (size_t)b * R, v + (size_t)b * cb);

    if (node) lipt_spectral_save_uv(ctx, node, u, v, n_blocks, R, C);
    return out;
}

void lipt_spectral_norm_backward(lipt_ctx *ctx, lipt_node *node) { uv_backward(ctx, node); }

/* y[R] = W_b x as block_mv, but each row's sum in LIPT_VDW lanes with FMA (widened floats times double), the lanes
 * then added and the tail last: an order of its own, for the steered pair only (a direction for gradients, where
 * block_mv keeps the power iteration's bits); a quarter of the time of block_mv's one running sum per row. */
static void block_mv_lanes(const float *w, int R, int C, int c0, int cb, const double *x, double *y) {
    const int jv = cb / LIPT_VDW * LIPT_VDW;
    int i = 0;
    for (; i + MV_ROWS <= R; i += MV_ROWS) {
        const float *r0 = w + (size_t)i * C + c0, *r1 = r0 + C, *r2 = r1 + C, *r3 = r2 + C;
        lipt_vdh s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (int j = 0; j < jv; j += LIPT_VDW) {
            lipt_vdh xv;
            memcpy(&xv, x + j, sizeof xv);
            s0 = lipt_vdh_fma(lipt_vdh_loadf(r0 + j), xv, s0);
            s1 = lipt_vdh_fma(lipt_vdh_loadf(r1 + j), xv, s1);
            s2 = lipt_vdh_fma(lipt_vdh_loadf(r2 + j), xv, s2);
            s3 = lipt_vdh_fma(lipt_vdh_loadf(r3 + j), xv, s3);
        }
        double t0 = 0, t1 = 0, t2 = 0, t3 = 0;
        for (int l = 0; l < LIPT_VDW; l++) t0 += s0[l], t1 += s1[l], t2 += s2[l], t3 += s3[l];
        for (int j = jv; j < cb; j++)
            t0 += (double)r0[j] * x[j], t1 += (double)r1[j] * x[j], t2 += (double)r2[j] * x[j], t3 += (double)r3[j] * x[j];
        y[i] = t0, y[i + 1] = t1, y[i + 2] = t2, y[i + 3] = t3;
    }
    for (; i < R; i++) {
        const float *row = w + (size_t)i * C + c0;
        double t = 0;
        for (int j = 0; j < cb; j++) t += (double)row[j] * x[j];
        y[i] = t;
    }
}

/* A steered block's pair (lipt_spectral_req.steer): the Ritz vector y (unit, of the Gram side) and the other side
 * W_b v or W_bᵀ u by one product, normalised, into the block's float u_b and v_b; without a Ritz vector (the proof
 * came from Gram iteration, or the block is zero or not finite) one power round from the stored pair. */
void lipt_spectral_steer_block(const float *w, int R, int C, int b, int cb, double *y, double *x, float *u, float *v) {
    const int wide = cb > R, nx = wide ? cb : R, ny = wide ? R : cb;
    if (isfinite(y[0])) {
        if (wide) block_mtv(w, R, C, b * cb, cb, y, x, 0); /* y = u_b: v_b = W_bᵀ u_b / |.| */
        else block_mv_lanes(w, R, C, b * cb, cb, y, x);   /* y = v_b: u_b = W_b v_b / |.| */
        if (normalise(x, nx)) {
            float *fy = wide ? u : v, *fx = wide ? v : u;
            for (int i = 0; i < ny; i++) fy[i] = (float)y[i];
            for (int i = 0; i < nx; i++) fx[i] = (float)x[i];
            return;
        }
    }
    power_block(w, R, C, b, cb, u, v, 1, x, x + R, 0);
}

/* The gradient of sigma_b with the power vectors held fixed (u_bᵀ W_b v_b -> sigma_b), not of the bound itself. */
void lipt_spectral_norm_ub_backward(lipt_ctx *ctx, lipt_node *node) { uv_backward(ctx, node); }
