/* Private to the library: the kernel floor below the differentiable ops (src/kernels/), and its one interface for the
 * floors above (scripts/check_structure.sh: PUBLIC_HEADERS). What the rest of src/ includes to reach it: the kernels'
 * context (kctx.h: precision, low-precision state, scratch arena, the attention's spread report), single-precision
 * GEMM (gemm_cut.h, gemm.h: OpenBLAS or oneDNN in blocks fixed by the shape; gemm_p.h: lipt_gemm_p at a kernel
 * context's precision), the register-tiled products with a small operand (gemm_small.h), the low-precision products,
 * their packing and the oneDNN wrapper (lowp.h), the certificates' other BLAS routines (blas.h), bf16 rounding
 * (bf16.h), the vectorised maths (vmath.h), the row kernels (rows.h, layernorm_row.h), the reductions (reduce.h), the
 * activations' passes (act.h) and the attention kernels (attn.h). Raw pointers and a lipt_kctx: nothing here takes a
 * lipt_ctx, records on the tape or calls an op; the kernels use core only. The only code of lipt that names OpenBLAS
 * or oneDNN (and the threads, CPU report and BLAS self-test that talk to them: threads.c, cpuinfo.c,
 * blas_selftest.c). */
#ifndef LIPT_KERNELS_H
#define LIPT_KERNELS_H

#include "kernels/bf16.h"
#include "kernels/kctx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_p.h"
#include "kernels/gemm_small.h"
#include "kernels/lowp.h"
#include "kernels/vmath.h"
#include "kernels/blas.h"
#include "kernels/attn.h"
#include "kernels/layernorm_row.h"
#include "kernels/rows.h"
#include "kernels/reduce.h"
#include "kernels/act.h"

#endif
