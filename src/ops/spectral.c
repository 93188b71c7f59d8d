/* spectral_norm: per-column-block spectral norms of a matrix by power iteration on persistent vectors, and backward. */
#include "lipt/ops.h"

#include <math.h>
#include <string.h>

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

/* y[R] = W_b x, W_b the R×cb block at column offset c0 of a row-major [R, C] matrix. */
static void block_mv(const float *w, int R, int C, int c0, int cb, const double *x, double *y, int par) {
#pragma omp parallel for schedule(static) if (par && (size_t)R * cb >= SPEC_PAR_WORK)
    for (int i = 0; i < R; i++) {
        const float *row = w + (size_t)i * C + c0;
        double s = 0;
        for (int j = 0; j < cb; j++) s += (double)row[j] * x[j];
        y[i] = s;
    }
}

/* y[cb] = W_bᵀ x, streaming rows; threads take column chunks so each writes its own slice of y. */
static void block_mtv(const float *w, int R, int C, int c0, int cb, const double *x, double *y, int par) {
    const int chunk = 64;
    int n_chunks = (cb + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (par && n_chunks > 1 && (size_t)R * cb >= SPEC_PAR_WORK)
    for (int k = 0; k < n_chunks; k++) {
        int j0 = k * chunk, j1 = j0 + chunk < cb ? j0 + chunk : cb;
        for (int j = j0; j < j1; j++) y[j] = 0;
        for (int i = 0; i < R; i++) {
            const float *row = w + (size_t)i * C + c0;
            double ui = x[i];
            for (int j = j0; j < j1; j++) y[j] += (double)row[j] * ui;
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

/* sigma_b = u_bᵀ W_b v_b with the stored float vectors, so that d sigma / dW = u vᵀ holds exactly. */
static double block_sigma(const float *w, int R, int C, int c0, int cb, const float *u, const float *v) {
    double s = 0;
    for (int i = 0; i < R; i++) {
        const float *row = w + (size_t)i * C + c0;
        double r = 0;
        for (int j = 0; j < cb; j++) r += (double)row[j] * v[j];
        s += (double)u[i] * r;
    }
    return s;
}

/* iarg: 0 n_blocks, 1 R, 2 C.  saved: u copy [n_blocks*R], saved2: v copy [C]. */
lipt_tensor *lipt_spectral_norm(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int iters) {
    char sw[64];
    LIPT_CHECK(w->ndim == 2, "spectral_norm: w must be 2-D, got %s", lipt_shape_str(w, sw, 64));
    int R = w->shape[0], C = w->shape[1];
    LIPT_CHECK(R > 0 && C > 0, "spectral_norm: empty w %s", lipt_shape_str(w, sw, 64));
    LIPT_CHECK(n_blocks >= 1 && C % n_blocks == 0, "spectral_norm: %d blocks do not divide the %d columns of %s",
               n_blocks, C, lipt_shape_str(w, sw, 64));
    LIPT_CHECK(iters >= 0, "spectral_norm: iters %d < 0", iters);
    LIPT_CHECK(u && v, "spectral_norm: NULL power-iteration vector");
    int cb = C / n_blocks;

    lipt_tensor *out = lipt_tensor_1d(ctx, n_blocks);
    lipt_node *node = lipt_record(ctx, LIPT_OP_SPECTRAL_NORM, out, 1, (lipt_tensor *[]){w});

    if (iters > 0) {
        lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
        double *du = lipt_arena_alloc(&ctx->arena, (size_t)n_blocks * R * sizeof(double));
        double *dv = lipt_arena_alloc(&ctx->arena, (size_t)C * sizeof(double));
        int par_blocks = n_blocks > 1 && (size_t)R * C * (size_t)iters >= SPEC_PAR_WORK;
#pragma omp parallel for schedule(static) if (par_blocks)
        for (int b = 0; b < n_blocks; b++)
            power_block(w->data, R, C, b, cb, u + (size_t)b * R, v + (size_t)b * cb, iters, du + (size_t)b * R,
                        dv + (size_t)b * cb, !par_blocks);
        lipt_arena_release(&ctx->arena, mk);
    }
#pragma omp parallel for schedule(static) if (n_blocks > 1 && (size_t)R * C >= SPEC_PAR_WORK)
    for (int b = 0; b < n_blocks; b++)
        out->data[b] = (float)block_sigma(w->data, R, C, b * cb, cb, u + (size_t)b * R, v + (size_t)b * cb);

    if (node) {
        /* the persistent vectors move on at the next call; backward needs the ones used here */
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
    return out;
}

void lipt_spectral_norm_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dw = lipt_grad_of(ctx, node->in[0]);
    if (!dw) return;
    int n_blocks = node->iarg[0], R = node->iarg[1], C = node->iarg[2], cb = C / n_blocks;
    const float *su = node->saved, *sv = node->saved2, *g = node->out->grad;
    /* dW_b += dsigma_b u_b v_bᵀ */
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
