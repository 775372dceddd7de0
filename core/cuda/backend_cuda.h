/*
 * core/cuda/backend_cuda.h — the CUDA implementation of struct mp_backend (core/backend.h), CUDA builds
 * only: act_dtype bf16, device memory (host_memory = 0), one compute stream. core/backend.c's
 * mp_backend_get("cuda") loads the CUDA module (core/cuda_module.h), whose backend entry
 * (core/cuda/module.c) selects the GPU (core/cuda/device_cuda.h) and then calls mp_backend_cuda.
 *
 * NOT YET RUN ON A GPU: this glue, like the kernels under it, has only been compiled (docs/CUDA.md).
 *
 * Memory accounting: core/alloc.h charges host allocations only and has no entry point for memory it
 * did not allocate itself, so device memory and page-locked host memory are NOT in mp_mem_current /
 * mp_mem_peak_total on this backend (backend_cuda.c keeps only the total it holds, for its
 * out-of-memory message).
 */
#ifndef MP_BACKEND_CUDA_H
#define MP_BACKEND_CUDA_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "core/backend.h"

/* The CUDA backend on GPU `device` (already chosen by mp_cuda_device_select; cudaSetDevice is called
 * again here). One per process: the first call creates it (compute stream, cuBLASLt handle and its
 * workspace, the reduction partials); later calls with the same device return the same table, another
 * device is MP_EINTERNAL. MP_EDEVICE with CUDA's or cuBLAS's message when creation fails (*out NULL). */
mp_code mp_backend_cuda(int device, mp_backend **out, mp_err *err);

/* The cudaStream_t behind an mp_stream of this backend (NULL: the compute stream), e.g. for an NCCL
 * communicator (core/cuda/comm_nccl.h) on a stream made by be->stream_create. */
cudaStream_t mp_backend_cuda_stream(mp_backend *be, mp_stream s);

#endif
