/*
 * reshard/dcp.c — see dcp.h. Design:
 *   - The metadata is read whole (it is the index; at most DCP_MAX_METADATA bytes) and walked by a
 *     fixed schema (Metadata.state_dict_metadata, .storage_data, .version): every step checks the
 *     class and kind of what it meets and names the item when it does not fit.
 *   - Chunks are matched to their storage entries by (fqn, index, offsets): MetadataIndex.index is the
 *     chunk's position, its offset must agree (torch's own lookup uses the offset, the index as a hint).
 *   - A record is a zip that torch's writer always ends with a zip64 end record; the reader takes the
 *     classic end record and follows the zip64 locator when a field overflows. Only the zip directory,
 *     the local headers it needs and data.pkl are read (a few small preads); the tensor's bytes are
 *     left where they are and read by range later.
 */
#define _GNU_SOURCE
#include "reshard/dcp.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "reshard/pickle.h"

/* ------------------------------------------------------------------------------ torch.save records */

typedef struct zip_entry {
    char name[256];
    int64_t size, local;   /* stored size, local header offset */
    int method;
} zip_entry;

#define ZIP_MAX_ENTRIES 64   /* a tensor record has 7 */

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* read() of n bytes at off of a record of len bytes, checked against len. */
static mp_code rec_read(const char *what, dcp_read_fn read, void *ctx, int64_t len, int64_t off, size_t n, void *buf,
                        const char *part, mp_err *e) {
    if (off < 0 || off > len || (int64_t)n > len - off)
        return mp_err_set(e, MP_EINPUT, "%s: the zip's %s (%zu bytes at %lld) lies outside the record (%lld bytes)",
                          what, part, n, (long long)off, (long long)len);
    int rc = read(ctx, off, n, buf);
    if (rc) return mp_err_set(e, MP_EIO, "%s: reading the zip's %s: %s", what, part, strerror(rc));
    return MP_OK;
}

/* Finds the central directory: *cd_off, *cd_size, *n entries (zip64 end record when the classic
 * one's fields overflow). */
static mp_code zip_find_dir(const char *what, dcp_read_fn read, void *ctx, int64_t len, int64_t *cd_off,
                            int64_t *cd_size, int64_t *n, mp_err *e) {
    uint8_t tail[22 + 65535];
    size_t tl = len < (int64_t)sizeof tail ? (size_t)len : sizeof tail;
    if (tl < 22) return mp_err_set(e, MP_EINPUT, "%s: %lld bytes is too short for a zip (truncated?)", what, (long long)len);
    MP_TRY(rec_read(what, read, ctx, len, len - (int64_t)tl, tl, tail, "end record", e));
    int64_t at = -1;
    for (int64_t i = (int64_t)tl - 22; i >= 0; i--)
        if (rd_le(tail + i, 4) == 0x06054b50 && (int64_t)rd_le(tail + i + 20, 2) == (int64_t)tl - 22 - i) {
            at = i;
            break;
        }
    if (at < 0) return mp_err_set(e, MP_EINPUT, "%s: no zip end record (not a torch.save record, or truncated)", what);
    const uint8_t *p = tail + at;
    *n = (int64_t)rd_le(p + 10, 2);
    *cd_size = (int64_t)rd_le(p + 12, 4);
    *cd_off = (int64_t)rd_le(p + 16, 4);
    if (*n != 0xffff && *cd_size != 0xffffffffLL && *cd_off != 0xffffffffLL) return MP_OK;
    int64_t loc = len - (int64_t)tl + at - 20;   /* the zip64 locator precedes the end record */
    uint8_t l[20], z[56];
    MP_TRY(rec_read(what, read, ctx, len, loc, 20, l, "zip64 locator", e));
    if (rd_le(l, 4) != 0x07064b50) return mp_err_set(e, MP_EINPUT, "%s: zip64 fields without a zip64 locator", what);
    MP_TRY(rec_read(what, read, ctx, len, (int64_t)rd_le(l + 8, 8), 56, z, "zip64 end record", e));
    if (rd_le(z, 4) != 0x06064b50) return mp_err_set(e, MP_EINPUT, "%s: bad zip64 end record", what);
    *n = (int64_t)rd_le(z + 32, 8);
    *cd_size = (int64_t)rd_le(z + 40, 8);
    *cd_off = (int64_t)rd_le(z + 48, 8);
    return MP_OK;
}

