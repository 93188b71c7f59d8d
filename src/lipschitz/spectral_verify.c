/* The Cholesky-verified bound of a Gram matrix's largest eigenvalue (spectral_bound = cholesky): a Lanczos estimate
 * θ raised by a small relative margin, μ = θ (1 + δ), and proven an upper bound by one floating-point Cholesky
 * factorisation of μ I - H. For the invertible models' 256×256 Gram matrices this costs about n³/6 multiply-adds
 * (plus the Lanczos steps) where Gram iteration costs t n³/2 in its squarings, and it is tighter: within δ/2 of σ
 * (δ = 2^-20 when Lanczos has converged) instead of Gram iteration's r^(1/2^(t+2)) and rounding margin.
 *
 * Why the bound is a proof (IEEE double, round to nearest, u = 2^-53, gamma_k = k u / (1 - k u)):
 *  - B = fl(μ I - H): its off-diagonal entries are -H_ij exactly, each diagonal entry is μ - H_ii rounded once, so
 *    μ I - H = B - D with D diagonal and |D_ii| <= u / (1 - u) |B_ii|.
 *  - If the Cholesky factorisation of B (any order of its dot products, with or without FMA) runs to completion
 *    with positive pivots, the computed upper-triangular R satisfies RᵀR = B + ΔB with |ΔB| <= gamma_{n+1} |R|ᵀ|R|
 *    entrywise (Demmel; Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Theorem 10.3). So
 *    ‖ΔB‖₂ <= gamma_{n+1} ‖|R|‖₂² <= gamma_{n+1} ‖R‖_F², and ‖R‖_F² = tr(RᵀR) = tr(B) + tr(ΔB) <= tr(B) +
 *    gamma_{n+1} ‖R‖_F², hence ‖ΔB‖₂ <= gamma_{n+1} / (1 - gamma_{n+1}) tr(B) =: τ.
 *  - R has a positive diagonal, so RᵀR is positive definite and xᵀBx = ‖Rx‖² - xᵀΔBx > -τ ‖x‖²: λ_min(B) > -τ.
 *  - So λ_min(μ I - H) >= λ_min(B) - max|D_ii| > -(τ + max|D_ii|), i.e. λ_max(H) < μ + τ + max|D_ii|.
 *  - Underflow: a product, square or quotient below 2^-1022 errs by up to 2^-1075 absolutely instead of relatively
 *    (sums that underflow are exact); an entry of ΔB then gains at most about (n + r_ii) 2^-1075 <=
 *    (n + 1 + max B_ii) 2^-1075, and ‖.‖₂ of such a matrix is at most n times its largest entry: the slack
 *    n (n + 2) (1 + max B_ii) 2^-1070 covers it with a factor 16 to spare for second-order terms.
 * Rump (BIT 46, 2006, "Verification of positive definiteness") proves this criterion in the same form. The bound
 * returned is μ + τ + max|D_ii| + the underflow slack, each term bounded above and each sum moved up one ulp. The
 * Lanczos estimate only chooses μ: a poor estimate makes the factorisation fail (no bound: the caller falls back on
 * Gram iteration), never a wrong bound. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lipschitz/spectral_impl.h"
#include "kernels/kernels.h"


/* Σ a_i b_i in LIPT_VDW lanes, the tail last (an estimate's arithmetic: any fixed order will do). */
static double dot(const double *a, const double *b, int n) {
    lipt_vdh s = {0};
    int i = 0;
    for (; i + LIPT_VDW <= n; i += LIPT_VDW) {
        lipt_vdh x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        s += x * y;
    }
    double t = 0;
    for (int l = 0; l < LIPT_VDW; l++) t += s[l];
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

/* y = H x for the n×n row-major H: each y_i is dot(H_i, x), the same lanes and order, but four rows at a time: one
 * row's sum waits an addition latency per vector, and the rows' sums are independent (Lanczos's product was
 * latency-bound). */
static void matvec(const double *H, const double *x, double *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const double *h0 = H + (size_t)i * n, *h1 = h0 + n, *h2 = h1 + n, *h3 = h2 + n;
        lipt_vdh s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        int j = 0;
        for (; j + LIPT_VDW <= n; j += LIPT_VDW) {
            lipt_vdh xv, a;
            memcpy(&xv, x + j, sizeof xv);
            memcpy(&a, h0 + j, sizeof a);
            s0 += a * xv;
            memcpy(&a, h1 + j, sizeof a);
            s1 += a * xv;
            memcpy(&a, h2 + j, sizeof a);
            s2 += a * xv;
            memcpy(&a, h3 + j, sizeof a);
            s3 += a * xv;
        }
        double t[4] = {0, 0, 0, 0};
        for (int l = 0; l < LIPT_VDW; l++) t[0] += s0[l], t[1] += s1[l], t[2] += s2[l], t[3] += s3[l];
        for (; j < n; j++) t[0] += h0[j] * x[j], t[1] += h1[j] * x[j], t[2] += h2[j] * x[j], t[3] += h3[j] * x[j];
        y[i] = t[0], y[i + 1] = t[1], y[i + 2] = t[2], y[i + 3] = t[3];
    }
    for (; i < n; i++) y[i] = dot(H + (size_t)i * n, x, n);
}

