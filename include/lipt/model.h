/* defines: lipt_model, the Transformer language model of every variant (SPEC §1, §3), its forward pass,
 * residual branches for the Jacobian and inversion tools, spectral-norm refresh, and the attention normaliser.
 * Model inversion: lipt/invert.h. */
#ifndef LIPT_MODEL_H
#define LIPT_MODEL_H

#include "lipt/config.h"
#include "lipt/ops.h"
#include "lipt/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One block. Pointers are NULL when the variant has no such parameter. Parameter names are
 * "layers.<i>.<field>" with the field names below (e.g. "layers.0.attn.wq", "layers.3.ffn.w1"). */
typedef struct {
    lipt_tensor *ln1_g, *ln1_b;            /* "ln1.gamma", "ln1.beta"   [D]  (not in the invertible model) */
    lipt_tensor *wq, *wk, *wv, *wo, *bo;   /* "attn.wq" ... [D,D], "attn.bo" [D]; wk only for dp, l2, clipped-dp */
    lipt_tensor *rel;                      /* "attn.rel_bias" [H, seq_len] (clipped-dp with rel_bias = 1): the logit
                                            * bias of head h at distance i - j is LIPT_REL_BIAS_GAIN * rel[h, i - j] */
    lipt_tensor *an_s, *an_b;              /* "actnorm.log_scale", "actnorm.bias" [D] (actnorm = 1): after the
                                            * block, x <- x * exp(log_scale) + bias */
    lipt_tensor *ln2_g, *ln2_b;            /* "ln2.gamma", "ln2.beta"   [D]  (not in the invertible model) */
    lipt_tensor *w1, *b1, *w2, *b2;        /* "ffn.w1" [D,F], "ffn.b1" [F], "ffn.w2" [F,D], "ffn.b2" [D] */
    lipt_tensor *beta;                     /* "ffn.beta" [1], LipSwish only */
    /* buffers (LIPT_PARAM_BUFFER): power-iteration vectors */
    lipt_tensor *sn1_u, *sn1_v, *sn2_u, *sn2_v;  /* "ffn.sn1.u" [D], "ffn.sn1.v" [F], "ffn.sn2.u" [F], "ffn.sn2.v" [D]
                                                  * (contractive ffn) */
    lipt_tensor *bv[8];                    /* "attn.bound.{uq,vq,uv,vv,uo,vo}" (contractive-l2 with lip_norm 2 or
                                            * inf2, clipped-dp) and "attn.bound.{uk,vk}" (clipped-dp) */
} lipt_layer;

/* The relative-position bias is stored divided by this gain, so that Adam's per-step change (about lr) moves the
 * logit bias at a useful rate (a bias of 5 in 1000 steps at lr 1e-3). */
#define LIPT_REL_BIAS_GAIN 8.0f

typedef struct lipt_model { /* named: lipt/invert.h declares it ahead */
    lipt_config cfg;
    lipt_params params;            /* every parameter and buffer, in registration (= checkpoint) order */
    lipt_tensor *tok_emb;          /* "tok_emb" [V,D] */
    lipt_tensor *pos_emb;          /* "pos_emb" [seq_len,D] */
    lipt_layer *layers;            /* n_layers */
    lipt_tensor *lnf_g, *lnf_b;    /* "ln_f.gamma", "ln_f.beta" [D] */
    lipt_tensor *head_w1, *head_b1; /* "head.w1" [D,F], "head.b1" [F] (head_hidden = F > 0), else NULL */
    lipt_tensor *head_w, *head_b;  /* "head.w" [D,V] ([F,V] with head_hidden), "head.b" [V] */
    int invertible;                /* lipt_config_invertible(&cfg) */
    lipt_ctx scratch;              /* private context for norm refresh and reports (not for forward passes) */
} lipt_model;

/* Build the model of a validated config: register and allocate the parameters, initialise them from
 * cfg->init_seed (models/README.md lists the scheme per variant) and converge the power-iteration
 * vectors (lipt_model_refresh_norms with 100 rounds). */
lipt_status lipt_model_init(lipt_model *m, const lipt_config *cfg, lipt_error *err);
/* The floats a model of this config holds (trainable, buffers), without allocating them. lipt_model_init refuses a
 * model whose parameters, gradients, Adam moments and buffers need more than LIPT_MAX_MODEL_GB (default 32) GB. */
lipt_status lipt_config_param_floats(const lipt_config *cfg, size_t *n_train, size_t *n_buf, lipt_error *err);
void lipt_model_free(lipt_model *m);
/* Re-draw every parameter and buffer from `seed` (what lipt_model_init does), then refresh the norms. */
void lipt_model_init_weights(lipt_model *m, uint64_t seed);

/* Run `iters` power-iteration rounds on every spectral-norm vector (contractive ffn weights; the 2-norm
 * attention bound). Call after each optimizer step with cfg.power_iters, and with many rounds (e.g. 100)
 * after loading weights or before reporting bounds. No-op for the non-contractive variants. */
