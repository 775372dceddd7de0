/*
 * core/rope.h — the RoPE frequency scaling as the backends' math sees it: which rule scales the inverse
 * frequencies and its numbers (mp_rope_inv_freq, mp_rope_tables in core/backend.h), as transformers'
 * modeling_rope_utils computes them. Nothing here reads or writes a config: the model's config, above
 * core/, parses, checks, names and prints a scaling; the backends only compute with a valid one.
 */
#ifndef MP_ROPE_H
#define MP_ROPE_H

/* The scaling rule. MP_ROPE_DEFAULT (0, so a zeroed struct means plain RoPE) uses none of the numbers;
 * MP_ROPE_LINEAR divides every inverse frequency by factor; MP_ROPE_LLAMA3 leaves high frequencies,
 * divides low ones by factor and interpolates between (the bands set by the other three numbers). */
typedef enum { MP_ROPE_DEFAULT = 0, MP_ROPE_LINEAR, MP_ROPE_LLAMA3 } mp_rope_type;

typedef struct mp_rope_scaling {
    mp_rope_type type;
    double factor;                          /* linear, llama3: finite, >= 1 */
    double low_freq_factor;                 /* llama3: finite, > 0 */
    double high_freq_factor;                /* llama3: finite, > low_freq_factor */
    int original_max_position_embeddings;   /* llama3: > 0 */
} mp_rope_scaling;

#endif
