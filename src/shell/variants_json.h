/* The model kinds lipt knows, as JSON: the attention table (include/lipt/variants.h) with every property of each kind,
 * and the names of the other config kinds. `lipt info --variants --json` writes the whole; `lipt export` puts the
 * model's attention row in its metadata (attention_info). python/lipt_variants.py reads both. */
#ifndef LIPT_SHELL_VARIANTS_JSON_H
#define LIPT_SHELL_VARIANTS_JSON_H

#include <stddef.h>

#include "cli.h"
#include "lipt/config.h"

/* One attention kind's row as the object k (NULL inside arrays): name, every LIPT_ATTN_FLAGS property as a boolean,
 * bound, qk_init, lipschitz_note, model (its PTB model's name, `name` when the row has none). */
void variants_json_attn(json_w *j, const char *k, const lipt_attn_info *ai);

/* The object of `lipt info --variants --json` (inside j's top object): "attention" (name -> row, table order), then
 * "ffn", "activation", "lip_norm", "norm", "precision", "spectral_bound" (the accepted names in enum order). */
void variants_json_table(json_w *j);

/* ai's row as one JSON object in buf (no newline). Returns 0, or -1 when it does not fit in n bytes. */
int variants_json_attn_text(const lipt_attn_info *ai, char *buf, size_t n);

#endif
