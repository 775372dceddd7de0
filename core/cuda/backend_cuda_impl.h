/*
 * core/cuda/backend_cuda_impl.h — what the CUDA backend's two files share: the backend's state
 * (cuda_impl), the launch and profiling brackets, and the memory helpers of core/cuda/backend_cuda.c
 * (accounting, scratch, the thread's device) that the ops of core/cuda/backend_cuda_ops.c use. The
 * design: the top comment of core/cuda/backend_cuda.c. Included by those two files only.
 */
#ifndef MP_BACKEND_CUDA_IMPL_H
#define MP_BACKEND_CUDA_IMPL_H
#include "core/cuda/backend_cuda.h"
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <cuda_runtime_api.h>
#include "core/cuda/cuda_check.h"
#include "core/cuda/gemm_cuda.h"
#include "core/cuda/prof_cuda.h"

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

static inline cuda_impl *impl_of(const mp_backend *be) {
    assert(be && be->impl && be->device == MP_DEV_CUDA);
    return (cuda_impl *)be->impl;
}

/* The compute stream's handle. */
static inline cudaStream_t cs(const mp_backend *be) { return impl_of(be)->stream; }

/* The cudaStream_t of s (NULL: the compute stream). */
static inline cudaStream_t stream_of(const mp_backend *be, mp_stream s) {
    return s ? (cudaStream_t)(void *)s : cs(be);
}

/* core/cuda/backend_cuda.c (contracts at their definitions): im->device made current on the calling
 * thread; device bytes charged; a device allocation (aborts when out of memory) and its release; a
 * scratch buffer grown on demand; the column-sum partials grown to floats. */
void cuda_bind_thread(const cuda_impl *im);
void cuda_charge_dev(cuda_impl *im, int64_t delta);
void *cuda_dev_malloc(cuda_impl *im, size_t bytes, mp_mem_cat cat, const char *what);
void cuda_dev_release(cuda_impl *im, void *p, size_t bytes, mp_mem_cat cat);
void cuda_scratch_grow(cuda_impl *im, void **buf, size_t *have, size_t need, const char *what);
float *cuda_col_partials(cuda_impl *im, size_t floats);

/* core/cuda/backend_cuda_ops.c: the backend table over the ops (the singleton: its impl is set once,
 * by mp_backend_cuda). */
extern mp_backend cuda_table;

#endif
