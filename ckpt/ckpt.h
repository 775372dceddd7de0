/*
 * ckpt/ckpt.h — sharded checkpoints of named global tensors in HDF5 (format v3, or v4 on the caller's
 * request, docs/FORMAT.md; version 1 and 2 checkpoints stay readable).
 *
 * The library knows nothing of models. A checkpoint stores named global tensors (dtype, 1..4 dims,
 * global shape); each tensor is written as boxes (global offset + shape) of local host data, every
 * element by exactly one rank. Next to the tensors it stores text metadata (key -> JSON/text value).
 *
 *   ROOT/step_%08d/index.h5        layout tables (runs of boxes), metadata, a link to the views; last, rank 0
 *   ROOT/step_%08d/view.h5         the virtual views (derived data, for other tools), just before index.h5
 *                                  (opts.view_background: after the commit, on a background thread)
 *   ROOT/step_%08d/rank_%05d.h5    one per rank that wrote boxes: one dataset per box (or one per
 *                                  node / group of ranks, written by its leader: opts.ranks_per_file)
 *   ROOT/latest                    text: the newest step directory name, replaced by rename
 *
 * Writing (collective over a world communicator whose ops take HOST buffers: mp_comm_self or the
 * MPI communicator; in a CUDA run pass the MPI world, not an NCCL group):
 *   ckpt_save_begin   every rank; rank 0 creates ROOT/step_N.partial/
 *   ckpt_save_add     local; records a box (no copy: data must stay valid until the save is committed)
 *   ckpt_save_meta    local; rank 0's values are the ones stored
 *   ckpt_save_commit  every rank; writes this rank's file, fsyncs, agrees on failure, rank 0 checks
 *                     that the boxes cover every tensor exactly once, writes index.h5, renames the
 *                     directory to step_N, replaces `latest`, applies retention
 * or, asynchronously: ckpt_save_start (a background thread writes the rank file), then ckpt_save_poll
 * once per training step on every rank (an all_reduce of a done flag; commits on the caller's thread
 * once every rank's file is written) or ckpt_save_wait. A new ckpt_save_begin first waits for a save
 * still in flight. Errors on any rank fail the save on every rank, with the same message, and remove
 * the .partial directory; earlier checkpoints are never touched.
 *
 * Reading (local, any number of processes): ckpt_open a step directory (or ckpt_open_latest ROOT),
 * list tensors and metadata, and ckpt_read ANY box of a tensor into a caller buffer: the saved boxes
 * that intersect it are found through a per-tensor interval index over dim 0, only the checksum tiles
 * (a few KiB each, cut along dims 0 and 1) that the request meets are read, checksums are verified, and coverage is checked (every requested element found
 * exactly once, else an error naming the tensor and a missing region). Never zeros, never a partial
 * load. The virtual datasets under view/ are for other tools only; this reader never reads them.
 *
 * Management (local, one rank): ckpt_find_latest, ckpt_cleanup_partials, ckpt_retain, ckpt_list,
 * ckpt_inspect_root, the job lock (ckpt_lock_*), ckpt_set_aside.
 *
 * Failure injection for crash tests: MP_FAULT=ckpt_crash_at:<point> makes the process raise(SIGKILL)
 * at that point of a save (only on rank R with ckpt_crash_rank:R added; core/fault.h): begin, during_rank_files
 * (after the first box is written), after_rank_files (every file written and fsynced, before the
 * collective commit), before_index, after_index (index fsynced, before the rename), after_rename
 * (before `latest` is replaced), after_latest (before retention), during_view (opts.view_background:
 * rank 0's background thread, view.h5.tmp.<pid> written, before its rename to view.h5). With files of several ranks
 * (opts.ranks_per_file) a member's during_rank_files is after its first box is sent to its leader, and
 * MP_FAULT=ckpt_fail_at:group_list (a member fails before sending), group_send (a member fails mid-transfer)
 * or group_write (the leader fails writing a member's band), only on rank R with ckpt_fail_rank:R added, makes that rank fail with an error (no kill);
 * MP_FAULT=ckpt_fail_at:view_write makes rank 0's background view write (opts.view_background) fail.
 */
#ifndef CKPT_CKPT_H
#define CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include "core/comm.h"
#include "core/error.h"
#include "core/tensor.h"

