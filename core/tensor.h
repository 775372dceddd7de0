/*
 * core/tensor.h — the element types (mp_dtype) and device tags (mp_device) every layer names, and the
 * bf16 <-> fp32 conversions. There is no tensor object: the model and the checkpoint code allocate one
 * block and keep plain pointers into it with their shapes beside them (llm.c style), row-major and
 * contiguous. bf16 is stored as the upper 16 bits of an fp32, with round-to-nearest-even on conversion.
 */
#ifndef MP_TENSOR_H
#define MP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum { MP_F32 = 0, MP_BF16 = 1, MP_I32 = 2 } mp_dtype;
typedef enum { MP_DEV_CPU = 0, MP_DEV_CUDA = 1 } mp_device;

/* Bytes per element (0 for a value outside the enum); the short name ("f32", "bf16", "i32"; "?"). */
size_t mp_dtype_size(mp_dtype dt);
const char *mp_dtype_name(mp_dtype dt);
/* Parses "f32"/"float32", "bf16"/"bfloat16", "i32"/"int32"; returns -1 if unknown. */
int mp_dtype_parse(const char *s);

/* fp32 -> bf16, round to nearest even (a NaN stays a quiet NaN); bf16 -> fp32 is exact. */
static inline uint16_t mp_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}
static inline float mp_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
/* The same over n elements (dst and src must not overlap). */
void mp_bf16_to_f32_n(float *dst, const uint16_t *src, int64_t n);
void mp_f32_to_bf16_n(uint16_t *dst, const float *src, int64_t n);

#endif
