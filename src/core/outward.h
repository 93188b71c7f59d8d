/* Private (src/ops, src/lipschitz): outward rounding of the certificates (issue 51, item 5: "a certificate is a proof"). Every bound lipt
 * divides by, prints or stores is evaluated in double from float inputs that are themselves upper bounds, each
 * operation rounded to nearest and then moved one ulp outward with nextafter: the result of an IEEE operation
 * (+, ×, ÷, sqrt: correctly rounded) is within one ulp of the exact value in any rounding mode, so the next double up
 * (down) is >= (<=) the exact result of that operation on those operands. Monotonicity does the rest: every formula
 * here is increasing in its nonnegative inputs, so feeding each step upper bounds (and a divisor a lower bound) gives
 * an upper bound of the exact formula. No change of the floating-point environment (fesetround is not honoured by
 * gcc's optimiser without FENV_ACCESS and would leak into OpenBLAS and OpenMP threads); a few doubles ulps per step
 * (about 1e-15 relative for the longest chain), then one float ulp at most when stored as a float (lipt_float_up). */
#ifndef LIPT_CORE_OUTWARD_H
#define LIPT_CORE_OUTWARD_H

#include <math.h>

/* Test hook (defined in outward.c; set by tests/test_lipschitz_outward.c only, reachable from no command or
 * environment variable): nonzero makes the certificates round to nearest as before issue 51 (the planted defect the
 * property test must catch). */
extern int lipt_outward_test_nearest;

static inline double lipt_ow_up(double x) { return lipt_outward_test_nearest ? x : nextafter(x, INFINITY); }
static inline double lipt_ow_dn(double x) { return lipt_outward_test_nearest ? x : nextafter(x, -INFINITY); }
/* >= a + b, a b, a / b, sqrt(a) for the exact values (a, b >= 0; a divisor from lipt_ow_dn-type lower bounds) */
static inline double lipt_add_up(double a, double b) { return lipt_ow_up(a + b); }
static inline double lipt_mul_up(double a, double b) { return lipt_ow_up(a * b); }
static inline double lipt_div_up(double a, double b) { return lipt_ow_up(a / b); }
static inline double lipt_div_dn(double a, double b) { return lipt_ow_dn(a / b); }
static inline double lipt_sqrt_up(double a) { return lipt_ow_up(sqrt(a)); }
static inline double lipt_sqrt_dn(double a) { return lipt_ow_dn(sqrt(a)); }

/* The smallest float >= x (the largest float <= x): a double bound stored as a float stays a bound. */
static inline float lipt_float_up(double x) {
    const float f = (float)x;
    return !lipt_outward_test_nearest && (double)f < x ? nextafterf(f, INFINITY) : f;
}
static inline float lipt_float_dn(double x) {
    const float f = (float)x;
    return !lipt_outward_test_nearest && (double)f > x ? nextafterf(f, -INFINITY) : f;
}

/* Σ of nonnegative doubles with the exact error of every addition (TwoSum, any order): the exact sum is s + Σ e_i,
 * e accumulates the e_i and ea their absolute values. */
typedef struct {
    double s, e, ea;
} lipt_ow_sum;
static inline void lipt_ow_sum_add(lipt_ow_sum *u, double x) {
    const double t = u->s + x, z = t - u->s, err = (u->s - (t - z)) + (x - z);
    u->s = t;
    u->e += err;
    u->ea += fabs(err);
}
/* An upper bound of the exact sum of the n terms added to u: s itself when every addition was exact (the usual case:
 * float terms summed in double), else s + e rounded up plus the error of e's own summation, |Σ e_i - e| <=
 * γ_n Σ|e_i| <= γ_n ea (1 + γ_n) <= 2 n 2^-53 ea (n < 2^40), rounded up. */
static inline double lipt_ow_sum_upper(const lipt_ow_sum *u, double n) {
    if (lipt_outward_test_nearest) return u->s;
    if (u->ea == 0) return u->s;
    return lipt_add_up(lipt_add_up(u->s, u->e), lipt_mul_up(lipt_mul_up(2.0 * n, 0x1p-53), u->ea));
}

#endif
