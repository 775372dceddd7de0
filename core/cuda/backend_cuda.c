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
 */
#include "core/cuda/backend_cuda.h"
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

typedef struct {
    int device;
    cudaStream_t stream;          /* the compute stream (every op of the table) */
    mp_cuda_blas *blas;           /* one cuBLASLt handle + workspace, used on the compute stream only */
    double *partials;             /* [MP_CUDA_REDUCE_MAX_BLOCKS] sumsq_acc / sum_acc scratch */
    void *keys;                   /* embed_bwd sort keys, grown on demand */
    size_t keys_bytes;
    float *col_partial;           /* rmsnorm_bwd / head_rmsnorm_bwd dw, bias_bwd db partials, grown on demand */
    size_t col_floats;
    _Atomic int64_t dev_total;    /* device bytes held (alloc, workspace, partials, scratch): for messages */
    mp_cuda_prof *prof;           /* per-op device times when MP_CUDA_PROFILE names a file, else NULL */
} cuda_impl;

/* Aborts after a launch whose configuration CUDA refused (grid limits, invalid arguments, a sticky error
 * of an earlier kernel), naming the line of the op. */
#define LAUNCHED() MP_CUDA_CHECK(cudaGetLastError())

/* Brackets an op with the profiler's events (core/cuda/prof_cuda.h) when MP_CUDA_PROFILE is set; the key
 * is formatted only then. An op that returns early leaves a begin that the next op's begin re-records. */
#define PROF_BEGIN(be)                                                          \
    do {                                                                        \
        cuda_impl *pim_ = impl_of(be);                                          \
        if (pim_->prof) mp_cuda_prof_begin(pim_->prof, pim_->stream);           \
    } while (0)
#define PROF_END(be, ...)                                                       \
    do {                                                                        \
        cuda_impl *pim_ = impl_of(be);                                          \
        if (pim_->prof) {                                                       \
            char key_[96];                                                      \
            snprintf(key_, sizeof key_, __VA_ARGS__);                           \
            mp_cuda_prof_end(pim_->prof, pim_->stream, key_);                   \
        }                                                                       \
    } while (0)

static cuda_impl *impl_of(const mp_backend *be) {
    assert(be && be->impl && be->device == MP_DEV_CUDA);
    return (cuda_impl *)be->impl;
}

/* The calling thread's current device is CUDA per-thread state (a new thread starts on device 0), while
 * this backend's GPU is im->device (local rank % GPUs: not 0 on most ranks of a node). The entries a
 * helper thread could reach (memory, copies to and from the host, host waits) first make im->device
 * current on the calling thread, so that e.g. a cudaDeviceSynchronize waits for THIS GPU and
 * cudaHostAlloc does not create a context on GPU 0. Today only the main thread calls the table (the async
 * checkpoint writer, ckpt/writer.c, touches host buffers only); cached per thread, so it costs a compare. */
static _Thread_local int tl_device = -1;
static void bind_thread(const cuda_impl *im) {
    if (tl_device == im->device) return;
    MP_CUDA_CHECK(cudaSetDevice(im->device));
    tl_device = im->device;
}

/* The compute stream's handle. */
static cudaStream_t cs(const mp_backend *be) { return impl_of(be)->stream; }

/* The cudaStream_t of s (NULL: the compute stream). */
static cudaStream_t stream_of(const mp_backend *be, mp_stream s) {
    return s ? (cudaStream_t)(void *)s : cs(be);
}

/* ---- accounting (see the top of the file) ---- */

/* Adds delta bytes to the device bytes this backend holds. */
static void charge_dev(cuda_impl *im, int64_t delta) { atomic_fetch_add(&im->dev_total, delta); }

/* cudaMalloc of bytes (at least 1, so every allocation is a distinct non-NULL pointer, as on the CPU),
 * added to the backend's total; aborts naming the size, the category cat and what this backend already
 * holds. `what` names the caller for the message. */
static void *dev_malloc(cuda_impl *im, size_t bytes, mp_mem_cat cat, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: error: %s: out of GPU memory allocating %zu bytes (%s; this backend holds %lld "
                "bytes): cudaMalloc: %s (%s)\n", mp_log_prog(), what, bytes, mp_mem_cat_name(cat),
                (long long)atomic_load(&im->dev_total), cudaGetErrorString(e), cudaGetErrorName(e));
        abort();
    }
    charge_dev(im, (int64_t)bytes);
    return p;
}

/* cudaFree of a dev_malloc'd buffer of bytes (NULL ok), taking the bytes off cat. Waits for the whole
 * device first (explicitly, not relying on cudaFree's implicit synchronisation), so work queued on any
 * stream that still reads or writes p has finished. */
