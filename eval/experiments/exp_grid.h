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
    char variant[MAX_VARIANTS][48]; /* the variants' names (exp_grid_parse) */
} exp_grid;

/* Index of a variant name in g->variant, -1 when unknown. */
int exp_variant_index(const exp_grid *g, const char *name);
/* The variants for help and error texts: "dp, l2, ..., contractive (clipped-dp), dp-post, ..." (a model named
 * other than its attention kind is followed by the kind). */
void exp_variant_list(char *buf, size_t n);

/* Every setting that changes a cell's result, as one token: it names the cell's run folder and is stored with its
 * CSV row, so results of other settings are never read back as this grid's. */
void exp_grid_key(const exp_grid *g, char *buf, size_t n);

/* own, then the options common to both grids, into dst (room for n_own + 11). Returns the count. The help of an own
 * option named "variants" is followed by the list of variants, written to vhelp (vn bytes, alive while dst is). */
int exp_grid_opts(cli_opt *dst, const cli_opt *own, int n_own, char *vhelp, size_t vn);
/* The common options, plus --out, --runs, --steps and --lr, into g, and the variants' names. 0, or 2 on a malformed
 * value. */
int exp_grid_parse(cli_args *a, exp_grid *g);
/* --variants and --depths of a grid, checked; the output and run folders created. 0, or the exit status. */
int exp_grid_select(cli_args *a, const char *C, const exp_grid *g, int *vars, int *nv, double *dl, int *nd);

/* The shared part of a grid cell: skipped when the CSV has it already, else trained in RUNS/<prefix><variant>-L<depth>.
 * Returns -1 skipped, 0 trained, 1 diverged (why says how); or 2 when the grid must stop, with *rc its exit status. */
int exp_grid_cell(const exp_grid *g, const char *C, int found, int cell, int total, int v, int depth, const char *prefix,
              int log_every, const char *csv, char *dir, size_t dirn, double *secs, char *why, size_t whyn, int *rc);

/* Evaluates DIR/last.ckpt on a split; fills bpc, nll, symbols (and params when given). 0, 2 interrupted, 3 failed
 * (message printed). */
int exp_eval_cell(const exp_grid *g, const char *dir, const char *split, long max_symbols, double *bpc, double *nll,
              long *symbols, long *params);

#endif