#define CKPT_FORMAT_NAME "meshpoint-checkpoint"
#define CKPT_FORMAT_VERSION 3          /* written by default (ckpt_save_opts.format_version 0) */
#define CKPT_FORMAT_VERSION_MAX 4      /* the newest version written and read; readers accept 1..4 (docs/FORMAT.md) */
#define CKPT_MAX_DIMS 4
#define CKPT_NAME_MAX 255      /* longest tensor name, bytes */
#define CKPT_KEY_MAX 64        /* longest metadata key, bytes */
#define CKPT_FILES_NODE (-1)   /* ckpt_save_opts.ranks_per_file: one file per node */
/* ckpt_save_opts.fill_bytes when 0: the bound of each of the writer's two fill band buffers (a band is
 * at least one tile row: more only for rows of over 16 MiB). */
#define CKPT_FILL_BYTES_DEFAULT ((size_t)16 << 20)
/* The bytes a save holds while hashing boxes of at most box_bytes each (their tile checksum arrays,
 * about 8 bytes per CK_TILE_BYTES, two boxes at once at most), for memory plans (cli/memplan.c). */
int64_t ckpt_save_hash_bytes(int64_t box_bytes);

/* ---------------------------------------------------------------------------------------- writing */

/* Progress of a long operation, for a progress display: `done` of `total` bytes so far (total 0: not
 * known). Called on the thread doing the work, after each box (writes, verify) or read (ckpt_read);
 * it must be cheap and must not call back into the library. */
typedef void (*ckpt_progress_fn)(void *ctx, int64_t done, int64_t total);

typedef struct ckpt_save_opts {
    int zstd_level;          /* 0: plain contiguous datasets; 1..22: chunked, shuffle + zstd (32015) */
    int keep;                /* > 0: after the commit rank 0 keeps only the newest `keep` checkpoints */
    int unchecked_coverage;  /* tests only: skip the commit-time exact-cover check, so that a layout
                                with gaps or overlaps reaches disk and the reader's checks can be
                                exercised. Never set in real saves. */
    int world_size;          /* > 0: the world size recorded in the index and rank files, for offline
                                writers that write the files of another job's ranks (ckpt_save_add_fill
                                with file_rank < world_size). 0: the communicator's size. */
    size_t fill_bytes;       /* buffer bound for boxes added with ckpt_save_add_fill: each box is
                                produced and written in row bands of at most this many bytes (at least
                                one tile row), through two buffers of that size (band k is hashed on
                                a helper thread while band k+1 is produced; MP_FAULT=ckpt_serial_fill: one
                                buffer, no overlap, the same bytes). 0: 16 MiB. */
    int fill_any_thread;     /* 1: the fill callbacks may run on a helper thread, one at a time, while
                                this thread makes HDF5 calls (they may call HDF5 themselves): band k+1
                                is then produced on the helper while band k is written. Used only when
                                the HDF5 library is thread-safe (H5is_library_threadsafe; Debian's is);
                                else, and with 0, fills run on the caller's thread. */
    int ranks_per_file;      /* which ranks share a rank file (the same on every rank; ckpt/group.c):
                                0 or 1: each rank writes its own (rank_%05d.h5 of its rank);
                                CKPT_FILES_NODE: one file per node, written by the node's lowest rank;
                                G > 1: groups of G consecutive ranks of a node (by world rank), each
                                written by its lowest rank. A member sends its boxes to its leader,
                                band by band (opts.fill_bytes), which writes them into its own file
                                (docs/FORMAT.md "Files of several ranks"). Synchronous saves only
                                (ckpt_save_commit; ckpt_save_start refuses it in a world of > 1 rank);
                                ckpt_save_add boxes only. Needs a world with point-to-point ops (MPI). */
    ckpt_progress_fn progress;  /* optional: called after each box this process writes, with the tensor
                                   bytes written so far and the total of its boxes (on the writer's
                                   thread: the background thread of an async save) */
    void *progress_ctx;         /* passed to progress */
    int view_background;        /* 1: rank 0's commit publishes the checkpoint (index.h5, rename, latest,
                                   retention) without view.h5, then writes view.h5 on a background thread
                                   (view.h5.tmp.<pid>, fsync, rename); every later HDF5 use of the process
                                   waits for it (ckpt_views_wait). 0: view.h5 before index.h5. */
    int format_version;         /* the format_version written: 0 (CKPT_FORMAT_VERSION, 3) or 3..CKPT_FORMAT_VERSION_MAX.
                                   Version 4 has version 3's layout; only the number differs, so that
                                   readers that know 3 at most refuse the checkpoint. The library gives it
                                   no other meaning: its callers write 4 for a training checkpoint of a
                                   model family other than Llama (cli/train_ckpt.h). */
} ckpt_save_opts;

/* Parses a --ckpt-files value into *ranks_per_file: "rank" (1), "node" (CKPT_FILES_NODE) or a group size
 * N in 1..65536 (1 = "rank"). MP_EINPUT naming the value otherwise. */
