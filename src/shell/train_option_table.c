/* lipt train's option table and the training keys a checkpoint and run.cfg store (train_keys.h): in the shell, not in
 * train/, so that the fuzz targets of the training options (tests/fuzz/) parse with this very table. */
#include "train_keys.h"

/* Options stored in the checkpoint ("persist") are restored on --resume unless given again. */
static const cli_opt train_opts[] = {
    {"config", CLI_STRING, "FILE", "run config: model keys and training keys (key = value, e.g. a run's run.cfg); every key can also be given as --key value", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus: ptb, enwik8, text8, tinyshakespeare, warandpeace or a file", "ptb"},
    {"out", CLI_STRING, "DIR", "run directory (checkpoints, metrics.jsonl, run.cfg); default: a new runs/YYYYMMDD-HHMMSS "
     "(with --resume: the folder of --ckpt)", NULL},
    {"force", CLI_FLAG, NULL, "train afresh into an --out that holds another run, or --resume into another run's folder or "
     "from a checkpoint older than the folder's newest: the files it would replace are kept aside, renamed (last.ckpt as "
     "last.step200.ckpt; metrics lines past the resume point in a side file); with --resume, also continue on a corpus "
     "other than the one the checkpoint was trained on (its CRC-32 differs)", NULL},
    {"steps", CLI_INT, "N", "total optimizer steps", "1000"},
    {"batch", CLI_INT, "B", "sequences per step", "32"},
    {"lr", CLI_FLOAT, "LR", "peak learning rate", "1e-3"},
    {"schedule", CLI_STRING, "KIND", "learning rate: invsqrt (warmup then 1/sqrt), constant, cosine", "invsqrt"},
    {"warmup", CLI_INT, "N", "linear warmup steps", "100"},
    {"min-lr", CLI_FLOAT, "LR", "cosine floor", "0"},
    {"beta1", CLI_FLOAT, "B1", "Adam beta1", "0.9"},
    {"beta2", CLI_FLOAT, "B2", "Adam beta2", "0.98"},
    {"adam-eps", CLI_FLOAT, "EPS", "Adam epsilon", "1e-8"},
    {"weight-decay", CLI_FLOAT, "WD", "decoupled weight decay (not on biases, norms, embeddings)", "0"},
    {"clip", CLI_FLOAT, "NORM", "global gradient-norm clipping (0: off)", "1.0"},
    {"optimizer", CLI_STRING, "NAME", "adamw, or muon: orthogonalised momentum (Newton-Schulz) on the hidden layers' "
     "weight matrices, AdamW on embeddings, head, biases and gains (README: Optimizers); --resume keeps the run's",
     "adamw"},
    {"muon-lr", CLI_FLOAT, "LR", "Muon's peak learning rate, on the --schedule's shape (default: --lr)", NULL},
    {"seed", CLI_INT, "S", "data order and dropout seed (init: the config's init_seed)", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS, else the cores other programs leave idle)", NULL},
    CLI_OPTS_MEMORY,
    CLI_OPT_PRECISION("the config's key precision, float32; on --resume the checkpoint's, which --precision may "
                      "change"),
    {"eval-every", CLI_INT, "N", "evaluate on the validation subset every N steps (0: only at the end)", "200"},
    {"eval-symbols", CLI_INT, "N", "validation symbols per periodic evaluation (0: all)", "200000"},
    {"final-eval", CLI_STRING, "SPLITS", "full evaluation at the end: valid,test | valid | test | none", "valid,test"},
    {"final-from", CLI_STRING, "WHICH", "the weights the final evaluation scores: last (the last step's) or best "
     "(best.ckpt's: the lowest periodic validation BPC; under MPI every rank reads it, as --resume reads last.ckpt)",
     "last"},
    {"patience", CLI_INT, "N", "early stopping: stop when N periodic validation evaluations in a row did not improve "
     "the best validation BPC (last.ckpt and metrics.jsonl record the stop; the count survives --resume; 0: off)", "0"},
    {"save-every", CLI_INT, "N", "write last.ckpt every N steps, besides every evaluation and the end (0: not by steps)",
     "500"},
    {"save-minutes", CLI_FLOAT, "M", "also write last.ckpt when M minutes passed since the last one (0: not by time)", "5"},
    {"log-every", CLI_INT, "N", "metrics.jsonl line every N steps", "10"},
    {"vocab", CLI_STRING, "KIND", "vocabulary: auto (plain text: whole; PTB, text8: built; enwik8: bytes), bytes (all "
     "256), built (the training split's bytes), whole (the bytes of all three splits, as nanoGPT)", "auto"},
    {"data-split", CLI_STRING, "HOW", "auto, standard (PTB files; enwik8/text8 90M/5M/5M) or fractions F0,F1,F2", "auto"},
    {"unk", CLI_FLAG, NULL, "reserve an unknown-symbol id for symbols unseen in training (default: unseen is an error)", NULL},
    {"resume", CLI_FLAG, NULL, "continue from --ckpt FILE or DIR/last.ckpt (same loss curve as an uninterrupted run)", NULL},
    {"ckpt", CLI_STRING, "FILE", "checkpoint to resume from", NULL},
    {"init-from", CLI_STRING, "CKPT|DIR", "fine-tune: a new run from a checkpoint's weights (a run folder: its best.ckpt, else last.ckpt); the model and vocabulary are the checkpoint's, step, optimizer, best BPC and patience start afresh (README: Fine-tuning)", NULL},
    {"check-every", CLI_INT, "N", "under MPI: compare a parameter checksum across ranks every N steps (0: only at start and end)", "100"},
    {"json", CLI_FLAG, NULL, "print the final summary as one JSON object on stdout", NULL},
    {"mpi-timeout", CLI_STRING, "S", "under MPI: a rank waiting S seconds in one collective (another rank frozen or stuck) stops the job with a message; saved checkpoints stay whole (0: wait forever; default: LIPT_MPI_TIMEOUT, else 600)", NULL},
    {"quiet", CLI_FLAG, NULL, "no progress output (the final result line, done: ..., stays)", NULL},
};
#define N_TRAIN_OPTS ((int)(sizeof train_opts / sizeof train_opts[0]))

/* nanoGPT's names (its train.py's globals, set as --key=value) where lipt has the same meaning; each one taken prints
 * a note naming lipt's. The ones without an equivalent say what to use. */
static const cli_alias nanogpt_names[] = {
    {"max_iters", "steps", NULL},
    {"batch_size", "batch", "sequences per optimizer step on each rank; lipt has no gradient accumulation"},
    {"block_size", "seq_len", "the context length, and the length of the training sequences"},
    {"n_layer", "n_layers", NULL},
    {"n_head", "n_heads", NULL},
    {"n_embd", "d_model", "nanoGPT's MLP is 4 x n_embd wide, lipt's is the model key d_ff, 512 by default"},
    {"learning_rate", "lr", "the peak; lipt's default schedule is invsqrt, nanoGPT's decay is --schedule cosine"},
    {"out_dir", "out", NULL},
    {"eval_interval", "eval-every", NULL},
    {"warmup_iters", "warmup", NULL},
    {"grad_clip", "clip", "the global gradient norm; 0 turns it off in both"},
    {"init_from", "init-from", NULL}, /* its value decides: src/shell/cli.c */
    {"log_interval", "log-every", "a metrics.jsonl line every N steps"},
    {"eval_iters", NULL, "--eval-symbols N sets the validation symbols of each periodic evaluation"},
    {"gradient_accumulation_steps", NULL, "raise --batch (lipt checks that it fits in memory) or add MPI "
     "ranks"},
    {"lr_decay_iters", NULL, "--schedule cosine decays over all --steps to --min-lr"},
    {"decay_lr", NULL, "--schedule invsqrt (the default), cosine, or constant (no decay)"},
    {"dataset", NULL, "--data NAME|PATH takes a corpus name or any text file, with no prepare step"},
    {"device", NULL, "lipt computes on the CPU; --threads N sets the threads"},
    {"dtype", NULL, "--precision float32, bf16 or bf16-emulated chooses the matrix products' arithmetic"},
    {"compile", NULL, "lipt is compiled C: drop it"},
    {NULL, NULL, NULL},
};

const cli_alias *train_nanogpt_names(void) { return nanogpt_names; }
static const char *const persisted[] = {"data", "steps", "batch", "lr", "schedule", "warmup", "min-lr", "beta1", "beta2",
                                  "adam-eps", "weight-decay", "clip", "seed", "eval-every", "eval-symbols",
                                  "final-eval", "final-from", "patience", "save-every", "save-minutes", "log-every",
                                  "vocab", "data-split", "unk", "optimizer", "muon-lr"};
#define N_PERSISTED ((int)(sizeof persisted / sizeof persisted[0]))

const cli_opt *train_options(int *n) {
    *n = N_TRAIN_OPTS;
    return train_opts;
}

const char *const *train_persisted_keys(int *n) {
    *n = N_PERSISTED;
    return persisted;
}

const char *train_persisted_key(int i) { return i >= 0 && i < N_PERSISTED ? persisted[i] : NULL; }

int train_persisted_index(const char *key) { return train_key_index(persisted, N_PERSISTED, key); }
