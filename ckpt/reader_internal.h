/*
 * ckpt/reader_internal.h — what the reader's three files share (ckpt/reader.c: opening, the accessors
 * and the rank files; ckpt/reader_box.c: fetching a box's bytes and checking them against its
 * checksums, and ckpt_verify; ckpt/reader_read.c: ckpt_read and its read/verify pipeline).
 * Included by ckpt/reader*.c only: the reader's state is private to them (the design: the top comment
 * of ckpt/reader.c).
 */
#ifndef MP_CKPT_READER_INTERNAL_H
#define MP_CKPT_READER_INTERNAL_H
#include "ckpt/ckpt_internal.h"
#include "ckpt/read_pipe.h"
#include <xxhash.h>

/* Bytes of cached tile checksum arrays: an eighth of the scratch bound (8 MiB at the default 64 MiB),
 * within [1, 32] MiB. Tied to the scratch so that a caller bounding memory (reshard --max-memory)
 * bounds the cache too, and so that the cache stops growing long before a large model's arrays
 * (~0.2% of its bytes) would fill it: memory stays flat however many tensors are read. */
size_t ck_rd_tile_cache_max(const ckpt_reader *r);

#define CK_PIECE_BYTES ((size_t)1 << 20)   /* a read pipeline piece (see Overlap: ckpt/reader_read.c) */

struct ckpt_reader {
    char *dir;
    ck_layout L;
    ckpt_tensor_info *ti;
    ckpt_box_info *bi;
    hid_t *files;         /* [nfiles], -1 until opened */
    int *fds;             /* [nfiles], the sec2 descriptor of files[i] (-1 unknown) */
    char *dsets;          /* the derived dataset paths of bi[] (a layout without a path pool) */
    uint64_t **tiles;     /* [nboxes], cached tile checksums of v2 boxes (NULL: not loaded) */
    unsigned char *ftab;  /* [nfiles], v3: 1 once the file's /boxes table is read and applied */
    int *fbox_first, *fbox;   /* v3: the boxes of each file in layout order (CSR; built on first need) */
    size_t tiles_bytes;   /* bytes held in tiles[] */
    size_t scratch;       /* scratch bound of partial reads and verify batches */
    int64_t bytes_read, bytes_needed;
    ckpt_progress_fn progress;   /* optional (ckpt_reader_set_progress) */
    void *progress_ctx;
    int64_t progress_read;       /* bytes delivered by ckpt_read since the callback was set */
    ck_worker *worker;           /* checks pieces while the next is read (made on first need) */
    XXH3_state_t *box_hs, *tile_hs;   /* ckpt_read's hashing states (made on first need) */
};

/* A dataset of a rank file being read: its HDF5 handles and, when it is contiguous and unfiltered
 * with allocated storage, where its bytes start in the file (then it is read with pread on fd). */
typedef struct {
    hid_t d, ft;
    int fd;          /* >= 0: pread at base + byte offset; -1: H5Dread */
    int64_t base;
    int64_t chunk_rows;   /* chunked datasets: rows of dim 0 per chunk (HDF5 reads whole chunks) */
} src_t;

/* Geometry of box B: cols = entries of dim 1 (1 for 1-D), unit = bytes of one dim-1 entry (all of
 * dims 2..), row = bytes of one dim-0 row. */
typedef struct { int64_t rows, cols, unit, row; } geom;

/* A checksum verdict: bad = 0 (all matched), or the first mismatching region, rows [a, b) x dim-1
 * entries [ca, cb) in box coordinates, with the stored and the computed hash. */
typedef struct {
    int bad;
    int64_t a, b, ca, cb;
    uint64_t want, got;
} verdict;

/* ckpt/reader.c: the open rank file fi and its sec2 descriptor (opened on first use); v3: reads rank
 * file fi's /boxes table into the layout once; frees every cached tile array. */
mp_code ck_rd_rank_file(ckpt_reader *r, int fi, hid_t *out, int *fd, mp_err *e);
mp_code ck_rd_file_table(ckpt_reader *r, int fi, mp_err *e);
void ck_rd_drop_tiles(ckpt_reader *r);

/* ckpt/reader_box.c: box j's dataset opened and checked (ck_rd_open_box), closed (ck_rd_src_close);
 * its geometry; its rows [a, b) x entries [ca, cb) fetched (counted in bytes_read); the checksum error
 * naming a region; its tile checksums (cached); a tile verdict (pure: runs on the worker); a scratch
 * buffer grown. Contracts at their definitions. */
void ck_rd_src_close(src_t *s);
mp_code ck_rd_open_box(ckpt_reader *r, int64_t j, src_t *s, mp_err *e);
geom ck_rd_box_geom(const ck_layout *L, const ck_box *B);
mp_code ck_rd_fetch(ckpt_reader *r, int64_t j, const src_t *s, int64_t a, int64_t b, int64_t ca, int64_t cb, void *dst,
                    mp_err *e);
mp_code ck_rd_checksum_error(ckpt_reader *r, int64_t j, int64_t a, int64_t b, int64_t ca, int64_t cb, uint64_t want,
                             uint64_t got, mp_err *e);
mp_code ck_rd_tiles_of(ckpt_reader *r, int64_t j, const uint64_t **out, mp_err *e);
verdict ck_rd_tiles_verdict(geom g, int64_t tr, int64_t tc, const uint64_t *tiles, const char *p, int64_t a, int64_t b,
                            int64_t ca, int64_t cb, XXH3_state_t *hs);
void ck_rd_scratch_grow(char **p, size_t *cap, size_t n);

#endif
