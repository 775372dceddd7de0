/* core/fsutil.c — see fsutil.h. */
#define _GNU_SOURCE
#include "core/fsutil.h"
#include "core/fault.h"
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/log.h"

mp_code mp_read_text(const char *path, size_t max, char **text, size_t *len, mp_err *err) {
    *text = NULL;
    if (len) *len = 0;
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
    if (fd < 0) return mp_err_set(err, MP_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return mp_err_set(err, MP_EINPUT, "%s: is a directory, not a file", path);
    }
    size_t n = 0, cap = 4096;
    char *buf = mp_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;   /* one byte past max tells "too large" */
            buf = mp_realloc(buf, cap + 1, ncap + 1, MP_MEM_OTHER);
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return mp_err_set(err, MP_EINPUT, "%s: read error: %s", path,
                              e == EISDIR ? "is a directory" : strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max) {
            close(fd);
            free(buf);
            return mp_err_set(err, MP_EINPUT, "%s: larger than %zu bytes", path, max);
        }
    }
    close(fd);
    buf[n] = '\0';
    *text = buf;
    if (len) *len = n;
    return MP_OK;
}

/* ---------------------------------------------------------------------------------- names and stat */

int mp_fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int mp_fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* a + sep + b in a new string. */
static char *concat(const char *a, const char *sep, const char *b) {
    size_t na = strlen(a), ns = strlen(sep), nb = strlen(b);
    char *p = mp_xmalloc(na + ns + nb + 1);
    memcpy(p, a, na);
    memcpy(p + na, sep, ns);
    memcpy(p + na + ns, b, nb + 1);
    return p;
}

char *mp_fs_join(const char *a, const char *b) { return concat(a, "/", b); }

/* The directory holding path, in a new string: "." for a bare name, "/" for a name in the root.
 * Trailing slashes of path are ignored ("a/b/" is held by "a"). */
static char *parent_of(const char *path) {
    char *p = mp_strdup(path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash) strcpy(p, ".");
    else if (slash == p) p[1] = '\0';
    else *slash = '\0';
    return p;
}

int mp_fs_parse_step_name(const char *name, const char *suffix, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    if (strcmp(p, suffix ? suffix : "") != 0) return 0;
    if (step) *step = v;
    return 1;
}

mp_code mp_fs_each_step_dir(const char *root, const char *const *suffixes, mp_fs_step_fn fn, void *ctx,
                            mp_err *err) {
    assert(root && suffixes && fn);
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? MP_OK : mp_err_set(err, MP_EIO, "listing %s: %s", root, strerror(errno));
    int stop = 0;
    for (struct dirent *de; !stop && (de = readdir(d));) {
        int64_t step;
        int k = 0;
        while (suffixes[k] && !mp_fs_parse_step_name(de->d_name, suffixes[k], &step)) k++;
        if (!suffixes[k]) continue;
        char *p = mp_fs_join(root, de->d_name);
        int isd = mp_fs_is_dir(p);
        free(p);
        if (isd) stop = fn(ctx, de->d_name, step, k);
    }
    closedir(d);
    return MP_OK;
}

/* ------------------------------------------------------------------------------- durable writes */

mp_code mp_fs_fsync_path(const char *path, int is_dir, mp_err *err) {
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0) | O_CLOEXEC);
    if (fd < 0) return mp_err_set(err, MP_EIO, "fsync %s: open: %s", path, strerror(errno));
    if (fsync(fd) != 0) {
        int er = errno;
        close(fd);
        return mp_err_set(err, MP_EIO, "fsync %s: %s", path, strerror(er));
    }
    if (close(fd) != 0) return mp_err_set(err, MP_EIO, "close %s: %s", path, strerror(errno));
    return MP_OK;
}

mp_code mp_fs_fsync_parent(const char *path, mp_err *err) {
    char *p = parent_of(path);
    mp_code rc = mp_fs_fsync_path(p, 1, err);
    free(p);
    return rc;
}

