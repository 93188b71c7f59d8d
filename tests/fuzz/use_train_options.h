/* What lipt train does with its options once parsed, for the fuzz targets of the training options (fuzz_ckpt_opts.c,
 * fuzz_run_config.c). They parse with lipt train's own option table and stored training keys (train_options,
 * train_persisted_keys: src/shell/train_option_table.c, in the shell library every target links), so they cannot
 * drift. */
#ifndef LIPT_FUZZ_USE_TRAIN_OPTIONS_H
#define LIPT_FUZZ_USE_TRAIN_OPTIONS_H

#include <string.h>

#include "cli.h"
#include "train_keys.h"
#include "lipt/data.h"
#include "lipt/optim.h"

/* What lipt train does next with its options (read_numbers, parse_settings): every value through its getter, the
 * schedule, AdamW and data options through their parsers and checks. The getters print their refusals (libFuzzer's
 * -close_fd_mask hides them). */
static void use_train_options(const cli_args *a) {
    long steps = 0, warmup = 0, l = 0;
    double lr = 0, min_lr = 0, b1 = 0, b2 = 0, eps = 0, wd = 0, d = 0;
    int n_opts;
    const cli_opt *opts = train_options(&n_opts);
    for (int k = 0; k < n_opts; k++) {
        const cli_opt *o = &opts[k];
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