static void dev_release(cuda_impl *im, void *p, size_t bytes, mp_mem_cat cat) {
    if (!p) return;
    MP_CUDA_CHECK(cudaDeviceSynchronize());
    MP_CUDA_CHECK(cudaFree(p));
    charge_dev(im, -(int64_t)bytes);
}

/* Makes the grow-on-demand buffer *buf (of *have bytes) hold at least need bytes: frees the old buffer
 * after waiting for the device (dev_release: queued ops may still use it) and allocates exactly need
 * bytes (MP_MEM_ACTS in messages). No-op when it is already large enough. */
static void scratch_grow(cuda_impl *im, void **buf, size_t *have, size_t need, const char *what) {
    if (need <= *have && *buf) return;
    dev_release(im, *buf, *have, MP_MEM_ACTS);
    *buf = NULL;
    *have = 0;
    *buf = dev_malloc(im, need, MP_MEM_ACTS, what);
    *have = need;
}

/* The column partials buffer (see the top of the file) holding at least floats floats: grown on demand. */
static float *col_partials(cuda_impl *im, size_t floats) {
    size_t have = im->col_floats * sizeof(float);
    void *buf = im->col_partial;
    scratch_grow(im, &buf, &have, floats * sizeof(float), "column-sum partials");
    im->col_partial = buf;
    im->col_floats = have / sizeof(float);
    return im->col_partial;
}

/* ---- memory ---- */

/* bytes of device memory, zero-filled (a memset on the compute stream, then the host waits for it, so
 * the zeros are in place for every stream: allocation is start-up work). Added to the backend's
 * total; aborts when the GPU is out of memory (the message names cat). */
static void *cu_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) {
    cuda_impl *im = impl_of(be);
    bind_thread(im);
    void *p = dev_malloc(im, bytes, cat, "cuda alloc");
    if (bytes) MP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, im->stream));
    MP_CUDA_CHECK(cudaStreamSynchronize(im->stream));
    return p;
}

/* Frees a buffer of alloc (NULL ok) and takes bytes (the size it was allocated with) off cat. Waits for
 * the device first (dev_release), so work still queued that uses p finishes. */
static void cu_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) {
    bind_thread(impl_of(be));
    dev_release(impl_of(be), p, bytes, cat);
}

/* Zeroes bytes at p, enqueued on the compute stream (no host wait). */
static void cu_memset0(mp_backend *be, void *p, size_t bytes) {
    PROF_BEGIN(be);
    if (bytes) MP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cs(be)));
    PROF_END(be, "%s", "memset0");
}

/* Device to host: the copy is enqueued on the compute stream (after every op queued before it) and the
 * host waits for the stream, so host_dst holds the data on return. Data produced on a communication
 * stream must have been ordered before it with an event (stream_wait_event on the compute stream). */
static void cu_to_host(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes) {
    if (!bytes) return;
    bind_thread(impl_of(be));
    cudaStream_t s = cs(be);
    MP_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, s));
    MP_CUDA_CHECK(cudaStreamSynchronize(s));
}

/* Host to device, ordered on the compute stream after the ops queued before it (so a buffer they still
 * read is not overwritten early). The host then waits for the stream: these callers (parameter loads,
 * RoPE tables, checkpoint staging, evaluation and sampling tokens) refill or free host_src as soon as
 * this returns, and a page-locked source is read by the DMA engine only when the stream reaches the copy.
 * Cost: one drain of the compute stream per call, which is why a training step's tokens go up through
 * to_device_async instead. */
static void cu_to_device(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    bind_thread(impl_of(be));
    cudaStream_t s = cs(be);
    MP_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, s));
    MP_CUDA_CHECK(cudaStreamSynchronize(s));
}

/* Host to device without a host wait (core/backend.h): the copy is enqueued on the compute stream and
 * done recorded after it, so the host goes on queueing the micro-batch's kernels while the DMA engine
 * reads host_src (page-locked: host_alloc) whenever the stream reaches the copy; the caller keeps its
 * hands off host_src until event_sync(done). dev_dst is written in stream order: kernels queued before
 * (the previous micro-batch's backward reading its tokens) finish first. */
static void cu_to_device_async(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes, mp_event done) {
    assert(done);
    bind_thread(impl_of(be));
    cudaStream_t s = cs(be);
    if (bytes) MP_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, s));
    MP_CUDA_CHECK(cudaEventRecord((cudaEvent_t)(void *)done, s));
}

/* Page-locked host memory (cudaHostAlloc), zero-filled by the host; aborts on failure, naming cat.
 * Waits for nothing. */
