/*
 * tests/ckpt/test_boxrec.c — the box record schema (ckpt/boxrec.c) reaches every place a box is written.
 *
 * The tests walk the table ck_bfields, so a field added to it is checked without editing them: for each
 * place, the HDF5 compound type has exactly the place's fields, in table order, at packed offsets and
 * with their widths; a row written and read back keeps every field, and changing any one field changes
 * the row's bytes; the v1/v2 index checksum input holds exactly the fields marked hashed (each changes
 * the digest, the others do not), in the documented encoding; each wire encoding (the exchange to rank 0,
 * a group member's list) keeps every field of its place and refuses every truncation. Then the frozen formats: the schema's v1 and v2 index row types are
 * the types stored in the fixtures of tests/data (written by older builds), and the v3/v4 rank-file
 * row is the one docs/FORMAT.md lists.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "ckpt/ckpt_internal.h"

/* The places: the first three are HDF5 tables, the last two wire encodings. */
static const unsigned k_places[] = {CK_BR_IDX1, CK_BR_IDX2, CK_BR_FILE, CK_BR_WIRE, CK_BR_GROUP};
static void wire_place(unsigned place);
static void wire_bad_values(unsigned place);

/* Strings of the sample record: field i's is g_str[i] (distinct, shorter than every width). */
static char g_str[64][32];

/* A record with a distinct value in every field: field i's integers from i (I32 within int32). */
static void sample(ck_boxrec *r) {
    memset(r, 0, sizeof *r);
    cr_assert_lt(ck_nbfields, 64);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        char *m = (char *)r + F->at;
        if (F->kind == CK_BF_STR) {
            snprintf(g_str[i], sizeof g_str[i], "s%d_%s", i, F->name);
            const char *p = g_str[i];
            memcpy(m, &p, sizeof p);
        } else if (F->kind == CK_BF_DIMS) {
            for (int d = 0; d < CKPT_MAX_DIMS; d++) {
                int64_t v = 1000 * (i + 1) + d;
                memcpy(m + d * sizeof v, &v, sizeof v);
            }
        } else {
            int64_t v = F->kind == CK_BF_I32 ? -(i + 1) * 1000003 : (int64_t)0x0102030405060708LL * (i + 1);
            memcpy(m, &v, sizeof v);
        }
    }
}

/* Changes field F of r (another string, another integer, another dim 7). */
static void perturb(const ck_bfield *F, ck_boxrec *r) {
    char *m = (char *)r + F->at;
    if (F->kind == CK_BF_STR) {
        static const char other[] = "another";
        const char *p = other;
        memcpy(m, &p, sizeof p);
    } else {
        int64_t v;
        size_t at = F->kind == CK_BF_DIMS ? (CKPT_MAX_DIMS - 1) * sizeof v : 0;
        memcpy(&v, m + at, sizeof v);
        v += 1;
        memcpy(m + at, &v, sizeof v);
    }
}

/* 1 if field F holds the same value in a and b (strings by content). */
static int same_field(const ck_bfield *F, const ck_boxrec *a, const ck_boxrec *b) {
    const char *x = (const char *)a + F->at, *y = (const char *)b + F->at;
    if (F->kind == CK_BF_STR) {
        const char *s, *t;
        memcpy(&s, x, sizeof s);
        memcpy(&t, y, sizeof t);
        return (!s && !t) || (s && t && !strcmp(s, t));
    }
    return !memcmp(x, y, F->kind == CK_BF_DIMS ? CKPT_MAX_DIMS * sizeof(int64_t) : sizeof(int64_t));
}

/* 1 if field F of r is empty (0, NULL). */
static int empty_field(const ck_bfield *F, const ck_boxrec *r) {
    ck_boxrec z;
    memset(&z, 0, sizeof z);
    return same_field(F, r, &z);
}

Test(boxrec, compound_type_is_the_places_fields) {
    for (size_t p = 0; p < 3; p++) {   /* the places with an HDF5 table */
        unsigned place = k_places[p];
        hid_t t = ck_boxrec_type(place);
        cr_assert_geq(t, 0);
        int nm = H5Tget_nmembers(t), j = 0;
        size_t at = 0;
        for (int i = 0; i < ck_nbfields; i++) {
            const ck_bfield *F = &ck_bfields[i];
            if (!(F->places & place)) continue;
            cr_assert_lt(j, nm, "place %u: field %s missing from the compound type", place, F->name);
            char *name = H5Tget_member_name(t, (unsigned)j);
            cr_assert_str_eq(name, F->name, "place %u member %d", place, j);
            H5free_memory(name);
            cr_assert_eq(H5Tget_member_offset(t, (unsigned)j), at, "place %u field %s offset", place, F->name);
            cr_assert_eq(ck_boxrec_offset(place, F->name), (long)at);
            hid_t m = H5Tget_member_type(t, (unsigned)j);
            cr_assert_eq(H5Tget_size(m), F->width, "place %u field %s width", place, F->name);
            H5Tclose(m);
            at += F->width;
            j++;
        }
        cr_assert_eq(j, nm, "place %u: the type has %d members, the schema %d fields", place, nm, j);
        cr_assert_eq(H5Tget_size(t), at);
        cr_assert_eq(ck_boxrec_size(place), at);
        H5Tclose(t);
    }
}

