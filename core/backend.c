/*
 * core/backend.c — choosing a backend by name, and the RoPE tables every backend shares.
 *
 * This build has only the CPU backend; "cuda" is a known name that is refused with MP_EDEVICE and a
 * message saying so, so a user who asks for a GPU learns why there is none instead of seeing "unknown".
 */
#include "core/backend.h"
#include <assert.h>
#include <math.h>
#include <string.h>

mp_code mp_backend_get(const char *name, mp_backend **out, mp_err *err) {
    assert(out);
    *out = NULL;
    if (!name) return mp_err_set(err, MP_EINPUT, "device: no device name given (expected cpu or cuda)");
    if (strcmp(name, "cpu") == 0) {
        *out = mp_backend_cpu();
        return MP_OK;
    }
    if (strcmp(name, "cuda") == 0)
        return mp_err_set(err, MP_EDEVICE, "device cuda: meshpoint was built without CUDA");
    return mp_err_set(err, MP_EINPUT, "device: unknown device '%s' (expected cpu or cuda)", name);
}

void mp_rope_tables(float *cos_t, float *sin_t, int max_pos, int hd, double theta) {
    assert(hd > 0 && hd % 2 == 0 && max_pos >= 0 && theta > 0);
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double inv_freq = pow(theta, -2.0 * i / hd);
        for (int p = 0; p < max_pos; p++) {
            double a = (double)p * inv_freq;
            cos_t[(size_t)p * half + i] = (float)cos(a);
            sin_t[(size_t)p * half + i] = (float)sin(a);
        }
    }
}
