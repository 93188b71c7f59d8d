/* One config prologue for the commands that build a model from their options (model_config.h): defaults, --config
 * FILE, --key value, and the messages for each. */
#include "model_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_keys.h"

/* The --config file: own keys into a, the rest the model config (lipt_config_parse, whose messages keep the file's
 * line numbers). 0, or the exit status. */
static int load_file(cli_args *a, const char *cmd, const char *path, const char *const *own_keys, int n_own,
                     lipt_config *cfg) {
    lipt_error err = {0};
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, &err); /* a FIFO or device is refused, never waited on */
    if (!f) return cli_error(cmd, "--config: %s", err.msg);
    if (size > (1 << 20)) {
        fclose(f);
        return cli_error(cmd, "--config %s is %llu bytes: a config is at most 1 MiB", path, (unsigned long long)size);
    }
    char *text = calloc((size_t)size + 1, 1);
    const size_t n = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text) return cli_error(cmd, "out of memory reading %s", path);
    text[n] = 0;
    if (memchr(text, 0, n)) {
        free(text);
        return cli_error(cmd, "%s: NUL byte in config (not a text file?)", path);
    }
    char *body = strncmp(text, "\xEF\xBB\xBF", 3) == 0 ? text + 3 : text; /* a UTF-8 byte-order mark is not a key */
    if (own_keys && train_keys_from_config(a, body, path, own_keys, n_own, &err) != LIPT_OK) {
        free(text);
        return cli_error(cmd, "%s", err.msg);
    }
    const lipt_status st = lipt_config_parse(cfg, body, path, &err);
    free(text);
    return st == LIPT_OK ? 0 : (cli_fail(cmd, &err), 2); /* a wrong key or value: a usage error, as on the command line */
}

int cli_model_config(cli_args *a, const char *cmd, const char *const *own_keys, int n_own, lipt_config *cfg) {
    lipt_config_default(cfg);
    if (cli_has(a, "config")) {
        const int rc = load_file(a, cmd, cli_str(a, "config"), own_keys, n_own, cfg);
        if (rc) return rc;
    }
    lipt_error err = {0};
    for (int i = 0; i < a->n_extra; i++)
        if (lipt_config_set(cfg, a->extra_key[i], a->extra_val[i], &err) != LIPT_OK)
            return strncmp(err.msg, "unknown config key", 18) == 0
                       ? cli_error(cmd, "--%s: %s (not a lipt %s option either: see lipt %s --help)", a->extra_key[i],
                                   err.msg, cmd, cmd)
                       : cli_error(cmd, "--%s: %s", a->extra_key[i], err.msg);
    return 0;
}
