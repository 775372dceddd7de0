/*
 * reshard/dcp_sink.c — the engine's sink for a PyTorch Distributed Checkpoint directory (`meshpoint
 * export --format dcp`; docs/DCP.md "What meshpoint writes"), which torch.distributed.checkpoint.load
 * reads into an HF-named state dict or torchtitan's Llama 3 model.
 *
 * Each box the engine adds is one DCP chunk (ChunkStorageMetadata: offsets = the box's offset, sizes =
 * its shape) of the tensor its name maps to (rs_dcp_name), stored in `__R_0.distcp` for its target rank
 * R: the file a torch job of that mesh would have written, each rank's shard one chunk. add() only
 * records the box and its fill callback; commit() writes every file, one torch.save record per chunk,
 * pulling the chunk in row bands of at most band_bytes of fp32 (converted to the output dtype and
 * CRC'd as they go), then `.metadata` last (the pickle of Metadata: every tensor, its chunks and where
 * each record lies), all inside DIR.partial, renamed to DIR at the end (rs_publish_dir).
 *
 * A torch.save record as torch 2.15 writes it (and as dcp.c reads it): a zip of stored entries under
 * `archive/` — data.pkl (a protocol-2 pickle: _rebuild_tensor_v2 of persistent id ('storage',
 * <dtype>Storage, '0', 'cpu', numel), offset 0, size, row-major stride), byteorder, version,
 * .format_version, .storage_alignment and data/0 (the elements) — each entry's data 64-byte aligned
 * from the record's start (torch pads with an "FB" extra field), the CRC-32 of every entry in its local
 * and central headers, and a zip64 end record before the classic one. No data descriptors: sizes are
 * known before the data, and the CRC of the streamed data/0 is patched into its local header after.
 * A record whose entry or offsets would need zip64 fields (a chunk of 4 GiB or more) is refused:
 * export on a mesh (--tp/--dp) that cuts it smaller.
 *
 * Names (rs_dcp_name, reshard/dcp_names.h, shared with the DCP source): HF names (meshpoint's own, the
 * family's fused HF tensors as row ranges of one DCP tensor, so a Phi-3 qkv_proj is three chunks) or
 * torchtitan's Llama 3 names, whose wq / wk rows are permuted within each head (from_hf's direction,
 * rs_dcp_hf_row). The Adam moments go under torchtitan's flattened optimizer names
 * (`optimizer.state.<fqn>.exp_avg`, `.exp_avg_sq`), with AdamW's `step` (a 0-d float32 per parameter)
 * and torchtitan's `train_state.step` (0-d int32) beside them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/tensor.h"
#include "reshard/pickle_write.h"
#include "reshard/safetensors.h"
#include "reshard/reshard.h"

/* ------------------------------------------------------------------------------- zip records */

/* CRC-32 (IEEE 802.3, reflected, as zip), continued from crc over n bytes: slicing by 8 (eight 256-entry
 * tables, 8 bytes a step; ~4x the byte-at-a-time loop, which would dominate an export), tables built on
 * first use (a race builds the same tables twice: harmless). */
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
    static uint32_t t[8][256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][i] = c;
        }
        for (int k = 1; k < 8; k++)
            for (int i = 0; i < 256; i++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
        ready = 1;
    }
    const uint8_t *b = p;
    crc = ~crc;
    for (; n >= 8; n -= 8, b += 8) {   /* little-endian byte order, as the records */
        uint32_t lo = crc ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][b[4]] ^
              t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]];
    }
    for (; n; n--, b++) crc = t[0][(crc ^ *b) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#define ZIP_ALIGN 64   /* torch's storage alignment (.storage_alignment) */
#define ZIP_MAX_ENTRIES 6
#define ZIP32_MAX 0xFFFFFFFFll

typedef struct zip_ent {
    char name[40];
    int64_t hdr;        /* local header offset from the record's start */
    int64_t size;
    uint32_t crc;
} zip_ent;

/* The record being written to f: its start in the file and its entries so far. */
typedef struct zip_rec {
    FILE *f;
    const char *path;
    int64_t start;
    int n;
    zip_ent ent[ZIP_MAX_ENTRIES];
} zip_rec;

static void put_le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
}

