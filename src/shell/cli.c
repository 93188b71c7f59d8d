/* Option parsing from one table, usage text, errors, JSON output and timing for the lipt subcommands. */
#include "cli.h"

#include "lipt/config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <unistd.h>

void cli_usage(FILE *f, const char *cmd, const char *summary, const cli_opt *opts, int n_opts) {
    fprintf(f, "usage: lipt %s [options]\n%s\n\noptions:\n", cmd, summary);
    for (int i = 0; i < n_opts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-26s %s", left, opts[i].help);
        if (opts[i].def) fprintf(f, " (default %s)", opts[i].def);
        fputc('\n', f);
    }
    fprintf(f, "  %-26s %s\n", "--help", "show this help");
}

/* s on f with control bytes shown as \xHH (the newline too unless keep_newline). */
static void put_escaped(FILE *f, const char *s, int keep_newline) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 0x20 && !(keep_newline && *p == '\n')) || *p == 0x7f) fprintf(f, "\\x%02x", *p);
        else fputc(*p, f);
    }
}

void cli_print_text(FILE *f, const char *s) { put_escaped(f, s, 1); }

const char *cli_shown(const char *s) {
    static char buf[8][4 * 4096 + 1];
    static int next;
    if (!s) return "(null)";
    const unsigned char *p = (const unsigned char *)s;
    while (*p && *p >= 0x20 && *p != 0x7f) p++;
    if (!*p) return s; /* the usual case: nothing to escape, nothing copied */
    char *o = buf[next];
    next = (next + 1) % 8;
    size_t n = 0;
    for (p = (const unsigned char *)s; *p && n + 4 < sizeof buf[0]; p++) {
        if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(o + n, 5, "\\x%02x", *p);
        else o[n++] = (char)*p;
    }
    o[n] = 0;
    return o;
}

/* One message line on stderr with every control byte shown as \xHH: text from a file (a crafted checkpoint, a
 * corpus) must not move the cursor, recolour or retitle the user's terminal, nor split the line. */
static void put_message(const char *cmd, const char *msg) {
    if (cmd) fprintf(stderr, "lipt %s: ", cmd);
    else fputs("lipt: ", stderr);
    put_escaped(stderr, msg, 0);
    fputc('\n', stderr);
}

int cli_error(const char *cmd, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    put_message(cmd, msg);
    return 2;
}

int cli_fail(const char *cmd, const lipt_error *err) {
    put_message(cmd, err->msg[0] ? err->msg : lipt_status_name(err->status));
    return 1;
}

/* The option named `name` ('_' and '-' alike: --eval_every is --eval-every), or -1. */
static int find_opt(const cli_opt *opts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (lipt_name_eq(opts[i].name, name)) return i;
    return -1;
}

static int is_config_key(const char *name) {
    for (int k = 0; lipt_config_key_name(k); k++)
        if (lipt_name_eq(lipt_config_key_name(k), name)) return 1;
    return 0;
}

/* The alias named `name` that this command takes (its target an option, or a model key where the command takes them;
 * or one with no target, refused with its advice), or NULL. Spelled as nanoGPT does, or with '-' for '_' unless that
 * is one of lipt's own names (--init-from is lipt's, --init_from nanoGPT's). */
static const cli_alias *find_alias(const cli_alias *al, const cli_opt *opts, int n_opts, int config_keys,
                                   const char *name) {
    for (; al && al->name; al++)
        if ((strcmp(al->name, name) == 0 ||
             (lipt_name_eq(al->name, name) && find_opt(opts, n_opts, name) < 0 && !is_config_key(name))) &&
            (!al->target || find_opt(opts, n_opts, al->target) >= 0 || (config_keys && is_config_key(al->target))))
            return al;
    return NULL;
}

__attribute__((format(printf, 2, 3))) static void add_note(cli_args *a, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (a->n_notes < CLI_MAX_NOTES) a->notes[a->n_notes++] = cli_own(a, msg, strlen(msg));
}

void cli_print_notes(const cli_args *a) {
    for (int i = 0; i < a->n_notes; i++) fprintf(stderr, "note: %s\n", a->notes[i]);
}

/* nanoGPT's --init_from VALUE: scratch (lipt's default), resume (--resume), a lipt checkpoint or run folder
 * (--init-from); GPT-2 weights lipt does not have. 1: taken here; 0: *name is now lipt's --init-from; -1: error. */
