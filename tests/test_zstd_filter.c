/*
 * tests/test_zstd_filter.c — the zstd HDF5 filter (ckpt/zstd_filter.c) against crafted frames.
 *
 * Part 1 calls the filter callback directly, as HDF5 does, with buffers from HDF5's allocator (so ASan
 * sees every byte read or written): the good frame decodes; every crafted one (short content, long
 * content, a lying content-size header, undeclared size, truncated, garbage, empty input, an empty
 * frame, two frames, a skippable frame, trailing bytes, decompression bombs) fails with 0 and leaves
 * the caller's buffer untouched, and a message naming the cause is on HDF5's error stack. The chunk
 * size comes from cd_values {level, CKPT_ZSTD_CD_TAG, bytes}, from the thread's expectation
 * (ckpt_zstd_expect), or neither (the fallback for files written before the size was recorded).
 *
 * Part 2 goes through HDF5: set_local records the chunk size in cd_values; a chunk replaced by a short
 * frame (H5Dwrite_chunk) makes H5Dread fail on a new file, and ckpt_zstd_read fail on an old-style
 * file whose cd_values hold the level only (written with a filter class lacking set_local).
 *
 * Frames are built by hand (magic, frame header, raw/RLE blocks: RFC 8878) where zstd's encoder would
 * not produce them.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zstd.h>
#include "ckpt/zstd_filter.h"
#include "tests/testutil.h"

#define CHUNK 4096

/* ----------------------------------------------------------------------------- frame builders */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes_t;

/* Appends n bytes of src to b (growing it). */
static void put(bytes_t *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* Appends the k low bytes of v, little-endian. */
static void put_le(bytes_t *b, uint64_t v, int k) {
    for (int i = 0; i < k; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}

/* A hand-made frame of `content` bytes (value i*7 mod 251 at i when raw, all 0x55 when rle) in blocks
 * of at most 128 KiB. declare: the header carries `declared` as its content size (single segment);
 * else the size is undeclared and the window is 128 KiB. */
static bytes_t craft(int declare, uint64_t declared, uint64_t content, int rle) {
    bytes_t b = {0};
    put_le(&b, ZSTD_MAGICNUMBER, 4);
    if (declare) {
        put_le(&b, 0xE0, 1);              /* FCS field 8 bytes, single segment */
        put_le(&b, declared, 8);
    } else {
        put_le(&b, 0x00, 1);              /* no FCS, window descriptor follows */
        put_le(&b, (17 - 10) << 3, 1);    /* window 2^17 */
    }
    uint64_t done = 0;
    do {
        uint64_t k = content - done < 131072 ? content - done : 131072;
        int last = done + k == content;
        put_le(&b, (uint64_t)last | (uint64_t)(rle ? 1 : 0) << 1 | k << 3, 3);
        if (rle) {
            put_le(&b, 0x55, 1);
        } else {
            for (uint64_t i = 0; i < k; i++) put_le(&b, (done + i) * 7 % 251, 1);
        }
        done += k;
    } while (done < content);
    return b;
}

/* n bytes of a fixed, compressible pattern. */
static uint8_t *pattern(size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    cr_assert(p);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((i / 16) * 31 + (i % 5));
    return p;
}

/* zstd's own frame of n pattern bytes; declare = 0 leaves the content size out of the header. */
static bytes_t zframe(size_t n, int declare) {
    uint8_t *src = pattern(n);
    bytes_t b = {.cap = ZSTD_compressBound(n)};
    b.p = malloc(b.cap);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    cr_assert(b.p && c);
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, declare);
    b.n = ZSTD_compress2(c, b.p, b.cap, src, n);
    cr_assert(!ZSTD_isError(b.n));
    ZSTD_freeCCtx(c);
    free(src);
    return b;
}

/* ------------------------------------------------------------------------ calling the filter */

static const unsigned CD_NEW[3] = {3, CKPT_ZSTD_CD_TAG, CHUNK};   /* written by set_local */
static const unsigned CD_OLD[1] = {3};                            /* before it: the level only */

/* The innermost message on HDF5's error stack (the filter's own). */
static char g_msg[512];
static herr_t walk_cb(unsigned n, const H5E_error2_t *err, void *data) {
    (void)n;
    (void)data;
    snprintf(g_msg, sizeof g_msg, "%s", err->desc ? err->desc : "");
    return 0;
}

/* Runs the filter in direction `reverse` on a copy of in[0, n) in an HDF5-allocated buffer of n bytes.
 * On success returns the valid size and, if out != NULL, a malloc'd copy of the result (every valid
 * byte read, so ASan checks the size); on failure checks that the input buffer was left as it was and
 * that a "zstd filter:" message was pushed, and returns 0. */
static size_t run_filter(int reverse, const unsigned *cd, size_t ncd, const void *in, size_t n, uint8_t **out) {
    void *buf = H5allocate_memory(n ? n : 1, 0);
    cr_assert(buf);
    if (n) memcpy(buf, in, n);
    void *orig = buf;
    size_t buf_size = n ? n : 1;
    H5Eclear2(H5E_DEFAULT);
    g_msg[0] = 0;
    size_t r = ckpt_zstd_filter_class[0].filter(reverse ? H5Z_FLAG_REVERSE : 0, ncd, cd, n, &buf_size, &buf);
    if (r == 0) {
        cr_assert(buf == orig && buf_size == (n ? n : 1), "a failing filter replaced the buffer");
        cr_assert(n == 0 || memcmp(buf, in, n) == 0, "a failing filter changed the buffer");
        H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, NULL);
        cr_assert(strstr(g_msg, "zstd filter:"), "no cause on the error stack: \"%s\"", g_msg);
    } else {
        cr_assert(buf_size >= r);
        if (out) {
            *out = malloc(r);
            cr_assert(*out);
            memcpy(*out, buf, r);
        }
    }
    H5free_memory(buf);
    H5Eclear2(H5E_DEFAULT);
    return r;
}

