/*
 * core/fsutil.h — the one file-system layer every layer uses: reading a small text input whole, durable
 * writes and renames, swapping a directory for another, mkdir -p, recursive removal that never follows a
 * symbolic link, and the step_<digits> names of checkpoint directories.
 *
 * Durability: a new or renamed name survives a power cut only once the directory holding it is fsynced,
 * so every function here that creates or renames a name fsyncs that directory before it returns MP_OK.
 * Errors are MP_EIO (MP_EINPUT for mp_read_text's inputs) and name the path and errno's text.
 *
 * Small text inputs (a config, a checkpoint root's `latest`, an HF directory's JSON files) are read as
 * streams, never sized with fseek/ftell or stat first: a pipe (`--config <(...)`, /dev/stdin) has no
 * size, and a directory given where a file belongs "opens" on Linux and must be named for what it is.
 *
 * Tests only: MP_FAULT=no_rename_exchange makes mp_fs_swap_dirs take its fallback path as if the
 * file system did not support RENAME_EXCHANGE.
 */
#ifndef MP_FSUTIL_H
#define MP_FSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"

/* Reads all of path (a file, a pipe, a character device) into a new NUL-terminated string *text (free()
 * it) of *len bytes (len may be NULL), refusing more than max bytes. Errors, MP_EINPUT with the path:
 * "cannot open: <why>", "is a directory", "larger than <max> bytes", "read error: <why>"; on error *text
 * is NULL. The text may hold NUL bytes (len counts them); callers parsing it as a C string stop there. */
mp_code mp_read_text(const char *path, size_t max, char **text, size_t *len, mp_err *err);

/* 1 if path exists (a link counts as its target: stat, not lstat), else 0. */
int mp_fs_exists(const char *path);
/* 1 if path is a directory or a link to one, else 0. */
int mp_fs_is_dir(const char *path);
/* "a/b" in a new string (mp_xmalloc; free() it). */
char *mp_fs_join(const char *a, const char *b);

/* fsync of path: a directory when is_dir (its entries become durable), else a file (its data). */
mp_code mp_fs_fsync_path(const char *path, int is_dir, mp_err *err);
/* fsync of the directory holding path ("." for a bare name): makes path's name durable. */
mp_code mp_fs_fsync_parent(const char *path, mp_err *err);
/* fflush, fsync and fclose of f, a stream writing path (named in the message): on MP_OK the data is on
 * disk. f is closed in any case. */
mp_code mp_fs_close_durable(FILE *f, const char *path, mp_err *err);
/* rename(from, to), then fsync of parent, the directory holding `to` (NULL: derived from `to`, "." for a
 * bare name), so the new name survives a power cut. */
mp_code mp_fs_rename_durable(const char *from, const char *to, const char *parent, mp_err *err);
/* Replaces directory `to` by directory `from` atomically: renameat2(RENAME_EXCHANGE) where the file
 * system has it, else (EINVAL/ENOSYS) rename(to, to.replaced) then rename(from, to) (moving the old one
 * back if the second fails; a stale to.replaced is removed first); then fsync of parent (NULL: derived
 * from `to`). On MP_OK *old_at is a new string naming where the old tree now is (the caller removes
 * it); NULL on error. At every instant `to` names a complete tree, the old or the new. */
mp_code mp_fs_swap_dirs(const char *from, const char *to, const char *parent, char **old_at, mp_err *err);
/* mkdir -p that is durable: every directory it creates has its parent fsynced right after the mkdir;
 * existing components are left alone. MP_EIO if path exists and is not a directory. */
mp_code mp_fs_mkdirs(const char *path, mp_err *err);
/* The one temp-file convention (docs/RELIABILITY.md, "Temporary names"): a file is written whole under
 * "<final>.tmp.<pid>" beside its final name, fsynced, then renamed over the final name and its directory
 * fsynced, so a reader sees the old file or the new one, never a part. The pid keeps two processes
 * writing the same name out of each other's file. Directories built in place are "<final>.partial"
 * (a checkpoint step, an export), and mp_fs_swap_dirs's fallback sets the old tree aside as
 * "<final>.replaced". The writer removes its own temp file on any failure; a crash leaves it, and no
 * reader ever opens one. */

/* "<path>.tmp.<pid>" in a new string (free() it): the temp name of path for this process. */
char *mp_fs_tmp_name(const char *path);
/* 1 if entry name ends as a temp file of the convention does: ".tmp.<digits>". */
int mp_fs_is_tmp_name(const char *name);
/* The temp files of the convention (mp_fs_is_tmp_name) directly in dir, which crashed writers left (or
 * live ones are writing): their names, sorted and joined by ", ", into out[cap] (truncated to fit);
 * returns how many. 0 when dir cannot be listed. What `ckpt ls` and `ckpt verify` report as leftovers. */
