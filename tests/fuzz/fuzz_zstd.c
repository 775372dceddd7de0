/*
 * tests/fuzz/fuzz_zstd.c — libFuzzer target for the zstd HDF5 filter (ckpt/zstd_filter.c), called
 * directly through its H5Z class (ckpt_zstd_filter_class[0].filter) as HDF5's pipeline calls it.
 *
 * Input: byte 0 picks the mode — bit 0: direction (0 decode the rest as a stored chunk, 1 encode it
 * then decode the frame back), bits 1-2: the cd_values (none; {level}; {level, CKPT_ZSTD_CD_TAG,
 * chunk bytes}; the tag with the size missing), bit 3: whether the thread's expected chunk size is
 * set (ckpt_zstd_expect, what ckpt_zstd_read does), bit 4: whether the expectation disagrees with
 * cd_values; bytes 1-3: the chunk size (little-endian, 1..2^24) and level; the rest is the chunk.
 * Contract checks (abort = finding), the ones HDF5 relies on since it copies a whole chunk out of the
 * returned buffer without looking at the returned size: a failure returns 0 and leaves the buffer and
 * its size untouched; a success returns n >= 1 with n <= *buf_size, every returned byte readable
 * (ASan), and, when the chunk size is known (cd_values or expectation), n equal to it; an encoded
 * chunk decodes back to the same bytes.
 * Corpus: tests/fuzz/corpus/zstd (frames of real chunks, crafted short/long/lying frames, regressions).
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/zstd_filter.h"

/* Runs the filter on a copy of in[0, n) in an HDF5-allocated buffer (as the pipeline does). Returns
 * the filter's result; *out and *out_size get the buffer after the call (caller frees with H5free_memory). */
static size_t run_filter(unsigned flags, size_t ncd, const unsigned *cd, const uint8_t *in, size_t n, void **out,
                         size_t *out_size) {
    size_t cap = n ? n : 1;
    void *buf = H5allocate_memory(cap, 0);
    if (!buf) abort();
    memcpy(buf, in, n);
    void *before = buf;
    size_t size = cap;
    size_t r = ckpt_zstd_filter_class[0].filter(flags, ncd, cd, n, &size, &buf);
    if (r == 0) {
        if (buf != before || size != cap || memcmp(buf, in, n) != 0) {
            fprintf(stderr, "filter failed but changed the buffer\n");
            abort();
        }
    } else {
        if (r > size || !buf) {
            fprintf(stderr, "filter returned %zu bytes in a %zu-byte buffer\n", r, size);
            abort();
        }
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < r; i++) sink ^= ((const uint8_t *)buf)[i];   /* ASan: every byte valid */
        (void)sink;
    }
    *out = buf;
    *out_size = size;
    return r;
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int once;
    if (!once) { H5open(); H5Eset_auto2(H5E_DEFAULT, NULL, NULL); once = 1; }
    if (size < 4) return 0;
    unsigned mode = data[0];
    size_t chunk = ((size_t)data[1] | (size_t)data[2] << 8 | (size_t)(data[3] & 0xff) << 16) + 1;
    unsigned level = data[3] % 8;   /* low levels: fast */
    const uint8_t *body = data + 4;
    size_t n = size - 4;
    unsigned cd[3] = {level, CKPT_ZSTD_CD_TAG, (unsigned)chunk};
    size_t ncd = 0;
    switch ((mode >> 1) & 3) {
    case 0: ncd = 0; break;
    case 1: ncd = 1; break;
    case 2: ncd = 3; break;
    case 3: ncd = 2; break;   /* tag without the size: malformed */
    }
    size_t expect = (mode & 8) ? ((mode & 16) ? chunk + 1 : chunk) : 0;
    /* the size the decoder must produce, when it knows one and the two sources agree */
    size_t known = expect ? expect : (ncd == 3 ? chunk : 0);
    void *out = NULL;
    size_t out_size = 0;
    if (mode & 1) {
        /* encode the body (a chunk of n bytes, so the recorded size is n), then decode the frame */
        cd[2] = (unsigned)n;
        size_t r = run_filter(0, ncd, cd, body, n, &out, &out_size);
        if (r != 0) {
            size_t prev = ckpt_zstd_expect(n);
            void *back = NULL;
            size_t back_size = 0;
            size_t r2 = run_filter(H5Z_FLAG_REVERSE, ncd, cd, out, r, &back, &back_size);
            ckpt_zstd_expect(prev);
            if (r2 != n || memcmp(back, body, n) != 0) {
                fprintf(stderr, "round trip of a %zu-byte chunk failed (%zu)\n", n, r2);
                abort();
            }
            H5free_memory(back);
        } else if (n > 0 && ncd != 2) {
            fprintf(stderr, "encoding a %zu-byte chunk failed\n", n);
            abort();
        }
    } else {
        size_t prev = ckpt_zstd_expect(expect);
        size_t r = run_filter(H5Z_FLAG_REVERSE, ncd, cd, body, n, &out, &out_size);
        ckpt_zstd_expect(prev);
        if (r != 0 && known && r != known) {
            fprintf(stderr, "decoded %zu bytes for a %zu-byte chunk\n", r, known);
            abort();
        }
        if (r != 0 && (mode & 24) == 24 && ncd == 3) abort();   /* disagreeing sizes must be refused */
    }
    H5free_memory(out);
    H5Eclear2(H5E_DEFAULT);
    return 0;
}
