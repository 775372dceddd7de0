/*
 * layers/rope.c — see rope.h: transformers' RoPE scaling rules and the fp32 tables the backends rotate by.
 *
 * The tables follow transformers' inverse frequencies: default theta^(-2i/hd), "linear" divides them by
 * factor, "llama3" leaves high frequencies, divides low ones by factor and interpolates smoothly between
 * (modeling_rope_utils._compute_llama3_parameters), all in double and rounded to fp32 once, so every
 * backend rotates by the same angles (CUDA copies these host tables; nothing transcendental runs on the
 * device). The default is the expression it always was, bit for bit: no existing loss moves.
 */
#include "layers/rope.h"
#include <assert.h>
#include <math.h>
#include <stdio.h>

const char *llama_rope_type_name(mp_rope_type t) {
    switch (t) {
    case MP_ROPE_DEFAULT: return "default";
    case MP_ROPE_LINEAR: return "linear";
    case MP_ROPE_LLAMA3: return "llama3";
    }
    return "unknown";
}

int llama_rope_scaling_equal(const mp_rope_scaling *a, const mp_rope_scaling *b) {
    if (a->type != b->type) return 0;
    if (a->type == MP_ROPE_DEFAULT) return 1;
    if (a->factor != b->factor) return 0;
    if (a->type == MP_ROPE_LINEAR) return 1;
    return a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
           a->original_max_position_embeddings == b->original_max_position_embeddings;
}

void llama_rope_scaling_describe(const mp_rope_scaling *s, char *buf, size_t cap) {
    if (s->type == MP_ROPE_LINEAR)
        snprintf(buf, cap, "linear (factor %.17g)", s->factor);
    else if (s->type == MP_ROPE_LLAMA3)
        snprintf(buf, cap, "llama3 (factor %.17g, low_freq_factor %.17g, high_freq_factor %.17g, "
                 "original_max_position_embeddings %d)", s->factor, s->low_freq_factor, s->high_freq_factor,
                 s->original_max_position_embeddings);
    else
        snprintf(buf, cap, "%s", llama_rope_type_name(s->type));
}

mp_code llama_rope_scaling_check(const mp_rope_scaling *s, mp_err *err) {
    if (s->type == MP_ROPE_DEFAULT) return MP_OK;
    if (s->type != MP_ROPE_LINEAR && s->type != MP_ROPE_LLAMA3)
        return mp_err_set(err, MP_EINPUT, "unknown rope_type %d", (int)s->type);
    if (!isfinite(s->factor) || !(s->factor >= 1.0))
        return mp_err_set(err, MP_EINPUT, "\"factor\": must be a finite number >= 1, got %g", s->factor);
    if (s->type == MP_ROPE_LINEAR) return MP_OK;
    if (!isfinite(s->low_freq_factor) || !(s->low_freq_factor > 0))
        return mp_err_set(err, MP_EINPUT, "\"low_freq_factor\": must be a finite number > 0, got %g",
                          s->low_freq_factor);
    if (!isfinite(s->high_freq_factor) || !(s->high_freq_factor > s->low_freq_factor))
        return mp_err_set(err, MP_EINPUT,
                          "\"high_freq_factor\": must be a finite number > low_freq_factor (%g), got %g",
                          s->low_freq_factor, s->high_freq_factor);
    if (s->original_max_position_embeddings <= 0)
        return mp_err_set(err, MP_EINPUT, "\"original_max_position_embeddings\": must be > 0, got %d",
                          s->original_max_position_embeddings);
    return MP_OK;
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
