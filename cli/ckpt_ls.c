/*
 * cli/ckpt_ls.c — `meshpoint ckpt ls ROOT [--json]`: the complete checkpoints under ROOT (step, mesh,
 * size, which one `latest` names) and the incomplete directories (leftover *.partial of interrupted
 * saves, step directories without a valid index). ROOT may be a run directory (its checkpoints/).
 * Exit status: 0 ok, 1 a complete checkpoint could not be opened, 2 bad usage or no such directory.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"

/* Is name "step_<digits>" followed by exactly suffix? Sets *step. */
static int parse_step_name(const char *name, const char *suffix, int64_t *step) {
    if (strncmp(name, "step_", 5)) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    if (strcmp(p, suffix)) return 0;
    *step = v;
    return 1;
}

/* Total size of the regular files directly in dir, bytes. */
static int64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = mp_ckpt_join(dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (int64_t)st.st_size;
        free(p);
    }
    closedir(d);
    return total;
}

typedef struct ls_entry {
    char name[256];
    int64_t step;
    int complete;
    char reason[MP_ERR_MSG_MAX];
} ls_entry;

/* qsort order: by step, then by name. */
static int cmp_entry(const void *a, const void *b) {
    const ls_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The directory name ROOT/latest holds (trimmed) into buf, or "" if it is missing. */
static void read_latest(const char *root, char *buf, size_t cap) {
    buf[0] = '\0';
    char *p = mp_ckpt_join(root, "latest");
    FILE *f = fopen(p, "rb");
    free(p);
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
}

/* `meshpoint ckpt ls`: see the top of this file. Returns the exit status. */
int mp_ckpt_ls(int argc, char **argv) {
    int json = 0, npos = 0, help = 0;
    const mp_arg flags[] = {{"json", MP_ARG_SWITCH, &json, NULL, "print JSON"}, {0}};
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        fprintf(stderr, "meshpoint ckpt ls: %s\n", err.msg);
        return MP_CKPT_ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt ls ROOT [--json]",
                     "Lists the complete checkpoints under ROOT (a run's checkpoints/ directory, or the run "
                     "directory) with step, mesh and size, marks the one `latest` names, and lists incomplete "
                     "directories (leftover *.partial of interrupted saves, step directories without a valid index).",
                     flags);
        return MP_CKPT_ST_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "meshpoint ckpt ls: expected one ROOT directory (see --help)\n");
        return MP_CKPT_ST_USAGE;
    }
    if (!mp_ckpt_is_dir(argv[0])) {
        fprintf(stderr, "meshpoint ckpt ls: %s: %s\n", argv[0], mp_ckpt_exists(argv[0]) ? "not a directory" : "no such directory");
        return MP_CKPT_ST_USAGE;
    }
    char *ip = mp_ckpt_join(argv[0], "index.h5");
    int is_ckpt = mp_ckpt_exists(ip);
    free(ip);
    if (is_ckpt) {
        fprintf(stderr, "meshpoint ckpt ls: %s is a checkpoint, not a checkpoint root: give its parent, or use "
                        "`meshpoint ckpt show`\n", argv[0]);
        return MP_CKPT_ST_USAGE;
    }
    char *root = mp_ckpt_root_of(argv[0]);
    DIR *d = opendir(root);
    if (!d) {
        fprintf(stderr, "meshpoint ckpt ls: cannot list %s: %s\n", root, strerror(errno));
        free(root);
        return MP_CKPT_ST_USAGE;
    }
    int n = 0, cap = 0;
    ls_entry *e = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        int partial = parse_step_name(de->d_name, ".partial", &step);
        if (!partial && !parse_step_name(de->d_name, "", &step)) continue;
        char *p = mp_ckpt_join(root, de->d_name);
        int isd = mp_ckpt_is_dir(p);
        if (isd) {
            if (n == cap) {
                cap = 2 * cap + 16;
                e = realloc(e, sizeof *e * (size_t)cap);
                if (!e) abort();
            }
            ls_entry *x = &e[n++];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "%s", de->d_name);
            x->step = step;
            if (partial) snprintf(x->reason, sizeof x->reason, "interrupted save (never loaded)");
            else {
                mp_err ce;
                if (ckpt_check_complete(p, &ce) == MP_OK) x->complete = 1;
                else snprintf(x->reason, sizeof x->reason, "%s", ce.msg);
            }
        }
        free(p);
    }
    closedir(d);
    if (n > 1) qsort(e, (size_t)n, sizeof *e, cmp_entry);
    char latest[512];
    read_latest(root, latest, sizeof latest);
    int latest_ok = 0, newest = -1, status = MP_CKPT_ST_OK;
    for (int i = 0; i < n; i++)
        if (e[i].complete) {
            newest = i;
            if (!strcmp(e[i].name, latest)) latest_ok = 1;
        }
    cJSON *jo = json ? cJSON_CreateObject() : NULL, *jl = NULL, *ji = NULL;
    if (json) {
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
    int ncomplete = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].complete) continue;
        ncomplete++;
        char *p = mp_ckpt_join(root, e[i].name);
        int64_t bytes = dir_bytes(p);
        ckpt_reader *r = NULL;
        mp_err oe;
        mp_err_clear(&oe);
        char mesh[128] = "?";
        int64_t tp = -1, dp = -1;
        int ntensors = -1;
        if (ckpt_open(&r, p, &oe) == MP_OK) {
            mp_ckpt_mesh_str(mesh, sizeof mesh, r);
            cJSON *m = mp_ckpt_meta_json(r, "mesh");
            if (m) { mp_ckpt_json_int(m, "tp", &tp); mp_ckpt_json_int(m, "dp", &dp); }
            cJSON_Delete(m);
            ntensors = ckpt_num_tensors(r);
        } else {
            snprintf(mesh, sizeof mesh, "unreadable");
            status = MP_CKPT_ST_FAIL;
        }
        int is_latest = !strcmp(e[i].name, latest);
        if (json) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "step", (double)e[i].step);
            cJSON_AddStringToObject(c, "dir", e[i].name);
            if (tp > 0) cJSON_AddNumberToObject(c, "tp", (double)tp);
            if (dp > 0) cJSON_AddNumberToObject(c, "dp", (double)dp);
            if (r) cJSON_AddNumberToObject(c, "world", ckpt_reader_world(r));
            if (ntensors >= 0) cJSON_AddNumberToObject(c, "tensors", ntensors);
            cJSON_AddNumberToObject(c, "bytes", (double)bytes);
            cJSON_AddBoolToObject(c, "latest", is_latest);
            if (!r) cJSON_AddStringToObject(c, "error", oe.msg);
            cJSON_AddItemToArray(jl, c);
        } else {
            char hb[32], sz[64];
            snprintf(sz, sizeof sz, "%s (%lld bytes)", mp_ckpt_human(hb, sizeof hb, bytes), (long long)bytes);
            printf("  %-12lld %-16s %-14s %-24s%s\n", (long long)e[i].step, e[i].name, mesh, sz,
                   is_latest ? "  <- latest" : "");
            if (!r) printf("    unreadable: %s\n", oe.msg);
        }
        ckpt_close(r);
        free(p);
    }
    if (!json && !ncomplete) printf("  (no complete checkpoints)\n");
    for (int i = 0; i < n; i++) {
        if (e[i].complete) continue;
        char *p = mp_ckpt_join(root, e[i].name);
        int64_t bytes = dir_bytes(p);
        free(p);
        if (json) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "step", (double)e[i].step);
            cJSON_AddStringToObject(c, "dir", e[i].name);
            cJSON_AddNumberToObject(c, "bytes", (double)bytes);
            cJSON_AddStringToObject(c, "reason", e[i].reason);
            cJSON_AddItemToArray(ji, c);
        } else {
            char hb[32];
            printf("incomplete: %s (%s): %s\n", e[i].name, mp_ckpt_human(hb, sizeof hb, bytes), e[i].reason);
        }
    }
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
    free(e);
    free(root);
    return status;
}
