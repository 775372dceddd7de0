/*
 * core/cuda_module.h — the CUDA backend as a loadable module, as ggml loads its backends.
 *
 * The CUDA backend (core/cuda/: kernels, cuBLASLt GEMMs, the NCCL communicator, the profiler) is built
 * into a shared module, libmeshpoint-cuda.so, placed next to the meshpoint binary (and next to every
 * program of the build tree; bin/ of the GPU bundle). The binary itself links no CUDA library: a CPU
 * run never maps libcudart, libcublasLt or libnccl, and the binary starts on a node that has none of them.
 * The module is opened with dlopen the first time something asks for a CUDA device (mp_backend_get
 * "cuda", a device communicator, mp_cuda_devices for `--version`), and never closed (its atexit handler,
 * the profiler's, and CUDA's own stay valid until exit).
 *
 * Which file: $MP_CUDA_MODULE when set and not empty (a path, given to dlopen as it is), else
 * libmeshpoint-cuda.so in the directory of this process's executable (/proc/self/exe: the binary's own
 * folder, symlinks resolved), the `$ORIGIN` rule.
 *
 * The boundary is two tables: the module hands back one mp_cuda_module (below); through it come the
 * struct mp_backend of core/backend.h and the mp_comm tables of the NCCL communicators (core/comm.h), so
 * no caller branches on CPU vs CUDA and no caller outside core/cuda/ sees a CUDA type. The module calls
 * back into core's own functions (errors, accounted allocation, log prefix, communicator counters): the
 * executables of a CUDA build export core's mp_* functions (core/cuda/host_symbols.list), so there is one
 * copy of core's state, the executable's. The table carries an ABI number and the sizes of the structs it shares;
 * a module from another build is refused rather than called.
 */
#ifndef MP_CUDA_MODULE_H
#define MP_CUDA_MODULE_H

#include <stddef.h>
#include <mpi.h>
#include "core/backend.h"
#include "core/comm.h"
#include "core/error.h"

#define MP_CUDA_MODULE_FILE "libmeshpoint-cuda.so"
#define MP_CUDA_MODULE_ENTRY "mp_cuda_module_entry"   /* the one symbol the module exports */
#define MP_CUDA_MODULE_ABI 2                          /* bump when this table or a shared struct changes */

typedef struct mp_cuda_module {
    int abi;                 /* MP_CUDA_MODULE_ABI of the module's build */
    size_t backend_size;     /* sizeof(mp_backend), sizeof(mp_comm), sizeof(mp_err) as the module saw them */
    size_t comm_size;
    size_t err_size;
    /* GPUs this process can use (>= 0), or -1 with CUDA's reason in why[cap]. Local, selects nothing. */
    int (*device_count)(char *why, size_t cap);
    /* Selects this process's GPU (by its rank on the host; collective under MPI) and returns the CUDA
     * backend on it (one per process). MP_EINPUT with CUDA's reason when the host has no usable GPU,
     * MP_EDEVICE when creating the backend fails; *out NULL then. */
    mp_code (*backend)(mp_backend **out, mp_err *err);
    /* An NCCL communicator over the ranks of group (collective over it, more than one rank) enqueueing on
     * stream s of the CUDA backend be (made by be->stream_create; the caller keeps it alive). NULL with
     * err set when NCCL fails. */
    mp_comm *(*comm_create)(MPI_Comm group, mp_backend *be, mp_stream s, mp_err *err);
} mp_cuda_module;

/* The module's table, loaded on the first call (later calls return the same table, or the same error:
 * a failed load is not retried). MP_EINPUT (the user asked for a device this binary or host cannot give)
 * when this build has no CUDA, or when the module cannot be opened (the message names its path and
 * gives dlerror(): missing, or a CUDA library it needs missing), lacks its entry symbol, or is of another
 * build (ABI or struct sizes differ). *out NULL then. */
mp_code mp_cuda_module_load(const mp_cuda_module **out, mp_err *err);

/* The CUDA devices for `meshpoint --version`: > 0 GPUs, 0 none, -1 unavailable with the reason in
 * why[cap] (not built in; the module missing; no CUDA driver; the module's dlopen error; CUDA's own).
 * Loads the module only on a host with a CUDA driver (libcuda.so.1 opens), so on a CPU node `--version`
 * maps no CUDA library. */
int mp_cuda_devices(char *why, size_t cap);

#endif
