/* spectral_norm: per-column-block spectral norms of a matrix by power iteration on persistent vectors, and backward.
 * spectral_ub / spectral_norm_ub: certified upper bounds of the same norms by Gram iteration. */
#include "lipt/ops.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "lipschitz/spectral_impl.h"

/* Work (multiply-adds) above which a loop is worth a thread team. */
#define SPEC_PAR_WORK ((size_t)1 << 17)

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
#pragma omp parallel for schedule(static) if (par && (size_t)R * cb >= SPEC_PAR_WORK)
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
#pragma omp parallel for schedule(static) if (par && n_chunks > 1 && (size_t)R * cb >= SPEC_PAR_WORK)
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
static void check_args(const char *op, lipt_tensor *w, const float *u, const float *v, int n_blocks, int iters) {
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
static void power_all(lipt_ctx *ctx, const float *w, int R, int C, int n_blocks, float *u, float *v, int iters) {
    if (iters <= 0) return;
    int cb = C / n_blocks;
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    double *du = lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * R * sizeof(double));
    double *dv = lipt_arena_alloc(&ctx->arena, (size_t)C * sizeof(double));
    int par_blocks = n_blocks > 1 && (size_t)R * C * (size_t)iters >= SPEC_PAR_WORK;
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
#pragma omp parallel if (n_tasks > 1 && work * (size_t)iters >= SPEC_PAR_WORK)
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
static void save_uv(lipt_ctx *ctx, lipt_node *node, const float *u, const float *v, int n_blocks, int R, int C) {
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
#pragma omp parallel for schedule(static) if ((size_t)R * C >= SPEC_PAR_WORK)
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
    check_args("spectral_norm", w, u, v, n_blocks, iters);
    int R = w->shape[0], C = w->shape[1], cb = C / n_blocks;

    lipt_tensor *out = lipt_tensor_1d(ctx, n_blocks);
    lipt_node *node = lipt_record(ctx, LIPT_OP_SPECTRAL_NORM, out, 1, (lipt_tensor *[]){w});

    power_all(ctx, w->data, R, C, n_blocks, u, v, iters);
#pragma omp parallel for schedule(static) if (n_blocks > 1 && (size_t)R * C >= SPEC_PAR_WORK)
    for (int b = 0; b < n_blocks; b++)
        out->data[b] = (float)block_sigma(w->data, R, C, b * cb, cb, u + (size_t)b * R, v + (size_t)b * cb);

    if (node) save_uv(ctx, node, u, v, n_blocks, R, C);
    return out;
}

void lipt_spectral_norm_backward(lipt_ctx *ctx, lipt_node *node) { uv_backward(ctx, node); }

/* ---- Certified upper bound by Gram iteration ----
 *
 * Why the returned double is >= the exact sigma of the float block A (m×n after choosing the smaller Gram side,
 * n <= m), assuming IEEE arithmetic with round-to-nearest: u = 2^-53 in double, u_f = 2^-24 in float.  Notation:
 * rho = spectral radius; for a symmetric X, rho(X) = ‖X‖₂ <= ‖X‖_F, ‖|X|‖₂ <= ‖|X|‖_∞ (the largest row sum of |X|:
 * a symmetric matrix's row and column sums agree), ‖X‖₂ <= ‖|X|‖₂, 0 <= X <= Y entrywise gives ‖X‖₂ <= ‖Y‖₂, and
 * Weyl gives rho(X) <= rho(X + Y) + ‖Y‖₂ for symmetric Y.  gamma_k = k u / (1 - k u) (gamma_f_k with u_f): any order
 * of a k-term dot product, with or without FMA, errs by <= gamma_k Σ|a||b| plus, for products that underflow, at
 * most k half-units of the smallest subnormal.
 *  - H_0 = fl(AᵀA) in double (lipt_spectral_gram: each entry m exact float products summed in double in some
 *    order; the upper triangle mirrored: symmetric).  The float entries are exact in double, so
 *    ‖H_0 - AᵀA‖₂ <= gamma_m ‖|A|ᵀ|A|‖_F <= gamma_m ‖A‖_F² =: e_0 and sigma² <= rho(H_0) + e_0.
 *  - Level 0: G_0 = fl_f(2^-e_0 H_0), the scaled matrix (exact in double) rounded to float: symmetric, and
 *    ‖2^-e_0 H_0 - G_0‖₂ <= u_f / (1 - u_f) min(‖G_0‖_F, ‖|G_0|‖_∞) + n 2^-150 =: d_0 (each entry of 2^-e_0 H_0 is
 *    off by <= u_f of itself, hence by <= u_f / (1 - u_f) of its rounded value, or by <= 2^-150 when subnormal).
 *  - Squarings, in float: X_k = fl_f(G_k G_k) (gram_upper: ssyrk, or two ssyrk and an sgemm; mirrored, symmetric),
 *    F_k = X_k - G_k² with ‖F_k‖₂ <= gamma_f_n ‖|G_k| |G_k|‖₂ + n² 2^-149 <= gamma_f_n min(‖G_k‖_F, ‖|G_k|‖_∞)² +
 *    n² 2^-149 =: f_k; then G_{k+1} = 2^-e_{k+1} X_k, exact but for subnormal results: off by d_{k+1} = n 2^-149.
 *  - Hence rho(H_0) <= 2^e_0 (rho(G_0) + d_0), rho(G_k) = sqrt(rho(G_k²)) <= sqrt(rho(X_k) + f_k) and
 *    rho(X_k) <= 2^e_{k+1} (rho(G_{k+1}) + d_{k+1}), and at the end rho(G_t) <= ‖G_t‖_F.  Nesting these from t
 *    down to 0 gives the bound; without the error terms it is ‖H_0^(2^t)‖_F^(1/2^(t+1)), the Gram iteration
 *    bound itself.  (t = 0: sigma² <= ‖H_0‖_F + e_0, no float level.)
 *  - Each scalar step (sum, product, sqrt) is rounded once to nearest and then moved up one ulp (lipt_ub_up()),
 *    which is >= the exact result; sums of N nonnegative terms (squares, absolute values; taken in lanes, an order whose error is
 *    bounded as any other's) are inflated by 1/(1 - gamma_N) <= 1 + 2 gamma_N plus an underflow slack.  ldexp by
 *    2^e_k is exact unless the result is subnormal (then moved up too).
 * Rescaling so that ‖G_k‖_F is in [1/2, 1) (up to the rounding to float) keeps every level near unit size
 * (rho(G_k) >= 1/(2 sqrt n)), so neither the matrices nor the nested bound overflow or underflow for any t; H_0
 * itself is at most m (2^128)² <= 2^288 and at least 2^-298 when nonzero, far inside double's range.
 * Why the squarings are in float: they are two thirds of the certificate's work at the invertible models' shapes
 * (256×1024, t = 8) and run twice as fast; the first product, whose error term would be gamma_f_m ‖|A|ᵀ|A|‖, stays
 * in double.  Size of the margin over the exact Gram bound: e_0 / sigma² <= gamma_m r as before (r = rank;
 * 1e-11), d_0 adds at most u_f sqrt(n) / 2 relative, and f_k / rho(G_k)² <= gamma_f_n min(r_s, κ²) (r_s =
 * ‖G_k‖_F² / rho², κ = ‖|G_k|‖_∞ / rho, both small for the Gram matrices met in practice: a flat spectrum makes G_k
 * a multiple of the identity, κ = 1), weighted 2^-(k+2) on the way back: the tests measure 3e-6 on rank-one
 * blocks, 3e-5 on the 1024 identity and up to 1e-4 on Gaussian blocks of order 256 (whose dense Gram matrices have
 * κ² near 10); cf. the Gram bound's own slack r^(1/2^(t+2)) - 1. */

/* Lanes of the sums of squares below: four vectors of doubles. */
#define SPEC_VD LIPT_VDW
#define SPEC_LANES (4 * SPEC_VD)

/* Σ x_i² of N doubles, in SPEC_LANES lanes (each a recursive sum of every SPEC_LANES-th square) added lane by lane,
 * the tail last: a summation order whose error is bounded as any other's (lipt_ub_sum_bound), and which does not
 * wait on one addition per element. With sc != 1, x is first scaled in place by sc (a power of two here). */
static double scale_sumsq(double *x, size_t N, double sc) {
    lipt_vdh a[4] = {{0}};
    size_t i = 0;
    for (; i + SPEC_LANES <= N; i += SPEC_LANES)
        for (int k = 0; k < 4; k++) {
            lipt_vdh v;
            memcpy(&v, x + i + k * SPEC_VD, sizeof v);
            if (sc != 1) {
                v *= sc;
                memcpy(x + i + k * SPEC_VD, &v, sizeof v);
            }
            a[k] += v * v;
        }
    double s = 0;
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < SPEC_VD; l++) s += a[k][l];
    for (; i < N; i++) {
        if (sc != 1) x[i] *= sc;
        s += x[i] * x[i];
    }
    return s;
}

