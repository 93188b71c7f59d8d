/* Lipschitz upper bounds of the attention kinds (tied L2, SPEC §2; clipped-dp), built from differentiable ops, and
 * the choice among them per config. */
#include "lipt/bounds.h"

#include <math.h>

#include "core/outward.h"

double lipt_phi_inv(double y) {
    LIPT_CHECK(y >= 0, "phi_inv: y = %g must be >= 0 (y = N - 1)", y);
    return lipt_lambert_w0(y / exp(1.0));
}

/* φ⁻¹(y) from above: w = W₀(y/e) (Halley, within a few ulps of the root either way), then w is raised until a lower
 * bound of φ(w) = w e^{w+1} is >= y, which proves w >= φ⁻¹(y) (φ increases on w >= 0). The lower bound: for
 * 0 <= w <= 700, t = fl(w + 1) >= (w + 1)(1 - 2^-53), so e^t >= e^{w+1}(1 - 701 2^-53); exp's result >= e^t (1 - 2^-52)
 * (glibc's exp errs by less than one ulp); the product w·exp(t) by <= 2^-53 of itself: fl(w exp(t)) >= φ(w)(1 - 2^-43),
 * and multiplying by 1 - 2^-40 (rounded down) leaves a lower bound of φ(w). Each raise is 2^-38 of w plus the
 * smallest normal (about 4e-12 relative: no float bound moves by it). */
double lipt_phi_inv_up(double y) {
    LIPT_CHECK(y >= 0 && y < 1e300, "phi_inv_up: y = %g (y = N - 1)", y);
    double w = lipt_phi_inv(y);
    if (lipt_outward_test_nearest) return w;
    if (y == 0) return 0; /* φ(0) = 0 */
    for (int k = 0; k < 64; k++) {
        LIPT_CHECK(w >= 0 && w <= 700, "phi_inv_up: W0 = %g outside [0, 700]", w);
        const double lo = lipt_ow_dn(lipt_ow_dn(w * exp(w + 1.0)) * (1.0 - 0x1p-40));
        if (lo >= y) return w;
        w = lipt_ow_up(w + lipt_ow_up(w * 0x1p-38) + 0x1p-1022);
    }
    LIPT_CHECK(0, "phi_inv_up: no proven upper bound of phi^-1(%g)", y);
    return INFINITY;
}

double lipt_bound_mul_up(double a, double b) { return lipt_mul_up(a, b); }

/* An upper bound of 1/√d. */
static double inv_sqrt_up(int d) { return lipt_div_up(1.0, lipt_sqrt_dn((double)d)); }

/* The forward value of a bound tensor t (one element, its ops recorded for the gradient, each rounded to nearest in
 * float) replaced by ub, the same formula evaluated with outward rounding (lipt_float_up): the tape and the gradient
 * are unchanged (no backward of these ops reads its output), the value divided by, printed and stored is a proof. */
static lipt_tensor *set_upper(lipt_tensor *t, double ub) {
    if (!lipt_outward_test_nearest) t->data[0] = lipt_float_up(ub);
    return t;
}

static void check_weights(const char *fn, const lipt_tensor *wq, const lipt_tensor *wv, const lipt_tensor *wo, int H,
                          int N) {
    char a[64], b[64], c[64];
    LIPT_CHECK(wq->ndim == 2 && wq->shape[0] == wq->shape[1] && wv->ndim == 2 && lipt_same_shape(wq, wv) &&
                   wo->ndim == 2 && lipt_same_shape(wq, wo),
               "%s: wq %s, wv %s, wo %s must all be [D,D]", fn, lipt_shape_str(wq, a, 64), lipt_shape_str(wv, b, 64),
               lipt_shape_str(wo, c, 64));
    LIPT_CHECK(H >= 1 && wq->shape[0] % H == 0, "%s: D = %d not divisible into %d heads", fn, wq->shape[0], H);
    LIPT_CHECK(N >= 1, "%s: sequence length N = %d < 1", fn, N);
}

/* In the row layout y = x W the Jacobian of X ↦ X W is I_N ⊗ Wᵀ, so the ∞-norm factors of W^O and W^{V,h} are
 * max abs column sums (norm_inf with transpose = 1); W^{Q,h} enters through both orientations. */
