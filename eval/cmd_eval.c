/* lipt eval: bits per character (and NLL in nats) and next-character accuracy of a checkpoint over a whole split,
 * with the context protocol stated and selectable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/evaluate.h"
#include "run.h"

static const cli_opt eval_opts_table[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to evaluate (required; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"data", CLI_STRING, "NAME|PATH",
     "corpus (default: the one the checkpoint was trained on); a PTB model reads a space in plain text as '_'", NULL},
    {"split", CLI_STRING, "SPLIT", "train, valid or test", "valid"},
    {"data-split", CLI_STRING, "HOW", "how the corpus is split: auto, standard or F0,F1,F2 (default: as in training)", NULL},
    {"window", CLI_INT, "T", "context window (default: the model's seq_len)", NULL},
    {"stride", CLI_INT, "S", "window stride; = window: non-overlapping windows, < window: sliding (scores the last S)", NULL},
    {"batch", CLI_INT, "B", "windows per forward pass", "16"},
    {"max-symbols", CLI_INT, "N", "score only the first N symbols of the split (0: all)", "0"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    CLI_OPT_PRECISION("the checkpoint's"),
    {"json", CLI_FLAG, NULL, "print one JSON object on stdout: split, parameters, symbols, nll, bpc, accuracy, protocol, "
     "window, stride, precision, seconds (accuracy: the fraction of scored symbols that are the model's argmax "
     "prediction, ties to the lowest id; the same scored symbols as the BPC)", NULL},
    {"quiet", CLI_FLAG, NULL, "no progress output", NULL},
};

/* A training option stored in a checkpoint ("key=value" line), e.g. the corpus and its split. */
int cmd_eval(int argc, char **argv) {
    const char *C = "eval";
    cli_args a;
    int pr = cli_parse(&a, C, "Evaluate a checkpoint: bits per character and next-character accuracy over a whole split.",
                       eval_opts_table, (int)(sizeof eval_opts_table / sizeof eval_opts_table[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    if (run_ckpt_option(&a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    long window = 0, stride = 0, batch, maxsym;
    if (cli_int(&a, "window", &window) || cli_int(&a, "stride", &stride) ||
        cli_int(&a, "batch", &batch) || cli_int(&a, "max-symbols", &maxsym))
        return 2;
    {
        int trc = cli_apply_threads(&a, C);
        if (trc) return trc;
    }
    const char *split_name = cli_str(&a, "split");
    int split = cli_split_index(split_name);
    if (split < 0) return cli_error(C, "--split must be train, valid or test, got '%s'", split_name);
    if (batch < 1 || batch > 4096) return cli_error(C, "--batch must be in [1, 4096], got %ld", batch);
    if (maxsym < 0) return cli_error(C, "--max-symbols must be >= 0");
    lipt_precision prec = LIPT_PRECISION_FLOAT32; /* an explicit --precision is checked before the model is read */
    if (cli_has(&a, "precision") && (pr = cli_apply_precision(&a, C, &prec)) != 0) return pr;
    const char *ckpt = cli_str(&a, "ckpt");
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(ckpt, &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    long Tl = cli_has(&a, "window") ? window : m.cfg.seq_len;
    long Sl = cli_has(&a, "stride") ? stride : Tl;
    int rc = cli_apply_precision(&a, C, &m.cfg.precision); /* the checkpoint's, unless --precision */
    if (rc) goto out_model;
    if (Tl < 1 || Tl > m.cfg.seq_len) { rc = cli_error(C, "--window must be in [1, seq_len = %d], got %ld", m.cfg.seq_len, Tl); goto out_model; }
    if (Sl < 1 || Sl > Tl) { rc = cli_error(C, "--stride must be in [1, window = %ld], got %ld", Tl, Sl); goto out_model; }
    const int T = (int)Tl, S = (int)Sl;
    int quiet = cli_has(&a, "quiet");
    const char *data = cli_str(&a, "data");
    char data_buf[1100];
    char *opts = run_ckpt_opts(ckpt); /* read once: each opening of a checkpoint decompresses all of it */
    if (!data && (run_opt_get(opts, "data-abs", data_buf, sizeof data_buf) == 0 ||
                  run_opt_get(opts, "data", data_buf, sizeof data_buf) == 0))
        data = data_buf; /* for the summary */
    lipt_dataset ds;
    const lipt_status ls = run_load_corpus_opts(ckpt, opts, cli_str(&a, "data"), cli_str(&a, "data-split"), &vocab,
                                                quiet, &ds, &err);
    free(opts);
    if (ls != LIPT_OK) {
        rc = cli_fail(C, &err);
        goto out_model;
    }
    if (!quiet) {
        char desc[1024];
        lipt_dataset_describe(&ds, desc, sizeof desc);
        fprintf(stderr, "data: %s\n", cli_shown(desc));
    }
    size_t n;
    const lipt_tok *tok = lipt_dataset_eval_tokens(&ds, split, &n);
    lipt_eval_opts eo = {T, S, (int)batch, (size_t)maxsym, !quiet && cli_stderr_is_tty(), NULL};
    char proto[96];
    lipt_eval_protocol_str(&eo, proto, sizeof proto);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)32 << 20, 1);
    lipt_eval_result r;
    if (lipt_ctx_set_precision(&ctx, m.cfg.precision, &err) != LIPT_OK ||
        lipt_evaluate(&ctx, &m, tok, n, &eo, &r, &err) != LIPT_OK)
        rc = cli_fail(C, &err);
    else if (cli_has(&a, "json")) {
        json_w j;
        json_begin(&j, stdout);
        json_str(&j, "ckpt", ckpt);
        json_int(&j, "step", step);
        json_int(&j, "parameters", (long long)lipt_params_count(&m.params));
        json_str(&j, "data", data);
        json_str(&j, "split", split_name);
        json_int(&j, "symbols", (long long)r.symbols);
        json_num(&j, "nll", r.nll);
        json_num(&j, "bpc", r.bpc);
        json_num(&j, "accuracy", r.accuracy);
        json_str(&j, "protocol", proto);
        json_int(&j, "window", T);
        json_int(&j, "stride", S);
        json_str(&j, "precision", lipt_precision_name(m.cfg.precision));
        json_num(&j, "seconds", r.seconds);
        json_end(&j);
    } else {
        printf("%s split of %s: %zu symbols, %s%s%s\nNLL %.4f nats/symbol, BPC %.4f  (%.1f s)\n"
               "accuracy %.4f (next-character, argmax; %zu of %zu symbols)\n", split_name, cli_shown(data), r.symbols,
               proto,
               m.cfg.precision != LIPT_PRECISION_FLOAT32 ? ", matrix products in " : "",
               m.cfg.precision != LIPT_PRECISION_FLOAT32 ? lipt_precision_name(m.cfg.precision) : "", r.nll, r.bpc,
               r.seconds, r.accuracy, r.correct, r.symbols);
    }
    lipt_ctx_free(&ctx);
    lipt_dataset_free(&ds);
out_model:
    lipt_model_free(&m);
    return rc;
}
