/*
 * cli/ckpt_dcp.c — `meshpoint ckpt ls|show|verify` of PyTorch Distributed Checkpoint (DCP) directories
 * (recognised by their `.metadata`; reshard/dcp.h reads them, docs/DCP.md says what is read and refused).
 * ckpt_ls.c, ckpt_show.c and ckpt_verify.c hand a DCP directory over to these functions.
 *
 *   show    reads `.metadata` only (and the one record of train_state.step): every tensor with its
 *           dtype, shape and chunks as boxes ([r0:r1, c0:c1]) with their file and record range, the
 *           bytes items by name, the train_state step. --json: one object (format "dcp").
 *   verify  the chunks of every tensor lie inside it and cover it exactly once (element counts add up,
 *           no two overlap); every file exists and every record lies inside its file; every chunk's
 *           record is a well-formed torch.save zip whose data.pkl (read by the data-only pickle reader)
 *           rebuilds exactly that box, in the metadata's dtype, from a storage entry inside the record.
 *           DCP stores no checksums: the tensor bytes cannot be checked, and the verdict says so.
 *   ls      the DCP directories under ROOT (ROOT itself when it is one): tensors, chunks, files, size,
 *           train_state step.
 * Exit status: 0 ok, 1 a check failed, 2 bad usage or a directory refused (its message names why).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/ckpt_common.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "reshard/dcp.h"

/* Opens dir (error printed: exit status 2 returned via *status). */
static dcp_dir *open_or_fail(const char *dir, int *status) {
    dcp_dir *d = NULL;
    mp_err e;
    mp_err_clear(&e);
    if (dcp_open(&d, dir, &e)) {
        mp_log_fail("%s", e.msg);
        *status = mp_exit_status(e.code == MP_EINPUT ? MP_EINPUT : MP_ECHECK);
        return NULL;
    }
    return d;
}

/* A chunk's box as "[o0:o0+s0, o1:o1+s1]" into buf. */
static const char *box_str(char *buf, size_t cap, int ndim, const dcp_chunk *c) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld:%lld", i ? ", " : "", (long long)c->offsets[i],
                               (long long)(c->offsets[i] + c->sizes[i]));
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return buf;
}

static cJSON *json_ints(int n, const int64_t *v) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* Bytes of tensor t (elements x dtype size). */
static int64_t tensor_bytes(const dcp_tensor *t) { return dcp_numel(t->ndim, t->shape) * st_dtype_size(t->dtype); }

/* The JSON object of one tensor: name, dtype, shape, chunks (offsets, sizes, file, record offset/length). */
static cJSON *json_tensor(const dcp_dir *d, const dcp_tensor *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "dtype", t->dtype_name);
    cJSON_AddItemToObject(o, "shape", json_ints(t->ndim, t->shape));
    cJSON *ch = cJSON_AddArrayToObject(o, "chunks");
    for (int c = 0; c < t->nchunks; c++) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "offsets", json_ints(t->ndim, t->chunks[c].offsets));
        cJSON_AddItemToObject(j, "sizes", json_ints(t->ndim, t->chunks[c].sizes));
        cJSON_AddStringToObject(j, "file", d->files[t->chunks[c].file]);
        cJSON_AddNumberToObject(j, "record_offset", (double)t->chunks[c].rec_offset);
        cJSON_AddNumberToObject(j, "record_length", (double)t->chunks[c].rec_length);
        cJSON_AddItemToArray(ch, j);
    }
    return o;
}

