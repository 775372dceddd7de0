/*
 * ckpt/index.c — index.h5: writing it (rank 0, last step of a save) and reading + validating it.
 * The files: this one holds the record structs' helpers, the index checksum and the tables' HDF5
 * types (shared through ckpt/index_internal.h); ckpt/index_write.c writes an index and the views;
 * ckpt/index_read.c reads and validates one.
 *
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
#include "ckpt/index_internal.h"
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
void ck_ix_box_rec(const ck_layout *L, const ck_box *B, char *ds, char *ts, ck_boxrec *r) {
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
unsigned ck_ix_box_place(int v) { return v == 1 ? CK_BR_IDX1 : CK_BR_IDX2; }

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
        ck_ix_box_rec(L, &L->b[i], ds, ts, &r);
        ck_boxrec_hash(s, ck_ix_box_place(L->version), &r);
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
uint64_t ck_ix_hash_v3(const ck_layout *L, const ck_run *runs, int64_t nruns) {
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
    uint64_t h = ck_ix_hash_v3(L, runs, n);
    free(runs);
    return h;
}

/* --------------------------------------------------------------------------------- HDF5 types */

/* Memory compound types of the tensor, file and run tables (caller closes; the box rows' types come
 * from the box record schema, ck_boxrec_type). */
hid_t ck_ix_tensor_mtype(void) {
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
hid_t ck_ix_file_mtype(int v) {
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
hid_t ck_ix_run_mtype(void) {
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
herr_t ck_ix_write_table(hid_t loc, const char *path, hid_t mt, const void *data, hsize_t n) {
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
herr_t ck_ix_read_table(hid_t loc, const char *path, hid_t mt, size_t rec, void **out, int64_t *n) {
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
