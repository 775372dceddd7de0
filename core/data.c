/*
 * core/data.c — see data.h. Token files are mmap'ed read-only and validated once at open (header,
 * size, every token id against the vocabulary), so the loader itself never fails: it only copies
 * slices of the mapping into int32 input/target buffers. The host is assumed little-endian, as the
 * on-disk formats are (llm.c and nanoGPT make the same assumption).
 *
 * llm.c files come in two kinds told apart by the header's magic (GPT-2: uint16 tokens; Llama 3: uint32):
 * the opened file records its token width, so everything past the open reads either alike.
 *
 * Writing (mp_token_file_write_llmc, _llmc3) goes through the fs layer's temp-file convention (mp_fs_out:
 * "PATH.tmp.<pid>", fsync, close, rename over PATH, fsync of the directory), so a crash never leaves a
 * half-written file under the final name, and a finished write keeps its name.
 */
#include "core/data.h"
#include "core/fsutil.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

#define HEADER_BYTES ((int64_t)MP_LLMC_HEADER_INTS * (int64_t)sizeof(int32_t))

int mp_data_format_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "llmc")) return MP_DATA_LLMC;
    if (!strcmp(s, "u16")) return MP_DATA_U16;
    if (!strcmp(s, "u32")) return MP_DATA_U32;
    return -1;
}

const char *mp_data_format_name(mp_data_format f) {
    switch (f) {
    case MP_DATA_LLMC: return "llmc";
    case MP_DATA_U16: return "u16";
    case MP_DATA_U32: return "u32";
    }
    return "unknown";
}

/* Checks every token id against vocab_size (skipped when vocab_size <= 0); the first bad one is named. */
static mp_code check_vocab(const mp_token_file *f, int vocab_size, mp_err *err) {
    if (vocab_size <= 0) return MP_OK;
    for (int64_t i = 0; i < f->ntokens; i++) {
        int64_t id = f->token_bytes == 4 ? (int64_t)((const uint32_t *)f->tokens)[i]
                                         : (int64_t)((const uint16_t *)f->tokens)[i];
        if (id >= vocab_size)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: token %lld has id %lld, not < vocab_size %d "
                              "(was the file made for a larger vocabulary?)",
                              f->path, (long long)i, (long long)id, vocab_size);
    }
    return MP_OK;
}

/* Validates the sizes (and the llm.c header, read with pread before mapping) and sets f->ntokens and
 * the byte offset of the first token. */
