/* The variant table as JSON, generated from the table itself (src/variants/attn_variants.c) and the config's name
 * functions, so that the PyTorch module and `lipt export` files never carry a hand-written copy of it. */
#include "variants_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void attn_fields(json_w *j, const lipt_attn_info *ai) {
    json_str(j, "name", ai->name);
#define WRITE_FLAG(f) json_bool(j, #f, ai->f);
    LIPT_ATTN_FLAGS(WRITE_FLAG)
#undef WRITE_FLAG
    if (ai->logit_map) json_str(j, "logit_map", ai->logit_map->name);
    else json_null(j, "logit_map");
    json_num_f32(j, "logit_map_param", ai->logit_map_param);
    json_str(j, "bound", lipt_attn_bound_name(ai->bound));
    json_str(j, "qk_init", lipt_qk_init_name(ai->qk_init));
    json_str(j, "lipschitz_note", ai->lipschitz_note);
    json_str(j, "model", ai->model ? ai->model : ai->name);
}

void variants_json_attn(json_w *j, const char *k, const lipt_attn_info *ai) {
    json_obj_open(j, k);
    attn_fields(j, ai);
    json_obj_close(j);
}

/* The names name(0), name(1), ... up to the first "?" (the name functions' answer outside their enum). */
#define NAME_LIST(j, key, fn, type)                                                                  \
    do {                                                                                             \
        json_arr_open(j, key);                                                                       \
        for (int k_ = 0; strcmp(fn((type)k_), "?") != 0; k_++) json_str(j, NULL, fn((type)k_));    \
        json_arr_close(j);                                                                           \
    } while (0)

void variants_json_table(json_w *j) {
    json_obj_open(j, "attention");
    for (int k = 0; k < LIPT_ATTN_KIND_COUNT; k++) {
        const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)k);
        variants_json_attn(j, ai->name, ai);
    }
    json_obj_close(j);
    NAME_LIST(j, "ffn", lipt_ffn_name, lipt_ffn_kind);
    NAME_LIST(j, "activation", lipt_act_name, lipt_act_kind);
    NAME_LIST(j, "lip_norm", lipt_lipnorm_name, lipt_lipnorm_kind);
    NAME_LIST(j, "norm", lipt_norm_name, lipt_norm_kind);
    NAME_LIST(j, "precision", lipt_precision_name, lipt_precision);
    NAME_LIST(j, "spectral_bound", lipt_spectral_bound_name, lipt_spectral_bound_kind);
}

int variants_json_attn_text(const lipt_attn_info *ai, char *buf, size_t n) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return -1;
    json_w j;
    json_begin(&j, f);
    attn_fields(&j, ai);
    json_end(&j);
    const int ok = fclose(f) == 0 && text && len > 0 && len - 1 < n; /* len - 1: without json_end's newline */
    if (ok) {
        memcpy(buf, text, len - 1);
        buf[len - 1] = 0;
    }
    free(text);
    return ok ? 0 : -1;
}
