/* defines: the command-line option table (one table drives parsing and --help), JSON output, progress lines. */
#ifndef LIPT_CLI_H
#define LIPT_CLI_H

#include <stdio.h>

#include "lipt/autograd.h" /* lipt_reversible (--memory invert) */
#include "lipt/train.h"    /* lipt_train_memory (cli_memory_refuse) */
#include "lipt/core.h"

typedef enum { CLI_FLAG, CLI_INT, CLI_FLOAT, CLI_STRING } cli_kind;

typedef struct {
    const char *name;     /* without the leading "--" */
    cli_kind kind;
    const char *metavar;  /* shown in --help */
    const char *help;
    const char *def;      /* default as text, or NULL */
} cli_opt;

#define CLI_MAX_OPTS 64
#define CLI_MAX_EXTRA 64
#define CLI_MAX_NOTES 16

/* Another program's option name (nanoGPT's) accepted for one of lipt's: target is the option or model config key of
 * the same meaning, or NULL when lipt has none (then the name is refused with note, which says what to use); note,
 * when set, adds what differs. A table ends with a NULL name. */
typedef struct {
    const char *name, *target, *note;
} cli_alias;

/* Parsed values: one slot per option of the table, plus unknown "--key value" pairs kept for the
 * model config (every config key can be set on the command line). */
/* Where a set option's value came from (cli_args.set): the command line, or filled in by lipt train from the
 * checkpoint being resumed or from a --config file; messages name the origin rather than blame a flag. */
enum { CLI_SET_ARGV = 1, CLI_SET_BY_CKPT = 2, CLI_SET_BY_CONFIG = 3 };

typedef struct {
    const cli_opt *opts;
    int n_opts;
    int set[CLI_MAX_OPTS]; /* 0: not set; else a CLI_SET_* */
    const char *val[CLI_MAX_OPTS];
    int n_extra;
    const char *extra_key[CLI_MAX_EXTRA], *extra_val[CLI_MAX_EXTRA];
    int n_pos;
    const char *pos[8];
    int n_owned;
    char *owned[CLI_MAX_OPTS + CLI_MAX_EXTRA + CLI_MAX_NOTES]; /* strings the parser or a caller allocated (cli_free) */
    int n_notes;
    const char *notes[CLI_MAX_NOTES]; /* one line per alias taken ("--max_iters is nanoGPT's name for --steps") */
    char ckpt_path[4112];  /* --ckpt resolved from a run folder (run_ckpt_option): held here, not on the heap, so that
                            * the many commands returning without cli_free leak nothing */
} cli_args;

/* Parse argv (after the subcommand name); option names take '_' for '-' (--eval_every is --eval-every). Returns 0, 1
 * if --help was printed, or -1 with a one-line error already printed (an unknown option names the nearest one).
 * allow_extra: --key value pairs naming a model config key (lipt_config_key_name) are collected in extra_*. */
int cli_parse(cli_args *a, const char *cmd, const char *summary, const cli_opt *opts, int n_opts, int argc, char **argv,
              int allow_extra, int max_pos);
/* cli_parse that also takes the names of aliases (those whose target this command has), each noted in a->notes, and
 * whose "did you mean" prefers them. nanoGPT's init_from keeps its meaning: scratch (a new run, lipt's default),
 * resume (--resume), or a checkpoint (--init-from); gpt2* is refused (lipt has no GPT-2 weights). */
int cli_parse_aliased(cli_args *a, const char *cmd, const char *summary, const cli_opt *opts, int n_opts,
                      const cli_alias *aliases, int argc, char **argv, int allow_extra, int max_pos);
/* a->notes on stderr, "note: " before each. */
void cli_print_notes(const cli_args *a);
/* A key of a run config (`key = value`) that is neither one of the command's keys (keys[0..n)) nor a model config
 * key: prints "FILE:LINE: unknown key 'x'; did you mean 'y'?" (the nearest of both kinds) and returns 2; returns 0
 * for a known key. */