static mp_code zwrite(zip_rec *z, const void *p, size_t n, mp_err *e) {
    if (n && fwrite(p, 1, n, z->f) != n) return mp_err_set(e, MP_EIO, "writing %s: %s", z->path, strerror(errno));
    return MP_OK;
}

/* The record-relative position of f. */
static int64_t zpos(zip_rec *z) { return (int64_t)ftello(z->f) - z->start; }

/* Starts entry `archive/name` of size bytes and crc: the local header, padded with an "FB" extra
 * field so that its data begins on a ZIP_ALIGN boundary of the record. */
static mp_code zip_begin_entry(zip_rec *z, const char *name, int64_t size, uint32_t crc, mp_err *e) {
    zip_ent *t = &z->ent[z->n++];
    snprintf(t->name, sizeof t->name, "archive/%s", name);
    t->hdr = zpos(z);
    t->size = size;
    t->crc = crc;
    size_t nl = strlen(t->name);
    int64_t end = t->hdr + 30 + (int64_t)nl;
    int pad = (int)((ZIP_ALIGN - (end + 4) % ZIP_ALIGN) % ZIP_ALIGN) + 4;
    if (size >= ZIP32_MAX || t->hdr >= ZIP32_MAX)
        return mp_err_set(e, MP_EINPUT, "%s: a chunk of %lld bytes needs zip64 fields, which this writer does not "
                          "write: export on a mesh that cuts it into smaller chunks (--tp/--dp)", z->path, (long long)size);
    uint8_t h[30 + 64 + ZIP_ALIGN + 4] = {0};
    put_le(h, 0x04034b50, 4);
    put_le(h + 14, crc, 4);
    put_le(h + 18, (uint64_t)size, 4);
    put_le(h + 22, (uint64_t)size, 4);
    put_le(h + 26, nl, 2);
    put_le(h + 28, (uint64_t)pad, 2);
    memcpy(h + 30, t->name, nl);
    uint8_t *x = h + 30 + nl;
    put_le(x, 0x4246, 2);   /* "FB" */
    put_le(x + 2, (uint64_t)(pad - 4), 2);
    memset(x + 4, 'Z', (size_t)(pad - 4));
    return zwrite(z, h, 30 + nl + (size_t)pad, e);
}

/* A whole small entry. */
static mp_code zip_small(zip_rec *z, const char *name, const void *data, size_t n, mp_err *e) {
    MP_TRY(zip_begin_entry(z, name, (int64_t)n, crc32_update(0, data, n), e));
    return zwrite(z, data, n, e);
}

/* Patches the CRC of the last entry (its data streamed after a header with CRC 0). */
static mp_code zip_patch_crc(zip_rec *z, uint32_t crc, mp_err *e) {
    zip_ent *t = &z->ent[z->n - 1];
    t->crc = crc;
    uint8_t b[4];
    put_le(b, crc, 4);
    off_t here = ftello(z->f);
    if (fseeko(z->f, (off_t)(z->start + t->hdr + 14), SEEK_SET)) return mp_err_set(e, MP_EIO, "seeking in %s: %s", z->path, strerror(errno));
    MP_TRY(zwrite(z, b, 4, e));
    if (fseeko(z->f, here, SEEK_SET)) return mp_err_set(e, MP_EIO, "seeking in %s: %s", z->path, strerror(errno));
    return MP_OK;
}

