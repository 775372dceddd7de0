/*
 * ckpt/writer.c — saving a checkpoint: rank files, the collective commit, async writing.
 *
 * A save is a ckpt_save. ckpt_save_add records a pointer box (no copy); ckpt_save_add_fill records a
 * fill box, whose data a callback produces band by band while the file is written. The rank files are
 * written either by ckpt_save_commit on the caller's thread, or (pointer boxes of the process's own
 * rank only) by a background pthread started with ckpt_save_start. Every MPI-bound step (agreement,
 * layout exchange) runs on the caller's thread, so the communicator never sees a second thread (no
 * MPI_THREAD_MULTIPLE needed).
 *
 * Rank files (DIR.partial/rank_%05d.h5): every box has a file rank, the process's own for
 * ckpt_save_add, any rank of the recorded world (opts.world_size, else the communicator's size) for
 * ckpt_save_add_fill; a process writes one file per distinct file rank among its boxes (ascending),
 * its boxes in the order added, and two processes never write the same file (rank 0 checks). In a
 * file, box k of a tensor (k counting that tensor's boxes in that file) is the dataset
 * /<tensor name>/box_<k>, and its checksum tiles the uint64 dataset /<tensor name>/tiles_<k>.
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
 * Checksums (format v2, docs/FORMAT.md): each box is cut into tiles by ckpt_tile_geometry (bands of
 * tile_rows rows x blocks of tile_cols entries of dim 1); one pass over the bytes feeds an XXH3
 * streaming state per column block (digested at every tile-row boundary) and one for the whole box.
 * The tile array is stored in the rank file; the box's attributes and the index carry the box
 * checksum and tiles_checksum = XXH3-64 of the tile array.
 *
 * Commit (every rank, caller's thread):
 *   1. agree (mp_comm_agree, core/comm.h): every rank returns the highest code of any rank with the
 *      message of the lowest failing rank ("[rank N] ..."). On failure rank 0 removes the .partial
 *      directory (all rank files are closed by then).
 *   2. exchange: each process's box list (names, shapes, file ranks, checksums, tile geometry) goes
 *      to rank 0 only: one gather of the lengths, one gatherv per 256 ranks' lists (core/comm.h). No other
 *      rank receives any list, so a save's traffic is linear in the world (docs/BENCH_SCALE.md).
 *   3. rank 0: builds the layout, checks names, file ownership and exact coverage, writes and fsyncs
 *      index.h5 and then the directory holding it, then
 *        step mode (ckpt_save_begin): renames ROOT/step_N.partial -> step_N, fsyncs ROOT, replaces
 *          ROOT/latest durably, applies retention (then, with opts.view_background, view.h5 is written
 *          on a background thread: ckpt/view_bg.c);
 *        dir mode (ckpt_save_begin_dir): renames DIR.partial -> DIR, or, replacing an existing DIR,
 *          swaps the two atomically (mp_fs_swap_dirs), fsyncs the parent and removes the old tree.
 *   4. agree again on rank 0's result.
 * Earlier checkpoints are never touched (only retention, after a successful commit, removes them, and
 * a dir-mode replace, after the swap).
 */
#define _GNU_SOURCE
#include "ckpt/ckpt_internal.h"
#include "ckpt/read_pipe.h"
#include "ckpt/zstd_filter.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* The tile array is hashed and written as host uint64s: the format is little-endian. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt/writer.c assumes a little-endian host (checksums are of little-endian bytes)"
#endif

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

/* The path of box B's dataset (tiles 0) or of its tile checksums (tiles 1) into buf (CK_DSET_MAX bytes):
 * derived from its name and k, not stored (format v3 readers derive them the same way). */
static const char *wbox_path(const wbox *B, int tiles, char *buf) {
    snprintf(buf, CK_DSET_MAX, tiles ? "/%s/tiles_%d" : "/%s/box_%d", B->name, B->k);
    return buf;
}

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
    mp_code lrc;                    /* first local error (add/meta/write) */
    mp_err lerr;
    int state;
    pthread_t th;
    int thread_live;
    atomic_int written;             /* the rank files are written (or failed) */
    mp_code wrc;
    mp_err werr;
    ckpt_stats st;
    int64_t progress_total;         /* tensor bytes of this process's boxes, for opts.progress */
    mp_code frc;                    /* final result, once ST_DONE */
    mp_err ferr;
};

static pthread_mutex_t g_inflight_mu = PTHREAD_MUTEX_INITIALIZER;
static ckpt_save *g_inflight;       /* a started, uncommitted async save of this process */

static void set_inflight(ckpt_save *s, ckpt_save *expect) {
    pthread_mutex_lock(&g_inflight_mu);
    if (!expect || g_inflight == expect) g_inflight = s;
    pthread_mutex_unlock(&g_inflight_mu);
}

static ckpt_save *get_inflight(void) {
    pthread_mutex_lock(&g_inflight_mu);
    ckpt_save *s = g_inflight;
    pthread_mutex_unlock(&g_inflight_mu);
    return s;
}

static void free_boxes(wbox *b, int n);

/* Remembers the first local error. */
static mp_code remember(ckpt_save *s, mp_code rc, const mp_err *e) {
    if (rc != MP_OK && s->lrc == MP_OK) {
        s->lrc = rc;
        if (e) s->lerr = *e;
        else mp_err_set(&s->lerr, rc, "%s", mp_code_name(rc));
    }
    return rc;
}

/* Collective failure agreement (see the top of the file): mp_comm_agree of this rank's result (rc, and
 * le its error) over w, the agreed error into e (which may be NULL). */
static mp_code agree(mp_comm *w, mp_code rc, const mp_err *le, mp_err *e) {
    mp_err m;
    if (rc != MP_OK && le) m = *le;
    else mp_err_set(&m, rc, "%s", mp_code_name(rc));
    rc = mp_comm_agree(w, rc, &m, NULL);
    if (rc != MP_OK && e) *e = m;
    return rc;
}

/* ------------------------------------------------------------------------------------- begin */

/* Rank 0, both modes: removes a stale .partial of an interrupted save (with a warning), creates it
 * afresh and fsyncs its parent so the new entry is durable. */
static mp_code fresh_partial(ckpt_save *s, mp_err *e) {
    if (mp_fs_exists(s->partial)) {
        mp_warn("ckpt: removing stale %s of an interrupted save", s->partial);
        MP_TRY(mp_fs_remove_tree(s->partial, e));
    }
    if (mkdir(s->partial, 0777) != 0)
        return mp_err_set(e, MP_EIO, "creating %s: %s", s->partial, strerror(errno));
    return mp_fs_fsync_path(s->root, 1, e);
}

/* Rank 0, step mode: creates ROOT and a fresh ROOT/step_N.partial; fails if step_N exists. */
static mp_code prepare_step_dir(ckpt_save *s, mp_err *e) {
    MP_TRY(mp_fs_mkdirs(s->root, e));
    if (mp_fs_exists(s->final))
        return mp_err_set(e, MP_EINPUT, "checkpoint %s already exists (step %lld was saved before)", s->final,
                          (long long)s->step);
    return fresh_partial(s, e);
}

/* Rank 0, dir mode: creates the parent of DIR and a fresh DIR.partial; an existing DIR is an error
 * unless replace (then it must be a directory, and stays untouched until the commit). */
