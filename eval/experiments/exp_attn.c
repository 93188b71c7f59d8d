/* The attention maps of the synthetic experiments (tightness, invertibility): one layer's weights and
 * F(X) = Attn(X) W^O as a map for the Jacobian and inversion tools, with the certified bounds of its weights. */
#include <math.h>
#include <string.h>

#include "exp_attn.h"

/* "ones": every entry = scale; "random": N(0, scale² / D) (rows of about unit norm for scale 1). */
void exp_att_init(exp_att_weights *w, int D, int ones, double scale, uint64_t seed) {
    lipt_ctx_init(&w->ctx, 1 << 12, 1);
    w->D = D;
    lipt_tensor **ws[4] = {&w->wq, &w->wk, &w->wv, &w->wo};
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    for (int i = 0; i < 4; i++) {
        *ws[i] = lipt_tensor_2d(&w->ctx, D, D);
        if (ones)
            for (int j = 0; j < D * D; j++) (*ws[i])->data[j] = (float)scale;
        else
            lipt_rng_fill_normal(&r, (*ws[i])->data, (size_t)D * D, (float)(scale / sqrt((double)D)));
    }
}

void exp_att_clone(exp_att_weights *dst, const exp_att_weights *src) {
    exp_att_init(dst, src->D, 1, 0, 0);
    const size_t n = (size_t)src->D * src->D * sizeof(float);
    memcpy(dst->wq->data, src->wq->data, n);
    memcpy(dst->wk->data, src->wk->data, n);
    memcpy(dst->wv->data, src->wv->data, n);
    memcpy(dst->wo->data, src->wo->data, n);
}

void exp_att_free(exp_att_weights *w) { lipt_ctx_free(&w->ctx); }

lipt_tensor *exp_att_forward(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    const exp_att_map *m = user;
    lipt_tensor *x3 = lipt_reshape(ctx, x, 3, (int[]){1, m->N, m->D});
    lipt_tensor *q = lipt_matmul(ctx, x3, m->w->wq, 0, 0), *a;
    if (m->kind == EXP_ATT_L2_TIED)
        a = lipt_attention_l2_tied(ctx, q, m->w->wq, m->w->wv, m->H, m->causal);
    else
        a = lipt_attention_dp(ctx, q, lipt_matmul(ctx, x3, m->w->wk, 0, 0), lipt_matmul(ctx, x3, m->w->wv, 0, 0), m->H,
                              m->causal);
    lipt_tensor *out = lipt_matmul(ctx, a, m->w->wo, 0, 0);
    if (m->mult != 1.0f) out = lipt_scale(ctx, out, m->mult);
    return lipt_reshape(ctx, out, 2, (int[]){m->N, m->D});
}

/* The ∞-norm bound of SPEC §2 for these weights at sequence length N. */
double exp_att_bound_inf(const exp_att_weights *w, int H, int N) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 14, 1);
    lipt_no_grad_push(&ctx);
    const double ub = lipt_bound_l2_inf(&ctx, w->wq, w->wv, w->wo, H, N)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return ub;
}

/* The 2-norm bound; vec holds converged power-iteration vectors (iters rounds run first). */
double exp_att_bound_2(const exp_att_weights *w, int H, int N, lipt_bound_vectors *vec, int iters) {
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, 1 << 14, 1);
    lipt_no_grad_push(&ctx);
    const double ub = lipt_bound_l2_2(&ctx, w->wq, w->wv, w->wo, H, N, vec, iters)->data[0];
    lipt_no_grad_pop(&ctx);
    lipt_ctx_free(&ctx);
    return ub;
}