/* The central directory, a zip64 end record and locator (torch always writes them), the end record. */
static mp_code zip_finish(zip_rec *z, mp_err *e) {
    int64_t cd = zpos(z);
    for (int i = 0; i < z->n; i++) {
        zip_ent *t = &z->ent[i];
        size_t nl = strlen(t->name);
        uint8_t h[46] = {0};
        put_le(h, 0x02014b50, 4);
        put_le(h + 16, t->crc, 4);
        put_le(h + 20, (uint64_t)t->size, 4);
        put_le(h + 24, (uint64_t)t->size, 4);
        put_le(h + 28, nl, 2);
        put_le(h + 42, (uint64_t)t->hdr, 4);
        MP_TRY(zwrite(z, h, 46, e));
        MP_TRY(zwrite(z, t->name, nl, e));
    }
    int64_t cd_size = zpos(z) - cd, z64 = zpos(z);
    if (z64 >= ZIP32_MAX) return mp_err_set(e, MP_EINPUT, "%s: a record past 4 GiB needs zip64 offsets", z->path);
    uint8_t t[56 + 20 + 22] = {0};
    put_le(t, 0x06064b50, 4);
    put_le(t + 4, 44, 8);
    put_le(t + 12, 45, 2);
    put_le(t + 14, 45, 2);
    put_le(t + 24, (uint64_t)z->n, 8);
    put_le(t + 32, (uint64_t)z->n, 8);
    put_le(t + 40, (uint64_t)cd_size, 8);
    put_le(t + 48, (uint64_t)cd, 8);
    put_le(t + 56, 0x07064b50, 4);
    put_le(t + 64, (uint64_t)z64, 8);
    put_le(t + 72, 1, 4);
    put_le(t + 76, 0x06054b50, 4);
    put_le(t + 84, (uint64_t)z->n, 2);
    put_le(t + 86, (uint64_t)z->n, 2);
    put_le(t + 88, (uint64_t)cd_size, 4);
    put_le(t + 92, (uint64_t)cd, 4);
    return zwrite(z, t, sizeof t, e);
}

/* ------------------------------------------------------------------------------------- sink */

/* The output dtypes: torch's name and storage class. */
typedef struct dk_dtype {
    st_dtype st;
    const char *torch, *storage;
} dk_dtype;
static const dk_dtype DK_F32 = {ST_F32, "float32", "FloatStorage"}, DK_BF16 = {ST_BF16, "bfloat16", "BFloat16Storage"},
                      DK_I32 = {ST_I32, "int32", "IntStorage"};

/* One chunk: a box of a meshpoint tensor as a box of a DCP tensor, or a 0-d scalar (ndim 0). */
typedef struct dk_item {
    rs_dcp_place pl;
    int file_rank, ndim;
    int64_t gshape[2];          /* of the DCP tensor (a fused one: all of its rows) */
    int64_t off[2], shape[2];   /* the chunk in the DCP tensor */
    ckpt_fill_fn fill;          /* reads the meshpoint tensor: rows off[0] - pl.row0 ... */
    void *ctx;
    const dk_dtype *dt;
    double scalar;              /* ndim 0 */
    int file;                   /* index of its file; the record in it: */
    int64_t rec_off, rec_len;
} dk_item;

typedef struct dk_sink {
    char *dir, *partial;
    llama_config cfg;
    rs_dcp_spelling sp;         /* the name set, in the spelling written */
    const dk_dtype *dt;
    int64_t step;               /* -1: unknown */
    size_t band;
    int n, cap;
    dk_item *it;
    mp_code failed;
    mp_err err;
} dk_sink;

static dk_item *new_item(dk_sink *h) {
    if (h->n == h->cap) {
        int cap = h->cap * 2 + 32;
        h->it = mp_realloc(h->it, sizeof *h->it * (size_t)h->cap, sizeof *h->it * (size_t)cap, MP_MEM_OTHER);
        h->cap = cap;
    }
    dk_item *t = &h->it[h->n++];
    memset(t, 0, sizeof *t);
    return t;
}

/* rs_sink add: one chunk of the tensor name maps to (and, for torchtitan names of a model with tied
 * embeddings, the same chunk again as lm_head.weight, which torchtitan's state dict also holds). */
