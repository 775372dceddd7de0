/*
 * ckpt/view_bg.c — writing a published checkpoint's view.h5 on a background thread.
 *
 * view.h5 is derived data (docs/FORMAT.md, "/view/<name>"): meshpoint's reader never opens it. At
 * cluster scale it is the bulk of rank 0's commit (one virtual-dataset mapping per box: ~50 s of a
 * 70B / 4,096-rank save, docs/BENCH_SCALE.md), and every rank waits for that commit. With
 * ckpt_save_opts.view_background the commit publishes the checkpoint without view.h5 (index.h5, the
 * rename, `latest`, retention) and hands its layout to ck_view_bg_start, which writes view.h5 on a
 * detached thread the way repair-views does (ck_views_replace: view.h5.tmp.<pid>, fsync, rename, fsync of
 * the directory), so a view.h5 under its final name is always complete. A failure is a warning naming
 * the directory and `meshpoint ckpt repair-views DIR`: the checkpoint itself is complete.
 *
 * HDF5 is not thread-safe here: it is used by one thread at a time. Every library entry point that
 * uses HDF5 starts with ck_h5_init, which calls ck_view_bg_wait (except on the view thread itself), so
 * any later HDF5 use of the process (the next save's begin, its async writer thread, ckpt_open, the
 * planned open, verify, repair) first waits for the view write. Retention (ckpt_retain) and
 * ckpt_set_aside wait too, so no step directory is removed or moved while its view is being written.
 * One view write at most is in flight per process (the next begins only after a later commit, which
 * waited). Training calls ckpt_views_wait before it releases the job lock and exits.
 *
 * Healing: a kill or a full disk during that write leaves a published checkpoint whose views
 * are pending (no view.h5; ck_views_pending). ckpt_views_heal_start, called by training once it holds
 * the root's job lock and has resumed, runs the same thread over the root instead of one layout: every
 * complete step directory of the root (ckpt_check_complete: a valid index, its rank files present; never
 * a .partial, never a step directory that is a symbolic link, whose target may not be ours) whose view.h5
 * is absent gets one, by the same steps; only those lacking view.h5 are read at all, so a root of many
 * checkpoints costs a stat each. A view.h5 that exists is never rewritten (under its final name it is
 * complete; a damaged one is verify's and repair-views' business), not even one another process's
 * repair-views published while the heal waited: ck_views_replace serialises a directory's view writers
 * with a flock and the heal writes only if view.h5 is still absent under it. The waits above apply alike.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/log.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct view_job {
    ck_layout L;     /* owned: freed by the thread */
    char *dir;       /* the published checkpoint directory */
    char *root;      /* set instead of L and dir: heal the checkpoints of this root */
} view_job;

/* The process's background view writer: a singleton, on purpose, owned by this file (nothing else
 * touches it; the rest of ckpt/ sees ck_view_bg_start / ck_view_bg_wait, training ckpt_views_wait).
 * Why per process and not state a caller passes in: it exists because HDF5 is used by one thread at a
 * time per process, and every HDF5 user of the process (ck_h5_init, called by every library entry
 * point) must find the one write in flight and wait for it; the commit that starts it returns before
 * it ends, and the caller who collects its result (ckpt_views_wait) holds no save. t_view_thread is the
 * view thread's own mark (ck_view_bg_wait on it returns at once). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int running;   /* a view write is in flight (set before start, cleared last) */
    mp_code rc;           /* the last finished write's result, its message and its time */
    mp_err err;
    double secs;
} g_view = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, MP_OK, {0}, 0};
static _Thread_local int t_view_thread;

/* Writes dir/view.h5 of L (ck_views_replace; fault ckpt_fail_at:view_write); if_absent: only
 * when no other writer published one meanwhile (*wrote says whether this one did). A failure is a
 * warning naming dir and repair-views. On the view thread. */
static mp_code write_view(const ck_layout *L, const char *dir, int if_absent, int *wrote, mp_err *e) {
    *wrote = 0;
    mp_code rc = ck_fail_point("view_write", 0)
                     ? mp_err_set(e, MP_EIO, "fault ckpt_fail_at:view_write: a simulated failure")
                     : ck_views_replace(L, dir, CK_VIEW_FILE, ck_view_write, "during_view", if_absent, wrote, e);
    if (rc != MP_OK)
        mp_warn("ckpt: checkpoint %s is complete and loadable, but writing its views (%s) failed: %s; run "
                "meshpoint ckpt repair-views %s", dir, CK_VIEW_FILE, e->msg, dir);
    return rc;
}

