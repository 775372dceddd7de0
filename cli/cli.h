/*
 * cli/cli.h — the subcommands of the meshpoint program. Each takes the arguments after its name and
 * returns the process exit status (0 ok, 1 a failed operation or check, 2 bad usage or input).
 */
#ifndef MP_CLI_H
#define MP_CLI_H

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

#endif