static int nanogpt_init_from(cli_args *a, const char *cmd, const cli_opt *opts, int n_opts, const char *v,
                             const char **name) {
    if (strcmp(v, "scratch") == 0) {
        add_note(a, "--init_from scratch is nanoGPT's name for a new run, lipt's default: nothing to set");
        return 1;
    }
    const int r = find_opt(opts, n_opts, "resume");
    if (strcmp(v, "resume") == 0 && r >= 0) {
        a->set[r] = CLI_SET_ARGV;
        a->val[r] = "1";
        add_note(a, "--init_from resume is nanoGPT's name for lipt's --resume (continue the run in --out)");
        return 1;
    }
    if (strncmp(v, "gpt2", 4) == 0) {
        cli_error(cmd, "--init_from %s: lipt has no GPT-2 weights (its models read characters, GPT-2 reads BPE tokens); "
                  "--init_from takes scratch, resume, or a lipt checkpoint or run folder to fine-tune from", v);
        return -1;
    }
    add_note(a, "--init_from is nanoGPT's name for lipt's --init-from (fine-tune from a checkpoint or run folder)");
    *name = "init-from";
    return 0;
}

/* "unknown option --x; did you mean --y?": the nearest of the aliases the command takes (nanoGPT's names first: their
 * meaning is known, an option a few letters away may mean anything), else of the options (and, where the command
 * takes them, of the model config keys), else where to look; never the whole list. Returns -1. */
static int unknown_option(const char *cmd, const cli_opt *opts, int n_opts, const char *name, int config_keys,
                          const cli_alias *aliases) {
    const char *names[CLI_MAX_OPTS + 64];
    int m = 0;
    for (const cli_alias *al = aliases; al && al->name && m < (int)(sizeof names / sizeof names[0]); al++)
        if (find_alias(aliases, opts, n_opts, config_keys, al->name) == al) names[m++] = al->name;
    const char *nano = lipt_nearest_name(name, names, m);
    const cli_alias *al = nano ? find_alias(aliases, opts, n_opts, config_keys, nano) : NULL;
    if (al && al->target)
        return cli_error(cmd, "unknown option --%s; did you mean --%s (nanoGPT's --%s)? (lipt %s --help lists the "
                         "options)", name, al->target, al->name, cmd), -1;
    if (al) return cli_error(cmd, "unknown option --%s; nanoGPT's --%s? %s", name, al->name, al->note), -1;
    int n = 0;
    for (int i = 0; i < n_opts; i++) names[n++] = opts[i].name;
    names[n++] = "help";
    for (int k = 0; config_keys && lipt_config_key_name(k) && n < (int)(sizeof names / sizeof names[0]); k++)
        names[n++] = lipt_config_key_name(k);
    const char *near = lipt_nearest_name(name, names, n);
    if (near)
        cli_error(cmd, "unknown option --%s; did you mean --%s? (lipt %s --help lists the options)", name, near, cmd);
    else
        cli_error(cmd, "unknown option --%s (lipt %s --help lists the options%s)", name, cmd,
                  config_keys ? ", lipt help config the model keys" : "");
    return -1;
}

int cli_file_key_unknown(const char *key, const char *const *keys, int n, const char **near) {
    const char *names[CLI_MAX_OPTS + 64];
    int m = 0;
    *near = NULL;
    for (int i = 0; i < n && m < CLI_MAX_OPTS; i++) {
        if (lipt_name_eq(keys[i], key)) return 0;
        names[m++] = keys[i];
    }
    if (is_config_key(key)) return 0;
    for (int k = 0; lipt_config_key_name(k) && m < (int)(sizeof names / sizeof names[0]); k++)
        names[m++] = lipt_config_key_name(k);
    *near = lipt_nearest_name(key, names, m);
    return 1;
}

int cli_check_file_key(const char *cmd, const char *path, int line, const char *key, const char *const *keys, int n) {
    const char *near;
    if (!cli_file_key_unknown(key, keys, n, &near)) return 0;
    if (near) return cli_error(cmd, "%s:%d: unknown key '%s'; did you mean '%s'?", path, line, key, near);
    return cli_error(cmd, "%s:%d: unknown key '%s' (lipt help config lists the model and training keys)", path, line,
                     key);
}

int cli_parse(cli_args *a, const char *cmd, const char *summary, const cli_opt *opts, int n_opts, int argc, char **argv,
              int allow_extra, int max_pos) {
    return cli_parse_aliased(a, cmd, summary, opts, n_opts, NULL, argc, argv, allow_extra, max_pos);
}

