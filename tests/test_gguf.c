/*
 * tests/test_gguf.c — reshard/gguf.c: q8_0 quantization and q8_0/q4_0/q4_1 dequantization bitwise against
 * bytes computed with llama.cpp's gguf-py (gguf 0.19.0, gguf.quants.quantize / dequantize, which match
 * ggml's reference code), the writer's format read back by the reader (every metadata type, arrays of
 * strings, i32 and f32, tensors of several types at aligned offsets, a non-default alignment), the
 * read-back check catching a changed byte, the writer's atomicity (.partial, never a file it did not make),
 * and every crafted file the reader must refuse, the message naming the file and the key or tensor.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "reshard/gguf.h"
#include "tests/testutil.h"

/* Decodes hex into a new buffer of *n bytes. */
static uint8_t *unhex(const char *h, size_t *n) {
    *n = strlen(h) / 2;
    uint8_t *b = malloc(*n + 1);
    for (size_t i = 0; i < *n; i++) sscanf(h + 2 * i, "%2hhx", &b[i]);
    return b;
}

/* Block 1 of the quant tests: 32 floats (a formula computed in numpy, as bytes). */
static const char *block1 =
    "0000008028b673bd0735fb3b00000080d9dd723c773c443d3b0081bdbcde633dc92553bd850143bc00000080d57892bb87b5753df03020bc"
    "341fb33dff7bb0bc1417d8bc000000807f00b3bc950d3e3d820a433d75aba73d44d6903c9b38f2bc0000000057ccf4bcf952543c0157ad3d"
    "04f5283d20184a3d2db7a4bc00000000";

Test(gguf, q8_0_quantize_is_ggml_bitwise) {
    float x[96] = {0};
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f;   /* d = 1: ties, away from zero (-14.5 -> -15) */
    x[0] = 127.0f;
    size_t n;
    uint8_t *b1 = unhex(block1, &n);
    cr_assert_eq(n, 128);
    memcpy(x + 32, b1, 128);   /* block 2 stays zero: d = 0 */
    const char *want_hex =
        "003c7ff1f2f3f4f5f6f7f8f9fafbfcfdfeff0102030405060708090a0b0c0d0e0f10a41100aa0b001646a551b5ef00fa57f27fe1da00e0"
        "4345771ad500d5137b3c48e30000000000000000000000000000000000000000000000000000000000000000000000";
    uint8_t *want = unhex(want_hex, &n), got[3 * 34];
    cr_assert_eq(n, sizeof got);
    gguf_quantize_q8_0(x, 96, got);
    for (size_t i = 0; i < n; i++) cr_assert_eq(got[i], want[i], "byte %zu: %02x, gguf-py %02x", i, got[i], want[i]);
    free(want), free(b1);
}

