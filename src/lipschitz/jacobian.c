/* Exact Jacobians by vector-Jacobian products on a private context, and the ∞- and 2-norms of dense matrices. */
#include "jac_session.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

size_t lipt_jac_numel(const lipt_jac_map *m) { return lipt_shape_numel(m->ndim, m->shape); }
/* ------------------------------------------------------------------------------------------- session */

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return (x > y) - (x < y);
}

static void leaf_push(lipt_jac_sess *s, lipt_tensor *t, int *cap) {
    if (!t->requires_grad) return; /* not a gradient target, or already cleared */
    if (s->n_leaf == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        s->leaf = realloc(s->leaf, (size_t)*cap * sizeof *s->leaf);
        s->leaf_flag = realloc(s->leaf_flag, (size_t)*cap * sizeof *s->leaf_flag);
        LIPT_CHECK(s->leaf && s->leaf_flag, "jacobian: out of memory for %d leaves", *cap);
    }
    s->leaf[s->n_leaf] = t;
    s->leaf_flag[s->n_leaf] = t->requires_grad;
    s->n_leaf++;
    t->requires_grad = 0;
}

/* Every tape input that is neither x nor made by an op of this tape is a constant of the map (a weight):
 * clearing its flag keeps the VJPs from computing (and accumulating) gradients for it. */
static void clear_leaves(lipt_jac_sess *s, lipt_tensor *x) {
    size_t nn = s->probe.n_nodes, k = 0;
    void **outs = malloc((nn ? nn : 1) * sizeof *outs);
    LIPT_CHECK(outs, "jacobian: out of memory for %zu nodes", nn);
    for (lipt_node *nd = s->probe.tape; nd; nd = nd->prev) outs[k++] = nd->out;
    qsort(outs, k, sizeof *outs, cmp_ptr);
    int cap = 0;
    for (lipt_node *nd = s->probe.tape; nd; nd = nd->prev)
        for (int i = 0; i < nd->n_in; i++) {
            lipt_tensor *t = nd->in[i];
            if (!t) continue;
            lipt_tensor *r = lipt_tensor_root(t);
            void *key = r;
            if (r == x || bsearch(&key, outs, k, sizeof *outs, cmp_ptr)) continue;
            leaf_push(s, t, &cap);
            leaf_push(s, r, &cap);
        }
    free(outs);
}

lipt_status lipt_jac_sess_open(lipt_jac_sess *s, const lipt_jac_map *m, lipt_error *err) {
    memset(s, 0, sizeof *s);
    if (!m || !m->f) return lipt_fail(err, LIPT_ERR_ARG, "jacobian: no map given");
    if (m->ndim < 1 || m->ndim > LIPT_MAX_DIMS)
        return lipt_fail(err, LIPT_ERR_ARG, "jacobian: map with %d dims", m->ndim);
    for (int i = 0; i < m->ndim; i++)
        if (m->shape[i] < 1)
            return lipt_fail(err, LIPT_ERR_ARG, "jacobian: dimension %d of the map is %d", i, m->shape[i]);
    s->map = *m;
    s->n = lipt_jac_numel(m);
    lipt_ctx_init(&s->ctx, 1 << 20, 1);
    lipt_ctx_init(&s->probe, 1 << 20, 1);
    s->seed = calloc(s->n, sizeof(float));
    LIPT_CHECK(s->seed, "jacobian: out of memory for %zu floats", s->n);

    /* Probe forward at a generic point: finds the weights (and the output size) from the tape. */
    lipt_tensor *x = lipt_tensor_new(&s->probe, m->ndim, m->shape);
    lipt_rng r;
    lipt_rng_seed(&r, 0x5eed);
    lipt_rng_fill_normal(&r, x->data, s->n, 1.0f);
    x->requires_grad = 1;
    lipt_tensor *out = m->f(&s->probe, x, m->user);
    if (!out || out->numel != s->n) {
        size_t got = out ? out->numel : 0;
        lipt_jac_sess_close(s);
        return lipt_fail(err, LIPT_ERR_ARG, "jacobian: the map returns %zu elements for an input of %zu (must be "
                         "equal)", got, lipt_shape_numel(m->ndim, m->shape));
    }
    clear_leaves(s, x);
    return LIPT_OK;
}

