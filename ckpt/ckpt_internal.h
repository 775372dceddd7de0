/*
 * ckpt/ckpt_internal.h — what the files of ckpt/ share and users do not see:
 *   the in-memory layout of a checkpoint (ck_layout: tensors, boxes, files, slab checksums, metadata),
 *     built by the writer (rank 0) and rebuilt by the reader from index.h5 (ckpt/index.c);
 *   box arithmetic and the per-tensor interval index (ckpt/box.c);
 *   HDF5 glue: per-thread error silencing, HDF5 error stack -> mp_err, dtypes, property lists
 *     (ckpt/h5util.c);
 *   the clock, formatted strings and the crash points of the kill tests (ckpt/util.c); the file-system
 *     steps (fsync, durable rename, removal) are core/fsutil.h's.
 */
#ifndef CKPT_INTERNAL_H
#define CKPT_INTERNAL_H

#include <hdf5.h>
#include <stdint.h>
#include <stddef.h>
#include "ckpt/ckpt.h"

#define CK_FILE_MAX 32                       /* "rank_%05d.h5" and NUL, padded */
#define CK_DSET_MAX (CKPT_NAME_MAX + 33)     /* "/<name>/box_<k>" and NUL */
#define CK_RANK_FORMAT_NAME "meshpoint-checkpoint-rank"
#define CK_BATCH_BYTES ((size_t)64 << 20)    /* read scratch bound */

/* A growing byte buffer (the save's box lists, the collective load's requests and shares, a v1/v2
 * layout's path pool); {0} is empty, p is freed with free(). ck_buf_put appends n bytes of v (checked
 * allocation, counted as MP_MEM_OTHER; ckpt/util.c). */
typedef struct { char *p; size_t n, cap; } ck_buf;
void ck_buf_put(ck_buf *b, const void *v, size_t n);

/* --------------------------------------------------------------------------------------- layout */

typedef struct ck_tensor {
    char name[CKPT_NAME_MAX + 1];
    mp_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t box_first, nboxes;
} ck_tensor;

/* A box of the layout. Its dataset paths are not stored in it (two 289-byte strings per box
 * were most of a 70B / 4,096-rank layout's memory): when the layout has no path pool (L->paths NULL:
 * v3, and every layout the writer builds) they are derived from its tensor's name and k
 * (/<name>/box_<k>, /<name>/tiles_<k>); a v1/v2 layout read from an index keeps the stored paths in
 * its pool (ck_box_path gives either). */
typedef struct ck_box {
    int tensor, file;                 /* indices into the layout's tensors / files */
    int64_t k;                        /* no pool: its datasets are /<name>/box_<k> and /<name>/tiles_<k> */
    int64_t path;                     /* with a pool: L->paths + path is its dataset path, followed after
                                         its NUL by its tiles dataset path ("" in v1) */
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    uint64_t checksum;
    /* v1 only: slab checksums in the index (slabs[slab_first .. +nslabs)), slab_rows rows each */
    int64_t slab_rows, slab_first, nslabs;
    /* v2: checksum tiles (ckpt_tile_geometry); their checksums live in the rank file at its tiles path,
     * and tiles_checksum is XXH3-64 of that uint64 array. For a v1 box the reader sets
     * tile_rows = slab_rows, tile_cols = the box's dim 1 (1 for 1-D), ntiles = nslabs. */
    int64_t tile_rows, tile_cols, ntiles;
    uint64_t tiles_checksum;
} ck_box;

typedef struct ck_file {
    int rank;
    char name[CK_FILE_MAX];
    int64_t nboxes, bytes;
    uint64_t boxes_checksum;          /* v3: XXH3-64 of the rank file's /boxes table (ckpt/boxtab.c) */
} ck_file;

