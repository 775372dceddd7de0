/*
 * ckpt/writer_hash.c — the checksums of a box as it is written (format v2 and later, docs/FORMAT.md):
 * each box is cut into tiles by ckpt_tile_geometry (bands of tile_rows rows x blocks of tile_cols
 * entries of dim 1); one pass over the bytes, in dim-0 rows as the writer produces them (a pointer box
 * at once, a fill box band by band, on whichever thread: ckpt/writer_files.c), feeds an XXH3 streaming
 * state per column block (digested at every tile-row boundary) and one for the whole box. Memory only:
 * no HDF5, no MPI. The bytes hashed are the host's: the format is little-endian (writer_files.c checks).
 */
#include "ckpt/writer_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>


static XXH3_state_t *new_state(void) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) mp_oom(0, MP_MEM_CKPT, "a checksum state");
    XXH3_64bits_reset(st);
    return st;
}

int64_t ckpt_save_hash_bytes(int64_t box_bytes) {
    /* ckpt_tile_geometry: every tile of a 2-D box but those of its last tile row (at most 8 column
     * blocks) holds at least CK_TILE_BYTES; 1-D boxes (norm weights, up to 1 MiB here) have tiles of
     * CK_TILE_MIN_SEG bytes */
    int64_t tiles = box_bytes / CK_TILE_BYTES + 8 + ((int64_t)1 << 20) / CK_TILE_MIN_SEG;
    return 2 * tiles * (int64_t)sizeof(uint64_t);
}

/* Prepares h for box B (its tile geometry set). */
void ck_hasher_init(ck_hasher *h, const wbox *B) {
    memset(h, 0, sizeof *h);
    int64_t es = (int64_t)mp_dtype_size(B->dt);
    int64_t cols = B->ndim >= 2 ? B->shp[1] : 1;
    int64_t inner = ck_volume(B->ndim, B->shp) / (B->shp[0] * cols);
    h->rows = B->shp[0];
    h->row_bytes = cols * inner * es;
    h->seg_bytes = B->tile_cols * inner * es;
    h->tile_rows = B->tile_rows;
    h->ncb = (cols + B->tile_cols - 1) / B->tile_cols;
    h->ntiles = B->ntiles;
    assert(h->ntiles == ((h->rows + h->tile_rows - 1) / h->tile_rows) * h->ncb);
    h->tiles = mp_xmalloc(sizeof(uint64_t) * (size_t)h->ntiles);
    h->box = new_state();
    h->col = mp_xmalloc(sizeof *h->col * (size_t)h->ncb);
    for (int64_t j = 0; j < h->ncb; j++) h->col[j] = new_state();
}

/* Digests the column states into the tiles of tile row i and resets them. */
static void hasher_end_tile_row(ck_hasher *h, int64_t i) {
    for (int64_t j = 0; j < h->ncb; j++) {
        h->tiles[i * h->ncb + j] = XXH3_64bits_digest(h->col[j]);
        XXH3_64bits_reset(h->col[j]);
    }
}

/* Feeds the next nrows rows (row-major, nrows * row_bytes bytes at p). */
void ck_hasher_feed(ck_hasher *h, const char *p, int64_t nrows) {
    assert(h->done + nrows <= h->rows);
    while (nrows > 0) {
        int64_t i = h->done / h->tile_rows;
        int64_t left = (i + 1) * h->tile_rows - h->done;   /* rows until the tile row ends */
        int64_t n = nrows < left ? nrows : left;
        if (h->ncb == 1) {
            /* the tile's rows are contiguous: one update for the whole run */
            size_t len = (size_t)(n * h->row_bytes);
            XXH3_64bits_update(h->col[0], p, len);
            XXH3_64bits_update(h->box, p, len);
            p += len;
        } else {
            for (int64_t r = 0; r < n; r++) {
                /* the row once for the box (while it is in cache), then segment by segment */
                if (h->row_bytes <= (256 << 10)) XXH3_64bits_update(h->box, p, (size_t)h->row_bytes);
                for (int64_t j = 0; j < h->ncb; j++) {
                    int64_t a = j * h->seg_bytes;
                    int64_t len = j < h->ncb - 1 ? h->seg_bytes : h->row_bytes - a;
                    XXH3_64bits_update(h->col[j], p + a, (size_t)len);
                    if (h->row_bytes > (256 << 10)) XXH3_64bits_update(h->box, p + a, (size_t)len);
                }
                p += h->row_bytes;
            }
        }
        h->done += n;
        nrows -= n;
        if (h->done % h->tile_rows == 0 || h->done == h->rows) hasher_end_tile_row(h, i);
    }
}

/* Sets B's checksum and tiles_checksum; the tile array stays in h->tiles. All rows must be fed. */
void ck_hasher_finish(ck_hasher *h, wbox *B) {
    assert(h->done == h->rows);
    B->checksum = XXH3_64bits_digest(h->box);
    B->tiles_checksum = XXH3_64bits(h->tiles, sizeof(uint64_t) * (size_t)h->ntiles);
}

void ck_hasher_free(ck_hasher *h) {
    if (h->col)
        for (int64_t j = 0; j < h->ncb; j++) XXH3_freeState(h->col[j]);
    free(h->col);
    if (h->box) XXH3_freeState(h->box);
    free(h->tiles);
    memset(h, 0, sizeof *h);
}
