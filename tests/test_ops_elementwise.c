/* elementwise ops: add/sub/mul in every broadcasting form (same shape, trailing-dim rows, scalar) and with a == b,
 * scale, sum, mean, max, sqrt and contract_factor: forward against double references, backward against finite
 * differences, long reductions against double sums, and accumulation (+=) into existing gradients. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-2

typedef lipt_tensor *(*binary_fn)(lipt_ctx *, lipt_tensor *, lipt_tensor *);
typedef struct { binary_fn f; int op; } bin_args; /* op: 0 add, 1 sub, 2 mul */

static const char *const bin_names[3] = {"add", "sub", "mul"};
static const binary_fn bin_fns[3] = {lipt_add, lipt_sub, lipt_mul};

static double ref_bin(int op, double x, double y) { return op == 0 ? x + y : op == 1 ? x - y : x * y; }

static lipt_tensor *build_bin(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return ((bin_args *)user)->f(ctx, in[0], in[1]);
}
static lipt_tensor *build_bin_alias(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return ((bin_args *)user)->f(ctx, in[0], in[0]);
}

/* (a shape, b shape) pairs: same shape, trailing-dim rows (1 and more dims), flattened trailing rows, scalar. */
typedef struct { int and_, a[4], bnd, b[4]; const char *form; } bcast_case;
static const bcast_case bcases[] = {
    {2, {3, 5}, 2, {3, 5}, "same"},
    {3, {2, 3, 4}, 3, {2, 3, 4}, "same"},
    {3, {1, 1, 7}, 3, {1, 1, 7}, "same"},
    {1, {1}, 1, {1}, "same"},
    {4, {2, 1, 3, 2}, 4, {2, 1, 3, 2}, "same"},
    {3, {2, 3, 5}, 1, {5}, "bias[D]"},
    {2, {9, 7}, 1, {7}, "bias[D]"},
    {3, {4, 1, 3}, 1, {3}, "bias[D]"},
    {3, {2, 3, 5}, 2, {3, 5}, "rows[T,D]"},
    {3, {3, 1, 4}, 2, {1, 4}, "rows[T,D]"},
    {4, {2, 2, 3, 2}, 2, {3, 2}, "rows[T,D]"},
    {4, {3, 2, 3, 2}, 3, {2, 3, 2}, "rows[3d]"},
    {3, {2, 3, 4}, 1, {12}, "rows flat"},
    {2, {3, 5}, 1, {1}, "scalar"},
    {3, {2, 3, 4}, 2, {1, 1}, "scalar"},
    {3, {5, 1, 3}, 1, {1}, "scalar"},
};
#define N_BCASES (sizeof bcases / sizeof bcases[0])

/* Gradient of `build` at the inputs for output weights r (n_out), into fresh buffers (caller frees). */
static float **grads_at(tu_build_fn build, void *user, lipt_tensor **in, int n_in, const float *r, float *prefill) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    float **pre = calloc((size_t)n_in, sizeof *pre);
    for (int i = 0; i < n_in; i++) {
        in[i]->grad = NULL;
        if (prefill && in[i]->requires_grad) {
            pre[i] = malloc(in[i]->numel * sizeof(float));
            for (size_t j = 0; j < in[i]->numel; j++) pre[i][j] = prefill[0];
            in[i]->grad = pre[i];
        }
    }
    lipt_tensor *out = build(&ctx, in, user);
    lipt_backward_seeded(&ctx, out, r);
    float **g = calloc((size_t)n_in, sizeof *g);
    for (int i = 0; i < n_in; i++) {
        if (!in[i]->requires_grad) continue;
        g[i] = calloc(in[i]->numel, sizeof(float));
        if (in[i]->grad) memcpy(g[i], in[i]->grad, in[i]->numel * sizeof(float));
        in[i]->grad = NULL;
        free(pre[i]);
    }
    free(pre);
    lipt_ctx_free(&ctx);
    return g;
}

static void free_grads(float **g, int n) {
    for (int i = 0; i < n; i++) free(g[i]);
    free(g);
}

static size_t out_numel(tu_build_fn build, void *user, lipt_tensor **in) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    size_t n = build(&ctx, in, user)->numel;
    lipt_ctx_free(&ctx);
    return n;
}

/* Backward must add (+=) into gradients that already hold something: with every input's gradient
 * pre-filled with 1.5 the result must be exactly 1.5 more. Returns the worst relative deviation. */
