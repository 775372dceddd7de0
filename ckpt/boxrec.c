/*
 * ckpt/boxrec.c — the box record schema: every field a saved box has anywhere, listed once.
 *
 * A box is written out in four places, each a subset of one field list (ck_bfields below, in the
 * order every place uses):
 *   CK_BR_IDX1  a format-v1 index's /layout/boxes row     (read only)
 *   CK_BR_IDX2  a format-v2 index's /layout/boxes row     (read; written by repair-views of a v2 checkpoint)
 *   CK_BR_FILE  a format-v3/v4 rank file's /boxes row     (ckpt/boxtab.c; its bytes are hashed into the
 *               index's boxes_checksum)
 *   CK_BR_WIRE  a save's box list sent to rank 0          (ckpt/writer_commit.c; in memory only)
 *   CK_BR_GROUP a member's box list sent to its file's leader (ckpt/group.c, files of several ranks;
 *               in memory only, before anything is written: no checksums)
 * and the v1/v2 index checksum (docs/FORMAT.md "Index checksum") hashes the fields marked `hashed` of
 * the IDX1/IDX2 row, in table order. From the table come the HDF5 compound type of each place
 * (ck_boxrec_type), a row's bytes and back (ck_boxrec_put / ck_boxrec_get), the hash input
 * (ck_boxrec_hash) and the wire encodings (ck_boxrec_send / ck_boxrec_recv, places WIRE and GROUP), so a field added to the
 * table reaches all of them; tests/ckpt/test_boxrec.c walks the table and checks that each does.
 * What is not derived: the mapping between the record (ck_boxrec, a flat value struct) and the
 * in-memory boxes (ck_box of a layout, wbox of a save), one function per direction beside each.
 *
 * A row is packed, with little-endian members, so its memory layout is its file layout: the compound
 * type serves as memory and file type, the bytes hashed (boxes_checksum) are the bytes stored. Strings
 * are fixed-width, NUL-padded; a field's `width` is its bytes in a row. On the wire every integer is
 * an int64, dims are CKPT_MAX_DIMS int64s and a string is its length (int64) then its bytes: a tensor
 * name costs its length, not its 256-byte column (the exchange is linear in the boxes of the world).
 */
#include "ckpt/ckpt_internal.h"
#include <assert.h>
#include <string.h>
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt/boxrec.c assumes a little-endian host (rows are little-endian and copied as bytes)"
#endif

#define AT(m) offsetof(ck_boxrec, m)
#define DIMS_BYTES (CKPT_MAX_DIMS * sizeof(int64_t))
enum { I1 = CK_BR_IDX1, I2 = CK_BR_IDX2, FL = CK_BR_FILE, WR = CK_BR_WIRE, GR = CK_BR_GROUP };

/* The schema. Order matters: it is the column order of every table and the hash order. */
const ck_bfield ck_bfields[] = {
    {"tensor", CK_BF_STR, AT(tensor), CKPT_NAME_MAX + 1, I1 | I2 | FL | WR | GR, 0},
    {"tensor_index", CK_BF_I32, AT(tensor_index), 4, I1 | I2, 1},
    {"rank", CK_BF_I32, AT(rank), 4, I1 | I2 | WR, 0},
    {"file_index", CK_BF_I32, AT(file_index), 4, I1 | I2, 1},
    {"file", CK_BF_STR, AT(file), CK_FILE_MAX, I1 | I2, 0},
    {"dataset", CK_BF_STR, AT(dataset), CK_DSET_MAX, I1 | I2, 1},
    {"k", CK_BF_I32, AT(k), 4, FL | WR, 0},
    {"dtype", CK_BF_I32, AT(dtype), 4, WR | GR, 0},
    {"ndim", CK_BF_I32, AT(ndim), 4, WR | GR, 0},
    {"global_shape", CK_BF_DIMS, AT(gshape), DIMS_BYTES, WR | GR, 0},
    {"offset", CK_BF_DIMS, AT(offset), DIMS_BYTES, I1 | I2 | FL | WR | GR, 1},
    {"shape", CK_BF_DIMS, AT(shape), DIMS_BYTES, I1 | I2 | FL | WR | GR, 1},
    {"checksum", CK_BF_U64, AT(checksum), 8, I1 | I2 | FL | WR, 1},
    {"slab_rows", CK_BF_I64, AT(slab_rows), 8, I1, 1},
    {"slab_first", CK_BF_I64, AT(slab_first), 8, I1, 1},
    {"nslabs", CK_BF_I64, AT(nslabs), 8, I1, 1},
    {"tile_rows", CK_BF_I64, AT(tile_rows), 8, I2 | FL | WR, 1},
    {"tile_cols", CK_BF_I64, AT(tile_cols), 8, I2 | FL | WR, 1},
    {"ntiles", CK_BF_I64, AT(ntiles), 8, I2 | FL | WR, 1},
    {"tiles_checksum", CK_BF_U64, AT(tiles_checksum), 8, I2 | FL | WR, 1},
    {"tiles_dataset", CK_BF_STR, AT(tiles_dataset), CK_DSET_MAX, I2, 1},
};
const int ck_nbfields = (int)(sizeof ck_bfields / sizeof ck_bfields[0]);

size_t ck_boxrec_size(unsigned place) {
    size_t n = 0;
    for (int i = 0; i < ck_nbfields; i++)
        if (ck_bfields[i].places & place) n += ck_bfields[i].width;
    return n;
}

long ck_boxrec_offset(unsigned place, const char *name) {
    size_t at = 0;
    for (int i = 0; i < ck_nbfields; i++) {
        if (!(ck_bfields[i].places & place)) continue;
        if (!strcmp(ck_bfields[i].name, name)) return (long)at;
        at += ck_bfields[i].width;
    }
    return -1;
}

