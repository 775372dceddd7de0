/*
 * tests/test_safetensors.c — reshard/safetensors.c and the HF source: every malformed file the reader
 * must refuse (one test each, the message checked for the file, the tensor and the reason), the
 * writer's exact format (length prefix, space padding to 8, __metadata__, contiguous offsets), round
 * trips of F32, BF16 and F16 through writer and reader with partial boxes (row bands, column ranges),
 * the conversions (round to nearest even, subnormals, NaN/inf), a sharded directory whose index
 * or shards disagree, the HF sink's bands, and a family's fused tensors (Phi-3's qkv_proj and
 * gate_up_proj) written by the sink and read back by the source.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "layers/llama.h"
#include "reshard/reshard.h"
#include "reshard/safetensors.h"
#include "tests/testutil.h"

/* Writes a file of u64 header length hl (as given), header text h and nd data bytes (value 0x11). */
static char *craft(const char *dir, const char *name, uint64_t hl, const char *h, size_t nd) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, strlen(h), f);
    for (size_t i = 0; i < nd; i++) fputc(0x11, f);
    fclose(f);
    return path;
}

/* Opens a crafted file (header h, nd data bytes) and expects a refusal whose message has every needle. */
static void refused(const char *tag, const char *h, size_t nd, const char *n1, const char *n2) {
    char *dir = tu_mkdtemp(tag);
    char *path = craft(dir, "m.safetensors", strlen(h), h, nd);
    st_file *f = NULL;
    mp_err e;
    mp_code rc = st_open(&f, path, &e);
    cr_assert_eq(rc, MP_EINPUT, "%s: expected a refusal, got %d", tag, rc);
    cr_assert(strstr(e.msg, "m.safetensors"), "message does not name the file: %s", e.msg);
    cr_assert(strstr(e.msg, n1), "message lacks \"%s\": %s", n1, e.msg);
    if (n2) cr_assert(strstr(e.msg, n2), "message lacks \"%s\": %s", n2, e.msg);
    free(path);
    free(dir);
}

#define T1 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

Test(safetensors, accepts_a_valid_file) {
    char *dir = tu_mkdtemp("st_ok");
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"}," T1 ",\"b\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[8,14]}}  ";
    char *path = craft(dir, "m.safetensors", strlen(h), h, 14);
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(f->n, 2);
    cr_assert_eq(st_find(f, "b"), 1);
    st_close(f);
    free(path);
    free(dir);
}

Test(safetensors, refuses_header_length_beyond_file) {
    char *dir = tu_mkdtemp("st_len");
    char *path = craft(dir, "m.safetensors", 4096, "{}", 0);
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "m.safetensors") && strstr(e.msg, "runs past the end of the file"), "%s", e.msg);
    free(path);
    free(dir);
}

Test(safetensors, refuses_header_length_over_limit) {
    char *dir = tu_mkdtemp("st_big");
    char *path = craft(dir, "m.safetensors", 100000001ull, "{}", 0);
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "m.safetensors") && strstr(e.msg, "over the limit of 100000000"), "%s", e.msg);
    free(path);
    free(dir);
}

Test(safetensors, refuses_a_file_shorter_than_the_length_prefix) {
    char *dir = tu_mkdtemp("st_short");
    char path[4096];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    tu_write_file(path, "abc");
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "too short"), "%s", e.msg);
    free(dir);
}