/* show --json: {format, checkpoint, version, step, files[{name, bytes}], tensors[], bytes_items[]}. */
static void show_json(const dcp_dir *d, int have_step, int64_t step) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "dcp");
    cJSON_AddStringToObject(o, "checkpoint", d->path);
    if (d->version) cJSON_AddStringToObject(o, "version", d->version);
    else cJSON_AddNullToObject(o, "version");
    if (have_step > 0) cJSON_AddNumberToObject(o, "step", (double)step);
    else cJSON_AddNullToObject(o, "step");
    cJSON *fa = cJSON_AddArrayToObject(o, "files");
    for (int i = 0; i < d->nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", d->files[i]);
        if (d->file_sizes[i] >= 0) cJSON_AddNumberToObject(f, "bytes", (double)d->file_sizes[i]);
        else cJSON_AddNullToObject(f, "bytes");
        cJSON_AddItemToArray(fa, f);
    }
    cJSON *ta = cJSON_AddArrayToObject(o, "tensors");
    for (int i = 0; i < d->nt; i++) cJSON_AddItemToArray(ta, json_tensor(d, &d->t[i]));
    cJSON *ba = cJSON_AddArrayToObject(o, "bytes_items");
    for (int i = 0; i < d->nb; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", d->b[i].name);
        cJSON_AddStringToObject(b, "file", d->files[d->b[i].file]);
        cJSON_AddNumberToObject(b, "offset", (double)d->b[i].offset);
        cJSON_AddNumberToObject(b, "length", (double)d->b[i].length);
        cJSON_AddItemToArray(ba, b);
    }
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* show as text: header, files, step, every tensor with its chunk boxes, the bytes items. */
static void show_text(const dcp_dir *d, int have_step, int64_t step, const char *step_err) {
    char h[64], sh[256], bx[512];
    int64_t total = 0, nch = 0;
    for (int i = 0; i < d->nt; i++) total += tensor_bytes(&d->t[i]), nch += d->t[i].nchunks;
    printf("PyTorch Distributed Checkpoint (DCP) %s\n", d->path);
    printf("  metadata version  %s\n", d->version ? d->version : "(none: torch < 2.5)");
    if (have_step > 0) printf("  train_state step  %lld\n", (long long)step);
    else printf("  train_state step  %s\n", have_step < 0 ? step_err : "(none)");
    printf("  tensors           %d, %s, %lld chunks\n", d->nt, mp_ckpt_human(h, sizeof h, total), (long long)nch);
    printf("  files             %d\n", d->nfiles);
    for (int i = 0; i < d->nfiles; i++)
        printf("    %-24s %s\n", d->files[i], d->file_sizes[i] < 0 ? "(missing)" : mp_ckpt_human(h, sizeof h, d->file_sizes[i]));
    printf("tensors:\n");
    for (int i = 0; i < d->nt; i++) {
        const dcp_tensor *t = &d->t[i];
        printf("  %s  %s %s  %d chunk%s\n", t->name, t->dtype_name, mp_ckpt_shape_str(sh, sizeof sh, t->ndim, t->shape),
               t->nchunks, t->nchunks == 1 ? "" : "s");
        for (int c = 0; c < t->nchunks; c++)
            printf("    %-28s %s @ %lld (+%lld)\n", box_str(bx, sizeof bx, t->ndim, &t->chunks[c]),
                   d->files[t->chunks[c].file], (long long)t->chunks[c].rec_offset, (long long)t->chunks[c].rec_length);
    }
    printf("bytes items (opaque to DCP): %d\n", d->nb);
    for (int i = 0; i < d->nb; i++)
        printf("  %s  %s @ %lld (+%lld)\n", d->b[i].name, d->files[d->b[i].file], (long long)d->b[i].offset,
               (long long)d->b[i].length);
}

/* `ckpt show DIR` of a DCP directory; returns the exit status. */
int mp_ckpt_dcp_show(const char *dir, int json) {
    int status = mp_exit_status(MP_OK);
    dcp_dir *d = open_or_fail(dir, &status);
    if (!d) return status;
    int64_t step = 0;
    mp_err e;
    mp_err_clear(&e);
    int hs = dcp_train_step(d, &step, &e);
    char why[MP_ERR_MSG_MAX + 32];
    snprintf(why, sizeof why, "(unreadable: %s)", e.msg);
    if (json) show_json(d, hs, step);
    else show_text(d, hs, step, why);
    dcp_close(d);
    return status;
}

/* ---------------------------------------------------------------------------------------- verify */

/* 1 if boxes a and b (ndim dims) share an element. */
static int boxes_overlap(int ndim, const dcp_chunk *a, const dcp_chunk *b) {
    for (int i = 0; i < ndim; i++)
        if (a->offsets[i] >= b->offsets[i] + b->sizes[i] || b->offsets[i] >= a->offsets[i] + a->sizes[i]) return 0;
    return dcp_numel(ndim, a->sizes) > 0 && dcp_numel(ndim, b->sizes) > 0;
}

/* Coverage of t: every chunk inside the tensor, no two overlapping, element counts adding up (then the
 * chunks cover every element exactly once). */
