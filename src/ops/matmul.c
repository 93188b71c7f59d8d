/* matmul: 2-D, batched and linear (rows of an N-D tensor times a matrix), the fused linear layer x w + b and the
 * fused GELU(x w + b), forward and backward, every product through lipt_gemm_p (kernels/gemm.h) at the context's
 * precision. */
#include "lipt/ops.h"

#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* At a low precision, x [M,K] packed for the product x w and kept for the backward's dw = xᵀ G when w trains and the
 * op is recorded (NULL otherwise): each operand of a projection is then converted once per step. */
static void *pack_input(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, int M, int K, int n_in,
                        lipt_tensor *const *in) {
    if (ctx->precision != LIPT_PRECISION_FLOAT32 && x->lowp) return (void *)x->lowp; /* converted by its producer */
    if (ctx->precision == LIPT_PRECISION_FLOAT32 || M <= 0 || K <= 0 || !w->requires_grad ||
        !lipt_should_record(ctx, n_in, in))
        return NULL;
    return lipt_lowp_pack_arena(LIPT_KC(ctx), x->data, M, K, K);
}

/* The gradient buffer of a product's operand t, all of which the product (M x N, sum over K) writes; *beta: 1 to
 * accumulate, 0 to store. A new buffer is left unzeroed and stored into when oneDNN computes the product (its beta = 0
 * never reads C: the arena's zeroing pass saved): at a low precision, and in float32 from lipt_gemm's size for it;
 * otherwise it is zeroed as lipt_grad_of does (OpenBLAS runs beta = 0 as its own zeroing pass, which profiled
 * slower). */
static float *product_grad(lipt_ctx *ctx, lipt_tensor *t, int M, int N, int K, float *beta) {
    *beta = 1.0f;
    if (ctx->precision == LIPT_PRECISION_FLOAT32 && !lipt_gemm_on_dnnl(M, N, K)) return lipt_grad_of(ctx, t);
    int fresh;
    float *g = lipt_grad_of_fresh(ctx, t, &fresh);
    if (fresh) *beta = 0.0f;
    return g;
}

/* dx [M,K] = G wᵀ + beta_x dx and dw [K,N] += xᵀ G at a low precision, G [M,N] packed once for both (gpk, or NULL:
 * packed here), x as the forward packed it (xpk, or NULL: packed here). */
static void projection_grads_lowp(lipt_ctx *ctx, int M, int N, int K, const float *G, const void *gpk,
                                  const float *x, const void *xpk, const float *w, float *dx, float beta_x, float *dw) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena); /* gpk lives for these two products only */
    if (!gpk) gpk = lipt_lowp_pack_arena(kc, G, M, N, N);
    if (dx) lipt_gemm_lowp_pk(kc, 0, 1, M, K, N, 1.0f, NULL, N, gpk, w, N, NULL, beta_x, dx, K);
    if (dw) lipt_gemm_lowp_pk(kc, 1, 0, K, N, M, 1.0f, x, K, xpk, NULL, N, gpk, 1.0f, dw, N);
    lipt_arena_release(&ctx->arena, mk);
}

