/*
 * ckpt/views.c — checking and repairing index.h5's /view datasets (docs/FORMAT.md, "`/view/<name>` — virtual datasets").
 *
 * The views are for other tools (h5py, h5dump): meshpoint's reader uses the layout tables, which the
 * index checksum protects, and never opens a view. So damage to a view's object header passes every
 * table and data check — yet other tools then fail on it, and some damage makes libhdf5 itself crash
 * (a double free in h5py, a segfault in h5dump) as soon as the view is opened. Hence:
 *
 *   check   runs in a child process (fork), so that a crash inside libhdf5 on a damaged view is
 *           reported as a problem ("libhdf5 crashed (signal 11) checking the view of X"), not suffered.
 *           The child opens index.h5 read-only, reads the layout through the tables (ck_index_read, the
 *           reader's validation and checksum) and compares every view with them: it exists, has the
 *           tensor's type, shape and fill value, is virtual with one mapping per box in table order, each
 *           mapping naming the box's rank file and dataset, selecting exactly the box in the view and
 *           the whole source dataset; no other datasets live under /view. With read_through it also
 *           reads the first element of every box through the view and compares it bitwise with the
 *           source dataset (a view whose source went missing reads as its fill value). The child sends
 *           one line per problem, and "at <tensor>" before each tensor, over a pipe. Test hook:
 *           MP_FAULT=ckpt_views_crash_at:<tensor> makes the child die of SIGSEGV at that tensor.
 *   repair  rebuilds the views from the validated tables: version 3 writes view.h5 afresh
 *           (ck_view_write) into view.h5.tmp.<pid>; version 2 rebuilds index.h5 (ck_index_write writes
 *           tables, metadata and views afresh; the creation time is kept) into index.h5.tmp.<pid>; either
 *           is fsynced and renamed over the old file (then the directory fsynced): atomic, and the
 *           damaged views are never opened. The data files are not touched. The same steps
 *           (ck_views_replace) write a training save's view.h5 in the background (ckpt/view_bg.c).
 *
 * Version 3 keeps the views in view.h5 beside index.h5, whose /view is an external link to view.h5:/view;
 * the check opens them through index.h5 (as h5py does), so a missing link shows as missing views. A
 * missing view.h5 is one finding, not one per tensor: the views are *pending* (ck_views_pending), the
 * state a save leaves between publishing the checkpoint and its background view write (ckpt/view_bg.c),
 * and after a kill or a full disk there; the check then reports nothing else (*pending), training heals
 * it at its next start in that root, `ckpt repair-views` at once. A view.h5 that exists is checked.
 */
#include "ckpt/ckpt_internal.h"
#include "core/fault.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define VIEW_LINE_MAX 1024

int ck_views_pending(const char *dir, int version) {
    if (version < 3) return 0;   /* version 2 keeps its views inside index.h5 */
    char *p = ck_fmt("%s/%s", dir, CK_VIEW_FILE);
    struct stat st;
    int absent = lstat(p, &st) != 0 && errno == ENOENT;   /* any entry there (even a dangling link) is checked */
    free(p);
    return absent;
}

int ckpt_views_pending(const ckpt_reader *r) { return ck_views_pending(ckpt_reader_dir(r), ckpt_reader_version(r)); }

/* ------------------------------------------------------------------------------ child: checking */

/* The child's pipe (write end) and its problem count. */
typedef struct view_out {
    FILE *pipe;
    int problems;
} view_out;

