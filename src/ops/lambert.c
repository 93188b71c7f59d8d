/* STUB */
#include "lipt/ops.h"
double lipt_lambert_w0(double x) { (void)x; LIPT_DIE("lambert not implemented"); }
double lipt_lambert_w0_deriv(double x) { (void)x; LIPT_DIE("lambert not implemented"); }