int cli_check_file_key(const char *cmd, const char *path, int line, const char *key, const char *const *keys, int n);
/* 1 when key is neither one of keys (`_` = `-`) nor a model key; *near: the nearest name, or NULL. */
int cli_file_key_unknown(const char *key, const char *const *keys, int n, const char **near);
/* Duplicate n bytes of s as a string owned by a (freed by cli_free). */
const char *cli_own(cli_args *a, const char *s, size_t n);
void cli_free(cli_args *a);
void cli_usage(FILE *f, const char *cmd, const char *summary, const cli_opt *opts, int n_opts);

int cli_has(const cli_args *a, const char *name);
const char *cli_str(const cli_args *a, const char *name);      /* value or default (may be NULL) */
/* Typed getters: print a one-line error and return -1 on a malformed value. */
/* " (the value stored in the checkpoint being resumed)" / " (from the --config file)" for a value that did not come
 * from the command line, else "": appended to messages about a value, so they do not blame a flag never typed. */
const char *cli_origin(const cli_args *a, const char *name);
int cli_int(const cli_args *a, const char *name, long *out);
int cli_float(const cli_args *a, const char *name, double *out);

/* Applies --threads N (OpenMP and OpenBLAS) when given: 0, or the exit status 2 after a one-line error. */
int cli_apply_threads(const cli_args *a, const char *cmd);

/* The --precision option of train, eval, sample and bench; `dflt` says where the value comes from without it. */
#define CLI_OPT_PRECISION(dflt)                                                                                     \
    {"precision", CLI_STRING, "P",                                                                                  \
     "arithmetic of the model's matrix products: float32, bf16 (oneDNN; CPUs with AVX512_BF16) or bf16-emulated "    \
     "(bf16's numerics on any CPU, not faster); softmax, norms, losses, weights and optimizer stay float32 "          \
     "(default: " dflt ")",                                                                                        \
     NULL}
/* --precision P, when given, into cfg->precision (the config key precision); then whether this build and CPU can run
 * cfg->precision at all, so that an impossible request fails before any work. 0, 2 (an unknown value, the valid ones
 * listed) or 1 (unavailable here: what is missing and the alternatives), the message printed. */
int cli_apply_precision(const cli_args *a, const char *cmd, lipt_precision *precision);
/* --memory and its knobs, in train's and bench's option tables (cli_apply_memory reads them). */
#define CLI_OPTS_MEMORY                                                                                              \
    {"memory", CLI_STRING, "MODE",                                                                                  \
     "what training keeps between forward and backward: store (every activation), recompute (each half-block's "    \
     "output; the inside rerun in the backward: less memory for about a third more compute), invert (only the "     \
     "top block's output: each block's input rebuilt from its output in the backward, so activation memory does "    \
     "not grow with depth; invertible and coupling models only)", "store"},                                         \
    {"recompute", CLI_FLAG, NULL, "the same as --memory recompute", NULL},                                          \
    {"invert-tol", CLI_FLOAT, "TOL", "--memory invert on a fixed-point model: rebuild each block input until the "  \
     "certificate's a-posteriori bound on its error, relative, is at most TOL (default 1e-5; with bf16 products "  \
     "1e-3, their rounding being a floor the iteration cannot go below)", NULL},                                     \
    {"invert-accel", CLI_INT, "M", "--memory invert: Anderson mixing of the last M iterates (0: plain fixed-point " \
     "iteration)", "5"},                                                                                           \
    {"keep-every", CLI_INT, "K", "--memory invert: also keep the true input of every K-th half-block, so that "   \
     "reconstruction error cannot compound over more than K (0: only the first block's input)", "0"}
/* The memory mode: *mode 0 store, 1 recompute, 2 invert; rev filled from the knobs (lipt_reversible_defaults first).
 * 0, or the exit status 2 after a one-line error (an unknown mode, --recompute with another --memory, bad knobs). */
