/* defines: the state of one `lipt train` run, shared by its setup (cmd_train.c) and its loop (train_loop.c). */
#ifndef LIPT_TRAIN_RUN_H
#define LIPT_TRAIN_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "lipt/data.h"
#include "lipt/dist.h"
#include "lipt/model.h"
#include "lipt/optim.h"

/* The key of the patience count (evaluations since the best) in a checkpoint's stored options. */
#define TRAIN_EVALS_SINCE_BEST "evals-since-best"
/* The key of the training wall time up to a checkpoint's step, in seconds, summed over resumes (its stored options):
 * a resumed run's elapsed_s continues from it. */

/* An option a --resume changed: its stored value in the checkpoint and the value given now. */
typedef struct {
    char key[24];
    char was[1100], now[1100];
} train_change;

/* The training options, validated. */
typedef struct {
    long steps, batch, warmup, seed, eval_every, eval_symbols, save_every, log_every, check_every;
    long sample_every, sample_length; /* --sample-every: a generated text every N steps (0: none), this long */
    double lr, min_lr, beta1, beta2, aeps, wd, clip;
    double save_minutes;   /* last.ckpt also when this many minutes passed since the last one (0: never by time) */
    int final_valid, final_test;
    int final_from_best;   /* --final-from best: the final evaluations use best.ckpt's weights */
    long patience;         /* --patience: stop after this many periodic evaluations without a new best (0: never) */
    int quiet;             /* no progress output (also every rank but 0) */
    int recompute;         /* activation recomputation (--memory recompute): memory for compute, the same bits */
    int memory;            /* --memory: CLI_MEMORY_STORE, _RECOMPUTE or _INVERT */
    lipt_reversible rev;   /* --memory invert: its knobs (the trainer's copy gathers the statistics) */
    lipt_lr_schedule sched;
    lipt_adamw_config acfg;
    int muon;              /* --optimizer muon: Muon on the hidden matrices, AdamW on the rest */
    double muon_lr;        /* Muon's peak learning rate (--muon-lr, default --lr), on sched's shape */
    lipt_data_opts dopts;
} train_settings;

typedef struct {
    lipt_dist *dist;
    int lead;              /* rank 0: the one rank that writes files and progress */
    int K;                 /* ranks */
    const char *out;
    char last_path[1200], best_path[1200], metrics_path[1200];
    lipt_config cfg;
    lipt_model model;
    lipt_vocab vocab;
    lipt_adamw opt;
    lipt_muon muon;        /* with settings.muon (muon_ok once allocated) */
    int muon_ok;
    lipt_ctx ctx;
    lipt_batcher batcher;
    lipt_dataset ds;
    int ds_ok, model_ok, ctx_ok, lock_fd;
    FILE *log;             /* metrics.jsonl (/dev/null on ranks > 0) */
    int B, T;              /* per-rank batch, context */
    size_t G;              /* the global batch K * B */
    int32_t *gin, *gtg;    /* the global batch's inputs and targets; this rank's slice at in, tg */
    int32_t *in, *tg;
    const lipt_tok *vtok;  /* the validation split (with its context symbol) */
    size_t nvalid;
    int tty;               /* progress redrawn on a terminal */
    int64_t step;
    double best_bpc;
    int64_t best_step;
    long evals_since_best; /* periodic evaluations since the one that set best_bpc (stored in checkpoints) */
    int early_stopped;     /* the loop ended by --patience */
    int64_t saved_step;    /* step of the last checkpoint written or resumed from; -1: none yet */
    int64_t first_step;    /* the step this invocation started at */
    int resumed;           /* this invocation continues a checkpoint (--resume) */
    double elapsed_base;   /* training wall time before this invocation (metrics.jsonl up to the resumed step) */
    train_change *changes; /* --resume: the options given again with another value (malloc'd) */
    int n_changes;
    char *stored_opts;     /* --resume: the checkpoint's stored options (malloc'd) */
    lipt_config stored_cfg; /* --resume: the checkpoint's model config */
    char resumed_from[1200]; /* --resume: the checkpoint's path */
    double t_start, loss_ema, last_eval_bpc, last_eval_acc, comm_start;
    double t_saved;        /* when last.ckpt was last written (cli_now) */
    int stop_now;          /* the loop ended on a signal (this rank's, or another rank's under MPI) */
    int *agreed;           /* set when every rank ends the same way (then no MPI abort is needed) */
    char opts_text[4096];  /* the persisted training options ("key=value\n") */
    lipt_reversible rev;   /* --memory invert: ctx.rev points here (knobs from train_settings, statistics) */
    char kept_aside[1024]; /* --force: the files kept aside in the run folder ("last.ckpt as last.step20.ckpt, ...") */
    lipt_ckpt init_ck;     /* --init-from: the checkpoint, open from the config to the weights (init_open) */
    int init_open;
    char init_from[1200];  /* --init-from: its absolute path, run id and step */
    char init_run[32];
    long long init_step;
} trainer;

/* --optimizer and --muon-lr into s (after --lr and --weight-decay), refused when a resumed run (its stored options
 * stored_opts) used another optimizer: 0, or the exit status. */
int train_optim_settings(cli_args *ap, train_settings *s, int resume, const char *stored_opts, const char *resume_path);
/* Muon's matrices and scratch when s->muon (after the model's parameters exist): 0, or the exit status. */
int train_optim_init(trainer *t, const train_settings *s);
/* Muon's learning rate at a 0-based step: --muon-lr times the schedule's value relative to its peak. */
double train_muon_lr_at(const train_settings *s, int64_t step);
/* train_sample.c: --sample-every: text generated by the model now (rank 0), shown with the progress unless quiet and
 * recorded in metrics.jsonl (event sample). 0, or the exit status. */
int train_sample(trainer *t, const train_settings *s, lipt_error *err);
/* SIGINT/SIGTERM handlers that ask the loop to save and stop. */
void train_install_signals(void);
/* The optimizer steps up to s->steps (or a signal / divergence / error). 0, or the exit status. */
int train_loop(trainer *t, const train_settings *s);
/* After the loop: the signal save, or the final save, evaluations, summary (and the JSON one when json). */
int train_finish(trainer *t, const train_settings *s, int json, int rc);

#endif
