/* defines: the training-grid machinery of lipt experiment depth and stability (exp_grid.c), private to them: the
 * attention variants, the common options, and one grid cell trained or scored by a `lipt train` / `lipt eval` child. */
#ifndef LIPT_EVAL_EXP_GRID_H
#define LIPT_EVAL_EXP_GRID_H

#include <stddef.h>

#include "cli.h"
#include "exp_util.h"
#include "lipt/variants.h"

/* The variants of the grids, generated from the attention table (include/lipt/variants.h), so that a new kind is one
 * of them: first the PTB model of every kind (models/ptb-<model>.cfg, lipt_attn_info.model, else its name), then
 * "<model>-post", the post-LN form (norm = post), of every kind that allows it (the non-contractive ones). Variant v
 * is named variant[v] in exp_grid; "" where a kind has no post-LN form. */
#define MAX_VARIANTS (2 * LIPT_ATTN_KIND_COUNT)
#define MAX_DEPTHS 24
#define MAX_CELLS (MAX_VARIANTS * MAX_DEPTHS)

/* Common model/recipe options of both grids. */
typedef struct {
    const char *data, *models, *runs, *out;
    long d_model, heads, d_ff, seq_len, steps, batch, warmup, seed, threads, save_every;
    double lr, clip;
    double beta2;          /* Adam's second-moment decay of every cell */
    const char *schedule;
    char variant[MAX_VARIANTS][48]; /* the variants' names (exp_grid_setup) */
    char csv[1100], key[256];       /* OUT/<name>.csv, and exp_grid_key (exp_grid_setup) */
} exp_grid;

/* A grid's CSV, OUT/<name>.csv: first line header, rows of ncols fields, the last the settings key (exp_read_csv). */
typedef struct {
    const char *name, *header;
    int ncols;
    size_t row_size;
    int (*take)(char **f, const double *v, void *row, void *user); /* user: the exp_grid */
} exp_grid_csv;

/* The cells chosen: --variants (indices into exp_grid.variant) and --depths. */
typedef struct {
    int vars[MAX_VARIANTS], nv, nd;
    double dl[MAX_DEPTHS];
} exp_grid_sel;

/* Index of a variant name in g->variant, -1 when unknown. */
int exp_variant_index(const exp_grid *g, const char *name);
/* The variants for help and error texts: "dp, l2, ..., contractive (clipped-dp), dp-post, ..." (a model named
 * other than its attention kind is followed by the kind). Returns how many there are. */
int exp_variant_list(char *buf, size_t n);

/* Every setting that changes a cell's result, as one token: it names the cell's run folder and is stored with its
 * CSV row, so results of other settings are never read back as this grid's. */
void exp_grid_key(const exp_grid *g, char *buf, size_t n);

/* own, then the options common to both grids, into dst (room for n_own + 11). Returns the count. The help of an own
 * option named "variants" is followed by the list of variants, written to vhelp (vn bytes, alive while dst is). */
int exp_grid_opts(cli_opt *dst, const cli_opt *own, int n_own, char *vhelp, size_t vn);
/* What a grid does after reading its own options (into g): the common ones, plus --out, --runs, --steps and --lr,
 * into g, with the variants' names, the key and the CSV path; --variants and --depths into s, checked; the output and
 * run folders created; the rows OUT/<csv->name>.csv holds already into rows (at most MAX_CELLS), *n of them.
 * 0, or the exit status (a CSV of another format or other settings: 1, message printed). */
int exp_grid_setup(cli_args *a, const char *C, exp_grid *g, exp_grid_sel *s, const exp_grid_csv *csv, void *rows, int *n);

/* The shared part of a grid cell: skipped when the CSV has it already, else trained in RUNS/<prefix><variant>-L<depth>.
 * Returns -1 skipped, 0 trained, 1 diverged (why says how); or 2 when the grid must stop, with *rc its exit status. */
int exp_grid_cell(const exp_grid *g, const char *C, int found, int cell, int total, int v, int depth, const char *prefix,
              int log_every, const char *csv, char *dir, size_t dirn, double *secs, char *why, size_t whyn, int *rc);

/* Evaluates DIR/last.ckpt on a split; fills bpc, nll, symbols (and params when given). 0, 2 interrupted, 3 failed
 * (message printed). */
int exp_eval_cell(const exp_grid *g, const char *dir, const char *split, long max_symbols, double *bpc, double *nll,
              long *symbols, long *params);

#endif
