/* Lambert W, principal branch W0 on [-1/e, inf), and its derivative: Halley iteration in double. */
#include "lipt/bounds.h"

#include <float.h>
#include <math.h>

/* 1/e = E1_HI + E1_LO (E1_HI the double nearest 1/e, which lies above it), so x + 1/e is exact near -1/e. */
#define E1_HI 0.36787944117144233
#define E1_LO (-1.2428753672788363e-17)
#define EULER_E 2.718281828459045

/* g(t) = (t - 1) e^t + 1 = sum_{n>=2} (n-1) t^n / n!, summed directly: the closed form cancels badly as t -> 0.
 * Used for 0 <= t <= 0.75, where 22 terms reach double precision. */
static double g_branch(double t) {
    double term = t, s = 0;
    for (int n = 2; n <= 24; n++) {
        term *= t / n;
        s += (n - 1) * term;
    }
    return s;
}

/* W0(x) and t = 1 + W0(x), the latter accurate near the branch point where 1 + W cancels. */
static double w0_core(double x, double *t_out) {
    if (isnan(x) || x < -E1_HI) {
        *t_out = NAN;
        return NAN;
    }
    if (x == -E1_HI) {
        *t_out = 0;
        return -1.0;
    }
    if (x == 0) {
        *t_out = 1;
        return x; /* keeps the sign of zero */
    }
    if (isinf(x)) {
        *t_out = INFINITY;
        return INFINITY;
    }
    if (x <= -0.2) {
        /* Near the branch point solve e^{-1} g(t) = x + 1/e for t = 1 + W, i.e. g(t) = e (x + 1/e) = y.
         * Start from the branch-point series in p = sqrt(2 y), then Halley on g (g' = t e^t, g'' = (1+t) e^t). */
        double dx = (x + E1_HI) + E1_LO; /* x + E1_HI is exact here (Sterbenz) */
        double y = EULER_E * dx;
        if (!(y > 0)) {
            *t_out = 0;
            return -1.0;
        }
        double p = sqrt(2 * y);
        double t = p * (1 + p * (-1.0 / 3 + p * (11.0 / 72 + p * (-43.0 / 540 + p * (769.0 / 17280 + p * (-221.0 / 8505))))));
        for (int k = 0; k < 12; k++) {
            double et = exp(t), F = g_branch(t) - y, g1 = t * et, g2 = (1 + t) * et;
            double d = F / (g1 - F * g2 / (2 * g1));
            t -= d;
            if (fabs(d) <= 2 * DBL_EPSILON * t) break;
        }
        *t_out = t;
        return t - 1;
    }
    double w;
    if (x <= EULER_E) {
        /* Winitzki's approximation, then Halley on f(w) = w e^w - x */
        double L = log1p(x);
        w = L * (1 - log1p(L) / (2 + L));
        for (int k = 0; k < 20; k++) {
            double ew = exp(w), f = w * ew - x;
            double d = f / (ew * (w + 1) - (w + 2) * f / (2 * w + 2));
            w -= d;
            if (fabs(d) <= 2 * DBL_EPSILON * fabs(w)) break;
        }
    } else {
        /* Large x: w e^w overflows long before x does, so iterate on G(w) = w + ln w - ln x
         * (G' = 1 + 1/w, G'' = -1/w²) from the asymptotic series ln x - ln ln x + ln ln x / ln x. */
        double lx = log(x), l2 = log(lx);
        w = lx - l2 + l2 / lx;
        for (int k = 0; k < 20; k++) {
            double G = w + log(w) - lx, G1 = 1 + 1 / w;
            double d = G / (G1 + G / (2 * w * w * G1));
            w -= d;
            if (fabs(d) <= 2 * DBL_EPSILON * w) break;
        }
    }
    *t_out = 1 + w;
    return w;
}

double lipt_lambert_w0(double x) {
    double t;
    return w0_core(x, &t);
}

/* W'(x) = W / (x (1 + W)); 1 at x = 0, +inf at the branch point, 0 at +inf. */
double lipt_lambert_w0_deriv(double x) {
    double t, w = w0_core(x, &t);
    if (isnan(w)) return NAN;
    if (x == 0) return 1.0;
    if (t == 0) return INFINITY;
    if (isinf(x)) return 0.0;
    return w / (x * t);
}
