/* spectral_norm: per-column-block spectral norms of a matrix by power iteration on persistent vectors, and backward.
 * spectral_ub / spectral_norm_ub: certified upper bounds of the same norms by Gram iteration. */
#include "lipt/ops.h"

#include <cblas.h>
#include <float.h>
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
#pragma omp parallel for schedule(static) if (par_blocks)
    for (int b = 0; b < n_blocks; b++)
        power_block(w, R, C, b, cb, u + (size_t)b * R, v + (size_t)b * cb, iters, du + (size_t)b * R,
                    dv + (size_t)b * cb, !par_blocks);
    lipt_arena_release(&ctx->arena, mk);
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
 * n <= m), assuming IEEE double with round-to-nearest, u = 2^-53.  Notation: rho = spectral radius; for a
 * symmetric X, rho(X) = ‖X‖₂ <= ‖X‖_F and Weyl gives rho(X) <= rho(X + Y) + ‖Y‖₂ for symmetric Y.
 *  - H_0 = fl(AᵀA) (dsyrk, one triangle mirrored: symmetric).  The float entries are exact in double; any order
 *    of an m-term dot product, with or without FMA, errs by <= gamma_m Σ|a||b| (gamma_k = k u / (1 - k u)), so
 *    ‖H_0 - AᵀA‖₂ <= gamma_m ‖|A|ᵀ|A|‖_F <= gamma_m ‖A‖_F² =: e_0 and sigma² <= rho(H_0) + e_0.
 *  - Step k: H'_k = 2^-e_k H_k (exact but for subnormal results, each off by <= 2^-1075: ‖D_k‖₂ <= n 2^-1075),
 *    H_{k+1} = fl(H'_k H'_k) (dsyrk again, symmetric), F_k = H_{k+1} - H'_k² with ‖F_k‖₂ <= gamma_n ‖H'_k‖_F²
 *    + n² 2^-1073 (the last term: products that underflow).  Hence
 *        rho(H_k) <= 2^e_k (rho(H'_k) + ‖D_k‖₂),   rho(H'_k) <= sqrt(rho(H_{k+1}) + ‖F_k‖₂),
 *    and at the end rho(H_t) <= ‖H_t‖_F.  Nesting these from k = t-1 down to 0 gives the bound; without the error
 *    terms it is ‖H_0^(2^t)‖_F^(1/2^(t+1)), the Gram iteration bound itself.
 *  - Each scalar step (sum of squares, product, sum, sqrt) is rounded once to nearest and then moved up one ulp
 *    (up()), which is >= the exact result; sums of N squares are inflated by 1/(1 - gamma_N) <= 1 + 2 gamma_N plus
 *    an underflow slack.  ldexp by 2^e_k is exact unless the result is subnormal (then moved up too).
 * Rescaling so that ‖H'_k‖_F is in [1/2, 1) keeps every H_k for k >= 1 near unit size (rho(H'_k) >= 1/(2 sqrt n)),
 * so neither the matrices nor the nested bound overflow or underflow for any t; H_0 itself is at most
 * m (2^128)² <= 2^288 and at least 2^-298 when nonzero, far inside double's range.
 * Size of the margin: e_0 / sigma² <= gamma_m r and ‖F_k‖₂ / rho(H'_k)² <= gamma_n r (r = rank), halved at each
 * square root on the way back (Σ_k 2^-(k+2) < 1/2), so the result exceeds the exact Gram bound by at most about
 * (gamma_m + gamma_n) r / 2 relative plus O(t u): 1.8e-11 for 256×1024 blocks, 1.2e-10 for 1024×1024 (reached by
 * a flat spectrum, e.g. the identity), far below 1e-9; for spread spectra the later levels contribute ~nothing. */

/* The next double up: >= the exact value of an operation whose round-to-nearest result is x. */
static double up(double x) { return nextafter(x, INFINITY); }

/* An upper bound of gamma_k = k u / (1 - k u); the factor 1 + 2^-40 covers the three roundings of its evaluation.
 * +inf (a useless but valid bound) for absurd k. */
static double gamma_up(double k) {
    double ku = k * 0x1p-53;
    return ku < 0.25 ? ku / (1 - ku) * (1 + 0x1p-40) : INFINITY;
}

/* Absolute slack for N underflowing terms, each off by at most a (doubled) half unit of 2^-1074. */
static double tiny_slack(double N) { return ldexp(N, -1070); }

/* An upper bound of the exact Σ x_i² of n*n doubles (recursive sum in double: error <= gamma_N of the sum). */
static double sumsq_up(const double *x, size_t N) {
    double s = 0;
    for (size_t i = 0; i < N; i++) s += x[i] * x[i];
    return up(up(s * up(1 + 2 * gamma_up((double)N))) + tiny_slack((double)N));
}

/* The upper triangle of the row-major n×n C, written by dsyrk, copied to the lower one. */
static void mirror_upper(double *c, int n) {
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++) c[(size_t)i * n + j] = c[(size_t)j * n + i];
}