static mp_code dk_add(rs_sink *s, int file_rank, const char *name, int ndim, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e) {
    dk_sink *h = s->impl;
    rs_dcp_place pl;
    mp_code rc = rs_dcp_name(&h->cfg, &h->sp, name, &pl, e);
    if (rc) {
        if (!h->failed) { h->failed = rc; h->err = *e; }
        return rc;
    }
    int copies = h->sp.names == RS_DCP_NAMES_TORCHTITAN && h->cfg.tie_word_embeddings &&
                 !strcmp(pl.param, "tok_embeddings.weight") ? 2 : 1;
    for (int c = 0; c < copies; c++) {
        dk_item *t = new_item(h);
        t->pl = pl;
        if (c) {
            snprintf(t->pl.param, sizeof t->pl.param, "%s", h->sp.out);
            if (pl.optim) rs_dcp_optim_name(t->pl.fqn, sizeof t->pl.fqn, t->pl.param, strrchr(pl.fqn, '.') + 1);
            else snprintf(t->pl.fqn, sizeof t->pl.fqn, "%s", t->pl.param);
        }
        t->file_rank = file_rank;
        t->ndim = ndim;
        for (int d = 0; d < ndim; d++) {
            t->gshape[d] = gshape[d];
            t->off[d] = off[d];
            t->shape[d] = shape[d];
        }
        if (pl.rows) t->gshape[0] = pl.rows, t->off[0] += pl.row0;
        t->fill = fill;
        t->ctx = ctx;
        t->dt = h->dt;
    }
    return MP_OK;
}

static mp_code dk_meta(rs_sink *s, const char *key, const char *value, mp_err *e) { return MP_OK; }

static mp_code dk_file(rs_sink *s, const char *name, const void *data, size_t n, mp_err *e) {
    return mp_err_set(e, MP_EINPUT, "DCP export: a DCP directory has no place for file %s", name);
}

/* data.pkl of a record holding item t: _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()). */
static void record_pickle(const dk_item *t, pkw *w) {
    int64_t numel = t->ndim ? t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) : 1;
    int64_t stride[2] = {t->ndim == 2 ? t->shape[1] : 1, 1};
    pkw_begin(w, 2);
    pkw_global(w, "torch._utils", "_rebuild_tensor_v2");
    pkw_mark(w);
    pkw_mark(w);   /* the persistent id: ('storage', <dtype>Storage, key, location, numel) */
    pkw_str(w, "storage");
    pkw_global(w, "torch", t->dt->storage);
    pkw_str(w, "0");
    pkw_str(w, "cpu");
    pkw_int(w, numel);
    pkw_tuple(w, PKW_MARKED);
    pkw_binpersid(w);
    pkw_int(w, 0);
    pkw_int_tuple(w, t->ndim, t->shape);
    pkw_int_tuple(w, t->ndim, t->ndim == 2 ? stride : stride + 1);
    pkw_bool(w, 0);
    pkw_global(w, "collections", "OrderedDict");
    pkw_tuple(w, 0);
    pkw_reduce(w);
    pkw_tuple(w, PKW_MARKED);
    pkw_reduce(w);
    pkw_end(w);
}

/* DCP rows [g, g + k) of item t's chunk columns into out (fp32): its meshpoint rows, or for a permuted
 * tensor (torchtitan's wq / wk) the rows of the heads they come from, read into scratch and reordered
 * (torchtitan row r is HF row rs_dcp_hf_row(r)). */
static mp_code fill_rows(const dk_item *t, int64_t g, int64_t k, float *out, float *scratch, mp_err *e) {
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    int64_t o[2] = {g - t->pl.row0, t->ndim == 2 ? t->off[1] : 0}, sh[2] = {k, cols};
    if (!t->pl.permute) return t->fill(t->ctx, o, sh, out, e);
    int64_t hd = t->pl.head_dim, h0 = g / hd, h1 = (g + k + hd - 1) / hd;
    o[0] = h0 * hd;
    sh[0] = (h1 - h0) * hd;
    MP_TRY(t->fill(t->ctx, o, sh, scratch, e));
    for (int64_t r = g; r < g + k; r++) {
        int64_t src = rs_dcp_hf_row(r, hd);
        memcpy(out + (r - g) * cols, scratch + (src - h0 * hd) * cols, sizeof(float) * (size_t)cols);
    }
    return MP_OK;
}

/* Streams item t's elements into the open data/0 entry in row bands (converted to the output dtype);
 * *crc gets their CRC-32. */
