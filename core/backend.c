/*
 * core/backend.c — choosing a backend by name, and the RoPE tables every backend shares.
 *
 * RoPE tables (mp_rope_tables) follow transformers' inverse frequencies: default theta^(-2i/hd), "linear"
 * divides them by factor, "llama3" leaves high frequencies, divides low ones by factor and interpolates
 * smoothly between (modeling_rope_utils._compute_llama3_parameters), all in double, rounded to fp32 once.
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
#include <math.h>
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

double mp_rope_inv_freq(int i, int hd, double theta, const mp_rope_scaling *sc) {
    assert(hd > 0 && hd % 2 == 0 && i >= 0 && i < hd / 2 && theta > 0);
    double inv_freq = pow(theta, -2.0 * i / hd);   /* the default, unchanged bit for bit */
    if (!sc || sc->type == MP_ROPE_DEFAULT) return inv_freq;
    if (sc->type == MP_ROPE_LINEAR) return inv_freq / sc->factor;
    assert(sc->type == MP_ROPE_LLAMA3 && sc->high_freq_factor > sc->low_freq_factor);
    /* transformers' _compute_llama3_parameters, element by element, in double */
    double old_len = sc->original_max_position_embeddings;
    double low_freq_wavelen = old_len / sc->low_freq_factor;
    double high_freq_wavelen = old_len / sc->high_freq_factor;
    double wavelen = 2 * M_PI / inv_freq;
    double llama = wavelen > low_freq_wavelen ? inv_freq / sc->factor : inv_freq;
    int medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (!medium) return llama;
    double smooth = (old_len / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1 - smooth) * llama / sc->factor + smooth * llama;
}

void mp_rope_tables(float *cos_t, float *sin_t, int max_pos, int hd, double theta, const mp_rope_scaling *sc) {
    assert(hd > 0 && hd % 2 == 0 && max_pos >= 0 && theta > 0);
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double inv_freq = mp_rope_inv_freq(i, hd, theta, sc);
        for (int p = 0; p < max_pos; p++) {
            double a = (double)p * inv_freq;
            cos_t[(size_t)p * half + i] = (float)cos(a);
            sin_t[(size_t)p * half + i] = (float)sin(a);
        }
    }
}
