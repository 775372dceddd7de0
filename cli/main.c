/*
 * cli/main.c — the meshpoint program: dispatches to a subcommand. The composition root: only cli/
 * decides exit statuses (0 ok, 1 failed operation/check, 2 bad usage/input).
 */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"

static const char *usage =
    "meshpoint — TP+FSDP Llama training with sharded, reshardable HDF5 checkpoints\n"
    "\n"
    "usage: meshpoint <command> [options]\n"
    "\n"
    "commands:\n"
    "  train    train a Llama model (run under mpirun for a dp x tp mesh)\n"
    "  eval     mean loss of a model over a token file\n"
    "  data     turn UTF-8 text files into byte-level token files (vocab 256)\n"
    "  ckpt     inspect checkpoints: ls, show, verify, diff (across meshes)\n"
    "  reshard  convert a checkpoint offline to another tp x dp mesh (or consolidate it)\n"
    "  init     write a step-0 checkpoint of the seeded initialisation for any mesh\n"
    "\n"
    "`meshpoint <command> --help` describes each command's options.\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return mp_cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return mp_cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return mp_cmd_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return mp_cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "reshard")) return mp_cmd_reshard(argc - 2, argv + 2);
    if (!strcmp(cmd, "init")) return mp_cmd_init(argc - 2, argv + 2);
    fprintf(stderr, "meshpoint: unknown command \"%s\"\n\n%s", cmd, usage);
    return 2;
}
