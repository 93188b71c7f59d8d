/* Private (src/ops and the other users of a tape context): the kernels' context (kernels/kctx.h) of a lipt_ctx, for a
 * kernel call: LIPT_KC(ctx) is a pointer to a lipt_kctx that lives until the end of the enclosing block and shares the
 * context's precision, low-precision state and arena (what the kernels allocate there, the context's mark or reset
 * frees), its attention statistics (attn_stats: the spread goes to attn_logit_spread) and its profile (the products'
 * time goes to profile->products and ->attention: kernels/kctx.h). A macro so that it costs six stores, no call. */
#ifndef LIPT_AUTOGRAD_KCTX_H
#define LIPT_AUTOGRAD_KCTX_H

#include "kernels/kernels.h"
#include "lipt/autograd.h"

#define LIPT_KC(ctx)                                                                                                \
    (&(lipt_kctx){.precision = (ctx)->precision, .lowp = (ctx)->lowp, .arena = &(ctx)->arena,                      \
                  .attn_spread = (ctx)->attn_stats ? &(ctx)->attn_logit_spread : NULL,                              \
                  .products_s = (ctx)->profile ? &(ctx)->profile->products : NULL,                                  \
                  .attention_s = (ctx)->profile ? &(ctx)->profile->attention : NULL})
/* The same from a const context, for the kernels that take a const lipt_kctx (they read the precision, no scratch). */
#define LIPT_KC_READ(ctx) ((const lipt_kctx *)&(lipt_kctx){.precision = (ctx)->precision, .lowp = (ctx)->lowp})

#endif