static double check_accumulates(const char *label, tu_build_fn build, void *user, lipt_tensor **in, int n_in) {
    size_t nout = out_numel(build, user, in);
    float *r = malloc(nout * sizeof(float));
    lipt_rng rng;
    lipt_rng_seed(&rng, 99);
    lipt_rng_fill_normal(&rng, r, nout, 1.0f);
    float pre = 1.5f;
    float **g0 = grads_at(build, user, in, n_in, r, NULL);
    float **g1 = grads_at(build, user, in, n_in, r, &pre);
    double worst = 0;
    for (int i = 0; i < n_in; i++) {
        if (!g0[i]) continue;
        for (size_t j = 0; j < in[i]->numel; j++) {
            double want = (double)g0[i][j] + pre;
            double e = fabs(g1[i][j] - want) / fmax(1.0, fabs(want));
            if (!(e <= worst)) worst = e;
        }
    }
    free_grads(g0, n_in);
    free_grads(g1, n_in);
    free(r);
    ck_assert_msg(worst < 1e-5, "%s: backward does not accumulate into existing gradients (err %.3e)", label, worst);
    return worst;
}

/* ---------------------------------------------------------------- add / sub / mul */

START_TEST(test_binary_broadcast) {
    double worst_fwd = 0, worst_bwd = 0, worst_acc = 0;
    for (int op = 0; op < 3; op++)
        for (size_t ci = 0; ci < N_BCASES; ci++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const bcast_case *bc = &bcases[ci];
                lipt_rng rng;
                lipt_rng_seed(&rng, seed * 1000 + ci * 10 + (uint64_t)op);
                /* seed 3: only one input requires grad (alternating), the other path must be skipped */
                int ra = seed != 3 || ci % 2 == 0, rb = seed != 3 || ci % 2 == 1;
                lipt_tensor *A = tu_tensor(&rng, bc->and_, bc->a, 1.0f, ra);
                lipt_tensor *B = tu_tensor(&rng, bc->bnd, bc->b, 1.0f, rb);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *C = bin_fns[op](&ctx, A, B);
                ck_assert(lipt_same_shape(C, A));
                ck_assert(C->requires_grad);
                double *ref = malloc(A->numel * sizeof(double));
                for (size_t i = 0; i < A->numel; i++) ref[i] = ref_bin(op, A->data[i], B->data[i % B->numel]);
                double e = tu_max_rel_err(C->data, ref, A->numel, 1e-6);
                ck_assert_msg(e < FWD_TOL, "%s %s forward rel err %.3e", bin_names[op], bc->form, e);
                if (e > worst_fwd) worst_fwd = e;
                free(ref);
                lipt_ctx_free(&ctx);

                char label[96], sa[32], sb[32];
                snprintf(label, sizeof label, "%s %s a%s b%s s%d%s", bin_names[op], bc->form,
                         lipt_shape_str(A, sa, sizeof sa), lipt_shape_str(B, sb, sizeof sb), (int)seed,
                         seed == 3 ? (ra ? " (a only)" : " (b only)") : "");
                bin_args args = {bin_fns[op], op};
                double g = tu_gradcheck(label, build_bin, &args, (lipt_tensor *[]){A, B}, 2,
                                        &(tu_gradcheck_opts){.seed = seed + 10 * ci, .tol = GRAD_TOL});
                if (g > worst_bwd) worst_bwd = g;
                if (seed == 1) {
                    double ea = check_accumulates(label, build_bin, &args, (lipt_tensor *[]){A, B}, 2);
                    if (ea > worst_acc) worst_acc = ea;
                }
                tu_free(A);
                tu_free(B);
            }
    printf("add/sub/mul broadcast: worst forward rel err %.3e (tol %.0e), worst gradient rel err %.3e (tol %.0e), "
           "worst accumulation err %.3e\n", worst_fwd, FWD_TOL, worst_bwd, GRAD_TOL, worst_acc);
}
END_TEST

