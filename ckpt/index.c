/*
 * ckpt/index.c — index.h5: writing it (rank 0, last step of a save) and reading + validating it.
 *
 * Objects (docs/FORMAT.md is the specification):
 *   /                    attributes format, format_version, step, world_size, zstd_level,
 *                        index_checksum, created_utc
 *   /layout/tensors      compound table, one row per tensor, sorted by name
 *   /layout/boxes        compound table, one row per saved box, grouped by tensor, by offset[0];
 *                        v2: its checksum tiles (tile_rows, tile_cols, ntiles) and where their
 *                        checksums live in the rank file (tiles_dataset, tiles_checksum)
 *   /layout/files        compound table, one row per rank file
 *   /layout/slab_checksums   v1 only: uint64 [nslabs], per-slab XXH3-64 of every box, rows of boxes
 *   /meta/<key>          scalar fixed-length UTF-8 string dataset per metadata entry
 *   /view/<tensor name>  virtual dataset: the whole tensor, mapped onto the rank files' datasets
 *
 * The record structs below are the memory types of the tensor, file and run tables; the file types are
 * the same compounds packed (no padding), with little-endian members. A box row (v1, v2) is not a struct
 * here: its fields, compound type and checksum input come from the box record schema (ckpt/boxrec.c,
 * places CK_BR_IDX1 / CK_BR_IDX2), whose rows are packed already. Strings are fixed-length, NUL-padded. index_checksum
 * is XXH3-64 over the canonical content of the layout and metadata (ck_layout_hash), so a flipped
 * byte in any table or metadata value is caught even where HDF5 has no checksum of its own (raw data).
 * The reader reads the tables, never the views (a view's missing source reads as fill values).
 *
 * Versions: this file writes versions 2 (repair-views of a v2 checkpoint), 3 and 4 and reads 1 to 4;
 * version 4 is version 3 with another number (docs/FORMAT.md "What changed from version 3"), so every
 * "version 3" below is "version 3 or 4" (`>= 3`). A v1 index is turned into the same
 * in-memory layout (ck_layout) as a v2 one: its boxes get tile_rows = slab_rows, tile_cols = the
 * box's dim 1 (1 for 1-D) and ntiles = nslabs, with their tile checksums in L->slabs, so the reader
 * has one code path. Validation is overflow-safe: crafted int64 values (offsets, shapes, counts) whose
 * sums or products would overflow are refused, not computed with.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

typedef struct {
    char name[CKPT_NAME_MAX + 1];
    char dtype[8];
    int32_t ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t box_first, nboxes;
} rec_tensor;

typedef struct {
    int32_t rank;
    char name[CK_FILE_MAX];
    int64_t nboxes, bytes;
} rec_file;           /* v1, v2 */

typedef struct {
    int32_t rank;
    char name[CK_FILE_MAX];
    int64_t nboxes, bytes;
    uint64_t boxes_checksum;
} rec_file3;          /* v3 */

void ck_layout_free(ck_layout *L) {
    if (!L) return;
    free(L->t);
    free(L->b);
    free(L->f);
    free(L->slabs);
    for (int i = 0; i < L->nmeta; i++) { free(L->keys[i]); free(L->vals[i]); }
    free(L->keys);
    free(L->vals);
    free(L->pmax_end);
    free(L->paths);
    memset(L, 0, sizeof *L);
}

/* The record (ckpt/boxrec.c) of box B of L: names from L's tables, dataset paths into ds and ts
 * (CK_DSET_MAX bytes each, or the stored ones of a v1/v2 layout). */
static void box_rec(const ck_layout *L, const ck_box *B, char *ds, char *ts, ck_boxrec *r) {
    memset(r, 0, sizeof *r);
    r->tensor = L->t[B->tensor].name;
    r->tensor_index = B->tensor;
    r->rank = L->f[B->file].rank;
    r->file_index = B->file;
    r->file = L->f[B->file].name;
    r->dataset = ck_box_path(L, B, 0, ds);
    r->k = B->k;
    memcpy(r->offset, B->off, sizeof r->offset);
    memcpy(r->shape, B->shp, sizeof r->shape);
    r->checksum = B->checksum;
    r->slab_rows = B->slab_rows;
    r->slab_first = B->slab_first;
    r->nslabs = B->nslabs;
    r->tile_rows = B->tile_rows;
    r->tile_cols = B->tile_cols;
    r->ntiles = B->ntiles;
    r->tiles_checksum = B->tiles_checksum;
    r->tiles_dataset = ck_box_path(L, B, 1, ts);
}

/* The box table's row place of index format version v (1 or 2). */
static unsigned box_place(int v) { return v == 1 ? CK_BR_IDX1 : CK_BR_IDX2; }

/* ------------------------------------------------------------------------------------ checksum */

static void h_i64(XXH3_state_t *s, int64_t v) { XXH3_64bits_update(s, &v, sizeof v); }
static void h_str(XXH3_state_t *s, const char *p) { XXH3_64bits_update(s, p, strlen(p) + 1); }

/* A new hashing state fed the format name (the start of every version's sequence). */
static XXH3_state_t *hash_begin(void) {
    XXH3_state_t *s = XXH3_createState();
    if (!s) mp_oom(0, MP_MEM_CKPT, "a checksum state");
    XXH3_64bits_reset(s);
    h_str(s, CKPT_FORMAT_NAME);
    return s;
}

/* The tensor rows, as every version hashes them. */
static void hash_tensors(XXH3_state_t *s, const ck_layout *L) {
    for (int i = 0; i < L->ntensors; i++) {
        const ck_tensor *T = &L->t[i];
        h_str(s, T->name);
        h_str(s, mp_dtype_name(T->dtype));
        h_i64(s, T->ndim);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) h_i64(s, T->shape[d]);
        h_i64(s, T->box_first);
        h_i64(s, T->nboxes);
    }
}