/* Decodes frame f with cd_values cd and expects a clean failure whose message contains `why`. */
static void refused(const unsigned *cd, size_t ncd, bytes_t f, const char *why) {
    size_t r = run_filter(1, cd, ncd, f.p, f.n, NULL);
    cr_assert_eq(r, 0, "a crafted frame (%s) was accepted: %zu bytes", why, r);
    cr_assert(strstr(g_msg, why), "message \"%s\" does not say \"%s\"", g_msg, why);
}

/* --------------------------------------------------------------------------- part 1: frames */

Test(zstd_filter, roundtrip_records_and_checks_the_size) {
    uint8_t *src = pattern(CHUNK), *enc = NULL, *dec = NULL;
    size_t n = run_filter(0, CD_NEW, 3, src, CHUNK, &enc);
    cr_assert(n > 0 && n < CHUNK);
    cr_assert_eq(run_filter(1, CD_NEW, 3, enc, n, &dec), CHUNK);
    cr_assert(memcmp(dec, src, CHUNK) == 0);
    free(dec);
    dec = NULL;
    cr_assert_eq(run_filter(1, CD_OLD, 1, enc, n, &dec), CHUNK, "old-style cd_values must still decode");
    cr_assert(memcmp(dec, src, CHUNK) == 0);
    free(dec);
    free(enc);
    free(src);
}

Test(zstd_filter, short_and_long_content) {
    bytes_t a = zframe(CHUNK / 4, 1), b = zframe(CHUNK * 2, 1), c = craft(1, CHUNK - 1, CHUNK - 1, 0);
    refused(CD_NEW, 3, a, "the frame holds 1024 bytes, the chunk is 4096 bytes");
    refused(CD_NEW, 3, b, "the frame holds 8192 bytes, the chunk is 4096 bytes");
    refused(CD_NEW, 3, c, "the frame holds 4095 bytes");
    free(a.p);
    free(b.p);
    free(c.p);
}

