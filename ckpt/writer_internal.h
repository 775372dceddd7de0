/*
 * ckpt/writer_internal.h — what the files of the checkpoint writer share, and nothing else includes
 * (tests/python/code_shape.py checks it): a save (struct ckpt_save), its box records and the functions
 * one concern offers another. The writer by concern:
 *   ckpt/writer.c         a save's life and its public API: begin (the .partial directory), the
 *                         collective commit (agree, exchange, rank 0's commit, agree), commit / free;
 *   ckpt/writer_boxes.c   planning: adding boxes and metadata (the box map), the accessors of
 *                         ckpt_internal.h (ckpt/files.c, ckpt/group.c);
 *   ckpt/writer_files.c   writing this process's rank files: the fill-band pipeline, the datasets
 *                         and the /boxes table;
 *   ckpt/writer_hash.c    the checksums of a box (whole box and tiles), fed as it is written;
 *   ckpt/writer_commit.c  the layout exchange (every box list to rank 0) and rank 0's commit (layout,
 *                         index.h5, rename, latest, retention);
 *   ckpt/writer_async.c   the asynchronous save: its writer thread, poll / wait, and the process's
 *                         one in-flight save.
 * A save's errors are kept per stage (ck_stage): one rule, the first error of a stage wins.
 */
#ifndef CKPT_WRITER_INTERNAL_H
#define CKPT_WRITER_INTERNAL_H

#include "ckpt/ckpt_internal.h"
#include <pthread.h>
#include <stdatomic.h>
#include <xxhash.h>

/* A box of a save: what ckpt_save_add / ckpt_save_add_fill recorded, then its checksums once written.
 * On rank 0 the exchange makes one per box of every process (data and fill unset, sender set). */
