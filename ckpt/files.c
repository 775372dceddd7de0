/*
 * ckpt/files.c — files a checkpoint carries beside its tensors (ckpt.h, "carried files"; docs/FORMAT.md).
 *
 * Design: a carried file is a plain file DIR/files/<name>, byte for byte what the caller gave, so any
 * tool (and `meshpoint sample`, through the tokenizer's directory loader) reads it as it is; the list of
 * them, each with its size and XXH3-64, is the metadata entry "files", which the index checksum covers.
 * Rank 0 writes each file into DIR.partial/files/ durably when it is added, before the commit writes
 * index.h5, so the atomic rename publishes files and index together and a crash leaves only a .partial.
 * Nothing here touches index.h5's tables: readers that predate carried files ignore the directory and
 * see "files" as one more metadata entry.
 *
 * Only the names of ckpt_file_names are carried, CKPT_FILES_MAX_BYTES in all: one rule, checked when
 * saving and when parsing a list (parse_list, strict: a list this code did not write is refused, not
 * guessed at). A listed file is read without following a link or blocking on a FIFO, must be a regular
 * file of exactly its listed size, and is read to exactly that size.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"

const char *const ckpt_file_names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "added_tokens.json", "chat_template.jinja", "tokenizer.model",
                                       "generation_config.json", NULL};
_Static_assert(sizeof ckpt_file_names / sizeof *ckpt_file_names == CKPT_FILES_MAX + 1, "CKPT_FILES_MAX");

mp_code ckpt_file_name_check(const char *name, mp_err *e) {
    for (int i = 0; name && ckpt_file_names[i]; i++)
        if (!strcmp(name, ckpt_file_names[i])) return MP_OK;
    return mp_err_set(e, MP_EINPUT, "\"%.80s\" is not a file a checkpoint carries (tokenizer.json, tokenizer_config.json, "
                      "special_tokens_map.json, added_tokens.json, chat_template.jinja, tokenizer.model, "
                      "generation_config.json)", name ? name : "(null)");
}

/* Parses list text txt (of checkpoint dir, for messages) strictly (ckpt.h, ckpt_files_list) into *out
 * (malloc'd, *n entries). */
static mp_code parse_list(const char *txt, const char *dir, ckpt_file_entry **out, int *n, mp_err *e) {
    *out = NULL;
    *n = 0;
    cJSON *j = cJSON_Parse(txt);
    ckpt_file_entry *v = mp_xcalloc(sizeof *v * (CKPT_FILES_MAX + 1));
    char why[200] = "";
    mp_code rc = cJSON_IsObject(j) ? MP_OK : (snprintf(why, sizeof why, "not a JSON object"), MP_ECHECK);
    int k = 0;
    int64_t total = 0;
    for (const cJSON *it = rc ? NULL : j->child; it && !rc; it = it->next, k++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(it, "bytes"), *h = cJSON_GetObjectItemCaseSensitive(it, "xxh3");
        mp_err ne;
        if (ckpt_file_name_check(it->string, &ne)) {
            snprintf(why, sizeof why, "%.150s", ne.msg);
            rc = MP_EINPUT;
            break;
        }
        for (int i = 0; i < k; i++)
            if (!strcmp(v[i].name, it->string)) rc = MP_ECHECK;
        if (rc) { snprintf(why, sizeof why, "%s is listed twice", it->string); break; }
        double d = cJSON_IsNumber(b) ? b->valuedouble : -1;
        if (!(d >= 0 && d <= (double)CKPT_FILES_MAX_BYTES && d == (double)(int64_t)d)) {
            snprintf(why, sizeof why, "%s: \"bytes\" is not an integer in [0, %" PRId64 "]", it->string, CKPT_FILES_MAX_BYTES);
            rc = MP_ECHECK;
            break;
        }
        int hex = cJSON_IsString(h) && strlen(h->valuestring) == 16;
        for (int i = 0; hex && i < 16; i++) hex = strchr("0123456789abcdef", h->valuestring[i]) != NULL;
        if (!hex) {
            snprintf(why, sizeof why, "%s: \"xxh3\" is not 16 lowercase hex digits", it->string);
            rc = MP_ECHECK;
            break;
        }
        snprintf(v[k].name, sizeof v[k].name, "%s", it->string);
        v[k].bytes = (int64_t)d;
        v[k].xxh3 = strtoull(h->valuestring, NULL, 16);
        total += v[k].bytes;
    }
    if (!rc && total > CKPT_FILES_MAX_BYTES) {
        snprintf(why, sizeof why, "%" PRId64 " bytes in all, more than %" PRId64, total, CKPT_FILES_MAX_BYTES);
        rc = MP_ECHECK;
    }
    cJSON_Delete(j);
    if (rc) {
        free(v);
        return mp_err_set(e, rc, "checkpoint %s: metadata \"%s\" (its carried files): %s", dir, CKPT_FILES_META, why);
    }
    *out = v;
    *n = k;
    return MP_OK;
}

