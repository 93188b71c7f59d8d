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

void metrics_read_curve(FILE *f, int smooth, metrics_curve *c) {
    char line[4096];
    double *win = calloc((size_t)smooth, sizeof(double)), sum = 0;
    long k = 0;
    while (fgets(line, sizeof line, f)) {
        const double step = metrics_number(line, "step"), bpc = metrics_number(line, "bpc");
        if (!isfinite(step) || !isfinite(bpc)) continue;
        if (strstr(line, "\"eval\"")) {
            if (strstr(line, "\"valid\"") || strstr(line, "\"valid_full\"")) push(&c->vstep, &c->vbpc, &c->nv, &c->vcap, step, bpc);
            continue;
        }
        sum += bpc - win[k % smooth];
        win[k % smooth] = bpc;
        k++;
        push(&c->step, &c->bpc, &c->n, &c->cap, step, sum / (double)(k < smooth ? k : smooth));
    }
    free(win);
}

void metrics_curve_free(metrics_curve *c) {
    free(c->step), free(c->bpc), free(c->vstep), free(c->vbpc);
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