/* Applies a central entry's zip64 extra field (id 1) to the fields that overflowed. */
static void zip64_extra(const uint8_t *x, size_t xl, zip_entry *z, int64_t *usize, int64_t *csize) {
    for (size_t i = 0; i + 4 <= xl;) {
        size_t id = rd_le(x + i, 2), n = rd_le(x + i + 2, 2), j = i + 4;
        if (id == 1) {
            if (*usize == 0xffffffffLL && j + 8 <= i + 4 + n && j + 8 <= xl) *usize = (int64_t)rd_le(x + j, 8), j += 8;
            if (*csize == 0xffffffffLL && j + 8 <= i + 4 + n && j + 8 <= xl) *csize = (int64_t)rd_le(x + j, 8), j += 8;
            if (z->local == 0xffffffffLL && j + 8 <= i + 4 + n && j + 8 <= xl) z->local = (int64_t)rd_le(x + j, 8);
        }
        i += 4 + n;
    }
}

/* Parses the central directory (cd bytes) into z[0..*n). */
static mp_code zip_entries(const char *what, const uint8_t *cd, int64_t cd_size, int64_t n, zip_entry *z, mp_err *e) {
    int64_t at = 0;
    for (int64_t k = 0; k < n; k++) {
        if (cd_size - at < 46 || rd_le(cd + at, 4) != 0x02014b50)
            return mp_err_set(e, MP_EINPUT, "%s: zip central directory entry %lld is malformed", what, (long long)k);
        const uint8_t *p = cd + at;
        int64_t nl = (int64_t)rd_le(p + 28, 2), xl = (int64_t)rd_le(p + 30, 2), cl = (int64_t)rd_le(p + 32, 2);
        if (46 + nl + xl + cl > cd_size - at || nl >= (int64_t)sizeof z[k].name)
            return mp_err_set(e, MP_EINPUT, "%s: zip central directory entry %lld runs past the directory", what, (long long)k);
        memcpy(z[k].name, p + 46, (size_t)nl);
        z[k].name[nl] = 0;
        z[k].method = (int)rd_le(p + 10, 2);
        int64_t csize = (int64_t)rd_le(p + 20, 4), usize = (int64_t)rd_le(p + 24, 4);
        z[k].local = (int64_t)rd_le(p + 42, 4);
        zip64_extra(p + 46 + nl, (size_t)xl, &z[k], &usize, &csize);
        if (z[k].method != 0 || csize != usize)
            return mp_err_set(e, MP_EINPUT, "%s: zip entry %s is compressed (method %d): torch.save stores entries "
                              "uncompressed; refusing", what, z[k].name, z[k].method);
        z[k].size = usize;
        at += 46 + nl + xl + cl;
    }
    return MP_OK;
}

/* The start of entry z's data: after its local header, which must lie in the record. */
static mp_code zip_data_at(const char *what, dcp_read_fn read, void *ctx, int64_t len, const zip_entry *z,
                           int64_t *at, mp_err *e) {
    uint8_t h[30];
    MP_TRY(rec_read(what, read, ctx, len, z->local, 30, h, "local header", e));
    if (rd_le(h, 4) != 0x04034b50) return mp_err_set(e, MP_EINPUT, "%s: zip entry %s: bad local header", what, z->name);
    *at = z->local + 30 + (int64_t)rd_le(h + 26, 2) + (int64_t)rd_le(h + 28, 2);
    if (*at > len || z->size > len - *at)
        return mp_err_set(e, MP_EINPUT, "%s: zip entry %s (%lld bytes) runs past the record (truncated?)", what,
                          z->name, (long long)z->size);
    return MP_OK;
}

/* The record's zip entries (malloc'd *z, *n). */
static mp_code zip_read_dir(const char *what, dcp_read_fn read, void *ctx, int64_t len, zip_entry **z, int *n,
                            mp_err *e) {
    int64_t cd_off, cd_size, cnt;
    MP_TRY(zip_find_dir(what, read, ctx, len, &cd_off, &cd_size, &cnt, e));
    if (cnt < 1 || cnt > ZIP_MAX_ENTRIES || cd_size > DCP_MAX_ZIP_DIR || cd_size < 46 * cnt)
        return mp_err_set(e, MP_EINPUT, "%s: zip directory of %lld entries in %lld bytes (a torch.save record has a "
                          "few)", what, (long long)cnt, (long long)cd_size);
    uint8_t *cd = mp_malloc((size_t)cd_size, MP_MEM_OTHER);
    *z = mp_calloc((size_t)cnt * sizeof **z, MP_MEM_OTHER);
    mp_code rc = rec_read(what, read, ctx, len, cd_off, (size_t)cd_size, cd, "central directory", e);
    if (!rc) rc = zip_entries(what, cd, cd_size, cnt, *z, e);
    free(cd);
    *n = (int)cnt;
    return rc;
}

