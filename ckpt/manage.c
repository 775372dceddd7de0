/*
 * ckpt/manage.c — the checkpoints of a root directory: which are complete, the newest, leftovers of
 * interrupted saves, retention.
 *
 * Complete = ROOT/step_<digits> (no suffix) with an index.h5 that reads and validates (format,
 * version, checksum, tables) and whose rank files all exist. `latest` is a hint that saves a scan of
 * old checkpoints: it is trusted when it names a complete checkpoint and no step directory with a
 * higher number exists; otherwise (missing, stale after a crash between rename and `latest`, corrupt,
 * or naming a damaged checkpoint) the step directories are tried newest first.
 * Also here: the job lock of a root (ROOT/.lock, flock) and setting aside the checkpoints of an
 * abandoned branch (ROOT/<aside>/): moved, never deleted.
 * These functions are local: call them on one rank.
 *
 * Removal never follows a symbolic link: retention and leftover cleanup work on directory
 * file descriptors (core/fsutil.h's mp_fs_remove_at and mp_fs_remove_contents_at: openat with O_NOFOLLOW,
 * fstatat with AT_SYMLINK_NOFOLLOW, unlinkat), so nothing outside the root is reached, whatever links
 * the root holds and however they change meanwhile. A step directory that is a symbolic link is
 * removed as a link — the name leaves the root, its target (a checkpoint elsewhere, maybe outside the
 * root) is left untouched — with a warning naming the target.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

mp_code ckpt_check_complete(const char *dir, mp_err *e) {
    if (!mp_fs_is_dir(dir)) return mp_err_set(e, MP_ECHECK, "%s is not a directory", dir);
    char *ip = ck_fmt("%s/index.h5", dir);
    ck_layout L;
    mp_code rc = ck_index_read(ip, &L, e);
    free(ip);
    if (rc != MP_OK) return rc;
    for (int i = 0; i < L.nfiles && rc == MP_OK; i++) {
        char *p = ck_fmt("%s/%s", dir, L.f[i].name);
        if (!mp_fs_exists(p)) rc = mp_err_set(e, MP_ECHECK, "%s: rank file %s is missing", dir, L.f[i].name);
        free(p);
    }
    ck_layout_free(&L);
    return rc;
}

static int cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The growing list of steps scan_steps collects. */
typedef struct step_list {
    int64_t *v;
    int n, cap;
} step_list;

/* mp_fs_step_fn of scan_steps: appends the step; never stops the scan. */
static int add_step(void *ctx, const char *name, int64_t step, int k) {
    (void)name, (void)k;
    step_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap * 2 + 16;
        l->v = mp_realloc(l->v, 0, sizeof(int64_t) * (size_t)l->cap, MP_MEM_OTHER);
    }
    l->v[l->n++] = step;
    return 0;
}

/* Steps of ROOT/step_<digits><suffix> entries that are directories (mp_fs_each_step_dir), newest first. */
static mp_code scan_steps(const char *root, const char *suffix, int64_t **out, int *n, mp_err *e) {
    const char *const sfx[] = {suffix, NULL};
    step_list l = {0};
    mp_code rc = mp_fs_each_step_dir(root, sfx, add_step, &l, e);
    if (l.n > 1) qsort(l.v, (size_t)l.n, sizeof(int64_t), cmp_i64_desc);
    *out = l.v;
    *n = l.n;
    return rc;
}

/* The directory name a step's checkpoint has (matching the writer's step_%08lld). */
static char *step_dir(const char *root, int64_t step, const char *suffix) {
    return ck_fmt("%s/step_%08lld%s", root, (long long)step, suffix);
}

void ckpt_latest_name(const char *root, char *buf, size_t cap) {
    assert(cap > 0);
    buf[0] = '\0';
    char *p = ck_fmt("%s/latest", root), *text;
    size_t n;
    mp_code rc = mp_read_text(p, cap - 1, &text, &n, NULL);
    free(p);
    if (rc) return;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = '\0';
    snprintf(buf, cap, "%s", text);
    free(text);
}

/* The step `latest` names, or -1 if it is missing or malformed. */
static int64_t read_latest(const char *root) {
    char name[128];
    ckpt_latest_name(root, name, sizeof name);
    int64_t step;
    return mp_fs_parse_step_name(name, "", &step) ? step : -1;
}