static mp_code write_elements(const dk_sink *h, zip_rec *z, const dk_item *t, uint32_t *crc, mp_err *e) {
    *crc = 0;
    if (t->ndim == 0) {   /* a scalar */
        uint8_t b[4];
        if (t->dt->st == ST_I32) put_le(b, (uint32_t)(int32_t)t->scalar, 4);
        else { float f = (float)t->scalar; memcpy(b, &f, 4); }
        *crc = crc32_update(0, b, 4);
        return zwrite(z, b, 4, e);
    }
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    int64_t k = (int64_t)(h->band / (4 * (size_t)cols)), hd = t->pl.permute ? t->pl.head_dim : 0;
    if (hd) k = k / hd * hd;
    if (k < 1) k = hd ? hd : 1;
    if (k > rows) k = rows;
    size_t nb = (size_t)(k * cols), ns = hd ? (size_t)((k + 2 * hd) * cols) : 0;
    float *buf = mp_malloc(sizeof(float) * nb, MP_MEM_CKPT), *scratch = ns ? mp_malloc(sizeof(float) * ns, MP_MEM_CKPT) : NULL;
    mp_code rc = MP_OK;
    for (int64_t r = 0; r < rows && !rc; r += k) {
        int64_t kk = rows - r < k ? rows - r : k;
        size_t n = (size_t)(kk * cols), bytes = n * (size_t)st_dtype_size(t->dt->st);
        rc = fill_rows(t, t->off[0] + r, kk, buf, scratch, e);
        if (rc) {
            mp_err_wrap(e, "reading %s rows %lld..%lld for %s", t->pl.fqn, (long long)(t->off[0] + r),
                        (long long)(t->off[0] + r + kk), z->path);
            break;
        }
        if (t->dt->st == ST_BF16)   /* in place, front to back: element i's 2 bytes never pass the floats still to read */
            for (size_t i = 0; i < n; i++) ((uint16_t *)buf)[i] = mp_f32_to_bf16(buf[i]);
        *crc = crc32_update(*crc, buf, bytes);
        rc = zwrite(z, buf, bytes, e);
    }
    mp_free_acct(buf, sizeof(float) * nb, MP_MEM_CKPT);
    if (scratch) mp_free_acct(scratch, sizeof(float) * ns, MP_MEM_CKPT);
    return rc;
}

/* Appends item t's torch.save record to file f (path) and notes where it lies. */
static mp_code write_record(const dk_sink *h, FILE *f, const char *path, dk_item *t, mp_err *e) {
    zip_rec z = {.f = f, .path = path, .start = (int64_t)ftello(f)};
    pkw w;
    record_pickle(t, &w);
    mp_code rc = zip_small(&z, "data.pkl", w.buf, w.len, e);
    pkw_free(&w);
    if (!rc) rc = zip_small(&z, ".format_version", "1", 1, e);
    if (!rc) rc = zip_small(&z, ".storage_alignment", "64", 2, e);
    if (!rc) rc = zip_small(&z, "byteorder", "little", 6, e);
    int64_t numel = t->ndim ? t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) : 1;
    uint32_t crc = 0;
    if (!rc) rc = zip_begin_entry(&z, "data/0", numel * st_dtype_size(t->dt->st), 0, e);
    if (!rc) rc = write_elements(h, &z, t, &crc, e);
    if (!rc) rc = zip_patch_crc(&z, crc, e);
    if (!rc) rc = zip_small(&z, "version", "3\n", 2, e);
    if (!rc) rc = zip_finish(&z, e);
    t->rec_off = z.start;
    t->rec_len = rc ? 0 : zpos(&z);
    return rc;
}

/* ------------------------------------------------------------------------------------ .metadata */

/* torch.Size(v[:n]). */
static void pk_size(pkw *w, int n, const int64_t *v) {
    pkw_global(w, "torch", "Size");
    pkw_int_tuple(w, n, v);
    pkw_tuple(w, 1);
    pkw_reduce(w);
}