/* Heals step directory dir if its views are pending: a directory (never a link), view.h5 absent (checked
 * first: the common case reads nothing), complete (ckpt_check_complete) and of format v3. Logs a write.
 * On the view thread. */
static mp_code heal_step(const char *dir, mp_err *e) {
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || !ck_views_pending(dir, 3)) return MP_OK;
    char *ip = ck_fmt("%s/index.h5", dir);
    ck_layout L;
    mp_err ie;
    mp_code rc = MP_OK;
    if (ckpt_check_complete(dir, NULL) == MP_OK && ck_index_read(ip, &L, &ie) == MP_OK) {
        if (ck_views_pending(dir, L.version)) {
            double t0 = ck_now();
            int wrote;
            rc = write_view(&L, dir, 1, &wrote, e);
            if (!rc && wrote)
                mp_info("views: wrote the missing %s of %s (its views were pending), %.2f s", CK_VIEW_FILE, dir,
                        ck_now() - t0);
        }
        ck_layout_free(&L);
    }
    free(ip);
    return rc;
}

/* Heals root: every step directory whose views are pending (heal_step) gets view.h5; a failure is warned
 * and the others still run. Returns the first failure. On the view thread. */
static mp_code heal_root(const char *root, mp_err *e) {
    int64_t *steps = NULL;
    int n = 0;
    mp_code first = ck_scan_step_dirs(root, &steps, &n, e);
    if (first) mp_warn("ckpt: writing the pending views of %s: %s", root, e->msg);
    for (int i = 0; i < n; i++) {
        char *dir = ck_fmt("%s/step_%08lld", root, (long long)steps[i]);
        mp_err se;
        mp_code rc = heal_step(dir, first ? &se : e);   /* the first failure's message is the one returned */
        if (!first) first = rc;
        free(dir);
    }
    free(steps);
    return first;
}

/* The thread: writes the job's view.h5 (or heals its root), records the result, wakes the waiters.
 * Frees the job. */
static void *view_main(void *arg) {
    view_job *j = arg;
    t_view_thread = 1;
    double t0 = ck_now();
    mp_err e;
    mp_err_clear(&e);
    int wrote;
    mp_code rc = j->root ? heal_root(j->root, &e) : write_view(&j->L, j->dir, 0, &wrote, &e);
    ck_layout_free(&j->L);
    free(j->dir);
    free(j->root);
    free(j);
    pthread_mutex_lock(&g_view.mu);
    g_view.rc = rc;
    g_view.err = e;
    g_view.secs = ck_now() - t0;
    atomic_store(&g_view.running, 0);   /* after every HDF5 call of this thread */
    pthread_cond_broadcast(&g_view.cv);
    pthread_mutex_unlock(&g_view.mu);
    return NULL;
}

void ck_view_bg_wait(void) {
    if (!atomic_load(&g_view.running) || t_view_thread) return;
    pthread_mutex_lock(&g_view.mu);
    while (atomic_load(&g_view.running)) pthread_cond_wait(&g_view.cv, &g_view.mu);
    pthread_mutex_unlock(&g_view.mu);
}

/* Starts job j on a detached thread (after any write in flight); without a thread, runs it here. */
static void start_job(view_job *j) {
    ck_view_bg_wait();
    atomic_store(&g_view.running, 1);
    pthread_attr_t at;
    pthread_t th;
    int ok = 0;
    if (pthread_attr_init(&at) == 0) {
        ok = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 && pthread_create(&th, &at, view_main, j) == 0;
        pthread_attr_destroy(&at);
    }
    if (ok) return;
    /* no thread: write it here; the thread-local flag keeps ck_h5_init from waiting for ourselves */
    t_view_thread = 1;
    view_main(j);
    t_view_thread = 0;
}

void ck_view_bg_start(ck_layout *L, const char *dir) {
    view_job *j = mp_xcalloc(sizeof *j);
    j->L = *L;
    memset(L, 0, sizeof *L);
    j->dir = mp_strdup(dir);
    start_job(j);
}

void ckpt_views_heal_start(const char *root) {
    view_job *j = mp_xcalloc(sizeof *j);
    j->root = mp_strdup(root);
    start_job(j);
}

mp_code ckpt_views_wait(double *write_s, mp_err *e) {
    ck_view_bg_wait();
    pthread_mutex_lock(&g_view.mu);
    mp_code rc = g_view.rc;
    if (rc != MP_OK && e) *e = g_view.err;
    if (write_s) *write_s = g_view.secs;
    g_view.rc = MP_OK;
    g_view.secs = 0;
    pthread_mutex_unlock(&g_view.mu);
    return rc;
}
