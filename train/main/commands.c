/* The subcommand table: name, entry point, one-line summary (shown by `lipt --help`). */
#include <stddef.h>

#include "commands.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_invert(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_lipschitz(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_experiment(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plot(int argc, char **argv);

const lipt_command lipt_commands[] = {
    {"train", cmd_train, "train a model on a corpus (resumable; checkpoints, metrics.jsonl)"},
    {"eval", cmd_eval, "bits per character of a checkpoint over a whole split"},
    {"sample", cmd_sample, "generate text from a checkpoint (cached incremental decoding)"},
    {"invert", cmd_invert, "recover the input text of an invertible model from its last hidden state"},
    {"lipschitz", cmd_lipschitz, "per-layer Lipschitz bounds next to measured Jacobian norms"},
    {"experiment", cmd_experiment, "paper experiments: tightness (Fig. 2), invertibility (Fig. 3), depth (Fig. 4), stability (Fig. 11), robustness (Fig. 10)"},
    {"bench", cmd_bench, "speed and memory of a model config on synthetic tokens (train/eval/sample tokens/s, GFLOP/s vs SGEMM, peak RSS)"},
    {"data", cmd_data, "locate a corpus and print its splits and vocabulary"},
    {"export", cmd_export, "write a checkpoint's weights as safetensors (with its vocabulary and settings)"},
    {"plot", cmd_plot, "training and validation BPC curves of one or more runs as an SVG figure"},
    {"info", cmd_info, "what a checkpoint holds: model, training settings, corpus, step, metrics"},
    {NULL, NULL, NULL}, /* sentinel: commands are added above it */
};
const int lipt_n_commands = (int)(sizeof lipt_commands / sizeof lipt_commands[0]) - 1;
