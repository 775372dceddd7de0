/* core/cuda/prof_cuda.c — see prof_cuda.h. Events come from a fixed pool of MP_CUDA_PROF_PENDING pairs:
 * begin takes the next pair's start, end its stop and the key; when the pool is full, collect waits for
 * the stream, sums every pair's elapsed time into its key and frees the pool for reuse. */
#include "core/cuda/prof_cuda.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/cuda/cuda_check.h"

typedef struct {
    char key[96];
    long long calls;
    double ms;
} prof_row;

struct mp_cuda_prof {
    char path[4096];
    cudaStream_t stream;
    cudaEvent_t start[MP_CUDA_PROF_PENDING], stop[MP_CUDA_PROF_PENDING];
    int key_of[MP_CUDA_PROF_PENDING];   /* row index of each queued pair */
    int queued, open;                   /* pairs queued; a start recorded without its stop */
    prof_row rows[MP_CUDA_PROF_KEYS];
    int nrows, dropped;                 /* keys beyond MP_CUDA_PROF_KEYS are counted, not kept */
    long long skip;                     /* ops still to leave unprofiled (MP_CUDA_PROFILE_SKIP) */
};

static mp_cuda_prof *g_open;   /* the one open profiler, for the exit handler */
static void close_at_exit(void) { mp_cuda_prof_close(g_open); }

mp_cuda_prof *mp_cuda_prof_open(cudaStream_t s) {
    const char *path = getenv("MP_CUDA_PROFILE");
    if (!path || !*path || g_open) return NULL;
    mp_cuda_prof *p = mp_xcalloc(sizeof *p);
    snprintf(p->path, sizeof p->path, "%s", path);
    p->stream = s;
    const char *skip = getenv("MP_CUDA_PROFILE_SKIP");
    p->skip = skip ? atoll(skip) : 0;
    if (p->skip < 0) p->skip = 0;
    for (int i = 0; i < MP_CUDA_PROF_PENDING; i++) {
        MP_CUDA_CHECK(cudaEventCreate(&p->start[i]));
        MP_CUDA_CHECK(cudaEventCreate(&p->stop[i]));
    }
    g_open = p;
    atexit(close_at_exit);   /* registered after CUDA's own: runs before the runtime is torn down */
    return p;
}

/* The row of key, added when new; -1 when the table is full. */
static int row_of(mp_cuda_prof *p, const char *key) {
    for (int i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].key, key)) return i;
    if (p->nrows == MP_CUDA_PROF_KEYS) return -1;
    snprintf(p->rows[p->nrows].key, sizeof p->rows[0].key, "%s", key);
    return p->nrows++;
}

/* Waits for s, sums the queued pairs into their rows, empties the queue. */
static void collect(mp_cuda_prof *p, cudaStream_t s) {
    MP_CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < p->queued; i++) {
        float ms = 0;
        MP_CUDA_CHECK(cudaEventElapsedTime(&ms, p->start[i], p->stop[i]));
        if (p->key_of[i] < 0) continue;
        p->rows[p->key_of[i]].calls++;
        p->rows[p->key_of[i]].ms += ms;
    }
    p->queued = 0;
}

void mp_cuda_prof_begin(mp_cuda_prof *p, cudaStream_t s) {
    if (!p) return;
    if (p->skip > 0) {   /* one of the first MP_CUDA_PROFILE_SKIP ops: its end is a no-op (open stays 0) */
        p->skip--;
        return;
    }
    if (p->queued == MP_CUDA_PROF_PENDING) collect(p, s);
    MP_CUDA_CHECK(cudaEventRecord(p->start[p->queued], s));
    p->open = 1;
}

void mp_cuda_prof_end(mp_cuda_prof *p, cudaStream_t s, const char *key) {
    if (!p || !p->open) return;
    MP_CUDA_CHECK(cudaEventRecord(p->stop[p->queued], s));
    int r = row_of(p, key);
    if (r < 0) p->dropped++;
    p->key_of[p->queued++] = r;
    p->open = 0;
}

void mp_cuda_prof_close(mp_cuda_prof *p) {
    if (!p) return;
    if (p == g_open) g_open = NULL;
    collect(p, p->stream);
    FILE *f = fopen(p->path, "w");
    if (!f) {
        fprintf(stderr, "%s: warning: MP_CUDA_PROFILE=%s: cannot write it\n", mp_log_prog(), p->path);
    } else {
        fprintf(f, "key\tcalls\ttotal_ms\n");
        for (int i = 0; i < p->nrows; i++) fprintf(f, "%s\t%lld\t%.6f\n", p->rows[i].key, p->rows[i].calls, p->rows[i].ms);
        if (p->dropped) fprintf(f, "(other keys)\t%d\t0\n", p->dropped);
        fclose(f);
    }
    for (int i = 0; i < MP_CUDA_PROF_PENDING; i++) {
        (void)cudaEventDestroy(p->start[i]);
        (void)cudaEventDestroy(p->stop[i]);
    }
    free(p);
}
