/* Gradient ascent on the ∞- and 2-norms of a map's Jacobian over its input, with Hessian-vector products
 * from central differences of exact vector-Jacobian products (SPEC §4.1). */
#include "jac_session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lipt_ascent_opts lipt_ascent_defaults(void) {
    lipt_ascent_opts o = {0};
    o.starts = 8;
    o.steps = 100;
    o.lr = 0.05;
    o.input_scale = 1.0;
    o.fd_eps = 1e-3;
    o.candidates = 4;
    o.rows = NULL;
    o.rescan_every = 0;
    o.power_init = 30;
    o.max_exact = 4096;
    o.x0 = NULL;
    o.seed = 1;
    return o;
}

static lipt_status check_opts(const lipt_ascent_opts *o, lipt_error *err) {
    if (o->starts < 1 || o->steps < 0)
        return lipt_fail(err, LIPT_ERR_ARG, "ascent: starts %d, steps %d", o->starts, o->steps);
    if (!(o->lr > 0) || !(o->input_scale > 0) || !(o->fd_eps > 0))
        return lipt_fail(err, LIPT_ERR_ARG, "ascent: lr %g, input_scale %g, fd_eps %g must be positive", o->lr,
                         o->input_scale, o->fd_eps);
    if (o->candidates < 1 || o->rescan_every < 0 || o->power_init < 0)
        return lipt_fail(err, LIPT_ERR_ARG, "ascent: candidates %d, rescan_every %d, power_init %d", o->candidates,
                         o->rescan_every, o->power_init);
    return LIPT_OK;
}

