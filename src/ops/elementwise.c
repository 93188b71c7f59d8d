/* Elementwise ops with row broadcasting (add, sub, mul), scale, reductions (sum, mean, max), sqrt and the
 * contraction factor 1/max(1, x/c), each with its backward. */
#include "lipt/ops.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"
#include "core/outward.h"

/* Below this many elements a loop runs on one thread: a parallel region costs more than it saves. */
#define EW_PAR_MIN ((size_t)1 << 15)
/* Columns per block (at most) in the broadcast reduction: one block's double accumulators stay in L1. */
#define EW_RED_COLS 512

/* ---------------------------------------------------------------- broadcasting */

/* b broadcasts onto a when b has a's numel, or one element, or the numel of a trailing run of a's dims. */
static void check_broadcast(const char *op, const lipt_tensor *a, const lipt_tensor *b) {
    size_t P = b->numel;
    int ok = P == a->numel || P == 1;
    size_t p = 1;
    for (int k = a->ndim - 1; k >= 0 && !ok; k--) {
        p *= (size_t)a->shape[k];
        ok = p == P;
    }
    char sa[64], sb[64];
    LIPT_CHECK(ok, "%s: b %s does not broadcast onto a %s (need a's shape, one element, or a's trailing dims)", op,
               lipt_shape_str(b, sb, sizeof sb), lipt_shape_str(a, sa, sizeof sa));
}

/* The loops below are written with vector types (gcc -O2 vectorises none of them by itself: they would need
 * runtime alias checks), LIPT_VW elements at a time, tails through the same code on zero-padded lanes; every
 * element goes through the scalar formula's operations in its order, so the bits are those of a scalar loop.
 * EW_VLOOP(n) runs its body for v = 0, 1, ... over the vectors of n elements with i = v * LIPT_VW and len lanes. */
#define EW_NV(n) (((n) + LIPT_VW - 1) / LIPT_VW)

static inline lipt_vf apply_v(lipt_op_id op, lipt_vf x, lipt_vf y) {
    return op == LIPT_OP_ADD ? x + y : op == LIPT_OP_SUB ? x - y : x * y;
}

/* o[j] = x[j] (op) y[j] for j < n, one thread (y may be a broadcast row). */
static inline void binary_row(lipt_op_id op, float *o, const float *x, const float *y, size_t n) {
    for (size_t j = 0; j < n; j += LIPT_VW) {
        const size_t len = lipt_vlanes(j, n);
        lipt_vstore_n(o + j, apply_v(op, lipt_vload_n(x + j, len), lipt_vload_n(y + j, len)), len);
    }
}

/* o[i] = x[i] (op) y[i mod P]; the three cases keep the inner loops free of divisions. */
static void binary_kernel(lipt_op_id op, float *o, const float *x, const float *y, size_t n, size_t P) {
    if (P == n) {
        const size_t nv = EW_NV(n);
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
        for (size_t v = 0; v < nv; v++) {
            const size_t i = v * LIPT_VW, len = lipt_vlanes(i, n);
            lipt_vstore_n(o + i, apply_v(op, lipt_vload_n(x + i, len), lipt_vload_n(y + i, len)), len);
        }
    } else if (P == 1) {
        const float s = y[0];
        const size_t nv = EW_NV(n);
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
        for (size_t v = 0; v < nv; v++) {
            const size_t i = v * LIPT_VW, len = lipt_vlanes(i, n);
            lipt_vstore_n(o + i, apply_v(op, lipt_vload_n(x + i, len), lipt_vset1(s)), len);
        }
    } else {
        const size_t rows = n / P;
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
        for (size_t r = 0; r < rows; r++) binary_row(op, o + r * P, x + r * P, y, P);
    }
}

