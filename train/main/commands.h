/* defines: the lipt subcommands (each `int cmd_x(int argc, char **argv)` returns the exit status). */
#ifndef LIPT_COMMANDS_H
#define LIPT_COMMANDS_H

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} lipt_command;

extern const lipt_command lipt_commands[];
extern const int lipt_n_commands;

/* lipt help TOPIC: prints the topic (or runs the command with --help); the exit status. */
int help_topic(const char *topic);

#endif
