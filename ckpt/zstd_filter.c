/*
 * ckpt/zstd_filter.c — the zstd HDF5 filter (id 32015); see zstd_filter.h for the contract.
 *
 * Forward (compress): the chunk becomes one zstd frame made by ZSTD_compress at level cd_values[0]
 * (clamped to zstd's range); the frame records its content size. When cd_values carry the chunk size
 * (set_local wrote them), a chunk of another size is refused rather than written unreadable.
 *
 * Reverse (decompress). HDF5 copies a whole chunk out of the buffer the filter returns and never looks
 * at the returned size, so a short result is a heap over-read in HDF5 (and garbage in the caller's
 * array), and an unbounded one is a decompression bomb. The decoder therefore:
 *   1. works out the size E the chunk must decode to: the calling thread's expectation (set by
 *      ckpt_zstd_read from the dataset's chunk dims and type: what HDF5 copies by) or else cd_values[2]
 *      when cd_values[1] is CKPT_ZSTD_CD_TAG; when both are known they must agree;
 *   2. accepts only exactly one zstd frame filling the chunk's stored bytes: the zstd magic number
 *      first (no skippable frames), ZSTD_findFrameCompressedSize == nbytes (no truncation, no second
 *      frame, no trailing bytes);
 *   3. with E known: a declared content size must equal E (checked before anything is allocated);
 *      the frame is decoded into a buffer of exactly E bytes (zstd stops with an error rather than
 *      write past it, and checks the declared size against what it decoded), and must fill it. An
 *      undeclared content size is decoded the same way. Nothing beyond E is ever allocated or decoded.
 *   4. with E unknown (files written before set_local, read by another tool through the plugin): the
 *      declared content size sizes the buffer, must be in [1, CKPT_ZSTD_FALLBACK_MAX] and must match
 *      what the frame decodes to; a frame without one is decoded by the streaming API into a buffer
 *      grown up to that ceiling. This bounds memory and refuses garbage, but cannot tell a short frame
 *      from a short chunk (docs/FORMAT.md "Compression").
 * Any failure returns 0 with the old buffer untouched, after pushing a message naming the cause on
 * HDF5's error stack; HDF5 then fails the H5Dread ("filter returned failure during read").
 *
 * Buffers are swapped with HDF5's allocator (H5allocate_memory / H5free_memory), as the filter API
 * requires of plugins.
 *
 * Also compiled into the plugin by #include from ckpt/plugin/zstd_plugin.c: keep it free of
 * dependencies beyond HDF5 and libzstd.
 */
#include "ckpt/zstd_filter.h"
#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

/* The calling thread's expected decoded chunk size (0: none); see ckpt_zstd_expect. */
static _Thread_local size_t t_zstd_expect;

/* Pushes "zstd filter: MSG" on the calling thread's HDF5 error stack and returns 0, the filter
 * callback's failure value. Call it last, after any other HDF5 call of the failing path. */
static size_t zstd_fail(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    H5Epush2(H5E_DEFAULT, __FILE__, "zstd_filter", __LINE__, H5E_ERR_CLS, H5E_PLINE, H5E_CANTFILTER,
             "zstd filter: %s", msg);
    return 0;
}

size_t ckpt_zstd_chunk_bytes(hid_t dcpl, hid_t type) {
    size_t out = 0;
    H5E_BEGIN_TRY {
        hsize_t dims[H5S_MAX_RANK];
        int nd = H5Pget_layout(dcpl) == H5D_CHUNKED ? H5Pget_chunk(dcpl, H5S_MAX_RANK, dims) : -1;
        size_t tsize = nd >= 1 ? H5Tget_size(type) : 0;
        int nf = tsize > 0 ? H5Pget_nfilters(dcpl) : -1;
        int seen = 0, ok = nf >= 1 && nd <= H5S_MAX_RANK;
        for (int i = 0; ok && i < nf; i++) {
            unsigned flags = 0, cfg = 0, cd[8];
            size_t ncd = sizeof cd / sizeof cd[0];
            H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, 0, NULL, &cfg);
            if (id == CKPT_ZSTD_FILTER_ID) seen++;
            else if (id < 0 || (!seen && id != H5Z_FILTER_SHUFFLE)) ok = 0;  /* would change zstd's input size */
        }
        if (ok && seen == 1) {
            uint64_t v = tsize;
            for (int d = 0; ok && d < nd; d++) {
                if (dims[d] == 0 || v > UINT32_MAX / dims[d]) ok = 0;   /* HDF5 chunks are < 4 GiB */
                else v *= dims[d];
            }
            if (ok && v <= UINT32_MAX && v <= SIZE_MAX) out = (size_t)v;
        }
    } H5E_END_TRY;
    return out;
}

