/*
 * core/rng.h — counter-based RNG (Philox4x32-10, Salmon et al. 2011) for parameter initialisation.
 *
 * A value depends only on (seed, tensor name, global element index): no state is carried from one
 * draw to the next, so every mesh — whatever slice of a tensor a rank holds, in whatever order it fills
 * it — produces bitwise the same global weights. Key = seed mixed with the 64-bit FNV-1a hash of the
 * name; counter = the element index.
 */
#ifndef MP_RNG_H
#define MP_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } mp_philox_ctr;
typedef struct { uint32_t k[2]; } mp_philox_key;

/* One Philox4x32-10 block. */
mp_philox_ctr mp_philox(mp_philox_ctr ctr, mp_philox_key key);
/* The key for (seed, name). */
mp_philox_key mp_rng_key(uint64_t seed, const char *name);
/* Uniform in (0, 1) and standard normal for global element index idx under key. */
double mp_rng_uniform(mp_philox_key key, uint64_t idx);
float mp_rng_normal(mp_philox_key key, uint64_t idx);
uint64_t mp_fnv1a64(const char *s);

#endif
