/* lipt train's loop: one lipt_train_step per iteration, metrics, progress, periodic evaluation and checkpoints,
 * signals, divergence; then the final save, evaluations and summary. Setup is in cmd_train.c. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "lipt/evaluate.h"
#include "lipt/checkpoint.h"
#include "lipt/train.h"
#include "run.h"
#include "train_run.h"

#define LN2 0.69314718055994530942

/* Signal flag: the one piece of process-global state, because a signal handler can only reach globals. */
static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

void train_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

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
    if (st == LIPT_OK && path == t->last_path) {
        t->saved_step = t->step;
        t->t_saved = cli_now();
    }
    return st;
}

static void fmt_eta(double sec, char *buf, size_t n) {
    if (!isfinite(sec) || sec < 0) sec = 0;
    long s = (long)sec;
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
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

/* The message of a non-finite loss or gradient norm; the exit status 1. */
static int diverged(trainer *t, const lipt_step_result *sr) {
    *t->agreed = 1;
    char lg[1400];
    last_good(t, lg, sizeof lg);
    if (!t->lead) return 1;
    if (!isfinite(sr->loss))
        fprintf(stderr, "%slipt train: step %lld: the loss is %g: training diverged (try a lower --lr or more warmup); %s\n",
                t->tty ? "\n" : "", (long long)t->step + 1, sr->loss, lg);
    else
        fprintf(stderr, "%slipt train: step %lld: the gradient norm is %g: training diverged; %s\n", t->tty ? "\n" : "",
                (long long)t->step + 1, sr->grad_norm, lg);
    return 1;
}

/* The metrics line of a logged step, and the progress line on a terminal. Returns the step's tokens/s. */
static double report_step(trainer *t, const train_settings *s, const lipt_step_result *sr, double lr, double t0, double c0,
                        double *t_last) {
    const double now = cli_now(), dt = now - t0, l = sr->loss;
    const double tok_s = (double)t->G * t->T / dt;
    if (t->step % s->log_every == 0 || t->step == s->steps) {
        fprintf(t->log, "{\"step\":%lld,\"loss\":%.6f,\"bpc\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tok_per_s\":%.1f,",
                (long long)t->step, l, l / LN2, lr, sr->grad_norm, tok_s);
        if (t->cfg.n_layers > 0) fprintf(t->log, "\"attn_logit_spread\":%.6g,", (double)t->ctx.attn_logit_spread);
        if (t->K > 1) fprintf(t->log, "\"comm_ms\":%.2f,", 1e3 * (t->dist->comm_seconds - c0));
        fprintf(t->log, "\"elapsed_s\":%.3f}\n", now - t->t_start);
    }
    if (t->tty && (now - *t_last > 0.25 || t->step == s->steps)) {
        char eta[32];
        double per = (now - t->t_start) / (double)(t->step - t->first_step);
        fmt_eta(per * (double)(s->steps - t->step), eta, sizeof eta);
        char line[256];
        snprintf(line, sizeof line, "step %lld/%ld loss %.4f bpc %.4f lr %.1e |g| %.2f %.0f tok/s ETA %s",
                 (long long)t->step, s->steps, t->loss_ema, t->loss_ema / LN2, lr, sr->grad_norm, tok_s, eta);
        /* one terminal line, whatever its width: a wrapped line could not be redrawn in place */
        const int w = cli_terminal_width(2) - 1;
        if (w > 0 && w < (int)sizeof line) line[w] = 0;
        fprintf(stderr, "\r%s\033[K", line);
        *t_last = now;
    }
    return tok_s;
}

/* Flushes metrics.jsonl; 1 (err set, naming the last good checkpoint) when a line could not be written. */
static int log_failed(trainer *t, lipt_error *err) {
    if (fflush(t->log) == 0 && !ferror(t->log)) return 0;
    const int e = errno;
    char lg[1400];
    last_good(t, lg, sizeof lg);
    lipt_fail(err, LIPT_ERR_IO, "writing %s failed: %s; %s", t->metrics_path, strerror(e), lg);
    return 1;
}

/* Periodic evaluation (best.ckpt when it improves) and the periodic last.ckpt. 0, or the exit status. */
static int periodic(trainer *t, const train_settings *s, double tok_s, lipt_error *err) {
    const int do_eval = s->eval_every > 0 && (t->step % s->eval_every == 0 || t->step == s->steps);
    if (do_eval) {
        lipt_eval_opts eo = {t->T, t->T, t->B, (size_t)s->eval_symbols, 0, t->dist};
        lipt_eval_result er;
        if (lipt_evaluate(&t->ctx, &t->model, t->vtok, t->nvalid, &eo, &er, err) != LIPT_OK) return cli_fail("train", err);
        t->last_eval_bpc = er.bpc;
        fprintf(t->log, "{\"step\":%lld,\"eval\":\"valid\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"eval_s\":%.2f}\n",
                (long long)t->step, er.symbols, er.nll, er.bpc, er.seconds);
        fflush(t->log);
        if (!s->quiet)
            fprintf(stderr, "%sstep %lld: valid bpc %.4f on %zu symbols (train loss %.4f, %.0f tok/s)\n",
                    t->tty ? "\n" : "", (long long)t->step, er.bpc, er.symbols, t->loss_ema, tok_s);
        if (er.bpc < t->best_bpc) {
            t->best_bpc = er.bpc;
            t->best_step = t->step;
            if (save_ckpt(t, t->best_path, err) != LIPT_OK) return cli_fail("train", err);
        }
    }
    const int by_steps = s->save_every > 0 && t->step % s->save_every == 0;
    const int by_time = s->save_minutes > 0 && cli_now() - t->t_saved >= 60.0 * s->save_minutes;
    if (do_eval || by_steps || by_time) {
        if (log_failed(t, err)) return cli_fail("train", err); /* the log is never behind the checkpoint */
        if (save_ckpt(t, t->last_path, err) != LIPT_OK) return cli_fail("train", err);
    }
    return 0;
}

int train_loop(trainer *t, const train_settings *s) {
    lipt_error err = {0};
    t->t_start = t->t_saved = cli_now();
    t->loss_ema = t->last_eval_bpc = NAN;
    t->first_step = t->step;
    /* replicas start identical (same seeds, or the same checkpoint read by every rank): check before the first step */
    if (check_replicas(t, "at the start", &err)) {
        *t->agreed = 1;
        return 1;
    }
    const char *drift_env = getenv("LIPT_DEBUG_DRIFT_AT"); /* test hook: rank 1 perturbs a weight at this step */
    const long drift_at = drift_env && t->dist->rank == 1 ? atol(drift_env) : -1;
    t->comm_start = t->dist->comm_seconds;
    double t_last = t->t_start;
    while (t->step < s->steps && !t->stop_now) {
        const double t0 = cli_now(), c0 = t->dist->comm_seconds;
        lipt_batcher_next(&t->batcher, t->gin, t->gtg, NULL);
        /* logged steps also record the attention logits' largest row spread (a stability diagnostic) */
        t->ctx.attn_stats = (t->step + 1) % s->log_every == 0 || t->step + 1 == s->steps;
        t->ctx.attn_logit_spread = 0;
        const double lr = lipt_lr_at(&s->sched, t->step);
        const lipt_step_opts so = {lr, s->clip, t->cfg.power_iters, t->dist, (size_t)4 << 20, stop_signal != 0};
        lipt_step_result sr;
        const lipt_status st = lipt_train_step(&t->ctx, &t->model, &t->opt, t->in, t->tg, t->B, t->T, &so, &sr, &err);
        if (st == LIPT_ERR_NUMERIC) return diverged(t, &sr);
        if (st != LIPT_OK) return cli_fail("train", &err);
        t->step++;
        if (t->step == drift_at) t->model.params.value[0] += 1e-3f;
        t->loss_ema = isfinite(t->loss_ema) ? 0.95 * t->loss_ema + 0.05 * sr.loss : sr.loss;
        const double tok_s = report_step(t, s, &sr, lr, t0, c0, &t_last);
        const int stop_after = t->K > 1 ? sr.flag_any : 0;
        if (t->K > 1 && ((s->check_every > 0 && t->step % s->check_every == 0) || t->step == s->steps || stop_after)) {
            if (check_replicas(t, "replica check", &err)) {
                *t->agreed = 1;
                return 1;
            }
        }
        const int rc = periodic(t, s, tok_s, &err);
        if (rc) return rc;
        t->stop_now = t->K > 1 ? stop_after : stop_signal != 0;
    }
    return 0;
}

/* The final evaluation of one split, logged as `what` ("valid_full", "test_full"). */
static lipt_status final_eval(trainer *t, const lipt_tok *tok, size_t n, const char *what, lipt_eval_result *r,
                              lipt_error *err) {
    lipt_eval_opts fo = {t->T, t->T, t->B, 0, t->tty, t->dist};
    lipt_status st = lipt_evaluate(&t->ctx, &t->model, tok, n, &fo, r, err);
    if (st == LIPT_OK)
        fprintf(t->log, "{\"step\":%lld,\"eval\":\"%s\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"eval_s\":%.2f}\n",
                (long long)t->step, what, r->symbols, r->nll, r->bpc, r->seconds);
    return st;
}

/* The summary lines and the JSON object of a finished run. */
static void summary(const trainer *t, const train_settings *s, int json, double train_s, const lipt_eval_result *ev,
                    const lipt_eval_result *et, const char *proto) {
    const int K = t->K;
    if (!s->quiet) {
        fprintf(stderr, "done: %lld steps in %.1f s", (long long)(t->step - t->first_step), train_s);
        if (s->final_valid) fprintf(stderr, "; valid bpc %.4f", ev->bpc);
        if (s->final_test) fprintf(stderr, "; test bpc %.4f", et->bpc);
        if (t->best_step >= 0)
            fprintf(stderr, "; checkpoints %s, %s (best, step %lld)\n", t->last_path, t->best_path, (long long)t->best_step);
        else fprintf(stderr, "; checkpoint %s\n", t->last_path);
    }
    const double comm = t->dist->comm_seconds - t->comm_start;
    const double comm_per_step = t->step > t->first_step ? comm / (double)(t->step - t->first_step) : 0;
    if (!s->quiet && K > 1)
        fprintf(stderr, "communication: %.1f ms per step on average (%.1f%% of the training time), %d ranks\n",
                1e3 * comm_per_step, 100.0 * comm / fmax(train_s, 1e-9), K);
    if (!json || !t->lead) return;
    json_w j;
    json_begin(&j, stdout);
    json_int(&j, "steps", t->step);
    json_int(&j, "ranks", K);
    json_int(&j, "global_batch", (int64_t)t->G);
    json_str(&j, "precision", lipt_precision_name(t->cfg.precision));
    json_num(&j, "tokens_per_second", (double)(t->step - t->first_step) * (double)t->G * t->T / fmax(train_s, 1e-9));
    json_num(&j, "comm_seconds_per_step", comm_per_step);
    json_num(&j, "train_seconds", train_s);
    json_num(&j, "last_periodic_valid_bpc", t->last_eval_bpc);
    json_num(&j, "valid_bpc", s->final_valid ? ev->bpc : NAN);
    json_num(&j, "valid_nll", s->final_valid ? ev->nll : NAN);
    json_num(&j, "test_bpc", s->final_test ? et->bpc : NAN);
    json_num(&j, "test_nll", s->final_test ? et->nll : NAN);
    json_num(&j, "best_valid_bpc", t->best_bpc);
    json_int(&j, "best_step", t->best_step);
    json_str(&j, "protocol", proto);
    json_str(&j, "last_ckpt", t->last_path);
    json_end(&j);
}

/* A signal stopped the loop: save and say how to continue. The exit status 128 + signal. */
static int stopped(trainer *t, lipt_error *err) {
    *t->agreed = 1;
    const int sig = stop_signal ? stop_signal : SIGTERM; /* a rank that saw none stops because another did */
    if (save_ckpt(t, t->last_path, err) != LIPT_OK) return cli_fail("train", err);
    if (t->lead)
        fprintf(stderr, "lipt train: %s at step %lld: saved %s; continue with: lipt train --out %s --resume\n",
                sig == SIGINT ? "interrupted" : "terminated", (long long)t->step, t->last_path, t->out);
    return 128 + sig;
}

int train_finish(trainer *t, const train_settings *s, int json, int rc) {
    lipt_error err = {0};
    if (t->tty) fputc('\n', stderr);
    if (log_failed(t, &err) && rc == 0) rc = cli_fail("train", &err);
    if (rc != 0) return rc;
    if (t->stop_now) return stopped(t, &err);
    if (save_ckpt(t, t->last_path, &err) != LIPT_OK) return cli_fail("train", &err);
    /* the final state is saved: a signal during the final evaluation may now simply end the process */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const double train_s = cli_now() - t->t_start;
    lipt_eval_result ev = {0}, et = {0};
    lipt_eval_opts fo = {t->T, t->T, t->B, 0, t->tty, t->dist};
    char proto[96];
    lipt_eval_protocol_str(&fo, proto, sizeof proto);
    if (s->final_valid) {
        if (!s->quiet)
            fprintf(stderr, "final evaluation on the whole validation split (%s%s)\n", proto,
                    t->K > 1 ? ", split over the ranks" : "");
        if (final_eval(t, t->vtok, t->nvalid, "valid_full", &ev, &err) != LIPT_OK) return cli_fail("train", &err);
        /* best.ckpt compares one measure: the full split only when periodic evaluations used it too */
        const int same_measure = t->best_step < 0 || s->eval_symbols == 0 || t->nvalid - 1 <= (size_t)s->eval_symbols;
        if (same_measure && ev.bpc < t->best_bpc) {
            t->best_bpc = ev.bpc;
            t->best_step = t->step;
            if (save_ckpt(t, t->best_path, &err) != LIPT_OK) return cli_fail("train", &err);
        }
    }
    if (s->final_test) {
        size_t ntest;
        const lipt_tok *ttok = lipt_dataset_eval_tokens(&t->ds, LIPT_TEST, &ntest);
        if (!s->quiet) fprintf(stderr, "final evaluation on the whole test split (%s)\n", proto);
        if (final_eval(t, ttok, ntest, "test_full", &et, &err) != LIPT_OK) return cli_fail("train", &err);
    }
    summary(t, s, json, train_s, &ev, &et, proto);
    return 0;
}
