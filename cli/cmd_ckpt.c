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

static const char *ckpt_usage =
    "usage: meshpoint ckpt <ls|show|verify|diff|repair-views> [options]\n"
    "\n"
    "  ls ROOT                         complete checkpoints under ROOT, which one `latest` names, leftovers\n"
    "  show DIR [--tensors] [--boxes] [--stats] [--json]\n"
    "                                  format, step, mesh, configs, data cursor, LR schedule, optimizer;\n"
    "                                  tensor table, shard map, per-tensor statistics\n"
    "  verify DIR                      integrity, metadata and the tensor set of a training checkpoint\n"
    "  diff A B [--atol X] [--rtol Y]  tensor by tensor, across meshes; metadata\n"
    "  repair-views DIR [--force]      rebuild index.h5's /view datasets (for h5py & co.) from its tables\n"
    "\n"
    "DIR may be a checkpoint directory, a checkpoint root or a run directory (its newest complete\n"
    "checkpoint). Exit status: 0 ok, 1 a check failed / the checkpoints differ, 2 bad usage or\n"
    "unreadable input. `meshpoint ckpt <sub> --help` describes each.\n";

int mp_cmd_ckpt(int argc, char **argv) {
    if (argc < 1) {
        fputs(ckpt_usage, stderr);
        return MP_CKPT_ST_USAGE;
    }
    const char *sub = argv[0];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        fputs(ckpt_usage, stdout);
        return MP_CKPT_ST_OK;
    }
    static const char *const subs[] = {"ls", "show", "verify", "diff", "repair-views", NULL};
    for (int i = 0; subs[i]; i++)
        if (!strcmp(sub, subs[i])) {
            char prog[64];
            snprintf(prog, sizeof prog, "meshpoint ckpt %s", sub);
            mp_log_set_prog(prog);   /* errors read "meshpoint ckpt verify: error: ..." */
        }
    if (!strcmp(sub, "ls")) return mp_ckpt_ls(argc - 1, argv + 1);
    if (!strcmp(sub, "show")) return mp_ckpt_show(argc - 1, argv + 1);
    if (!strcmp(sub, "verify")) return mp_ckpt_verify(argc - 1, argv + 1);
    if (!strcmp(sub, "diff")) return mp_ckpt_diff(argc - 1, argv + 1);
    if (!strcmp(sub, "repair-views")) return mp_ckpt_repair_views(argc - 1, argv + 1);
    mp_log_fail("unknown subcommand \"%s\"", sub);
    fprintf(stderr, "\n%s", ckpt_usage);
    return MP_CKPT_ST_USAGE;
}