size_t ckpt_zstd_expect(size_t bytes) {
    size_t prev = t_zstd_expect;
    t_zstd_expect = bytes;
    return prev;
}

herr_t ckpt_zstd_read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, void *buf) {
    size_t want = 0;
    H5E_BEGIN_TRY {
        hid_t dcpl = H5Dget_create_plist(dset), ft = H5Dget_type(dset);
        if (dcpl >= 0 && ft >= 0) want = ckpt_zstd_chunk_bytes(dcpl, ft);
        if (ft >= 0) H5Tclose(ft);
        if (dcpl >= 0) H5Pclose(dcpl);
    } H5E_END_TRY;
    size_t prev = ckpt_zstd_expect(want);
    herr_t hr = H5Dread(dset, mem_type, mem_space, file_space, dxpl, buf);
    ckpt_zstd_expect(prev);
    return hr;
}

/* The chunk size recorded in cd_values: sets *bytes (0 when the values carry none: files written
 * before set_local, or by another implementation) and returns 0; returns -1 when they claim to carry
 * one (the tag) but it is missing or zero. */
static int zstd_cd_bytes(size_t cd_nelmts, const unsigned int cd_values[], size_t *bytes) {
    *bytes = 0;
    if (cd_nelmts < 2 || cd_values[1] != CKPT_ZSTD_CD_TAG) return 0;
    if (cd_nelmts < CKPT_ZSTD_CD_NELMTS || cd_values[2] == 0) return -1;
    *bytes = cd_values[2];
    return 0;
}

/* Replaces *buf by out (cap bytes allocated, len valid) and returns len. */
static size_t zstd_swap(void **buf, size_t *buf_size, void *out, size_t cap, size_t len) {
    assert(out && len >= 1 && len <= cap);
    H5free_memory(*buf);
    *buf = out;
    *buf_size = cap;
    return len;
}

/* Decodes the single frame in[0, nbytes) into a new buffer of exactly `size` bytes; it must fill it.
 * Returns size (the buffer swapped in) or 0. */
static size_t zstd_decode_exact(const void *in, size_t nbytes, size_t size, size_t *buf_size, void **buf) {
    assert(size >= 1);
    void *out = H5allocate_memory(size, 0);
    if (!out) return zstd_fail("out of memory for a %zu-byte chunk", size);
    size_t got = ZSTD_decompress(out, size, in, nbytes);
    if (ZSTD_isError(got)) {
        H5free_memory(out);
        if (ZSTD_getErrorCode(got) == ZSTD_error_dstSize_tooSmall)
            return zstd_fail("the frame decodes to more than the chunk's %zu bytes", size);
        return zstd_fail("corrupt frame (%s)", ZSTD_getErrorName(got));
    }
    if (got != size) {
        H5free_memory(out);
        return zstd_fail("the frame decodes to %zu bytes, the chunk is %zu bytes", got, size);
    }
    return zstd_swap(buf, buf_size, out, size, got);
}

/* Decodes the single frame in[0, nbytes), of undeclared content size, with the streaming API into a
 * buffer grown up to cap bytes. Returns the decoded size (>= 1, the buffer swapped in) or 0. */