static void *cu_host_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) {
    cuda_impl *im = impl_of(be);
    assert(cat >= 0 && cat < MP_MEM_NCAT);
    bind_thread(im);
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: error: out of page-locked host memory allocating %zu bytes (%s): cudaHostAlloc: %s (%s)\n",
                mp_log_prog(), bytes, mp_mem_cat_name(cat), cudaGetErrorString(e), cudaGetErrorName(e));
        abort();
    }
    memset(p, 0, bytes);
    return p;
}

/* Frees a buffer of host_alloc (NULL ok). Waits for the device first, so a copy
 * still reading or writing p has finished. */
static void cu_host_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) {
    if (!p) return;
    cuda_impl *im = impl_of(be);
    bind_thread(im);
    MP_CUDA_CHECK(cudaDeviceSynchronize());
    MP_CUDA_CHECK(cudaFreeHost(p));
}

/* ---- streams and events ---- */

/* A new non-blocking stream (for communication); the caller destroys it. */
static mp_stream cu_stream_create(mp_backend *be) {
    (void)impl_of(be);
    cudaStream_t s = NULL;
    MP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return (mp_stream)(void *)s;
}

/* Destroys a stream of stream_create (NULL: nothing; the compute stream is the backend's, never
 * destroyed here). Work queued on it still completes (CUDA's rule). */
static void cu_stream_destroy(mp_backend *be, mp_stream s) {
    if (!s) return;
    assert((cudaStream_t)(void *)s != cs(be));
    MP_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)(void *)s));
}

/* A new event without timing (the cheapest kind: ordering only). */
static mp_event cu_event_create(mp_backend *be) {
    (void)impl_of(be);
    cudaEvent_t e = NULL;
    MP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return (mp_event)(void *)e;
}

/* Destroys an event of event_create (NULL: nothing). */
static void cu_event_destroy(mp_backend *be, mp_event e) {
    if (e) MP_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)(void *)e));
}

/* e completes when everything queued on s (NULL: compute) so far has. */
static void cu_event_record(mp_backend *be, mp_event e, mp_stream s) {
    assert(e);
    MP_CUDA_CHECK(cudaEventRecord((cudaEvent_t)(void *)e, stream_of(be, s)));
}

/* Work queued on s (NULL: compute) after this call waits for e, on the device (the host does not). */
static void cu_stream_wait_event(mp_backend *be, mp_stream s, mp_event e) {
    assert(e);
    MP_CUDA_CHECK(cudaStreamWaitEvent(stream_of(be, s), (cudaEvent_t)(void *)e, 0));
}

/* The host waits for e. */
static void cu_event_sync(mp_backend *be, mp_event e) {
    assert(e);
    MP_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)(void *)e));
}

/* Device to device, enqueued on the compute stream; dst == src is a no-op. Regions must not otherwise
 * overlap (cudaMemcpy's rule; the CPU's memmove is more lenient, no caller relies on it). */
static void cu_copy(mp_backend *be, void *dst, const void *src, size_t bytes) {
    PROF_BEGIN(be);
    if (!bytes || dst == src) return;
    MP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs(be)));
    PROF_END(be, "%s", "copy");
}

/* The host waits for all work on every stream of the device (compute and communication). */
static void cu_synchronize(mp_backend *be) {
    bind_thread(impl_of(be));
    MP_CUDA_CHECK(cudaDeviceSynchronize());
}

/* ---- dense linear algebra ---- */

/* core/backend.h's gemm: A, B bf16 (compute tensors), C bf16 (c_dtype = act_dtype) or fp32 (weight
 * gradients, typically beta = 1), fp32 accumulation, through mp_cuda_gemm on the compute stream. A cuBLAS
 * failure (its status, not seen by cudaGetLastError) aborts naming the shape. */
static void cu_gemm(mp_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                    int lda, const void *B, int ldb, float beta, void *C, int ldc, mp_dtype c_dtype) {
    PROF_BEGIN(be);
    assert(c_dtype == MP_BF16 || c_dtype == MP_F32);
    cuda_impl *im = impl_of(be);
    int st = mp_cuda_gemm(im->blas, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                          c_dtype == MP_F32 ? MP_CUDA_OUT_F32 : MP_CUDA_OUT_BF16, ldc, im->stream);
    if (st != 0) {
        fprintf(stderr, "%s: error: %s:%d: gemm (trans %d,%d, M %d N %d K %d, lda %d ldb %d ldc %d, C %s): %s\n",
                mp_log_prog(), __FILE__, __LINE__, trans_a, trans_b, M, N, K, lda, ldb, ldc,
                mp_dtype_name(c_dtype), mp_cuda_blas_status_name(st));
        abort();
    }
    LAUNCHED();   /* the K == 0 path is a kernel of the wrapper's */
    PROF_END(be, "gemm %dx%dx%d t%d%d %s%s", M, N, K, trans_a, trans_b, mp_dtype_name(c_dtype), beta != 0.0f ? " +=" : "");
}