typedef struct wbox {
    char *name;
    mp_dtype dt;
    int ndim;
    int rank;                       /* file rank: the box goes to rank_%05d.h5 of this rank */
    int sender;                     /* the process that writes it (set on rank 0 by the exchange) */
    int64_t gshape[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    const void *data;               /* pointer box; NULL for a fill box */
    ckpt_fill_fn fill;              /* fill box: producer and its context */
    void *ctx;
    int k;                          /* its datasets: /<name>/box_<k>, /<name>/tiles_<k> (wbox_path) */
    int next_fill;                  /* fill box: the fill box written after it in its file, or -1 (set by
                                       link_fill_boxes when fills run on the worker) */
    uint64_t checksum;
    int64_t tile_rows, tile_cols, ntiles;
    uint64_t tiles_checksum;
} wbox;

/* The result of one stage of a save: MP_OK, or its first error (code and message). */
typedef struct ck_stage {
    mp_code rc;
    mp_err err;
} ck_stage;
/* The one rule of a stage: records rc, with e's message (rc's name when e is NULL), unless the stage
 * already failed: the first error wins. MP_OK records nothing. Returns rc. (ckpt/writer.c) */
mp_code ck_stage_set(ck_stage *st, mp_code rc, const mp_err *e);

enum { ST_OPEN = 0, ST_STARTED, ST_DONE };

struct ckpt_save {
    mp_comm *world;
    int rank, size;
    int wsize;                      /* recorded world size: opts.world_size, else size */
    int dir_mode, replace;          /* ckpt_save_begin_dir */
    char *root;                     /* step mode: ROOT; dir mode: the parent of DIR (fsynced) */
    char *dirname, *final, *partial;
    char *where;                    /* "in ROOT" / "to DIR", for messages */
    int64_t step;
    ckpt_save_opts o;
    wbox *b;
    int nb, capb;
    int *by_name, *by_file;         /* open-addressing hash sets of box indices (-1 empty), capacity capm:
                                       a box per tensor name / per (name, file rank); see box_map */
    int *in_file;                   /* [capm] boxes of that (name, file rank) so far, beside by_file */
    int capm;
    char **keys, **vals;
    int nmeta;
    int64_t (*fsums)[2];            /* per rank file written here: (file rank, XXH3 of its /boxes table) */
    int nfsums;
    ck_stage local;                 /* this process, caller's thread: add, meta, the rank files (a
                                       synchronous write, or the writer thread's once joined) */
    int state;
    pthread_t th;
    int thread_live;
    atomic_int written;             /* the rank files are written (or failed) */
    ck_stage thread;                /* the asynchronous writer thread's write (ckpt/writer_async.c) */
    ckpt_stats st;
    int64_t progress_total;         /* tensor bytes of this process's boxes, for opts.progress */
    ck_stage result;                /* the save's agreed result, once ST_DONE */
};

/* ckpt/writer.c: the collective commit, on every rank once its rank files are written or failed: the
 * agreement, the exchange, rank 0's commit, the agreement on its result. Sets s->result and ST_DONE. */
mp_code ck_wr_commit(ckpt_save *s, mp_err *e);

/* ckpt/writer_boxes.c: frees box records (names; never the data or fill contexts, which the caller
 * owns); frees the box map of s. */
void ck_wr_free_boxes(wbox *b, int n);
void ck_wr_map_free(ckpt_save *s);
/* ckpt/writer_boxes.c: box B as a box record (ckpt/boxrec.c; its name points to B's); and back, the
 * record's fields into B (not its name, data, fill or sender). */
void ck_wr_box_rec(const wbox *B, ck_boxrec *r);
void ck_wr_rec_box(const ck_boxrec *r, wbox *B);

/* Streaming hasher of one box: fed consecutive rows of dim 0 (in any grouping), it computes the
 * whole-box checksum and the tile checksums of ckpt_tile_geometry. */
typedef struct {
    int64_t rows, done;             /* box rows, rows fed so far */
    int64_t row_bytes, seg_bytes;   /* a row; a full column block's segment of a row */
    int64_t tile_rows, ncb;         /* rows per tile, column blocks */
    XXH3_state_t *box, **col;       /* whole box; one per column block */
    uint64_t *tiles;                /* [ntiles] */
    int64_t ntiles;
} ck_hasher;
/* ckpt/writer_hash.c: prepares h for box B (its tile geometry set); feeds the next nrows rows (row-major,
 * nrows whole rows at p); sets B's checksum and tiles_checksum once all rows are fed (the tile array stays
 * in h->tiles); frees h. */
void ck_hasher_init(ck_hasher *h, const wbox *B);
void ck_hasher_feed(ck_hasher *h, const char *p, int64_t nrows);
void ck_hasher_finish(ck_hasher *h, wbox *B);
void ck_hasher_free(ck_hasher *h);

/* ckpt/writer_files.c: writes, closes and fsyncs this process's rank files (any thread); numbers the
 * datasets of each tensor in each file by offset (the k of box_<k>, as a v3 reader derives it). */
mp_code ck_wr_write_rank_files(ckpt_save *s, mp_err *e);
void ck_wr_number_boxes(ckpt_save *s);

/* ckpt/writer_commit.c: every process's box list to rank 0 (collective); rank 0's part of the commit
 * after the exchange (see there). */
void ck_wr_exchange(ckpt_save *s, wbox **all, int *nall, uint64_t *fsum, int *bad_rank, int *bad_world);
mp_code ck_wr_commit_rank0(ckpt_save *s, wbox *all, int nall, const uint64_t *fsum, mp_err *e);

/* ckpt/writer_async.c: the process's started, uncommitted asynchronous save (NULL: none); sets it to s
 * when expect is NULL or is the one in flight (a commit or free clears its own); joins s's writer
 * thread (if any) and takes its result into s->local. */
ckpt_save *ck_wr_inflight_get(void);
void ck_wr_inflight_set(ckpt_save *s, ckpt_save *expect);
void ck_wr_join(ckpt_save *s);

#endif
