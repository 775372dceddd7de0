/*
 * ckpt/fsutil.c — file-system steps of the commit protocol: fsync of files and directories, durable
 * rename (rename, then fsync of the parent so the new name survives a power cut), durable small text
 * files (write NAME.tmp, fsync, rename over NAME, fsync the directory), atomic replacement of a
 * directory (renameat2 RENAME_EXCHANGE, with a two-rename fallback), durable mkdir -p (each new
 * directory's parent fsynced), recursive removal, and the crash points of MP_CKPT_CRASH_AT. Every failure names the path and errno's text.
 *
 * Tests only: env MP_CKPT_NO_RENAME_EXCHANGE=1 makes ck_swap_dirs take its fallback path as if the
 * file system did not support RENAME_EXCHANGE.
 */
#define _GNU_SOURCE
#include "core/alloc.h"
#include "ckpt/ckpt_internal.h"
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <linux/fs.h>
#include "core/log.h"
#include <unistd.h>

double ck_now(void) { return mp_time_s(); }

char *ck_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0 || !s) mp_oom(0, MP_MEM_OTHER, "a formatted string");
    return s;
}

mp_code ck_fsync_path(const char *path, int is_dir, mp_err *e) {
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0) | O_CLOEXEC);
    if (fd < 0) return mp_err_set(e, MP_EIO, "fsync %s: open: %s", path, strerror(errno));
    if (fsync(fd) != 0) {
        int er = errno;
        close(fd);
        return mp_err_set(e, MP_EIO, "fsync %s: %s", path, strerror(er));
    }
    if (close(fd) != 0) return mp_err_set(e, MP_EIO, "close %s: %s", path, strerror(errno));
    return MP_OK;
}

mp_code ck_rename_durable(const char *from, const char *to, const char *parent, mp_err *e) {
    if (rename(from, to) != 0) return mp_err_set(e, MP_EIO, "rename %s -> %s: %s", from, to, strerror(errno));
    return ck_fsync_path(parent, 1, e);
}

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

mp_code ck_swap_dirs(const char *from, const char *to, const char *parent, char **old_at, mp_err *e) {
    assert(from && to && parent && old_at);
    *old_at = NULL;
    const char *force = getenv("MP_CKPT_NO_RENAME_EXCHANGE");
    int er = ENOSYS;
    if (!(force && *force && strcmp(force, "0") != 0)) {
        if (rename2(from, to, RENAME_EXCHANGE) == 0) {
            *old_at = ck_fmt("%s", from);
            return ck_fsync_path(parent, 1, e);
        }
        er = errno;
    }
    if (er != EINVAL && er != ENOSYS)
        return mp_err_set(e, MP_EIO, "exchanging %s and %s: %s", from, to, strerror(er));
    /* no RENAME_EXCHANGE here: move the old tree aside, then the new one in */
    char *aside = ck_fmt("%s.replaced", to);
    if (ck_exists(aside)) {
        mp_warn("ckpt: removing stale %s of an interrupted replacement", aside);
        mp_code rc = ck_rmtree(aside, e);
        if (rc != MP_OK) { free(aside); return rc; }
    }
    if (rename(to, aside) != 0) {
        mp_code rc = mp_err_set(e, MP_EIO, "rename %s -> %s: %s", to, aside, strerror(errno));
        free(aside);
        return rc;
    }
    if (rename(from, to) != 0) {
        int er2 = errno;
        mp_code rc = mp_err_set(e, MP_EIO, "rename %s -> %s: %s", from, to, strerror(er2));
        if (rename(aside, to) != 0)
            mp_err_wrap(e, "the old %s is left at %s (moving it back failed: %s)", to, aside, strerror(errno));
        free(aside);
        return rc;
    }
    *old_at = aside;
    return ck_fsync_path(parent, 1, e);
}

/* mkdir -p that is durable: every directory it creates has its parent fsynced right after the
 * mkdir, so a new checkpoint root (and a new run directory above it) survives a power cut before
 * anything inside it is committed. Existing components are left alone. */
mp_code ck_mkdirs(const char *path, mp_err *e) {
    char *p = ck_fmt("%s", path);
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
            if (!slash) rc = ck_fsync_path(p[0] == '/' ? "/" : ".", 1, e);
            else if (slash == p) rc = ck_fsync_path("/", 1, e);
            else { *slash = '\0'; rc = ck_fsync_path(p, 1, e); *slash = '/'; }
        } else if (errno != EEXIST) {
            rc = mp_err_set(e, MP_EIO, "creating directory %s: %s", p, strerror(errno));
        }
        *q = c;
        if (c == '\0') break;
        slash = q;
    }
    if (rc == MP_OK && !ck_is_dir(p)) rc = mp_err_set(e, MP_EIO, "%s exists and is not a directory", p);
    free(p);
    return rc;
}

mp_code ck_rmtree(const char *path, mp_err *e) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return MP_OK;
        return mp_err_set(e, MP_EIO, "removing %s: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return mp_err_set(e, MP_EIO, "removing %s: opendir: %s", path, strerror(errno));
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char *sub = ck_fmt("%s/%s", path, de->d_name);
            mp_code rc = ck_rmtree(sub, e);
            free(sub);
            if (rc != MP_OK) { closedir(d); return rc; }
        }
        closedir(d);
        if (rmdir(path) != 0) return mp_err_set(e, MP_EIO, "removing directory %s: %s", path, strerror(errno));
        return MP_OK;
    }
    if (unlink(path) != 0) return mp_err_set(e, MP_EIO, "removing %s: %s", path, strerror(errno));
    return MP_OK;
}

int ck_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int ck_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

mp_code ck_write_text_durable(const char *dir, const char *name, const char *text, mp_err *e) {
    char *tmp = ck_fmt("%s/%s.tmp", dir, name), *fin = ck_fmt("%s/%s", dir, name);
    mp_code rc = MP_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) { rc = mp_err_set(e, MP_EIO, "writing %s: %s", tmp, strerror(errno)); goto done; }
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f) != n || fflush(f) != 0) {
        rc = mp_err_set(e, MP_EIO, "writing %s: %s", tmp, strerror(errno));
        fclose(f);
        goto done;
    }
    if (fsync(fileno(f)) != 0) {
        rc = mp_err_set(e, MP_EIO, "fsync %s: %s", tmp, strerror(errno));
        fclose(f);
        goto done;
    }
    if (fclose(f) != 0) { rc = mp_err_set(e, MP_EIO, "closing %s: %s", tmp, strerror(errno)); goto done; }
    rc = ck_rename_durable(tmp, fin, dir, e);
done:
    if (rc != MP_OK) unlink(tmp);
    free(tmp);
    free(fin);
    return rc;
}

void ck_crash_point(const char *point, int rank) {
    const char *at = getenv("MP_CKPT_CRASH_AT");
    if (!at || strcmp(at, point) != 0) return;
    const char *r = getenv("MP_CKPT_CRASH_RANK");
    if (r && *r && atoi(r) != rank) return;
    fprintf(stderr, "ckpt: MP_CKPT_CRASH_AT=%s: killing rank %d\n", point, rank);
    fflush(NULL);
    raise(SIGKILL);
}

int ck_parse_step_name(const char *name, const char *suffix, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (strcmp(p, suffix ? suffix : "") != 0) return 0;
    if (step) *step = v;
    return 1;
}

mp_code ckpt_mkdirs(const char *path, mp_err *e) { return ck_mkdirs(path, e); }