/* a == b: x + x, x - x, x * x; gradients 2r, 0, 2xr exactly (up to rounding), and by finite differences. */
START_TEST(test_binary_alias) {
    const int shapes[][4] = {{1, 1}, {2, 3, 5}, {3, 1, 7}, {4, 2, 1, 3}};
    const int nds[] = {1, 3, 3, 4};
    double worst_fwd = 0, worst_bwd = 0, worst_direct = 0;
    for (int op = 0; op < 3; op++)
        for (size_t si = 0; si < 4; si++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 500 + seed * 10 + si);
                lipt_tensor *X = tu_tensor(&rng, nds[si], shapes[si], 1.0f, 1);
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *C = bin_fns[op](&ctx, X, X);
                double *ref = malloc(X->numel * sizeof(double));
                for (size_t i = 0; i < X->numel; i++) ref[i] = ref_bin(op, X->data[i], X->data[i]);
                double e = tu_max_rel_err(C->data, ref, X->numel, 1e-6);
                ck_assert_msg(e < FWD_TOL, "%s alias forward rel err %.3e", bin_names[op], e);
                if (e > worst_fwd) worst_fwd = e;
                /* direct gradient */
                float *r = malloc(X->numel * sizeof(float));
                lipt_rng_fill_normal(&rng, r, X->numel, 1.0f);
                X->grad = NULL;
                lipt_backward_seeded(&ctx, C, r);
                for (size_t i = 0; i < X->numel; i++)
                    ref[i] = op == 0 ? 2.0 * r[i] : op == 1 ? 0.0 : 2.0 * r[i] * X->data[i];
                ck_assert_ptr_nonnull(X->grad);
                double ed = tu_max_rel_err(X->grad, ref, X->numel, 1e-6);
                ck_assert_msg(ed < 1e-6, "%s alias gradient rel err %.3e", bin_names[op], ed);
                if (ed > worst_direct) worst_direct = ed;
                X->grad = NULL;
                free(r);
                free(ref);
                lipt_ctx_free(&ctx);

                char label[96], sx[32];
                snprintf(label, sizeof label, "%s alias a=b=%s s%d", bin_names[op], lipt_shape_str(X, sx, sizeof sx),
                         (int)seed);
                bin_args args = {bin_fns[op], op};
                double g = tu_gradcheck(label, build_bin_alias, &args, (lipt_tensor *[]){X}, 1,
                                        &(tu_gradcheck_opts){.seed = seed + si, .tol = GRAD_TOL});
                if (g > worst_bwd) worst_bwd = g;
                check_accumulates(label, build_bin_alias, &args, (lipt_tensor *[]){X}, 1);
                tu_free(X);
            }
    printf("add/sub/mul a == b: worst forward rel err %.3e, worst direct gradient rel err %.3e, worst fd gradient "
           "rel err %.3e\n", worst_fwd, worst_direct, worst_bwd);
}
END_TEST

/* The bias and scalar gradients are sums over many rows: they must match a double sum to float rounding,
 * on sizes that take the parallel paths (and P > 64 crosses a reduction column block). */
START_TEST(test_binary_long_reduction) {
    const struct { int rows, P; } cases[] = {{400000, 1}, {150001, 3}, {3001, 130}, {1, 70001}};
    double worst = 0;
    for (int op = 0; op < 3; op++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            int rows = cases[ci].rows, P = cases[ci].P;
            lipt_rng rng;
            lipt_rng_seed(&rng, 77 + ci);
            lipt_tensor *A = tu_tensor(&rng, 2, (int[]){rows, P}, 1.0f, 1);
            lipt_tensor *B = tu_tensor(&rng, 1, (int[]){P}, 1.0f, 1);
            /* a constant offset makes float accumulation drift visibly */
            for (size_t i = 0; i < A->numel; i++) A->data[i] += 0.37f;
            size_t n = A->numel;
            float *r = malloc(n * sizeof(float));
            lipt_rng_fill_normal(&rng, r, n, 1.0f);
            for (size_t i = 0; i < n; i++) r[i] = 0.25f + 0.1f * r[i];
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 20, 1);
            lipt_tensor *C = bin_fns[op](&ctx, A, B);
            double *ref = malloc(n * sizeof(double));
            for (size_t i = 0; i < n; i++) ref[i] = ref_bin(op, A->data[i], B->data[i % (size_t)P]);
            double ef = tu_max_rel_err(C->data, ref, n, 1e-6);
            ck_assert_msg(ef < FWD_TOL, "%s long forward rel err %.3e", bin_names[op], ef);
            A->grad = B->grad = NULL;
            lipt_backward_seeded(&ctx, C, r);
            double *db = calloc((size_t)P, sizeof(double));
            for (size_t i = 0; i < n; i++)
                db[i % (size_t)P] += op == 0 ? r[i] : op == 1 ? -(double)r[i] : (double)r[i] * A->data[i];
            double e = tu_max_rel_err(B->grad, db, (size_t)P, 1e-6);
            for (size_t i = 0; i < n; i++)
                ref[i] = op == 2 ? (double)r[i] * B->data[i % (size_t)P] : r[i];
            double ea = tu_max_rel_err(A->grad, ref, n, 1e-6);
            printf("%s long reduction rows %d P %d: db rel err %.3e, da rel err %.3e, forward %.3e\n", bin_names[op],
                   rows, P, e, ea, ef);
            ck_assert_msg(e < 1e-6, "%s: broadcast gradient rel err %.3e (rows %d, P %d)", bin_names[op], e, rows, P);
            ck_assert_msg(ea < 1e-6, "%s: da rel err %.3e", bin_names[op], ea);
            if (e > worst) worst = e;
            A->grad = B->grad = NULL;
            free(db);
            free(ref);
            free(r);
            lipt_ctx_free(&ctx);
            tu_free(A);
            tu_free(B);
        }
    printf("long broadcast reductions: worst rel err %.3e (tol 1e-6)\n", worst);
}
END_TEST

