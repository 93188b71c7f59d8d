/* The attention ops' driver shared by every kind (which kernel runs: materialising or tiled, src/kernels/attn_full.c
 * and attn_tiled.c), the untied (q, k, v) op, and the DP ops. The L2 ops live in attention_l2.c. */
#include "attention_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "autograd/kctx.h"
#include "kernels/kernels.h"

static void check_qkv(const char *op, const lipt_tensor *q, const lipt_tensor *k, const lipt_tensor *v, int H) {
    char a[64], b[64], c[64];
    LIPT_CHECK(q->ndim == 3, "%s: q must be [B,T,D], got %s", op, lipt_shape_str(q, a, 64));
    LIPT_CHECK(lipt_same_shape(q, k) && lipt_same_shape(q, v), "%s: q %s, k %s, v %s differ", op,
               lipt_shape_str(q, a, 64), lipt_shape_str(k, b, 64), lipt_shape_str(v, c, 64));
    LIPT_CHECK(H >= 1 && q->shape[2] >= 1 && q->shape[2] % H == 0, "%s: D = %d not divisible into %d heads", op,
               q->shape[2], H);
}

/* Auto: tiled from this T on. Measured (docs/PERFORMANCE.md, d = 64, one thread): forward + backward, the
 * materialising kernel is 8-12% faster at T <= 512 (one recomputation of the logits and a second exp pass are not
 * yet paid back) and 4-17% slower from 1024 on; forward alone, tiled wins from 512 (-5%) and by 25% at 1024. The
 * saved P also costs B·H·T² floats per op, 16 MB per (batch, 4 heads) at T = 1024. */
#define ATTN_TILED_MIN_T 1024

int lipt_attn_use_tiled(const lipt_ctx *ctx, int T) {
    if (ctx->attn_tiled >= 0) return ctx->attn_tiled != 0;
    return T >= ATTN_TILED_MIN_T;
}

float *lipt_attn_forward_op(lipt_ctx *ctx, const lipt_attn_job *j, float *out, int keep, int *tiled) {
    *tiled = lipt_attn_use_tiled(ctx, j->T);
    /* tiled: the row stats [2,B,H,T]; else P [B,H,T,T] */
    float *saved = !keep ? NULL
                   : *tiled ? lipt_arena_alloc(&ctx->arena, (size_t)j->B * j->H * j->T * 2 * sizeof(float))
                            : lipt_arena_alloc(&ctx->arena, lipt_attn_saved_P_bytes(LIPT_KC_READ(ctx), j));
    if (*tiled) lipt_attn_forward_tiled(LIPT_KC(ctx), j, out, saved);
    else lipt_attn_forward(LIPT_KC(ctx), j, out, saved);
    return saved;
}

void lipt_attn_backward_op(lipt_ctx *ctx, const lipt_attn_job *j, const lipt_node *node, float *dq, float *dk,
                           float *dv, float *drel) {
    lipt_kctx *kc = LIPT_KC(ctx);
    if (node->iarg[2]) lipt_attn_backward_tiled(kc, j, node->saved, node->out->data, node->out->grad, dq, dk, dv, drel);
    else lipt_attn_backward_rel(kc, j, node->saved, node->out->grad, dq, dk, dv, drel);
}

/* ---------------------------------------------------------------- the untied ops
 * Their q, k, v come as three [B,T,D] tensors (inputs 0..2), or packed: one [B,T,3D] tensor (input 0), the product
 * of x with the three weights side by side, whose column blocks 0, D, 2D are q, k, v (row stride 3D). One product of
 * N = 3D instead of three of N = D packs x once and runs nearer the GEMM rate (forward, dx and dW alike). The op
 * records iarg 3 = packed; a relative bias, when there is one, is the last input. */

static void check_packed(const char *op, const lipt_tensor *qkv, int H) {
    char a[64];
    LIPT_CHECK(qkv->ndim == 3 && qkv->shape[2] >= 3 && qkv->shape[2] % 3 == 0,
               "%s: packed qkv must be [B,T,3D], got %s", op, lipt_shape_str(qkv, a, 64));
    const int D = qkv->shape[2] / 3;
    LIPT_CHECK(H >= 1 && D % H == 0, "%s: D = %d not divisible into %d heads", op, D, H);
}