mp_code ckpt_files_parse(const char *s, int *ranks_per_file, mp_err *e);

/* Whether saves with ranks_per_file in a world of world_size ranks write files of several ranks (a
 * leader then writes its members' boxes through the two fill band buffers, opts.fill_bytes each). */
int ckpt_files_grouped(int ranks_per_file, int world_size);

typedef struct ckpt_stats {
    double stall_s;      /* time the caller's thread spent inside the library for this save */
    double wait_prev_s;  /* part of stall_s spent waiting for the previous save (async writes, view.h5) */
    double write_s;      /* writing + fsyncing this rank's file (on the background thread if async) */
    double commit_s;     /* the collective commit: agreement, layout exchange, index, rename */
    int64_t bytes;       /* tensor bytes this rank wrote (uncompressed) */
    int64_t file_bytes;  /* size on disk of the rank files this process wrote (0 if none) */
} ckpt_stats;

typedef struct ckpt_save ckpt_save;

/* Begins a save that commits to exactly the directory dir (not ROOT/step_N): written into
 * dir.partial (a stale one from an interrupted run is removed), renamed to dir at the commit; no
 * `latest`, no retention. If dir exists: without replace the call fails (MP_EINPUT) on every rank;
 * with replace the old directory stays untouched until the final rename, which swaps the two
 * atomically (renameat2 RENAME_EXCHANGE, else two renames), and is removed after it. Collective,
 * like ckpt_save_begin. Used by offline tools (reshard, init). */
mp_code ckpt_save_begin_dir(ckpt_save **out, mp_comm *world, const char *dir, int64_t step,
                            const ckpt_save_opts *opts, int replace, mp_err *e);

/* Begins a save of step `step` (>= 0) into root (created if missing). Collective: every rank of
 * world calls it; rank 0 creates ROOT/step_%08d.partial (replacing a stale one) and the call fails on
 * every rank if that fails or if ROOT/step_%08d already exists. Waits first for an async save still
 * in flight in this process (its own result stays with its handle). opts may be NULL (defaults).
 * On success *out is a new save; world must outlive it. */
mp_code ckpt_save_begin(ckpt_save **out, mp_comm *world, const char *root, int64_t step,
                        const ckpt_save_opts *opts, mp_err *e);

/* Records one box of tensor `name`: ndim dims (1..4), global shape gshape, the box at offset with
 * shape (all > 0 elements, inside gshape), row-major data of dtype dt (f32, bf16 or i32). The data is
 * not copied: it must stay valid and unchanged until the save is committed (commit returned, or
 * poll/wait reported completion). Names: see docs/FORMAT.md (printable ASCII, '/'-separated
 * components, none empty, "." or ".."). Local. An error is also remembered: the commit then fails on
 * every rank. */
mp_code ckpt_save_add(ckpt_save *s, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                      const int64_t *offset, const int64_t *shape, const void *data, mp_err *e);

/* Produces the sub-box (offset, shape) (global coordinates, inside the box being written; always
 * whole rows of dims 1.. of the box, i.e. a band of dim-0 rows) into buf, row-major. */
typedef mp_code (*ckpt_fill_fn)(void *ctx, const int64_t *offset, const int64_t *shape, void *buf, mp_err *e);

/* Like ckpt_save_add, but the data is produced on demand while the file is written: the writer calls
 * fill for consecutive row bands of at most opts.fill_bytes, in order, on the caller's thread, and
 * writes each band before asking for the next (its hashing may overlap the next fill, into another
 * buffer), so memory stays bounded whatever the box size. The box goes to the rank file
 * of file_rank (0 <= file_rank < world size, see opts.world_size): one process may write the files
 * of several ranks (offline resharding), each file written once all its boxes are added. Boxes of a
 * file are written in the order added. ctx must stay valid until the commit. Synchronous saves only
 * (ckpt_save_commit). Local; errors are remembered as for ckpt_save_add. */
mp_code ckpt_save_add_fill(ckpt_save *s, int file_rank, const char *name, mp_dtype dt, int ndim,
                           const int64_t *gshape, const int64_t *offset, const int64_t *shape, ckpt_fill_fn fill,
                           void *ctx, mp_err *e);

/* Records a failure the caller found while preparing the save (rc != MP_OK, e its message, may be NULL):
 * the commit then fails on every rank, nothing is published and the .partial is removed, as for a
 * failed ckpt_save_add. Local; before the commit or start. */
void ckpt_save_fail(ckpt_save *s, mp_code rc, const mp_err *e);

/* Sets metadata key (1..64 chars of [A-Za-z0-9_.-]) to a text value (copied; a later call for the
 * same key replaces it). Local; only rank 0's entries are stored. */
