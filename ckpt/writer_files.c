/*
 * ckpt/writer_files.c — writing this process's rank files of a save: the fill-band pipeline, the
 * datasets and each file's /boxes table.
 *
 * Rank files (DIR.partial/rank_%05d.h5): a process writes one file per distinct file rank among its
 * boxes (ascending), its boxes in the order added, and two processes never write the same file (rank 0
 * checks). In a file, box k of a tensor (k counting that tensor's boxes in that file, by offset) is the
 * dataset /<tensor name>/box_<k>, and its checksum tiles the uint64 dataset /<tensor name>/tiles_<k>.
 * Uncompressed boxes are CONTIGUOUS datasets (file type = memory type: no conversion, no fill); a
 * pointer box is written straight from the caller's buffer, a fill box band by band of dim-0 rows,
 * both by hyperslab H5Dwrites of ~1 MiB of whole rows (write_rows: large pwrites cost more system
 * time per byte; one H5Dwrite per band or box when chunked); fill bands are at most opts.fill_bytes,
 * a multiple of the tile rows, through two band buffers accounted as MP_MEM_CKPT: band k is hashed on
 * the ckpt/read_pipe.c worker while it is written, and band k+1 produced on the worker too
 * (opts.fill_any_thread) or after the write on the caller's thread (see fill_pipe). With zstd they
 * are chunked one tile per chunk
 * (tile_rows x tile_cols x the box's dims 2..), shuffle then zstd 32015.
 *
 * Checksums (format v2, docs/FORMAT.md): every box is hashed as it is written (ckpt/writer_hash.c:
 * the whole box and its tiles). The tile array is stored in the rank file; the box's attributes and
 * the index carry the box checksum and tiles_checksum = XXH3-64 of the tile array.
 *
 * Runs on the caller's thread (ckpt_save_commit, ckpt/group.c's leaders) or on the asynchronous
 * writer thread (ckpt/writer_async.c); it does no MPI. Errors return to the caller, which records
 * them in the save's stage.
 */
#define _GNU_SOURCE
#include "ckpt/writer_internal.h"
#include "ckpt/read_pipe.h"
#include "ckpt/zstd_filter.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* The tile array is hashed and written as host uint64s: the format is little-endian. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt/writer_files.c assumes a little-endian host (checksums are of little-endian bytes)"
#endif

/* The path of box B's dataset (tiles 0) or of its tile checksums (tiles 1) into buf (CK_DSET_MAX bytes):
 * derived from its name and k, not stored (format v3 readers derive them the same way). */
static const char *wbox_path(const wbox *B, int tiles, char *buf) {
    snprintf(buf, CK_DSET_MAX, tiles ? "/%s/tiles_%d" : "/%s/box_%d", B->name, B->k);
    return buf;
}

/* ------------------------------------------------------------------------------- rank files */

/* Bytes of one dim-0 row of box B. */
int64_t ck_row_bytes(mp_dtype dt, int ndim, const int64_t *shp) {
    return (int64_t)mp_dtype_size(dt) * ck_volume(ndim - 1, shp + 1);
}

static int64_t row_bytes(const wbox *B) { return ck_row_bytes(B->dt, B->ndim, B->shp); }

/* Rows per band of fill box B under the bound fill_bytes: a multiple of tile_rows (at least one tile
 * row), at most the box's rows. */
static int64_t band_rows(const wbox *B, size_t fill_bytes) {
    int64_t r = (int64_t)(fill_bytes / (size_t)row_bytes(B));
    r = r / B->tile_rows * B->tile_rows;
    if (r < B->tile_rows) r = B->tile_rows;
    if (r > B->shp[0]) r = B->shp[0];
    return r;
}

int64_t ck_fill_band_rows(mp_dtype dt, int ndim, const int64_t *shp, size_t fill_bytes) {
    wbox B;
    memset(&B, 0, sizeof B);
    B.dt = dt;
    B.ndim = ndim;
    memcpy(B.shp, shp, sizeof B.shp);
    ckpt_tile_geometry(mp_dtype_size(dt), ndim, B.shp, &B.tile_rows, &B.tile_cols);
    return band_rows(&B, fill_bytes ? fill_bytes : CKPT_FILL_BYTES_DEFAULT);
}

