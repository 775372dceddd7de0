/*
 * core/cuda/device_cuda.h — finding and choosing the GPU a process trains on (CUDA builds only).
 *
 * One GPU per process, chosen by the process's rank among the ranks of its host (MPI's
 * MPI_COMM_TYPE_SHARED split when MPI runs, else 0), modulo the GPUs the host shows: `mpirun -np 8` on
 * an 8-GPU node gives rank i GPU i, and CUDA_VISIBLE_DEVICES narrows the choice as usual. A host
 * without a usable GPU (no driver, no device, cudaGetDeviceCount failing, a GPU older than sm_80)
 * is a usage error (MP_EINPUT, exit 2) whose message says what CUDA reported, so a job submitted to
 * the wrong partition fails at once with the reason rather than on the first kernel.
 */
#ifndef MP_DEVICE_CUDA_H
#define MP_DEVICE_CUDA_H

#include <stddef.h>
#include "core/error.h"

/* Selects this process's GPU (cudaSetDevice) and returns its index in *device. Collective over
 * MPI_COMM_WORLD when MPI is initialised (the host split); local otherwise. */
mp_code mp_cuda_device_select(int *device, mp_err *err);

/* GPUs this process can use (>= 0), or -1 with the reason in why[cap] (CUDA's own error name and text).
 * Local, no MPI; selects nothing. */
int mp_cuda_device_count(char *why, size_t cap);

#endif