mp_code ckpt_save_meta(ckpt_save *s, const char *key, const char *value, mp_err *e);

/* Writes this rank's file on the calling thread and commits (see the top of this file). Collective.
 * st (may be NULL) receives this rank's timings. The save is finished afterwards, successful or not:
 * free it with ckpt_save_free. */
mp_code ckpt_save_commit(ckpt_save *s, ckpt_stats *st, mp_err *e);

/* Starts writing this rank's file on a background thread and returns. Local. After it, the boxes'
 * data must stay valid until poll or wait reports completion. MP_EINPUT for a save with fill boxes
 * or boxes of another rank's file (synchronous saves only; the save then fails on every rank). */
mp_code ckpt_save_start(ckpt_save *s, mp_err *e);

/* Collective (every rank, the same number of times): an all_reduce of "my file is written"; once
 * every rank's file is written it runs the commit on this thread and sets *done = 1 (and *st).
 * Returns the commit's result once done (an error if the save failed on any rank), MP_OK with
 * *done = 0 while writing goes on. Calls after completion return the same result without
 * communicating. */
mp_code ckpt_save_poll(ckpt_save *s, int *done, ckpt_stats *st, mp_err *e);

/* Collective: blocks until the save is committed (or failed) and returns its result. */
mp_code ckpt_save_wait(ckpt_save *s, ckpt_stats *st, mp_err *e);

/* Frees a save. If it was started and not finished, joins the writer thread first (no commit: the
 * .partial directory stays for ckpt_cleanup_partials). Local. NULL is ok. */
void ckpt_save_free(ckpt_save *s);

/* Waits for this process's background view write (opts.view_background), if one is in flight, and
 * returns the result of the last one finished since the previous call (MP_OK if none; its failure was
 * already warned about: the checkpoint is complete, `ckpt repair-views` rewrites view.h5); *write_s
 * (may be NULL) its seconds. e may be NULL. Call before the process exits or releases the job lock. */
mp_code ckpt_views_wait(double *write_s, mp_err *e);

/* The directory the save commits to (ROOT/step_%08d). */
const char *ckpt_save_dir(const ckpt_save *s);

/* ---------------------------------------------------------------------------------------- reading */

typedef struct ckpt_tensor_info {
    const char *name;
    mp_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];   /* unused dims are 1 */
    int box_first, nboxes;          /* its saved boxes: ckpt_box_at(box_first .. box_first+nboxes-1),
                                       sorted by offset[0] */
} ckpt_tensor_info;

typedef struct ckpt_box_info {
    int tensor;                     /* index of its tensor */
    int rank;                       /* the rank that wrote it */
    const char *file;               /* rank file name, relative to the checkpoint directory */
    const char *dataset;            /* dataset path inside the rank file */
    int64_t offset[CKPT_MAX_DIMS];  /* global offset (unused dims 0) */
    int64_t shape[CKPT_MAX_DIMS];   /* box shape (unused dims 1) */
    uint64_t checksum;              /* XXH3-64 of the box's bytes, row-major */
    int64_t tile_rows, tile_cols;   /* checksum tiles: rows of dim 0 x entries of dim 1 (v1: slabs,
                                       tile_cols = the box's dim 1, or 1 for 1-D) */
    int64_t ntiles;
} ckpt_box_info;

typedef struct ckpt_reader ckpt_reader;

/* Opens the checkpoint in directory dir (ROOT/step_N): reads and validates index.h5 (format, version,
 * index checksum, every table, no two boxes of a tensor overlapping). Rank files are opened on first
 * use. Fails (MP_ECHECK) for a directory without a valid index. */
mp_code ckpt_open(ckpt_reader **out, const char *dir, mp_err *e);
/* A region a rank will read (ckpt_open_planned): tensor name, offset and shape in the tensor's dims
 * (unused dims: offset 0, shape 1). */
typedef struct ckpt_region {
    const char *name;
    int64_t offset[CKPT_MAX_DIMS], shape[CKPT_MAX_DIMS];
} ckpt_region;

/* The collective ckpt_open of the loaders on a mesh (ckpt/plan.c): every rank of world (ops on host
 * buffers, as for saves) calls it with the same dir and the regions it will read; rank 0 alone reads
 * and validates index.h5 (as ckpt_open) and sends each rank only its part of the layout: the saved
 * boxes its regions meet, their tensors and files, every requested tensor the checkpoint has, and all
 * metadata. The reader then works as one from ckpt_open for those regions (ckpt_read of anything else
 * fails its coverage check); ckpt_num_tensors counts the tensors of its part. A failure of rank 0
 * (a missing, corrupt or foreign index) is returned on every rank with rank 0's message (prefixed
 * "[rank 0] " when the world has more than one rank). nwant 0: metadata only. */