/* A scalar factor's gradient (a sum over every element) has the same bits on 1 and 2 threads. */
START_TEST(test_scalar_grad_threads) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 91);
    const int n = 300001; /* not a multiple of the chunk or vector length */
    lipt_tensor *A = tu_tensor(&rng, 1, (int[]){n}, 1.0f, 1), *S = tu_tensor(&rng, 1, (int[]){1}, 1.0f, 1);
    float got[2][2];
    for (int th = 1; th <= 2; th++) {
        lipt_set_threads(th);
        lipt_ctx ctx;
        lipt_ctx_init(&ctx, 1 << 20, 1);
        A->grad = S->grad = NULL;
        lipt_tensor *C = lipt_mul(&ctx, A, S);
        lipt_backward(&ctx, lipt_sum(&ctx, lipt_mul(&ctx, C, A)));
        got[th - 1][0] = S->grad[0];
        got[th - 1][1] = A->grad[n - 1];
        A->grad = S->grad = NULL;
        lipt_ctx_free(&ctx);
    }
    ck_assert_msg(got[0][0] == got[1][0] && got[0][1] == got[1][1], "1 vs 2 threads: %.9g %.9g", got[0][0], got[1][0]);
    printf("scalar factor gradient over %d elements: bitwise equal on 1 and 2 threads (%.9g)\n", n, got[0][0]);
    tu_free(A);
    tu_free(S);
}
END_TEST

/* A composite graph: x feeds several nodes (bias add, mul by itself, scalar sub), so contributions accumulate. */
static lipt_tensor *build_chain(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    (void)user;
    lipt_tensor *x = in[0], *bias = in[1], *s = in[2];
    lipt_tensor *h = lipt_add(ctx, x, bias);
    lipt_tensor *p = lipt_mul(ctx, h, x);
    lipt_tensor *q = lipt_sub(ctx, p, s);
    return lipt_mul(ctx, q, lipt_scale(ctx, x, -0.7f));
}

START_TEST(test_binary_chain) {
    const int shapes[][3] = {{2, 3, 4}, {1, 1, 5}, {3, 7, 1}};
    double worst = 0;
    for (size_t si = 0; si < 3; si++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            lipt_rng rng;
            lipt_rng_seed(&rng, 300 + si * 3 + seed);
            lipt_tensor *X = tu_tensor(&rng, 3, shapes[si], 1.0f, 1);
            lipt_tensor *Bi = tu_tensor(&rng, 1, (int[]){shapes[si][2]}, 1.0f, 1);
            lipt_tensor *S = tu_tensor(&rng, 1, (int[]){1}, 1.0f, 1);
            char label[64];
            snprintf(label, sizeof label, "chain [%d,%d,%d] s%d", shapes[si][0], shapes[si][1], shapes[si][2], (int)seed);
            double g = tu_gradcheck(label, build_chain, NULL, (lipt_tensor *[]){X, Bi, S}, 3,
                                    &(tu_gradcheck_opts){.seed = seed + si, .tol = GRAD_TOL});
            if (g > worst) worst = g;
            tu_free(X);
            tu_free(Bi);
            tu_free(S);
        }
    printf("chain of add/mul/sub/scale: worst gradient rel err %.3e\n", worst);
}
END_TEST

