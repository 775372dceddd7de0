/*
 * ckpt/boxtab.c — the /boxes table of a format-v3 rank file (docs/FORMAT.md, "Rank file").
 *
 * Version 3 keeps box checksums and tile geometry out of index.h5 (whose size must not grow with a row
 * of ~1 KiB per box): every rank file lists its own boxes in /boxes, one packed row per box (the fields of
 * place CK_BR_FILE of the box record schema, ckpt/boxrec.c: tensor name, k of its dataset
 * /<name>/box_<k>, offset, shape, checksum, tile_rows, tile_cols, ntiles, tiles_checksum), sorted by tensor name then offset. The index's /layout/files row of the file holds
 * boxes_checksum = XXH3-64 of the table's bytes, so a flipped byte in the table, or a rank file of
 * another save in its place, is caught when the table is read, naming the file. The reader reads a
 * file's table once, when it first needs one of its boxes (ckpt/reader.c), checks it here against the
 * index and the runs, and only then uses its checksums.
 *
 * A row is ck_boxrec_size(CK_BR_FILE) packed bytes whose memory type is also its file type
 * (little-endian members, no padding), so the bytes hashed are the bytes stored; this file handles
 * rows as bytes and reads their fields through ck_boxrec_get. The tensor name, not the index's tensor number,
 * identifies the tensor: a rank writes its file before rank 0 knows every tensor of the save.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt/boxtab.c assumes a little-endian host (the table's bytes are little-endian)"
#endif

#define ROW ck_boxrec_size(CK_BR_FILE)

/* Row i of rows (ROW bytes each). */
static const unsigned char *row_at(const void *rows, int64_t i) { return (const unsigned char *)rows + ROW * (size_t)i; }

/* The tensor name and offset of a row (its tensor "" when its column has no NUL). */
static const char *row_key(const void *row, int64_t off[CKPT_MAX_DIMS]) {
    ck_boxrec r;
    ck_boxrec_get(CK_BR_FILE, row, &r);
    memcpy(off, r.offset, sizeof r.offset);
    return r.tensor ? r.tensor : "";
}

int ck_boxrow_cmp(const void *a, const void *b) {
    int64_t xo[CKPT_MAX_DIMS], yo[CKPT_MAX_DIMS];
    int c = strcmp(row_key(a, xo), row_key(b, yo));
    return c ? c : ck_off_cmp(xo, yo);
}

uint64_t ck_boxtab_hash(const void *rows, int64_t n) {
    return XXH3_64bits(rows, ROW * (size_t)n);
}

mp_code ck_boxtab_write(hid_t f, const void *rows, int64_t n, const char *path, mp_err *e) {
    hid_t t = ck_boxrec_type(CK_BR_FILE);
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = sp >= 0 ? H5Dcreate2(f, "boxes", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    herr_t hr = d < 0 ? -1 : n ? H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) : 0;
    if (d >= 0 && H5Dclose(d) < 0) hr = -1;
    if (sp >= 0) H5Sclose(sp);
    H5Tclose(t);
    if (hr < 0) return ck_h5_err(e, MP_EIO, "writing %s: the /boxes table", path);
    return MP_OK;
}

mp_code ck_boxtab_read(hid_t f, const char *path, void **rows, int64_t *n, mp_err *e) {
    *rows = NULL;
    *n = 0;
    hid_t d = H5Dopen2(f, "boxes", H5P_DEFAULT);
    if (d < 0) return ck_h5_err(e, MP_ECHECK, "rank file %s: no /boxes table (not a version 3 rank file?)", path);
    hid_t t = ck_boxrec_type(CK_BR_FILE), ft = H5Dget_type(d), sp = H5Dget_space(d);
    hsize_t dims[1] = {0};
    /* exactly the row type (a table of other members would read as zeros) with stored bytes for every
     * row (unstored rows read as fill values), at most INT32_MAX rows */
    int ok = ft >= 0 && sp >= 0 && H5Tequal(ft, t) > 0 && H5Sget_simple_extent_ndims(sp) == 1 &&
             H5Sget_simple_extent_dims(sp, dims, NULL) == 1 && dims[0] <= INT32_MAX &&
             H5Dget_storage_size(d) >= dims[0] * ROW;
    mp_code rc = MP_OK;
    if (!ok) {
        rc = ck_h5_err(e, MP_ECHECK, "rank file %s: /boxes is not a table of box rows (damaged?)", path);
    } else {
        unsigned char *buf = mp_xcalloc(ROW * (size_t)(dims[0] + 1));
        if (dims[0] && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            free(buf);
            rc = ck_h5_err(e, MP_ECHECK, "rank file %s: reading its /boxes table", path);
        } else {
            *rows = buf;
            *n = (int64_t)dims[0];
        }
    }
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Tclose(t);
    H5Dclose(d);
    return rc;
}

