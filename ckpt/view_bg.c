/*
 * ckpt/view_bg.c — writing a published checkpoint's view.h5 on a background thread (issue 23).
 *
 * view.h5 is derived data (docs/FORMAT.md, "/view/<name>"): meshpoint's reader never opens it. At
 * cluster scale it is the bulk of rank 0's commit (one virtual-dataset mapping per box: ~50 s of a
 * 70B / 4,096-rank save, docs/BENCH_SCALE.md), and every rank waits for that commit. With
 * ckpt_save_opts.view_background the commit publishes the checkpoint without view.h5 (index.h5, the
 * rename, `latest`, retention) and hands its layout to ck_view_bg_start, which writes view.h5 on a
 * detached thread the way repair-views does (ck_views_replace: view.h5.repair, fsync, rename, fsync of
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
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/log.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct view_job {
    ck_layout L;     /* owned: freed by the thread */
    char *dir;       /* the published checkpoint directory */
} view_job;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static atomic_int g_running;          /* a view write is in flight (set before start, cleared last) */
static mp_code g_rc = MP_OK;          /* the last finished write's result, its message and its time */
static mp_err g_err;
static double g_secs;
static _Thread_local int t_view_thread;

/* Writes the job's view.h5, records the result, wakes the waiters. Frees the job. */
static void *view_main(void *arg) {
    view_job *j = arg;
    t_view_thread = 1;
    double t0 = ck_now();
    mp_err e;
    mp_err_clear(&e);
    mp_code rc = ck_fail_point("view_write", 0)   /* test hook: MP_CKPT_FAIL_AT=view_write */
                     ? mp_err_set(&e, MP_EIO, "MP_CKPT_FAIL_AT=view_write: a simulated failure")
                     : ck_views_replace(&j->L, j->dir, CK_VIEW_FILE, ck_view_write, "during_view", &e);
    if (rc != MP_OK)
        mp_warn("ckpt: checkpoint %s is complete and loadable, but writing its views (%s) failed: %s; run "
                "meshpoint ckpt repair-views %s", j->dir, CK_VIEW_FILE, e.msg, j->dir);
    ck_layout_free(&j->L);
    free(j->dir);
    free(j);
    pthread_mutex_lock(&g_mu);
    g_rc = rc;
    g_err = e;
    g_secs = ck_now() - t0;
    atomic_store(&g_running, 0);   /* after every HDF5 call of this thread */
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

void ck_view_bg_wait(void) {
    if (!atomic_load(&g_running) || t_view_thread) return;
    pthread_mutex_lock(&g_mu);
    while (atomic_load(&g_running)) pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

void ck_view_bg_start(ck_layout *L, const char *dir) {
    ck_view_bg_wait();
    view_job *j = mp_xcalloc(sizeof *j);
    j->L = *L;
    memset(L, 0, sizeof *L);
    j->dir = mp_strdup(dir);
    atomic_store(&g_running, 1);
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

mp_code ckpt_views_wait(double *write_s, mp_err *e) {
    ck_view_bg_wait();
    pthread_mutex_lock(&g_mu);
    mp_code rc = g_rc;
    if (rc != MP_OK && e) *e = g_err;
    if (write_s) *write_s = g_secs;
    g_rc = MP_OK;
    g_secs = 0;
    pthread_mutex_unlock(&g_mu);
    return rc;
}
