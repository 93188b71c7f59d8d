/* lipt train's setup: precision, threads, the run folder (its default name, the lock, a run it already holds), the
 * corpus, the model, the optimizer, the context and the batch buffers. */
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
#include "lipt/checkpoint.h"
#include "run.h"
#include "train_run.h"
#include "train_setup.h"

/* --precision over the config's (or the resumed checkpoint's) key, checked against this build and CPU before any
 * work. 0, or the exit status. */
int train_apply_precision(cli_args *ap, trainer *t, int resume, const char *resume_path, int quiet) {
    const lipt_precision was = t->cfg.precision;
    const int rc = cli_apply_precision(ap, "train", &t->cfg.precision);
    if (!rc && resume && t->cfg.precision != was && !quiet)
        fprintf(stderr, "note: the matrix products change from %s (the precision of %s) to %s\n",
                lipt_precision_name(was), resume_path, lipt_precision_name(t->cfg.precision));
    return rc;
}

/* The corpus, the model, the optimizer, the context and the batcher (fresh, or restored from ck, which is then
 * closed). 0, or the exit status. */
int train_setup_model(trainer *t, train_settings *s, const char *data_spec, int *resume, lipt_ckpt *ck,
                       const run_extra *rx, const char *resume_path, int force, const char *data_origin) {
    const char *C = "train";
    lipt_error err = {0};
    if (*resume || t->init_open) s->dopts.use_vocab = &t->vocab; /* the checkpoint's model reads its own symbols */
    if (lipt_dataset_load(data_spec, &s->dopts, &t->ds, &err) != LIPT_OK) {
        if (t->init_open) train_init_vocab_note(t, &err);
        run_blame_corpus(&err, data_origin);
        return cli_fail(C, &err);
    }
    t->ds_ok = 1;
    if (!*resume) t->vocab = t->ds.vocab;
    /* the corpus's identity goes with every checkpoint, so that other commands find it and notice a change */
    const size_t used = strlen(t->opts_text);
    if (run_corpus_identity(&t->ds, t->opts_text + used, sizeof t->opts_text - used) != 0) t->opts_text[used] = 0;
    if (*resume) {
        const int rc = train_check_resumed_corpus(t, rx, resume_path, data_spec, force, (long long)ck->step);
        if (rc) return rc;
    }
    if (t->init_open && train_init_opts(t)) return 1;
    if (train_set_run_id(t, *resume ? rx->opts_text : NULL, *resume ? ck->config_text : NULL)) return 1;
    char desc[1024];
    lipt_dataset_describe(&t->ds, desc, sizeof desc);
    if (!s->quiet) cli_print_wrapped(stderr, "data: ", desc, 80);
    if (!*resume) {
        if (t->cfg.vocab_size != t->vocab.size && !s->quiet)
            fprintf(stderr, "note: vocab_size set to %d, the vocabulary of %s\n", t->vocab.size, cli_shown(data_spec));
        t->cfg.vocab_size = t->vocab.size;
    }
    if (lipt_config_validate(&t->cfg, &err) != LIPT_OK) return cli_fail(C, &err), 2; /* keys that do not fit: usage */
    if (s->memory == CLI_MEMORY_INVERT && lipt_config_reversible_check(&t->cfg, &err) != LIPT_OK)
        return cli_fail(C, &err), 2;
    if (t->ds.len[LIPT_TRAIN] < (size_t)t->cfg.seq_len + 1)
        return cli_error(C, "the training split has %zu symbols, fewer than seq_len + 1 = %d", t->ds.len[LIPT_TRAIN],
                         t->cfg.seq_len + 1);
    size_t arena_bytes = 0;
    const int rc = train_check_memory(t, s, &arena_bytes); /* before the model and the arena are allocated */
    if (rc) return rc;
    if (lipt_model_init(&t->model, &t->cfg, &err) != LIPT_OK) return cli_fail(C, &err);
    t->model_ok = 1;
    if (t->init_open && train_init_weights(t, s->quiet)) return 1;
    lipt_adamw_init(&t->opt, &s->acfg);
    if (train_optim_init(t, s)) return 1;
    /* the dropout stream: rank 0's is the one-process stream; other ranks draw their own */
    const uint64_t rank_mix = (uint64_t)t->dist->rank * 0x9E3779B97F4A7C15ull;
    lipt_ctx_init(&t->ctx, 4096, ((uint64_t)s->seed * 2654435761u + 1) ^ rank_mix);
    t->ctx.recompute = s->recompute;
    t->rev = s->rev;
    t->ctx.rev = s->memory == CLI_MEMORY_INVERT ? &t->rev : NULL;
    t->ctx_ok = 1;
    /* the step's arena at its estimated size now, so that the step never grows it (growing can only abort) */
    if (lipt_arena_reserve(&t->ctx.arena, arena_bytes, &err) != LIPT_OK) {
        char msg[LIPT_ERRMSG_LEN];
        memcpy(msg, err.msg, sizeof msg);
        lipt_fail(&err, LIPT_ERR_NOMEM, "%.300s: lower --batch, or seq_len, d_model, d_ff or n_layers", msg);
        return cli_fail(C, &err);
    }
    if (lipt_ctx_set_precision(&t->ctx, t->cfg.precision, &err) != LIPT_OK) return cli_fail(C, &err);
    /* every rank draws the whole global batch from the one seeded stream and keeps its slice */
    if (lipt_batcher_init(&t->batcher, t->ds.tok[LIPT_TRAIN], t->ds.len[LIPT_TRAIN], t->K * (int)s->batch,
                          t->cfg.seq_len, (uint64_t)s->seed, &err) != LIPT_OK)
        return cli_fail(C, &err);
    t->best_bpc = INFINITY;
    t->best_step = -1;
    t->saved_step = -1;
    return *resume ? train_restore(t, s, ck, rx, resume_path, rank_mix, resume) : 0;
}