mp_code ckpt_find_latest(const char *root, char *dir_out, size_t cap, int64_t *step_out, mp_err *e) {
    int64_t *steps;
    int n;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    int64_t hint = read_latest(root);
    mp_code rc = MP_EINPUT;
    int64_t found = -1;
    int first = 0;
    if (hint >= 0 && n > 0 && steps[0] == hint) {
        char *p = step_dir(root, hint, "");
        mp_err ce;
        if (ckpt_check_complete(p, &ce) == MP_OK) found = hint;
        else mp_warn("ckpt: %s/latest names %s, which is not a complete checkpoint: %s", root, p, ce.msg);
        free(p);
        first = 1;
    } else if (n > 0) {
        if (hint < 0) mp_warn("ckpt: %s/latest is missing or unreadable; scanning the step directories", root);
        else mp_warn("ckpt: %s/latest (step %lld) is stale; scanning the step directories", root, (long long)hint);
    }
    for (int i = first; i < n && found < 0; i++) {
        char *p = step_dir(root, steps[i], "");
        mp_err ce;
        if (ckpt_check_complete(p, &ce) == MP_OK) found = steps[i];
        else mp_warn("ckpt: skipping %s: %s", p, ce.msg);
        free(p);
    }
    free(steps);
    if (found < 0) return mp_err_set(e, MP_EINPUT, "no complete checkpoint in %s", root);
    char *p = step_dir(root, found, "");
    if (strlen(p) + 1 > cap) rc = mp_err_set(e, MP_EINPUT, "checkpoint path %s too long", p);
    else {
        memcpy(dir_out, p, strlen(p) + 1);
        if (step_out) *step_out = found;
        rc = MP_OK;
    }
    free(p);
    return rc;
}

mp_code ck_scan_step_dirs(const char *root, int64_t **steps, int *n, mp_err *e) {
    return scan_steps(root, "", steps, n, e);
}

mp_code ckpt_list(const char *root, int64_t **steps_out, int *n_out, mp_err *e) {
    int64_t *steps;
    int n;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    int k = 0;
    for (int i = 0; i < n; i++) {
        char *p = step_dir(root, steps[i], "");
        if (ckpt_check_complete(p, NULL) == MP_OK) steps[k++] = steps[i];
        free(p);
    }
    /* ascending */
    for (int i = 0; i < k / 2; i++) {
        int64_t t = steps[i];
        steps[i] = steps[k - 1 - i];
        steps[k - 1 - i] = t;
    }
    *steps_out = steps;
    *n_out = k;
    return MP_OK;
}

/* ---------------------------------------------------------------------- removal, links never followed */

/* The root directory opened for removals under it (O_DIRECTORY; the root itself may be a link, as the
 * user named it). MP_EIO naming it on failure. */
static mp_code open_root(const char *root, int *fd, mp_err *e) {
    *fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0) return mp_err_set(e, MP_EIO, "opening %s: %s", root, strerror(errno));
    return MP_OK;
}

/* Retention's removal of checkpoint directory `name` in the root open at rootfd: index.h5 first, then
 * the directory fsynced (so a crash mid-removal never leaves a loadable half), then the rest. A name that
 * is a symbolic link is removed as a link only (its target is not ours: it may lie outside the root),
 * with a warning naming the target. Sets *was_link. */
