/*
 * core/cuda/cuda_check.h — checked CUDA, cuBLAS and NCCL calls that name the call, file and line.
 *
 * Two forms, as for host allocation (core/alloc.h): MP_CUDA_TRY returns an MP_EDEVICE error through
 * the mp_err of the enclosing function (set-up: choosing a device, creating streams and
 * communicators, where the caller can report and exit cleanly); MP_CUDA_CHECK aborts with the message
 * (inside a step, where the backend table's ops return nothing and a failed launch leaves no state
 * worth keeping: the newest checkpoint is intact, and the run resumes from it).
 */
#ifndef MP_CUDA_CHECK_H
#define MP_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/error.h"
#include "core/log.h"

#define MP_CUDA_TRY(call, err)                                                                            \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess)                                                                            \
            return mp_err_set((err), MP_EDEVICE, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,          \
                              cudaGetErrorString(e_), cudaGetErrorName(e_));                              \
    } while (0)

#define MP_CUDA_CHECK(call)                                                                               \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s: error: %s:%d: %s: %s (%s)\n", mp_log_prog(), __FILE__, __LINE__, #call,    \
                    cudaGetErrorString(e_), cudaGetErrorName(e_));                                        \
            abort();                                                                                      \
        }                                                                                                 \
    } while (0)

#endif
