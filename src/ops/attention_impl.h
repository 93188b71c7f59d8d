/* Private to src/ops: the attention ops' drivers over a lipt_attn_job (kernels/attn.h): the untied op, the
 * materialising and the tiled forward / backward, and the choice between them. */
#ifndef LIPT_OPS_ATTENTION_IMPL_H
#define LIPT_OPS_ATTENTION_IMPL_H

#include "kernels/kernels.h"
#include "lipt/ops.h"

/* The untied attention op: attention_dp (l2 = 0) or attention_l2 (l2 = 1) of [B,T,D] q, k, v with H heads, or
 * (_packed) of their column blocks in one [B,T,3D] tensor, recorded on the tape under that op; and its backward. */
lipt_tensor *lipt_attn_qkv(lipt_ctx *ctx, int l2, lipt_tensor *q, lipt_tensor *k, lipt_tensor *v, int H, int causal);
lipt_tensor *lipt_attn_qkv_packed(lipt_ctx *ctx, int l2, lipt_tensor *qkv, int H, int causal);
void lipt_attn_qkv_backward(lipt_ctx *ctx, lipt_node *node, int l2);

/* Whether an op of sequence length T takes the tiled kernels: ctx->attn_tiled when 0 or 1, else (auto) T >= the
 * measured crossover. The ops record the choice in node->iarg[2] (saved: stats instead of P). */
int lipt_attn_use_tiled(const lipt_ctx *ctx, int T);

/* What the ops call: the forward through the kernel lipt_attn_use_tiled picks, keeping (keep set) what its backward
 * needs in a new arena buffer, returned (NULL when not kept); *tiled tells which kernel ran (the ops store it in
 * iarg 2). lipt_attn_backward_op: the backward of that kernel, from the node's saved buffer, output and its gradient. */
float *lipt_attn_forward_op(lipt_ctx *ctx, const lipt_attn_job *job, float *out, int keep, int *tiled);
void lipt_attn_backward_op(lipt_ctx *ctx, const lipt_attn_job *job, const lipt_node *node, float *dq, float *dk,
                           float *dv, float *drel);


#endif
