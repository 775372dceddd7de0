/*
 * cli/cli.h — the subcommands of the meshpoint program. Each takes the arguments after its name and
 * returns the process exit status, always decided one way: mp_exit_status(code) of core/error.h (0
 * MP_OK, 2 MP_EINPUT: bad usage or input, 1 any other code: a failed operation or check), directly or
 * through cli/runtime.h's mp_runtime_exit_alike / mp_runtime_exit_agreed (a failure every rank found
 * alike; a failure agreed over the ranks). No command returns a literal status (tests/python/code_shape.py
 * checks it).
 */
#ifndef MP_CLI_H
#define MP_CLI_H

#include <stdio.h>

int mp_cmd_train(int argc, char **argv);
int mp_cmd_eval(int argc, char **argv);
int mp_cmd_data(int argc, char **argv);
int mp_cmd_ckpt(int argc, char **argv);
int mp_cmd_reshard(int argc, char **argv);
int mp_cmd_init(int argc, char **argv);
int mp_cmd_sample(int argc, char **argv);
int mp_cmd_plot(int argc, char **argv);
int mp_cmd_export(int argc, char **argv);
int mp_cmd_import(int argc, char **argv);

/* One row of a subcommand table (one table per level: cli/main.c, cli/cmd_ckpt.c); a row with a NULL
 * name ends it. The table drives both the dispatch and the command list of the usage text. */
typedef struct mp_subcommand {
    const char *name;
    int (*run)(int argc, char **argv);   /* the arguments after the name; returns the exit status */
    const char *synopsis;                /* the usage column ("show DIR [--json]"); NULL: the name */
    const char *help;                    /* one line ("\n" continues it, indented under the first) */
} mp_subcommand;

/* The row of table named name; none: reports "unknown WHAT "NAME"", prints the usage text to stderr
 * after a blank line, and returns NULL (the caller's status: mp_exit_status(MP_EINPUT)). */
const mp_subcommand *mp_subcommand_lookup(const mp_subcommand *table, const char *name, const char *what,
                                          void (*usage)(FILE *out));
/* Names the running command "PREFIX NAME" for the error prefix ("meshpoint ckpt verify: error: ..."). */
void mp_subcommand_enter(const char *prefix, const mp_subcommand *cmd);
/* Prints the table's names separated by '|' ("ls|show|verify"), no newline. */
void mp_subcommand_names(FILE *out, const mp_subcommand *table);
/* Prints one line per row: two spaces, the synopsis padded to width, the help; a synopsis of width or
 * more characters gets a line of its own, the help starting under the column on the next. */
void mp_subcommand_list(FILE *out, const mp_subcommand *table, int width);

#endif
