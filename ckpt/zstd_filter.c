/*
 * ckpt/zstd_filter.c — the zstd HDF5 filter (id 32015); see zstd_filter.h for the contract.
 *
 * Forward (compress): the chunk becomes one zstd frame made by ZSTD_compress at level cd_values[0]
 * (clamped to zstd's range); the frame records its content size. Reverse (decompress): the frame's
 * content size sizes the output buffer; a frame without one (written by a streaming encoder elsewhere)
 * is decoded with the streaming API into a growing buffer. Buffers are swapped with HDF5's allocator
 * (H5allocate_memory / H5free_memory), as the filter API requires of plugins. A failure returns 0,
 * which HDF5 reports as a filter error on the dataset being read or written.
 *
 * Also compiled into the plugin by #include from ckpt/plugin/zstd_plugin.c: keep it free of
 * dependencies beyond HDF5 and libzstd.
 */
#include "ckpt/zstd_filter.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <zstd.h>

/* Decodes one frame of unknown content size with the streaming API; returns the size or 0. */
static size_t zstd_decode_stream(const void *in, size_t nbytes, void **out_buf, size_t *out_cap) {
    ZSTD_DStream *ds = ZSTD_createDStream();
    if (!ds) return 0;
    size_t cap = nbytes * 4 + 4096, len = 0;
    char *out = H5allocate_memory(cap, 0);
    if (!out) { ZSTD_freeDStream(ds); return 0; }
    ZSTD_initDStream(ds);
    ZSTD_inBuffer ib = {in, nbytes, 0};
    for (;;) {
        if (len == cap) {
            size_t ncap = cap * 2;
            char *n = H5resize_memory(out, ncap);
            if (!n) goto fail;
            out = n;
            cap = ncap;
        }
        ZSTD_outBuffer ob = {out + len, cap - len, 0};
        size_t r = ZSTD_decompressStream(ds, &ob, &ib);
        if (ZSTD_isError(r)) goto fail;
        len += ob.pos;
        if (r == 0) break;                                  /* frame complete */
        if (ib.pos == ib.size && ob.pos < ob.size) goto fail; /* truncated input */
    }
    ZSTD_freeDStream(ds);
    *out_buf = out;
    *out_cap = cap;
    return len;
fail:
    ZSTD_freeDStream(ds);
    H5free_memory(out);
    return 0;
}

/* The H5Z filter function: compresses or decompresses *buf (nbytes valid of *buf_size) in place of
 * the buffer; returns the new valid size, or 0 on failure (the old buffer is then left untouched). */
static size_t zstd_filter_fn(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[],
                             size_t nbytes, size_t *buf_size, void **buf) {
    if (flags & H5Z_FLAG_REVERSE) {
        unsigned long long n = ZSTD_getFrameContentSize(*buf, nbytes);
        if (n == ZSTD_CONTENTSIZE_ERROR) return 0;
        void *out = NULL;
        size_t cap = 0, got;
        if (n == ZSTD_CONTENTSIZE_UNKNOWN) {
            got = zstd_decode_stream(*buf, nbytes, &out, &cap);
            if (got == 0) return 0;
        } else {
            if (n > SIZE_MAX - 1) return 0;
            cap = n ? (size_t)n : 1;
            out = H5allocate_memory(cap, 0);
            if (!out) return 0;
            got = ZSTD_decompress(out, cap, *buf, nbytes);
            if (ZSTD_isError(got) || got != n) { H5free_memory(out); return 0; }
        }
        H5free_memory(*buf);
        *buf = out;
        *buf_size = cap;
        return got;
    }
    int level = cd_nelmts > 0 ? (int)cd_values[0] : CKPT_ZSTD_DEFAULT_LEVEL;
    if (level < ZSTD_minCLevel()) level = ZSTD_minCLevel();
    if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
    size_t bound = ZSTD_compressBound(nbytes);
    void *out = H5allocate_memory(bound, 0);
    if (!out) return 0;
    size_t r = ZSTD_compress(out, bound, *buf, nbytes, level);
    if (ZSTD_isError(r)) { H5free_memory(out); return 0; }
    H5free_memory(*buf);
    *buf = out;
    *buf_size = bound;
    return r;
}

const H5Z_class2_t ckpt_zstd_filter_class[1] = {{
    H5Z_CLASS_T_VERS,                 /* struct version */
    (H5Z_filter_t)CKPT_ZSTD_FILTER_ID,
    1, 1,                             /* encoder and decoder present */
    "Zstandard (meshpoint)",
    NULL, NULL,                       /* can_apply, set_local */
    zstd_filter_fn,
}};

static pthread_once_t g_zstd_once = PTHREAD_ONCE_INIT;
static int g_zstd_rc = -1;

static void zstd_register_once(void) { g_zstd_rc = H5Zregister(ckpt_zstd_filter_class) < 0 ? -1 : 0; }

int ckpt_zstd_register(void) {
    pthread_once(&g_zstd_once, zstd_register_once);
    return g_zstd_rc;
}
