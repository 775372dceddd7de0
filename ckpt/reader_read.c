/*
 * ckpt/reader_read.c — ckpt_read (steps 1-3 of ckpt/reader.c's top comment), ckpt_prefetch and
 * ckpt_box_read_cost, over the read/verify pipeline.
 *
 * Overlap (the read/verify pipeline): the reads of step 3 are cut into pieces of about 1 MiB (whole
 * tile rows; rows of a whole-box read, whose box checksum is then computed by a streaming XXH3 state
 * piece by piece) and run through two stages: this thread fetches piece k+1 (pread or H5Dread: every
 * HDF5 call stays on this thread) while the worker thread of ckpt/read_pipe.c hashes piece k (if
 * the worker has not started it when it is needed, this thread hashes it: never slower than inline
 * hashing). Chunked boxes are cut at chunk boundaries. Piece k's verdict is taken before piece k+1
 * is handed to the worker, before anything of piece k is copied out of scratch into the caller's
 * buffer, and before ckpt_read returns: nothing unchecked is handed over, and the errors are the
 * same as without the overlap.
 * Scratch pieces use two halves of the scratch bound (double buffering, same total). The pipeline
 * spans the saved boxes of one request; small pieces (< 64 KiB) and the last piece of a request are
 * hashed inline. The worker is made on the first read that needs it and joined in ckpt_close; no
 * job is in flight when ckpt_read returns, on any path.
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

/* ------------------------------------------------------------- the read/verify pipeline */

/* A ckpt_read is a sequence of pieces of about CK_PIECE_BYTES (whole tile rows; rows of a whole-box
 * read), each fetched by the caller's thread and checked on the worker (ckpt/read_pipe.c) while the
 * caller's thread fetches the next. Pieces below CK_PIPE_MIN_BYTES, and the last piece of a read, are
 * checked inline (handing them over would cost more than it hides). */
#define CK_PIPE_MIN_BYTES ((size_t)64 << 10)

/* One piece: rows [a, b) x dim-1 entries [ca, cb) of saved box j, fetched into p. Everything the
 * check needs is copied in, so that check_piece never touches the reader. */
typedef struct {
    int64_t j, a, b, ca, cb;
    char *p;                    /* the caller's buffer, or a scratch half (out = 1) */
    size_t bytes;
    geom g;
    int64_t tr, tc;
    const uint64_t *tiles;      /* the box's tile checksums; NULL: rows of a whole-box read */
    uint64_t box_sum;           /* whole-box pieces: the box checksum, compared by the last piece */
    int first, last;            /* whole-box pieces: holds the box's first / last row */
    int out;                    /* p is scratch: after the check, copy the part of I in it to the caller */
    const int64_t *io, *is;     /* out pieces: the intersection I being read */
    XXH3_state_t *box_hs, *tile_hs;
    verdict v;                  /* check_piece's result */
} piece;

/* Checks piece arg (a piece *) and writes its verdict: its tiles, or (whole-box pieces) its rows into
 * the streaming box hash, compared with the box checksum at the last piece. Runs on the worker or
 * inline; pieces of one whole box are checked in order (at most one in flight). */
static void check_piece(void *arg) {
    piece *q = arg;
    if (q->tiles) {
        q->v = ck_rd_tiles_verdict(q->g, q->tr, q->tc, q->tiles, q->p, q->a, q->b, q->ca, q->cb, q->tile_hs);
        return;
    }
    assert(q->ca == 0 && q->cb == q->g.cols);
    if (q->first) XXH3_64bits_reset(q->box_hs);
    XXH3_64bits_update(q->box_hs, q->p, q->bytes);
    q->v = (verdict){0};
    if (q->last) {
        uint64_t h = XXH3_64bits_digest(q->box_hs);
        if (h != q->box_sum) q->v = (verdict){1, 0, q->g.rows, 0, q->g.cols, q->box_sum, h};
    }
}

/* The pipeline of one ckpt_read: pieces pushed in order; piece k in slot pc[k & 1] and, when it is
 * fetched into scratch, in tmp[k & 1] (two halves: together within the reader's scratch bound). */