/* The metadata entries (the end of every version's sequence), then the digest; frees s. */
static uint64_t hash_meta_end(XXH3_state_t *s, const ck_layout *L) {
    for (int i = 0; i < L->nmeta; i++) {
        h_str(s, L->keys[i]);
        h_str(s, L->vals[i]);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

/* The sequence of docs/FORMAT.md "Index checksum" for version 1 or 2: each box's fields marked hashed
 * in the box record schema (ckpt/boxrec.c: v2 hashes its tile fields where v1 hashes its slab
 * fields); v2 has no slab array (its slab count is 0). */
static uint64_t hash_v12(const ck_layout *L) {
    assert(L->version == 1 || L->version == 2);
    assert(L->version == 1 || L->nslabs == 0);
    XXH3_state_t *s = hash_begin();
    h_i64(s, L->version);
    h_i64(s, L->step);
    h_i64(s, L->world);
    h_i64(s, L->zstd_level);
    h_i64(s, L->ntensors);
    h_i64(s, L->nboxes);
    h_i64(s, L->nfiles);
    h_i64(s, L->nslabs);
    h_i64(s, L->nmeta);
    hash_tensors(s, L);
    char ds[CK_DSET_MAX], ts[CK_DSET_MAX];
    for (int i = 0; i < L->nboxes; i++) {   /* the hashed fields of the box record, in its order */
        ck_boxrec r;
        box_rec(L, &L->b[i], ds, ts, &r);
        ck_boxrec_hash(s, box_place(L->version), &r);
    }
    for (int i = 0; i < L->nfiles; i++) {
        h_i64(s, L->f[i].rank);
        h_str(s, L->f[i].name);
        h_i64(s, L->f[i].nboxes);
        h_i64(s, L->f[i].bytes);
    }
    if (L->nslabs) XXH3_64bits_update(s, L->slabs, (size_t)L->nslabs * sizeof(uint64_t));
    return hash_meta_end(s, L);
}

/* The version-3 (and 4) sequence of docs/FORMAT.md "Index checksum": the version, tensors, runs[nruns],
 * files with their boxes_checksum, metadata. */
static uint64_t hash_v3(const ck_layout *L, const ck_run *runs, int64_t nruns) {
    assert(L->version >= 3);
    XXH3_state_t *s = hash_begin();
    h_i64(s, L->version);
    h_i64(s, L->step);
    h_i64(s, L->world);
    h_i64(s, L->zstd_level);
    h_i64(s, L->ntensors);
    h_i64(s, nruns);
    h_i64(s, L->nfiles);
    h_i64(s, L->nmeta);
    hash_tensors(s, L);
    for (int64_t i = 0; i < nruns; i++) {
        const ck_run *R = &runs[i];
        h_i64(s, R->tensor);
        h_i64(s, R->count);
        h_i64(s, R->rank0);
        h_i64(s, R->stride);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) h_i64(s, R->off[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) h_i64(s, R->step[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) h_i64(s, R->shp[d]);
    }
    for (int i = 0; i < L->nfiles; i++) {
        h_i64(s, L->f[i].rank);
        h_str(s, L->f[i].name);
        h_i64(s, L->f[i].nboxes);
        h_i64(s, L->f[i].bytes);
        h_i64(s, (int64_t)L->f[i].boxes_checksum);
    }
    return hash_meta_end(s, L);
}

/* v1/v2: over the layout; v3/v4: over the runs ck_runs_build makes of it (what ck_index_write stores). */
uint64_t ck_layout_hash(const ck_layout *L) {
    if (L->version < 3) return hash_v12(L);
    ck_run *runs;
    int64_t n;
    ck_runs_build(L, &runs, &n);
    uint64_t h = hash_v3(L, runs, n);
    free(runs);
    return h;
}

/* --------------------------------------------------------------------------------- HDF5 types */

/* Memory compound types of the tensor, file and run tables (caller closes; the box rows' types come
 * from the box record schema, ck_boxrec_type). */
static hid_t tensor_mtype(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(rec_tensor));
    hid_t s = ck_h5_str_type(sizeof(((rec_tensor *)0)->name)), d = ck_h5_str_type(8), a = ck_h5_dims_type(H5T_NATIVE_INT64);
    H5Tinsert(t, "name", HOFFSET(rec_tensor, name), s);
    H5Tinsert(t, "dtype", HOFFSET(rec_tensor, dtype), d);
    H5Tinsert(t, "ndim", HOFFSET(rec_tensor, ndim), H5T_NATIVE_INT32);
    H5Tinsert(t, "shape", HOFFSET(rec_tensor, shape), a);
    H5Tinsert(t, "box_first", HOFFSET(rec_tensor, box_first), H5T_NATIVE_INT64);
    H5Tinsert(t, "nboxes", HOFFSET(rec_tensor, nboxes), H5T_NATIVE_INT64);
    H5Tclose(s); H5Tclose(d); H5Tclose(a);
    return t;
}

/* The file table's memory type of format version v (rec_file; v3 rec_file3, with boxes_checksum). */
static hid_t file_mtype(int v) {
    hid_t t = H5Tcreate(H5T_COMPOUND, v >= 3 ? sizeof(rec_file3) : sizeof(rec_file));
    hid_t f = ck_h5_str_type(CK_FILE_MAX);
    H5Tinsert(t, "rank", HOFFSET(rec_file, rank), H5T_NATIVE_INT32);
    H5Tinsert(t, "name", HOFFSET(rec_file, name), f);
    H5Tinsert(t, "nboxes", HOFFSET(rec_file, nboxes), H5T_NATIVE_INT64);
    H5Tinsert(t, "bytes", HOFFSET(rec_file, bytes), H5T_NATIVE_INT64);
    if (v >= 3) H5Tinsert(t, "boxes_checksum", HOFFSET(rec_file3, boxes_checksum), H5T_NATIVE_UINT64);
    H5Tclose(f);
    return t;
}

/* The memory type of a /layout/runs row (ck_run; the file type is it packed, without the padding). */
static hid_t run_mtype(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ck_run));
    hid_t a = ck_h5_dims_type(H5T_NATIVE_INT64);
    H5Tinsert(t, "tensor_index", HOFFSET(ck_run, tensor), H5T_NATIVE_INT32);
    H5Tinsert(t, "count", HOFFSET(ck_run, count), H5T_NATIVE_INT64);
    H5Tinsert(t, "rank", HOFFSET(ck_run, rank0), H5T_NATIVE_INT32);
    H5Tinsert(t, "rank_stride", HOFFSET(ck_run, stride), H5T_NATIVE_INT32);
    H5Tinsert(t, "offset", HOFFSET(ck_run, off), a);
    H5Tinsert(t, "offset_step", HOFFSET(ck_run, step), a);
    H5Tinsert(t, "shape", HOFFSET(ck_run, shp), a);
    H5Tclose(a);
    return t;
}

