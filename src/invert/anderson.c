/* Accelerated fixed-point inversion of y = x + g(x) for reversible training: Anderson mixing over the last m
 * residuals, per independent group (a sequence: attention mixes tokens within one only), safeguarded by plain
 * iteration, stopped by the a-posteriori bound the certificate gives (include/lipt/invert.h).
 *
 * With G(x) = y − g(x) and Lip(g) ≤ c < 1 (the certificate, in the stopping norm), for any x the fixed point x*
 * satisfies ‖G(x) − x*‖ = ‖g(x*) − g(x)‖ ≤ c ‖x − x*‖ and ‖x − x*‖ ≤ ‖G(x) − x‖ + ‖G(x) − x*‖, so
 * ‖G(x) − x*‖ ≤ c / (1 − c) · ‖G(x) − x‖: the bound holds for whatever iterate the mixing produced, and the answer
 * returned is G(x) at the iterate that met it. */
#include "lipt/invert.h"

#include <math.h>
#include <string.h>

#define ACCEL_MAX_M 16
#define ACCEL_REG 1e-10 /* Tikhonov term of the mixing's normal equations, relative to their largest diagonal */

/* ‖v‖ over n floats: the largest 2-norm of rows of W (W > 0), else the largest entry. */
static double norm_of(const float *v, size_t n, size_t W) {
    double best = 0;
    if (W == 0) {
        for (size_t i = 0; i < n; i++) {
            const double a = fabs((double)v[i]);
            if (!(a <= best)) best = a;
        }
        return best;
    }
    for (size_t r = 0; r < n / W; r++) {
        double s = 0;
        for (size_t i = r * W; i < (r + 1) * W; i++) s += (double)v[i] * v[i];
        if (!(s <= best)) best = s;
    }
    return sqrt(best);
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Solves A z = 1 (A h×h, row-major, overwritten) by elimination with partial pivoting; 0 if singular. */
static int solve_ones(double *A, int h, double *z) {
    for (int i = 0; i < h; i++) z[i] = 1.0;
    for (int c = 0; c < h; c++) {
        int p = c;
        for (int r = c + 1; r < h; r++)
            if (fabs(A[r * h + c]) > fabs(A[p * h + c])) p = r;
        if (!(fabs(A[p * h + c]) > 0)) return 0;
        if (p != c) {
            for (int k = 0; k < h; k++) {
                const double t = A[c * h + k];
                A[c * h + k] = A[p * h + k];
                A[p * h + k] = t;
            }
            const double t = z[c];
            z[c] = z[p];
            z[p] = t;
        }
        for (int r = c + 1; r < h; r++) {
            const double f = A[r * h + c] / A[c * h + c];
            for (int k = c; k < h; k++) A[r * h + k] -= f * A[c * h + k];
            z[r] -= f * z[c];
        }
    }
    for (int c = h - 1; c >= 0; c--) {
        double s = z[c];
        for (int k = c + 1; k < h; k++) s -= A[c * h + k] * z[k];
        z[c] = s / A[c * h + c];
    }
    for (int i = 0; i < h; i++)
        if (!isfinite(z[i])) return 0;
    return 1;
}

typedef struct {
    size_t n, ng, W;      /* elements, per group, row width of the norm */
    int m, slots, groups; /* history, m + 1 ring slots */
    float *F, *G;         /* [slots][n]: residuals G(x) − x and values G(x) */
    double *H;            /* [groups][slots][slots]: Gram matrices of the residuals, by slot */
    int *count;           /* [groups]: residuals in the history (ending at the current slot) */
    int *done;            /* [groups] */
    double *best;         /* [groups]: the smallest residual norm seen */
    double *bound;        /* [groups]: the last relative bound */
} accel;

/* Group b's next iterate into x from the history ending at slot s (the mixing), or its plain step. */
static void mix(accel *a, int b, int s, float *x) {
    const int h = a->count[b], S = a->slots;
    const size_t off = (size_t)b * a->ng;
    double A[(ACCEL_MAX_M + 1) * (ACCEL_MAX_M + 1)], z[ACCEL_MAX_M + 1];
    int slot[ACCEL_MAX_M + 1];
    for (int i = 0; i < h; i++) slot[i] = ((s - i) % S + S) % S;
    const double *Hb = a->H + (size_t)b * S * S;
    double dmax = 0;
    for (int i = 0; i < h; i++)
        for (int j = 0; j < h; j++) {
            A[i * h + j] = Hb[slot[i] * S + slot[j]];
            if (i == j && A[i * h + j] > dmax) dmax = A[i * h + j];
        }
    for (int i = 0; i < h; i++) A[i * h + i] += ACCEL_REG * dmax;
    double sum = 0;
    const int ok = h > 1 && solve_ones(A, h, z);
    if (ok)
        for (int i = 0; i < h; i++) sum += z[i];
    if (!ok || !(fabs(sum) > 0) || !isfinite(sum)) { /* the plain step */
        memcpy(x + off, a->G + (size_t)s * a->n + off, a->ng * sizeof(float));
        return;
    }
    for (size_t e = 0; e < a->ng; e++) {
        double v = 0;
        for (int i = 0; i < h; i++) v += z[i] / sum * a->G[(size_t)slot[i] * a->n + off + e];
        x[off + e] = (float)v;
    }
}

/* Group b at slot s after an evaluation: residual, stopping rule, history; returns its relative bound. */
static double step_group(accel *a, int b, int s, const float *y, const float *gx, float *x, double lip, double tol,
                         int *fallbacks, int *finite) {
    const size_t off = (size_t)b * a->ng;
    float *F = a->F + (size_t)s * a->n + off, *G = a->G + (size_t)s * a->n + off;
    for (size_t e = 0; e < a->ng; e++) {
        G[e] = y[off + e] - gx[off + e];
        F[e] = G[e] - x[off + e];
    }
    const double r = norm_of(F, a->ng, a->W), xn = norm_of(x + off, a->ng, a->W);
    if (!isfinite(r) || !isfinite(xn)) {
        *finite = 0;
        return INFINITY;
    }
    const double rel = (lip > 0 ? lip / (1 - lip) : 1.0) * r / fmax(1.0, xn);
    if (rel <= tol || a->m == 0) { /* converged, or plain iteration: x ← G(x) */
        memcpy(x + off, G, a->ng * sizeof(float));
        a->done[b] = rel <= tol;
        return rel;
    }
    if (a->count[b] > 0 && r > a->best[b]) { /* the mixing made it worse: forget the history, step plainly */
        a->count[b] = 0;
        (*fallbacks)++;
    }
    if (r < a->best[b]) a->best[b] = r;
    a->count[b] = a->count[b] < a->slots ? a->count[b] + 1 : a->slots;
    double *Hb = a->H + (size_t)b * a->slots * a->slots;
    for (int i = 0; i < a->count[b]; i++) {
        const int t = ((s - i) % a->slots + a->slots) % a->slots;
        const double d = dot(F, a->F + (size_t)t * a->n + off, a->ng);
        Hb[s * a->slots + t] = Hb[t * a->slots + s] = d;
    }
    mix(a, b, s, x);
    return rel;
}

/* g at x_out, on the whole of y's shape, or (compact) on the groups still iterating only: their rows gathered into
 * [active, rest of a group's shape], the result scattered back (the done groups' values are never read again). */
static lipt_tensor *evaluate(lipt_ctx *ctx, lipt_branch_fn g, void *user, const lipt_tensor *y, float *x_out,
                             const accel *a, int compact) {
    if (!compact || y->ndim != 3 || (a->groups != y->shape[0] && a->groups != y->shape[0] * y->shape[1]))
        return g(ctx, lipt_tensor_wrap(ctx, x_out, y->ndim, y->shape), user);
    int active = 0;
    for (int b = 0; b < a->groups; b++) active += !a->done[b];
    const int per_seq = a->groups == y->shape[0]; /* groups are sequences [T, D], else tokens [1, D] */
    const int shape[3] = {active, per_seq ? y->shape[1] : 1, y->shape[2]};
    lipt_tensor *xc = lipt_tensor_new(ctx, 3, shape);
    for (int b = 0, i = 0; b < a->groups; b++)
        if (!a->done[b]) memcpy(xc->data + (size_t)i++ * a->ng, x_out + (size_t)b * a->ng, a->ng * sizeof(float));
    lipt_tensor *gc = g(ctx, xc, user);
    if (!gc || gc->numel != xc->numel) return gc;
    lipt_tensor *gx = lipt_tensor_new(ctx, y->ndim, y->shape);
    for (int b = 0, i = 0; b < a->groups; b++)
        if (!a->done[b]) memcpy(gx->data + (size_t)b * a->ng, gc->data + (size_t)i++ * a->ng, a->ng * sizeof(float));
    return gx;
}

lipt_status lipt_fixed_point_invert_accel(lipt_ctx *ctx, lipt_branch_fn g, void *user, const lipt_tensor *y,
                                          float *x_out, const lipt_fp_accel_opts *o, lipt_inv_info *info,
                                          lipt_error *err) {
    *info = (lipt_inv_info){0, 0, 0, INFINITY, 0};
    const size_t n = y->numel;
    const int groups = o->groups > 0 ? o->groups : 1;
    if (o->memory < 0 || o->memory > ACCEL_MAX_M || o->max_iter < 1 || !(o->tol > 0) || n % (size_t)groups ||
        (o->row_width > 0 && (n / groups) % (size_t)o->row_width) || !(o->lip < 1))
        return lipt_fail(err, LIPT_ERR_ARG, "accelerated inversion: memory %d (0..%d), max_iter %d, tol %g, %d groups "
                         "of %zu elements, row width %d, Lipschitz bound %g (< 1)", o->memory, ACCEL_MAX_M,
                         o->max_iter, o->tol, groups, n, o->row_width, o->lip);
    const lipt_arena_mark outer = lipt_arena_get_mark(&ctx->arena);
    accel a = {n, n / groups, (size_t)(o->row_width > 0 ? o->row_width : 0), o->memory, o->memory + 1, groups,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    a.F = lipt_arena_alloc(&ctx->arena, (size_t)a.slots * n * sizeof(float));
    a.G = lipt_arena_alloc(&ctx->arena, (size_t)a.slots * n * sizeof(float));
    a.H = lipt_arena_calloc(&ctx->arena, (size_t)groups * a.slots * a.slots * sizeof(double));
    a.count = lipt_arena_calloc(&ctx->arena, (size_t)groups * sizeof(int));
    a.done = lipt_arena_calloc(&ctx->arena, (size_t)groups * sizeof(int));
    a.best = lipt_arena_alloc(&ctx->arena, (size_t)groups * sizeof(double));
    a.bound = lipt_arena_alloc(&ctx->arena, (size_t)groups * sizeof(double));
    for (int b = 0; b < groups; b++) a.best[b] = a.bound[b] = INFINITY;
    memcpy(x_out, y->data, n * sizeof(float)); /* x⁰ = y: the branch is small against the stream */
    lipt_status st = LIPT_OK;
    double worst = 0;
    int k = 0, left = groups;
    for (; k < o->max_iter && left > 0 && st == LIPT_OK; k++) {
        const lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
        info->work += o->compact ? (double)left / groups : 1.0;
        lipt_tensor *gx = evaluate(ctx, g, user, y, x_out, &a, o->compact && left < groups);
        if (!gx || gx->numel != n) {
            st = lipt_fail(err, LIPT_ERR_ARG, "accelerated inversion: the branch returned %zu elements for %zu",
                           gx ? gx->numel : 0, n);
        } else {
            const int s = k % a.slots;
            int finite = 1;
            for (int b = 0; b < groups && finite; b++) {
                if (a.done[b]) continue;
                a.bound[b] = step_group(&a, b, s, y->data, gx->data, x_out, o->lip, o->tol, &info->fallbacks, &finite);
                left -= a.done[b];
            }
            if (!finite)
                st = lipt_fail(err, LIPT_ERR_NUMERIC, "accelerated inversion: iterate %d is not finite: the branch is "
                               "not a contraction here", k + 1);
        }
        lipt_arena_release(&ctx->arena, mark);
    }
    for (int b = 0; b < groups; b++)
        if (!(a.bound[b] <= worst)) worst = a.bound[b];
    lipt_arena_release(&ctx->arena, outer);
    info->iters = k;
    info->converged = left == 0 && st == LIPT_OK;
    info->bound = worst;
    if (st == LIPT_OK && left > 0)
        st = lipt_fail(err, LIPT_ERR_NUMERIC, "accelerated inversion: %d of %d sequences not within tol %.1e after %d "
                       "iterations (bound %.3e)", left, groups, o->tol, k, worst);
    return st;
}