static mp_code check_layout(mp_token_file *f, int fd, int64_t size, int64_t *tok_off, mp_err *err) {
    const char *fmt = mp_data_format_name(f->format);
    if (f->format == MP_DATA_LLMC) {
        if (size < HEADER_BYTES)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: %lld bytes, shorter than the %lld-byte llm.c header "
                              "(truncated, or not an llm.c file: for raw nanoGPT files use --data-format u16)",
                              f->path, (long long)size, (long long)HEADER_BYTES);
        int32_t hdr[MP_LLMC_HEADER_INTS];
        ssize_t got = pread(fd, hdr, sizeof hdr, 0);
        if (got != (ssize_t)sizeof hdr)
            return mp_err_set(err, MP_EINPUT, "token file %s: cannot read the header: %s", f->path,
                              got < 0 ? strerror(errno) : "short read");
        if (hdr[0] != MP_LLMC_MAGIC && hdr[0] != MP_LLMC3_MAGIC)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: bad magic number %d in the header, expected %d (llm.c GPT-2, "
                              "uint16 tokens) or %d (llm.c Llama 3, uint32 tokens) for an llm.c token file (for "
                              "a raw nanoGPT-style uint16 file use --data-format u16, for raw uint32 --data-format u32)",
                              f->path, (int)hdr[0], MP_LLMC_MAGIC, MP_LLMC3_MAGIC);
        int llama3 = hdr[0] == MP_LLMC3_MAGIC, want_version = llama3 ? MP_LLMC3_VERSION : MP_LLMC_VERSION;
        if (hdr[1] != want_version)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: unsupported llm.c version %d for magic %d (supported: %d, %s tokens)",
                              f->path, (int)hdr[1], (int)hdr[0], want_version, llama3 ? "uint32" : "uint16");
        f->token_bytes = llama3 ? 4 : 2;
        if (hdr[2] < 0)
            return mp_err_set(err, MP_EINPUT, "token file %s: negative token count %d in the header",
                              f->path, (int)hdr[2]);
        if (hdr[2] == 0)
            return mp_err_set(err, MP_EINPUT, "token file %s: empty: the header declares 0 tokens", f->path);
        int64_t want = (int64_t)hdr[2] * f->token_bytes, have = size - HEADER_BYTES;
        if (have < want)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: truncated: the header declares %lld tokens (%lld bytes) but "
                              "only %lld token bytes follow it",
                              f->path, (long long)hdr[2], (long long)want, (long long)have);
        if (have > want)
            return mp_err_set(err, MP_EINPUT,
                              "token file %s: %lld unexpected bytes after the %lld tokens the header declares",
                              f->path, (long long)(have - want), (long long)hdr[2]);
        f->ntokens = hdr[2];
        *tok_off = HEADER_BYTES;
        return MP_OK;
    }
    int64_t tsz = f->format == MP_DATA_U32 ? 4 : 2;
    f->token_bytes = (int)tsz;
    if (size == 0) return mp_err_set(err, MP_EINPUT, "token file %s: empty: 0 bytes", f->path);
    if (size % tsz != 0)
        return mp_err_set(err, MP_EINPUT,
                          "token file %s: truncated: raw %s file size %lld bytes is not a multiple of the "
                          "%lld-byte token size",
                          f->path, fmt, (long long)size, (long long)tsz);
    f->ntokens = size / tsz;
    *tok_off = 0;
    return MP_OK;
}

mp_code mp_token_file_open(mp_token_file *f, const char *path, mp_data_format fmt, int vocab_size, mp_err *err) {
    assert(f && path);
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    if (fmt != MP_DATA_LLMC && fmt != MP_DATA_U16 && fmt != MP_DATA_U32)
        return mp_err_set(err, MP_EINPUT, "token file %s: unknown data format %d", path, (int)fmt);
    f->format = fmt;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mp_err_set(err, MP_EINPUT, "token file %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mp_err_set(err, MP_EINPUT, "token file %s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mp_err_set(err, MP_EINPUT, "token file %s: not a regular file", path);
    }
    int64_t off = 0;
    mp_code rc = check_layout(f, fd, (int64_t)st.st_size, &off, err);
    if (rc != MP_OK) {
        close(fd);
        f->ntokens = 0;
        return rc;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);  /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        f->ntokens = 0;
        return mp_err_set(err, MP_EINPUT, "token file %s: cannot mmap %lld bytes: %s", path,
                          (long long)st.st_size, strerror(e));
    }
    f->map = map;
    f->map_bytes = (size_t)st.st_size;
    f->tokens = (const char *)map + off;
    rc = check_vocab(f, vocab_size, err);
    if (rc != MP_OK) mp_token_file_close(f);
    return rc;
}

void mp_token_file_close(mp_token_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_bytes);
    f->map = NULL;
    f->map_bytes = 0;
    f->tokens = NULL;
    f->ntokens = 0;
}

/* Writes an llm.c file: the header (magic, version, n) and n tokens of tsz bytes each, under the fs
 * layer's temp-file convention (mp_fs_out: PATH.tmp.<pid>, fsync, rename; see the top of the file). */
