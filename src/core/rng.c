/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
#include "lipt/core.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void lipt_rng_seed(lipt_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lipt_rng_u64(lipt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lipt_rng_uniform(lipt_rng *r) { return (double)(lipt_rng_u64(r) >> 11) * 0x1.0p-53; }

float lipt_rng_normal(lipt_rng *r) {
    /* Box-Muller; one value per call keeps the state a pure function of the call count. */
    double u1 = lipt_rng_uniform(r), u2 = lipt_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t lipt_rng_below(lipt_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject to avoid modulo bias */
    uint64_t x;
    do x = lipt_rng_u64(r); while (x >= limit);
    return x % n;
}

void lipt_rng_fill_normal(lipt_rng *r, float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++) x[i] = std * lipt_rng_normal(r);
}

void lipt_rng_fill_uniform(lipt_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)lipt_rng_uniform(r);
}