static size_t zstd_decode_stream(const void *in, size_t nbytes, size_t cap_max, size_t *buf_size, void **buf) {
    assert(cap_max >= 1);
    size_t cap = nbytes < cap_max / 4 ? nbytes * 4 : cap_max, len = 0;
    if (cap < 65536) cap = cap_max < 65536 ? cap_max : 65536;
    ZSTD_DStream *ds = ZSTD_createDStream();
    char *out = ds ? H5allocate_memory(cap, 0) : NULL;
    if (!out) {
        ZSTD_freeDStream(ds);
        return zstd_fail("out of memory decoding a chunk");
    }
    ZSTD_initDStream(ds);
    ZSTD_inBuffer ib = {in, nbytes, 0};
    const char *why = NULL;
    char err[96];
    for (;;) {
        if (len == cap) {
            if (cap == cap_max) { why = "expands beyond the bound for a chunk of unknown size"; break; }
            size_t ncap = cap > cap_max / 2 ? cap_max : cap * 2;
            char *n = H5resize_memory(out, ncap);
            if (!n) { why = "out of memory"; break; }
            out = n;
            cap = ncap;
        }
        size_t in_before = ib.pos;
        ZSTD_outBuffer ob = {out + len, cap - len, 0};
        size_t r = ZSTD_decompressStream(ds, &ob, &ib);
        if (ZSTD_isError(r)) {
            snprintf(err, sizeof err, "corrupt frame (%s)", ZSTD_getErrorName(r));
            why = err;
            break;
        }
        len += ob.pos;
        if (r == 0) break;                                            /* frame complete */
        if (ob.pos == 0 && ib.pos == in_before && len < cap) { why = "truncated frame"; break; }
    }
    ZSTD_freeDStream(ds);
    if (!why && (ib.pos != ib.size || len == 0)) why = len == 0 ? "empty frame" : "bytes after the frame";
    if (why) {
        H5free_memory(out);
        return zstd_fail("%s", why);
    }
    return zstd_swap(buf, buf_size, out, cap, len);
}

/* Reverse direction: see the top of this file. */
static size_t zstd_decode(size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes, size_t *buf_size,
                          void **buf) {
    size_t want = 0;
    if (zstd_cd_bytes(cd_nelmts, cd_values, &want) < 0) return zstd_fail("malformed filter parameters");
    if (t_zstd_expect) {
        if (want && want != t_zstd_expect)
            return zstd_fail("the filter parameters say %zu-byte chunks, the dataset's chunks are %zu bytes", want,
                             t_zstd_expect);
        want = t_zstd_expect;
    }
    const unsigned char *in = *buf;
    if (!in || nbytes < 4) return zstd_fail("a %zu-byte chunk holds no zstd frame", nbytes);
    uint32_t magic = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
    if (magic != ZSTD_MAGICNUMBER) return zstd_fail("the chunk is not a zstd frame (magic 0x%08x)", (unsigned)magic);
    size_t fsz = ZSTD_findFrameCompressedSize(in, nbytes);
    if (ZSTD_isError(fsz)) return zstd_fail("truncated or damaged frame (%s)", ZSTD_getErrorName(fsz));
    if (fsz != nbytes) return zstd_fail("%zu bytes follow the frame in the chunk (one frame per chunk)", nbytes - fsz);
    unsigned long long n = ZSTD_getFrameContentSize(in, nbytes);
    if (n == ZSTD_CONTENTSIZE_ERROR) return zstd_fail("damaged frame header");
    if (want) {
        if (n != ZSTD_CONTENTSIZE_UNKNOWN && n != (unsigned long long)want)
            return zstd_fail("the frame holds %llu bytes, the chunk is %zu bytes", n, want);
        return zstd_decode_exact(in, nbytes, want, buf_size, buf);
    }
    if (n == ZSTD_CONTENTSIZE_UNKNOWN) return zstd_decode_stream(in, nbytes, CKPT_ZSTD_FALLBACK_MAX, buf_size, buf);
    if (n == 0) return zstd_fail("empty frame");
    if (n > CKPT_ZSTD_FALLBACK_MAX)
        return zstd_fail("the frame declares %llu bytes, more than %zu for a chunk of unrecorded size", n,
                         CKPT_ZSTD_FALLBACK_MAX);
    return zstd_decode_exact(in, nbytes, (size_t)n, buf_size, buf);
}