/* iarg: 0 ta, 1 tb, 2 batch count, 3 M, 4 N, 5 K; saved: a packed (pack_input) for the projection case */
lipt_tensor *lipt_matmul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, int ta, int tb) {
    lipt_kctx *kc = LIPT_KC(ctx);
    int batch, M, N, K, out_shape[LIPT_MAX_DIMS], out_nd;
    char sa[64], sb[64];
    if (b->ndim == 2 && a->ndim >= 2 && !(a->ndim == 2 && ta)) {
        /* 2-D or linear: flatten a's leading dims into rows */
        K = a->shape[a->ndim - 1];
        M = (int)(a->numel / (size_t)(K ? K : 1));
        int bk = tb ? b->shape[1] : b->shape[0];
        N = tb ? b->shape[0] : b->shape[1];
        LIPT_CHECK(bk == K, "matmul: inner dims differ, a %s b %s (tb=%d)", lipt_shape_str(a, sa, 64),
                   lipt_shape_str(b, sb, 64), tb);
        batch = 1;
        out_nd = a->ndim;
        for (int i = 0; i < a->ndim - 1; i++) out_shape[i] = a->shape[i];
        out_shape[out_nd - 1] = N;
    } else if (a->ndim == 2 && b->ndim == 2) {
        /* 2-D with ta */
        K = a->shape[0];
        M = a->shape[1];
        int bk = tb ? b->shape[1] : b->shape[0];
        N = tb ? b->shape[0] : b->shape[1];
        LIPT_CHECK(bk == K, "matmul: inner dims differ, a %s b %s (ta=1 tb=%d)", lipt_shape_str(a, sa, 64),
                   lipt_shape_str(b, sb, 64), tb);
        batch = 1;
        out_nd = 2;
        out_shape[0] = M;
        out_shape[1] = N;
    } else {
        LIPT_CHECK(a->ndim == 3 && b->ndim == 3 && a->shape[0] == b->shape[0],
                   "matmul: unsupported shapes a %s b %s", lipt_shape_str(a, sa, 64), lipt_shape_str(b, sb, 64));
        batch = a->shape[0];
        M = ta ? a->shape[2] : a->shape[1];
        K = ta ? a->shape[1] : a->shape[2];
        int bk = tb ? b->shape[2] : b->shape[1];
        N = tb ? b->shape[1] : b->shape[2];
        LIPT_CHECK(bk == K, "matmul: inner dims differ, a %s b %s (ta=%d tb=%d)", lipt_shape_str(a, sa, 64),
                   lipt_shape_str(b, sb, 64), ta, tb);
        out_nd = 3;
        out_shape[0] = batch;
        out_shape[1] = M;
        out_shape[2] = N;
    }
    lipt_tensor *out = lipt_tensor_new(ctx, out_nd, out_shape);
    size_t sa_ = (size_t)M * K, sb_ = (size_t)K * N, so = (size_t)M * N;
    lipt_tensor *in[2] = {a, b};
    /* a projection x w (the attention's q, k, v): at a low precision x is converted once for the forward and dw */
    void *apk = batch == 1 && !ta && !tb && N > 0 ? pack_input(ctx, a, b, M, K, 2, in) : NULL;
    if (apk)
        lipt_gemm_lowp_pk(kc, 0, 0, M, N, K, 1.0f, NULL, K, apk, b->data, N, NULL, 0.0f, out->data, N);
    else
        for (int i = 0; i < batch; i++)
            lipt_gemm_packed_p(kc, ta, tb, M, N, K, a->data + i * sa_, b->data + (b->ndim == 3 ? i * sb_ : 0),
                               out->data + i * so, 0.0f);
    lipt_node *node = lipt_record(ctx, LIPT_OP_MATMUL, out, 2, in);
    if (node) {
        node->saved = apk;
        int *ia = node->iarg;
        ia[0] = ta; ia[1] = tb; ia[2] = batch; ia[3] = M; ia[4] = N; ia[5] = K;
    }
    return out;
}

void lipt_matmul_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_kctx *kc = LIPT_KC(ctx);
    lipt_tensor *a = node->in[0], *b = node->in[1], *out = node->out;
    int ta = node->iarg[0], tb = node->iarg[1], batch = node->iarg[2];
    int M = node->iarg[3], N = node->iarg[4], K = node->iarg[5];
    size_t sa = (size_t)M * K, sb = (size_t)K * N, so = (size_t)M * N;
    int b_batched = b->ndim == 3;
    if (ctx->precision != LIPT_PRECISION_FLOAT32 && batch == 1 && !ta && !tb && !b_batched && M > 0 && N > 0 &&
        K > 0) {
        float beta_a, *da = product_grad(ctx, a, M, K, N, &beta_a), *db = lipt_grad_of(ctx, b);
        if (da || db)
            projection_grads_lowp(ctx, M, N, K, out->grad, NULL, a->data, node->saved, b->data, da, beta_a, db);
        return;
    }
    float *da = lipt_grad_of(ctx, a), *db = lipt_grad_of(ctx, b);
    for (int i = 0; i < batch; i++) {
        const float *A = a->data + i * sa, *B = b->data + (b_batched ? i * sb : 0), *G = out->grad + i * so;
        /* C = op(A) op(B), G = dC.  d op(A) = G op(B)ᵀ;  d op(B) = op(A)ᵀ G. */
        if (da) {
            if (!ta) lipt_gemm_packed_p(kc, 0, !tb, M, K, N, G, B, da + i * sa, 1.0f);   /* dA[M,K] += G[M,N] op(B)ᵀ */
            else lipt_gemm_packed_p(kc, tb, 1, K, M, N, B, G, da + i * sa, 1.0f);         /* dA[K,M] += op(B) Gᵀ */
        }
        if (db) {
            float *DB = db + (b_batched ? i * sb : 0);
            if (!tb) lipt_gemm_packed_p(kc, !ta, 0, K, N, M, A, G, DB, 1.0f);             /* dB[K,N] += op(A)ᵀ G */
            else lipt_gemm_packed_p(kc, 1, ta, N, K, M, G, A, DB, 1.0f);                  /* dB[N,K] += Gᵀ op(A) */
        }
    }
}

