/*
 * reshard/safetensors.h — the safetensors format (Hugging Face), read and written in C on cJSON.
 *
 * A file is: u64 little-endian N, N bytes of UTF-8 JSON (the header), then the data. The header is one
 * object: "__metadata__" (optional, string -> string) and, per tensor, {"dtype", "shape",
 * "data_offsets": [begin, end]} with offsets relative to the start of the data, covering it exactly
 * (no gaps, no overlaps, no trailing bytes). Data is row-major little-endian.
 *
 * Reader (st_open): reads and validates the header only — refusing, with the file and tensor named, a
 * header length beyond the file or above ST_MAX_HEADER, non-UTF-8 or non-object JSON, duplicate keys,
 * unknown dtype strings, a shape whose byte size differs from its offsets, overlapping or gapped
 * offsets and trailing bytes — and reads tensor data by ranges (pread), never the whole file:
 * st_read_f32 converts a box (row band and column range) of an F32, BF16 or F16 tensor to fp32.
 *
 * Writer (st_writer_*): the tensors are declared first (name, dtype, shape), so the header is
 * complete and written before any data; the data then streams in, tensor after tensor in declaration
 * order, in pieces of any size (fp32 input converted to F32, BF16 or F16 with round-to-nearest-even).
 * The header is padded with spaces to a multiple of 8 and carries __metadata__ {"format": "pt"};
 * offsets are contiguous from 0.
 */
#ifndef MP_SAFETENSORS_H
#define MP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define ST_MAX_HEADER 100000000   /* bytes of JSON header a reader accepts (as the reference library) */
#define ST_MAX_DIMS 8

/* Every dtype string of the format; only F32, BF16 and F16 convert to fp32. */
typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32,
    ST_F64, ST_I64, ST_U64, ST_NDTYPES
} st_dtype;

/* The format's name of a dtype ("F32"), its element size in bytes. */
const char *st_dtype_name(st_dtype d);
int st_dtype_size(st_dtype d);

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t begin, end;   /* data_offsets: bytes from the start of the data */
} st_tensor;

typedef struct st_file {
    char *path;
    int fd;
    int64_t file_size, data_start;   /* data_start = 8 + header length */
    int n;
    st_tensor *t;                    /* in header order */
    int64_t bytes_read;              /* data bytes fetched so far */
} st_file;

/* Parses and validates a header (len bytes, not NUL-terminated) for a file whose data part holds
 * data_size bytes; name (the file) prefixes every message. *t (malloc'd, free with st_tensors_free)
 * gets the tensors in header order. Pure: the fuzz target and the unit tests call it directly. */
mp_code st_parse_header(const char *name, const char *hdr, size_t len, int64_t data_size, st_tensor **t, int *n,
                        mp_err *e);
void st_tensors_free(st_tensor *t, int n);

/* Opens path, reads its length prefix and header, validates both against the file size. MP_EINPUT
 * naming the file (and tensor) for a malformed file. */
mp_code st_open(st_file **out, const char *path, mp_err *e);
void st_close(st_file *f);
/* Index of tensor name in f, or -1. */
int st_find(const st_file *f, const char *name);
/* Elements of a tensor. */
int64_t st_numel(const st_tensor *t);
/* Reads the box (off, shape) of tensor t of f (ndim 1 or 2: dims beyond the tensor's are 1) as fp32
 * row-major into out: one pread per band when the box spans whole rows; a column range of several
 * rows has its span read ahead first (st_prefetch), then segments under 64 KiB come out of whole rows
 * read 1 MiB at a time (counted in bytes_read: what was read, not only what was asked for), wider
 * ones one pread each. One thread at a time per file. MP_EINPUT
 * for a dtype other than F32/BF16/F16, MP_EIO naming the file for a failed or short read. */
mp_code st_read_f32(st_file *f, const st_tensor *t, const int64_t *off, const int64_t *shape, float *out, mp_err *e);
/* Asks the kernel to start reading the bytes of box (off, shape) of t (posix_fadvise WILLNEED of the
 * span from its first element to its last; segments of a column range are read ahead with the gaps
 * between them: one large disk read instead of one small read per row). A hint: no error, nothing
 * counted in bytes_read; a box outside t is ignored. */
void st_prefetch(st_file *f, const st_tensor *t, const int64_t *off, const int64_t *shape);

/* fp32 <-> bf16 / f16 (round to nearest even; NaN stays NaN, f16 overflow gives inf). */
uint16_t st_f32_to_bf16(float x);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float x);
float st_f16_to_f32(uint16_t h);
/* st_f32_to_f16 over n elements, vectorised (dst and src must not overlap); bitwise the same results.
 * The bf16 twin is core/tensor.h's mp_f32_to_bf16_n (st_f32_to_bf16 and mp_f32_to_bf16 agree). */
void st_f32_to_f16_n(uint16_t *restrict dst, const float *restrict src, int64_t n);

/* ------------------------------------------------------------------------------------ writer */

typedef struct st_decl {
    const char *name;
    st_dtype dtype;   /* ST_F32, ST_BF16 or ST_F16 */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_decl;

typedef struct st_writer st_writer;

/* Starts path, written under the fs layer's temp-file convention (path.tmp.<pid> until st_writer_close
 * renames it: core/fsutil.h mp_fs_out), with the length prefix and header for the n declared tensors.
 * MP_EIO naming the path. */
mp_code st_writer_open(st_writer **out, const char *path, const st_decl *d, int n, mp_err *e);
/* Appends count fp32 values of the data stream (the declared tensors' elements in order), converted
 * to each tensor's dtype. MP_EINTERNAL if more than declared. */
mp_code st_writer_put(st_writer *w, const float *x, int64_t count, mp_err *e);
/* Checks that every declared element was written, fsyncs, closes and renames the file to its path
 * (fsyncing the directory); frees w. MP_EIO naming the path; on any failure no file is left. */
mp_code st_writer_close(st_writer *w, mp_err *e);
/* Closes and removes the unfinished file (if any) and frees w, without checks (after an error). */
void st_writer_free(st_writer *w);
/* Data bytes of the declared tensors (the file is 8 + header + this). */
int64_t st_decl_bytes(const st_decl *d);

#endif