void lipt_jac_sess_close(lipt_jac_sess *s) {
    for (int i = 0; i < s->n_workers; i++) lipt_jac_sess_close(&s->workers[i]);
    free(s->workers);
    for (int i = s->n_leaf - 1; i >= 0; i--) s->leaf[i]->requires_grad = s->leaf_flag[i];
    free(s->leaf);
    free(s->leaf_flag);
    free(s->gbuf);
    free(s->glen);
    free(s->seed);
    if (s->ctx.arena.head) lipt_ctx_free(&s->ctx);
    if (s->probe.arena.head) lipt_ctx_free(&s->probe);
    memset(s, 0, sizeof *s);
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

lipt_status lipt_jac_sess_eval(lipt_jac_sess *s, const float *x, const float **fx, lipt_error *err) {
    lipt_ctx_reset(&s->ctx);
    s->x = lipt_tensor_new(&s->ctx, s->map.ndim, s->map.shape);
    memcpy(s->x->data, x, s->n * sizeof(float));
    s->x->requires_grad = 1;
    s->out = s->map.f(&s->ctx, s->x, s->map.user);
    s->n_vjp_tape = 0;
    s->n_gbuf = 0;
    s->n_forward++;
    if (!s->out || s->out->numel != s->n)
        return lipt_fail(err, LIPT_ERR_ARG, "jacobian: the map returned %zu elements, expected %zu",
                         s->out ? s->out->numel : 0, s->n);
    if (!all_finite(s->out->data, s->n)) return lipt_fail(err, LIPT_ERR_NUMERIC, "jacobian: f(x) is not finite");
    if (fx) *fx = s->out->data;
    return LIPT_OK;
}

static void gbuf_add(lipt_jac_sess *s, lipt_tensor *t) {
    lipt_tensor *r = lipt_tensor_root(t);
    if (!t->requires_grad || !r->grad) return;
    if (s->n_gbuf == s->cap_gbuf) {
        s->cap_gbuf = s->cap_gbuf ? 2 * s->cap_gbuf : 64;
        s->gbuf = realloc(s->gbuf, (size_t)s->cap_gbuf * sizeof *s->gbuf);
        s->glen = realloc(s->glen, (size_t)s->cap_gbuf * sizeof *s->glen);
        LIPT_CHECK(s->gbuf && s->glen, "jacobian: out of memory for %d buffers", s->cap_gbuf);
    }
    s->gbuf[s->n_gbuf] = r->grad;
    s->glen[s->n_gbuf] = r->numel;
    s->n_gbuf++;
}

typedef struct { float *p; size_t n; } gb_pair;
static int cmp_gb(const void *a, const void *b) { return cmp_ptr(&((const gb_pair *)a)->p, &((const gb_pair *)b)->p); }

/* The grad buffers the first VJP allocated on this tape (deduplicated: views share their root's). */
static void collect_gbufs(lipt_jac_sess *s) {
    s->n_gbuf = 0;
    gbuf_add(s, s->x);
    gbuf_add(s, s->out);
    for (lipt_node *nd = s->ctx.tape; nd; nd = nd->prev) {
        gbuf_add(s, nd->out);
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i]) gbuf_add(s, nd->in[i]);
    }
    gb_pair *pairs = malloc((size_t)(s->n_gbuf ? s->n_gbuf : 1) * sizeof *pairs);
    LIPT_CHECK(pairs, "jacobian: out of memory");
    for (int i = 0; i < s->n_gbuf; i++) pairs[i] = (gb_pair){s->gbuf[i], s->glen[i]};
    qsort(pairs, (size_t)s->n_gbuf, sizeof *pairs, cmp_gb);
    int k = 0;
    for (int i = 0; i < s->n_gbuf; i++) {
        if (k && pairs[k - 1].p == pairs[i].p) continue;
        pairs[k++] = pairs[i];
    }
    for (int i = 0; i < k; i++) {
        s->gbuf[i] = pairs[i].p;
        s->glen[i] = pairs[i].n;
    }
    s->n_gbuf = k;
    free(pairs);
}