/* Below this many output elements the bias rows are written by one thread. */
#define LINEAR_PAR_MIN ((size_t)1 << 15)

/* The linear layer's checks and sizes, shared by lipt_linear and lipt_linear_gelu: M, N, K, and the output's shape
 * [..., N] (x's ndim). */
static void linear_dims(const char *op, lipt_tensor *const *in, int *pM, int *pN, int *pK, int *shape) {
    const lipt_tensor *x = in[0], *w = in[1], *b = in[2];
    char sx[64], sw[64], sb[64];
    LIPT_CHECK(x->ndim >= 2 && w->ndim == 2 && x->shape[x->ndim - 1] == w->shape[0] && b->numel == (size_t)w->shape[1],
               "%s: x %s, w %s, b %s (need x [..., K], w [K, N], b [N])", op, lipt_shape_str(x, sx, 64),
               lipt_shape_str(w, sw, 64), lipt_shape_str(b, sb, 64));
    *pK = w->shape[0];
    *pN = w->shape[1];
    *pM = (int)(x->numel / (size_t)(*pK ? *pK : 1));
    for (int i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = *pN;
}

/* The rows pass of a float32 linear layer on oneDNN (lipt_gemm_rows): the bias added to rows r0..r1 of y [., N],
 * then GELU over them in place (der: GELU' kept for the backward, or NULL) when gelu is set, or MaxMin from them into
 * mm (mm may be y) when mm is set. Row by row, so the same bits as lipt_linear's bias and lipt_gelu's or
 * lipt_maxmin's pass however the rows are grouped (MaxMin pairs columns 2k, 2k+1: N is even, a row starts a pair). */
typedef struct {
    float *y, *der, *mm;
    const float *bias;
    int N, gelu;
} linear_rows_arg;

static void linear_rows(void *arg, int r0, int r1) {
    const linear_rows_arg *a = arg;
    const size_t N = (size_t)a->N, off = (size_t)r0 * N;
    for (int r = r0; r < r1; r++) {
        float *y = a->y + (size_t)r * N;
        for (size_t j = 0; j < N; j++) y[j] += a->bias[j];
    }
    if (a->gelu) lipt_vgelu(a->y + off, a->y + off, a->der ? a->der + off : NULL, (size_t)(r1 - r0) * N);
    if (a->mm) lipt_maxmin_row(a->y + off, a->mm + off, (size_t)(r1 - r0) * N);
}

/* y [M,N] = x w + b at the context's precision, then GELU in place (gelu set) or MaxMin from y into mm (mm not
 * NULL) when *act_done comes back 1 (float32 on oneDNN: the product with beta 0, which never reads y, then the bias
 * and the activation on each block of rows while it is in cache: about 8 MB less read and a pass fewer for the
 * feed-forward's W1 at 2048 tokens); der: GELU' for the backward, or NULL. Returns x packed for the backward's dw at
 * a low precision (pack_input), else NULL. */
static void *linear_product(lipt_ctx *ctx, lipt_tensor *const *in, int M, int N, int K, float *y, int gelu,
                            float *der, float *mm, int *act_done) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const lipt_tensor *x = in[0], *w = in[1], *b = in[2];
    void *xpk = NULL; /* at a low precision, x packed for this product and kept for the backward's dw = xᵀ G */
    if (act_done) *act_done = 0;
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        /* the bias inside the product (oneDNN adds it as it writes the output; emulated: as float32 below) */
        if (N > 0) xpk = pack_input(ctx, in[0], in[1], M, K, 3, in);
        lipt_gemm_lowp_bias(kc, 0, 0, M, N, K, x->data, K, xpk, w->data, N, NULL, b->data, 0.0f, y, N);
    } else if (M > 0 && N > 0 && K > 0 && lipt_gemm_on_dnnl(M, N, K)) {
        linear_rows_arg a = {y, der, mm, b->data, N, gelu};
        double t0, *acc = lipt_kprof_begin(kc, &t0); /* a product, its bias and activation passes included */
        lipt_gemm_rows(0, 0, M, N, K, 1.0f, x->data, K, w->data, N, 0.0f, y, N, linear_rows, &a);
        lipt_kprof_end(kc, acc, t0, 0);
        if (act_done) *act_done = gelu || mm;
    } else {
        /* OpenBLAS: the bias rows, then C += x w: one pass over the output fewer than a zeroed GEMM followed by an
         * add (its beta = 0 is a zeroing pass over C, then the same C += x w) */
#pragma omp parallel for if ((size_t)M * N >= LINEAR_PAR_MIN) schedule(static)
        for (int r = 0; r < M; r++) memcpy(y + (size_t)r * N, b->data, (size_t)N * sizeof(float));
        if (M > 0 && N > 0 && K > 0) lipt_gemm_packed_p(kc, 0, 0, M, N, K, x->data, w->data, y, 1.0f);
    }
    return xpk;
}