mp_code ckpt_open_planned(ckpt_reader **out, mp_comm *world, const char *dir, const ckpt_region *want, int nwant,
                          mp_err *e);
/* Index reads of this process since it started: *reads the index.h5 files opened from disk by
 * ckpt_open (and everything built on it), *bytes their sizes. Either may be NULL. For tests and
 * benchmarks that check which ranks read the index. */
void ckpt_index_reads(int64_t *reads, int64_t *bytes);
/* Opens the newest complete checkpoint under root (ckpt_find_latest). */
mp_code ckpt_open_latest(ckpt_reader **out, const char *root, mp_err *e);
void ckpt_close(ckpt_reader *r);

const char *ckpt_reader_dir(const ckpt_reader *r);
int64_t ckpt_reader_step(const ckpt_reader *r);
int ckpt_reader_version(const ckpt_reader *r);
int ckpt_reader_world(const ckpt_reader *r);       /* world size of the saving job */

int ckpt_num_tensors(const ckpt_reader *r);
const ckpt_tensor_info *ckpt_tensor_at(const ckpt_reader *r, int i);
int ckpt_tensor_find(const ckpt_reader *r, const char *name);   /* index, or -1 */
int ckpt_num_boxes(const ckpt_reader *r);
/* Box j. Format v3 keeps a box's checksum and tile fields in its rank file's /boxes table: the first
 * call for a box of a file reads and checks that table; if that fails, those fields read 0 (ckpt_read
 * and ckpt_verify of the box report why). */
const ckpt_box_info *ckpt_box_at(const ckpt_reader *r, int j);

int ckpt_num_meta(const ckpt_reader *r);
const char *ckpt_meta_key(const ckpt_reader *r, int i);
const char *ckpt_meta_value(const ckpt_reader *r, int i);
const char *ckpt_meta_get(const ckpt_reader *r, const char *key);  /* NULL if absent */

/* Indices of the saved boxes of tensor t that intersect the box (offset, shape), in offset[0] order,
 * through the interval index (binary search over dim 0). Writes at most cap of them to out (may be
 * NULL with cap 0) and returns how many there are. */
int ckpt_query(const ckpt_reader *r, int t, const int64_t *offset, const int64_t *shape, int *out,
               int cap);

/* Reads the box (offset, shape) of tensor `name` (ndim of the tensor's) into buf: row-major, the
 * tensor's dtype, numel(shape) elements. Reads only the checksum tiles of the intersecting saved boxes
 * that the request meets (directly into buf where the layout allows; a whole saved box in one read),
 * verifies every byte it uses against the box or tile checksums, and checks that every element is found exactly once. On error buf is unspecified. */
mp_code ckpt_read(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape,
                  void *buf, mp_err *e);

/* The bytes ckpt_read of the box (offset, shape) would fetch from saved box j (0 if they do not meet):
 * the whole box for a whole-box read, else the touched tiles plus the box's tile array unless it is
 * cached. Exact for uncompressed boxes; a compressed box may cost up to a chunk more per edge. For
 * plans (`meshpoint reshard --plan`). */
int64_t ckpt_box_read_cost(const ckpt_reader *r, int j, const int64_t *offset, const int64_t *shape);

/* A hint that the box (offset, shape) of tensor name will be read next: the kernel starts reading the
 * whole-width row ranges of uncompressed saved boxes it meets in the background (posix_fadvise
 * WILLNEED), so that disk reads overlap the caller's work on the previous piece. Reads nothing
 * itself, counts nothing, fails silently (the read reports errors). Partial-width regions get no
 * hint (their bytes are strided). */
void ckpt_prefetch(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape);

/* I/O counters of the reader since open (or the last reset): *bytes_read the bytes fetched from rank
 * files (tensor data, uncompressed, plus tile checksum arrays), *bytes_needed the bytes the
 * ckpt_read calls asked for. Either pointer may be NULL. */
void ckpt_reader_io(const ckpt_reader *r, int64_t *bytes_read, int64_t *bytes_needed);
void ckpt_reader_io_reset(ckpt_reader *r);
/* Bounds the reader's scratch buffer (partial reads go through it) to about `bytes` (default 64 MiB;
 * at least one tile row of the box being read is always allowed). */
void ckpt_reader_set_scratch(ckpt_reader *r, size_t bytes);
/* The bytes a reader holds while reading, besides its tables, under the default scratch bound: the
 * read pipeline's two pieces (CK_PIECE_BYTES each) and the tile checksum cache (an eighth of the
 * scratch, in [1, 32] MiB). For memory plans (cli/memplan.c). */
