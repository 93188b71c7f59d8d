/* defines: helpers shared by the subcommands: model + vocabulary from a checkpoint, run-directory files. */
#ifndef LIPT_RUN_H
#define LIPT_RUN_H

#include <stdio.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "lipt/data.h"
#include "lipt/model.h"

/* Extra blob of a training checkpoint: batcher state, best validation bpc and its step, training options. */
typedef struct {
    lipt_batcher_state batcher;
    double best_bpc;
    int64_t best_step;
    const char *opts_text;   /* "key=value\n" lines of the training options */
} run_extra;

/* Serialises into a malloc'd buffer (*len bytes). */
unsigned char *run_extra_pack(const run_extra *x, size_t *len);
/* Parses; opts_text points into the blob (valid while the checkpoint is open). */
lipt_status run_extra_unpack(run_extra *x, const unsigned char *blob, size_t len, lipt_error *err);

/* The model config and (when vocab is not NULL) the vocabulary of an open checkpoint, path naming it in messages;
 * the vocabulary's size must be the config's vocab_size ("PATH: its vocabulary has N symbols but its model M: not a
 * consistent checkpoint"). What every command reading a checkpoint's model starts with. */
lipt_status run_ckpt_config(const lipt_ckpt *ck, const char *path, lipt_config *cfg, lipt_vocab *vocab,
                            lipt_error *err);

/* Open a checkpoint and build its model (config, weights and power-iteration vectors as saved) and vocabulary.
 * The checkpoint is closed before returning. */
lipt_status run_load_model(const char *path, lipt_model *m, lipt_vocab *vocab, int64_t *step, lipt_error *err);

/* The value of `key` in "key=value\n" option text (a checkpoint's training options); 0, or -1 when absent or longer
 * than n - 1. run_ckpt_opt reads it from a checkpoint file. */
int run_opt_get(const char *opts_text, const char *key, char *out, size_t n);
int run_ckpt_opt(const char *ckpt, const char *key, char *out, size_t n);
/* A checkpoint's training options as a malloc'd string (free it), or NULL when it cannot be read or has none. Opening
 * a checkpoint reads and decompresses all of it: a command that needs several options reads them from this once. */
char *run_ckpt_opts(const char *ckpt);

/* "data-abs=PATH\ndata-bytes=N\ndata-crc32=XXXXXXXX\n" of a loaded corpus: its absolute location (the folder for
 * PTB), the size of its files and their CRC-32, stored with a training run. 0, or -1 when a file cannot be read. */
int run_corpus_identity(const lipt_dataset *ds, char *text, size_t n);

/* The corpus of a command given --ckpt: `data` when the user named one, else the checkpoint's own (by its absolute
 * path when stored; said on stderr unless quiet); the split: `split` when given, else the run's own when the corpus
 * is the run's. Encoded with `vocab`. Warns when the run's corpus has changed since training (CRC-32). */
lipt_status run_load_corpus(const char *ckpt, const char *data, const char *split, const lipt_vocab *vocab, int quiet,
                            lipt_dataset *ds, lipt_error *err);
/* The same with the checkpoint's options already read (run_ckpt_opts; NULL: none stored). */
lipt_status run_load_corpus_opts(const char *ckpt, const char *opts, const char *data, const char *split,
                                 const lipt_vocab *vocab, int quiet, lipt_dataset *ds, lipt_error *err);

/* A corpus error about a path the user did not type as --data (it came from a checkpoint or a --config file): the
 * message's "--data " is dropped and origin (" (the corpus stored in CKPT ...)") appended. Nothing when origin is
 * empty. */
void run_blame_corpus(lipt_error *err, const char *origin);

/* Replaces path's contents with text through lipt's atomic writer (lipt_output: path.tmp, fsync, rename); refuses a
 * path that is not a regular file or a symlink (a device, FIFO or folder). LIPT_OK, or the reason in err. */
lipt_status run_replace_file(const char *path, const char *text, lipt_error *err);

/* One trainer per run folder: DIR/.lock created (a regular file, never through a symlink, never a FIFO) and locked
 * (flock); *fd keeps the lock until closed (-1 or an open fd on failure: close it). LIPT_OK, or why not (in use). */
lipt_status run_lock(const char *dir, int *fd, lipt_error *err);
/* What makes a folder a run: a checkpoint. The name of the one DIR holds ("last.ckpt", else "best.ckpt"), or NULL:
 * a folder whose training ended before its first checkpoint (or never started) holds no run and may be reused. */
const char *run_folder_checkpoint(const char *dir);

/* A checkpoint or a run folder -> the checkpoint to read, into out[n]: the path itself when it is not a folder (a
 * missing path is left to the reader, whose message names it), else the folder's best.ckpt, else its last.ckpt.
 * LIPT_OK, or LIPT_ERR_ARG when the folder holds neither (err: "PATH holds no best.ckpt or last.ckpt ...")
 * or the path is too long. */
lipt_status run_resolve_ckpt(const char *given, char *out, size_t n, lipt_error *err);
/* The --ckpt option of a checkpoint-reading command (cmd in messages), resolved by run_resolve_ckpt in place (a's own
 * copy), so that every later cli_str(a, "ckpt") names the file. 0, or the exit status 2 after the message. */
int run_ckpt_option(cli_args *a, const char *cmd);

/* A path lipt train owns, which another command must never write (lipt export's --out): a lipt checkpoint (by its
 * magic), any *.ckpt name, and in a run folder (one with a checkpoint, run.cfg or metrics.jsonl) its records:
 * metrics*.jsonl, run*.cfg, .lock, *.tmp. 1 with why ("a lipt checkpoint", ...) in why[n], else 0. */
int run_owned_path(const char *path, char *why, size_t n);

/* mkdir -p of a directory (a run directory, an output folder); error naming what could not be created. */
lipt_status run_mkdir(const char *dir, lipt_error *err);

#endif