mp_code mp_fs_close_durable(FILE *f, const char *path, mp_err *err) {
    assert(f && path);
    const char *what = "writing";
    int bad = fflush(f) != 0;
    if (!bad && fsync(fileno(f)) != 0) { bad = 1; what = "fsync"; }
    int er = errno;
    if (fclose(f) != 0 && !bad) { bad = 1; what = "closing"; er = errno; }
    return bad ? mp_err_set(err, MP_EIO, "%s %s: %s", what, path, strerror(er)) : MP_OK;
}

mp_code mp_fs_rename_durable(const char *from, const char *to, const char *parent, mp_err *err) {
    assert(from && to);
    if (rename(from, to) != 0) return mp_err_set(err, MP_EIO, "rename %s -> %s: %s", from, to, strerror(errno));
    return parent ? mp_fs_fsync_path(parent, 1, err) : mp_fs_fsync_parent(to, err);
}

char *mp_fs_tmp_name(const char *path) {
    char pid[32];
    snprintf(pid, sizeof pid, ".tmp.%ld", (long)getpid());
    return concat(path, pid, "");
}

int mp_fs_is_tmp_name(const char *name) {
    const char *t = strrchr(name, '.'), *p;
    if (!t || t - name < 4 || strncmp(t - 4, ".tmp.", 5) != 0) return 0;   /* the last '.' opens the pid */
    for (p = t + 1; *p >= '0' && *p <= '9'; p++) {}
    return p > t + 1 && *p == '\0';
}

/* scandir filter: the convention's temp names. */
static int tmp_entry(const struct dirent *de) { return mp_fs_is_tmp_name(de->d_name); }

int mp_fs_tmp_leftovers(const char *dir, char *out, size_t cap) {
    assert(cap > 0);
    out[0] = '\0';
    struct dirent **v = NULL;
    int n = scandir(dir, &v, tmp_entry, alphasort);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (at < cap) at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? ", " : "", v[i]->d_name);
        free(v[i]);
    }
    free(v);
    return n < 0 ? 0 : n;
}

mp_code mp_fs_remove_tmp_leftovers(const char *dir, const char *name, int *removed, mp_err *err) {
    if (removed) *removed = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? MP_OK : mp_err_set(err, MP_EIO, "listing %s: %s", dir, strerror(errno));
    size_t n = strlen(name);
    mp_code rc = MP_OK;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        const char *x = de->d_name;
        /* name.tmp.<digits> exactly */
        if (strncmp(x, name, n) != 0 || strncmp(x + n, ".tmp.", 5) != 0 || !mp_fs_is_tmp_name(x + n)) continue;
        if (unlinkat(dirfd(d), x, 0) != 0 && errno != ENOENT)
            rc = mp_err_set(err, MP_EIO, "removing %s/%s: %s", dir, x, strerror(errno));
        else if (removed) (*removed)++;
    }
    closedir(d);
    return rc;
}

mp_code mp_fs_write_all(int fd, const void *buf, size_t n, const char *path, mp_err *err) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return mp_err_set(err, MP_EIO, "writing %s: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return MP_OK;
}

