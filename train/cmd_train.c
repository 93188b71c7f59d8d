/* lipt train: options, resume merging and setup of a training run; the loop and the final report are in
 * train_loop.c (AdamW, schedules, clipping, periodic evaluation, best and last checkpoints, resume, SIGINT/SIGTERM
 * save, divergence stop, JSONL metrics). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "lipt/evaluate.h"
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"

/* Options stored in the checkpoint ("persist") are restored on --resume unless given again. */
static const cli_opt train_opts[] = {
    {"config", CLI_STRING, "FILE", "run config: model keys and training keys (key = value, e.g. a run's run.cfg); every key can also be given as --key value", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus: ptb, enwik8, text8, tinyshakespeare, warandpeace or a file", "ptb"},
    {"out", CLI_STRING, "DIR", "run directory (checkpoints, metrics.jsonl, run.cfg); default: a new runs/YYYYMMDD-HHMMSS "
     "(with --resume: the folder of --ckpt)", NULL},
    {"force", CLI_FLAG, NULL, "train afresh into an --out that holds another run (its checkpoints and metrics are replaced); "
     "with --resume, continue on a corpus other than the one the checkpoint was trained on (its CRC-32 differs)", NULL},
    {"steps", CLI_INT, "N", "total optimizer steps", "1000"},
    {"batch", CLI_INT, "B", "sequences per step", "32"},
    {"lr", CLI_FLOAT, "LR", "peak learning rate", "1e-3"},
    {"schedule", CLI_STRING, "KIND", "learning rate: invsqrt (warmup then 1/sqrt), constant, cosine", "invsqrt"},
    {"warmup", CLI_INT, "N", "linear warmup steps", "100"},
    {"min-lr", CLI_FLOAT, "LR", "cosine floor", "0"},
    {"beta1", CLI_FLOAT, "B1", "Adam beta1", "0.9"},
    {"beta2", CLI_FLOAT, "B2", "Adam beta2", "0.98"},
    {"adam-eps", CLI_FLOAT, "EPS", "Adam epsilon", "1e-8"},
    {"weight-decay", CLI_FLOAT, "WD", "decoupled weight decay (not on biases, norms, embeddings)", "0"},
    {"clip", CLI_FLOAT, "NORM", "global gradient-norm clipping (0: off)", "1.0"},
    {"optimizer", CLI_STRING, "NAME", "adamw, or muon: orthogonalised momentum (Newton-Schulz) on the hidden layers' "
     "weight matrices, AdamW on embeddings, head, biases and gains (README: Optimizers); --resume keeps the run's",
     "adamw"},
    {"muon-lr", CLI_FLOAT, "LR", "Muon's peak learning rate, on the --schedule's shape (default: --lr)", NULL},
    {"seed", CLI_INT, "S", "data order and dropout seed (init: the config's init_seed)", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS or all cores)", NULL},
    {"recompute", CLI_FLAG, NULL, "keep only each half-block's output between forward and backward and rerun its "
     "inside in the backward (the feed-forward in pieces of 1024 tokens): less memory for about a third more compute; "
     "the same results, bit for bit up to 1024 tokens per step (long contexts: docs/PERFORMANCE.md)", NULL},
    CLI_OPT_PRECISION("the config's key precision, float32; on --resume the checkpoint's, which --precision may "
                      "change"),
    {"eval-every", CLI_INT, "N", "evaluate on the validation subset every N steps (0: only at the end)", "200"},
    {"eval-symbols", CLI_INT, "N", "validation symbols per periodic evaluation (0: all)", "200000"},
    {"final-eval", CLI_STRING, "SPLITS", "full evaluation at the end: valid,test | valid | test | none", "valid,test"},
    {"final-from", CLI_STRING, "WHICH", "the weights the final evaluation scores: last (the last step's) or best "
     "(best.ckpt's: the lowest periodic validation BPC; under MPI every rank reads it, as --resume reads last.ckpt)",
     "last"},
    {"patience", CLI_INT, "N", "early stopping: stop when N periodic validation evaluations in a row did not improve "
     "the best validation BPC (last.ckpt and metrics.jsonl record the stop; the count survives --resume; 0: off)", "0"},
    {"save-every", CLI_INT, "N", "write last.ckpt every N steps, besides every evaluation and the end (0: not by steps)",
     "500"},
    {"save-minutes", CLI_FLOAT, "M", "also write last.ckpt when M minutes passed since the last one (0: not by time)", "5"},
    {"log-every", CLI_INT, "N", "metrics.jsonl line every N steps", "10"},
    {"vocab", CLI_STRING, "KIND", "vocabulary: auto, bytes, built (from the training split)", "auto"},
    {"data-split", CLI_STRING, "HOW", "auto, standard (PTB files; enwik8/text8 90M/5M/5M) or fractions F0,F1,F2", "auto"},
    {"unk", CLI_FLAG, NULL, "reserve an unknown-symbol id for symbols unseen in training (default: unseen is an error)", NULL},
    {"resume", CLI_FLAG, NULL, "continue from --ckpt FILE or DIR/last.ckpt (same loss curve as an uninterrupted run)", NULL},
    {"ckpt", CLI_STRING, "FILE", "checkpoint to resume from", NULL},
    {"check-every", CLI_INT, "N", "under MPI: compare a parameter checksum across ranks every N steps (0: only at start and end)", "100"},
    {"json", CLI_FLAG, NULL, "print the final summary as one JSON object on stdout", NULL},
    {"quiet", CLI_FLAG, NULL, "no progress output", NULL},
};
#define N_TRAIN_OPTS ((int)(sizeof train_opts / sizeof train_opts[0]))
static const char *persisted[] = {"data", "steps", "batch", "lr", "schedule", "warmup", "min-lr", "beta1", "beta2",
                                  "adam-eps", "weight-decay", "clip", "seed", "eval-every", "eval-symbols",
                                  "final-eval", "final-from", "patience", "save-every", "save-minutes", "log-every",
                                  "vocab", "data-split", "unk", "optimizer", "muon-lr"};
#define N_PERSISTED ((int)(sizeof persisted / sizeof persisted[0]))

/* Keep metrics.jsonl lines up to `step` (a resumed run rewrites what came after its checkpoint). */
static lipt_status truncate_metrics(const char *path, int64_t step, lipt_error *err) {
    FILE *f = lipt_open_regular(path, NULL, err); /* a FIFO there is refused, never waited on */
    if (!f) return errno == ENOENT ? LIPT_OK : err->status; /* missing: no log yet */
    char line[4096];
    int later = 0; /* a line past the checkpoint's step: only then is there anything to rewrite */
    while (!later && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        later = s && atoll(s + 7) > step;
    }
    if (!later) {
        fclose(f);
        return LIPT_OK;
    }
    rewind(f);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *g = lipt_create_fresh(tmp, "w"); /* never written through a planted symlink */
    if (!g) {
        const int e = errno;
        fclose(f);
        return lipt_fail(err, LIPT_ERR_IO, "cannot rewrite %s to step %lld: %s; nothing changed", path, (long long)step,
                         strerror(e));
    }
    int bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        if ((s ? atoll(s + 7) : 0) <= step) bad = fputs(line, g) < 0;
    }
    fclose(f);
    /* the log is replaced only once its new contents are safely on disk (a full disk must not empty it) */
    bad = bad || fflush(g) != 0 || fsync(fileno(g)) != 0 || ferror(g);
    const int e = errno;
    bad = fclose(g) != 0 || bad;
    if (bad || rename(tmp, path) != 0) {
        const int e2 = bad ? e : errno;
        unlink(tmp);
        return lipt_fail(err, LIPT_ERR_IO, "cannot rewrite %s to step %lld: %s; nothing changed", path, (long long)step,
                         strerror(e2));
    }
    return LIPT_OK;
}