static mp_code prepare_target_dir(ckpt_save *s, mp_err *e) {
    MP_TRY(mp_fs_mkdirs(s->root, e));
    if (mp_fs_exists(s->final)) {
        if (!s->replace)
            return mp_err_set(e, MP_EINPUT, "checkpoint directory %s already exists (use --force to replace it)",
                              s->final);
        if (!mp_fs_is_dir(s->final))
            return mp_err_set(e, MP_EINPUT, "%s exists and is not a directory: it cannot be replaced by a checkpoint",
                              s->final);
    }
    return fresh_partial(s, e);
}

/* Splits dir into its parent (for fsync and mkdir -p) and its last component, which must name a
 * directory that can be renamed: not empty, ".", "..", nor the root. Sets *parent and *base (new
 * strings) or returns MP_EINPUT. */
static mp_code split_dir(const char *dir, char **parent, char **base, mp_err *e) {
    *parent = *base = NULL;
    if (!dir || !*dir) return mp_err_set(e, MP_EINPUT, "checkpoint directory name is empty");
    char *p = ck_fmt("%s", dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = strrchr(p, '/');
    const char *b = slash ? slash + 1 : p;
    if (!*b || !strcmp(b, ".") || !strcmp(b, "..")) {
        free(p);
        return mp_err_set(e, MP_EINPUT,
                          "checkpoint directory '%s' is not a usable name (it must end in a component other than "
                          "'/', '.' or '..')", dir);
    }
    *base = ck_fmt("%s", b);
    if (!slash) *parent = ck_fmt(".");
    else if (slash == p) *parent = ck_fmt("/");
    else { *slash = '\0'; *parent = ck_fmt("%s", p); *slash = '/'; }
    free(p);
    return MP_OK;
}

/* The common part of ckpt_save_begin and ckpt_save_begin_dir: dir NULL for step mode (root, step),
 * else dir mode (dir, replace). */
static mp_code begin(ckpt_save **out, mp_comm *world, const char *root, const char *dir, int replace, int64_t step,
                     const ckpt_save_opts *opts, mp_err *e) {
    assert(out && world);
    *out = NULL;
    double t0 = ck_now();
    ck_h5_init();   /* ends a background view.h5 write of an earlier save first (ckpt/view_bg.c) */
    ckpt_save *prev = get_inflight();
    if (prev) {
        mp_err pe;
        ckpt_save_wait(prev, NULL, &pe);   /* its result stays with its handle */
    }
    double wait_prev = ck_now() - t0;   /* both waits: the earlier save's file writes and its view */
    mp_code lrc = MP_OK;
    mp_err le;
    mp_err_clear(&le);
    ckpt_save *s = mp_xcalloc(sizeof *s);
    s->world = world;
    s->rank = world->rank;
    s->size = world->size;
    s->step = step;
    if (opts) s->o = *opts;
    if (s->o.format_version == 0) s->o.format_version = CKPT_FORMAT_VERSION;
    s->wsize = s->o.world_size > 0 ? s->o.world_size : s->size;
    atomic_init(&s->written, 0);
    if (dir) {
        s->dir_mode = 1;
        s->replace = replace;
        lrc = split_dir(dir, &s->root, &s->dirname, &le);
        if (lrc == MP_OK) {
            s->final = ck_fmt("%s", dir);
            size_t n = strlen(s->final);
            while (n > 1 && s->final[n - 1] == '/') s->final[--n] = '\0';
            s->partial = ck_fmt("%s.partial", s->final);
        } else {
            s->root = ck_fmt(".");
            s->dirname = ck_fmt("?");
            s->final = ck_fmt("%s", dir ? dir : "");
            s->partial = ck_fmt("%s.partial", s->final);
        }
        s->where = ck_fmt("to %s", s->final);
    } else {
        if (!root || !*root) lrc = mp_err_set(&le, MP_EINPUT, "checkpoint root directory is empty");
        s->root = ck_fmt("%s", root ? root : "");
        s->dirname = ck_fmt("step_%08lld", (long long)step);
        s->final = ck_fmt("%s/%s", s->root, s->dirname);
        s->partial = ck_fmt("%s.partial", s->final);
        s->where = ck_fmt("in %s", s->root);
    }
    if (lrc != MP_OK) {
    } else if (step < 0) {
        lrc = mp_err_set(&le, MP_EINPUT, "checkpoint step %lld is negative", (long long)step);
    } else if (s->o.zstd_level < 0 || s->o.zstd_level > 22) {
        lrc = mp_err_set(&le, MP_EINPUT, "zstd level %d out of range 0..22", s->o.zstd_level);
    } else if (s->o.ranks_per_file < CKPT_FILES_NODE) {
        lrc = mp_err_set(&le, MP_EINPUT, "ranks per file %d: expected 0 or 1 (a file per rank), a group size > 1 or "
                         "CKPT_FILES_NODE", s->o.ranks_per_file);
    } else if (s->o.world_size < 0) {
        lrc = mp_err_set(&le, MP_EINPUT, "world size %d is negative", s->o.world_size);
    } else if (s->o.format_version < 3 || s->o.format_version > CKPT_FORMAT_VERSION_MAX) {
        lrc = mp_err_set(&le, MP_EINPUT, "format version %d: this build writes versions 3..%d", s->o.format_version,
                         CKPT_FORMAT_VERSION_MAX);
    }
    if (lrc == MP_OK && s->rank == 0) lrc = s->dir_mode ? prepare_target_dir(s, &le) : prepare_step_dir(s, &le);
    mp_code rc = agree(world, lrc, &le, e);
    if (rc != MP_OK) {
        mp_err_wrap(e, "saving checkpoint step %lld %s", (long long)step, s->where);
        ckpt_save_free(s);
        return rc;
    }
    ck_crash_point("begin", s->rank);
    s->st.wait_prev_s = wait_prev;
    s->st.stall_s = ck_now() - t0;
    *out = s;
    return MP_OK;
}

mp_code ckpt_save_begin(ckpt_save **out, mp_comm *world, const char *root, int64_t step,
                        const ckpt_save_opts *opts, mp_err *e) {
    return begin(out, world, root, NULL, 0, step, opts, e);
}

mp_code ckpt_save_begin_dir(ckpt_save **out, mp_comm *world, const char *dir, int64_t step,
                            const ckpt_save_opts *opts, int replace, mp_err *e) {
    /* a non-NULL dir selects dir mode; an empty one is refused there, on every rank */
    return begin(out, world, NULL, dir ? dir : "", replace, step, opts, e);
}

const char *ckpt_save_dir(const ckpt_save *s) { return s->final; }

/* --------------------------------------------------------------------------------- add / meta */

/* ---------------------------------------------------------------------- box map (planning) */
/* Adding a box looks up the earlier boxes of its tensor (dtype and shape must agree) and counts those
 * in its file (the dataset's box_<k>) through two hash sets of box indices, by name and by (name, file
 * rank): O(1) per box, so a rank's planning is linear in its own boxes (docs/BENCH_SCALE.md). Both
 * sets are rebuilt at twice the size when half full. */

static uint64_t map_hash(const char *name, int rank) {
    return XXH3_64bits_withSeed(name, strlen(name), (uint64_t)(int64_t)rank + 2);
}

/* The slot of set (s->by_name when rank < 0, else s->by_file) holding a box of name (and file rank),
 * or the empty slot where one would go. */
static int map_find(const ckpt_save *s, const int *set, const char *name, int rank) {
    if (s->capm == 0) return 0;
    size_t mask = (size_t)s->capm - 1, i = (size_t)map_hash(name, rank) & mask;
    for (;; i = (i + 1) & mask) {
        int j = set[i];
        if (j < 0 || (strcmp(s->b[j].name, name) == 0 && (rank < 0 || s->b[j].rank == rank))) return (int)i;
    }
}

/* Sets of capacity cap (a power of two) over boxes [0, nb), counts recomputed. */
static void map_build(ckpt_save *s, int cap, int nb) {
    size_t old = sizeof(int) * (size_t)s->capm;
    mp_free_acct(s->by_name, old, MP_MEM_OTHER);
    mp_free_acct(s->by_file, old, MP_MEM_OTHER);
    mp_free_acct(s->in_file, old, MP_MEM_OTHER);
    s->capm = cap;
    s->by_name = mp_malloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    s->by_file = mp_malloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    s->in_file = mp_calloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    for (int i = 0; i < cap; i++) s->by_name[i] = s->by_file[i] = -1;
    for (int j = 0; j < nb; j++) {
        int a = map_find(s, s->by_name, s->b[j].name, -1), f = map_find(s, s->by_file, s->b[j].name, s->b[j].rank);
        if (s->by_name[a] < 0) s->by_name[a] = j;
        if (s->by_file[f] < 0) s->by_file[f] = j;
        s->in_file[f]++;
    }
}

/* Records box j (just appended; name_slot / file_slot its slots from map_find before it was added, k its
 * count in its file including itself). */
static void map_add(ckpt_save *s, int j, int name_slot, int file_slot, int k) {
    if (2 * (s->nb + 1) > s->capm) {   /* also the first box: capm 0 */
        map_build(s, s->capm ? 2 * s->capm : 64, s->nb);
        return;
    }
    if (s->by_name[name_slot] < 0) s->by_name[name_slot] = j;
    if (s->by_file[file_slot] < 0) s->by_file[file_slot] = j;
    s->in_file[file_slot] = k;
}

static void map_free(ckpt_save *s) {
    size_t n = sizeof(int) * (size_t)s->capm;
    mp_free_acct(s->by_name, n, MP_MEM_OTHER);
    mp_free_acct(s->by_file, n, MP_MEM_OTHER);
    mp_free_acct(s->in_file, n, MP_MEM_OTHER);
}

/* Validates a box about to be added to file rank file_rank and appends it to s->b (dataset names,
 * tile geometry set; data / fill left to the caller). Returns the new box, or NULL with *le set. */
static wbox *add_box(ckpt_save *s, int file_rank, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                     const int64_t *offset, const int64_t *shape, int have_data, mp_err *le) {
    if (s->state != ST_OPEN) {
        mp_err_set(le, MP_EINTERNAL, "adding a box of tensor %s after the save was started or committed",
                   name ? name : "?");
        return NULL;
    }
    if (ck_check_name(name, le) != MP_OK) return NULL;
    if (!strncmp(name, "boxes", 5) && (name[5] == '\0' || name[5] == '/')) {
        mp_err_set(le, MP_EINPUT, "tensor %s: the name 'boxes' is reserved (a rank file's /boxes table, format v3)",
                   name);
        return NULL;
    }
    if (dt != MP_F32 && dt != MP_BF16 && dt != MP_I32) {
        mp_err_set(le, MP_EINPUT, "tensor %s: unsupported dtype %d", name, (int)dt);
        return NULL;
    }
    if (ndim < 1 || ndim > CKPT_MAX_DIMS) {
        mp_err_set(le, MP_EINPUT, "tensor %s: ndim %d not in 1..%d", name, ndim, CKPT_MAX_DIMS);
        return NULL;
    }
    if (!gshape || !offset || !shape || !have_data) {
        mp_err_set(le, MP_EINPUT, "tensor %s: NULL shape, offset, data or fill callback", name);
        return NULL;
    }
    if (file_rank < 0 || file_rank >= s->wsize) {
        mp_err_set(le, MP_EINPUT, "tensor %s: file rank %d outside the world of %d ranks", name, file_rank,
                   s->wsize);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        if (gshape[d] <= 0 || shape[d] <= 0 || offset[d] < 0 || offset[d] > gshape[d] - shape[d]) {   /* no overflow */
            char bs[256], gs[256];
            int64_t z[CKPT_MAX_DIMS] = {0};
            ck_box_str(bs, sizeof bs, ndim, offset, shape);
            ck_box_str(gs, sizeof gs, ndim, z, gshape);
            mp_err_set(le, MP_EINPUT, "tensor %s: box %s is empty or outside the tensor %s", name, bs, gs);
            return NULL;
        }
    }
    int k = 0;   /* boxes of this tensor already in this file */
    int same_name = map_find(s, s->by_name, name, -1), same_file = map_find(s, s->by_file, name, file_rank);
    int first = s->capm ? s->by_name[same_name] : -1;
    if (first >= 0) {
        const wbox *P = &s->b[first];
        int same = P->dt == dt && P->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = P->gshape[d] == gshape[d];
        if (!same) {
            mp_err_set(le, MP_EINPUT, "tensor %s: added again with a different dtype or global shape", name);
            return NULL;
        }
    }
    if (s->capm && s->by_file[same_file] >= 0) k = s->in_file[same_file];
    if (s->nb == s->capb) {
        int cap = s->capb * 2 + 16;
        s->b = mp_realloc(s->b, sizeof *s->b * (size_t)s->capb, sizeof *s->b * (size_t)cap, MP_MEM_OTHER);
        s->capb = cap;
    }
    wbox *B = &s->b[s->nb++];
    memset(B, 0, sizeof *B);
    B->name = mp_strdup(name);
    B->dt = dt;
    B->ndim = ndim;
    B->rank = file_rank;
    B->sender = s->rank;
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        B->gshape[d] = d < ndim ? gshape[d] : 1;
        B->off[d] = d < ndim ? offset[d] : 0;
        B->shp[d] = d < ndim ? shape[d] : 1;
    }
    B->k = k;
    ckpt_tile_geometry(mp_dtype_size(dt), ndim, B->shp, &B->tile_rows, &B->tile_cols);
    B->ntiles = ck_tile_count(ndim, B->shp, B->tile_rows, B->tile_cols);
    map_add(s, s->nb - 1, same_name, same_file, k + 1);
    return B;
}

