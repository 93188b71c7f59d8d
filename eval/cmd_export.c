/* lipt export: a checkpoint's weights as .safetensors (names as in models/README.md, config in the metadata). */
#include <stdio.h>

#include "cli.h"
#include "lipt/safetensors.h"
#include "run.h"

static const cli_opt export_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint to export (required)", NULL},
    {"out", CLI_STRING, "FILE", "output .safetensors file (required)", NULL},
};

int cmd_export(int argc, char **argv) {
    const char *C = "export";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Export a checkpoint's parameters and buffers as safetensors (F32; metadata: config, format).\n"
                       "Load with safetensors.torch.load_file or json + numpy.frombuffer.",
                       export_opts, 2, argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt") || !cli_has(&a, "out")) return cli_error(C, "--ckpt FILE and --out FILE are required");
    lipt_error err = {0};
    lipt_model m;
    int64_t step;
    if (run_load_model(cli_str(&a, "ckpt"), &m, NULL, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    char cfg[4096], stepbuf[32];
    lipt_config_to_text(&m.cfg, cfg, sizeof cfg);
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    lipt_st_meta meta[] = {{"format", "lipt"}, {"config", cfg}, {"step", stepbuf}, {"layout", "y = x W, W [in, out]"}};
    int rc = 0;
    if (lipt_safetensors_save(cli_str(&a, "out"), &m.params, meta, 4, &err) != LIPT_OK) rc = cli_fail(C, &err);
    else fprintf(stderr, "wrote %s: %d tensors, %zu trainable floats\n", cli_str(&a, "out"), m.params.n,
                 lipt_params_count(&m.params));
    lipt_model_free(&m);
    return rc;
}
