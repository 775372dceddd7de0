/*
 * core/cuda/module.c — the entry of libmeshpoint-cuda.so (core/cuda_module.h): the one symbol the module
 * exports (cmake/cuda.cmake's version script hides every other), returning the table through which
 * core reaches the CUDA backend, the GPU count and the NCCL communicators.
 */
#include "core/cuda_module.h"
#include "core/cuda/backend_cuda.h"
#include "core/cuda/comm_nccl.h"
#include "core/cuda/device_cuda.h"

/* Selects this process's GPU, then the backend on it (backend_cuda.h: one per process). */
static mp_code module_backend(mp_backend **out, mp_err *err) {
    *out = NULL;
    int dev;
    MP_TRY(mp_cuda_device_select(&dev, err));
    return mp_backend_cuda(dev, out, err);
}

/* An NCCL communicator over group on the cudaStream_t behind be's stream s. */
static mp_comm *module_comm_create(MPI_Comm group, mp_backend *be, mp_stream s, mp_err *err) {
    return mp_comm_nccl_create(group, mp_backend_cuda_stream(be, s), err);
}

static const mp_cuda_module g_table = {
    .abi = MP_CUDA_MODULE_ABI,
    .backend_size = sizeof(mp_backend),
    .comm_size = sizeof(mp_comm),
    .err_size = sizeof(mp_err),
    .device_count = mp_cuda_device_count,
    .backend = module_backend,
    .comm_create = module_comm_create,
};

/* The module's table (static: valid for the life of the process). */
const mp_cuda_module *mp_cuda_module_entry(void);
const mp_cuda_module *mp_cuda_module_entry(void) { return &g_table; }