/* Writes a 1-D dataset of n records at path with memory type mt (file type: mt packed). */
static herr_t write_table(hid_t loc, const char *path, hid_t mt, const void *data, hsize_t n) {
    hid_t ft = H5Tcopy(mt);
    herr_t rc = -1;
    if (ft < 0) return -1;
    if (H5Tget_class(ft) == H5T_COMPOUND) H5Tpack(ft);
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = sp >= 0 ? H5Dcreate2(loc, path, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (d >= 0) {
        rc = n ? H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0;
        if (H5Dclose(d) < 0) rc = -1;
    }
    if (sp >= 0) H5Sclose(sp);
    H5Tclose(ft);
    return rc;
}

/* 1 if table dataset d may be read as `rows` records of rec bytes: at most INT32_MAX rows (what the
 * layout counts), and, unless the table is filtered (compressed), stored bytes for every row. A crafted
 * row count thus never overflows the buffer size (a heap overflow in H5Dread) nor allocates what the
 * file does not hold (HDF5 would return fill values for unstored rows). */
static int table_rows_ok(hid_t d, hsize_t rows, size_t rec) {
    if (rows > INT32_MAX || rows > SIZE_MAX / (rec ? rec : 1)) return 0;
    if (rows == 0) return 1;
    hid_t ft = H5Dget_type(d), dcpl = H5Dget_create_plist(d);
    size_t fsz = ft >= 0 ? H5Tget_size(ft) : 0;
    int nfilters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : -1;
    if (ft >= 0) H5Tclose(ft);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (fsz == 0 || fsz > UINT32_MAX || nfilters < 0) return 0;
    return nfilters > 0 || H5Dget_storage_size(d) >= rows * fsz;
}

/* Reads the 1-D dataset at path into a new array of *n records of size rec (memory type mt). Refuses
 * (-1) a row count table_rows_ok does not accept. */
static herr_t read_table(hid_t loc, const char *path, hid_t mt, size_t rec, void **out, int64_t *n) {
    *out = NULL;
    *n = 0;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
    if (d < 0) return -1;
    herr_t rc = -1;
    hid_t sp = H5Dget_space(d);
    hsize_t dims[1] = {0};
    if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, dims, NULL) == 1 &&
        table_rows_ok(d, dims[0], rec)) {
        void *buf = mp_xcalloc((size_t)(dims[0] ? dims[0] : 1) * rec);
        rc = dims[0] ? H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
        if (rc < 0) free(buf);
        else { *out = buf; *n = (int64_t)dims[0]; }
    }
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return rc;
}

/* ---------------------------------------------------------------------------------------- write */

/* The NaN (or INT32_MIN) fill value of a view, in the file type's bytes. */
static void view_fill(mp_dtype dt, void *out) {
    if (dt == MP_F32) { float f = NAN; memcpy(out, &f, 4); }
    else if (dt == MP_BF16) { uint16_t h = 0x7fc0; memcpy(out, &h, 2); }
    else { int32_t v = INT32_MIN; memcpy(out, &v, 4); }
}

static mp_code write_views(const ck_layout *L, hid_t f, const char *path, mp_err *e) {
    if (H5Gclose(ck_group_create(f, "view")) < 0) return ck_h5_err(e, MP_EIO, "writing %s: group /view", path);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    mp_code rc = MP_OK;
    for (int t = 0; t < L->ntensors && rc == MP_OK; t++) {
        const ck_tensor *T = &L->t[t];
        hsize_t dims[CKPT_MAX_DIMS];
        for (int d = 0; d < T->ndim; d++) dims[d] = (hsize_t)T->shape[d];
        hid_t ft = ck_h5_type(T->dtype);
        hid_t vs = H5Screate_simple(T->ndim, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        char fill[8];
        view_fill(T->dtype, fill);
        herr_t hr = (ft < 0 || vs < 0 || dcpl < 0) ? -1 : H5Pset_fill_value(dcpl, ft, fill);
        for (int64_t i = T->box_first; hr >= 0 && i < T->box_first + T->nboxes; i++) {
            const ck_box *B = &L->b[i];
            hsize_t st[CKPT_MAX_DIMS], cnt[CKPT_MAX_DIMS];
            for (int d = 0; d < T->ndim; d++) { st[d] = (hsize_t)B->off[d]; cnt[d] = (hsize_t)B->shp[d]; }
            hid_t src = H5Screate_simple(T->ndim, cnt, NULL);
            hr = src < 0 ? -1 : H5Sselect_hyperslab(vs, H5S_SELECT_SET, st, NULL, cnt, NULL);
            char buf[CK_DSET_MAX];
            if (hr >= 0) hr = H5Pset_virtual(dcpl, vs, L->f[B->file].name, ck_box_path(L, B, 0, buf), src);
            if (src >= 0) H5Sclose(src);
        }
        if (hr >= 0) {
            H5Sselect_all(vs);
            char *vp = ck_fmt("view/%s", T->name);
            hid_t d = ck_h5_make_parents(f, vp) < 0 ? -1 : H5Dcreate2(f, vp, ft, vs, lcpl, dcpl, H5P_DEFAULT);
            free(vp);
            if (d < 0 || H5Dclose(d) < 0) hr = -1;
        }
        if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: view of tensor %s", path, T->name);
        if (dcpl >= 0) H5Pclose(dcpl);
        if (vs >= 0) H5Sclose(vs);
        if (ft >= 0) H5Tclose(ft);
    }
    H5Pclose(lcpl);
    return rc;
}

static mp_code write_meta(const ck_layout *L, hid_t f, const char *path, mp_err *e) {
    hid_t g = ck_group_create(f, "meta");
    if (g < 0) return ck_h5_err(e, MP_EIO, "writing %s: group /meta", path);
    mp_code rc = MP_OK;
    for (int i = 0; i < L->nmeta && rc == MP_OK; i++) {
        size_t n = strlen(L->vals[i]);
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, n ? n : 1);
        H5Tset_strpad(t, H5T_STR_NULLPAD);
        H5Tset_cset(t, H5T_CSET_UTF8);
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t d = H5Dcreate2(g, L->keys[i], t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        char pad[1] = {0};
        herr_t hr = d < 0 ? -1 : H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, n ? L->vals[i] : pad);
        if (d >= 0 && H5Dclose(d) < 0) hr = -1;
        H5Sclose(sp);
        H5Tclose(t);
        if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: metadata %s", path, L->keys[i]);
    }
    if (H5Gclose(g) < 0 && rc == MP_OK) rc = ck_h5_err(e, MP_EIO, "writing %s: group /meta", path);
    return rc;
}

/* The tensor table's rows of L (caller frees). */
static rec_tensor *tensor_rows(const ck_layout *L) {
    rec_tensor *rt = mp_xcalloc(sizeof *rt * (size_t)(L->ntensors + 1));
    for (int i = 0; i < L->ntensors; i++) {
        const ck_tensor *T = &L->t[i];
        snprintf(rt[i].name, sizeof rt[i].name, "%s", T->name);
        snprintf(rt[i].dtype, sizeof rt[i].dtype, "%s", mp_dtype_name(T->dtype));
        rt[i].ndim = T->ndim;
        memcpy(rt[i].shape, T->shape, sizeof rt[i].shape);
        rt[i].box_first = T->box_first;
        rt[i].nboxes = T->nboxes;
    }
    return rt;
}

/* Writes /layout/tensors (rows rt), /layout/<mid> (n rows of memory type mt: v2 boxes, v3 runs) and
 * /layout/files (rows rf, memory type ft) of L into f; closes the two given types. */