/* The entry named prefix + suffix, or NULL. */
static const zip_entry *zip_find(const zip_entry *z, int n, const char *prefix, size_t pl, const char *suffix) {
    for (int i = 0; i < n; i++)
        if (!strncmp(z[i].name, prefix, pl) && !strcmp(z[i].name + pl, suffix)) return &z[i];
    return NULL;
}

static const struct { const char *storage, *torch; st_dtype dt; } dtypes[] = {
    {"FloatStorage", "float32", ST_F32}, {"BFloat16Storage", "bfloat16", ST_BF16}, {"HalfStorage", "float16", ST_F16},
    {"IntStorage", "int32", ST_I32},     {"LongStorage", "int64", ST_I64},
};

/* The dtype of a torch dtype name ("bfloat16") or storage class name ("BFloat16Storage"); -1 if not read. */
static int dtype_of(const char *name, int storage, const char **torch_name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
        if (!strcmp(name, storage ? dtypes[i].storage : dtypes[i].torch)) {
            if (torch_name) *torch_name = dtypes[i].torch;
            return (int)dtypes[i].dt;
        }
    return -1;
}

/* An int tuple (a torch.Size's argument, a stride) into out; its length, or -1. */
static int int_tuple(const pk_val *v, int64_t *out) {
    if (pk_is_obj(v, PKC_SIZE)) v = v->args->n == 1 ? v->args->items[0] : NULL;
    if (!v || (v->kind != PK_TUPLE && v->kind != PK_LIST) || v->n > DCP_MAX_DIMS) return -1;
    for (int i = 0; i < v->n; i++)
        if (!pk_int(v->items[i], &out[i]) || out[i] < 0) return -1;
    return v->n;
}

/* _rebuild_tensor_v2(persid('storage', StorageType, key, location, numel), storage_offset, size, stride,
 * requires_grad, hooks[, metadata]) into r; *key gets the storage key. */
static mp_code tensor_of(const char *what, const pk_val *root, dcp_record *r, const char **key, mp_err *e) {
    const pk_val *a = root->args;
    if (a->n < 4 || a->items[0]->kind != PK_PERSID)
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl: _rebuild_tensor_v2 without a storage", what);
    const pk_val *pid = a->items[0]->args;
    if (pid->kind != PK_TUPLE || pid->n != 5 || pid->items[0]->kind != PK_STR || strcmp(pid->items[0]->s, "storage") ||
        pid->items[1]->kind != PK_CLASS || pid->items[2]->kind != PK_STR || !pk_int(pid->items[4], &r->storage_numel))
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl: malformed storage reference", what);
    int dt = dtype_of(pid->items[1]->cls->name, 1, NULL);
    if (dt < 0)
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl: storage type torch.%s is not read (float32, bfloat16, float16, "
                          "int32, int64 are)", what, pid->items[1]->cls->name);
    r->dtype = (st_dtype)dt;
    *key = pid->items[2]->s;
    int64_t st[DCP_MAX_DIMS];
    r->ndim = int_tuple(a->items[2], r->size);
    if (!pk_int(a->items[1], &r->storage_offset) || r->storage_offset < 0 || r->ndim < 0 ||
        int_tuple(a->items[3], st) != r->ndim || r->storage_numel < 0)
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl: malformed storage offset, size or stride", what);
    memcpy(r->stride, st, sizeof st);
    r->is_tensor = 1;
    return MP_OK;
}

/* Reads and parses data.pkl (entry pk) into r; *key: the storage key of a tensor (in *doc). */
static mp_code record_pickle(const char *what, dcp_read_fn read, void *ctx, int64_t len, const zip_entry *pk,
                             dcp_record *r, pk_doc **doc, const char **key, mp_err *e) {
    int64_t at;
    MP_TRY(zip_data_at(what, read, ctx, len, pk, &at, e));
    if (pk->size > DCP_MAX_RECORD_PKL)
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl of %lld bytes (at most %d are read)", what, (long long)pk->size,
                          DCP_MAX_RECORD_PKL);
    uint8_t *buf = mp_malloc((size_t)pk->size + 1, MP_MEM_OTHER);
    char w[600];
    snprintf(w, sizeof w, "%s: data.pkl", what);
    pk_val *root = NULL;
    mp_code rc = rec_read(what, read, ctx, len, at, (size_t)pk->size, buf, "data.pkl", e);
    if (!rc) rc = pk_parse(w, buf, (size_t)pk->size, doc, &root, e);
    free(buf);
    if (rc) return rc;
    if (pk_int(root, &r->int_value)) {
        r->is_int = 1;
        return MP_OK;
    }
    if (!pk_is_obj(root, PKC_REBUILD_TENSOR_V2))
        return mp_err_set(e, MP_EINPUT, "%s: data.pkl holds a %s, not a tensor (_rebuild_tensor_v2) or an int", what,
                          pk_kind_name(root));
    return tensor_of(what, root, r, key, e);
}