lipt_status lipt_jac_sess_vjp(lipt_jac_sess *s, const float *seed, long row, const float **g, lipt_error *err) {
    LIPT_CHECK(s->out, "jacobian: vjp before eval");
    LIPT_CHECK(seed || (row >= 0 && (size_t)row < s->n), "jacobian: vjp row %ld outside [0, %zu)", row, s->n);
    s->n_vjp++;
    if (!s->out->requires_grad) {
        /* f does not depend on x here: J = 0 (the seed buffer is all zeros) */
        *g = s->seed;
        return LIPT_OK;
    }
    const float *sd = seed;
    if (!seed) {
        s->seed[row] = 1.0f;
        sd = s->seed;
    }
    if (s->n_vjp_tape == 0) {
        /* the first pass allocates every gradient buffer of the tape; later passes reuse them */
        lipt_backward_seeded(&s->ctx, s->out, sd);
        collect_gbufs(s);
        s->mark = lipt_arena_get_mark(&s->ctx.arena);
    } else {
        for (int i = 0; i < s->n_gbuf; i++) memset(s->gbuf[i], 0, s->glen[i] * sizeof(float));
        lipt_backward_seeded(&s->ctx, s->out, sd);
        lipt_arena_release(&s->ctx.arena, s->mark); /* backward scratch only */
    }
    if (!seed) s->seed[row] = 0.0f;
    s->n_vjp_tape++;
    if (!s->x->grad) {
        /* x is not on the path to the output */
        *g = s->seed;
        return LIPT_OK;
    }
    if (!all_finite(s->x->grad, s->n))
        return lipt_fail(err, LIPT_ERR_NUMERIC, "jacobian: a Jacobian entry is not finite");
    *g = s->x->grad;
    return LIPT_OK;
}

/* A per-thread session: the main one already found and cleared the weights' flags, so no probe here. */
static void worker_open(lipt_jac_sess *w, const lipt_jac_sess *s) {
    memset(w, 0, sizeof *w);
    w->map = s->map;
    w->n = s->n;
    lipt_ctx_init(&w->ctx, 1 << 20, 1);
    w->seed = calloc(s->n, sizeof(float));
    LIPT_CHECK(w->seed, "jacobian: out of memory for %zu floats", s->n);
}

/* Rows per dynamic chunk: large enough to amortise scheduling, small enough to balance. */
#define JAC_ROW_CHUNK 8

lipt_status lipt_jac_sess_rows(lipt_jac_sess *s, const float *x, lipt_jac_row_sink sink, void *arg, lipt_error *err) {
    const int nt = omp_get_max_threads();
    const int par = s->map.parallel && nt > 1 && s->n >= 2 * JAC_ROW_CHUNK && !omp_in_parallel() &&
                    lipt_blas_nests_safely();
    if (!par) {
        lipt_status st = lipt_jac_sess_eval(s, x, NULL, err);
        for (size_t r = 0; r < s->n && !st; r++) {
            const float *g;
            st = lipt_jac_sess_vjp(s, NULL, (long)r, &g, err);
            if (!st) sink(r, g, arg);
        }
        return st;
    }
    if (s->n_workers < nt) {
        s->workers = realloc(s->workers, (size_t)nt * sizeof *s->workers);
        LIPT_CHECK(s->workers, "jacobian: out of memory for %d workers", nt);
        for (int i = s->n_workers; i < nt; i++) worker_open(&s->workers[i], s);
        s->n_workers = nt;
    }
    /* one forward per thread, then the rows split dynamically; ops inside run single-threaded (nested) */
    lipt_status first = LIPT_OK;
    lipt_error first_err = {0};
#pragma omp parallel num_threads(nt)
    {
        lipt_jac_sess *w = &s->workers[omp_get_thread_num()];
        lipt_error le = {0};
        lipt_status st = lipt_jac_sess_eval(w, x, NULL, &le);
#pragma omp for schedule(dynamic, JAC_ROW_CHUNK)
        for (long r = 0; r < (long)s->n; r++) {
            if (st) continue;
            const float *g;
            st = lipt_jac_sess_vjp(w, NULL, r, &g, &le);
            if (!st) sink((size_t)r, g, arg);
        }
        if (st) {
#pragma omp critical(lipt_jac_rows_err)
            if (!first) {
                first = st;
                first_err = le;
            }
        }
    }
    for (int i = 0; i < s->n_workers; i++) {
        s->n_forward += s->workers[i].n_forward;
        s->n_vjp += s->workers[i].n_vjp;
        s->workers[i].n_forward = s->workers[i].n_vjp = 0;
    }
    if (first && err) *err = first_err;
    return first;
}