/* Adam in ascent form on x (m, v moments, t the 1-based step). */
static void adam_ascend(float *x, const double *g, double *m, double *v, size_t n, int t, double lr) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-12;
    const double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    double gmax = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g[i]));
    const double e = eps * fmax(gmax, 1e-300); /* scale-free: the size of the Hessian product does not matter */
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        x[i] = (float)(x[i] + lr * (m[i] / c1) / (sqrt(v[i] / c2) + e));
    }
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static int finite_d(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

typedef struct {
    lipt_jac_sess s;
    size_t n;
    lipt_rng rng;
    float *x, *xp, *best_x;
    double *g, *m, *v;
    lipt_ascent_result r;
} asc_state;

static void start_point(asc_state *a, const lipt_ascent_opts *o, int start) {
    if (start == 0 && o->x0) memcpy(a->x, o->x0, a->n * sizeof(float));
    else lipt_rng_fill_normal(&a->rng, a->x, a->n, (float)o->input_scale);
    memset(a->m, 0, a->n * sizeof(double));
    memset(a->v, 0, a->n * sizeof(double));
}

static lipt_status asc_open(asc_state *a, const lipt_jac_map *map, const lipt_ascent_opts *o, lipt_ascent_result *res,
                            lipt_error *err) {
    memset(a, 0, sizeof *a);
    lipt_status st = check_opts(o, err);
    if (st) return st;
    st = lipt_jac_sess_open(&a->s, map, err);
    if (st) return st;
    a->n = a->s.n;
    lipt_rng_seed(&a->rng, o->seed);
    a->x = malloc(a->n * sizeof(float));
    a->xp = malloc(a->n * sizeof(float));
    a->best_x = malloc(a->n * sizeof(float));
    a->g = malloc(a->n * sizeof(double));
    a->m = malloc(a->n * sizeof(double));
    a->v = malloc(a->n * sizeof(double));
    LIPT_CHECK(a->x && a->xp && a->best_x && a->g && a->m && a->v, "ascent: out of memory (n = %zu)", a->n);
    a->r.best = -1;
    a->r.best_random = -1;
    a->r.start_best = res ? res->start_best : NULL;
    return LIPT_OK;
}

static lipt_status asc_close(asc_state *a, lipt_status st, float *x_best, lipt_ascent_result *res) {
    a->r.n_forward = a->s.n_forward;
    a->r.n_vjp = a->s.n_vjp;
    if (!st && x_best) memcpy(x_best, a->best_x, a->n * sizeof(float));
    if (res) *res = a->r;
    lipt_jac_sess_close(&a->s);
    free(a->x); free(a->xp); free(a->best_x); free(a->g); free(a->m); free(a->v);
    return st;
}

static void note_value(asc_state *a, double val, int start, double *start_best) {
    if (val > *start_best) *start_best = val;
    if (val > a->r.best) {
        a->r.best = val;
        a->r.best_start = start;
        memcpy(a->best_x, a->x, a->n * sizeof(float));
    }
}

/* A non-finite value ends the current start (a map that is not Lipschitz can run off to infinity) but not the
 * search; any other failure is returned. */
static int diverged(lipt_status st) { return st == LIPT_ERR_NUMERIC; }

/* ------------------------------------------------------------------------------------------- ∞-norm */

typedef struct { double val; size_t row; } row_val;
static int cmp_row_desc(const void *p, const void *q) {
    double a = ((const row_val *)p)->val, b = ((const row_val *)q)->val;
    return (a < b) - (a > b);
}

/* Full scan at x: candidates = the k largest row sums (rs, rv: n-long scratch). Returns the largest. */
static lipt_status scan_rows(asc_state *a, const float *x, size_t *cand, int k, double *rs, row_val *rv, double *top,
                             lipt_error *err) {
    lipt_status st = lipt_jac_sess_row_sums(&a->s, x, rs, err);
    if (st) return st;
    for (size_t r = 0; r < a->n; r++) rv[r] = (row_val){rs[r], r};
    qsort(rv, a->n, sizeof *rv, cmp_row_desc);
    for (int i = 0; i < k; i++) cand[i] = rv[i].row;
    *top = rv[0].val;
    return LIPT_OK;
}

/* Row gradient ∇f_row at x, into out (double). */
static lipt_status row_grad_at(asc_state *a, const float *x, size_t row, double *out, lipt_error *err) {
    lipt_status st = lipt_jac_sess_eval(&a->s, x, NULL, err);
    const float *g;
    if (!st) st = lipt_jac_sess_vjp(&a->s, NULL, (long)row, &g, err);
    if (!st)
        for (size_t i = 0; i < a->n; i++) out[i] = g[i];
    return st;
}

lipt_status lipt_ascent_jac_inf(const lipt_jac_map *map, const lipt_ascent_opts *opts, float *x_best,
                                lipt_ascent_result *res, lipt_error *err) {
    lipt_ascent_opts o = opts ? *opts : lipt_ascent_defaults();
    asc_state a;
    lipt_status st = asc_open(&a, map, &o, res, err);
    if (st) return st;
    const size_t n = a.n;
    const int k = (size_t)o.candidates < n ? o.candidates : (int)n;
    const int can_scan = n <= o.max_exact && !o.rows;
    if (o.rows)
        for (int i = 0; i < o.candidates; i++)
            if (o.rows[i] >= n) {
                asc_close(&a, LIPT_OK, NULL, NULL);
                return lipt_fail(err, LIPT_ERR_ARG, "ascent: row %zu outside [0, %zu)", o.rows[i], n);
            }
    size_t *cand = malloc((size_t)k * sizeof *cand);
    row_val *rv = malloc(n * sizeof *rv);
    float *sgn = malloc(n * sizeof(float));
    double *gm = malloc(n * sizeof(double)), *rs = malloc(n * sizeof(double));
    LIPT_CHECK(cand && rv && sgn && gm && rs, "ascent: out of memory (n = %zu)", n);

    for (int start = 0; start < o.starts && !st; start++) {
        double sbest = -1;
        start_point(&a, &o, start);
        for (int step = 0; step <= o.steps; step++) {
            if (step == 0 || (o.rescan_every && step % o.rescan_every == 0)) {
                if (can_scan) {
                    double scan_top;
                    st = scan_rows(&a, a.x, cand, k, rs, rv, &scan_top, err);
                } else if (step == 0 && o.rows) {
                    for (int i = 0; i < k; i++) cand[i] = o.rows[i];
                } else if (step == 0) {
                    /* too big to scan: follow k random distinct rows */
                    for (int i = 0; i < k; i++) {
                        size_t r;
                        int dup;
                        do {
                            r = (size_t)lipt_rng_below(&a.rng, n);
                            dup = 0;
                            for (int j = 0; j < i; j++) dup |= cand[j] == r;
                        } while (dup);
                        cand[i] = r;
                    }
                }
            }
            if (!st) st = lipt_jac_sess_eval(&a.s, a.x, NULL, err);
            /* exact row sums of the candidates; the largest gives the row and its sign vector */
            double top = -1;
            size_t top_row = cand[0];
            for (int i = 0; i < k && !st; i++) {
                const float *g;
                st = lipt_jac_sess_vjp(&a.s, NULL, (long)cand[i], &g, err);
                if (st) break;
                double s = 0;
                for (size_t c = 0; c < n; c++) s += fabs((double)g[c]);
                if (s > top) {
                    top = s;
                    top_row = cand[i];
                    for (size_t c = 0; c < n; c++) sgn[c] = (float)((g[c] > 0) - (g[c] < 0));
                }
            }
            if (st) break;
            if (step == 0 && top > a.r.best_random) a.r.best_random = top;
            note_value(&a, top, start, &sbest);
            if (step == o.steps) break;
            /* H_{f_i} s by a central difference of the row gradient */
            const double eps = o.fd_eps * fmax(rms(a.x, n), 1e-6 * o.input_scale);
            for (size_t i = 0; i < n; i++) a.xp[i] = (float)(a.x[i] + eps * sgn[i]);
            st = row_grad_at(&a, a.xp, top_row, a.g, err);
            if (st) break;
            for (size_t i = 0; i < n; i++) a.xp[i] = (float)(a.x[i] - eps * sgn[i]);
            st = row_grad_at(&a, a.xp, top_row, gm, err);
            if (st) break;
            /* s is held fixed, so this is ∇(s · ∇f_i) = H_i s, the gradient of the row sum */
            for (size_t i = 0; i < n; i++) a.g[i] = (a.g[i] - gm[i]) / (2 * eps);
            if (!finite_d(a.g, n)) { st = LIPT_ERR_NUMERIC; break; }
            adam_ascend(a.x, a.g, a.m, a.v, n, step + 1, o.lr * o.input_scale);
        }
        if (diverged(st)) {
            a.r.n_diverged++;
            st = LIPT_OK;
        }
        if (a.r.start_best) a.r.start_best[start] = sbest;
    }
    if (!st && can_scan && a.r.best >= 0) {
        /* re-measure the best point over all rows (at least the followed row's sum) */
        double top;
        st = scan_rows(&a, a.best_x, cand, k, rs, rv, &top, err);
        if (!st && top > a.r.best) a.r.best = top;
        if (!st && a.r.start_best && top > a.r.start_best[a.r.best_start]) a.r.start_best[a.r.best_start] = top;
    }
    if (!st && a.r.best < 0) st = lipt_fail(err, LIPT_ERR_NUMERIC, "ascent: every start diverged (non-finite values)");
    free(cand); free(rv); free(sgn); free(gm); free(rs);
    return asc_close(&a, st, x_best, res);
}

/* ------------------------------------------------------------------------------------------- 2-norm */

static double normalise_d(double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    s = sqrt(s);
    if (s > 0)
        for (size_t i = 0; i < n; i++) x[i] /= s;
    return s;
}

/* At x: w = Jᵀu (exact), returns |w| (a lower bound on σ_max for unit u); v ← w / |w|. */
static lipt_status half_round(asc_state *a, const float *x, const float *u, double *v, double *sig, lipt_error *err) {
    lipt_status st = lipt_jac_sess_eval(&a->s, x, NULL, err);
    const float *g;
    if (!st) st = lipt_jac_sess_vjp(&a->s, u, -1, &g, err);
    if (st) return st;
    for (size_t i = 0; i < a->n; i++) v[i] = g[i];
    *sig = normalise_d(v, a->n);
    if (!(*sig > 0)) {
        /* Jᵀu = 0: any unit v (keep the old direction's successor random) */
        for (size_t i = 0; i < a->n; i++) v[i] = lipt_rng_normal(&a->rng);
        normalise_d(v, a->n);
    }
    return LIPT_OK;
}

lipt_status lipt_ascent_jac_2(const lipt_jac_map *map, const lipt_ascent_opts *opts, float *x_best,
                              lipt_ascent_result *res, lipt_error *err) {
    lipt_ascent_opts o = opts ? *opts : lipt_ascent_defaults();
    asc_state a;
    lipt_status st = asc_open(&a, map, &o, res, err);
    if (st) return st;
    const size_t n = a.n;
    const int exact = n <= o.max_exact;
    float *u = malloc(n * sizeof(float));
    double *v = malloc(n * sizeof(double)), *fp = malloc(n * sizeof(double)), *gm = malloc(n * sizeof(double));
    double *J = exact ? malloc(n * n * sizeof(double)) : NULL, *ud = exact ? malloc(n * sizeof(double)) : NULL;
    LIPT_CHECK(u && v && fp && gm && (!exact || (J && ud)), "ascent: out of memory (n = %zu)", n);

    for (int start = 0; start < o.starts && !st; start++) {
        double sbest = -1, sig = 0;
        start_point(&a, &o, start);
        /* the top singular pair at the start */
        if (exact) {
            st = lipt_jac_sess_full(&a.s, a.x, J, err);
            if (!st) {
                sig = lipt_matrix_norm_2(J, n, n, ud, v);
                for (size_t i = 0; i < n; i++) u[i] = (float)ud[i];
            }
        } else {
            for (size_t i = 0; i < n; i++) u[i] = lipt_rng_normal(&a.rng);
        }
        for (int step = 0; step <= o.steps && !st; step++) {
            if (step == 0 && !exact) {
                /* power rounds: v ← Jᵀu/|.| (exact), u ← Jv/|.| (central difference of f) */
                for (int it = 0; it < o.power_init && !st; it++) {
                    st = half_round(&a, a.x, u, v, &sig, err);
                    const double eps = o.fd_eps * fmax(sqrt((double)n) * rms(a.x, n), 1e-6 * o.input_scale);
                    const float *f;
                    for (size_t i = 0; i < n && !st; i++) a.xp[i] = (float)(a.x[i] + eps * v[i]);
                    if (!st) st = lipt_jac_sess_eval(&a.s, a.xp, &f, err);
                    for (size_t i = 0; i < n && !st; i++) fp[i] = f[i];
                    for (size_t i = 0; i < n && !st; i++) a.xp[i] = (float)(a.x[i] - eps * v[i]);
                    if (!st) st = lipt_jac_sess_eval(&a.s, a.xp, &f, err);
                    for (size_t i = 0; i < n && !st; i++) fp[i] = (fp[i] - f[i]) / (2 * eps);
                    if (!st && normalise_d(fp, n) > 0)
                        for (size_t i = 0; i < n; i++) u[i] = (float)fp[i];
                }
                if (st) break;
            }
            /* exact half round at x: σ ≥ |Jᵀu| */
            st = half_round(&a, a.x, u, v, &sig, err);
            if (st) break;
            if (step == 0 && sig > a.r.best_random) a.r.best_random = sig;
            note_value(&a, sig, start, &sbest);
            if (step == o.steps) break;
            /* at x ± εv: f (for J v) and Jᵀu (for H_{uᵀf} v) */
            const double eps = o.fd_eps * fmax(sqrt((double)n) * rms(a.x, n), 1e-6 * o.input_scale);
            const float *f, *g;
            for (size_t i = 0; i < n; i++) a.xp[i] = (float)(a.x[i] + eps * v[i]);
            st = lipt_jac_sess_eval(&a.s, a.xp, &f, err);
            if (!st) st = lipt_jac_sess_vjp(&a.s, u, -1, &g, err);
            if (st) break;
            for (size_t i = 0; i < n; i++) { fp[i] = f[i]; a.g[i] = g[i]; }
            for (size_t i = 0; i < n; i++) a.xp[i] = (float)(a.x[i] - eps * v[i]);
            st = lipt_jac_sess_eval(&a.s, a.xp, &f, err);
            if (!st) st = lipt_jac_sess_vjp(&a.s, u, -1, &g, err);
            if (st) break;
            for (size_t i = 0; i < n; i++) {
                a.g[i] = (a.g[i] - g[i]) / (2 * eps);
                gm[i] = (fp[i] - f[i]) / (2 * eps); /* J v */
            }
            if (!finite_d(a.g, n) || !finite_d(gm, n)) { st = LIPT_ERR_NUMERIC; break; }
            /* u ← J v / |J v| (the other half of the power round), then step x along ∇(uᵀ J v) */
            if (normalise_d(gm, n) > 0)
                for (size_t i = 0; i < n; i++) u[i] = (float)gm[i];
            adam_ascend(a.x, a.g, a.m, a.v, n, step + 1, o.lr * o.input_scale);
        }
        if (diverged(st)) {
            a.r.n_diverged++;
            st = LIPT_OK;
        }
        if (a.r.start_best) a.r.start_best[start] = sbest;
    }
    if (!st && exact && a.r.best >= 0) {
        /* re-measure the best point with the full Jacobian */
        st = lipt_jac_sess_full(&a.s, a.best_x, J, err);
        if (!st) {
            double s2 = lipt_matrix_norm_2(J, n, n, NULL, NULL);
            if (s2 > a.r.best) a.r.best = s2;
            if (a.r.start_best && s2 > a.r.start_best[a.r.best_start]) a.r.start_best[a.r.best_start] = s2;
        }
    }
    if (!st && a.r.best < 0) st = lipt_fail(err, LIPT_ERR_NUMERIC, "ascent: every start diverged (non-finite values)");
    free(u); free(v); free(fp); free(gm); free(J); free(ud);
    return asc_close(&a, st, x_best, res);
}
