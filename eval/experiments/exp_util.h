/* defines: helpers shared by the lipt experiment commands (output folders, comma lists, atomic files). */
#ifndef LIPT_EVAL_EXP_UTIL_H
#define LIPT_EVAL_EXP_UTIL_H

#include <stdio.h>

#include "lipt/core.h"
#include "lipt/model.h"
#include "cli.h"
#include "run.h" /* run_mkdir: mkdir -p of the output folders */

/* A seed mixed, so that nearby seeds (seed, seed + 1, ...) give unrelated draws: lipt_rng's own seeding (splitmix64),
 * the first word of a freshly seeded state; bit-exact with the private splitmix64 it replaced, so the synthetic
 * experiments' weights, inputs and starts (and a resumed tightness CSV) are those of earlier runs. */
uint64_t exp_seed(uint64_t seed);

/* Comma-separated numbers into out (at most cap). Returns the count, or -1 on a malformed list. */
int exp_parse_list(const char *s, double *out, int cap);

/* An experiment's CSV read back into an array of row structs (a resumed experiment's finished rows). */
#define EXP_CSV_MAX_COLS 32
typedef struct {
    const char *path;
    const char *header; /* its first line: another one is another format (an older lipt's, another tool's): refused */
    int ncols;          /* lines of another field count are skipped, as is a last line cut short (no newline) */
    const char *key;    /* NULL, or the settings the last field of every row must hold: rows of others are refused */
    size_t row_size;    /* bytes of one row struct */
    /* Fills row (zeroed) from one line's fields f and their values v (strtod's, NAN where not a number); returns 0
     * to skip the line. */
    int (*take)(char **f, const double *v, void *row, void *user);
    void *user;
} exp_csv;
/* At most cap rows of c into rows: their count, 0 when the file does not exist, or -1 when it is refused (the message
 * printed, C the command naming itself). */
int exp_read_csv(const exp_csv *c, const char *C, void *rows, int cap);

/* An output through lipt's atomic writer (lipt_output: path.tmp, fsync, rename; a device or FIFO at path is refused):
 * write to f, then exp_commit (readers never see a partial file) or exp_discard. */
typedef struct { FILE *f; lipt_output out; } exp_out;
lipt_status exp_open(exp_out *o, const char *path, lipt_error *err);
lipt_status exp_commit(exp_out *o, lipt_error *err);
void exp_discard(exp_out *o); /* abandon it: the temporary removed, path untouched */

/* Inputs from a trained model (loaded from ckpt): the first N symbols of the test split of `data` — NULL: the corpus
 * ckpt was trained on, with its split (run_load_corpus, which says so on stderr) — encoded with the checkpoint's
 * vocabulary, embedded, passed through blocks 0 .. layer-1 and, when with_ln and the model is pre-LN, through layer
 * `layer`'s first LayerNorm: the input of that layer's attention map. out: N x d_model floats. */
lipt_status exp_test_inputs(const char *ckpt, const lipt_model *m, const lipt_vocab *vocab, const char *data, int N,
                            int layer, int with_ln, float *out, lipt_error *err);

/* An experiment, one file each (exp_<name>.c), dispatched by the table in cmd_experiment.c, whose prologue parses its
 * options (the usage and --help texts written from these rows), applies --threads to this process (not for a grid,
 * whose --threads is its training runs'), runs it and frees the options. */
typedef struct {
    const char *name;
    const char *summary; /* its line of `lipt experiment --help` */
    const char *about;   /* what its --help says above the options */
    const cli_opt *opts; /* a grid's own: the grids' common options follow them (exp_grid_opts) */
    int n_opts;
    int grid;            /* a training grid (exp_grid.h): depth, stability */
    int (*run)(cli_args *a, const char *C); /* C: "experiment <name>"; returns the exit status */
} exp_def;
extern const exp_def exp_tightness;     /* exp_tightness.c */
extern const exp_def exp_invertibility; /* exp_invertibility.c */
extern const exp_def exp_depth;         /* exp_depth.c */
extern const exp_def exp_stability;     /* exp_stability.c */
extern const exp_def exp_robustness;    /* exp_robust.c */
#define EXP_COUNT 5 /* the experiments above: cmd_experiment.c checks its table against it */

#endif
