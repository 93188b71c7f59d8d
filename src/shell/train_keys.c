/* lipt train's options from a run config's training keys and from a checkpoint's stored options (train_keys.h). */
#include "train_keys.h"

#include <string.h>

int train_key_index(const char *const *keys, int n_keys, const char *key) {
    for (int i = 0; i < n_keys; i++) {
        const char *a = keys[i], *b = key;
        while (*a && *b && (*a == *b || (*a == '-' && *b == '_'))) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

/* One `key = value` line [line, end): a training key fills its option (unless given) and the line is blanked. 0, or
 * the index + 1 of a training key, for the caller's duplicate check; -1 for another key (copied to other). */
static int take_line(cli_args *ap, char *line, char *end, const char *const *keys, int n_keys, char other[64]) {
    char *eq = memchr(line, '=', (size_t)(end - line)), *hash = memchr(line, '#', (size_t)(end - line));
    if (!eq || (hash && hash < eq)) return 0;
    char key[64] = "", val[1024] = "";
    const char *k0 = line, *k1 = eq;
    while (k0 < k1 && (*k0 == ' ' || *k0 == '\t')) k0++;
    while (k1 > k0 && (k1[-1] == ' ' || k1[-1] == '\t')) k1--;
    const char *v0 = eq + 1, *v1 = hash && hash < end ? hash : end;
    while (v0 < v1 && (*v0 == ' ' || *v0 == '\t')) v0++;
    while (v1 > v0 && (v1[-1] == ' ' || v1[-1] == '\t' || v1[-1] == '\r')) v1--;
    if (k1 - k0 >= (long)sizeof key || v1 - v0 >= (long)sizeof val) return 0;
    memcpy(key, k0, (size_t)(k1 - k0));
    memcpy(val, v0, (size_t)(v1 - v0));
    const int t = train_key_index(keys, n_keys, key);
    if (t < 0) {
        memcpy(other, key, sizeof key);
        return -1;
    }
    for (int o = 0; o < ap->n_opts; o++)
        if (strcmp(ap->opts[o].name, keys[t]) == 0 && !ap->set[o]) {
            ap->set[o] = CLI_SET_BY_CONFIG;
            ap->val[o] = cli_own(ap, val, strlen(val));
        }
    return t + 1;
}

lipt_status train_keys_from_config(cli_args *ap, char *text, const char *path, const char *const *keys, int n_keys,
                                   lipt_error *err) {
    int first_line[CLI_MAX_OPTS] = {0}, lineno = 0;
    if (n_keys > CLI_MAX_OPTS) return lipt_fail(err, LIPT_ERR_INTERNAL, "too many training keys");
    for (char *line = text; *line;) {
        /* lines end as lipt_config_parse ends them: \n, \r\n or a lone \r */
        char *end = line + strcspn(line, "\r\n");
        lineno++;
        char other[64];
        const int r = take_line(ap, line, end, keys, n_keys, other), t = r - 1;
        const char *near;
        if (r < 0 && cli_file_key_unknown(other, keys, n_keys, &near)) /* a typo, not a setting to ignore */
            return near ? lipt_fail(err, LIPT_ERR_ARG, "%s:%d: unknown key '%s'; did you mean '%s'?", path, lineno,
                                    other, near)
                        : lipt_fail(err, LIPT_ERR_ARG, "%s:%d: unknown key '%s' (lipt help config lists the model "
                                    "and training keys)", path, lineno, other);
        if (t >= 0 && first_line[t]) /* as for model keys: a repeated key is a mistake, not an override */
            return lipt_fail(err, LIPT_ERR_ARG, "%s:%d: %s set twice (first at line %d)", path, lineno, keys[t],
                             first_line[t]);
        if (t >= 0) {
            first_line[t] = lineno;
            memset(line, ' ', (size_t)(end - line)); /* not a model key: blank, so line numbers stay */
        }
        line = end;
        if (*line == '\r' && line[1] == '\n') line += 2;
        else if (*line) line++;
    }
    return LIPT_OK;
}

void train_keys_from_ckpt(cli_args *ap, const char *opts_text) {
    for (const char *p = opts_text; p && *p;) {
        const char *eq = strchr(p, '='), *nl = strchr(p, '\n');
        if (!eq || !nl || eq > nl) break;
        char key[64];
        size_t kl = (size_t)(eq - p) < sizeof key - 1 ? (size_t)(eq - p) : sizeof key - 1;
        memcpy(key, p, kl);
        key[kl] = 0;
        for (int k = 0; k < ap->n_opts; k++)
            if (strcmp(ap->opts[k].name, key) == 0 && !ap->set[k]) {
                ap->set[k] = CLI_SET_BY_CKPT;
                ap->val[k] = cli_own(ap, eq + 1, (size_t)(nl - eq - 1));
            }
        p = nl + 1;
    }
}
