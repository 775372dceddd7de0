/* core/rng.c — see rng.h. Normal draws use Box-Muller on the first two 32-bit words of the block. */
#include "core/rng.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

mp_philox_ctr mp_philox(mp_philox_ctr c, mp_philox_key k) {
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c.v[0], &hi0, &lo0);
        mulhilo(PHILOX_M1, c.v[2], &hi1, &lo1);
        mp_philox_ctr n = {{hi1 ^ c.v[1] ^ k.k[0], lo1, hi0 ^ c.v[3] ^ k.k[1], lo0}};
        c = n;
        k.k[0] += PHILOX_W0;
        k.k[1] += PHILOX_W1;
    }
    return c;
}

uint64_t mp_fnv1a64(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
    return h;
}

mp_philox_key mp_rng_key(uint64_t seed, const char *name) {
    uint64_t h = mp_fnv1a64(name) ^ (seed * 0x9E3779B97F4A7C15ull);
    mp_philox_key k = {{(uint32_t)h, (uint32_t)(h >> 32)}};
    return k;
}

static mp_philox_ctr block(mp_philox_key key, uint64_t idx) {
    mp_philox_ctr c = {{(uint32_t)idx, (uint32_t)(idx >> 32), 0x6d657368u /* "mesh" */, 0}};
    return mp_philox(c, key);
}

/* (u + 0.5) / 2^32: strictly inside (0, 1). */
static double to_unit(uint32_t u) { return ((double)u + 0.5) / 4294967296.0; }

double mp_rng_uniform(mp_philox_key key, uint64_t idx) { return to_unit(block(key, idx).v[0]); }

float mp_rng_normal(mp_philox_key key, uint64_t idx) {
    mp_philox_ctr r = block(key, idx);
    double u1 = to_unit(r.v[0]), u2 = to_unit(r.v[1]);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