size_t ckpt_reader_scratch_bytes(void);
/* Receives one problem found in index.h5's views (a line of text naming the tensor and what differs). */
typedef void (*ckpt_view_report_fn)(void *ctx, const char *problem);

/* Checks the /view datasets of the checkpoint in dir against its layout tables (ckpt/views.c): each
 * tensor's view exists with its type and shape, maps every box of the table (rank file, dataset, region)
 * and nothing else; with read_through, the first element of every box read through the view equals the
 * source's. Runs in a child process, so a libhdf5 crash on a damaged view is reported as a problem.
 * report gets each problem, *nproblems their count. A version 3 checkpoint without view.h5 has its views
 * *pending* (ckpt_views_pending): *pending = 1, nothing is checked or reported (0 otherwise). MP_OK when
 * the check ran (with or without problems); MP_ECHECK when the index itself does not read (tables, checksum) — with *nproblems > 0 when
 * libhdf5 crashed reading it (reported as a problem: do not open it in this process) —, MP_EIO/MP_EINTERNAL when
 * the check could not run (MP_EINTERNAL also when the calling process has an HDF5 file open: the child
 * would share it). Local. */
mp_code ckpt_views_check(const char *dir, int read_through, ckpt_view_report_fn report, void *ctx, int *nproblems,
                         int *pending, mp_err *e);

/* Are the views of the checkpoint r opened still to be written: a version 3 checkpoint whose view.h5 is
 * absent (no directory entry of that name)? So between a training save's commit and its background view
 * write, and after a kill or a full disk there. The checkpoint itself is complete and loads as ever;
 * other HDF5 tools lack its /view until training's next start in its root (ckpt_views_heal_start) or
 * `ckpt repair-views` writes view.h5. A view.h5 that exists is never "pending", whatever its state. */
int ckpt_views_pending(const ckpt_reader *r);

/* Rank 0 of a training job that holds root's job lock: writes, on the background view thread
 * (ckpt/view_bg.c), the missing view.h5 of every complete checkpoint under root whose views are pending
 * (never a .partial, a step directory that is a link, or an existing view.h5), logging each; returns at
 * once. As for a save's view write, every later HDF5 use, retention and set-aside of the process wait
 * for it, a failure is a warning naming the checkpoint and repair-views, and ckpt_views_wait collects
 * the result (call it before releasing the lock). */
void ckpt_views_heal_start(const char *root);

/* Rebuilds the views from the checkpoint's own validated tables, atomically, never opening the damaged
 * views: format v3 writes dir/view.h5 afresh (view.h5.tmp.<pid>, fsync, rename, fsync of dir), v2
 * rebuilds dir/index.h5 with its tables, metadata and fresh views (index.h5.tmp.<pid>, same steps); the
 * rank files are not touched. MP_ECHECK when the tables are unreadable (nothing to rebuild from), MP_EINPUT for a
 * version 1 checkpoint (read-only), MP_EIO on a write failure (index.h5 is then unchanged). Local. */
mp_code ckpt_views_repair(const char *dir, mp_err *e);

/* Sets (fn NULL: clears) a progress callback: ckpt_verify calls it after each box it checks (bytes of
 * the boxes checked so far, of the total of all boxes); ckpt_read after each successful read (bytes
 * delivered by ckpt_read since this call, total 0). */
void ckpt_reader_set_progress(ckpt_reader *r, ckpt_progress_fn fn, void *ctx);

/* Checks the whole checkpoint: every tensor covered exactly once, every box read in full and checked
 * against its box checksum, its tile checksums (and the tile array against the index) and its dataset's
 * attributes. Memory stays bounded (one batch of 64 MiB). *bytes_read (may be NULL) gets the bytes
 * read: tensor data plus tile checksum arrays. */
mp_code ckpt_verify(ckpt_reader *r, int64_t *bytes_read, mp_err *e);

/* The checksum tiles (format v2, docs/FORMAT.md "Checksums") of a box of shape shp[nd] with
 * elements of esize bytes: bands of *tile_rows rows of dim 0 by blocks of *tile_cols entries of dim 1
 * (1 for a 1-D box), about 4 KiB a tile, column blocks on the boundaries of TP degrees 2, 4 and 8. The
 * writer's rule, for tools and benchmarks that reproduce its hashing. */
void ckpt_tile_geometry(size_t esize, int nd, const int64_t *shp, int64_t *tile_rows, int64_t *tile_cols);

/* ------------------------------------------------------------------------------------- management */

/* Is dir a complete checkpoint: a valid index.h5 and every rank file it names present? MP_OK if so,
 * MP_ECHECK with the reason if not. */