lipt_tensor *lipt_bound_l2_inf(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N) {
    check_weights("bound_l2_inf", wq, wv, wo, H, N);
    const int d = wq->shape[0] / H;
    const double lead = 4.0 * lipt_phi_inv((double)(N - 1)) + 1.0 / sqrt((double)d);
    lipt_tensor *q_rows = lipt_norm_inf(ctx, wq, 0, H);                     /* ‖W^{Q,h}‖_∞   [H] */
    lipt_tensor *q_cols = lipt_norm_inf(ctx, wq, 1, H);                     /* ‖W^{Q,hᵀ}‖_∞  [H] */
    lipt_tensor *q_max = lipt_max(ctx, lipt_mul(ctx, q_rows, q_cols));
    lipt_tensor *v_norms = lipt_norm_inf(ctx, wv, 1, H);
    lipt_tensor *v_max = lipt_max(ctx, v_norms);                            /* max_h ‖W^{V,hᵀ}‖_∞ */
    lipt_tensor *o = lipt_norm_inf(ctx, wo, 1, 1);                          /* ‖W^{Oᵀ}‖_∞ */
    lipt_tensor *ub = lipt_scale(ctx, lipt_mul(ctx, lipt_mul(ctx, q_max, v_max), o), (float)lead);
    /* outward: the norms are upper bounds of the exact ones (lipt_norm_inf), the rest in double rounded up */
    double qm = 0, vm = 0;
    for (int h = 0; h < H; h++) {
        qm = fmax(qm, lipt_mul_up(q_rows->data[h], q_cols->data[h]));
        vm = fmax(vm, v_norms->data[h]);
    }
    const double lead_up = lipt_add_up(4.0 * lipt_phi_inv_up((double)(N - 1)), inv_sqrt_up(d));
    return set_upper(ub, lipt_mul_up(lipt_mul_up(lipt_mul_up(qm, vm), o->data[0]), lead_up));
}

/* Certified spectral norms of column blocks (values: Gram-iteration upper bounds; gradient u vᵀ). */
static lipt_tensor *spec_ub(lipt_ctx *ctx, lipt_tensor *w, float *u, float *v, int nb, int iters,
                            const lipt_bound_vectors *vec) {
    const int g = vec->gram_iters > 0 ? vec->gram_iters : LIPT_SPECTRAL_UB_ITERS_REPORT;
    return lipt_spectral_norm_ub(ctx, w, u, v, nb, iters, g);
}

/* The tied L2 bounds from their certified spectral norms ([H] per head, [1] for W^O): lead √(Σ_h (‖W^{Q,h}‖₂²
 * ‖W^{V,h}‖₂)²) ‖W^O‖₂, with lead (√N / √d)(4 φ⁻¹(N−1) + 1) in the 2-norm and (1 + 6 φ⁻¹(N−1)) / √d in the token-wise
 * norm (d = D / H). The square of ‖W^{Q,h}‖₂ is required: the map is homogeneous of degree 2 in W^Q. */
static double tied_l2_lead(lipt_lipnorm_kind norm, int N, int d) {
    const double phi = lipt_phi_inv((double)(N - 1));
    return norm == LIPT_LIPNORM_2 ? sqrt((double)N) / sqrt((double)d) * (4.0 * phi + 1.0)
                                  : (1.0 + 6.0 * phi) / sqrt((double)d);
}

/* tied_l2_lead from above */
static double tied_l2_lead_up(lipt_lipnorm_kind norm, int N, int d) {
    const double phi = lipt_phi_inv_up((double)(N - 1));
    return norm == LIPT_LIPNORM_2
               ? lipt_mul_up(lipt_div_up(lipt_sqrt_up((double)N), lipt_sqrt_dn((double)d)), lipt_add_up(4.0 * phi, 1.0))
               : lipt_mul_up(lipt_add_up(1.0, lipt_mul_up(6.0, phi)), inv_sqrt_up(d));
}

/* s + x² from above (x, s upper bounds >= 0): the terms of √(Σ_h x_h²) */
static double add_sq_up(double s, double x) { return lipt_add_up(s, lipt_mul_up(x, x)); }

