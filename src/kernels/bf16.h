/* Private: bfloat16 rounding, the one conversion behind --precision bf16 and bf16-emulated (the operands of the
 * model's products); no BLAS or oneDNN header needed, so the tests use it directly. */
#ifndef LIPT_KERNELS_BF16_H
#define LIPT_KERNELS_BF16_H

#include <stdint.h>
#include <string.h>

/* The float32 bits u rounded to the nearest bf16, ties to even, still as float32 bits (low half zero): add 0x7FFF
 * plus the lowest kept bit, truncate. Subnormals, the largest finite floats (which round to Inf, as IEEE rounding
 * says: FLT_MAX lies above the midpoint between bf16's largest finite value and Inf) and Inf itself fall out of the
 * same integer arithmetic. NaN is the one exception: the carry could turn a NaN whose payload sits in the low half
 * into Inf, so it keeps its sign and upper payload and gets the quiet bit. Branch-free, so loops over it vectorise. */
static inline uint32_t lipt_bf16_round_bits(uint32_t u) {
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t quiet_nan = (u | 0x00400000u) & 0xFFFF0000u;
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}

/* The bf16 nearest to x as its 16 bits. */
static inline uint16_t lipt_bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(lipt_bf16_round_bits(u) >> 16);
}

static inline float lipt_bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x rounded to the nearest bf16, kept as a float32 (exactly representable). */
static inline float lipt_bf16_round(float x) { return lipt_bf16_to_float(lipt_bf16_bits(x)); }

#endif