/* ---- elementwise ---- */

/* out = a + b over n bf16 elements (out may alias a or b). */
static void cu_add(mp_backend *be, void *out, const void *a, const void *b, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_add_bf16(out, a, b, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "add");
}

/* dst += src over n fp32 elements (no overlap). */
static void cu_accumulate(mp_backend *be, float *dst, const float *src, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_accumulate_f32(dst, src, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "accumulate");
}

/* x *= s over n fp32 elements. */
static void cu_scale(mp_backend *be, float *x, float s, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_scale_f32(x, s, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "scale");
}

/* dst (bf16) = src (fp32) rounded to nearest even; no overlap. */
static void cu_to_act(mp_backend *be, void *dst, const float *src, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_f32_to_bf16(dst, src, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "to_act");
}

/* dst (fp32) = src (bf16), exact; no overlap. */
static void cu_from_act(mp_backend *be, float *dst, const void *src, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_bf16_to_f32(dst, src, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "from_act");
}

/* ---- reductions into a device scalar ---- */

/* *acc (one device double) += sum x^2 over n fp32, in double, in an order fixed by n (k_reduce.cu);
 * uses the backend's partials scratch on the compute stream. */
static void cu_sumsq_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    PROF_BEGIN(be);
    cuda_impl *im = impl_of(be);
    assert(acc && n >= 0);
    mp_cuda_sumsq_acc_f32(acc, im->partials, x, n, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "sumsq_acc");
}

/* *acc += sum x over n fp32, as sumsq_acc. */
static void cu_sum_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    PROF_BEGIN(be);
    cuda_impl *im = impl_of(be);
    assert(acc && n >= 0);
    mp_cuda_sum_acc_f32(acc, im->partials, x, n, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "sum_acc");
}

/* ---- embedding ---- */

/* out[n] (bf16) = wte[tok[n] - v_start] (the bf16 compute copy of the table) or zeros out of range. */
static void cu_embed_fwd(mp_backend *be, void *out, const int32_t *tok, const void *wte, int N, int D, int v_start,
                         int v_local) {
    PROF_BEGIN(be);
    mp_cuda_embed_fwd_bf16(out, tok, wte, N, D, v_start, v_local, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "embed_fwd");
}

/* dwte (fp32) [tok[n] - v_start] += dout[n] (bf16) for in-range tokens, deterministically (sorted keys,
 * k_embed.cu). The keys scratch is grown on demand (see the top of the file). */
static void cu_embed_bwd(mp_backend *be, float *dwte, const void *dout, const int32_t *tok, int N, int D,
                         int v_start, int v_local) {
    PROF_BEGIN(be);
    cuda_impl *im = impl_of(be);
    if (N <= 0 || v_local <= 0) return;
    scratch_grow(im, &im->keys, &im->keys_bytes, mp_cuda_embed_bwd_scratch_bytes(N), "embed_bwd keys");
    mp_cuda_embed_bwd(dwte, dout, tok, im->keys, N, D, v_start, v_local, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "embed_bwd");
}

/* ---- RMSNorm ---- */

/* y (bf16) = x * rstd * w (w: bf16 compute copy); rstd [N] fp32 saved. */
static void cu_rmsnorm_fwd(mp_backend *be, void *y, float *rstd, const void *x, const void *w, int N, int D,
                           float eps) {
    PROF_BEGIN(be);
    mp_cuda_rmsnorm_fwd(y, rstd, x, w, N, D, eps, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "rmsnorm_fwd");
}

/* dx (bf16) ACCUMULATES, dw (fp32) accumulates (deterministic chunk partials, grown on demand). dx must
 * not alias dy or x (the kernel asserts it). */
static void cu_rmsnorm_bwd(mp_backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                           const float *rstd, int N, int D) {
    PROF_BEGIN(be);
    cuda_impl *im = impl_of(be);
    if (N <= 0) return;
    float *part = col_partials(im, mp_cuda_rmsnorm_bwd_scratch_floats(N, D));
    mp_cuda_rmsnorm_bwd(dx, dw, part, dy, x, w, rstd, N, D, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "rmsnorm_bwd");
}

/* ---- biases and per-head RMSNorm (Qwen2's q/k/v biases, Qwen3's q_norm and k_norm) ---- */

/* x[n, j] += b[j] over the N x cols block (row stride ldx), one bf16 rounding. */
static void cu_bias_add(mp_backend *be, void *x, int ldx, const void *b, int N, int cols) {
    PROF_BEGIN(be);
    mp_cuda_bias_add(x, ldx, b, N, cols, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "bias_add");
}