static mp_code write_layout(hid_t f, const char *path, const ck_layout *L, const rec_tensor *rt, const char *mid,
                            hid_t mt, const void *rows, hsize_t n, hid_t ft, const void *rf, mp_err *e) {
    hid_t tt = tensor_mtype();
    char *mp = ck_fmt("layout/%s", mid);
    mp_code rc = MP_OK;
    if (write_table(f, "layout/tensors", tt, rt, (hsize_t)L->ntensors) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: /layout/tensors", path);
    else if (write_table(f, mp, mt, rows, n) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: /%s", path, mp);
    else if (write_table(f, "layout/files", ft, rf, (hsize_t)L->nfiles) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: /layout/files", path);
    free(mp);
    H5Tclose(tt);
    H5Tclose(mt);
    H5Tclose(ft);
    return rc;
}

/* Version 3's tables: tensors, runs (built from L's boxes), files with boxes_checksum. */
static mp_code write_tables3(const ck_layout *L, hid_t f, const char *path, mp_err *e) {
    if (H5Gclose(ck_group_create(f, "layout")) < 0)
        return ck_h5_err(e, MP_EIO, "writing %s: group /layout", path);
    rec_tensor *rt = tensor_rows(L);
    rec_file3 *rf = mp_xcalloc(sizeof *rf * (size_t)(L->nfiles + 1));
    for (int i = 0; i < L->nfiles; i++) {
        rf[i].rank = L->f[i].rank;
        snprintf(rf[i].name, sizeof rf[i].name, "%s", L->f[i].name);
        rf[i].nboxes = L->f[i].nboxes;
        rf[i].bytes = L->f[i].bytes;
        rf[i].boxes_checksum = L->f[i].boxes_checksum;
    }
    ck_run *runs;
    int64_t nr;
    ck_runs_build(L, &runs, &nr);
    mp_code rc = write_layout(f, path, L, rt, "runs", run_mtype(), runs, (hsize_t)nr, file_mtype(3), rf, e);
    free(rt);
    free(rf);
    free(runs);
    return rc;
}

static mp_code write_tables(const ck_layout *L, hid_t f, const char *path, mp_err *e) {
    if (L->version >= 3) return write_tables3(L, f, path, e);
    if (H5Gclose(ck_group_create(f, "layout")) < 0)
        return ck_h5_err(e, MP_EIO, "writing %s: group /layout", path);
    rec_tensor *rt = tensor_rows(L);
    size_t row = ck_boxrec_size(CK_BR_IDX2);
    unsigned char *rb = mp_xcalloc(row * (size_t)(L->nboxes + 1));
    rec_file *rf = mp_xcalloc(sizeof *rf * (size_t)(L->nfiles + 1));
    char ds[CK_DSET_MAX], ts[CK_DSET_MAX];
    for (int i = 0; i < L->nboxes; i++) {
        ck_boxrec r;
        box_rec(L, &L->b[i], ds, ts, &r);
        ck_boxrec_put(CK_BR_IDX2, &r, rb + row * (size_t)i);
    }
    for (int i = 0; i < L->nfiles; i++) {
        rf[i].rank = L->f[i].rank;
        snprintf(rf[i].name, sizeof rf[i].name, "%s", L->f[i].name);
        rf[i].nboxes = L->f[i].nboxes;
        rf[i].bytes = L->f[i].bytes;
    }
    mp_code rc = write_layout(f, path, L, rt, "boxes", ck_boxrec_type(CK_BR_IDX2), rb, (hsize_t)L->nboxes, file_mtype(2), rf, e);
    free(rt);
    free(rb);
    free(rf);
    return rc;
}

/* A file created for writing at path (exclusive), with the project's property lists; < 0 on failure. */
static hid_t create_file(const char *path) {
    hid_t fapl = ck_h5_fapl(0), fcpl = ck_h5_fcpl();
    hid_t f = fapl < 0 || fcpl < 0 ? -1 : H5Fcreate(path, H5F_ACC_EXCL, fcpl, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (fcpl >= 0) H5Pclose(fcpl);
    return f;
}

mp_code ck_view_write(const ck_layout *L, const char *path, mp_err *e) {
    ck_h5_init();
    ck_h5_clear();
    hid_t f = create_file(path);
    if (f < 0) return ck_h5_err(e, MP_EIO, "creating %s", path);
    mp_code rc = write_views(L, f, path, e);
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = ck_h5_err(e, MP_EIO, "closing %s", path);
    ck_h5_clear();
    if (rc == MP_OK) rc = mp_fs_fsync_path(path, 0, e);
    return rc;
}

/* Writes version L->version: 2 (repair-views of a v2 checkpoint: its tables, views inside) or 3 and 4 (runs,
 * files with boxes_checksum, and /view as an external link to view.h5:/view). No slab checksums. */
mp_code ck_index_write(const ck_layout *L, const char *path, mp_err *e) {
    assert(L->version >= 2 && L->version <= CKPT_FORMAT_VERSION_MAX && L->nslabs == 0);
    ck_h5_init();
    ck_h5_clear();
    hid_t f = create_file(path);
    if (f < 0) return ck_h5_err(e, MP_EIO, "creating %s", path);
    mp_code rc = MP_OK;
    uint64_t h = ck_layout_hash(L);
    char created[64];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    if (L->created_utc[0]) snprintf(created, sizeof created, "%s", L->created_utc);   /* a rebuilt index */
    herr_t hr = ck_attr_write_str(f, "format", CKPT_FORMAT_NAME);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "format_version", L->version);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "step", L->step);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "world_size", L->world);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "zstd_level", L->zstd_level);
    if (hr >= 0) hr = ck_attr_write_u64s(f, "index_checksum", h);
    if (hr >= 0) hr = ck_attr_write_str(f, "created_utc", created);
    if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: root attributes", path);
    if (rc == MP_OK) rc = write_tables(L, f, path, e);
    if (rc == MP_OK) rc = write_meta(L, f, path, e);
    if (rc == MP_OK && L->version == 2) rc = write_views(L, f, path, e);
    if (rc == MP_OK && L->version >= 3 && H5Lcreate_external(CK_VIEW_FILE, "/view", f, "view", H5P_DEFAULT, H5P_DEFAULT) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: the external link /view -> %s:/view", path, CK_VIEW_FILE);
    /* closing flushes the metadata cache: a full disk often shows here first */
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = ck_h5_err(e, MP_EIO, "closing %s", path);
    ck_h5_clear();
    if (rc == MP_OK) rc = mp_fs_fsync_path(path, 0, e);
    return rc;
}

/* ----------------------------------------------------------------------------------------- read */

typedef struct {
    ck_layout *L;
    hid_t g;
    mp_code rc;
    mp_err *e;
    const char *path;
} meta_ctx;

/* Largest metadata value the reader accepts, bytes (configs and cursors are a few KiB). */
#define CK_META_MAX (16 << 20)

static herr_t meta_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    meta_ctx *c = data;
    ck_layout *L = c->L;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    hid_t ft = d >= 0 ? H5Dget_type(d) : -1;
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    /* one string (H5Dread fills n bytes per element: a crafted array would overrun buf), of a bounded
     * size (a crafted size would abort the allocation) */
    int scalar = sp >= 0 && H5Sget_simple_extent_type(sp) == H5S_SCALAR;
    if (sp >= 0) H5Sclose(sp);
    if (d < 0 || ft < 0 || H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft) > 0 || !scalar ||
        H5Tget_size(ft) > CK_META_MAX) {
        c->rc = ck_h5_err(c->e, MP_ECHECK,
                          "%s: metadata entry %s is not a scalar fixed-length string of at most %d bytes", c->path,
                          name, CK_META_MAX);
        if (ft >= 0) H5Tclose(ft);
        if (d >= 0) H5Dclose(d);
        return -1;
    }
    size_t n = H5Tget_size(ft);
    char *buf = mp_xcalloc(n + 1);
    herr_t hr = H5Dread(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Tclose(ft);
    H5Dclose(d);
    if (hr < 0) {
        free(buf);
        c->rc = ck_h5_err(c->e, MP_ECHECK, "%s: reading metadata entry %s", c->path, name);
        return -1;
    }
    L->keys = mp_realloc(L->keys, 0, sizeof(char *) * (size_t)(L->nmeta + 1), MP_MEM_OTHER);
    L->vals = mp_realloc(L->vals, 0, sizeof(char *) * (size_t)(L->nmeta + 1), MP_MEM_OTHER);
    L->keys[L->nmeta] = mp_strdup(name);
    L->vals[L->nmeta] = buf;
    L->nmeta++;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* a * b into *out unless it overflows int64 (both >= 0). */
static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* Checks box j (of tensor T, index t) of a v1 (slab fields) or v2 (tile fields) layout and, for v1,
 * sets its tile fields from its slab fields. T's shape is valid and its byte size fits in int64, so
 * sums of a box's offset and shape or of its rows and tile rows cannot overflow once offsets are
 * checked against the shape. */
static mp_code validate_box(ck_layout *L, int t, int64_t j, const char *path, mp_err *e) {
    ck_tensor *T = &L->t[t];
    ck_box *B = &L->b[j];
    if (B->tensor != t)
        return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] belongs to tensor %d, listed under %s", path, (long long)j,
                          B->tensor, T->name);
    if (B->file < 0 || B->file >= L->nfiles)
        return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] (tensor %s): file index %d out of range", path, (long long)j,
                          T->name, B->file);
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        int bad = d < T->ndim ? (B->off[d] < 0 || B->shp[d] <= 0 || B->off[d] > T->shape[d] - B->shp[d])
                              : (B->off[d] != 0 || B->shp[d] != 1);
        if (bad)
            return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] (tensor %s): offset/shape outside the tensor", path,
                              (long long)j, T->name);
    }
    if (j > T->box_first && B->off[0] < L->b[j - 1].off[0])
        return mp_err_set(e, MP_ECHECK, "%s: boxes of tensor %s not sorted by offset[0]", path, T->name);
    char buf[CK_DSET_MAX];
    if (ck_box_path(L, B, 0, buf)[0] != '/')
        return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] (tensor %s): bad dataset path", path, (long long)j, T->name);
    int64_t rows = B->shp[0], cols = T->ndim >= 2 ? B->shp[1] : 1;
    if (L->version == 1) {
        if (B->slab_rows < 1 || B->slab_rows > rows || B->nslabs != (rows + B->slab_rows - 1) / B->slab_rows ||
            B->slab_first < 0 || B->slab_first > L->nslabs - B->nslabs)
            return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] (tensor %s): bad slab checksum fields", path,
                              (long long)j, T->name);
        B->tile_rows = B->slab_rows;
        B->tile_cols = cols;
        B->ntiles = B->nslabs;
        B->tiles_checksum = 0;
        return MP_OK;
    }
    if (L->version >= 3) return MP_OK;   /* tile fields: checked when the rank file's /boxes table is read */
    if (B->tile_rows < 1 || B->tile_rows > rows || B->tile_cols < 1 || B->tile_cols > cols ||
        B->ntiles != ck_tile_count(T->ndim, B->shp, B->tile_rows, B->tile_cols))
        return mp_err_set(e, MP_ECHECK,
                          "%s: boxes[%lld] (tensor %s): bad checksum tile fields (tile_rows %lld, tile_cols %lld, "
                          "ntiles %lld)",
                          path, (long long)j, T->name, (long long)B->tile_rows, (long long)B->tile_cols,
                          (long long)B->ntiles);
    if (ck_box_path(L, B, 1, buf)[0] != '/')
        return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld] (tensor %s): bad tiles dataset path", path, (long long)j,
                          T->name);
    return MP_OK;
}