/* The residual form a + g(a): a takes over the sum's output gradient (lipt_grad_adopt) and g's backward then adds
 * into it. The gradient must be r (1 + s) for g(a) = a * s, and g's output must not share the buffer (its backward
 * adds into a's gradient while reading its own). For a + g(c), c another tensor, both operands take the buffer over:
 * a's gradient r, c's r s. A second backward over the same tape with the buffers zeroed (as lipt_jac_sess runs one per
 * Jacobian row) must give them again, not twice. And when a's buffer exists already (a leaf whose gradient is
 * allocated) a keeps it. */
START_TEST(test_add_adopts_gradient) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 77);
    const int shape[3] = {2, 3, 33};
    for (int form = 0; form < 2; form++)
        for (int preset = 0; preset < 2; preset++) {
            lipt_tensor *A = tu_tensor(&rng, 3, shape, 1.0f, 1), *C = tu_tensor(&rng, 3, shape, 1.0f, 1);
            lipt_tensor *S = tu_tensor(&rng, 3, shape, 1.0f, 0);
            const size_t n = A->numel;
            float *r = malloc(n * sizeof(float)), *own = calloc(n, sizeof(float));
            lipt_rng_fill_normal(&rng, r, n, 1.0f);
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            A->grad = preset ? own : NULL;
            C->grad = NULL;
            lipt_tensor *m = lipt_mul(&ctx, form ? C : A, S);
            lipt_tensor *out = lipt_add(&ctx, A, m);
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) { /* zero every buffer of the tape, as a Jacobian session's next row does */
                    memset(A->grad, 0, n * sizeof(float));
                    if (C->grad) memset(C->grad, 0, n * sizeof(float));
                    for (lipt_node *nd = ctx.tape; nd; nd = nd->prev)
                        if (nd->out->grad) memset(nd->out->grad, 0, nd->out->numel * sizeof(float));
                }
                lipt_backward_seeded(&ctx, out, r);
                ck_assert_ptr_nonnull(A->grad);
                ck_assert_msg((A->grad == out->grad) == !preset, "form %d preset %d: a's gradient %s the output's",
                              form, preset, A->grad == out->grad ? "shares" : "does not share");
                /* g's output takes the buffer when a did not, or when g does not read a */
                ck_assert_msg((m->grad == out->grad) == (form || preset), "form %d preset %d: g's gradient %s",
                              form, preset, m->grad == out->grad ? "shares" : "does not share");
                for (size_t i = 0; i < n; i++) {
                    const double s = S->data[i], want_a = (double)r[i] * (form ? 1.0 : 1.0 + s);
                    ck_assert_msg(fabs(A->grad[i] - want_a) <= 1e-6 * (1 + fabs(want_a)),
                                  "form %d preset %d pass %d: da[%zu] = %.9g, want %.9g", form, preset, pass, i,
                                  A->grad[i], want_a);
                    if (form)
                        ck_assert_msg(fabs(C->grad[i] - r[i] * s) <= 1e-6 * (1 + fabs(r[i] * s)),
                                      "preset %d pass %d: dc[%zu] = %.9g, want %.9g", preset, pass, i, C->grad[i],
                                      r[i] * s);
                }
            }
            A->grad = C->grad = NULL;
            lipt_ctx_free(&ctx);
            free(r);
            free(own);
            tu_free(A);
            tu_free(C);
            tu_free(S);
        }
}
END_TEST

START_TEST(test_binary_no_grad) {
    lipt_rng rng;
    lipt_rng_seed(&rng, 5);
    lipt_tensor *A = tu_tensor(&rng, 2, (int[]){3, 4}, 1.0f, 1);
    lipt_tensor *B = tu_tensor(&rng, 1, (int[]){4}, 1.0f, 0);
    lipt_tensor *C0 = tu_tensor(&rng, 2, (int[]){3, 4}, 1.0f, 0);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_no_grad_push(&ctx);
    lipt_tensor *y = lipt_mul(&ctx, A, B);
    y = lipt_sum(&ctx, lipt_relu(&ctx, lipt_add(&ctx, y, B)));
    lipt_no_grad_pop(&ctx);
    ck_assert_int_eq((int)ctx.n_nodes, 0);
    ck_assert_int_eq(y->requires_grad, 0);
    /* no input requires grad: nothing recorded either */
    y = lipt_add(&ctx, C0, B);
    ck_assert_int_eq((int)ctx.n_nodes, 0);
    ck_assert_int_eq(y->requires_grad, 0);
    lipt_ctx_free(&ctx);
    tu_free(A);
    tu_free(B);
    tu_free(C0);
}
END_TEST