int mp_fs_tmp_leftovers(const char *dir, char *out, size_t cap);
/* Removes the leftover temp files of dir/name (entries "name.tmp.<digits>" of any pid) that crashed
 * writers left. Only for a caller that holds a lock proving no other writer of dir/name is alive (the
 * views' flock on their directory). *removed (may be NULL) gets how many. MP_EIO naming the entry. */
mp_code mp_fs_remove_tmp_leftovers(const char *dir, const char *name, int *removed, mp_err *err);
/* write(2) of exactly n bytes of buf to fd (retried on EINTR and short writes); MP_EIO naming path. */
mp_code mp_fs_write_all(int fd, const void *buf, size_t n, const char *path, mp_err *err);
/* fsync and close of fd, a file written as path (named in the message): on MP_OK its data is on disk.
 * fd is closed in any case. */
mp_code mp_fs_close_fd_durable(int fd, const char *path, mp_err *err);

/* A file being written under the temp-file convention: out_open creates mp_fs_tmp_name(path), the
 * caller writes through out_write (or fd directly), out_commit makes it path durably, out_abandon
 * removes it. */
typedef struct mp_fs_out {
    int fd;      /* the temp file, open for writing; -1 once committed or abandoned */
    char *path;  /* the final name */
    char *tmp;   /* the temp name being written */
} mp_fs_out;
/* Creates (truncating) path's temp file. MP_EIO naming path on failure (*o then holds nothing to free). */
mp_code mp_fs_out_open(mp_fs_out *o, const char *path, mp_err *err);
/* mp_fs_write_all of buf to o's temp file. */
mp_code mp_fs_out_write(mp_fs_out *o, const void *buf, size_t n, mp_err *err);
/* fsync and close of the temp file, rename over the final name, fsync of its directory. On failure the
 * temp file is removed; o is released either way. */
mp_code mp_fs_out_commit(mp_fs_out *o, mp_err *err);
/* Closes and removes the temp file (a failed write); releases o. No-op on a released o. */
void mp_fs_out_abandon(mp_fs_out *o);

/* Writes data[0..n) to dir/name durably, under the temp-file convention above (mp_fs_out). A reader
 * sees the old content or the new, never a mix; on error the temp file is removed. */
mp_code mp_fs_write_durable(const char *dir, const char *name, const void *data, size_t n, mp_err *err);
/* mp_fs_write_durable of the string text (without its NUL). */
mp_code mp_fs_write_text_durable(const char *dir, const char *name, const char *text, mp_err *err);

/* Removes path and, when it is a directory, everything under it, never following a symbolic link: a
 * link (path itself or anything under it) is removed as a name, its target is never looked at, and a
 * directory replaced by a link meanwhile is refused (O_NOFOLLOW), so nothing outside path is reached.
 * A missing path is no error. Refuses trees nested more than 64 directories deep. */
mp_code mp_fs_remove_tree(const char *path, mp_err *err);
/* mp_fs_remove_tree of entry `name` (one component, no '/') of the directory open at dirfd; dirpath
 * names that directory in messages. */
mp_code mp_fs_remove_at(int dirfd, const char *dirpath, const char *name, mp_err *err);
/* Removes everything inside the directory open at dirfd (it stays, and stays open: the caller owns
 * dirfd), never following a link. dirpath names it in messages. */
mp_code mp_fs_remove_contents_at(int dirfd, const char *dirpath, mp_err *err);

/* 1 if name is exactly "step_" + one or more decimal digits + suffix (NULL: ""), with the digits' value
 * fitting int64; then *step (step may be NULL) gets that value. Else 0 and *step is untouched. */
int mp_fs_parse_step_name(const char *name, const char *suffix, int64_t *step);
/* Called by mp_fs_each_step_dir for one step directory: its entry name, the step its name says, and k,
 * the index of the suffix it carries. A nonzero return stops the scan. */
typedef int (*mp_fs_step_fn)(void *ctx, const char *name, int64_t step, int k);
/* The one scanner of a checkpoint root's step directories (every command that lists steps goes through
 * it): calls fn for each entry of root whose name mp_fs_parse_step_name accepts with one of suffixes (a
 * NULL-terminated list, e.g. {"", ".partial", NULL}) and that is a directory or a link to one, in
 * readdir order. Anything else (step_12abc, step_, step_-1, a file step_00000001) is skipped. A root
 * that does not exist holds no steps (MP_OK); another failure to list it is MP_EIO naming root. */
mp_code mp_fs_each_step_dir(const char *root, const char *const *suffixes, mp_fs_step_fn fn, void *ctx,
                            mp_err *err);

#endif
