/* matmul: 2-D, batched and linear (rows of an N-D tensor times a matrix), and the fused linear layer x w + b,
 * forward and backward, every product through lipt_gemm_p (ops/gemm.h) at the context's precision. */
#include "lipt/ops.h"

#include <string.h>

#include "ops/gemm.h"
#include "ops/reduce_impl.h"

/* At a low precision, x [M,K] packed for the product x w and kept for the backward's dw = xᵀ G when w trains and the
 * op is recorded (NULL otherwise): each operand of a projection is then converted once per step. */
static void *pack_input(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, int M, int K, int n_in,
                        lipt_tensor *const *in) {
    if (ctx->precision == LIPT_PRECISION_FLOAT32 || M <= 0 || K <= 0 || !w->requires_grad ||
        !lipt_should_record(ctx, n_in, in))
        return NULL;
    return lipt_lowp_pack_arena(ctx, x->data, M, K, K);
}

/* dx [M,K] += G wᵀ and dw [K,N] += xᵀ G at a low precision, G [M,N] packed once for both, x as the forward packed
 * it (xpk, or NULL: packed here). */
static void projection_grads_lowp(lipt_ctx *ctx, int M, int N, int K, const float *G, const float *x, const void *xpk,
                                  const float *w, float *dx, float *dw) {
    const lipt_arena_mark mk = lipt_arena_get_mark(&ctx->arena); /* gpk lives for these two products only */
    const void *gpk = lipt_lowp_pack_arena(ctx, G, M, N, N);
    if (dx) lipt_gemm_lowp_pk(ctx, 0, 1, M, K, N, 1.0f, NULL, N, gpk, w, N, NULL, 1.0f, dx, K);
    if (dw) lipt_gemm_lowp_pk(ctx, 1, 0, K, N, M, 1.0f, x, K, xpk, NULL, N, gpk, 1.0f, dw, N);
    lipt_arena_release(&ctx->arena, mk);
}

