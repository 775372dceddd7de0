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
 *
 * Fork safety. fork() copies only the calling thread; a lock another thread held at that
 * instant stays held forever in the child. Our worker thread holds locks the child needs while it
 * starts (the C library's and a sanitizer runtime's thread bookkeeping: ASan's thread registry, which
 * the child's next pthread_create takes), while it exits, and its own mutex around each hand-off; a
 * job may allocate. A forked child that then made its own worker hung once under ASan (a 900 s CI
 * timeout). So no fork happens while a worker of this process can hold a lock: a pthread_atfork
 * handler (fork_prepare) parks every live worker first. It takes g_fork_mu, which ck_worker_new holds
 * from pthread_create until the worker is in g_live and ck_worker_free from the quit until the join
 * returns (so no thread is starting or ending), then, per worker, its mutex while the worker is parked
 * (blocked in its wait for a post, having released the mutex, holding nothing; a job posted to it or
 * running on it is let finish first: a job a waiting caller took over runs on the caller's own thread
 * and is that thread's business, like any other code of the process), and keeps them all through the
 * fork. g_fork_mu also covers a worker's allocation and its free, so no fork lands inside the allocator
 * from here (GCC 12's ASan allocator has no fork handlers of its own). The parent and child handlers release them; the
 * child also forgets the parent's workers (they have no thread there). Do not fork from inside a job:
 * the prepare handler would wait for the job's own worker to park.
 */
#define _GNU_SOURCE
#include "ckpt/read_pipe.h"
#include "core/fault.h"
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
    int parked;              /* the thread waits for a post, mu released (fork_prepare waits for it) */
    pthread_cond_t parked_cv;   /* fork_prepare waits: the thread has parked */
    pid_t pid;               /* the process the thread runs in */
    pthread_t th;
    struct ck_worker *next;  /* in g_live */
};

/* Fork safety (top comment): the threaded workers of this process, and the lock that keeps a fork out
 * of every thread's start and end. */
static pthread_mutex_t g_fork_mu = PTHREAD_MUTEX_INITIALIZER;
static ck_worker *g_live;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* Before fork: holds g_fork_mu and every live worker's mutex with the worker parked and no job waiting
 * for it (one posted but not started would otherwise be run by nobody in the child's copy). */
static void fork_prepare(void) {
    pthread_mutex_lock(&g_fork_mu);
    for (ck_worker *w = g_live; w; w = w->next) {
        pthread_mutex_lock(&w->mu);
        while (!w->parked || (w->busy && !w->taken)) pthread_cond_wait(&w->parked_cv, &w->mu);
    }
}

/* After fork, in the parent: releases what fork_prepare took. */
static void fork_parent(void) {
    for (ck_worker *w = g_live; w; w = w->next) pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&g_fork_mu);
}

/* After fork, in the child: the same, and the parent's workers are forgotten (no thread here). */
static void fork_child(void) {
    for (ck_worker *w = g_live; w; w = w->next) pthread_mutex_unlock(&w->mu);
    g_live = NULL;
    pthread_mutex_unlock(&g_fork_mu);
}

static void register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* The thread: runs each posted job nobody has started, then signals done; exits on quit once idle. */
static void *worker_main(void *arg) {
    ck_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !(w->busy && !w->taken)) {
            w->parked = 1;
            pthread_cond_broadcast(&w->parked_cv);
            pthread_cond_wait(&w->posted, &w->mu);
            w->parked = 0;
        }
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
    pthread_once(&g_atfork_once, register_atfork);
    /* no fork while the worker is allocated or its thread starts (fork_prepare waits for it to park): a
     * sanitizer's allocator without fork handlers (GCC 12's ASan) would leave the child its lock held */
    pthread_mutex_lock(&g_fork_mu);
    ck_worker *w = mp_xcalloc(sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->posted, NULL);
    pthread_cond_init(&w->done, NULL);
    pthread_cond_init(&w->parked_cv, NULL);
    w->pid = getpid();
    w->threaded = pthread_create(&w->th, NULL, worker_main, w) == 0;
    if (w->threaded) {
        w->next = g_live;
        g_live = w;
    }
    pthread_mutex_unlock(&g_fork_mu);
    return w;
}

void ck_worker_free(ck_worker *w) {
    if (!w) return;
    if (w->threaded && ck_worker_usable(w)) {
        ck_worker_wait(w);
        pthread_mutex_lock(&g_fork_mu);   /* no fork while the thread ends */
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->posted);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        for (ck_worker **p = &g_live; *p; p = &(*p)->next)
            if (*p == w) {
                *p = w->next;
                break;
            }
        pthread_mutex_unlock(&g_fork_mu);
    }
    /* in a forked child the thread does not exist: nothing to join, and the mutex may have been
     * copied locked, so it is not destroyed either */
    pthread_mutex_lock(&g_fork_mu);   /* no fork inside the allocator either (ck_worker_new) */
    if (ck_worker_usable(w)) {
        pthread_cond_destroy(&w->parked_cv);
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->posted);
        pthread_mutex_destroy(&w->mu);
    }
    free(w);
    pthread_mutex_unlock(&g_fork_mu);
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
    return mp_fault_on("ckpt_serial_fill");
}
