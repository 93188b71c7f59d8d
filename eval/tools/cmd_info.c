/* lipt info: what a checkpoint holds (model, training settings, corpus, step, metrics), without loading the model; or,
 * with --system, the machine: the CPU, its features and the kernels OpenBLAS and oneDNN run on it; or, with
 * --variants, the model kinds this lipt knows (the attention table with every property of each kind). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lipt/checkpoint.h"
#include "lipt/config.h"
#include "metrics_read.h"
#include "run.h"
#include "sysinfo.h"
#include "variants_json.h"

static const cli_opt info_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to describe (this or --system; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"system", CLI_FLAG, NULL, "describe this machine instead: CPU, features, the kernels OpenBLAS and oneDNN run",
     NULL},
    {"variants", CLI_FLAG, NULL, "list the model kinds instead: each attention kind with its properties, and the "
     "names of the other kinds (the table python/lipt_variants.json copies)", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object on stdout", NULL},
};

/* lipt info --system [--json] */
static int info_system(int json) {
    lipt_cpuinfo ci;
    lipt_cpuinfo_get(&ci);
    if (json) {
        json_w j;
        json_begin(&j, stdout);
        sysinfo_json(&j, &ci);
        json_end(&j);
    } else {
        printf("system:\n");
        sysinfo_print(stdout, &ci, "  ");
    }
    return 0;
}

/* lipt info --variants [--json]: the text form has one line per attention kind, its set properties by name. */
static int info_variants(int json) {
    if (json) {
        json_w j;
        json_begin(&j, stdout);
        variants_json_table(&j);
        json_end(&j);
        return 0;
    }
    printf("attention kinds (config key attention):\n");
    for (int k = 0; k < LIPT_ATTN_KIND_COUNT; k++) {
        const lipt_attn_info *ai = lipt_attn_info_of((lipt_attn_kind)k);
        printf("  %-15s", ai->name);
#define PRINT_FLAG(f) if (ai->f) printf(" %s", #f);
        LIPT_ATTN_FLAGS(PRINT_FLAG)
#undef PRINT_FLAG
        if (ai->logit_map) printf(" logit_map %s %g", ai->logit_map->name, (double)ai->logit_map_param);
        printf("; bound %s, qk_init %s, model %s\n    %s\n", lipt_attn_bound_name(ai->bound),
               lipt_qk_init_name(ai->qk_init), ai->model ? ai->model : ai->name, ai->lipschitz_note);
    }
    printf("(every kind and its properties as JSON: lipt info --variants --json)\n");
    return 0;
}

/* The last training line and the last evaluation line of the run's metrics.jsonl (next to the checkpoint); event
 * lines (early stop) are neither. */
static void last_metrics(const char *ckpt, char *train, char *eval, size_t n) {
    train[0] = eval[0] = 0;
    char path[1200];
    const char *slash = strrchr(ckpt, '/');
    snprintf(path, sizeof path, "%.*s%smetrics.jsonl", slash ? (int)(slash - ckpt) : 0, ckpt, slash ? "/" : "");
    FILE *f = lipt_open_regular(path, NULL, NULL); /* a FIFO there is refused, never waited on */
    if (!f) return;
    metrics_last_lines(f, train, eval, n); /* src/shell/metrics_read.c */
    fclose(f);
}

/* The vocabulary's symbols, printable: "\n", " ", "a" ... (PTB's and other control bytes escaped). */
static void vocab_text(const lipt_vocab *v, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < v->n_sym && k + 8 < n; i++) {
        const unsigned c = v->sym[i];
        if (c == '\n') k += (size_t)snprintf(out + k, n - k, "\\n");
        else if (c == '\\') k += (size_t)snprintf(out + k, n - k, "\\\\");
        else if (c < 0x20 || c >= 0x7f) k += (size_t)snprintf(out + k, n - k, "\\x%02x", c);
        else out[k++] = (char)c, out[k] = 0;
    }
}

/* The [training] and [data] sections of the text output, every stored byte escaped. */
static void print_training(const run_extra *xp) {
    printf("\n[training]\n");
    for (const char *p = xp->opts_text; *p;) {
        const char *nl = strchr(p, '\n');
        const int len = nl ? (int)(nl - p) : (int)strlen(p);
        char opt[1200];
        snprintf(opt, sizeof opt, "%.*s\n", len, p);
        if (strncmp(p, "data-", 5) != 0 || strncmp(p, "data-split", 10) == 0) cli_print_text(stdout, opt);
        p += len + (nl ? 1 : 0);
    }
    char abs[1100], bytes[64], crc[32];
    printf("\n[data]\n");
    if (run_opt_get(xp->opts_text, "data-abs", abs, sizeof abs) == 0) {
        run_opt_get(xp->opts_text, "data-bytes", bytes, sizeof bytes);
        run_opt_get(xp->opts_text, "data-crc32", crc, sizeof crc);
        printf("corpus ");
        cli_print_text(stdout, abs);
        printf(" (");
        cli_print_text(stdout, bytes);
        printf(" bytes, CRC-32 ");
        cli_print_text(stdout, crc);
        printf(")\n");
    } else printf("corpus as given at training (no absolute path stored: an older checkpoint)\n");
    if (isfinite(xp->best_bpc)) printf("best validation BPC %.4f at step %lld\n", xp->best_bpc, (long long)xp->best_step);
}