/* The listing with name's entry set to n bytes and hash h (text for ckpt_save_meta; free it); MP_EINPUT
 * when the files would pass CKPT_FILES_MAX_BYTES together. */
static mp_code list_with(const char *old, const char *name, size_t n, uint64_t h, char **txt, mp_err *e) {
    ckpt_file_entry *v = NULL;
    int cnt = 0;
    if (old) MP_TRY(parse_list(old, "(being saved)", &v, &cnt, e));
    int64_t total = (int64_t)n;
    for (int i = 0; i < cnt; i++) total += strcmp(v[i].name, name) ? v[i].bytes : 0;
    free(v);
    if (total > CKPT_FILES_MAX_BYTES)
        return mp_err_set(e, MP_EINPUT, "carried file %s: the carried files would be %" PRId64 " bytes, more than %" PRId64,
                          name, total, CKPT_FILES_MAX_BYTES);
    cJSON *j = old ? cJSON_Parse(old) : cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(j, name);
    cJSON *it = cJSON_AddObjectToObject(j, name);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    cJSON_AddNumberToObject(it, "bytes", (double)n);
    cJSON_AddStringToObject(it, "xxh3", hex);
    *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return MP_OK;
}

mp_code ckpt_save_file(ckpt_save *s, const char *name, const void *data, size_t n, mp_err *e) {
    mp_err le;
    mp_code rc = ckpt_file_name_check(name, &le);
    if (rc == MP_OK && n > (size_t)CKPT_FILES_MAX_BYTES)
        rc = mp_err_set(&le, MP_EINPUT, "carried file %s: %zu bytes, more than %" PRId64, name, n, CKPT_FILES_MAX_BYTES);
    char *txt = NULL;
    if (rc == MP_OK && ck_save_rank(s) == 0)
        rc = list_with(ck_save_meta_get(s, CKPT_FILES_META), name, n, XXH3_64bits(data, n), &txt, &le);
    if (rc == MP_OK && txt) {
        char *dir = mp_fs_join(ck_save_partial(s), CKPT_FILES_DIR);
        rc = mp_fs_mkdirs(dir, &le);
        if (rc == MP_OK) rc = mp_fs_write_durable(dir, name, data, n, &le);
        free(dir);
        if (rc == MP_OK) rc = ckpt_save_meta(s, CKPT_FILES_META, txt, &le);
    }
    free(txt);
    if (rc != MP_OK) {
        ckpt_save_fail(s, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

mp_code ckpt_files_list(const ckpt_reader *r, ckpt_file_entry **out, int *n, mp_err *e) {
    *out = NULL;
    *n = 0;
    const char *txt = ckpt_meta_get(r, CKPT_FILES_META);
    return txt ? parse_list(txt, ckpt_reader_dir(r), out, n, e) : MP_OK;
}

/* Reads exactly f->bytes of the open regular file fd into *data (NUL-terminated). */
static mp_code read_exact(int fd, const char *path, const ckpt_file_entry *f, char **data, mp_err *e) {
    struct stat st;
    if (fstat(fd, &st)) return mp_err_set(e, MP_ECHECK, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return mp_err_set(e, MP_ECHECK, "%s is not a regular file", path);
    if ((int64_t)st.st_size != f->bytes)
        return mp_err_set(e, MP_ECHECK, "%s is %lld bytes, listed as %" PRId64 " (its size does not match)", path,
                          (long long)st.st_size, f->bytes);
    char *buf = mp_xmalloc((size_t)f->bytes + 1);
    size_t got = 0;
    while (got < (size_t)f->bytes) {
        ssize_t k = read(fd, buf + got, (size_t)f->bytes - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(buf);
            return mp_err_set(e, MP_ECHECK, "%s: %s", path, k < 0 ? strerror(errno) : "shorter than its size");
        }
        got += (size_t)k;
    }
    buf[got] = '\0';
    if (XXH3_64bits(buf, got) != f->xxh3) {
        free(buf);
        return mp_err_set(e, MP_ECHECK, "%s does not match its listed checksum", path);
    }
    *data = buf;
    return MP_OK;
}

/* Reads and checks the file of entry f (ckpt_file_read). */
static mp_code read_entry(const ckpt_reader *r, const ckpt_file_entry *f, char **data, mp_err *e) {
    *data = NULL;
    char *dir = mp_fs_join(ckpt_reader_dir(r), CKPT_FILES_DIR), *path = mp_fs_join(dir, f->name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int err = errno;
    mp_code rc;
    if (fd >= 0) rc = read_exact(fd, path, f, data, e);
    else if (err == ENOENT || err == ENOTDIR)
        rc = mp_err_set(e, MP_ECHECK, "%s is missing (copy the checkpoint's %s/ along with its index.h5 and rank files)",
                        path, CKPT_FILES_DIR);
    else rc = mp_err_set(e, MP_ECHECK, "%s: %s", path, err == ELOOP ? "is a symbolic link" : strerror(err));
    if (fd >= 0) close(fd);
    if (rc) mp_err_wrap(e, "checkpoint %s: carried file %s", ckpt_reader_dir(r), f->name);
    free(path);
    free(dir);
    return rc;
}

mp_code ckpt_file_read(const ckpt_reader *r, const char *name, char **data, size_t *n, mp_err *e) {
    *data = NULL;
    ckpt_file_entry *v;
    int cnt;
    MP_TRY(ckpt_files_list(r, &v, &cnt, e));
    mp_code rc = mp_err_set(e, MP_EINPUT, "checkpoint %s carries no file %s", ckpt_reader_dir(r), name);
    for (int i = 0; i < cnt; i++)
        if (!strcmp(v[i].name, name)) {
            mp_err_clear(e);
            rc = read_entry(r, &v[i], data, e);
            if (n) *n = rc ? 0 : (size_t)v[i].bytes;
        }
    free(v);
    return rc;
}

/* One problem of ckpt_files_verify: reported, counted, the first kept in *e. */
typedef struct verify_ctx {
    ckpt_file_report_fn report;
    void *ctx;
    int n;
    mp_code first;
    mp_err *e;
} verify_ctx;

static void problem(verify_ctx *v, mp_code rc, const mp_err *pe) {
    if (v->report) v->report(v->ctx, pe->msg);
    if (v->n++ == 0) {
        v->first = rc;
        if (v->e) *v->e = *pe;
    }
}

/* Reports what DIR/files (dir) holds that is not listed in v[0..cnt) (not when the list did not parse:
 * listed, 0), or that it is not a directory. */
static void check_dir(const ckpt_reader *r, const char *dir, const ckpt_file_entry *v, int cnt, int listed_ok,
                      verify_ctx *vc) {
    struct stat st;
    mp_err pe;
    if (lstat(dir, &st)) return;   /* no files/: every listed file was reported missing */
    DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
    if (!d) {
        mp_err_set(&pe, MP_ECHECK, "checkpoint %s: %s is not a readable directory", ckpt_reader_dir(r), dir);
        problem(vc, MP_ECHECK, &pe);
        return;
    }
    for (struct dirent *de; listed_ok && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        int listed = 0;
        for (int i = 0; i < cnt; i++) listed |= !strcmp(v[i].name, de->d_name);
        if (listed) continue;
        mp_err_set(&pe, MP_ECHECK, "checkpoint %s: %s/%s is not a listed carried file", ckpt_reader_dir(r), dir, de->d_name);
        problem(vc, MP_ECHECK, &pe);
    }
    closedir(d);
}

mp_code ckpt_files_verify(const ckpt_reader *r, ckpt_file_report_fn report, void *ctx, int *nfiles, mp_err *e) {
    verify_ctx vc = {.report = report, .ctx = ctx, .e = e};
    ckpt_file_entry *v = NULL;
    int cnt = 0;
    mp_err pe;
    mp_code lrc = ckpt_files_list(r, &v, &cnt, &pe), rc;
    if (lrc) problem(&vc, lrc, &pe);
    for (int i = 0; i < cnt; i++) {
        char *data = NULL;
        if ((rc = read_entry(r, &v[i], &data, &pe))) problem(&vc, rc, &pe);
        free(data);
    }
    char *dir = mp_fs_join(ckpt_reader_dir(r), CKPT_FILES_DIR);
    check_dir(r, dir, v, cnt, lrc == MP_OK, &vc);
    free(dir);
    free(v);
    if (nfiles) *nfiles = cnt;
    if (vc.n > 1 && e) mp_err_wrap(e, "%d problems with the carried files; the first", vc.n);
    return vc.n ? vc.first : MP_OK;
}
