/* lipt train's loop: one lipt_train_step per iteration, metrics, progress, periodic evaluation and checkpoints,
 * early stopping (--patience), signals, divergence; then the final save, evaluations (--final-from) and summary.
 * Setup is in cmd_train.c. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "lipt/evaluate.h"
#include "lipt/checkpoint.h"
#include "lipt/train.h"
#include "run.h"
#include "train_run.h"

#define LN2 0.69314718055994530942

/* Signal flag: the one piece of process-global state, because a signal handler can only reach globals. Atomic, not
 * volatile sig_atomic_t: the handler runs on lipt's signal thread (lipt_signals_isolate in main), not on the thread
 * that reads the flag; a lock-free atomic is safe in a handler. */
static atomic_int stop_signal = 0;
static void on_signal(int sig) { atomic_store(&stop_signal, sig); }
static int hup_caught = 0; /* SIGHUP is left alone when the run was started ignoring it (nohup) */

void train_install_signals(void) {
    /* on an alternate stack, in case it ever runs on a thread whose stack pointer a library has moved */
    lipt_signals_catch(SIGINT, on_signal);
    lipt_signals_catch(SIGTERM, on_signal);
    /* a closed terminal or a dropped ssh session saves like SIGTERM, unless the user asked to outlive it (nohup) */
    struct sigaction was;
    hup_caught = sigaction(SIGHUP, NULL, &was) == 0 && was.sa_handler != SIG_IGN &&
                 lipt_signals_catch(SIGHUP, on_signal) == 0;
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
    /* the options and the patience count of this state (not settings: never in run.cfg); no wall time, so that a
     * checkpoint is the same bytes whatever the machine's speed (resume reads it back from metrics.jsonl) */
    char opts[sizeof t->opts_text + 128];
    snprintf(opts, sizeof opts, "%s" TRAIN_EVALS_SINCE_BEST "=%ld\n", t->opts_text, t->evals_since_best);
    run_extra x = {t->batcher.st, t->best_bpc, t->best_step, opts};
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
        if (t->ctx.rev) { /* --memory invert since the last logged step: cost of the rebuilds, worst bound */
            lipt_reversible *r = t->ctx.rev;
            fprintf(t->log, "\"rebuild_evals\":%.3g,\"rebuild_bound\":%.3g,\"rebuild_unconverged\":%ld,",
                    r->inversions ? r->work / (double)r->inversions : 0.0, r->worst_bound, r->unconverged);
            r->inversions = r->evaluations = r->fallbacks = r->unconverged = 0;
            r->work = r->worst_bound = 0;
        }
        fprintf(t->log, "\"elapsed_s\":%.3f}\n", t->elapsed_base + (now - t->t_start)); /* summed over resumes */
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

/* --patience ran out: the loop ends here (before --steps) and says why, once, on rank 0 (quiet or not). */
static void early_stop(trainer *t, const char *when) {
    t->early_stopped = 1;
    if (t->lead)
        fprintf(stderr, "%searly stop at step %lld%s: no validation improvement in %ld evaluation%s; best BPC %.4f at "
                "step %lld (%s)\n", t->tty ? "\n" : "", (long long)t->step, when, t->evals_since_best,
                t->evals_since_best == 1 ? "" : "s", t->best_bpc, (long long)t->best_step, t->best_path);
}

/* Periodic evaluation (best.ckpt when it improves; early stopping) and the periodic last.ckpt. 0, or the exit
 * status. */
static int periodic(trainer *t, const train_settings *s, double tok_s, lipt_error *err) {
    const int do_eval = s->eval_every > 0 && (t->step % s->eval_every == 0 || t->step == s->steps);
    if (do_eval) {
        lipt_eval_opts eo = {t->T, t->T, t->B, (size_t)s->eval_symbols, 0, t->dist};
        lipt_eval_result er;
        if (lipt_evaluate(&t->ctx, &t->model, t->vtok, t->nvalid, &eo, &er, err) != LIPT_OK) return cli_fail("train", err);
        t->last_eval_bpc = er.bpc;
        t->last_eval_acc = er.accuracy;
        fprintf(t->log, "{\"step\":%lld,\"eval\":\"valid\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,"
                "\"accuracy\":%.6f,\"eval_s\":%.2f}\n", (long long)t->step, er.symbols, er.nll, er.bpc, er.accuracy,
                er.seconds);
        fflush(t->log);
        if (!s->quiet)
            fprintf(stderr, "%sstep %lld: valid bpc %.4f, accuracy %.4f on %zu symbols (train loss %.4f, %.0f tok/s)\n",
                    t->tty ? "\n" : "", (long long)t->step, er.bpc, er.accuracy, er.symbols, t->loss_ema, tok_s);
        if (er.bpc < t->best_bpc) {
            t->best_bpc = er.bpc;
            t->best_step = t->step;
            t->evals_since_best = 0;
            if (save_ckpt(t, t->best_path, err) != LIPT_OK) return cli_fail("train", err);
        } else {
            t->evals_since_best++;
        }
        /* every rank has the same reduced BPC, so every rank stops at the same step */
        if (s->patience > 0 && t->evals_since_best >= s->patience && t->step < s->steps) {
            fprintf(t->log, "{\"step\":%lld,\"event\":\"early_stop\",\"patience\":%ld,\"best_step\":%lld,"
                    "\"best_valid_bpc\":%.6f}\n", (long long)t->step, s->patience, (long long)t->best_step,
                    t->best_bpc);
            early_stop(t, "");
        }
    }
    if (s->sample_every > 0 && t->step % s->sample_every == 0 && train_sample(t, s, err)) return 1;
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
    t->loss_ema = t->last_eval_bpc = t->last_eval_acc = NAN;
    t->first_step = t->step;
    /* a resumed run whose patience had already run out stops where the uninterrupted run stopped */
    if (s->patience > 0 && t->evals_since_best >= s->patience && t->step < s->steps)
        early_stop(t, " (reached before this --resume)");
    /* replicas start identical (same seeds, or the same checkpoint read by every rank): check before the first step */
    if (check_replicas(t, "at the start", &err)) {
        *t->agreed = 1;
        return 1;
    }
    const char *drift_env = getenv("LIPT_DEBUG_DRIFT_AT"); /* test hook: rank 1 perturbs a weight at this step */
    const long drift_at = drift_env && t->dist->rank == 1 ? atol(drift_env) : -1;
    t->comm_start = t->dist->comm_seconds;
    double t_last = t->t_start;
    while (t->step < s->steps && !t->stop_now && !t->early_stopped) {
        const double t0 = cli_now(), c0 = t->dist->comm_seconds;
        lipt_batcher_next(&t->batcher, t->gin, t->gtg, NULL);
        /* logged steps also record the attention logits' largest row spread (a stability diagnostic) */
        t->ctx.attn_stats = (t->step + 1) % s->log_every == 0 || t->step + 1 == s->steps;
        t->ctx.attn_logit_spread = 0;
        const double lr = lipt_lr_at(&s->sched, t->step);
        const lipt_step_opts so = {lr, s->clip, t->cfg.power_iters, t->dist, (size_t)4 << 20,
                                   atomic_load(&stop_signal) != 0, s->muon ? &t->muon : NULL,
                                   train_muon_lr_at(s, t->step)};
        lipt_step_result sr;
        const lipt_status st = lipt_train_step(&t->ctx, &t->model, &t->opt, t->in, t->tg, t->B, t->T, &so, &sr, &err);
        if (st == LIPT_ERR_NUMERIC) return diverged(t, &sr);
        if (st != LIPT_OK) return cli_fail("train", &err);
        t->step++;
        if (lipt_threads_adapt(10.0)) { /* the default count follows other programs' load on the cores */
            char how[192];
            lipt_threads_describe(how, sizeof how);
            fprintf(stderr, "%slipt train: step %lld: threads now %s\n", t->tty ? "\n" : "", (long long)t->step, how);
        }
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
        t->stop_now = t->K > 1 ? stop_after : atomic_load(&stop_signal) != 0;
    }
    return 0;
}

/* The final evaluation of one split, logged as `what` ("valid_full", "test_full"), of the weights of step wstep
 * (with "weights":"best" when those are best.ckpt's rather than the last step's). */
static lipt_status final_eval(trainer *t, const lipt_tok *tok, size_t n, const char *what, int64_t wstep,
                              lipt_eval_result *r, lipt_error *err) {
    lipt_eval_opts fo = {t->T, t->T, t->B, 0, t->tty, t->dist};
    lipt_status st = lipt_evaluate(&t->ctx, &t->model, tok, n, &fo, r, err);
    if (st == LIPT_OK) {
        fprintf(t->log, "{\"step\":%lld,\"eval\":\"%s\",\"symbols\":%zu,\"nll\":%.6f,\"bpc\":%.6f,\"accuracy\":%.6f,",
                (long long)t->step, what, r->symbols, r->nll, r->bpc, r->accuracy);
        if (wstep != t->step) fprintf(t->log, "\"weights\":\"best\",\"weights_step\":%lld,", (long long)wstep);
        fprintf(t->log, "\"eval_s\":%.2f}\n", r->seconds);
    }
    return st;
}

/* --final-from best: best.ckpt's weights (and power-iteration vectors) into the model, for the final evaluations.
 * Every rank reads the file, as --resume does: under MPI the run folder must be at the same path on each machine.
 * It was written at an earlier step than this one, before that step's collectives, so every rank sees it whole.
 * *wstep: the step it holds. */
static lipt_status load_best(trainer *t, int64_t *wstep, lipt_error *err) {
    lipt_ckpt ck;
    lipt_status st = lipt_ckpt_open(t->best_path, &ck, err);
    if (st == LIPT_OK) st = lipt_ckpt_load_params(&ck, &t->model.params, 0, err);
    if (st == LIPT_OK) *wstep = ck.step;
    lipt_ckpt_close(&ck);
    if (st != LIPT_OK) {
        char msg[LIPT_ERRMSG_LEN];
        memcpy(msg, err->msg, sizeof msg);
        return lipt_fail(err, st, "--final-from best: %.400s (the final state is saved in %s; lipt eval --ckpt FILE "
                         "scores any checkpoint)", msg, t->last_path);
    }
    return LIPT_OK;
}

/* The summary lines and the JSON object of a finished run; wstep: the step of the weights finally evaluated. */
static void summary(const trainer *t, const train_settings *s, int json, double train_s, const lipt_eval_result *ev,
                    const lipt_eval_result *et, const char *proto, int64_t wstep) {
    const int K = t->K;
    if (t->lead) { /* the result, not progress: --quiet keeps it */
        fprintf(stderr, "done: %lld steps in %.1f s", (long long)(t->step - t->first_step), train_s);
        if (t->early_stopped) fprintf(stderr, " (early stop)");
        if ((s->final_valid || s->final_test) && wstep != t->step)
            fprintf(stderr, "; final evaluation of best.ckpt (step %lld)", (long long)wstep);
        if (s->final_valid) fprintf(stderr, "; valid bpc %.4f, accuracy %.4f", ev->bpc, ev->accuracy);
        if (s->final_test) fprintf(stderr, "; test bpc %.4f, accuracy %.4f", et->bpc, et->accuracy);
        if (t->best_step >= 0)
            fprintf(stderr, "; checkpoints %s, %s (best, step %lld)\n", cli_shown(t->last_path), cli_shown(t->best_path),
                    (long long)t->best_step);
        else fprintf(stderr, "; checkpoint %s\n", cli_shown(t->last_path));
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
    json_num(&j, "last_periodic_valid_accuracy", t->last_eval_acc);
    json_num(&j, "valid_bpc", s->final_valid ? ev->bpc : NAN);
    json_num(&j, "valid_nll", s->final_valid ? ev->nll : NAN);
    json_num(&j, "valid_accuracy", s->final_valid ? ev->accuracy : NAN);
    json_num(&j, "test_bpc", s->final_test ? et->bpc : NAN);
    json_num(&j, "test_nll", s->final_test ? et->nll : NAN);
    json_num(&j, "test_accuracy", s->final_test ? et->accuracy : NAN);
    json_str(&j, "final_from", s->final_from_best ? "best" : "last");
    json_int(&j, "final_weights_step", wstep);
    json_bool(&j, "early_stop", t->early_stopped);
    json_num(&j, "best_valid_bpc", t->best_bpc);
    json_int(&j, "best_step", t->best_step);
    json_str(&j, "protocol", proto);
    json_str(&j, "last_ckpt", t->last_path);
    json_end(&j);
}

/* A signal stopped the loop: save and say how to continue. The exit status 128 + signal. */
static int stopped(trainer *t, lipt_error *err) {
    *t->agreed = 1;
    const int seen = atomic_load(&stop_signal);
    const int sig = seen ? seen : SIGTERM; /* a rank that saw none stops because another did */
    if (save_ckpt(t, t->last_path, err) != LIPT_OK) return cli_fail("train", err);
    if (t->lead)
        fprintf(stderr, "lipt train: %s at step %lld: saved %s; continue with: lipt train --out %s --resume\n",
                sig == SIGINT ? "interrupted" : sig == SIGHUP ? "hung up (SIGHUP: its terminal closed)" : "terminated",
                (long long)t->step, cli_shown(t->last_path), cli_shown(t->out));
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
    lipt_signals_catch(SIGINT, NULL);
    lipt_signals_catch(SIGTERM, NULL);
    if (hup_caught) lipt_signals_catch(SIGHUP, NULL);
    const double train_s = cli_now() - t->t_start;
    lipt_eval_result ev = {0}, et = {0};
    lipt_eval_opts fo = {t->T, t->T, t->B, 0, t->tty, t->dist};
    char proto[96];
    lipt_eval_protocol_str(&fo, proto, sizeof proto);
    int64_t wstep = t->step; /* the step of the weights evaluated: the last, or best.ckpt's with --final-from best */
    if (s->final_from_best && (s->final_valid || s->final_test)) {
        if (t->best_step < 0) {
            if (!s->quiet) fprintf(stderr, "note: --final-from best: no validation evaluation made a best.ckpt: the "
                                   "final evaluation uses the last weights\n");
        } else if (t->best_step != t->step) { /* else the last weights are the best ones */
            if (load_best(t, &wstep, &err) != LIPT_OK) return cli_fail("train", &err);
            if (!s->quiet) fprintf(stderr, "final evaluation of %s (step %lld)\n", cli_shown(t->best_path), (long long)wstep);
        }
    }
    if (s->final_valid) {
        if (!s->quiet)
            fprintf(stderr, "final evaluation on the whole validation split (%s%s)\n", proto,
                    t->K > 1 ? ", split over the ranks" : "");
        if (final_eval(t, t->vtok, t->nvalid, "valid_full", wstep, &ev, &err) != LIPT_OK) return cli_fail("train", &err);
        /* best.ckpt compares one measure: the full split only when periodic evaluations used it too (and only the
         * last weights can make a new best: best.ckpt's are already in it) */
        const int same_measure = t->best_step < 0 || s->eval_symbols == 0 || t->nvalid - 1 <= (size_t)s->eval_symbols;
        if (same_measure && wstep == t->step && ev.bpc < t->best_bpc) {
            t->best_bpc = ev.bpc;
            t->best_step = t->step;
            if (save_ckpt(t, t->best_path, &err) != LIPT_OK) return cli_fail("train", &err);
        }
    }
    if (s->final_test) {
        size_t ntest;
        const lipt_tok *ttok = lipt_dataset_eval_tokens(&t->ds, LIPT_TEST, &ntest);
        if (!s->quiet) fprintf(stderr, "final evaluation on the whole test split (%s)\n", proto);
        if (final_eval(t, ttok, ntest, "test_full", wstep, &et, &err) != LIPT_OK) return cli_fail("train", &err);
    }
    summary(t, s, json, train_s, &ev, &et, proto, wstep);
    return 0;
}