/* d[i] += g[i] * y[i mod P] (= when fresh: d is a new gradient buffer, lipt_grad_of_fresh) */
static void mul_acc(float *d, const float *g, const float *y, size_t n, size_t P, int fresh) {
    if (P == n || P == 1) {
        const size_t nv = EW_NV(n);
        const float s = y[0];
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
        for (size_t v = 0; v < nv; v++) {
            const size_t i = v * LIPT_VW, len = lipt_vlanes(i, n);
            const lipt_vf yv = P == 1 ? lipt_vset1(s) : lipt_vload_n(y + i, len);
            const lipt_vf t = lipt_vload_n(g + i, len) * yv;
            lipt_vstore_n(d + i, fresh ? t : lipt_vload_n(d + i, len) + t, len);
        }
    } else {
        const size_t rows = n / P;
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
        for (size_t r = 0; r < rows; r++)
            for (size_t j = 0; j < P; j += LIPT_VW) {
                const size_t len = lipt_vlanes(j, P), o = r * P + j;
                const lipt_vf t = lipt_vload_n(g + o, len) * lipt_vload_n(y + j, len);
                lipt_vstore_n(d + o, fresh ? t : lipt_vload_n(d + o, len) + t, len);
            }
    }
}

/* d[i] += sign * g[i] (* w[i] when w is given); = when fresh */
static void ew_acc(float *d, const float *g, const float *w, size_t n, float sign, int fresh) {
    const size_t nv = EW_NV(n);
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
    for (size_t v = 0; v < nv; v++) {
        const size_t i = v * LIPT_VW, len = lipt_vlanes(i, n);
        lipt_vf t = sign * lipt_vload_n(g + i, len);
        if (w) t = t * lipt_vload_n(w + i, len);
        lipt_vstore_n(d + i, fresh ? t : lipt_vload_n(d + i, len) + t, len);
    }
}

static lipt_tensor *binary(lipt_ctx *ctx, lipt_op_id op, lipt_tensor *a, lipt_tensor *b) {
    check_broadcast(lipt_ops[op].name, a, b);
    lipt_tensor *out = lipt_tensor_like(ctx, a);
    if (a->numel) binary_kernel(op, out->data, a->data, b->data, a->numel, b->numel);
    lipt_record(ctx, op, out, 2, (lipt_tensor *[]){a, b});
    return out;
}

/* Whether b may take over the sum's output gradient that a already took (one buffer for both): only if b is made by
 * the node recorded just before the sum and that node does not read a. Its backward is then the next to run and reads
 * b's gradient before anything adds to a's (the residual x + branch(x): the branch's last product reads the branch's
 * input, not x); were a among its inputs, it would add into the buffer it reads. */
static int may_share(const lipt_node *node, lipt_tensor *a, lipt_tensor *b) {
    const lipt_node *p = node->prev;
    if (!p || lipt_tensor_root(p->out) != lipt_tensor_root(b)) return 0;
    for (int i = 0; i < p->n_in; i++)
        if (p->in[i] && lipt_tensor_root(p->in[i]) == lipt_tensor_root(a)) return 0;
    return 1;
}

/* Inputs are read from their data, never from their gradients, so a == b (e.g. x * x) accumulates both terms. */
static void binary_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *a = node->in[0], *b = node->in[1];
    const float *g = node->out->grad;
    const size_t n = a->numel, P = b->numel;
    if (n == 0) return;
    const lipt_op_id op = node->op;
    int fresh;
    /* a + b: a's gradient is the output's, which a takes over when it has none yet (the residual stream's sums: a
     * copy of [B,T,D] fewer per block); so does b when that cannot mix their gradients (may_share). A later
     * backward of the same tape finds the buffer shared (da or db == g): nothing to add. */
    const int pass = op == LIPT_OP_ADD && !node->out->base && g == node->out->grad;
    const int a_took = pass && lipt_grad_adopt(a, (float *)g);
    float *da = a_took ? NULL : lipt_grad_of_fresh(ctx, a, &fresh);
    if (da && da != g) {
        if (op == LIPT_OP_MUL) mul_acc(da, g, b->data, n, P, fresh);
        else ew_acc(da, g, NULL, n, 1.0f, fresh);
    }
    /* x + x: b's term adds to the buffer a took, db == g */
    const int same = lipt_tensor_root(a) == lipt_tensor_root(b);
    if (pass && P == n && !same && (!a_took || may_share(node, a, b)) && lipt_grad_adopt(b, (float *)g)) return;
    /* a broadcast b's gradient is a sum over rows into a (small) buffer: zeroed, accumulated */
    float *db = P == n ? lipt_grad_of_fresh(ctx, b, &fresh) : lipt_grad_of(ctx, b);
    if (db && (db != g || same)) {
        const float *w = op == LIPT_OP_MUL ? a->data : NULL;
        const float sign = op == LIPT_OP_SUB ? -1.0f : 1.0f;
        if (P == n) ew_acc(db, g, w, n, sign, fresh);
        else lipt_reduce_rows_acc(db, g, w, n / P, P, sign);
    }
}