/* ---------------------------------------------------------------- scale, sum, mean, max, sqrt */

typedef struct { int nd, s[4]; } shape_case;
static const shape_case ushapes[] = {{1, {1}}, {1, {7}}, {2, {3, 5}}, {3, {2, 1, 9}}, {4, {2, 3, 1, 4}}, {2, {1, 33}}};
#define N_USHAPES (sizeof ushapes / sizeof ushapes[0])

typedef enum { U_SCALE, U_SUM, U_MEAN, U_MAX, U_SQRT, U_COUNT } unary_id;
static const char *const unary_names[U_COUNT] = {"scale", "sum", "mean", "max", "sqrt"};
typedef struct { unary_id id; float s; } unary_args;

static lipt_tensor *build_unary(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    unary_args *u = user;
    switch (u->id) {
    case U_SCALE: return lipt_scale(ctx, in[0], u->s);
    case U_SUM: return lipt_sum(ctx, in[0]);
    case U_MEAN: return lipt_mean(ctx, in[0]);
    case U_MAX: return lipt_max(ctx, in[0]);
    default: return lipt_sqrt(ctx, in[0]);
    }
}

/* Plain references, in double. */
static size_t ref_unary(unary_args u, const lipt_tensor *x, double *ref) {
    size_t n = x->numel;
    if (u.id == U_SCALE || u.id == U_SQRT) {
        for (size_t i = 0; i < n; i++) ref[i] = u.id == U_SCALE ? (double)u.s * x->data[i] : sqrt((double)x->data[i]);
        return n;
    }
    double s = 0, m = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        s += x->data[i];
        if (x->data[i] > m) m = x->data[i];
    }
    ref[0] = u.id == U_SUM ? s : u.id == U_MEAN ? s / (double)n : m;
    return 1;
}

/* Inputs kept away from kinks: sqrt on [0.3, ...), max with its argmax 0.5 above the runner-up. */
static void prepare_input(unary_id id, lipt_tensor *x) {
    if (id == U_SQRT)
        for (size_t i = 0; i < x->numel; i++) x->data[i] = fabsf(x->data[i]) + 0.3f;
    if (id == U_MAX && x->numel > 1) {
        size_t best = 0;
        for (size_t i = 1; i < x->numel; i++)
            if (x->data[i] > x->data[best]) best = i;
        float second = -INFINITY;
        for (size_t i = 0; i < x->numel; i++)
            if (i != best && x->data[i] > second) second = x->data[i];
        x->data[best] = second + 0.5f;
    }
}

START_TEST(test_unary) {
    const float scales[] = {2.5f, -0.3f, 1.0f};
    double worst_fwd[U_COUNT] = {0}, worst_bwd[U_COUNT] = {0};
    for (int id = 0; id < U_COUNT; id++)
        for (size_t si = 0; si < N_USHAPES; si++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                lipt_rng rng;
                lipt_rng_seed(&rng, 900 + 100 * (uint64_t)id + 10 * si + seed);
                lipt_tensor *X = tu_tensor(&rng, ushapes[si].nd, ushapes[si].s, 1.0f, 1);
                prepare_input((unary_id)id, X);
                unary_args u = {(unary_id)id, scales[seed - 1]};
                lipt_ctx ctx;
                lipt_ctx_init(&ctx, 1 << 16, 1);
                lipt_tensor *Y = build_unary(&ctx, (lipt_tensor *[]){X}, &u);
                double *ref = malloc(X->numel * sizeof(double));
                size_t nref = ref_unary(u, X, ref);
                ck_assert_int_eq((int)Y->numel, (int)nref);
                double e = tu_max_rel_err(Y->data, ref, nref, 1e-6);
                ck_assert_msg(e < FWD_TOL, "%s forward rel err %.3e", unary_names[id], e);
                if (e > worst_fwd[id]) worst_fwd[id] = e;
                free(ref);
                lipt_ctx_free(&ctx);
                char label[96], sx[32];
                snprintf(label, sizeof label, "%s %s s%d", unary_names[id], lipt_shape_str(X, sx, sizeof sx), (int)seed);
                double g = tu_gradcheck(label, build_unary, &u, (lipt_tensor *[]){X}, 1,
                                        &(tu_gradcheck_opts){.seed = seed + si, .tol = GRAD_TOL});
                if (g > worst_bwd[id]) worst_bwd[id] = g;
                if (seed == 1) check_accumulates(label, build_unary, &u, (lipt_tensor *[]){X}, 1);
                tu_free(X);
            }
    for (int id = 0; id < U_COUNT; id++)
        printf("%s: worst forward rel err %.3e (tol %.0e), worst gradient rel err %.3e (tol %.0e)\n", unary_names[id],
               worst_fwd[id], FWD_TOL, worst_bwd[id], GRAD_TOL);
}
END_TEST

