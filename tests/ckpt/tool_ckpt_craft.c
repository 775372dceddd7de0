/*
 * tests/ckpt/tool_ckpt_craft.c — rewrites one value of a checkpoint's index.h5 in place, as a hostile or
 * damaged file would hold it, for the crafted-input tests (tests/crafted.sh, tests/ckpt/test_crafted.c):
 *
 *   tool_ckpt_craft INDEX meta KEY VALUE [--stale]         metadata entry /meta/KEY := VALUE (text)
 *   tool_ckpt_craft INDEX shape TENSOR DIM VALUE [--stale] /layout/tensors row TENSOR: shape[DIM] := VALUE
 *   tool_ckpt_craft INDEX step VALUE [--stale]             root attribute step := VALUE
 *
 * The index checksum (docs/FORMAT.md "Index checksum") is recomputed over the changed content with
 * ck_layout_hash, so a reader gets past the checksum to the range checks; --stale leaves the old checksum,
 * so the change must be caught by it. The index must be valid before the change (it is read with
 * ck_index_read first). Exit status 0 done, 2 usage or failure (message on stderr).
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"

/* Prints the message and exits 2. */
static void die(const char *what, const char *detail) {
    fprintf(stderr, "tool_ckpt_craft: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

/* A decimal int64 (strtoll, whole string) or die naming what. */
static int64_t parse_i64(const char *s, const char *what) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end) die("not an integer", what);
    return (int64_t)v;
}

/* /meta/key := value: the dataset is replaced by a fixed-length UTF-8 string as the writer makes it. */
static void write_meta(hid_t f, const char *key, const char *value) {
    char *path = ck_fmt("meta/%s", key);
    if (H5Lexists(f, path, H5P_DEFAULT) > 0 && H5Ldelete(f, path, H5P_DEFAULT) < 0) die("deleting", path);
    size_t n = strlen(value);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n ? n : 1);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(f, path, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, n ? value : "") < 0) die("writing", path);
    H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(t);
    free(path);
}

/* Row t of /layout/tensors: shape[dim] := v (through a compound of the shape member alone; HDF5 matches
 * members by name and leaves the others as they are). */
static void write_shape(hid_t f, int t, int dim, int64_t v) {
    typedef struct { int64_t shape[CKPT_MAX_DIMS]; } rec;
    hsize_t four = CKPT_MAX_DIMS;
    hid_t at = H5Tarray_create2(H5T_NATIVE_INT64, 1, &four);
    hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(rec));
    H5Tinsert(mt, "shape", HOFFSET(rec, shape), at);
    hid_t d = H5Dopen2(f, "layout/tensors", H5P_DEFAULT);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    hssize_t n = fs < 0 ? -1 : H5Sget_simple_extent_npoints(fs);
    if (n <= t) die("no such tensor row", NULL);
    rec *rows = mp_xcalloc(sizeof *rows * (size_t)n);
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0) die("reading", "/layout/tensors");
    rows[t].shape[dim] = v;
    if (H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0) die("writing", "/layout/tensors");
    free(rows);
    H5Sclose(fs);
    H5Dclose(d);
    H5Tclose(mt);
    H5Tclose(at);
}

/* Root attribute name := v (an existing scalar attribute, rewritten in its own type). */
static void write_attr(hid_t f, const char *name, hid_t mtype, const void *v) {
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, mtype, v) < 0) die("writing attribute", name);
    H5Aclose(a);
}

/* See the top of this file: reads INDEX, applies the change in memory (for the checksum), writes it. */
int main(int argc, char **argv) {
    int stale = argc > 1 && !strcmp(argv[argc - 1], "--stale");
    int nargs = argc - stale;
    if (nargs < 4) die("usage: INDEX meta KEY VALUE | INDEX shape TENSOR DIM VALUE | INDEX step VALUE [--stale]", NULL);
    const char *index = argv[1], *what = argv[2];
    ck_layout L;
    mp_err e;
    if (ck_index_read(index, &L, &e) != MP_OK) die("the index must be valid before crafting", e.msg);
    /* the change, in memory first (for the checksum) */
    int t = -1, dim = 0;
    int64_t v = 0;
    if (!strcmp(what, "meta") && nargs == 5) {
        int k = 0;
        while (k < L.nmeta && strcmp(L.keys[k], argv[3])) k++;
        if (k == L.nmeta) die("no such metadata key (adding keys is not supported)", argv[3]);
        free(L.vals[k]);
        L.vals[k] = mp_strdup(argv[4]);
    } else if (!strcmp(what, "shape") && nargs == 6) {
        for (int i = 0; i < L.ntensors && t < 0; i++)
            if (!strcmp(L.t[i].name, argv[3])) t = i;
        if (t < 0) die("no such tensor", argv[3]);
        dim = (int)parse_i64(argv[4], "DIM");
        if (dim < 0 || dim >= CKPT_MAX_DIMS) die("DIM out of range", argv[4]);
        v = parse_i64(argv[5], "VALUE");
        L.t[t].shape[dim] = v;
    } else if (!strcmp(what, "step") && nargs == 4) {
        v = parse_i64(argv[3], "VALUE");
        L.step = v;
    } else {
        die("bad arguments (see the top of tests/ckpt/tool_ckpt_craft.c)", NULL);
    }
    uint64_t h = ck_layout_hash(&L);
    hid_t fapl = ck_h5_fapl(0);
    hid_t f = H5Fopen(index, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0) die("cannot open for writing", index);
    if (!strcmp(what, "meta")) write_meta(f, argv[3], argv[4]);
    else if (!strcmp(what, "shape")) write_shape(f, t, dim, v);
    else write_attr(f, "step", H5T_NATIVE_INT64, &v);
    if (!stale) write_attr(f, "index_checksum", H5T_NATIVE_UINT64, &h);
    if (H5Fclose(f) < 0) die("closing", index);
    ck_layout_free(&L);
    return 0;
}