typedef struct {
    ckpt_reader *r;
    piece pc[2];
    int64_t n, done;        /* pieces pushed; pieces finished (verdict taken, copied out): n - done <= 1 */
    char *tmp[2];
    size_t tmp_n[2];
    const int64_t *qo, *qs; /* the request */
    char *buf;
    mp_err *e;
} pipe_t;

static void pipe_begin(pipe_t *pp, ckpt_reader *r, const int64_t *qo, const int64_t *qs, char *buf, mp_err *e) {
    memset(pp, 0, sizeof *pp);
    pp->r = r;
    pp->qo = qo;
    pp->qs = qs;
    pp->buf = buf;
    pp->e = e;
    if (!r->box_hs) r->box_hs = XXH3_createState();
    if (!r->tile_hs) r->tile_hs = XXH3_createState();
    if (!r->box_hs || !r->tile_hs) mp_oom(0, MP_MEM_CKPT, "a checksum state");
}

/* The slot of the next piece (the caller fills it whole). Its scratch half is free: the piece that
 * used it last is finished (n - done <= 1). */
static piece *pipe_slot(pipe_t *pp) {
    assert(pp->n - pp->done <= 1);
    return &pp->pc[pp->n & 1];
}

/* The next piece's scratch half, grown to n bytes. */
static char *pipe_scratch(pipe_t *pp, size_t n) {
    int k = (int)(pp->n & 1);
    ck_rd_scratch_grow(&pp->tmp[k], &pp->tmp_n[k], n);
    return pp->tmp[k];
}

/* Finishes the last piece pushed, if not yet: waits for its check, and on a match copies its part of
 * I out of scratch into the caller's buffer; a mismatch is the checksum error naming the tile (or the
 * box). Nothing of a piece reaches the caller's buffer from scratch before its check. */
static mp_code pipe_finish(pipe_t *pp) {
    if (pp->done == pp->n) return MP_OK;
    assert(pp->n - pp->done == 1);
    ckpt_reader *r = pp->r;
    piece *q = &pp->pc[(pp->n - 1) & 1];
    if (r->worker) ck_worker_wait(r->worker);
    pp->done = pp->n;
    if (q->v.bad) return ck_rd_checksum_error(r, q->j, q->v.a, q->v.b, q->v.ca, q->v.cb, q->v.want, q->v.got, pp->e);
    if (q->out) {
        const ck_box *B = &r->L.b[q->j];
        const ck_tensor *T = &r->L.t[B->tensor];
        int nd = T->ndim;
        int64_t so[CKPT_MAX_DIMS], ss[CKPT_MAX_DIMS], co[CKPT_MAX_DIMS], cs[CKPT_MAX_DIMS];
        memcpy(so, B->off, sizeof so);
        memcpy(ss, B->shp, sizeof ss);
        so[0] += q->a;
        ss[0] = q->b - q->a;
        if (nd >= 2) {
            so[1] += q->ca;
            ss[1] = q->cb - q->ca;
        }
        if (ck_intersect(nd, so, ss, q->io, q->is, co, cs))
            ck_copy_sub(nd, mp_dtype_size(T->dtype), co, cs, q->p, so, ss, pp->buf, pp->qo, pp->qs);
    }
    return MP_OK;
}

/* Pushes the piece just filled in pipe_slot and fetched: finishes the previous piece (whose check ran
 * while this one was fetched), then hands this one to the worker, or checks and finishes it inline
 * when it is small or `more` is 0 (no fetch follows to overlap). */
static mp_code pipe_push(pipe_t *pp, int more) {
    ckpt_reader *r = pp->r;
    piece *q = &pp->pc[pp->n & 1];
    q->box_hs = r->box_hs;
    q->tile_hs = r->tile_hs;
    mp_code rc = pipe_finish(pp);
    pp->n++;
    if (rc != MP_OK) {
        pp->done = pp->n;   /* dropped: never checked, never copied out */
        return rc;
    }
    if (!more || q->bytes < CK_PIPE_MIN_BYTES) {
        check_piece(q);
        return pipe_finish(pp);
    }
    if (r->worker && !ck_worker_usable(r->worker)) {   /* made before a fork: no thread here */
        ck_worker_free(r->worker);
        r->worker = NULL;
    }
    if (!r->worker) r->worker = ck_worker_new();
    ck_worker_post(r->worker, check_piece, q);
    return MP_OK;
}