mp_code ckpt_check_complete(const char *dir, mp_err *e);

/* The newest complete checkpoint under root: `latest` is trusted when it names a complete checkpoint
 * and no newer step directory exists; otherwise (missing, stale or corrupt `latest`) the step_*
 * directories are scanned newest first and the first complete one wins (a warning is logged). Writes
 * its directory to dir_out (cap bytes) and its step to *step (may be NULL). MP_EINPUT if there is
 * none. */
mp_code ckpt_find_latest(const char *root, char *dir_out, size_t cap, int64_t *step, mp_err *e);
/* The name ROOT/latest holds, trailing newline, CR and spaces trimmed, into buf (cap bytes); "" when the
 * file is missing, unreadable, or longer than cap - 1 bytes. Names only: ckpt_find_latest decides. */
void ckpt_latest_name(const char *root, char *buf, size_t cap);

/* Steps of the complete checkpoints under root, ascending (*steps malloc'd, caller frees; *n may be
 * 0). A missing root is an empty list. */
mp_code ckpt_list(const char *root, int64_t **steps, int *n, mp_err *e);

/* Removes leftover ROOT/step_*.partial directories of interrupted saves, logging each (warning).
 * *removed (may be NULL) gets the count. Call on one rank, when no save is in progress. */
mp_code ckpt_cleanup_partials(const char *root, int *removed, mp_err *e);

/* Keeps the newest `keep` (>= 1) complete checkpoints under root and removes the older step
 * directories (index.h5 first, so a crash mid-removal never leaves a loadable half). Directories newer
 * than the oldest kept one, and the one `latest` names, are never touched. *removed (may be NULL) gets
 * the count. One rank. */
mp_code ckpt_retain(const char *root, int keep, int *removed, mp_err *e);

/* Finishes a retention a crash interrupted: of the step directories ckpt_retain(root, keep) would
 * remove, removes those without an index.h5 (retention removes the index first, so only its own
 * half-done work qualifies; a directory with a damaged index is left for the user). Logs each. One
 * rank, before the run's first save: a run that makes no save (resumed at its last step) still leaves
 * no leftover. */
mp_code ckpt_finish_retention(const char *root, int keep, int *removed, mp_err *e);

/* What a root holds (read only; a missing root holds nothing). */
typedef struct ckpt_root_info {
    int nsteps;             /* step_<digits> directories, complete or not */
    int64_t first, last;    /* their lowest and highest step (-1 when nsteps is 0) */
    int npartial;           /* step_*.partial directories (unfinished saves) */
    int has_latest;         /* ROOT/latest exists */
} ckpt_root_info;
mp_code ckpt_inspect_root(const char *root, ckpt_root_info *info, mp_err *e);

/* The job lock of a root: one job at a time writes checkpoints there. ckpt_lock_acquire creates root
 * (durably) and ROOT/.lock, and takes an exclusive flock on it without waiting; the kernel drops it
 * when the process ends however it ends, so a killed job never leaves a stale lock. MP_EINPUT if
 * another process holds it, naming the holder as it recorded itself ("pid P on host H, started T");
 * MP_EIO if the file cannot be created or locked. ckpt_lock_publish records this process as the holder
 * (call it once the job has decided to use the root: a job refused before that changes nothing).
 * ckpt_lock_release unlocks and frees (NULL is ok); the file stays. One rank (rank 0). */
typedef struct ckpt_lock ckpt_lock;
mp_code ckpt_lock_acquire(const char *root, ckpt_lock **out, mp_err *e);
mp_code ckpt_lock_publish(ckpt_lock *l, mp_err *e);
void ckpt_lock_release(ckpt_lock *l);

/* Moves every step directory under root with a step greater than `after` (complete or not; -1: all)
 * and `latest` into the new directory ROOT/aside (one path component, must not exist), then writes
 * `latest` naming the newest complete checkpoint left (none left: no `latest`). Nothing is deleted:
 * the moved checkpoints stay complete and loadable at ROOT/aside/step_N. Nothing newer than `after`:
 * nothing is done. Every rename is made durable (both directories fsynced) before `latest` is
 * rewritten; interrupted, it leaves some of them moved: run it again. *moved (may be NULL) gets the
 * number of step directories moved. One rank, holding the lock. */
mp_code ckpt_set_aside(const char *root, int64_t after, const char *aside, int *moved, mp_err *e);

