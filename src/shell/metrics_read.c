/* Reading a run's metrics.jsonl back (metrics_read.h): one JSON object per line, flat, as lipt train writes it. */
#include "metrics_read.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void push(double **a, double **b, int *n, int *cap, double x, double y) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *a = realloc(*a, sizeof(double) * (size_t)*cap);
        *b = realloc(*b, sizeof(double) * (size_t)*cap);
        if (!*a || !*b) {
            fprintf(stderr, "lipt plot: out of memory\n");
            exit(1);
        }
    }
    (*a)[*n] = x;
    (*b)[*n] = y;
    (*n)++;
}

double metrics_number(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

/* y[k] = the mean of raw over the window of `smooth` points centred on k (shrunk at both ends so it stays centred).
 * A trailing mean lags a falling curve (early training BPC looked worse than validation); a centred one follows any
 * straight stretch exactly. Prefix sums keep it linear in n whatever the window. */
static void smooth_centred(const double *raw, double *y, int n, int smooth) {
    double *pre = malloc(sizeof(double) * ((size_t)n + 1));
    if (!pre) {
        fprintf(stderr, "lipt plot: out of memory\n");
        exit(1);
    }
    pre[0] = 0;
    for (int k = 0; k < n; k++) pre[k + 1] = pre[k] + raw[k];
    for (int k = 0; k < n; k++) {
        int h = (smooth - 1) / 2;
        if (h > k) h = k;
        if (h > n - 1 - k) h = n - 1 - k;
        y[k] = (pre[k + h + 1] - pre[k - h]) / (2 * h + 1);
    }
    free(pre);
}

void metrics_read_curve(FILE *f, int smooth, metrics_curve *c) {
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const double step = metrics_number(line, "step"), bpc = metrics_number(line, "bpc");
        if (!isfinite(step) || !isfinite(bpc) || step < 0 || step > METRICS_MAX_STEP || bpc < 0 ||
            bpc > METRICS_MAX_BPC) {
            c->dropped += strstr(line, "\"step\":") && strstr(line, "\"bpc\":"); /* a point, not drawable */
            continue;
        }
        if (strstr(line, "\"eval\"")) {
            if (strstr(line, "\"valid\"") || strstr(line, "\"valid_full\"")) push(&c->vstep, &c->vbpc, &c->nv, &c->vcap, step, bpc);
            continue;
        }
        push(&c->step, &c->raw, &c->n, &c->cap, step, bpc);
    }
    free(c->bpc);
    c->bpc = malloc(sizeof(double) * (size_t)(c->n ? c->n : 1));
    if (!c->bpc) {
        fprintf(stderr, "lipt plot: out of memory\n");
        exit(1);
    }
    smooth_centred(c->raw, c->bpc, c->n, smooth < 1 ? 1 : smooth);
}

void metrics_curve_free(metrics_curve *c) {
    free(c->step), free(c->raw), free(c->bpc), free(c->vstep), free(c->vbpc);
    memset(c, 0, sizeof *c);
}

void metrics_last_lines(FILE *f, char *train, char *eval, size_t n) {
    train[0] = eval[0] = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strstr(line, "\"event\"")) continue;
        snprintf(strstr(line, "\"eval\"") ? eval : train, n, "%s", line);
    }
}
