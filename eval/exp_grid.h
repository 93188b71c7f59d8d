/* defines: the training-grid machinery of lipt experiment depth and stability (exp_grid.c), private to them: the
 * attention variants, the common options, and one grid cell trained or scored by a `lipt train` / `lipt eval` child. */
#ifndef LIPT_EVAL_EXP_GRID_H
#define LIPT_EVAL_EXP_GRID_H

#include <stddef.h>

#include "cli.h"
#include "exp_util.h"

#define MAX_VARIANTS 7
#define MAX_DEPTHS 24
#define MAX_CELLS (MAX_VARIANTS * MAX_DEPTHS)

/* models/ptb-<name>.cfg for each variant; VARIANT_LIST spells them for help and error texts. */
extern const char *const variant_names[MAX_VARIANTS];
#define VARIANT_LIST "dp, l2, l2-tied, contractive, contractive-l2, dp-post, l2-tied-post"

/* Index of a variant name in variant_names, -1 when unknown. */
int variant_index(const char *name);

/* Common model/recipe options of both grids. */
typedef struct {
    const char *data, *models, *runs, *out;
    long d_model, heads, d_ff, seq_len, steps, batch, warmup, seed, threads, save_every;
    double lr, clip;
    double beta2;          /* Adam's second-moment decay of every cell */
    const char *schedule;
} grid_opts;

/* Every setting that changes a cell's result, as one token: it names the cell's run folder and is stored with its
 * CSV row, so results of other settings are never read back as this grid's. */
void grid_key(const grid_opts *g, char *buf, size_t n);

/* own, then the options common to both grids, into dst (room for n_own + 11). Returns the count. */
int build_opts(cli_opt *dst, const cli_opt *own, int n_own);
/* The common options, plus --out, --runs, --steps and --lr, into g. 0, or 2 on a malformed value. */
int parse_grid_common(cli_args *a, grid_opts *g);
/* --variants and --depths of a grid, checked; the output and run folders created. 0, or the exit status. */
int grid_select(cli_args *a, const char *C, const grid_opts *g, int *vars, int *nv, double *dl, int *nd);

/* The shared part of a grid cell: skipped when the CSV has it already, else trained in RUNS/<prefix><variant>-L<depth>.
 * Returns -1 skipped, 0 trained, 1 diverged (why says how); or 2 when the grid must stop, with *rc its exit status. */
int grid_cell(const grid_opts *g, const char *C, int found, int cell, int total, int v, int depth, const char *prefix,
              int log_every, const char *csv, char *dir, size_t dirn, double *secs, char *why, size_t whyn, int *rc);

/* Evaluates DIR/last.ckpt on a split; fills bpc, nll, symbols (and params when given). 0, 2 interrupted, 3 failed
 * (message printed). */
int eval_cell(const grid_opts *g, const char *dir, const char *split, long max_symbols, double *bpc, double *nll,
              long *symbols, long *params);

/* The number after "key": in a flat JSON object; NAN when absent or null. */
double json_get(const char *js, const char *key);
/* Splits a CSV line in place into at most cap fields; returns the count. */
int csv_split(char *line, char **f, int cap);
/* Reads a grid's CSV (first line `header`, rows of ncols fields, the last the settings key): row(fields, user) takes
 * each row and returns 0 to stop (its buffer is full). The rows read; -1 (message printed) when the file is of another
 * format or holds rows of other settings, which must not be mixed with these. 0 when the file does not exist. */
int grid_read_csv(const char *path, const char *header, int ncols, const char *key, const char *C,
                  int (*row)(char **fields, void *user), void *user);

#endif