/* db (fp32) += the column sums of the block, deterministic (chunk partials in the shared buffer). */
static void cu_bias_bwd(mp_backend *be, float *db, const void *dx, int ldx, int N, int cols) {
    PROF_BEGIN(be);
    cuda_impl *im = impl_of(be);
    if (N <= 0 || cols <= 0) return;
    float *part = col_partials(im, mp_cuda_chunk_partial_floats(N, cols));
    mp_cuda_bias_bwd(db, part, dx, ldx, N, cols, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "bias_bwd");
}

/* The per-head norm's limits (kernels_cuda.h), checked in every build (the launchers only assert them,
 * and assert() is off in some CUDA configurations): a shape beyond them aborts naming it. */
static void head_norm_check(const char *op, int N, int H, int hd, int ldx) {
    const char *why = NULL;
    if (N < 0 || H <= 0) why = "N must be >= 0 and H > 0";
    else if (hd < 1 || hd > MP_CUDA_HEAD_RMSNORM_MAX_HD) why = "head_dim must be in [1, MP_CUDA_HEAD_RMSNORM_MAX_HD]";
    else if (ldx < (int64_t)H * hd) why = "the row stride must cover the heads (ldx >= H*hd)";
    if (!why) return;
    fprintf(stderr, "%s: error: %s: cuda %s (N %d, H %d, hd %d, ldx %d): %s\n", mp_log_prog(), __FILE__, op, N, H,
            hd, ldx, why);
    abort();
}

/* In place over the H heads of each row: y = x * rstd * w per (row, head); rstd [N*H]; x_save (dense) the
 * input when not NULL. */
static void cu_head_rmsnorm_fwd(mp_backend *be, void *x, int ldx, void *x_save, float *rstd, const void *w, int N,
                                int H, int hd, float eps) {
    PROF_BEGIN(be);
    head_norm_check("head_rmsnorm_fwd", N, H, hd, ldx);
    mp_cuda_head_rmsnorm_fwd(x, ldx, x_save, rstd, w, N, H, hd, eps, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "head_rmsnorm_fwd");
}

/* In place: dx (the normed output's gradient) becomes the input's (=); dw (fp32) accumulates,
 * deterministically (chunk partials in the shared buffer). */
static void cu_head_rmsnorm_bwd(mp_backend *be, void *dx, int ldx, float *dw, const void *x_save, const float *rstd,
                                const void *w, int N, int H, int hd) {
    PROF_BEGIN(be);
    head_norm_check("head_rmsnorm_bwd", N, H, hd, ldx);
    cuda_impl *im = impl_of(be);
    if (N == 0) return;
    float *part = col_partials(im, mp_cuda_chunk_partial_floats((int64_t)N * H, hd));
    mp_cuda_head_rmsnorm_bwd(dx, ldx, dw, part, x_save, rstd, w, N, H, hd, im->stream);
    LAUNCHED();
    PROF_END(be, "%s", "head_rmsnorm_bwd");
}

/* ---- RoPE ----
 * The table's signature carries no table length; the launcher asserts pos0 + T <= max_pos, so it is
 * given exactly pos0 + T. Contract (the same as the CPU backend reads): cos/sin hold at least pos0 + T
 * rows of hd/2. layers/llama.c passes tables of exactly T rows with pos0 = 0. */

/* x (bf16 [B,T,H,hd], token rows ld apart) rotated in place by +angle at positions pos0 + t. */
static void cu_rope_fwd(mp_backend *be, void *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                        int pos0, int ld) {
    PROF_BEGIN(be);
    mp_cuda_rope_fwd(x, cos_t, sin_t, B, T, H, hd, pos0, pos0 + T, ld, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "rope_fwd");
}

/* dx rotated in place by -angle (the gradient of the rotation). */
static void cu_rope_bwd(mp_backend *be, void *dx, const float *cos_t, const float *sin_t, int B, int T, int H,
                        int hd, int pos0, int ld) {
    PROF_BEGIN(be);
    mp_cuda_rope_bwd(dx, cos_t, sin_t, B, T, H, hd, pos0, pos0 + T, ld, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "rope_bwd");
}

/* ---- attention ---- */

/* The flash kernels' limits (kernels_cuda.h): 1 <= hd <= MP_CUDA_ATTN_MAX_HD (a lane's register tile and
 * the static shared-memory rows), H % KV == 0, B*H <= 65535 (grid y), a sliding window >= 0. The launchers only assert() them,
 * and nvcc's non-Release configurations define NDEBUG (CMake's RelWithDebInfo default for CUDA), where a
 * larger hd would silently overrun the kernels' arrays. The table's ops return void, so a shape beyond
 * them aborts here, naming the limit, in every build. A model never gets here with a larger hd: the table's
 * attn_max_head_dim (MP_CUDA_ATTN_MAX_HD) makes llama_plan_memory refuse it before a run starts. */