/* Forward direction: one frame of the nbytes of *buf at level cd_values[0]. */
static size_t zstd_encode(size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes, size_t *buf_size,
                          void **buf) {
    size_t want = 0;
    if (zstd_cd_bytes(cd_nelmts, cd_values, &want) < 0) return zstd_fail("malformed filter parameters");
    if (nbytes == 0 || !*buf) return zstd_fail("empty chunk");
    if (want && nbytes != want)
        return zstd_fail("a %zu-byte chunk where the dataset's chunks are %zu bytes", nbytes, want);
    int level = CKPT_ZSTD_DEFAULT_LEVEL;
    if (cd_nelmts > 0) level = cd_values[0] <= INT_MAX ? (int)cd_values[0] : (int)(cd_values[0] - INT_MAX - 1) + INT_MIN;
    if (level < ZSTD_minCLevel()) level = ZSTD_minCLevel();
    if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
    size_t bound = ZSTD_compressBound(nbytes);
    if (ZSTD_isError(bound) || bound < nbytes) return zstd_fail("a %zu-byte chunk is too large for zstd", nbytes);
    void *out = H5allocate_memory(bound, 0);
    if (!out) return zstd_fail("out of memory for a %zu-byte frame", bound);
    size_t r = ZSTD_compress(out, bound, *buf, nbytes, level);
    if (ZSTD_isError(r)) {
        H5free_memory(out);
        return zstd_fail("compression failed (%s)", ZSTD_getErrorName(r));
    }
    assert(r >= 1 && r <= bound);
    return zstd_swap(buf, buf_size, out, bound, r);
}

/* The H5Z filter function: compresses or decompresses *buf (nbytes valid of *buf_size) in place of
 * the buffer; returns the new valid size, or 0 on failure (the old buffer is then left untouched). */
static size_t zstd_filter_fn(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                             size_t *buf_size, void **buf) {
    assert(buf && buf_size);
    if (cd_nelmts > 0 && !cd_values) return zstd_fail("malformed filter parameters");
    if (flags & H5Z_FLAG_REVERSE) return zstd_decode(cd_nelmts, cd_values, nbytes, buf_size, buf);
    return zstd_encode(cd_nelmts, cd_values, nbytes, buf_size, buf);
}

/* set_local: at dataset creation, rewrites the filter's cd_values to {level, CKPT_ZSTD_CD_TAG, chunk
 * bytes} (or {level} when ckpt_zstd_chunk_bytes cannot tell the size). Returns >= 0, or < 0 when the
 * property list cannot be read or changed (HDF5 then fails the creation). */
static herr_t zstd_set_local(hid_t dcpl, hid_t type, hid_t space) {
    (void)space;
    unsigned flags = 0, cfg = 0, cd[16];
    size_t ncd = sizeof cd / sizeof cd[0];
    if (H5Pget_filter_by_id2(dcpl, CKPT_ZSTD_FILTER_ID, &flags, &ncd, cd, 0, NULL, &cfg) < 0) return -1;
    unsigned v[CKPT_ZSTD_CD_NELMTS] = {ncd > 0 ? cd[0] : CKPT_ZSTD_DEFAULT_LEVEL, CKPT_ZSTD_CD_TAG, 0};
    size_t bytes = ckpt_zstd_chunk_bytes(dcpl, type);
    assert(bytes <= UINT_MAX);
    v[2] = (unsigned)bytes;
    return H5Pmodify_filter(dcpl, CKPT_ZSTD_FILTER_ID, flags, bytes ? CKPT_ZSTD_CD_NELMTS : 1, v);
}

const H5Z_class2_t ckpt_zstd_filter_class[1] = {{
    H5Z_CLASS_T_VERS,                 /* struct version */
    (H5Z_filter_t)CKPT_ZSTD_FILTER_ID,
    1, 1,                             /* encoder and decoder present */
    "Zstandard (meshpoint)",
    NULL,                             /* can_apply */
    zstd_set_local,                   /* records the chunk size in cd_values */
    zstd_filter_fn,
}};

static pthread_once_t g_zstd_once = PTHREAD_ONCE_INIT;
static int g_zstd_rc = -1;

/* pthread_once body of ckpt_zstd_register. */
static void zstd_register_once(void) { g_zstd_rc = H5Zregister(ckpt_zstd_filter_class) < 0 ? -1 : 0; }

int ckpt_zstd_register(void) {
    pthread_once(&g_zstd_once, zstd_register_once);
    return g_zstd_rc;
}