Test(boxrec, row_keeps_every_field) {
    for (size_t p = 0; p < 3; p++) {
        unsigned place = k_places[p];
        size_t n = ck_boxrec_size(place);
        unsigned char *row = malloc(n + 16), *row2 = malloc(n + 16);
        memset(row, 0xAA, n + 16);
        ck_boxrec r, back;
        sample(&r);
        ck_boxrec_put(place, &r, row);
        for (size_t g = n; g < n + 16; g++) cr_assert_eq(row[g], 0xAA, "place %u: put wrote past the row", place);
        cr_assert_eq(ck_boxrec_get(place, row, &back), 1);
        for (int i = 0; i < ck_nbfields; i++) {
            const ck_bfield *F = &ck_bfields[i];
            if (F->places & place) {
                cr_assert(same_field(F, &r, &back), "place %u: field %s lost in a row", place, F->name);
                ck_boxrec q = r;   /* every field reaches the row's bytes */
                perturb(F, &q);
                ck_boxrec_put(place, &q, row2);
                cr_assert(memcmp(row, row2, n) != 0, "place %u: field %s does not reach the row", place, F->name);
            } else {
                cr_assert(empty_field(F, &back), "place %u: field %s is not in it but reads back", place, F->name);
            }
        }
        free(row);
        free(row2);
    }
}

Test(boxrec, unterminated_string_column_is_refused) {
    for (size_t p = 0; p < 3; p++) {
        unsigned place = k_places[p];
        size_t n = ck_boxrec_size(place);
        for (int i = 0; i < ck_nbfields; i++) {
            const ck_bfield *F = &ck_bfields[i];
            if (!(F->places & place) || F->kind != CK_BF_STR) continue;
            unsigned char *row = calloc(1, n);
            memset(row + ck_boxrec_offset(place, F->name), 'x', F->width);
            ck_boxrec r;
            cr_assert_eq(ck_boxrec_get(place, row, &r), 0, "place %u: %s without NUL accepted", place, F->name);
            cr_assert(empty_field(F, &r), "place %u: %s without NUL is not NULL", place, F->name);
            free(row);
        }
    }
}

/* The v1/v2 checksum input as docs/FORMAT.md "Index checksum" spells it, built here from the table:
 * each hashed field in order, integers as int64, dims as CKPT_MAX_DIMS int64, strings with their NUL. */
static uint64_t reference_hash(unsigned place, const ck_boxrec *r, size_t *len) {
    unsigned char buf[4096];
    size_t n = 0;
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place) || !F->hashed) continue;
        const char *m = (const char *)r + F->at;
        size_t w = F->kind == CK_BF_DIMS ? CKPT_MAX_DIMS * sizeof(int64_t) : sizeof(int64_t);
        if (F->kind == CK_BF_STR) {
            const char *s;
            memcpy(&s, m, sizeof s);
            w = strlen(s) + 1;
            m = s;
        }
        cr_assert_leq(n + w, sizeof buf);
        memcpy(buf + n, m, w);
        n += w;
    }
    *len = n;
    return XXH3_64bits(buf, n);
}