mp_code mp_fs_close_fd_durable(int fd, const char *path, mp_err *err) {
    assert(fd >= 0 && path);
    mp_code rc = MP_OK;
    if (fsync(fd) != 0) rc = mp_err_set(err, MP_EIO, "fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && !rc) rc = mp_err_set(err, MP_EIO, "closing %s: %s", path, strerror(errno));
    return rc;
}

mp_code mp_fs_out_open(mp_fs_out *o, const char *path, mp_err *err) {
    assert(o && path);
    o->tmp = mp_fs_tmp_name(path);
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        mp_code rc = mp_err_set(err, MP_EIO, "writing %s: cannot create %s: %s", path, o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        o->path = NULL;
        return rc;
    }
    o->path = mp_strdup(path);
    return MP_OK;
}

mp_code mp_fs_out_write(mp_fs_out *o, const void *buf, size_t n, mp_err *err) {
    assert(o->fd >= 0);
    return mp_fs_write_all(o->fd, buf, n, o->tmp, err);
}

/* Frees o's names and marks it released. */
static void out_release(mp_fs_out *o) {
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    o->fd = -1;
}

mp_code mp_fs_out_commit(mp_fs_out *o, mp_err *err) {
    assert(o->fd >= 0);
    mp_code rc = mp_fs_close_fd_durable(o->fd, o->tmp, err);
    if (!rc) rc = mp_fs_rename_durable(o->tmp, o->path, NULL, err);
    if (rc) unlink(o->tmp);
    out_release(o);
    return rc;
}

void mp_fs_out_abandon(mp_fs_out *o) {
    if (!o->tmp) return;
    if (o->fd >= 0) close(o->fd);
    unlink(o->tmp);
    out_release(o);
}

mp_code mp_fs_write_durable(const char *dir, const char *name, const void *data, size_t n, mp_err *err) {
    assert(dir && name && (data || n == 0));
    char *fin = mp_fs_join(dir, name);
    mp_fs_out o;
    mp_code rc = mp_fs_out_open(&o, fin, err);
    if (!rc && (rc = mp_fs_out_write(&o, data, n, err))) mp_fs_out_abandon(&o);
    else if (!rc) rc = mp_fs_out_commit(&o, err);
    free(fin);
    return rc;
}

mp_code mp_fs_write_text_durable(const char *dir, const char *name, const char *text, mp_err *err) {
    assert(text);
    return mp_fs_write_durable(dir, name, text, strlen(text), err);
}

mp_code mp_fs_mkdirs(const char *path, mp_err *err) {
    char *p = mp_strdup(path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = NULL;   /* the separator before the component being created */
    mp_code rc = MP_OK;
    for (char *q = p + 1; rc == MP_OK; q++) {
        if (*q != '/' && *q != '\0') continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0777) == 0) {
            /* new: make its name durable in the parent */
            if (!slash) rc = mp_fs_fsync_path(p[0] == '/' ? "/" : ".", 1, err);
            else if (slash == p) rc = mp_fs_fsync_path("/", 1, err);
            else { *slash = '\0'; rc = mp_fs_fsync_path(p, 1, err); *slash = '/'; }
        } else if (errno != EEXIST) {
            rc = mp_err_set(err, MP_EIO, "creating directory %s: %s", p, strerror(errno));
        }
        *q = c;
        if (c == '\0') break;
        slash = q;
    }
    if (rc == MP_OK && !mp_fs_is_dir(p)) rc = mp_err_set(err, MP_EIO, "%s exists and is not a directory", p);
    free(p);
    return rc;
}

/* ------------------------------------------------------------------------------------ directory swap */

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* renameat2(AT_FDCWD, from, AT_FDCWD, to, flags) through the system call (older glibc lacks the
 * wrapper). Returns 0 or -1 with errno. */
