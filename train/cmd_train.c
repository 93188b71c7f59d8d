/* lipt train: the training loop (AdamW, schedules, clipping, periodic evaluation, best and last
 * checkpoints, resume, SIGINT/SIGTERM save, divergence stop, JSONL metrics). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "commands.h"
#include "evaluate.h"
#include "lipt/checkpoint.h"
#include "lipt/data.h"
#include "lipt/dist.h"
#include "lipt/model.h"
#include "lipt/optim.h"
#include "lipt/train.h"
#include "run.h"

#define LN2 0.69314718055994530942

/* Options stored in the checkpoint ("persist") are restored on --resume unless given again. */
static const cli_opt train_opts[] = {
    {"config", CLI_STRING, "FILE", "model config (key = value); any config key can also be given as --key value", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus: ptb, enwik8, text8, tinyshakespeare, warandpeace or a file", "ptb"},
    {"out", CLI_STRING, "DIR", "run directory (checkpoints, metrics.jsonl, config.cfg)", "runs/train"},
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
    {"seed", CLI_INT, "S", "data order and dropout seed (init: the config's init_seed)", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS (default LIPT_THREADS or all cores)", NULL},
    {"eval-every", CLI_INT, "N", "evaluate on the validation subset every N steps (0: only at the end)", "200"},
    {"eval-symbols", CLI_INT, "N", "validation symbols per periodic evaluation (0: all)", "200000"},
    {"final-eval", CLI_STRING, "SPLITS", "full evaluation at the end: valid,test | valid | test | none", "valid,test"},
    {"save-every", CLI_INT, "N", "write last.ckpt every N steps (0: at evaluations and the end)", "0"},
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
                                  "final-eval", "save-every", "log-every", "vocab", "data-split", "unk"};
#define N_PERSISTED ((int)(sizeof persisted / sizeof persisted[0]))

/* Signal flag: the one piece of process-global state, because a signal handler can only reach globals. */
static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

typedef struct {
    lipt_dist *dist;
    int lead;             /* rank 0: the one rank that writes files and progress */
    const char *out;
    char last_path[1200], best_path[1200], metrics_path[1200];
    lipt_model model;
    lipt_vocab vocab;
    lipt_adamw opt;
    lipt_ctx ctx;
    lipt_batcher batcher;
    int64_t step;
    double best_bpc;
    int64_t best_step;
    int64_t saved_step;   /* step of the last checkpoint written or resumed from; -1: none yet */
    char opts_text[4096];
} trainer;

/* After a failure: where the last good state is. */
static void last_good(const trainer *t, char *buf, size_t n) {
    if (t->saved_step >= 0)
        snprintf(buf, n, "the last good checkpoint is intact: %s (step %lld)", t->last_path, (long long)t->saved_step);
    else
        snprintf(buf, n, "no checkpoint had been written yet");
}

static lipt_status save_ckpt(trainer *t, const char *path, lipt_error *err) {
    if (!t->lead) {
        if (path == t->last_path) t->saved_step = t->step;
        return LIPT_OK;
    }
    char cfg_text[4096];
    lipt_config_to_text(&t->model.cfg, cfg_text, sizeof cfg_text);
    uint8_t vocab_blob[512];
    size_t vlen = lipt_vocab_to_blob(&t->vocab, vocab_blob, sizeof vocab_blob);
    run_extra x = {t->batcher.st, t->best_bpc, t->best_step, t->opts_text};
    size_t xlen;
    unsigned char *xb = run_extra_pack(&x, &xlen);
    lipt_ckpt_contents c = {0};
    c.config_text = cfg_text;
    c.vocab = vocab_blob;
    c.vocab_len = vlen;
    c.params = &t->model.params;
    c.with_optimizer = 1;
    c.adam_t = t->opt.t;
    c.step = t->step;
    c.rngs = &t->ctx.rng;
    c.n_rngs = 1;
    c.extra = xb;
    c.extra_len = xlen;
    lipt_status st = lipt_ckpt_save(path, &c, err);
    free(xb);
    if (st == LIPT_OK && path == t->last_path) t->saved_step = t->step;
    return st;
}

/* Keep metrics.jsonl lines up to `step` (a resumed run rewrites what came after its checkpoint). */
static void truncate_metrics(const char *path, int64_t step) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *g = fopen(tmp, "w");
    if (!g) { fclose(f); return; }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\":");
        long long v = s ? atoll(s + 7) : 0;
        if (v <= step) fputs(line, g);
    }
    fclose(f);
    fclose(g);
    rename(tmp, path);
}