Test(zstd_filter, lying_content_size) {
    /* the header says CHUNK, the blocks hold less / more */
    bytes_t a = craft(1, CHUNK, 1000, 0), b = craft(1, CHUNK, 3 * CHUNK, 0), c = craft(1, CHUNK, CHUNK, 0);
    refused(CD_NEW, 3, a, "corrupt frame");
    refused(CD_NEW, 3, b, "decodes to more than the chunk's 4096 bytes");
    uint8_t *dec = NULL;
    cr_assert_eq(run_filter(1, CD_NEW, 3, c.p, c.n, &dec), CHUNK, "the honest hand-made frame must decode");
    for (size_t i = 0; i < CHUNK; i++) cr_assert_eq(dec[i], i * 7 % 251);
    free(dec);
    /* without a recorded size the header is all there is, but it still must match the blocks */
    refused(CD_OLD, 1, a, "corrupt frame");
    refused(CD_OLD, 1, b, "decodes to more than the chunk's 4096 bytes");
    free(a.p);
    free(b.p);
    free(c.p);
}

Test(zstd_filter, undeclared_content_size) {
    bytes_t a = zframe(CHUNK, 0), b = zframe(CHUNK / 2, 0), c = zframe(CHUNK * 3, 0);
    cr_assert_eq(ZSTD_getFrameContentSize(a.p, a.n), ZSTD_CONTENTSIZE_UNKNOWN);
    cr_assert_eq(run_filter(1, CD_NEW, 3, a.p, a.n, NULL), CHUNK);
    refused(CD_NEW, 3, b, "the frame decodes to 2048 bytes, the chunk is 4096 bytes");
    refused(CD_NEW, 3, c, "decodes to more than the chunk's 4096 bytes");
    cr_assert_eq(run_filter(1, CD_OLD, 1, c.p, c.n, NULL), CHUNK * 3, "fallback: streamed");
    free(a.p);
    free(b.p);
    free(c.p);
}

Test(zstd_filter, truncated_frames) {
    bytes_t f = zframe(CHUNK, 1), r = craft(1, CHUNK, CHUNK, 0);
    size_t cuts[] = {1, 2, f.n / 2, f.n - 5, f.n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        bytes_t t = {.p = f.p, .n = cuts[i]};
        cr_assert_eq(run_filter(1, CD_NEW, 3, t.p, t.n, NULL), 0, "a frame cut to %zu of %zu bytes was accepted", t.n, f.n);
        cr_assert_eq(run_filter(1, CD_OLD, 1, t.p, t.n, NULL), 0);
    }
    bytes_t t = {.p = r.p, .n = r.n - 100};
    refused(CD_NEW, 3, t, "truncated or damaged frame");
    free(f.p);
    free(r.p);
}

Test(zstd_filter, garbage_and_empty) {
    uint8_t junk[CHUNK];
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < sizeof junk; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        junk[i] = (uint8_t)s;
    }
    bytes_t g = {.p = junk, .n = sizeof junk};
    refused(CD_NEW, 3, g, "not a zstd frame");
    refused(CD_OLD, 1, g, "not a zstd frame");
    /* the magic number, then garbage */
    memcpy(junk, (uint8_t[]){0x28, 0xB5, 0x2F, 0xFD}, 4);
    cr_assert_eq(run_filter(1, CD_NEW, 3, junk, sizeof junk, NULL), 0);
    cr_assert_eq(run_filter(1, CD_OLD, 1, junk, sizeof junk, NULL), 0);
    /* no bytes at all, fewer than a magic number */
    refused(CD_NEW, 3, (bytes_t){.p = junk, .n = 0}, "holds no zstd frame");
    refused(CD_OLD, 1, (bytes_t){.p = junk, .n = 3}, "holds no zstd frame");
    /* a valid frame of zero bytes */
    bytes_t e = zframe(0, 1), u = craft(0, 0, 0, 0);
    refused(CD_NEW, 3, e, "the frame holds 0 bytes");
    refused(CD_OLD, 1, e, "empty frame");
    refused(CD_NEW, 3, u, "decodes to 0 bytes");
    refused(CD_OLD, 1, u, "empty frame");
    free(e.p);
    free(u.p);
}