typedef struct ck_layout {
    int version;                      /* format_version read (1 to 4); the writer builds 3 or 4
                                         (ckpt_save_opts.format_version). In a v3 (and v4)
                                         layout the boxes come from the runs (ckpt/runs.c) with their
                                         dataset paths derived, and their checksum and tile fields are 0
                                         until the reader reads their rank file's /boxes table */
    int64_t step;
    int world;                        /* world size of the saving job */
    int zstd_level;                   /* informational: 0 none */
    int ntensors, nboxes, nfiles, nmeta;
    int64_t nslabs;
    ck_tensor *t;                     /* sorted by name */
    ck_box *b;                        /* grouped by tensor (in tensor order), each group by off[0..] */
    ck_file *f;                       /* sorted by rank */
    uint64_t *slabs;                  /* [nslabs] */
    char **keys, **vals;              /* [nmeta], sorted by key */
    char *paths;                      /* v1/v2 read: the boxes' stored dataset paths (ck_box.path); NULL:
                                         derived from k */
    size_t paths_bytes;
    int64_t *pmax_end;                /* [nboxes] per-tensor running max of off[0]+shp[0] (index) */
    char created_utc[32];             /* read from index.h5; the writer uses it when set, else the time now */
} ck_layout;

void ck_layout_free(ck_layout *L);
/* Builds pmax_end (the interval index) of L; boxes must be grouped and sorted as documented. */
void ck_layout_index(ck_layout *L);
/* The dataset path of box B of L (tiles 0) or of its tile checksums (tiles 1): the stored one of a v1/v2
 * box (a pointer into L->paths), else derived into buf (CK_DSET_MAX bytes) and buf returned. */
const char *ck_box_path(const ck_layout *L, const ck_box *B, int tiles, char *buf);
/* XXH3-64 over the canonical content of L (docs/FORMAT.md, "Index checksum"). */
uint64_t ck_layout_hash(const ck_layout *L);
/* Exact-cover check of tensor t: every box inside the shape, no two boxes overlapping, and (if
 * need_full) the volumes summing to the tensor's. MP_ECHECK naming the tensor, the boxes (rank file and
 * dataset) and the region. Needs the tensor's boxes sorted by offset[0] (as ck_layout_index asserts). */
mp_code ck_layout_check_tensor(const ck_layout *L, int t, int need_full, mp_err *e);
#define CK_VIEW_FILE "view.h5"   /* v3: the views, beside index.h5 (which links /view to it) */
/* Writes the view file of L (v3: view.h5; a new file with the /view group of virtual datasets, relative
 * source names) at path and fsyncs it. */
mp_code ck_view_write(const ck_layout *L, const char *path, mp_err *e);
/* Replaces dir/name atomically by a file write(L, tmp) makes: tmp = dir/name.tmp.<pid> (mp_fs_tmp_name;
 * leftovers of interrupted writers, any pid, removed first: mp_fs_remove_tmp_leftovers), written and fsynced, then renamed over dir/name and dir fsynced (ckpt/views.c). The writers of
 * one directory's views (the save's background write, the heal, repair-views in another process) are
 * serialised by a flock on dir, so none removes or renames another's tmp. if_absent: write only when
 * dir/name does not exist once the lock is held (the heal: never replace a file another writer
 * published). *wrote (may be NULL): 1 when the file was written. crash_point (may be NULL): a
 * the fault ckpt_crash_at point between the write and the rename. On failure tmp is removed. */
mp_code ck_views_replace(const ck_layout *L, const char *dir, const char *name,
                         mp_code (*write)(const ck_layout *, const char *, mp_err *), const char *crash_point,
                         int if_absent, int *wrote, mp_err *e);
/* The steps of root's step_<digits> directories, newest first, unvalidated (ckpt_list checks each;
 * ckpt/manage.c). */
mp_code ck_scan_step_dirs(const char *root, int64_t **steps, int *n, mp_err *e);
/* Are dir's views pending: version >= 3 and no dir/view.h5 entry (ckpt_views_pending; ckpt/views.c)? */
int ck_views_pending(const char *dir, int version);
/* ckpt/view_bg.c: writes dir/view.h5 of L (taken: *L is emptied) on a background thread, through
 * ck_views_replace (crash point during_view); a failure is a warning naming dir and repair-views. */
void ck_view_bg_start(ck_layout *L, const char *dir);
/* Blocks until no background view write is in flight (returns at once on the view thread itself).
 * Called by ck_h5_init, so every HDF5 use of the process waits for it, and by retention. */