static void attn_check_limits(const char *op, int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    const char *why = NULL;
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || H % KV != 0) why = "H and KV must be > 0 with H % KV == 0";
    else if (hd < 1 || hd > MP_CUDA_ATTN_MAX_HD) why = "head_dim must be in [1, 128] (MP_CUDA_ATTN_MAX_HD)";
    else if ((int64_t)B * H > 65535) why = "micro-batch x local heads must be <= 65535 (CUDA grid y)";
    else if (ldq < H * hd || ldkv < KV * hd) why = "the row strides must cover the heads (ldq >= H*hd, ldkv >= KV*hd)";
    else if (window < 0) why = "the sliding window must be >= 0 (0: full causal)";
    if (!why) return;
    fprintf(stderr, "%s: error: %s: cuda %s (B %d, T %d, H %d, KV %d, hd %d, ldq %d, ldkv %d, window %d): %s\n",
            mp_log_prog(), __FILE__, op, B, T, H, KV, hd, ldq, ldkv, window, why);
    abort();
}

/* Causal GQA flash attention forward: out (bf16) and lse [B,H,T] (fp32); q, k, v with row strides ldq,
 * ldkv (the fused [q | k | v]). Limits: hd <= 128, H % KV == 0, B*H <= 65535 (checked here, also asserted by
 * the launcher). */
static void cu_attn_fwd(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v, int B,
                        int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    PROF_BEGIN(be);
    attn_check_limits("attn_fwd", B, T, H, KV, hd, ldq, ldkv, window);
    mp_cuda_attn_fwd(out, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "attn_fwd");
}

/* Attention of Tq new queries against a KV cache (k_attn_kv.cu). A prefill from position 0 whose cache
 * rows are the whole-sequence layout (one sequence, or Tq = Tc) is attn_fwd, the tiled kernel. */
static void cu_attn_fwd_kv(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                           int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window) {
    attn_check_limits("attn_fwd_kv", B, Tq, H, KV, hd, H * hd, KV * hd, window);
    if (pos0 == 0 && (B == 1 || Tq == Tc))   /* dense: the cache */
        mp_cuda_attn_fwd(out, lse, q, k, v, B, Tq, H, KV, hd, H * hd, KV * hd, window, cs(be));
    else mp_cuda_attn_fwd_kv(out, lse, q, k, v, B, Tq, pos0, Tc, H, KV, hd, window, cs(be));
    LAUNCHED();
}

/* Its backward: dq, dk, dv (bf16, strides as q, k, v) written; scratch [B,H,T] floats receives
 * D = rowsum(dout * out). */
static void cu_attn_bwd(mp_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                        const void *out, const float *lse, const void *q, const void *k, const void *v, int B, int T,
                        int H, int KV, int hd, int ldq, int ldkv, int window) {
    PROF_BEGIN(be);
    attn_check_limits("attn_bwd", B, T, H, KV, hd, ldq, ldkv, window);
    mp_cuda_attn_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "attn_bwd");
}

/* ---- SwiGLU ---- */

/* out = silu(gate) * up over n bf16 elements. */
static void cu_swiglu_fwd(mp_backend *be, void *out, const void *gate, const void *up, int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_swiglu_fwd(out, gate, up, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "swiglu_fwd");
}

/* dgate, dup (bf16) written from dout, gate, up. */
static void cu_swiglu_bwd(mp_backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                          int64_t n) {
    PROF_BEGIN(be);
    mp_cuda_swiglu_bwd(dgate, dup, dout, gate, up, n, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "swiglu_bwd");
}

/* ---- vocab-parallel cross-entropy over bf16 logits [N, v_local]; statistics fp32 ---- */

