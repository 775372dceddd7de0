/*
 * ckpt/boxtab.c — the /boxes table of a format-v3 rank file (docs/FORMAT.md, "Rank file").
 *
 * Version 3 keeps box checksums and tile geometry out of index.h5 (whose size must not grow with a row
 * of ~1 KiB per box): every rank file lists its own boxes in /boxes, one packed row per box (ck_boxrow:
 * tensor name, k of its dataset /<name>/box_<k>, offset, shape, checksum, tile_rows, tile_cols, ntiles,
 * tiles_checksum), sorted by tensor name then offset. The index's /layout/files row of the file holds
 * boxes_checksum = XXH3-64 of the table's bytes, so a flipped byte in the table, or a rank file of
 * another save in its place, is caught when the table is read, naming the file. The reader reads a
 * file's table once, when it first needs one of its boxes (ckpt/reader.c), checks it here against the
 * index and the runs, and only then uses its checksums.
 *
 * The row is a packed struct whose memory type is also its file type (little-endian members, no
 * padding), so the bytes hashed are the bytes stored. The tensor name, not the index's tensor number,
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

/* The compound type of a row, packed (memory = file type). Caller closes. */
static hid_t row_type(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ck_boxrow));
    hid_t s = ck_h5_str_type(CKPT_NAME_MAX + 1), a = ck_h5_dims_type(H5T_STD_I64LE);
    H5Tinsert(t, "tensor", HOFFSET(ck_boxrow, tensor), s);
    H5Tinsert(t, "k", HOFFSET(ck_boxrow, k), H5T_STD_I32LE);
    H5Tinsert(t, "offset", HOFFSET(ck_boxrow, offset), a);
    H5Tinsert(t, "shape", HOFFSET(ck_boxrow, shape), a);
    H5Tinsert(t, "checksum", HOFFSET(ck_boxrow, checksum), H5T_STD_U64LE);
    H5Tinsert(t, "tile_rows", HOFFSET(ck_boxrow, tile_rows), H5T_STD_I64LE);
    H5Tinsert(t, "tile_cols", HOFFSET(ck_boxrow, tile_cols), H5T_STD_I64LE);
    H5Tinsert(t, "ntiles", HOFFSET(ck_boxrow, ntiles), H5T_STD_I64LE);
    H5Tinsert(t, "tiles_checksum", HOFFSET(ck_boxrow, tiles_checksum), H5T_STD_U64LE);
    H5Tclose(s);
    H5Tclose(a);
    return t;
}

int ck_boxrow_cmp(const void *a, const void *b) {
    const ck_boxrow *x = a, *y = b;
    int c = strncmp(x->tensor, y->tensor, sizeof x->tensor);
    if (c) return c;
    int64_t xo[CKPT_MAX_DIMS], yo[CKPT_MAX_DIMS];
    memcpy(xo, x->offset, sizeof xo);
    memcpy(yo, y->offset, sizeof yo);
    return ck_off_cmp(xo, yo);
}

uint64_t ck_boxtab_hash(const ck_boxrow *rows, int64_t n) {
    return XXH3_64bits(rows, sizeof(ck_boxrow) * (size_t)n);
}

