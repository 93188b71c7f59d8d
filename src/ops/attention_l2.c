/* L2 multi-head attention ops: untied (q, k, v) and tied (the Lipschitz one). Their kernels (the |k_j|²/s term, the
 * tied values Q_h M_h) are in src/kernels/attn_l2.c. */
#include "attention_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

/* ---------------------------------------------------------------- ops */

/* Untied: the (q, k, v) driver of attention_dp.c with L2 logits. */
lipt_tensor *lipt_attention_l2(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    return lipt_attn_qkv(ctx, 1, q, k, v, H, causal);
}

lipt_tensor *lipt_attention_l2_packed(lipt_ctx *ctx, lipt_tensor *qkv, int H, int causal) {
    return lipt_attn_qkv_packed(ctx, 1, qkv, H, causal);
}

void lipt_attention_l2_backward(lipt_ctx *ctx, lipt_node *node) { lipt_attn_qkv_backward(ctx, node, 1); }

/* Tied: keys are the queries, and values V_h = Q_h M_h (lipt_attn_l2_tied_M). VM holds V [B,T,D] (same layout
 * as q), M [H,d,d] and, at a low precision, q and V packed (tied_layout). */
typedef struct {
    size_t m, qpk, vpk, bytes; /* byte offsets of M and the packed q and V, and the whole size */
} tied_layout;

static tied_layout tied_layout_of(const lipt_ctx *ctx, int BT, int D, int H) {
    const int d = D / H;
    tied_layout l;
    l.m = (size_t)BT * D * sizeof(float);
    const size_t end_m = (l.m + (size_t)H * d * d * sizeof(float) + 63) & ~(size_t)63;
    const size_t pk = lipt_lowp_packed_bytes(LIPT_KC_READ(ctx), BT, D);
    const int low = ctx->precision != LIPT_PRECISION_FLOAT32;
    l.qpk = end_m;
    l.vpk = end_m + (low ? pk : 0);
    l.bytes = end_m + (low ? 2 * pk : 0);
    return l;
}

/* At a low precision q is converted once for the values' products, the attention's and the backward's (which also
 * take V's converted copy): before, each of them converted its operands again, per head. */
static void tied_values(lipt_ctx *ctx, const lipt_tensor *q, const lipt_tensor *wq, const lipt_tensor *wv, int H,
                        char *VM, tied_layout l) {
    lipt_kctx *kc = LIPT_KC(ctx);
    const int BT = q->shape[0] * q->shape[1], D = q->shape[2];
    float *V = (float *)VM, *M = (float *)(VM + l.m);
    lipt_attn_l2_tied_M(kc, wq->data, wv->data, D, H, M);
    void *qpk = NULL;
    if (ctx->precision != LIPT_PRECISION_FLOAT32) {
        qpk = VM + l.qpk;
        lipt_lowp_pack_p(kc, q->data, BT, D, D, qpk);
    }
    lipt_attn_l2_tied_values(kc, q->data, qpk, BT, D, H, M, V, 0);
    if (qpk) lipt_lowp_pack_p(kc, V, BT, D, D, VM + l.vpk);
}

/* The attention job of the tied op: k = q, values V, q and V's converted copies at a low precision. */
static lipt_attn_job tied_job(const lipt_ctx *ctx, const lipt_tensor *q, int H, int causal, char *VM, tied_layout l) {
    const int low = ctx->precision != LIPT_PRECISION_FLOAT32;
    return (lipt_attn_job){.B = q->shape[0], .T = q->shape[1], .D = q->shape[2], .H = H, .causal = causal != 0,
                           .l2 = 1, .q = q->data, .k = q->data, .v = (const float *)VM, .ld = q->shape[2],
                           .q_lowp = low ? VM + l.qpk : NULL, .v_lowp = low ? VM + l.vpk : NULL};
}

/* saved: P [B,H,T,T] or (iarg 2 set) the tiled row stats [2,B,H,T]; saved2: VM (tied_values).
 * iarg: 0 H, 1 causal, 2 tiled. */
lipt_tensor *lipt_attention_l2_tied(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *wq, lipt_tensor *wv, int H,
                                    int causal) {
    char a[64], b[64], c[64];
    LIPT_CHECK(q->ndim == 3, "attention_l2_tied: q must be [B,T,D], got %s", lipt_shape_str(q, a, 64));
    const int B = q->shape[0], T = q->shape[1], D = q->shape[2];
    LIPT_CHECK(H >= 1 && D >= 1 && D % H == 0, "attention_l2_tied: D = %d not divisible into %d heads", D, H);
    LIPT_CHECK(wq->ndim == 2 && wq->shape[0] == D && wq->shape[1] == D && wv->ndim == 2 && wv->shape[0] == D &&
                   wv->shape[1] == D,
               "attention_l2_tied: q %s needs wq, wv [%d,%d], got %s and %s", lipt_shape_str(q, a, 64), D, D,
               lipt_shape_str(wq, b, 64), lipt_shape_str(wv, c, 64));
    lipt_tensor *out = lipt_tensor_new(ctx, 3, q->shape);
    lipt_node *node = lipt_record(ctx, LIPT_OP_ATTENTION_L2_TIED, out, 3, (lipt_tensor *[]){q, wq, wv});
    /* Without a tape VM is scratch, released before returning (out was allocated before the mark). */
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    const tied_layout l = tied_layout_of(ctx, B * T, D, H);
    char *VM = lipt_arena_alloc(&ctx->arena, l.bytes);
    tied_values(ctx, q, wq, wv, H, VM, l);
    const lipt_attn_job job = tied_job(ctx, q, H, causal, VM, l);
    int tiled;
    float *saved = lipt_attn_forward_op(ctx, &job, out->data, node != NULL, &tiled);
    if (node) {
        node->saved = saved;
        node->saved2 = VM;
        node->iarg[0] = H;
        node->iarg[1] = job.causal;
        node->iarg[2] = tiled;
    } else {
        lipt_arena_release(&ctx->arena, mark);
    }
    lipt_profile_op_end(ctx, LIPT_OP_ATTENTION_L2_TIED); /* it recorded before computing */
    return out;
}