static int rename2(const char *from, const char *to, unsigned flags) {
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, flags);
#else
    (void)from; (void)to; (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

/* The fallback of mp_fs_swap_dirs without RENAME_EXCHANGE: the old tree aside to to.replaced, then the
 * new one in; the old one moved back if that fails. *aside gets to.replaced (the caller frees it). */
static mp_code swap_by_renames(const char *from, const char *to, char **aside, mp_err *err) {
    *aside = concat(to, ".replaced", "");
    if (mp_fs_exists(*aside)) {
        mp_warn("removing stale %s of an interrupted replacement", *aside);
        MP_TRY(mp_fs_remove_tree(*aside, err));
    }
    if (rename(to, *aside) != 0) return mp_err_set(err, MP_EIO, "rename %s -> %s: %s", to, *aside, strerror(errno));
    if (rename(from, to) != 0) {
        mp_code rc = mp_err_set(err, MP_EIO, "rename %s -> %s: %s", from, to, strerror(errno));
        if (rename(*aside, to) != 0)
            mp_err_wrap(err, "the old %s is left at %s (moving it back failed: %s)", to, *aside, strerror(errno));
        return rc;
    }
    return MP_OK;
}

mp_code mp_fs_swap_dirs(const char *from, const char *to, const char *parent, char **old_at, mp_err *err) {
    assert(from && to && old_at);
    *old_at = NULL;
    int er = ENOSYS;
    char *old = NULL;
    if (!mp_fault_on("no_rename_exchange")) {
        if (rename2(from, to, RENAME_EXCHANGE) == 0) old = mp_strdup(from);
        else er = errno;
    }
    mp_code rc = MP_OK;
    if (!old && er != EINVAL && er != ENOSYS)
        return mp_err_set(err, MP_EIO, "exchanging %s and %s: %s", from, to, strerror(er));
    if (!old) rc = swap_by_renames(from, to, &old, err);
    if (rc == MP_OK) rc = parent ? mp_fs_fsync_path(parent, 1, err) : mp_fs_fsync_parent(to, err);
    if (rc == MP_OK) *old_at = old;
    else free(old);
    return rc;
}

/* ------------------------------------------------------------------------ removal, links never followed */

/* Deepest directory nesting removed (a checkpoint has one level; this bounds the recursion). */
#define RM_MAX_DEPTH 64

static mp_code rm_entry_at(int parent, const char *ppath, const char *name, int depth, mp_err *err);

/* Removes every entry of the directory open at dfd (dfd itself stays), never following a symbolic link.
 * path names dfd in messages. Closes nothing: the caller owns dfd. */
static mp_code rm_contents_at(int dfd, const char *path, int depth, mp_err *err) {
    assert(dfd >= 0 && path);
    int lfd = dup(dfd);   /* fdopendir takes over the descriptor it is given */
    DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
    if (!d) {
        if (lfd >= 0) close(lfd);
        return mp_err_set(err, MP_EIO, "removing %s: listing it: %s", path, strerror(errno));
    }
    mp_code rc = MP_OK;
    struct dirent *de;
    while (rc == MP_OK && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        rc = rm_entry_at(dfd, path, de->d_name, depth, err);
    }
    closedir(d);
    return rc;
}

/* Removes entry `name` of the directory open at parent (ppath: its path, for messages; parent may be
 * AT_FDCWD with ppath NULL, name then a whole path): a directory with everything under it, anything else
 * (a file, a symbolic link, ...) as a name — a link's target is never looked at. A missing entry is no
 * error (it is gone either way). */
static mp_code rm_entry_at(int parent, const char *ppath, const char *name, int depth, mp_err *err) {
    assert(name && name[0] && (ppath ? parent >= 0 && !strchr(name, '/') : parent == AT_FDCWD));
    char *path = ppath ? mp_fs_join(ppath, name) : mp_strdup(name);
    mp_code rc = MP_OK;
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) rc = mp_err_set(err, MP_EIO, "removing %s: %s", path, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parent, name, 0) != 0 && errno != ENOENT)
            rc = mp_err_set(err, MP_EIO, "removing %s: %s", path, strerror(errno));
    } else if (depth >= RM_MAX_DEPTH) {
        rc = mp_err_set(err, MP_EIO, "removing %s: nested more than %d directories deep", path, RM_MAX_DEPTH);
    } else {
        /* O_NOFOLLOW: if the directory was replaced by a link since fstatat, this fails instead of following */
        int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0) rc = mp_err_set(err, MP_EIO, "removing %s: %s", path, strerror(errno));
        else {
            rc = rm_contents_at(dfd, path, depth + 1, err);
            close(dfd);
        }
        if (rc == MP_OK && unlinkat(parent, name, AT_REMOVEDIR) != 0)
            rc = mp_err_set(err, MP_EIO, "removing directory %s: %s", path, strerror(errno));
    }
    free(path);
    return rc;
}

mp_code mp_fs_remove_tree(const char *path, mp_err *err) {
    assert(path && path[0]);
    char *p = mp_strdup(path);   /* "a/b/" would follow a link b: its trailing slashes go */
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--) p[n - 1] = '\0';
    mp_code rc = rm_entry_at(AT_FDCWD, NULL, p, 0, err);
    free(p);
    return rc;
}

mp_code mp_fs_remove_at(int dirfd, const char *dirpath, const char *name, mp_err *err) {
    return rm_entry_at(dirfd, dirpath, name, 0, err);
}

mp_code mp_fs_remove_contents_at(int dirfd, const char *dirpath, mp_err *err) {
    return rm_contents_at(dirfd, dirpath, 0, err);
}
