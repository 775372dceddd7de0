/*
 * core/cuda/backend_cuda.c — the CUDA implementation of struct mp_backend (core/backend.h) over the
 * launchers of core/cuda/kernels_cuda.h and the cuBLASLt wrapper of core/cuda/gemm_cuda.h.
 *
 * STATUS: compiled, never run on a GPU (docs/CUDA.md). Every statement below about behaviour on a device
 * is the design, not a measurement.
 *
 * Design.
 *   - One GPU per process (core/cuda/device_cuda.c chose it), one backend per process (a singleton made
 *     by mp_backend_cuda; it lives until the process exits).
 *   - One COMPUTE stream, created non-blocking (it does not synchronise with the legacy default stream).
 *     Every op of the table is enqueued on it, in call order; a NULL mp_stream names it. Other streams
 *     (stream_create: non-blocking too) belong to communication: an NCCL communicator is given one
 *     (core/cuda/comm_nccl.h, mp_backend_cuda_stream turns the mp_stream into its cudaStream_t), and
 *     the caller orders the two with event_record / stream_wait_event. No op of this table runs on, or
 *     waits for, a communication stream by itself.
 *   - The host waits only where it must: to_host (a device-to-host copy the caller reads next),
 *     to_device (see there: the callers reuse their host buffer at once; a training step's tokens go
 *     up through to_device_async, which does not wait), event_sync, synchronize, and
 *     the rare allocation paths (alloc zero-fills then waits; free, host_free and scratch growth wait
 *     for the device before releasing memory that queued work may still touch). Ops never wait.
 *   - Errors: a failed CUDA call or launch aborts naming this file's line (MP_CUDA_CHECK,
 *     core/cuda/cuda_check.h): the ops return nothing, and the newest checkpoint is intact. Every
 *     launcher call is followed by LAUNCHED() = MP_CUDA_CHECK(cudaGetLastError()), which catches launch
 *     configuration errors at once (errors of a kernel's execution surface at the next synchronising
 *     call). cuBLAS statuses do not reach cudaGetLastError: gemm checks the wrapper's status itself.
 *
 * Precision (core/backend.h; docs/CUDA.md "Precision"): act_dtype is MP_BF16, so every `void *` compute
 * tensor is bf16 (mp_bf16); `float *` state (masters, moments, weight gradients, per-row statistics,
 * RoPE tables) is fp32; device scalars are doubles. Math inside every kernel is fp32; GEMMs accumulate in
 * fp32 (CUBLAS_COMPUTE_32F) and write bf16 or fp32 C (c_dtype).
 *
 * Scratch policy. Kernels never allocate; the scratch they need lives here:
 *   - the reduction partials (MP_CUDA_REDUCE_MAX_BLOCKS doubles) and the cuBLASLt workspace
 *     (MP_CUDA_BLAS_WORKSPACE_BYTES): allocated at creation, fixed size;
 *   - the embedding backward's sort keys and the column partials of the deterministic column sums (the dw of
 *     rmsnorm_bwd and head_rmsnorm_bwd, the db of bias_bwd; one buffer, the ops run in stream order): device
 *     buffers kept in the impl and GROWN ON DEMAND (to exactly the size asked, never shrunk): the first call of a given
 *     size allocates (after waiting for the device, since the old buffer may be in use), later
 *     calls of the same or smaller size reuse it. layers/ reserves both at model creation
 *     (the table's scratch_reserve, with the model's largest embed_bwd and column sums: the memory plan
 *     counts the same bytes, scratch_bytes), so no step grows them; an op called outside a model grows
 *     them on first use.
 *   All of it is used by ops on the compute stream only, so in-order execution makes reuse safe.
 *
 * Accounting. core/alloc.h has no function that charges memory it did not allocate (its counters are
 * private to alloc.c), so device and page-locked memory are not in mp_mem_current. This file keeps
 * one figure, the device bytes it holds (an atomic: the async checkpoint thread may allocate), for the
 * out-of-memory message; the memory plan (cli/memplan.c) is the prediction a run is checked against.
 * The ops and the table: core/cuda/backend_cuda_ops.c.
 */
#include "core/cuda/backend_cuda_impl.h"
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "core/cuda/cuda_check.h"
#include "core/cuda/gemm_cuda.h"
#include "core/cuda/kernels_cuda.h"
#include "core/cuda/prof_cuda.h"
#include "core/log.h"

/* The calling thread's current device is CUDA per-thread state (a new thread starts on device 0), while
 * this backend's GPU is im->device (local rank % GPUs: not 0 on most ranks of a node). The entries a
 * helper thread could reach (memory, copies to and from the host, host waits) first make im->device
 * current on the calling thread, so that e.g. a cudaDeviceSynchronize waits for THIS GPU and
 * cudaHostAlloc does not create a context on GPU 0. Today only the main thread calls the table (the async
 * checkpoint writer, ckpt/writer.c, touches host buffers only); cached per thread, so it costs a compare. */
static _Thread_local int tl_device = -1;
void cuda_bind_thread(const cuda_impl *im) {
    if (tl_device == im->device) return;
    MP_CUDA_CHECK(cudaSetDevice(im->device));
    tl_device = im->device;
}

/* ---- accounting (see the top of the file) ---- */

/* Adds delta bytes to the device bytes this backend holds. */
void cuda_charge_dev(cuda_impl *im, int64_t delta) { atomic_fetch_add(&im->dev_total, delta); }

