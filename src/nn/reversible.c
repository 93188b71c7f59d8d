/* Reversible training's model side (--memory invert): the blocks as one chain of residual half-blocks
 * (lipt_reversible_chain), each undone from its output in the backward: coupling halves exactly, with one branch
 * evaluation; fixed-point halves by accelerated iteration stopped by the certificate's a-posteriori bound. The
 * half-block the chain runs and reruns is the training forward's own (lipt_model_half_block). */
#include <math.h>
#include <string.h>

#include "lipt/invert.h"
#include "lipt/model.h"
#include "nn/block_plan.h"

/* every half-block inverts (block_plan.h: the invertible model, coupling blocks) */
int lipt_config_reversible(const lipt_config *c) {
    lipt_half_desc hd[2];
    lipt_block_halves(c, 0, hd);
    return hd[0].inverse != LIPT_INVERSE_NONE && hd[1].inverse != LIPT_INVERSE_NONE;
}

double lipt_config_reversible_lip(const lipt_config *c) {
    if (!lipt_config_invertible(c)) return 0;
    return (double)c->c / (1.0 - (double)c->dropout);
}

lipt_status lipt_config_reversible_check(const lipt_config *c, lipt_error *err) {
    if (!lipt_config_reversible(c))
        return lipt_fail(err, LIPT_ERR_ARG, "--memory invert rebuilds each block's input from its output, which needs "
                         "an invertible model (attention = clipped-dp or contractive-l2 with ffn = contractive) or "
                         "coupling blocks (coupling = 1); this one has attention = %s, ffn = %s, coupling = 0: use "
                         "--memory recompute to trade compute for memory on it", lipt_attn_name(c->attention),
                         lipt_ffn_name(c->ffn));
    /* coupling blocks (certified or not) undo each half by one subtraction, whatever the dropout; fixed-point halves
     * need a contraction */
    if (lipt_block_half(c, 0, LIPT_BRANCH_ATTN).inverse == LIPT_INVERSE_FIXED_POINT &&
        !(lipt_config_reversible_lip(c) < 1))
        return lipt_fail(err, LIPT_ERR_ARG, "--memory invert undoes each block x + dropout(g(x)) by fixed-point "
                         "iteration, which converges only when the dropped-out branch is a contraction: Lip <= c / "
                         "(1 - dropout) = %g / (1 - %g) = %.4g, not below 1 (dropout scales the kept units by "
                         "1/(1 - p)); lower dropout below 1 - c = %.4g, or c", (double)c->c, (double)c->dropout,
                         lipt_config_reversible_lip(c), 1.0 - (double)c->c);
    return LIPT_OK;
}

typedef struct {
    lipt_branch_ref ref;
    lipt_rng rng;          /* the half-block's RNG state: every evaluation draws the forward's dropout mask */
} replay;

/* The branch as the forward ran it (dropout mask, grid), for the inverter. */
static lipt_tensor *branch_replayed(lipt_ctx *ctx, lipt_tensor *x, void *user) {
    replay *r = user;
    ctx->rng = r->rng;
    return lipt_model_branch_train(ctx, x, &r->ref);
}