int cli_parse_aliased(cli_args *a, const char *cmd, const char *summary, const cli_opt *opts, int n_opts,
                      const cli_alias *aliases, int argc, char **argv, int allow_extra, int max_pos) {
    memset(a, 0, sizeof *a);
    a->opts = opts;
    a->n_opts = n_opts;
    if (n_opts > CLI_MAX_OPTS) { cli_error(cmd, "internal: too many options"); return -1; }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            cli_usage(stdout, cmd, summary, opts, n_opts);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            if (a->n_pos >= max_pos || a->n_pos >= 8) {
                cli_error(cmd, "unexpected argument '%s' (see lipt %s --help)", arg, cmd);
                return -1;
            }
            a->pos[a->n_pos++] = arg;
            continue;
        }
        const char *name = arg + 2;
        const char *inline_val = strchr(name, '=');
        char buf[128];
        if (inline_val) {
            size_t len = (size_t)(inline_val - name);
            if (len >= sizeof buf) len = sizeof buf - 1;
            memcpy(buf, name, len);
            buf[len] = 0;
            name = buf;
            inline_val++;
        }
        const cli_alias *al = find_alias(aliases, opts, n_opts, allow_extra, name);
        if (al && !al->target) return cli_error(cmd, "--%s is nanoGPT's option, with no lipt equivalent: %s", name, al->note), -1;
        if (al && strcmp(al->name, "init_from") == 0) { /* its value says which of three things it means */
            if (!inline_val && i + 1 >= argc) { cli_error(cmd, "option '--%s' needs a value", name); return -1; }
            if (!inline_val) inline_val = argv[++i];
            const int r = nanogpt_init_from(a, cmd, opts, n_opts, inline_val, &name);
            if (r) { if (r < 0) return -1; continue; }
        } else if (al) {
            const int key = find_opt(opts, n_opts, al->target) < 0; /* a model config key */
            add_note(a, "--%s is nanoGPT's name for lipt's %s%s%s%s%s%s%s", al->name, key ? "model key " : "--",
                     al->target, key ? ", --" : "", key ? al->target : "", al->note ? " (" : "", al->note ? al->note : "",
                     al->note ? ")" : "");
            name = al->target;
        }
        int k = find_opt(opts, n_opts, name);
        if (k < 0) {
            if (!allow_extra || !is_config_key(name))
                return unknown_option(cmd, opts, n_opts, name, allow_extra, aliases);
            const char *v = inline_val;
            if (!v) {
                if (i + 1 >= argc) { cli_error(cmd, "option '--%s' needs a value", name); return -1; }
                v = argv[++i];
            }
            if (a->n_extra >= CLI_MAX_EXTRA) { cli_error(cmd, "too many options"); return -1; }
            /* keep a stable copy of the key: buf is on this stack frame */
            a->extra_key[a->n_extra] = inline_val ? cli_own(a, name, strlen(name)) : name;
            a->extra_val[a->n_extra] = v;
            a->n_extra++;
            continue;
        }
        if (opts[k].kind == CLI_FLAG) {
            if (inline_val) { cli_error(cmd, "option '--%s' takes no value", name); return -1; }
            a->set[k] = CLI_SET_ARGV;
            a->val[k] = "1";
            continue;
        }
        const char *v = inline_val;
        if (!v) {
            if (i + 1 >= argc) { cli_error(cmd, "option '--%s' needs a value (%s)", name, opts[k].metavar ? opts[k].metavar : "value"); return -1; }
            v = argv[++i];
        }
        a->set[k] = CLI_SET_ARGV;
        a->val[k] = v;
        /* validate numbers early so errors name the flag */
        if (opts[k].kind == CLI_INT) {
            long tmp;
            if (cli_int(a, opts[k].name, &tmp) < 0) return -1;
        } else if (opts[k].kind == CLI_FLOAT) {
            double tmp;
            if (cli_float(a, opts[k].name, &tmp) < 0) return -1;
        }
    }
    return 0;
}

const char *cli_own(cli_args *a, const char *s, size_t n) {
    char *c = lipt_xmalloc(n + 1);
    memcpy(c, s, n);
    c[n] = 0;
    if (a->n_owned < (int)(sizeof a->owned / sizeof a->owned[0])) a->owned[a->n_owned++] = c;
    return c; /* beyond the table (cannot happen: one per option or extra) it would leak, not fail */
}

void cli_free(cli_args *a) {
    for (int i = 0; i < a->n_owned; i++) free(a->owned[i]);
    a->n_owned = 0;
}

static int slot(const cli_args *a, const char *name) {
    int k = find_opt(a->opts, a->n_opts, name);
    if (k < 0) {
        fprintf(stderr, "lipt: internal: option --%s not in the table\n", name);
        abort();
    }
    return k;
}