Test(zstd_filter, one_frame_per_chunk) {
    bytes_t a = zframe(CHUNK / 2, 1), two = {0}, tail = {0}, skip = {0};
    put(&two, a.p, a.n);
    put(&two, a.p, a.n);                  /* two frames: together exactly one chunk */
    refused(CD_NEW, 3, two, "follow the frame");
    refused(CD_OLD, 1, two, "follow the frame");
    bytes_t f = zframe(CHUNK, 1);
    put(&tail, f.p, f.n);
    put_le(&tail, 0, 7);
    refused(CD_NEW, 3, tail, "7 bytes follow the frame");
    put_le(&skip, 0x184D2A50, 4);         /* a skippable frame, then the real one */
    put_le(&skip, 4, 4);
    put_le(&skip, 0, 4);
    put(&skip, f.p, f.n);
    refused(CD_NEW, 3, skip, "not a zstd frame");
    free(a.p);
    free(two.p);
    free(f.p);
    free(tail.p);
    free(skip.p);
}

/* Peak resident memory of this process in KiB. */
static long peak_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

Test(zstd_filter, decompression_bombs) {
    /* 1 GiB of RLE blocks in 32 KiB of frame, declared or not */
    const uint64_t G = 1ull << 30;
    bytes_t d = craft(1, G, G, 1), u = craft(0, 0, G, 1), huge = craft(1, 1ull << 40, 131072, 1);
    cr_assert(d.n < 40000 && u.n < 40000);
    long before = peak_kib();
    refused(CD_NEW, 3, d, "the frame holds 1073741824 bytes, the chunk is 4096 bytes");
    refused(CD_NEW, 3, u, "decodes to more than the chunk's 4096 bytes");
    refused(CD_OLD, 1, d, "more than 268435456 for a chunk of unrecorded size");
    refused(CD_OLD, 1, huge, "more than 268435456");
    long grew = peak_kib() - before;
    cr_assert(grew < 64 * 1024, "refusing the bombs took %ld KiB", grew);
    /* without any size the streaming fallback stops at its ceiling */
    refused(CD_OLD, 1, u, "expands beyond the bound");
    free(d.p);
    free(u.p);
    free(huge.p);
}

Test(zstd_filter, thread_expectation) {
    bytes_t s = zframe(1000, 1), f = zframe(CHUNK, 1);
    /* the fallback takes a short frame at its word: that is what the expectation is for */
    cr_assert_eq(run_filter(1, CD_OLD, 1, s.p, s.n, NULL), 1000);
    cr_assert_eq(ckpt_zstd_expect(CHUNK), 0);
    refused(CD_OLD, 1, s, "the frame holds 1000 bytes, the chunk is 4096 bytes");
    cr_assert_eq(run_filter(1, CD_OLD, 1, f.p, f.n, NULL), CHUNK);
    cr_assert_eq(run_filter(1, CD_NEW, 3, f.p, f.n, NULL), CHUNK);
    cr_assert_eq(ckpt_zstd_expect(2 * CHUNK), CHUNK);
    refused(CD_NEW, 3, f, "the filter parameters say 4096-byte chunks, the dataset's chunks are 8192 bytes");
    cr_assert_eq(ckpt_zstd_expect(0), 2 * CHUNK);
    free(s.p);
    free(f.p);
}

Test(zstd_filter, malformed_parameters) {
    bytes_t f = zframe(CHUNK, 1);
    unsigned two[2] = {3, CKPT_ZSTD_CD_TAG}, zero[3] = {3, CKPT_ZSTD_CD_TAG, 0}, foreign[3] = {3, 77, 1000};
    refused(two, 2, f, "malformed filter parameters");
    refused(zero, 3, f, "malformed filter parameters");
    cr_assert_eq(run_filter(1, foreign, 3, f.p, f.n, NULL), CHUNK, "values without the tag are another writer's");
    free(f.p);
}

