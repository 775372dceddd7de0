/*
 * reshard/gguf.h — the GGUF container (format v3, llama.cpp's model file) as one concern: a streaming
 * writer, a bounded reader, and the block quantizations of ggml that meshpoint writes or reads.
 *
 * A GGUF file is: "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata (key: u64
 * length + bytes; u32 value type; the value: a scalar, a string, or an array of one element type and u64
 * count); the tensor infos (name, u32 ndim, u64 ne[ndim] innermost first — numpy's shape reversed —,
 * u32 ggml type, u64 offset into the data section); padding to general.alignment (default 32); the data
 * section, each tensor at its offset, padded to the alignment. Little-endian throughout.
 *
 * The writer (gguf_w_*) takes the metadata and the tensor infos first (they are small: even a 150k-entry
 * vocabulary is a few MiB), then streams each tensor's bytes in order, in pieces of any size, into
 * PATH.partial; gguf_w_close checks that every declared byte came, fsyncs and renames the file to PATH,
 * so a crash never leaves a half-written PATH and never touches an older one before the rename.
 *
 * The reader (gguf_open*) parses the header region of an untrusted file through a read callback: every
 * count, length and offset is bounded by the file size before anything is allocated, value types and
 * ggml types are validated, keys and tensor names must be unique, tensors must lie at the aligned,
 * consecutive offsets llama.cpp's own loader requires; errors are MP_EINPUT naming the file and the key
 * or tensor. No recursion (an array of arrays is refused: GGUF models never hold one).
 *
 * Quantization follows ggml's reference code (ggml-quants.c) and gguf-py's quants.py bit for bit:
 * q8_0 blocks of 32: d = amax / 127 as fp32, stored fp16; q = roundf(x * (1/d)) (half away from zero).
 * q4_0 and q4_1 are read (dequantized) only, as ggml does.
 */
#ifndef MP_GGUF_H
#define MP_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

/* Metadata value types (gguf.c's GGUF_TYPE_*). */
typedef enum {
    GGUF_U8 = 0, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY,
    GGUF_U64, GGUF_I64, GGUF_F64, GGUF_NTYPES
} gguf_vtype;

/* The ggml tensor types meshpoint writes or reads; every other known type has a name for messages. */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q8_0 = 8, GGML_BF16 = 30 };

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_QK 32   /* elements per block of q8_0, q4_0, q4_1 */

/* A ggml type's name ("Q8_0"), or NULL for a number ggml does not define. */
const char *gguf_type_name(int type);
/* Bytes of n elements (a multiple of the block size) of ggml type `type`; -1 if the type is unknown or n
 * is not a whole number of blocks. */
int64_t gguf_type_bytes(int type, int64_t n);

/* ------------------------------------------------------------------------------------ quants */

/* q8_0 of n floats (n a multiple of 32) into n / 32 * 34 bytes, as ggml's quantize_row_q8_0_ref. */
void gguf_quantize_q8_0(const float *x, int64_t n, uint8_t *out);
/* Dequantization of n elements of q8_0, q4_0 or q4_1 (or F32/F16/BF16) from src into fp32, as gguf-py's
 * dequantize (and ggml's dequantize_row_*). MP_EINPUT for another type or a partial block. */
mp_code gguf_dequantize(int type, const uint8_t *src, int64_t n, float *out, mp_err *e);

/* ------------------------------------------------------------------------------------ writer */

typedef struct gguf_writer gguf_writer;

/* Starts a GGUF file for path (written to path.partial until gguf_w_close). alignment 0: 32 (else a
 * power of two, written as general.alignment). Nothing is created before gguf_w_begin_data. */
mp_code gguf_w_open(gguf_writer **out, const char *path, uint32_t alignment, mp_err *e);
/* Metadata, in the order given (the caller gives each key once). */
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
/* Arrays: n strings (n lengths in len, or len NULL: NUL-terminated), i32 or f32 values. */
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, const size_t *len, int64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, int64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, int64_t n);
/* Declares the next tensor: name, ndim dims of numpy order shape (rows first), ggml type. */
mp_code gguf_w_tensor(gguf_writer *w, const char *name, int ndim, const int64_t *shape, int type, mp_err *e);
/* Writes path.partial's header, metadata and tensor infos; after it only tensor data. */
mp_code gguf_w_begin_data(gguf_writer *w, mp_err *e);
/* Appends n bytes of the current tensor's data (tensors in declaration order; a tensor's padding is
 * written when its last byte is). MP_EINTERNAL past the declared bytes. */
mp_code gguf_w_data(gguf_writer *w, const void *p, size_t n, mp_err *e);
/* Checks that every declared byte was written, fsyncs, renames path.partial to path (durably). */
mp_code gguf_w_close(gguf_writer *w, mp_err *e);
/* After gguf_w_close: reads path back with the reader (every bound and offset checked), compares the
 * header region byte for byte and each tensor's bytes by their XXH3-64 with what was written (as the checkpoint's
 * checksums; a byte-serial hash, FNV-1a, took a fifth of an export's time). MP_ECHECK naming the file and the
 * tensor. */
mp_code gguf_w_verify(const gguf_writer *w, mp_err *e);
/* Frees; an unfinished path.partial is removed (never path). */
void gguf_w_free(gguf_writer *w);

/* ------------------------------------------------------------------------------------ reader */

typedef struct gguf_kv {
    char *key;
    int type;          /* gguf_vtype */
    int arr_type;      /* GGUF_ARRAY: the element type */
    uint64_t n;        /* GGUF_ARRAY: the element count */
    union { uint64_t u; int64_t i; double f; } v;   /* integer, bool and float scalars, widened */
    char *str;         /* GGUF_STRING: the value, NUL-terminated (str_len bytes, may hold NULs) */
    size_t str_len;
    void *arr;         /* GGUF_ARRAY: numeric elements as stored (LE), or char *[n] for strings */
    size_t *arr_len;   /* string arrays: each string's length */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    int ndim;
    int64_t shape[GGUF_MAX_DIMS];   /* numpy order: shape[ndim - 1] is ggml's ne[0] */
    int type;
    uint64_t offset;                /* absolute, in the file */
    int64_t nbytes;
} gguf_tensor;

typedef struct gguf_file {
    char *name;                     /* for messages */
    uint32_t version;
    uint64_t size, alignment, data_offset;
    int64_t nkv, nt;
    gguf_kv *kv;
    gguf_tensor *t;
    /* the byte source: read n bytes at off into buf, 0 or an errno */
    int (*read)(void *ctx, int64_t off, size_t n, void *buf);
    void *ctx;
    void *fp;                       /* gguf_open's FILE, else NULL */
} gguf_file;

/* Parses the header region of size bytes read through read(ctx, ...) (see above); name is used in
 * messages. On error *out is NULL. */
mp_code gguf_parse(gguf_file **out, const char *name, uint64_t size, int (*read)(void *, int64_t, size_t, void *),
                   void *ctx, mp_err *e);
/* gguf_parse of the file at path. */
mp_code gguf_open(gguf_file **out, const char *path, mp_err *e);
void gguf_close(gguf_file *g);
/* The index of key / tensor name, or -1. */
int64_t gguf_find_kv(const gguf_file *g, const char *key);
int64_t gguf_find_tensor(const gguf_file *g, const char *name);
/* Reads n bytes of tensor t's data from byte off of it. MP_EIO naming the file. */
mp_code gguf_read_data(const gguf_file *g, const gguf_tensor *t, int64_t off, size_t n, void *buf, mp_err *e);

#endif