/* The rules on the tensors alone (name, order, ndim, shape; docs/FORMAT.md "Validation"). */
static mp_code validate_tensor(const ck_layout *L, int i, const char *path, mp_err *e) {
    const ck_tensor *T = &L->t[i];
    mp_err ne;
    if (ck_check_name(T->name, &ne) != MP_OK) return mp_err_set(e, MP_ECHECK, "%s: tensors[%d]: %s", path, i, ne.msg);
    if (i > 0 && strcmp(L->t[i - 1].name, T->name) >= 0)
        return mp_err_set(e, MP_ECHECK, "%s: tensors table not sorted by name at %s", path, T->name);
    if (T->ndim < 1 || T->ndim > CKPT_MAX_DIMS)
        return mp_err_set(e, MP_ECHECK, "%s: tensor %s: ndim %d out of range", path, T->name, T->ndim);
    int64_t bytes = (int64_t)mp_dtype_size(T->dtype);
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        if ((d < T->ndim ? T->shape[d] <= 0 : T->shape[d] != 1) || !mul_ok(bytes, T->shape[d], &bytes))
            return mp_err_set(e, MP_ECHECK,
                              "%s: tensor %s: bad shape: shape[%d] = %lld (dims must be > 0, 1 past ndim %d, and "
                              "the tensor's byte size must fit in int64)",
                              path, T->name, d, (long long)T->shape[d], T->ndim);
    return MP_OK;
}

/* The rules on the tensors and the file rows (what expanding v3 runs relies on). */
static mp_code validate_head(const ck_layout *L, const char *path, mp_err *e) {
    for (int i = 0; i < L->ntensors; i++) MP_TRY(validate_tensor(L, i, path, e));
    for (int i = 0; i < L->nfiles; i++) {
        char want[CK_FILE_MAX];
        snprintf(want, sizeof want, "rank_%05d.h5", L->f[i].rank);
        if (L->f[i].rank < 0 || strcmp(want, L->f[i].name) != 0 || (i > 0 && L->f[i - 1].rank >= L->f[i].rank))
            return mp_err_set(e, MP_ECHECK, "%s: files[%d]: bad rank file entry '%.32s'", path, i, L->f[i].name);
    }
    return MP_OK;
}

