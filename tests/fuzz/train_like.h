/* lipt train's option table and its stored training keys, for the fuzz targets of the training options
 * (fuzz_ckpt_opts.c, fuzz_run_config.c). The real ones are static in train/cmd_train.c, part of the binary, not of a
 * library a target can link: these copy their names, kinds and defaults (keep them in step). */
#ifndef LIPT_FUZZ_TRAIN_LIKE_H
#define LIPT_FUZZ_TRAIN_LIKE_H

#include <string.h>

#include "cli.h"
#include "lipt/data.h"
#include "lipt/optim.h"

static const cli_opt train_opts_like[] = {
    {"config", CLI_STRING, "FILE", "", NULL},       {"data", CLI_STRING, "NAME|PATH", "", "ptb"},
    {"out", CLI_STRING, "DIR", "", NULL},           {"force", CLI_FLAG, NULL, "", NULL},
    {"steps", CLI_INT, "N", "", "1000"},            {"batch", CLI_INT, "B", "", "32"},
    {"lr", CLI_FLOAT, "LR", "", "1e-3"},            {"schedule", CLI_STRING, "KIND", "", "invsqrt"},
    {"warmup", CLI_INT, "N", "", "100"},            {"min-lr", CLI_FLOAT, "LR", "", "0"},
    {"beta1", CLI_FLOAT, "B1", "", "0.9"},          {"beta2", CLI_FLOAT, "B2", "", "0.98"},
    {"adam-eps", CLI_FLOAT, "EPS", "", "1e-8"},     {"weight-decay", CLI_FLOAT, "WD", "", "0"},
    {"clip", CLI_FLOAT, "NORM", "", "1.0"},         {"seed", CLI_INT, "S", "", "0"},
    {"threads", CLI_INT, "N", "", NULL},            {"recompute", CLI_FLAG, NULL, "", NULL},
    {"precision", CLI_STRING, "P", "", NULL},       {"eval-every", CLI_INT, "N", "", "200"},
    {"eval-symbols", CLI_INT, "N", "", "200000"},   {"final-eval", CLI_STRING, "SPLITS", "", "valid,test"},
    {"final-from", CLI_STRING, "WHICH", "", "last"}, {"patience", CLI_INT, "N", "", "0"},
    {"save-every", CLI_INT, "N", "", "500"},        {"save-minutes", CLI_FLOAT, "M", "", "5"},
    {"log-every", CLI_INT, "N", "", "10"},          {"vocab", CLI_STRING, "KIND", "", "auto"},
    {"data-split", CLI_STRING, "HOW", "", "auto"},  {"unk", CLI_FLAG, NULL, "", NULL},
    {"resume", CLI_FLAG, NULL, "", NULL},           {"ckpt", CLI_STRING, "FILE", "", NULL},
    {"check-every", CLI_INT, "N", "", "100"},       {"mpi-timeout", CLI_STRING, "S", "", NULL},
    {"json", CLI_FLAG, NULL, "", NULL},             {"quiet", CLI_FLAG, NULL, "", NULL},
};
#define N_TRAIN_OPTS_LIKE ((int)(sizeof train_opts_like / sizeof train_opts_like[0]))

static const char *const persisted_like[] = {
    "data", "steps", "batch", "lr", "schedule", "warmup", "min-lr", "beta1", "beta2", "adam-eps", "weight-decay", "clip",
    "seed", "eval-every", "eval-symbols", "final-eval", "final-from", "patience", "save-every", "save-minutes",
    "log-every", "vocab", "data-split", "unk"};
#define N_PERSISTED_LIKE ((int)(sizeof persisted_like / sizeof persisted_like[0]))

/* What lipt train does next with its options (read_numbers, parse_settings): every value through its getter, the
 * schedule, AdamW and data options through their parsers and checks. The getters print their refusals (libFuzzer's
 * -close_fd_mask hides them). */
static void use_train_options(const cli_args *a) {
    long steps = 0, warmup = 0, l = 0;
    double lr = 0, min_lr = 0, b1 = 0, b2 = 0, eps = 0, wd = 0, d = 0;
    for (int k = 0; k < N_TRAIN_OPTS_LIKE; k++) {
        const cli_opt *o = &train_opts_like[k];
        const char *v = cli_str(a, o->name);
        (void)cli_origin(a, o->name);
        if (cli_has(a, o->name) && !v) abort();
        if (o->kind == CLI_INT) (void)cli_int(a, o->name, &l); /* unset without a default: 0 */
        if (o->kind == CLI_FLOAT) (void)cli_float(a, o->name, &d);
    }
    lipt_error err = {0};
    lipt_lr_schedule s;
    memset(&s, 0, sizeof s);
    if (cli_int(a, "steps", &steps) == 0 && cli_int(a, "warmup", &warmup) == 0 && cli_float(a, "lr", &lr) == 0 &&
        cli_float(a, "min-lr", &min_lr) == 0 && lipt_lr_kind_parse(cli_str(a, "schedule"), &s.kind, &err) == LIPT_OK) {
        s.lr = lr, s.warmup = warmup, s.total = steps, s.min_lr = min_lr;
        if (lipt_lr_schedule_check(&s, &err) == LIPT_OK)
            for (int64_t t = 0; t < 3; t++) (void)lipt_lr_at(&s, t * (steps > 0 ? steps / 2 : 1));
    }
    if (cli_float(a, "beta1", &b1) == 0 && cli_float(a, "beta2", &b2) == 0 && cli_float(a, "adam-eps", &eps) == 0 &&
        cli_float(a, "weight-decay", &wd) == 0) {
        const lipt_adamw_config c = {lr, b1, b2, eps, wd};
        (void)lipt_adamw_config_check(&c, &err);
    }
    lipt_data_opts dopts;
    memset(&dopts, 0, sizeof dopts);
    (void)lipt_data_parse_vocab(cli_str(a, "vocab"), &dopts, &err);
    (void)lipt_data_parse_split(cli_str(a, "data-split"), &dopts, &err);
}

#endif