int cli_has(const cli_args *a, const char *name) { return a->set[slot(a, name)]; }

const char *cli_str(const cli_args *a, const char *name) {
    int k = slot(a, name);
    return a->set[k] ? a->val[k] : a->opts[k].def;
}

const char *cli_origin(const cli_args *a, const char *name) {
    const int k = slot(a, name);
    return a->set[k] == CLI_SET_BY_CKPT     ? " (the value stored in the checkpoint being resumed)"
           : a->set[k] == CLI_SET_BY_CONFIG ? " (from the --config file)"
                                            : "";
}

/* A value that is not a number: one line, its bytes escaped (it may come from a file). */
static int bad_number(const cli_args *a, const char *name, const char *what, const char *s) {
    char msg[1400];
    snprintf(msg, sizeof msg, "--%s expects %s, got '%.1200s'%s", name, what, s, cli_origin(a, name));
    put_message(NULL, msg);
    return -1;
}

int cli_int(const cli_args *a, const char *name, long *out) {
    const char *s = cli_str(a, name);
    if (!s) { *out = 0; return 0; }
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || end == s || *end) return bad_number(a, name, "an integer", s);
    *out = v;
    return 0;
}

int cli_float(const cli_args *a, const char *name, double *out) {
    const char *s = cli_str(a, name);
    if (!s) { *out = 0; return 0; }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || end == s || *end || !isfinite(v)) return bad_number(a, name, "a number", s);
    *out = v;
    return 0;
}

int cli_apply_threads(const cli_args *a, const char *cmd) {
    if (!cli_has(a, "threads")) {
        lipt_threads_note(); /* the count lipt chose, said once; none after --threads N */
        return 0;
    }
    long n;
    if (cli_int(a, "threads", &n) < 0) return 2;
    if (n < 1 || n > 1024) return cli_error(cmd, "--threads must be in [1, 1024], got %ld", n);
    lipt_set_threads((int)n);
    return 0;
}

int cli_apply_precision(const cli_args *a, const char *cmd, lipt_precision *precision) {
    const char *v = cli_has(a, "precision") ? cli_str(a, "precision") : NULL;
    if (v) {
        int k = 0;
        char names[128] = "";
        for (; k < LIPT_PRECISION_COUNT && strcmp(v, lipt_precision_name((lipt_precision)k)) != 0; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                     lipt_precision_name((lipt_precision)k));
        if (k == LIPT_PRECISION_COUNT) return cli_error(cmd, "--precision '%s' is not one of: %s", v, names);
        *precision = (lipt_precision)k;
    }
    lipt_error err = {0};
    return lipt_precision_check(*precision, &err) == LIPT_OK ? 0 : cli_fail(cmd, &err);
}

int cli_split_index(const char *name) {
    static const char *const names[3] = {"train", "valid", "test"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* ---- JSON ---- */
static void json_sep(json_w *j) {
    if (!j->first[j->depth]) fputc(',', j->f);
    j->first[j->depth] = 0;
}
/* Length of the well-formed UTF-8 sequence at p (1-4), or 0 when p does not start one (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF). */
static int utf8_len(const unsigned char *p) {
    const unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
    else return 0;
    unsigned cp = c & (0x3Fu >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* A JSON string of arbitrary bytes: valid UTF-8 passes through, every other byte b is written as \u00XX (its
 * Latin-1 reading), so the output is always valid JSON in UTF-8 (a byte-level model's samples included). */
static void json_string_raw(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"': fputs("\\\"", f); p++; continue;
        case '\\': fputs("\\\\", f); p++; continue;
        case '\n': fputs("\\n", f); p++; continue;
        case '\r': fputs("\\r", f); p++; continue;
        case '\t': fputs("\\t", f); p++; continue;
        default: break;
        }
        const int n = utf8_len(p);
        if (*p < 0x20 || *p == 0x7f || n == 0) {
            fprintf(f, "\\u%04x", *p);
            p++;
        } else {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        }
    }
    fputc('"', f);
}
void json_begin(json_w *j, FILE *f) {
    memset(j, 0, sizeof *j);
    j->f = f;
    fputc('{', f);
    j->first[0] = 1;
}
void json_end(json_w *j) {
    fputs("}\n", j->f);
    fflush(j->f);
}
void json_key(json_w *j, const char *k) {
    json_sep(j);
    if (k) {
        json_string_raw(j->f, k);
        fputc(':', j->f);
    }
}
void json_obj_open(json_w *j, const char *k) {
    json_key(j, k);
    fputc('{', j->f);
    j->first[++j->depth] = 1;
}
void json_obj_close(json_w *j) {
    fputc('}', j->f);
    j->depth--;
}
void json_arr_open(json_w *j, const char *k) {
    json_key(j, k);
    fputc('[', j->f);
    j->first[++j->depth] = 1;
}
void json_arr_close(json_w *j) {
    fputc(']', j->f);
    j->depth--;
}
void json_num(json_w *j, const char *k, double v) {
    json_key(j, k);
    if (isfinite(v)) fprintf(j->f, "%.9g", v);
    else fputs("null", j->f);
}
void json_int(json_w *j, const char *k, long long v) {
    json_key(j, k);
    fprintf(j->f, "%lld", v);
}
void json_str(json_w *j, const char *k, const char *s) {
    json_key(j, k);
    json_string_raw(j->f, s ? s : "");
}
void json_null(json_w *j, const char *k) {
    json_key(j, k);
    fputs("null", j->f);
}
void json_bool(json_w *j, const char *k, int v) {
    json_key(j, k);
    fputs(v ? "true" : "false", j->f);
}

const char *cli_f32_text(float v, char *buf, size_t n) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) break; /* 9 digits always read back */
    }
    return buf;
}