/* Checks the record's byteorder entry (absent: little, as torch before 1.12 wrote). */
static mp_code check_byteorder(const char *what, dcp_read_fn read, void *ctx, int64_t len, const zip_entry *z, int n,
                               const char *prefix, size_t pl, mp_err *e) {
    const zip_entry *bo = zip_find(z, n, prefix, pl, "byteorder");
    if (!bo) return MP_OK;
    char b[16] = {0};
    int64_t at;
    MP_TRY(zip_data_at(what, read, ctx, len, bo, &at, e));
    if (bo->size >= (int64_t)sizeof b) return mp_err_set(e, MP_EINPUT, "%s: byteorder entry of %lld bytes", what, (long long)bo->size);
    MP_TRY(rec_read(what, read, ctx, len, at, (size_t)bo->size, b, "byteorder", e));
    if (strcmp(b, "little")) return mp_err_set(e, MP_EINPUT, "%s: byteorder \"%s\" (only little-endian records are read)", what, b);
    return MP_OK;
}

/* The storage entry of key: its data range, which must hold storage_numel elements of the dtype. */
static mp_code record_storage(const char *what, dcp_read_fn read, void *ctx, int64_t len, const zip_entry *z, int n,
                              const char *prefix, size_t pl, const char *key, dcp_record *r, mp_err *e) {
    char nm[300];
    snprintf(nm, sizeof nm, "data/%s", key);
    const zip_entry *s = zip_find(z, n, prefix, pl, nm);
    if (!s) return mp_err_set(e, MP_EINPUT, "%s: the zip has no entry %.*s%s for the tensor's storage", what, (int)pl, prefix, nm);
    MP_TRY(zip_data_at(what, read, ctx, len, s, &r->data_offset, e));
    r->data_length = s->size;
    if (r->storage_numel > INT64_MAX / 8 || s->size != r->storage_numel * st_dtype_size(r->dtype))
        return mp_err_set(e, MP_EINPUT, "%s: storage entry %s holds %lld bytes, not %lld elements of %s", what, s->name,
                          (long long)s->size, (long long)r->storage_numel, st_dtype_name(r->dtype));
    return MP_OK;
}

mp_code dcp_record_parse(const char *what, dcp_read_fn read, void *ctx, int64_t len, dcp_record *r, mp_err *e) {
    memset(r, 0, sizeof *r);
    zip_entry *z = NULL;
    int n = 0;
    pk_doc *doc = NULL;
    const char *key = NULL;
    mp_code rc = zip_read_dir(what, read, ctx, len, &z, &n, e);
    const zip_entry *pk = NULL;
    size_t pl = 0;
    for (int i = 0; !rc && i < n && !pk; i++) {
        const char *sl = strrchr(z[i].name, '/');
        if (sl && !strcmp(sl + 1, "data.pkl")) pk = &z[i], pl = (size_t)(sl + 1 - z[i].name);
    }
    if (!rc && !pk) rc = mp_err_set(e, MP_EINPUT, "%s: the zip has no data.pkl (not a torch.save record)", what);
    if (!rc) rc = check_byteorder(what, read, ctx, len, z, n, pk->name, pl, e);
    if (!rc) rc = record_pickle(what, read, ctx, len, pk, r, &doc, &key, e);
    if (!rc && r->is_tensor) rc = record_storage(what, read, ctx, len, z, n, pk->name, pl, key, r, e);
    pk_free(doc);
    free(z);
    return rc;
}

/* ---------------------------------------------------------------------------------------- metadata */

/* The index of file rel in d->files (added when new); refuses a path that leaves the directory. */
static mp_code file_index(const char *what, dcp_dir *d, const pk_val *rel, int *out, mp_err *e) {
    if (!rel || rel->kind != PK_STR || !rel->len || strlen(rel->s) != rel->len || rel->s[0] == '/' ||
        strstr(rel->s, "..") || strchr(rel->s, '/'))
        return mp_err_set(e, MP_EINPUT, "%s: storage_data: relative_path %s is not a file name inside the directory",
                          what, rel && rel->kind == PK_STR ? rel->s : "(not a string)");
    for (int i = 0; i < d->nfiles; i++)
        if (!strcmp(d->files[i], rel->s)) return (*out = i, MP_OK);
    d->files = mp_realloc(d->files, (size_t)d->nfiles * sizeof *d->files, (size_t)(d->nfiles + 1) * sizeof *d->files, MP_MEM_OTHER);
    d->files[d->nfiles] = mp_strdup(rel->s);
    *out = d->nfiles++;
    return MP_OK;
}