typedef struct { double *out; size_t n; } sink_arg;

static void sink_full(size_t r, const float *g, void *arg) {
    const sink_arg *a = arg;
    double *o = a->out + r * a->n;
    for (size_t c = 0; c < a->n; c++) o[c] = g[c];
}

static void sink_rowsum(size_t r, const float *g, void *arg) {
    const sink_arg *a = arg;
    double s = 0;
    for (size_t c = 0; c < a->n; c++) s += fabs((double)g[c]);
    a->out[r] = s;
}

lipt_status lipt_jac_sess_full(lipt_jac_sess *s, const float *x, double *J, lipt_error *err) {
    sink_arg a = {J, s->n};
    return lipt_jac_sess_rows(s, x, sink_full, &a, err);
}

lipt_status lipt_jac_sess_row_sums(lipt_jac_sess *s, const float *x, double *rs, lipt_error *err) {
    sink_arg a = {rs, s->n};
    return lipt_jac_sess_rows(s, x, sink_rowsum, &a, err);
}

/* ------------------------------------------------------------------------------------------- public */

lipt_status lipt_jacobian_rows(const lipt_jac_map *m, const float *x, const size_t *rows, size_t k, double *out,
                               lipt_error *err) {
    lipt_jac_sess s;
    lipt_status st = lipt_jac_sess_open(&s, m, err);
    if (st) return st;
    st = lipt_jac_sess_eval(&s, x, NULL, err);
    for (size_t i = 0; i < k && !st; i++) {
        if (rows[i] >= s.n) {
            st = lipt_fail(err, LIPT_ERR_ARG, "jacobian: row %zu outside [0, %zu)", rows[i], s.n);
            break;
        }
        const float *g;
        st = lipt_jac_sess_vjp(&s, NULL, (long)rows[i], &g, err);
        if (st) break;
        double *o = out + i * s.n;
        for (size_t c = 0; c < s.n; c++) o[c] = g[c];
    }
    lipt_jac_sess_close(&s);
    return st;
}

lipt_status lipt_jacobian(const lipt_jac_map *m, const float *x, double *J, lipt_error *err) {
    lipt_jac_sess s;
    lipt_status st = lipt_jac_sess_open(&s, m, err);
    if (st) return st;
    st = lipt_jac_sess_full(&s, x, J, err);
    lipt_jac_sess_close(&s);
    return st;
}

lipt_status lipt_jacobian_norm_inf_at(const lipt_jac_map *m, const float *x, double *norm, size_t *argmax_row,
                                      lipt_error *err) {
    lipt_jac_sess s;
    lipt_status st = lipt_jac_sess_open(&s, m, err);
    if (st) return st;
    double *rs = malloc(s.n * sizeof(double));
    LIPT_CHECK(rs, "jacobian: out of memory for %zu row sums", s.n);
    st = lipt_jac_sess_row_sums(&s, x, rs, err);
    if (!st) {
        size_t arg = 0;
        for (size_t r = 1; r < s.n; r++)
            if (!(rs[r] <= rs[arg])) arg = r;
        *norm = rs[arg];
        if (argmax_row) *argmax_row = arg;
    }
    free(rs);
    lipt_jac_sess_close(&s);
    return st;
}

/* ------------------------------------------------------------------------------------------- matrix norms */

double lipt_matrix_norm_inf(const double *J, size_t m, size_t n) {
    double best = 0;
    for (size_t r = 0; r < m; r++) {
        double s = 0;
        for (size_t c = 0; c < n; c++) s += fabs(J[r * n + c]);
        if (!(s <= best)) best = s; /* NaN propagates */
    }
    return best;
}

/* Number of eigenvalues of the symmetric tridiagonal (a, b) below x (Sturm count of the LDLᵀ pivots). */
static size_t sturm_below(const double *a, const double *b, size_t k, double x) {
    size_t cnt = 0;
    double q = 1;
    for (size_t i = 0; i < k; i++) {
        q = a[i] - x - (i ? b[i - 1] * b[i - 1] / q : 0);
        if (q == 0) q = -1e-300; /* step past an exact zero pivot */
        if (q < 0) cnt++;
    }
    return cnt;
}