/* ck_boxrec_hash of r for place, alone in a fresh state. */
static uint64_t schema_hash(unsigned place, const ck_boxrec *r) {
    XXH3_state_t *s = XXH3_createState();
    XXH3_64bits_reset(s);
    ck_boxrec_hash(s, place, r);
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

Test(boxrec, hash_input_is_the_hashed_fields) {
    for (size_t p = 0; p < 2; p++) {   /* the index rows, v1 and v2 */
        unsigned place = k_places[p];
        ck_boxrec r;
        sample(&r);
        size_t len;
        uint64_t h = schema_hash(place, &r);
        cr_assert_eq(h, reference_hash(place, &r, &len), "place %u: the hash input is not the hashed fields", place);
        cr_assert_gt(len, 0);
        for (int i = 0; i < ck_nbfields; i++) {
            const ck_bfield *F = &ck_bfields[i];
            ck_boxrec q = r;
            perturb(F, &q);
            int changes = schema_hash(place, &q) != h;
            int want = (F->places & place) && F->hashed;
            cr_assert_eq(changes, want, "place %u: field %s %s the checksum", place, F->name,
                         want ? "does not reach" : "wrongly enters");
        }
    }
}

/* Sends r in place, receives it back into back (scratch: its strings); the bytes in *b (caller frees). */
static int wire_round(unsigned place, const ck_boxrec *r, ck_boxrec *back, char *scratch, ck_buf *b) {
    memset(b, 0, sizeof *b);
    ck_boxrec_send(place, b, r);
    size_t at = 0;
    int ok = ck_boxrec_recv(place, b->p, b->n, &at, back, scratch);
    cr_assert(!ok || at == b->n, "place %u: recv read %zu of %zu bytes", place, at, b->n);
    return ok;
}

Test(boxrec, wire_keeps_every_field_and_refuses_truncation) {
    for (size_t p = 3; p < 5; p++) wire_place(k_places[p]);
}

static void wire_place(unsigned place) {
    ck_boxrec r, back;
    sample(&r);
    ck_buf b;
    char scratch[CK_BOXREC_SCRATCH];
    size_t at = 0, strw = 0;
    cr_assert_eq(wire_round(place, &r, &back, scratch, &b), 1);
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (F->places & place) {
            cr_assert(same_field(F, &r, &back), "place %u: field %s lost on the wire", place, F->name);
            if (F->kind == CK_BF_STR) strw += F->width;
            ck_boxrec q = r;
            perturb(F, &q);
            ck_buf b2 = {0};
            ck_boxrec_send(place, &b2, &q);
            cr_assert(b2.n != b.n || memcmp(b.p, b2.p, b.n) != 0, "place %u: field %s does not reach the wire", place,
                      F->name);
            free(b2.p);
        } else {
            cr_assert(empty_field(F, &back), "place %u: field %s is not on the wire but arrives", place, F->name);
        }
    }
    cr_assert_leq(strw, CK_BOXREC_SCRATCH, "the wire's strings outgrow the receive scratch");
    for (size_t cut = 0; cut < b.n; cut++) {
        at = 0;
        cr_assert_eq(ck_boxrec_recv(place, b.p, cut, &at, &back, scratch), 0, "place %u: a record cut at %zu bytes "
                     "accepted", place, cut);
    }
    free(b.p);
}

Test(boxrec, wire_refuses_bad_values) {
    for (size_t p = 3; p < 5; p++) wire_bad_values(k_places[p]);
}

static void wire_bad_values(unsigned place) {
    for (int i = 0; i < ck_nbfields; i++) {
        const ck_bfield *F = &ck_bfields[i];
        if (!(F->places & place) || (F->kind != CK_BF_STR && F->kind != CK_BF_I32)) continue;
        ck_boxrec r, back;
        sample(&r);
        char *m = (char *)&r + F->at, big[1024];
        if (F->kind == CK_BF_STR) {   /* as long as its column: no room for the NUL */
            cr_assert_lt(F->width, sizeof big);
            memset(big, 'n', F->width);
            big[F->width] = '\0';
            const char *p = big;
            memcpy(m, &p, sizeof p);
        } else {
            int64_t v = (int64_t)INT32_MAX + 1;
            memcpy(m, &v, sizeof v);
        }
        ck_buf b;
        char scratch[CK_BOXREC_SCRATCH];
        cr_assert_eq(wire_round(place, &r, &back, scratch, &b), 0, "place %u field %s: a bad value accepted", place,
                     F->name);
        free(b.p);
    }
}

/* The type of dataset `dset` in the file at path (MP_SRC-relative), H5Tequal to the schema's of place. */
static void stored_type_is(const char *rel, const char *dset, unsigned place) {
    const char *src = getenv("MP_SRC");
    cr_assert(src, "MP_SRC not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src, rel);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert_geq(f, 0, "opening %s", path);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT), ft = H5Dget_type(d), t = ck_boxrec_type(place);
    cr_assert_gt(H5Tequal(ft, t), 0, "%s %s: the stored row type is not the schema's of place %u", rel, dset, place);
    H5Tclose(t);
    H5Tclose(ft);
    H5Dclose(d);
    H5Fclose(f);
}

Test(boxrec, index_rows_are_the_fixtures) {
    stored_type_is("tests/data/ckpt_v1/step_00000002/index.h5", "layout/boxes", CK_BR_IDX1);
    stored_type_is("tests/data/ckpt_v2/init_tp2dp1/index.h5", "layout/boxes", CK_BR_IDX2);
}

Test(boxrec, rank_file_row_is_format_v3) {
    /* docs/FORMAT.md "Rank file": the /boxes row of versions 3 and 4 (a change is a format change) */
    static const char *cols[] = {"tensor", "k", "offset", "shape", "checksum", "tile_rows", "tile_cols", "ntiles",
                                 "tiles_checksum"};
    hid_t t = ck_boxrec_type(CK_BR_FILE);
    cr_assert_eq(H5Tget_nmembers(t), 9);
    for (unsigned j = 0; j < 9; j++) {
        char *name = H5Tget_member_name(t, j);
        cr_assert_str_eq(name, cols[j]);
        H5free_memory(name);
    }
    cr_assert_eq(H5Tget_size(t), (size_t)(CKPT_NAME_MAX + 1) + 4 + 2 * 8 * CKPT_MAX_DIMS + 5 * 8);
    H5Tclose(t);
}