void ck_view_bg_wait(void);
/* Writes index.h5 for L at path (the .partial directory's), fsyncs it: version L->version (2, 3 or 4). */
mp_code ck_index_write(const ck_layout *L, const char *path, mp_err *e);
/* The newest format_version ck_index_read accepts (ckpt/index.c): CKPT_FORMAT_VERSION_MAX. Tests only
 * lower it (to 3), to read a checkpoint as a build that knows version 3 at most does. */
extern int ck_read_version_max;
/* Reads and validates index.h5 at path into *L. MP_ECHECK for a missing/corrupt/foreign index. */
mp_code ck_index_read(const char *path, ck_layout *L, mp_err *e);
/* ck_index_read, except that a v3 index's runs are validated (ck_runs_check) but not expanded: they are
 * returned in *runs (malloc'd, *nruns, grouped by tensor in tensor order) and L has no boxes (L->b
 * NULL, nboxes 0; the tensors' box_first/nboxes as stored, checked against the runs). A v1/v2 index is
 * read as by ck_index_read (*runs NULL). The collective open's rank 0 plans on the runs (ck_runs_query). */
typedef struct ck_run ck_run;
mp_code ck_index_read_runs(const char *path, ck_layout *L, ck_run **runs, int64_t *nruns, mp_err *e);
/* ck_index_read of the index.h5 bytes image[0, bytes) (HDF5's core driver: no file, no disk I/O);
 * name only names it in messages. check_sum 0 (tests only: tests/fuzz/fuzz_index.c) computes the index
 * checksum but does not compare it, so that crafted tables reach the structural validation. */
mp_code ck_index_read_image(const void *image, size_t bytes, const char *name, int check_sum, ck_layout *L,
                            mp_err *e);

/* ------------------------------------------------------------- format v3: runs and rank-file tables */

/* A run (ckpt/runs.c): count equal-shaped boxes of tensor `tensor`, box i at offset off + i * step in
 * the rank file of rank rank0 + i * stride. /layout/runs holds one row per run. */
