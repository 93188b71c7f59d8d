/* defines: the config prologue of the commands that build a model from their options (lipt train, lipt bench). */
#ifndef LIPT_MODEL_CONFIG_H
#define LIPT_MODEL_CONFIG_H

#include "cli.h"
#include "lipt/config.h"

/* The model config of command `cmd` ("train", "bench"): lipt's defaults, then the --config FILE when a is given one,
 * then every --key value the command's option table did not know (a model key, in a->extra_key). A config file's
 * lines whose key is in own_keys[] (n_own of them; NULL: none) fill in the command's options not given on the command
 * line (lipt train's training keys in a run's run.cfg) and are not model keys. 0, or the exit status with the message
 * printed: 2 for a file that cannot be read or a wrong key or value (a usage error, as on the command line); a --key
 * that is no config key either says "(not a lipt CMD option either: see lipt CMD --help)". */
int cli_model_config(cli_args *a, const char *cmd, const char *const *own_keys, int n_own, lipt_config *cfg);

#endif