Test(zstd_filter, compress_direction) {
    uint8_t *src = pattern(CHUNK);
    /* a chunk of another size than recorded, an empty chunk */
    cr_assert_eq(run_filter(0, CD_NEW, 3, src, 100, NULL), 0);
    cr_assert(strstr(g_msg, "a 100-byte chunk where the dataset's chunks are 4096 bytes"), "%s", g_msg);
    cr_assert_eq(run_filter(0, CD_OLD, 1, src, 0, NULL), 0);
    /* a size zstd cannot bound: refused before the buffer is read or anything allocated */
    void *buf = H5allocate_memory(16, 0), *orig = buf;
    size_t bs = 16;
    cr_assert_eq(ckpt_zstd_filter_class[0].filter(0, 1, CD_OLD, SIZE_MAX - 8, &bs, &buf), 0);
    cr_assert(buf == orig && bs == 16);
    H5free_memory(buf);
    /* out-of-range levels are clamped; no level means the default */
    unsigned lv[3][1] = {{1000}, {0xFFFFFFFFu}, {0}};
    for (int i = 0; i < 3; i++) {
        uint8_t *enc = NULL, *dec = NULL;
        size_t n = run_filter(0, lv[i], 1, src, CHUNK, &enc);
        cr_assert(n > 0);
        cr_assert_eq(run_filter(1, CD_NEW, 3, enc, n, &dec), CHUNK);
        cr_assert(memcmp(dec, src, CHUNK) == 0);
        free(enc);
        free(dec);
    }
    uint8_t *enc = NULL;
    cr_assert(run_filter(0, NULL, 0, src, CHUNK, &enc) > 0);
    free(enc);
    free(src);
}

/* ------------------------------------------------------------------------- part 2: HDF5 files */

#define ROWS 64
#define COLS 16   /* float32: chunk (16, 16) = 1 KiB, 4 chunks */

/* Creates path with dataset "x" (ROWS x COLS f32, chunks 16 x COLS, shuffle + zstd level 5; deflate
 * in front of zstd when `deflate`), filled with i * 0.5. Returns nothing; asserts success. */
static void make_file(const char *path, int deflate) {
    cr_assert_eq(ckpt_zstd_register(), 0);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {ROWS, COLS}, ch[2] = {16, COLS};
    hid_t sp = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    unsigned lvl = 5;
    cr_assert(f >= 0 && sp >= 0 && dcpl >= 0);
    cr_assert(H5Pset_chunk(dcpl, 2, ch) >= 0);
    cr_assert((deflate ? H5Pset_deflate(dcpl, 1) : H5Pset_shuffle(dcpl)) >= 0);
    cr_assert(H5Pset_filter(dcpl, CKPT_ZSTD_FILTER_ID, H5Z_FLAG_MANDATORY, 1, &lvl) >= 0);
    hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert(d >= 0);
    float v[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) v[i] = (float)i * 0.5f;
    cr_assert(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    cr_assert(H5Fclose(f) >= 0);
}

/* The cd_values of filter 32015 on dataset x of path: their count, the first three in cd[]. */
static size_t cd_of(const char *path, unsigned cd[3]) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "x", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    unsigned flags, cfg, all[8] = {0};
    size_t n = 8;
    cr_assert(H5Pget_filter_by_id2(dcpl, CKPT_ZSTD_FILTER_ID, &flags, &n, all, 0, NULL, &cfg) >= 0);
    memcpy(cd, all, 3 * sizeof *cd);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);
    return n;
}

/* Replaces chunk `idx` (row block) of x with frame fr, raw (H5Dwrite_chunk, filters bypassed). */
static void replace_chunk(const char *path, int idx, bytes_t fr) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), d = H5Dopen2(f, "x", H5P_DEFAULT);
    hsize_t off[2] = {(hsize_t)idx * 16, 0};
    cr_assert(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, fr.n, fr.p) >= 0);
    H5Dclose(d);
    cr_assert(H5Fclose(f) >= 0);
}

/* Reads all of x from path (with ckpt_zstd_read when `lib`, else H5Dread) into v; returns the herr_t,
 * the innermost error message in g_msg. */
static herr_t read_x(const char *path, int lib, float *v) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "x", H5P_DEFAULT);
    cr_assert(f >= 0 && d >= 0);
    g_msg[0] = 0;
    herr_t hr = lib ? ckpt_zstd_read(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)
                    : H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (hr < 0) H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, NULL);
    H5Eclear2(H5E_DEFAULT);
    H5Dclose(d);
    H5Fclose(f);
    return hr;
}

/* A frame of n bytes of zeros (what a short chunk would hold). */
static bytes_t zeros_frame(size_t n) {
    void *z = calloc(1, n);
    bytes_t b = {.cap = ZSTD_compressBound(n)};
    b.p = malloc(b.cap);
    b.n = ZSTD_compress(b.p, b.cap, z, n, 3);
    cr_assert(z && b.p && !ZSTD_isError(b.n));
    free(z);
    return b;
}