/* Every structural rule of the layout (docs/FORMAT.md "Validation"). */
static mp_code validate(ck_layout *L, const char *path, mp_err *e) {
    int64_t next_box = 0, slabs_seen = 0;
    MP_TRY(validate_head(L, path, e));
    for (int i = 0; i < L->ntensors; i++) {
        ck_tensor *T = &L->t[i];
        if (T->box_first != next_box || T->nboxes < 0 || T->nboxes > L->nboxes - T->box_first)
            return mp_err_set(e, MP_ECHECK, "%s: tensor %s: boxes [%lld, +%lld) do not follow the previous tensor's",
                              path, T->name, (long long)T->box_first, (long long)T->nboxes);
        next_box += T->nboxes;
        for (int64_t j = T->box_first; j < T->box_first + T->nboxes; j++) {
            MP_TRY(validate_box(L, i, j, path, e));
            /* counted against what is left, so crafted counts can neither overflow nor exceed the table */
            if (L->b[j].nslabs < 0 || L->b[j].nslabs > L->nslabs - slabs_seen)
                return mp_err_set(e, MP_ECHECK, "%s: the boxes list more than the %lld slab checksums the index holds",
                                  path, (long long)L->nslabs);
            slabs_seen += L->b[j].nslabs;
        }
    }
    if (next_box != L->nboxes)
        return mp_err_set(e, MP_ECHECK, "%s: %d boxes, but the tensors list %lld", path, L->nboxes, (long long)next_box);
    if (slabs_seen != L->nslabs)
        return mp_err_set(e, MP_ECHECK, "%s: %lld slab checksums, but the boxes list %lld", path,
                          (long long)L->nslabs, (long long)slabs_seen);
    ck_layout_index(L);
    for (int t = 0; t < L->ntensors; t++) {
        mp_code rc = ck_layout_check_tensor(L, t, 0, e);
        if (rc != MP_OK) return mp_err_wrap(e, "%s", path);
    }
    return MP_OK;
}

/* 1 if box B's tensor/file indices, and its row's tensor name, file name and rank columns, agree with
 * the tensor and file tables (tensor or file NULL: a column without its NUL). */
static int box_row_ok(const ck_layout *L, const ck_box *B, const char *tensor, const char *file, int32_t rank) {
    return B->tensor >= 0 && B->tensor < L->ntensors && B->file >= 0 && B->file < L->nfiles && tensor &&
           !strcmp(tensor, L->t[B->tensor].name) && file && !strcmp(file, L->f[B->file].name) &&
           rank == L->f[B->file].rank;
}

/* A read-only file access property list over the in-memory file image image[0, bytes) (HDF5's core
 * driver, no backing store; HDF5 copies the image). < 0 on failure. */
static hid_t image_fapl(const void *image, size_t bytes) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (p < 0) return p;
    if (H5Pset_fapl_core(p, 1 << 16, 0) < 0 || H5Pset_file_image(p, (void *)image, bytes) < 0) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

/* ckpt_internal.h: tests lower it to read as an older build. */
int ck_read_version_max = CKPT_FORMAT_VERSION_MAX;

/* Reads the root attributes of the index file f into L (format version, created_utc, step, world size,
 * zstd level) and the stored index checksum into *want_hash; refuses another format, a version this
 * build does not read, and values out of range. */
static mp_code read_root(hid_t f, const char *path, ck_layout *L, uint64_t *want_hash, mp_err *e) {
    char fmt[64] = "";
    int64_t ver = 0, world = 0, zl = 0;
    if (ck_attr_read_str(f, "format", fmt, sizeof fmt) < 0 || strcmp(fmt, CKPT_FORMAT_NAME) != 0)
        return ck_h5_err(e, MP_ECHECK, "%s: not a meshpoint checkpoint index (format attribute '%s')", path, fmt);
    if (ck_attr_read_i64(f, "format_version", &ver, 1) < 0)
        return ck_h5_err(e, MP_ECHECK, "%s: no format_version attribute", path);
    if (ver < 1 || ver > ck_read_version_max)
        return mp_err_set(e, MP_ECHECK,
                          "%s: format version %lld; this build reads versions 1..%d (a newer meshpoint wrote it?)",
                          path, (long long)ver, ck_read_version_max);
    L->version = (int)ver;
    /* informational (not in the checksum): kept so that a rebuilt index (repair-views) keeps it */
    if (ck_attr_read_str(f, "created_utc", L->created_utc, sizeof L->created_utc) < 0) {
        L->created_utc[0] = '\0';
        ck_h5_clear();
    }
    if (ck_attr_read_i64(f, "step", &L->step, 1) < 0 || ck_attr_read_i64(f, "world_size", &world, 1) < 0 ||
        ck_attr_read_i64(f, "zstd_level", &zl, 1) < 0 || ck_attr_read_u64(f, "index_checksum", want_hash, 1) < 0)
        return ck_h5_err(e, MP_ECHECK, "%s: missing or bad root attributes", path);
    if (world < 1 || world > INT32_MAX || zl < 0 || zl > 22)
        return mp_err_set(e, MP_ECHECK, "%s: world_size %lld or zstd_level %lld out of range", path,
                          (long long)world, (long long)zl);
    if (L->step < 0)   /* the writer refuses negative steps */
        return mp_err_set(e, MP_ECHECK, "%s: root attribute step = %lld out of range (must be >= 0)", path,
                          (long long)L->step);
    L->world = (int)world;
    L->zstd_level = (int)zl;
    return MP_OK;
}

/* Copies box row i of the boxes table (rows of place box_place(L->version) of the box record schema)
 * into L->b[i], its dataset paths (NUL-terminated: checked) into the pool (*pool, B->path), and checks
 * it against the tensor and file tables. */
static mp_code copy_box_row(ck_layout *L, const void *rbv, int64_t i, ck_buf *pool, const char *path, mp_err *e) {
    ck_box *B = &L->b[i];
    unsigned place = box_place(L->version);
    ck_boxrec r;
    ck_boxrec_get(place, (const unsigned char *)rbv + ck_boxrec_size(place) * (size_t)i, &r);
    B->tensor = (int)r.tensor_index;
    B->file = (int)r.file_index;
    memcpy(B->off, r.offset, sizeof B->off);
    memcpy(B->shp, r.shape, sizeof B->shp);
    B->checksum = r.checksum;
    B->slab_rows = r.slab_rows;
    B->slab_first = r.slab_first;
    B->nslabs = r.nslabs;
    B->tile_rows = r.tile_rows;
    B->tile_cols = r.tile_cols;
    B->ntiles = r.ntiles;
    B->tiles_checksum = r.tiles_checksum;
    const char *ds = r.dataset, *ts = place == CK_BR_IDX1 ? "" : r.tiles_dataset;   /* v1: no tiles path */
    if (!box_row_ok(L, B, r.tensor, r.file, (int32_t)r.rank))
        return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld]: tensor/file columns disagree", path, (long long)i);
    if (!ds || !ts) return mp_err_set(e, MP_ECHECK, "%s: boxes[%lld]: dataset path not NUL-terminated", path, (long long)i);
    B->path = (int64_t)pool->n;
    ck_buf_put(pool, ds, strlen(ds) + 1);
    ck_buf_put(pool, ts, strlen(ts) + 1);
    return MP_OK;
}

