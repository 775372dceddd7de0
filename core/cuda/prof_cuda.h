/*
 * core/cuda/prof_cuda.h — per-op device times of the CUDA backend, for bench/bench_gpu.sh's per-kernel
 * table (nsys is not on the lent GPU machine; ncu is too slow for a whole step).
 *
 * Off unless the environment names a file: MP_CUDA_PROFILE=FILE. Then every op of the backend table
 * (core/cuda/backend_cuda.c) is bracketed by two cudaEvents on the compute stream, and the elapsed device
 * time between them is summed per key (the op's name; a GEMM's also carries its shape, transposes and C
 * type). The events are read back when MP_CUDA_PROF_PENDING pairs are queued (the host then waits for the
 * stream: profiling perturbs the overlap of host and device, not the kernels' own times) and at close:
 * mp_cuda_prof_close, or at exit (an atexit handler: the CLI never destroys its backend), which writes
 * FILE: a header line, then one line per key, tab-separated:
 *   key  calls  total_ms
 * Times include the launch gaps between the two events (a lone tiny kernel reads as ~2-5 us).
 * MP_CUDA_PROFILE_SKIP=N leaves the first N ops unprofiled (no events, no key): bench/bench_gpu.sh counts
 * the ops of a 1-step run and skips them in a longer one, so the table holds the steady steps alone
 * (the first step's cuBLASLt heuristics and first-touch allocations vary from run to run: subtracting
 * a 1-step run's profile gave negative times on the H200).
 */
#ifndef MP_CUDA_PROF_H
#define MP_CUDA_PROF_H

#include <cuda_runtime_api.h>

#define MP_CUDA_PROF_PENDING 4096   /* event pairs queued before a read-back */
#define MP_CUDA_PROF_KEYS 512       /* distinct keys (ops x GEMM shapes) */

typedef struct mp_cuda_prof mp_cuda_prof;

/* A profiler of the ops on stream s writing to $MP_CUDA_PROFILE at close or exit, or NULL when the
 * variable is unset or empty. One per process. */
mp_cuda_prof *mp_cuda_prof_open(cudaStream_t s);

/* Records the start event of the next op on stream s (a second begin without an end re-records it). */
void mp_cuda_prof_begin(mp_cuda_prof *p, cudaStream_t s);

/* Records the end event on s and queues the pair under key (copied; truncated to 95 characters). */
void mp_cuda_prof_end(mp_cuda_prof *p, cudaStream_t s, const char *key);

/* Reads every queued pair back (waits for the stream), writes the file, frees p. NULL is a no-op. */
void mp_cuda_prof_close(mp_cuda_prof *p);

#endif
