/* defines: the attention kinds (lipt_attn_kind) and their one description, lipt_attn_info: every property the
 * config checks, the parameter registration, the forward pass, decoding and the Lipschitz tools branch on.
 * Adding a kind: models/README.md, "Adding an attention variant". */
#ifndef LIPT_VARIANTS_H
#define LIPT_VARIANTS_H

#include "lipt/logit_map.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LIPT_ATTN_DP = 0,          /* "dp": softmax(q kᵀ / s) */
    LIPT_ATTN_L2,              /* "l2": untied L2, W^K != W^Q */
    LIPT_ATTN_L2_TIED,         /* "l2-tied": W^K = W^Q (Lipschitz) */
    LIPT_ATTN_CONTRACTIVE_L2,  /* "contractive-l2": tied L2 divided by max(1, UB/c) (the paper's invertible model) */
    LIPT_ATTN_CLIPPED_DP,      /* "clipped-dp": tokens clipped to a ball of radius R, causal DP attention with a
                                * relative-position logit bias, divided by max(1, UB/c), UB certified in the
                                * token-wise norm max_i ‖x_i‖₂ (lip_norm = inf2; models/README.md) */
    LIPT_ATTN_DP_SOFTCAP,      /* "dp-softcap": softmax(30 tanh((q kᵀ / s) / 30)), the logit map "softcap" (Gemma 2) */
    LIPT_ATTN_KIND_COUNT       /* not a kind: the number of kinds (rows of the table) */
} lipt_attn_kind;

/* Which certified upper bound of the attention map exists (src/lipschitz/bounds.c, lipt_attn_bound). */
typedef enum {
    LIPT_ATTN_BOUND_NONE = 0,  /* not Lipschitz (dp, untied l2: Theorem 3.1): no bound */
    LIPT_ATTN_BOUND_TIED_L2,   /* tied L2: lipt_bound_l2_inf, _2 or _inf2 per lip_norm, at a sequence length N */
    LIPT_ATTN_BOUND_CLIPPED_DP /* lipt_bound_clipped_dp: token-wise norm, any N */
} lipt_attn_bound_kind;

/* Initial scale of W^Q (and W^K) (models/README.md, Initialisation). */
typedef enum {
    LIPT_QK_INIT_SMALL = 0,    /* N(0, 0.02²), as every other weight */
    LIPT_QK_INIT_L2,           /* std D^{-1/2} d^{-1/4}: L2 logits start near −2 instead of −2√d */
    LIPT_QK_INIT_CLIPPED       /* std ½ (D√d)^{-1/2}: the clipped-dp bound's τ starts near 2.3 */
} lipt_qk_init;

/* The yes/no properties of an attention kind, X(field): each is an int member of lipt_attn_info, 0 unless the kind's
 * row sets it. `lipt info --variants` and `lipt export` (metadata attention_info) write every one of them
 * (src/shell/variants_json.c), so the PyTorch module (python/lipt_variants.py) refuses a kind that sets one it does
 * not implement instead of computing another model. */
#define LIPT_ATTN_FLAGS(X)                                                                                             \
    X(has_wk)          /* a key projection of its own ("attn.wk"); else the keys are the queries */                    \
    X(tied)            /* W^K = W^Q: lipt_attention_l2_tied, values Q_h M_h, M_h = W^{Q,h}ᵀ W^{V,h} / √d */           \
    X(l2_logits)       /* logits −‖q_i − k_j‖² / √d; else q_i·k_j / √d */                                              \
    X(clip_rows)       /* input rows projected on the ball of radius R (lipt_config_clip_radius) first */              \
    X(rel_bias)        /* has the relative-position logit bias "attn.rel_bias" when the config's rel_bias = 1 */       \
    X(contractive)     /* divided by max(1, UB/c): an invertible model's attention (needs ffn = contractive) */        \
    X(token_norm_only) /* its bound exists in the token-wise norm only: needs lip_norm = inf2 */

/* A member added outside LIPT_ATTN_FLAGS needs its line in src/shell/variants_json.c too. */
typedef struct {
    const char *name;          /* the config value ("dp", ...) */
#define LIPT_ATTN_FLAG_MEMBER(f) int f;
    LIPT_ATTN_FLAGS(LIPT_ATTN_FLAG_MEMBER)
#undef LIPT_ATTN_FLAG_MEMBER
    /* the map of the DP logits before the softmax (include/lipt/logit_map.h) and its parameter, or NULL: none; only
     * with DP logits and no relative bias (lipt_attn_info_of checks) */
    const lipt_logit_map *logit_map;
    float logit_map_param;
    lipt_attn_bound_kind bound;
    lipt_qk_init qk_init;
    const char *lipschitz_note; /* its Lipschitz status in one line, as `lipt lipschitz` reports it */
    const char *model;         /* its name among lipt's models when not `name`: models/ptb-<model>.cfg is its PTB model,
                                * the variant lipt experiment depth and stability train (NULL: `name`) */
} lipt_attn_info;

/* The row of kind k (aborts on a value outside the enum). */
const lipt_attn_info *lipt_attn_info_of(lipt_attn_kind k);
/* Value names, as `lipt info --variants` and `lipt export` write them: "none", "tied-l2", "clipped-dp"; "small", "l2",
 * "clipped" ("?" outside the enum). */
const char *lipt_attn_bound_name(lipt_attn_bound_kind b);
const char *lipt_qk_init_name(lipt_qk_init q);

#ifdef __cplusplus
}
#endif
#endif