/* y -= a x, element by element (Lanczos's recurrence and reorthogonalisation). */
static void sub_scaled(double *y, double a, const double *x, int n) {
    int i = 0;
    for (; i + LIPT_VDW <= n; i += LIPT_VDW) {
        lipt_vdh vx, vy;
        memcpy(&vx, x + i, sizeof vx);
        memcpy(&vy, y + i, sizeof vy);
        vy -= a * vx;
        memcpy(y + i, &vy, sizeof vy);
    }
    for (; i < n; i++) y[i] -= a * x[i];
}


/* The largest eigenvalue of the k×k symmetric tridiagonal matrix (alpha on the diagonal, beta beside it), by
 * bisection on Sturm counts inside the Gershgorin interval: the upper end of the final bracket.
 * Two bisection steps per pass: the midpoint x and both midpoints the next step may take, 0.5 (lo + x) and
 * 0.5 (x + hi), are counted together, and the step after x takes the one its outcome selects. Each count is a chain of
 * divisions, each waiting on the last: three independent chains side by side take about the time of one, where the
 * certificates' Lanczos tests spent a tenth of their time in this loop. The points, the counts and the stopping test
 * are those of plain bisection, step by step: the same bracket, the same bits. */
static void sturm3(const double *alpha, const double *beta, int k, const double x[3], int below[3]) {
    double d[3] = {1, 1, 1};
    int b[3] = {0, 0, 0};
    for (int i = 0; i < k; i++) {
        const double bb = i > 0 ? beta[i - 1] * beta[i - 1] : 0;
        for (int s = 0; s < 3; s++) { /* negative pivots of the LDLᵀ of T - x_s I */
            d[s] = (alpha[i] - x[s]) - (i > 0 ? bb / d[s] : 0);
            if (d[s] == 0) d[s] = -DBL_EPSILON * (fabs(alpha[i]) + fabs(x[s]) + DBL_MIN);
            b[s] += d[s] < 0;
        }
    }
    for (int s = 0; s < 3; s++) below[s] = b[s];
}

static double tridiag_top(const double *alpha, const double *beta, int k) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < k; i++) {
        const double r = (i > 0 ? fabs(beta[i - 1]) : 0) + (i + 1 < k ? fabs(beta[i]) : 0);
        lo = fmin(lo, alpha[i] - r);
        hi = fmax(hi, alpha[i] + r);
    }
#define BISECT_GOES_ON(it) ((it) < 200 && hi - lo > 0x1p-52 * fmax(fabs(lo), fabs(hi)))
    for (int it = 0; BISECT_GOES_ON(it);) {
        double x[3];
        int below[3];
        x[0] = 0.5 * (lo + hi);
        x[1] = 0.5 * (lo + x[0]); /* the next midpoint if x[0] becomes hi */
        x[2] = 0.5 * (x[0] + hi); /* if it becomes lo */
        sturm3(alpha, beta, k, x, below);
        const int up = below[0] != k; /* x[0] becomes lo */
        if (up) lo = x[0];
        else hi = x[0];
        if (!BISECT_GOES_ON(++it)) break;
        if (below[up ? 2 : 1] == k) hi = x[up ? 2 : 1];
        else lo = x[up ? 2 : 1];
        it++;
    }
#undef BISECT_GOES_ON
    return hi;
}