double lipt_spectral_ub(lipt_ctx *ctx, const float *w, int R, int C, int c0, int cb, int gram_iters) {
    LIPT_CHECK(R > 0 && cb > 0 && c0 >= 0 && c0 + cb <= C, "spectral_ub: block [%d, %d) x %d rows outside [%d, %d]",
               c0, c0 + cb, R, R, C);
    LIPT_CHECK(gram_iters >= 0, "spectral_ub: gram_iters %d < 0", gram_iters);
    const int rows = cb > R; /* Gram matrix of the smaller side: W_b W_bᵀ when the block is wide */
    const int n = rows ? R : cb, m = rows ? cb : R, t = gram_iters;
    const size_t nn = (size_t)n * n;

    lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena);
    double *a = lipt_arena_alloc(&ctx->arena, (size_t)R * cb * sizeof(double));
    double *g = lipt_arena_alloc(&ctx->arena, nn * sizeof(double));
    double *h = lipt_arena_alloc(&ctx->arena, nn * sizeof(double));
    int *ek = lipt_arena_alloc(&ctx->arena, (size_t)(t + 1) * sizeof(int));
    double *fk = lipt_arena_alloc(&ctx->arena, (size_t)(t + 1) * sizeof(double));

    /* The block in double (exact), its squared Frobenius norm (float squares are exact in double). */
    int finite = 1;
    double fa = 0;
    for (int i = 0; i < R; i++) {
        const float *row = w + (size_t)i * C + c0;
        double *ar = a + (size_t)i * cb;
        for (int j = 0; j < cb; j++) {
            finite &= isfinite(row[j]) != 0;
            ar[j] = row[j];
            fa += ar[j] * ar[j];
        }
    }
    double result;
    if (!finite) {
        result = INFINITY;
    } else if (fa == 0) {
        result = 0; /* all zero: a nonzero float square is >= 2^-298, so the sum cannot vanish otherwise */
    } else {
        const double tiny = tiny_slack((double)nn);
        const double gam_n = gamma_up(n);
        const double fa_up = up(up(fa * up(1 + 2 * gamma_up((double)R * cb))) + tiny_slack((double)R * cb));
        const double e0 = up(up(gamma_up(m) * fa_up) + tiny);
        /* beta = 0 should make BLAS ignore C; zeroing it makes that independent of the implementation */
        memset(g, 0, nn * sizeof(double));
        cblas_dsyrk(CblasRowMajor, CblasUpper, rows ? CblasNoTrans : CblasTrans, n, m, 1.0, a, cb, 0.0, g, n);
        mirror_upper(g, n);
        for (int k = 0; k < t; k++) {
            /* H'_k = H_k / 2^e with 2^e just above ‖H_k‖_F (a power of two: exact) */
            double s = 0;
            for (size_t i = 0; i < nn; i++) s += g[i] * g[i];
            int e = 0;
            if (s > 0 && isfinite(s)) frexp(sqrt(s), &e);
            const double sc = ldexp(1.0, -e);
            for (size_t i = 0; i < nn; i++) g[i] *= sc;
            ek[k] = e;
            fk[k] = up(up(gam_n * sumsq_up(g, nn)) + tiny);
            memset(h, 0, nn * sizeof(double));
            cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, n, 1.0, g, n, 0.0, h, n); /* H'H'ᵀ = H'² */
            mirror_upper(h, n);
            double *tmp = g;
            g = h;
            h = tmp;
        }
        /* c bounds rho(H_k), from k = t back to 0 */
        double c = up(sqrt(sumsq_up(g, nn)));
        for (int k = t - 1; k >= 0; k--) {
            c = up(sqrt(up(c + fk[k])));    /* >= rho(H'_k) */
            c = up(c + tiny);                /* >= rho(H_k) / 2^e_k, the scaling's underflow */
            c = ldexp(c, ek[k]);             /* >= rho(H_k) */
            if (c < DBL_MIN) c = up(c);      /* ldexp rounded (subnormal result) */
        }
        result = up(sqrt(up(c + e0)));       /* sigma² <= rho(H_0) + e_0 */
        if (isnan(result)) result = INFINITY;
    }
    lipt_arena_release(&ctx->arena, mk);
    return result;
}

/* Upper bound for a float output: the nearest float may lie below. */
static float float_up(double x) {
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}

/* iarg, saved, saved2: as spectral_norm (save_uv). */
lipt_tensor *lipt_spectral_norm_ub(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int n_blocks, int power_iters,
                                   int gram_iters) {
    check_args("spectral_norm_ub", w, u, v, n_blocks, power_iters);
    LIPT_CHECK(gram_iters >= 0, "spectral_norm_ub: gram_iters %d < 0", gram_iters);
    int R = w->shape[0], C = w->shape[1], cb = C / n_blocks;

    lipt_tensor *out = lipt_tensor_1d(ctx, n_blocks);
    lipt_node *node = lipt_record(ctx, LIPT_OP_SPECTRAL_NORM_UB, out, 1, (lipt_tensor *[]){w});

    power_all(ctx, w->data, R, C, n_blocks, u, v, power_iters);
    /* one block at a time: the BLAS calls inside thread themselves */
    for (int b = 0; b < n_blocks; b++)
        out->data[b] = float_up(lipt_spectral_ub(ctx, w->data, R, C, b * cb, cb, gram_iters));

    if (node) save_uv(ctx, node, u, v, n_blocks, R, C);
    return out;
}

/* The gradient of sigma_b with the power vectors held fixed (u_bᵀ W_b v_b -> sigma_b), not of the bound itself. */
void lipt_spectral_norm_ub_backward(lipt_ctx *ctx, lipt_node *node) { uv_backward(ctx, node); }
