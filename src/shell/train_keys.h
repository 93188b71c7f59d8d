/* defines: lipt train's option table and its options read from text: the training keys of a run config (--config FILE, a run's run.cfg)
 * and the training options stored in a checkpoint (what --resume restores). Fuzzed by tests/fuzz/. */
#ifndef LIPT_TRAIN_KEYS_H
#define LIPT_TRAIN_KEYS_H

#include "cli.h"

/* lipt train's option table (src/shell/train_option_table.c); options stored in the checkpoint are restored on
 * --resume unless given again. */
const cli_opt *train_options(int *n);
/* nanoGPT's option names lipt train accepts or explains (for cli_parse_aliased). */
const cli_alias *train_nanogpt_names(void);
/* The training keys a checkpoint and run.cfg store ("data", "steps", ...), *n of them. */
const char *const *train_persisted_keys(int *n);
/* The i-th stored training key, NULL past the last. */
const char *train_persisted_key(int i);
/* Index of a stored training key named `key` ('_' and '-' alike), or -1. */
int train_persisted_index(const char *key);

/* Index in keys[] of `key` ('_' in key matches '-' in keys[i]), or -1. */
int train_key_index(const char *const *keys, int n_keys, const char *key);

/* Takes the training keys out of a run config's text (NUL-terminated, changed in place): a `key = value` line whose
 * key is in keys[] fills the option of that name in ap unless it was given already (origin CLI_SET_BY_CONFIG), and is
 * blanked, so that what remains is the model config with the same line numbers. Lines end at \n, \r\n or a lone \r;
 * '#' starts a comment; blanks around keys and values are dropped; a key of 64 characters or more or a value of 1024
 * or more is left to the model config. LIPT_OK, or LIPT_ERR_ARG for a key set twice ("PATH:LINE: KEY set twice (first
 * at line N)"). */
lipt_status train_keys_from_config(cli_args *ap, char *text, const char *path, const char *const *keys, int n_keys,
                                   lipt_error *err);

/* Fills the options of ap not set yet (origin CLI_SET_BY_CKPT) from a checkpoint's stored training options,
 * "key=value\n" lines; the first line without '=' before its newline, or without a newline, ends them. */
void train_keys_from_ckpt(cli_args *ap, const char *opts_text);

#endif
