/* Private to the library: the numerical backend below the differentiable ops (src/kernels/). What the rest of
 * src/ includes to reach it: single-precision GEMM (gemm.h: OpenBLAS or oneDNN in blocks fixed by the shape, and
 * lipt_gemm_p at a context's precision), the register-tiled products with a small operand (gemm_small.h), the
 * low-precision products and the oneDNN wrapper (lowp.h), bf16 rounding (bf16.h) and the vectorised maths (vmath.h).
 * Nothing here records on the tape or calls an op: the kernels use core only (and the context's type). */
#ifndef LIPT_KERNELS_H
#define LIPT_KERNELS_H

#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_small.h"
#include "kernels/lowp.h"
#include "kernels/vmath.h"

#endif
