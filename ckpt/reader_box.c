/*
 * ckpt/reader_box.c — a saved box's bytes, fetched from its rank file and checked against its
 * checksums; ckpt_verify (every box, whole). The reader's design: the top comment of ckpt/reader.c.
 *
 * One path for both format versions: a v2 box's tile checksums are the uint64 dataset tiles_dataset
 * next to it in its rank file, read whole on first need, checked against the index's tiles_checksum
 * and cached (the cache is dropped whole when it would pass an eighth of the scratch bound, at most
 * 32 MiB); a v1 box's slab checksums (in the index) are its tiles, tile_cols being the box's whole
 * dim 1.
 *
 * Fetching: a contiguous, unfiltered dataset (every uncompressed box) is read with pread on the rank
 * file's descriptor (sec2 driver, H5Fget_vfd_handle) at H5Dget_offset + byte offset: one pread for a
 * band of whole-width rows, one per row segment when only some column blocks are needed. So exactly
 * the tile bytes are read (HDF5's sieve buffer would read up to 64 KiB around each request). Chunked
 * (zstd) datasets, whose chunks are tiles, are read with H5Dread of the tile rectangle's hyperslab.
 */
#define _GNU_SOURCE
#include "ckpt/reader_internal.h"
#include "ckpt/zstd_filter.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

void ck_rd_src_close(src_t *s) {
    if (s->ft >= 0) H5Tclose(s->ft);
    if (s->d >= 0) H5Dclose(s->d);
    s->d = s->ft = -1;
}

/* Fills s->fd / s->base for dataset s->d of a file with descriptor fd. */
static void src_locate(src_t *s, int fd) {
    s->fd = -1;
    s->base = 0;
    s->chunk_rows = 0;
    hid_t dcpl = H5Dget_create_plist(s->d);
    hsize_t cd[CKPT_MAX_DIMS];
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, CKPT_MAX_DIMS, cd) >= 1)
        s->chunk_rows = (int64_t)cd[0];
    if (dcpl >= 0 && fd >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0) {
        haddr_t a = H5Dget_offset(s->d);
        if (a != HADDR_UNDEF && a <= (haddr_t)INT64_MAX) {
            s->fd = fd;
            s->base = (int64_t)a;
        }
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    ck_h5_clear();
}

/* Opens box j's dataset and checks its shape and type against the index. */
mp_code ck_rd_open_box(ckpt_reader *r, int64_t j, src_t *s, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    const char *fname = r->L.f[B->file].name;
    hid_t f = -1;
    int fd = -1;
    s->d = s->ft = -1;
    MP_TRY(ck_rd_rank_file(r, B->file, &f, &fd, e));
    MP_TRY(ck_rd_file_table(r, B->file, e));
    hid_t d = H5Dopen2(f, r->bi[j].dataset, H5P_DEFAULT);
    if (d < 0) return ck_h5_err(e, MP_ECHECK, "%s/%s: dataset %s of tensor %s is missing", r->dir, fname, r->bi[j].dataset, T->name);
    hid_t want = ck_h5_type(T->dtype);
    hid_t ft = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = want >= 0 && ft >= 0 && sp >= 0 && H5Tequal(ft, want) > 0 && H5Sget_simple_extent_ndims(sp) == T->ndim;
    if (ok) {
        hsize_t dims[CKPT_MAX_DIMS];
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d2 = 0; d2 < T->ndim; d2++) ok = ok && dims[d2] == (hsize_t)B->shp[d2];
    }
    if (sp >= 0) H5Sclose(sp);
    if (want >= 0) H5Tclose(want);
    if (!ok) {
        if (ft >= 0) H5Tclose(ft);
        H5Dclose(d);
        ck_h5_clear();
        return mp_err_set(e, MP_ECHECK, "%s/%s: dataset %s (tensor %s) has a type or shape other than the index says",
                          r->dir, fname, r->bi[j].dataset, T->name);
    }
    s->d = d;
    s->ft = ft;
    src_locate(s, fd);
    return MP_OK;
}

/* pread of exactly n bytes at off, for box j's dataset `what`; a short read or an error is MP_ECHECK
 * (a truncated rank file) naming the file, the dataset and the tensor. */
static mp_code pread_all(ckpt_reader *r, int64_t j, const char *what, int fd, void *dst, size_t n, int64_t off,
                         mp_err *e) {
    const ck_box *B = &r->L.b[j];
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)dst + got, n - got, (off_t)(off + (int64_t)got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return mp_err_set(e, MP_ECHECK,
                              "%s/%s: short read of dataset %s (tensor %s): %zu of %zu bytes at file offset %lld%s%s "
                              "(truncated or corrupt rank file)",
                              r->dir, r->L.f[B->file].name, what, r->L.t[B->tensor].name, got, n, (long long)off,
                              k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        got += (size_t)k;
    }
    r->bytes_read += (int64_t)n;
    return MP_OK;
}

