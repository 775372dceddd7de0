/*
 * cli/ckpt_ls.c — `meshpoint ckpt ls ROOT [--json]`: the complete checkpoints under ROOT (step, mesh,
 * size, which one `latest` names) and the incomplete directories (leftover *.partial of interrupted
 * saves, step directories without a valid index). ROOT may be a run directory (its checkpoints/).
 *
 * The step shown is the one the index records (its checksummed `step` attribute), not the number in the
 * directory name: a `step_00000003` holding step 8 (renamed or copied by hand) is listed as step 8 and
 * flagged ("name says step 3"; in --json "name_step" and "step_mismatch": true), as is metadata "step"
 * disagreeing with the index. Such a checkpoint is listed, not refused: the flag is information, the exit
 * status does not change (`ckpt verify` is the check).
 * A complete checkpoint whose view.h5 is not written yet (ckpt_views_pending: a training save publishes
 * the checkpoint first and writes its views afterwards, so a kill or a full disk can leave it so) is
 * marked "views pending" (in --json "views_pending": true), with the way to write them: the run's next
 * `meshpoint train` start does it, `meshpoint ckpt repair-views DIR` at once. It loads as ever.
 * Exit status: 0 ok, 1 a complete checkpoint could not be opened, 2 bad usage or no such directory.
 */
#include "core/alloc.h"
#include "core/fsutil.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "core/log.h"

/* Total size of the regular files directly in dir, and of those in its carried files' directory
 * (CKPT_FILES_DIR), bytes. */
static int64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = mp_fs_join(dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (int64_t)st.st_size;
        else if (!strcmp(de->d_name, CKPT_FILES_DIR) && lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) total += dir_bytes(p);
        free(p);
    }
    closedir(d);
    return total;
}

/* One step directory of the root, as listed. */
typedef struct ls_entry {
    char name[256];
    int64_t step;              /* the index's step (complete and readable), else the name's */
    int64_t name_step;         /* the step the directory name says */
    int64_t meta_step;         /* metadata "step" when it is an integer, else -1 */
    int complete;
    int readable;              /* complete and opened: the fields below are set */
    char mesh[128];
    int64_t tp, dp;            /* -1: unknown */
    int world, ntensors;
    int views_pending;         /* readable, format v3, no view.h5 yet */
    int64_t bytes;
    char reason[MP_ERR_MSG_MAX];   /* incomplete: why; complete but unreadable: the open error */
} ls_entry;

/* qsort order: by step, then by name. */
static int cmp_entry(const void *a, const void *b) {
    const ls_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Does the listed checkpoint's step disagree with its name or its metadata? */
static int step_mismatch(const ls_entry *x) {
    return x->readable && (x->step != x->name_step || (x->meta_step >= 0 && x->meta_step != x->step));
}

/* Fills the description of complete checkpoint x (directory p): opens it and records the index's step,
 * metadata "step", mesh, world, tensors and size; an open failure goes to x->reason (x->readable = 0). */
static void describe_complete(const char *p, ls_entry *x) {
    x->bytes = dir_bytes(p);
    x->tp = x->dp = -1;
    x->meta_step = -1;
    snprintf(x->mesh, sizeof x->mesh, "unreadable");
    ckpt_reader *r = NULL;
    mp_err oe;
    mp_err_clear(&oe);
    if (ckpt_open(&r, p, &oe) != MP_OK) {
        snprintf(x->reason, sizeof x->reason, "%s", oe.msg);
        return;
    }
    x->readable = 1;
    x->step = ckpt_reader_step(r);
    mp_ckpt_mesh_str(x->mesh, sizeof x->mesh, r);
    cJSON *m = mp_ckpt_meta_json(r, "mesh");
    if (m) { mp_ckpt_json_int(m, "tp", &x->tp); mp_ckpt_json_int(m, "dp", &x->dp); }
    cJSON_Delete(m);
    cJSON *s = mp_ckpt_meta_json(r, "step");
    if (cJSON_IsNumber(s) && !mp_double_to_i64(s->valuedouble, 0, INT64_MAX, &x->meta_step)) x->meta_step = -1;
    cJSON_Delete(s);
    x->world = ckpt_reader_world(r);
    x->ntensors = ckpt_num_tensors(r);
    x->views_pending = ckpt_views_pending(r);
    ckpt_close(r);
}

/* The listing scan_root builds. */
typedef struct ls_list {
    const char *root;
    ls_entry *e;
    int n, cap;
} ls_list;

/* mp_fs_step_fn of scan_root: adds step directory `name` of the root (k 1: a .partial) to the list,
 * complete, or incomplete with the reason. Never stops the scan. */
static int scan_entry(void *ctx, const char *name, int64_t step, int k) {
    ls_list *l = ctx;
    int partial = k == 1;
    if (l->n == l->cap) {
        l->cap = 2 * l->cap + 16;
        l->e = mp_realloc(l->e, 0, sizeof *l->e * (size_t)l->cap, MP_MEM_OTHER);
    }
    ls_entry *x = &l->e[l->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->step = x->name_step = step;
    char *p = mp_fs_join(l->root, name);
    mp_err ce;
    if (partial) snprintf(x->reason, sizeof x->reason, "interrupted save (never loaded)");
    else if (ckpt_check_complete(p, &ce) == MP_OK) x->complete = 1;
    else snprintf(x->reason, sizeof x->reason, "%s", ce.msg);
    if (x->complete) describe_complete(p, x);
    else x->bytes = dir_bytes(p);
    free(p);
    return 0;
}

/* The step directories of root (mp_fs_each_step_dir: step_<digits> and step_<digits>.partial), sorted
 * by step (the index's for readable checkpoints); *e malloc'd. mp_exit_status(MP_EINPUT) (message
 * printed) when root cannot be listed. */
static int scan_root(const char *root, ls_entry **e, int *n) {
    static const char *const sfx[] = {"", ".partial", NULL};
    ls_list l = {.root = root};
    mp_err err;
    mp_code rc = mp_fs_is_dir(root) ? mp_fs_each_step_dir(root, sfx, scan_entry, &l, &err)
                                    : mp_err_set(&err, MP_EINPUT, "cannot list %s: not a directory", root);
    if (l.n > 1) qsort(l.e, (size_t)l.n, sizeof *l.e, cmp_entry);
    *e = l.e;
    *n = l.n;
    if (rc) mp_log_fail("%s", err.msg);
    return mp_exit_status(rc ? MP_EINPUT : MP_OK);
}

/* JSON object of complete checkpoint x. */
static cJSON *complete_json(const ls_entry *x, int is_latest) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "step", (double)x->step);
    cJSON_AddStringToObject(c, "dir", x->name);
    cJSON_AddNumberToObject(c, "name_step", (double)x->name_step);
    cJSON_AddBoolToObject(c, "step_mismatch", step_mismatch(x));
    if (x->meta_step >= 0) cJSON_AddNumberToObject(c, "meta_step", (double)x->meta_step);
    if (x->tp > 0) cJSON_AddNumberToObject(c, "tp", (double)x->tp);
    if (x->dp > 0) cJSON_AddNumberToObject(c, "dp", (double)x->dp);
    if (x->readable) {
        cJSON_AddNumberToObject(c, "world", x->world);
        cJSON_AddNumberToObject(c, "tensors", x->ntensors);
        cJSON_AddBoolToObject(c, "views_pending", x->views_pending);
    }
    cJSON_AddNumberToObject(c, "bytes", (double)x->bytes);
    cJSON_AddBoolToObject(c, "latest", is_latest);
    if (!x->readable) cJSON_AddStringToObject(c, "error", x->reason);
    return c;
}