/* Ends the pipeline on every path: with rc == MP_OK finishes the last piece (its verdict is the
 * result); otherwise waits for a check in flight and drops it. Frees the scratch halves. On return no
 * job of this read is on the worker. */
static mp_code pipe_end(pipe_t *pp, mp_code rc) {
    if (rc == MP_OK) {
        rc = pipe_finish(pp);
    } else if (pp->done < pp->n) {
        if (pp->r->worker) ck_worker_wait(pp->r->worker);
        pp->done = pp->n;
    }
    assert(!ck_worker_busy(pp->r->worker));
    for (int k = 0; k < 2; k++) mp_free_acct(pp->tmp[k], pp->tmp_n[k], MP_MEM_CKPT);
    return rc;
}

/* Rows per piece: about `bytes` bytes of rows of w bytes, a multiple of `step` rows (a tile row, or 1)
 * and, for a chunked dataset, of its chunk rows (so no chunk is decompressed for two pieces); at least
 * one such multiple. Pieces start at multiples of it (box rows). */
static int64_t piece_rows(const src_t *s, int64_t step, int64_t w, size_t bytes) {
    assert(step > 0 && w > 0);
    int64_t q = step;
    if (s->chunk_rows > 0) q = s->chunk_rows % step == 0 ? s->chunk_rows : s->chunk_rows * step;
    int64_t n = (int64_t)(bytes / (size_t)(q * w));
    return (n < 1 ? 1 : n) * q;
}

/* Reads the intersection (io, is) of saved box j into the request of pipeline pp, piece by piece;
 * `more`: other intersections follow in this read. On return the box's pieces are fetched and pushed;
 * the last one may still be in check (pipe_end or the next push finishes it). */
static mp_code read_part(pipe_t *pp, int64_t j, const int64_t *io, const int64_t *is, int more) {
    ckpt_reader *r = pp->r;
    mp_err *e = pp->e;
    const int64_t *qo = pp->qo, *qs = pp->qs;
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int nd = T->ndim;
    geom g = ck_rd_box_geom(&r->L, B);
    int contig = 1;                                                /* I's rows: whole rows of B, contiguous in buf */
    for (int d = 1; d < nd; d++) contig = contig && is[d] == B->shp[d] && is[d] == qs[d];
    int64_t r0 = io[0] - B->off[0], r1 = r0 + is[0];               /* rows of B that I covers */
    int64_t c0 = nd >= 2 ? io[1] - B->off[1] : 0, c1 = nd >= 2 ? c0 + is[1] : 1;
    mp_code rc = MP_OK;
    if (!contig || r0 != 0 || r1 != g.rows) {
        /* ck_rd_tiles_of may drop the tile cache, which the piece in check may be using */
        if (r->L.version >= 2 && !r->tiles[j]) MP_TRY(pipe_finish(pp));
    }
    src_t s;
    MP_TRY(ck_rd_open_box(r, j, &s, e));
    if (contig && r0 == 0 && r1 == g.rows) {
        /* the whole box, straight into buf, in pieces of whole rows checked by the streaming box hash */
        char *dst = pp->buf + (size_t)((io[0] - qo[0]) * g.row);
        int64_t per = piece_rows(&s, 1, g.row, CK_PIECE_BYTES);
        /* the kernel reads the rest of the box ahead while the pieces before it are read and hashed: a
         * box read piece by piece otherwise waits for each piece's I/O in turn */
        if (s.fd >= 0 && per < g.rows)
            posix_fadvise(s.fd, (off_t)s.base, (off_t)(g.rows * g.row), POSIX_FADV_WILLNEED);
        for (int64_t a = 0; a < g.rows && rc == MP_OK; a += per) {
            int64_t b = a + per < g.rows ? a + per : g.rows;
            piece *q = pipe_slot(pp);
            *q = (piece){.j = j, .a = a, .b = b, .ca = 0, .cb = g.cols, .p = dst + (size_t)(a * g.row),
                         .bytes = (size_t)((b - a) * g.row), .g = g, .box_sum = B->checksum, .first = a == 0,
                         .last = b == g.rows};
            rc = ck_rd_fetch(r, j, &s, a, b, 0, g.cols, q->p, e);
            if (rc == MP_OK) rc = pipe_push(pp, more || b < g.rows);
        }
        ck_rd_src_close(&s);
        return rc;
    }
    const uint64_t *tiles = NULL;
    rc = ck_rd_tiles_of(r, j, &tiles, e);
    if (rc != MP_OK) {
        ck_rd_src_close(&s);
        return rc;
    }
    int64_t TR = B->tile_rows, TC = B->tile_cols;
    int64_t ra = r0 / TR * TR, rb = (r1 + TR - 1) / TR * TR;       /* touched tile rows */
    if (rb > g.rows) rb = g.rows;
    int64_t ca = c0 / TC * TC, cb = (c1 + TC - 1) / TC * TC;       /* touched column blocks */
    if (cb > g.cols) cb = g.cols;
    int64_t w = (cb - ca) * g.unit;
    size_t bound = r->scratch / 2 < CK_PIECE_BYTES ? r->scratch / 2 : CK_PIECE_BYTES;
    int64_t per = piece_rows(&s, TR, w, bound);
    for (int64_t a = ra, b; a < rb && rc == MP_OK; a = b) {
        b = (a / per + 1) * per < rb ? (a / per + 1) * per : rb;
        piece *q = pipe_slot(pp);
        *q = (piece){.j = j, .a = a, .b = b, .ca = ca, .cb = cb, .bytes = (size_t)((b - a) * w), .g = g, .tr = TR,
                     .tc = TC, .tiles = tiles, .io = io, .is = is};
        if (contig && a >= r0 && b <= r1) {                         /* whole-width rows inside I: straight in */
            assert(ca == 0 && cb == g.cols);
            q->p = pp->buf + (size_t)((B->off[0] + a - qo[0]) * g.row);
        } else {
            q->p = pipe_scratch(pp, q->bytes);
            q->out = 1;
        }
        rc = ck_rd_fetch(r, j, &s, a, b, ca, cb, q->p, e);
        if (rc == MP_OK) rc = pipe_push(pp, more || b < rb);
    }
    ck_rd_src_close(&s);
    return rc;
}