static mp_code write_llmc_any(const char *path, int32_t magic, int32_t version, const void *tokens, int64_t n,
                              size_t tsz, mp_err *err) {
    assert(path && (tokens || n == 0) && n >= 0);
    if (n > INT32_MAX)
        return mp_err_set(err, MP_EINPUT, "writing %s: %lld tokens do not fit the llm.c header's int32 count",
                          path, (long long)n);
    int32_t hdr[MP_LLMC_HEADER_INTS] = {0};
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = (int32_t)n;
    mp_fs_out o;
    MP_TRY(mp_fs_out_open(&o, path, err));
    mp_code rc = mp_fs_out_write(&o, hdr, sizeof hdr, err);
    if (!rc) rc = mp_fs_out_write(&o, tokens, (size_t)n * tsz, err);
    if (rc) mp_fs_out_abandon(&o);
    else rc = mp_fs_out_commit(&o, err);
    return rc;
}

mp_code mp_token_file_write_llmc(const char *path, const uint16_t *tokens, int64_t n, mp_err *err) {
    return write_llmc_any(path, MP_LLMC_MAGIC, MP_LLMC_VERSION, tokens, n, sizeof(uint16_t), err);
}

mp_code mp_token_file_write_llmc3(const char *path, const uint32_t *tokens, int64_t n, mp_err *err) {
    return write_llmc_any(path, MP_LLMC3_MAGIC, MP_LLMC3_VERSION, tokens, n, sizeof(uint32_t), err);
}

/* ---- loader ---- */

/* Tokens one global batch reads: B sequences of T, plus the one extra target at the end. */
static int64_t batch_span(const mp_loader *l) { return (int64_t)l->batch * l->seq_len + 1; }

mp_code mp_loader_init(mp_loader *l, const mp_token_file *f, int batch, int seq_len, mp_err *err) {
    assert(l && f);
    memset(l, 0, sizeof *l);
    if (batch <= 0 || seq_len <= 0)
        return mp_err_set(err, MP_EINPUT, "data loader for %s: batch %d and seq_len %d must be positive",
                          f->path, batch, seq_len);
    l->file = f;
    l->batch = batch;
    l->seq_len = seq_len;
    if (f->ntokens < batch_span(l))
        return mp_err_set(err, MP_EINPUT,
                          "data loader for %s: the file holds %lld tokens, too small for one batch of "
                          "%d sequences x %d tokens (needs %lld)",
                          f->path, (long long)f->ntokens, batch, seq_len, (long long)batch_span(l));
    return MP_OK;
}

mp_code mp_loader_set_cursor(mp_loader *l, mp_loader_cursor cur, mp_err *err) {
    assert(l && l->file);
    /* written so that no crafted value overflows: ntokens >= batch_span once the loader is initialised */
    if (cur.pos < 0 || cur.epoch < 0 || cur.pos > l->file->ntokens - batch_span(l))
        return mp_err_set(err, MP_EINPUT,
                          "data loader for %s: cursor (pos %lld, epoch %lld) is outside the file's %lld "
                          "tokens for batches of %d x %d (was the checkpoint made with another data file?)",
                          l->file->path, (long long)cur.pos, (long long)cur.epoch, (long long)l->file->ntokens,
                          l->batch, l->seq_len);
    l->cur = cur;
    return MP_OK;
}

void mp_loader_get(const mp_loader *l, int first, int count, int32_t *inputs, int32_t *targets) {
    assert(l && l->file && first >= 0 && count >= 0 && first + count <= l->batch);
    assert(l->cur.pos >= 0 && l->cur.pos + batch_span(l) <= l->file->ntokens);
    const int T = l->seq_len;
    for (int s = 0; s < count; s++) {
        int64_t start = l->cur.pos + (int64_t)(first + s) * T;
        int32_t *in = inputs + (size_t)s * T, *tg = targets + (size_t)s * T;
        for (int t = 0; t < T; t++) {
            in[t] = mp_token_at(l->file, start + t);
            tg[t] = mp_token_at(l->file, start + t + 1);
        }
    }
}

void mp_loader_advance(mp_loader *l) {
    assert(l && l->file);
    l->cur.pos += (int64_t)l->batch * l->seq_len;
    if (l->cur.pos + batch_span(l) > l->file->ntokens) {
        l->cur.pos = 0;
        l->cur.epoch++;
    }
}
