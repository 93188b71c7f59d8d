/* Lambert W0: the defining identity w e^w = x over [-1/e, 1e6] and beyond, high-precision reference values,
 * the edge cases, the SPEC §2 bound constants 4 W0((N-1)/e) + 1, and the derivative. */
#include "testutil.h"

#include <float.h>
#include <math.h>

/* -1/e as a double (the nearest double, which lies just below the true -1/e). */
static const double NEG_INV_E = -0.36787944117144233;
static const double E_CONST = 2.718281828459045;

/* |w e^w - x| / |x|; for huge x compares w + ln w with ln x instead (w e^w overflows). */
static double residual(double x) {
    double w = lipt_lambert_w0(x);
    if (x > 1e300) return fabs(w + log(w) - log(x)) / log(x);
    return fabs(w * exp(w) - x) / fabs(x);
}

START_TEST(test_lambert_identity) {
    double worst = 0, worst_x = 0;
    int n = 0;
    double prev_x = -INFINITY, prev_w = -INFINITY;
    int monotone = 1;
#define CHECK_X(xv)                                                                  \
    do {                                                                             \
        double x_ = (xv), r_ = residual(x_);                                         \
        if (!(r_ <= worst)) { worst = r_; worst_x = x_; }                            \
        n++;                                                                         \
    } while (0)
    /* at the branch point: dx = 10^-k, then the first few doubles above -1/e */
    for (int k = 1; k <= 17; k++) CHECK_X(NEG_INV_E + pow(10.0, -k));
    double x = NEG_INV_E;
    for (int k = 0; k < 8; k++) {
        x = nextafter(x, 0);
        CHECK_X(x);
    }
    /* uniform over [-1/e, 0), then log-spaced over (0, 1e6] and over negative x down to -1e-300 */
    for (int i = 1; i <= 4000; i++) {
        double xi = NEG_INV_E * (1 - i / 4000.0 * 0.999999);
        CHECK_X(xi);
        double w = lipt_lambert_w0(xi);
        if (!(w > prev_w) && xi > prev_x) monotone = 0;
        prev_x = xi;
        prev_w = w;
    }
    prev_w = -INFINITY;
    for (int i = 0; i <= 4000; i++) {
        double xi = pow(10.0, -300 + 306.0 * i / 4000);
        CHECK_X(xi);
        double w = lipt_lambert_w0(xi);
        if (!(w > prev_w)) monotone = 0;
        prev_w = w;
    }
    for (int i = 0; i <= 400; i++) CHECK_X(-pow(10.0, -300 + 299.0 * i / 400));
    CHECK_X(1e6);
    CHECK_X(E_CONST);
    CHECK_X(-0.2);
    CHECK_X(nextafter(-0.2, 0));
    CHECK_X(nextafter(-0.2, -1));
    /* far beyond the required range: through the log form */
    CHECK_X(1e100);
    CHECK_X(1e300);
    CHECK_X(DBL_MAX);
#undef CHECK_X
    printf("lambert identity: %d points, worst |w e^w - x|/|x| %.3e at x = %.17g (tol 1e-14)\n", n, worst, worst_x);
    ck_assert_msg(worst <= 1e-14, "w e^w = x rel residual %.3e at x = %.17g", worst, worst_x);
    ck_assert_msg(monotone, "W0 not increasing on the grid");
}
END_TEST

START_TEST(test_lambert_reference) {
    /* W0 at these doubles, from mpmath.lambertw at 40 digits */
    static const double ref[][2] = {
        {-0.3678794411714422, -0.99999997684810815757},   {-0.36787944117044236, -0.99999766839811057628},
        {-0.36787943117144234, -0.99976685372198897699},  {-0.36777944117144235, -0.97686286557442460519},
        {-0.3, -0.48940222718021493357},                  {-0.2, -0.25917110181907376448},
        {-1e-10, -1.0000000001000000364e-10},             {1e-10, 9.9999999990000003645e-11},
        {0.5, 0.35173371124919582602},                    {1.0, 0.567143290409783873},
        {2.718281828459045, 0.99999999999999997341},      {10.0, 1.7455280027406993831},
        {1000000.0, 11.383358086140052622},               {1e+300, 684.24720862976084929},
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double w = lipt_lambert_w0(ref[i][0]);
        double e = fabs(w - ref[i][1]) / fabs(ref[i][1]);
        if (e > worst) worst = e;
        ck_assert_msg(e <= 4 * DBL_EPSILON, "W0(%.17g) = %.17g, want %.17g (rel err %.3e)", ref[i][0], w, ref[i][1],
                      e);
    }
    printf("lambert vs 40-digit reference: worst rel err %.3e (tol %.1e)\n", worst, 4 * DBL_EPSILON);

    /* edges */
    ck_assert(lipt_lambert_w0(-exp(-1.0)) == -1.0);
    ck_assert(lipt_lambert_w0(NEG_INV_E) == -1.0);
    ck_assert(isnan(lipt_lambert_w0(nextafter(NEG_INV_E, -1))));
    ck_assert(isnan(lipt_lambert_w0(-1.0)));
    ck_assert(isnan(lipt_lambert_w0(-INFINITY)));
    ck_assert(isnan(lipt_lambert_w0(NAN)));
    ck_assert(lipt_lambert_w0(0.0) == 0.0);
    ck_assert(isinf(lipt_lambert_w0(INFINITY)) && lipt_lambert_w0(INFINITY) > 0);
    ck_assert(fabs(lipt_lambert_w0(E_CONST) - 1.0) <= 2 * DBL_EPSILON);
    ck_assert(fabs(lipt_lambert_w0(-exp(-0.5) / 2) + 0.5) <= 2 * DBL_EPSILON); /* W0(-e^{-1/2}/2) = -1/2 */
    ck_assert(fabs(lipt_lambert_w0(2 * exp(2.0)) - 2.0) <= 2 * DBL_EPSILON);
}
END_TEST