static lipt_tensor *tied_l2_from(lipt_ctx *ctx, lipt_tensor *sq, lipt_tensor *sv, lipt_tensor *so, double lead,
                                 double lead_up) {
    lipt_tensor *t = lipt_mul(ctx, lipt_mul(ctx, sq, sq), sv); /* L_h / lead */
    lipt_tensor *root = lipt_sqrt(ctx, lipt_sum(ctx, lipt_mul(ctx, t, t)));
    lipt_tensor *ub = lipt_scale(ctx, lipt_mul(ctx, root, so), (float)lead);
    double s = 0;
    for (size_t h = 0; h < sq->numel; h++) s = add_sq_up(s, lipt_mul_up(lipt_mul_up(sq->data[h], sq->data[h]), sv->data[h]));
    return set_upper(ub, lipt_mul_up(lipt_mul_up(lipt_sqrt_up(s), so->data[0]), lead_up));
}

/* clipped-dp's weight shapes and radius */
static void check_clipped(lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv, lipt_tensor *wo, int H, double R) {
    check_weights("bound_clipped_dp", wq, wv, wo, H, 1);
    char a[64];
    LIPT_CHECK(lipt_same_shape(wq, wk), "bound_clipped_dp: wk %s must be [D,D]", lipt_shape_str(wk, a, 64));
    LIPT_CHECK(R > 0 && isfinite(R), "bound_clipped_dp: radius %g", R);
}

static lipt_tensor *clipped_dp_from(lipt_ctx *ctx, lipt_tensor *sq, lipt_tensor *sk, lipt_tensor *sv, lipt_tensor *so,
                                    double R, int d) {
    /* 1 + 2τ_h = 1 + (2 R² / √d) ‖W^{Q,h}‖ ‖W^{K,h}‖ */
    lipt_tensor *two_tau = lipt_scale(ctx, lipt_mul(ctx, sq, sk), (float)(2.0 * R * R / sqrt((double)d)));
    lipt_tensor *one = lipt_tensor_1d(ctx, 1);
    one->data[0] = 1.0f;
    lipt_tensor *lh = lipt_mul(ctx, sv, lipt_add(ctx, two_tau, one));
    lipt_tensor *root = lipt_sqrt(ctx, lipt_sum(ctx, lipt_mul(ctx, lh, lh)));
    lipt_tensor *ub = lipt_mul(ctx, root, so);
    /* outward: 2 R² / √d, then L_h = ‖W^{V,h}‖ (1 + 2τ_h) per head, from the certified (float, upper) norms */
    const double coef = lipt_mul_up(lipt_mul_up(2.0, lipt_mul_up(R, R)), inv_sqrt_up(d));
    double s = 0;
    for (size_t h = 0; h < sq->numel; h++)
        s = add_sq_up(s, lipt_mul_up(sv->data[h], lipt_add_up(1.0, lipt_mul_up(lipt_mul_up(sq->data[h], sk->data[h]), coef))));
    return set_upper(ub, lipt_mul_up(lipt_sqrt_up(s), so->data[0]));
}

lipt_tensor *lipt_bound_l2_2(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N,
                             lipt_bound_vectors *vec, int iters) {
    check_weights("bound_l2_2", wq, wv, wo, H, N);
    LIPT_CHECK(vec && vec->uq && vec->vq && vec->uv && vec->vv && vec->uo && vec->vo,
               "bound_l2_2: missing power-iteration vectors");
    lipt_tensor *sq = spec_ub(ctx, wq, vec->uq, vec->vq, H, iters, vec); /* ‖W^{Q,h}‖₂ [H] */
    lipt_tensor *sv = spec_ub(ctx, wv, vec->uv, vec->vv, H, iters, vec); /* ‖W^{V,h}‖₂ [H] */
    lipt_tensor *so = spec_ub(ctx, wo, vec->uo, vec->vo, 1, iters, vec); /* ‖W^O‖₂ */
    return tied_l2_from(ctx, sq, sv, so, tied_l2_lead(LIPT_LIPNORM_2, N, wq->shape[0] / H),
                        tied_l2_lead_up(LIPT_LIPNORM_2, N, wq->shape[0] / H));
}