struct ck_run {
    int32_t tensor, rank0, stride, pad;
    int64_t count;
    int64_t off[CKPT_MAX_DIMS], step[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
};
/* The runs of L's boxes (grouped by tensor, each group sorted by offset): per tensor the greedy merge
 * of its boxes into maximal runs, in whichever of two orders (dim 0 first, or dim 0 last) gives fewer
 * runs. *runs is malloc'd (*n of them). */
void ck_runs_build(const ck_layout *L, ck_run **runs, int64_t *n);
/* Checks the runs[n] of a v3 index against L (its tensors and files read and checked) without
 * expanding them all: every run in O(1) (inside its tensor, file ranks inside the world), the runs
 * grouped by tensor in tensor order, then tensor by tensor its boxes expanded into one scratch buffer
 * (the largest tensor's boxes): each box's rank file listed in /layout/files, the tensor table's box
 * range, no two boxes overlapping (ck_layout_check_tensor); and the files' box counts and bytes.
 * O(all boxes) time, O(largest tensor's boxes + files) memory. MP_ECHECK naming path and the run or
 * tensor on anything wrong. */
mp_code ck_runs_check(const ck_layout *L, const ck_run *runs, int64_t n, const char *path, mp_err *e);
/* Expands the runs[n] (ck_runs_check passed) into L->b: boxes sorted per tensor by offset (all dims),
 * box_first/nboxes of the tensors set, their k numbered for the derived paths (/<name>/box_<k>, k
 * counting the file's boxes of the tensor in that order). */
void ck_runs_expand(ck_layout *L, const ck_run *runs, int64_t n);
/* A box found by a query (the collective open's planning): what a part carries of it, 80 bytes where a
 * ck_box has 152 (rank 0 writes, sorts and packs millions of them at 4,096 ranks). box: its index in
 * the layout's boxes when it was found there (a v1/v2 layout: its slabs and stored paths), -1 when it
 * was found on the runs (its paths derive from k). */
typedef struct ck_hit {
    int32_t tensor, file, k, box;
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
} ck_hit;
/* The bounds of runs[n] for ck_runs_query's filter: per run 4 int64 at bound + 4 i, the extent
 * [lo, hi) of its members in dim 0 and in dim 1 ([0, 1) for a 1-D tensor). */
void ck_runs_bounds(const ck_run *runs, int64_t n, int64_t *bound);
/* Appends to *out (growing: *n used of *cap, mp_realloc) the boxes of tensor t's runs[a, b) (all of
 * them; ck_runs_check passed; nd and shape: t's, given by the caller from where it keeps them) that
 * meet the region (off, shp), without expanding the runs: per run the
 * range of its members that meet the region (arithmetic: O(1) per run; a run whose bounds (bound, from
 * ck_runs_bounds, or NULL) miss the region is passed over without reading its row), per box found its
 * file and k (O(log) per run of t; 0 without counting where one_per_file: the caller knows that no
 * rank file holds two boxes of t). The hits carry tensor, file, k, offset and shape (box -1: paths
 * derived from k), in run order, not sorted. The collective open's rank 0. */
void ck_runs_query(const ck_layout *L, const ck_run *runs, const int64_t *bound, int64_t a, int64_t b, int t, int nd,
                   const int64_t *shape, int one_per_file, const int64_t *off, const int64_t *shp, ck_hit **out,
                   int *n, int *cap);
/* Numbers the boxes of L for their derived paths (v3 rule: k counts the boxes of the tensor in the
 * file, in layout order); L has no path pool. */
void ck_layout_derive_paths(ck_layout *L);

/* --------------------------------------------------------------------- the box record schema */
/* ckpt/boxrec.c: the fields of a box, listed once (ck_bfields), and the places that hold a subset of
 * them (bitmask): a v1 / v2 index's /layout/boxes row, a v3/v4 rank file's /boxes row, the save's
 * exchange to rank 0, a group member's list to its leader (ckpt/group.c). Compound types, rows, the v1/v2 checksum input and the wire encoding all walk
 * the table. */
enum { CK_BR_IDX1 = 1, CK_BR_IDX2 = 2, CK_BR_FILE = 4, CK_BR_WIRE = 8, CK_BR_GROUP = 16 };
typedef enum { CK_BF_STR, CK_BF_I32, CK_BF_I64, CK_BF_U64, CK_BF_DIMS } ck_bf_kind;
typedef struct ck_bfield {
    const char *name;                 /* the column's name */
    ck_bf_kind kind;                  /* STR: fixed-width NUL-padded; DIMS: CKPT_MAX_DIMS int64 */
    size_t at;                        /* offsetof its member in ck_boxrec */
    size_t width;                     /* its bytes in a row */
    unsigned places;                  /* CK_BR_* that have it */
    int hashed;                       /* IDX1/IDX2: in the index checksum's box sequence */
} ck_bfield;
extern const ck_bfield ck_bfields[];
extern const int ck_nbfields;
/* A box record: every field by value (integers widened to int64; strings point elsewhere: to a
 * layout's names, into a row, into a receive scratch). Fields a place lacks are 0 / NULL. */
typedef struct ck_boxrec {
    const char *tensor, *file, *dataset, *tiles_dataset;
    int64_t tensor_index, rank, file_index, k, dtype, ndim;
    int64_t gshape[CKPT_MAX_DIMS], offset[CKPT_MAX_DIMS], shape[CKPT_MAX_DIMS];
    uint64_t checksum;
    int64_t slab_rows, slab_first, nslabs, tile_rows, tile_cols, ntiles;
    uint64_t tiles_checksum;
} ck_boxrec;
#define CK_BOXREC_SCRATCH (4 * CK_DSET_MAX)   /* bytes of ck_boxrec_recv's scratch: its strings */
/* Bytes of a row of place (the packed sum of its fields' widths). */
size_t ck_boxrec_size(unsigned place);
/* Byte offset of field `name` in a row of place; -1 if place lacks it. */
long ck_boxrec_offset(unsigned place, const char *name);
/* The packed compound type of a row of place (memory type = file type); caller closes. */
hid_t ck_boxrec_type(unsigned place);
/* Writes r's fields of place as one row at row (ck_boxrec_size(place) bytes, every byte set). */
void ck_boxrec_put(unsigned place, const ck_boxrec *r, void *row);
/* Reads the row at row into r (its strings point into the row); 0 if a string column has no NUL
 * (that string is NULL), else 1. */
int ck_boxrec_get(unsigned place, const void *row, ck_boxrec *r);
/* Feeds the hashed fields of place (CK_BR_IDX1 or IDX2) of r, in table order, to the XXH3 state s:
 * integers as int64, dims as CKPT_MAX_DIMS int64, strings with their NUL (docs/FORMAT.md). */
struct XXH3_state_s;
void ck_boxrec_hash(struct XXH3_state_s *s, unsigned place, const ck_boxrec *r);
/* Appends r's fields of the wire place (CK_BR_WIRE or CK_BR_GROUP) to b. */
void ck_boxrec_send(unsigned place, ck_buf *b, const ck_boxrec *r);
/* Reads one record that ck_boxrec_send(place) wrote from p[*at, n) into r (advancing *at; its strings
 * go to scratch, CK_BOXREC_SCRATCH bytes); 0 if malformed (short, a string too long for its column,
 * an I32 field out of range). */
int ck_boxrec_recv(unsigned place, const char *p, size_t n, size_t *at, ck_boxrec *r, char *scratch);

/* A v3 rank file's /boxes table is n rows of place CK_BR_FILE, ck_boxrec_size(CK_BR_FILE) bytes each
 * (ckpt/boxtab.c); its bytes are the file's. */
/* Order of the table's rows: tensor name (strcmp), then offset (lexicographic). */
int ck_boxrow_cmp(const void *a, const void *b);
/* XXH3-64 of n rows (the table's bytes): a file's boxes_checksum. */
uint64_t ck_boxtab_hash(const void *rows, int64_t n);
/* Writes rows[n] (sorted by ck_boxrow_cmp) as /boxes of the open rank file f (path names it). */
mp_code ck_boxtab_write(hid_t f, const void *rows, int64_t n, const char *path, mp_err *e);
/* Reads /boxes of the open rank file f into *rows (malloc'd, *n rows). MP_ECHECK naming path when it is
 * missing or not a table of box rows. */
mp_code ck_boxtab_read(hid_t f, const char *path, void **rows, int64_t *n, mp_err *e);
/* Checks the table rows[n] of file fi against L (v3: the index's boxes_checksum and box count of the
 * file; rows strictly sorted; each box ids[0..nids) of L, the file's boxes in layout order, has its row
 * with its shape, its path's k and valid tile fields) and fills those boxes' checksum and tile fields.
 * MP_ECHECK naming path (the rank file) otherwise. */
mp_code ck_boxtab_apply(ck_layout *L, int fi, const int *ids, int nids, const void *rows, int64_t n,
                        const char *path, mp_err *e);

/* Rank 0's side of the collective open (ckpt/plan.c), apart from its collectives so that a test can
 * run it: the index of the checkpoint in dir read and validated (expand 0: a v3 index's runs kept
 * unexpanded and planned on arithmetically, as the open does; 1: every box expanded and planned on
 * with the interval index, as ckpt_open's layout: tests compare the two), then the parts of nq ranks
 * packed from their region lists (ckpt_region_list's bytes, rank q's rcount[q] of them, one after
 * another in req) appended to parts, their sizes in pcount[nq]. S keeps its scratch and the tensor
 * found at each place of a list from call to call (the rounds: each round's first rank would look all
 * its tensors up by name again), so one S packs in one thread at a time. */
typedef struct ck_plan_src ck_plan_src;
mp_code ck_plan_src_open(const char *dir, int expand, ck_plan_src **out, mp_err *e);
mp_code ck_plan_pack(ck_plan_src *S, int nq, const char *req, const int64_t *rcount, ck_buf *parts,
                     int64_t *pcount, mp_err *e);
void ck_plan_src_free(ck_plan_src *S);

/* A reader of the checkpoint in dir over the layout *from (validated, indexed: ck_layout_index done),
 * which it takes over (*from is zeroed). ckpt_open and the planned open (ckpt/plan.c) make readers so. */
ckpt_reader *ck_reader_new(const char *dir, ck_layout *from);

/* ---------------------------------------------------------------------------------------- boxes */

int64_t ck_volume(int nd, const int64_t *shp);
/* Lexicographic order (-1, 0, 1) of two offsets of CKPT_MAX_DIMS entries, dim 0 first: the order of a
 * tensor's boxes in every table and list. */
int ck_off_cmp(const int64_t *a, const int64_t *b);
/* Intersection of boxes a and b (nd dims) into (io, is); returns 1 if non-empty. */
int ck_intersect(int nd, const int64_t *ao, const int64_t *as, const int64_t *bo, const int64_t *bs,
                 int64_t *io, int64_t *is);
/* "[o0:e0, o1:e1, ...]" of a box. */
void ck_box_str(char *buf, size_t cap, int nd, const int64_t *off, const int64_t *shp);
/* Candidates of the interval index: saved boxes [*lo, *hi) of tensor t in L whose dim-0 extent may
 * meet [q0, q1): binary searches over the running max end and the sorted starts. */
void ck_index_range(const ck_layout *L, int t, int64_t q0, int64_t q1, int64_t *lo, int64_t *hi);
/* The index of tensor name in L (tensors sorted by name), -1 if absent: ckpt_tensor_find's body. */
int ck_layout_find(const ck_layout *L, const char *name);
/* The saved boxes of tensor t of L (indexed) that meet the box (offset, shape): their number, the first
 * cap of them in out (ascending): ckpt_query's body. */
int ck_layout_query(const ck_layout *L, int t, const int64_t *offset, const int64_t *shape, int *out, int cap);
/* Finds a region of the box (qo, qs) not covered by the n boxes (bo[i], bs[i]) (subtraction);
 * returns 1 and the region in (mo, ms) if one exists, 0 if the boxes cover it. */
int ck_find_gap(int nd, const int64_t *qo, const int64_t *qs, int n, const int64_t (*bo)[CKPT_MAX_DIMS],
                const int64_t (*bs)[CKPT_MAX_DIMS], int64_t *mo, int64_t *ms);
/* Copies the sub-box (sub_off, sub_shp), in global coordinates, from src (a row-major box at src_off
 * with shape src_shp) into dst (a row-major box at dst_off with shape dst_shp); elements of esize
 * bytes. The sub-box must lie inside both. */
void ck_copy_sub(int nd, size_t esize, const int64_t *sub_off, const int64_t *sub_shp, const void *src,
                 const int64_t *src_off, const int64_t *src_shp, void *dst, const int64_t *dst_off,
                 const int64_t *dst_shp);
/* Validates a tensor name / metadata key. MP_EINPUT with the reason. */
mp_code ck_check_name(const char *name, mp_err *e);
mp_code ck_check_key(const char *key, mp_err *e);

/* ------------------------------------------------------------------------------- checksum tiles */
/* Format v2 cuts every box into tiles (ckpt_tile_geometry, public in ckpt.h): bands of tile_rows rows of dim 0 x blocks of tile_cols
 * entries of dim 1 (the last band / block may be shorter), all of dims 2.. . Tile (i, j) is number
 * i * ncolblocks + j; its checksum is XXH3-64 of its bytes in row-major order (the concatenation of
 * its rows' segments). Geometry (docs/FORMAT.md): cols = shp[1] (1 for 1-D), inner = prod shp[2..];
 * b = the largest of 8, 4, 2, 1 dividing cols with (cols / b) * inner * esize >= CK_TILE_MIN_SEG
 * (b = 1 always qualifies); tile_cols = cols / b; tile_rows = ceil(T / (tile_cols * inner * esize))
 * clamped to [1, rows], with T = CK_TILE_BYTES, or CK_TILE_MIN_SEG for 1-D boxes. Column blocks so
 * fall on the boundaries of TP degrees 2, 4 and 8. */
#define CK_TILE_BYTES 4096
#define CK_TILE_MIN_SEG 256
#define CK_CHUNK_BYTES (256 << 10)   /* zstd chunks: whole tile rows of one column block, about this size */
/* Number of tiles: ceil(rows / tile_rows) * ceil(cols / tile_cols). */
int64_t ck_tile_count(int nd, const int64_t *shp, int64_t tile_rows, int64_t tile_cols);

/* ----------------------------------------------------------------------------------------- HDF5 */

/* Prepares HDF5 for the calling thread: replaces its automatic error printing by a silent handler that
 * records the cause (error stack and errno) of the first failing HDF5 call until ck_h5_err or
 * ck_h5_clear, registers the zstd filter. Safe to call often (entry points do). */
void ck_h5_init(void);
/* Sets *e to code with "<formatted context>: <summary of the cause>" — the recorded first failure of
 * this thread, else the current HDF5 error stack (outermost call, innermost reason, errno text) —
 * then forgets both (ck_h5_clear); returns code. Call it after the cleanup of the failed operation as
 * well as right after the failing call: cleanup calls cannot erase the recorded cause. */
mp_code ck_h5_err(mp_err *e, mp_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Forgets an HDF5 failure the caller handled itself (the error stack and the recorded cause), so it is
 * not reported as the cause of a later one. Use it instead of H5Eclear2. */
void ck_h5_clear(void);
/* 1 if the HDF5 library in use is thread-safe (built with its global lock: calls from two threads
 * take turns), so that a second thread may call it while this one does. */
int ck_h5_threadsafe(void);
/* The operating-system errno behind the recorded HDF5 failure (the sec2 driver's "errno = N", else
 * errno as the failing call returned if it names an I/O cause: ENOSPC, EACCES, EROFS, ...), 0 when
 * the failure is HDF5's own (a corrupt or foreign file). Does not clear anything: call it before
 * ck_h5_err, to word a message ("truncated or corrupt" only when no errno explains the failure). */
int ck_h5_cause_errno(void);
/* The HDF5 file type of a dtype (a new id the caller closes): f32 -> IEEE F32LE, i32 -> STD I32LE,
 * bf16 -> a 16-bit IEEE-style float (sign 15, exponent 7..14 bias 127, mantissa 0..6). */
hid_t ck_h5_type(mp_dtype dt);
/* A fixed-length, NUL-padded ASCII string type of n bytes, the tables' strings (caller closes). */
hid_t ck_h5_str_type(size_t n);
/* An array of CKPT_MAX_DIMS elements of base, the tables' offsets and shapes (caller closes). */
hid_t ck_h5_dims_type(hid_t base);
/* File access property list: sec2 driver, file locking off, library version bounds v110; for
 * writing (for_write) also metadata aggregation and alignment of large datasets. */
hid_t ck_h5_fapl(int for_write);
/* creation lists that keep links and attributes in checksummed object headers (see h5util.c) */
hid_t ck_h5_fcpl(void);
/* creates group name in loc with such a list (a new id the caller closes; < 0 on failure) */
hid_t ck_group_create(hid_t loc, const char *name);
/* creates the missing groups above the object path ("a/b/c": a and a/b) with ck_group_create, since
 * HDF5 makes intermediate groups with default (dense past 8 links) lists; < 0 on failure */
herr_t ck_h5_make_parents(hid_t loc, const char *path);
/* Writes / reads attributes (on any object). Returns < 0 on failure (cause recorded for ck_h5_err). */
herr_t ck_attr_write_str(hid_t obj, const char *name, const char *s);
/* Arrays (1-D of n, also for n = 1) and scalars. */
herr_t ck_attr_write_i64(hid_t obj, const char *name, const int64_t *v, int n);
herr_t ck_attr_write_i64s(hid_t obj, const char *name, int64_t v);
herr_t ck_attr_write_u64s(hid_t obj, const char *name, uint64_t v);
herr_t ck_attr_read_str(hid_t obj, const char *name, char *buf, size_t cap);
/* Reads n values; fails unless the attribute holds exactly n elements. */
herr_t ck_attr_read_i64(hid_t obj, const char *name, int64_t *v, int n);
herr_t ck_attr_read_u64(hid_t obj, const char *name, uint64_t *v, int n);

/* --------------------------------------------------- shared small pieces (ckpt/util.c); files: core/fsutil.h */

double ck_now(void);
/* asprintf into a new string (aborts on OOM). */
char *ck_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* MP_OK if dir is a directory, else MP_EINPUT "checkpoint directory DIR does not exist" (ckpt_open, and
 * every rank of ckpt_open_planned: node-local storage may hold it on rank 0's host only). */
mp_code ck_dir_exists(const char *dir, mp_err *e);
/* Rank 0's gathers and scatters of per-rank bytes go in rounds of consecutive ranks [r0, r1), so that
 * rank 0 holds one round's bytes at a time however large the world: the save's box lists in rounds of
 * CK_GATHER_RANKS (70B at tp 8: ~150 MiB of lists), the collective open's region lists and parts in
 * rounds of CK_OPEN_RANKS (70B at tp 8: ~0.2 MiB of regions and ~0.7 MiB of part per rank). Every rank
 * calls each round. ck_round_ranks(n) is n, or the fault ckpt_gather_ranks when set > 0 (tests: several
 * rounds with a few processes; every rank must see the same value, as under one mpiexec). */
#define CK_GATHER_RANKS 256
#define CK_OPEN_RANKS 32
int ck_round_ranks(int ranks);
/* The n bytes of mine of every rank of [r0, r1) (len[r] of them, len[size] known on rank 0) to rank 0,
 * one gatherv; the others send nothing. Returns on rank 0 the round's bytes back to back (malloc'd),
 * NULL elsewhere. */
char *ck_gather_round(mp_comm *w, const void *mine, int64_t n, const int64_t *len, int r0, int r1);
/* Rank 0 sends each rank r of [r0, r1) its len[r] bytes (back to back in in, rank order; len[size] on
 * rank 0) into out (n = len[r] there), one scatterv; the other ranks get nothing. */
void ck_scatter_round(mp_comm *w, void *out, int64_t n, const void *in, const int64_t *len, int r0, int r1);
/* raise(SIGKILL) if the fault ckpt_crash_at == point (and ckpt_crash_rank unset or == rank). */
void ck_crash_point(const char *point, int rank);

/* The save's rank and its DIR.partial (ckpt/writer_boxes.c), and the value it holds for metadata key (NULL if
 * none): what ckpt/files.c needs of a save. */
int ck_save_rank(const ckpt_save *s);
const char *ck_save_partial(const ckpt_save *s);
const char *ck_save_meta_get(const ckpt_save *s, const char *key);

/* What ckpt/group.c needs of a save (ckpt/writer_boxes.c; the two row counts: ckpt/writer_files.c): its world, options, whether a local error is
 * remembered, its boxes (in the order added: box i as a box record, its name the save's, and its data,
 * NULL for a fill box), dropping them all (a group member whose
 * boxes went to its leader's file), and the rows per band the writer uses for a fill box. */
mp_comm *ck_save_world(const ckpt_save *s);
const ckpt_save_opts *ck_save_opts_of(const ckpt_save *s);
int ck_save_failed(const ckpt_save *s);
int ck_save_nboxes(const ckpt_save *s);
void ck_save_box_at(const ckpt_save *s, int i, ck_boxrec *out, const void **data);
void ck_save_drop_boxes(ckpt_save *s);
int64_t ck_fill_band_rows(mp_dtype dt, int ndim, const int64_t *shp, size_t fill_bytes);
/* Bytes of one dim-0 row of a box of dtype dt and shape shp[ndim] (the writer's bands are whole rows). */
int64_t ck_row_bytes(mp_dtype dt, int ndim, const int64_t *shp);

/* ckpt/group.c: files of several ranks (ckpt_save_opts.ranks_per_file). ck_group_wanted: the save asks
 * for groups and the world has more than one rank (the same answer on every rank). ck_group_write:
 * collective over the world, in place of the writer's own rank files: forms the groups, moves every
 * member's boxes to its leader, which writes them with its own through write_files (the writer's
 * ck_wr_write_rank_files, ckpt/writer_files.c); returns this rank's local result (never hangs on another rank's failure). */
int ck_group_wanted(const ckpt_save *s);
mp_code ck_group_write(ckpt_save *s, mp_code (*write_files)(ckpt_save *s, mp_err *e), mp_err *e);
/* Test hook: 1 if the fault ckpt_fail_at == point (and ckpt_fail_rank unset or == rank): the caller then
 * fails with an error (no kill) at that point (ckpt/util.c). */
int ck_fail_point(const char *point, int rank);

#endif