/* Field k of dict f when it is an OBJ of class kind, else NULL. */
static const pk_val *attr_obj(const pk_val *f, const char *k, pk_class_kind kind) {
    const pk_val *v = pk_dict_get(f, k);
    return pk_is_obj(v, kind) ? v : NULL;
}

/* A TensorStorageMetadata (fields of dict f) into t. */
static mp_code parse_tensor_md(const char *what, const pk_val *f, dcp_tensor *t, mp_err *e) {
    const pk_val *props = attr_obj(f, "properties", PKC_TENSOR_PROPERTIES);
    const pk_val *st = props ? props->state : NULL;
    const pk_val *dt = st && st->kind == PK_TUPLE && st->n ? st->items[0] : pk_dict_get(pk_obj_dict(props), "dtype");
    if (!dt || dt->kind != PK_CLASS || dt->cls->kind != PKC_DTYPE)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: no dtype in its properties", what, t->name);
    int d = dtype_of(dt->cls->name, 0, &t->dtype_name);
    if (d < 0)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: dtype torch.%s is not read (float32, bfloat16, float16; int32 "
                          "and int64 for counters)", what, t->name, dt->cls->name);
    t->dtype = (st_dtype)d;
    t->ndim = int_tuple(pk_dict_get(f, "size"), t->shape);
    const pk_val *ch = pk_dict_get(f, "chunks");
    if (t->ndim < 0 || !ch || ch->kind != PK_LIST)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: malformed size or chunks", what, t->name);
    t->nchunks = ch->n;
    t->chunks = mp_calloc((size_t)(ch->n ? ch->n : 1) * sizeof *t->chunks, MP_MEM_OTHER);
    for (int i = 0; i < ch->n; i++) {
        dcp_chunk *c = &t->chunks[i];
        const pk_val *cf = pk_is_obj(ch->items[i], PKC_CHUNK_STORAGE_MD) ? pk_obj_dict(ch->items[i]) : NULL;
        if (!cf || int_tuple(pk_dict_get(cf, "offsets"), c->offsets) != t->ndim ||
            int_tuple(pk_dict_get(cf, "sizes"), c->sizes) != t->ndim)
            return mp_err_set(e, MP_EINPUT, "%s: tensor %s: chunk %d is malformed (offsets and sizes of %d dims expected)",
                              what, t->name, i, t->ndim);
        c->file = -1;
        c->data_offset = c->data_length = -1;
    }
    return MP_OK;
}

static int cmp_tensor(const void *a, const void *b) { return strcmp(((const dcp_tensor *)a)->name, ((const dcp_tensor *)b)->name); }
static int cmp_item(const void *a, const void *b) { return strcmp(((const dcp_item *)a)->name, ((const dcp_item *)b)->name); }

/* Metadata.state_dict_metadata (dict fqn -> Tensor/BytesStorageMetadata) into d->t and d->b. */
static mp_code parse_state_dict_md(const char *what, const pk_val *sd, dcp_dir *d, mp_err *e) {
    if (!sd || sd->kind != PK_DICT) return mp_err_set(e, MP_EINPUT, "%s: Metadata has no state_dict_metadata dict", what);
    d->t = mp_calloc((size_t)(sd->n / 2 + 1) * sizeof *d->t, MP_MEM_OTHER);
    d->b = mp_calloc((size_t)(sd->n / 2 + 1) * sizeof *d->b, MP_MEM_OTHER);
    for (int i = 0; i + 1 < sd->n; i += 2) {
        const pk_val *k = sd->items[i], *v = sd->items[i + 1];
        if (k->kind != PK_STR || strlen(k->s) != k->len)
            return mp_err_set(e, MP_EINPUT, "%s: state_dict_metadata key %d is not a string", what, i / 2);
        if (pk_is_obj(v, PKC_BYTES_STORAGE_MD)) {
            d->b[d->nb] = (dcp_item){.name = mp_strdup(k->s), .file = -1, .offset = -1, .length = -1};
            d->nb++;
            continue;
        }
        if (!pk_is_obj(v, PKC_TENSOR_STORAGE_MD) || !pk_obj_dict(v))
            return mp_err_set(e, MP_EINPUT, "%s: item %s is a %s (TensorStorageMetadata or BytesStorageMetadata "
                              "expected)", what, k->s, pk_kind_name(v));
        dcp_tensor *t = &d->t[d->nt++];
        t->name = mp_strdup(k->s);
        MP_TRY(parse_tensor_md(what, pk_obj_dict(v), t, e));
    }
    qsort(d->t, (size_t)d->nt, sizeof *d->t, cmp_tensor);
    qsort(d->b, (size_t)d->nb, sizeof *d->b, cmp_item);
    for (int i = 1; i < d->nt; i++)
        if (!strcmp(d->t[i].name, d->t[i - 1].name)) return mp_err_set(e, MP_EINPUT, "%s: tensor %s listed twice", what, d->t[i].name);
    return MP_OK;
}