/* 0 if record R describes box B of tensor T (name, offset), < 0 / > 0 if it sorts before / after it. */
static int row_vs_box(const ck_boxrec *R, const ck_tensor *T, const ck_box *B) {
    int c = strcmp(R->tensor, T->name);
    return c ? c : ck_off_cmp(R->offset, B->off);
}

/* Checks the matched record R of box B (shape, k, tile fields) and copies its checksums and tiles into B. */
static mp_code take_row(ck_layout *L, ck_box *B, const ck_boxrec *R, const char *path, mp_err *e) {
    const ck_tensor *T = &L->t[B->tensor];
    int64_t rows = B->shp[0], cols = T->ndim >= 2 ? B->shp[1] : 1, tr = R->tile_rows, tc = R->tile_cols;
    int ok = !L->paths && !memcmp(R->shape, B->shp, sizeof B->shp) && R->k == B->k && tr >= 1 && tr <= rows &&
             tc >= 1 && tc <= cols && R->ntiles == ck_tile_count(T->ndim, B->shp, tr, tc);
    if (!ok) {
        char bs[256];
        ck_box_str(bs, sizeof bs, T->ndim, B->off, B->shp);
        return mp_err_set(e, MP_ECHECK, "rank file %s: its /boxes row of box %s of tensor %s disagrees with the index "
                          "(shape, dataset number or tile fields)", path, bs, T->name);
    }
    B->checksum = R->checksum;
    B->tiles_checksum = R->tiles_checksum;
    B->tile_rows = tr;
    B->tile_cols = tc;
    B->ntiles = R->ntiles;
    return MP_OK;
}

mp_code ck_boxtab_apply(ck_layout *L, int fi, const int *ids, int nids, const void *rows, int64_t n,
                        const char *path, mp_err *e) {
    const ck_file *F = &L->f[fi];
    uint64_t h = ck_boxtab_hash(rows, n);
    if (h != F->boxes_checksum || n != F->nboxes)
        return mp_err_set(e, MP_ECHECK,
                          "rank file %s: its /boxes table (%lld rows, XXH3 %016llx) is not the one the index lists "
                          "(%lld rows, %016llx): a damaged table, or a rank file of another save",
                          path, (long long)n, (unsigned long long)h, (long long)F->nboxes,
                          (unsigned long long)F->boxes_checksum);
    for (int64_t i = 0; i < n; i++) {
        ck_boxrec r;
        if (!ck_boxrec_get(CK_BR_FILE, row_at(rows, i), &r) ||
            (i > 0 && ck_boxrow_cmp(row_at(rows, i - 1), row_at(rows, i)) >= 0))
            return mp_err_set(e, MP_ECHECK, "rank file %s: /boxes row %lld is out of order or malformed", path,
                              (long long)i);
    }
    int64_t at = 0;
    ck_boxrec R = {0};
    for (int k = 0; k < nids; k++) {
        ck_box *B = &L->b[ids[k]];
        const ck_tensor *T = &L->t[B->tensor];
        while (at < n && (ck_boxrec_get(CK_BR_FILE, row_at(rows, at), &R), row_vs_box(&R, T, B) < 0)) at++;
        if (at == n || row_vs_box(&R, T, B) != 0) {
            char bs[256];
            ck_box_str(bs, sizeof bs, T->ndim, B->off, B->shp);
            return mp_err_set(e, MP_ECHECK, "rank file %s: box %s of tensor %s, which the index places there, is not "
                              "in its /boxes table", path, bs, T->name);
        }
        MP_TRY(take_row(L, B, &R, path, e));
        at++;
    }
    return MP_OK;
}