int cmd_info(int argc, char **argv) {
    const char *C = "info";
    cli_args a;
    int pr = cli_parse(&a, C, "Describe a checkpoint: its model config, training settings, corpus (path, size, CRC-32),\n"
                              "step, best validation BPC and the run's last metrics. Or, with --system, this machine:\n"
                              "the CPU and its features, OpenBLAS's kernels (core type, and whether OpenBLAS, the user\n"
                              "or lipt chose them: OPENBLAS_CORETYPE) and oneDNN's instruction set. Or, with\n"
                              "--variants, the model kinds this lipt knows: each attention kind with its properties.",
                       info_opts, 4, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (cli_has(&a, "variants")) {
        if (cli_has(&a, "ckpt") || cli_has(&a, "system"))
            return cli_error(C, "--variants lists the model kinds: give it without --ckpt or --system");
        return info_variants(cli_has(&a, "json"));
    }
    if (cli_has(&a, "system")) {
        if (cli_has(&a, "ckpt")) return cli_error(C, "--system describes this machine, --ckpt a checkpoint: one at a time");
        return info_system(cli_has(&a, "json"));
    }
    if (!cli_has(&a, "ckpt"))
        return cli_error(C, "--ckpt FILE is required (or --system for this machine, --variants for the model kinds)");
    if (run_ckpt_option(&a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    const char *path = cli_str(&a, "ckpt");
    lipt_error err = {0};
    lipt_ckpt ck;
    if (lipt_ckpt_open(path, &ck, &err) != LIPT_OK) return cli_fail(C, &err);
    lipt_config cfg;
    lipt_vocab vocab;
    run_extra x;
    int rc = 0;
    if (run_ckpt_config(&ck, path, &cfg, &vocab, &err) != LIPT_OK) { /* src/shell/run.c */
        rc = cli_fail(C, &err);
        goto out;
    }
    const int has_run = run_extra_unpack(&x, ck.extra, ck.extra_len, &err) == LIPT_OK;
    size_t nparams = 0;
    for (int i = 0; i < ck.n_tensors; i++)
        if (!(ck.tensors[i].flags & LIPT_PARAM_BUFFER)) nparams += ck.tensors[i].numel;
    char vt[1100], mtrain[4096], meval[4096];
    vocab_text(&vocab, vt, sizeof vt);
    last_metrics(path, mtrain, meval, sizeof mtrain);
    if (cli_has(&a, "json")) {
        json_w j;
        json_begin(&j, stdout);
        json_str(&j, "ckpt", path);
        json_int(&j, "step", ck.step);
        json_int(&j, "parameters", (long long)nparams);
        static const char *const hex[] = {"data-crc32", NULL};
        json_kv_lines(&j, "config", ck.config_text, NULL);
        json_int(&j, "vocab_size", vocab.size);
        json_str(&j, "vocab", vt);
        json_kv_lines(&j, "training", has_run ? x.opts_text : "", hex);
        json_num(&j, "best_valid_bpc", has_run && isfinite(x.best_bpc) ? x.best_bpc : NAN);
        json_int(&j, "best_step", has_run ? x.best_step : -1);
        json_str(&j, "last_train_metrics", mtrain);
        json_str(&j, "last_eval_metrics", meval);
        json_end(&j);
        goto out;
    }
    /* everything read from the checkpoint or its folder is printed with its control bytes escaped */
    printf("checkpoint ");
    cli_print_text(stdout, path);
    printf(": step %lld, %zu parameters, %s\n", (long long)ck.step, nparams,
           ck.has_optimizer ? "with optimizer state (resumable)" : "weights only");
    printf("\n[model]\n");
    cli_print_text(stdout, ck.config_text);
    printf("\n[vocabulary] %d ids%s: %s\n", vocab.size, vocab.unk_id >= 0 ? " (with an unknown-symbol id)" : "", vt);
    if (has_run) print_training(&x);
    else printf("\n[training] none stored (not written by lipt train)\n");
    if (mtrain[0] || meval[0]) {
        printf("\n[metrics.jsonl, last lines]\n");
        cli_print_text(stdout, mtrain);
        printf("%s", mtrain[0] && meval[0] ? "\n" : "");
        cli_print_text(stdout, meval);
        printf("\n");
    }
out:
    lipt_ckpt_close(&ck);
    return rc;
}