/* A dataclass of torch.distributed.checkpoint.<module>: cls.__new__(cls), then its fields' dict (BUILD
 * follows, after the caller's MARK k v ... SETITEMS). */
static void pk_dataclass(pkw *w, const char *module, const char *name) {
    pkw_global(w, module, name);
    pkw_tuple(w, 0);
    pkw_newobj(w);
    pkw_empty_dict(w);
    pkw_mark(w);
}
#define DCP_MD "torch.distributed.checkpoint.metadata"

/* TensorStorageMetadata of the tensor whose chunks are items[a..b) (same fqn). */
static void pk_tensor_md(pkw *w, const dk_sink *h, const int *ord, int a, int b) {
    const dk_item *t = &h->it[ord[a]];
    pk_dataclass(w, DCP_MD, "TensorStorageMetadata");
    pkw_str(w, "properties");   /* TensorProperties state: (dtype, layout, requires_grad, memory_format, pin_memory) */
    pkw_global(w, DCP_MD, "TensorProperties");
    pkw_tuple(w, 0);
    pkw_newobj(w);
    pkw_mark(w);
    pkw_global(w, "torch", t->dt->torch);
    pkw_global(w, "torch.serialization", "_get_layout");
    pkw_str(w, "torch.strided");
    pkw_tuple(w, 1);
    pkw_reduce(w);
    pkw_bool(w, 0);
    pkw_global(w, "builtins", "getattr");
    pkw_global(w, DCP_MD, "_MEM_FORMAT_ENCODING");
    pkw_str(w, "TORCH_CONTIGUOUS_FORMAT");
    pkw_tuple(w, 2);
    pkw_reduce(w);
    pkw_bool(w, 0);
    pkw_tuple(w, PKW_MARKED);
    pkw_build(w);
    pkw_str(w, "size");
    pk_size(w, t->ndim, t->gshape);
    pkw_str(w, "chunks");
    pkw_empty_list(w);
    pkw_mark(w);
    for (int i = a; i < b; i++) {
        const dk_item *c = &h->it[ord[i]];
        pk_dataclass(w, DCP_MD, "ChunkStorageMetadata");
        pkw_str(w, "offsets");
        pk_size(w, c->ndim, c->off);
        pkw_str(w, "sizes");
        pk_size(w, c->ndim, c->shape);
        pkw_setitems(w);
        pkw_build(w);
    }
    pkw_appends(w);
    pkw_setitems(w);
    pkw_build(w);
}