static void verify_coverage(const dcp_tensor *t, mp_ckpt_problems *pr) {
    char b1[512], b2[512];
    int64_t sum = 0;
    for (int c = 0; c < t->nchunks; c++) {
        const dcp_chunk *x = &t->chunks[c];
        for (int i = 0; i < t->ndim; i++)
            if (x->offsets[i] + x->sizes[i] > t->shape[i]) {
                mp_ckpt_problem(pr, "%s: chunk %d %s lies outside the tensor's shape", t->name, c,
                                box_str(b1, sizeof b1, t->ndim, x));
                break;
            }
        for (int k = 0; k < c; k++)
            if (boxes_overlap(t->ndim, x, &t->chunks[k]))
                mp_ckpt_problem(pr, "%s: chunks %d %s and %d %s overlap", t->name, k,
                                box_str(b1, sizeof b1, t->ndim, &t->chunks[k]), c, box_str(b2, sizeof b2, t->ndim, x));
        sum += dcp_numel(t->ndim, x->sizes);
    }
    if (sum != dcp_numel(t->ndim, t->shape))
        mp_ckpt_problem(pr, "%s: the chunks hold %lld elements, the tensor has %lld: not covered exactly once", t->name,
                        (long long)sum, (long long)dcp_numel(t->ndim, t->shape));
}

/* A record range inside its file? (a missing file is reported once, by verify_files). */
static int record_in_file(const dcp_dir *d, int file, int64_t off, int64_t len, const char *name, mp_ckpt_problems *pr) {
    int64_t fs = d->file_sizes[file];
    if (fs < 0) return 0;
    if (off > fs || len > fs - off) {
        mp_ckpt_problem(pr, "%s: record at byte %lld (%lld bytes) runs past the end of %s (%lld bytes): truncated?",
                        name, (long long)off, (long long)len, d->files[file], (long long)fs);
        return 0;
    }
    return 1;
}

void mp_ckpt_dcp_check(dcp_dir *d, mp_ckpt_problems *pr) {
    for (int i = 0; i < d->nfiles; i++)
        if (d->file_sizes[i] < 0) mp_ckpt_problem(pr, "%s: missing (the metadata places items in it)", d->files[i]);
    for (int i = 0; i < d->nt; i++) {
        dcp_tensor *t = &d->t[i];
        verify_coverage(t, pr);
        for (int c = 0; c < t->nchunks; c++) {
            dcp_chunk *x = &t->chunks[c];
            if (!record_in_file(d, x->file, x->rec_offset, x->rec_length, t->name, pr)) continue;
            mp_err e;
            mp_err_clear(&e);
            if (dcp_resolve(d, t, x, &e)) mp_ckpt_problem(pr, "%s: chunk %d: %s", t->name, c, e.msg);
        }
    }
    for (int i = 0; i < d->nb; i++) record_in_file(d, d->b[i].file, d->b[i].offset, d->b[i].length, d->b[i].name, pr);
}

/* Prints the verdict (text line, or one JSON object); frees pr's arrays. */
static void dcp_verdict(const dcp_dir *d, mp_ckpt_problems *pr, int64_t nch, int64_t bytes) {
    static const char *nock = "DCP stores no checksums: the tensor bytes themselves cannot be verified";
    if (!pr->list) {
        if (pr->n) printf("FAILED: %s: %d problem%s (%s)\n", d->path, pr->n, pr->n == 1 ? "" : "s", nock);
        else
            printf("ok: %d tensors in %lld chunks (%lld bytes), %d bytes items, %d files: the chunks cover every tensor "
                   "exactly once, every record's zip and pickle are well formed and lie inside their files (%s). "
                   "Note: %s.\n", d->nt, (long long)nch, (long long)bytes, d->nb, d->nfiles, d->path, nock);
        return;
    }
    mp_ckpt_note(pr, "%s", nock);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", d->path);
    cJSON_AddStringToObject(o, "format", "dcp");
    cJSON_AddBoolToObject(o, "ok", pr->n == 0);
    cJSON_AddBoolToObject(o, "checksums", 0);
    cJSON_AddItemToObject(o, "problems", pr->list);
    cJSON_AddItemToObject(o, "notes", pr->notes);
    cJSON_AddNumberToObject(o, "tensors", d->nt);
    cJSON_AddNumberToObject(o, "chunks", (double)nch);
    cJSON_AddNumberToObject(o, "tensor_bytes", (double)bytes);
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    pr->list = pr->notes = NULL;
}

