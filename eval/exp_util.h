/* defines: helpers shared by the lipt experiment commands (output folders, comma lists, atomic files). */
#ifndef LIPT_EVAL_EXP_UTIL_H
#define LIPT_EVAL_EXP_UTIL_H

#include <stdio.h>

#include "lipt/core.h"

/* mkdir -p; error naming the part that could not be created. */
lipt_status mkdir_p(const char *dir, lipt_error *err);
/* Comma-separated numbers into out (at most cap). Returns the count, or -1 on a malformed list. */
int parse_list(const char *s, double *out, int cap);

/* A FILE on path.tmp, renamed over path by commit_file (readers never see a partial file). */
typedef struct { FILE *f; char path[1100], tmp[1110]; } out_file;
lipt_status open_file(out_file *o, const char *path, lipt_error *err);
lipt_status commit_file(out_file *o, lipt_error *err);

/* lipt experiment depth / stability (exp_train.c) */
int exp_depth(int argc, char **argv);
int exp_stability(int argc, char **argv);
/* lipt experiment robustness (exp_robust.c) */
int exp_robustness(int argc, char **argv);

#endif
