/*
 * core/tensor.h — a minimal tensor descriptor: data pointer, dtype, up to 4 dims, device tag.
 *
 * Tensors do not own memory: the model and the checkpoint code allocate one block and point tensors
 * into it (llm.c style). Row-major, contiguous. bf16 is stored as the upper 16 bits of an fp32, with
 * round-to-nearest-even on conversion.
 */
#ifndef MP_TENSOR_H
#define MP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define MP_MAX_DIMS 4

typedef enum { MP_F32 = 0, MP_BF16 = 1, MP_I32 = 2 } mp_dtype;
typedef enum { MP_DEV_CPU = 0, MP_DEV_CUDA = 1 } mp_device;

typedef struct mp_tensor {
    void *data;
    mp_dtype dtype;
    mp_device device;
    int ndim;
    int64_t shape[MP_MAX_DIMS];
} mp_tensor;

size_t mp_dtype_size(mp_dtype dt);
const char *mp_dtype_name(mp_dtype dt);
/* Parses "f32"/"float32", "bf16"/"bfloat16", "i32"/"int32"; returns -1 if unknown. */
int mp_dtype_parse(const char *s);

/* Builds a descriptor (ndim 1..4; unused dims are 1). */
mp_tensor mp_tensor_make(void *data, mp_dtype dt, mp_device dev, int ndim, const int64_t *shape);
int64_t mp_tensor_numel(const mp_tensor *t);
size_t mp_tensor_bytes(const mp_tensor *t);

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