/* Sends one problem line ("P <text>"). */
static void vproblem(view_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vproblem(view_out *o, const char *fmt, ...) {
    char text[VIEW_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    for (char *c = text; *c; c++)
        if (*c == '\n') *c = ' ';
    fprintf(o->pipe, "P %s\n", text);
    fflush(o->pipe);
    o->problems++;
}

/* 1 when the link path (relative to f, '/'-separated, every component) exists, without following
 * anything that is not there: H5Lexists on each prefix. */
static int path_exists(hid_t f, const char *path) {
    char buf[CKPT_NAME_MAX + 16];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *c = buf;; c++) {
        if (*c == '/' || *c == '\0') {
            char keep = *c;
            *c = '\0';
            htri_t ex = H5Lexists(f, buf, H5P_DEFAULT);
            *c = keep;
            if (ex <= 0) return 0;
            if (!keep) return 1;
        }
    }
}

/* A string property of mapping i (H5Pget_virtual_filename / _dsetname) into buf; 0 on failure. */
static int mapping_str(ssize_t (*get)(hid_t, size_t, char *, size_t), hid_t dcpl, size_t i, char *buf, size_t cap) {
    ssize_t n = get(dcpl, i, NULL, 0);
    if (n < 0 || (size_t)n >= cap) return 0;
    return get(dcpl, i, buf, cap) >= 0;
}

/* Checks mapping i of view dcpl against box B of tensor T; reports what differs. */
static void check_mapping(view_out *o, const ck_layout *L, const ck_tensor *T, const ck_box *B, hid_t dcpl,
                          size_t i) {
    char file[256], dset[CK_DSET_MAX + 8], bs[160];
    ck_box_str(bs, sizeof bs, T->ndim, B->off, B->shp);
    if (!mapping_str(H5Pget_virtual_filename, dcpl, i, file, sizeof file) ||
        !mapping_str(H5Pget_virtual_dsetname, dcpl, i, dset, sizeof dset)) {
        vproblem(o, "view of %s: mapping %zu (box %s) has no readable source name", T->name, i, bs);
        return;
    }
    char pb[CK_DSET_MAX];
    const char *bd = ck_box_path(L, B, 0, pb);
    if (strcmp(file, L->f[B->file].name) || strcmp(dset, bd))
        vproblem(o, "view of %s: mapping %zu maps %s:%s, the table's box %s is %s:%s", T->name, i, file, dset, bs,
                 L->f[B->file].name, bd);
    hid_t vs = H5Pget_virtual_vspace(dcpl, i), ss = H5Pget_virtual_srcspace(dcpl, i);
    hsize_t start[CKPT_MAX_DIMS], end[CKPT_MAX_DIMS];
    H5S_sel_type sel = vs >= 0 ? H5Sget_select_type(vs) : H5S_SEL_ERROR;   /* a whole-tensor box reads as "all" */
    int ok = vs >= 0 && ss >= 0 && (sel == H5S_SEL_HYPERSLABS || sel == H5S_SEL_ALL) &&
             H5Sget_select_bounds(vs, start, end) >= 0;
    int64_t vol = ck_volume(T->ndim, B->shp);
    for (int d = 0; ok && d < T->ndim; d++)
        ok = start[d] == (hsize_t)B->off[d] && end[d] == (hsize_t)(B->off[d] + B->shp[d] - 1);
    if (ok) ok = H5Sget_select_npoints(vs) == (hssize_t)vol;
    /* the source side: the writer selects the whole source dataset, which HDF5 stores as an "all"
     * selection without the source's extent (that is known only once the source is opened) */
    if (ok) ok = ss >= 0 && H5Sget_select_type(ss) == H5S_SEL_ALL;
    if (!ok) vproblem(o, "view of %s: mapping %zu does not select the box %s of %s:%s", T->name, i, bs, file, dset);
    if (vs >= 0) H5Sclose(vs);
    if (ss >= 0) H5Sclose(ss);
}

/* Reads the first element of every box of T through view d and straight from its source dataset;
 * reports a box whose two differ (a source the view cannot reach reads as the fill value). */
static void check_read_through(view_out *o, const ck_layout *L, const char *dir, const ck_tensor *T, hid_t d,
                               hid_t ft) {
    hsize_t one[CKPT_MAX_DIMS], at[CKPT_MAX_DIMS], zero[CKPT_MAX_DIMS] = {0};
    for (int d2 = 0; d2 < T->ndim; d2++) one[d2] = 1;
    hid_t mem = H5Screate_simple(T->ndim, one, NULL), vsp = H5Dget_space(d);
    for (int64_t j = T->box_first; j < T->box_first + T->nboxes && mem >= 0 && vsp >= 0; j++) {
        const ck_box *B = &L->b[j];
        char pb[CK_DSET_MAX];
        const char *bd = ck_box_path(L, B, 0, pb);
        for (int d2 = 0; d2 < T->ndim; d2++) at[d2] = (hsize_t)B->off[d2];
        unsigned char via[8] = {0}, direct[8] = {0};
        herr_t hr = H5Sselect_hyperslab(vsp, H5S_SELECT_SET, at, NULL, one, NULL);
        if (hr >= 0) hr = H5Dread(d, ft, mem, vsp, H5P_DEFAULT, via);
        char *rf = ck_fmt("%s/%s", dir, L->f[B->file].name);
        hid_t fapl = ck_h5_fapl(0);
        hid_t src = fapl < 0 ? -1 : H5Fopen(rf, H5F_ACC_RDONLY, fapl);
        hid_t sd = src < 0 ? -1 : H5Dopen2(src, bd, H5P_DEFAULT);
        hid_t ssp = sd < 0 ? -1 : H5Dget_space(sd);
        herr_t sr = ssp < 0 ? -1 : H5Sselect_hyperslab(ssp, H5S_SELECT_SET, zero, NULL, one, NULL);
        if (sr >= 0) sr = H5Dread(sd, ft, mem, ssp, H5P_DEFAULT, direct);
        if (ssp >= 0) H5Sclose(ssp);
        if (sd >= 0) H5Dclose(sd);
        if (src >= 0) H5Fclose(src);
        if (fapl >= 0) H5Pclose(fapl);
        free(rf);
        ck_h5_clear();
        if (hr < 0) vproblem(o, "view of %s: reading box %s:%s through the view fails", T->name, L->f[B->file].name, bd);
        else if (sr >= 0 && memcmp(via, direct, sizeof via))
            vproblem(o, "view of %s: the view does not read box %s:%s's data (a fill value instead?)", T->name,
                     L->f[B->file].name, bd);
    }
    if (mem >= 0) H5Sclose(mem);
    if (vsp >= 0) H5Sclose(vsp);
}

/* Checks the view of tensor T (its type, shape, mappings; the read-through when asked). */
static void check_view(view_out *o, const ck_layout *L, const char *dir, hid_t f, const ck_tensor *T,
                       int read_through) {
    char *vp = ck_fmt("view/%s", T->name);
    if (!path_exists(f, vp)) {
        vproblem(o, "view of %s: /%s is missing", T->name, vp);
        free(vp);
        return;
    }
    hid_t d = H5Dopen2(f, vp, H5P_DEFAULT);
    free(vp);
    hid_t ft = ck_h5_type(T->dtype);
    hid_t dt = d < 0 ? -1 : H5Dget_type(d), sp = d < 0 ? -1 : H5Dget_space(d);
    hid_t dcpl = d < 0 ? -1 : H5Dget_create_plist(d);
    if (d < 0 || dt < 0 || sp < 0 || dcpl < 0) {
        vproblem(o, "view of %s: the dataset cannot be opened", T->name);
        goto out;
    }
    if (H5Tequal(dt, ft) <= 0) vproblem(o, "view of %s: its type is not the tensor's %s", T->name, mp_dtype_name(T->dtype));
    hsize_t dims[CKPT_MAX_DIMS];
    int nd = H5Sget_simple_extent_ndims(sp), same = nd == T->ndim && H5Sget_simple_extent_dims(sp, dims, NULL) == nd;
    for (int k = 0; same && k < nd; k++) same = dims[k] == (hsize_t)T->shape[k];
    if (!same) vproblem(o, "view of %s: its shape is not the tensor's", T->name);
    if (H5Pget_layout(dcpl) != H5D_VIRTUAL) {
        vproblem(o, "view of %s: not a virtual dataset", T->name);
        goto out;
    }
    size_t count = 0;
    if (H5Pget_virtual_count(dcpl, &count) < 0 || count != (size_t)T->nboxes) {
        vproblem(o, "view of %s: %zu mappings for %lld boxes in the table", T->name, count, (long long)T->nboxes);
        goto out;
    }
    for (size_t i = 0; i < count; i++) check_mapping(o, L, T, &L->b[T->box_first + (int64_t)i], dcpl, i);
    if (read_through && same) check_read_through(o, L, dir, T, d, ft);
out:
    ck_h5_clear();
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (dt >= 0) H5Tclose(dt);
    if (ft >= 0) H5Tclose(ft);
    if (d >= 0) H5Dclose(d);
}

/* H5Ovisit callback: counts the datasets under /view. The visit asks for every field of each object's
 * info (H5O_INFO_ALL, as h5py's visititems does), so damage to any object header under /view shows. */
static herr_t count_datasets(hid_t o, const char *name, const H5O_info_t *info, void *data) {
    (void)o;
    (void)name;
    if (info->type == H5O_TYPE_DATASET) ++*(int64_t *)data;
    return 0;
}

/* The child: checks every view of dir's index.h5 and writes its lines to fd. Never returns. */
static void child_check(const char *dir, int read_through, int fd) {
    view_out o = {fdopen(fd, "w"), 0};
    if (!o.pipe) _exit(3);
    /* a crash dies of its signal, even where a sanitizer runtime installed handlers of its own */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGFPE, SIG_DFL);
    signal(SIGILL, SIG_DFL);
    alarm(3600);   /* a damaged file that sends libhdf5 into a loop must not hang verify */
    ck_h5_init();
    char *path = ck_fmt("%s/index.h5", dir);
    ck_layout L;
    mp_err e;
    char crash_buf[256];   /* fault ckpt_views_crash_at: a libhdf5 crash, simulated */
    const char *crash_at = mp_fault_arg("ckpt_views_crash_at", crash_buf, sizeof crash_buf);
    if (crash_at && !strcmp(crash_at, "index.h5")) raise(SIGSEGV);
    if (ck_index_read(path, &L, &e) != MP_OK) {
        fprintf(o.pipe, "E %s\n", e.msg);
        fclose(o.pipe);
        _exit(2);
    }
    if (ck_views_pending(dir, L.version)) {   /* one finding: "V" (nothing to check through the link) */
        fprintf(o.pipe, "V\n");
        fclose(o.pipe);
        _exit(0);
    }
    hid_t fapl = ck_h5_fapl(0);
    hid_t f = fapl < 0 ? -1 : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        fprintf(o.pipe, "E %s: cannot open\n", path);
        fclose(o.pipe);
        _exit(2);
    }
    for (int t = 0; t < L.ntensors; t++) {
        fprintf(o.pipe, "T %s\n", L.t[t].name);
        fflush(o.pipe);
        if (crash_at && !strcmp(crash_at, L.t[t].name)) raise(SIGSEGV);
        check_view(&o, &L, dir, f, &L.t[t], read_through);
    }
    int64_t n = 0;
    fprintf(o.pipe, "T (the /view group)\n");
    fflush(o.pipe);
    if (path_exists(f, "view") && H5Ovisit_by_name2(f, "view", H5_INDEX_NAME, H5_ITER_NATIVE, count_datasets, &n,
                                                    H5O_INFO_ALL, H5P_DEFAULT) < 0)
        vproblem(&o, "/view: its groups cannot be listed");
    else if (n != L.ntensors)
        vproblem(&o, "/view holds %lld datasets for %d tensors in the table", (long long)n, L.ntensors);
    H5Fclose(f);
    ck_layout_free(&L);
    free(path);
    fclose(o.pipe);
    _exit(0);
}