Test(zstd_filter, set_local_records_the_chunk_size) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char *dir = tu_mkdtemp("zstdf"), *p = tu_path(dir, "a.h5"), *q = tu_path(dir, "b.h5");
    make_file(p, 0);
    unsigned cd[3];
    cr_assert_eq(cd_of(p, cd), 3);
    cr_assert(cd[0] == 5 && cd[1] == CKPT_ZSTD_CD_TAG && cd[2] == 16 * COLS * 4, "cd_values %u %u %u", cd[0], cd[1], cd[2]);
    float v[ROWS * COLS];
    cr_assert(read_x(p, 0, v) >= 0 && read_x(p, 1, v) >= 0);
    for (int i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], (float)i * 0.5f);
    /* deflate changes zstd's input size: no size recorded, the fallback decodes */
    make_file(q, 1);
    cr_assert_eq(cd_of(q, cd), 1);
    cr_assert_eq(ckpt_zstd_chunk_bytes(H5P_DEFAULT, H5T_NATIVE_FLOAT), 0);
    cr_assert(read_x(q, 1, v) >= 0);
    for (int i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], (float)i * 0.5f);
    tu_rm_rf(dir);
    free(p);
    free(q);
    free(dir);
}

Test(zstd_filter, short_chunk_in_a_new_file_fails_the_read) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char *dir = tu_mkdtemp("zstdf"), *p = tu_path(dir, "a.h5");
    make_file(p, 0);
    bytes_t s = zeros_frame(100), b = craft(0, 0, 1u << 30, 1);
    replace_chunk(p, 2, s);
    float v[ROWS * COLS];
    cr_assert(read_x(p, 0, v) < 0, "H5Dread returned a short chunk");
    cr_assert(strstr(g_msg, "the frame holds 100 bytes, the chunk is 1024 bytes"), "%s", g_msg);
    cr_assert(read_x(p, 1, v) < 0);
    replace_chunk(p, 2, b);               /* 1 GiB of RLE blocks, no declared size */
    cr_assert(read_x(p, 0, v) < 0);
    cr_assert(strstr(g_msg, "decodes to more than the chunk's 1024 bytes"), "%s", g_msg);
    tu_rm_rf(dir);
    free(s.p);
    free(b.p);
    free(p);
    free(dir);
}

Test(zstd_filter, short_chunk_in_an_old_file_fails_the_library_read) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char *dir = tu_mkdtemp("zstdf"), *p = tu_path(dir, "old.h5");
    /* the filter as it was before set_local: cd_values hold the level only */
    cr_assert_eq(ckpt_zstd_register(), 0);   /* once per process: make_file's call is a no-op now */
    H5Z_class2_t old = ckpt_zstd_filter_class[0];
    old.set_local = NULL;
    cr_assert(H5Zregister(&old) >= 0);       /* replaces the registered class */
    make_file(p, 0);
    unsigned cd[3];
    cr_assert_eq(cd_of(p, cd), 1);
    cr_assert(H5Zregister(ckpt_zstd_filter_class) >= 0);
    float v[ROWS * COLS];
    cr_assert(read_x(p, 1, v) >= 0);
    for (int i = 0; i < ROWS * COLS; i++) cr_assert_eq(v[i], (float)i * 0.5f);
    bytes_t s = zeros_frame(100);
    replace_chunk(p, 1, s);
    /* plain H5Dread would take the frame at its word (the documented fallback) and HDF5 would then
     * read 1024 bytes out of 100: only the library's read, which knows the chunk size, is safe here */
    cr_assert(read_x(p, 1, v) < 0, "ckpt_zstd_read returned a short chunk of an old file");
    cr_assert(strstr(g_msg, "the frame holds 100 bytes, the chunk is 1024 bytes"), "%s", g_msg);
    cr_assert_eq(ckpt_zstd_expect(0), 0, "ckpt_zstd_read left its expectation set");
    tu_rm_rf(dir);
    free(s.p);
    free(p);
    free(dir);
}