Test(safetensors, refuses_non_utf8) { refused("st_utf8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8", NULL); }
Test(safetensors, refuses_overlong_utf8) { refused("st_utf8o", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "not valid UTF-8", NULL); }
Test(safetensors, refuses_non_json) { refused("st_json", "{\"a\": [1, 2", 0, "not JSON", NULL); }
Test(safetensors, refuses_non_object_json) { refused("st_arr", "[1, 2, 3]", 0, "not a JSON object", NULL); }
Test(safetensors, refuses_bytes_after_the_json) { refused("st_after", "{}  x", 0, "after its JSON value", NULL); }
Test(safetensors, refuses_duplicate_keys) {
    refused("st_dup", "{" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}," T1 "}", 8, "\"a\"", "twice");
}
Test(safetensors, refuses_unknown_dtype) {
    refused("st_dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"w\"", "unknown dtype \"F33\"");
}
Test(safetensors, refuses_shape_size_not_matching_offsets) {
    refused("st_size", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "\"w\"", "12 bytes");
}
Test(safetensors, refuses_overlapping_offsets) {
    refused("st_overlap",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12, "\"b\"", "overlap tensor \"a\"");
}
Test(safetensors, refuses_gapped_offsets) {
    refused("st_gap",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
            16, "\"b\"", "gap");
}
Test(safetensors, refuses_data_not_starting_at_zero) {
    refused("st_gap0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "\"a\"", "gap");
}
Test(safetensors, refuses_trailing_bytes) { refused("st_trail", "{" T1 "}", 12, "4 trailing bytes", "\"a\""); }
Test(safetensors, refuses_offsets_past_the_data) { refused("st_past", "{" T1 "}", 4, "\"a\"", "past the end"); }
Test(safetensors, refuses_bad_metadata) { refused("st_meta", "{\"__metadata__\":{\"format\":1}," T1 "}", 8, "__metadata__", NULL); }
Test(safetensors, refuses_fractional_shape) {
    refused("st_frac", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,6]}}", 6, "\"w\"", "integers");
}

/* ------------------------------------------------------------------------------ conversions */