/* |v| lane by lane (clears the sign bits) */
static lipt_vdh vdh_abs(lipt_vdh v) {
    typedef long long vlh __attribute__((vector_size(sizeof(lipt_vdh))));
    vlh b;
    memcpy(&b, &v, sizeof b);
    b &= 0x7fffffffffffffffLL;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Sums over an n×n matrix of one precision level: Σ x² (in SPEC_VD-lane vectors, the tail last), and the largest row
 * sum of |x| (each row in lanes): both sums of nonnegative doubles, bounded by lipt_ub_sum_bound. */
typedef struct {
    double ssq, rmax;
} level_sums;

/* Level 0: f = fl_f(sc h) for the double n×n h (sc a power of two: sc h is exact). */
static void level0_to_float(const double *h, int n, double sc, float *f) {
    for (size_t i = 0; i < (size_t)n * n; i++) f[i] = (float)(h[i] * sc);
}

/* Σ x² of the float n×n f in double (float squares are exact in double); with sc != 1 (a power of two) f is first
 * scaled in place, and *s then also gets the largest row sum of |x|. */
static double level_float(float *f, int n, float sc, level_sums *s) {
    lipt_vdh q = {0};
    double t = 0, rmax = 0;
    for (int i = 0; i < n; i++) {
        float *fr = f + (size_t)i * n;
        lipt_vdh r = {0};
        double r1 = 0;
        int j = 0;
        for (; j + SPEC_VD <= n; j += SPEC_VD) {
            lipt_vfh vf = lipt_vfh_load(fr + j);
            if (sc != 1.0f) {
                vf *= sc;
                lipt_vfh_store(fr + j, vf);
            }
            const lipt_vdh w = __builtin_convertvector(vf, lipt_vdh);
            q += w * w;
            r += vdh_abs(w);
        }
        for (; j < n; j++) {
            if (sc != 1.0f) fr[j] *= sc;
            const double w = fr[j];
            t += w * w;
            r1 += fabs(w);
        }
        for (int l = 0; l < SPEC_VD; l++) r1 += r[l];
        rmax = fmax(rmax, r1);
    }
    for (int l = 0; l < SPEC_VD; l++) t += q[l];
    if (s) s->ssq = t, s->rmax = rmax;
    return t;
}

/* An upper bound of min(‖X‖_F, ‖|X|‖_∞) from the sums of an n×n level. */
static double level_norm_bound(const level_sums *s, int n) {
    return fmin(lipt_ub_up(sqrt(lipt_ub_sum_bound(s->ssq, (size_t)n * n))), lipt_ub_sum_bound(s->rmax, (size_t)n));
}

/* The upper triangle of the row-major n×n C, written by ?syrk, copied to the lower one (in tiles: a column of
 * the upper triangle is read with stride n). */
#define DEFINE_MIRROR_UPPER(name, T)                                                                                \
    static void name(T *c, int n) {                                                                                 \
        enum { TILE = 32 };                                                                                         \
        for (int i0 = 0; i0 < n; i0 += TILE) {                                                                      \
            const int i1 = i0 + TILE < n ? i0 + TILE : n;                                                           \
            for (int j0 = 0; j0 <= i0; j0 += TILE)                                                                  \
                for (int i = i0; i < i1; i++) {                                                                     \
                    const int j1 = j0 + TILE < i ? j0 + TILE : i;                                                   \
                    for (int j = j0; j < j1; j++) c[(size_t)i * n + j] = c[(size_t)j * n + i];                      \
                }                                                                                                   \
        }                                                                                                           \
    }
DEFINE_MIRROR_UPPER(mirror_upper, double)
DEFINE_MIRROR_UPPER(mirror_upper_f, float)

/* ---- H_0, the double Gram matrix, straight from the float block ----
 * Every entry is Σ_k a_ki a_kj of AᵀA (a tall block; a wide one, whose Gram matrix is A Aᵀ, is transposed first):
 * m products of floats, each exact in double, summed in double in k order (with FMA, whose product is then exact
 * anyway): all the error analysis above assumes of H_0 (gamma_m, any order). No double copy of the block and no
 * packing: dsyrk's packing and the copy were a fifth of a 256×1024 certificate, and at these orders (the block in
 * L2) register tiles reading the floats where they are, widened in registers, measured 20-50 % faster than copy +
 * dsyrk / dgemm. (Dot products along the rows of a wide block, lanes along k, were 10 % slower than the transpose
 * and these tiles: twice the conversions per multiply-add.) Rows of tiles are independent (each entry's order does
 * not depend on the tiling's partition), so two threads may share them without changing a bit. */
#if LIPT_VDW == 8
#define GT_R 8 /* GT_R rows × GT_V vectors of columns, rank-one updates along k (24 accumulators) */
#define GT_V 3
#else
#define GT_R 4
#define GT_V 2
#endif
_Static_assert(GT_R <= LIPT_SPECTRAL_GRAM_SLAB, "lipt_spectral_gram_scratch must cover two slabs of GT_R rows");

/* t [m×n] = aᵀ for the n×m float a (row stride lda): 8×8 blocks through registers with AVX (a scalar copy with the
 * row stride of W1, 4 KiB, took three times as long), scalars at the edges. */
static void transpose_f(const float *a, int n, int m, int lda, float *t) {
    int i0 = 0;
#if defined(__AVX__)
    for (; i0 + 8 <= n; i0 += 8) {
        int k = 0;
        for (; k + 8 <= m; k += 8) {
            const float *p = a + (size_t)i0 * lda + k;
            __m256 r[8], u[8], v[8];
            for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(p + (size_t)q * lda);
            for (int q = 0; q < 4; q++) {
                u[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);
                u[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]);
            }
            for (int q = 0; q < 2; q++) { /* rows 4q..4q+3: columns (0, 1), (2, 3) of each 128-bit half */
                v[4 * q] = _mm256_shuffle_ps(u[4 * q], u[4 * q + 2], 0x44);
                v[4 * q + 1] = _mm256_shuffle_ps(u[4 * q], u[4 * q + 2], 0xEE);
                v[4 * q + 2] = _mm256_shuffle_ps(u[4 * q + 1], u[4 * q + 3], 0x44);
                v[4 * q + 3] = _mm256_shuffle_ps(u[4 * q + 1], u[4 * q + 3], 0xEE);
            }
            float *o = t + (size_t)k * n + i0;
            for (int q = 0; q < 4; q++) {
                _mm256_storeu_ps(o + (size_t)q * n, _mm256_permute2f128_ps(v[q], v[q + 4], 0x20));
                _mm256_storeu_ps(o + (size_t)(q + 4) * n, _mm256_permute2f128_ps(v[q], v[q + 4], 0x31));
            }
        }
        for (; k < m; k++)
            for (int i = i0; i < i0 + 8; i++) t[(size_t)k * n + i] = a[(size_t)i * lda + k];
    }
#endif
    for (; i0 < n; i0++)
        for (int k = 0; k < m; k++) t[(size_t)k * n + i0] = a[(size_t)i0 * lda + k];
}