void lipt_model_refresh_norms(lipt_model *m, int iters);
/* What the training step runs after the optimizer: lipt_model_refresh_norms on the vector sets the training
 * forward does not set itself. With spectral_bound = cholesky the forward's certificates set the certified
 * matrices' vectors to their top singular pairs at that step's weights (Lanczos's Ritz vectors,
 * lipt_spectral_req.steer), so those get no power rounds here. */
void lipt_model_refresh_after_step(lipt_model *m, int iters);

/* weight_projection (src/nn/project.c): every certified branch whose factor at the current weights is < 1 gets its
 * weights rescaled so that its bound is at its budget: the feed-forward's W1 and W2 by their own factors (the same
 * function); the attention's W^V and W^O by sqrt(factor) each with cfg.weight_projection = 1 (its bound is of degree 1
 * in each: the same function, to rounding), or with 2 W^Q, W^K, W^V and W^O by one scale (factor^(1/4) for tied L2,
 * whose bound is of degree 4 in them; solved from the certified per-head norms for clipped-dp).
 * Returns how many of the weight groups (attention, W1, W2 per layer) were rescaled, and the smallest factor before
 * it into *min_factor (1 when none; may be NULL). No-op (0) for a model that is not invertible. lipt_train_step
 * calls it after the optimizer when cfg.weight_projection is set. */
int lipt_model_project_weights(lipt_model *m, double *min_factor);

/* Ids in [0, vocab_size) and 1 <= T <= seq_len: LIPT_ERR_ARG naming the first bad position otherwise. */
lipt_status lipt_model_check_ids(const lipt_model *m, const int *ids, int B, int T, lipt_error *err);

/* The language model: ids [B*T] (row-major [B,T]) -> logits [B,T,V], and the mean cross-entropy (nats)
 * against targets [B*T] when targets is non-NULL (else *loss = NULL). Records on ctx's tape unless in
 * no-grad mode; dropout is active when ctx->training. loss may be NULL when targets is NULL. */
lipt_status lipt_model_forward(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T, const int *targets,
                               lipt_tensor **logits, lipt_tensor **loss, lipt_error *err);

/* Pieces of the forward pass (ids must be valid: see lipt_model_check_ids; they abort otherwise).
 * embed: token + positional embedding [B,T,D]. block: x + g_attn(x), then + g_ffn (dropout after each
 * branch when training), each sum through lipt_model_residual. hidden: embed then every block (before the final
 * LayerNorm). logits: ln_f + head. */
lipt_tensor *lipt_model_embed(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T);
lipt_tensor *lipt_model_block(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x);
/* The certified normalisers of one block for a forward pass: the attention's factor 1/max(1, UB/c) and the
 * certified spectral norms of the feed-forward's W1, W2, each NULL where the model has none. */
typedef struct {
    lipt_tensor *attn_fac, *ffn_sigma[2];
} lipt_layer_certs;
/* Every block's certificates at the current weights in one batch (lipt_spectral_norm_ub_batch: one certificate per
 * thread across all the layers, rather than a layer's few side by side), recorded on ctx's tape with the values
 * and gradients of the per-block calls: [n_layers], or NULL when the model has none (not invertible). The weights
 * must not change while the result is in use (it belongs to ctx's current step). */
lipt_layer_certs *lipt_model_certify(lipt_ctx *ctx, const lipt_model *m);
/* (In training, ctx->training, with spectral_bound = cholesky, it also sets those matrices' persistent vectors to
 * the certificates' top singular pairs: lipt_model_refresh_after_step.) */
/* lipt_model_block with the block's certificates from lipt_model_certify (NULL: computed in the block). */
lipt_tensor *lipt_model_block_certified(lipt_ctx *ctx, const lipt_model *m, int layer, lipt_tensor *x,
                                        const lipt_layer_certs *certs);
lipt_tensor *lipt_model_hidden(lipt_ctx *ctx, const lipt_model *m, const int *ids, int B, int T);
lipt_tensor *lipt_model_logits(lipt_ctx *ctx, const lipt_model *m, lipt_tensor *h);

/* A residual branch g of block `layer` (which: 0 attention, 1 feed-forward) on x [B,T,D], without dropout:
 * the block computes x + g(x). For the pre-LN variants g includes its LayerNorm: g(x) = MHA(LN1(x)); for
 * post-LN (norm = post) it does not, and the block computes LN1(x + g(x)).
 * For the invertible model g has Lipschitz constant <= c (in the lip_norm norm for attention, 2-norm per
 * token for the feed-forward). */
enum { LIPT_BRANCH_ATTN = 0, LIPT_BRANCH_FFN = 1,
       LIPT_BRANCH_MHA = 2 /* the attention map alone, without the pre-LN LayerNorm (studies of the attention op) */ };
