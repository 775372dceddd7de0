/*
 * tokenizer/unorm_data.h — the layout of the Unicode normalization tables in tokenizer/unorm_data.c, which
 * scripts/gen_unorm.py generates (Unicode 9.0.0's data, as `tokenizers` has it; the script says why). Read
 * only by tokenizer/unorm.c.
 *
 * A code point cp below MP_UNORM_LIMIT has the properties
 *   mp_unorm_props[mp_unorm_stage2[(mp_unorm_stage1[cp >> MP_UNORM_SHIFT] << MP_UNORM_SHIFT) + (cp & mask)]]
 * and every code point at or above it has mp_unorm_props[0] (class 0, no decomposition, no flags).
 */
#ifndef MP_UNORM_DATA_H
#define MP_UNORM_DATA_H

#include <stdint.h>

#define MP_UNORM_LIMIT 0x30000
#define MP_UNORM_SHIFT 7

/* Quick-check flags: set when the code point alone may change under the form (it decomposes, or, for the
 * composing forms, it never survives composition or may compose with the character before it). A string
 * whose code points have neither a flag of the form nor a nonzero combining class is in that form. */
enum { MP_UNORM_F_D = 1, MP_UNORM_F_KD = 2, MP_UNORM_F_C = 4, MP_UNORM_F_KC = 8 };

typedef struct mp_unorm_prop {
    uint8_t ccc;          /* canonical combining class */
    uint8_t flags;        /* MP_UNORM_F_* */
    uint16_t doff;        /* full canonical decomposition: mp_unorm_pool[doff .. doff+dlen) (dlen 0: none) */
    uint8_t dlen;
    uint16_t koff;        /* full compatibility decomposition, likewise (klen 0: none) */
    uint8_t klen;
} mp_unorm_prop;

typedef struct mp_unorm_pair {
    uint32_t first, second, composite;
} mp_unorm_pair;

extern const mp_unorm_prop mp_unorm_props[];
extern const uint32_t mp_unorm_pool[];
extern const uint16_t mp_unorm_stage1[];
extern const uint16_t mp_unorm_stage2[];
extern const mp_unorm_pair mp_unorm_comp[];   /* the primary composites, sorted by (first, second) */
extern const int mp_unorm_ncomp;

#endif