/* Prints complete checkpoint x (directory x->name of root) as a table row (and its flags below it). */
static void complete_text(const char *root, const ls_entry *x, int is_latest) {
    char hb[32], sz[64];
    snprintf(sz, sizeof sz, "%s (%lld bytes)", mp_ckpt_human(hb, sizeof hb, x->bytes), (long long)x->bytes);
    printf("  %-12lld %-16s %-14s %-24s%s%s%s\n", (long long)x->step, x->name, x->mesh, sz,
           is_latest ? "  <- latest" : "", x->views_pending ? "  views pending" : "",
           step_mismatch(x) ? "  !! step mismatch" : "");
    if (!x->readable) printf("    unreadable: %s\n", x->reason);
    if (x->views_pending)
        printf("    views pending: no view.h5 yet (loads as ever; the run's next `meshpoint train` start writes it, "
               "or meshpoint ckpt repair-views %s/%s)\n", root, x->name);
    if (x->readable && x->step != x->name_step)
        printf("    step mismatch: the directory name says step %lld, the index says step %lld (renamed or copied "
               "by hand?)\n", (long long)x->name_step, (long long)x->step);
    if (x->readable && x->meta_step >= 0 && x->meta_step != x->step)
        printf("    step mismatch: metadata \"step\" says %lld, the index says step %lld\n", (long long)x->meta_step,
               (long long)x->step);
}

/* Prints incomplete directory x (text) or adds it to the JSON array ji. */
static void incomplete_out(const ls_entry *x, cJSON *ji) {
    if (ji) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "step", (double)x->step);
        cJSON_AddStringToObject(c, "dir", x->name);
        cJSON_AddNumberToObject(c, "bytes", (double)x->bytes);
        cJSON_AddStringToObject(c, "reason", x->reason);
        cJSON_AddItemToArray(ji, c);
    } else {
        char hb[32];
        printf("incomplete: %s (%s): %s\n", x->name, mp_ckpt_human(hb, sizeof hb, x->bytes), x->reason);
    }
}

/* Prints the listing of the n entries e of root (text, or JSON with json); latest is what ROOT/latest
 * names. Returns the exit status: mp_exit_status(MP_ECHECK) when a complete checkpoint could not be
 * opened. */
