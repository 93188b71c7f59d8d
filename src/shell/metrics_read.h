/* defines: a run's metrics.jsonl read back: the curves lipt plot draws, the last lines lipt info shows. Fuzzed by
 * tests/fuzz/fuzz_metrics.c. */
#ifndef LIPT_METRICS_READ_H
#define LIPT_METRICS_READ_H

#include <stddef.h>
#include <stdio.h>

/* Training BPC by step (raw, and smoothed) and validation BPC by step; the arrays are malloc'd (metrics_curve_free). */
typedef struct {
    double *step, *raw, *bpc, *vstep, *vbpc; /* bpc: raw as a centred mean of `smooth` points */
    int n, nv, cap, vcap;
    int dropped; /* lines with a step and a bpc not drawn: non-finite (null, nan) or out of METRICS_* */
} metrics_curve;

/* What a curve may hold: a BPC in [0, METRICS_MAX_BPC] (no model of bytes reaches it; a diverged run's 1e308 would
 * squash every other value into one line), a step in [0, METRICS_MAX_STEP]. */
#define METRICS_MAX_BPC 1000.0
#define METRICS_MAX_STEP 1e15

/* The number after "key": in flat JSON text (a metrics line, a --json object); NAN when absent or not a number
 * (null). */
double metrics_number(const char *line, const char *key);
/* Appends f's lines to c: a line with "eval" and "valid" (or "valid_full") is a validation point, any other line
 * with a step and bpc in range a training point (raw), smoothed into bpc by a mean of `smooth` (>= 1) points centred
 * on it (shrunk at the ends); lines without both keys are skipped, lines with a value non-finite or out of range
 * counted in c->dropped (lines longer than 4095 bytes are read in pieces). */
void metrics_read_curve(FILE *f, int smooth, metrics_curve *c);
void metrics_curve_free(metrics_curve *c);
/* The last training line and the last evaluation line of f ("eval" in it), without their newline, cut to n - 1
 * bytes; event lines ("event" in it: an early stop) are neither. Empty when there is none. */
void metrics_last_lines(FILE *f, char *train, char *eval, size_t n);

#endif
