/* libFuzzer target: a run config's training keys (lipt train --config FILE, a run's run.cfg), as lipt train reads the
 * file (src/shell/model_config.c): the text (a file with a NUL byte is refused there, so such inputs stop here; a
 * UTF-8 byte-order mark is skipped), train_keys_from_config into lipt train's own option table, then the rest
 * through lipt_config_parse, and the options read back as the command does. The first byte picks the command line
 * the file is combined with (none, or options already given, which the file must not override).
 * Build and run: scripts/fuzz.sh run_config SECONDS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/config.h"
#include "train_keys.h"
#include "use_train_options.h"

static char *argv0[] = {NULL};
static char *argv1[] = {"--steps", "7", "--lr", "0.5", "--data", "given", NULL};
static char *argv2[] = {"--schedule", "cosine", "--data-split", "0.8,0.1,0.1", "--unk", NULL};
static char **const ARGVS[] = {argv0, argv1, argv2};
static const int ARGCS[] = {0, 6, 5};

/* What train_keys_from_config promises: the text keeps its length and its line ends (the model config's line numbers
 * stay right); an option filled from the file holds a value without a line end, a comment or surrounding blanks. */
static void check(const cli_args *a, const char *before, const char *after, size_t n) {
    if (strlen(after) != n) abort();
    for (size_t i = 0; i < n; i++)
        if ((before[i] == '\n' || before[i] == '\r' || after[i] == '\n' || after[i] == '\r') && before[i] != after[i])
            abort();
    for (int k = 0; k < a->n_opts; k++) {
        if (a->set[k] != CLI_SET_BY_CONFIG) continue;
        const char *v = a->val[k];
        const size_t vl = v ? strlen(v) : 0;
        if (!v || strpbrk(v, "\r\n#") || vl >= 1024) abort();
        if (vl && (v[0] == ' ' || v[0] == '\t' || v[vl - 1] == ' ' || v[vl - 1] == '\t')) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    const size_t n = size - 1;
    if (memchr(data + 1, 0, n)) return 0; /* lipt train refuses the file */
    char *text = malloc(n + 1), *orig = malloc(n + 1);
    memcpy(text, data + 1, n);
    text[n] = 0;
    memcpy(orig, text, n + 1);
    const size_t bom = strncmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;

    const int c = data[0] % 3;
    cli_args a;
    int n_opts, n_keys;
    const cli_opt *opts = train_options(&n_opts);
    const char *const *keys = train_persisted_keys(&n_keys);
    if (cli_parse(&a, "fuzz", "", opts, n_opts, ARGCS[c], ARGVS[c], 1, 0) != 0) abort();
    lipt_error err = {0};
    const lipt_status st = train_keys_from_config(&a, text + bom, "fuzz.cfg", keys, n_keys, &err);
    if (st != LIPT_OK) {
        if (!strstr(err.msg, "set twice") && !strstr(err.msg, "unknown key")) abort(); /* the two refusals */
    } else {
        check(&a, orig + bom, text + bom, n - bom);
        /* options given on the command line are never overridden by the file */
        for (int i = 0; i + 1 < ARGCS[c]; i++)
            if (strncmp(ARGVS[c][i], "--", 2) == 0 && strcmp(ARGVS[c][i], "--unk") != 0 &&
                strcmp(cli_str(&a, ARGVS[c][i] + 2), ARGVS[c][i + 1]) != 0)
                abort();
        lipt_config cfg;
        if (lipt_config_parse(&cfg, text + bom, "fuzz.cfg", &err) == LIPT_OK) {
            char out[8192];
            lipt_config_to_text(&cfg, out, sizeof out);
        }
        use_train_options(&a);
    }
    cli_free(&a);
    free(orig);
    free(text);
    return 0;
}