/* The job of an untied op's q, k, v inputs (see above); rel: the bias, or NULL; map: the logit map, or NULL. */
static lipt_attn_job untied_job(lipt_tensor *const *in, int packed, int H, int causal, int l2, const lipt_tensor *rel,
                                const lipt_logit_map *map, float mp) {
    LIPT_CHECK(!map || (!l2 && !rel), "attention: logit map %s with %s (a map takes DP logits without a bias)",
               map ? map->name : "", l2 ? "L2 logits" : "a relative-position bias");
    const lipt_tensor *x = in[0];
    const int D = packed ? x->shape[2] / 3 : x->shape[2];
    const float *q = x->data;
    return (lipt_attn_job){.B = x->shape[0], .T = x->shape[1], .D = D, .H = H, .causal = causal != 0, .l2 = l2,
                           .q = q, .k = packed ? q + D : in[1]->data, .v = packed ? q + 2 * D : in[2]->data,
                           .rel = rel ? rel->data : NULL, .rel_stride = rel ? rel->shape[1] : 0,
                           .ld = packed ? 3 * D : D, .qkv_lowp = packed ? x->lowp : NULL, .map = map,
                           .map_param = mp};
}

/* Record and run an untied op: n_qkv inputs (3, or packed 1) then rel if given. saved: P [B,H,T,T], or with iarg 2
 * set the tiled kernels' row stats [2,B,H,T]; saved2: the logit map (a static descriptor, never written through: the
 * pointer's const is dropped only to fit the node's field), or NULL. iarg: 0 H, 1 causal, 2 tiled; farg: 0 the map's
 * parameter. */
static lipt_tensor *untied_op(lipt_ctx *ctx, lipt_op_id op, int l2, lipt_tensor *const *qkv, int n_qkv,
                              lipt_tensor *rel, const lipt_logit_map *map, float mp, int H, int causal) {
    lipt_tensor *in[LIPT_MAX_INPUTS] = {NULL};
    for (int i = 0; i < n_qkv; i++) in[i] = qkv[i];
    in[n_qkv] = rel;
    const int n_in = n_qkv + (rel != NULL);
    /* a packed q, k, v at a low precision, recorded: converted once here, kept with the projection's output for the
     * backward's products (which converted it again) */
    if (n_qkv == 1 && ctx->precision != LIPT_PRECISION_FLOAT32 && !qkv[0]->lowp && qkv[0]->numel > 0 &&
        lipt_should_record(ctx, n_in, in))
        qkv[0]->lowp = lipt_lowp_pack_arena(LIPT_KC(ctx), qkv[0]->data, (int)lipt_rows(qkv[0]), lipt_last_dim(qkv[0]),
                                            lipt_last_dim(qkv[0]));
    const lipt_attn_job job = untied_job(qkv, n_qkv == 1, H, causal, l2, rel, map, mp);
    lipt_tensor *out = lipt_tensor_3d(ctx, job.B, job.T, job.D);
    lipt_node *node = lipt_record(ctx, op, out, n_in, in);
    int tiled;
    float *saved = lipt_attn_forward_op(ctx, &job, out->data, node != NULL, &tiled);
    if (node) {
        node->saved = saved;
        node->iarg[0] = H;
        node->iarg[1] = job.causal;
        node->iarg[2] = tiled;
        node->saved2 = (void *)map;
        node->farg[0] = mp;
    }
    lipt_profile_op_end(ctx, op); /* it recorded before computing */
    return out;
}

static void untied_backward(lipt_ctx *ctx, lipt_node *node, int l2, int has_rel) {
    const int packed = node->n_in - has_rel == 1;
    lipt_tensor *rel = has_rel ? node->in[node->n_in - 1] : NULL;
    const lipt_attn_job job = untied_job(node->in, packed, node->iarg[0], node->iarg[1], l2, rel,
                                         (const lipt_logit_map *)node->saved2, node->farg[0]);
    float *dq, *dk, *dv;
    if (packed) {
        float *g = lipt_grad_of(ctx, node->in[0]);
        dq = g, dk = g ? g + job.D : NULL, dv = g ? g + 2 * job.D : NULL;
    } else {
        dq = lipt_grad_of(ctx, node->in[0]), dk = lipt_grad_of(ctx, node->in[1]), dv = lipt_grad_of(ctx, node->in[2]);
    }
    lipt_attn_backward_op(ctx, &job, node, dq, dk, dv, rel ? lipt_grad_of(ctx, rel) : NULL);
}