static lipt_status half_inverse(lipt_ctx *ctx, lipt_tensor *y, float *x, void *arg, lipt_inv_info *info,
                                lipt_error *err) {
    const lipt_branch_ref *ref = arg;
    const lipt_model *m = ref->model;
    const lipt_half_desc hd = lipt_block_half(&m->cfg, ref->layer, ref->which);
    if (lipt_half_has_after(&hd)) { /* the steps after the sum (ActNorm) undone first, into a copy: y is the chain's */
        lipt_tensor *z = lipt_tensor_like(ctx, y);
        lipt_half_undo_after(&m->layers[ref->layer], &hd, y->data, z->data, y->numel, y->shape[y->ndim - 1]);
        y = z;
    }
    replay r = {*ref, ctx->rng};
    if (hd.inverse == LIPT_INVERSE_SUBTRACT) {
        /* the branch reads the half it does not write, where y is x: x = y − g(y), one evaluation; with
         * coupling_grid the forward's sum was exact, so this difference is too */
        const lipt_tensor *g = branch_replayed(ctx, y, &r);
        for (size_t i = 0; i < y->numel; i++) x[i] = y->data[i] - g->data[i];
        *info = (lipt_inv_info){1, 0, 1, 0, 1};
        return LIPT_OK;
    }
    const lipt_reversible *rev = ctx->rev;
    /* the feed-forward is token-wise: each token its own problem (mixed and stopped alone); the attention mixes the
     * tokens of a sequence. Without a dropout mask over the whole tensor, only the unfinished ones are evaluated. */
    const int ffn = hd.token_wise, masked = ctx->training && lipt_half_has(&hd, LIPT_STEP_DROPOUT);
    const double tol = rev ? rev->tol : LIPT_REV_TOL, tol_lowp = rev ? rev->tol_lowp : LIPT_REV_TOL_LOWP;
    const lipt_fp_accel_opts o = {ctx->precision == LIPT_PRECISION_FLOAT32 ? tol : fmax(tol, tol_lowp),
                                  rev ? rev->max_iter : LIPT_REV_MAX_ITER,
                                  m->cfg.lip_norm == LIPT_LIPNORM_INF2 ? m->cfg.d_model : 0,
                                  ffn ? y->shape[0] * y->shape[1] : y->shape[0], rev ? rev->accel : LIPT_REV_ACCEL,
                                  m->cfg.lip_norm == LIPT_LIPNORM_INF2 ? lipt_config_reversible_lip(&m->cfg) : 0,
                                  !masked};
    const lipt_status st = lipt_fixed_point_invert_accel(ctx, branch_replayed, &r, y, x, &o, info, err);
    if (st != LIPT_OK && err) {
        char msg[LIPT_ERRMSG_LEN];
        memcpy(msg, err->msg, sizeof msg);
        lipt_fail(err, st, "layer %d %s half: %.400s", ref->layer, ref->which == LIPT_BRANCH_ATTN ? "attention" :
                  "feed-forward", msg);
    }
    return st;
}

/* Coupling: the branch at y is the branch at x (it reads the half the block leaves alone), so one evaluation, recorded,
 * rebuilds x = y − g and serves the backward: the half-block's output x + g recorded from it, x's gradient the add's
 * plus the branch's (into y's copy), in the order store-all sums them. */
static lipt_tensor *coupling_inverse_taped(lipt_ctx *ctx, lipt_tensor *y, float *x, void *arg, lipt_tensor **in,
                                           int *n_in) {
    const lipt_branch_ref *ref = arg;
    const lipt_model *m = ref->model;
    const lipt_half_desc hd = lipt_block_half(&m->cfg, ref->layer, ref->which);
    if (hd.inverse != LIPT_INVERSE_SUBTRACT || lipt_half_has_after(&hd)) return NULL;
    lipt_tensor *z = lipt_tensor_wrap(ctx, y->data, y->ndim, y->shape);
    z->requires_grad = 1;
    lipt_tensor *g = lipt_model_branch_train(ctx, z, arg);
    for (size_t i = 0; i < y->numel; i++) x[i] = y->data[i] - g->data[i];
    lipt_tensor *xt = lipt_tensor_wrap(ctx, x, y->ndim, y->shape);
    xt->requires_grad = 1;
    in[0] = xt;
    in[1] = z;
    *n_in = 2;
    return lipt_model_residual(ctx, m, ref->layer, ref->which, xt, g);
}

lipt_tensor *lipt_model_blocks_reversible(lipt_ctx *ctx, const lipt_model *m, lipt_tensor *x,
                                          const lipt_layer_certs *cc) {
    const int L = m->cfg.n_layers, n = 2 * L;
    void **args = lipt_arena_alloc(&ctx->arena, (size_t)n * sizeof(void *));
    lipt_tensor **outside = lipt_arena_alloc(&ctx->arena, (size_t)(3 * L + 1) * sizeof(lipt_tensor *));
    int n_out = 0;
    for (int l = 0; l < L; l++) {
        const lipt_layer_certs *c = cc ? &cc[l] : NULL;
        lipt_half_desc hd[2];
        lipt_block_halves(&m->cfg, l, hd);
        for (int k = 0; k < 2; k++) {
            lipt_branch_ref *r = lipt_arena_alloc(&ctx->arena, sizeof *r);
            *r = (lipt_branch_ref){m, l, hd[k].which, c};
            args[2 * l + k] = r;
        }
        /* the certificates are made once, before the chain: their gradients gather over the walk */
        if (c && c->attn_fac && c->attn_fac->requires_grad) outside[n_out++] = c->attn_fac;
        for (int i = 0; i < 2; i++)
            if (c && c->ffn_sigma[i] && c->ffn_sigma[i]->requires_grad) outside[n_out++] = c->ffn_sigma[i];
    }
    return lipt_reversible_chain(ctx, n, lipt_model_half_block, half_inverse, coupling_inverse_taped, args, x, n_out,
                                 outside);
}
