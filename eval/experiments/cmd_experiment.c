/* lipt experiment: the dispatcher of the paper's experiments, each in its own file (exp_<name>.c) behind one row of
 * the table below, which also writes the usage text. */
#include <stdio.h>
#include <string.h>

#include "exp_util.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line of the usage text */
} experiment;

static const experiment experiments[] = {
    {"tightness", exp_tightness,
     "lower bounds on Lip(tied L2-MHA) by gradient ascent vs the upper bound, over N (Fig. 2)"},
    {"invertibility", exp_invertibility,
     "fixed-point inversion of x + g(x), contractive L2 vs scaled DP attention (Fig. 3)"},
    {"depth", exp_depth, "PTB BPC of the four attention variants against depth, same budget per cell (Fig. 4)"},
    {"stability", exp_stability,
     "Adam at a fixed learning rate without warmup, depth growing: divergence detected (Fig. 11)"},
    {"robustness", exp_robustness,
     "output spread of trained attention under input perturbations at growing scales (Fig. 10)"},
};
#define N_EXPERIMENTS ((int)(sizeof experiments / sizeof experiments[0]))
/* EXP_COUNT sits beside the entry points in exp_util.h: a new one declared and counted there but given no row here
 * (so never reachable) stops the build */
_Static_assert(N_EXPERIMENTS == EXP_COUNT, "one row of experiments[] per entry point in exp_util.h");

static void exp_usage(FILE *f) {
    fputs("usage: lipt experiment <", f);
    for (int i = 0; i < N_EXPERIMENTS; i++) fprintf(f, "%s%s", i ? "|" : "", experiments[i].name);
    fputs("> [options]   (--help after one for its options)\n", f);
    for (int i = 0; i < N_EXPERIMENTS; i++) fprintf(f, "  %-14s %s\n", experiments[i].name, experiments[i].summary);
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
        if (strcmp(argv[0], experiments[i].name) == 0) return experiments[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lipt experiment: unknown experiment '%s'\n", argv[0]);
    exp_usage(stderr);
    return 2;
}