/* `ckpt verify DIR` of a DCP directory; returns the exit status (1 when a problem was found). */
int mp_ckpt_dcp_verify(const char *dir, int json) {
    int status = mp_exit_status(MP_OK);
    dcp_dir *d = open_or_fail(dir, &status);
    if (!d) return status;
    mp_ckpt_problems pr = {0};
    if (json) pr.list = cJSON_CreateArray(), pr.notes = cJSON_CreateArray();
    mp_ckpt_dcp_check(d, &pr);
    int64_t nch = 0, bytes = 0;
    for (int i = 0; i < d->nt; i++) nch += d->t[i].nchunks, bytes += tensor_bytes(&d->t[i]);
    int failed = pr.n > 0;
    dcp_verdict(d, &pr, nch, bytes);
    dcp_close(d);
    return mp_exit_status(failed ? MP_ECHECK : MP_OK);
}

/* -------------------------------------------------------------------------------------------- ls */

/* 1 if root is a DCP directory or holds one directly. */
int mp_ckpt_dcp_root(const char *root) {
    if (dcp_is_dir(root)) return 1;
    DIR *dd = opendir(root);
    if (!dd) return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(dd))) {
        if (de->d_name[0] == '.') continue;
        char *p = mp_fs_join(root, de->d_name);
        found = dcp_is_dir(p);
        free(p);
    }
    closedir(dd);
    return found;
}

/* One listed DCP directory: a text line, or an object added to arr. Returns 1 if it was refused. */
static int ls_one(const char *path, const char *name, cJSON *arr) {
    dcp_dir *d = NULL;
    mp_err e;
    mp_err_clear(&e);
    if (dcp_open(&d, path, &e)) {
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "error", e.msg);
            cJSON_AddItemToArray(arr, o);
        } else printf("  %-24s refused: %s\n", name, e.msg);
        return 1;
    }
    int64_t step = 0, nch = 0, bytes = 0;
    int hs = dcp_train_step(d, &step, &e);
    for (int i = 0; i < d->nt; i++) nch += d->t[i].nchunks;
    for (int i = 0; i < d->nfiles; i++) bytes += d->file_sizes[i] > 0 ? d->file_sizes[i] : 0;
    if (arr) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        if (hs > 0) cJSON_AddNumberToObject(o, "step", (double)step);
        else cJSON_AddNullToObject(o, "step");
        cJSON_AddNumberToObject(o, "tensors", d->nt);
        cJSON_AddNumberToObject(o, "chunks", (double)nch);
        cJSON_AddNumberToObject(o, "files", d->nfiles);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        cJSON_AddItemToArray(arr, o);
    } else {
        char h[64], st[32] = "-";
        if (hs > 0) snprintf(st, sizeof st, "%lld", (long long)step);
        printf("  %-24s %-8s %6d %7lld %5d  %s\n", name, st, d->nt, (long long)nch, d->nfiles, mp_ckpt_human(h, sizeof h, bytes));
    }
    dcp_close(d);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* `ckpt ls ROOT` where ROOT is or holds DCP directories; returns the exit status (1 if one is refused). */
int mp_ckpt_dcp_ls(const char *root, int json) {
    char **names = NULL;
    int n = 0, bad = 0;
    if (!dcp_is_dir(root)) {
        DIR *dd = opendir(root);
        struct dirent *de;
        while (dd && (de = readdir(dd))) {
            char *p = mp_fs_join(root, de->d_name);
            if (de->d_name[0] != '.' && dcp_is_dir(p)) {
                names = mp_realloc(names, (size_t)n * sizeof *names, (size_t)(n + 1) * sizeof *names, MP_MEM_OTHER);
                names[n++] = mp_strdup(de->d_name);
            }
            free(p);
        }
        if (dd) closedir(dd);
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    }
    cJSON *o = json ? cJSON_CreateObject() : NULL, *arr = NULL;
    if (o) cJSON_AddStringToObject(o, "root", root), cJSON_AddStringToObject(o, "format", "dcp");
    if (o) arr = cJSON_AddArrayToObject(o, "checkpoints");
    else printf("DCP checkpoints in %s\n  %-24s %-8s %6s %7s %5s  %s\n", root, "DIRECTORY", "STEP", "TENSORS", "CHUNKS", "FILES", "SIZE");
    if (dcp_is_dir(root)) bad += ls_one(root, ".", arr);
    for (int i = 0; i < n; i++) {
        char *p = mp_fs_join(root, names[i]);
        bad += ls_one(p, names[i], arr);
        free(p), free(names[i]);
    }
    free(names);
    if (o) {
        char *s = cJSON_Print(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    }
    return mp_exit_status(bad ? MP_ECHECK : MP_OK);
}