mp_code ck_boxtab_write(hid_t f, const ck_boxrow *rows, int64_t n, const char *path, mp_err *e) {
    hid_t t = row_type();
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

mp_code ck_boxtab_read(hid_t f, const char *path, ck_boxrow **rows, int64_t *n, mp_err *e) {
    *rows = NULL;
    *n = 0;
    hid_t d = H5Dopen2(f, "boxes", H5P_DEFAULT);
    if (d < 0) return ck_h5_err(e, MP_ECHECK, "rank file %s: no /boxes table (not a version 3 rank file?)", path);
    hid_t t = row_type(), ft = H5Dget_type(d), sp = H5Dget_space(d);
    hsize_t dims[1] = {0};
    /* exactly the row type (a table of other members would read as zeros) with stored bytes for every
     * row (unstored rows read as fill values), at most INT32_MAX rows */
    int ok = ft >= 0 && sp >= 0 && H5Tequal(ft, t) > 0 && H5Sget_simple_extent_ndims(sp) == 1 &&
             H5Sget_simple_extent_dims(sp, dims, NULL) == 1 && dims[0] <= INT32_MAX &&
             H5Dget_storage_size(d) >= dims[0] * sizeof(ck_boxrow);
    mp_code rc = MP_OK;
    if (!ok) {
        rc = ck_h5_err(e, MP_ECHECK, "rank file %s: /boxes is not a table of box rows (damaged?)", path);
    } else {
        ck_boxrow *buf = mp_xcalloc(sizeof *buf * (size_t)(dims[0] + 1));
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

/* 0 if row R describes box B of tensor T (name, offset), < 0 / > 0 if it sorts before / after it. */
static int row_vs_box(const ck_boxrow *R, const ck_tensor *T, const ck_box *B) {
    int c = strncmp(R->tensor, T->name, sizeof R->tensor);
    if (c) return c;
    int64_t ro[CKPT_MAX_DIMS];
    memcpy(ro, R->offset, sizeof ro);
    return ck_off_cmp(ro, B->off);
}

/* Checks the matched row R of box B (shape, k, tile fields) and copies its checksums and tiles into B. */
static mp_code take_row(ck_layout *L, ck_box *B, const ck_boxrow *R, const char *path, mp_err *e) {
    const ck_tensor *T = &L->t[B->tensor];
    int64_t shp[CKPT_MAX_DIMS], tr, tc, nt;
    memcpy(shp, R->shape, sizeof shp);
    memcpy(&tr, &R->tile_rows, sizeof tr);
    memcpy(&tc, &R->tile_cols, sizeof tc);
    memcpy(&nt, &R->ntiles, sizeof nt);
    int32_t k;
    memcpy(&k, &R->k, sizeof k);
    int64_t rows = B->shp[0], cols = T->ndim >= 2 ? B->shp[1] : 1;
    int ok = !L->paths && !memcmp(shp, B->shp, sizeof shp) && k == B->k && tr >= 1 && tr <= rows && tc >= 1 &&
             tc <= cols && nt == ck_tile_count(T->ndim, B->shp, tr, tc);
    if (!ok) {
        char bs[256];
        ck_box_str(bs, sizeof bs, T->ndim, B->off, B->shp);
        return mp_err_set(e, MP_ECHECK, "rank file %s: its /boxes row of box %s of tensor %s disagrees with the index "
                          "(shape, dataset number or tile fields)", path, bs, T->name);
    }
    memcpy(&B->checksum, &R->checksum, sizeof B->checksum);
    memcpy(&B->tiles_checksum, &R->tiles_checksum, sizeof B->tiles_checksum);
    B->tile_rows = tr;
    B->tile_cols = tc;
    B->ntiles = nt;
    return MP_OK;
}

mp_code ck_boxtab_apply(ck_layout *L, int fi, const int *ids, int nids, const ck_boxrow *rows, int64_t n,
                        const char *path, mp_err *e) {
    const ck_file *F = &L->f[fi];
    uint64_t h = ck_boxtab_hash(rows, n);
    if (h != F->boxes_checksum || n != F->nboxes)
        return mp_err_set(e, MP_ECHECK,
                          "rank file %s: its /boxes table (%lld rows, XXH3 %016llx) is not the one the index lists "
                          "(%lld rows, %016llx): a damaged table, or a rank file of another save",
                          path, (long long)n, (unsigned long long)h, (long long)F->nboxes,
                          (unsigned long long)F->boxes_checksum);
    for (int64_t i = 0; i < n; i++)
        if (!memchr(rows[i].tensor, 0, sizeof rows[i].tensor) || (i > 0 && ck_boxrow_cmp(&rows[i - 1], &rows[i]) >= 0))
            return mp_err_set(e, MP_ECHECK, "rank file %s: /boxes row %lld is out of order or malformed", path,
                              (long long)i);
    int64_t at = 0;
    for (int k = 0; k < nids; k++) {
        ck_box *B = &L->b[ids[k]];
        const ck_tensor *T = &L->t[B->tensor];
        while (at < n && row_vs_box(&rows[at], T, B) < 0) at++;
        if (at == n || row_vs_box(&rows[at], T, B) != 0) {
            char bs[256];
            ck_box_str(bs, sizeof bs, T->ndim, B->off, B->shp);
            return mp_err_set(e, MP_ECHECK, "rank file %s: box %s of tensor %s, which the index places there, is not "
                              "in its /boxes table", path, bs, T->name);
        }
        MP_TRY(take_row(L, B, &rows[at], path, e));
        at++;
    }
    return MP_OK;
}
