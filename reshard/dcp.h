/*
 * reshard/dcp.h — PyTorch Distributed Checkpoint (DCP) directories, read without Python and without
 * executing anything (docs/DCP.md).
 *
 * A DCP directory holds `.metadata` (a pickle of torch.distributed.checkpoint.metadata.Metadata) and
 * data files (`__R_I.distcp`). The metadata lists every saved item by fully qualified name: a tensor
 * (TensorStorageMetadata: dtype, global shape, chunks = boxes given by offsets and sizes) or opaque
 * bytes (BytesStorageMetadata), and, per chunk or bytes item, where it lies (_StorageInfo: file,
 * offset, length). A tensor chunk's bytes are a whole torch.save record: a zip (entries stored, not
 * compressed) of `data.pkl`, a pickle that rebuilds the tensor from a storage entry `data/KEY` with a
 * storage offset, size and stride. Pickles go through reshard/pickle.[ch] (data only, an allowlist).
 *
 * dcp_open parses the metadata into named global tensors cut into chunks and the bytes items, refusing
 * (MP_EINPUT, naming the file and the item) what it cannot read: another metadata layout, a dtype
 * outside float32/bfloat16/float16/int32/int64, transform_descriptors (DCP's compression and other
 * stream extensions), a file name outside the directory, a chunk without a storage entry. It reads
 * nothing but `.metadata`: the file sizes are noted (-1: missing) for dcp_check and `ckpt verify`.
 * dcp_resolve reads one chunk's record — its zip directory and data.pkl, never the tensor bytes — and
 * finds where the chunk's elements lie in the file (row-major, contiguous), so a reader then preads
 * exactly the bytes it needs (dcp_read_chunk). Little-endian records only (byteorder is checked).
 */
#ifndef MP_DCP_H
#define MP_DCP_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "reshard/safetensors.h"

#define DCP_MAX_DIMS 8
#define DCP_MAX_METADATA ((int64_t)1 << 30)   /* bytes of .metadata read at most */
#define DCP_MAX_RECORD_PKL (1 << 20)          /* bytes of a record's data.pkl */
#define DCP_MAX_ZIP_DIR (1 << 20)             /* bytes of a record's zip central directory */

typedef struct dcp_chunk {
    int64_t offsets[DCP_MAX_DIMS], sizes[DCP_MAX_DIMS];   /* the box in the global tensor */
    int file;                                             /* index into dcp_dir.files */
    int64_t rec_offset, rec_length;                       /* the torch.save record in the file */
    int64_t data_offset, data_length;                     /* the chunk's bytes in the file; -1: not resolved */
} dcp_chunk;

typedef struct dcp_tensor {
    char *name;
    st_dtype dtype;
    const char *dtype_name;   /* torch's ("bfloat16") */
    int ndim;
    int64_t shape[DCP_MAX_DIMS];
    int nchunks;
    dcp_chunk *chunks;        /* in the metadata's order */
} dcp_tensor;

typedef struct dcp_item {     /* a BytesStorageMetadata item (its bytes are opaque to DCP) */
    char *name;
    int file;
    int64_t offset, length;
} dcp_item;

typedef struct dcp_dir {
    char *path;
    char *version;            /* Metadata.version ("1.0.0"), or NULL when absent (torch < 2.5) */
    int nfiles;
    char **files;             /* relative paths, in order of first use */
    int64_t *file_sizes;      /* -1: missing (dcp_open does not fail for it) */
    int nt, nb;
    dcp_tensor *t;            /* sorted by name */
    dcp_item *b;              /* sorted by name */
} dcp_dir;

/* What a torch.save record holds: a tensor view of one storage, or (a bytes item) a plain integer. */
typedef struct dcp_record {
    int is_tensor, is_int;
    int64_t int_value;
    st_dtype dtype;
    int64_t storage_numel, storage_offset;
    int ndim;
    int64_t size[DCP_MAX_DIMS], stride[DCP_MAX_DIMS];
    int64_t data_offset, data_length;   /* the storage entry's bytes, from the record's start */
} dcp_record;

/* 1 if path is a directory holding `.metadata`. */
int dcp_is_dir(const char *path);
/* Parses path/.metadata into *out (free with dcp_close); MP_EINPUT naming the file and item for what
 * is malformed or refused, MP_EIO when it cannot be read. */
mp_code dcp_open(dcp_dir **out, const char *path, mp_err *e);
void dcp_close(dcp_dir *d);
/* The metadata part of dcp_open on len bytes (what names them): pure, for the fuzz target. */
mp_code dcp_parse_metadata(const char *what, const uint8_t *buf, size_t len, dcp_dir *d, mp_err *e);

/* Parses a torch.save record of len bytes whose bytes come from read(ctx, offset, n, buf) (0 or an
 * errno) — its zip directory, data.pkl, the storage entry; what names it in messages. MP_EINPUT for a
 * malformed or compressed zip, a refused pickle, a storage entry whose size disagrees with its dtype
 * and element count or that lies outside the record. */
typedef int (*dcp_read_fn)(void *ctx, int64_t offset, size_t n, void *buf);
mp_code dcp_record_parse(const char *what, dcp_read_fn read, void *ctx, int64_t len, dcp_record *r, mp_err *e);

/* Reads chunk c of tensor t's record and sets c->data_offset/length (row-major bytes of the box in
 * its file). MP_EINPUT when the record does not hold exactly this box (dtype, size), or holds it
 * non-contiguous; MP_EIO for a missing or short file. */
mp_code dcp_resolve(dcp_dir *d, const dcp_tensor *t, dcp_chunk *c, mp_err *e);
/* The bytes of chunk c (resolved on first use) into out (numel x dtype size bytes). */
mp_code dcp_read_chunk(dcp_dir *d, const dcp_tensor *t, dcp_chunk *c, void *out, mp_err *e);
/* torchtitan's step: the item "train_state.step" (a 0-d integer tensor, or a bytes item holding a
 * torch.save'd int). 1 and *step when present and readable; 0 when absent; -1 with *e when unreadable. */
int dcp_train_step(dcp_dir *d, int64_t *step, mp_err *e);
/* Index of tensor name, or -1. */
int dcp_find(const dcp_dir *d, const char *name);
/* Elements of a box of ndim dims. */
int64_t dcp_numel(int ndim, const int64_t *sizes);

#endif