/* ---------------------------------------------------------------- carried files (ckpt/files.c)
 * A checkpoint may carry a few whole files beside its tensors: a model's tokenizer files
 * (tokenizer.json, tokenizer_config.json, ...), byte for byte. They live as plain files in DIR/files/
 * and are listed, each with its size and XXH3-64, in metadata CKPT_FILES_META (a JSON object
 * {"name": {"bytes": N, "xxh3": "16 hex digits"}}), so the index checksum covers the list and the list
 * covers the bytes (docs/FORMAT.md, "Carried files"). A checkpoint without the entry carries none.
 * Only the names of ckpt_file_names are carried (a tool writing a carried file beside its own output,
 * such as an HF export's config.json, can never be made to overwrite it), at most CKPT_FILES_MAX_BYTES
 * in all; saving and listing both refuse anything else. */
#define CKPT_FILES_META "files"
#define CKPT_FILES_DIR "files"
#define CKPT_FILE_NAME_MAX 64
#define CKPT_FILES_MAX 7                            /* one of each of ckpt_file_names */
#define CKPT_FILES_MAX_BYTES ((int64_t)512 << 20)   /* all carried files of a checkpoint together */

/* The names a checkpoint may carry, NULL-terminated: the files of an HF model directory that
 * transformers' AutoTokenizer and GenerationConfig read (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, added_tokens.json, chat_template.jinja, tokenizer.model,
 * generation_config.json). */
extern const char *const ckpt_file_names[];
/* MP_OK if name is one of ckpt_file_names, else MP_EINPUT naming it and the allowed names. */
mp_code ckpt_file_name_check(const char *name, mp_err *e);

typedef struct ckpt_file_entry {
    char name[CKPT_FILE_NAME_MAX + 1];
    int64_t bytes;
    uint64_t xxh3;
} ckpt_file_entry;

/* Adds file name (one of ckpt_file_names) of bytes data[0..n) to the save: rank 0 writes
 * DIR.partial/files/<name> durably now (before the index, so a committed checkpoint has it) and lists
 * it in metadata; other ranks only check the name. MP_EINPUT (the save failed) for another name or
 * when the save's carried files would pass CKPT_FILES_MAX_BYTES. Local; before ckpt_save_start/commit;
 * a second call for the same name replaces it. */
mp_code ckpt_save_file(ckpt_save *s, const char *name, const void *data, size_t n, mp_err *e);
/* The files r's checkpoint lists into *out (malloc'd; NULL and 0 when none). A list that does not
 * parse strictly (an object of unique names, each {"bytes": integer in [0, CKPT_FILES_MAX_BYTES],
 * "xxh3": 16 lowercase hex digits}, CKPT_FILES_MAX_BYTES in all) is MP_ECHECK, a name not in
 * ckpt_file_names MP_EINPUT, naming the checkpoint and what is wrong. */
mp_code ckpt_files_list(const ckpt_reader *r, ckpt_file_entry **out, int *n, mp_err *e);
/* Reads carried file name of r into *data (malloc'd, NUL-terminated; *n its bytes), checked against
 * its listed size and XXH3-64: MP_ECHECK naming the file on a mismatch, a missing file or one that is
 * not a regular file (a link is not followed, a FIFO not waited on), MP_EINPUT when the checkpoint
 * lists no such file. Reads at most the listed size. */
mp_code ckpt_file_read(const ckpt_reader *r, const char *name, char **data, size_t *n, mp_err *e);
/* Receives one problem of the carried files (a line naming the checkpoint and file). */
typedef void (*ckpt_file_report_fn)(void *ctx, const char *problem);
/* Checks every listed file (as ckpt_file_read) and that DIR/files, when present, is a directory
 * holding nothing unlisted. Every problem goes to report (may be NULL); MP_ECHECK (or the list's
 * MP_EINPUT) with *e naming the first and the count when there is any. *nfiles (may be NULL) gets the
 * number of listed files. */
mp_code ckpt_files_verify(const ckpt_reader *r, ckpt_file_report_fn report, void *ctx, int *nfiles, mp_err *e);

/* ------------------------------------------------- plan-only commits (bench/bench_scale.c simulates a
 * cluster with them; not for real saves) */
/* This process's box list exactly as the commit's layout exchange sends it (a new buffer of *n bytes,
 * freed with free). Local. */
char *ckpt_save_list(const ckpt_save *s, size_t *n);
/* The bytes ckpt_open_planned sends rank 0 for the regions want[n] (a new buffer of *bytes bytes, freed
 * with free; NULL for a name longer than CKPT_NAME_MAX). Local. */
char *ckpt_region_list(const ckpt_region *want, int n, size_t *bytes);
/* The collective commit of s without writing its rank files (no tensor data: box checksums stay 0): the
 * real agreement, layout exchange, layout build, index write and rename over s's communicator. */
mp_code ckpt_save_commit_plan(ckpt_save *s, mp_err *e);

#endif