/* storage_data's entries of the chunks items[a..b): MetadataIndex(fqn, offset, index) -> _StorageInfo. */
static void pk_storage(pkw *w, const dk_sink *h, const int *ord, int a, int b) {
    for (int i = a; i < b; i++) {
        const dk_item *c = &h->it[ord[i]];
        pk_dataclass(w, DCP_MD, "MetadataIndex");
        pkw_str(w, "fqn");
        pkw_str(w, c->pl.fqn);
        pkw_str(w, "offset");
        pk_size(w, c->ndim, c->off);
        pkw_str(w, "index");
        pkw_int(w, i - a);
        pkw_setitems(w);
        pkw_build(w);
        pk_dataclass(w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
        char file[64];
        snprintf(file, sizeof file, "__%d_0.distcp", c->file_rank);
        pkw_str(w, "relative_path");
        pkw_str(w, file);
        pkw_str(w, "offset");
        pkw_int(w, c->rec_off);
        pkw_str(w, "length");
        pkw_int(w, c->rec_len);
        pkw_setitems(w);
        pkw_build(w);
    }
}

static const dk_sink *sort_sink;   /* qsort has no context argument; commit is single-threaded */
static int cmp_fqn(const void *x, const void *y) {
    const dk_item *a = &sort_sink->it[*(const int *)x], *b = &sort_sink->it[*(const int *)y];
    int c = strcmp(a->pl.fqn, b->pl.fqn);
    return c ? c : a->off[0] != b->off[0] ? (a->off[0] < b->off[0] ? -1 : 1) : (a->off[1] > b->off[1]) - (a->off[1] < b->off[1]);
}

/* The pickle of Metadata(state_dict_metadata, planner_data, storage_data, storage_meta=None,
 * version="1.0.0") over every item, chunks of a tensor in row order. planner_data maps each fqn to its
 * path in the nested state dict: ("optimizer", "state.<param>.<moment>") for the moments (torchtitan's
 * optimizer state dict is flat under "optimizer"), ("train_state", "step"), (fqn,) otherwise. */
static void metadata_pickle(const dk_sink *h, pkw *w) {
    int *ord = mp_xmalloc(sizeof *ord * (size_t)(h->n + 1));
    for (int i = 0; i < h->n; i++) ord[i] = i;
    sort_sink = h;
    qsort(ord, (size_t)h->n, sizeof *ord, cmp_fqn);
    pkw_begin(w, 4);
    pk_dataclass(w, DCP_MD, "Metadata");
    for (int pass = 0; pass < 3; pass++) {
        static const char *const field[3] = {"state_dict_metadata", "planner_data", "storage_data"};
        pkw_str(w, field[pass]);
        pkw_empty_dict(w);
        pkw_mark(w);
        for (int a = 0, b; a < h->n; a = b) {
            const dk_item *t = &h->it[ord[a]];
            for (b = a + 1; b < h->n && !strcmp(h->it[ord[b]].pl.fqn, t->pl.fqn); b++) {}
            if (pass == 2) { pk_storage(w, h, ord, a, b); continue; }
            pkw_str(w, t->pl.fqn);
            if (pass == 0) { pk_tensor_md(w, h, ord, a, b); continue; }
            int opt = !strncmp(t->pl.fqn, "optimizer.", 10), ts = !strncmp(t->pl.fqn, "train_state.", 12);
            if (opt || ts) pkw_str(w, opt ? "optimizer" : "train_state");
            pkw_str(w, t->pl.fqn + (opt ? 10 : ts ? 12 : 0));
            pkw_tuple(w, opt || ts ? 2 : 1);
        }
        pkw_setitems(w);
    }
    pkw_str(w, "storage_meta");
    pkw_none(w);
    pkw_str(w, "version");
    pkw_str(w, "1.0.0");
    pkw_setitems(w);
    pkw_build(w);
    pkw_end(w);
    free(ord);
}

/* ---------------------------------------------------------------------------------- commit */

/* The scalars beside the moments: AdamW's step (0-d float32) of every parameter that got moments, and
 * torchtitan's train_state.step (0-d int32), when the step is known. */
static void add_scalars(dk_sink *h) {
    if (h->step < 0) return;
    int n = h->n, moments = 0;
    for (int i = 0; i < n; i++) {
        if (!h->it[i].pl.optim || strcmp(strrchr(h->it[i].pl.fqn, '.') + 1, "exp_avg")) continue;
        int dup = 0;   /* one step per parameter, not per chunk */
        for (int k = n; k < h->n && !dup; k++) dup = !strcmp(h->it[k].pl.param, h->it[i].pl.param);
        moments = 1;
        if (dup) continue;
        dk_item *t = new_item(h);
        snprintf(t->pl.param, sizeof t->pl.param, "%s", h->it[i].pl.param);
        rs_dcp_optim_name(t->pl.fqn, sizeof t->pl.fqn, t->pl.param, "step");
        t->dt = &DK_F32;
        t->scalar = (double)h->step;
    }
    if (!moments && h->sp.names != RS_DCP_NAMES_TORCHTITAN) return;
    dk_item *t = new_item(h);
    snprintf(t->pl.fqn, sizeof t->pl.fqn, "%s", RS_DCP_TRAIN_STEP);
    t->dt = &DK_I32;
    t->scalar = (double)h->step;
}

/* Writes __R_0.distcp for every target rank R that has chunks (scalars go to the first file). */
static mp_code write_files(dk_sink *h, mp_err *e) {
    int lowest = -1;
    for (int i = 0; i < h->n; i++)
        if (h->it[i].ndim && (lowest < 0 || h->it[i].file_rank < lowest)) lowest = h->it[i].file_rank;
    for (int i = 0; i < h->n; i++)
        if (h->it[i].ndim == 0) h->it[i].file_rank = lowest < 0 ? 0 : lowest;   /* scalars come last, rankless */
    mp_code rc = MP_OK;
    char *done = mp_xcalloc((size_t)h->n + 1);
    for (int i = 0; i < h->n && !rc; i++) {
        if (done[i]) continue;
        char name[64];
        snprintf(name, sizeof name, "__%d_0.distcp", h->it[i].file_rank);
        char *path = mp_fs_join(h->partial, name);
        FILE *f = fopen(path, "wb");
        if (!f) rc = mp_err_set(e, MP_EIO, "creating %s: %s", path, strerror(errno));
        for (int k = i; k < h->n && !rc; k++) {
            if (done[k] || h->it[k].file_rank != h->it[i].file_rank) continue;
            done[k] = 1;
            rc = write_record(h, f, path, &h->it[k], e);
        }
        if (f && !rc) rc = mp_fs_close_durable(f, path, e);
        else if (f) fclose(f);
        free(path);
    }
    free(done);
    return rc;
}

static mp_code dk_commit(rs_sink *s, mp_err *e) {
    dk_sink *h = s->impl;
    if (h->failed) {
        if (e) *e = h->err;
        return h->failed;
    }
    add_scalars(h);
    mp_code rc = MP_OK;
    if (mp_fs_exists(h->partial)) rc = mp_fs_remove_tree(h->partial, e);   /* stale, from an interrupted export */
    if (!rc) rc = mp_fs_mkdirs(h->partial, e);
    if (!rc) rc = write_files(h, e);
    if (!rc) {   /* .metadata last: a directory without it is not a DCP checkpoint */
        pkw w;
        metadata_pickle(h, &w);
        rc = mp_fs_write_durable(h->partial, ".metadata", w.buf, w.len, e);
        pkw_free(&w);
    }
    if (!rc) rc = rs_publish_dir(h->partial, h->dir, "DCP export", e);
    if (rc && mp_fs_exists(h->partial)) {
        mp_err re;
        mp_fs_remove_tree(h->partial, &re);
    }
    return rc;
}

static void dk_free(rs_sink *s) {
    if (!s) return;
    dk_sink *h = s->impl;
    free(h->dir);
    free(h->partial);
    mp_free_acct(h->it, sizeof *h->it * (size_t)h->cap, MP_MEM_OTHER);
    free(h);
    free(s);
}

mp_code rs_sink_dcp(rs_sink **out, const char *dir, const llama_config *cfg, rs_dcp_names names, const char *dtype,
                    int64_t step, size_t band_bytes, int replace, mp_err *e) {
    *out = NULL;
    const dk_dtype *dt = !strcmp(dtype, "F32") ? &DK_F32 : !strcmp(dtype, "BF16") ? &DK_BF16 : NULL;
    if (!dt) return mp_err_set(e, MP_EINPUT, "DCP export: dtype %s (F32 or BF16)", dtype);
    MP_TRY(rs_dcp_check_names(cfg, names, e));
    MP_TRY(rs_out_dir_check(dir, replace, e));
    dk_sink *h = mp_xcalloc(sizeof *h);
    h->dir = mp_strdup(dir);
    for (size_t l = strlen(h->dir); l > 1 && h->dir[l - 1] == '/'; l--) h->dir[l - 1] = '\0';   /* "out/" */
    size_t np = strlen(h->dir) + sizeof ".partial";
    h->partial = mp_xmalloc(np);
    snprintf(h->partial, np, "%s.partial", h->dir);
    h->cfg = *cfg;
    h->sp = rs_dcp_spelling_of(names);
    h->dt = dt;
    h->step = step;
    h->band = band_bytes < 4096 ? 4096 : band_bytes;
    rs_sink *s = mp_xcalloc(sizeof *s);
    *s = (rs_sink){.kind = "dcp", .add = dk_add, .meta = dk_meta, .file = dk_file, .commit = dk_commit, .free = dk_free, .impl = h};
    *out = s;
    return MP_OK;
}