/* rowmax[n] = max of the first v_valid columns. */
static void cu_xent_rowmax(mp_backend *be, float *rowmax, const void *logits, int N, int v_local, int v_valid) {
    PROF_BEGIN(be);
    mp_cuda_xent_rowmax_bf16(rowmax, logits, N, v_local, v_valid, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_rowmax");
}

/* sumexp[n] = sum over the first v_valid columns of exp(logit - rowmax[n]) (rowmax global). */
static void cu_xent_sumexp(mp_backend *be, float *sumexp, const void *logits, const float *rowmax, int N,
                           int v_local, int v_valid) {
    PROF_BEGIN(be);
    mp_cuda_xent_sumexp_bf16(sumexp, logits, rowmax, N, v_local, v_valid, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_sumexp");
}

/* tlogit[n] = logits[n, tgt[n] - v_start] if the target is local, else 0. The table's xent_target has no
 * v_valid (the CPU backend tests c < v_local), so the launcher's v_valid is v_local: the same rule, and
 * targets are real token ids, never vocab padding. */
static void cu_xent_target(mp_backend *be, float *tlogit, const void *logits, const int32_t *tgt, int N, int v_local,
                           int v_start) {
    PROF_BEGIN(be);
    mp_cuda_xent_target_bf16(tlogit, logits, tgt, N, v_local, v_local, v_start, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_target");
}

/* rowmax, sumexp and tlogit in one read of the bf16 logits (xent_rowmax + xent_sumexp + xent_target fused):
 * the shard's own max and the sum against it (with one vocab shard, tp = 1, the global values; at tp > 1
 * layers/llama.c all-reduces the max and takes each shard's sum to it with xent_rescale).
 * Targets are bounded by v_local, as in cu_xent_target and core/backend_cpu.c's cpu_xent_fwd. */
static void cu_xent_fwd(mp_backend *be, float *rowmax, float *sumexp, float *tlogit, const void *logits,
                        const int32_t *tgt, int N, int v_local, int v_valid, int v_start) {
    PROF_BEGIN(be);
    mp_cuda_xent_fwd_bf16(rowmax, sumexp, tlogit, logits, tgt, N, v_local, v_valid, v_start, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_fwd");
}

/* sumexp[n] *= exp(local_max[n] - rowmax[n]) (0 where local_max is -inf): a shard's xent_fwd sum taken to
 * the global max before the all-reduce SUM (tp > 1). */
static void cu_xent_rescale(mp_backend *be, float *sumexp, const float *local_max, const float *rowmax, int N) {
    PROF_BEGIN(be);
    mp_cuda_xent_rescale(sumexp, local_max, rowmax, N, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_rescale");
}

/* losses[n] = log(sumexp[n]) + rowmax[n] - tlogit[n], all fp32. */
static void cu_xent_loss(mp_backend *be, float *losses, const float *rowmax, const float *sumexp,
                         const float *tlogit, int N) {
    PROF_BEGIN(be);
    mp_cuda_xent_loss(losses, rowmax, sumexp, tlogit, N, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_loss");
}

/* In place, bf16: logits <- dloss * (softmax - onehot(tgt)); padding columns 0. */
static void cu_xent_bwd(mp_backend *be, void *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                        float dloss, int N, int v_local, int v_valid, int v_start) {
    PROF_BEGIN(be);
    mp_cuda_xent_bwd_bf16(logits, rowmax, sumexp, tgt, dloss, N, v_local, v_valid, v_start, cs(be));
    LAUNCHED();
    PROF_END(be, "%s", "xent_bwd");
}

/* ---- optimizer ---- */

/* AdamW on fp32 p, g, m, v (n elements); the gradient is scaled by the host value grad_scale (no device
 * factor from the table); p_act (bf16, may be NULL) receives the updated weights in the same pass. The
 * weight-decay mask's pieces are one launch each, queued back to back on the stream (the kernel takes one
 * wd; on the CPU the pieces share one pass, here launches are asynchronous and cost no host wait). */
static void cu_adamw(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                     const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps, float wd,
                     int step, float grad_scale) {
    PROF_BEGIN(be);
    mp_adamw_pieces it = mp_adamw_pieces_of(segs, nsegs, 0, n);
    int64_t i0, i1;
    int decay;
    while (mp_adamw_piece(&it, &i0, &i1, &decay)) {
        mp_bf16 *act = p_act ? (mp_bf16 *)p_act + i0 : NULL;
        mp_cuda_adamw(p + i0, act, g + i0, m + i0, v + i0, i1 - i0, lr, beta1, beta2, eps, decay ? wd : 0.0f, step,
                      grad_scale, NULL, cs(be));
        LAUNCHED();
    }
    PROF_END(be, "%s", "adamw");
}

/* ---- the ops' own scratch ---- */

/* Floats of column partials the largest of the column sums cs[0 .. ncs) needs (one buffer serves them all). */
static size_t colsum_floats(const mp_colsum *cs, int ncs) {
    size_t most = 0;
    for (int i = 0; i < ncs; i++) {
        size_t f = cs[i].rows > 0 && cs[i].cols > 0 ? mp_cuda_chunk_partial_floats(cs[i].rows, cs[i].cols) : 0;
        if (f > most) most = f;
    }
    return most;
}

/* Bytes of embed_bwd's keys for `tokens` tokens plus the column partials of the largest of cs: what the two
 * grow-on-demand buffers hold after those calls (see the top of the file). */
static int64_t cu_scratch_bytes(int tokens, const mp_colsum *cs, int ncs) {
    size_t keys = tokens > 0 ? mp_cuda_embed_bwd_scratch_bytes(tokens) : 0;
    return (int64_t)keys + (int64_t)(colsum_floats(cs, ncs) * sizeof(float));
}

/* Grows both buffers now to what cu_scratch_bytes counts (never shrinks), so that no later op of those
 * shapes allocates. */
static void cu_scratch_reserve(mp_backend *be, int tokens, const mp_colsum *cs, int ncs) {
    cuda_impl *im = impl_of(be);
    if (tokens > 0)
        scratch_grow(im, &im->keys, &im->keys_bytes, mp_cuda_embed_bwd_scratch_bytes(tokens), "embed_bwd keys");
    size_t floats = colsum_floats(cs, ncs);
    if (floats) col_partials(im, floats);
}

/* ---- the table, creation, accessors ---- */

static mp_backend g_cuda = {
    .name = "cuda",
    .device = MP_DEV_CUDA,
    .host_memory = 0,
    .act_dtype = MP_BF16,
    .attn_max_head_dim = MP_CUDA_ATTN_MAX_HD,
    .alloc = cu_alloc,
    .free = cu_free,
    .memset0 = cu_memset0,
    .to_host = cu_to_host,
    .to_device = cu_to_device,
    .to_device_async = cu_to_device_async,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .event_sync = cu_event_sync,
    .copy = cu_copy,
    .synchronize = cu_synchronize,
    .gemm = cu_gemm,
    .add = cu_add,
    .accumulate = cu_accumulate,
    .scale = cu_scale,
    .to_act = cu_to_act,
    .from_act = cu_from_act,
    .sumsq_acc = cu_sumsq_acc,
    .sum_acc = cu_sum_acc,
    .embed_fwd = cu_embed_fwd,
    .embed_bwd = cu_embed_bwd,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .bias_add = cu_bias_add,
    .bias_bwd = cu_bias_bwd,
    .head_rmsnorm_fwd = cu_head_rmsnorm_fwd,
    .head_rmsnorm_bwd = cu_head_rmsnorm_bwd,
    .rope_fwd = cu_rope_fwd,
    .rope_bwd = cu_rope_bwd,
    .attn_fwd = cu_attn_fwd,
    .attn_fwd_kv = cu_attn_fwd_kv,
    .attn_bwd = cu_attn_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .xent_rowmax = cu_xent_rowmax,
    .xent_sumexp = cu_xent_sumexp,
    .xent_target = cu_xent_target,
    .xent_fwd = cu_xent_fwd,
    .xent_rescale = cu_xent_rescale,
    .xent_loss = cu_xent_loss,
    .xent_bwd = cu_xent_bwd,
    .adamw = cu_adamw,
    .scratch_bytes = cu_scratch_bytes,
    .scratch_reserve = cu_scratch_reserve,
    .impl = NULL,
};

/* Frees whatever im holds (each member NULL ok) after waiting for the device, then im itself. */
static void impl_release(cuda_impl *im) {
    if (!im) return;
    (void)cudaDeviceSynchronize();   /* after a failed set-up this may fail too: nothing to report then */
    mp_cuda_prof_close(im->prof);
    dev_release(im, im->keys, im->keys_bytes, MP_MEM_ACTS);
    dev_release(im, im->col_partial, im->col_floats * sizeof(float), MP_MEM_ACTS);
    dev_release(im, im->partials, MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double), MP_MEM_OTHER);
    if (im->blas) {
        mp_cuda_blas_destroy(im->blas);
        charge_dev(im, -(int64_t)MP_CUDA_BLAS_WORKSPACE_BYTES);
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
    charge_dev(im, (int64_t)MP_CUDA_BLAS_WORKSPACE_BYTES);   /* cudaMalloc'd by gemm_cuda.cu */
    void *p = NULL;
    MP_CUDA_TRY(cudaMalloc(&p, MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double)), err);
    im->partials = p;
    charge_dev(im, (int64_t)(MP_CUDA_REDUCE_MAX_BLOCKS * sizeof(double)));
    return MP_OK;
}

mp_code mp_backend_cuda(int device, mp_backend **out, mp_err *err) {
    assert(out);
    *out = NULL;
    if (g_cuda.impl) {
        const cuda_impl *im = g_cuda.impl;
        if (im->device != device)
            return mp_err_set(err, MP_EINTERNAL, "device cuda: the backend already runs on GPU %d, not %d (one GPU "
                              "per process)", im->device, device);
        *out = &g_cuda;
        return MP_OK;
    }
    cuda_impl *im = mp_calloc(sizeof *im, MP_MEM_OTHER);
    mp_code rc = impl_init(im, device, err);
    if (rc) {
        mp_err_wrap(err, "device cuda: GPU %d", device);
        impl_release(im);
        return rc;
    }
    g_cuda.impl = im;
    *out = &g_cuda;
    return MP_OK;
}

cudaStream_t mp_backend_cuda_stream(mp_backend *be, mp_stream s) { return stream_of(be, s); }