lipt_tensor *lipt_model_branch(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x);
/* What the block does with a branch's output g (which: attention or feed-forward) on its input x: x + g, then
 * the LayerNorm of that branch with norm = post, then ActNorm after the feed-forward when the model has it. */
lipt_tensor *lipt_model_residual(lipt_ctx *ctx, const lipt_model *m, int layer, int which, lipt_tensor *x,
                                 lipt_tensor *g);
/* The input of every residual branch for one sequence ids[T] (the points the Jacobian tools measure the branches at):
 * x holds 2*n_layers*T*d_model floats (caller-owned), branch (layer l, which) at (2*l + which)*T*d_model: the block's
 * input for the attention, the sum after the attention (lipt_model_residual) for the feed-forward. The forward pass
 * in no-grad mode, without dropout; ctx's arena holds only temporaries, released before it returns. LIPT_OK, or
 * LIPT_ERR_ARG for bad ids (lipt_model_check_ids). */
lipt_status lipt_model_branch_inputs(lipt_ctx *ctx, const lipt_model *m, const int *ids, int T, float *x,
                                     lipt_error *err);

/* A lipt_branch_fn adaptor for lipt_fixed_point_invert and the Jacobian tools. */
typedef struct {
    const lipt_model *model;
    int layer, which;
    const lipt_layer_certs *certs; /* the block's certificates (lipt_model_certify), or NULL: computed in the branch */
} lipt_branch_ref;
lipt_tensor *lipt_model_branch_fn(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref);
/* The branch as training adds it to the stream: lipt_model_branch, then dropout (when ctx->training), then the
 * coupling_grid rounding; and the residual half-block x + that (lipt_model_residual), a lipt_segment_fn over a
 * lipt_branch_ref: the one half-block the forward, --memory recompute and --memory invert all run. */
lipt_tensor *lipt_model_branch_train(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref);
lipt_tensor *lipt_model_half_block(lipt_ctx *ctx, lipt_tensor *x, void *branch_ref);

/* Reversible training (--memory invert; src/nn/reversible.c). reversible: 1 for a model whose blocks invert (the
 * invertible model, coupling blocks). reversible_lip: the certified Lipschitz bound of a fixed-point model's branch as
 * training runs it, c / (1 - dropout) (0 for coupling). reversible_check: LIPT_OK, or LIPT_ERR_ARG with the reason
 * (not invertible; dropout that makes a branch no longer a contraction). blocks_reversible: every block of x through
 * lipt_reversible_chain (lipt_model_hidden calls it when ctx->rev is set), cc from lipt_model_certify or NULL. */
int lipt_config_reversible(const lipt_config *cfg);
double lipt_config_reversible_lip(const lipt_config *cfg);
lipt_status lipt_config_reversible_check(const lipt_config *cfg, lipt_error *err);
lipt_tensor *lipt_model_blocks_reversible(lipt_ctx *ctx, const lipt_model *m, lipt_tensor *x,
                                          const lipt_layer_certs *cc);

/* Lipschitz normalisers of one block at the current weights, with the spectral norms certified by Gram iteration
 * with `gram_iters` squarings (0: the model's setting, lipt_config_gram_arg: the values the forward pass divides
 * by, Cholesky-verified for spectral_bound = cholesky). */
typedef struct {
    double attn_bound;    /* UB of the unnormalised attention F (lip_norm norm); 0 for non-contractive */
    double attn_factor;   /* 1 / max(1, UB / c) */
    double sigma1, sigma2;     /* certified upper bounds of ‖W1‖₂, ‖W2‖₂ (contractive ffn) */
    double ffn_factor1, ffn_factor2; /* 1 / max(1, sigma / c) */
} lipt_layer_lipschitz;
void lipt_model_layer_lipschitz(lipt_model *m, int layer, int gram_iters, lipt_layer_lipschitz *out);

/* The attention bound UB of block `layer` (a one-element tensor, differentiable in the weights) for the model's
 * attention kind and lip_norm, at sequence length N, with certified spectral norms (gram_iters squarings, 0: the
 * config's). Only for contractive attention kinds. */
lipt_tensor *lipt_model_attn_bound(lipt_ctx *ctx, const lipt_model *m, int layer, int N, int gram_iters);
/* The factor 1 / max(1, UB/c) a contractive attention's output is multiplied by (one element, differentiable),
 * UB = lipt_model_attn_bound at N = seq_len (tied L2's grows with N, so it covers every shorter sequence;
 * clipped-dp's does not depend on N); *ub (may be NULL) receives UB. The forward pass, the decoder and lipt_model_layer_lipschitz all take it from here. */
lipt_tensor *lipt_model_attn_factor(lipt_ctx *ctx, const lipt_model *m, int layer, int gram_iters, lipt_tensor **ub);

#ifdef __cplusplus
}
#endif

#endif
