/*
 * layers/rope.h — RoPE's frequencies as the model computes them: Hugging Face's scaling rules (rope_type
 * "default", "linear", "llama3"), their numbers and checks, their names for messages, and the fp32 cos/sin
 * tables the backends' rope_fwd / rope_bwd ops rotate by (core/backend.h).
 *
 * Why here and not in core/: the rules are transformers' (modeling_rope_utils), chosen by a model's
 * config.json, and a family may bring its own; the backends only rotate pairs by the angles of a table
 * they are given. So core/ knows no rope_type, and a new rule is an enum value, its numbers, a branch in
 * mp_rope_inv_freq and its checks here, with nothing changed below layers/. The families of
 * layers/family.h (Mistral, Qwen2, Qwen3, Phi-3 mini 4k) all use the default rule with their own
 * rope_theta. Phi-3's 128k "longrope" (older configs say "su") switches tables as the sequence grows: it
 * is refused naming its type where config.json is parsed (check_rope, layers/llama_config.c), as is any
 * other type (yarn, dynamic, ...).
 *
 * Parsing rope_scaling / rope_parameters stays with the rest of config.json in llama_config.c; this
 * module takes a parsed mp_rope_scaling. The types keep the mp_rope_ prefix they had in core/rope.h (the
 * config, checkpoint and test code name them); the helpers that were the config's keep llama_rope_.
 */
#ifndef MP_LAYERS_ROPE_H
#define MP_LAYERS_ROPE_H

#include <stddef.h>
#include "core/error.h"

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

/* "default" | "linear" | "llama3" (the HF rope_type); "unknown" for a value outside the enum. */
const char *llama_rope_type_name(mp_rope_type t);
/* 1 if a and b scale RoPE the same way (the numbers a type does not use are ignored). */
int llama_rope_scaling_equal(const mp_rope_scaling *a, const mp_rope_scaling *b);
/* Describes s into buf (cap bytes) for messages and listings: "default", "linear (factor 2)",
 * "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192)". */
void llama_rope_scaling_describe(const mp_rope_scaling *s, char *buf, size_t cap);
/* MP_OK if s is one the tables can be computed for: a known type, and the numbers that type uses in
 * range (factor finite >= 1, as transformers requires; low_freq_factor finite > 0; high_freq_factor
 * finite > low_freq_factor, since equal ones divide by zero in the smooth band;
 * original_max_position_embeddings > 0). Else MP_EINPUT with a message naming the field (the caller
 * wraps it with where s came from). The numbers a type does not use are not looked at. */
mp_code llama_rope_scaling_check(const mp_rope_scaling *s, mp_err *err);

/* The RoPE inverse frequency of pair i (0 <= i < hd/2), in double, as transformers computes it
 * (modeling_rope_utils): default theta^(-2i/hd); sc->type linear: that / factor; llama3: with
 * wavelen = 2 pi / inv_freq, unchanged below original_max_position_embeddings / high_freq_factor, / factor
 * above original_max_position_embeddings / low_freq_factor, and in between (bounds included)
 * (1 - s) * inv_freq / factor + s * inv_freq with s = (original / wavelen - low) / (high - low).
 * sc NULL or MP_ROPE_DEFAULT: no scaling. sc must pass llama_rope_scaling_check (asserted in part). */
double mp_rope_inv_freq(int i, int hd, double theta, const mp_rope_scaling *sc);
/* Fills the tables cos_t, sin_t [max_pos, hd/2] (host memory, fp32) that rope_fwd / rope_bwd take:
 * angle = pos * mp_rope_inv_freq(i, hd, theta, sc) in double, each cos and sin rounded to fp32 once
 * (transformers' rotary embedding; sc NULL: no scaling). */
void mp_rope_tables(float *cos_t, float *sin_t, int max_pos, int hd, double theta, const mp_rope_scaling *sc);

#endif