/* The chunk of t a MetadataIndex (offset, index) names: chunk `index` when its offsets agree, else the
 * one with those offsets; NULL if none. */
static dcp_chunk *chunk_for(dcp_tensor *t, const pk_val *mi) {
    int64_t off[DCP_MAX_DIMS], idx;
    if (int_tuple(pk_dict_get(mi, "offset"), off) != t->ndim) return NULL;
    size_t nb = (size_t)t->ndim * sizeof *off;
    if (pk_int(pk_dict_get(mi, "index"), &idx) && idx >= 0 && idx < t->nchunks && !memcmp(t->chunks[idx].offsets, off, nb))
        return &t->chunks[idx];
    for (int i = 0; i < t->nchunks; i++)
        if (!memcmp(t->chunks[i].offsets, off, nb)) return &t->chunks[i];
    return NULL;
}

/* One storage_data entry: MetadataIndex mi -> _StorageInfo si, placed on its chunk or bytes item. */
static mp_code place_storage(const char *what, dcp_dir *d, const pk_val *mi, const pk_val *si, mp_err *e) {
    const pk_val *fqn = pk_dict_get(mi, "fqn"), *td = pk_dict_get(si, "transform_descriptors");
    if (!fqn || fqn->kind != PK_STR) return mp_err_set(e, MP_EINPUT, "%s: storage_data: MetadataIndex without an fqn", what);
    if (td && td->kind != PK_NONE)
        return mp_err_set(e, MP_EINPUT, "%s: %s: transform_descriptors are set (DCP's compression or another stream "
                          "extension): not read; save without _extensions", what, fqn->s);
    int file = -1;
    int64_t off = 0, len = 0;
    MP_TRY(file_index(what, d, pk_dict_get(si, "relative_path"), &file, e));
    if (!pk_int(pk_dict_get(si, "offset"), &off) || !pk_int(pk_dict_get(si, "length"), &len) || off < 0 || len < 0)
        return mp_err_set(e, MP_EINPUT, "%s: %s: storage offset/length missing or negative", what, fqn->s);
    int ti = dcp_find(d, fqn->s);
    if (ti >= 0) {
        dcp_chunk *c = chunk_for(&d->t[ti], mi);
        if (!c || c->file >= 0)
            return mp_err_set(e, MP_EINPUT, "%s: %s: storage_data entry %s a chunk of the tensor", what, fqn->s,
                              c ? "is the second for" : "matches no");
        c->file = file, c->rec_offset = off, c->rec_length = len;
        return MP_OK;
    }
    dcp_item key = {.name = (char *)fqn->s};
    dcp_item *b = d->nb ? bsearch(&key, d->b, (size_t)d->nb, sizeof *d->b, cmp_item) : NULL;
    if (!b) return mp_err_set(e, MP_EINPUT, "%s: storage_data names %s, which state_dict_metadata does not list", what, fqn->s);
    if (b->file >= 0) return mp_err_set(e, MP_EINPUT, "%s: bytes item %s has two storage entries", what, fqn->s);
    b->file = file, b->offset = off, b->length = len;
    return MP_OK;
}

mp_code dcp_parse_metadata(const char *what, const uint8_t *buf, size_t len, dcp_dir *d, mp_err *e) {
    pk_doc *doc = NULL;
    pk_val *root = NULL;
    mp_code rc = pk_parse(what, buf, len, &doc, &root, e);
    const pk_val *f = rc ? NULL : pk_obj_dict(root);
    if (!rc && (!pk_is_obj(root, PKC_METADATA) || !f))
        rc = mp_err_set(e, MP_EINPUT, "%s: holds a %s, not a DCP Metadata", what, pk_kind_name(root));
    const pk_val *ver = f ? pk_dict_get(f, "version") : NULL;
    if (!rc && ver && ver->kind == PK_STR) d->version = mp_strdup(ver->s);
    if (!rc) rc = parse_state_dict_md(what, pk_dict_get(f, "state_dict_metadata"), d, e);
    const pk_val *sd = rc ? NULL : pk_dict_get(f, "storage_data");
    if (!rc && (!sd || sd->kind != PK_DICT))
        rc = mp_err_set(e, MP_EINPUT, "%s: Metadata has no storage_data dict (not written by FileSystemWriter)", what);
    for (int i = 0; !rc && i + 1 < sd->n; i += 2) {
        const pk_val *mi = sd->items[i], *si = sd->items[i + 1];
        if (!pk_is_obj(mi, PKC_METADATA_INDEX) || !pk_obj_dict(mi) || !pk_is_obj(si, PKC_STORAGE_INFO) || !pk_obj_dict(si))
            rc = mp_err_set(e, MP_EINPUT, "%s: storage_data entry %d is a %s -> %s (MetadataIndex -> _StorageInfo "
                            "expected)", what, i / 2, pk_kind_name(mi), pk_kind_name(si));
        else rc = place_storage(what, d, pk_obj_dict(mi), pk_obj_dict(si), e);
    }
    for (int i = 0; !rc && i < d->nt; i++)
        for (int c = 0; !rc && c < d->t[i].nchunks; c++)
            if (d->t[i].chunks[c].file < 0)
                rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s: chunk %d has no storage_data entry", what, d->t[i].name, c);
    for (int i = 0; !rc && i < d->nb; i++)
        if (d->b[i].file < 0) rc = mp_err_set(e, MP_EINPUT, "%s: bytes item %s has no storage_data entry", what, d->b[i].name);
    pk_free(doc);
    return rc;
}

