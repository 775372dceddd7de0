/*
 * cli/ckpt_repair.c — `meshpoint ckpt repair-views DIR [--force]`: index.h5's /view datasets rebuilt from
 * its own layout tables (ckpt_views_repair), for the tools that read checkpoints through the views (h5py,
 * h5dump, HDF5 viewers). meshpoint itself reads the tables, never the views, so damaged views leave a
 * checkpoint loadable by meshpoint but unreadable, or crashing, elsewhere; `ckpt verify` reports them.
 *
 * The views are checked first (ckpt_views_check, in a child process): intact views leave index.h5 as it
 * is unless --force; views pending (a v3 checkpoint without view.h5) are written. Otherwise the index is rebuilt atomically (a new file renamed over the old one) and
 * checked again. The rank files are never touched. Exit status: 0 repaired or nothing to repair, 1 the
 * tables themselves are damaged (nothing to rebuild from) or the repaired views still fail, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "core/fsutil.h"
#include "core/log.h"

/* Prints one view problem (ckpt_view_report_fn). */
static void print_problem(void *ctx, const char *text) {
    (void)ctx;
    printf("problem: %s\n", text);
}

/* Counts without printing (the check after the repair prints only what is left). */
static void count_only(void *ctx, const char *text) {
    (void)ctx;
    printf("still: %s\n", text);
}

int mp_ckpt_repair_views(int argc, char **argv) {
    int force = 0;
    const mp_arg flags[] = {
        {"force", MP_ARG_SWITCH, &force, NULL, "rebuild the views even when the check finds them intact"},
        {0}};
    int st = mp_ckpt_cli_start(flags, argc, argv, 1, "one checkpoint DIR", "meshpoint ckpt repair-views DIR [--force]",
                               "Checks index.h5's /view datasets (what h5py and other HDF5 tools read) against its "
                               "layout tables and, when they are damaged, rebuilds index.h5 from the tables atomically "
                               "(the rank files are not touched). Exit 1 when the tables themselves are damaged.");
    if (st >= 0) return st;
    mp_err err;
    mp_err_clear(&err);
    char *dir = NULL;
    if (mp_ckpt_resolve(argv[0], &dir, &err)) {
        mp_log_fail("%s", err.msg);
        return mp_exit_status(MP_EINPUT);
    }
    int status = mp_exit_status(MP_ECHECK), found = 0, left = 0, pending = 0, still_pending = 0;
    if (ckpt_views_check(dir, 1, print_problem, NULL, &found, &pending, &err)) {
        mp_log_fail("%s", err.msg);
        goto out;
    }
    if (pending) printf("views pending: %s has no view.h5\n", dir);
    if (!found && !pending && !force) {
        printf("the views of %s are intact: index.h5 left as it is (--force rebuilds it anyway)\n", dir);
        status = mp_exit_status(MP_OK);
        goto out;
    }
    if (ckpt_views_repair(dir, &err)) {
        mp_log_fail("%s", err.msg);
        status = mp_exit_status(err.code);
        goto out;
    }
    if (ckpt_views_check(dir, 1, count_only, NULL, &left, &still_pending, &err) || left || still_pending) {
        mp_log_fail("the rebuilt views of %s still fail (%d problem(s)%s%s%s)", dir, left,
                    still_pending ? ", view.h5 still missing" : "", err.msg[0] ? ": " : "", err.msg);
        goto out;
    }
    char *vf = mp_fs_join(dir, "view.h5");   /* format v3 keeps the views there (docs/FORMAT.md) */
    if (pending)
        printf("repaired %s: view.h5 rebuilt from its tables (it was missing: views pending; rank files untouched)\n",
               dir);
    else
        printf("repaired %s: %s rebuilt from its tables (%d view problem(s) before, none now; rank files "
               "untouched)\n", dir, mp_fs_exists(vf) ? "view.h5" : "index.h5", found);
    free(vf);
    status = mp_exit_status(MP_OK);
out:
    free(dir);
    return status;
}