/* The run directory (rank 0): created, locked, run.cfg, metrics.jsonl opened (truncated to the resumed step, or
 * fresh). 0, or the exit status. */
int train_setup_files(trainer *t, int force, int quiet) {
    const char *C = "train";
    lipt_error err = {0};
    if (t->lead) {
        if (run_mkdir(t->out, &err) != LIPT_OK) return cli_fail(C, &err);
        /* one trainer per run directory: a second one would interleave checkpoints and metrics */
        if (run_lock(t->out, &t->lock_fd, &err) != LIPT_OK) return cli_fail(C, &err);
        if (t->resumed) {
            if (train_check_history(t, force, quiet)) return 1; /* another run's folder, or a roll back */
            if (train_truncate_metrics(t->metrics_path, t->step, &err) != LIPT_OK) return cli_fail(C, &err);
            t->elapsed_base = train_metrics_elapsed(t->metrics_path, t->step); /* the wall time so far */
            train_record_resume_cfg(t);
        } else {
            /* a fresh run must not replace another run's files (train_history.c: refused, or kept aside with force); a
             * folder without a checkpoint holds no run (its training ended before the first checkpoint) and is reused */
            if (train_check_history(t, force, quiet)) return 1;
            const char *held = run_folder_checkpoint(t->out);
            if (!held && access(t->metrics_path, F_OK) == 0 && !quiet)
                fprintf(stderr, "note: %s held no checkpoint (its training ended before the first one): its "
                        "metrics.jsonl and run.cfg are replaced\n", cli_shown(t->out));
            /* files of an earlier run in this directory are not this run's */
            remove(t->metrics_path);
            remove(t->best_path);
            remove(t->last_path);
            train_write_run_cfg(t);
        }
    }
    /* appended to only as the regular file this run (or the one it resumes) created: never through a symlink */
    t->log = t->lead ? lipt_open_append(t->metrics_path, &err) : fopen("/dev/null", "a");
    if (!t->log) return t->lead ? cli_fail(C, &err) : cli_error(C, "cannot open /dev/null");
    setvbuf(t->log, NULL, _IOLBF, 0); /* every metrics line reaches the file as it is written */
    if (t->resumed) train_log_resume(t);
    if (t->init_from[0]) train_log_init(t);
    if (!t->resumed && t->kept_aside[0] && t->lead) /* --force over another run: where its files went */
        fprintf(t->log, "{\"step\":0,\"event\":\"kept_aside\",\"files\":\"%s\"}\n", t->kept_aside);
    return 0;
}

/* The batch buffers and the validation split; the run described. 0, or the exit status. */
int train_setup_batches(trainer *t, train_settings *s) {
    const int K = t->K;
    char desc[512]; /* printed in lines of at most 80 columns */
    const int nth = lipt_get_threads();
    snprintf(desc, sizeof desc, "%s attention, %s ffn, %d layers, d_model %d, %d heads, d_ff %d, seq_len %d; %zu parameters; "
             "%d thread%s%s%s%s", lipt_attn_name(t->cfg.attention), lipt_ffn_name(t->cfg.ffn), t->cfg.n_layers,
             t->cfg.d_model, t->cfg.n_heads, t->cfg.d_ff, t->cfg.seq_len, lipt_params_count(&t->model.params),
             nth, nth == 1 ? "" : "s", s->memory == CLI_MEMORY_RECOMPUTE ? "; recomputing activations"
             : s->memory == CLI_MEMORY_INVERT ? "; block inputs rebuilt from outputs (--memory invert)" : "",
             t->cfg.precision != LIPT_PRECISION_FLOAT32 ? "; matrix products in " : "",
             t->cfg.precision != LIPT_PRECISION_FLOAT32 ? lipt_precision_name(t->cfg.precision) : "");
    if (!s->quiet) cli_print_wrapped(stderr, "model: ", desc, 80);
    if (!s->quiet && K > 1)
        fprintf(stderr, "data parallel: %d ranks x batch %ld = global batch %ld; %d threads per rank\n", K, s->batch,
                (long)K * s->batch, lipt_get_threads());
    t->T = t->cfg.seq_len;
    t->B = (int)s->batch;
    t->G = (size_t)K * t->B;
    t->gin = malloc(sizeof(int32_t) * t->G * t->T);
    t->gtg = malloc(sizeof(int32_t) * t->G * t->T);
    if (!t->gin || !t->gtg) {
        lipt_error err = {0};
        lipt_fail(&err, LIPT_ERR_NOMEM, "out of memory for a batch of %zu x %d tokens: lower --batch", t->G, t->T);
        return cli_fail("train", &err);
    }
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

/* Threads: ranks sharing a machine split the CPUs of their affinity mask unless told otherwise; then --threads. 0,
 * or the exit status. */
int train_setup_threads(cli_args *ap, const lipt_dist *dist) {
    if (dist->local_size > 1 && !getenv("LIPT_THREADS")) lipt_set_threads(lipt_cpus_per_rank(dist->local_size));
    return cli_apply_threads(ap, "train");
}

/* --out, or its default: with --resume the folder of --ckpt, else a new timestamped folder under runs/. 0, or the
 * exit status. */
int train_default_out(cli_args *ap, char *buf, size_t n, const char **out) {
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