int64_t ckpt_box_read_cost(const ckpt_reader *r, int j, const int64_t *offset, const int64_t *shape) {
    assert(j >= 0 && j < r->L.nboxes);
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int nd = T->ndim;
    int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
    if (!ck_intersect(nd, offset, shape, B->off, B->shp, io, is)) return 0;
    geom g = ck_rd_box_geom(&r->L, B);
    /* read_part's decision: a whole saved box whose rows are whole rows of the request is one read */
    int contig = 1;
    for (int d = 1; d < nd; d++) contig = contig && is[d] == B->shp[d] && is[d] == shape[d];
    int64_t r0 = io[0] - B->off[0], r1 = r0 + is[0];
    if (contig && r0 == 0 && r1 == g.rows) return g.rows * g.row;
    mp_err fe;
    if (ck_rd_file_table((ckpt_reader *)r, B->file, &fe) != MP_OK) {   /* v3: tile fields unknown; the read reports it */
        ck_h5_clear();
        return g.rows * g.row;
    }
    int64_t c0 = nd >= 2 ? io[1] - B->off[1] : 0, c1 = nd >= 2 ? c0 + is[1] : 1;
    int64_t TR = B->tile_rows, TC = B->tile_cols;
    int64_t a = r0 / TR * TR, b = (r1 + TR - 1) / TR * TR, ca = c0 / TC * TC, cb = (c1 + TC - 1) / TC * TC;
    if (b > g.rows) b = g.rows;
    if (cb > g.cols) cb = g.cols;
    int64_t tiles = r->L.version >= 2 && !(r->tiles && r->tiles[j]) ? 8 * B->ntiles : 0;
    return (b - a) * (cb - ca) * g.unit + tiles;
}