static mp_code retire_step(int rootfd, const char *root, const char *name, int *was_link, mp_err *e) {
    assert(rootfd >= 0 && root && name);
    *was_link = 0;
    struct stat st;
    if (fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? MP_OK : mp_err_set(e, MP_EIO, "retention: %s/%s: %s", root, name, strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        char target[1024];
        ssize_t n = readlinkat(rootfd, name, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        *was_link = 1;
        mp_warn("ckpt: retention: %s/%s is a symbolic link (to %s): removing the link only, its target is left "
                "untouched", root, name, n > 0 ? target : "?");
        if (unlinkat(rootfd, name, 0) != 0 && errno != ENOENT)
            return mp_err_set(e, MP_EIO, "retention: removing the link %s/%s: %s", root, name, strerror(errno));
        return MP_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return mp_err_set(e, MP_EIO, "retention: %s/%s is neither a directory nor a link", root, name);
    int dfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return mp_err_set(e, MP_EIO, "retention: opening %s/%s: %s", root, name, strerror(errno));
    char *path = ck_fmt("%s/%s", root, name);
    mp_code rc = mp_fs_remove_at(dfd, path, "index.h5", e);
    if (rc == MP_OK && fsync(dfd) != 0) rc = mp_err_set(e, MP_EIO, "fsync %s: %s", path, strerror(errno));
    if (rc == MP_OK) rc = mp_fs_remove_contents_at(dfd, path, e);
    close(dfd);
    if (rc == MP_OK && unlinkat(rootfd, name, AT_REMOVEDIR) != 0)
        rc = mp_err_set(e, MP_EIO, "retention: removing directory %s: %s", path, strerror(errno));
    free(path);
    return rc;
}

mp_code ckpt_cleanup_partials(const char *root, int *removed, mp_err *e) {
    int64_t *steps;
    int n;
    if (removed) *removed = 0;
    MP_TRY(scan_steps(root, ".partial", &steps, &n, e));
    int rootfd = -1;
    mp_code rc = n > 0 ? open_root(root, &rootfd, e) : MP_OK;
    for (int i = 0; i < n && rc == MP_OK; i++) {
        char *p = step_dir(root, steps[i], ".partial");
        char *name = ck_fmt("step_%08lld.partial", (long long)steps[i]);
        mp_warn("ckpt: removing %s, left by an interrupted save", p);
        rc = mp_fs_remove_at(rootfd, root, name, e);   /* a link is removed as a link */
        if (rc == MP_OK && removed) (*removed)++;
        free(name);
        free(p);
    }
    if (rootfd >= 0) close(rootfd);
    free(steps);
    if (rc == MP_OK && n > 0) rc = mp_fs_fsync_path(root, 1, e);
    return rc;
}

/* Whether checkpoint directory `name` under rootfd has no index.h5 entry at all (a link counts as
 * present): what an interrupted retention leaves, since retire_step removes the index first. A damaged
 * index is present: such a directory is evidence for the user, not a leftover. */
static int index_absent(int rootfd, const char *name) {
    char *p = ck_fmt("%s/index.h5", name);
    struct stat st;
    int absent = fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    free(p);
    return absent;
}

/* ckpt_retain and ckpt_finish_retention: the newest `keep` complete checkpoints are kept; every older
 * step directory but the one `latest` names is retired, or with leftovers_only only those without an
 * index.h5 (a removal a crash interrupted). */
static mp_code retain(const char *root, int keep, int leftovers_only, int *removed, mp_err *e) {
    ck_view_bg_wait();   /* never remove a step whose view.h5 is being written (ckpt/view_bg.c) */
    if (removed) *removed = 0;
    if (keep < 1) return mp_err_set(e, MP_EINPUT, "retention: keep %d must be >= 1", keep);
    int64_t *steps;
    int n;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    int kept = 0, i = 0;
    for (; i < n && kept < keep; i++) {
        char *p = step_dir(root, steps[i], "");
        if (ckpt_check_complete(p, NULL) == MP_OK) kept++;
        free(p);
    }
    mp_code rc = MP_OK;
    int64_t named = read_latest(root);
    if (kept == keep && i < n) {
        /* everything older than the oldest kept checkpoint goes, index first; never the one `latest`
         * names, whatever its place in step order; links are removed as links (retire_step) */
        int rootfd = -1;
        rc = open_root(root, &rootfd, e);
        for (; i < n && rc == MP_OK; i++) {
            if (steps[i] == named) continue;
            char *name = ck_fmt("step_%08lld", (long long)steps[i]);
            int was_link = 0;
            if (!leftovers_only || index_absent(rootfd, name)) {
                rc = retire_step(rootfd, root, name, &was_link, e);
                if (rc == MP_OK) {
                    if (leftovers_only) mp_warn("ckpt: removing %s/%s, left by an interrupted retention", root, name);
                    else mp_debug("ckpt: retention removed %s/%s%s", root, name, was_link ? " (a link)" : "");
                    if (removed) (*removed)++;
                }
            }
            free(name);
        }
        if (rootfd >= 0) close(rootfd);
        if (rc == MP_OK) rc = mp_fs_fsync_path(root, 1, e);
    }
    free(steps);
    return rc;
}

mp_code ckpt_retain(const char *root, int keep, int *removed, mp_err *e) { return retain(root, keep, 0, removed, e); }

mp_code ckpt_finish_retention(const char *root, int keep, int *removed, mp_err *e) {
    return retain(root, keep, 1, removed, e);
}

mp_code ckpt_inspect_root(const char *root, ckpt_root_info *info, mp_err *e) {
    memset(info, 0, sizeof *info);
    int64_t *steps, *partials;
    int n, np;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    mp_code rc = scan_steps(root, ".partial", &partials, &np, e);
    if (rc == MP_OK) {
        info->nsteps = n;
        info->first = n ? steps[n - 1] : -1;
        info->last = n ? steps[0] : -1;
        info->npartial = np;
        char *lp = ck_fmt("%s/latest", root);
        info->has_latest = mp_fs_exists(lp);
        free(lp);
    }
    free(steps);
    free(partials);
    return rc;
}

/* ------------------------------------------------------------------------------------ job lock */

struct ckpt_lock {
    int fd;
    char *path;
};

/* The holder's line from a lock file held by another process, into buf ("" if none recorded). */
static void read_holder(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

mp_code ckpt_lock_acquire(const char *root, ckpt_lock **out, mp_err *e) {
    *out = NULL;
    MP_TRY(mp_fs_mkdirs(root, e));
    char *path = ck_fmt("%s/.lock", root);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        mp_code rc = mp_err_set(e, MP_EIO, "cannot create the lock file %s: %s", path, strerror(errno));
        free(path);
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int er = errno;
        char who[512];
        mp_code rc;
        if (er == EWOULDBLOCK) {
            read_holder(fd, who, sizeof who);
            rc = mp_err_set(e, MP_EINPUT, "checkpoint directory %s is in use by another job (%s; lock %s)", root,
                            who[0] ? who : "it has not recorded its pid yet", path);
        } else {
            rc = mp_err_set(e, MP_EIO, "cannot lock %s: %s (the file system must support flock)", path, strerror(er));
        }
        close(fd);
        free(path);
        return rc;
    }
    ckpt_lock *l = mp_xmalloc(sizeof *l);
    l->fd = fd;
    l->path = path;
    *out = l;
    return MP_OK;
}

mp_code ckpt_lock_publish(ckpt_lock *l, mp_err *e) {
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
    int n = snprintf(line, sizeof line, "pid %ld on host %s, started %s\n", (long)getpid(), host, when);
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, line, (size_t)n, 0) != n)
        return mp_err_set(e, MP_EIO, "writing the lock file %s: %s", l->path, strerror(errno));
    return MP_OK;
}

void ckpt_lock_release(ckpt_lock *l) {
    if (!l) return;
    close(l->fd);   /* drops the flock; the file stays (removing it would race with a new holder) */
    free(l->path);
    free(l);
}

/* --------------------------------------------------------------------------------- setting aside */

/* Writes `latest` (durably) naming the newest complete checkpoint under root; with none, leaves it
 * absent. */
static mp_code repoint_latest(const char *root, mp_err *e) {
    int64_t *steps;
    int n;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    mp_code rc = MP_OK;
    for (int i = 0; i < n; i++) {
        char *p = step_dir(root, steps[i], "");
        int ok = ckpt_check_complete(p, NULL) == MP_OK;
        free(p);
        if (!ok) continue;
        char *txt = ck_fmt("step_%08lld\n", (long long)steps[i]);
        rc = mp_fs_write_text_durable(root, "latest", txt, e);
        free(txt);
        break;
    }
    free(steps);
    return rc;
}

mp_code ckpt_set_aside(const char *root, int64_t after, const char *aside, int *moved, mp_err *e) {
    ck_view_bg_wait();   /* never move a step whose view.h5 is being written (ckpt/view_bg.c) */
    if (moved) *moved = 0;
    int64_t *steps;
    int n, k = 0;
    MP_TRY(scan_steps(root, "", &steps, &n, e));
    while (k < n && steps[k] > after) k++;   /* steps[0..k) are newer than after (newest first) */
    if (k == 0) { free(steps); return MP_OK; }
    char *dst = ck_fmt("%s/%s", root, aside);
    mp_code rc = MP_OK;
    if (mkdir(dst, 0777) != 0) rc = mp_err_set(e, MP_EIO, "creating %s: %s", dst, strerror(errno));
    if (rc == MP_OK) rc = mp_fs_fsync_path(root, 1, e);
    /* `latest` goes with them (it names one of them, or is stale), newest checkpoints first */
    char *lp = ck_fmt("%s/latest", root), *lq = ck_fmt("%s/latest", dst);
    if (rc == MP_OK && mp_fs_exists(lp) && rename(lp, lq) != 0)
        rc = mp_err_set(e, MP_EIO, "moving %s to %s: %s", lp, lq, strerror(errno));
    for (int i = 0; i < k && rc == MP_OK; i++) {
        char *from = step_dir(root, steps[i], ""), *to = step_dir(dst, steps[i], "");
        if (rename(from, to) != 0) rc = mp_err_set(e, MP_EIO, "moving %s to %s: %s", from, to, strerror(errno));
        else if (moved) (*moved)++;
        free(from);
        free(to);
    }
    if (rc == MP_OK) rc = mp_fs_fsync_path(dst, 1, e);
    if (rc == MP_OK) rc = mp_fs_fsync_path(root, 1, e);
    if (rc == MP_OK) rc = repoint_latest(root, e);
    free(lp);
    free(lq);
    free(dst);
    free(steps);
    return rc;
}