START_TEST(test_lambert_spec_constants) {
    /* SPEC §2: 4 φ⁻¹(N−1) + 1 with φ⁻¹(N−1) = W0((N−1)/e); exact values from mpmath. */
    static const struct { int N; double spec, exact; } tab[] = {
        {3, 2.85, 2.852222053},     {10, 5.40, 5.404011989},    {64, 10.23, 10.22852111},
        {128, 12.24, 12.24295791},  {256, 14.35, 14.34551125},  {1000, 18.68, 18.68200642},
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        double v = 4 * lipt_lambert_w0((tab[i].N - 1) / E_CONST) + 1;
        printf("  N = %4d: 4 W0((N-1)/e) + 1 = %.6f (SPEC %.2f)\n", tab[i].N, v, tab[i].spec);
        ck_assert_msg(fabs(v - tab[i].spec) < 0.005, "N=%d: %.6f does not round to %.2f", tab[i].N, v, tab[i].spec);
        double e = fabs(v - tab[i].exact);
        if (e > worst) worst = e;
        ck_assert_msg(e < 1e-8, "N=%d: %.10f vs %.10f", tab[i].N, v, tab[i].exact);
    }
    printf("lambert SPEC constants: all round to the SPEC's 2 decimals, worst abs err vs 10-digit values %.3e\n", worst);
}
END_TEST

START_TEST(test_lambert_deriv) {
    double worst_fd = 0, worst_fd_x = 0, worst_id = 0;
    int n = 0;
    for (int i = 0; i <= 3000; i++) {
        double x;
        if (i < 1000)
            x = NEG_INV_E + pow(10.0, -3 + 3.0 * i / 1000) * 0.999; /* approach the branch point */
        else if (i < 2000)
            x = -0.3 + 3.3 * (i - 1000) / 1000.0;
        else
            x = pow(10.0, 6.0 * (i - 2000) / 1000);
        double d = lipt_lambert_w0_deriv(x);
        /* central difference; the step stays well inside the distance to the branch point */
        double h = 1e-4 * fmin(x - NEG_INV_E, fmax(1.0, fabs(x)));
        double fd = (lipt_lambert_w0(x + h) - lipt_lambert_w0(x - h)) / (2 * h);
        double e = fabs(d - fd) / fabs(d);
        if (e > worst_fd) { worst_fd = e; worst_fd_x = x; }
        /* identity W' = e^{-W} / (1 + W) */
        double w = lipt_lambert_w0(x);
        double id = exp(-w) / (1 + w);
        double e2 = fabs(d - id) / fabs(id);
        if (x > -0.3 && e2 > worst_id) worst_id = e2;
        n++;
    }
    printf("lambert derivative: %d points, worst rel err vs central FD %.3e at x = %.6g (tol 1e-6), vs e^-W/(1+W) "
           "(x > -0.3) %.3e (tol 1e-13)\n", n, worst_fd, worst_fd_x, worst_id);
    ck_assert_msg(worst_fd <= 1e-6, "derivative vs FD rel err %.3e at %.17g", worst_fd, worst_fd_x);
    ck_assert_msg(worst_id <= 1e-13, "derivative identity rel err %.3e", worst_id);
    /* near the branch point 1 + W cancels: W' from mpmath at 40 digits */
    static const double dref[][2] = {
        {-0.3678794411714422, 117410783.70725597132}, {-0.36787944117044236, 1165840.3189865483758},
        {-0.36787943117144234, 11656.408020860628513}, {-0.3, 3.194962540197297598},
        {0.5, 0.52041864210687388757},                 {1000000.0, 9.1924646020539131367e-7},
    };
    double worst_ref = 0;
    for (size_t i = 0; i < sizeof dref / sizeof dref[0]; i++) {
        double e = fabs(lipt_lambert_w0_deriv(dref[i][0]) - dref[i][1]) / dref[i][1];
        if (e > worst_ref) worst_ref = e;
    }
    printf("lambert derivative vs 40-digit reference (incl. 1e-16 from the branch point): worst rel err %.3e "
           "(tol 1e-14)\n", worst_ref);
    ck_assert_msg(worst_ref <= 1e-14, "derivative vs reference rel err %.3e", worst_ref);
    ck_assert(lipt_lambert_w0_deriv(0.0) == 1.0);
    ck_assert(fabs(lipt_lambert_w0_deriv(1e-300) - 1.0) < 1e-15);
    ck_assert(isinf(lipt_lambert_w0_deriv(NEG_INV_E)));
    ck_assert(isnan(lipt_lambert_w0_deriv(-1.0)));
    ck_assert(lipt_lambert_w0_deriv(INFINITY) == 0.0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops_lambert");
    TCase *tc = tcase_create("lambert");
    tcase_add_test(tc, test_lambert_identity);
    tcase_add_test(tc, test_lambert_reference);
    tcase_add_test(tc, test_lambert_spec_constants);
    tcase_add_test(tc, test_lambert_deriv);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