/* ------------------------------------------------------------------------------ parent: checking */

mp_code ckpt_views_check(const char *dir, int read_through, ckpt_view_report_fn report, void *ctx, int *nproblems,
                         int *pending, mp_err *e) {
    assert(dir && report && nproblems && pending);
    *nproblems = 0;
    *pending = 0;
    ck_h5_init();
    /* the child inherits this process's HDF5 state: a file open here would be shared with the views'
     * own opens of the rank files in the child (and a file open for writing could be flushed twice) */
    if (H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_FILE) > 0)
        return mp_err_set(e, MP_EINTERNAL, "checking the views of %s: this process has HDF5 files open; check the "
                          "views before opening the checkpoint", dir);
    int fds[2];
    if (pipe(fds)) return mp_err_set(e, MP_EIO, "checking the views of %s: pipe: %s", dir, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return mp_err_set(e, MP_EIO, "checking the views of %s: fork: %s", dir, strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        child_check(dir, read_through, fds[1]);
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    char line[VIEW_LINE_MAX + 8], at[CKPT_NAME_MAX + 32] = "(opening index.h5)", fatal[VIEW_LINE_MAX] = "";
    while (in && fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == 'T' && line[1] == ' ') snprintf(at, sizeof at, "%.*s", (int)sizeof at - 1, line + 2);
        else if (line[0] == 'P' && line[1] == ' ') { report(ctx, line + 2); ++*nproblems; }
        else if (line[0] == 'V' && line[1] == '\0') *pending = 1;
        else if (line[0] == 'E' && line[1] == ' ') snprintf(fatal, sizeof fatal, "%.*s", (int)sizeof fatal - 1, line + 2);
    }
    if (in) fclose(in);
    else close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    int died = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2);
    if (died) {
        /* a signal, or a runtime that turned the crash into an exit status (a sanitizer's) */
        char msg[VIEW_LINE_MAX], how[48];
        if (WIFSIGNALED(status)) snprintf(how, sizeof how, "signal %d", WTERMSIG(status));
        else snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
        if (!strcmp(at, "(opening index.h5)")) {
            /* the index itself: a damage HDF5's checksums do not cover (dense groups of checkpoints
             * written before compact storage); opening it in the caller's process would crash it too */
            snprintf(msg, sizeof msg, "%s/index.h5: libhdf5 crashed (%s) reading the index: the file is damaged "
                     "(restore it from a copy, or use another checkpoint)", dir, how);
            report(ctx, msg);
            ++*nproblems;
            return mp_err_set(e, MP_ECHECK, "%s", msg);
        }
        snprintf(msg, sizeof msg, "%s/index.h5: libhdf5 crashed (%s) checking the view of %s: the view is "
                 "damaged (ckpt repair-views rebuilds the views from the tables)", dir, how, at);
        report(ctx, msg);
        ++*nproblems;
        return MP_OK;
    }
    if (fatal[0]) return mp_err_set(e, MP_ECHECK, "%s", fatal);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return mp_err_set(e, MP_EINTERNAL, "checking the views of %s: the checking process failed (status %d)", dir,
                          status);
    return MP_OK;
}