void json_num_f32(json_w *j, const char *k, float v) {
    char buf[32];
    json_key(j, k);
    fputs(isfinite(v) ? cli_f32_text(v, buf, sizeof buf) : "null", j->f);
}

/* 1 when s[0..n) is a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int is_json_number(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        const size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        const size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    return i == n;
}

void json_kv_lines(json_w *j, const char *k, const char *text, const char *const *strings) {
    json_obj_open(j, k);
    for (const char *p = text ? text : ""; *p;) {
        const size_t len = strcspn(p, "\n"), kl = strcspn(p, "=");
        if (kl < len) {
            size_t k0 = 0, k1 = kl, v0 = kl + 1, v1 = len;
            while (k0 < k1 && (p[k0] == ' ' || p[k0] == '\t')) k0++;
            while (k1 > k0 && (p[k1 - 1] == ' ' || p[k1 - 1] == '\t')) k1--;
            while (v0 < v1 && (p[v0] == ' ' || p[v0] == '\t')) v0++;
            while (v1 > v0 && (p[v1 - 1] == ' ' || p[v1 - 1] == '\t' || p[v1 - 1] == '\r')) v1--;
            char key[256], val[1200];
            snprintf(key, sizeof key, "%.*s", (int)(k1 - k0), p + k0);
            snprintf(val, sizeof val, "%.*s", (int)(v1 - v0), p + v0);
            int text_key = 0;
            for (int i = 0; strings && strings[i]; i++) text_key |= strcmp(strings[i], key) == 0;
            if (key[0] && !text_key && is_json_number(val, strlen(val))) {
                json_key(j, key);
                fputs(val, j->f);
            } else if (key[0]) json_str(j, key, val);
        }
        p += len + (p[len] == '\n');
    }
    json_obj_close(j);
}

void cli_print_wrapped(FILE *f, const char *prefix, const char *text, int width) {
    text = cli_shown(text); /* a description names the corpus's file */
    const int indent = (int)strlen(prefix);
    int col = fprintf(f, "%s", prefix), fresh = 1; /* fresh: nothing after the prefix or indent yet */
    for (const char *p = text; *p;) {
        /* the next clause p[0..n), and its first word p[0..w) */
        const char *semi = strstr(p, "; ");
        const int n = semi ? (int)(semi - p) : (int)strlen(p);
        if (!fresh && col + 2 + n <= width) { /* the whole clause fits after the previous one */
            col += fprintf(f, "; %.*s", n, p);
        } else {
            if (!fresh) col = fprintf(f, "\n%*s", indent, "") - 1;
            for (int i = 0; i < n;) { /* word by word */
                int w = 0;
                while (i + w < n && p[i + w] != ' ') w++;
                if (col > indent && col + 1 + w > width) col = fprintf(f, "\n%*s", indent, "") - 1;
                else if (col > indent) col += fprintf(f, " ");
                col += fprintf(f, "%.*s", w, p + i);
                i += w;
                while (i < n && p[i] == ' ') i++;
            }
        }
        fresh = 0;
        p += n + (semi ? 2 : 0);
    }
    fputc('\n', f);
}

int cli_stderr_is_tty(void) { return isatty(2); }

int cli_terminal_width(int fd) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    const int n = c ? atoi(c) : 0;
    return n > 0 ? n : 80;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