/* Tall: c[i0 + r][j..] += Σ_k a_k,i0+r a_k,j for r < mr, nv vectors of columns from j (constants at every call),
 * each entry one running sum in k order. xs: the rows' column slab in double (xs[k GT_R + r] = a_k,i0+r), converted
 * once per row of tiles: a broadcast from it is a load, where one from the float was a conversion as well. */
LIPT_VINLINE void gram_tall_tile(const float *a, int lda, int m, const double *xs, double *c, int n, int i0, int j,
                                 int mr, int nv) {
    lipt_vdh acc[GT_R][GT_V];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = (lipt_vdh){0};
    for (int k = 0; k < m; k++) {
        const float *ak = a + (size_t)k * lda + j;
        lipt_vdh y[GT_V];
        for (int v = 0; v < nv; v++) y[v] = lipt_vdh_loadf(ak + v * LIPT_VDW);
        for (int r = 0; r < mr; r++) {
            const lipt_vdh x = lipt_vdh_splat(xs[(size_t)k * GT_R + r]);
            for (int v = 0; v < nv; v++) acc[r][v] = lipt_vdh_fma(x, y[v], acc[r][v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) memcpy(c + (size_t)(i0 + r) * n + j + v * LIPT_VDW, &acc[r][v], sizeof acc[r][v]);
}

/* Tall, the mr rows (a constant) from i0, every column from i0 on: full tiles, one-vector tiles, then scalars; the
 * tiles start up to LIPT_VDW - 1 columns left of i0 so that they end at n (entries left of the diagonal: the
 * mirroring overwrites them). */
LIPT_VINLINE void gram_tall_rows(const float *a, int lda, int m, double *xs, double *c, int n, int i0, int mr) {
    for (int k = 0; k < m; k++)
        for (int r = 0; r < mr; r++) xs[(size_t)k * GT_R + r] = a[(size_t)k * lda + i0 + r];
    const int w = (n - i0 + LIPT_VDW - 1) / LIPT_VDW * LIPT_VDW;
    int j = n - w >= 0 ? n - w : i0;
    for (; j + GT_V * LIPT_VDW <= n; j += GT_V * LIPT_VDW) gram_tall_tile(a, lda, m, xs, c, n, i0, j, mr, GT_V);
    for (; j + LIPT_VDW <= n; j += LIPT_VDW) gram_tall_tile(a, lda, m, xs, c, n, i0, j, mr, 1);
    for (; j < n; j++)
        for (int r = 0; r < mr; r++) {
            double t = 0;
            for (int k = 0; k < m; k++) t += xs[(size_t)k * GT_R + r] * a[(size_t)k * lda + j];
            c[(size_t)(i0 + r) * n + j] = t;
        }
}

/* Work (multiply-adds) from which lipt_spectral_gram uses two threads outside a parallel region. */
#define GRAM_PAR_WORK ((size_t)1 << 22)

/* See spectral_impl.h. xs: a slab of GT_R m doubles per thread (two at most), then a wide block's transpose. */
void lipt_spectral_gram(int trans, int n, int m, const float *w, int lda, double *c, double *xs) {
    if (!trans) { /* A Aᵀ = (Aᵀ)ᵀ Aᵀ */
        float *t = (float *)(xs + 2 * LIPT_SPECTRAL_GRAM_SLAB * (size_t)m);
        transpose_f(w, n, m, lda, t);
        w = t;
        lda = n;
    }
    const int ng = (n + GT_R - 1) / GT_R;
    const int par = !omp_in_parallel() && omp_get_max_threads() > 1 && (size_t)n * n * m / 2 >= GRAM_PAR_WORK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(2) if (par)
    for (int g = 0; g < ng; g++) {
        const int i0 = g * GT_R;
        double *x = xs + (size_t)omp_get_thread_num() * LIPT_SPECTRAL_GRAM_SLAB * m;
        if (i0 + GT_R <= n) gram_tall_rows(w, lda, m, x, c, n, i0, GT_R);
        else
            for (int i = i0; i < n; i++) gram_tall_rows(w, lda, m, x, c, n, i, 1);
    }
}

/* Gram matrices of at least this order are formed in three products (gram_upper). */
#define GRAM_SPLIT_MIN 128

/* C (upper triangle) = op(A) op(A)ᵀ, op(A) [n, m]; and C [h, n-h] = op(A_1) op(A_2)ᵀ, in float, beta 0. Each on
 * the calling thread alone (lipt_blas_serial): OpenBLAS would split ssyrk from n = 65 on by the thread count, and how
 * it splits can change an entry's sum on some kernel sets. */
static void syrk_up(CBLAS_TRANSPOSE op, int n, int m, const float *a, int lda, float *c, int ldc) {
    const int saved = lipt_blas_serial_begin();
    cblas_ssyrk(CblasRowMajor, CblasUpper, op, n, m, 1.0f, a, lda, 0.0f, c, ldc);
    lipt_blas_serial_end(saved);
}
static void gemm_abt(int trans, int M, int N, int K, const float *a1, const float *a2, int lda, float *c, int ldc) {
    const CBLAS_TRANSPOSE ta = trans ? CblasTrans : CblasNoTrans, tb = trans ? CblasNoTrans : CblasTrans;
    const int saved = lipt_blas_serial_begin();
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a1, lda, a2, lda, 0.0f, c, ldc);
    lipt_blas_serial_end(saved);
}

/* The upper triangle of the n×n row-major float C = op(A) op(A)ᵀ, op(A) = A [n×m] (trans 0) or Aᵀ with A [m×n]
 * (trans 1), row stride lda (the Gram iteration's squarings); C's other entries are left alone.
 * From order GRAM_SPLIT_MIN on it is three products: with h = n/2 and A_1, A_2 the first h and the other n - h rows
 * of op(A), the diagonal blocks' triangles A_1 A_1ᵀ and A_2 A_2ᵀ (ssyrk, one task) and the off-diagonal block
 * A_1 A_2ᵀ (sgemm, the other task, of the same work): each on one thread, the two tasks side by side when threads
 * allow. OpenBLAS's own threading of ?syrk at these orders gained nothing on two threads (1.0 ms either way for
 * dsyrk at n = 256 on the bench machine), and its waiting threads spun in sched_yield. Which product forms an entry
 * depends only on n, so the result does not depend on the thread count. Every entry is a dot product of n terms,
 * which is all the error analysis of lipt_spectral_ub assumes (any order, with or without FMA). Each task zeroes
 * what it writes first: beta = 0 should make BLAS ignore C, and zeroing makes that independent of the
 * implementation. */
static void gram_upper(int trans, int n, int m, const float *a, int lda, float *c) {
    const CBLAS_TRANSPOSE op = trans ? CblasTrans : CblasNoTrans;
#define GRAM_ZERO(i, j0, len) memset(c + (size_t)(i) * n + (size_t)(j0), 0, (size_t)(len) * sizeof(float))
    if (n < GRAM_SPLIT_MIN) {
        for (int i = 0; i < n; i++) GRAM_ZERO(i, i, n - i);
        syrk_up(op, n, m, a, lda, c, n);
        return;
    }
    const int h = n / 2;
    const float *a1 = a, *a2 = a + (trans ? (size_t)h : (size_t)h * lda);
    const int par = !omp_in_parallel() && omp_get_max_threads() > 1 && lipt_blas_nests_safely();
#pragma omp parallel for schedule(static) num_threads(2) if (par)
    for (int task = 0; task < 2; task++) {
        if (task == 0) { /* C[0:h, h:n] = A_1 A_2ᵀ */
            for (int i = 0; i < h; i++) GRAM_ZERO(i, h, n - h);
            gemm_abt(trans, h, n - h, m, a1, a2, lda, c + h, n);
        } else { /* the triangles of C[0:h, 0:h] and C[h:n, h:n] */
            for (int i = 0; i < h; i++) GRAM_ZERO(i, i, h - i);
            for (int i = h; i < n; i++) GRAM_ZERO(i, i, n - i);
            syrk_up(op, h, m, a1, lda, c, n);
            syrk_up(op, n - h, m, a2, lda, c + (size_t)h * n + h, n);
        }
    }
#undef GRAM_ZERO
}

/* lipt_spectral_ub's scratch: lipt_spectral_gram's slabs, the double Gram matrix g, the two float levels in h's storage
 * (2 n² floats), the exponents and error terms of each level. */
typedef struct {
    double *xs, *g, *h, *fk, *dk;
    int *ek;
    double *vw; /* lipt_spectral_verify_top's scratch (LIPT_SPECTRAL_CHOLESKY), else NULL */
    double *pv; /* a steered block's pair in double (steer_block): 3 m doubles, or NULL when none steers */
} ub_scratch;

/* Scratch for any block whose larger side is at most m and whose Gram matrix has order at most n, with t squarings
 * at most and (chol) the Cholesky-verified bound. */
static ub_scratch ub_scratch_alloc_for(lipt_arena *ar, size_t m, size_t n, int t, int chol, int steer) {
    ub_scratch s;
    const size_t vw_doubles = chol ? lipt_spectral_verify_scratch((int)n) : 0;
    s.vw = vw_doubles ? lipt_arena_alloc(ar, vw_doubles * sizeof(double)) : NULL;
    s.pv = steer ? lipt_arena_alloc(ar, 3 * m * sizeof(double)) : NULL;
    s.xs = lipt_arena_alloc(ar, lipt_spectral_gram_scratch(n, m) * sizeof(double));
    s.g = lipt_arena_alloc(ar, n * n * sizeof(double));
    s.h = lipt_arena_alloc(ar, n * n * sizeof(double));
    s.ek = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(int));
    s.fk = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(double));
    s.dk = lipt_arena_alloc(ar, (size_t)(t + 1) * sizeof(double));
    return s;
}