/* Lanczos on H with full reorthogonalisation from `start` (n floats), or without one from a fixed dense vector
 * (splitmix64 of the index, as the power iteration's reseed): the largest Ritz value, which converges to λ_max(H)
 * from below. Stops when it moves by at most LANCZOS_TOL of itself over the last 2 steps (checked at every even
 * step from 4 on), at an invariant subspace, or after LIPT_LANCZOS_MAX steps.
 * Why this test: θ only has to come within the first margin, 2^-20 ≈ 9.5e-7, of λ_max for the proof to go through
 * (a θ further below only makes the Cholesky fail and the caller retry; it can never give a wrong bound). The Ritz
 * value converges about geometrically at these orders, so the remaining error is of the order of the last change:
 * on Gaussian 256×1024, 1024×256, 256×256 and 256×64 blocks from 1 to 100 power iterations it was at most 4.3e-9
 * (200 times below the margin) at a tolerance of 1e-8, and Lanczos took about half the steps of the former test
 * (a change below 1e-10 over 8 steps, checked every 8 steps: at least 16 steps even from a converged start). */
#define LANCZOS_TOL 1e-8
static double lanczos_top(const double *H, int n, const float *start, double *Q, double *w, double *alpha,
                          double *beta, int *steps) {
    *steps = 0;
    for (int j = 0; j < LIPT_LANCZOS_MAX; j++) alpha[j] = beta[j] = 0;
    for (int j = 0; j < n; j++) {
        if (start) {
            Q[j] = start[j];
            continue;
        }
        uint64_t z = (uint64_t)j * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        Q[j] = (double)(z >> 11) * 0x1p-52 - 1.0;
    }
    const double q0 = sqrt(dot(Q, Q, n));
    if (!(q0 > 0) || !isfinite(q0)) return 0;
    for (int j = 0; j < n; j++) Q[j] /= q0;
    const int kmax = n < LIPT_LANCZOS_MAX ? n : LIPT_LANCZOS_MAX;
    int k = 0;
    double prev = -INFINITY;
    for (int j = 0; j < kmax; j++) {
        const double *qj = Q + (size_t)j * n;
        matvec(H, qj, w, n);
        double a = dot(qj, w, n);
        sub_scaled(w, a, qj, n);
        if (j > 0) sub_scaled(w, beta[j - 1], qj - n, n);
        for (int i = 0; i <= j; i++) { /* full reorthogonalisation (once: θ is only an estimate) */
            const double c = dot(Q + (size_t)i * n, w, n);
            sub_scaled(w, c, Q + (size_t)i * n, n);
            if (i == j) a += c;
        }
        alpha[j] = a;
        k = j + 1;
        const double b = sqrt(dot(w, w, n)), scale = fabs(a) + (j > 0 ? beta[j - 1] : 0);
        if (!(b > 1e-13 * scale)) break; /* an invariant subspace: the Ritz values are eigenvalues (or NaN) */
        beta[j] = b;
        if (j + 1 < kmax) {
            double *qn = Q + (size_t)(j + 1) * n;
            for (int i = 0; i < n; i++) qn[i] = w[i] / b;
        }
        if (k >= 2 && k % 2 == 0) { /* θ_2 is only kept for the test at step 4 */
            const double th = tridiag_top(alpha, beta, k);
            if (th - prev <= LANCZOS_TOL * fabs(th)) break; /* 100 times finer than the first margin, 2^-20 */
            prev = th;
        }
    }
    *steps = k;
    return tridiag_top(alpha, beta, k);
}

/* The unit eigenvector z of the k×k tridiagonal T (alpha, beta) for its largest eigenvalue theta, by two steps of
 * inverse iteration with the shift s = theta + a small gap above it: s I - T is then positive definite, so its
 * LDLᵀ needs no pivoting. A vector for the gradient's direction only (lipt_spectral_verify_top's ritz). */
static void tridiag_top_vector(const double *alpha, const double *beta, int k, double theta, double *z) {
    double scale = fabs(theta);
    for (int i = 0; i < k; i++) scale = fmax(scale, fabs(alpha[i]) + (i + 1 < k ? fabs(beta[i]) : 0));
    const double s = theta + 0x1p-40 * scale + DBL_MIN;
    double d[LIPT_LANCZOS_MAX], l[LIPT_LANCZOS_MAX];
    for (int i = 0; i < k; i++) { /* s I - T = L D Lᵀ, L unit lower bidiagonal (l below the diagonal) */
        d[i] = (s - alpha[i]) - (i > 0 ? l[i - 1] * l[i - 1] * d[i - 1] : 0);
        if (!(d[i] > 0)) d[i] = 0x1p-52 * scale + DBL_MIN; /* rounding at a near-repeated top eigenvalue */
        if (i + 1 < k) l[i] = -beta[i] / d[i];
    }
    for (int i = 0; i < k; i++) z[i] = 1;
    for (int it = 0; it < 2; it++) {
        for (int i = 1; i < k; i++) z[i] -= l[i - 1] * z[i - 1]; /* L y = z */
        for (int i = 0; i < k; i++) z[i] /= d[i];                /* D x = y */
        for (int i = k - 2; i >= 0; i--) z[i] -= l[i] * z[i + 1]; /* Lᵀ z = x */
        double nz = 0;
        for (int i = 0; i < k; i++) nz = fmax(nz, fabs(z[i]));
        for (int i = 0; i < k; i++) z[i] /= nz;
    }
}