/* The HDF5 type of field F in a row (caller closes). */
static hid_t field_type(const ck_bfield *F) {
    switch (F->kind) {
    case CK_BF_STR: return ck_h5_str_type(F->width);
    case CK_BF_I32: return H5Tcopy(H5T_STD_I32LE);
    case CK_BF_I64: return H5Tcopy(H5T_STD_I64LE);
    case CK_BF_U64: return H5Tcopy(H5T_STD_U64LE);
    case CK_BF_DIMS: return ck_h5_dims_type(H5T_STD_I64LE);
    }
    return -1;
}

hid_t ck_boxrec_type(unsigned place) {
    hid_t t = H5Tcreate(H5T_COMPOUND, ck_boxrec_size(place));
    size_t at = 0;
    for (int i = 0; i < ck_nbfields && t >= 0; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place)) continue;
        hid_t m = field_type(F);
        H5Tinsert(t, F->name, at, m);
        H5Tclose(m);
        at += F->width;
    }
    return t;
}

/* The string of field F (kind STR) of r. */
static const char *field_str(const ck_bfield *F, const ck_boxrec *r) {
    return *(const char *const *)((const char *)r + F->at);
}
/* The integer of field F (I32, I64, U64: held as int64 in r; U64 its bits) of r. */
static int64_t field_int(const ck_bfield *F, const ck_boxrec *r) {
    int64_t v;
    memcpy(&v, (const char *)r + F->at, sizeof v);   /* int64_t and uint64_t members alike */
    return v;
}

void ck_boxrec_put(unsigned place, const ck_boxrec *r, void *row) {
    unsigned char *p = row;
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place)) continue;
        if (F->kind == CK_BF_STR) {   /* truncated to width - 1 bytes, NUL-padded (as snprintf into a column) */
            const char *s = field_str(F, r);
            size_t n = s ? strnlen(s, F->width - 1) : 0;
            memset(p, 0, F->width);
            if (n) memcpy(p, s, n);
        } else if (F->kind == CK_BF_I32) {
            int32_t v = (int32_t)field_int(F, r);
            memcpy(p, &v, 4);
        } else {
            memcpy(p, (const char *)r + F->at, F->width);
        }
        p += F->width;
    }
}

int ck_boxrec_get(unsigned place, const void *row, ck_boxrec *r) {
    const unsigned char *p = row;
    int ok = 1;
    memset(r, 0, sizeof *r);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place)) continue;
        char *dst = (char *)r + F->at;
        if (F->kind == CK_BF_STR) {
            const char *s = memchr(p, 0, F->width) ? (const char *)p : NULL;
            if (!s) ok = 0;
            memcpy(dst, &s, sizeof s);
        } else if (F->kind == CK_BF_I32) {
            int32_t v;
            memcpy(&v, p, 4);
            int64_t w = v;
            memcpy(dst, &w, sizeof w);
        } else {
            memcpy(dst, p, F->width);
        }
        p += F->width;
    }
    return ok;
}

void ck_boxrec_hash(struct XXH3_state_s *s, unsigned place, const ck_boxrec *r) {
    assert(place == CK_BR_IDX1 || place == CK_BR_IDX2);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place) || !F->hashed) continue;
        if (F->kind == CK_BF_STR) {
            const char *str = field_str(F, r);
            XXH3_64bits_update(s, str, strlen(str) + 1);
        } else if (F->kind == CK_BF_DIMS) {
            XXH3_64bits_update(s, (const char *)r + F->at, DIMS_BYTES);
        } else {
            int64_t v = field_int(F, r);
            XXH3_64bits_update(s, &v, sizeof v);
        }
    }
}

void ck_boxrec_send(unsigned place, ck_buf *b, const ck_boxrec *r) {
    assert(place == CK_BR_WIRE || place == CK_BR_GROUP);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place)) continue;
        if (F->kind == CK_BF_STR) {
            const char *s = field_str(F, r);
            int64_t n = (int64_t)strlen(s);
            ck_buf_put(b, &n, sizeof n);
            ck_buf_put(b, s, (size_t)n);
        } else if (F->kind == CK_BF_DIMS) {
            ck_buf_put(b, (const char *)r + F->at, DIMS_BYTES);
        } else {
            int64_t v = field_int(F, r);
            ck_buf_put(b, &v, sizeof v);
        }
    }
}

int ck_boxrec_recv(unsigned place, const char *p, size_t n, size_t *at, ck_boxrec *r, char *scratch) {
    const char *scratch0 = scratch;
    assert(place == CK_BR_WIRE || place == CK_BR_GROUP);
    memset(r, 0, sizeof *r);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place)) continue;
        char *dst = (char *)r + F->at;
        int64_t v;
        size_t need = F->kind == CK_BF_DIMS ? DIMS_BYTES : sizeof v;
        if (*at > n || n - *at < need) return 0;
        if (F->kind == CK_BF_DIMS) { memcpy(dst, p + *at, need); *at += need; continue; }
        memcpy(&v, p + *at, sizeof v);
        *at += sizeof v;
        if (F->kind == CK_BF_STR) {   /* a length below the column's width, then its bytes */
            if (v < 0 || (uint64_t)v >= F->width || (size_t)v > n - *at) return 0;
            assert((size_t)(scratch - scratch0) + F->width <= CK_BOXREC_SCRATCH);
            memcpy(scratch, p + *at, (size_t)v);
            scratch[v] = '\0';
            memcpy(dst, &scratch, sizeof scratch);
            scratch += v + 1;
            *at += (size_t)v;
        } else {
            if (F->kind == CK_BF_I32 && (v < INT32_MIN || v > INT32_MAX)) return 0;
            memcpy(dst, &v, sizeof v);
        }
    }
    return 1;
}