/* Eigenvalue number idx (ascending, 0-based) of the k×k symmetric tridiagonal with diagonal a and off-diagonal
 * b, by bisection on the Sturm count. */
static double tridiag_eig(const double *a, const double *b, size_t k, size_t idx) {
    double lo = a[0], hi = a[0];
    for (size_t i = 0; i < k; i++) {
        double r = (i ? fabs(b[i - 1]) : 0) + (i + 1 < k ? fabs(b[i]) : 0);
        if (a[i] - r < lo) lo = a[i] - r;
        if (a[i] + r > hi) hi = a[i] + r;
    }
    for (int it = 0; it < 200 && hi - lo > 4e-16 * fmax(fabs(lo), fabs(hi)); it++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        if (sturm_below(a, b, k, mid) > idx) hi = mid; /* eigenvalue idx is below mid */
        else lo = mid;
    }
    return hi;
}

/* w = Jᵀ(J q) in one pass over J (row r: t = J_r·q, then w += t J_r, the row still in cache); threads keep
 * private sums (priv, nt × n) and add them up. */
static void gram_apply(const double *J, size_t m, size_t n, const double *q, double *w, double *priv, int nt) {
    if (nt <= 1) {
        for (size_t c = 0; c < n; c++) w[c] = 0;
        for (size_t r = 0; r < m; r++) {
            const double *row = J + r * n;
            double t = 0;
            for (size_t c = 0; c < n; c++) t += row[c] * q[c];
            for (size_t c = 0; c < n; c++) w[c] += t * row[c];
        }
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        double *wt = priv + (size_t)omp_get_thread_num() * n;
        for (size_t c = 0; c < n; c++) wt[c] = 0;
#pragma omp for schedule(static)
        for (long r = 0; r < (long)m; r++) {
            const double *row = J + (size_t)r * n;
            double t = 0;
            for (size_t c = 0; c < n; c++) t += row[c] * q[c];
            for (size_t c = 0; c < n; c++) wt[c] += t * row[c];
        }
#pragma omp for schedule(static)
        for (long c = 0; c < (long)n; c++) {
            double sum = 0;
            for (int i = 0; i < nt; i++) sum += priv[(size_t)i * n + (size_t)c];
            w[c] = sum;
        }
    }
}

/* Eigenvector of the tridiagonal for the eigenvalue theta, by inverse iteration (Thomas algorithm, slightly
 * shifted so the system is not singular). y [k], work [2k]. */
static void tridiag_eigvec(const double *a, const double *b, size_t k, double theta, double *y, double *work) {
    double *c = work, *dd = work + k;
    double shift = theta + 1e-10 * fmax(fabs(theta), 1e-300);
    for (size_t i = 0; i < k; i++) y[i] = 1.0;
    for (int it = 0; it < 3; it++) {
        /* solve (T - shift I) z = y in place */
        for (size_t i = 0; i < k; i++) {
            double diag = a[i] - shift - (i ? b[i - 1] * c[i - 1] : 0);
            if (diag == 0) diag = 1e-300;
            c[i] = i + 1 < k ? b[i] / diag : 0;
            dd[i] = (y[i] - (i ? b[i - 1] * dd[i - 1] : 0)) / diag;
        }
        for (size_t i = k; i-- > 0;) y[i] = dd[i] - (i + 1 < k ? c[i] * y[i + 1] : 0);
        double nrm = 0;
        for (size_t i = 0; i < k; i++) nrm += y[i] * y[i];
        nrm = sqrt(nrm);
        if (!(nrm > 0) || !isfinite(nrm)) {
            for (size_t i = 0; i < k; i++) y[i] = i == k - 1;
            return;
        }
        for (size_t i = 0; i < k; i++) y[i] /= nrm;
    }
}