lipt_tensor *lipt_attn_qkv(lipt_ctx *ctx, int l2, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    check_qkv(l2 ? "attention_l2" : "attention_dp", q, k, v, H);
    return untied_op(ctx, l2 ? LIPT_OP_ATTENTION_L2 : LIPT_OP_ATTENTION_DP, l2, (lipt_tensor *[]){q, k, v}, 3, NULL,
                     NULL, 0, H, causal);
}

lipt_tensor *lipt_attn_qkv_packed(lipt_ctx *ctx, int l2, lipt_tensor *qkv, int H, int causal) {
    check_packed(l2 ? "attention_l2" : "attention_dp", qkv, H);
    return untied_op(ctx, l2 ? LIPT_OP_ATTENTION_L2 : LIPT_OP_ATTENTION_DP, l2, (lipt_tensor *[]){qkv}, 1, NULL, NULL,
                     0, H, causal);
}

void lipt_attn_qkv_backward(lipt_ctx *ctx, lipt_node *node, int l2) { untied_backward(ctx, node, l2, 0); }

lipt_tensor *lipt_attention_dp(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal) {
    return lipt_attn_qkv(ctx, 0, q, k, v, H, causal);
}

lipt_tensor *lipt_attention_dp_packed(lipt_ctx *ctx, lipt_tensor *qkv, int H, int causal) {
    return lipt_attn_qkv_packed(ctx, 0, qkv, H, causal);
}

void lipt_attention_dp_backward(lipt_ctx *ctx, lipt_node *node) { lipt_attn_qkv_backward(ctx, node, 0); }

/* DP attention with a logit map: the attention_dp op, its node keeping the map (untied_op). */
static void check_map(const lipt_logit_map *map, float p) {
    LIPT_CHECK(!map || (isfinite(p) && (!map->param_ok || map->param_ok(p))),
               "attention_dp_map: logit map %s with parameter %g (expected %s)", map ? map->name : "", (double)p,
               map && map->param_rule ? map->param_rule : "a finite number");
}

lipt_tensor *lipt_attention_dp_map(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v,
                                   const lipt_logit_map *map, float p, int H, int causal) {
    check_qkv("attention_dp_map", q, k, v, H);
    check_map(map, p);
    return untied_op(ctx, LIPT_OP_ATTENTION_DP, 0, (lipt_tensor *[]){q, k, v}, 3, NULL, map, p, H, causal);
}

lipt_tensor *lipt_attention_dp_map_packed(lipt_ctx *ctx, lipt_tensor *qkv, const lipt_logit_map *map, float p, int H,
                                          int causal) {
    check_packed("attention_dp_map", qkv, H);
    check_map(map, p);
    return untied_op(ctx, LIPT_OP_ATTENTION_DP, 0, (lipt_tensor *[]){qkv}, 1, NULL, map, p, H, causal);
}

/* DP attention with a learned relative-position logit bias, causal. rel [H, S] with S >= T: logit (i, j) of
 * head h gets rel[h, i - j]. */
static lipt_tensor *dp_rel(lipt_ctx *ctx, lipt_tensor *const *qkv, int n_qkv, lipt_tensor *rel, int H) {
    const int T = qkv[0]->shape[1]; /* the callers checked q's (or qkv's) shape */
    char a[64];
    LIPT_CHECK(rel->ndim == 2 && rel->shape[0] == H && rel->shape[1] >= T,
               "attention_dp_rel: rel must be [H = %d, S >= T = %d], got %s", H, T, lipt_shape_str(rel, a, 64));
    return untied_op(ctx, LIPT_OP_ATTENTION_DP_REL, 0, qkv, n_qkv, rel, NULL, 0, H, 1);
}

lipt_tensor *lipt_attention_dp_rel(lipt_ctx *ctx, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, lipt_tensor *rel,
                                   int H) {
    check_qkv("attention_dp_rel", q, k, v, H);
    return dp_rel(ctx, (lipt_tensor *[]){q, k, v}, 3, rel, H);
}

lipt_tensor *lipt_attention_dp_rel_packed(lipt_ctx *ctx, lipt_tensor *qkv, lipt_tensor *rel, int H) {
    check_packed("attention_dp_rel", qkv, H);
    return dp_rel(ctx, (lipt_tensor *[]){qkv}, 1, rel, H);
}

void lipt_attention_dp_rel_backward(lipt_ctx *ctx, lipt_node *node) { untied_backward(ctx, node, 0, 1); }
