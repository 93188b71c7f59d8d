/* defines: the parts of `lipt train` before its loop (options, resume, setup, the run folder's records), shared by
 * cmd_train.c and the files that implement them. Each int function returns 0 or the exit status (message printed). */
#ifndef LIPT_TRAIN_SETUP_H
#define LIPT_TRAIN_SETUP_H

#include "cli.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_keys.h"
#include "train_run.h"

/* train_options.c (the option table and the stored training keys: train_keys.h, src/shell/train_option_table.c) */
/* The training options read, range-checked and stored in t->opts_text; on resume the global batch is kept unless
 * --batch was typed (batch_given). */
int train_parse_settings(cli_args *ap, trainer *t, int resume, const run_extra *rx, const char *resume_path,
                         int batch_given, train_settings *s);

/* train_resume.c: the model config, fresh (defaults, --config, --key value) or from the checkpoint (resume = 1: ck
 * open, rx its training state; 3: it could not be opened) whose stored options fill in what was not given again */
int train_merge_config(cli_args *ap, trainer *t, int *resume, const char *resume_path, lipt_ckpt *ck, run_extra *rx);
/* The resumed run's corpus against the checkpoint's (CRC-32): refused unless force, which records the earlier one. */
int train_check_resumed_corpus(trainer *t, const run_extra *rx, const char *resume_path, const char *data_spec,
                               int force, long long step);

/* The checkpoint's training state into t (ck closed: *resume = 2); rank_mix seeds the dropout stream of ranks > 0. */
int train_restore(trainer *t, const train_settings *s, lipt_ckpt *ck, const run_extra *rx, const char *resume_path,
                  uint64_t rank_mix, int *resume);
/* The options this --resume gives again with another value than the checkpoint's (typed now; the corpus by its
 * absolute location; the precision), into t->changes. */
int train_resume_changes(const cli_args *ap, trainer *t);

/* train_setup.c */
int train_apply_precision(cli_args *ap, trainer *t, int resume, const char *resume_path, int quiet);
/* The corpus, the model, the optimizer, the context and the batcher (fresh, or restored from ck, then closed:
 * *resume = 2). */
int train_setup_model(trainer *t, train_settings *s, const char *data_spec, int *resume, lipt_ckpt *ck,
                      const run_extra *rx, const char *resume_path, int force, const char *data_origin);
/* The run folder (rank 0): created, locked; a fresh run refused where a run is (a checkpoint) unless force; run.cfg
 * written or, on resume, the resume recorded in it; metrics.jsonl opened (cut back to the resumed step, marked). */
int train_setup_files(trainer *t, int force, int quiet);
/* The batch buffers and the validation and test splits; the run described. */
int train_setup_batches(trainer *t, train_settings *s);
int train_setup_threads(cli_args *ap, const lipt_dist *dist);
/* --out, or its default (with --resume the folder of --ckpt, else a new runs/YYYYMMDD-HHMMSS) into *out. */
int train_default_out(cli_args *ap, char *buf, size_t n, const char **out);

/* train_history.c: a run folder is append-only history. The run's id into t->opts_text (run-id=...): kept from the
 * resumed checkpoint's options stored_opts (with its origin, init-from...), else derived from the model config and
 * the options (the same settings and corpus: the same computation, bit for bit). */
int train_set_run_id(trainer *t, const char *stored_opts, const char *stored_cfg_text);
/* Before writing into t->out (rank 0): a fresh run where another run is, a resume into a folder of another run or
 * from a checkpoint older than the folder's newest, refused unless force (naming both runs and steps); with force the
 * files that would be replaced are kept aside (renamed; metrics lines past the resume point to a side file), said in
 * t->kept_aside. */
int train_check_history(trainer *t, int force, int quiet);

/* train_init.c: --init-from CKPT|DIR (fine-tuning): the checkpoint opened (t->init_ck), its model config and
 * vocabulary into t (a --config or --KEY model must be the same, but for dropout and precision) */
int train_init_config(cli_args *ap, trainer *t);
/* Its weights into the model (after lipt_model_init); the checkpoint closed. */
int train_init_weights(trainer *t, int quiet);
/* init-from, init-from-run, init-from-step into t->opts_text (before the run id). */
int train_init_opts(trainer *t);
/* A corpus symbol outside the checkpoint's vocabulary: the message says the ways out. */
void train_init_vocab_note(const trainer *t, lipt_error *err);
/* The metrics line of a fine-tune's start ({"step":0,"event":"init","from":...}). */
void train_log_init(trainer *t);

/* train_memory.c: the memory the run needs (the model, a step's arena measured on small batches and extrapolated to
 * --batch, the batch) against what this process may use (RLIMIT_AS, RLIMIT_DATA, MemAvailable): refused with the
 * estimate and what to lower (exit 1) when it does not fit; else *arena_bytes is the step's arena to reserve. */
int train_check_memory(trainer *t, const train_settings *s, size_t *arena_bytes);

/* train_record.c: metrics.jsonl cut back to the lines up to `step`; run.cfg written */
lipt_status train_truncate_metrics(const char *path, int64_t step, lipt_error *err);
double train_metrics_elapsed(const char *path, int64_t step);
void train_write_run_cfg(const trainer *t);
/* --resume: run.cfg keeps the settings the run started with (written from the checkpoint's when missing) and gains a
 * block for a resume that changed options; its first line then says that no one command repeats the run. */
void train_record_resume_cfg(const trainer *t);
/* --resume: the metrics line that marks it ({"step":N,"event":"resume","elapsed_s":S,"changed":{...}}). */
void train_log_resume(trainer *t);

#endif