/* ---------------------------------------------------------------------------------- the directory */

int dcp_is_dir(const char *path) {
    if (!mp_fs_is_dir(path)) return 0;
    char *m = mp_fs_join(path, ".metadata");
    int r = mp_fs_exists(m);
    free(m);
    return r;
}

int dcp_find(const dcp_dir *d, const char *name) {
    dcp_tensor key = {.name = (char *)name};
    const dcp_tensor *t = d->nt ? bsearch(&key, d->t, (size_t)d->nt, sizeof *d->t, cmp_tensor) : NULL;
    return t ? (int)(t - d->t) : -1;
}

int64_t dcp_numel(int ndim, const int64_t *sizes) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= sizes[i];
    return n;
}

/* The whole of path (at most max bytes) into *buf (malloc'd), *len. */
static mp_code slurp(const char *path, int64_t max, uint8_t **buf, size_t *len, mp_err *e) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int err = errno;
        if (fd >= 0) close(fd);
        return mp_err_set(e, err == ENOENT ? MP_EINPUT : MP_EIO, "%s: %s", path, strerror(err));
    }
    if (st.st_size > max) {
        close(fd);
        return mp_err_set(e, MP_EINPUT, "%s: %lld bytes (at most %lld are read)", path, (long long)st.st_size, (long long)max);
    }
    *buf = mp_malloc((size_t)st.st_size + 1, MP_MEM_OTHER);
    ssize_t got = pread(fd, *buf, (size_t)st.st_size, 0);
    close(fd);
    if (got != st.st_size) return mp_err_set(e, MP_EIO, "%s: short read", path);
    *len = (size_t)st.st_size;
    return MP_OK;
}

mp_code dcp_open(dcp_dir **out, const char *path, mp_err *e) {
    dcp_dir *d = mp_calloc(sizeof *d, MP_MEM_OTHER);
    d->path = mp_strdup(path);
    *out = NULL;
    char *mp = mp_fs_join(path, ".metadata");
    uint8_t *buf = NULL;
    size_t len = 0;
    mp_code rc = slurp(mp, DCP_MAX_METADATA, &buf, &len, e);
    if (!rc) rc = dcp_parse_metadata(mp, buf, len, d, e);
    free(buf);
    free(mp);
    if (rc) {
        dcp_close(d);
        return rc;
    }
    d->file_sizes = mp_malloc((size_t)(d->nfiles + 1) * sizeof *d->file_sizes, MP_MEM_OTHER);
    for (int i = 0; i < d->nfiles; i++) {
        char *fp = mp_fs_join(path, d->files[i]);
        struct stat st;
        d->file_sizes[i] = stat(fp, &st) ? -1 : (int64_t)st.st_size;
        free(fp);
    }
    *out = d;
    return MP_OK;
}

void dcp_close(dcp_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->nt; i++) free(d->t[i].name), free(d->t[i].chunks);
    for (int i = 0; i < d->nb; i++) free(d->b[i].name);
    for (int i = 0; i < d->nfiles; i++) free(d->files[i]);
    free(d->t), free(d->b), free(d->files), free(d->file_sizes), free(d->version), free(d->path), free(d);
}

/* ---------------------------------------------------------------------------------- record access */

typedef struct file_ctx {
    int fd;
    int64_t base;
} file_ctx;

static int file_read(void *ctx, int64_t off, size_t n, void *buf) {
    file_ctx *f = ctx;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(f->base + off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : EIO;
        got += (size_t)r;
    }
    return 0;
}