/* Copies the rows of the tensor, file and box tables (L->ntensors, nfiles, nboxes of them) into L's
 * arrays, allocated by the caller, checking each tensor's name and dtype and each box row. */
static mp_code copy_tensors(ck_layout *L, const rec_tensor *rt, const char *path, mp_err *e);
static mp_code copy_rows(ck_layout *L, const rec_tensor *rt, const void *rbv, const rec_file *rf, const char *path,
                         mp_err *e) {
    mp_code rc = copy_tensors(L, rt, path, e);
    for (int64_t i = 0; i < L->nfiles && rc == MP_OK; i++) {
        L->f[i].rank = rf[i].rank;
        memcpy(L->f[i].name, rf[i].name, sizeof L->f[i].name);
        L->f[i].name[CK_FILE_MAX - 1] = '\0';
        L->f[i].nboxes = rf[i].nboxes;
        L->f[i].bytes = rf[i].bytes;
    }
    ck_buf pool = {0};
    for (int64_t i = 0; i < L->nboxes && rc == MP_OK; i++) rc = copy_box_row(L, rbv, i, &pool, path, e);
    L->paths = pool.p;
    L->paths_bytes = pool.n;
    return rc;
}

/* Copies the tensor rows rt[L->ntensors] into L->t (allocated), checking names and dtypes. */
static mp_code copy_tensors(ck_layout *L, const rec_tensor *rt, const char *path, mp_err *e) {
    mp_code rc = MP_OK;
    for (int64_t i = 0; i < L->ntensors && rc == MP_OK; i++) {
        ck_tensor *T = &L->t[i];
        int dt = mp_dtype_parse(rt[i].dtype[7] ? "?" : rt[i].dtype);
        if (!memchr(rt[i].name, 0, sizeof rt[i].name) || dt < 0)
            rc = mp_err_set(e, MP_ECHECK, "%s: tensors[%lld]: bad name or dtype", path, (long long)i);
        memcpy(T->name, rt[i].name, sizeof T->name);
        T->name[CKPT_NAME_MAX] = '\0';
        T->dtype = (mp_dtype)(dt < 0 ? 0 : dt);
        T->ndim = rt[i].ndim;
        memcpy(T->shape, rt[i].shape, sizeof T->shape);
        T->box_first = rt[i].box_first;
        T->nboxes = rt[i].nboxes;
    }
    return rc;
}

/* Reads the version-3 tables of f: tensors and files into L (their rows as stored: the tensors' box
 * ranges are checked after the runs are expanded), the runs into *runs (*nruns). */
static mp_code read_layout3(hid_t f, const char *path, ck_layout *L, ck_run **runs, int64_t *nruns, mp_err *e) {
    rec_tensor *rt = NULL;
    rec_file3 *rf = NULL;
    int64_t nt = 0, nf = 0;
    hid_t tt = tensor_mtype(), rtt = run_mtype(), fit = file_mtype(3);
    herr_t h1 = read_table(f, "layout/tensors", tt, sizeof *rt, (void **)&rt, &nt);
    herr_t h2 = h1 < 0 ? -1 : read_table(f, "layout/runs", rtt, sizeof(ck_run), (void **)runs, nruns);
    herr_t h3 = h2 < 0 ? -1 : read_table(f, "layout/files", fit, sizeof *rf, (void **)&rf, &nf);
    H5Tclose(tt);
    H5Tclose(rtt);
    H5Tclose(fit);
    mp_code rc = MP_OK;
    if (h3 < 0) {
        rc = ck_h5_err(e, MP_ECHECK, "%s: cannot read the layout tables (format version %d)", path, L->version);
    } else {
        L->ntensors = (int)nt;
        L->nfiles = (int)nf;
        L->t = mp_xcalloc(sizeof *L->t * (size_t)(nt + 1));
        L->b = mp_xcalloc(sizeof *L->b);
        L->f = mp_xcalloc(sizeof *L->f * (size_t)(nf + 1));
        L->slabs = mp_xmalloc(sizeof(uint64_t));
        rc = copy_tensors(L, rt, path, e);
        for (int64_t i = 0; i < nf; i++) {
            L->f[i].rank = rf[i].rank;
            memcpy(L->f[i].name, rf[i].name, sizeof L->f[i].name);
            L->f[i].name[CK_FILE_MAX - 1] = '\0';
            L->f[i].nboxes = rf[i].nboxes;
            L->f[i].bytes = rf[i].bytes;
            L->f[i].boxes_checksum = rf[i].boxes_checksum;
        }
    }
    free(rt);
    free(rf);
    return rc;
}

/* Reads the layout tables of f (tensors, boxes, files; version 1 also the slab checksums) into L. */
static mp_code read_layout(hid_t f, const char *path, ck_layout *L, mp_err *e) {
    rec_tensor *rt = NULL;
    void *rbv = NULL;
    rec_file *rf = NULL;
    int64_t nt = 0, nb = 0, nf = 0, ns = 0;
    size_t brec = ck_boxrec_size(box_place(L->version));
    hid_t tt = tensor_mtype(), bt = ck_boxrec_type(box_place(L->version)), fit = file_mtype(L->version);
    herr_t h1 = read_table(f, "layout/tensors", tt, sizeof *rt, (void **)&rt, &nt);
    herr_t h2 = h1 < 0 ? -1 : read_table(f, "layout/boxes", bt, brec, &rbv, &nb);
    herr_t h3 = h2 < 0 ? -1 : read_table(f, "layout/files", fit, sizeof *rf, (void **)&rf, &nf);
    herr_t h4 = h3 < 0 || L->version != 1 ? h3
                                           : read_table(f, "layout/slab_checksums", H5T_NATIVE_UINT64,
                                                        sizeof(uint64_t), (void **)&L->slabs, &ns);
    H5Tclose(tt);
    H5Tclose(bt);
    H5Tclose(fit);
    mp_code rc;
    if (h4 < 0 || nt > INT32_MAX || nb > INT32_MAX || nf > INT32_MAX) {
        rc = ck_h5_err(e, MP_ECHECK, "%s: cannot read the layout tables (format version %d)", path, L->version);
    } else {
        L->ntensors = (int)nt;
        L->nboxes = (int)nb;
        L->nfiles = (int)nf;
        L->nslabs = ns;
        L->t = mp_xcalloc(sizeof *L->t * (size_t)(nt + 1));
        L->b = mp_xcalloc(sizeof *L->b * (size_t)(nb + 1));
        L->f = mp_xcalloc(sizeof *L->f * (size_t)(nf + 1));
        rc = copy_rows(L, rt, rbv, rf, path, e);
    }
    free(rt);
    free(rbv);
    free(rf);
    return rc;
}

