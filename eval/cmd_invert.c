/* lipt invert: reconstruct a text from the invertible model's last hidden state (SPEC §3): the
 * per-layer fixed-point trace, the reconstruction error and the recovered text next to the original. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/invert.h"
#include "run.h"

static const cli_opt invert_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint of an invertible model (attention contractive-l2, ffn contractive) (required)", NULL},
    {"text", CLI_STRING, "TEXT", "text to invert (at most seq_len symbols; PTB vocabularies: '_' between words)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus to take windows from (with --split, --windows)", NULL},
    {"split", CLI_STRING, "SPLIT", "train, valid or test", "test"},
    {"data-split", CLI_STRING, "HOW", "auto, standard or F0,F1,F2", "auto"},
    {"windows", CLI_INT, "K", "invert the split's first K windows of seq_len symbols", "1"},
    {"tol", CLI_FLOAT, "TOL", "fixed-point tolerance, relative change", "1e-6"},
    {"max-iter", CLI_INT, "N", "iteration cap per residual map", "100"},
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

int cmd_invert(int argc, char **argv) {
    const char *C = "invert";
    cli_args a;
    int pr = cli_parse(&a, C, "Invert an invertible model: recover its input text from the last hidden state.", invert_opts,
                       (int)(sizeof invert_opts / sizeof invert_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    if (cli_has(&a, "text") == cli_has(&a, "data")) return cli_error(C, "give exactly one of --text TEXT or --data NAME");
    long K, max_iter;
    double tol;
    if (cli_int(&a, "windows", &K) || cli_int(&a, "max-iter", &max_iter) || cli_float(&a, "tol", &tol))
        return 2;
    {
        int trc = cli_apply_threads(&a, C);
        if (trc) return trc;
    }
    if (K < 1) return cli_error(C, "--windows must be >= 1");
    if (max_iter < 1 || max_iter > 100000) return cli_error(C, "--max-iter must be in [1, 100000]");
    if (!(tol > 0)) return cli_error(C, "--tol must be > 0");
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(cli_str(&a, "ckpt"), &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    int rc = 0, T = m.cfg.seq_len, nwin = 0;
    int *ids = NULL;
    lipt_dataset ds;
    int have_ds = 0;
    if (!m.invertible && !m.cfg.coupling) {
        rc = cli_error(C, "%s is a %s-attention model: only the invertible model (contractive-l2 + contractive ffn) can be inverted",
                       cli_str(&a, "ckpt"), lipt_attn_name(m.cfg.attention));
        goto out;
    }
    if (cli_has(&a, "text")) {
        const char *text = cli_str(&a, "text");
        size_t n = strlen(text);
        if (n == 0) { rc = cli_error(C, "--text is empty"); goto out; }
        if (n > (size_t)T) { rc = cli_error(C, "--text has %zu symbols, more than the model's seq_len %d", n, T); goto out; }
        ids = malloc(sizeof(int) * n);
        if (lipt_vocab_encode(&vocab, (const uint8_t *)text, n, ids, "--text", &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
        T = (int)n;
        nwin = 1;
    } else {
        lipt_data_opts dopts = {0};
        dopts.use_vocab = &vocab;
        if (lipt_data_parse_split(cli_str(&a, "data-split"), &dopts, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
        if (lipt_dataset_load(cli_str(&a, "data"), &dopts, &ds, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
        have_ds = 1;
        const char *sn = cli_str(&a, "split");
        int split = cli_split_index(sn);
        if (split < 0) { rc = cli_error(C, "--split must be train, valid or test, got '%s'", sn); goto out; }
        size_t avail = ds.len[split] / (size_t)T;
        if (avail < (size_t)K) { rc = cli_error(C, "the %s split holds %zu windows of %d, fewer than --windows %ld", sn, avail, T, K); goto out; }
        nwin = (int)K;
        ids = malloc(sizeof(int) * (size_t)nwin * T);
        for (size_t i = 0; i < (size_t)nwin * T; i++) ids[i] = ds.tok[split][i];
    }
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_fp_opts fo = {tol, (int)max_iter, 0};
    int json = cli_has(&a, "json"), all_exact = 1;
    json_w j;
    if (json) {
        json_begin(&j, stdout);
        json_str(&j, "ckpt", cli_str(&a, "ckpt"));
        json_int(&j, "T", T);
        json_num(&j, "tol", tol);
        json_int(&j, "max_iter", max_iter);
        json_arr_open(&j, "windows");
    }
    for (int w = 0; w < nwin && rc == 0; w++) {
        const int *wid = ids + (size_t)w * T;
        lipt_model_invert_result res;
        lipt_status st = lipt_model_invert(&ctx, &m, wid, T, &fo, &res, &err);
        if (st != LIPT_OK && res.failed_layer < 0) { rc = cli_fail(C, &err); lipt_model_invert_result_free(&res); break; }
        int ok = st == LIPT_OK;
        if (!ok || !res.exact) all_exact = 0;
        if (json) {
            json_obj_open(&j, NULL);
            json_int(&j, "window", w);
            json_bool(&j, "converged", ok);
            json_arr_open(&j, "maps");
            for (int l = m.cfg.n_layers - 1; l >= 0; l--)
                for (int b = 1; b >= 0; b--) {
                    int k = 2 * l + b;
                    if (res.iters[k] == 0 && !(res.failed_layer == l && res.failed_branch == b)) continue;
                    json_obj_open(&j, NULL);
                    json_int(&j, "layer", l);
                    json_str(&j, "branch", b ? "ffn" : "attn");
                    json_int(&j, "iters", res.iters[k]);
                    json_bool(&j, "converged", res.converged[k]);
                    json_arr_open(&j, "err");
                    for (int i = 0; i < res.iters[k]; i++) json_num(&j, NULL, res.err[(size_t)k * max_iter + i]);
                    json_arr_close(&j);
                    json_obj_close(&j);
                }
            json_arr_close(&j);
            if (ok) {
                char *orig = decode_alloc(&vocab, wid, T), *rec = decode_alloc(&vocab, res.tokens, T);
                json_num(&j, "max_abs_input_err", res.max_abs_input_err);
                json_int(&j, "tokens_correct", res.tokens_correct);
                json_bool(&j, "exact", res.exact);
                json_str(&j, "original", orig);
                json_str(&j, "recovered", rec);
                free(orig);
                free(rec);
            } else {
                json_str(&j, "error", err.msg);
            }
            json_obj_close(&j);
        } else {
            printf("window %d (%d symbols):\n", w, T);
            for (int l = m.cfg.n_layers - 1; l >= 0; l--)
                for (int b = 1; b >= 0; b--) {
                    int k = 2 * l + b;
                    if (res.iters[k] == 0 && !(res.failed_layer == l && res.failed_branch == b)) continue;
                    const double *e = res.err + (size_t)k * max_iter;
                    printf("  layer %d %-4s %3d iterations, final change %.2e%s\n", l, b ? "ffn" : "attn", res.iters[k],
                           res.iters[k] ? e[res.iters[k] - 1] : NAN, res.converged[k] ? "" : "  NOT CONVERGED");
                    if (cli_has(&a, "trace"))
                        for (int i = 0; i < res.iters[k]; i++) printf("      iter %3d  change %.3e\n", i + 1, e[i]);
                }
            if (ok) {
                printf("  input reconstruction: max abs error %.3e; tokens %d/%d recovered%s\n", res.max_abs_input_err,
                       res.tokens_correct, T, res.exact ? " (exact)" : "");
                printf("  original : ");
                print_text(&vocab, wid, T);
                printf("\n  recovered: ");
                print_text(&vocab, res.tokens, T);
                printf("\n");
            } else {
                printf("  %s\n", err.msg);
            }
        }
        lipt_model_invert_result_free(&res);
    }
    if (json) {
        json_arr_close(&j);
        json_bool(&j, "all_exact", all_exact);
        json_end(&j);
    }
    if (rc == 0 && !all_exact) rc = 1; /* a failed or inexact inversion is a failure of the command */
    lipt_ctx_free(&ctx);
out:
    free(ids);
    if (have_ds) lipt_dataset_free(&ds);
    lipt_model_free(&m);
    return rc;
}