/* sum and mean of a million elements with a large common offset: a float accumulator is off by ~1e-3, double is not. */
START_TEST(test_long_sums) {
    const size_t n = 1000003;
    lipt_rng rng;
    lipt_rng_seed(&rng, 4242);
    lipt_tensor *X = tu_tensor(&rng, 1, (int[]){(int)n}, 0.01f, 1);
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        X->data[i] += 0.1f;
        s += X->data[i];
    }
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 20, 1);
    lipt_tensor *S = lipt_sum(&ctx, X), *M = lipt_mean(&ctx, X);
    double es = fabs(S->data[0] - s) / fabs(s), em = fabs(M->data[0] - s / (double)n) / fabs(s / (double)n);
    printf("long sum rel err %.3e, long mean rel err %.3e (tol 1e-6)\n", es, em);
    ck_assert_msg(es < 1e-6 && em < 1e-6, "long sum/mean rel err %.3e / %.3e", es, em);
    /* backward of mean spreads g / n over a big tensor (parallel path) */
    X->grad = NULL;
    lipt_backward_seeded(&ctx, M, (float[]){3.0f});
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(X->grad[i] - 3.0 / (double)n) * (double)n / 3.0);
    ck_assert_msg(worst < 1e-6, "mean backward rel err %.3e", worst);
    X->grad = NULL;
    lipt_ctx_free(&ctx);
    tu_free(X);
}
END_TEST

START_TEST(test_max_ties_and_nan) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    float d[7] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 2.0f, -3.0f};
    lipt_tensor *X = tu_tensor(NULL, 1, (int[]){7}, 0, 1);
    memcpy(X->data, d, sizeof d);
    lipt_tensor *Y = lipt_max(&ctx, X);
    ck_assert_float_eq(Y->data[0], 2.0f);
    X->grad = NULL;
    lipt_backward_seeded(&ctx, Y, (float[]){1.5f});
    for (int i = 0; i < 7; i++) ck_assert_float_eq(X->grad[i], i == 1 ? 1.5f : 0.0f); /* first argmax only */
    X->grad = NULL;
    lipt_ctx_reset(&ctx);
    X->data[4] = NAN;
    Y = lipt_max(&ctx, X);
    ck_assert_msg(isnan(Y->data[0]), "max must propagate NaN");
    lipt_ctx_reset(&ctx);
    for (int i = 0; i < 7; i++) X->data[i] = -5.0f - (float)i; /* all negative: max is not clamped at 0 */
    Y = lipt_max(&ctx, X);
    ck_assert_float_eq(Y->data[0], -5.0f);
    lipt_ctx_free(&ctx);
    tu_free(X);
}
END_TEST

/* ---------------------------------------------------------------- contract_factor */

typedef struct { float c; } cf_args;
static lipt_tensor *build_cf(lipt_ctx *ctx, lipt_tensor **in, void *user) {
    return lipt_contract_factor(ctx, in[0], ((cf_args *)user)->c);
}