Test(safetensors, bf16_rounds_to_nearest_even) {
    cr_assert_eq(st_f32_to_bf16(1.0f), 0x3f80);
    uint32_t u = 0x3f808000u;   /* exactly halfway between 0x3f80 and 0x3f81: even stays */
    float x;
    memcpy(&x, &u, 4);
    cr_assert_eq(st_f32_to_bf16(x), 0x3f80);
    u = 0x3f818000u;            /* halfway, odd below: rounds up to even */
    memcpy(&x, &u, 4);
    cr_assert_eq(st_f32_to_bf16(x), 0x3f82);
    u = 0x3f808001u;
    memcpy(&x, &u, 4);
    cr_assert_eq(st_f32_to_bf16(x), 0x3f81);
    cr_assert(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    cr_assert(isinf(st_bf16_to_f32(st_f32_to_bf16(INFINITY))));
}

Test(safetensors, f16_conversions) {
    cr_assert_eq(st_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(st_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(st_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(st_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(st_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    cr_assert_eq(st_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);   /* tie to even: 0 */
    cr_assert_eq(st_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);   /* 1.5 units: to even 2 */
    for (uint32_t h = 0; h < 0x10000; h++) {                  /* every f16 survives f16 -> f32 -> f16 */
        float f = st_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        cr_assert_eq(st_f32_to_f16(f), h, "f16 0x%04x -> %g -> 0x%04x", h, f, st_f32_to_f16(f));
    }
}

/* Under a sanitizer (the ASan + UBSan build runs every suite again, ~10x slower) every SWEEP_STRIDE-th
 * chunk: still every exponent, both signs and the boundaries' neighbourhoods, in seconds. */
#if defined(__SANITIZE_ADDRESS__)
#define SWEEP_STRIDE 17
#else
#define SWEEP_STRIDE 1
#endif

/* The vectorised band conversion against the scalar one on every one of the 2^32 float bit patterns
 * (zeros, subnormals, the subnormal/normal and overflow boundaries, inf, every NaN), 64 Ki at a time. */
Test(safetensors, f16_band_conversion_matches_scalar_on_every_float, .timeout = 120) {
    enum { CHUNK = 1 << 16 };
    static float x[CHUNK];
    static uint16_t h[CHUNK];
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)CHUNK * SWEEP_STRIDE) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t u = (uint32_t)base + i;
            memcpy(&x[i], &u, 4);
        }
        st_f32_to_f16_n(h, x, CHUNK);
        for (uint32_t i = 0; i < CHUNK; i++)
            if (h[i] != st_f32_to_f16(x[i]))
                cr_assert_fail("f32 0x%08x: band 0x%04x, scalar 0x%04x", (unsigned)(base + i), h[i], st_f32_to_f16(x[i]));
    }
}

/* ------------------------------------------------------------------------------- round trip */

/* Writes tensors a [5, 7] and b [9] of dtype dt, reads them back whole and in boxes. */
static void round_trip(st_dtype dt, const char *tag) {
    char *dir = tu_mkdtemp(tag);
    char path[4096];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float a[35], b[9];
    for (int i = 0; i < 35; i++) a[i] = (float)(i - 17) * 0.375f;   /* exact in bf16 and f16 */
    for (int i = 0; i < 9; i++) b[i] = (float)i * 0.5f + 100.0f;
    st_decl d[2] = {{.name = "layer.a", .dtype = dt, .ndim = 2, .shape = {5, 7}},
                    {.name = "b", .dtype = dt, .ndim = 1, .shape = {9}}};
    st_writer *w = NULL;
    mp_err e;
    cr_assert_eq(st_writer_open(&w, path, d, 2, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(st_writer_put(w, a, 10, &e), MP_OK);   /* pieces of any size, across tensors */
    cr_assert_eq(st_writer_put(w, a + 10, 25, &e), MP_OK);
    cr_assert_eq(st_writer_put(w, b, 9, &e), MP_OK);
    cr_assert_eq(st_writer_close(w, &e), MP_OK, "%s", e.msg);
    /* the format, byte for byte: prefix, padding, metadata, offsets */
    FILE *fp = fopen(path, "rb");
    uint64_t hl;
    cr_assert_eq(fread(&hl, 8, 1, fp), 1);
    cr_assert_eq(hl % 8, 0);
    char *h = calloc(hl + 1, 1);
    cr_assert_eq(fread(h, 1, hl, fp), hl);
    fclose(fp);
    cr_assert(!strncmp(h, "{\"__metadata__\":{\"format\":\"pt\"},\"layer.a\":{\"dtype\":\"", 51), "%s", h);
    int es = st_dtype_size(dt);
    char want[128];
    snprintf(want, sizeof want, "\"data_offsets\":[%d,%d]}}", 35 * es, 44 * es);
    cr_assert(strstr(h, want), "%s", h);
    for (const char *p = strrchr(h, '}') + 1; p < h + hl; p++) cr_assert_eq(*p, ' ', "padding is spaces");
    free(h);
    st_file *f = NULL;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    float out[35];
    int64_t off[2] = {0, 0}, shp[2] = {5, 7};
    cr_assert_eq(st_read_f32(f, &f->t[st_find(f, "layer.a")], off, shp, out, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(memcmp(out, a, sizeof a), 0);
    int64_t o2[2] = {1, 2}, s2[2] = {3, 4};   /* a column range of a row band */
    cr_assert_eq(st_read_f32(f, &f->t[0], o2, s2, out, &e), MP_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) cr_assert_eq(out[r * 4 + c], a[(1 + r) * 7 + 2 + c]);
    int64_t o3[1] = {4}, s3[1] = {5};
    cr_assert_eq(st_read_f32(f, &f->t[1], o3, s3, out, &e), MP_OK);
    cr_assert_eq(memcmp(out, b + 4, 5 * sizeof(float)), 0);
    cr_assert_eq(f->bytes_read, (35 + 21 + 5) * es);   /* the ranges asked for; the column range as whole rows */
    st_close(f);
    free(dir);
}

Test(safetensors, round_trip_f32) { round_trip(ST_F32, "st_rt32"); }
Test(safetensors, round_trip_bf16) { round_trip(ST_BF16, "st_rtbf16"); }
Test(safetensors, round_trip_f16) { round_trip(ST_F16, "st_rtf16"); }

/* Writes x [rows, cols] (value r * cols + c, exact in every dtype for small sizes: scaled to stay so)
 * as dtype dt, reads the box (r0, c0, nr, nc) back and checks it and the bytes read against want. */
static void column_box(st_dtype dt, const char *tag, int64_t rows, int64_t cols, int64_t r0, int64_t c0, int64_t nr,
                       int64_t nc, int64_t want_bytes) {
    char *dir = tu_mkdtemp(tag);
    char path[4096];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float *x = malloc(sizeof(float) * (size_t)(rows * cols)), *y = malloc(sizeof(float) * (size_t)(nr * nc));
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(i % 251) - 125.0f;   /* exact in bf16 and f16 */
    st_decl d = {.name = "w", .dtype = dt, .ndim = 2, .shape = {rows, cols}};
    st_writer *w = NULL;
    mp_err e;
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(st_writer_put(w, x, rows * cols, &e), MP_OK);
    cr_assert_eq(st_writer_close(w, &e), MP_OK, "%s", e.msg);
    st_file *f = NULL;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    int64_t off[2] = {r0, c0}, shp[2] = {nr, nc};
    memset(y, 0xff, sizeof(float) * (size_t)(nr * nc));
    cr_assert_eq(st_read_f32(f, &f->t[0], off, shp, y, &e), MP_OK, "%s", e.msg);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            cr_assert_eq(y[r * nc + c], x[(r0 + r) * cols + c0 + c], "(%ld, %ld)", (long)(r0 + r), (long)(c0 + c));
    cr_assert_eq(f->bytes_read, want_bytes, "read %ld bytes, want %ld", (long)f->bytes_read, (long)want_bytes);
    st_close(f);
    free(x);
    free(y);
    free(dir);
}

/* Narrow column ranges come out of whole rows read 1 MiB at a time: 4,000-byte rows, 262 per chunk,
 * 290 rows need two chunks (a partial last one); every dtype. */
Test(safetensors, narrow_columns_from_row_chunks) {
    column_box(ST_F32, "st_chunk32", 300, 1000, 10, 100, 290, 50, 290 * 1000 * 4);
    column_box(ST_BF16, "st_chunkbf", 300, 1000, 7, 999, 293, 1, 293 * 1000 * 2);
    column_box(ST_F16, "st_chunkf16", 300, 1000, 0, 0, 300, 999, 300 * 1000 * 2);
}

/* A segment of 64 KiB or more is read on its own (one pread per row: bytes read = bytes asked for),
 * as is a column range of one row, or of rows wider than a chunk. */
Test(safetensors, wide_segments_and_wide_rows_read_alone) {
    column_box(ST_F32, "st_wideseg", 3, 17000, 1, 200, 2, 16384, 2 * 16384 * 4);
    column_box(ST_F32, "st_onerow", 3, 1000, 2, 5, 1, 7, 7 * 4);
    column_box(ST_BF16, "st_widerow", 2, 600000, 0, 3, 2, 9, 2 * 9 * 2);
}

Test(safetensors, bf16_write_is_the_rounding_of_fp32) {
    char *dir = tu_mkdtemp("st_bfround");
    char path[4096];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++) x[i] = sinf((float)i * 0.731f) * 3.3f;
    st_decl d = {.name = "x", .dtype = ST_BF16, .ndim = 1, .shape = {1000}};
    st_writer *w = NULL;
    mp_err e;
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK);
    cr_assert_eq(st_writer_put(w, x, 1000, &e), MP_OK);
    cr_assert_eq(st_writer_close(w, &e), MP_OK);
    st_file *f = NULL;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    int64_t off[1] = {0}, shp[1] = {1000};
    cr_assert_eq(st_read_f32(f, &f->t[0], off, shp, y, &e), MP_OK);
    for (int i = 0; i < 1000; i++) cr_assert(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f, "%d: %g vs %g", i, y[i], x[i]);
    st_close(f);
    free(dir);
}

Test(safetensors, writer_refuses_more_data_than_declared) {
    char *dir = tu_mkdtemp("st_more");
    char path[4096];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    st_decl d = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {2}};
    st_writer *w = NULL;
    mp_err e;
    float x[3] = {1, 2, 3};
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK);
    cr_assert_neq(st_writer_put(w, x, 3, &e), MP_OK);
    st_writer_free(w);
    free(dir);
}

/* ---------------------------------------------------------------------- sharded directories */

/* A directory with shard files s1 (tensor "a") and s2 (the given header) and an index text. */
static char *sharded(const char *tag, const char *h2, const char *index) {
    char *dir = tu_mkdtemp(tag);
    free(craft(dir, "s1.safetensors", strlen("{" T1 "}"), "{" T1 "}", 8));
    free(craft(dir, "s2.safetensors", strlen(h2), h2, 8));
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    tu_write_file(path, index);
    return dir;
}

/* A Llama config: its family maps every name to itself, all that these directory tests need. */
static const llama_config *any_llama(void) {
    static llama_config c;
    llama_config_default(&c);
    return &c;
}

Test(safetensors, refuses_a_tensor_in_two_files_of_an_index) {
    char *dir = sharded("st_twice", "{" T1 "}", "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s2.safetensors\"}}");
    rs_source *s = NULL;
    mp_err e;
    cr_assert_eq(rs_source_hf(&s, dir, any_llama(), &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "\"a\"") && strstr(e.msg, "two files") && strstr(e.msg, "s1.safetensors") &&
              strstr(e.msg, "s2.safetensors"), "%s", e.msg);
    free(dir);
}

Test(safetensors, refuses_an_index_naming_the_wrong_file) {
    char *dir = sharded("st_wrongfile", "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                        "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}");
    rs_source *s = NULL;
    mp_err e;
    cr_assert_eq(rs_source_hf(&s, dir, any_llama(), &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "weight_map puts tensor \"a\" in s2.safetensors"), "%s", e.msg);
    free(dir);
}

Test(safetensors, refuses_an_index_with_a_path) {
    char *dir = sharded("st_path", "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                        "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
    rs_source *s = NULL;
    mp_err e;
    cr_assert_eq(rs_source_hf(&s, dir, any_llama(), &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "not a file name"), "%s", e.msg);
    free(dir);
}

Test(safetensors, reads_a_sharded_directory) {
    char *dir = sharded("st_shards", "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                        "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    rs_source *s = NULL;
    mp_err e;
    cr_assert_eq(rs_source_hf(&s, dir, any_llama(), &e), MP_OK, "%s", e.msg);
    float v[2];
    int64_t off[1] = {0}, shp[1] = {2};
    cr_assert_eq(s->read(s, "model/b", 1, off, shp, v, &e), MP_OK, "%s", e.msg);
    uint32_t u;
    memcpy(&u, &v[0], 4);
    cr_assert_eq(u, 0x11111111u);
    cr_assert_eq(s->read(s, "model/c", 1, off, shp, v, &e), MP_EINPUT);
    s->close(s);
    free(dir);
}

/* ------------------------------------------------------------------------------ the HF sink */

/* The small model of the sink tests, of family f (GQA: 4 heads of 16, 2 kv heads). */
static void small_model(llama_config *c, llama_family f) {
    llama_config_default(c);
    c->hidden_size = 64;
    c->intermediate_size = 96;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->vocab_size = 300;
    c->family = f;
}

/* Exports the seeded init of the small model of family f through the engine with band bytes, to dir/name. */
static void export_init_family(const char *dir, const char *name, llama_family f, size_t band, int64_t shard,
                               rs_stats *st) {
    llama_config c;
    small_model(&c, f);
    rs_source *src = NULL;
    rs_sink *sink = NULL;
    rs_box *b = NULL;
    int n = 0;
    mp_err e;
    char out[4096];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    cr_assert_eq(rs_source_init(&src, &c, 7, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(rs_hf_layout(&c, &b, &n, &e), MP_OK);
    cr_assert_eq(rs_sink_hf(&sink, out, &c, "F32", shard, band, 0, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(rs_run(src, sink, b, n, 0, 1, st, &e), MP_OK, "%s", e.msg);
    sink->free(sink);
    src->close(src);
    free(b);
}

static void export_init(const char *dir, const char *name, size_t band, int64_t shard, rs_stats *st) {
    export_init_family(dir, name, LLAMA_FAMILY_LLAMA, band, shard, st);
}

Test(safetensors, sink_streams_in_bands_and_output_does_not_depend_on_them) {
    char *dir = tu_mkdtemp("st_bands");
    rs_stats small, big;
    export_init(dir, "small", 4096, 0, &small);
    export_init(dir, "big", 1 << 24, 0, &big);
    cr_assert_leq(small.largest_band, 4096, "largest band %lld", (long long)small.largest_band);
    cr_assert_eq(big.largest_band, 300 * 64 * 4);   /* the embedding, whole */
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "cmp %s/small/model.safetensors %s/big/model.safetensors && cmp %s/small/config.json %s/big/config.json",
             dir, dir, dir, dir);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    free(out);
    /* the sink refuses an existing directory unless told to replace it */
    llama_config c;
    llama_config_default(&c);
    rs_sink *s = NULL;
    mp_err e;
    snprintf(cmd, sizeof cmd, "%s/small", dir);
    cr_assert_eq(rs_sink_hf(&s, cmd, &c, "F32", 0, 4096, 0, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "already exists"), "%s", e.msg);
    free(dir);
}

/* ------------------------------------------------------------------ fused HF tensors (Phi-3) */

/* Whole tensor name of HF file dir/sub/model.safetensors as fp32 (malloc'd); *n gets its elements. */
static float *st_whole(const char *dir, const char *sub, const char *name, int64_t *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    int k = st_find(f, name);
    cr_assert(k >= 0, "%s has no %s", path, name);
    const st_tensor *t = &f->t[k];
    int64_t off[2] = {0, 0}, shp[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1};
    *n = shp[0] * shp[1];
    float *x = malloc(sizeof *x * (size_t)*n);
    cr_assert_eq(st_read_f32(f, t, off, shp, x, &e), MP_OK, "%s", e.msg);
    st_close(f);
    return x;
}

/* The number of tensors in dir/sub/model.safetensors. */
static int st_count(const char *dir, const char *sub) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, sub);
    st_file *f = NULL;
    mp_err e;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    int n = f->n;
    st_close(f);
    return n;
}

/* 1 if HF tensor fused of dir/a is the rows of the parts (tensors of dir/b) stacked in order. */
static int stacked(const char *dir, const char *a, const char *fused, const char *b, const char *const *parts, int np) {
    int64_t n = 0, at = 0, k;
    float *x = st_whole(dir, a, fused, &n);
    int ok = 1;
    for (int i = 0; i < np && ok; i++) {
        float *y = st_whole(dir, b, parts[i], &k);
        ok = at + k <= n && !memcmp(x + at, y, sizeof *y * (size_t)k);
        at += k;
        free(y);
    }
    free(x);
    return ok && at == n;
}

/* Phi-3 export writes qkv_proj = [q; k; v] and gate_up_proj = [gate; up] rows: the same bytes as the
 * Llama export's separate tensors of the same weights, every other tensor the same, in bands that
 * straddle the parts (80 rows of 64 columns: 64 | 96 in qkv, 96 in gate_up) or whole, alike. */
Test(safetensors, phi3_export_fuses_qkv_and_gate_up_in_bands) {
    char *dir = tu_mkdtemp("st_phi3");
    rs_stats st, whole, lst;
    export_init_family(dir, "llama", LLAMA_FAMILY_LLAMA, 1 << 24, 0, &lst);
    export_init_family(dir, "phi3", LLAMA_FAMILY_PHI3, 5 * 4096, 0, &st);
    export_init_family(dir, "phi3_whole", LLAMA_FAMILY_PHI3, 1 << 24, 0, &whole);
    cr_assert_leq(st.largest_band, 5 * 4096, "largest band %lld", (long long)st.largest_band);
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "cmp %s/phi3/model.safetensors %s/phi3_whole/model.safetensors", dir, dir);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    free(out);
    cr_assert_eq(st_count(dir, "phi3"), st_count(dir, "llama") - 3 * 2, "2 layers x (3 + 2 tensors into 2)");
    for (int l = 0; l < 2; l++) {
        char q[96], k[96], v[96], g[96], u[96], qkv[96], gu[96];
        snprintf(q, sizeof q, "model.layers.%d.self_attn.q_proj.weight", l);
        snprintf(k, sizeof k, "model.layers.%d.self_attn.k_proj.weight", l);
        snprintf(v, sizeof v, "model.layers.%d.self_attn.v_proj.weight", l);
        snprintf(g, sizeof g, "model.layers.%d.mlp.gate_proj.weight", l);
        snprintf(u, sizeof u, "model.layers.%d.mlp.up_proj.weight", l);
        snprintf(qkv, sizeof qkv, "model.layers.%d.self_attn.qkv_proj.weight", l);
        snprintf(gu, sizeof gu, "model.layers.%d.mlp.gate_up_proj.weight", l);
        const char *const p3[] = {q, k, v}, *const p2[] = {g, u};
        cr_assert(stacked(dir, "phi3", qkv, "llama", p3, 3), "layer %d: qkv_proj is not [q; k; v]", l);
        cr_assert(stacked(dir, "phi3", gu, "llama", p2, 2), "layer %d: gate_up_proj is not [gate; up]", l);
        const char *const od[] = {"self_attn.o_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
                                  "post_attention_layernorm.weight"};
        for (int i = 0; i < 4; i++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, od[i]);
            const char *const one[] = {nm};
            cr_assert(stacked(dir, "phi3", nm, "llama", one, 1), "%s differs", nm);
        }
    }
    free(dir);
}

/* Reads every model tensor of cfg from src whole and from the seeded init; 1 if all are bitwise equal. */
static int same_as_init(rs_source *src, const llama_config *c) {
    rs_source *init = NULL;
    mp_err e;
    cr_assert_eq(rs_source_init(&init, c, 7, &e), MP_OK, "%s", e.msg);
    int ns = llama_tensor_specs(c, NULL, 0), ok = 1;
    llama_tensor_spec *sp = malloc(sizeof *sp * (size_t)ns);
    llama_tensor_specs(c, sp, ns);
    for (int i = 0; i < ns && ok; i++) {
        char name[128];
        snprintf(name, sizeof name, "model/%s", sp[i].name);
        int64_t off[2] = {0, 0}, n = sp[i].shape[0] * sp[i].shape[1];
        float *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
        cr_assert_eq(src->read(src, name, sp[i].ndim, off, sp[i].shape, x, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(init->read(init, name, sp[i].ndim, off, sp[i].shape, y, &e), MP_OK, "%s", e.msg);
        ok = !memcmp(x, y, sizeof *x * (size_t)n);
        if (!ok) cr_log_error("%s differs", sp[i].name);
        free(x);
        free(y);
    }
    free(sp);
    init->close(init);
    return ok;
}

/* Import of the fused export: the check passes, every tensor reads back bitwise as the weights that
 * were exported, a box inside k_proj (rows and columns) is that box of qkv_proj shifted by q's rows;
 * a Llama config, or a Phi-3 one whose shape disagrees, is refused naming the family and the parts. */
Test(safetensors, phi3_import_splits_the_fused_tensors) {
    char *dir = tu_mkdtemp("st_phi3in");
    rs_stats st;
    export_init_family(dir, "phi3", LLAMA_FAMILY_PHI3, 5 * 4096, 0, &st);
    char path[4096];
    snprintf(path, sizeof path, "%s/phi3", dir);
    llama_config c;
    small_model(&c, LLAMA_FAMILY_PHI3);
    rs_source *s = NULL;
    mp_err e;
    cr_assert_eq(rs_source_hf(&s, path, &c, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(rs_source_hf_check(s, &e), MP_OK, "%s", e.msg);
    cr_assert(same_as_init(s, &c));
    float box[5 * 7], ref[5 * 7];
    int64_t off[2] = {3, 10}, shp[2] = {5, 7}, foff[2] = {64 + 3, 10};
    cr_assert_eq(s->read(s, "model/model.layers.1.self_attn.k_proj.weight", 2, off, shp, box, &e), MP_OK, "%s", e.msg);
    s->close(s);
    cr_assert_eq(rs_source_hf(&s, path, any_llama(), &e), MP_OK, "%s", e.msg);   /* Llama: names as they are */
    cr_assert_eq(s->read(s, "model/model.layers.1.self_attn.qkv_proj.weight", 2, foff, shp, ref, &e), MP_OK, "%s", e.msg);
    cr_assert(!memcmp(box, ref, sizeof box), "k_proj's box is not qkv_proj's shifted by 64 rows");
    s->close(s);
    llama_config bad;
    small_model(&bad, LLAMA_FAMILY_LLAMA);
    cr_assert_eq(rs_source_hf(&s, path, &bad, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(rs_source_hf_check(s, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "llama model's tensor \"model.layers.0.self_attn.q_proj.weight\" is missing"), "%s", e.msg);
    s->close(s);
    small_model(&bad, LLAMA_FAMILY_PHI3);
    bad.num_key_value_heads = 4;   /* qkv_proj would have 4 x 16 x 3 rows */
    cr_assert_eq(rs_source_hf(&s, path, &bad, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(rs_source_hf_check(s, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "\"model.layers.0.self_attn.qkv_proj.weight\" has shape [128, 64], config.json implies [192, 64]") &&
              strstr(e.msg, "\"phi3\" stores q_proj, k_proj and v_proj as one tensor"), "%s", e.msg);
    s->close(s);
    free(dir);
}

/* The writer goes through the fs layer's temp-file convention: the file is path.tmp.<pid> while it is
 * written, path only once st_writer_close commits it; an unfinished writer freed, or closed early,
 * leaves nothing (an earlier file under path stays as it was). */
Test(safetensors, the_writer_publishes_only_a_finished_file) {
    char *dir = tu_mkdtemp("st_tmp");
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    st_decl d = {"w", ST_BF16, 2, {2, 3}};
    float x[6] = {1, 2, 3, 4, 5, 6};
    mp_err e;
    st_writer *w = NULL;
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(st_writer_put(w, x, 6, &e), MP_OK, "%s", e.msg);
    cr_assert(access(tmp, F_OK) == 0 && access(path, F_OK) != 0, "written under its temp name only");
    cr_assert_eq(st_writer_close(w, &e), MP_OK, "%s", e.msg);
    cr_assert(access(tmp, F_OK) != 0 && access(path, F_OK) == 0, "committed to its final name");
    st_file *f = NULL;
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "%s", e.msg);
    st_close(f);
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(st_writer_put(w, x, 4, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(st_writer_close(w, &e), MP_EINTERNAL, "closed with data missing");
    cr_assert(access(tmp, F_OK) != 0, "an unfinished file is removed");
    cr_assert_eq(st_writer_open(&w, path, &d, 1, &e), MP_OK, "%s", e.msg);
    st_writer_free(w);
    cr_assert(access(tmp, F_OK) != 0, "a freed writer leaves no temp file");
    cr_assert_eq(st_open(&f, path, &e), MP_OK, "the earlier file stays: %s", e.msg);
    st_close(f);
    free(dir);
}