/* The factorisation in panels of CHOL_NB rows of R; the trailing rows' update by a panel in register tiles of
 * CHOL_MR rows × CHOL_NV vectors (with AVX-512 16 accumulators, the panel's row segments from L1). */
#ifndef CHOL_NB
#define CHOL_NB 16
#if LIPT_VDW == 8
#define CHOL_MR 8
#define CHOL_NV 3
#else
#define CHOL_MR 4
#define CHOL_NV 2
#endif
#endif

/* B[i, j] -= Σ_{p in [k0, k1)} r_pi r_pj for the rows i in [i0, i0 + rows) and the nv vectors of columns from j:
 * the panel's products summed in p order in registers (with FMA), then subtracted from b_ij once. rows, nv are
 * constants at every call (always inlined): the accumulators stay in registers. */
LIPT_VINLINE void chol_tile(double *B, int n, int k0, int k1, int i0, int rows, int j, int nv) {
    lipt_vdh acc[CHOL_MR][CHOL_NV];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = (lipt_vdh){0};
    for (int p = k0; p < k1; p++) {
        const double *rp = B + (size_t)p * n;
        lipt_vdh b[CHOL_NV];
        for (int v = 0; v < nv; v++) memcpy(&b[v], rp + j + v * LIPT_VDW, sizeof b[v]);
        for (int r = 0; r < rows; r++) {
            const lipt_vdh a = lipt_vdh_splat(rp[i0 + r]);
            for (int v = 0; v < nv; v++) acc[r][v] = lipt_vdh_fma(a, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) {
            double *c = B + (size_t)(i0 + r) * n + j + v * LIPT_VDW;
            lipt_vdh x;
            memcpy(&x, c, sizeof x);
            x -= acc[r][v];
            memcpy(c, &x, sizeof x);
        }
}

/* rows (a constant) trailing rows from i0, every column from i0 on: full tiles, one-vector tiles, then scalars. The
 * tiles start up to LIPT_VDW - 1 columns left of i0 so that they end at n (a scalar tail was a tenth of the time):
 * the columns j < i of row i are the lower triangle, zeroed, written, never read (nor are the panel rows' entries
 * left of their diagonal, which only they read). */
LIPT_VINLINE void chol_rows(double *B, int n, int k0, int k1, int i0, int rows) {
    const int w = (n - i0 + LIPT_VDW - 1) / LIPT_VDW * LIPT_VDW;
    int j = n - w >= 0 ? n - w : i0;
    for (; j + CHOL_NV * LIPT_VDW <= n; j += CHOL_NV * LIPT_VDW) chol_tile(B, n, k0, k1, i0, rows, j, CHOL_NV);
    for (; j + LIPT_VDW <= n; j += LIPT_VDW) chol_tile(B, n, k0, k1, i0, rows, j, 1);
    for (; j < n; j++)
        for (int r = 0; r < rows; r++) {
            double t = 0;
            for (int p = k0; p < k1; p++) t += B[(size_t)p * n + i0 + r] * B[(size_t)p * n + j];
            B[(size_t)(i0 + r) * n + j] -= t;
        }
}

int lipt_spectral_chol_certify(const double *H, int n, double mu, double *B, double *bound) {
    if (n <= 0 || !isfinite(mu)) return 0;
    double tr = 0, maxb = 0;
    for (int i = 0; i < n; i++) {
        const double *hi = H + (size_t)i * n;
        double *bi = B + (size_t)i * n;
        bi[i] = mu - hi[i];
        if (!(bi[i] > 0)) return 0;
        tr += bi[i];
        maxb = fmax(maxb, bi[i]);
        for (int j = 0; j < i; j++) bi[j] = 0; /* the tiles' spill-over (chol_rows): finite, never read */
        for (int j = i + 1; j < n; j++) bi[j] = -hi[j];
    }
    /* B = RᵀR, R upper triangular, in place, right-looking in panels of CHOL_NB rows: the panel's rows of R one by
     * one (row p gets the earlier panel rows' terms one at a time, then its pivot's square root and the divisions),
     * then every trailing entry (i, j) gets the panel's terms as one register sum subtracted once. So r_ij is
     * b_ij - Σ_k r_ki r_kj in some order (the analysis holds for any), divided by r_ii. */
    for (int k0 = 0; k0 < n; k0 += CHOL_NB) {
        const int k1 = k0 + CHOL_NB < n ? k0 + CHOL_NB : n;
        for (int p = k0; p < k1; p++) {
            double *rp = B + (size_t)p * n;
            if (p > k0) chol_rows(B, n, k0, p, p, 1); /* the earlier panel rows' terms */
            const double d = rp[p];
            if (!(d > 0)) return 0; /* not positive definite to working accuracy, or NaN */
            const double r = sqrt(d);
            rp[p] = r;
            for (int j = p + 1; j < n; j++) rp[j] /= r; /* a division, as the analysis assumes (not a reciprocal) */
        }
        int i0 = k1;
        for (; i0 + CHOL_MR <= n; i0 += CHOL_MR) chol_rows(B, n, k0, k1, i0, CHOL_MR);
        for (; i0 < n; i0++) chol_rows(B, n, k0, k1, i0, 1);
    }
    const double g = lipt_ub_gamma(n + 1);
    /* τ: γ/(1-γ) <= γ (1 + 2γ), times a bound of tr(B); the diagonal's rounding: u/(1-u) <= u (1 + 2u) of max B_ii */
    const double tau = lipt_ub_up(lipt_ub_up(g * lipt_ub_up(1 + 2 * g)) * lipt_ub_sum_bound(tr, (size_t)n));
    const double dmax = lipt_ub_up(maxb * 0x1p-53 * (1 + 0x1p-51));
    const double under = lipt_ub_up(ldexp(lipt_ub_up(lipt_ub_up((double)n * (n + 2)) * lipt_ub_up(1 + maxb)), -1070));
    *bound = lipt_ub_up(mu + lipt_ub_up(tau + lipt_ub_up(dmax + under)));
    return isfinite(*bound);
}

double lipt_spectral_verify_top(const double *H, int n, const float *start, double *work, double *ritz) {
    if (n <= 0) return 0;
    double *B = work, *Q = work + (size_t)n * n, *w = Q + (size_t)(LIPT_LANCZOS_MAX + 1) * n;
    double alpha[LIPT_LANCZOS_MAX], beta[LIPT_LANCZOS_MAX];
    /* From the start vector (the power iteration's, near the top eigenvector: Lanczos stops after about 6-12 steps
     * instead of 30-40) at the first margin only, else as without one: a start vector nearly orthogonal to the top
     * eigenvector can stop at a lower eigenvalue, which the first margin does not prove and a wider one would, loosely. */
    static const double margin[] = {0x1p-20, 0x1p-13, 0x1p-6};
    for (int pass = start ? 0 : 1; pass < 2; pass++) {
        int k = 0;
        const double theta = lanczos_top(H, n, pass ? NULL : start, Q, w, alpha, beta, &k);
        if (!(theta > 0) || !isfinite(theta)) continue;
        for (int i = 0; i < (pass ? (int)(sizeof margin / sizeof margin[0]) : 1); i++) {
            double b;
            if (!lipt_spectral_chol_certify(H, n, theta + theta * margin[i], B, &b)) continue;
            if (ritz) { /* the Ritz vector Q z (Q's first k rows are the Lanczos basis; B's storage is free again) */
                double *z = B;
                tridiag_top_vector(alpha, beta, k, theta, z);
                for (int j = 0; j < n; j++) ritz[j] = 0;
                for (int r = 0; r < k; r++) {
                    const double *q = Q + (size_t)r * n;
                    for (int j = 0; j < n; j++) ritz[j] += z[r] * q[j];
                }
                const double nr = sqrt(dot(ritz, ritz, n));
                if (nr > 0 && isfinite(nr))
                    for (int j = 0; j < n; j++) ritz[j] /= nr;
                else
                    ritz[0] = NAN; /* no direction (not expected): the caller keeps its vectors */
            }
            return b;
        }
    }
    return 0;
}
