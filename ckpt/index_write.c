/*
 * ckpt/index_write.c — writing index.h5 (rank 0, the last step of a save: tables, metadata, views)
 * and a view file (ck_view_write). The format: ckpt/index.c's top comment and docs/FORMAT.md.
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
    hid_t tt = ck_ix_tensor_mtype();
    char *mp = ck_fmt("layout/%s", mid);
    mp_code rc = MP_OK;
    if (ck_ix_write_table(f, "layout/tensors", tt, rt, (hsize_t)L->ntensors) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: /layout/tensors", path);
    else if (ck_ix_write_table(f, mp, mt, rows, n) < 0)
        rc = ck_h5_err(e, MP_EIO, "writing %s: /%s", path, mp);
    else if (ck_ix_write_table(f, "layout/files", ft, rf, (hsize_t)L->nfiles) < 0)
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
    mp_code rc = write_layout(f, path, L, rt, "runs", ck_ix_run_mtype(), runs, (hsize_t)nr, ck_ix_file_mtype(3), rf, e);
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
        ck_ix_box_rec(L, &L->b[i], ds, ts, &r);
        ck_boxrec_put(CK_BR_IDX2, &r, rb + row * (size_t)i);
    }
    for (int i = 0; i < L->nfiles; i++) {
        rf[i].rank = L->f[i].rank;
        snprintf(rf[i].name, sizeof rf[i].name, "%s", L->f[i].name);
        rf[i].nboxes = L->f[i].nboxes;
        rf[i].bytes = L->f[i].bytes;
    }
    mp_code rc = write_layout(f, path, L, rt, "boxes", ck_boxrec_type(CK_BR_IDX2), rb, (hsize_t)L->nboxes, ck_ix_file_mtype(2), rf, e);
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