Test(gguf, dequantize_q8_0_q4_0_q4_1_is_gguf_py_bitwise) {
    static const struct { int type; const char *q, *f; } c[] = {
        {GGML_Q8_0, "a41100aa0b001646a551b5ef00fa57f27fe1da00e04345771ad500d5137b3c48e300",
         "00000000008c72bd0030f83b000000000030783c006c453d005380bd0072643d008653bd00c83fbc00000000006087bb005e753d00f01dbc"
         "0017b33d00dcaebc0058d6bc000000000080b4bc00f63c3d009a423d00cfa73d00a8923c008cf2bc00000000008cf2bc0058563c0073ad3d"
         "0038293d00104b3d0094a3bc00000000"},
        {GGML_Q4_0, "99a1a88da74847146eb38db978084339a08a",
         "0000008000e85fbd0020333c000000800020333c0020333d005886bd00e85f3d00e85fbd002033bc000000800000008000e85f3d002033bc"
         "0020b33d0020b3bc0020b3bc000000800020b3bc0020333d0020333d00bc9c3d0020b33c005806bd00000080005806bd0020333c0020b33d"
         "0020333d00e85f3d0020b3bc00000080"},
        {GGML_Q4_1, "232108ac466047b6b8eb803c613586f6acb54f64",
         "000037bb000081bd0040ed3b000037bb00808d3c0008423d000081bd00206b3d00e858bd002052bc000037bb000037bb00206b3d002052bc"
         "0034b33d0040bbbc0040bbbc000037bb0040bbbc0008423d0008423d00a89e3d00808d3c00b806bd000037bb00b806bd00808d3c0034b33d"
         "00f0183d0008423d0040bbbc000037bb"}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        size_t nq, nf;
        uint8_t *q = unhex(c[k].q, &nq), *f = unhex(c[k].f, &nf);
        float y[32];
        mp_err e;
        cr_assert_eq(gguf_dequantize(c[k].type, q, 32, y, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(memcmp(y, f, 128), 0, "%s differs from gguf-py's dequantize", gguf_type_name(c[k].type));
        free(q), free(f);
    }
    mp_err e;
    uint8_t z[64] = {0};
    float y[32];
    cr_assert_eq(gguf_dequantize(12, z, 256, y, &e), MP_EINPUT);   /* Q4_K: refused by name */
    cr_assert(strstr(e.msg, "Q4_K"), "%s", e.msg);
    cr_assert_eq(gguf_dequantize(GGML_Q8_0, z, 16, y, &e), MP_EINPUT);   /* half a block */
}

/* Writes a small file with every metadata type and three tensors; returns its path. */
static char *write_sample(const char *dir, uint32_t align) {
    static char path[512];
    snprintf(path, sizeof path, "%s/s%u.gguf", dir, align);
    gguf_writer *w = NULL;
    mp_err e;
    cr_assert_eq(gguf_w_open(&w, path, align, &e), MP_OK);
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "a.u32", 4000000000u);
    gguf_w_i32(w, "a.i32", -7);
    gguf_w_f32(w, "a.f32", 0.25f);
    gguf_w_bool(w, "a.bool", 1);
    const char *toks[] = {"<s>", "", "h\xc3\xa9llo"};
    gguf_w_arr_str(w, "a.strs", toks, NULL, 3);
    int32_t iv[] = {1, -2, 3};
    float fv[] = {1.5f, -0.0f};
    gguf_w_arr_i32(w, "a.ints", iv, 3);
    gguf_w_arr_f32(w, "a.floats", fv, 2);
    int64_t s1[] = {3}, s2[] = {2, 32}, s3[] = {5, 4};
    cr_assert_eq(gguf_w_tensor(w, "t.one", 1, s1, GGML_F32, &e), MP_OK);
    cr_assert_eq(gguf_w_tensor(w, "t.q", 2, s2, GGML_Q8_0, &e), MP_OK);
    cr_assert_eq(gguf_w_tensor(w, "t.h", 2, s3, GGML_F16, &e), MP_OK);
    cr_assert_eq(gguf_w_tensor(w, "t.bad", 2, (int64_t[]){2, 31}, GGML_Q8_0, &e), MP_EINTERNAL);   /* not whole blocks */
    cr_assert_eq(gguf_w_begin_data(w, &e), MP_OK, "%s", e.msg);
    cr_assert(mp_fs_exists(strcat(strcpy((char[600]){0}, path), ".partial")));
    float one[3] = {1, 2, 3};
    uint8_t q[68], h[40];
    for (int i = 0; i < 68; i++) q[i] = (uint8_t)i;
    for (int i = 0; i < 40; i++) h[i] = (uint8_t)(200 + i);
    cr_assert_eq(gguf_w_data(w, one, 12, &e), MP_OK);
    cr_assert_eq(gguf_w_data(w, q, 30, &e), MP_OK);   /* pieces of any size */
    cr_assert_eq(gguf_w_data(w, q + 30, 38, &e), MP_OK);
    cr_assert_eq(gguf_w_data(w, h, 40, &e), MP_OK);
    cr_assert_eq(gguf_w_data(w, h, 1, &e), MP_EINTERNAL);   /* beyond the declared bytes */
    cr_assert_eq(gguf_w_close(w, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(gguf_w_verify(w, &e), MP_OK, "%s", e.msg);
    gguf_w_free(w);
    return path;
}

Test(gguf, writer_and_reader_round_trip) {
    const char *dir = tu_mkdtemp("gguf_rt");
    for (int k = 0; k < 2; k++) {
        uint32_t align = k ? 64 : 0;
        char *path = write_sample(dir, align);
        char partial[600];
        snprintf(partial, sizeof partial, "%s.partial", path);
        cr_assert(!mp_fs_exists(partial));
        gguf_file *g = NULL;
        mp_err e;
        cr_assert_eq(gguf_open(&g, path, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(g->version, 3);
        cr_assert_eq(g->alignment, k ? 64u : 32u);
        cr_assert_eq(g->nkv, k ? 9 : 8);
        int64_t i = gguf_find_kv(g, "a.u32");
        cr_assert(i >= 0 && g->kv[i].type == GGUF_U32 && g->kv[i].v.u == 4000000000u);
        i = gguf_find_kv(g, "a.i32");
        cr_assert(g->kv[i].type == GGUF_I32 && g->kv[i].v.i == -7);
        i = gguf_find_kv(g, "a.f32");
        cr_assert(g->kv[i].type == GGUF_F32 && g->kv[i].v.f == 0.25);
        i = gguf_find_kv(g, "a.bool");
        cr_assert(g->kv[i].type == GGUF_BOOL && g->kv[i].v.u == 1);
        i = gguf_find_kv(g, "general.architecture");
        cr_assert(g->kv[i].type == GGUF_STRING && !strcmp(g->kv[i].str, "llama"));
        i = gguf_find_kv(g, "a.strs");
        cr_assert(g->kv[i].type == GGUF_ARRAY && g->kv[i].arr_type == GGUF_STRING && g->kv[i].n == 3);
        char **s = g->kv[i].arr;
        cr_assert(!strcmp(s[0], "<s>") && !strcmp(s[1], "") && !strcmp(s[2], "h\xc3\xa9llo") && g->kv[i].arr_len[2] == 6);
        i = gguf_find_kv(g, "a.ints");
        cr_assert(g->kv[i].arr_type == GGUF_I32 && g->kv[i].n == 3 && ((int32_t *)g->kv[i].arr)[1] == -2);
        i = gguf_find_kv(g, "a.floats");
        cr_assert(g->kv[i].arr_type == GGUF_F32 && ((float *)g->kv[i].arr)[0] == 1.5f);
        cr_assert_eq(g->nt, 3);
        const gguf_tensor *t = &g->t[gguf_find_tensor(g, "t.q")];
        cr_assert(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 32 && t->type == GGML_Q8_0 && t->nbytes == 68);
        cr_assert_eq(t->offset % g->alignment, 0);
        uint8_t q[68];
        cr_assert_eq(gguf_read_data(g, t, 0, 68, q, &e), MP_OK);
        for (int j = 0; j < 68; j++) cr_assert_eq(q[j], j);
        t = &g->t[gguf_find_tensor(g, "t.h")];
        cr_assert(t->shape[0] == 5 && t->shape[1] == 4 && t->type == GGML_F16 && t->nbytes == 40);
        gguf_close(g);
    }
}

Test(gguf, verify_catches_a_changed_byte_and_writer_keeps_others_files) {
    const char *dir = tu_mkdtemp("gguf_verify");
    char path[512], partial[600];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(partial, sizeof partial, "%s.partial", path);
    mp_err e;
    gguf_writer *w = NULL;
    int64_t s[] = {64};
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    cr_assert_eq(gguf_w_open(&w, path, 0, &e), MP_OK);
    gguf_w_str(w, "general.architecture", "llama");
    cr_assert_eq(gguf_w_tensor(w, "t", 1, s, GGML_F32, &e), MP_OK);
    cr_assert_eq(gguf_w_data(w, x, 256, &e), MP_EINTERNAL);   /* data only after the header */
    cr_assert_eq(gguf_w_begin_data(w, &e), MP_OK);
    cr_assert_eq(gguf_w_data(w, x, 256, &e), MP_OK);
    cr_assert_eq(gguf_w_close(w, &e), MP_OK);
    FILE *f = fopen(path, "r+b");   /* one data byte changed after the write */
    fseek(f, -5, SEEK_END);
    fputc(0x55, f);
    fclose(f);
    cr_assert_eq(gguf_w_verify(w, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "tensor t reads back other bytes"), "%s", e.msg);
    gguf_w_free(w);
    /* a stale .partial that the writer did not make is refused and left alone; an unfinished one it made is removed */
    tu_write_file(partial, "someone's");
    cr_assert_eq(gguf_w_open(&w, path, 0, &e), MP_OK);
    cr_assert_eq(gguf_w_begin_data(w, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, ".partial") && strstr(e.msg, "remove it"), "%s", e.msg);
    gguf_w_free(w);
    struct stat st;
    cr_assert(stat(partial, &st) == 0 && st.st_size == 9);
    remove(partial);
    cr_assert_eq(gguf_w_open(&w, path, 0, &e), MP_OK);
    cr_assert_eq(gguf_w_tensor(w, "t", 1, s, GGML_F32, &e), MP_OK);
    cr_assert_eq(gguf_w_begin_data(w, &e), MP_OK);
    cr_assert_eq(gguf_w_close(w, &e), MP_EINTERNAL);   /* the tensor's bytes never came */
    gguf_w_free(w);
    cr_assert(!mp_fs_exists(partial));
    cr_assert(mp_fs_exists(path));   /* the earlier file stands */
}

/* ------------------------------------------------------------------------------------ refusals */

typedef struct mem { uint8_t b[512]; size_t n; } mem;

static int mem_read(void *ctx, int64_t off, size_t n, void *buf) {
    mem *m = ctx;
    if (off < 0 || (size_t)off + n > m->n) return 5;
    memcpy(buf, m->b + off, n);
    return 0;
}
static void put(mem *m, const void *p, size_t n) { memcpy(m->b + m->n, p, n), m->n += n; }
static void put_u32(mem *m, uint32_t v) { put(m, &v, 4); }
static void put_u64(mem *m, uint64_t v) { put(m, &v, 8); }
static void put_str(mem *m, const char *s) { put_u64(m, strlen(s)), put(m, s, strlen(s)); }
static void head(mem *m, uint64_t nt, uint64_t nkv) { m->n = 0, put_u32(m, 0x46554747u), put_u32(m, 3), put_u64(m, nt), put_u64(m, nkv); }

/* Parses m, expecting MP_EINPUT with a message holding want. */
static void refused(mem *m, const char *want) {
    gguf_file *g = NULL;
    mp_err e;
    mp_err_clear(&e);
    cr_assert_eq(gguf_parse(&g, "crafted.gguf", m->n, mem_read, m, &e), MP_EINPUT, "accepted; wanted: %s", want);
    cr_assert_null(g);
    cr_assert(strstr(e.msg, "crafted.gguf") && strstr(e.msg, want), "message \"%s\" lacks \"%s\"", e.msg, want);
}

/* A tensor info: name, 1 dim n, type, offset. */
static void tinfo(mem *m, const char *name, uint64_t n, uint32_t type, uint64_t off) {
    put_str(m, name), put_u32(m, 1), put_u64(m, n), put_u32(m, type), put_u64(m, off);
}

Test(gguf, reader_refuses_crafted_files) {
    mem m;
    head(&m, 0, 0), m.b[0] = 'X';
    refused(&m, "no \"GGUF\" magic");
    head(&m, 0, 0), m.b[4] = 1;
    refused(&m, "version 1");
    head(&m, 1ull << 60, 0);
    refused(&m, "cannot fit");
    head(&m, 0, 1), put_u64(&m, 1ull << 62), put(&m, "xxxxxxxx", 8);
    refused(&m, "runs past the end");
    head(&m, 0, 1), put_str(&m, "k.type"), put_u32(&m, 77), put_u32(&m, 0);
    refused(&m, "key k.type has value type 77");
    head(&m, 0, 1), put_str(&m, "k.nest"), put_u32(&m, GGUF_ARRAY), put_u32(&m, GGUF_ARRAY), put_u64(&m, 1), put_u64(&m, 0);
    refused(&m, "key k.nest: array of arrays");
    head(&m, 0, 1), put_str(&m, "k.big"), put_u32(&m, GGUF_ARRAY), put_u32(&m, GGUF_U32), put_u64(&m, 1ull << 40);
    refused(&m, "key k.big: array of 1099511627776 u32 elements runs past");
    head(&m, 0, 2), put_str(&m, "k.a"), put_u32(&m, GGUF_U8), put(&m, "\1", 1), put_str(&m, "k.a"), put_u32(&m, GGUF_U8), put(&m, "\1", 1);
    refused(&m, "key k.a is given twice");
    head(&m, 0, 1), put_str(&m, "general.alignment"), put_u32(&m, GGUF_U32), put_u32(&m, 24);
    refused(&m, "general.alignment is not a u32 power of two");
    head(&m, 1, 0), tinfo(&m, "t.type", 4, 99, 0);
    refused(&m, "tensor t.type has ggml type 99");
    head(&m, 1, 0), tinfo(&m, "t.blocks", 20, GGML_Q8_0, 0);
    refused(&m, "tensor t.blocks: rows of 20 elements are not whole Q8_0 blocks");
    head(&m, 1, 0), tinfo(&m, "t.off", 4, GGML_F32, 32);
    refused(&m, "tensor t.off is at data offset 32, expected 0");
    head(&m, 1, 0), tinfo(&m, "t.end", 4, GGML_F32, 0);
    refused(&m, "tensor t.end (16 bytes at data offset 0) runs past the end");
    head(&m, 2, 0), tinfo(&m, "t.x", 1, GGML_F32, 0), tinfo(&m, "t.x", 1, GGML_F32, 32);
    while (m.n < 160) m.b[m.n++] = 0;
    refused(&m, "tensor t.x is given twice");
    head(&m, 1, 0), put_str(&m, "t.dims"), put_u32(&m, 5);
    while (m.n < 160) m.b[m.n++] = 0;
    refused(&m, "tensor t.dims has 5 dims");
    head(&m, 1, 0), put_str(&m, "t.huge"), put_u32(&m, 2), put_u64(&m, 1ull << 40), put_u64(&m, 1ull << 40);
    while (m.n < 160) m.b[m.n++] = 0;
    refused(&m, "tensor t.huge: dimension");
}