/* With dV the gradient of the values (from the attention kernel):
 *   dq += dV M_hᵀ (values) and the logit part (kernel with k = q, so dq gets both the query and key roles);
 *   dM_h = Q_hᵀ dV_h summed over the batch;  dW^{Q,h} += W^{V,h} dM_hᵀ / s;  dW^{V,h} += W^{Q,h} dM_h / s. */
void lipt_attention_l2_tied_backward(lipt_ctx *ctx, lipt_node *node) {
    lipt_kctx *kc = LIPT_KC(ctx);
    lipt_tensor *q = node->in[0], *wq = node->in[1], *wv = node->in[2];
    float *dq = lipt_grad_of(ctx, q), *dwq = lipt_grad_of(ctx, wq), *dwv = lipt_grad_of(ctx, wv);
    if (!dq && !dwq && !dwv) return;
    const int B = q->shape[0], T = q->shape[1], D = q->shape[2], H = node->iarg[0], d = D / H, BT = B * T;
    const float inv_s = (float)(1.0 / sqrt((double)d));
    char *VM = node->saved2;
    const tied_layout l = tied_layout_of(ctx, BT, D, H);
    const float *M = (const float *)(VM + l.m);
    lipt_arena_mark mark = lipt_arena_get_mark(&ctx->arena);
    float *dV = lipt_arena_calloc(&ctx->arena, (size_t)BT * D * sizeof(float));
    const lipt_attn_job job = tied_job(ctx, q, H, node->iarg[1], VM, l);
    lipt_attn_backward_op(ctx, &job, node, dq, dq, dV, NULL);
    /* at a low precision dV converted once for its two products per head, q as the forward converted it */
    const void *qpk = job.q_lowp, *dvpk = qpk ? lipt_lowp_pack_arena(kc, dV, BT, D, D) : NULL;
    /* heads side by side (lipt_attn_heads_par): each writes its own columns of dq, dwq, dwv and its own dM */
    float *dMs = (dwq || dwv) ? lipt_arena_alloc(&ctx->arena, (size_t)H * d * d * sizeof(float)) : NULL;
    double t0, *acc = lipt_kprof_begin(kc, &t0); /* the heads' products, timed as one (kernels/kctx.h) */
#pragma omp parallel for schedule(static) if (lipt_attn_heads_par(H))
    for (int h = 0; h < H; h++) {
        const float *Mh = M + (size_t)h * d * d, *dVh = dV + (size_t)h * d;
        const void *dVhpk = lipt_lowp_at(kc, dvpk, (size_t)h * d), *Qhpk = lipt_lowp_at(kc, qpk, (size_t)h * d);
        if (dq) {
            if (dVhpk)
                lipt_gemm_lowp_pk(kc, 0, 1, BT, d, d, 1.0f, NULL, D, dVhpk, Mh, d, NULL, 1.0f, dq + (size_t)h * d, D);
            else lipt_gemm_small_p(kc, 0, 1, BT, d, d, 1.0f, dVh, D, Mh, d, 1.0f, dq + (size_t)h * d, D);
        }
        if (!dMs) continue;
        float *dM = dMs + (size_t)h * d * d;
        if (dVhpk) lipt_gemm_lowp_pk(kc, 1, 0, d, d, BT, 1.0f, NULL, D, Qhpk, NULL, D, dVhpk, 0.0f, dM, d);
        else lipt_gemm_small_p(kc, 1, 0, d, d, BT, 1.0f, q->data + (size_t)h * d, D, dVh, D, 0.0f, dM, d);
        if (dwq)
            lipt_gemm_small_p(kc, 0, 1, D, d, d, inv_s, wv->data + (size_t)h * d, D, dM, d, 1.0f,
                              dwq + (size_t)h * d, D);
        if (dwv)
            lipt_gemm_small_p(kc, 0, 0, D, d, d, inv_s, wq->data + (size_t)h * d, D, dM, d, 1.0f,
                              dwv + (size_t)h * d, D);
    }
    lipt_kprof_end(kc, acc, t0, 0);
    lipt_arena_release(&ctx->arena, mark);
}
