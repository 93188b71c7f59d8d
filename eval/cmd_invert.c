/* lipt invert: reconstruct a text from the invertible model's last hidden state by fixed-point iteration: the
 * per-layer trace, the reconstruction error and the recovered text next to the original. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/invert.h"
#include "run.h"

static const cli_opt invert_opts[] = {
    {"ckpt", CLI_STRING, "FILE",
     "checkpoint of an invertible model (attention clipped-dp or contractive-l2 with ffn contractive, or coupling "
     "blocks) (required; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"text", CLI_STRING, "TEXT", "text to invert (at most seq_len symbols; PTB vocabularies read a space as '_', their word boundary)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus to take windows from (default, without --text: the checkpoint's own)", NULL},
    {"split", CLI_STRING, "SPLIT", "train, valid or test", "test"},
    {"data-split", CLI_STRING, "HOW", "auto, standard or F0,F1,F2 (default: the run's own split)", NULL},
    {"windows", CLI_INT, "K", "invert the split's first K windows of seq_len symbols", "1"},
    {"tol", CLI_FLOAT, "TOL", "fixed-point tolerance, relative change", LIPT_INVERT_STR(LIPT_INVERT_TOL)},
    {"max-iter", CLI_INT, "N", "iteration cap per residual map", LIPT_INVERT_STR(LIPT_INVERT_MAX_ITER)},
    {"accel", CLI_INT, "M", "solve each map as --memory invert training does: Anderson mixing of the last M iterates "
     "(0: plain iteration), stopped when the certificate's a-posteriori bound c/(1-c) |G(x) - x| on the error is at "
     "most --tol relative (without --accel: plain iteration stopped on the relative change, traced)", NULL},
    {"trace", CLI_FLAG, NULL, "print the error after every iteration of every map", NULL},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "print one JSON object: per window the maps' iterations and errors, input error, texts, exact", NULL},
};

static void print_text(const lipt_vocab *v, const int *ids, int T) {
    size_t need = lipt_vocab_decode(v, ids, (size_t)T, LIPT_DECODE_ESCAPE, NULL, 0) + 1;
    char *s = malloc(need);
    lipt_vocab_decode(v, ids, (size_t)T, LIPT_DECODE_ESCAPE, s, need);
    fputs(s, stdout);
    free(s);
}

static char *decode_alloc(const lipt_vocab *v, const int *ids, int T) {
    size_t need = lipt_vocab_decode(v, ids, (size_t)T, 0, NULL, 0) + 1;
    char *s = malloc(need);
    lipt_vocab_decode(v, ids, (size_t)T, 0, s, need);
    return s;
}

typedef struct {
    const char *ckpt;
    long K, max_iter;
    double tol;
    int json, trace;
    long accel;            /* --accel M, or -1 */
} invert_opts_v;

/* The windows to invert: --text, or the first K windows of seq_len symbols of a split (of --data, else the run's own
 * corpus). *ids (malloc'd) holds *nwin windows of *T ids. 0, or the exit status. */
static int load_windows(cli_args *a, const invert_opts_v *o, const lipt_model *m, const lipt_vocab *vocab, int **ids,
                        int *T, int *nwin) {
    const char *C = "invert";
    lipt_error err = {0};
    *T = m->cfg.seq_len;
    if (cli_has(a, "text")) {
        const char *text = cli_str(a, "text");
        const size_t n = strlen(text);
        if (n == 0) return cli_error(C, "--text is empty");
        if (n > (size_t)*T) return cli_error(C, "--text has %zu symbols, more than the model's seq_len %d", n, *T);
        *ids = malloc(sizeof(int) * n);
        if (lipt_vocab_encode_text(vocab, (const uint8_t *)text, n, *ids, "--text", &err) != LIPT_OK)
            return cli_fail(C, &err); /* names the symbol and lists the ones the model reads */
        *T = (int)n;
        *nwin = 1;
        return 0;
    }
    const char *sn = cli_str(a, "split");
    const int split = cli_split_index(sn);
    if (split < 0) return cli_error(C, "--split must be train, valid or test, got '%s'", sn);
    lipt_dataset ds;
    if (run_load_corpus(o->ckpt, cli_str(a, "data"), cli_str(a, "data-split"), vocab, o->json, &ds, &err) != LIPT_OK)
        return cli_fail(C, &err);
    const size_t avail = ds.len[split] / (size_t)*T;
    int rc = 0;
    if (avail < (size_t)o->K) {
        rc = cli_error(C, "the %s split holds %zu windows of %d, fewer than --windows %ld", sn, avail, *T, o->K);
    } else {
        *nwin = (int)o->K;
        *ids = malloc(sizeof(int) * (size_t)*nwin * *T);
        for (size_t i = 0; i < (size_t)*nwin * *T; i++) (*ids)[i] = ds.tok[split][i];
    }
    lipt_dataset_free(&ds);
    return rc;
}