mp_code ckpt_save_add(ckpt_save *s, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                      const int64_t *offset, const int64_t *shape, const void *data, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    mp_err le;
    mp_code rc = MP_OK;
    wbox *B = add_box(s, s->rank, name, dt, ndim, gshape, offset, shape, data != NULL, &le);
    if (B) B->data = data;
    else rc = le.code;
    s->st.stall_s += ck_now() - t0;
    if (rc != MP_OK) {
        remember(s, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

mp_code ckpt_save_add_fill(ckpt_save *s, int file_rank, const char *name, mp_dtype dt, int ndim,
                           const int64_t *gshape, const int64_t *offset, const int64_t *shape, ckpt_fill_fn fill,
                           void *ctx, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    mp_err le;
    mp_code rc = MP_OK;
    wbox *B = add_box(s, file_rank, name, dt, ndim, gshape, offset, shape, fill != NULL, &le);
    if (B) {
        B->fill = fill;
        B->ctx = ctx;
    } else {
        rc = le.code;
    }
    s->st.stall_s += ck_now() - t0;
    if (rc != MP_OK) {
        remember(s, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

void ckpt_save_fail(ckpt_save *s, mp_code rc, const mp_err *e) {
    assert(s && rc != MP_OK && s->state == ST_OPEN);
    remember(s, rc, e);
}

mp_code ckpt_save_meta(ckpt_save *s, const char *key, const char *value, mp_err *e) {
    mp_err le;
    mp_code rc = ck_check_key(key, &le);
    if (rc == MP_OK && !value) rc = mp_err_set(&le, MP_EINPUT, "metadata %s: NULL value", key);
    if (rc != MP_OK) {
        remember(s, rc, &le);
        if (e) *e = le;
        return rc;
    }
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->keys[i], key)) {
            free(s->vals[i]);
            s->vals[i] = mp_strdup(value);
            return MP_OK;
        }
    size_t old = sizeof(char *) * (size_t)s->nmeta, now = old + sizeof(char *);
    s->keys = mp_realloc(s->keys, old, now, MP_MEM_OTHER);
    s->vals = mp_realloc(s->vals, old, now, MP_MEM_OTHER);
    s->keys[s->nmeta] = mp_strdup(key);
    s->vals[s->nmeta] = mp_strdup(value);
    s->nmeta++;
    return MP_OK;
}

int ck_save_rank(const ckpt_save *s) { return s->rank; }
const char *ck_save_partial(const ckpt_save *s) { return s->partial; }
const char *ck_save_meta_get(const ckpt_save *s, const char *key) {
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->keys[i], key)) return s->vals[i];
    return NULL;
}

mp_comm *ck_save_world(const ckpt_save *s) { return s->world; }
const ckpt_save_opts *ck_save_opts_of(const ckpt_save *s) { return &s->o; }
int ck_save_failed(const ckpt_save *s) { return s->lrc != MP_OK; }
int ck_save_nboxes(const ckpt_save *s) { return s->nb; }

void ck_save_box_at(const ckpt_save *s, int i, ck_save_box *out) {
    assert(i >= 0 && i < s->nb);
    const wbox *B = &s->b[i];
    out->name = B->name;
    out->dt = B->dt;
    out->ndim = B->ndim;
    out->file_rank = B->rank;
    memcpy(out->gshape, B->gshape, sizeof out->gshape);
    memcpy(out->off, B->off, sizeof out->off);
    memcpy(out->shp, B->shp, sizeof out->shp);
    out->data = B->data;
}

void ck_save_drop_boxes(ckpt_save *s) {
    free_boxes(s->b, s->nb);
    map_free(s);
    s->b = NULL;
    s->nb = s->capb = s->capm = 0;
    s->by_name = s->by_file = s->in_file = NULL;
}

/* ------------------------------------------------------------------------------- hashing */

/* Streaming hasher of one box: fed consecutive rows of dim 0 (in any grouping), it computes the
 * whole-box checksum and the tile checksums of ckpt_tile_geometry. */
typedef struct {
    int64_t rows, done;             /* box rows, rows fed so far */
    int64_t row_bytes, seg_bytes;   /* a row; a full column block's segment of a row */
    int64_t tile_rows, ncb;         /* rows per tile, column blocks */
    XXH3_state_t *box, **col;       /* whole box; one per column block */
    uint64_t *tiles;                /* [ntiles] */
    int64_t ntiles;
} hasher;

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
static void hasher_init(hasher *h, const wbox *B) {
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
static void hasher_end_tile_row(hasher *h, int64_t i) {
    for (int64_t j = 0; j < h->ncb; j++) {
        h->tiles[i * h->ncb + j] = XXH3_64bits_digest(h->col[j]);
        XXH3_64bits_reset(h->col[j]);
    }
}

/* Feeds the next nrows rows (row-major, nrows * row_bytes bytes at p). */
static void hasher_feed(hasher *h, const char *p, int64_t nrows) {
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
static void hasher_finish(hasher *h, wbox *B) {
    assert(h->done == h->rows);
    B->checksum = XXH3_64bits_digest(h->box);
    B->tiles_checksum = XXH3_64bits(h->tiles, sizeof(uint64_t) * (size_t)h->ntiles);
}

static void hasher_free(hasher *h) {
    if (h->col)
        for (int64_t j = 0; j < h->ncb; j++) XXH3_freeState(h->col[j]);
    free(h->col);
    if (h->box) XXH3_freeState(h->box);
    free(h->tiles);
    memset(h, 0, sizeof *h);
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
 *    read copy and the hashing run on the second core (issue 21 item 4, docs/BENCH_RESHARD.md).
 * One buffer and no worker when MP_CKPT_SERIAL_FILL=1 (the serial path, kept to compare against: the
 * bytes are the same, only the overlap differs). */
typedef struct band_job {
    hasher *h;          /* hash rows [0, hrows) of hp into h first (h NULL: nothing to hash) */
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
    if (j->h) hasher_feed(j->h, j->hp, j->hrows);
    if (j->B) j->rc = produce_band(j->B, j->r0, j->n, j->buf, &j->err);
}

/* Rows of B per H5Dwrite call: the whole band (or box) at once when it is chunked (zstd: a partial
 * chunk would be read back, filtered and rewritten) or on the serial path (MP_CKPT_SERIAL_FILL=1: the
 * writer as it was before issue 21, kept to compare against), else pieces of about WRITE_PIECE_BYTES
 * (at least one row): the same bytes at the same place either way. Measured (docs/BENCH_RESHARD.md,
 * issue 21 item 4): once writeback runs, a 64 MiB pwrite often costs 2-4x the system time per byte
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
static mp_code write_fill_bands(ckpt_save *s, hid_t d, hid_t ft, wbox *B, hasher *h, fill_pipe *fp, const char *path,
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
            if (rc == MP_OK) hasher_feed(h, buf, n);
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
static mp_code write_tiles(hid_t f, hid_t lcpl, const wbox *B, const hasher *h, const char *path, mp_err *e) {
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
    hasher h;
    hasher_init(&h, B);
    mp_code rc = create_box_dataset(s, f, lcpl, ft, B, path, &d, e);
    if (rc != MP_OK) goto done;
    if (B->data) {
        hasher_feed(&h, B->data, B->shp[0]);
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
    hasher_finish(&h, B);
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
    hasher_free(&h);
    H5Tclose(ft);
    return rc;
}

/* Writes the /boxes table of the open rank file f of file rank fr (its boxes, written: checksums known),
 * sorted by tensor name and offset, and records its XXH3 for the exchange (s->fsums). */
static mp_code write_box_table(ckpt_save *s, hid_t f, int fr, const char *path, mp_err *e) {
    ck_boxrow *rows = mp_xcalloc(sizeof *rows * (size_t)(s->nb + 1));
    int64_t n = 0;
    for (int i = 0; i < s->nb; i++) {
        const wbox *B = &s->b[i];
        if (B->rank != fr) continue;
        ck_boxrow *R = &rows[n++];
        snprintf(R->tensor, sizeof R->tensor, "%s", B->name);
        memcpy(&R->k, &B->k, sizeof B->k);
        memcpy(R->offset, B->off, sizeof R->offset);
        memcpy(R->shape, B->shp, sizeof R->shape);
        memcpy(&R->checksum, &B->checksum, sizeof R->checksum);
        memcpy(&R->tile_rows, &B->tile_rows, sizeof R->tile_rows);
        memcpy(&R->tile_cols, &B->tile_cols, sizeof R->tile_cols);
        memcpy(&R->ntiles, &B->ntiles, sizeof R->ntiles);
        memcpy(&R->tiles_checksum, &B->tiles_checksum, sizeof R->tiles_checksum);
    }
    qsort(rows, (size_t)n, sizeof *rows, ck_boxrow_cmp);
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
static void number_boxes(ckpt_save *s) {
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
static mp_code write_rank_files(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    ck_h5_init();
    if (s->nb == 0) return MP_OK;
    number_boxes(s);
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

/* ---------------------------------------------------------------------------------- exchange */

static void put_i64(ck_buf *b, int64_t v) { ck_buf_put(b, &v, sizeof v); }
static void put_str(ck_buf *b, const char *s) { int64_t n = (int64_t)strlen(s); put_i64(b, n); ck_buf_put(b, s, (size_t)n); }

/* This process's box list: the recorded world size, then per box its names, file rank, shapes,
 * checksums and tile geometry (not the tile array, which stays in the rank file). */
static void serialize(const ckpt_save *s, ck_buf *b) {
    put_i64(b, s->wsize);
    put_i64(b, s->nb);
    for (int i = 0; i < s->nb; i++) {
        const wbox *B = &s->b[i];
        put_str(b, B->name);
        put_i64(b, B->k);
        put_i64(b, B->dt);
        put_i64(b, B->ndim);
        put_i64(b, B->rank);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->gshape[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->off[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->shp[d]);
        put_i64(b, (int64_t)B->checksum);
        put_i64(b, B->tile_rows);
        put_i64(b, B->tile_cols);
        put_i64(b, B->ntiles);
        put_i64(b, (int64_t)B->tiles_checksum);
    }
    put_i64(b, s->nfsums);
    for (int i = 0; i < s->nfsums; i++) {
        put_i64(b, s->fsums[i][0]);
        put_i64(b, s->fsums[i][1]);
    }
}

typedef struct { const char *p; size_t n, at; int bad; } rd_t;

static void get(rd_t *r, void *v, size_t n) {
    if (r->bad || r->at + n > r->n) { r->bad = 1; memset(v, 0, n); return; }
    memcpy(v, r->p + r->at, n);
    r->at += n;
}

static int64_t get_i64(rd_t *r) { int64_t v; get(r, &v, sizeof v); return v; }

/* Reads a string into buf (cap bytes); a longer or malformed one marks r bad. */
static void get_str(rd_t *r, char *buf, size_t cap) {
    int64_t n = get_i64(r);
    buf[0] = '\0';
    if (r->bad || n < 0 || (size_t)n > r->n - r->at || (size_t)n >= cap) { r->bad = 1; return; }
    get(r, buf, (size_t)n);
    buf[n] = '\0';
}

/* Reads the (file rank, /boxes checksum) pairs at the end of a list into fsum[rank] (ranks below
 * wsize); 0 when malformed. */
static int get_fsums(rd_t *r, int64_t wsize, uint64_t *fsum) {
    int64_t nf = get_i64(r);
    if (nf < 0) return 0;
    for (int64_t i = 0; i < nf && !r->bad; i++) {
        int64_t fr = get_i64(r), h = get_i64(r);
        if (fr < 0 || fr >= wsize) return 0;
        fsum[fr] = (uint64_t)h;
    }
    return !r->bad;
}

/* Appends the boxes that process `sender` serialized to *all (file ranks kept, sender recorded), its
 * files' /boxes checksums to fsum (by file rank, for ranks below rank 0's world size rank0_wsize) and
 * sets *wsize to the world size it records. Returns 0 on a malformed list (lengths, dims or a tile
 * geometry that ckpt_tile_geometry does not give). */
static int deserialize(const char *p, size_t n, int sender, wbox **all, int *nall, int *cap, int64_t *wsize,
                       int64_t rank0_wsize, uint64_t *fsum) {
    rd_t r = {p, n, 0, 0};
    *wsize = get_i64(&r);
    int64_t nb = get_i64(&r);
    if (nb < 0) return 0;
    char name[CKPT_NAME_MAX + 1];
    for (int64_t i = 0; i < nb && !r.bad; i++) {
        if (*nall == *cap) {
            int c = *cap * 2 + 64;
            *all = mp_realloc(*all, sizeof **all * (size_t)*cap, sizeof **all * (size_t)c, MP_MEM_OTHER);
            *cap = c;
        }
        wbox *B = &(*all)[*nall];
        memset(B, 0, sizeof *B);
        get_str(&r, name, sizeof name);
        int64_t k = get_i64(&r);
        if (k < 0 || k > INT32_MAX) { r.bad = 1; break; }
        B->k = (int)k;
        B->dt = (mp_dtype)get_i64(&r);
        B->ndim = (int)get_i64(&r);
        B->rank = (int)get_i64(&r);
        B->sender = sender;
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->gshape[d] = get_i64(&r);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->off[d] = get_i64(&r);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->shp[d] = get_i64(&r);
        B->checksum = (uint64_t)get_i64(&r);
        B->tile_rows = get_i64(&r);
        B->tile_cols = get_i64(&r);
        B->ntiles = get_i64(&r);
        B->tiles_checksum = (uint64_t)get_i64(&r);
        if (r.bad || B->ndim < 1 || B->ndim > CKPT_MAX_DIMS || (B->dt != MP_F32 && B->dt != MP_BF16 && B->dt != MP_I32))
            { r.bad = 1; break; }
        for (int d = 0; d < CKPT_MAX_DIMS; d++)
            if (B->shp[d] <= 0) r.bad = 1;
        if (r.bad) break;
        int64_t tr, tc;
        ckpt_tile_geometry(mp_dtype_size(B->dt), B->ndim, B->shp, &tr, &tc);
        if (tr != B->tile_rows || tc != B->tile_cols || B->ntiles != ck_tile_count(B->ndim, B->shp, tr, tc))
            { r.bad = 1; break; }
        B->name = mp_strdup(name);
        (*nall)++;
    }
    if (r.bad || !get_fsums(&r, rank0_wsize, fsum)) return 0;
    return !r.bad && r.at == r.n;
}

/* Every process's box list to rank 0, and to no other rank: the lengths by one gather of an int64 per
 * process, then the lists by one gatherv per CK_GATHER_RANKS consecutive ranks (core/comm.h; a rank
 * sends nothing in the rounds of other ranks), deserialized round by round. So a rank other than 0
 * receives nothing and rank 0 the sum of the lists. On rank 0, *all gets every box (in rank order),
 * fsum[file rank] each rank file's /boxes checksum, *bad_rank is the first process whose list is malformed and *bad_world the first that records a
 * world size other than rank 0's (both -1 if none); the other ranks return an empty list. */
static void exchange(ckpt_save *s, wbox **all, int *nall, uint64_t *fsum, int *bad_rank, int *bad_world) {
    mp_comm *w = s->world;
    ck_buf mine = {0};
    serialize(s, &mine);
    int root = w->rank == 0;
    int64_t n = (int64_t)mine.n;
    int64_t *len = root ? mp_xmalloc(sizeof(int64_t) * (size_t)w->size) : NULL;
    w->ops->gather(w, len, &n, sizeof n, 0);
    int cap = 0;
    *nall = 0;
    *all = NULL;
    *bad_rank = *bad_world = -1;
    const int per = ck_round_ranks(CK_GATHER_RANKS);   /* rank 0 holds one round's lists (70B at tp 8: ~150 MiB) */
    for (int r0 = 0; r0 < w->size; r0 += per) {
        int r1 = w->size - r0 < per ? w->size : r0 + per;
        char *lists = ck_gather_round(w, mine.p, n, len, r0, r1);
        size_t at = 0;
        for (int r = r0; root && r < r1; r++) {
            int64_t ws = 0;
            if (!deserialize(lists + at, (size_t)len[r], r, all, nall, &cap, &ws, s->wsize, fsum)) {
                if (*bad_rank < 0) *bad_rank = r;
            } else if (ws != s->wsize && *bad_world < 0) {
                *bad_world = r;
            }
            at += (size_t)len[r];
        }
        free(lists);
    }
    free(len);
    free(mine.p);
}

/* ------------------------------------------------------------------------------- rank 0 */

static int cmp_wbox(const void *a, const void *b) {
    const wbox *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if ((c = ck_off_cmp(x->off, y->off))) return c;
    if (x->rank != y->rank) return x->rank - y->rank;
    return x->sender - y->sender;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The file table of the layout: the file ranks that have boxes in all[0, nall), each in order, into L->f
 * (L->nfiles of them); file_of[r] gets rank r's index in it (-1: none). Checks that every file rank is in
 * the world and written by exactly one process; L->f is complete even when that check fails. */
static mp_code layout_files(const ckpt_save *s, const wbox *all, int nall, const uint64_t *fsum, ck_layout *L,
                            int *file_of, mp_err *e) {
    mp_code rc = MP_OK;
    int *owner = mp_xmalloc(sizeof(int) * (size_t)s->wsize);
    for (int r = 0; r < s->wsize; r++) owner[r] = file_of[r] = -1;
    for (int i = 0; i < nall && rc == MP_OK; i++) {
        int fr = all[i].rank;
        if (fr < 0 || fr >= s->wsize) {
            rc = mp_err_set(e, MP_EINTERNAL, "tensor %s: process %d sent file rank %d outside the world of %d",
                            all[i].name, all[i].sender, fr, s->wsize);
        } else if (owner[fr] < 0) {
            owner[fr] = all[i].sender;
        } else if (owner[fr] != all[i].sender) {
            int a = owner[fr] < all[i].sender ? owner[fr] : all[i].sender;
            int b = owner[fr] < all[i].sender ? all[i].sender : owner[fr];
            rc = mp_err_set(e, MP_EINPUT, "rank file rank_%05d.h5 is written by two processes (%d and %d; tensor %s)",
                            fr, a, b, all[i].name);
        }
    }
    L->f = mp_xcalloc(sizeof *L->f * (size_t)(s->wsize + 1));
    for (int r = 0; r < s->wsize; r++)
        if (owner[r] >= 0) {
            file_of[r] = L->nfiles;
            ck_file *F = &L->f[L->nfiles++];
            F->rank = r;
            snprintf(F->name, sizeof F->name, "rank_%05d.h5", r);
            F->boxes_checksum = fsum[r];
        }
    free(owner);
    return rc;
}

/* Refuses (MP_EINPUT) box W of a tensor whose previous box P has another dtype or global shape, naming
 * both rank files; MP_OK when they agree. */
static mp_code same_tensor(const wbox *P, const wbox *W, mp_err *e) {
    int same = P->dt == W->dt && P->ndim == W->ndim;
    for (int d = 0; same && d < CKPT_MAX_DIMS; d++) same = P->gshape[d] == W->gshape[d];
    if (same) return MP_OK;
    char a[256], b[256];
    int64_t z[CKPT_MAX_DIMS] = {0};
    ck_box_str(a, sizeof a, P->ndim, z, P->gshape);
    ck_box_str(b, sizeof b, W->ndim, z, W->gshape);
    return mp_err_set(e, MP_EINPUT, "tensor %s: rank_%05d.h5 has it as %s %s, rank_%05d.h5 as %s %s", W->name,
                      P->rank, mp_dtype_name(P->dt), a, W->rank, mp_dtype_name(W->dt), b);
}

/* The tensor and box tables of the layout from all[0, nall) (sorted by name, then offset): one tensor
 * per name, its boxes in order, each counted in its file's entry (file_of: layout_files). The boxes of
 * one tensor must agree on its dtype and global shape. */
static mp_code layout_boxes(const wbox *all, int nall, const int *file_of, ck_layout *L, mp_err *e) {
    L->t = mp_xcalloc(sizeof *L->t * (size_t)(nall + 1));
    L->b = mp_xcalloc(sizeof *L->b * (size_t)(nall + 1));
    L->nboxes = nall;
    for (int i = 0; i < nall; i++) {
        const wbox *W = &all[i];
        if (i == 0 || strcmp(W->name, all[i - 1].name) != 0) {
            ck_tensor *T = &L->t[L->ntensors++];
            snprintf(T->name, sizeof T->name, "%s", W->name);
            T->dtype = W->dt;
            T->ndim = W->ndim;
            memcpy(T->shape, W->gshape, sizeof T->shape);
            T->box_first = i;
        } else {
            MP_TRY(same_tensor(&all[i - 1], W, e));
        }
        ck_tensor *T = &L->t[L->ntensors - 1];
        T->nboxes++;
        ck_box *B = &L->b[i];
        B->tensor = L->ntensors - 1;
        B->file = file_of[W->rank];
        assert(B->file >= 0);
        B->k = W->k;   /* the layout has no path pool: its paths are wbox_path's, derived from k */
        memcpy(B->off, W->off, sizeof B->off);
        memcpy(B->shp, W->shp, sizeof B->shp);
        B->checksum = W->checksum;
        B->slab_rows = B->slab_first = B->nslabs = 0;
        B->tile_rows = W->tile_rows;
        B->tile_cols = W->tile_cols;
        B->ntiles = W->ntiles;
        B->tiles_checksum = W->tiles_checksum;
        L->f[B->file].nboxes++;
        L->f[B->file].bytes += (int64_t)mp_dtype_size(W->dt) * ck_volume(W->ndim, W->shp);
    }
    return MP_OK;
}

/* Copies rank 0's metadata into L, sorted by key (copies: L owns them). */
static void layout_meta(const ckpt_save *s, ck_layout *L) {
    L->keys = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    L->vals = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    char **pairs = mp_xmalloc(sizeof(char *) * 2 * (size_t)(s->nmeta + 1));
    for (int i = 0; i < s->nmeta; i++) { pairs[2 * i] = s->keys[i]; pairs[2 * i + 1] = s->vals[i]; }
    qsort(pairs, (size_t)s->nmeta, 2 * sizeof(char *), cmp_cstr);
    for (int i = 0; i < s->nmeta; i++) {
        L->keys[i] = mp_strdup(pairs[2 * i]);
        L->vals[i] = mp_strdup(pairs[2 * i + 1]);
    }
    L->nmeta = s->nmeta;
    free(pairs);
}

/* Refuses (MP_EINPUT) a tensor name that is a '/'-prefix of another in L's sorted tensor table:
 * view/<a> cannot be a dataset and a group. */
static mp_code check_name_prefixes(const ck_layout *L, mp_err *e) {
    for (int i = 0; i < L->ntensors; i++) {
        char pre[CKPT_NAME_MAX + 2];
        snprintf(pre, sizeof pre, "%s/", L->t[i].name);
        size_t n = strlen(pre);
        int lo = i + 1, hi = L->ntensors;
        while (lo < hi) {
            int m = lo + (hi - lo) / 2;
            if (strcmp(L->t[m].name, pre) < 0) lo = m + 1; else hi = m;
        }
        if (lo < L->ntensors && strncmp(L->t[lo].name, pre, n) == 0)
            return mp_err_set(e, MP_EINPUT, "tensor names %s and %s: a name may not be a '/'-prefix of another",
                              L->t[i].name, L->t[lo].name);
    }
    return MP_OK;
}

/* Builds the format-v2 layout from all boxes (sorted here) and rank 0's metadata; checks that every
 * file rank is in the recorded world and written by one process only, the names, and exact coverage. */
static mp_code build_layout(ckpt_save *s, wbox *all, int nall, const uint64_t *fsum, ck_layout *L, mp_err *e) {
    memset(L, 0, sizeof *L);
    if (nall > 1) qsort(all, (size_t)nall, sizeof *all, cmp_wbox);
    L->version = s->o.format_version;
    L->step = s->step;
    L->world = s->wsize;
    L->zstd_level = s->o.zstd_level;
    L->nslabs = 0;
    L->slabs = mp_xmalloc(sizeof(uint64_t));   /* v2 has no slab table */
    int *file_of = mp_xmalloc(sizeof(int) * (size_t)s->wsize);
    mp_code rc = layout_files(s, all, nall, fsum, L, file_of, e);
    if (rc == MP_OK) rc = layout_boxes(all, nall, file_of, L, e);
    free(file_of);
    layout_meta(s, L);
    if (rc != MP_OK) return rc;
    MP_TRY(check_name_prefixes(L, e));
    ck_layout_index(L);
    if (!s->o.unchecked_coverage)
        for (int t = 0; t < L->ntensors; t++) MP_TRY(ck_layout_check_tensor(L, t, 1, e));
    return MP_OK;
}

/* Dir mode, rank 0, index written: moves DIR.partial to DIR (swapping with an existing DIR when
 * replacing, then removing the old tree). *renamed = 1 once the .partial name no longer holds the
 * new checkpoint. */
static mp_code finish_dir(ckpt_save *s, int *renamed, mp_err *e) {
    if (!mp_fs_exists(s->final)) {
        MP_TRY(mp_fs_rename_durable(s->partial, s->final, s->root, e));
        *renamed = 1;
        ck_crash_point("after_rename", s->rank);
        return MP_OK;
    }
    if (!s->replace)
        return mp_err_set(e, MP_EINPUT, "checkpoint directory %s already exists (use --force to replace it)", s->final);
    char *old = NULL;
    MP_TRY(mp_fs_swap_dirs(s->partial, s->final, s->root, &old, e));
    *renamed = 1;
    ck_crash_point("after_rename", s->rank);
    mp_err re;
    if (mp_fs_remove_tree(old, &re) != MP_OK)
        mp_warn("ckpt: %s replaced, but removing its old content at %s failed: %s", s->final, old, re.msg);
    free(old);
    return MP_OK;
}

/* Rank 0's part of the commit after the exchange. Every step is durable before the next one starts
 * (docs/FORMAT.md, "Commit protocol"): the ROOT and step_N.partial entries were fsynced at begin (and
 * ROOT's parent when ROOT was created), the rank files and step_N.partial by their writers; then
 *   1. view.h5 (unless opts.view_background) and index.h5 written and fsynced, 2. step_N.partial
 *   fsynced (index.h5's directory entry), 3. rename to step_N, ROOT fsynced, 4. latest.tmp written and fsynced, 5. rename to latest, ROOT
 *   fsynced, 6. retention (index.h5 of an old checkpoint removed and its directory fsynced first).
 * A crash between any two leaves either the previous checkpoint or the new one as the newest complete.
 * With opts.view_background, once the directory is renamed (and after retention) the layout goes to
 * ck_view_bg_start (ckpt/view_bg.c), which writes view.h5 on a background thread. */
static mp_code commit_rank0(ckpt_save *s, wbox *all, int nall, const uint64_t *fsum, mp_err *e) {
    ck_layout L;
    mp_code rc = build_layout(s, all, nall, fsum, &L, e);
    int renamed = 0, bg = s->o.view_background;
    if (rc == MP_OK) {
        ck_crash_point("before_index", s->rank);
        char *vp = ck_fmt("%s/%s", s->partial, CK_VIEW_FILE), *ip = ck_fmt("%s/index.h5", s->partial);
        if (!bg) rc = ck_view_write(&L, vp, e);   /* derived data, before the index that links to it */
        if (rc == MP_OK) rc = ck_index_write(&L, ip, e);
        free(vp);
        if (rc == MP_OK) rc = mp_fs_fsync_path(s->partial, 1, e);
        free(ip);
    }
    if (!bg) ck_layout_free(&L);
    if (rc == MP_OK) ck_crash_point("after_index", s->rank);
    if (rc == MP_OK && s->dir_mode) {
        rc = finish_dir(s, &renamed, e);
    } else if (rc == MP_OK) {
        rc = mp_fs_rename_durable(s->partial, s->final, s->root, e);
        renamed = rc == MP_OK;
        if (rc == MP_OK) {
            ck_crash_point("after_rename", s->rank);
            char *txt = ck_fmt("%s\n", s->dirname);
            rc = mp_fs_write_text_durable(s->root, "latest", txt, e);
            free(txt);
            if (rc != MP_OK)
                mp_err_wrap(e, "checkpoint %s is complete, but updating %s/latest failed", s->final, s->root);
        }
        if (rc == MP_OK) {
            ck_crash_point("after_latest", s->rank);
            if (s->o.keep > 0) {
                mp_err re;
                int removed = 0;
                if (ckpt_retain(s->root, s->o.keep, &removed, &re) != MP_OK)
                    mp_warn("ckpt: retention (keep %d) in %s failed: %s", s->o.keep, s->root, re.msg);
            }
        }
    }
    if (rc != MP_OK && !renamed) {
        mp_err ce;
        if (mp_fs_remove_tree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
    }
    if (bg && renamed) ck_view_bg_start(&L, s->final);   /* published: its views, off the critical path */
    else if (bg) ck_layout_free(&L);
    return rc;
}

/* Frees box records (names; never the data or fill contexts, which the caller owns). */
static void free_boxes(wbox *b, int n) {
    for (int i = 0; i < n; i++) free(b[i].name);
    free(b);
}

/* The collective commit (after this rank's files are written or failed). Sets the final result. */
static mp_code commit(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    mp_comm *w = s->world;
    mp_code rc = agree(w, s->lrc, &s->lerr, e);
    if (rc != MP_OK) {
        if (s->rank == 0) {
            mp_err ce;
            if (mp_fs_remove_tree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
        }
    } else {
        ck_crash_point("after_rank_files", s->rank);
        wbox *all = NULL;
        int nall = 0, bad = -1, bad_world = -1;
        uint64_t *fsum = s->rank == 0 ? mp_xcalloc(sizeof(uint64_t) * (size_t)s->wsize) : NULL;
        exchange(s, &all, &nall, fsum, &bad, &bad_world);
        mp_code r0 = MP_OK;
        mp_err e0;
        if (s->rank == 0) {
            if (bad >= 0 || bad_world >= 0) {
                if (bad >= 0) r0 = mp_err_set(&e0, MP_EINTERNAL, "malformed box list from rank %d", bad);
                else
                    r0 = mp_err_set(&e0, MP_EINPUT, "rank %d records a world size other than rank 0's (%d)", bad_world,
                                    s->wsize);
                mp_err ce;
                if (mp_fs_remove_tree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
            } else {
                r0 = commit_rank0(s, all, nall, fsum, &e0);
            }
        }
        free(fsum);
        free_boxes(all, nall);
        rc = agree(w, r0, &e0, e);
    }
    if (rc != MP_OK) mp_err_wrap(e, "saving checkpoint step %lld %s", (long long)s->step, s->where);
    s->st.commit_s = ck_now() - t0;
    s->frc = rc;
    if (rc != MP_OK && e) s->ferr = *e;
    else mp_err_clear(&s->ferr);
    s->state = ST_DONE;
    set_inflight(NULL, s);
    return rc;
}

/* --------------------------------------------------------------------------------- public */

mp_code ckpt_save_commit(ckpt_save *s, ckpt_stats *st, mp_err *e) {
    assert(s);
    if (s->state != ST_OPEN) return ckpt_save_wait(s, st, e);
    double t0 = ck_now();
    mp_err we;
    if (ck_group_wanted(s)) {   /* files of several ranks: the group transfer (ckpt/group.c), collective */
        mp_code rc = ck_group_write(s, write_rank_files, &we);
        remember(s, rc, &we);
    } else if (s->lrc == MP_OK) {
        mp_code rc = write_rank_files(s, &we);
        remember(s, rc, &we);
    }
    mp_code rc = commit(s, e);
    s->st.stall_s += ck_now() - t0;
    if (st) *st = s->st;
    return rc;
}

static void *writer_main(void *arg) {
    ckpt_save *s = arg;
    mp_err_clear(&s->werr);
    s->wrc = write_rank_files(s, &s->werr);
    atomic_store(&s->written, 1);
    return NULL;
}

/* Async saves take pointer boxes of the process's own rank only. A refused save is still started
 * (with nothing to write and the error remembered), so that poll / wait on every rank agree on the
 * failure. */
mp_code ckpt_save_start(ckpt_save *s, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    if (s->state != ST_OPEN) return mp_err_set(e, MP_EINTERNAL, "ckpt_save_start: save already started");
    mp_code rrc = MP_OK;
    mp_err re;
    for (int i = 0; i < s->nb && rrc == MP_OK; i++)
        if (!s->b[i].data || s->b[i].rank != s->rank)
            rrc = mp_err_set(&re, MP_EINPUT,
                             "tensor %s: an asynchronous save (ckpt_save_start) takes only ckpt_save_add boxes of the "
                             "process's own rank, not fill boxes or boxes for rank_%05d.h5: use ckpt_save_commit",
                             s->b[i].name, s->b[i].rank);
    if (rrc == MP_OK && ck_group_wanted(s))
        rrc = mp_err_set(&re, MP_EINPUT,
                         "an asynchronous save (ckpt_save_start) writes one file per rank: files of several ranks "
                         "(ranks_per_file %d) move data between ranks on the caller's thread, use ckpt_save_commit",
                         s->o.ranks_per_file);
    if (rrc != MP_OK) remember(s, rrc, &re);
    s->state = ST_STARTED;
    if (s->lrc != MP_OK) {
        atomic_store(&s->written, 1);   /* nothing to write: the commit reports the error */
    } else if (pthread_create(&s->th, NULL, writer_main, s) != 0) {
        mp_err_set(&s->werr, MP_EIO, "cannot start the checkpoint writer thread");
        s->wrc = MP_EIO;
        atomic_store(&s->written, 1);
    } else {
        s->thread_live = 1;
    }
    set_inflight(s, NULL);
    s->st.stall_s += ck_now() - t0;
    if (rrc != MP_OK && e) *e = re;
    return rrc;
}

static void join_writer(ckpt_save *s) {
    if (!s->thread_live) return;
    pthread_join(s->th, NULL);
    s->thread_live = 0;
    remember(s, s->wrc, &s->werr);
}

mp_code ckpt_save_poll(ckpt_save *s, int *done, ckpt_stats *st, mp_err *e) {
    assert(s && done);
    if (s->state == ST_DONE) {
        *done = 1;
        if (st) *st = s->st;
        if (s->frc != MP_OK && e) *e = s->ferr;
        return s->frc;
    }
    if (s->state == ST_OPEN) return mp_err_set(e, MP_EINTERNAL, "ckpt_save_poll: save not started");
    double t0 = ck_now();
    float busy = atomic_load(&s->written) ? 0.0f : 1.0f;
    s->world->ops->all_reduce(s->world, &busy, 1, MP_F32, 1);
    *done = 0;
    mp_code rc = MP_OK;
    if (busy == 0.0f) {
        join_writer(s);
        rc = commit(s, e);
        *done = 1;
    }
    s->st.stall_s += ck_now() - t0;
    if (*done && st) *st = s->st;
    return rc;
}

mp_code ckpt_save_wait(ckpt_save *s, ckpt_stats *st, mp_err *e) {
    assert(s);
    if (s->state == ST_OPEN) return ckpt_save_commit(s, st, e);
    double t0 = ck_now();
    if (s->state != ST_DONE) join_writer(s);
    s->st.stall_s += ck_now() - t0;
    int done = 0;
    mp_code rc = ckpt_save_poll(s, &done, st, e);
    assert(done);
    return rc;
}

void ckpt_save_free(ckpt_save *s) {
    if (!s) return;
    join_writer(s);
    set_inflight(NULL, s);
    free_boxes(s->b, s->nb);
    map_free(s);
    for (int i = 0; i < s->nmeta; i++) { free(s->keys[i]); free(s->vals[i]); }
    free(s->keys);
    free(s->vals);
    free(s->root);
    free(s->dirname);
    free(s->final);
    free(s->partial);
    free(s->where);
    free(s->fsums);
    free(s);
}

/* ------------------------------------------------------------- scale simulation (bench_scale only) */

char *ckpt_save_list(const ckpt_save *s, size_t *n) {
    ck_buf b = {0};
    serialize(s, &b);
    *n = b.n;
    return b.p;
}

mp_code ckpt_save_commit_plan(ckpt_save *s, mp_err *e) {
    assert(s && s->state == ST_OPEN);
    number_boxes(s);   /* as write_rank_files would: the datasets' k by offset order */
    return commit(s, e);
}