/* iarg: 0 M (rows), 1 N, 2 K; saved: x packed (linear_product), or NULL */
static lipt_node *record_linear(lipt_ctx *ctx, lipt_op_id op, lipt_tensor *out, lipt_tensor *const *in, void *xpk,
                                int M, int N, int K) {
    lipt_node *node = lipt_record(ctx, op, out, 3, in);
    if (node) {
        node->saved = xpk;
        node->iarg[0] = M;
        node->iarg[1] = N;
        node->iarg[2] = K;
    }
    return node;
}

lipt_tensor *lipt_linear(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    lipt_tensor *in[3] = {x, w, b};
    int M, N, K, shape[LIPT_MAX_DIMS];
    linear_dims("linear", in, &M, &N, &K, shape);
    lipt_tensor *out = lipt_tensor_new(ctx, x->ndim, shape);
    void *xpk = linear_product(ctx, in, M, N, K, out->data, 0, NULL, NULL, NULL);
    record_linear(ctx, LIPT_OP_LINEAR, out, in, xpk, M, N, K);
    return out;
}

/* dx [M,K] = G wᵀ + beta_x dx and dw [K,N] += xᵀ G (each when not NULL) at the context's precision, x packed as
 * the forward left it (xpk, low precisions), G too when gpk is given; beta_x from product_grad. */
static void linear_grads(lipt_ctx *ctx, const lipt_node *node, const float *G, const void *gpk, float *dx,
                         float beta_x, float *dw) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int M = node->iarg[0], N = node->iarg[1], K = node->iarg[2];
    const float *x = node->in[0]->data, *w = node->in[1]->data;
    if (K <= 0 || (!dx && !dw)) return;
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        /* G packed once for both products, x as the forward packed it: each operand converted once per step */
        projection_grads_lowp(ctx, M, N, K, G, gpk, x, node->saved, w, dx, beta_x, dw);
    } else {
        if (dx) lipt_gemm_packed_p(kc, 0, 1, M, K, N, G, w, dx, beta_x); /* dx[M,K] (+)= G[M,N] wᵀ */
        if (dw) lipt_gemm_packed_p(kc, 1, 0, K, N, M, x, G, dw, 1.0f); /* dw[K,N] += xᵀ G */
    }
}

void lipt_linear_backward(lipt_ctx *ctx, lipt_node *node) {
    const int M = node->iarg[0], N = node->iarg[1];
    const float *G = node->out->grad;
    if (M == 0 || N == 0) return;
    float beta_x, *dx = product_grad(ctx, node->in[0], M, node->iarg[2], N, &beta_x);
    linear_grads(ctx, node, G, NULL, dx, beta_x, lipt_grad_of(ctx, node->in[1]));
    float *db = lipt_grad_of(ctx, node->in[2]);
    if (db) lipt_reduce_rows_acc(db, G, NULL, (size_t)M, (size_t)N, 1.0);
}

/* lipt_linear's product y = x w + b, then lipt_gelu's pass over it in place: the same bits as the two ops. Recorded,
 * GELU'(y) is kept for the backward (y itself is not needed again).
 * iarg: as linear; saved: x packed; saved2: GELU'(y) [M, N] */
