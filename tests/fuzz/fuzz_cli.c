/* libFuzzer target: the command-line option parser of src/shell/cli.c. The input is argv: its first byte picks one of
 * three option tables, the rest is split on NUL bytes into arguments. Then, as the commands do, every option is read
 * back through the typed getters, the unknown --key value pairs go to lipt_config_set (lipt train's model keys), the
 * data options to their parsers, and every value through the JSON string writer.
 * Build and run: scripts/fuzz.sh cli SECONDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/config.h"
#include "lipt/data.h"
#include "train_keys.h"

/* lipt train's own option table (src/shell/train_option_table.c), and tables shaped like eval's and plot's
 * (eval/cmd_eval.c, eval/tools/cmd_plot.c, static to their commands): every option kind, defaults and none, extras
 * allowed or not, positional arguments or not. */
static const cli_opt eval_like[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus", NULL},
    {"split", CLI_STRING, "SPLIT", "train, valid or test", "valid"},
    {"data-split", CLI_STRING, "HOW", "split", NULL},
    {"window", CLI_INT, "T", "context window", NULL},
    {"stride", CLI_INT, "S", "window stride", NULL},
    {"batch", CLI_INT, "B", "windows per pass", "16"},
    {"max-symbols", CLI_INT, "N", "symbols", "0"},
    {"json", CLI_FLAG, NULL, "JSON", NULL},
};
static const cli_opt plot_like[] = {
    {"out", CLI_STRING, "FILE", "the SVG to write", "runs/plot.svg"},
    {"smooth", CLI_INT, "N", "smoothing", "10"},
    {"title", CLI_STRING, "TEXT", "figure title", NULL},
    {"temperature", CLI_FLOAT, "T", "softmax temperature", "1.0"},
};
static struct { const cli_opt *opts; int n, allow_extra, max_pos; } TABLES[] = {
    {NULL, 0, 1, 0}, /* lipt train's, set by LLVMFuzzerInitialize */
    {eval_like, (int)(sizeof eval_like / sizeof eval_like[0]), 0, 0},
    {plot_like, (int)(sizeof plot_like / sizeof plot_like[0]), 0, 8},
};

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    devnull = fopen("/dev/null", "w"); /* the JSON writer needs a FILE; its output is not the point */
    TABLES[0].opts = train_options(&TABLES[0].n);
    return 0;
}

#define MAX_ARGS 128

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const int t = data[0] % (int)(sizeof TABLES / sizeof TABLES[0]);
    /* one buffer, NUL-terminated arguments in place; a trailing argument without its NUL gets one */
    char *buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    char *argv[MAX_ARGS];
    int argc = 0;
    for (size_t i = 0; i < size - 1 && argc < MAX_ARGS; i += strlen(buf + i) + 1) argv[argc++] = buf + i;

    cli_args a;
    const int pr = cli_parse(&a, "fuzz", "fuzz summary", TABLES[t].opts, TABLES[t].n, argc, argv, TABLES[t].allow_extra,
                             TABLES[t].max_pos);
    if (pr == 0) {
        json_w j;
        json_begin(&j, devnull);
        for (int k = 0; k < TABLES[t].n; k++) {
            const cli_opt *o = &TABLES[t].opts[k];
            const char *s = cli_str(&a, o->name);
            long l;
            double d;
            /* cli_parse validated numbers already: a getter refusing one now is a bug */
            if (o->kind == CLI_INT && cli_int(&a, o->name, &l) != 0) abort();
            if (o->kind == CLI_FLOAT && cli_float(&a, o->name, &d) != 0) abort();
            if (cli_has(&a, o->name) && !s) abort();
            json_str(&j, o->name, s);
        }
        lipt_config cfg;
        lipt_config_default(&cfg);
        lipt_error err = {0};
        for (int e = 0; e < a.n_extra; e++) {
            json_str(&j, a.extra_key[e], a.extra_val[e]);
            lipt_config_set(&cfg, a.extra_key[e], a.extra_val[e], &err);
        }
        lipt_config_validate(&cfg, &err);
        for (int p = 0; p < a.n_pos; p++) json_str(&j, NULL, a.pos[p]);
        json_end(&j);
        lipt_data_opts o;
        memset(&o, 0, sizeof o);
        const char *split = cli_str(&a, t == 2 ? "title" : "data-split");
        if (split) lipt_data_parse_split(split, &o, &err);
        if (t == 0) lipt_data_parse_vocab(cli_str(&a, "vocab"), &o, &err);
        if (t == 1) (void)cli_split_index(cli_str(&a, "split"));
    }
    cli_free(&a);
    free(buf);
    return 0;
}
