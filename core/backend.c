/*
 * core/backend.c — choosing a backend by name.
 *
 * "cuda" is a known name in every build. It is reached through the CUDA module (core/cuda_module.h),
 * loaded on this first request: a build without the CUDA toolkit refuses it saying so, a module that
 * cannot be loaded is refused with its path and dlerror(), and the module first finds this process's GPU
 * (core/cuda/device_cuda.c), so a host without a usable one is refused with CUDA's own reason. All are
 * usage errors (MP_EINPUT, exit 2): the user asked for a device this binary or host cannot give, and
 * nothing has been created yet.
 */
#include "core/backend.h"
#include <assert.h>
#include <string.h>
#include "core/cuda_module.h"

mp_code mp_backend_get(const char *name, mp_backend **out, mp_err *err) {
    assert(out);
    *out = NULL;
    if (!name) return mp_err_set(err, MP_EINPUT, "device: no device name given (expected cpu, cpu-bf16 or cuda)");
    if ((strcmp(name, "cpu") == 0 || strcmp(name, "cpu-bf16") == 0) && mp_cpu_isa_check(err))
        return MP_EINPUT;   /* MP_ISA names a level this CPU or build lacks */
    if (strcmp(name, "cpu") == 0) {
        *out = mp_backend_cpu();
        return MP_OK;
    }
    if (strcmp(name, "cpu-bf16") == 0) {   /* the GPU's precision, emulated on the CPU (tests) */
        *out = mp_backend_cpu_bf16();
        return MP_OK;
    }
    if (strcmp(name, "cuda") == 0) {
        const mp_cuda_module *m;
        MP_TRY(mp_cuda_module_load(&m, err));
        /* the GPU, then the table over the kernels, GEMMs and streams (core/cuda/backend_cuda.c; one per process) */
        return m->backend(out, err);
    }
    return mp_err_set(err, MP_EINPUT, "device: unknown device '%s' (expected cpu, cpu-bf16 or cuda)", name);
}