static ub_scratch ub_scratch_alloc(lipt_arena *ar, int R, int cb, int gram_arg) {
    return ub_scratch_alloc_for(ar, (size_t)(cb > R ? cb : R), (size_t)(cb > R ? R : cb),
                                gram_arg & ~LIPT_SPECTRAL_CHOLESKY, (gram_arg & LIPT_SPECTRAL_CHOLESKY) != 0, 0);
}

/* The exponent e with sqrt(s) in [2^(e-1), 2^e): scaling by 2^-e brings a matrix with ‖.‖_F² = s into [1/2, 1). */
static int frob_exponent(double s) {
    int e = 0;
    if (s > 0 && isfinite(s)) frexp(sqrt(s), &e);
    return e;
}

/* An upper bound of rho(H_0) for the mirrored n×n double Gram matrix g (scaled in place), by t Gram-iteration
 * squarings in float (t = 0: ‖H_0‖_F) with the error terms of the argument above; scratch from sc_. */
static double gram_rho_bound(double *g, int n, int t, ub_scratch sc_) {
    const size_t nn = (size_t)n * n;
    if (t == 0) return lipt_ub_up(sqrt(lipt_ub_sum_bound(scale_sumsq(g, nn, 1.0), nn)));
    double *fk = sc_.fk, *dk = sc_.dk;
    float *gf = (float *)sc_.h, *hf = gf + nn; /* the float levels: G_k and X_k */
    int *ek = sc_.ek;
    const double gam_f = lipt_ub_gamma_f(n), under_f = ldexp((double)nn, -149), sub_f = ldexp((double)n, -149);
    for (int k = 0; k < t; k++) {
        level_sums sf;
        if (k == 0) { /* G_0 = fl_f(2^-e H_0), off by <= u_f / (1 - u_f) <= 2^-24 (1 + 2^-23) of itself */
            ek[0] = frob_exponent(scale_sumsq(g, nn, 1.0));
            level0_to_float(g, n, ldexp(1.0, -ek[0]), gf);
            level_float(gf, n, 1.0f, &sf);
            dk[0] = lipt_ub_up(lipt_ub_up(0x1p-24 * (1 + 0x1p-23) * level_norm_bound(&sf, n)) + sub_f);
        } else { /* G_k = 2^-e X_{k-1}, in place */
            ek[k] = frob_exponent(level_float(gf, n, 1.0f, NULL));
            level_float(gf, n, ldexpf(1.0f, -ek[k]), &sf);
            dk[k] = sub_f;
        }
        const double nb = level_norm_bound(&sf, n);
        fk[k] = lipt_ub_up(lipt_ub_up(gam_f * lipt_ub_up(nb * nb)) + under_f);
        gram_upper(0, n, n, gf, n, hf); /* X_k = G_k G_kᵀ = G_k² */
        mirror_upper_f(hf, n);
        float *tmp = gf;
        gf = hf;
        hf = tmp;
    }
    /* from rho(G_t) <= ‖G_t‖_F back to rho(H_0) */
    double c = lipt_ub_up(sqrt(lipt_ub_sum_bound(level_float(gf, n, 1.0f, NULL), nn)));
    for (int k = t - 1; k >= 0; k--) {
        c = lipt_ub_up(sqrt(lipt_ub_up(c + fk[k]))); /* >= rho(G_k) */
        c = lipt_ub_up(c + dk[k]);                  /* >= rho(2^-e_k X_{k-1}), or of 2^-e_0 H_0 */
        c = ldexp(c, ek[k]);                        /* >= rho(X_{k-1}), or rho(H_0) */
        if (c < DBL_MIN) c = lipt_ub_up(c);         /* ldexp rounded (subnormal result) */
    }
    return c;
}

