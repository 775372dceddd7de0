/* core/tensor.c — see tensor.h. */
#include "core/tensor.h"
#include <string.h>

void mp_bf16_to_f32_n(float *restrict dst, const uint16_t *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = mp_bf16_to_f32(src[i]);
}

void mp_f32_to_bf16_n(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = mp_f32_to_bf16(src[i]);
}

size_t mp_dtype_size(mp_dtype dt) {
    switch (dt) {
    case MP_F32: return 4;
    case MP_BF16: return 2;
    case MP_I32: return 4;
    }
    return 0;
}

const char *mp_dtype_name(mp_dtype dt) {
    switch (dt) {
    case MP_F32: return "f32";
    case MP_BF16: return "bf16";
    case MP_I32: return "i32";
    }
    return "?";
}

int mp_dtype_parse(const char *s) {
    if (!strcmp(s, "f32") || !strcmp(s, "float32")) return MP_F32;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return MP_BF16;
    if (!strcmp(s, "i32") || !strcmp(s, "int32")) return MP_I32;
    return -1;
}
