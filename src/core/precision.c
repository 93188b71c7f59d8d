/* The names of the matrix products' precisions (lipt_precision, include/lipt/core.h): in core, below the config parser
 * and the kernels, which both name them. */
#include "lipt/core.h"

static const char *const precision_names[] = {"float32", "bf16", "bf16-emulated"};
_Static_assert(sizeof precision_names / sizeof precision_names[0] == LIPT_PRECISION_COUNT,
               "precision_names matches lipt_precision");

const char *lipt_precision_name(lipt_precision p) {
    return (unsigned)p < LIPT_PRECISION_COUNT ? precision_names[p] : "?";
}