static void fmt_eta(double sec, char *buf, size_t n) {
    if (!isfinite(sec) || sec < 0) sec = 0;
    long s = (long)sec;
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
}

static int parse_final_eval(const char *s, int *valid, int *test) {
    *valid = *test = 0;
    if (strcmp(s, "none") == 0) return 0;
    if (strcmp(s, "valid,test") == 0 || strcmp(s, "test,valid") == 0) { *valid = *test = 1; return 0; }
    if (strcmp(s, "valid") == 0) { *valid = 1; return 0; }
    if (strcmp(s, "test") == 0) { *test = 1; return 0; }
    return -1;
}

/* 64-bit checksum of everything that must agree across ranks: parameter values and buffers (bitwise). */
static uint64_t params_checksum(const lipt_params *p) {
    const unsigned char *a = (const unsigned char *)p->value, *b = (const unsigned char *)p->buf;
    uLong c = crc32(0L, Z_NULL, 0), d = adler32(0L, Z_NULL, 0);
    size_t na = p->n_train * sizeof(float), nb = p->n_buf * sizeof(float);
    for (size_t off = 0; off < na; off += (size_t)1 << 30) {
        uInt len = (uInt)(na - off < ((size_t)1 << 30) ? na - off : ((size_t)1 << 30));
        c = crc32(c, a + off, len);
        d = adler32(d, a + off, len);
    }
    if (nb) {
        c = crc32(c, b, (uInt)nb);
        d = adler32(d, b, (uInt)nb);
    }
    return ((uint64_t)c << 32) | (uint64_t)(d & 0xffffffffu);
}

/* Under MPI: stop every rank with one message when the replicas are no longer bitwise identical. */
static int check_replicas(trainer *t, const char *when, lipt_error *err) {
    if (t->dist->size == 1) return 0;
    uint64_t lo, hi;
    if (lipt_dist_minmax_u64(t->dist, params_checksum(&t->model.params), &lo, &hi, err) != LIPT_OK) return cli_fail("train", err);
    if (lo == hi) return 0;
    if (t->lead) {
        char lg[1400];
        last_good(t, lg, sizeof lg);
        fprintf(stderr, "lipt train: %s (step %lld): the parameters differ across the %d ranks (checksums %016llx .. "
                "%016llx): the replicas drifted apart (mixed builds or CPUs, or a faulty node?); %s\n", when,
                (long long)t->step, t->dist->size, (unsigned long long)lo, (unsigned long long)hi, lg);
    }
    return 1;
}