lipt_tensor *lipt_bound_l2_inf2(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wv, lipt_tensor *wo, int H, int N,
                                lipt_bound_vectors *vec, int iters) {
    check_weights("bound_l2_inf2", wq, wv, wo, H, N);
    LIPT_CHECK(vec && vec->uq && vec->vq && vec->uv && vec->vv && vec->uo && vec->vo,
               "bound_l2_inf2: missing power-iteration vectors");
    lipt_tensor *sq = spec_ub(ctx, wq, vec->uq, vec->vq, H, iters, vec);
    lipt_tensor *sv = spec_ub(ctx, wv, vec->uv, vec->vv, H, iters, vec);
    lipt_tensor *so = spec_ub(ctx, wo, vec->uo, vec->vo, 1, iters, vec);
    return tied_l2_from(ctx, sq, sv, so, tied_l2_lead(LIPT_LIPNORM_INF2, N, wq->shape[0] / H),
                        tied_l2_lead_up(LIPT_LIPNORM_INF2, N, wq->shape[0] / H));
}

lipt_tensor *lipt_bound_clipped_dp(lipt_ctx *ctx, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv, lipt_tensor *wo,
                                   int H, double R, lipt_bound_vectors *vec, int iters) {
    check_clipped(wq, wk, wv, wo, H, R);
    LIPT_CHECK(vec && vec->uq && vec->vq && vec->uv && vec->vv && vec->uo && vec->vo && vec->uk && vec->vk,
               "bound_clipped_dp: missing power-iteration vectors");
    lipt_tensor *sq = spec_ub(ctx, wq, vec->uq, vec->vq, H, iters, vec); /* ‖W^{Q,h}‖₂ [H] */
    lipt_tensor *sk = spec_ub(ctx, wk, vec->uk, vec->vk, H, iters, vec); /* ‖W^{K,h}‖₂ [H] */
    lipt_tensor *sv = spec_ub(ctx, wv, vec->uv, vec->vv, H, iters, vec); /* ‖W^{V,h}‖₂ [H] */
    lipt_tensor *so = spec_ub(ctx, wo, vec->uo, vec->vo, 1, iters, vec); /* ‖W^O‖₂ */
    return clipped_dp_from(ctx, sq, sk, sv, so, R, wq->shape[0] / H);
}

/* Unit-length blocks of n floats each. */
static void fill_unit_blocks(lipt_rng *r, float *x, int n_blocks, int n) {
    lipt_rng_fill_normal(r, x, (size_t)n_blocks * n, 1.0f);
    for (int b = 0; b < n_blocks; b++) {
        float *xb = x + (size_t)b * n;
        double s = 0;
        for (int i = 0; i < n; i++) s += (double)xb[i] * xb[i];
        const double inv = s > 0 ? 1.0 / sqrt(s) : 0;
        for (int i = 0; i < n; i++) xb[i] = (float)(xb[i] * inv);
    }
}

void lipt_bound_vectors_init(lipt_bound_vectors *vec, int D, int H, uint64_t seed) {
    LIPT_CHECK(vec && D >= 1 && H >= 1 && D % H == 0, "bound_vectors_init: bad D = %d, H = %d", D, H);
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    /* Gaussian directions (almost surely not orthogonal to a top singular vector), unit per block so that
     * even iters = 0 gives sigma = uᵀ W v with unit vectors */
    const int d = D / H;
    fill_unit_blocks(&r, vec->uq, H, D);
    fill_unit_blocks(&r, vec->vq, H, d);
    fill_unit_blocks(&r, vec->uv, H, D);
    fill_unit_blocks(&r, vec->vv, H, d);
    fill_unit_blocks(&r, vec->uo, 1, D);
    fill_unit_blocks(&r, vec->vo, 1, D);
    if (vec->uk) fill_unit_blocks(&r, vec->uk, H, D);
    if (vec->vk) fill_unit_blocks(&r, vec->vk, H, d);
}

