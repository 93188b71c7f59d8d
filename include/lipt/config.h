/* defines: lipt_config, the model hyper-parameters, and its `key = value` text format (files, flags, checkpoints). */
#ifndef LIPT_CONFIG_H
#define LIPT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "lipt/core.h"
#include "lipt/variants.h" /* lipt_attn_kind and its table */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LIPT_FFN_STANDARD = 0,     /* "standard": W2 act(W1 x + b1) + b2 after a LayerNorm */
    LIPT_FFN_CONTRACTIVE       /* "contractive": W1, W2 spectrally normalised to c, no LayerNorm (invertible model) */
} lipt_ffn_kind;

typedef enum {
    LIPT_NORM_PRE = 0,         /* "pre":  x <- x + f(LN(x)) (the default; trains without warmup) */
    LIPT_NORM_POST             /* "post": x <- LN(x + f(x)) (the original Transformer's blocks; dp, l2, l2-tied) */
} lipt_norm_kind;

typedef enum { LIPT_ACT_GELU = 0, LIPT_ACT_RELU, LIPT_ACT_ELU, LIPT_ACT_LIPSWISH, LIPT_ACT_MAXMIN } lipt_act_kind;

typedef enum {
    LIPT_LIPNORM_INF = 0,      /* "inf": lipt_bound_l2_inf normalises the contractive attention */
    LIPT_LIPNORM_2,            /* "2":   lipt_bound_l2_2 (certified spectral norms, Gram iteration) */
    LIPT_LIPNORM_INF2          /* "inf2": the token-wise mixed norm ‖X‖_{∞,2} = max_i ‖x_i‖₂ (lipt_bound_l2_inf2 for
                                * contractive-l2; the only norm of clipped-dp) */
} lipt_lipnorm_kind;

typedef enum {
    LIPT_SPECTRAL_BOUND_GRAM = 0, /* "gram": Gram iteration with gram_iters squarings (the default) */
    LIPT_SPECTRAL_BOUND_CHOLESKY  /* "cholesky": a Lanczos estimate proven by a Cholesky factorisation, Gram
                                   * iteration only when that finds no proof (lipt_spectral_ub) */
} lipt_spectral_bound_kind;

typedef struct {
    int vocab_size;            /* tokens (50 for PTB char, 256 byte-level) */
    int d_model;               /* width D */
    int n_heads;               /* H, divides d_model */
    int d_ff;                  /* feed-forward hidden width */
    int n_layers;              /* blocks (0 allowed: embedding + head only) */
    int seq_len;               /* longest sequence; the contractive attention bound uses N = seq_len */
    lipt_attn_kind attention;
    lipt_ffn_kind ffn;
    lipt_act_kind activation;
    float dropout;             /* in [0, 1), after each residual branch, training only */
    float c;                   /* contraction coefficient in (0, 1), default 0.9 */
    lipt_lipnorm_kind lip_norm;
    int power_iters;           /* power-iteration rounds per optimizer step (lipt_model_refresh_after_step) */
    uint64_t init_seed;        /* parameter initialisation */
    float ln_eps;              /* LayerNorm epsilon, in (0, 1) */
    /* invertible-model options (models/README.md) */
    float clip_radius;         /* clipped-dp: radius R of the token ball; 0 means sqrt(d_model) */
    int rel_bias;              /* clipped-dp: 1 learns a relative-position logit bias per head (default 1) */
    int actnorm;               /* invertible model: 1 puts ActNorm (per-channel exp(s) x + b) after every block */
    int gram_iters;            /* Gram-iteration squarings of the certified spectral norms in the forward pass */
    lipt_spectral_bound_kind spectral_bound; /* how the forward pass certifies its spectral norms: gram (default)
                                * or cholesky (faster, within ~1e-6 of sigma; gram_iters is then the fallback) */
    int coupling;              /* 1: additive coupling blocks: attention writes the first half of the channels from
                                * the second, the ffn the second from the first; exact inverse (y - g(y)). With the
                                * pre-LN variants (dp, l2, l2-tied) a control without Lipschitz constraint; with the
                                * invertible model's certified branches (Lip g <= L) each half-block and its inverse
                                * are (1 + L)-Lipschitz (bi-Lipschitz), whatever L */
    int coupling_grid;         /* coupling blocks: k > 0 rounds the embeddings and every branch output to multiples of
                                * 2^-k, so that each residual sum is exact (|x| < 2^(24-k)) and a block inverts bit
                                * for bit (reversible training, --memory invert); 0: off (float sums, inverted to
                                * within a rounding) */
    int weight_projection;     /* invertible model: > 0 rescales, after every optimizer step, the weights of each
                                * certified branch whose certificate factor is < 1 so that its bound is at its budget
                                * (lipt_model_project_weights): the feed-forward's W1 and W2 by their own factors, and
                                * 1: the attention's W^V and W^O by sqrt(factor) each (the same function);
                                * 2: W^Q, W^K, W^V, W^O by one scale (the attention softens). 0: off (the default) */
    int head_hidden;           /* 0: the head is ln_f + linear; F > 0: ln_f, then a per-token MLP (D -> F, GELU, -> V)
                                * (outside the invertible stack, so it needs no certificate) */
    int ffn_full_budget;       /* contractive ffn: 1 divides W1 by max(1, σ1) and W2 by max(1, σ2/c) (bound c);
                                * 0 divides both by max(1, σ/c) (bound c²) */
    lipt_norm_kind norm;       /* where the LayerNorms of a block sit (pre-LN or post-LN); not for the invertible
                                * model or coupling blocks, whose branches must be residual maps x + g(x) */
    lipt_precision precision;  /* the arithmetic of the model's matrix products (float32, bf16, bf16-emulated): how
                                * the model runs, not what it is (no parameter depends on it), so train --resume, eval
                                * and sample may change it; the drivers put it in their contexts */
} lipt_config;