/* ------------------------------------------------------------------------------------- repairing */

/* Locks checkpoint directory dir against the other writers of its views (flock on the directory: the
 * save's background write, the heal, `ckpt repair-views` from another process), waiting for one in
 * progress. Returns the descriptor to pass to unlock_dir, or -1 where the file system has no flock (then
 * the writers are not serialised, as before; every published file is still complete). */
static int lock_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        close(fd);   /* ENOLCK, EOPNOTSUPP: no locks here */
        return -1;
    }
    return fd;
}

static void unlock_dir(int fd) {
    if (fd >= 0) close(fd);   /* closing the last descriptor releases the flock */
}

mp_code ck_views_replace(const ck_layout *L, const char *dir, const char *name,
                         mp_code (*write)(const ck_layout *, const char *, mp_err *), const char *crash_point,
                         int if_absent, int *wrote, mp_err *e) {
    char *path = ck_fmt("%s/%s", dir, name), *tmp = mp_fs_tmp_name(path);
    mp_code rc = MP_OK;
    int lk = lock_dir(dir);
    if (wrote) *wrote = 0;
    if (if_absent && mp_fs_exists(path)) goto done;   /* another writer published it while we waited */
    rc = mp_fs_remove_tmp_leftovers(dir, name, NULL, e);   /* of interrupted writes: the lock is ours */
    if (!rc) rc = write(L, tmp, e);
    if (!rc && crash_point) ck_crash_point(crash_point, 0);
    if (!rc) rc = mp_fs_rename_durable(tmp, path, dir, e);
    if (rc) unlink(tmp);
    else if (wrote) *wrote = 1;
done:
    unlock_dir(lk);
    free(path);
    free(tmp);
    return rc;
}

mp_code ckpt_views_repair(const char *dir, mp_err *e) {
    ck_h5_init();
    char *path = ck_fmt("%s/index.h5", dir);
    ck_layout L;
    mp_code rc = ck_index_read(path, &L, e);
    free(path);
    if (rc) {
        mp_err_wrap(e, "repairing the views of %s: the tables themselves are unreadable", dir);
        return rc;
    }
    if (L.version < 2)
        rc = mp_err_set(e, MP_EINPUT, "repairing the views of %s: a version %d checkpoint is read-only (reshard it to "
                        "write version %d)", dir, L.version, CKPT_FORMAT_VERSION);
    else if (L.version >= 3)   /* the views live in view.h5: rebuild that file; index.h5 only links to it */
        rc = ck_views_replace(&L, dir, CK_VIEW_FILE, ck_view_write, NULL, 0, NULL, e);
    else
        rc = ck_views_replace(&L, dir, "index.h5", ck_index_write, NULL, 0, NULL, e);
    ck_layout_free(&L);
    return rc;
}