enum { CLI_MEMORY_STORE, CLI_MEMORY_RECOMPUTE, CLI_MEMORY_INVERT };
int cli_apply_memory(const cli_args *a, const char *cmd, int *mode, lipt_reversible *rev);
const char *cli_memory_name(int mode);
/* A run too large for this process (lipt_train_memory_estimate's m, at batch B x seq_len T, --memory mode): prints what
 * it needs and what to lower, returns the exit status 1. */
int cli_memory_refuse(const char *cmd, const lipt_train_memory *m, long B, long T, int mode);
/* "train" / "valid" / "test" -> 0 / 1 / 2 (the data layer's LIPT_TRAIN...), -1 otherwise. */
int cli_split_index(const char *name);

/* Print "lipt CMD: message" on stderr and return the exit status 2 (usage) or 1 (runtime). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_fail(const char *cmd, const lipt_error *err);

/* Minimal JSON writer for --json output: one object on stdout, keys documented per subcommand. */
typedef struct { FILE *f; int depth; int first[16]; } json_w;
void json_begin(json_w *j, FILE *f);
void json_end(json_w *j);                 /* closes the top object and writes a newline */
void json_key(json_w *j, const char *k);
void json_obj_open(json_w *j, const char *k);   /* k NULL inside arrays */
void json_obj_close(json_w *j);
void json_arr_open(json_w *j, const char *k);
void json_arr_close(json_w *j);
void json_num(json_w *j, const char *k, double v);  /* NaN/inf written as null */
void json_int(json_w *j, const char *k, long long v);
void json_str(json_w *j, const char *k, const char *s);
void json_null(json_w *j, const char *k);
void json_bool(json_w *j, const char *k, int v);
/* A float32 value (a model config key, a bound computed in float32) with the fewest digits (6 to 9) that read back
 * as the same float32: 0.9f is 0.9, not 0.899999976. NaN/inf as null. */
void json_num_f32(json_w *j, const char *k, float v);
/* An object from `key = value` (or key=value) lines, as a config or a checkpoint's training options are stored: values
 * that are JSON numbers as written stay numbers (digits kept exactly), the others strings, and so are the values of
 * the keys in strings (NULL-terminated, or NULL: none), whose digits are not a quantity (a CRC-32 in hex). */
void json_kv_lines(json_w *j, const char *k, const char *text, const char *const *strings);
/* The float32 v with the fewest digits (6 to 9, %g) that read back as v, into buf; returns buf. */
const char *cli_f32_text(float v, char *buf, size_t n);
/* Text from a file (a checkpoint's config, a metrics line, a stored path) on f with every control byte but the
 * newline shown as \xHH, as messages do: it must not move the cursor or retitle the user's terminal. */
void cli_print_text(FILE *f, const char *s);
/* A path (or any text from outside: a file name, a stored corpus location) for a printf %s: s itself when it holds no
 * control byte, else a copy with each shown as \xHH (one of 8 buffers used in turn, so one line may show several;
 * cut at 4096 bytes of s). A file named "a\x1b[31m" must not recolour the terminal of whoever lists its runs. */
const char *cli_shown(const char *s);

/* prefix and text on f in lines of at most width columns: text's "; "-separated clauses packed greedily, a clause
 * too long for a line broken at spaces (a word longer than a line stays whole); continuation lines indented by
 * prefix's length. For the descriptions printed before a run (model, data), which used to wrap in a terminal. */
void cli_print_wrapped(FILE *f, const char *prefix, const char *text, int width);

/* Progress on stderr: \r-updated when stderr is a terminal, nothing otherwise (the JSONL log records all). */
int cli_stderr_is_tty(void);
/* Columns of the terminal on fd (TIOCGWINSZ, else $COLUMNS, else 80). */
int cli_terminal_width(int fd);
double cli_now(void); /* monotonic seconds */

#endif
