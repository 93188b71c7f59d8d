/* lipt export: a checkpoint's weights as .safetensors (names as in models/README.md, config in the metadata). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "lipt/safetensors.h"
#include "run.h"
#include "variants_json.h"

static const cli_opt export_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to export (required; or a run folder: its best.ckpt, else last.ckpt)", NULL},
    {"out", CLI_STRING, "FILE", "output .safetensors file (required)", NULL},
};

int cmd_export(int argc, char **argv) {
    const char *C = "export";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Export a checkpoint's parameters and buffers as safetensors (F32; metadata: config, format, step, vocab\n"
                       "(a JSON list: id i is byte vocab[i]), unk_id (-1: none), ptb_form (1: a PTB-style vocabulary, which reads a\n"
                       "space as '_'), training (the run's options), attention_info (the properties of the model's attention\n"
                       "kind, a JSON object as `lipt info --variants --json` lists them)).\n"
                       "Load with safetensors.torch.load_file or json + numpy.frombuffer.",
                       export_opts, 2, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt") || !cli_has(&a, "out")) return cli_error(C, "--ckpt FILE and --out FILE are required");
    if (run_ckpt_option(&a, C)) return 2; /* a run folder: its best.ckpt, else last.ckpt */
    char why[1400];
    /* a run folder is append-only history: an export never replaces a checkpoint or a run's record */
    if (run_owned_path(cli_str(&a, "out"), why, sizeof why))
        return cli_error(C, "--out %s: lipt export never replaces it; write the export under another name (e.g. a "
                         ".safetensors file)", why);
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    const char *ckpt = cli_str(&a, "ckpt");
    if (run_load_model(ckpt, &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    char cfg[4096], stepbuf[32], vocab_json[2048], unk[16], training[4096] = "", attn_info[2048];
    lipt_config_to_text(&m.cfg, cfg, sizeof cfg);
    if (variants_json_attn_text(lipt_attn_info_of(m.cfg.attention), attn_info, sizeof attn_info) != 0) {
        lipt_fail(&err, LIPT_ERR_INTERNAL, "the properties of attention %s do not fit in %zu bytes of metadata",
                  lipt_attn_name(m.cfg.attention), sizeof attn_info);
        lipt_model_free(&m);
        return cli_fail(C, &err);
    }
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    /* the vocabulary as a JSON list of byte values, id i -> byte vocab[i], so that ids become text outside lipt */
    size_t k = (size_t)snprintf(vocab_json, sizeof vocab_json, "[");
    for (int i = 0; i < vocab.n_sym; i++)
        k += (size_t)snprintf(vocab_json + k, sizeof vocab_json - k, "%s%u", i ? ", " : "", (unsigned)vocab.sym[i]);
    snprintf(vocab_json + k, sizeof vocab_json - k, "]");
    snprintf(unk, sizeof unk, "%d", vocab.unk_id);
    {
        lipt_ckpt ck;
        run_extra x;
        if (lipt_ckpt_open(ckpt, &ck, &err) == LIPT_OK) {
            if (run_extra_unpack(&x, ck.extra, ck.extra_len, &err) == LIPT_OK)
                snprintf(training, sizeof training, "%s", x.opts_text);
            lipt_ckpt_close(&ck);
        }
    }
    lipt_st_meta meta[] = {{"format", "lipt"},        {"config", cfg},   {"step", stepbuf},
                           {"layout", "y = x W, W [in, out]"}, {"vocab", vocab_json}, {"unk_id", unk},
                           {"ptb_form", vocab.ptb_form ? "1" : "0"}, {"training", training},
                           {"attention_info", attn_info}};
    int rc = 0;
    const char *out = cli_str(&a, "out");
    struct stat so, sc;
    if (strcmp(out, ckpt) == 0 ||
        (stat(out, &so) == 0 && stat(ckpt, &sc) == 0 && so.st_dev == sc.st_dev && so.st_ino == sc.st_ino)) {
        rc = cli_error(C, "--out %s is the checkpoint itself: choose another file", out);
    } else if (lipt_safetensors_save(out, &m.params, meta, (int)(sizeof meta / sizeof meta[0]), &err) != LIPT_OK) {
        rc = cli_fail(C, &err);
    } else {
        fprintf(stderr, "wrote %s: %d tensors, %zu trainable floats, vocabulary of %d symbols\n", cli_shown(out), m.params.n,
                lipt_params_count(&m.params), vocab.n_sym);
    }
    lipt_model_free(&m);
    return rc;
}
