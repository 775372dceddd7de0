/*
 * ckpt/read_pipe.c — the reader's verification worker.
 *
 * A cold ckpt_read used to alternate: read a piece (the disk busy, the CPU idle), hash it (XXH3,
 * ~0.18 s per GiB: the CPU busy, the disk idle). ckpt/reader.c now cuts each read into pieces of about
 * a MiB and runs a two-stage pipeline: its own thread does every read (pread, or H5Dread: Debian's
 * HDF5 is "thread-safe" through one global lock, so a second HDF5 thread would only take turns, and
 * ckpt/h5util.c keeps the error cause per thread) and every copy into the caller's buffer; this
 * worker only hashes memory. The caller reads piece k+1 while the worker checks piece k, then waits
 * for the verdict on k before k's bytes are copied out or the read returns, so the contract stands:
 * every byte handed to the caller has been checked.
 *
 * The worker is a plain job slot: one job (a function and its argument) at a time, posted and waited
 * for under one mutex with two condition variables. One job in flight is all the pipeline needs
 * (double buffering) and keeps the hand-off simple: no queue, no job outlives a wait. It knows nothing
 * of checkpoints. A wait that finds the job not yet started (the worker not scheduled: on a busy
 * machine the second core may be taken) runs it on the caller's thread instead of sleeping, so the
 * overlap can only help: at worst the read costs what it cost with inline hashing.
 *
 * The thread lives as long as its reader (created on the first read that hands a piece over, joined
 * in ckpt_close); a reader used after fork() in the child gets a new one (ck_worker_usable). If
 * pthread_create fails, jobs run inline: slower, never wrong.
 */
#define _GNU_SOURCE
#include "ckpt/read_pipe.h"
#include "core/alloc.h"
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ck_worker {
    pthread_mutex_t mu;
    pthread_cond_t posted;   /* worker waits: a job was posted, or quit */
    pthread_cond_t done;     /* caller waits: the job has run */
    void (*fn)(void *);
    void *arg;
    int busy;                /* a job posted and not yet waited for */
    int taken;               /* the posted job was started (by the worker, or by the waiting caller) */
    int ran;                 /* the posted job has run */
    int quit;
    int threaded;            /* 0: pthread_create failed, jobs run inline */
    pid_t pid;               /* the process the thread runs in */
    pthread_t th;
};

/* The thread: runs each posted job nobody has started, then signals done; exits on quit once idle. */
static void *worker_main(void *arg) {
    ck_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !(w->busy && !w->taken)) pthread_cond_wait(&w->posted, &w->mu);
        if (w->busy && !w->taken) {
            void (*fn)(void *) = w->fn;
            void *a = w->arg;
            w->taken = 1;
            pthread_mutex_unlock(&w->mu);
            fn(a);
            pthread_mutex_lock(&w->mu);
            w->ran = 1;
            pthread_cond_signal(&w->done);
            continue;
        }
        if (w->quit) break;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ck_worker *ck_worker_new(void) {
    ck_worker *w = mp_xcalloc(sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->posted, NULL);
    pthread_cond_init(&w->done, NULL);
    w->pid = getpid();
    w->threaded = pthread_create(&w->th, NULL, worker_main, w) == 0;
    return w;
}

void ck_worker_free(ck_worker *w) {
    if (!w) return;
    if (w->threaded && ck_worker_usable(w)) {
        ck_worker_wait(w);
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->posted);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    /* in a forked child the thread does not exist: nothing to join, and the mutex may have been
     * copied locked, so it is not destroyed either */
    if (ck_worker_usable(w)) {
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->posted);
        pthread_mutex_destroy(&w->mu);
    }
    free(w);
}

void ck_worker_post(ck_worker *w, void (*fn)(void *), void *arg) {
    assert(w && fn && ck_worker_usable(w));
    assert(!w->busy);   /* one job in flight at most */
    if (!w->threaded) {
        fn(arg);
        w->busy = w->taken = w->ran = 1;
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->fn = fn;
    w->arg = arg;
    w->busy = 1;
    w->taken = 0;
    w->ran = 0;
    pthread_cond_signal(&w->posted);
    pthread_mutex_unlock(&w->mu);
}

static int g_stealing = 1;   /* ck_worker_set_stealing */

void ck_worker_set_stealing(int on) { g_stealing = on; }

void ck_worker_wait(ck_worker *w) {
    assert(w && ck_worker_usable(w));
    if (!w->busy) return;
    if (w->threaded) {
        pthread_mutex_lock(&w->mu);
        if (!w->taken && g_stealing) {   /* not started: run it here rather than wait for the worker to be scheduled */
            w->taken = 1;
            pthread_mutex_unlock(&w->mu);
            w->fn(w->arg);
            pthread_mutex_lock(&w->mu);
            w->ran = 1;
        }
        while (!w->ran) pthread_cond_wait(&w->done, &w->mu);
        w->busy = 0;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    w->busy = 0;
}

int ck_worker_busy(const ck_worker *w) { return w && w->busy; }

int ck_worker_usable(const ck_worker *w) { return w && w->pid == getpid(); }

int ck_worker_serial_forced(void) {
    const char *v = getenv("MP_CKPT_SERIAL_FILL");
    return v && *v && strcmp(v, "0") != 0;
}
