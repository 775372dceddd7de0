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
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"

#define FILES_MAX_BYTES ((size_t)1 << 30)   /* a carried file larger than this is refused */

/* MP_EINPUT unless name is 1..64 chars of [A-Za-z0-9_.-] not starting with '.'. */
static mp_code check_name(const char *name, mp_err *e) {
    size_t n = name ? strlen(name) : 0;
    int ok = n >= 1 && n <= CKPT_FILE_NAME_MAX && name[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= '0' && name[i] <= '9') || strchr("_.-", name[i]);
    return ok ? MP_OK : mp_err_set(e, MP_EINPUT, "carried file name \"%s\": 1..64 of [A-Za-z0-9_.-], not starting with '.'",
                                   name ? name : "(null)");
}

/* Writes path with data[0..n) and fsyncs it. */
static mp_code write_file(const char *path, const void *data, size_t n, mp_err *e) {
    FILE *f = fopen(path, "wb");
    if (!f) return mp_err_set(e, MP_EIO, "%s: cannot create", path);
    if (n && fwrite(data, 1, n, f) != n) {
        fclose(f);
        return mp_err_set(e, MP_EIO, "%s: write failed", path);
    }
    return mp_fs_close_durable(f, path, e);
}

/* The listing with name's entry set to n bytes and hash h (text for ckpt_save_meta; free it). */
static char *list_with(const char *old, const char *name, size_t n, uint64_t h) {
    cJSON *j = old ? cJSON_Parse(old) : NULL;
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); j = cJSON_CreateObject(); }
    cJSON_DeleteItemFromObjectCaseSensitive(j, name);
    cJSON *it = cJSON_AddObjectToObject(j, name);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    cJSON_AddNumberToObject(it, "bytes", (double)n);
    cJSON_AddStringToObject(it, "xxh3", hex);
    char *txt = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return txt;
}

mp_code ckpt_save_file(ckpt_save *s, const char *name, const void *data, size_t n, mp_err *e) {
    mp_err le;
    mp_code rc = check_name(name, &le);
    if (rc == MP_OK && n > FILES_MAX_BYTES) rc = mp_err_set(&le, MP_EINPUT, "carried file %s: %zu bytes is too large", name, n);
    if (rc == MP_OK && ck_save_rank(s) == 0) {
        char *dir = mp_fs_join(ck_save_partial(s), CKPT_FILES_DIR), *path = mp_fs_join(dir, name);
        rc = mp_fs_mkdirs(dir, &le);
        if (rc == MP_OK) rc = write_file(path, data, n, &le);
        if (rc == MP_OK) rc = mp_fs_fsync_path(dir, 1, &le);
        free(path);
        free(dir);
        if (rc == MP_OK) {
            char *txt = list_with(ck_save_meta_get(s, CKPT_FILES_META), name, n, XXH3_64bits(data, n));
            rc = ckpt_save_meta(s, CKPT_FILES_META, txt, &le);
            free(txt);
        }
    }
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
    if (!txt) return MP_OK;
    cJSON *j = cJSON_Parse(txt);
    mp_code rc = cJSON_IsObject(j) ? MP_OK : MP_ECHECK;
    int cnt = rc ? 0 : cJSON_GetArraySize(j), k = 0;
    ckpt_file_entry *v = mp_xcalloc(((size_t)cnt + 1) * sizeof *v);
    for (const cJSON *it = rc ? NULL : j->child; it && rc == MP_OK; it = it->next, k++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(it, "bytes"), *h = cJSON_GetObjectItemCaseSensitive(it, "xxh3");
        mp_err ne;
        char *end = NULL;
        if (check_name(it->string, &ne) || !cJSON_IsNumber(b) || b->valuedouble < 0 || !cJSON_IsString(h) ||
            strlen(h->valuestring) != 16) { rc = MP_ECHECK; break; }
        snprintf(v[k].name, sizeof v[k].name, "%s", it->string);
        v[k].bytes = (int64_t)b->valuedouble;
        v[k].xxh3 = strtoull(h->valuestring, &end, 16);
        if (*end) rc = MP_ECHECK;
    }
    cJSON_Delete(j);
    if (rc) {
        free(v);
        return mp_err_set(e, MP_ECHECK, "checkpoint %s: metadata \"%s\" is not a valid list of carried files",
                          ckpt_reader_dir(r), CKPT_FILES_META);
    }
    *out = v;
    *n = cnt;
    return MP_OK;
}

/* Reads and checks the file of entry f. */
static mp_code read_entry(const ckpt_reader *r, const ckpt_file_entry *f, char **data, size_t *n, mp_err *e) {
    char *dir = mp_fs_join(ckpt_reader_dir(r), CKPT_FILES_DIR), *path = mp_fs_join(dir, f->name);
    size_t len = 0;
    mp_code rc = mp_read_text(path, FILES_MAX_BYTES, data, &len, e);
    if (rc) {
        e->code = rc = MP_ECHECK;
        mp_err_wrap(e, "checkpoint %s: carried file %s", ckpt_reader_dir(r), f->name);
    } else if ((int64_t)len != f->bytes || XXH3_64bits(*data, len) != f->xxh3) {
        rc = mp_err_set(e, MP_ECHECK, "checkpoint %s: carried file %s: %s does not match its listed %s", ckpt_reader_dir(r),
                        f->name, path, (int64_t)len != f->bytes ? "size" : "checksum");
        free(*data);
        *data = NULL;
    }
    if (n) *n = len;
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
            rc = read_entry(r, &v[i], data, n, e);
        }
    free(v);
    return rc;
}

mp_code ckpt_files_verify(const ckpt_reader *r, int *nfiles, mp_err *e) {
    ckpt_file_entry *v;
    int cnt;
    MP_TRY(ckpt_files_list(r, &v, &cnt, e));
    mp_code rc = MP_OK;
    for (int i = 0; i < cnt && rc == MP_OK; i++) {
        char *data = NULL;
        rc = read_entry(r, &v[i], &data, NULL, e);
        free(data);
    }
    char *dir = mp_fs_join(ckpt_reader_dir(r), CKPT_FILES_DIR);
    DIR *d = rc == MP_OK ? opendir(dir) : NULL;
    for (struct dirent *de; d && rc == MP_OK && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        int listed = 0;
        for (int i = 0; i < cnt; i++) listed |= !strcmp(v[i].name, de->d_name);
        if (!listed)
            rc = mp_err_set(e, MP_ECHECK, "checkpoint %s: %s/%s is not a listed carried file", ckpt_reader_dir(r), dir,
                            de->d_name);
    }
    if (d) closedir(d);
    free(dir);
    free(v);
    if (nfiles) *nfiles = cnt;
    return rc;
}