/* start: the block's power-iteration vector of the Gram side's order (u_b for a wide block, v_b otherwise), a
 * start for Lanczos (LIPT_SPECTRAL_CHOLESKY), or NULL. ritz (n doubles or NULL): lipt_spectral_verify_top's, NaN in
 * ritz[0] when the bound did not come from it. */
static double spectral_ub_core(const float *w, int R, int C, int c0, int cb, int gram_arg, const float *start,
                               ub_scratch sc_, double *ritz) {
    if (ritz) ritz[0] = NAN;
    const int rows = cb > R; /* Gram matrix of the smaller side: W_b W_bᵀ when the block is wide */
    const int n = rows ? R : cb, m = rows ? cb : R;
    const size_t nn = (size_t)n * n;

    lipt_spectral_gram(!rows, n, m, w + c0, C, sc_.g, sc_.xs);
    /* The block's squared Frobenius norm as the trace of H_0: every entry's square (exact in double) is a term of
     * exactly one diagonal entry, so this is a sum of the R cb squares in some order, which lipt_ub_sum_bound bounds
     * as any other (and a separate pass over the block cost 3 % of the certificate). It is finite iff every entry
     * is: a float's square cannot overflow a double, nor can a sum of fewer than 2^800 of them. */
    double fa = 0;
    for (int i = 0; i < n; i++) fa += sc_.g[(size_t)i * n + i];
    if (!isfinite(fa)) return INFINITY;
    if (fa == 0) return 0; /* all zero: a nonzero float square is >= 2^-298, so the sum cannot vanish otherwise */
    const double fa_up = lipt_ub_sum_bound(fa, (size_t)R * cb);
    const double e0 = lipt_ub_up(lipt_ub_up(lipt_ub_gamma(m) * fa_up) + lipt_ub_tiny_slack((double)nn));
    mirror_upper(sc_.g, n);
    /* c bounds λ_max(H_0), all the last step needs (Weyl): proven by Cholesky when asked for and found
     * (spectral_verify.c), else Gram iteration's bound of rho(H_0) */
    double c = gram_arg & LIPT_SPECTRAL_CHOLESKY ? lipt_spectral_verify_top(sc_.g, n, start, sc_.vw, ritz) : 0;
    if (!(c > 0)) c = gram_rho_bound(sc_.g, n, gram_arg & ~LIPT_SPECTRAL_CHOLESKY, sc_);
    double result = lipt_ub_up(sqrt(lipt_ub_up(c + e0))); /* sigma² <= rho(H_0) + e_0 */
    return isnan(result) ? INFINITY : result;
}