lipt_tensor *lipt_linear_gelu(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    lipt_tensor *in[3] = {x, w, b};
    int M, N, K, shape[LIPT_MAX_DIMS];
    linear_dims("linear_gelu", in, &M, &N, &K, shape);
    lipt_tensor *out = lipt_tensor_new(ctx, x->ndim, shape);
    const size_t n = out->numel;
    float *der = lipt_should_record(ctx, 3, in) ? lipt_arena_alloc(&ctx->arena, n * sizeof(float)) : NULL;
    int done;
    void *xpk = linear_product(ctx, in, M, N, K, out->data, 1, der, NULL, &done);
    /* at a low precision the output is also written converted, for the next product (the feed-forward's W2) */
    void *ypk = lipt_lowp_arena_buf(LIPT_KC(ctx), M, N);
    if (!done) lipt_gelu_pass_pk(LIPT_KC(ctx), out->data, out->data, der, n, ypk);
    out->lowp = ypk;
    lipt_node *node = record_linear(ctx, LIPT_OP_LINEAR_GELU, out, in, xpk, M, N, K);
    if (node) node->saved2 = der;
    return out;
}

/* The backward of a fused linear + activation: the activation's backward into G with the bias gradient's column
 * sums in the same pass (act_colsum: lipt_gelu_grad_colsum or lipt_maxmin_grad_colsum, from the node's saved2), at a
 * low precision also G converted for the two products, then the products of lipt_linear's backward from G. */
static void linear_act_backward(lipt_ctx *ctx, lipt_node *node,
                                void (*act_colsum)(lipt_kctx *, const float *, const float *, float *, size_t, size_t,
                                                   float *, void *)) {
    const int M = node->iarg[0], N = node->iarg[1];
    if (M == 0 || N == 0) return;
    float beta_x, *dx = product_grad(ctx, node->in[0], M, node->iarg[2], N, &beta_x),
          *dw = lipt_grad_of(ctx, node->in[1]);
    float *db = lipt_grad_of(ctx, node->in[2]);
    if (!dx && !dw && !db) return;
    /* G stays until the step's reset, as lipt_gelu's input gradient did: released here for the next backward's
     * buffers, it made their zeroing (memset) and the residual adds' gradient copies (ew_acc) twice as slow in the
     * dp training step (perf, 2 A/B rounds), more than the fusion saves */
    const int low = ctx->precision != LIPT_PRECISION_FLOAT32; /* then the products read G's converted copy only */
    float *G = low ? NULL : lipt_arena_alloc(&ctx->arena, (size_t)M * N * sizeof(float));
    const lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena); /* gpk: for the two products only */
    void *gpk = (dx || dw) && node->iarg[2] > 0 ? lipt_lowp_arena_buf(LIPT_KC(ctx), M, N) : NULL;
    act_colsum(LIPT_KC(ctx), node->saved2, node->out->grad, G, (size_t)M, (size_t)N, db, gpk);
    linear_grads(ctx, node, G, gpk, dx, beta_x, dw);
    lipt_arena_release(&ctx->arena, mk);
}

void lipt_linear_gelu_backward(lipt_ctx *ctx, lipt_node *node) {
    linear_act_backward(ctx, node, lipt_gelu_grad_colsum);
}

/* lipt_linear's product y = x w + b, then lipt_maxmin's pass over it, as lipt_linear_gelu (float32 on oneDNN: on each
 * block of rows as the product leaves it): the same bits as the two ops; in no-grad mode MaxMin runs in place.
 * iarg: as linear; saved: x packed; saved2: y [M, N] */
lipt_tensor *lipt_linear_maxmin(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    lipt_tensor *in[3] = {x, w, b};
    int M, N, K, shape[LIPT_MAX_DIMS];
    linear_dims("linear_maxmin", in, &M, &N, &K, shape);
    LIPT_CHECK(N % 2 == 0, "linear_maxmin: %d output columns (MaxMin pairs them: need an even number)", N);
    lipt_tensor *out = lipt_tensor_new(ctx, x->ndim, shape);
    const size_t n = out->numel;
    float *y = lipt_should_record(ctx, 3, in) ? lipt_arena_alloc(&ctx->arena, n * sizeof(float)) : NULL;
    int done;
    void *xpk = linear_product(ctx, in, M, N, K, y ? y : out->data, 0, NULL, out->data, &done);
    if (!done) lipt_maxmin_pass(y ? y : out->data, out->data, n);
    lipt_node *node = record_linear(ctx, LIPT_OP_LINEAR_MAXMIN, out, in, xpk, M, N, K);
    if (node) node->saved2 = y;
    return out;
}

void lipt_linear_maxmin_backward(lipt_ctx *ctx, lipt_node *node) {
    linear_act_backward(ctx, node, lipt_maxmin_grad_colsum);
}
