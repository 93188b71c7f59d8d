/* lipt lipschitz: per-layer Lipschitz upper bounds (SPEC §2, both norms) and measured Jacobian norms of
 * every residual branch at data inputs (exact Jacobians; optionally gradient ascent from them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lipt/bounds.h"
#include "lipt/jacobian.h"
#include "run.h"

static const cli_opt lip_opts[] = {
    {"ckpt", CLI_STRING, "FILE", "checkpoint (required)", NULL},
    {"data", CLI_STRING, "NAME|PATH", "corpus for the data inputs", "ptb"},
    {"data-split", CLI_STRING, "HOW", "auto, standard or F0,F1,F2", "auto"},
    {"split", CLI_STRING, "SPLIT", "split the input windows come from", "valid"},
    {"tokens", CLI_INT, "N", "tokens per measured input window (Jacobians are N*D square)", "8"},
    {"windows", CLI_INT, "K", "data windows to measure at (the largest norm is reported)", "2"},
    {"ascent-steps", CLI_INT, "S", "gradient-ascent steps on the inf-norm from each data input (0: none)", "0"},
    {"power-iters", CLI_INT, "N", "power-iteration rounds for the spectral norms of the 2-norm bound", "200"},
    {"threads", CLI_INT, "N", "threads for OpenMP and OpenBLAS", NULL},
    {"json", CLI_FLAG, NULL, "one JSON object: per layer and branch the bounds and measured norms", NULL},
};

typedef struct {
    double bound_inf, bound_2;   /* of the branch map g (NaN: none) */
    double meas_inf, meas_2;     /* largest measured Jacobian norms of g */
    double ascent_inf;           /* best inf-norm after ascent (NaN if not run) */
    const char *note;
} branch_report;