lipt_tensor *lipt_add(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) { return binary(ctx, LIPT_OP_ADD, a, b); }
void lipt_add_backward(lipt_ctx *ctx, lipt_node *node) { binary_backward(ctx, node); }

lipt_tensor *lipt_sub(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) { return binary(ctx, LIPT_OP_SUB, a, b); }
void lipt_sub_backward(lipt_ctx *ctx, lipt_node *node) { binary_backward(ctx, node); }

lipt_tensor *lipt_mul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b) { return binary(ctx, LIPT_OP_MUL, a, b); }
void lipt_mul_backward(lipt_ctx *ctx, lipt_node *node) { binary_backward(ctx, node); }

/* ---------------------------------------------------------------- scale */

/* farg: 0 s */
lipt_tensor *lipt_scale(lipt_ctx *ctx, lipt_tensor *a, float s) {
    lipt_tensor *out = lipt_tensor_like(ctx, a);
    const size_t n = a->numel;
    const float *x = a->data;
    float *o = out->data;
    const size_t nv = EW_NV(n);
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
    for (size_t k = 0; k < nv; k++) {
        const size_t i = k * LIPT_VW, len = lipt_vlanes(i, n);
        lipt_vstore_n(o + i, s * lipt_vload_n(x + i, len), len);
    }
    lipt_node *node = lipt_record(ctx, LIPT_OP_SCALE, out, 1, (lipt_tensor *[]){a});
    if (node) node->farg[0] = s;
    return out;
}

void lipt_scale_backward(lipt_ctx *ctx, lipt_node *node) {
    int fresh;
    float *da = lipt_grad_of_fresh(ctx, node->in[0], &fresh);
    if (da) ew_acc(da, node->out->grad, NULL, node->in[0]->numel, node->farg[0], fresh);
}

/* ---------------------------------------------------------------- reductions */

static double sum_double(const float *x, size_t n) {
    double s = 0;
#pragma omp parallel for reduction(+ : s) if (n >= EW_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* da[i] += v for all i */
static void fill_acc(float *da, size_t n, float v) {
    const size_t nv = EW_NV(n);
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
    for (size_t k = 0; k < nv; k++) {
        const size_t i = k * LIPT_VW, len = lipt_vlanes(i, n);
        lipt_vstore_n(da + i, lipt_vload_n(da + i, len) + v, len);
    }
}

lipt_tensor *lipt_sum(lipt_ctx *ctx, lipt_tensor *a) {
    lipt_tensor *out = lipt_tensor_1d(ctx, 1);
    out->data[0] = (float)sum_double(a->data, a->numel);
    lipt_record(ctx, LIPT_OP_SUM, out, 1, (lipt_tensor *[]){a});
    return out;
}

void lipt_sum_backward(lipt_ctx *ctx, lipt_node *node) {
    float *da = lipt_grad_of(ctx, node->in[0]);
    if (da) fill_acc(da, node->in[0]->numel, node->out->grad[0]);
}

lipt_tensor *lipt_mean(lipt_ctx *ctx, lipt_tensor *a) {
    LIPT_CHECK(a->numel > 0, "mean: empty tensor");
    lipt_tensor *out = lipt_tensor_1d(ctx, 1);
    out->data[0] = (float)(sum_double(a->data, a->numel) / (double)a->numel);
    lipt_record(ctx, LIPT_OP_MEAN, out, 1, (lipt_tensor *[]){a});
    return out;
}

void lipt_mean_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *a = node->in[0];
    float *da = lipt_grad_of(ctx, a);
    if (da) fill_acc(da, a->numel, (float)((double)node->out->grad[0] / (double)a->numel));
}

