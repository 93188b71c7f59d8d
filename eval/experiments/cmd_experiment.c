/* lipt experiment: the dispatcher of the paper's experiments, each in its own file (exp_<name>.c) behind one row of
 * the table below, and the prologue they share; the usage and --help texts are written from the rows. */
#include <stdio.h>
#include <string.h>

#include "exp_grid.h"
#include "exp_util.h"

static const exp_def *const experiments[] = {&exp_tightness, &exp_invertibility, &exp_depth, &exp_stability,
                                             &exp_robustness};
#define N_EXPERIMENTS ((int)(sizeof experiments / sizeof experiments[0]))
/* EXP_COUNT sits beside the declarations in exp_util.h: one declared and counted there but given no row here (so
 * never reachable) stops the build */
_Static_assert(N_EXPERIMENTS == EXP_COUNT, "one row of experiments[] per experiment in exp_util.h");

static void exp_usage(FILE *f) {
    fputs("usage: lipt experiment <", f);
    for (int i = 0; i < N_EXPERIMENTS; i++) fprintf(f, "%s%s", i ? "|" : "", experiments[i]->name);
    fputs("> [options]   (--help after one for its options)\n", f);
    char list[512];
    const int nv = exp_variant_list(list, sizeof list); /* the grids' variants, from the attention table */
    for (int i = 0; i < N_EXPERIMENTS; i++) {
        fprintf(f, "  %-14s %s", experiments[i]->name, experiments[i]->summary);
        if (experiments[i]->grid) fprintf(f, "; %d variants of the %d attention kinds", nv, LIPT_ATTN_KIND_COUNT);
        fputc('\n', f);
    }
}

/* What every experiment does first and last: its options parsed (a grid's own, then the grids' common ones),
 * --threads applied, then its run; the options freed whatever happened. */
static int exp_main(const exp_def *e, int argc, char **argv) {
    char C[64], vhelp[640];
    snprintf(C, sizeof C, "experiment %s", e->name);
    cli_opt grid_opts[CLI_MAX_OPTS];
    const int n = e->grid ? exp_grid_opts(grid_opts, e->opts, e->n_opts, vhelp, sizeof vhelp) : e->n_opts;
    cli_args a;
    const int pr = cli_parse(&a, C, e->about, e->grid ? grid_opts : e->opts, n, argc, argv, 0, 0);
    int rc = pr > 0 ? 0 : pr < 0 ? 2 : e->grid ? 0 : cli_apply_threads(&a, C);
    if (!pr && !rc) rc = e->run(&a, C);
    cli_free(&a);
    return rc;
}

int cmd_experiment(int argc, char **argv) {
    if (argc < 1) {
        exp_usage(stderr);
        return 2;
    }
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "help") == 0) {
        exp_usage(stdout);
        return 0;
    }
    for (int i = 0; i < N_EXPERIMENTS; i++)
        if (strcmp(argv[0], experiments[i]->name) == 0) return exp_main(experiments[i], argc - 1, argv + 1);
    fprintf(stderr, "lipt experiment: unknown experiment '%s'\n", argv[0]);
    exp_usage(stderr);
    return 2;
}
