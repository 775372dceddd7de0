/* core/cuda/device_cuda.c — see device_cuda.h. */
#include "core/cuda/device_cuda.h"
#include <assert.h>
#include <stdio.h>
#include <mpi.h>
#include <cuda_runtime_api.h>
#include "core/cuda/cuda_check.h"

/* This process's rank among the processes of its host (0 without MPI). Collective under MPI. */
static int local_rank(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return 0;
    MPI_Comm host;
    int r = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    MPI_Comm_rank(host, &r);
    MPI_Comm_free(&host);
    return r;
}

mp_code mp_cuda_device_select(int *device, mp_err *err) {
    assert(device);
    *device = -1;
    int lr = local_rank();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return mp_err_set(err, MP_EINPUT, "device cuda: no usable GPU on this host: cudaGetDeviceCount failed: %s (%s)",
                          cudaGetErrorString(e), cudaGetErrorName(e));
    if (n <= 0) return mp_err_set(err, MP_EINPUT, "device cuda: no GPU on this host (cudaGetDeviceCount: 0)");
    int d = lr % n;
    struct cudaDeviceProp prop;
    MP_CUDA_TRY(cudaGetDeviceProperties(&prop, d), err);
    if (prop.major < 8)
        return mp_err_set(err, MP_EINPUT, "device cuda: GPU %d (%s) is sm_%d%d; meshpoint's kernels need sm_80 or newer "
                          "(bf16 tensor cores)", d, prop.name, prop.major, prop.minor);
    MP_CUDA_TRY(cudaSetDevice(d), err);
    *device = d;
    return MP_OK;
}

int mp_cuda_device_count(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n;
    snprintf(why, cap, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}
