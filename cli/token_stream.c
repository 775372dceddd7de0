/*
 * cli/token_stream.c — streamed llm.c token files (cli/token_stream.h).
 *
 * The tokens go, buffered, to PATH.tmp.PID behind a header whose count is still 0. Splitting copies the
 * tail (the validation tokens) into VAL.tmp.PID block by block, truncates the train file before it, then
 * writes the real headers, fsyncs both and renames them over their final names, so neither final name
 * ever holds a partial file. Headers as core/data.h describes: int32[256], magic, version, count.
 */
#include "cli/token_stream.h"
#include "core/fsutil.h"
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/data.h"

#define HEADER_BYTES ((int64_t)MP_LLMC_HEADER_INTS * 4)
#define COPY_BLOCK (1 << 20)

/* Writes the header of a file of n tokens of width w at offset 0 of f. */
static int write_header(FILE *f, int w, int64_t n) {
    int32_t hdr[MP_LLMC_HEADER_INTS] = {0};
    hdr[0] = w == 2 ? MP_LLMC_MAGIC : MP_LLMC3_MAGIC;
    hdr[1] = w == 2 ? MP_LLMC_VERSION : MP_LLMC3_VERSION;
    hdr[2] = (int32_t)n;
    return fseeko(f, 0, SEEK_SET) == 0 && fwrite(hdr, sizeof hdr, 1, f) == 1 ? 0 : -1;
}

/* Opens s->tmp for path with a placeholder header. */
static mp_code open_tmp(mp_token_stream *s, const char *path, int width, mp_err *err) {
    memset(s, 0, sizeof *s);
    assert(width == 2 || width == 4);
    snprintf(s->path, sizeof s->path, "%s", path);
    char *tmp = mp_fs_tmp_name(path);   /* the fs layer's temp-file convention: PATH.tmp.<pid> */
    snprintf(s->tmp, sizeof s->tmp, "%s", tmp);
    free(tmp);
    s->width = width;
    s->f = fopen(s->tmp, "w+b");
    if (!s->f) return mp_err_set(err, MP_EIO, "writing %s: cannot create %s: %s", path, s->tmp, strerror(errno));
    if (write_header(s->f, width, 0) != 0) {
        mp_token_stream_abort(s);
        return mp_err_set(err, MP_EIO, "writing %s: %s", path, strerror(errno));
    }
    return MP_OK;
}

mp_code mp_token_stream_open(mp_token_stream *s, const char *path, int width, mp_err *err) {
    return open_tmp(s, path, width, err);
}

mp_code mp_token_stream_put(mp_token_stream *s, const int32_t *ids, int64_t n, mp_err *err) {
    union { uint16_t h[4096]; uint32_t w[4096]; } buf;
    for (int64_t i = 0; i < n;) {
        int64_t k = 0;
        for (; k < 4096 && i < n; k++, i++) {
            assert(ids[i] >= 0 && (s->width == 4 || ids[i] < 65536));
            if (s->width == 2) buf.h[k] = (uint16_t)ids[i];
            else buf.w[k] = (uint32_t)ids[i];
        }
        if (fwrite(&buf, (size_t)s->width, (size_t)k, s->f) != (size_t)k)
            return mp_err_set(err, MP_EIO, "writing %s: %s", s->tmp, strerror(errno));
    }
    s->n += n;
    return MP_OK;
}

/* Copies the last nval tokens of s into v (open, header written). */
static int copy_tail(mp_token_stream *s, mp_token_stream *v, int64_t nval) {
    static char block[COPY_BLOCK];
    off_t from = (off_t)(HEADER_BYTES + (s->n - nval) * s->width), end = (off_t)(HEADER_BYTES + s->n * s->width);
    if (fseeko(v->f, HEADER_BYTES, SEEK_SET) != 0) return -1;
    while (from < end) {
        size_t want = (size_t)(end - from < COPY_BLOCK ? end - from : COPY_BLOCK);
        ssize_t got = pread(fileno(s->f), block, want, from);
        if (got <= 0 || fwrite(block, 1, (size_t)got, v->f) != (size_t)got) return -1;
        from += got;
    }
    v->n = nval;
    return 0;
}

/* Writes s's header, then closes it durably and renames it into place durably (core/fsutil: the data
 * and the new name both survive a power cut). MP_EIO naming the file on failure. */
static mp_code finish(mp_token_stream *s, mp_err *err) {
    int ok = write_header(s->f, s->width, s->n) == 0;
    int e = errno;
    mp_code rc = mp_fs_close_durable(s->f, s->tmp, err);   /* closes the file either way */
    s->f = NULL;
    if (!ok) return mp_err_set(err, MP_EIO, "writing the header of %s: %s", s->tmp, strerror(e));
    return rc ? rc : mp_fs_rename_durable(s->tmp, s->path, NULL, err);
}

mp_code mp_token_stream_split_commit(mp_token_stream *s, const char *val_path, int64_t nval, mp_err *err) {
    assert(nval >= 0 && nval < s->n);
    if (s->n - nval > INT32_MAX || nval > INT32_MAX) {
        mp_token_stream_abort(s);
        return mp_err_set(err, MP_EINPUT, "writing %s: %lld tokens do not fit the llm.c header's int32 count",
                          s->path, (long long)s->n);
    }
    if (nval == 0) {   /* --val-fraction 0: the train file alone */
        mp_code rc = finish(s, err);
        if (rc) mp_token_stream_abort(s);
        return rc;
    }
    mp_token_stream v;
    MP_TRY(open_tmp(&v, val_path, s->width, err));
    int ok = fflush(s->f) == 0 && copy_tail(s, &v, nval) == 0;
    s->n -= nval;
    ok = ok && fflush(s->f) == 0 && ftruncate(fileno(s->f), (off_t)(HEADER_BYTES + s->n * s->width)) == 0;
    mp_code rc = ok ? MP_OK : mp_err_set(err, MP_EIO, "writing %s and %s: %s", s->path, val_path, strerror(errno));
    if (!rc) rc = finish(&v, err);
    if (!rc) rc = finish(s, err);
    if (!rc) return MP_OK;
    mp_token_stream_abort(&v);
    mp_token_stream_abort(s);
    return rc;
}

void mp_token_stream_abort(mp_token_stream *s) {
    if (s->f) fclose(s->f);
    s->f = NULL;
    if (s->tmp[0]) unlink(s->tmp);
}
