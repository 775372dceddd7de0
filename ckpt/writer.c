/*
 * ckpt/writer.c — saving a checkpoint: a save's life, its public API, and the collective commit.
 *
 * A save is a ckpt_save (ckpt/writer_internal.h). ckpt_save_begin / ckpt_save_begin_dir create it on
 * every rank (rank 0 makes a fresh DIR.partial), ckpt_save_add records a pointer box (no copy),
 * ckpt_save_add_fill a fill box, whose data a callback produces band by band while the file is written
 * (ckpt/writer_boxes.c). The rank files are written either by ckpt_save_commit on the caller's thread,
 * or (pointer boxes of the process's own rank only) by a background pthread started with
 * ckpt_save_start (ckpt/writer_async.c); either way by ckpt/writer_files.c. Every MPI-bound step
 * (agreement, layout exchange) runs on the caller's thread, so the communicator never sees a second
 * thread (no MPI_THREAD_MULTIPLE needed). The states: ST_OPEN (boxes may be added), ST_STARTED (an
 * asynchronous write runs), ST_DONE (committed or failed: its result stays with the handle).
 *
 * Commit (every rank, caller's thread; ck_wr_commit here, the exchange and rank 0's part in
 * ckpt/writer_commit.c):
 *   1. agree (mp_comm_agree, core/comm.h): every rank returns the highest code of any rank with the
 *      message of the lowest failing rank ("[rank N] ..."). On failure rank 0 removes the .partial
 *      directory (all rank files are closed by then).
 *   2. exchange: each process's box list goes to rank 0 only (ck_wr_exchange).
 *   3. rank 0: builds the layout, checks it, writes index.h5 and publishes (ck_wr_commit_rank0):
 *        step mode (ckpt_save_begin): renames ROOT/step_N.partial -> step_N, fsyncs ROOT, replaces
 *          ROOT/latest durably, applies retention (then, with opts.view_background, view.h5 is written
 *          on a background thread: ckpt/view_bg.c);
 *        dir mode (ckpt_save_begin_dir): renames DIR.partial -> DIR, or, replacing an existing DIR,
 *          swaps the two atomically (mp_fs_swap_dirs), fsyncs the parent and removes the old tree.
 *   4. agree again on rank 0's result.
 * Earlier checkpoints are never touched (only retention, after a successful commit, removes them, and
 * a dir-mode replace, after the swap).
 *
 * Errors are kept per stage (ck_stage): s->local, the first error of this process on the caller's
 * thread (an add, a meta, ckpt_save_fail, the rank files), which step 1 agrees on; s->thread, the
 * asynchronous writer's; s->result, the agreed result. One rule sets them all: the first error wins.
 */
#include "ckpt/writer_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------------ stage rule */

/* The first error of a stage wins (writer_internal.h). */
mp_code ck_stage_set(ck_stage *st, mp_code rc, const mp_err *e) {
    if (rc != MP_OK && st->rc == MP_OK) {
        st->rc = rc;
        if (e) st->err = *e;
        else mp_err_set(&st->err, rc, "%s", mp_code_name(rc));
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
    ckpt_save *prev = ck_wr_inflight_get();
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

/* The collective commit (after this rank's files are written or failed). Sets the final result. */
mp_code ck_wr_commit(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    mp_comm *w = s->world;
    mp_code rc = agree(w, s->local.rc, &s->local.err, e);
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
        ck_wr_exchange(s, &all, &nall, fsum, &bad, &bad_world);
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
                r0 = ck_wr_commit_rank0(s, all, nall, fsum, &e0);
            }
        }
        free(fsum);
        ck_wr_free_boxes(all, nall);
        rc = agree(w, r0, &e0, e);
    }
    if (rc != MP_OK) mp_err_wrap(e, "saving checkpoint step %lld %s", (long long)s->step, s->where);
    s->st.commit_s = ck_now() - t0;
    ck_stage_set(&s->result, rc, e);
    s->state = ST_DONE;
    ck_wr_inflight_set(NULL, s);
    return rc;
}

/* --------------------------------------------------------------------------------- public */

mp_code ckpt_save_commit(ckpt_save *s, ckpt_stats *st, mp_err *e) {
    assert(s);
    if (s->state != ST_OPEN) return ckpt_save_wait(s, st, e);
    double t0 = ck_now();
    mp_err we;
    if (ck_group_wanted(s)) {   /* files of several ranks: the group transfer (ckpt/group.c), collective */
        mp_code rc = ck_group_write(s, ck_wr_write_rank_files, &we);
        ck_stage_set(&s->local, rc, &we);
    } else if (s->local.rc == MP_OK) {
        mp_code rc = ck_wr_write_rank_files(s, &we);
        ck_stage_set(&s->local, rc, &we);
    }
    mp_code rc = ck_wr_commit(s, e);
    s->st.stall_s += ck_now() - t0;
    if (st) *st = s->st;
    return rc;
}

void ckpt_save_free(ckpt_save *s) {
    if (!s) return;
    ck_wr_join(s);
    ck_wr_inflight_set(NULL, s);
    ck_wr_free_boxes(s->b, s->nb);
    ck_wr_map_free(s);
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

mp_code ckpt_save_commit_plan(ckpt_save *s, mp_err *e) {
    assert(s && s->state == ST_OPEN);
    ck_wr_number_boxes(s);   /* as ck_wr_write_rank_files would: the datasets' k by offset order */
    return ck_wr_commit(s, e);
}
