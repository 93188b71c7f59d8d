/* The subcommand table: name, entry point, one-line summary (shown by `lipt --help`). */
#include <stddef.h>

#include "commands.h"

int cmd_train(int argc, char **argv);

const lipt_command lipt_commands[] = {
    {"train", cmd_train, "train a model on a corpus (resumable; checkpoints, metrics.jsonl)"},
    {NULL, NULL, NULL}, /* sentinel: commands are added above it */
};
const int lipt_n_commands = (int)(sizeof lipt_commands / sizeof lipt_commands[0]) - 1;