/* Parses the record at (file, off, len) of d: "DIR/FILE@OFF" names it. */
static mp_code open_record(dcp_dir *d, int file, int64_t off, int64_t len, dcp_record *r, char *what, size_t wcap,
                           mp_err *e) {
    char *fp = mp_fs_join(d->path, d->files[file]);
    snprintf(what, wcap, "%s (record at byte %lld, %lld bytes)", fp, (long long)off, (long long)len);
    int fd = open(fp, O_RDONLY | O_CLOEXEC);
    free(fp);
    if (fd < 0) return mp_err_set(e, MP_EIO, "%s: %s", what, strerror(errno));
    struct stat st;
    mp_code rc = MP_OK;
    if (fstat(fd, &st) || off > st.st_size || len > st.st_size - off)
        rc = mp_err_set(e, MP_EIO, "%s: the file has %lld bytes: the record runs past its end (truncated?)", what,
                        (long long)st.st_size);
    file_ctx c = {fd, off};
    if (!rc) rc = dcp_record_parse(what, file_read, &c, len, r, e);
    close(fd);
    return rc;
}

mp_code dcp_resolve(dcp_dir *d, const dcp_tensor *t, dcp_chunk *c, mp_err *e) {
    dcp_record r;
    char what[1200];
    MP_TRY(open_record(d, c->file, c->rec_offset, c->rec_length, &r, what, sizeof what, e));
    if (!r.is_tensor) return mp_err_set(e, MP_EINPUT, "%s: tensor %s: the record holds no tensor", what, t->name);
    if (r.dtype != t->dtype)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: the record holds %s, the metadata says %s", what, t->name,
                          st_dtype_name(r.dtype), t->dtype_name);
    if (r.ndim != t->ndim || memcmp(r.size, c->sizes, (size_t)t->ndim * sizeof *r.size))
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: the record's shape is not the chunk's", what, t->name);
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {   /* row-major strides (a dim of size 1 may have any) */
        if (r.size[i] != 1 && r.stride[i] != expect)
            return mp_err_set(e, MP_EINPUT, "%s: tensor %s: the chunk is stored non-contiguous (strides): not read", what, t->name);
        expect *= r.size[i];
    }
    int64_t n = dcp_numel(t->ndim, c->sizes), es = st_dtype_size(t->dtype);
    if (r.storage_offset > r.storage_numel || n > r.storage_numel - r.storage_offset)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: the view runs past its storage", what, t->name);
    c->data_offset = c->rec_offset + r.data_offset + r.storage_offset * es;
    c->data_length = n * es;
    return MP_OK;
}

mp_code dcp_read_chunk(dcp_dir *d, const dcp_tensor *t, dcp_chunk *c, void *out, mp_err *e) {
    if (c->data_offset < 0) MP_TRY(dcp_resolve(d, t, c, e));
    char *fp = mp_fs_join(d->path, d->files[c->file]);
    file_ctx f = {open(fp, O_RDONLY | O_CLOEXEC), 0};
    int rc = f.fd < 0 ? errno : file_read(&f, c->data_offset, (size_t)c->data_length, out);
    if (f.fd >= 0) close(f.fd);
    mp_code code = rc ? mp_err_set(e, MP_EIO, "%s: reading %lld bytes of %s at %lld: %s", fp, (long long)c->data_length,
                                   t->name, (long long)c->data_offset, strerror(rc)) : MP_OK;
    free(fp);
    return code;
}

int dcp_train_step(dcp_dir *d, int64_t *step, mp_err *e) {
    const char *name = "train_state.step";
    int ti = dcp_find(d, name);
    if (ti >= 0) {
        dcp_tensor *t = &d->t[ti];
        if (t->ndim != 0 || t->nchunks != 1 || (t->dtype != ST_I32 && t->dtype != ST_I64))
            return mp_err_set(e, MP_EINPUT, "%s: %s is not a 0-d int32/int64 tensor", d->path, name), -1;
        int64_t v = 0;
        if (dcp_read_chunk(d, t, &t->chunks[0], &v, e)) return -1;
        *step = t->dtype == ST_I32 ? (int64_t)(int32_t)v : v;
        return 1;
    }
    dcp_item key = {.name = (char *)name};
    dcp_item *b = d->nb ? bsearch(&key, d->b, (size_t)d->nb, sizeof *d->b, cmp_item) : NULL;
    if (!b) return 0;
    dcp_record r;
    char what[1200];
    if (open_record(d, b->file, b->offset, b->length, &r, what, sizeof what, e)) return -1;
    if (!r.is_int) return mp_err_set(e, MP_EINPUT, "%s: %s holds no int", what, name), -1;
    *step = r.int_value;
    return 1;
}