static int parse_final_eval(const char *s, int *valid, int *test) {
    *valid = *test = 0;
    if (strcmp(s, "none") == 0) return 0;
    if (strcmp(s, "valid,test") == 0 || strcmp(s, "test,valid") == 0) { *valid = *test = 1; return 0; }
    if (strcmp(s, "valid") == 0) { *valid = 1; return 0; }
    if (strcmp(s, "test") == 0) { *test = 1; return 0; }
    return -1;
}

/* Index of a persisted training option named `key` ('_' and '-' alike), or -1. */
static int training_key(const char *key) {
    for (int i = 0; i < N_PERSISTED; i++) {
        const char *a = persisted[i], *b = key;
        while (*a && *b && (*a == *b || (*a == '-' && *b == '_'))) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

/* A run config: model keys and training keys (steps, lr, data, ... as in run.cfg) in one `key = value` file.
 * Training keys fill in the options not given on the command line; the rest is the model config (lipt_config_parse,
 * whose messages keep the file's line numbers). 0, or the exit status. */
static int load_run_config(cli_args *ap, const char *path, lipt_config *cfg) {
    const char *C = "train";
    lipt_error err = {0};
    uint64_t size = 0;
    FILE *f = lipt_open_regular(path, &size, &err); /* a FIFO or device is refused, never waited on */
    if (!f) return cli_error(C, "--config: %s", err.msg);
    if (size > (1 << 20)) {
        fclose(f);
        return cli_error(C, "--config %s is %llu bytes: a config is at most 1 MiB", path, (unsigned long long)size);
    }
    char *text = calloc((size_t)size + 1, 1);
    const size_t n = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text) return cli_error(C, "out of memory reading %s", path);
    text[n] = 0;
    if (memchr(text, 0, n)) {
        free(text);
        return cli_error(C, "%s: NUL byte in config (not a text file?)", path);
    }
    char *body = strncmp(text, "\xEF\xBB\xBF", 3) == 0 ? text + 3 : text; /* a UTF-8 byte-order mark is not a key */
    int first_line[N_PERSISTED] = {0}, lineno = 0;
    for (char *line = body; *line;) {
        /* lines end as lipt_config_parse ends them: \n, \r\n or a lone \r */
        char *end = line + strcspn(line, "\r\n");
        lineno++;
        char *eq = memchr(line, '=', (size_t)(end - line)), *hash = memchr(line, '#', (size_t)(end - line));
        if (eq && (!hash || hash > eq)) {
            char key[64] = "", val[1024] = "";
            const char *k0 = line, *k1 = eq;
            while (k0 < k1 && (*k0 == ' ' || *k0 == '\t')) k0++;
            while (k1 > k0 && (k1[-1] == ' ' || k1[-1] == '\t')) k1--;
            const char *v0 = eq + 1, *v1 = hash && hash < end ? hash : end;
            while (v0 < v1 && (*v0 == ' ' || *v0 == '\t')) v0++;
            while (v1 > v0 && (v1[-1] == ' ' || v1[-1] == '\t' || v1[-1] == '\r')) v1--;
            if (k1 - k0 < (long)sizeof key && v1 - v0 < (long)sizeof val) {
                memcpy(key, k0, (size_t)(k1 - k0));
                memcpy(val, v0, (size_t)(v1 - v0));
                const int t = training_key(key);
                if (t >= 0 && first_line[t]) { /* as for model keys: a repeated key is a mistake, not an override */
                    free(text);
                    return cli_error(C, "%s:%d: %s set twice (first at line %d)", path, lineno, persisted[t],
                                     first_line[t]);
                }
                if (t >= 0) {
                    first_line[t] = lineno;
                    for (int o = 0; o < ap->n_opts; o++)
                        if (strcmp(ap->opts[o].name, persisted[t]) == 0 && !ap->set[o]) {
                            ap->set[o] = CLI_SET_BY_CONFIG;
                            ap->val[o] = cli_own(ap, val, strlen(val));
                        }
                    memset(line, ' ', (size_t)(end - line)); /* not a model key: blank, so line numbers stay */
                }
            }
        }
        line = end;
        if (*line == '\r' && line[1] == '\n') line += 2;
        else if (*line) line++;
    }
    const lipt_status st = lipt_config_parse(cfg, body, path, &err);
    free(text);
    return st == LIPT_OK ? 0 : cli_fail(C, &err);
}

/* The model config: from the checkpoint when resuming (its stored training options then fill in whatever was not
 * given again; ck stays open), else the config file and --key value overrides. 0, or the exit status. */
static int merge_config(cli_args *ap, trainer *t, int *resume, const char *resume_path, lipt_ckpt *ck, run_extra *rx) {
    const char *C = "train";
    lipt_error err = {0};
    if (!*resume) {
        lipt_config_default(&t->cfg);
        if (cli_has(ap, "config")) {
            const int rc = load_run_config(ap, cli_str(ap, "config"), &t->cfg);
            if (rc) return rc;
        }
        for (int i = 0; i < ap->n_extra; i++)
            if (lipt_config_set(&t->cfg, ap->extra_key[i], ap->extra_val[i], &err) != LIPT_OK)
                return strncmp(err.msg, "unknown config key", 18) == 0
                           ? cli_error(C, "--%s: %s (not a lipt train option either: see lipt train --help)",
                                       ap->extra_key[i], err.msg)
                           : cli_error(C, "--%s: %s", ap->extra_key[i], err.msg);
        return 0;
    }
    const int data_given = cli_has(ap, "data");
    if (lipt_ckpt_open(resume_path, ck, &err) != LIPT_OK) {
        *resume = 3; /* nothing open to close */
        return cli_fail(C, &err);
    }
    if (cli_has(ap, "config") || ap->n_extra)
        return cli_error(C, "--resume takes the model config from %s; drop --config and model keys", resume_path);
    if (lipt_config_parse(&t->cfg, ck->config_text, resume_path, &err) != LIPT_OK ||
        lipt_vocab_from_blob(&t->vocab, ck->vocab, ck->vocab_len, &err) != LIPT_OK ||
        run_extra_unpack(rx, ck->extra, ck->extra_len, &err) != LIPT_OK)
        return cli_fail(C, &err);
    if (t->vocab.size != t->cfg.vocab_size) /* what eval refuses, resume must refuse too */
        return cli_error(C, "%s: its vocabulary has %d symbols but its model %d: not a consistent checkpoint",
                         resume_path, t->vocab.size, t->cfg.vocab_size);
    for (const char *p = rx->opts_text; p && *p;) {
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
    /* the corpus by its absolute location (the spec as typed may be relative to another working directory) */
    char abs[1100];
    if (!data_given && run_opt_get(rx->opts_text, "data-abs", abs, sizeof abs) == 0)
        for (int k = 0; k < ap->n_opts; k++)
            if (strcmp(ap->opts[k].name, "data") == 0) ap->val[k] = cli_own(ap, abs, strlen(abs));
    return 0;
}

/* --precision over the config's (or the resumed checkpoint's) key, checked against this build and CPU before any
 * work. 0, or the exit status. */
static int apply_precision(cli_args *ap, trainer *t, int resume, const char *resume_path, int quiet) {
    const lipt_precision was = t->cfg.precision;
    const int rc = cli_apply_precision(ap, "train", &t->cfg.precision);
    if (!rc && resume && t->cfg.precision != was && !quiet)
        fprintf(stderr, "note: the matrix products change from %s (the precision of %s) to %s\n",
                lipt_precision_name(was), resume_path, lipt_precision_name(t->cfg.precision));
    return rc;
}

/* Numeric options read and range-checked; 0, 2 (bad syntax, message printed) or the exit status. */
/* Where an option's value came from, for messages: a value the user did not type must not be blamed on a flag. */
static const char *origin(const cli_args *ap, const char *name) { return cli_origin(ap, name); }

static int read_numbers(cli_args *ap, train_settings *s) {
    const char *C = "train";
    if (cli_int(ap, "steps", &s->steps) || cli_int(ap, "batch", &s->batch) || cli_int(ap, "warmup", &s->warmup) ||
        cli_int(ap, "seed", &s->seed) || cli_int(ap, "eval-every", &s->eval_every) ||
        cli_int(ap, "eval-symbols", &s->eval_symbols) || cli_int(ap, "save-every", &s->save_every) ||
        cli_int(ap, "log-every", &s->log_every) || cli_float(ap, "lr", &s->lr) || cli_float(ap, "min-lr", &s->min_lr) ||
        cli_float(ap, "beta1", &s->beta1) || cli_float(ap, "beta2", &s->beta2) || cli_float(ap, "adam-eps", &s->aeps) ||
        cli_float(ap, "weight-decay", &s->wd) || cli_float(ap, "clip", &s->clip) ||
        cli_int(ap, "check-every", &s->check_every) || cli_float(ap, "save-minutes", &s->save_minutes) ||
        cli_int(ap, "patience", &s->patience))
        return 2;
    if (s->steps < 0) return cli_error(C, "--steps must be >= 0, got %ld%s", s->steps, origin(ap, "steps"));
    if (s->batch < 1 || s->batch > 65536)
        return cli_error(C, "--batch must be in [1, 65536], got %ld%s", s->batch, origin(ap, "batch"));
    if (s->warmup < 0) return cli_error(C, "--warmup must be >= 0, got %ld%s", s->warmup, origin(ap, "warmup"));
    if (s->eval_every < 0 || s->save_every < 0 || s->log_every < 1 || s->eval_symbols < 0)
        return cli_error(C, "--eval-every, --save-every, --eval-symbols must be >= 0 and --log-every >= 1");
    if (s->clip < 0) return cli_error(C, "--clip must be >= 0, got %g%s", s->clip, origin(ap, "clip"));
    s->recompute = cli_has(ap, "recompute");
    if (!(s->save_minutes >= 0) || s->save_minutes > 1e6)
        return cli_error(C, "--save-minutes must be in [0, 1e6], got %g", s->save_minutes);
    if (s->check_every < 0)
        return cli_error(C, "--check-every must be >= 0, got %ld%s", s->check_every, origin(ap, "check-every"));
    if (s->patience < 0)
        return cli_error(C, "--patience must be >= 0 (0: no early stopping), got %ld%s", s->patience,
                         origin(ap, "patience"));
    return 0;
}

/* The training options: numbers, the batch across ranks (kept global on resume unless the user gave --batch: the flag
 * as typed, not as restored from the checkpoint), the schedule, AdamW and data options, and the persisted text. 0, or
 * the exit status. */
static int parse_settings(cli_args *ap, trainer *t, int resume, const run_extra *rx, const char *resume_path,
                          int batch_given, train_settings *s) {
    const char *C = "train";
    lipt_error err = {0};
    const int K = t->K;
    int bad = read_numbers(ap, s);
    if (bad) return bad;
    if (resume) {
        /* the global batch (ranks x batch) is what defines the run: keep it across a change of rank count */
        const char *g = rx->opts_text ? strstr(rx->opts_text, "global-batch=") : NULL;
        long stored = g ? atol(g + 13) : s->batch; /* written by a one-process build: its batch */
        if (!batch_given) {
            if (stored % K != 0)
                return cli_error(C, "the run in %s has a global batch of %ld, which does not split over %d ranks; pass "
                                 "--batch to choose the per-rank batch", resume_path, stored, K);
            s->batch = stored / K;
        } else if (stored != (long)K * s->batch && t->lead) {
            fprintf(stderr, "note: the global batch changes from %ld to %d x %ld = %ld\n", stored, K, s->batch,
                    (long)K * s->batch);
        }
    }
    if ((long)K * s->batch > 65536) return cli_error(C, "%d ranks x --batch %ld exceeds 65536 sequences per step", K, s->batch);
    if (parse_final_eval(cli_str(ap, "final-eval"), &s->final_valid, &s->final_test) < 0)
        return cli_error(C, "--final-eval must be valid,test | valid | test | none, got '%s'", cli_str(ap, "final-eval"));
    const char *ff = cli_str(ap, "final-from");
    if (strcmp(ff, "best") != 0 && strcmp(ff, "last") != 0)
        return cli_error(C, "--final-from must be best or last, got '%s'%s", ff, origin(ap, "final-from"));
    s->final_from_best = strcmp(ff, "best") == 0;
    if (lipt_lr_kind_parse(cli_str(ap, "schedule"), &s->sched.kind, &err) != LIPT_OK) return cli_fail(C, &err);
    s->sched.lr = s->lr;
    s->sched.warmup = s->warmup;
    s->sched.total = s->steps;
    s->sched.min_lr = s->min_lr;
    if (lipt_lr_schedule_check(&s->sched, &err) != LIPT_OK) return cli_fail(C, &err);
    s->acfg = (lipt_adamw_config){s->lr, s->beta1, s->beta2, s->aeps, s->wd};
    if (lipt_adamw_config_check(&s->acfg, &err) != LIPT_OK) return cli_fail(C, &err);
    if ((bad = train_optim_settings(ap, s, resume, rx->opts_text, resume_path)) != 0) return bad;
    if (lipt_data_parse_vocab(cli_str(ap, "vocab"), &s->dopts, &err) != LIPT_OK ||
        lipt_data_parse_split(cli_str(ap, "data-split"), &s->dopts, &err) != LIPT_OK)
        return cli_fail(C, &err);
    s->dopts.unk = cli_has(ap, "unk") && strcmp(cli_str(ap, "unk"), "1") == 0;
    size_t off = 0;
    for (int i = 0; i < N_PERSISTED; i++) {
        const char *v = cli_str(ap, persisted[i]);
        if (!v) continue; /* unset flags are not stored */
        int w = snprintf(t->opts_text + off, sizeof t->opts_text - off, "%s=%s\n", persisted[i], v);
        if (w < 0 || (size_t)w >= sizeof t->opts_text - off)
            return cli_error(C, "training options too long to store (--%s is %zu characters)", persisted[i], strlen(v));
        off += (size_t)w;
    }
    snprintf(t->opts_text + off, sizeof t->opts_text - off, "global-batch=%ld\n", (long)K * s->batch);
    return 0;
}

/* A resumed run's corpus against the one its checkpoint was trained on (data-crc32 and data-bytes, stored by every
 * save): a different text would continue the run on other data, and recording the new CRC would hide the change from
 * every later eval. Refused unless force; with force, a warning, and the earlier CRCs are kept in the options as
 * data-crc32-before=CRC@STEP[,...] (then the stored data-crc32 is the corpus the run continues on). 0, or the exit
 * status. */
static int check_resumed_corpus(trainer *t, const run_extra *rx, const char *resume_path, const char *data_spec,
                                int force, long long step) {
    const char *C = "train";
    char was_crc[32], was_bytes[32], now_crc[32] = "", now_bytes[32] = "", before[512] = "";
    if (run_opt_get(rx->opts_text, "data-crc32", was_crc, sizeof was_crc) != 0) return 0; /* older checkpoints */
    if (run_opt_get(rx->opts_text, "data-bytes", was_bytes, sizeof was_bytes) != 0) snprintf(was_bytes, sizeof was_bytes, "?");
    if (run_opt_get(t->opts_text, "data-crc32", now_crc, sizeof now_crc) != 0)
        return cli_error(C, "cannot read %s to compare it with the corpus %s was trained on (CRC-32 %s)", data_spec,
                         resume_path, was_crc);
    run_opt_get(t->opts_text, "data-bytes", now_bytes, sizeof now_bytes);
    run_opt_get(rx->opts_text, "data-crc32-before", before, sizeof before);
    const size_t used = strlen(t->opts_text);
    if (strcmp(now_crc, was_crc) == 0) {
        /* the same corpus: the history of earlier forced changes goes on */
        if (before[0]) snprintf(t->opts_text + used, sizeof t->opts_text - used, "data-crc32-before=%s\n", before);
        return 0;
    }
    if (!force)
        return cli_error(C, "%s (CRC-32 %s, %s bytes) is not the corpus %s was trained on (CRC-32 %s, %s bytes): the "
                         "file changed since, or --data names another; resuming would continue on other text. Restore "
                         "the corpus, or pass --force to continue on this one (the checkpoint then records both)",
                         data_spec, now_crc, now_bytes, resume_path, was_crc, was_bytes);
    fprintf(stderr, "warning: %s (CRC-32 %s, %s bytes) is not the corpus %s was trained on (CRC-32 %s, %s bytes): "
                    "continuing on it (--force); the checkpoints record the earlier one as data-crc32-before\n",
            data_spec, now_crc, now_bytes, resume_path, was_crc, was_bytes);
    const int w = snprintf(t->opts_text + used, sizeof t->opts_text - used, "data-crc32-before=%s%s%s@%lld\n", before,
                           before[0] ? "," : "", was_crc, step);
    if (w < 0 || (size_t)w >= sizeof t->opts_text - used || (size_t)w >= sizeof before) {
        t->opts_text[used] = 0;
        return cli_error(C, "too many forced corpus changes to record in %s (data-crc32-before): start a new run",
                         resume_path);
    }
    return 0;
}

/* The corpus, the model, the optimizer, the context and the batcher (fresh, or restored from ck, which is then
 * closed). 0, or the exit status. */
static int setup_model(trainer *t, train_settings *s, const char *data_spec, int *resume, lipt_ckpt *ck,
                       const run_extra *rx, const char *resume_path, int force, const char *data_origin) {
    const char *C = "train";
    lipt_error err = {0};
    if (*resume) s->dopts.use_vocab = &t->vocab;
    if (lipt_dataset_load(data_spec, &s->dopts, &t->ds, &err) != LIPT_OK) {
        run_blame_corpus(&err, data_origin);
        return cli_fail(C, &err);
    }
    t->ds_ok = 1;
    if (!*resume) t->vocab = t->ds.vocab;
    /* the corpus's identity goes with every checkpoint, so that other commands find it and notice a change */
    const size_t used = strlen(t->opts_text);
    if (run_corpus_identity(&t->ds, t->opts_text + used, sizeof t->opts_text - used) != 0) t->opts_text[used] = 0;
    if (*resume) {
        const int rc = check_resumed_corpus(t, rx, resume_path, data_spec, force, (long long)ck->step);
        if (rc) return rc;
    }
    char desc[1024];
    lipt_dataset_describe(&t->ds, desc, sizeof desc);
    if (!s->quiet) fprintf(stderr, "data: %s\n", desc);
    if (!*resume) {
        if (t->cfg.vocab_size != t->vocab.size && !s->quiet)
            fprintf(stderr, "note: vocab_size set to %d, the vocabulary of %s\n", t->vocab.size, data_spec);
        t->cfg.vocab_size = t->vocab.size;
    }
    if (lipt_config_validate(&t->cfg, &err) != LIPT_OK) return cli_fail(C, &err);
    if (t->ds.len[LIPT_TRAIN] < (size_t)t->cfg.seq_len + 1)
        return cli_error(C, "the training split has %zu symbols, fewer than seq_len + 1 = %d", t->ds.len[LIPT_TRAIN],
                         t->cfg.seq_len + 1);
    if (lipt_model_init(&t->model, &t->cfg, &err) != LIPT_OK) return cli_fail(C, &err);
    t->model_ok = 1;
    lipt_adamw_init(&t->opt, &s->acfg);
    if (train_optim_init(t, s)) return 1;
    /* the dropout stream: rank 0's is the one-process stream; other ranks draw their own */
    const uint64_t rank_mix = (uint64_t)t->dist->rank * 0x9E3779B97F4A7C15ull;
    lipt_ctx_init(&t->ctx, (size_t)64 << 20, ((uint64_t)s->seed * 2654435761u + 1) ^ rank_mix);
    t->ctx.recompute = s->recompute;
    t->ctx_ok = 1;
    if (lipt_ctx_set_precision(&t->ctx, t->cfg.precision, &err) != LIPT_OK) return cli_fail(C, &err);
    /* every rank draws the whole global batch from the one seeded stream and keeps its slice */
    if (lipt_batcher_init(&t->batcher, t->ds.tok[LIPT_TRAIN], t->ds.len[LIPT_TRAIN], t->K * (int)s->batch,
                          t->cfg.seq_len, (uint64_t)s->seed, &err) != LIPT_OK)
        return cli_fail(C, &err);
    t->best_bpc = INFINITY;
    t->best_step = -1;
    t->saved_step = -1;
    if (!*resume) return 0;
    if (!ck->has_optimizer || ck->n_rngs < 1) return cli_error(C, "%s has no optimizer state: it cannot be resumed", resume_path);
    if (lipt_ckpt_load_params(ck, &t->model.params, 1, &err) != LIPT_OK) return cli_fail(C, &err);
    t->opt.t = ck->adam_t;
    t->step = ck->step;
    t->ctx.rng = ck->rngs[0];
    if (t->dist->rank > 0) lipt_rng_seed(&t->ctx.rng, ck->rngs[0].s[0] ^ rank_mix);
    t->batcher.st = rx->batcher;
    t->best_bpc = rx->best_bpc;
    t->best_step = rx->best_step;
    /* the patience count; a checkpoint from before it was stored: the periodic evaluations since the best step */
    char since[32];
    if (run_opt_get(rx->opts_text, TRAIN_EVALS_SINCE_BEST, since, sizeof since) == 0) t->evals_since_best = atol(since);
    else if (t->best_step >= 0 && s->eval_every > 0)
        t->evals_since_best = (long)(t->step / s->eval_every - t->best_step / s->eval_every);
    if (t->evals_since_best < 0) t->evals_since_best = 0;
    if (strcmp(resume_path, t->last_path) == 0) t->saved_step = t->step; /* else last.ckpt is not this state yet */
    if (!s->quiet) fprintf(stderr, "resumed from %s at step %lld\n", resume_path, (long long)t->step);
    lipt_ckpt_close(ck);
    *resume = 2; /* closed */
    return 0;
}

/* DIR/run.cfg: every setting of the run (model keys, then training keys as given, the corpus by its absolute path),
 * with the lipt version and git revision: `lipt train --config DIR/run.cfg --out OTHER` repeats the run. */
static void write_run_cfg(const trainer *t) {
    char path[1300], text[4096], out[16384];
    snprintf(path, sizeof path, "%s/run.cfg", t->out);
    size_t k = (size_t)snprintf(out, sizeof out,
                                "# lipt %s (git %s): the settings of this run; lipt train --config %s --out DIR repeats "
                                "it\n\n# model\n", LIPT_VERSION_STR, LIPT_GIT_HASH_STR, path);
    lipt_config_to_text(&t->cfg, text, sizeof text);
    k += (size_t)snprintf(out + k, k < sizeof out ? sizeof out - k : 0, "%s\n# training\n", text);
    char abs[1100] = "";
    run_opt_get(t->opts_text, "data-abs", abs, sizeof abs);
    for (const char *p = t->opts_text; *p && k < sizeof out;) {
        const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
        const int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (eq && eq < p + len) {
            const int kl = (int)(eq - p);
            char key[64];
            snprintf(key, sizeof key, "%.*s", kl, p);
            const size_t room = sizeof out - k;
            if (training_key(key) < 0) /* recorded, not a setting */
                k += (size_t)snprintf(out + k, room, "# %s = %.*s\n", key, len - kl - 1, eq + 1);
            else if (strcmp(key, "data") == 0 && abs[0])
                k += (size_t)snprintf(out + k, room, "data = %s    # given as %.*s\n", abs, len - kl - 1, eq + 1);
            else
                k += (size_t)snprintf(out + k, room, "%s = %.*s\n", key, len - kl - 1, eq + 1);
        }
        p += len + (nl ? 1 : 0);
    }
    lipt_error err = {0};
    if (k < sizeof out && run_replace_file(path, out, &err) != LIPT_OK)
        fprintf(stderr, "note: %s (the run goes on; its checkpoints hold the same settings)\n", err.msg);
}

/* The run directory (rank 0): created, locked, run.cfg, metrics.jsonl opened (truncated to the resumed step, or
 * fresh). 0, or the exit status. */
static int setup_files(trainer *t, int force) {
    const char *C = "train";
    lipt_error err = {0};
    if (t->lead) {
        if (run_mkdir(t->out, &err) != LIPT_OK) return cli_fail(C, &err);
        /* one trainer per run directory: a second one would interleave checkpoints and metrics */
        char lock_path[1300];
        snprintf(lock_path, sizeof lock_path, "%s/.lock", t->out);
        /* O_NOFOLLOW: a symlink planted there would make the lock create (or lock) its target; O_NONBLOCK: a FIFO
         * there must not block; anything but a regular file is refused */
        t->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
        struct stat lsb;
        if (t->lock_fd < 0 && errno == ELOOP)
            return cli_error(C, "%s is a symbolic link: the lock of a run folder is a regular file lipt creates "
                             "(remove the link)", lock_path);
        if (t->lock_fd < 0 && errno != ENXIO)
            return cli_error(C, "cannot create the lock %s: %s", lock_path, strerror(errno));
        if (t->lock_fd < 0 || fstat(t->lock_fd, &lsb) != 0 || !S_ISREG(lsb.st_mode))
            return cli_error(C, "%s is not a regular file: the lock of a run folder is a regular file lipt creates "
                             "(remove it)", lock_path);
        if (flock(t->lock_fd, LOCK_EX | LOCK_NB) != 0)
            return cli_error(C, "%s is in use by another lipt train (lock %s); wait for it or choose another --out", t->out,
                             lock_path);
        char path[1300];
        if (t->step == 0 && !force) {
            /* a fresh run must not silently replace another run's checkpoints and metrics */
            static const char *const run_files[] = {"last.ckpt", "best.ckpt", "metrics.jsonl"};
            for (int i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s/%s", t->out, run_files[i]);
                if (access(path, F_OK) == 0)
                    return cli_error(C, "%s already holds a run (%s): continue it with --resume, choose another --out, "
                                     "or pass --force to replace it", t->out, run_files[i]);
            }
        }
        write_run_cfg(t);
        if (t->step > 0) {
            if (truncate_metrics(t->metrics_path, t->step, &err) != LIPT_OK) return cli_fail(C, &err);
        } else {
            /* a fresh run: files of an earlier run in this directory are not this run's */
            remove(t->metrics_path);
            remove(t->best_path);
        }
    }
    /* appended to only as the regular file this run (or the one it resumes) created: never through a symlink */
    t->log = t->lead ? lipt_open_append(t->metrics_path, &err) : fopen("/dev/null", "a");
    if (!t->log) return t->lead ? cli_fail(C, &err) : cli_error(C, "cannot open /dev/null");
    setvbuf(t->log, NULL, _IOLBF, 0); /* every metrics line reaches the file as it is written */
    return 0;
}

/* The batch buffers and the validation split; the run described. 0, or the exit status. */
static int setup_batches(trainer *t, train_settings *s) {
    const int K = t->K;
    if (!s->quiet)
        fprintf(stderr, "model: %s attention, %s ffn, %d layers, d_model %d, %d heads, d_ff %d, seq_len %d: %zu parameters; "
                "%d threads%s%s%s\n", lipt_attn_name(t->cfg.attention), lipt_ffn_name(t->cfg.ffn), t->cfg.n_layers,
                t->cfg.d_model, t->cfg.n_heads, t->cfg.d_ff, t->cfg.seq_len, lipt_params_count(&t->model.params),
                lipt_get_threads(), s->recompute ? "; recomputing activations" : "",
                t->cfg.precision != LIPT_PRECISION_FLOAT32 ? "; matrix products in " : "",
                t->cfg.precision != LIPT_PRECISION_FLOAT32 ? lipt_precision_name(t->cfg.precision) : "");
    if (!s->quiet && K > 1)
        fprintf(stderr, "data parallel: %d ranks x batch %ld = global batch %ld; %d threads per rank\n", K, s->batch,
                (long)K * s->batch, lipt_get_threads());
    t->T = t->cfg.seq_len;
    t->B = (int)s->batch;
    t->G = (size_t)K * t->B;
    t->gin = malloc(sizeof(int32_t) * t->G * t->T);
    t->gtg = malloc(sizeof(int32_t) * t->G * t->T);
    if (!t->gin || !t->gtg) return cli_error("train", "out of memory for a batch of %zu x %d tokens", t->G, t->T);
    t->in = t->gin + (size_t)t->dist->rank * t->B * t->T;
    t->tg = t->gtg + (size_t)t->dist->rank * t->B * t->T;
    t->vtok = lipt_dataset_eval_tokens(&t->ds, LIPT_VALID, &t->nvalid);
    /* an empty split (e.g. --data-split 1,0,0) is not an error after training: it is not evaluated, and says so */
    size_t ntest;
    lipt_dataset_eval_tokens(&t->ds, LIPT_TEST, &ntest);
    if (t->nvalid < 2 && (s->eval_every > 0 || s->final_valid)) {
        if (!s->quiet) fprintf(stderr, "note: the validation split is empty: no validation during or after training\n");
        s->eval_every = 0;
        s->final_valid = 0;
    }
    if (ntest < 2 && s->final_test) {
        if (!s->quiet) fprintf(stderr, "note: the test split is empty: no final test evaluation\n");
        s->final_test = 0;
    }
    t->tty = cli_stderr_is_tty() && !s->quiet;
    return 0;
}

/* Threads: ranks sharing a machine split its cores unless told otherwise; then --threads. 0, or the exit status. */
static int setup_threads(cli_args *ap, const lipt_dist *dist) {
    if (dist->local_size > 1 && !getenv("LIPT_THREADS")) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        lipt_set_threads(ncpu / dist->local_size > 1 ? (int)(ncpu / dist->local_size) : 1);
    }
    return cli_apply_threads(ap, "train");
}

/* --out, or its default: with --resume the folder of --ckpt, else a new timestamped folder under runs/. 0, or the
 * exit status. */
static int default_out(cli_args *ap, char *buf, size_t n, const char **out) {
    if (cli_has(ap, "out")) {
        *out = cli_str(ap, "out");
        return 0;
    }
    if (cli_has(ap, "resume")) {
        if (!cli_has(ap, "ckpt"))
            return cli_error("train", "--resume needs the run to continue: --out DIR (its last.ckpt) or --ckpt FILE");
        const char *ck = cli_str(ap, "ckpt"), *slash = strrchr(ck, '/');
        snprintf(buf, n, "%.*s", slash ? (int)(slash - ck) : 1, slash ? ck : ".");
        if (!buf[0]) snprintf(buf, n, "/");
        *out = buf;
        return 0;
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, n, "runs/%s", stamp);
    for (int k = 2; access(buf, F_OK) == 0 && k < 1000; k++) snprintf(buf, n, "runs/%s-%d", stamp, k);
    *out = buf;
    return 0;
}

static void trainer_free(trainer *t) {
    if (t->log) fclose(t->log);
    free(t->gin);
    free(t->gtg);
    if (t->lock_fd >= 0) close(t->lock_fd); /* releases the lock */
    if (t->ctx_ok) lipt_ctx_free(&t->ctx);
    if (t->muon_ok) lipt_muon_free(&t->muon);
    if (t->model_ok) lipt_model_free(&t->model);
    if (t->ds_ok) lipt_dataset_free(&t->ds);
}

static int train_main(cli_args *ap, lipt_dist *dist, int *agreed, int argc, char **argv) {
    const char *C = "train";
    int pr = cli_parse(ap, C, "Train a character-level Transformer (any attention variant) on a corpus.", train_opts,
                       N_TRAIN_OPTS, argc, argv, 1, 0);
    if (pr) return pr > 0 ? 0 : 2;
    trainer t;
    memset(&t, 0, sizeof t);
    t.dist = dist;
    t.lead = dist->rank == 0;
    t.K = dist->size;
    t.lock_fd = -1;
    t.agreed = agreed;
    char out_buf[1100];
    int rc = default_out(ap, out_buf, sizeof out_buf, &t.out);
    if (rc) return rc;
    snprintf(t.last_path, sizeof t.last_path, "%s/last.ckpt", t.out);
    snprintf(t.best_path, sizeof t.best_path, "%s/best.ckpt", t.out);
    snprintf(t.metrics_path, sizeof t.metrics_path, "%s/metrics.jsonl", t.out);
    rc = setup_threads(ap, dist);
    if (rc) return rc;
    int resume = cli_has(ap, "resume"); /* 1: resuming with ck open; 2: ck closed after use; 3: ck failed to open */
    const char *resume_path = cli_has(ap, "ckpt") ? cli_str(ap, "ckpt") : t.last_path;
    if (cli_has(ap, "ckpt") && !resume) return cli_error(C, "--ckpt is for --resume (use lipt eval to evaluate a checkpoint)");
    lipt_ckpt ck;
    memset(&ck, 0, sizeof ck);
    run_extra rx;
    memset(&rx, 0, sizeof rx);
    train_settings s;
    memset(&s, 0, sizeof s);
    s.quiet = cli_has(ap, "quiet") || !t.lead;
    const int batch_given = cli_has(ap, "batch"); /* before the checkpoint's stored options fill in the rest */
    rc = merge_config(ap, &t, &resume, resume_path, &ck, &rx);
    if (!rc) rc = apply_precision(ap, &t, resume, resume_path, s.quiet);
    if (!rc) rc = parse_settings(ap, &t, resume, &rx, resume_path, batch_given, &s);
    if (!rc) rc = setup_model(&t, &s, cli_str(ap, "data"), &resume, &ck, &rx, resume_path, cli_has(ap, "force"),
                              cli_origin(ap, "data"));
    if (!rc) rc = setup_files(&t, cli_has(ap, "force"));
    if (!rc && !cli_has(ap, "out") && !s.quiet) fprintf(stderr, "run folder: %s (--out to choose one)\n", t.out);
    if (!rc) rc = setup_batches(&t, &s);
    if (!rc) {
        train_install_signals();
        rc = train_finish(&t, &s, cli_has(ap, "json"), train_loop(&t, &s));
    }
    if (resume == 1) lipt_ckpt_close(&ck);
    trainer_free(&t);
    return rc;
}

int cmd_train(int argc, char **argv) {
    lipt_dist dist;
    lipt_error err = {0};
    if (lipt_dist_init(&dist, &argc, &argv, &err) != LIPT_OK) return cli_fail("train", &err);
    cli_args a;
    int agreed = 0; /* every rank ends the same way (done, signal, divergence): a normal exit */
    int rc = train_main(&a, &dist, &agreed, argc, argv);
    cli_free(&a);
    if (rc != 0 && !agreed && dist.size > 1) {
        /* this rank failed alone (a file it could not write, a flag it rejected): the others would wait forever */
        fflush(stderr);
        lipt_dist_abort(&dist, rc);
    }
    lipt_dist_finalize(&dist);
    return rc;
}