geom ck_rd_box_geom(const ck_layout *L, const ck_box *B) {
    const ck_tensor *T = &L->t[B->tensor];
    geom g;
    g.rows = B->shp[0];
    g.cols = T->ndim >= 2 ? B->shp[1] : 1;
    g.unit = (int64_t)mp_dtype_size(T->dtype) * (T->ndim > 2 ? ck_volume(T->ndim - 2, B->shp + 2) : 1);
    g.row = g.cols * g.unit;
    return g;
}

/* Reads rows [a, b) x dim-1 entries [ca, cb) (all of dims 2..) of box j's dataset into dst, row-major
 * ((b - a) x (cb - ca) x ...): pread for contiguous datasets (one call for whole-width rows, else one
 * per row segment), H5Dread of the hyperslab otherwise. Counts the bytes in r->bytes_read. */
mp_code ck_rd_fetch(ckpt_reader *r, int64_t j, const src_t *s, int64_t a, int64_t b, int64_t ca, int64_t cb, void *dst,
                    mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    geom g = ck_rd_box_geom(&r->L, B);
    assert(0 <= a && a < b && b <= g.rows && 0 <= ca && ca < cb && cb <= g.cols);
    size_t seg = (size_t)((cb - ca) * g.unit);
    if (s->fd >= 0) {
        if (ca == 0 && cb == g.cols) return pread_all(r, j, r->bi[j].dataset, s->fd, dst, (size_t)(b - a) * seg, s->base + a * g.row, e);
        for (int64_t i = a; i < b; i++)
            MP_TRY(pread_all(r, j, r->bi[j].dataset, s->fd, (char *)dst + (size_t)(i - a) * seg, seg,
                             s->base + i * g.row + ca * g.unit, e));
        return MP_OK;
    }
    hsize_t st[CKPT_MAX_DIMS] = {0}, cnt[CKPT_MAX_DIMS];
    for (int k = 0; k < T->ndim; k++) cnt[k] = (hsize_t)B->shp[k];
    st[0] = (hsize_t)a;
    cnt[0] = (hsize_t)(b - a);
    if (T->ndim >= 2) {
        st[1] = (hsize_t)ca;
        cnt[1] = (hsize_t)(cb - ca);
    }
    hid_t fs = H5Dget_space(s->d);
    hid_t ms = H5Screate_simple(T->ndim, cnt, NULL);
    herr_t hr = (fs < 0 || ms < 0) ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (hr >= 0) hr = ckpt_zstd_read(s->d, s->ft, ms, fs, H5P_DEFAULT, dst);   /* zstd: chunk size checked */
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (hr < 0)
        return ck_h5_err(e, MP_ECHECK, "%s/%s: reading rows %lld:%lld, columns %lld:%lld of dataset %s (tensor %s)",
                         r->dir, r->L.f[B->file].name, (long long)a, (long long)b, (long long)ca, (long long)cb,
                         r->bi[j].dataset, T->name);
    /* HDF5 decompresses whole chunks: count the rows of every chunk the hyperslab meets (the chunk
     * columns are the tile columns) */
    int64_t ra = a, rb = b;
    if (s->chunk_rows > 0) {
        ra = a / s->chunk_rows * s->chunk_rows;
        rb = (b + s->chunk_rows - 1) / s->chunk_rows * s->chunk_rows;
        if (rb > g.rows) rb = g.rows;
    }
    r->bytes_read += (int64_t)((size_t)(rb - ra) * seg);
    return MP_OK;
}

/* "checksum mismatch" for rows [a, b) x dim-1 entries [ca, cb) of box j (box coordinates). */
mp_code ck_rd_checksum_error(ckpt_reader *r, int64_t j, int64_t a, int64_t b, int64_t ca, int64_t cb, uint64_t want,
                             uint64_t got, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    memcpy(off, B->off, sizeof off);
    memcpy(shp, B->shp, sizeof shp);
    off[0] += a;
    shp[0] = b - a;
    if (T->ndim >= 2) {
        off[1] += ca;
        shp[1] = cb - ca;
    }
    char reg[256];
    ck_box_str(reg, sizeof reg, T->ndim, off, shp);
    return mp_err_set(e, MP_ECHECK,
                      "%s/%s: checksum mismatch in dataset %s (tensor %s, region %s): stored %016llx, data %016llx: "
                      "the rank file is corrupt",
                      r->dir, r->L.f[B->file].name, r->bi[j].dataset, T->name, reg, (unsigned long long)want,
                      (unsigned long long)got);
}