void ckpt_prefetch(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape) {
    ck_h5_init();
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return;
    const ck_tensor *T = &r->L.t[t];
    int nd = T->ndim;
    for (int d = 0; d < nd; d++)
        if (offset[d] < 0 || shape[d] <= 0 || offset[d] > T->shape[d] - shape[d]) return;
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
        const ck_box *B = &r->L.b[j];
        int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
        if (!ck_intersect(nd, offset, shape, B->off, B->shp, io, is)) continue;
        int whole_width = 1;   /* only whole rows: a column block's bytes are strided, and a hint for
                                  the gaps between them would read what ckpt_read never counts */
        for (int d = 1; d < nd; d++) whole_width = whole_width && is[d] == B->shp[d];
        if (!whole_width) continue;
        src_t s;
        mp_err e;
        if (ck_rd_open_box(r, j, &s, &e) != MP_OK) {
            ck_h5_clear();
            continue;   /* the read itself reports it */
        }
        if (s.fd >= 0) {
            geom g = ck_rd_box_geom(&r->L, B);
            int64_t a = (io[0] - B->off[0]) / B->tile_rows * B->tile_rows;
            int64_t b = io[0] - B->off[0] + is[0];
            posix_fadvise(s.fd, (off_t)(s.base + a * g.row), (off_t)((b - a) * g.row), POSIX_FADV_WILLNEED);
        }
        ck_rd_src_close(&s);
    }
}

mp_code ckpt_read(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape, void *buf,
                  mp_err *e) {
    assert(r && name && offset && shape && buf);
    ck_h5_init();
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return mp_err_set(e, MP_EINPUT, "tensor %s is not in checkpoint %s", name, r->dir);
    const ck_tensor *T = &r->L.t[t];
    int nd = T->ndim;
    int64_t zero[CKPT_MAX_DIMS] = {0};
    char qstr[256], tstr[256];
    ck_box_str(qstr, sizeof qstr, nd, offset, shape);
    for (int d = 0; d < nd; d++)
        if (offset[d] < 0 || shape[d] <= 0 || offset[d] > T->shape[d] - shape[d]) {
            ck_box_str(tstr, sizeof tstr, nd, zero, T->shape);
            return mp_err_set(e, MP_EINPUT, "tensor %s: requested box %s is empty or outside the tensor %s", name, qstr,
                              tstr);
        }
    int64_t want = ck_volume(nd, shape);
    r->bytes_needed += want * (int64_t)mp_dtype_size(T->dtype);
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    int n = 0;
    int64_t *hit = mp_xmalloc(sizeof(int64_t) * (size_t)(hi - lo + 1));
    int64_t (*io)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *io * (size_t)(hi - lo + 1));
    int64_t (*is)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *is * (size_t)(hi - lo + 1));
    int64_t covered = 0;
    for (int64_t j = lo; j < hi; j++)
        if (ck_intersect(nd, offset, shape, r->L.b[j].off, r->L.b[j].shp, io[n], is[n])) {
            covered += ck_volume(nd, is[n]);
            hit[n++] = j;
        }
    mp_code rc = MP_OK;
    if (covered != want) {
        int64_t mo[CKPT_MAX_DIMS], ms[CKPT_MAX_DIMS];
        char reg[256] = "?";
        if (ck_find_gap(nd, offset, shape, n, (const int64_t(*)[CKPT_MAX_DIMS])io, (const int64_t(*)[CKPT_MAX_DIMS])is,
                        mo, ms))
            ck_box_str(reg, sizeof reg, nd, mo, ms);
        rc = mp_err_set(e, MP_ECHECK,
                        "tensor %s: region %s of the requested box %s is in no saved box of checkpoint %s (%lld of %lld "
                        "elements found)",
                        name, reg, qstr, r->dir, (long long)covered, (long long)want);
    }
    pipe_t pp;
    pipe_begin(&pp, r, offset, shape, buf, e);
    for (int k = 0; k < n && rc == MP_OK; k++) rc = read_part(&pp, hit[k], io[k], is[k], k + 1 < n);
    rc = pipe_end(&pp, rc);
    if (rc == MP_OK && r->progress) {
        r->progress_read += want * (int64_t)mp_dtype_size(T->dtype);
        r->progress(r->progress_ctx, r->progress_read, 0);
    }
    free(hit);
    free(io);
    free(is);
    return rc;
}