/* Defaults: a small DP model (vocab 256, d_model 128, 4 heads, d_ff 512, 2 layers, seq_len 128, gelu,
 * dropout 0, c 0.9, lip_norm inf, power_iters 1, init_seed 1234, ln_eps 1e-5). */
void lipt_config_default(lipt_config *cfg);

/* Read a `key = value` file over the defaults: `#` starts a comment, blank lines are skipped, keys may use
 * '-' for '_', each key at most once. Errors (LIPT_ERR_IO, LIPT_ERR_ARG) name the file, the line, the key
 * and the accepted keys or values. The result is validated (lipt_config_validate). */
lipt_status lipt_config_load(lipt_config *cfg, const char *path, lipt_error *err);
/* The same from text in memory; `source` names it in messages (e.g. a checkpoint path). cfg starts from
 * the defaults. */
lipt_status lipt_config_parse(lipt_config *cfg, const char *text, const char *source, lipt_error *err);

/* Set one key from a string (command-line overrides `--key value`). Checks the value alone; call
 * lipt_config_validate after the last override for the checks that involve several keys. */
lipt_status lipt_config_set(lipt_config *cfg, const char *key, const char *value, lipt_error *err);
/* The name of config key k (file order, "vocab_size" first), NULL for k outside [0, count): the keys a command line or
 * a run config accepts besides its own options. */
const char *lipt_config_key_name(int k);

/* Checks between keys: n_heads divides d_model; a contractive attention (clipped-dp, contractive-l2) and
 * ffn = contractive go together (the invertible model); ffn = contractive needs a 1-Lipschitz activation (not
 * gelu); the rest as listed in models/README.md. */
lipt_status lipt_config_validate(const lipt_config *cfg, lipt_error *err);

/* Every key in the file format, one per line, floats to round-trip exactly. Returns the length the text
 * needs (excluding the NUL), like snprintf: the text is complete when that is < len. */
size_t lipt_config_to_text(const lipt_config *cfg, char *buf, size_t len);

/* Value names, for messages and JSON. */
const char *lipt_attn_name(lipt_attn_kind k);
const char *lipt_ffn_name(lipt_ffn_kind k);
const char *lipt_act_name(lipt_act_kind k);
const char *lipt_lipnorm_name(lipt_lipnorm_kind k);
const char *lipt_norm_name(lipt_norm_kind k);
const char *lipt_spectral_bound_name(lipt_spectral_bound_kind k);

/* The gram_iters argument of the certified spectral norms (lipt_spectral_ub) that the forward pass divides by:
 * cfg->gram_iters, with LIPT_SPECTRAL_CHOLESKY (lipt/ops.h) or'd in for spectral_bound = cholesky. */
int lipt_config_gram_arg(const lipt_config *cfg);

/* A contractive attention kind (divided by a certified bound: an invertible model's attention); 0 for a value
 * outside the enum. */
static inline int lipt_attn_contractive(lipt_attn_kind k) {
    return (unsigned)k < LIPT_ATTN_KIND_COUNT && lipt_attn_info_of(k)->contractive;
}
/* The invertible model: a contractive attention with the contractive feed-forward. */
static inline int lipt_config_invertible(const lipt_config *cfg) {
    return lipt_attn_contractive(cfg->attention) && cfg->ffn == LIPT_FFN_CONTRACTIVE;
}
/* The clip radius R in use (clip_radius, or sqrt(d_model) when 0). */
float lipt_config_clip_radius(const lipt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