/* The fill-band bound of save s: opts.fill_bytes, 0 meaning CKPT_FILL_BYTES_DEFAULT. */
static size_t save_fill_bytes(const ckpt_save *s) { return s->o.fill_bytes ? s->o.fill_bytes : CKPT_FILL_BYTES_DEFAULT; }

/* Rows of fill box B's band that starts at row r0 (band_rows under s's bound; the last band shorter). */
static int64_t band_len(const ckpt_save *s, const wbox *B, int64_t r0) {
    int64_t br = band_rows(B, save_fill_bytes(s));
    return B->shp[0] - r0 < br ? B->shp[0] - r0 : br;
}

/* Creates the dataset of box B in file f (contiguous; with zstd chunked: one column block of tiles and
 * whole tile rows, about CK_CHUNK_BYTES per chunk, so zstd sees enough bytes and the chunk index stays
 * small while chunks still fall on tile boundaries). */
static mp_code create_box_dataset(ckpt_save *s, hid_t f, hid_t lcpl, hid_t ft, const wbox *B, const char *path,
                                  hid_t *out, mp_err *e) {
    *out = -1;
    hsize_t dims[CKPT_MAX_DIMS], chunk[CKPT_MAX_DIMS];
    for (int d = 0; d < B->ndim; d++) { dims[d] = (hsize_t)B->shp[d]; chunk[d] = dims[d]; }
    if (B->ndim >= 2) chunk[1] = (hsize_t)B->tile_cols;
    double tile_bytes = (double)mp_dtype_size(B->dt) * (double)B->tile_rows;
    for (int d = 1; d < B->ndim; d++) tile_bytes *= (double)chunk[d];
    int64_t per = (int64_t)((double)CK_CHUNK_BYTES / tile_bytes);
    int64_t crows = B->tile_rows * (per > 1 ? per : 1);
    chunk[0] = (hsize_t)(crows < B->shp[0] ? crows : B->shp[0]);
    hid_t sp = H5Screate_simple(B->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    mp_code rc = MP_OK;
    herr_t hr = (sp < 0 || dcpl < 0) ? -1 : 0;
    if (hr >= 0) hr = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (hr >= 0 && s->o.zstd_level > 0) {
        double cbytes = (double)mp_dtype_size(B->dt);
        for (int d = 0; d < B->ndim; d++) cbytes *= (double)chunk[d];
        if (cbytes >= 4294967295.0) {
            rc = mp_err_set(e, MP_EINPUT, "writing %s: tensor %s: a chunk of %.0f bytes is too large for HDF5",
                            path, B->name, cbytes);
            goto done;
        }
        unsigned lvl = (unsigned)s->o.zstd_level;
        hr = H5Pset_chunk(dcpl, B->ndim, chunk);
        if (hr >= 0) hr = H5Pset_shuffle(dcpl);
        if (hr >= 0) hr = H5Pset_filter(dcpl, CKPT_ZSTD_FILTER_ID, H5Z_FLAG_MANDATORY, 1, &lvl);
    } else if (hr >= 0) {
        hr = H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    }
    char dp[CK_DSET_MAX];
    wbox_path(B, 0, dp);
    if (hr < 0) { rc = ck_h5_err(e, MP_EIO, "writing %s: dataset %s: creation properties", path, dp); goto done; }
    *out = ck_h5_make_parents(f, dp) < 0 ? -1 : H5Dcreate2(f, dp, ft, sp, lcpl, dcpl, H5P_DEFAULT);
    if (*out < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: creating dataset %s (tensor %s)", path, dp, B->name);
done:
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

/* The band buffers of fill boxes: two, so that the checksum of band k runs on the worker thread
 * (ckpt/read_pipe.c) while the caller's thread writes it and, depending on the save:
 *  - fills on the caller's thread (the default; group.c's fills receive over MPI): the caller produces
 *    band k+1 (the fill callback: a source read, HDF5 included) into the other buffer and writes it;
 *  - fills on any thread (opts.fill_any_thread, the conversions, with a thread-safe HDF5): the worker
 *    hashes band k, then produces band k+1 (of this box or the next fill box of the file) into the
 *    other buffer, while the caller writes band k. The caller's thread then only writes: the source's
 *    read copy and the hashing run on the second core (docs/BENCH_RESHARD.md).
 * One buffer and no worker when MP_FAULT=ckpt_serial_fill (the serial path, kept to compare against: the
 * bytes are the same, only the overlap differs). */
typedef struct band_job {
    ck_hasher *h;          /* hash rows [0, hrows) of hp into h first (h NULL: nothing to hash) */
    const char *hp;
    int64_t hrows;
    wbox *B;            /* then produce rows [r0, r0 + n) of fill box B into buf (B NULL: nothing) */
    int64_t r0, n;
    void *buf;
    mp_code rc;         /* the fill's result and error */
    mp_err err;
} band_job;

typedef struct fill_pipe {
    void *buf[2];
    size_t cap;        /* bytes of each buffer */
    ck_worker *w;      /* NULL: serial */
    int any_thread;    /* fills may run on the worker (see above) */
    band_job job;      /* the last job posted (any_thread): after its wait, job.B's band is in job.buf */
} fill_pipe;

/* The global offset and shape of rows [r0, r0 + n) of box B. */
static void band_box(const wbox *B, int64_t r0, int64_t n, int64_t *goff, int64_t *gshp) {
    memcpy(goff, B->off, sizeof B->off);
    memcpy(gshp, B->shp, sizeof B->shp);
    goff[0] += r0;
    gshp[0] = n;
}

/* The region of rows [r0, r0 + n) of box B, as ck_box_str writes it, into reg (cap bytes). */
static void band_str(char *reg, size_t cap, const wbox *B, int64_t r0, int64_t n) {
    int64_t goff[CKPT_MAX_DIMS], gshp[CKPT_MAX_DIMS];
    band_box(B, r0, n, goff, gshp);
    ck_box_str(reg, cap, B->ndim, goff, gshp);
}

/* Produces rows [r0, r0 + n) of fill box B into buf (its fill callback; fe gets its error). */
static mp_code produce_band(const wbox *B, int64_t r0, int64_t n, void *buf, mp_err *fe) {
    int64_t goff[CKPT_MAX_DIMS], gshp[CKPT_MAX_DIMS];
    band_box(B, r0, n, goff, gshp);
    mp_err_clear(fe);
    return B->fill(B->ctx, goff, gshp, buf, fe);
}

/* The job: hash one band (memory only, no HDF5), then, with fills on any thread, produce the next. */
static void band_job_run(void *arg) {
    band_job *j = arg;
    if (j->h) ck_hasher_feed(j->h, j->hp, j->hrows);
    if (j->B) j->rc = produce_band(j->B, j->r0, j->n, j->buf, &j->err);
}

/* Rows of B per H5Dwrite call: the whole band (or box) at once when it is chunked (zstd: a partial
 * chunk would be read back, filtered and rewritten) or on the serial path (MP_FAULT=ckpt_serial_fill: the
 * writer as it was before the band pipeline, kept to compare against), else pieces of about WRITE_PIECE_BYTES
 * (at least one row): the same bytes at the same place either way. Measured (docs/BENCH_RESHARD.md):
 * once writeback runs, a 64 MiB pwrite often costs 2-4x the system time per byte
 * of 1 MiB pwrites (suspected: bigger page-cache folios for bigger writes), and the conversions'
 * writer thread is their critical path. */
#define WRITE_PIECE_BYTES ((int64_t)1 << 20)
static int64_t write_piece_rows(const ckpt_save *s, const wbox *B) {
    int64_t rb = row_bytes(B);
    if (s->o.zstd_level > 0 || rb <= 0 || ck_worker_serial_forced()) return B->shp[0] > 0 ? B->shp[0] : 1;
    int64_t r = WRITE_PIECE_BYTES / rb;
    return r < 1 ? 1 : r;
}

/* H5Dwrite of rows [r0, r0 + n) of dataset d (file space fsp, file type ft) from buf (n whole rows,
 * packed), in pieces of at most `piece` rows. Returns the HDF5 status of the first failing call. */
static herr_t write_rows(const wbox *B, hid_t d, hid_t fsp, hid_t ft, int64_t r0, int64_t n, int64_t piece,
                         const void *buf) {
    hsize_t start[CKPT_MAX_DIMS] = {0}, count[CKPT_MAX_DIMS];
    for (int k = 0; k < B->ndim; k++) count[k] = (hsize_t)B->shp[k];
    int64_t rb = row_bytes(B);
    herr_t hr = 0;
    for (int64_t i = 0; i < n && hr >= 0; i += piece) {
        count[0] = (hsize_t)(n - i < piece ? n - i : piece);
        start[0] = (hsize_t)(r0 + i);
        hid_t msp = H5Screate_simple(B->ndim, count, NULL);
        hr = msp < 0 ? -1 : H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL);
        if (hr >= 0) hr = H5Dwrite(d, ft, msp, fsp, H5P_DEFAULT, (const char *)buf + i * rb);
        if (msp >= 0) H5Sclose(msp);
    }
    return hr;
}

/* The error of a failed fill of rows [r0, r0 + n) of fill box B (fe: the callback's error). */
static mp_code fill_error(const wbox *B, int64_t r0, int64_t n, mp_code frc, const mp_err *fe, const char *path,
                          mp_err *e) {
    char reg[256];
    band_str(reg, sizeof reg, B, r0, n);
    return mp_err_set(e, frc, "writing %s: tensor %s: producing rows %s: %s", path, B->name, reg,
                      fe->msg[0] ? fe->msg : mp_code_name(frc));
}

/* Writes rows [r0, r0 + n) of fill box B, held in buf, in H5Dwrite pieces of `piece` rows. */
static mp_code write_band(const wbox *B, hid_t d, hid_t fsp, hid_t ft, int64_t r0, int64_t n, int64_t piece,
                          const void *buf, const char *path, mp_err *e) {
    if (write_rows(B, d, fsp, ft, r0, n, piece, buf) >= 0) return MP_OK;
    char reg[256];
    band_str(reg, sizeof reg, B, r0, n);
    return ck_h5_err(e, MP_EIO, "writing %s: dataset %s (tensor %s), rows %s", path, wbox_path(B, 0, (char[CK_DSET_MAX]){0}),
                     B->name, reg);
}

/* Sets each fill box's next_fill: the index of the fill box written after it in its file (the next of
 * the same file rank in add order), or -1. One pass from the end, the last fill box seen per file rank
 * in `last` (wsize entries). */
static void link_fill_boxes(ckpt_save *s) {
    int *last = mp_xmalloc(sizeof(int) * (size_t)(s->wsize + 1));
    for (int r = 0; r < s->wsize; r++) last[r] = -1;
    for (int i = s->nb - 1; i >= 0; i--) {
        wbox *B = &s->b[i];
        if (B->data) continue;
        assert(B->rank >= 0 && B->rank < s->wsize);
        B->next_fill = last[B->rank];
        last[B->rank] = i;
    }
    free(last);
}

/* Writes fill box B into dataset d band by band through the pipe's buffers, feeding h in band order
 * (so the checksums do not depend on the path). Band k is hashed on the worker while the caller
 * writes it; band k+1 is produced meanwhile, on the worker (fp->any_thread: then the first band of
 * the next fill box of the file too, left in fp->job for the next call) or after the write on the
 * caller's thread. Returns with no job in flight. */
static mp_code write_fill_bands(ckpt_save *s, hid_t d, hid_t ft, wbox *B, ck_hasher *h, fill_pipe *fp, const char *path,
                                mp_err *e) {
    int64_t br = band_rows(B, save_fill_bytes(s));
    int64_t rb = row_bytes(B);
    assert(fp->buf[0] && (size_t)(br * rb) <= fp->cap);
    hid_t fsp = H5Dget_space(d);
    if (fsp < 0) return ck_h5_err(e, MP_EIO, "writing %s: dataset %s: dataspace", path, wbox_path(B, 0, (char[CK_DSET_MAX]){0}));
    mp_code rc = MP_OK;
    int64_t piece = write_piece_rows(s, B);
    band_job *j = &fp->job;
    int k = 0;
    for (int64_t r0 = 0; r0 < B->shp[0] && rc == MP_OK; r0 += br, k++) {
        int64_t n = band_len(s, B, r0);
        void *buf;
        mp_err fe;
        mp_code frc;
        if (fp->any_thread && j->B == B && j->r0 == r0) {   /* produced on the worker by the last job */
            assert(j->n == n);
            buf = j->buf;
            frc = j->rc;
            fe = j->err;
        } else {   /* no job in flight, or (caller fills) one hashing the other buffer */
            buf = fp->buf[fp->w && !fp->any_thread ? (k & 1) : 0];
            frc = produce_band(B, r0, n, buf, &fe);
        }
        if (fp->any_thread) j->B = NULL;   /* consumed (with caller fills, a job may be reading *j) */
        if (frc != MP_OK) {
            rc = fill_error(B, r0, n, frc, &fe, path, e);
            break;
        }
        if (!fp->w) {   /* serial */
            rc = write_band(B, d, fsp, ft, r0, n, piece, buf, path, e);
            if (rc == MP_OK) ck_hasher_feed(h, buf, n);
            continue;
        }
        if (!fp->any_thread) {
            rc = write_band(B, d, fsp, ft, r0, n, piece, buf, path, e);
            ck_worker_wait(fp->w);   /* band k-1 hashed: its buffer is free, the hasher ours to hand on */
            if (rc != MP_OK) break;
            *j = (band_job){.h = h, .hp = buf, .hrows = n};
            ck_worker_post(fp->w, band_job_run, j);
            continue;
        }
        /* fills on the worker: hash band k there, then produce the band after it (of B, or the first
         * of the file's next fill box) into the other buffer, while this thread writes band k */
        *j = (band_job){.h = h, .hp = buf, .hrows = n, .buf = fp->buf[buf == fp->buf[0]]};
        wbox *nb = r0 + n < B->shp[0] ? B : B->next_fill >= 0 ? &s->b[B->next_fill] : NULL;
        if (nb && nb->shp[0] > 0) {
            j->B = nb;
            j->r0 = nb == B ? r0 + n : 0;
            j->n = band_len(s, nb, j->r0);
        }
        ck_worker_post(fp->w, band_job_run, j);
        rc = write_band(B, d, fsp, ft, r0, n, piece, buf, path, e);
        ck_worker_wait(fp->w);
    }
    if (fp->w) ck_worker_wait(fp->w);
    if (rc != MP_OK) j->B = NULL;
    H5Sclose(fsp);
    return rc;
}

/* Writes the tile array of B (h->tiles) as the 1-D uint64 CONTIGUOUS dataset B->tiles_dataset. */
static mp_code write_tiles(hid_t f, hid_t lcpl, const wbox *B, const ck_hasher *h, const char *path, mp_err *e) {
    hsize_t n = (hsize_t)h->ntiles;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    herr_t hr = (sp < 0 || dcpl < 0) ? -1 : 0;
    if (hr >= 0) hr = H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    if (hr >= 0) hr = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    char tp[CK_DSET_MAX];
    wbox_path(B, 1, tp);
    if (hr >= 0) hr = (d = H5Dcreate2(f, tp, H5T_STD_U64LE, sp, lcpl, dcpl, H5P_DEFAULT)) < 0 ? -1 : 0;
    if (hr >= 0) hr = H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, h->tiles);
    if (d >= 0 && H5Dclose(d) < 0) hr = -1;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (hr < 0) return ck_h5_err(e, MP_EIO, "writing %s: tile checksums %s (tensor %s)", path, tp, B->name);
    return MP_OK;
}

/* Writes box B (its data and tile array, hashing it on the way) into file f. fp: the band buffers
 * for fill boxes. */
static mp_code write_box(ckpt_save *s, hid_t f, hid_t lcpl, wbox *B, fill_pipe *fp, const char *path, mp_err *e) {
    hid_t ft = ck_h5_type(B->dt);
    if (ft < 0) return ck_h5_err(e, MP_EIO, "writing %s: tensor %s: file type", path, B->name);
    hid_t d = -1;
    char dp[CK_DSET_MAX];
    ck_hasher h;
    ck_hasher_init(&h, B);
    mp_code rc = create_box_dataset(s, f, lcpl, ft, B, path, &d, e);
    if (rc != MP_OK) goto done;
    if (B->data) {
        ck_hasher_feed(&h, B->data, B->shp[0]);
        hid_t fsp = H5Dget_space(d);
        herr_t hr = fsp < 0 ? -1 : write_rows(B, d, fsp, ft, 0, B->shp[0], write_piece_rows(s, B), B->data);
        if (fsp >= 0) H5Sclose(fsp);
        if (hr < 0) {
            rc = ck_h5_err(e, MP_EIO, "writing %s: dataset %s (tensor %s)", path, wbox_path(B, 0, dp), B->name);
            goto done;
        }
    } else {
        rc = write_fill_bands(s, d, ft, B, &h, fp, path, e);
        if (rc != MP_OK) goto done;
    }
    ck_hasher_finish(&h, B);
    herr_t hr = ck_attr_write_str(d, "tensor", B->name);
    if (hr >= 0) hr = ck_attr_write_str(d, "dtype", mp_dtype_name(B->dt));
    if (hr >= 0) hr = ck_attr_write_i64(d, "global_offset", B->off, B->ndim);
    if (hr >= 0) hr = ck_attr_write_i64(d, "global_shape", B->gshape, B->ndim);
    if (hr >= 0) hr = ck_attr_write_u64s(d, "checksum", B->checksum);
    if (hr >= 0) hr = ck_attr_write_i64s(d, "tile_rows", B->tile_rows);
    if (hr >= 0) hr = ck_attr_write_i64s(d, "tile_cols", B->tile_cols);
    if (hr >= 0) hr = ck_attr_write_u64s(d, "tiles_checksum", B->tiles_checksum);
    if (hr < 0) { rc = ck_h5_err(e, MP_EIO, "writing %s: attributes of dataset %s", path, wbox_path(B, 0, dp)); goto done; }
    rc = write_tiles(f, lcpl, B, &h, path, e);
done:
    if (d >= 0 && H5Dclose(d) < 0 && rc == MP_OK)
        rc = ck_h5_err(e, MP_EIO, "writing %s: closing dataset %s", path, wbox_path(B, 0, dp));
    ck_hasher_free(&h);
    H5Tclose(ft);
    return rc;
}

/* Writes the /boxes table of the open rank file f of file rank fr (its boxes, written: checksums known),
 * sorted by tensor name and offset, and records its XXH3 for the exchange (s->fsums). */
static mp_code write_box_table(ckpt_save *s, hid_t f, int fr, const char *path, mp_err *e) {
    size_t row = ck_boxrec_size(CK_BR_FILE);
    unsigned char *rows = mp_xcalloc(row * (size_t)(s->nb + 1));
    int64_t n = 0;
    for (int i = 0; i < s->nb; i++) {
        if (s->b[i].rank != fr) continue;
        ck_boxrec r;
        ck_wr_box_rec(&s->b[i], &r);
        ck_boxrec_put(CK_BR_FILE, &r, rows + row * (size_t)n++);
    }
    qsort(rows, (size_t)n, row, ck_boxrow_cmp);
    mp_code rc = ck_boxtab_write(f, rows, n, path, e);
    if (rc == MP_OK) {
        s->fsums = mp_realloc(s->fsums, sizeof *s->fsums * (size_t)s->nfsums, sizeof *s->fsums * (size_t)(s->nfsums + 1),
                              MP_MEM_OTHER);
        s->fsums[s->nfsums][0] = fr;
        s->fsums[s->nfsums][1] = (int64_t)ck_boxtab_hash(rows, n);
        s->nfsums++;
    }
    free(rows);
    return rc;
}

/* The path of the rank file of file rank fr in the save's directory (a new string). */
static char *rank_file_path(const ckpt_save *s, int fr) { return ck_fmt("%s/rank_%05d.h5", s->partial, fr); }

/* Writes and closes the rank file of file rank fr: the boxes of s with that file rank, in the order
 * added (write_rank_files fsyncs it). Adds the tensor bytes to *bytes and the file's size to
 * *file_bytes. */
static mp_code write_one_file(ckpt_save *s, int fr, fill_pipe *fp, int64_t *bytes, int64_t *file_bytes, mp_err *e) {
    char *path = rank_file_path(s, fr);
    mp_code rc = MP_OK;
    ck_h5_clear();
    /* H5F_ACC_EXCL: a file that is there before the create is a second writer of the same file rank
     * (rank 0 checks it too); one that is there after a failed create is ours (HDF5 created it, then
     * failed to write its superblock: disk full), and the cause is in the HDF5 record */
    int existed = mp_fs_exists(path);
    hid_t fapl = ck_h5_fapl(1), fcpl = ck_h5_fcpl();
    hid_t f = fapl < 0 || fcpl < 0 ? -1 : H5Fcreate(path, H5F_ACC_EXCL, fcpl, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (fcpl >= 0) H5Pclose(fcpl);
    if (f < 0) {
        if (existed)
            rc = mp_err_set(e, MP_EINPUT, "creating %s: the file exists already: does another process write file rank %d?",
                            path, fr);
        else
            rc = ck_h5_err(e, MP_EIO, "creating %s", path);
        ck_h5_clear();
        free(path);
        return rc;
    }
    herr_t hr = ck_attr_write_str(f, "format", CK_RANK_FORMAT_NAME);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "format_version", s->o.format_version);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "rank", fr);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "world_size", s->wsize);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "step", s->step);
    if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: root attributes", path);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    /* The disk should work while the next box is hashed: after each box, start writeback of what is
     * written so far (sync_file_range does not wait); the fsync at the end then only waits for the
     * tail. Without it the page cache holds everything until that fsync and hashing never overlaps
     * with I/O (docs/BENCH_CKPT.md). */
    int *fdp = NULL;
    if (rc == MP_OK && H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&fdp) < 0) {
        fdp = NULL;
        ck_h5_clear();   /* optional: without the descriptor there is no early writeback */
    }
    for (int i = 0; i < s->nb && rc == MP_OK; i++) {
        wbox *B = &s->b[i];
        if (B->rank != fr) continue;
        rc = write_box(s, f, lcpl, B, fp, path, e);
        if (rc == MP_OK && fdp) sync_file_range(*fdp, 0, 0, SYNC_FILE_RANGE_WRITE);
        *bytes += (int64_t)mp_dtype_size(B->dt) * ck_volume(B->ndim, B->shp);
        if (rc == MP_OK && s->o.progress) s->o.progress(s->o.progress_ctx, *bytes, s->progress_total);
        ck_crash_point("during_rank_files", s->rank);
    }
    H5Pclose(lcpl);
    if (rc == MP_OK) rc = write_box_table(s, f, fr, path, e);
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = ck_h5_err(e, MP_EIO, "closing %s", path);
    ck_h5_clear();
    struct stat st;
    if (rc == MP_OK && stat(path, &st) == 0) *file_bytes += (int64_t)st.st_size;
    free(path);
    return rc;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* qsort_r order of box indices (into the save ctx's boxes): tensor name, file rank, offset. */
static int cmp_number(const void *a, const void *b, void *ctx) {
    const wbox *x = &((const ckpt_save *)ctx)->b[*(const int *)a], *y = &((const ckpt_save *)ctx)->b[*(const int *)b];
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return ck_off_cmp(x->off, y->off);
}

/* Numbers the datasets of each tensor in each file by offset (box_<k>, tiles_<k>: k counts the file's
 * boxes of the tensor in offset order), the rule by which a v3 reader derives them from the index. */
void ck_wr_number_boxes(ckpt_save *s) {
    int *ix = mp_xmalloc(sizeof(int) * (size_t)(s->nb + 1));
    for (int i = 0; i < s->nb; i++) ix[i] = i;
    qsort_r(ix, (size_t)s->nb, sizeof(int), cmp_number, s);
    int k = 0;
    for (int i = 0; i < s->nb; i++) {
        wbox *B = &s->b[ix[i]];
        const wbox *P = i > 0 ? &s->b[ix[i - 1]] : NULL;
        k = P && P->rank == B->rank && !strcmp(P->name, B->name) ? k + 1 : 0;
        B->k = k;
    }
    free(ix);
}

/* Writes, closes and fsyncs this process's rank files (one per distinct file rank among its boxes,
 * ascending; none if it has no boxes). Any thread. Their directory entries are made durable by rank 0's
 * fsync of the directory after it wrote index.h5 (commit_rank0), which happens after every rank reported
 * its files written and before anything is published: one directory fsync per save instead of one per
 * rank (at 4,096 ranks, 4,096 fsyncs of one directory; docs/BENCH_SCALE.md). */
mp_code ck_wr_write_rank_files(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    ck_h5_init();
    if (s->nb == 0) return MP_OK;
    ck_wr_number_boxes(s);
    s->nfsums = 0;
    /* distinct file ranks, ascending; the band buffer for the largest band of any fill box */
    int *frs = mp_xmalloc(sizeof(int) * (size_t)s->nb);
    size_t band_cap = 0;
    size_t fill_bytes = save_fill_bytes(s);
    s->progress_total = 0;
    for (int i = 0; i < s->nb; i++) {
        frs[i] = s->b[i].rank;
        s->progress_total += (int64_t)mp_dtype_size(s->b[i].dt) * ck_volume(s->b[i].ndim, s->b[i].shp);
        if (!s->b[i].data) {
            size_t n = (size_t)(band_rows(&s->b[i], fill_bytes) * row_bytes(&s->b[i]));
            if (n > band_cap) band_cap = n;
        }
    }
    qsort(frs, (size_t)s->nb, sizeof(int), cmp_int);
    int nfr = 0;
    for (int i = 0; i < s->nb; i++)
        if (i == 0 || frs[i] != frs[i - 1]) frs[nfr++] = frs[i];
    fill_pipe fp = {.cap = band_cap};
    int nbuf = band_cap ? (ck_worker_serial_forced() ? 1 : 2) : 0;
    for (int k = 0; k < nbuf; k++) fp.buf[k] = mp_malloc(band_cap, MP_MEM_CKPT);
    if (nbuf == 2) fp.w = ck_worker_new();
    /* a fill that reads a checkpoint calls HDF5 while this thread writes: only with a thread-safe HDF5 */
    fp.any_thread = fp.w && s->o.fill_any_thread && ck_h5_threadsafe();
    if (fp.any_thread) link_fill_boxes(s);   /* next_fill: where the worker reads ahead to */
    int64_t bytes = 0, file_bytes = 0;
    mp_code rc = MP_OK;
    for (int k = 0; k < nfr && rc == MP_OK; k++) rc = write_one_file(s, frs[k], &fp, &bytes, &file_bytes, e);
    /* The fsyncs come after the last file, not each after its own: write_one_file starts the
     * writeback of every box as it goes, so by now little is left to wait for, and the source reads
     * of file k+1 ran while the disk wrote file k. An fsync per file stopped the pipeline for the
     * tail of each file (import at tp 8: 8 fsyncs of ~0.3 s each in a 5.8 s run; 1.12x -> 1.04x the
     * copy floor, docs/BENCH_RESHARD.md). Nothing is published before they all returned. */
    for (int k = 0; k < nfr && rc == MP_OK; k++) {
        char *path = rank_file_path(s, frs[k]);
        rc = mp_fs_fsync_path(path, 0, e);
        free(path);
    }
    ck_worker_free(fp.w);
    for (int k = 0; k < nbuf; k++) mp_free_acct(fp.buf[k], band_cap, MP_MEM_CKPT);
    free(frs);
    s->st.bytes = bytes;
    s->st.file_bytes = file_bytes;
    s->st.write_s = ck_now() - t0;
    return rc;
}