/* cudaMalloc of bytes (at least 1, so every allocation is a distinct non-NULL pointer, as on the CPU),
 * added to the backend's total; aborts naming the size, the category cat and what this backend already
 * holds. `what` names the caller for the message. */
void *cuda_dev_malloc(cuda_impl *im, size_t bytes, mp_mem_cat cat, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: error: %s: out of GPU memory allocating %zu bytes (%s; this backend holds %lld "
                "bytes): cudaMalloc: %s (%s)\n", mp_log_prog(), what, bytes, mp_mem_cat_name(cat),
                (long long)atomic_load(&im->dev_total), cudaGetErrorString(e), cudaGetErrorName(e));
        abort();
    }
    cuda_charge_dev(im, (int64_t)bytes);
    return p;
}

/* cudaFree of a cuda_dev_malloc'd buffer of bytes (NULL ok), taking the bytes off cat. Waits for the whole
 * device first (explicitly, not relying on cudaFree's implicit synchronisation), so work queued on any
 * stream that still reads or writes p has finished. */
void cuda_dev_release(cuda_impl *im, void *p, size_t bytes, mp_mem_cat cat) {
    if (!p) return;
    MP_CUDA_CHECK(cudaDeviceSynchronize());
    MP_CUDA_CHECK(cudaFree(p));
    cuda_charge_dev(im, -(int64_t)bytes);
}

/* Makes the grow-on-demand buffer *buf (of *have bytes) hold at least need bytes: frees the old buffer
 * after waiting for the device (cuda_dev_release: queued ops may still use it) and allocates exactly need
 * bytes (MP_MEM_ACTS in messages). No-op when it is already large enough. */
void cuda_scratch_grow(cuda_impl *im, void **buf, size_t *have, size_t need, const char *what) {
    if (need <= *have && *buf) return;
    cuda_dev_release(im, *buf, *have, MP_MEM_ACTS);
    *buf = NULL;
    *have = 0;
    *buf = cuda_dev_malloc(im, need, MP_MEM_ACTS, what);
    *have = need;
}

/* The column partials buffer (see the top of the file) holding at least floats floats: grown on demand. */
float *cuda_col_partials(cuda_impl *im, size_t floats) {
    size_t have = im->col_floats * sizeof(float);
    void *buf = im->col_partial;
    cuda_scratch_grow(im, &buf, &have, floats * sizeof(float), "column-sum partials");
    im->col_partial = buf;
    im->col_floats = have / sizeof(float);
    return im->col_partial;
}

/* Frees whatever im holds (each member NULL ok) after waiting for the device, then im itself. */
static void impl_release(cuda_impl *im) {
    if (!im) return;
    (void)cudaDeviceSynchronize();   /* after a failed set-up this may fail too: nothing to report then */
    mp_cuda_prof_close(im->prof);
    cuda_dev_release(im, im->keys, im->keys_bytes, MP_MEM_ACTS);
    cuda_dev_release(im, im->col_partial, im->col_floats * sizeof(float), MP_MEM_ACTS);
    cuda_dev_release(im, im->partials, MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double), MP_MEM_OTHER);
    if (im->blas) {
        mp_cuda_blas_destroy(im->blas);
        cuda_charge_dev(im, -(int64_t)MP_CUDA_BLAS_WORKSPACE_BYTES);
    }
    if (im->stream) (void)cudaStreamDestroy(im->stream);
    mp_free_acct(im, sizeof *im, MP_MEM_OTHER);
}

/* Fills im (zeroed) on GPU device; MP_EDEVICE with CUDA's or cuBLAS's message on failure (im then
 * holds what was made so far, for impl_release). */
static mp_code impl_init(cuda_impl *im, int device, mp_err *err) {
    im->device = device;
    MP_CUDA_TRY(cudaSetDevice(device), err);
    MP_CUDA_TRY(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking), err);
    im->prof = mp_cuda_prof_open(im->stream);
    MP_TRY(mp_cuda_blas_create(&im->blas, MP_CUDA_BLAS_WORKSPACE_BYTES, err));
    cuda_charge_dev(im, (int64_t)MP_CUDA_BLAS_WORKSPACE_BYTES);   /* cudaMalloc'd by gemm_cuda.cu */
    void *p = NULL;
    MP_CUDA_TRY(cudaMalloc(&p, MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double)), err);
    im->partials = p;
    cuda_charge_dev(im, (int64_t)(MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double)));
    return MP_OK;
}

mp_code mp_backend_cuda(int device, mp_backend **out, mp_err *err) {
    assert(out);
    *out = NULL;
    if (cuda_table.impl) {
        const cuda_impl *im = cuda_table.impl;
        if (im->device != device)
            return mp_err_set(err, MP_EINTERNAL, "device cuda: the backend already runs on GPU %d, not %d (one GPU "
                              "per process)", im->device, device);
        *out = &cuda_table;
        return MP_OK;
    }
    cuda_impl *im = mp_calloc(sizeof *im, MP_MEM_OTHER);
    mp_code rc = impl_init(im, device, err);
    if (rc) {
        mp_err_wrap(err, "device cuda: GPU %d", device);
        impl_release(im);
        return rc;
    }
    cuda_table.impl = im;
    *out = &cuda_table;
    return MP_OK;
}

cudaStream_t mp_backend_cuda_stream(mp_backend *be, mp_stream s) { return stream_of(be, s); }
