/* defines: helpers shared by the subcommands: model + vocabulary from a checkpoint, run-directory files. */
#ifndef LIPT_RUN_H
#define LIPT_RUN_H

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

/* Open a checkpoint and build its model (config, weights and power-iteration vectors as saved) and vocabulary.
 * The checkpoint is closed before returning. */
lipt_status run_load_model(const char *path, lipt_model *m, lipt_vocab *vocab, int64_t *step, lipt_error *err);

/* mkdir -p of a directory (a run directory, an output folder); error naming what could not be created. */
lipt_status run_mkdir(const char *dir, lipt_error *err);

#endif
