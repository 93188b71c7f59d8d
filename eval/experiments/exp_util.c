/* Helpers shared by the experiments: directories, number lists, files replaced atomically. */
#include "exp_util.h"

#include "cli.h" /* cli_error: the refusals' messages */

#include "lipt/data.h"
#include "lipt/ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t exp_seed(uint64_t seed) {
    lipt_rng r;
    lipt_rng_seed(&r, seed);
    return r.s[0];
}

/* Comma-separated numbers into out (at most cap). Returns the count, or -1 on a malformed list. */
int exp_parse_list(const char *s, double *out, int cap) {
    int n = 0;
    if (!s || !*s) return -1;
    for (const char *p = s;;) {
        char *end = NULL;
        errno = 0;
        const double v = strtod(p, &end);
        if (errno || end == p || !isfinite(v) || n >= cap) return -1;
        out[n++] = v;
        while (*end == ' ') end++;
        if (*end == 0) break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    return n;
}

/* Splits a CSV line in place into at most cap fields (no quoting: the experiments write none); returns the count. */
static int csv_split(char *line, char **f, int cap) {
    int n = 0;
    line[strcspn(line, "\r\n")] = 0;
    for (char *p = line; n < cap;) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    return n;
}

/* One row of c (its fields f[0..ncols), checked against the settings key) into row; 1 taken, 0 skipped, -1 refused. */
static int csv_row(const exp_csv *c, const char *C, char **f, void *row) {
    if (c->key && strcmp(f[c->ncols - 1], c->key) != 0) {
        cli_error(C, "%s holds results of other settings (%s, not %s): choose another --out for these", c->path,
                  f[c->ncols - 1], c->key);
        return -1;
    }
    double v[EXP_CSV_MAX_COLS];
    for (int i = 0; i < c->ncols; i++) {
        char *end = NULL;
        v[i] = strtod(f[i], &end);
        if (end == f[i]) v[i] = NAN;
    }
    memset(row, 0, c->row_size);
    return c->take(f, v, row, c->user) ? 1 : 0;
}

int exp_read_csv(const exp_csv *c, const char *C, void *rows, int cap) {
    FILE *f = lipt_open_regular(c->path, NULL, NULL); /* regular files only: never waits on a FIFO */
    if (!f) return 0;
    char line[2048];
    int n = 0, st = 0;
    if (fgets(line, sizeof line, f) && (line[strcspn(line, "\r\n")] = 0, strcmp(line, c->header) != 0)) {
        cli_error(C, "%s was written by an older lipt or another tool (its header is not the current one): move it "
                     "away or choose another --out", c->path);
        st = -1;
    }
    while (st == 0 && n < cap && fgets(line, sizeof line, f)) {
        char *x[EXP_CSV_MAX_COLS];
        if (!strchr(line, '\n') || c->ncols > EXP_CSV_MAX_COLS || csv_split(line, x, EXP_CSV_MAX_COLS) != c->ncols)
            continue;
        st = csv_row(c, C, x, (char *)rows + (size_t)n * c->row_size);
        n += st > 0;
        st = st < 0 ? -1 : 0;
    }
    fclose(f);
    return st < 0 ? -1 : n;
}

/* lipt's atomic writer (lipt_output): readers never see a partial file, a device or FIFO at path is refused. */
lipt_status exp_open(exp_out *o, const char *path, lipt_error *err) {
    const lipt_status st = lipt_output_open(&o->out, path, err);
    o->f = o->out.f;
    return st;
}

lipt_status exp_commit(exp_out *o, lipt_error *err) {
    o->f = NULL;
    return lipt_output_commit(&o->out, err);
}

void exp_discard(exp_out *o) {
    o->f = NULL;
    lipt_output_discard(&o->out);
}

lipt_status exp_test_inputs(const char *ckpt, const lipt_model *m, const lipt_vocab *vocab, const char *data, int N,
                            int layer, int with_ln, float *out, lipt_error *err) {
    if (N < 1 || N > m->cfg.seq_len || layer < 0 || layer >= m->cfg.n_layers)
        return lipt_fail(err, LIPT_ERR_ARG, "the model has seq_len %d and %d layers: --n %d / --layer %d out of range",
                         m->cfg.seq_len, m->cfg.n_layers, N, layer);
    /* split NULL: the run's own split for its own corpus, else the corpus's standard one ("auto") */
    lipt_dataset ds;
    const lipt_status st = run_load_corpus(ckpt, data, NULL, vocab, 0, &ds, err);
    if (st != LIPT_OK) return st;
    size_t nt;
    const lipt_tok *tt = lipt_dataset_eval_tokens(&ds, LIPT_TEST, &nt);
    if ((size_t)N + 1 > nt) {
        lipt_dataset_free(&ds);
        return lipt_fail(err, LIPT_ERR_ARG, "the test split of %s has %zu symbols, fewer than --n %d",
                         data ? data : ds.loc.name, nt - 1, N);
    }
    int *ids = lipt_xmalloc(sizeof(int) * (size_t)N);
    for (int t = 0; t < N; t++) ids[t] = tt[1 + t];
    lipt_ctx ctx;
    lipt_ctx_init(&ctx, (size_t)16 << 20, 1);
    lipt_no_grad_push(&ctx);
    lipt_tensor *e = lipt_model_embed(&ctx, m, ids, 1, N);
    for (int l = 0; l < layer; l++) e = lipt_model_block(&ctx, m, l, e);
    if (with_ln && !m->invertible) {
        const lipt_layer *L = &m->layers[layer];
        e = lipt_layernorm(&ctx, e, L->ln1_g, L->ln1_b, m->cfg.ln_eps);
    }
    memcpy(out, e->data, sizeof(float) * (size_t)N * m->cfg.d_model);
    lipt_ctx_free(&ctx);
    free(ids);
    lipt_dataset_free(&ds);
    return LIPT_OK;
}
