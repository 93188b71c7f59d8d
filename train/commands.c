/* The subcommand table: name, entry point, one-line summary (shown by `lipt --help`). */
#include <stddef.h>

#include "commands.h"

const lipt_command lipt_commands[] = {
    {NULL, NULL, NULL}, /* sentinel: commands are added above it */
};
const int lipt_n_commands = (int)(sizeof lipt_commands / sizeof lipt_commands[0]) - 1;