/* One window's maps (from the top block down, as inverted) in JSON. */
static void json_window(json_w *j, const lipt_model *m, const lipt_vocab *vocab, int w, const int *wid, int T,
                        const lipt_model_invert_result *res, int ok, const char *msg) {
    json_obj_open(j, NULL);
    json_int(j, "window", w);
    json_bool(j, "converged", ok);
    json_arr_open(j, "maps");
    const lipt_invert_trace *tr = &res->trace;
    for (int l = m->cfg.n_layers - 1; l >= 0; l--)
        for (int b = 1; b >= 0; b--) {
            const int k = 2 * l + b;
            if (tr->iters[k] == 0 && !(tr->failed_layer == l && tr->failed_branch == b)) continue;
            json_obj_open(j, NULL);
            json_int(j, "layer", l);
            json_str(j, "branch", b ? "ffn" : "attn");
            json_int(j, "iters", tr->iters[k]);
            json_bool(j, "converged", tr->converged[k]);
            json_arr_open(j, "err");
            for (int i = 0; i < tr->iters[k]; i++) json_num(j, NULL, tr->err[(size_t)k * tr->max_iter + i]);
            json_arr_close(j);
            json_obj_close(j);
        }
    json_arr_close(j);
    if (ok) {
        char *orig = decode_alloc(vocab, wid, T), *rec = decode_alloc(vocab, res->tokens, T);
        json_num(j, "max_abs_input_err", res->max_abs_input_err);
        json_int(j, "tokens_correct", res->tokens_correct);
        json_bool(j, "exact", res->exact);
        json_str(j, "original", orig);
        json_str(j, "recovered", rec);
        free(orig);
        free(rec);
    } else {
        json_str(j, "error", msg);
    }
    json_obj_close(j);
}

/* One window as text: every map's iterations (with --trace, every change), then the texts side by side. */
static void print_window(const lipt_model *m, const lipt_vocab *vocab, const invert_opts_v *o, int w, const int *wid,
                         int T, const lipt_model_invert_result *res, int ok, const char *msg) {
    printf("window %d (%d symbols):\n", w, T);
    const lipt_invert_trace *tr = &res->trace;
    for (int l = m->cfg.n_layers - 1; l >= 0; l--)
        for (int b = 1; b >= 0; b--) {
            const int k = 2 * l + b;
            if (tr->iters[k] == 0 && !(tr->failed_layer == l && tr->failed_branch == b)) continue;
            const double *e = tr->err + (size_t)k * tr->max_iter;
            printf("  layer %d %-4s %3d iterations, final change %.2e%s\n", l, b ? "ffn" : "attn", tr->iters[k],
                   tr->iters[k] ? e[tr->iters[k] - 1] : NAN, tr->converged[k] ? "" : "  NOT CONVERGED");
            if (o->trace)
                for (int i = 0; i < tr->iters[k]; i++) printf("      iter %3d  change %.3e\n", i + 1, e[i]);
        }
    if (!ok) {
        printf("  %s\n", msg);
        return;
    }
    printf("  input reconstruction: max abs error %.3e; tokens %d/%d recovered%s\n", res->max_abs_input_err,
           res->tokens_correct, T, res->exact ? " (exact)" : "");
    printf("  original : ");
    print_text(vocab, wid, T);
    printf("\n  recovered: ");
    print_text(vocab, res->tokens, T);
    printf("\n");
}