int cmd_lipschitz(int argc, char **argv) {
    const char *C = "lipschitz";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Lipschitz upper bounds of every residual branch from the weights, in the inf- and 2-norm, next to the\n"
                       "measured Jacobian norms of the same branches at data inputs (a lower bound; must never exceed the bound).",
                       lip_opts, (int)(sizeof lip_opts / sizeof lip_opts[0]), argc, argv, 0, 0);
    if (pr) return pr > 0 ? 0 : 2;
    if (!cli_has(&a, "ckpt")) return cli_error(C, "--ckpt FILE is required");
    long N, K, asteps, piters;
    if (cli_int(&a, "tokens", &N) || cli_int(&a, "windows", &K) || cli_int(&a, "ascent-steps", &asteps) ||
        cli_int(&a, "power-iters", &piters))
        return 2;
    {
        int trc = cli_apply_threads(&a, C);
        if (trc) return trc;
    }
    if (K < 1 || asteps < 0 || piters < 1) return cli_error(C, "--windows and --power-iters must be >= 1, --ascent-steps >= 0");
    lipt_error err = {0};
    lipt_model m;
    lipt_vocab vocab;
    int64_t step;
    if (run_load_model(cli_str(&a, "ckpt"), &m, &vocab, &step, &err) != LIPT_OK) return cli_fail(C, &err);
    const lipt_config *cfg = &m.cfg;
    const int L = cfg->n_layers, D = cfg->d_model, H = cfg->n_heads;
    int rc = 0;
    lipt_dataset ds;
    int have_ds = 0;
    if (N < 1 || N > cfg->seq_len) { rc = cli_error(C, "--tokens must be in [1, seq_len = %d], got %ld", cfg->seq_len, N); goto out; }
    if ((size_t)N * D > 8192) { rc = cli_error(C, "--tokens %ld x d_model %d = %ld Jacobian rows: at most 8192 (use fewer tokens)", N, D, N * D); goto out; }
    lipt_data_opts dopts = {0};
    dopts.use_vocab = &vocab;
    if (lipt_data_parse_split(cli_str(&a, "data-split"), &dopts, &err) != LIPT_OK ||
        lipt_dataset_load(cli_str(&a, "data"), &dopts, &ds, &err) != LIPT_OK) { rc = cli_fail(C, &err); goto out; }
    have_ds = 1;
    const char *sn = cli_str(&a, "split");
    int split = cli_split_index(sn);
    if (split < 0) { rc = cli_error(C, "--split must be train, valid or test, got '%s'", sn); goto out; }
    if (ds.len[split] < (size_t)(N * K)) { rc = cli_error(C, "the %s split is too short for %ld windows of %ld", sn, K, N); goto out; }

    /* ---- bounds from the weights (converged spectral norms on private vectors) ---- */
    branch_report *rep = calloc((size_t)2 * L, sizeof *rep);
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_no_grad_push(&ctx);
    int tied = cfg->attention == LIPT_ATTN_L2_TIED || cfg->attention == LIPT_ATTN_CONTRACTIVE_L2;
    lipt_bound_vectors bv;
    float *vbuf = malloc(sizeof(float) * (size_t)(3 * H * D + 3 * D));
    bv.uq = vbuf; bv.vq = bv.uq + H * D; bv.uv = bv.vq + D; bv.vv = bv.uv + H * D; bv.uo = bv.vv + D; bv.vo = bv.uo + D;
    for (int l = 0; l < L; l++) {
        branch_report *ra = &rep[2 * l], *rf = &rep[2 * l + 1];
        ra->bound_inf = ra->bound_2 = rf->bound_inf = rf->bound_2 = NAN;
        ra->ascent_inf = rf->ascent_inf = NAN;
        lipt_layer *Ly = &m.layers[l];
        if (tied) {
            lipt_bound_vectors_init(&bv, D, H, 7 + (uint64_t)l);
            /* bounds for the N of the measured windows (what the measurement must respect) */
            double ub_inf = lipt_bound_l2_inf(&ctx, Ly->wq, Ly->wv, Ly->wo, H, (int)N)->data[0];
            double ub_2 = lipt_bound_l2_2(&ctx, Ly->wq, Ly->wv, Ly->wo, H, (int)N, &bv, (int)piters)->data[0];
            if (m.invertible) {
                /* the branch is F / max(1, UB_seq_len / c): its bound is the factor times F's bound */
                lipt_layer_lipschitz ll;
                lipt_model_layer_lipschitz(&m, l, &ll);
                ra->bound_inf = ub_inf * ll.attn_factor;
                ra->bound_2 = ub_2 * ll.attn_factor;
                ra->note = "contractive tied L2 attention: F / max(1, UB/c)";
            } else {
                ra->note = "tied L2 attention; the branch includes LayerNorm, which has no useful bound: bounds are of the attention alone";
                ra->bound_inf = ub_inf;
                ra->bound_2 = ub_2;
            }
        } else {
            ra->note = cfg->attention == LIPT_ATTN_DP ? "dot-product attention: not Lipschitz (Theorem 3.1), no bound"
                                                       : "untied L2 attention: not Lipschitz, no bound";
        }
        if (m.invertible) {
            lipt_model_refresh_norms(&m, 0);
            lipt_layer_lipschitz ll;
            lipt_model_layer_lipschitz(&m, l, &ll);
            /* per token W2 act(W1 x): ‖·‖₂ <= σ(W1) f1 σ(W2) f2 (act 1-Lipschitz); the sequence map is block diagonal,
             * so the same constant holds in the 2-norm of the whole sequence */
            rf->bound_2 = ll.sigma1 * ll.ffn_factor1 * ll.sigma2 * ll.ffn_factor2;
            /* inf-norm, row layout: the per-token Jacobian is W2ᵀ diag(act') W1ᵀ, so max abs column sums */
            lipt_no_grad_push(&ctx);
            rf->bound_inf = lipt_norm_inf(&ctx, Ly->w1, 1, 1)->data[0] * ll.ffn_factor1 *
                            lipt_norm_inf(&ctx, Ly->w2, 1, 1)->data[0] * ll.ffn_factor2;
            lipt_no_grad_pop(&ctx);
            rf->note = "contractive feed-forward: spectrally normalised W1, W2, 1-Lipschitz activation (bounds per token)";
        } else {
            rf->note = "feed-forward after LayerNorm: no bound";
        }
        lipt_ctx_reset(&ctx);
    }
    lipt_no_grad_pop(&ctx);

    /* ---- measured Jacobian norms at the hidden states of data windows ---- */
    size_t n = (size_t)N * D;
    double *J = malloc(sizeof(double) * n * n);
    float *x = malloc(sizeof(float) * n * (size_t)(2 * L));
    if (!J || !x) { rc = cli_error(C, "out of memory for a %zu x %zu Jacobian", n, n); free(J); free(x); goto out_rep; }
    for (long w = 0; w < K && rc == 0; w++) {
        int ids[1024];
        for (long t = 0; t < N; t++) ids[t] = ds.tok[split][w * N + t];
        /* inputs of every branch: the block input for attention, the mid-block state for the feed-forward */
        lipt_no_grad_push(&ctx);
        lipt_tensor *h = lipt_model_embed(&ctx, &m, ids, 1, (int)N);
        for (int l = 0; l < L; l++) {
            memcpy(x + (size_t)(2 * l) * n, h->data, n * sizeof(float));
            lipt_tensor *mid = lipt_add(&ctx, h, lipt_model_branch(&ctx, &m, l, LIPT_BRANCH_ATTN, h));
            memcpy(x + (size_t)(2 * l + 1) * n, mid->data, n * sizeof(float));
            h = lipt_add(&ctx, mid, lipt_model_branch(&ctx, &m, l, LIPT_BRANCH_FFN, mid));
        }
        lipt_no_grad_pop(&ctx);
        lipt_ctx_reset(&ctx);
        for (int k = 0; k < 2 * L; k++) {
            lipt_branch_ref ref = {&m, k / 2, k % 2};
            lipt_jac_map jm = {lipt_model_branch_fn, &ref, 3, {1, (int)N, D, 0}, 1};
            if (lipt_jacobian(&jm, x + (size_t)k * n, J, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
            double ni = lipt_matrix_norm_inf(J, n, n), n2 = lipt_matrix_norm_2(J, n, n, NULL, NULL);
            if (ni > rep[k].meas_inf) rep[k].meas_inf = ni;
            if (n2 > rep[k].meas_2) rep[k].meas_2 = n2;
            if (asteps > 0) {
                lipt_ascent_opts ao = lipt_ascent_defaults();
                ao.starts = 1;
                ao.steps = (int)asteps;
                ao.x0 = x + (size_t)k * n;
                ao.max_exact = n;
                lipt_ascent_result ar;
                memset(&ar, 0, sizeof ar);
                if (lipt_ascent_jac_inf(&jm, &ao, NULL, &ar, &err) != LIPT_OK) { rc = cli_fail(C, &err); break; }
                if (!(ar.best <= rep[k].ascent_inf)) rep[k].ascent_inf = ar.best;
            }
        }
    }
    free(J);
    free(x);
    if (rc == 0) {
        if (cli_has(&a, "json")) {
            json_w j;
            json_begin(&j, stdout);
            json_str(&j, "ckpt", cli_str(&a, "ckpt"));
            json_str(&j, "attention", lipt_attn_name(cfg->attention));
            json_int(&j, "tokens", N);
            json_int(&j, "windows", K);
            json_arr_open(&j, "branches");
            for (int k = 0; k < 2 * L; k++) {
                json_obj_open(&j, NULL);
                json_int(&j, "layer", k / 2);
                json_str(&j, "branch", k % 2 ? "ffn" : "attn");
                json_num(&j, "bound_inf", rep[k].bound_inf);
                json_num(&j, "bound_2", rep[k].bound_2);
                json_num(&j, "measured_inf", rep[k].meas_inf);
                json_num(&j, "measured_2", rep[k].meas_2);
                json_num(&j, "ascent_inf", rep[k].ascent_inf);
                json_str(&j, "note", rep[k].note);
                json_obj_close(&j);
            }
            json_arr_close(&j);
            json_end(&j);
        } else {
            printf("%s: %s attention, %d layers; bounds for N = %ld tokens; measured at %ld %s windows of %ld tokens\n",
                   cli_str(&a, "ckpt"), lipt_attn_name(cfg->attention), L, N, K, sn, N);
            printf("%-5s %-4s %12s %12s %12s %12s %12s\n", "layer", "map", "bound_inf", "measured_inf", "bound_2", "measured_2",
                   asteps ? "ascent_inf" : "");
            for (int k = 0; k < 2 * L; k++) {
                printf("%-5d %-4s %12.4g %12.4g %12.4g %12.4g", k / 2, k % 2 ? "ffn" : "attn", rep[k].bound_inf, rep[k].meas_inf,
                       rep[k].bound_2, rep[k].meas_2);
                if (asteps) printf(" %12.4g", rep[k].ascent_inf);
                printf("\n");
            }
            for (int k = 0; k < 2 && k < 2 * L; k++) printf("note (%s): %s\n", k ? "ffn" : "attn", rep[k].note);
            printf("(nan: no bound exists for that map)\n");
        }
    }
out_rep:
    free(vbuf);
    free(rep);
    lipt_ctx_free(&ctx);
out:
    if (have_ds) lipt_dataset_free(&ds);
    lipt_model_free(&m);
    return rc;
}
