/* Private: the kernels' own context (issue 50), as small as what the kernels truly read: the precision of the
 * products, the low-precision products' per-thread state, a scratch arena, and where the attention reports its logit
 * spread. Tape, RNG, no-grad and profiling stay in lipt_ctx (the autograd floor); an op passes LIPT_KC(ctx)
 * (src/autograd/kctx.h), the decoder a lipt_kctx of its own. */
#ifndef LIPT_KERNELS_KCTX_H
#define LIPT_KERNELS_KCTX_H

#include "lipt/arena.h"
#include "lipt/core.h"

typedef struct lipt_kctx {
    int precision;          /* lipt_precision of the products (lipt_gemm_p and the low-precision packing) */
    struct lipt_lowp *lowp; /* the low-precision products' per-thread scratch and oneDNN state (NULL for float32);
                             * lipt_kctx_set_precision allocates it, lipt_lowp_free frees it */
    lipt_arena *arena;      /* scratch (k-split partial sums, packed operands): the caller's mark or reset frees it */
    float *attn_spread;     /* NULL, or where the attention kernels raise the largest logit spread of a row (a pass
                             * over the logits: lipt_ctx.attn_stats) */
} lipt_kctx;

/* The precision of k's products: LIPT_OK, or the error of lipt_precision_check (k then unchanged). Outside parallel
 * regions, before k's first product at that precision. */
lipt_status lipt_kctx_set_precision(lipt_kctx *k, lipt_precision p, lipt_error *err);

#endif