/* Inverts every window and reports it. 0, 1 (a failed or inexact inversion), or the exit status. */
static int invert_windows(const lipt_model *m, const lipt_vocab *vocab, const invert_opts_v *o, const int *ids, int T,
                          int nwin) {
    lipt_error err = {0};
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_fp_opts fo = lipt_fp_opts_default();
    fo.tol = o->tol;
    fo.max_iter = (int)o->max_iter;
    fo.accel = o->accel >= 0;
    fo.memory = o->accel >= 0 ? (int)o->accel : 0;
    int all_exact = 1, rc = 0;
    json_w j;
    if (o->json) {
        json_begin(&j, stdout);
        json_str(&j, "ckpt", o->ckpt);
        json_int(&j, "T", T);
        json_num(&j, "tol", o->tol);
        json_int(&j, "max_iter", o->max_iter);
        json_str(&j, "solver", o->accel < 0 ? "plain, relative change" : o->accel == 0 ? "plain, a-posteriori bound"
                                                                                       : "anderson, a-posteriori bound");
        json_int(&j, "accel", o->accel);
        json_arr_open(&j, "windows");
    }
    for (int w = 0; w < nwin && rc == 0; w++) {
        const int *wid = ids + (size_t)w * T;
        lipt_model_invert_result res;
        lipt_status st = lipt_model_invert(&ctx, m, wid, T, &fo, &res, &err);
        if (st != LIPT_OK && res.trace.failed_layer < 0) {
            rc = cli_fail("invert", &err);
            lipt_model_invert_result_free(&res);
            break;
        }
        const int ok = st == LIPT_OK;
        if (!ok || !res.exact) all_exact = 0;
        if (o->json) json_window(&j, m, vocab, w, wid, T, &res, ok, err.msg);
        else print_window(m, vocab, o, w, wid, T, &res, ok, err.msg);
        lipt_model_invert_result_free(&res);
    }
    if (o->json) {
        json_arr_close(&j);
        json_bool(&j, "all_exact", all_exact);
        json_end(&j);
    }
    lipt_ctx_free(&ctx);
    if (rc == 0 && !all_exact) rc = 1; /* a failed or inexact inversion is a failure of the command */
    return rc;
}

int cmd_invert(int argc, char **argv) {
    const char *C = "invert";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Invert an invertible model: recover its input text from the last hidden state (--text TEXT, or\n"
                       "--windows K windows of a split of --data, by default the checkpoint's own corpus).",
                       invert_opts, (int)(sizeof invert_opts / sizeof invert_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    if (run_ckpt_option(&a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    if (cli_has(&a, "text") && cli_has(&a, "data")) return cli_error(C, "give --text TEXT or --data NAME, not both");
    invert_opts_v o = {cli_str(&a, "ckpt"), 0, 0, 0, cli_has(&a, "json"), cli_has(&a, "trace"), -1};
    if (cli_int(&a, "windows", &o.K) || cli_int(&a, "max-iter", &o.max_iter) || cli_float(&a, "tol", &o.tol)) return 2;
    if (cli_has(&a, "accel") && (cli_int(&a, "accel", &o.accel) || o.accel < 0 || o.accel > 16))
        return cli_error(C, "--accel must be in [0, 16]");
    if (o.accel >= 0 && o.trace) return cli_error(C, "--trace prints plain iteration's changes: drop --accel");
    int rc = cli_apply_threads(&a, C);
    if (rc) return rc;
    if (o.K < 1) return cli_error(C, "--windows must be >= 1");
    if (o.max_iter < 1 || o.max_iter > 100000) return cli_error(C, "--max-iter must be in [1, 100000]");
    if (!(o.tol > 0)) return cli_error(C, "--tol must be > 0");
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(o.ckpt, &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    int *ids = NULL, T = 0, nwin = 0;
    if (!m.invertible && !m.cfg.coupling)
        rc = cli_error(C, "%s is a %s-attention model with a %s feed-forward: only an invertible model (attention clipped-dp "
                       "or contractive-l2 with ffn contractive) or coupling blocks can be inverted", o.ckpt,
                       lipt_attn_name(m.cfg.attention), lipt_ffn_name(m.cfg.ffn));
    if (!rc) rc = load_windows(&a, &o, &m, &vocab, &ids, &T, &nwin);
    if (!rc) rc = invert_windows(&m, &vocab, &o, ids, T, nwin);
    free(ids);
    lipt_model_free(&m);
    return rc;
}