int lipt_attn_bound_vector_count(const lipt_config *cfg) {
    const lipt_attn_info *ai = lipt_attn_info_of(cfg->attention);
    if (!ai->contractive) return 0; /* only a contractive attention divides by its bound on every forward pass */
    switch (ai->bound) {
    case LIPT_ATTN_BOUND_CLIPPED_DP: return 8;
    case LIPT_ATTN_BOUND_TIED_L2: return cfg->lip_norm == LIPT_LIPNORM_INF ? 0 : 6; /* the ∞-norm bound has none */
    case LIPT_ATTN_BOUND_NONE: break;
    }
    return 0;
}

int lipt_attn_bound_requests(const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv,
                             lipt_tensor *wo, const lipt_bound_vectors *vec, lipt_spectral_req *req) {
    const lipt_attn_info *ai = lipt_attn_info_of(cfg->attention);
    const int H = cfg->n_heads, clipped = ai->bound == LIPT_ATTN_BOUND_CLIPPED_DP;
    const int spectral = clipped || (ai->bound == LIPT_ATTN_BOUND_TIED_L2 &&
                                     (cfg->lip_norm == LIPT_LIPNORM_2 || cfg->lip_norm == LIPT_LIPNORM_INF2));
    if (!spectral) return 0; /* the ∞-norm bound (or none) */
    LIPT_CHECK(vec && vec->uq && vec->vq && vec->uv && vec->vv && vec->uo && vec->vo && (!clipped || (vec->uk && vec->vk)),
               "attn_bound: missing power-iteration vectors");
    const int g = vec->gram_iters > 0 ? vec->gram_iters : LIPT_SPECTRAL_UB_ITERS_REPORT;
    int n = 0;
    req[n++] = (lipt_spectral_req){wq, vec->uq, vec->vq, H, g, 0};
    if (clipped) req[n++] = (lipt_spectral_req){wk, vec->uk, vec->vk, H, g, 0};
    req[n++] = (lipt_spectral_req){wv, vec->uv, vec->vv, H, g, 0};
    req[n++] = (lipt_spectral_req){wo, vec->uo, vec->vo, 1, g, 0};
    return n;
}

lipt_tensor *lipt_attn_bound_from(lipt_ctx *ctx, const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk,
                                  lipt_tensor *wv, lipt_tensor *wo, int N, lipt_tensor *const *sig) {
    const lipt_attn_info *ai = lipt_attn_info_of(cfg->attention);
    const int H = cfg->n_heads;
    switch (ai->bound) {
    case LIPT_ATTN_BOUND_CLIPPED_DP: {
        const double R = lipt_config_clip_radius(cfg);
        check_clipped(wq, wk, wv, wo, H, R);
        return clipped_dp_from(ctx, sig[0], sig[1], sig[2], sig[3], R, wq->shape[0] / H);
    }
    case LIPT_ATTN_BOUND_TIED_L2:
        if (cfg->lip_norm == LIPT_LIPNORM_2 || cfg->lip_norm == LIPT_LIPNORM_INF2) {
            check_weights("bound_l2", wq, wv, wo, H, N);
            return tied_l2_from(ctx, sig[0], sig[1], sig[2], tied_l2_lead(cfg->lip_norm, N, wq->shape[0] / H),
                                tied_l2_lead_up(cfg->lip_norm, N, wq->shape[0] / H));
        }
        return lipt_bound_l2_inf(ctx, wq, wv, wo, H, N);
    case LIPT_ATTN_BOUND_NONE: break;
    }
    LIPT_CHECK(0, "attn_bound: attention %s has no Lipschitz bound", ai->name);
    return NULL;
}

lipt_tensor *lipt_attn_bound(lipt_ctx *ctx, const lipt_config *cfg, lipt_tensor *wq, lipt_tensor *wk, lipt_tensor *wv,
                             lipt_tensor *wo, int N, lipt_bound_vectors *vec) {
    lipt_spectral_req req[LIPT_ATTN_BOUND_REQ_MAX];
    lipt_tensor *sig[LIPT_ATTN_BOUND_REQ_MAX];
    const int n = lipt_attn_bound_requests(cfg, wq, wk, wv, wo, vec, req);
    lipt_spectral_norm_ub_batch(ctx, n, req, sig); /* every block of W^Q, W^K, W^V and W^O side by side */
    return lipt_attn_bound_from(ctx, cfg, wq, wk, wv, wo, N, sig);
}
