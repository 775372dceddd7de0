/*
 * ckpt/read_pipe.h — the reader's verification worker (ckpt/read_pipe.c): one helper thread that runs
 * one job at a time, so that ckpt_read can hash piece k while its own thread reads piece k+1.
 * Internal to ckpt/ (ckpt/reader.c; ckpt/writer_files.c hashes fill bands on one) and reshard/hf_items.c
 * (the HF and GGUF sinks write bands on one: rs_hf_items_stream).
 */
#ifndef CKPT_READ_PIPE_H
#define CKPT_READ_PIPE_H

typedef struct ck_worker ck_worker;

/* A worker with its thread started. Never NULL (checked allocation); if the thread cannot be
 * created, the worker runs each job inline in ck_worker_post, on the caller's thread. */
ck_worker *ck_worker_new(void);

/* Waits for the job in flight, if any, stops and joins the thread, frees w. NULL is a no-op. */
void ck_worker_free(ck_worker *w);

/* Runs fn(arg) on the worker's thread. At most one job is in flight: w must be idle (no post since
 * the last ck_worker_wait). fn must not touch anything the caller's thread changes before the
 * matching ck_worker_wait. */
void ck_worker_post(ck_worker *w, void (*fn)(void *), void *arg);

/* Returns once the job posted last has run (at once if none is in flight). Every write fn made is
 * visible to the caller afterwards (mutex hand-off). */
void ck_worker_wait(ck_worker *w);

/* 1 if a job is posted and not yet waited for. */
int ck_worker_busy(const ck_worker *w);
/* Tests only: with on = 0, ck_worker_wait always waits for the worker's thread instead of running a
 * job nobody has started itself, so where jobs run no longer depends on how the threads were scheduled
 * (a test that checks the helper did some work would otherwise fail on a machine too busy to run it).
 * Process-wide; the default (1) is what every command runs. */
void ck_worker_set_stealing(int on);

/* 1 when the fault ckpt_serial_fill is set (non-empty, not "0"): the band writers (ckpt/writer_files.c fill boxes,
 * reshard/hf_items.c rs_hf_items_stream: HF and GGUF export) then run without a worker, serially: the path
 * their overlapped output is compared against in tests (tests/convert_overlap.sh). */
int ck_worker_serial_forced(void);

/* 1 if w's thread belongs to this process (a worker created before fork() has no thread in the
 * child: the child must make a new one). */
int ck_worker_usable(const ck_worker *w);

#endif
