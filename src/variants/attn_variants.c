/* The one description of the attention kinds: a row per lipt_attn_kind (fields in include/lipt/variants.h), the names
 * of the bound and initialisation kinds, and the radius of the kinds that clip their input rows. */
#include "lipt/config.h"

#include <math.h>

static const lipt_attn_info attn_table[] = {
    [LIPT_ATTN_DP] = {
        .name = "dp", .has_wk = 1, .bound = LIPT_ATTN_BOUND_NONE, .qk_init = LIPT_QK_INIT_SMALL,
        .lipschitz_note = "dot-product attention: not Lipschitz (Theorem 3.1), no bound",
    },
    [LIPT_ATTN_L2] = {
        .name = "l2", .has_wk = 1, .l2_logits = 1, .bound = LIPT_ATTN_BOUND_NONE, .qk_init = LIPT_QK_INIT_L2,
        .lipschitz_note = "untied L2 attention: not Lipschitz, no bound",
    },
    [LIPT_ATTN_L2_TIED] = {
        .name = "l2-tied", .tied = 1, .l2_logits = 1, .bound = LIPT_ATTN_BOUND_TIED_L2, .qk_init = LIPT_QK_INIT_L2,
        .lipschitz_note = "tied L2 attention; the branch includes LayerNorm, which has no useful bound: ub columns are "
                          "the inf- and 2-norm bounds of the attention alone at N = --tokens",
    },
    [LIPT_ATTN_CONTRACTIVE_L2] = {
        .name = "contractive-l2", .tied = 1, .l2_logits = 1, .contractive = 1, .bound = LIPT_ATTN_BOUND_TIED_L2,
        .qk_init = LIPT_QK_INIT_L2,
        .lipschitz_note = "contractive tied L2 attention / max(1, UB/c), UB at N = seq_len (grows with N)",
    },
    [LIPT_ATTN_CLIPPED_DP] = {
        .name = "clipped-dp", .has_wk = 1, .clip_rows = 1, .rel_bias = 1, .contractive = 1, .token_norm_only = 1,
        .bound = LIPT_ATTN_BOUND_CLIPPED_DP, .qk_init = LIPT_QK_INIT_CLIPPED,
        .lipschitz_note = "clipped-dp attention / max(1, UB/c), UB in the token-wise norm (independent of N)",
        .model = "contractive", /* lipt's invertible model: models/ptb-contractive.cfg */
    },
    [LIPT_ATTN_DP_SOFTCAP] = {
        .name = "dp-softcap", .has_wk = 1, .logit_map = &lipt_logit_map_softcap, .logit_map_param = 30.0f,
        .bound = LIPT_ATTN_BOUND_NONE, .qk_init = LIPT_QK_INIT_SMALL,
        .lipschitz_note = "dot-product attention with soft-capped logits: not Lipschitz, no bound",
    },
};
/* a kind added to the enum without its row fails to compile */
_Static_assert(sizeof attn_table / sizeof attn_table[0] == LIPT_ATTN_KIND_COUNT, "one attn_table row per lipt_attn_kind");

const lipt_attn_info *lipt_attn_info_of(lipt_attn_kind k) {
    LIPT_CHECK((unsigned)k < LIPT_ATTN_KIND_COUNT, "attention kind %d outside [0, %d)", (int)k, LIPT_ATTN_KIND_COUNT);
    /* a designated row skipped in the middle of the table is all zeros */
    LIPT_CHECK(attn_table[k].name, "attention kind %d has no row in attn_table", (int)k);
    /* the kernels apply a logit map to DP logits without a bias only (src/ops/attention_dp.c) */
    LIPT_CHECK(!attn_table[k].logit_map || (!attn_table[k].l2_logits && !attn_table[k].rel_bias),
               "attention kind %s: logit map %s with L2 logits or a relative bias", attn_table[k].name,
               attn_table[k].logit_map->name);
    return &attn_table[k];
}

const char *lipt_attn_name(lipt_attn_kind k) {
    return (unsigned)k < LIPT_ATTN_KIND_COUNT && attn_table[k].name ? attn_table[k].name : "?";
}

/* The ball the clip_rows kinds project their input rows on; with the table because the forward pass, the decoder and
 * the bounds all read it. */
float lipt_config_clip_radius(const lipt_config *cfg) {
    return cfg->clip_radius > 0 ? cfg->clip_radius : (float)sqrt((double)cfg->d_model);
}

/* switches without a default: a value added to either enum without its name is a -Wswitch warning */
const char *lipt_attn_bound_name(lipt_attn_bound_kind b) {
    switch (b) {
    case LIPT_ATTN_BOUND_NONE: return "none";
    case LIPT_ATTN_BOUND_TIED_L2: return "tied-l2";
    case LIPT_ATTN_BOUND_CLIPPED_DP: return "clipped-dp";
    }
    return "?";
}

const char *lipt_qk_init_name(lipt_qk_init q) {
    switch (q) {
    case LIPT_QK_INIT_SMALL: return "small";
    case LIPT_QK_INIT_L2: return "l2";
    case LIPT_QK_INIT_CLIPPED: return "clipped";
    }
    return "?";
}