static int train_main(cli_args *ap, lipt_dist *dist, int *agreed, int argc, char **argv) {
    const char *C = "train";
    int pr = cli_parse(ap, C, "Train a character-level Transformer (any attention variant) on a corpus.", train_opts,
                       N_TRAIN_OPTS, argc, argv, 1, 0);
    if (pr) return pr > 0 ? 0 : 2;
    lipt_error err = {0};
    trainer t;
    memset(&t, 0, sizeof t);
    t.dist = dist;
    t.lead = dist->rank == 0;
    const int K = dist->size;
    t.out = cli_str(ap, "out");
    snprintf(t.last_path, sizeof t.last_path, "%s/last.ckpt", t.out);
    snprintf(t.best_path, sizeof t.best_path, "%s/best.ckpt", t.out);
    snprintf(t.metrics_path, sizeof t.metrics_path, "%s/metrics.jsonl", t.out);
    if (dist->local_size > 1 && !getenv("LIPT_THREADS")) {
        /* ranks sharing a machine split its cores unless told otherwise */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        lipt_set_threads(ncpu / dist->local_size > 1 ? (int)(ncpu / dist->local_size) : 1);
    }
    {
        int trc = cli_apply_threads(ap, C);
        if (trc) return trc;
    }
    const int batch_given = cli_has(ap, "batch");
    int resume = cli_has(ap, "resume");
    const char *resume_path = cli_has(ap, "ckpt") ? cli_str(ap, "ckpt") : t.last_path;
    if (cli_has(ap, "ckpt") && !resume) return cli_error(C, "--ckpt is for --resume (use lipt eval to evaluate a checkpoint)");

    /* ---- configuration: from the checkpoint when resuming, else config file + overrides ---- */
    lipt_config cfg;
    lipt_ckpt ck;
    memset(&ck, 0, sizeof ck);
    run_extra rx;
    memset(&rx, 0, sizeof rx);
    if (resume) {
        if (lipt_ckpt_open(resume_path, &ck, &err) != LIPT_OK) return cli_fail(C, &err);
        if (cli_has(ap, "config") || ap->n_extra) {
            lipt_ckpt_close(&ck);
            return cli_error(C, "--resume takes the model config from %s; drop --config and model keys", resume_path);
        }
        if (lipt_config_parse(&cfg, ck.config_text, resume_path, &err) != LIPT_OK ||
            lipt_vocab_from_blob(&t.vocab, ck.vocab, ck.vocab_len, &err) != LIPT_OK ||
            run_extra_unpack(&rx, ck.extra, ck.extra_len, &err) != LIPT_OK) {
            lipt_ckpt_close(&ck);
            return cli_fail(C, &err);
        }
        /* stored training options fill in whatever was not given again */
        const char *p = rx.opts_text;
        while (p && *p) {
            const char *eq = strchr(p, '='), *nl = strchr(p, '\n');
            if (!eq || !nl || eq > nl) break;
            char key[64];
            size_t kl = (size_t)(eq - p) < sizeof key - 1 ? (size_t)(eq - p) : sizeof key - 1;
            memcpy(key, p, kl);
            key[kl] = 0;
            for (int k = 0; k < ap->n_opts; k++)
                if (strcmp(ap->opts[k].name, key) == 0 && !ap->set[k]) {
                    ap->set[k] = 1;
                    ap->val[k] = cli_own(ap, eq + 1, (size_t)(nl - eq - 1));
                }
            p = nl + 1;
        }
    } else {
        lipt_config_default(&cfg);
        if (cli_has(ap, "config") && lipt_config_load(&cfg, cli_str(ap, "config"), &err) != LIPT_OK) return cli_fail(C, &err);
        for (int i = 0; i < ap->n_extra; i++)
            if (lipt_config_set(&cfg, ap->extra_key[i], ap->extra_val[i], &err) != LIPT_OK) {
                return cli_error(C, "--%s: %s (not a lipt train option either: see lipt train --help)",
                                 ap->extra_key[i], err.msg);
            }
    }

    /* ---- training options ---- */
    long steps, batch, warmup, seed, eval_every, eval_symbols, save_every, log_every, check_every;
    double lr, min_lr, beta1, beta2, aeps, wd, clip;
    if (cli_int(ap, "steps", &steps) || cli_int(ap, "batch", &batch) || cli_int(ap, "warmup", &warmup) ||
        cli_int(ap, "seed", &seed) || cli_int(ap, "eval-every", &eval_every) ||
        cli_int(ap, "eval-symbols", &eval_symbols) || cli_int(ap, "save-every", &save_every) ||
        cli_int(ap, "log-every", &log_every) || cli_float(ap, "lr", &lr) || cli_float(ap, "min-lr", &min_lr) ||
        cli_float(ap, "beta1", &beta1) || cli_float(ap, "beta2", &beta2) || cli_float(ap, "adam-eps", &aeps) ||
        cli_float(ap, "weight-decay", &wd) || cli_float(ap, "clip", &clip) || cli_int(ap, "check-every", &check_every)) {
        if (resume) lipt_ckpt_close(&ck);
        return 2;
    }
    int bad = 0;
    if (steps < 0) bad = cli_error(C, "--steps must be >= 0, got %ld", steps);
    else if (batch < 1 || batch > 65536) bad = cli_error(C, "--batch must be in [1, 65536], got %ld", batch);
    else if (warmup < 0) bad = cli_error(C, "--warmup must be >= 0, got %ld", warmup);
    else if (eval_every < 0 || save_every < 0 || log_every < 1 || eval_symbols < 0)
        bad = cli_error(C, "--eval-every, --save-every, --eval-symbols must be >= 0 and --log-every >= 1");
    else if (clip < 0) bad = cli_error(C, "--clip must be >= 0, got %g", clip);
    else if (check_every < 0) bad = cli_error(C, "--check-every must be >= 0, got %ld", check_every);
    if (!bad && resume) {
        /* the global batch (ranks x batch) is what defines the run: keep it across a change of rank count */
        const char *g = rx.opts_text ? strstr(rx.opts_text, "global-batch=") : NULL;
        long stored = g ? atol(g + 13) : batch; /* written by a one-process build: its batch */
        if (!batch_given) {
            if (stored % K != 0)
                bad = cli_error(C, "the run in %s has a global batch of %ld, which does not split over %d ranks; pass "
                                "--batch to choose the per-rank batch", resume_path, stored, K);
            else batch = stored / K;
        } else if (stored != (long)K * batch && t.lead) {
            fprintf(stderr, "note: the global batch changes from %ld to %d x %ld = %ld\n", stored, K, batch, (long)K * batch);
        }
    }
    if (!bad && (long)K * batch > 65536) bad = cli_error(C, "%d ranks x --batch %ld exceeds 65536 sequences per step", K, batch);
    int final_valid, final_test;
    if (!bad && parse_final_eval(cli_str(ap, "final-eval"), &final_valid, &final_test) < 0)
        bad = cli_error(C, "--final-eval must be valid,test | valid | test | none, got '%s'", cli_str(ap, "final-eval"));
    lipt_lr_schedule sched = {0};
    if (!bad && lipt_lr_kind_parse(cli_str(ap, "schedule"), &sched.kind, &err) != LIPT_OK) bad = cli_fail(C, &err);
    sched.lr = lr;
    sched.warmup = warmup;
    sched.total = steps;
    sched.min_lr = min_lr;
    if (!bad && lipt_lr_schedule_check(&sched, &err) != LIPT_OK) bad = cli_fail(C, &err);
    lipt_adamw_config acfg = {lr, beta1, beta2, aeps, wd};
    if (!bad && lipt_adamw_config_check(&acfg, &err) != LIPT_OK) bad = cli_fail(C, &err);
    lipt_data_opts dopts = {0};
    if (!bad && (lipt_data_parse_vocab(cli_str(ap, "vocab"), &dopts, &err) != LIPT_OK ||
                 lipt_data_parse_split(cli_str(ap, "data-split"), &dopts, &err) != LIPT_OK))
        bad = cli_fail(C, &err);
    dopts.unk = cli_has(ap, "unk") && strcmp(cli_str(ap, "unk"), "1") == 0;
    if (bad) {
        if (resume) lipt_ckpt_close(&ck);
        return bad;
    }
    size_t off = 0;
    for (int i = 0; i < N_PERSISTED; i++) {
        const char *v = cli_str(ap, persisted[i]);
        if (!v) continue; /* unset flags are not stored */
        int w = snprintf(t.opts_text + off, sizeof t.opts_text - off, "%s=%s\n", persisted[i], v);
        if (w < 0 || (size_t)w >= sizeof t.opts_text - off) {
            if (resume) lipt_ckpt_close(&ck);
            return cli_error(C, "training options too long to store (--%s is %zu characters)", persisted[i], strlen(v));
        }
        off += (size_t)w;
    }
    snprintf(t.opts_text + off, sizeof t.opts_text - off, "global-batch=%ld\n", (long)K * batch);

    /* ---- data ---- */
    lipt_dataset ds;
    if (resume) dopts.use_vocab = &t.vocab;
    const char *data_spec = cli_str(ap, "data");
    int quiet = cli_has(ap, "quiet") || !t.lead;
    if (lipt_dataset_load(data_spec, &dopts, &ds, &err) != LIPT_OK) {
        if (resume) lipt_ckpt_close(&ck);
        return cli_fail(C, &err);
    }
    if (!resume) t.vocab = ds.vocab;
    char desc[1024];
    lipt_dataset_describe(&ds, desc, sizeof desc);
    if (!quiet) fprintf(stderr, "data: %s\n", desc);
    if (!resume) {
        if (cfg.vocab_size != t.vocab.size && !quiet)
            fprintf(stderr, "note: vocab_size set to %d, the vocabulary of %s\n", t.vocab.size, data_spec);
        cfg.vocab_size = t.vocab.size;
    }
    int rc = 1;
    int model_ok = 0, ctx_ok = 0, lock_fd = -1;
    if (lipt_config_validate(&cfg, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto done; }
    if (ds.len[LIPT_TRAIN] < (size_t)cfg.seq_len + 1) {
        rc = cli_error(C, "the training split has %zu symbols, fewer than seq_len + 1 = %d", ds.len[LIPT_TRAIN], cfg.seq_len + 1);
        goto done;
    }
    if (lipt_model_init(&t.model, &cfg, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto done; }
    model_ok = 1;
    lipt_adamw_init(&t.opt, &acfg);
    /* the dropout stream: rank 0's is the one-process stream; other ranks draw their own */
    const uint64_t rank_mix = (uint64_t)dist->rank * 0x9E3779B97F4A7C15ull;
    lipt_ctx_init(&t.ctx, (size_t)64 << 20, ((uint64_t)seed * 2654435761u + 1) ^ rank_mix);
    ctx_ok = 1;
    /* every rank draws the whole global batch from the one seeded stream and keeps its slice */
    if (lipt_batcher_init(&t.batcher, ds.tok[LIPT_TRAIN], ds.len[LIPT_TRAIN], K * (int)batch, cfg.seq_len, (uint64_t)seed,
                          &err) != LIPT_OK) {
        rc = cli_fail(C, &err);
        goto done;
    }
    t.best_bpc = INFINITY;
    t.best_step = -1;
    t.saved_step = -1;
    if (resume) {
        if (!ck.has_optimizer || ck.n_rngs < 1) {
            rc = cli_error(C, "%s has no optimizer state: it cannot be resumed", resume_path);
            goto done;
        }
        if (lipt_ckpt_load_params(&ck, &t.model.params, 1, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto done; }
        t.opt.t = ck.adam_t;
        t.step = ck.step;
        t.ctx.rng = ck.rngs[0];
        if (dist->rank > 0) lipt_rng_seed(&t.ctx.rng, ck.rngs[0].s[0] ^ rank_mix);
        t.batcher.st = rx.batcher;
        t.best_bpc = rx.best_bpc;
        t.best_step = rx.best_step;
        if (strcmp(resume_path, t.last_path) == 0) t.saved_step = t.step; /* else last.ckpt is not this state yet */
        if (!quiet) fprintf(stderr, "resumed from %s at step %lld\n", resume_path, (long long)t.step);
        lipt_ckpt_close(&ck);
        resume = 2; /* closed */
    }
    if (t.lead && run_mkdir(t.out, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto done; }
    if (t.lead) {
        /* one trainer per run directory: a second one would interleave checkpoints and metrics */
        char lock_path[1300];
        snprintf(lock_path, sizeof lock_path, "%s/.lock", t.out);
        lock_fd = open(lock_path, O_RDWR | O_CREAT, 0666);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
            rc = cli_error(C, "%s is in use by another lipt train (lock %s); wait for it or choose another --out", t.out,
                           lock_path);
            goto done;
        }
    }
    if (t.lead) {
        char path[1300], text[4096];
        snprintf(path, sizeof path, "%s/config.cfg", t.out);
        lipt_config_to_text(&cfg, text, sizeof text);
        FILE *f = fopen(path, "w");
        if (f) { fputs(text, f); fclose(f); }
    }
    if (!t.lead) {
        /* only rank 0 writes files */
    } else if (t.step > 0) truncate_metrics(t.metrics_path, t.step);
    else {
        /* a fresh run: files of an earlier run in this directory are not this run's */
        remove(t.metrics_path);
        remove(t.best_path);
    }
    FILE *log = fopen(t.lead ? t.metrics_path : "/dev/null", "a");
    if (!log) { rc = cli_error(C, "cannot write %s", t.metrics_path); goto done; }
    if (!quiet)
        fprintf(stderr, "model: %s attention, %s ffn, %d layers, d_model %d, %d heads, d_ff %d, seq_len %d: %zu parameters; %d threads\n",
                lipt_attn_name(cfg.attention), lipt_ffn_name(cfg.ffn), cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff,
                cfg.seq_len, lipt_params_count(&t.model.params), lipt_get_threads());
    if (!quiet && K > 1)
        fprintf(stderr, "data parallel: %d ranks x batch %ld = global batch %ld; %d threads per rank\n", K, batch,
                (long)K * batch, lipt_get_threads());

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    const int T = cfg.seq_len, B = (int)batch;
    const size_t G = (size_t)K * B; /* the global batch */
    int32_t *gin = malloc(sizeof(int32_t) * G * T), *gtg = malloc(sizeof(int32_t) * G * T);
    int32_t *in = gin ? gin + (size_t)dist->rank * B * T : NULL, *tg = gtg ? gtg + (size_t)dist->rank * B * T : NULL;
    if (!gin || !gtg) {
        rc = cli_error(C, "out of memory for a batch of %zu x %d tokens", G, T);
        goto closelog;
    }
    eval_opts eo = {T, T, B, (size_t)eval_symbols, 0, dist};
    size_t nvalid;
    const lipt_tok *vtok = lipt_dataset_eval_tokens(&ds, LIPT_VALID, &nvalid);
    {
        /* an empty split (e.g. --data-split 1,0,0) is not an error after training: it is not evaluated, and says so */
        size_t ntest_chk;
        lipt_dataset_eval_tokens(&ds, LIPT_TEST, &ntest_chk);
        if (nvalid < 2 && (eval_every > 0 || final_valid)) {
            if (!quiet) fprintf(stderr, "note: the validation split is empty: no validation during or after training\n");
            eval_every = 0;
            final_valid = 0;
        }
        if (ntest_chk < 2 && final_test) {
            if (!quiet) fprintf(stderr, "note: the test split is empty: no final test evaluation\n");
            final_test = 0;
        }
    }
    int tty = cli_stderr_is_tty() && !quiet;
    double t_start = cli_now(), t_last = t_start, loss_ema = NAN;
    int64_t first_step = t.step;
    double last_eval_bpc = NAN;
    rc = 0;
    /* replicas start identical (same seeds, or the same checkpoint read by every rank): check before the first step */
    if (check_replicas(&t, "at the start", &err)) { rc = 1; *agreed = 1; goto closelog; }
    const size_t bucket = (size_t)4 << 20; /* floats per Allreduce call (16 MiB) */
    const char *drift_env = getenv("LIPT_DEBUG_DRIFT_AT"); /* test hook: rank 1 perturbs a weight at this step */
    const long drift_at = drift_env && dist->rank == 1 ? atol(drift_env) : -1;
    double comm_start = dist->comm_seconds;
    int stop_now = 0;
    while (t.step < steps && !stop_now) {
        double t0 = cli_now(), c0 = dist->comm_seconds;
        lipt_batcher_next(&t.batcher, gin, gtg, NULL);
        /* logged steps also record the attention logits' largest row spread (a stability diagnostic) */
        t.ctx.attn_stats = (t.step + 1) % log_every == 0 || t.step + 1 == steps;
        t.ctx.attn_logit_spread = 0;
        const double cur_lr = lipt_lr_at(&sched, t.step);
        const lipt_step_opts so = {cur_lr, clip, cfg.power_iters, dist, bucket, stop_signal != 0};
        lipt_step_result sr;
        lipt_status sst = lipt_train_step(&t.ctx, &t.model, &t.opt, in, tg, B, T, &so, &sr, &err);
        const double l = sr.loss, gnorm = sr.grad_norm;
        const int stop_after = K > 1 ? sr.flag_any : 0;
        if (sst == LIPT_ERR_NUMERIC) {
            *agreed = 1;
            char lg[1400];
            last_good(&t, lg, sizeof lg);
            if (t.lead) {
                if (!isfinite(l))
                    fprintf(stderr, "%slipt train: step %lld: the loss is %g: training diverged (try a lower --lr or more "
                            "warmup); %s\n", tty ? "\n" : "", (long long)t.step + 1, l, lg);
                else
                    fprintf(stderr, "%slipt train: step %lld: the gradient norm is %g: training diverged; %s\n",
                            tty ? "\n" : "", (long long)t.step + 1, gnorm, lg);
            }
            rc = 1;
            break;
        }
        if (sst != LIPT_OK) { rc = cli_fail(C, &err); break; }
        t.step++;
        if (t.step == drift_at) t.model.params.value[0] += 1e-3f;
        double now = cli_now(), dt = now - t0;
        loss_ema = isfinite(loss_ema) ? 0.95 * loss_ema + 0.05 * l : l;
        double tok_s = (double)G * T / dt;
        if (t.step % log_every == 0 || t.step == steps) {
            fprintf(log, "{\"step\":%lld,\"loss\":%.6f,\"bpc\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tok_per_s\":%.1f,",
                    (long long)t.step, l, l / LN2, cur_lr, gnorm, tok_s);
            if (cfg.n_layers > 0) fprintf(log, "\"attn_logit_spread\":%.6g,", (double)t.ctx.attn_logit_spread);
            if (K > 1) fprintf(log, "\"comm_ms\":%.2f,", 1e3 * (dist->comm_seconds - c0));
            fprintf(log, "\"elapsed_s\":%.3f}\n", now - t_start);
        }
        if (K > 1 && ((check_every > 0 && t.step % check_every == 0) || t.step == steps || stop_after)) {
            if (check_replicas(&t, "replica check", &err)) { rc = 1; *agreed = 1; break; }
        }
        if (tty && (now - t_last > 0.25 || t.step == steps)) {
            char eta[32];
            double per = (now - t_start) / (double)(t.step - first_step);
            fmt_eta(per * (double)(steps - t.step), eta, sizeof eta);
            fprintf(stderr, "\rstep %lld/%ld  loss %.4f  bpc %.4f  lr %.2e  |g| %.2f  %.0f tok/s  ETA %s   ",
                    (long long)t.step, steps, loss_ema, loss_ema / LN2, cur_lr, gnorm, tok_s, eta);
            t_last = now;
        }
        int do_eval = eval_every > 0 && (t.step % eval_every == 0 || t.step == steps);
        if (do_eval) {
            eval_result er;
            if (evaluate(&t.ctx, &t.model, vtok, nvalid, &eo, &er, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            last_eval_bpc = er.bpc;
            fprintf(log, "{\"step\":%lld,\"eval\":\"valid\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"eval_s\":%.2f}\n",
                    (long long)t.step, er.symbols, er.nll, er.bpc, er.seconds);
            fflush(log);
            if (!quiet)
                fprintf(stderr, "%sstep %lld: valid bpc %.4f on %zu symbols (train loss %.4f, %.0f tok/s)\n", tty ? "\n" : "",
                        (long long)t.step, er.bpc, er.symbols, loss_ema, tok_s);
            if (er.bpc < t.best_bpc) {
                t.best_bpc = er.bpc;
                t.best_step = t.step;
                if (save_ckpt(&t, t.best_path, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            }
        }
        if ((save_every > 0 && t.step % save_every == 0) || (save_every == 0 && do_eval)) {
            if (save_ckpt(&t, t.last_path, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            fflush(log);
        }
        stop_now = K > 1 ? stop_after : stop_signal != 0;
    }
    if (tty) fputc('\n', stderr);
    fflush(log);
    if (rc == 0 && stop_now) {
        *agreed = 1;
        int sig = stop_signal ? stop_signal : SIGTERM; /* a rank that saw none stops because another did */
        if (save_ckpt(&t, t.last_path, &err) != LIPT_OK) rc = cli_fail(C, &err);
        else {
            if (t.lead)
            fprintf(stderr, "lipt train: %s at step %lld: saved %s; continue with: lipt train --out %s --resume\n",
                    sig == SIGINT ? "interrupted" : "terminated", (long long)t.step, t.last_path, t.out);
            rc = 128 + sig;
        }
    } else if (rc == 0) {
        if (save_ckpt(&t, t.last_path, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto closelog; }
        /* the final state is saved: a signal during the final evaluation may now simply end the process */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        double train_s = cli_now() - t_start;
        eval_result ev = {0}, et = {0};
        eval_opts fo = {T, T, B, 0, tty, dist};
        char proto[96];
        eval_protocol_str(&fo, proto, sizeof proto);
        if (final_valid) {
            if (!quiet) fprintf(stderr, "final evaluation on the whole validation split (%s%s)\n", proto, K > 1 ? ", split over the ranks" : "");
            if (evaluate(&t.ctx, &t.model, vtok, nvalid, &fo, &ev, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto closelog; }
            fprintf(log, "{\"step\":%lld,\"eval\":\"valid_full\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"eval_s\":%.2f}\n",
                    (long long)t.step, ev.symbols, ev.nll, ev.bpc, ev.seconds);
            /* best.ckpt compares one measure: the full split only when periodic evaluations used it too */
            int same_measure = t.best_step < 0 || eval_symbols == 0 || nvalid - 1 <= (size_t)eval_symbols;
            if (same_measure && ev.bpc < t.best_bpc) {
                t.best_bpc = ev.bpc;
                t.best_step = t.step;
                if (save_ckpt(&t, t.best_path, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto closelog; }
            }
        }
        if (final_test) {
            size_t ntest;
            const lipt_tok *ttok = lipt_dataset_eval_tokens(&ds, LIPT_TEST, &ntest);
            if (!quiet) fprintf(stderr, "final evaluation on the whole test split (%s)\n", proto);
            if (evaluate(&t.ctx, &t.model, ttok, ntest, &fo, &et, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto closelog; }
            fprintf(log, "{\"step\":%lld,\"eval\":\"test_full\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"eval_s\":%.2f}\n",
                    (long long)t.step, et.symbols, et.nll, et.bpc, et.seconds);
        }
        if (!quiet) {
            fprintf(stderr, "done: %lld steps in %.1f s", (long long)(t.step - first_step), train_s);
            if (final_valid) fprintf(stderr, "; valid bpc %.4f", ev.bpc);
            if (final_test) fprintf(stderr, "; test bpc %.4f", et.bpc);
            if (t.best_step >= 0) fprintf(stderr, "; checkpoints %s, %s (best, step %lld)\n", t.last_path, t.best_path, (long long)t.best_step);
            else fprintf(stderr, "; checkpoint %s\n", t.last_path);
        }
        double comm_per_step = t.step > first_step ? (dist->comm_seconds - comm_start) / (double)(t.step - first_step) : 0;
        if (!quiet && K > 1)
            fprintf(stderr, "communication: %.1f ms per step on average (%.1f%% of the training time), %d ranks\n",
                    1e3 * comm_per_step, 100.0 * (dist->comm_seconds - comm_start) / fmax(train_s, 1e-9), K);
        if (cli_has(ap, "json") && t.lead) {
            json_w j;
            json_begin(&j, stdout);
            json_int(&j, "steps", t.step);
            json_int(&j, "ranks", K);
            json_int(&j, "global_batch", (int64_t)G);
            json_num(&j, "tokens_per_second", (double)(t.step - first_step) * (double)G * T / fmax(train_s, 1e-9));
            json_num(&j, "comm_seconds_per_step", comm_per_step);
            json_num(&j, "train_seconds", train_s);
            json_num(&j, "last_periodic_valid_bpc", last_eval_bpc);
            json_num(&j, "valid_bpc", final_valid ? ev.bpc : NAN);
            json_num(&j, "valid_nll", final_valid ? ev.nll : NAN);
            json_num(&j, "test_bpc", final_test ? et.bpc : NAN);
            json_num(&j, "test_nll", final_test ? et.nll : NAN);
            json_num(&j, "best_valid_bpc", t.best_bpc);
            json_int(&j, "best_step", t.best_step);
            json_str(&j, "protocol", proto);
            json_str(&j, "last_ckpt", t.last_path);
            json_end(&j);
        }
    }
closelog:
    fclose(log);
    free(gin);
    free(gtg);
done:
    if (lock_fd >= 0) close(lock_fd); /* releases the lock */
    if (resume == 1) lipt_ckpt_close(&ck);
    if (ctx_ok) lipt_ctx_free(&t.ctx);
    if (model_ok) lipt_model_free(&t.model);
    lipt_dataset_free(&ds);
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