double lipt_matrix_norm_2(const double *J, size_t m, size_t n, double *u_out, double *v_out) {
    if (m == 0 || n == 0) return 0;
    const size_t kmax = n < 400 ? n : 400;
    double *Q = malloc(kmax * n * sizeof(double));
    double *w = malloc(n * sizeof(double)), *t = malloc(m * sizeof(double));
    double *al = malloc(kmax * sizeof(double)), *be = malloc(kmax * sizeof(double));
    double *y = malloc(kmax * sizeof(double)), *work = malloc(2 * kmax * sizeof(double));
    const int nt = (m * n >= ((size_t)1 << 16) && !omp_in_parallel()) ? omp_get_max_threads() : 1;
    double *priv = nt > 1 ? malloc((size_t)nt * n * sizeof(double)) : NULL;
    LIPT_CHECK(Q && w && t && al && be && y && work && (nt == 1 || priv), "matrix_norm_2: out of memory (n = %zu)", n);

    /* deterministic dense start */
    lipt_rng r;
    lipt_rng_seed(&r, 0x1a2c05);
    double nrm = 0;
    for (size_t i = 0; i < n; i++) {
        Q[i] = lipt_rng_uniform(&r) - 0.5;
        nrm += Q[i] * Q[i];
    }
    nrm = sqrt(nrm);
    for (size_t i = 0; i < n; i++) Q[i] /= nrm;

    size_t k = 0;
    double theta = 0;
    for (size_t j = 0; j < kmax; j++) {
        const double *qj = Q + j * n;
        gram_apply(J, m, n, qj, w, priv, nt);
        double a = 0;
        for (size_t i = 0; i < n; i++) a += qj[i] * w[i];
        al[j] = a;
        k = j + 1;
        /* full reorthogonalisation, twice ("twice is enough") */
        for (int pass = 0; pass < 2; pass++)
            for (size_t l = 0; l <= j; l++) {
                const double *ql = Q + l * n;
                double p = 0;
                for (size_t i = 0; i < n; i++) p += ql[i] * w[i];
                for (size_t i = 0; i < n; i++) w[i] -= p * ql[i];
            }
        double b = 0;
        for (size_t i = 0; i < n; i++) b += w[i] * w[i];
        b = sqrt(b);
        be[j] = b;
        theta = tridiag_eig(al, be, k, k - 1);
        if (!isfinite(theta)) break;
        /* residual of the Ritz pair, b |y_last|: some eigenvalue lies within res of theta, and with the next Ritz
         * value theta2 as the gap estimate the error of theta is about res² / (theta - theta2) */
        tridiag_eigvec(al, be, k, theta, y, work);
        const double res = b * fabs(y[k - 1]), th = fmax(theta, 1e-300);
        const double gap = k > 1 ? theta - tridiag_eig(al, be, k, k - 2) : theta;
        if (res <= 1e-9 * th || res * res <= 1e-13 * th * gap || b <= 1e-14 * th || j + 1 == kmax || j + 1 == n) break;
        double *qn = Q + (j + 1) * n;
        for (size_t i = 0; i < n; i++) qn[i] = w[i] / b;
    }
    /* Ritz vector v = Q y; σ = |J v| is the norm of an explicit unit vector's image (a true lower bound) */
    tridiag_eigvec(al, be, k, theta, y, work);
    for (size_t i = 0; i < n; i++) w[i] = 0;
    for (size_t l = 0; l < k; l++)
        for (size_t i = 0; i < n; i++) w[i] += y[l] * Q[l * n + i];
    double vn = 0;
    for (size_t i = 0; i < n; i++) vn += w[i] * w[i];
    vn = sqrt(vn);
    for (size_t i = 0; i < n; i++) w[i] = vn > 0 ? w[i] / vn : 0;
    lipt_dgemv((int)m, (int)n, 1.0, J, (int)n, w, 0.0, t);
    double jv = 0;
    for (size_t i = 0; i < m; i++) jv += t[i] * t[i];
    jv = sqrt(jv);
    double sigma = fmax(jv, theta > 0 ? sqrt(theta) : 0);
    if (!isfinite(theta)) sigma = NAN;
    if (v_out) memcpy(v_out, w, n * sizeof(double));
    if (u_out)
        for (size_t i = 0; i < m; i++) u_out[i] = jv > 0 ? t[i] / jv : (i == 0);
    free(Q); free(w); free(t); free(al); free(be); free(y); free(work); free(priv);
    return sigma;
}

