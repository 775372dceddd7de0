/*
 * ckpt/writer_async.c — the asynchronous save: ckpt_save_start writes this process's rank files on a
 * background pthread while training goes on; ckpt_save_poll / ckpt_save_wait commit once every rank's
 * files are written.
 *
 * The writer thread does no MPI: it only runs ck_wr_write_rank_files (HDF5 and the disk) and records
 * its result in the save's thread stage, then sets s->written. poll asks every rank whether its files
 * are written (one all-reduce, on the caller's thread) and, once all are, joins the thread (its result
 * joins the save's local stage) and runs the collective commit (ck_wr_commit). So a rank never waits
 * in the commit for a slow writer of another rank while it could train.
 *
 * One asynchronous save at most is in flight per process (g_inflight, below): ckpt_save_begin first
 * waits for (and commits) the previous one.
 */
#include "ckpt/writer_internal.h"
#include "core/log.h"
#include <assert.h>

/* The process's started, uncommitted asynchronous save: a singleton, on purpose, owned by this file
 * (only ck_wr_inflight_get / ck_wr_inflight_set touch it). Why per process and not a context passed
 * in: the writer thread uses HDF5, which this build uses from one thread at a time per process (see
 * ckpt/view_bg.c), so a new save must first end the previous one's writes, whoever holds its handle;
 * and ckpt_save_begin, the public entry, takes no context (its callers, cli/ and reshard/, run one
 * save at a time per process). A save sets itself at ckpt_save_start and clears itself (only itself)
 * at its commit and at ckpt_save_free. */
static struct {
    pthread_mutex_t mu;
    ckpt_save *save;
} g_inflight = {PTHREAD_MUTEX_INITIALIZER, NULL};

void ck_wr_inflight_set(ckpt_save *s, ckpt_save *expect) {
    pthread_mutex_lock(&g_inflight.mu);
    if (!expect || g_inflight.save == expect) g_inflight.save = s;
    pthread_mutex_unlock(&g_inflight.mu);
}

ckpt_save *ck_wr_inflight_get(void) {
    pthread_mutex_lock(&g_inflight.mu);
    ckpt_save *s = g_inflight.save;
    pthread_mutex_unlock(&g_inflight.mu);
    return s;
}

/* The writer thread: writes s's rank files, records the result in s->thread, then sets s->written. */
static void *writer_main(void *arg) {
    ckpt_save *s = arg;
    mp_err we;
    mp_err_clear(&we);
    ck_stage_set(&s->thread, ck_wr_write_rank_files(s, &we), &we);
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
    if (rrc != MP_OK) ck_stage_set(&s->local, rrc, &re);
    s->state = ST_STARTED;
    if (s->local.rc != MP_OK) {
        atomic_store(&s->written, 1);   /* nothing to write: the commit reports the error */
    } else if (pthread_create(&s->th, NULL, writer_main, s) != 0) {
        mp_err te;
        ck_stage_set(&s->thread, mp_err_set(&te, MP_EIO, "cannot start the checkpoint writer thread"), &te);
        atomic_store(&s->written, 1);
    } else {
        s->thread_live = 1;
    }
    ck_wr_inflight_set(s, NULL);
    s->st.stall_s += ck_now() - t0;
    if (rrc != MP_OK && e) *e = re;
    return rrc;
}

/* Joins the writer thread of s if it runs; its result joins s->local (the stage the commit agrees on). */
void ck_wr_join(ckpt_save *s) {
    if (s->thread_live) {
        pthread_join(s->th, NULL);
        s->thread_live = 0;
    }
    /* also when no thread ran: a writer thread that could not start left its error in the thread stage,
     * and the commit must not go ahead as if the rank files were written */
    if (s->thread.rc != MP_OK) ck_stage_set(&s->local, s->thread.rc, &s->thread.err);
}

mp_code ckpt_save_poll(ckpt_save *s, int *done, ckpt_stats *st, mp_err *e) {
    assert(s && done);
    if (s->state == ST_DONE) {
        *done = 1;
        if (st) *st = s->st;
        if (s->result.rc != MP_OK && e) *e = s->result.err;
        return s->result.rc;
    }
    if (s->state == ST_OPEN) return mp_err_set(e, MP_EINTERNAL, "ckpt_save_poll: save not started");
    double t0 = ck_now();
    float busy = atomic_load(&s->written) ? 0.0f : 1.0f;
    s->world->ops->all_reduce(s->world, &busy, 1, MP_F32, 1);
    *done = 0;
    mp_code rc = MP_OK;
    if (busy == 0.0f) {
        ck_wr_join(s);
        rc = ck_wr_commit(s, e);
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
    if (s->state != ST_DONE) ck_wr_join(s);
    s->st.stall_s += ck_now() - t0;
    int done = 0;
    mp_code rc = ckpt_save_poll(s, &done, st, e);
    assert(done);
    return rc;
}
