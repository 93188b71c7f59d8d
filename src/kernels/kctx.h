/* Private: the kernels' own context (issue 50), as small as what the kernels truly read: the precision of the
 * products, the low-precision products' per-thread state, a scratch arena, where the attention reports its logit
 * spread, and where the products' time is summed (lipt bench --profile). Tape, RNG, no-grad and the ops' profile stay
 * in lipt_ctx (the autograd floor); an op passes LIPT_KC(ctx) (src/autograd/kctx.h), the decoder a lipt_kctx of its
 * own. */
#ifndef LIPT_KERNELS_KCTX_H
#define LIPT_KERNELS_KCTX_H

#include <omp.h>
#include <time.h>

#include "lipt/arena.h"
#include "lipt/core.h"

typedef struct lipt_kctx {
    int precision;          /* lipt_precision of the products (lipt_gemm_p and the low-precision packing) */
    struct lipt_lowp *lowp; /* the low-precision products' per-thread scratch and oneDNN state (NULL for float32);
                             * lipt_kctx_set_precision allocates it, lipt_lowp_free frees it */
    lipt_arena *arena;      /* scratch (k-split partial sums, packed operands): the caller's mark or reset frees it */
    float *attn_spread;     /* NULL, or where the attention kernels raise the largest logit spread of a row (a pass
                             * over the logits: lipt_ctx.attn_stats) */
    double *products_s;     /* NULL, or where the products' wall time is summed in seconds (lipt bench --profile:
                             * lipt_profile.products); lipt_kprof_begin / lipt_kprof_end below */
    double *attention_s;    /* NULL, or where the attention kernels' part of it is summed (lipt_profile.attention) */
} lipt_kctx;

/* The precision of k's products: LIPT_OK, or the error of lipt_precision_check (k then unchanged). Outside parallel
 * regions, before k's first product at that precision. */
lipt_status lipt_kctx_set_precision(lipt_kctx *k, lipt_precision p, lipt_error *err);

/* The products' clock (lipt bench --profile). Timed: each top-level call of a product entry point, as a whole, when
 * k->products_s is set and the call is made outside an active parallel region (on one thread, so the sums take no
 * lock and no thread's time is added twice):
 *   - the GEMM dispatchers at k's precision: lipt_gemm_p (float32 lipt_gemm, the k-split, or the low precisions),
 *     lipt_gemm_gemv_p, lipt_gemm_small_p, and the low-precision entry points lipt_gemm_lowp, _pk, _bias (the
 *     conversion of unpacked operands to bf16 and the bias the product adds included);
 *   - the ops' direct lipt_gemm_rows (float32 linear on oneDNN: the bias and GELU or MaxMin passes it runs on each
 *     block of rows while in cache included, as part of the product) and the heads' products of the tied L2 attention's
 *     backward (timed as one loop in src/ops/attention_l2.c);
 *   - the L2 tied attention's per-head products (lipt_attn_l2_tied_M, lipt_attn_l2_tied_values), as whole calls;
 *   - the attention kernels (lipt_attn_forward, _forward_tiled, _backward_rel, _backward_tiled) as whole calls, into
 *     products_s and attention_s both: their q kᵀ, P v and gradient products run per head inside the kernel's own
 *     parallel region, where they cannot be timed without a race, so the softmax, masks and packing between them
 *     are counted too (attention_s says how much that is at most).
 * A call inside a timed one finds products_s NULL (lipt_kprof_begin clears it until lipt_kprof_end): nothing is
 * counted twice. Not counted: products called inside a parallel region of the caller's own, and those that do not
 * take a kernel context (lipt_gemm called directly: the certificates' and spectral norms' Gram products in
 * src/lipschitz, the Muon optimizer's Newton-Schulz products, Jacobians, inversion). */
static inline double lipt_kprof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* Starts timing a product on k: returns where its time goes (and *t0 its start), or NULL when not timed (no profile,
 * inside a parallel region, or inside a timed call). Pair with lipt_kprof_end(k, returned, t0, attention). */
static inline double *lipt_kprof_begin(lipt_kctx *k, double *t0) {
    double *acc = k->products_s;
    *t0 = 0;
    if (!acc || omp_in_parallel()) return NULL;
    k->products_s = NULL;
    *t0 = lipt_kprof_now();
    return acc;
}
/* Ends what lipt_kprof_begin started: the time into *acc (and k->attention_s when attention), k as it was. */
static inline void lipt_kprof_end(lipt_kctx *k, double *acc, double t0, int attention) {
    if (!acc) return;
    const double dt = lipt_kprof_now() - t0;
    *acc += dt;
    if (attention && k->attention_s) *k->attention_s += dt;
    k->products_s = acc;
}

#endif