/* ------------------------------------------------------------------ token-wise mixed norm ‖·‖_{∞,2} */

/* Block (i, k) of J (N·D square, token-major rows and columns): rows i*D.., columns k*D... */
static void block_copy(const double *J, size_t N, size_t D, size_t i, size_t k, double *out) {
    const size_t n = N * D;
    for (size_t r = 0; r < D; r++) memcpy(out + r * D, J + (i * D + r) * n + k * D, D * sizeof(double));
}

double lipt_matrix_norm_inf2(const double *J, size_t N, size_t D, double *upper) {
    const size_t n = N * D;
    double lower = 0, up = 0;
    double *blk = malloc(D * D * sizeof(double)), *w = malloc(D * sizeof(double)), *acc = malloc(D * sizeof(double));
    double *t = malloc(D * sizeof(double));
    LIPT_CHECK(blk && w && acc && t, "matrix_norm_inf2: out of memory (D = %zu)", D);
    for (size_t i = 0; i < N; i++) {
        /* upper: Σ_k ‖J_ik‖₂ (each block's norm by Lanczos: accurate to ~1e-9 relative) */
        double rs = 0;
        for (size_t k = 0; k < N && upper; k++) {
            block_copy(J, N, D, i, k, blk);
            double any = 0;
            for (size_t e = 0; e < D * D; e++) any += fabs(blk[e]);
            if (any > 0) rs += lipt_matrix_norm_2(blk, D, D, NULL, NULL);
        }
        if (!(rs <= up)) up = rs;
        /* lower: sup over ‖Δx_k‖₂ <= 1 of ‖Σ_k J_ik Δx_k‖₂, by alternating maximisation from the output direction w:
         * Δx_k = J_ikᵀw / ‖J_ikᵀw‖ attains Σ_k ‖J_ikᵀw‖ for that w, then w follows the image. Every value is attained
         * by a feasible Δx: never above the norm. Start: block i's first coordinate rows, or (all zero) its largest */
        size_t n_first = D < 4 ? D : 4, start = 0;
        double blk_best = 0, big_n = -1;
        for (size_t si = 0; si <= n_first; si++, start = si) {
            for (size_t r = 0; si == n_first && blk_best == 0 && r < D; r++) { /* the fallback start */
                double s = 0;
                for (size_t c = 0; c < n; c++) s += J[(i * D + r) * n + c] * J[(i * D + r) * n + c];
                if (s > big_n) big_n = s, start = r;
            }
            if (si == n_first && (blk_best > 0 || start < n_first)) break;
            for (size_t c = 0; c < D; c++) w[c] = c == start ? 1.0 : 0.0;
            double val = 0;
            for (int it = 0; it < 100; it++) {
                memset(acc, 0, D * sizeof(double));
                for (size_t k = 0; k < N; k++) {
                    /* t = J_ikᵀ w */
                    double tn = 0;
                    for (size_t c = 0; c < D; c++) {
                        double s = 0;
                        for (size_t r = 0; r < D; r++) s += J[(i * D + r) * n + k * D + c] * w[r];
                        t[c] = s;
                        tn += s * s;
                    }
                    tn = sqrt(tn);
                    if (!(tn > 0)) continue;
                    /* acc += J_ik (t / ‖t‖) */
                    for (size_t r = 0; r < D; r++) {
                        double s = 0;
                        for (size_t c = 0; c < D; c++) s += J[(i * D + r) * n + k * D + c] * t[c];
                        acc[r] += s / tn;
                    }
                }
                double an = 0;
                for (size_t r = 0; r < D; r++) an += acc[r] * acc[r];
                an = sqrt(an); /* ‖Σ_k J_ik Δx_k‖ for the feasible Δx above: a true lower bound */
                if (an > val) val = an;
                if (!(an > 0)) break;
                const double prev = val;
                for (size_t r = 0; r < D; r++) w[r] = acc[r] / an;
                if (it > 3 && an <= prev * (1 + 1e-12) && an >= prev * (1 - 1e-12)) break;
            }
            if (!(val <= lower)) lower = val;
            if (val > blk_best) blk_best = val;
        }
    }
    free(blk);
    free(w);
    free(acc);
    free(t);
    if (upper) *upper = up;
    return lower;
}