static int print_listing(const char *root, const ls_entry *e, int n, const char *latest, int json) {
    int latest_ok = 0, newest = -1, ncomplete = 0, status = mp_exit_status(MP_OK);
    for (int i = 0; i < n; i++)
        if (e[i].complete) {
            /* --resume picks by directory name (ckpt_find_latest), whatever the index says */
            if (newest < 0 || e[i].name_step > e[newest].name_step) newest = i;
            if (!strcmp(e[i].name, latest)) latest_ok = 1;
        }
    cJSON *jo = NULL, *jl = NULL, *ji = NULL;
    if (json) {
        jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "root", root);
        if (latest[0]) cJSON_AddStringToObject(jo, "latest", latest);
        else cJSON_AddNullToObject(jo, "latest");
        cJSON_AddBoolToObject(jo, "latest_complete", latest_ok);
        if (newest >= 0) cJSON_AddStringToObject(jo, "newest_complete", e[newest].name);
        else cJSON_AddNullToObject(jo, "newest_complete");
        jl = cJSON_AddArrayToObject(jo, "checkpoints");
        ji = cJSON_AddArrayToObject(jo, "incomplete");
    } else {
        printf("checkpoints in %s\n", root);
        printf("  %-12s %-16s %-14s %-24s\n", "STEP", "DIRECTORY", "MESH", "SIZE");
    }
    for (int i = 0; i < n; i++) {
        if (!e[i].complete) continue;
        ncomplete++;
        if (!e[i].readable) status = mp_exit_status(MP_ECHECK);
        int is_latest = !strcmp(e[i].name, latest);
        if (json) cJSON_AddItemToArray(jl, complete_json(&e[i], is_latest));
        else complete_text(root, &e[i], is_latest);
    }
    if (!json && !ncomplete) printf("  (no complete checkpoints)\n");
    for (int i = 0; i < n; i++)
        if (!e[i].complete) incomplete_out(&e[i], ji);
    char names[1024];
    if (!json && mp_fs_tmp_leftovers(root, names, sizeof names))   /* core/fsutil.h's temp-file convention */
        printf("leftover temp files of interrupted writes (never read; safe to delete when nothing is writing "
               "there): %s\n", names);
    if (json) {
        char *s = cJSON_Print(jo);
        puts(s);
        free(s);
        cJSON_Delete(jo);
    } else {
        if (!latest[0]) printf("latest: (missing)\n");
        else printf("latest: %s%s\n", latest, latest_ok ? "" : " (not a complete checkpoint)");
        if (newest >= 0 && (!latest_ok || strcmp(e[newest].name, latest)))
            printf("newest complete (what --resume loads): %s\n", e[newest].name);
    }
    return status;
}

/* Checks the command line: sets *root (malloc'd: the checkpoint root ROOT means) and returns -1 to go
 * on, -2 (root set to ROOT) when ROOT is or holds PyTorch DCP directories, or returns the exit status
 * (help printed, or a usage error reported). */
static int parse_ls_args(int argc, char **argv, int *json, char **root) {
    const mp_arg flags[] = {{"json", MP_ARG_SWITCH, json, NULL, "print JSON"}, {0}};
    *root = NULL;
    int st = mp_ckpt_cli_start(flags, argc, argv, 1, "one ROOT directory", "meshpoint ckpt ls ROOT [--json]",
                               "Lists the complete checkpoints under ROOT (a run's checkpoints/ directory, or the run "
                               "directory) with step (the index's; a directory name that says another is flagged), "
                               "mesh and size, marks the one `latest` names and those whose views are pending (no "
                               "view.h5 yet: `ckpt repair-views` or the run's next `train` start writes it), and lists "
                               "incomplete directories (leftover *.partial of interrupted saves, step directories "
                               "without a valid index).");
    if (st >= 0) return st;
    if (mp_ckpt_dcp_root(argv[0])) {   /* a PyTorch DCP directory, or a directory of them (torchtitan's step-N) */
        *root = mp_strdup(argv[0]);
        return -2;
    }
    if (!mp_fs_is_dir(argv[0])) {
        mp_log_fail("%s: %s", argv[0], mp_fs_exists(argv[0]) ? "not a directory" : "no such directory");
        return mp_exit_status(MP_EINPUT);
    }
    char *ip = mp_fs_join(argv[0], "index.h5");
    int is_ckpt = mp_fs_exists(ip);
    free(ip);
    if (is_ckpt) {
        mp_log_fail("%s is a checkpoint, not a checkpoint root: give its parent, or use `meshpoint ckpt show`",
                    argv[0]);
        return mp_exit_status(MP_EINPUT);
    }
    *root = mp_ckpt_root_of(argv[0]);
    return -1;
}

/* `meshpoint ckpt ls`: see the top of this file. Returns the exit status. */
int mp_ckpt_ls(int argc, char **argv) {
    int json = 0;
    char *root = NULL;
    int status = parse_ls_args(argc, argv, &json, &root);
    if (status == -2) {
        status = mp_ckpt_dcp_ls(root, json);
        free(root);
        return status;
    }
    if (status >= 0) return status;
    ls_entry *e = NULL;
    int n = 0;
    status = scan_root(root, &e, &n);
    if (status == mp_exit_status(MP_OK)) {
        char latest[512];
        ckpt_latest_name(root, latest, sizeof latest);
        status = print_listing(root, e, n, latest, json);
    }
    free(e);
    free(root);
    return status;
}