START_TEST(test_contract_factor) {
    /* (x, c): below c (factor 1, derivative 0), at c, and above c on both sides of 1 */
    const float cases[][2] = {{0.3f, 0.9f}, {0.899f, 0.9f}, {0.9f, 0.9f}, {0.95f, 0.9f}, {2.0f, 0.9f},
                              {17.5f, 0.9f}, {0.2f, 0.5f}, {3.0f, 0.5f}, {1.5f, 1.0f}, {-1.0f, 0.9f}};
    double worst_fwd = 0, worst_grad = 0, worst_fd = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int sh = 0; sh < 2; sh++) {
            float x = cases[ci][0], c = cases[ci][1];
            lipt_tensor *X = tu_tensor(NULL, sh + 1, (int[]){1, 1}, 0, 1); /* [1] and [1,1] */
            X->data[0] = x;
            lipt_ctx ctx;
            lipt_ctx_init(&ctx, 1 << 16, 1);
            lipt_tensor *Y = lipt_contract_factor(&ctx, X, c);
            ck_assert_int_eq((int)Y->numel, 1);
            double r = (double)x / c;
            double want = 1.0 / fmax(1.0, r), dwant = r > 1 ? -(double)c / ((double)x * x) : 0.0;
            double e = fabs(Y->data[0] - want) / want;
            ck_assert_msg(e < FWD_TOL, "contract_factor(%g, %g) = %g, want %g", (double)x, (double)c,
                          (double)Y->data[0], want);
            if (e > worst_fwd) worst_fwd = e;
            X->grad = NULL;
            lipt_backward_seeded(&ctx, Y, (float[]){-2.0f});
            double eg = fabs(X->grad[0] - (-2.0 * dwant)) / fmax(fabs(2.0 * dwant), 1e-6);
            ck_assert_msg(eg < 1e-5, "contract_factor'(%g, %g) = %g, want %g", (double)x, (double)c,
                          (double)X->grad[0] / -2.0, dwant);
            if (eg > worst_grad) worst_grad = eg;
            X->grad = NULL;
            lipt_ctx_free(&ctx);
            if (fabs(r - 1) > 0.02) { /* finite differences only away from the kink at x = c */
                char label[64];
                snprintf(label, sizeof label, "contract_factor x=%g c=%g", (double)x, (double)c);
                cf_args a = {c};
                double g = tu_gradcheck(label, build_cf, &a, (lipt_tensor *[]){X}, 1,
                                        &(tu_gradcheck_opts){.seed = 1 + ci, .tol = GRAD_TOL, .eps = 1e-3});
                if (g > worst_fd) worst_fd = g;
                if (sh == 0) check_accumulates(label, build_cf, &a, (lipt_tensor *[]){X}, 1);
            }
            tu_free(X);
        }
    printf("contract_factor: worst forward rel err %.3e, worst direct derivative rel err %.3e, worst fd rel err %.3e\n",
           worst_fwd, worst_grad, worst_fd);
}
END_TEST

/* Shapes that do not broadcast are programming errors: the op aborts (Check runs each case in a child). */
START_TEST(test_shape_errors_abort) {
    /* _i: 0..2 b [8] on a [2,3,4] (8 is not a trailing product: 4, 12, 24), 3..5 b [6] on a [3], 6 x of two
     * elements for contract_factor, 7 a two-element beta for lipswish */
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 16, 1);
    lipt_tensor *A = tu_tensor(NULL, 3, (int[]){2, 3, 4}, 0, 1), *B = tu_tensor(NULL, 1, (int[]){8}, 0, 1);
    lipt_tensor *S = tu_tensor(NULL, 1, (int[]){3}, 0, 1), *L = tu_tensor(NULL, 1, (int[]){6}, 0, 1);
    lipt_tensor *T = tu_tensor(NULL, 1, (int[]){2}, 0, 1);
    fprintf(stderr, "(expected abort, case %d) ", _i);
    if (_i < 3) bin_fns[_i](&ctx, A, B);
    else if (_i < 6) bin_fns[_i - 3](&ctx, S, L);
    else if (_i == 6) lipt_contract_factor(&ctx, T, 0.9f);
    else lipt_lipswish(&ctx, A, T);
    ck_abort_msg("case %d: a shape error did not abort", _i);
}
END_TEST

int main(void) {
    lipt_set_threads(2);
    Suite *s = suite_create("ops_elementwise");
    TCase *tc = tcase_create("elementwise");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_binary_broadcast);
    tcase_add_test(tc, test_binary_alias);
    tcase_add_test(tc, test_binary_long_reduction);
    tcase_add_test(tc, test_scalar_grad_threads);
    tcase_add_test(tc, test_binary_chain);
    tcase_add_test(tc, test_binary_no_grad);
    tcase_add_test(tc, test_add_adopts_gradient);
    tcase_add_test(tc, test_unary);
    tcase_add_test(tc, test_long_sums);
    tcase_add_test(tc, test_max_ties_and_nan);
    tcase_add_test(tc, test_contract_factor);
    tcase_add_loop_test_raise_signal(tc, test_shape_errors_abort, SIGABRT, 0, 8);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
