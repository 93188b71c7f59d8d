/* Fixed-point inversion of residual maps y = x + g(x) by x ← y − g(x) from x⁰ = y (Banach), with a trace. */
#include "lipt/invert.h"

#include <math.h>
#include <string.h>

lipt_fp_opts lipt_fp_opts_default(void) { return (lipt_fp_opts){LIPT_INVERT_TOL, LIPT_INVERT_MAX_ITER, 0, 0, 0}; }

lipt_status lipt_fixed_point_invert(lipt_ctx *ctx, lipt_branch_fn g, void *user, const lipt_tensor *y,
                                    float *x_out, const lipt_fp_opts *opts, lipt_fp_result *res, lipt_error *err) {
    const lipt_fp_opts o = opts ? *opts : lipt_fp_opts_default();
    if (res) {
        res->iters = 0;
        res->converged = 0;
        res->final_err = NAN;
    }
    if (!ctx || !g || !y || !x_out) return lipt_fail(err, LIPT_ERR_ARG, "fixed_point_invert: NULL argument");
    if (!(o.tol >= 0) || o.max_iter < 1)
        return lipt_fail(err, LIPT_ERR_ARG, "fixed_point_invert: tol %g must be >= 0 and max_iter %d >= 1", o.tol,
                         o.max_iter);
    const size_t n = y->numel;
    const size_t W = o.row_width > 0 ? (size_t)o.row_width : 1;
    if (n % W != 0)
        return lipt_fail(err, LIPT_ERR_ARG, "fixed_point_invert: row width %d does not divide %zu elements", o.row_width, n);
    if (x_out < y->data + n && y->data < x_out + n)
        return lipt_fail(err, LIPT_ERR_ARG, "fixed_point_invert: x_out overlaps y (y is read every iteration)");
    const float *yd = y->data;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(yd[i])) return lipt_fail(err, LIPT_ERR_NUMERIC, "fixed_point_invert: y is not finite");
    memcpy(x_out, yd, n * sizeof(float));

    lipt_no_grad_push(ctx);
    lipt_status st = LIPT_OK;
    double diff = NAN;
    int k = 0, converged = 0;
    for (; k < o.max_iter; k++) {
        /* everything g allocates this round (and the wrapper) is released before the next */
        lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
        lipt_tensor *x = lipt_tensor_wrap(ctx, x_out, y->ndim, y->shape);
        lipt_tensor *gx = g(ctx, x, user);
        if (!gx || gx->numel != n) {
            size_t got = gx ? gx->numel : 0;
            lipt_arena_release(&ctx->arena, mark);
            st = lipt_fail(err, LIPT_ERR_ARG, "fixed_point_invert: the branch returned %zu elements for %zu", got, n);
            break;
        }
        /* check first, write second: a non-finite step leaves x_out at the last finite iterate */
        double d = 0, xmax = 0;
        int finite = 1;
        for (size_t r = 0; r < n / W && finite; r++) {
            double dr = 0, ar = 0; /* the row's change and size: 2-norms (W > 1) or absolute values (W = 1) */
            for (size_t i = r * W; i < (r + 1) * W; i++) {
                const float xn = yd[i] - gx->data[i];
                if (!isfinite(xn)) { finite = 0; break; }
                const double di = (double)xn - x_out[i], ai = x_out[i];
                dr += di * di;
                ar += ai * ai;
            }
            /* W = 1: |d| exactly (sqrt of the square could differ in the last bit) */
            dr = W == 1 ? fabs((double)(yd[r] - gx->data[r]) - x_out[r]) : sqrt(dr);
            ar = W == 1 ? fabs((double)x_out[r]) : sqrt(ar);
            if (dr > d) d = dr;
            if (ar > xmax) xmax = ar;
        }
        if (!finite) {
            lipt_arena_release(&ctx->arena, mark);
            st = lipt_fail(err, LIPT_ERR_NUMERIC,
                           "fixed_point_invert: iterate %d became non-finite (last change %.3e): the branch is not "
                           "contractive here",
                           k + 1, diff);
            break;
        }
        for (size_t i = 0; i < n; i++) x_out[i] = yd[i] - gx->data[i];
        lipt_arena_release(&ctx->arena, mark);
        diff = d;
        if (res && res->err) res->err[k] = d;
        if (d <= o.tol * fmax(1.0, xmax)) {
            converged = 1;
            k++;
            break;
        }
    }
    lipt_no_grad_pop(ctx);
    if (res) {
        res->iters = k;
        res->converged = converged;
        res->final_err = diff;
    }
    if (st) return st;
    if (!converged)
        return lipt_fail(err, LIPT_ERR_NUMERIC,
                         "fixed_point_invert: not converged after %d iterations: |x_{k+1} - x_k| = %.3e > tol %.1e "
                         "(relative); the branch may not be contractive (Lip(g) >= 1)",
                         k, diff, o.tol);
    return LIPT_OK;
}
