/*
 * core/data.h — token files and the deterministic batch loader.
 *
 * Formats:
 *   MP_DATA_LLMC  llm.c: int32 header[256] (header[0] magic, header[1] version, header[2] token count,
 *                 the rest 0), then the tokens; the magic decides their width (llm.c's
 *                 dev/data/data_common.py HEADERS_INFO):
 *                   20240520 version 1: uint16 tokens (GPT-2 files);
 *                   20240801 version 7: uint32 tokens (Llama 3 files, any vocabulary up to 2^32).
 *   MP_DATA_U16   raw little-endian uint16 tokens (nanoGPT's train.bin).
 *   MP_DATA_U32   raw little-endian uint32 tokens.
 * Files are memory-mapped; opening checks the header, the size against the token count, and that every
 * token id is < vocab_size (the message names the file, the offset and the id). --data-format llmc
 * (the default) reads both llm.c kinds, told apart by the magic.
 *
 * Loader: the data is a stream of sequences of T+1 tokens. Global batch g (of B sequences) starts at
 * token position pos; its sequence k reads tokens [pos + k*T, pos + k*T + T + 1), inputs the first T
 * and targets the last T. Any rank may ask for any range of sequences of the current batch, so which
 * sequence lands where depends only on its global index k, never on the mesh. After a batch pos
 * advances by B*T; when the next batch would run past the end, pos wraps to 0 and epoch increments.
 * The cursor (pos, epoch) is all the state there is: saving and restoring it continues exactly.
 */
#ifndef MP_DATA_H
#define MP_DATA_H

#include <stdint.h>
#include "core/error.h"

typedef enum { MP_DATA_LLMC = 0, MP_DATA_U16, MP_DATA_U32 } mp_data_format;

#define MP_LLMC_MAGIC 20240520          /* llm.c GPT-2 files: version 1, uint16 tokens */
#define MP_LLMC_VERSION 1
#define MP_LLMC3_MAGIC 20240801         /* llm.c Llama 3 files: version 7, uint32 tokens */
#define MP_LLMC3_VERSION 7
#define MP_LLMC_HEADER_INTS 256

typedef struct mp_token_file {
    char path[1024];
    mp_data_format format;
    int token_bytes;        /* 2 or 4: from the format, or for llm.c files from the header's magic */
    int64_t ntokens;
    const void *tokens;     /* into the mapping, past any header */
    void *map;              /* mmap base */
    size_t map_bytes;
} mp_token_file;

/* "llmc" | "u16" | "u32" -> format; -1 if unknown. */
int mp_data_format_parse(const char *s);
const char *mp_data_format_name(mp_data_format f);

/* Opens and validates path. Errors are MP_EINPUT: missing file, short header, wrong magic (the message
 * suggests --data-format u16 for raw files), unsupported version, truncated (fewer tokens than the header
 * says, or a raw size not a multiple of the token size), empty, token id >= vocab_size (vocab_size <= 0:
 * no id check). */
mp_code mp_token_file_open(mp_token_file *f, const char *path, mp_data_format fmt, int vocab_size, mp_err *err);
void mp_token_file_close(mp_token_file *f);
static inline int32_t mp_token_at(const mp_token_file *f, int64_t i) {
    return f->token_bytes == 4 ? (int32_t)((const uint32_t *)f->tokens)[i]
                               : (int32_t)((const uint16_t *)f->tokens)[i];
}

/* Writes tokens (each < 65536) as an llm.c-format file; MP_EIO naming the path on failure. */
mp_code mp_token_file_write_llmc(const char *path, const uint16_t *tokens, int64_t n, mp_err *err);
/* Writes tokens as an llm.c Llama 3 file (magic 20240801, version 7, uint32 tokens), as llm.c's
 * write_datafile(..., "llama-3") does; MP_EINPUT for more than INT32_MAX tokens, MP_EIO naming the path. */
mp_code mp_token_file_write_llmc3(const char *path, const uint32_t *tokens, int64_t n, mp_err *err);

typedef struct mp_loader_cursor {
    int64_t pos;     /* token position of the current batch */
    int64_t epoch;
} mp_loader_cursor;

typedef struct mp_loader {
    const mp_token_file *file;
    int batch;       /* B: sequences per global batch */
    int seq_len;     /* T */
    mp_loader_cursor cur;
} mp_loader;

/* MP_EINPUT if the file holds fewer than B*T + 1 tokens. */
mp_code mp_loader_init(mp_loader *l, const mp_token_file *f, int batch, int seq_len, mp_err *err);
/* Fills count sequences [first, first + count) of the current batch: inputs/targets are [count, T]. */
void mp_loader_get(const mp_loader *l, int first, int count, int32_t *inputs, int32_t *targets);
/* Moves to the next global batch (wrapping at the end of the data). */
void mp_loader_advance(mp_loader *l);
/* Restores a saved cursor (e.g. from a checkpoint), checking that its batch lies inside the file:
 * MP_EINPUT naming the file otherwise. Equivalent to l->cur = cur when valid. */
mp_code mp_loader_set_cursor(mp_loader *l, mp_loader_cursor cur, mp_err *err);

#endif