static void check_ub_args(int R, int C, int c0, int cb, int gram_iters) {
    LIPT_CHECK(R > 0 && cb > 0 && c0 >= 0 && c0 + cb <= C, "spectral_ub: block [%d, %d) x %d rows outside [%d, %d]",
               c0, c0 + cb, R, R, C);
    LIPT_CHECK(gram_iters >= 0 && (gram_iters & ~LIPT_SPECTRAL_CHOLESKY) < LIPT_SPECTRAL_CHOLESKY,
               "spectral_ub: gram_iters %d out of range", gram_iters);
}

double lipt_spectral_ub(lipt_ctx *ctx, const float *w, int R, int C, int c0, int cb, int gram_iters) {
    check_ub_args(R, C, c0, cb, gram_iters);
    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    const double r =
        spectral_ub_core(w, R, C, c0, cb, gram_iters, NULL, ub_scratch_alloc(&ctx->arena, R, cb, gram_iters), NULL);
    lipt_arena_release(&ctx->arena, mk);
    return r;
}

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
static void steer_block(const float *w, int R, int C, int b, int cb, double *y, double *x, float *u, float *v) {
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

static void cert_task_run(const lipt_spectral_req *req, const cert_task *t, ub_scratch s, lipt_tensor **out) {
    const lipt_spectral_req *r = &req[t->k];
    const int R = r->w->shape[0], C = r->w->shape[1], cb = C / r->n_blocks;
    float *u = r->u + (size_t)t->b * R, *v = r->v + (size_t)t->b * cb;
    const float *start = cb > R ? u : v;
    double *ritz = r->steer ? s.pv : NULL;
    out[t->k]->data[t->b] = float_up(spectral_ub_core(r->w->data, R, C, t->b * cb, cb, r->gram_iters, start, s, ritz));
    if (ritz) steer_block(r->w->data, R, C, t->b, cb, ritz, ritz + (cb > R ? cb : R), u, v);
}

void lipt_spectral_norm_ub_batch(lipt_ctx *ctx, int n, const lipt_spectral_req *req, lipt_tensor **out) {
    LIPT_CHECK(n >= 0, "spectral_norm_ub_batch: %d requests", n);
    lipt_node **node = lipt_arena_alloc(&ctx->arena, (size_t)(n > 0 ? n : 1) * sizeof *node);
    int n_tasks = 0;
    for (int k = 0; k < n; k++) {
        const lipt_spectral_req *r = &req[k];
        check_args("spectral_norm_ub", r->w, r->u, r->v, r->n_blocks, 0);
        check_ub_args(r->w->shape[0], r->w->shape[1], 0, r->w->shape[1] / r->n_blocks, r->gram_iters);
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
    const int par = n_tasks > 1 && lipt_blas_nests_safely() && work >= SPEC_PAR_WORK && !omp_in_parallel();
    const int nt = par ? omp_get_max_threads() : 1;
    ub_scratch *sc = lipt_arena_alloc(&ctx->arena, (size_t)nt * sizeof *sc);
    for (int i = 0; i < nt; i++) sc[i] = ub_scratch_alloc_for(&ctx->arena, max_m, max_n, max_t, chol, steer);
    if (par) {
#pragma omp parallel num_threads(nt)
        {
            const ub_scratch s = sc[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < n_tasks; t++) cert_task_run(req, &task[t], s, out);
        }
    } else { /* not in a region: gram_upper's two-thread split would be a nested one, for which libgomp starts and
              * ends fresh threads every time (15 times slower for one 256×1024 block) */
        for (int t = 0; t < n_tasks; t++) cert_task_run(req, &task[t], sc[0], out);
    }
    lipt_arena_release(&ctx->arena, mk);
    for (int k = 0; k < n; k++)
        if (node[k]) save_uv(ctx, node[k], req[k].u, req[k].v, req[k].n_blocks, req[k].w->shape[0], req[k].w->shape[1]);
}

/* iarg, saved, saved2: as spectral_norm (save_uv). */
lipt_tensor *lipt_spectral_norm_ub(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int power_iters,
                                   int gram_iters) {
    check_args("spectral_norm_ub", w, u, v, n_blocks, power_iters);
    LIPT_CHECK(gram_iters >= 0, "spectral_norm_ub: gram_iters %d < 0", gram_iters);
    power_all(ctx, w->data, w->shape[0], w->shape[1], n_blocks, u, v, power_iters);
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
        check_args("spectral_norm_ub_many", w[i], u[i], v[i], 1, power_iters);
        power_all(ctx, w[i]->data, w[i]->shape[0], w[i]->shape[1], 1, u[i], v[i], power_iters);
        req[i] = (lipt_spectral_req){w[i], u[i], v[i], 1, gram_iters, 0};
    }
    lipt_spectral_norm_ub_batch(ctx, n, req, out);
}

/* The gradient of sigma_b with the power vectors held fixed (u_bᵀ W_b v_b -> sigma_b), not of the bound itself. */
void lipt_spectral_norm_ub_backward(lipt_ctx *ctx, lipt_node *node) { uv_backward(ctx, node); }