/* Reads the tile checksum array of v2 box j from its rank file into buf (ntiles, native order) and
 * checks it against the index's tiles_checksum (XXH3-64 of the array as little-endian uint64s). */
static mp_code load_tiles(ckpt_reader *r, int64_t j, uint64_t *buf, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    const char *fname = r->L.f[B->file].name;
    assert(r->L.version >= 2 && B->ntiles > 0);
    char tb[CK_DSET_MAX];
    const char *tds = ck_box_path(&r->L, B, 1, tb);
    hid_t f = -1;
    int fd = -1;
    MP_TRY(ck_rd_rank_file(r, B->file, &f, &fd, e));
    src_t s = {.d = H5Dopen2(f, tds, H5P_DEFAULT), .ft = -1};
    if (s.d < 0)
        return ck_h5_err(e, MP_ECHECK, "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is missing", r->dir,
                         fname, tds, r->bi[j].dataset, T->name);
    s.ft = H5Dget_type(s.d);
    hid_t sp = H5Dget_space(s.d);
    hsize_t n = 0;
    int ok = s.ft >= 0 && sp >= 0 && H5Tget_class(s.ft) == H5T_INTEGER && H5Tget_size(s.ft) == 8 &&
             H5Tget_sign(s.ft) == H5T_SGN_NONE && H5Sget_simple_extent_ndims(sp) == 1 &&
             H5Sget_simple_extent_dims(sp, &n, NULL) == 1 && n == (hsize_t)B->ntiles;
    if (sp >= 0) H5Sclose(sp);
    mp_code rc = MP_OK;
    size_t bytes = sizeof(uint64_t) * (size_t)B->ntiles;
    if (!ok) {
        ck_h5_clear();
        rc = mp_err_set(e, MP_ECHECK,
                        "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is not a uint64[%lld] array", r->dir,
                        fname, tds, r->bi[j].dataset, T->name, (long long)B->ntiles);
    } else {
        src_locate(&s, fd);
        if (s.fd >= 0) {
            rc = pread_all(r, j, tds, s.fd, buf, bytes, s.base, e);
        } else if (H5Dread(s.d, H5T_STD_U64LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            rc = ck_h5_err(e, MP_ECHECK, "%s/%s: reading tile checksums dataset %s (tensor %s)", r->dir, fname,
                           tds, T->name);
        } else {
            r->bytes_read += (int64_t)bytes;
        }
    }
    ck_rd_src_close(&s);
    if (rc != MP_OK) return rc;
    uint64_t h = XXH3_64bits(buf, bytes);   /* buf holds the little-endian bytes */
    if (h != B->tiles_checksum)
        return mp_err_set(e, MP_ECHECK,
                          "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is corrupt: XXH3 %016llx, the "
                          "index says %016llx",
                          r->dir, fname, tds, r->bi[j].dataset, T->name, (unsigned long long)h,
                          (unsigned long long)B->tiles_checksum);
    for (int64_t k = 0; k < B->ntiles; k++) buf[k] = le64toh(buf[k]);
    return MP_OK;
}

/* The tile checksums of box j: v1 slab checksums from the index, v2 the cached array (loaded and
 * checked on first need; the whole cache is dropped when it would pass ck_rd_tile_cache_max). */
mp_code ck_rd_tiles_of(ckpt_reader *r, int64_t j, const uint64_t **out, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    if (r->L.version == 1) {
        assert(B->slab_first + B->ntiles <= r->L.nslabs);
        *out = r->L.slabs + B->slab_first;
        return MP_OK;
    }
    if (!r->tiles[j]) {
        size_t bytes = sizeof(uint64_t) * (size_t)B->ntiles;
        if (r->tiles_bytes + bytes > ck_rd_tile_cache_max(r)) ck_rd_drop_tiles(r);
        uint64_t *buf = mp_malloc(bytes, MP_MEM_CKPT);
        mp_code rc = load_tiles(r, j, buf, e);
        if (rc != MP_OK) {
            mp_free_acct(buf, bytes, MP_MEM_CKPT);
            return rc;
        }
        r->tiles[j] = buf;
        r->tiles_bytes += bytes;
    }
    *out = r->tiles[j];
    return MP_OK;
}

/* Hashes the tiles held in p, rows [a, b) x dim-1 entries [ca, cb) of a box of geometry g cut into
 * tr x tc tiles, row-major, where a and ca are tile boundaries and b, cb tile boundaries or the box's
 * end, and compares them with tiles (the box's tile array). Pure: touches only its arguments and the
 * scratch state hs, so it runs on the verification worker. */
verdict ck_rd_tiles_verdict(geom g, int64_t tr, int64_t tc, const uint64_t *tiles, const char *p, int64_t a,
                            int64_t b, int64_t ca, int64_t cb, XXH3_state_t *hs) {
    int64_t ncb = (g.cols + tc - 1) / tc;
    assert(a % tr == 0 && ca % tc == 0 && (b % tr == 0 || b == g.rows) && (cb % tc == 0 || cb == g.cols));
    size_t w = (size_t)((cb - ca) * g.unit);   /* bytes of one row in p */
    verdict v = {0};
    for (int64_t i = a / tr; i * tr < b; i++) {
        int64_t ta = i * tr, tb = ta + tr < g.rows ? ta + tr : g.rows;
        for (int64_t k = ca / tc; k * tc < cb; k++) {
            int64_t tca = k * tc, tcb = tca + tc < g.cols ? tca + tc : g.cols;
            size_t seg = (size_t)((tcb - tca) * g.unit);
            const char *q = p + (size_t)(ta - a) * w + (size_t)((tca - ca) * g.unit);
            uint64_t h;
            if (seg == w) {
                h = XXH3_64bits(q, (size_t)(tb - ta) * seg);
            } else {
                XXH3_64bits_reset(hs);
                for (int64_t x = ta; x < tb; x++, q += w) XXH3_64bits_update(hs, q, seg);
                h = XXH3_64bits_digest(hs);
            }
            uint64_t want = tiles[i * ncb + k];
            if (h != want) return (verdict){1, ta, tb, tca, tcb, want, h};
        }
    }
    return v;
}

/* Checks the tiles held in p: rows [a, b) x dim-1 entries [ca, cb) of box j (see ck_rd_tiles_verdict);
 * a mismatch is the checksum error naming the tile. hs is a scratch XXH3 state. */
static mp_code check_tiles(ckpt_reader *r, int64_t j, const uint64_t *tiles, const char *p, int64_t a, int64_t b,
                           int64_t ca, int64_t cb, XXH3_state_t *hs, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    verdict v = ck_rd_tiles_verdict(ck_rd_box_geom(&r->L, B), B->tile_rows, B->tile_cols, tiles, p, a, b, ca, cb, hs);
    return v.bad ? ck_rd_checksum_error(r, j, v.a, v.b, v.ca, v.cb, v.want, v.got, e) : MP_OK;
}

/* Grows the scratch buffer *p (*cap bytes) to at least n bytes. */
void ck_rd_scratch_grow(char **p, size_t *cap, size_t n) {
    if (n <= *cap) return;
    mp_free_acct(*p, *cap, MP_MEM_CKPT);
    *p = mp_malloc(n, MP_MEM_CKPT);
    *cap = n;
}

/* Tile rows per batch for box B (ckpt_verify): the scratch bound over the bytes of one tile row of
 * width w bytes, at least 1, at most all of the box's tile rows. */
static int64_t batch_tile_rows(const ckpt_reader *r, const ck_box *B, int64_t w) {
    int64_t all = (B->shp[0] + B->tile_rows - 1) / B->tile_rows;
    size_t per = r->scratch / (size_t)(B->tile_rows * w);
    return per < 1 ? 1 : per > (size_t)all ? all : (int64_t)per;
}

/* The dataset attributes of box j (open in s) agree with the index: tensor, dtype, global_offset,
 * global_shape, checksum; v2 also tile_rows, tile_cols, tiles_checksum. */
static mp_code check_attrs(ckpt_reader *r, int64_t j, const src_t *s, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    char tn[CKPT_NAME_MAX + 2] = "", dt[16] = "";
    int64_t go[CKPT_MAX_DIMS], gs[CKPT_MAX_DIMS], tr = 0, tc = 0;
    uint64_t ck = 0, tck = 0;
    int ok = ck_attr_read_str(s->d, "tensor", tn, sizeof tn) >= 0 && !strcmp(tn, T->name) &&
             ck_attr_read_str(s->d, "dtype", dt, sizeof dt) >= 0 && !strcmp(dt, mp_dtype_name(T->dtype)) &&
             ck_attr_read_i64(s->d, "global_offset", go, T->ndim) >= 0 &&
             ck_attr_read_i64(s->d, "global_shape", gs, T->ndim) >= 0 && ck_attr_read_u64(s->d, "checksum", &ck, 1) >= 0 &&
             ck == B->checksum;
    for (int k = 0; ok && k < T->ndim; k++) ok = go[k] == B->off[k] && gs[k] == T->shape[k];
    if (ok && r->L.version >= 2)
        ok = ck_attr_read_i64(s->d, "tile_rows", &tr, 1) >= 0 && tr == B->tile_rows &&
             ck_attr_read_i64(s->d, "tile_cols", &tc, 1) >= 0 && tc == B->tile_cols &&
             ck_attr_read_u64(s->d, "tiles_checksum", &tck, 1) >= 0 && tck == B->tiles_checksum;
    if (ok) return MP_OK;
    ck_h5_clear();
    return mp_err_set(e, MP_ECHECK, "%s/%s: attributes of dataset %s disagree with the index (tensor %s)", r->dir,
                      r->L.f[B->file].name, r->bi[j].dataset, T->name);
}

mp_code ckpt_verify(ckpt_reader *r, int64_t *bytes_read, mp_err *e) {
    ck_h5_init();
    int64_t start = r->bytes_read;
    mp_code rc = MP_OK;
    for (int t = 0; t < r->L.ntensors && rc == MP_OK; t++) rc = ck_layout_check_tensor(&r->L, t, 1, e);
    if (rc != MP_OK) return mp_err_wrap(e, "checkpoint %s", r->dir);
    char *tmp = NULL;
    size_t tmp_n = 0;
    XXH3_state_t *hs = XXH3_createState(), *ts = XXH3_createState();
    if (!hs || !ts) mp_oom(0, MP_MEM_CKPT, "a checksum state");
    int64_t pg_total = 0, pg_done = 0;   /* progress: tensor bytes of all boxes, of those checked */
    for (int64_t j = 0; j < r->L.nboxes && r->progress; j++)
        pg_total += ck_volume(r->L.t[r->L.b[j].tensor].ndim, r->L.b[j].shp) *
                    (int64_t)mp_dtype_size(r->L.t[r->L.b[j].tensor].dtype);
    for (int64_t j = 0; j < r->L.nboxes && rc == MP_OK; j++) {
        const ck_box *B = &r->L.b[j];
        geom g = ck_rd_box_geom(&r->L, B);
        src_t s;
        rc = ck_rd_open_box(r, j, &s, e);
        if (rc != MP_OK) break;
        rc = check_attrs(r, j, &s, e);
        /* the tile checksums: v2 read from the rank file (not cached: verify reads each box once) */
        uint64_t *own = NULL;
        size_t own_n = sizeof(uint64_t) * (size_t)B->ntiles;
        const uint64_t *tiles = r->L.version == 1 ? r->L.slabs + B->slab_first : NULL;
        if (rc == MP_OK && !tiles) {
            own = mp_malloc(own_n, MP_MEM_CKPT);
            rc = load_tiles(r, j, own, e);
            tiles = own;
        }
        int64_t per = batch_tile_rows(r, B, g.row);
        XXH3_64bits_reset(hs);
        for (int64_t a = 0; a < g.rows && rc == MP_OK; a += per * B->tile_rows) {
            int64_t b = a + per * B->tile_rows < g.rows ? a + per * B->tile_rows : g.rows;
            size_t need = (size_t)((b - a) * g.row);
            ck_rd_scratch_grow(&tmp, &tmp_n, need);
            rc = ck_rd_fetch(r, j, &s, a, b, 0, g.cols, tmp, e);
            if (rc == MP_OK) rc = check_tiles(r, j, tiles, tmp, a, b, 0, g.cols, ts, e);
            if (rc == MP_OK) XXH3_64bits_update(hs, tmp, need);
        }
        if (rc == MP_OK) {
            uint64_t h = XXH3_64bits_digest(hs);
            if (h != B->checksum) rc = ck_rd_checksum_error(r, j, 0, g.rows, 0, g.cols, B->checksum, h, e);
        }
        if (own) mp_free_acct(own, own_n, MP_MEM_CKPT);
        ck_rd_src_close(&s);
        if (rc == MP_OK && r->progress) {
            pg_done += ck_volume(r->L.t[B->tensor].ndim, B->shp) * (int64_t)mp_dtype_size(r->L.t[B->tensor].dtype);
            r->progress(r->progress_ctx, pg_done, pg_total);
        }
    }
    XXH3_freeState(hs);
    XXH3_freeState(ts);
    mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
    if (bytes_read) *bytes_read = r->bytes_read - start;
    return rc;
}