/* Reads the /meta group of f into L's keys and values, in the canonical (strcmp) order of the keys that
 * the writer hashed them in. */
static mp_code read_meta(hid_t f, const char *path, ck_layout *L, mp_err *e) {
    hid_t g = H5Gopen2(f, "meta", H5P_DEFAULT);
    if (g < 0) return ck_h5_err(e, MP_ECHECK, "%s: no /meta group", path);
    meta_ctx mc = {.L = L, .g = g, .rc = MP_OK, .e = e, .path = path};
    hsize_t idx = 0;
    herr_t hr = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, meta_cb, &mc);
    H5Gclose(g);
    if (mc.rc != MP_OK) return mc.rc;
    if (hr < 0) return ck_h5_err(e, MP_ECHECK, "%s: reading /meta", path);
    char **pairs = mp_xmalloc(sizeof(char *) * 2 * (size_t)(L->nmeta + 1));
    for (int i = 0; i < L->nmeta; i++) { pairs[2 * i] = L->keys[i]; pairs[2 * i + 1] = L->vals[i]; }
    qsort(pairs, (size_t)L->nmeta, 2 * sizeof(char *), cmp_str);
    for (int i = 0; i < L->nmeta; i++) { L->keys[i] = pairs[2 * i]; L->vals[i] = pairs[2 * i + 1]; }
    free(pairs);
    return MP_OK;
}

/* Version 3 after the root attributes: reads the tables and metadata, checks the index checksum (over
 * the runs as stored; not compared when check_sum is 0), then the tensors and files, then the runs
 * against them tensor by tensor (ck_runs_check: every rule of the boxes), and expands the runs into
 * boxes (ckpt/runs.c), or, runs_out not NULL, gives them to the caller unexpanded (L->b NULL). */
static mp_code read_index3(hid_t f, const char *path, int check_sum, uint64_t want_hash, ck_layout *L, ck_run **runs_out,
                           int64_t *nruns_out, mp_err *e) {
    ck_run *runs = NULL;
    int64_t nruns = 0;
    mp_code rc = read_layout3(f, path, L, &runs, &nruns, e);
    if (rc == MP_OK) rc = read_meta(f, path, L, e);
    if (rc == MP_OK) {
        uint64_t got = hash_v3(L, runs, nruns);
        if (check_sum && got != want_hash)
            rc = mp_err_set(e, MP_ECHECK,
                            "%s: index checksum mismatch (stored %016llx, computed %016llx): the index is corrupt",
                            path, (unsigned long long)want_hash, (unsigned long long)got);
    }
    if (rc == MP_OK) rc = validate_head(L, path, e);
    if (rc == MP_OK) rc = ck_runs_check(L, runs, nruns, path, e);   /* every rule, tensor by tensor */
    if (rc == MP_OK && !runs_out) {
        ck_runs_expand(L, runs, nruns);
        ck_layout_index(L);
    }
    if (rc == MP_OK && runs_out) {
        *runs_out = runs;
        *nruns_out = nruns;
    } else {
        free(runs);
    }
    return rc;
}

/* Reads and validates index.h5 of format version 1 to 4 (docs/FORMAT.md); refuses other versions.
 * The body of ck_index_read (image NULL: the file at path), ck_index_read_image (image[0, image_bytes),
 * path only names it) and ck_index_read_runs (runs_out not NULL: a v3 index's runs are returned, not
 * expanded); check_sum 0 computes the index checksum without comparing it. */
static mp_code index_read(const char *path, const void *image, size_t image_bytes, int check_sum, ck_layout *L,
                          ck_run **runs_out, int64_t *nruns_out, mp_err *e) {
    ck_h5_init();
    ck_h5_clear();
    memset(L, 0, sizeof *L);
    if (!image && !mp_fs_exists(path))
        return mp_err_set(e, MP_ECHECK, "%s is missing: not a complete checkpoint (an interrupted save?)", path);
    hid_t fapl = image ? image_fapl(image, image_bytes) : ck_h5_fapl(0);
    hid_t f = fapl < 0 ? -1 : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        /* permission, I/O error, a directory in its place: the cause says it; else the file is damaged */
        if (ck_h5_cause_errno()) return ck_h5_err(e, MP_ECHECK, "%s: cannot be opened", path);
        return ck_h5_err(e, MP_ECHECK, "%s: not a readable HDF5 file (corrupt or truncated index)", path);
    }
    uint64_t want_hash = 0;
    mp_code rc = read_root(f, path, L, &want_hash, e);
    if (rc == MP_OK && L->version >= 3) {
        rc = read_index3(f, path, check_sum, want_hash, L, runs_out, nruns_out, e);
    } else {
        if (rc == MP_OK) rc = read_layout(f, path, L, e);
        if (rc == MP_OK) rc = read_meta(f, path, L, e);
    }
    if (rc == MP_OK && L->version < 3) {
        uint64_t got = ck_layout_hash(L);
        if (check_sum && got != want_hash)
            rc = mp_err_set(e, MP_ECHECK,
                            "%s: index checksum mismatch (stored %016llx, computed %016llx): the index is corrupt",
                            path, (unsigned long long)want_hash, (unsigned long long)got);
        else
            rc = validate(L, path, e);
    }
    H5Fclose(f);
    ck_h5_clear();
    if (rc != MP_OK) ck_layout_free(L);
    return rc;
}

static int64_t g_index_reads, g_index_bytes;   /* ckpt_index_reads: every thread's, atomically */

mp_code ck_index_read_runs(const char *path, ck_layout *L, ck_run **runs, int64_t *nruns, mp_err *e) {
    __atomic_add_fetch(&g_index_reads, 1, __ATOMIC_RELAXED);
    struct stat sb;
    if (stat(path, &sb) == 0) __atomic_add_fetch(&g_index_bytes, (int64_t)sb.st_size, __ATOMIC_RELAXED);
    if (runs) {
        *runs = NULL;
        *nruns = 0;
    }
    return index_read(path, NULL, 0, 1, L, runs, nruns, e);
}

mp_code ck_index_read(const char *path, ck_layout *L, mp_err *e) { return ck_index_read_runs(path, L, NULL, NULL, e); }

void ckpt_index_reads(int64_t *reads, int64_t *bytes) {
    if (reads) *reads = __atomic_load_n(&g_index_reads, __ATOMIC_RELAXED);
    if (bytes) *bytes = __atomic_load_n(&g_index_bytes, __ATOMIC_RELAXED);
}

mp_code ck_index_read_image(const void *image, size_t bytes, const char *name, int check_sum, ck_layout *L,
                            mp_err *e) {
    return index_read(name, image, bytes, check_sum, L, NULL, NULL, e);
}
