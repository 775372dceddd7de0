/*
 * cli/cmd_ckpt.c — `meshpoint ckpt ls|show|verify|diff`: inspecting checkpoints (single process, read
 * only, built on the public API of ckpt/ckpt.h only). This file only dispatches; each subcommand is one
 * file and the helpers they share are cli/ckpt_common.[ch]:
 *
 *   ls ROOT          cli/ckpt_ls.c      the complete checkpoints under ROOT (step, mesh, size, which one
 *                                       `latest` names) and the incomplete directories
 *   show DIR         cli/ckpt_show.c    format, step, mesh, configs, data cursor, LR schedule, optimizer;
 *                                       optionally the tensor table, the shard map and per-tensor
 *                                       statistics; text or --json
 *   verify DIR       cli/ckpt_verify.c  ckpt_verify + the metadata and the tensor set a training
 *                                       checkpoint needs
 *   (ls, show, verify of a PyTorch DCP directory: cli/ckpt_dcp.c)
 *   diff A B         cli/ckpt_diff.c    tensor by tensor, whatever meshes wrote them; metadata differences
 *   repair-views DIR cli/ckpt_repair.c  index.h5's views rebuilt from its tables when damaged
 *
 * Exit status: 0 ok, 1 a check failed or the checkpoints differ, 2 bad usage or unreadable/missing input.
 */
#include <stdio.h>
#include <string.h>
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "core/log.h"

/* The subcommands: one table drives the dispatch and the usage text's list. */
static const mp_subcommand subs[] = {
    {"ls", mp_ckpt_ls, "ls ROOT", "complete checkpoints under ROOT, which one `latest` names, leftovers"},
    {"show", mp_ckpt_show, "show DIR [--tensors] [--boxes] [--stats] [--json]",
     "format, step, mesh, configs, data cursor, LR schedule, optimizer;\n"
     "tensor table, shard map, per-tensor statistics"},
    {"verify", mp_ckpt_verify, "verify DIR", "integrity, metadata and the tensor set of a training checkpoint"},
    {"diff", mp_ckpt_diff, "diff A B [--atol X] [--rtol Y]", "tensor by tensor, across meshes; metadata"},
    {"repair-views", mp_ckpt_repair_views, "repair-views DIR [--force]",
     "rebuild index.h5's /view datasets (for h5py & co.) from its tables"},
    {0}};

/* `meshpoint ckpt`'s usage text: the subcommands (from the table), what DIR may be, the exit statuses. */
static void print_usage(FILE *out) {
    fputs("usage: meshpoint ckpt <", out);
    mp_subcommand_names(out, subs);
    fputs("> [options]\n\n", out);
    mp_subcommand_list(out, subs, 32);
    fputs("\n"
          "DIR may be a checkpoint directory, a checkpoint root or a run directory (its newest complete\n"
          "checkpoint). ls, show and verify also take a PyTorch DCP directory (it holds .metadata; read\n"
          "without executing its pickles: docs/DCP.md). Exit status: 0 ok, 1 a check failed / the\n"
          "checkpoints differ, 2 bad usage or\n"
          "unreadable input. `meshpoint ckpt <sub> --help` describes each.\n", out);
}

/* `meshpoint ckpt SUB ...`: runs the subcommand named by argv[0] (the usage text without one, exit 2;
 * with --help, exit 0), after naming it for the error prefix. */
int mp_cmd_ckpt(int argc, char **argv) {
    if (argc < 1) {
        print_usage(stderr);
        return mp_exit_status(MP_EINPUT);
    }
    const char *name = argv[0];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        print_usage(stdout);
        return mp_exit_status(MP_OK);
    }
    const mp_subcommand *sub = mp_subcommand_lookup(subs, name, "subcommand", print_usage);
    if (!sub) return mp_exit_status(MP_EINPUT);
    mp_subcommand_enter("meshpoint ckpt", sub);   /* errors read "meshpoint ckpt verify: error: ..." */
    return sub->run(argc - 1, argv + 1);
}