/* iarg: 0 ta, 1 tb, 2 batch count, 3 M, 4 N, 5 K; saved: a packed (pack_input) for the projection case */
lipt_tensor *lipt_matmul(lipt_ctx *ctx, lipt_tensor *a, lipt_tensor *b, int ta, int tb) {
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
        lipt_gemm_lowp_pk(ctx, 0, 0, M, N, K, 1.0f, NULL, K, apk, b->data, N, NULL, 0.0f, out->data, N);
    else
        for (int i = 0; i < batch; i++)
            lipt_gemm_packed_p(ctx, ta, tb, M, N, K, a->data + i * sa_, b->data + (b->ndim == 3 ? i * sb_ : 0),
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
    lipt_tensor *a = node->in[0], *b = node->in[1], *out = node->out;
    int ta = node->iarg[0], tb = node->iarg[1], batch = node->iarg[2];
    int M = node->iarg[3], N = node->iarg[4], K = node->iarg[5];
    float *da = lipt_grad_of(ctx, a), *db = lipt_grad_of(ctx, b);
    size_t sa = (size_t)M * K, sb = (size_t)K * N, so = (size_t)M * N;
    int b_batched = b->ndim == 3;
    if (ctx->precision != LIPT_PRECISION_FLOAT32 && batch == 1 && !ta && !tb && !b_batched && M > 0 && N > 0 &&
        K > 0) {
        if (da || db) projection_grads_lowp(ctx, M, N, K, out->grad, a->data, node->saved, b->data, da, db);
        return;
    }
    for (int i = 0; i < batch; i++) {
        const float *A = a->data + i * sa, *B = b->data + (b_batched ? i * sb : 0), *G = out->grad + i * so;
        /* C = op(A) op(B), G = dC.  d op(A) = G op(B)ᵀ;  d op(B) = op(A)ᵀ G. */
        if (da) {
            if (!ta) lipt_gemm_packed_p(ctx, 0, !tb, M, K, N, G, B, da + i * sa, 1.0f);   /* dA[M,K] += G[M,N] op(B)ᵀ */
            else lipt_gemm_packed_p(ctx, tb, 1, K, M, N, B, G, da + i * sa, 1.0f);         /* dA[K,M] += op(B) Gᵀ */
        }
        if (db) {
            float *DB = db + (b_batched ? i * sb : 0);
            if (!tb) lipt_gemm_packed_p(ctx, !ta, 0, K, N, M, A, G, DB, 1.0f);             /* dB[K,N] += op(A)ᵀ G */
            else lipt_gemm_packed_p(ctx, 1, ta, N, K, M, G, A, DB, 1.0f);                  /* dB[N,K] += Gᵀ op(A) */
        }
    }
}

/* Below this many output elements the bias rows are written by one thread. */
#define LINEAR_PAR_MIN ((size_t)1 << 15)

/* iarg: 0 M (rows), 1 N, 2 K */
lipt_tensor *lipt_linear(lipt_ctx *ctx, lipt_tensor *x, lipt_tensor *w, lipt_tensor *b) {
    char sx[64], sw[64], sb[64];
    LIPT_CHECK(x->ndim >= 2 && w->ndim == 2 && x->shape[x->ndim - 1] == w->shape[0] && b->numel == (size_t)w->shape[1],
               "linear: x %s, w %s, b %s (need x [..., K], w [K, N], b [N])", lipt_shape_str(x, sx, 64),
               lipt_shape_str(w, sw, 64), lipt_shape_str(b, sb, 64));
    const int K = w->shape[0], N = w->shape[1], M = (int)(x->numel / (size_t)(K ? K : 1));
    int shape[LIPT_MAX_DIMS];
    for (int i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = N;
    lipt_tensor *out = lipt_tensor_new(ctx, x->ndim, shape);
    lipt_tensor *in[3] = {x, w, b};
    void *xpk = NULL; /* at a low precision, x packed for this product and kept for the backward's dw = xᵀ G */
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        /* the bias inside the product (oneDNN adds it as it writes the output; emulated: as float32 below) */
        if (N > 0) xpk = pack_input(ctx, x, w, M, K, 3, in);
        lipt_gemm_lowp_bias(ctx, 0, 0, M, N, K, x->data, K, xpk, w->data, N, NULL, b->data, 0.0f, out->data, N);
    } else {
        /* the bias rows, then C += x w: one pass over the output fewer than a zeroed GEMM followed by an add */
#pragma omp parallel for if ((size_t)M * N >= LINEAR_PAR_MIN) schedule(static)
        for (int r = 0; r < M; r++) memcpy(out->data + (size_t)r * N, b->data, (size_t)N * sizeof(float));
        if (M > 0 && N > 0 && K > 0) lipt_gemm_packed_p(ctx, 0, 0, M, N, K, x->data, w->data, out->data, 1.0f);
    }
    lipt_node *node = lipt_record(ctx, LIPT_OP_LINEAR, out, 3, in);
    if (node) {
        node->saved = xpk;
        node->iarg[0] = M;
        node->iarg[1] = N;
        node->iarg[2] = K;
    }
    return out;
}

void lipt_linear_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_tensor *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const int M = node->iarg[0], N = node->iarg[1], K = node->iarg[2];
    const float *G = node->out->grad;
    if (M == 0 || N == 0) return;
    float *dx = lipt_grad_of(ctx, x), *dw = lipt_grad_of(ctx, w);
    if (ctx->precision != LIPT_PRECISION_FLOAT32 && K > 0 && (dx || dw)) {
        /* G packed once for both products, x as the forward packed it: each operand converted once per step */
        projection_grads_lowp(ctx, M, N, K, G, x->data, node->saved, w->data, dx, dw);
    } else {
        if (dx && K > 0) lipt_gemm_packed_p(ctx, 0, 1, M, K, N, G, w->data, dx, 1.0f); /* dx[M,K] += G[M,N] wᵀ */
        if (dw && K > 0) lipt_gemm_packed_p(ctx, 1, 0, K, N, M, x->data, G, dw, 1.0f); /* dw[K,N] += xᵀ G */
    }
    float *db = lipt_grad_of(ctx, b);
    if (db) lipt_reduce_rows_acc(db, G, NULL, (size_t)M, (size_t)N, 1.0);
}