/* saved: the argmax (size_t). A NaN wins, so divergence is not hidden by the max. */
lipt_tensor *lipt_max(lipt_ctx *ctx, lipt_tensor *a) {
    LIPT_CHECK(a->numel > 0, "max: empty tensor");
    const float *x = a->data;
    size_t best = 0;
    if (!isnan(x[0]))
        for (size_t i = 1; i < a->numel; i++) {
            if (isnan(x[i])) { best = i; break; }
            if (x[i] > x[best]) best = i; /* strict: ties keep the first argmax */
        }
    lipt_tensor *out = lipt_tensor_1d(ctx, 1);
    out->data[0] = x[best];
    lipt_node *node = lipt_record(ctx, LIPT_OP_MAX, out, 1, (lipt_tensor *[]){a});
    if (node) {
        size_t *idx = lipt_arena_alloc(&ctx->arena, sizeof *idx);
        *idx = best;
        node->saved = idx;
    }
    lipt_profile_op_end(ctx, LIPT_OP_MAX); /* it recorded before computing */
    return out;
}

void lipt_max_backward(lipt_ctx *ctx, lipt_node *node) {
    float *da = lipt_grad_of(ctx, node->in[0]);
    if (da) da[*(const size_t *)node->saved] += node->out->grad[0];
}

/* ---------------------------------------------------------------- sqrt, contraction factor */

lipt_tensor *lipt_sqrt(lipt_ctx *ctx, lipt_tensor *a) {
    lipt_tensor *out = lipt_tensor_like(ctx, a);
    const size_t n = a->numel;
    const float *x = a->data;
    float *o = out->data;
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) o[i] = sqrtf(x[i]);
    lipt_record(ctx, LIPT_OP_SQRT, out, 1, (lipt_tensor *[]){a});
    return out;
}

/* d sqrt(x) = 1 / (2 sqrt(x)), from the saved output; infinite at x = 0, as in PyTorch. */
void lipt_sqrt_backward(lipt_ctx *ctx, lipt_node *node) {
    float *da = lipt_grad_of(ctx, node->in[0]);
    if (!da) return;
    const size_t n = node->in[0]->numel;
    const float *y = node->out->data, *g = node->out->grad;
#pragma omp parallel for if (n >= EW_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) da[i] += 0.5f * g[i] / y[i];
}

/* farg: 0 c */
lipt_tensor *lipt_contract_factor(lipt_ctx *ctx, lipt_tensor *x, float c) {
    char sx[64];
    LIPT_CHECK(x->numel == 1, "contract_factor: x %s must have one element", lipt_shape_str(x, sx, sizeof sx));
    LIPT_CHECK(c > 0, "contract_factor: c = %g must be positive", (double)c);
    lipt_tensor *out = lipt_tensor_like(ctx, x);
    if (lipt_outward_test_nearest) { /* the planted round-to-nearest of tests/test_lipschitz_outward.c */
        const double r = (double)x->data[0] / c;
        out->data[0] = r > 1 ? (float)(1.0 / r) : 1.0f;
    } else {
        /* rounded down: with x an upper bound of the map's constant, factor x <= c exactly (c / x in double is one
         * rounding of the exact quotient of two floats: one ulp down is below it, then the float below that) */
        const double q = (double)x->data[0] > (double)c ? lipt_div_dn(c, x->data[0]) : 1.0;
        out->data[0] = q > 0 ? lipt_float_dn(q) : 0.0f; /* 0 for x = +inf (as 1 / r was) */
    }
    lipt_node *node = lipt_record(ctx, LIPT_OP_CONTRACT_FACTOR, out, 1, (lipt_tensor *[]){x});
    if (node) node->farg[0] = c;
    return out;
}

/* d/dx (c / x) = -c / x² where x / c > 1; the factor is the constant 1 (derivative 0) elsewhere. */
void lipt_contract_factor_backward(lipt_ctx *ctx, lipt_node *node) {
    float *dx = lipt_grad_of(ctx, node->in[0]);
    if (!dx) return;
    const double x = node->in[0]->data[0], c = node->farg[0];
    if (x / c > 1) dx[0] += (float)(-(double)node->out->grad[0] * c / (x * x));
}
