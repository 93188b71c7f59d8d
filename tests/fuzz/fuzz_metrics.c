/* libFuzzer target: a run's metrics.jsonl as lipt plot and lipt info read it (src/shell/metrics_read.c): the curves
 * (training BPC smoothed over the last N lines, validation points), drawn as lipt plot draws them (svg_write, steps
 * or training symbols on the x axis), and the last training and evaluation lines lipt info shows (text and JSON).
 * The first byte picks the smoothing (1 to 32, or 100000) and the axis; the rest is the file.
 * Build and run: scripts/fuzz.sh metrics SECONDS. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics_read.h"
#include "svg.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    devnull = fopen("/dev/null", "w");
    return 0;
}

static void check_points(const double *x, const double *y, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) abort(); /* steps are finite; a smoothed BPC may overflow, the figure skips it */
    (void)y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 65536) return 0;
    const int smooth = data[0] == 0xff ? 100000 : 1 + (data[0] & 31);
    const int by_symbols = data[0] & 0x40;
    FILE *f = fmemopen((void *)(data + 1), size - 1, "r");
    if (!f) return 0;
    metrics_curve c;
    memset(&c, 0, sizeof c);
    metrics_read_curve(f, smooth, &c);
    if (c.n < 0 || c.nv < 0 || c.n > (int)size || c.nv > (int)size) abort();
    check_points(c.step, c.bpc, c.n);
    check_points(c.vstep, c.vbpc, c.nv);
    if (by_symbols) { /* --x symbols: steps times batch x seq_len (here 256 x 2048) */
        for (int k = 0; k < c.n; k++) c.step[k] *= 524288.0;
        for (int k = 0; k < c.nv; k++) c.vstep[k] *= 524288.0;
    }
    svg_series s[2] = {{"run train", c.step, c.bpc, c.n, svg_color(0), SVG_MARK_NONE, 1, SVG_SOLID, 1.4},
                       {"run valid", c.vstep, c.vbpc, c.nv, svg_color(0), SVG_MARK_CIRCLE, 1, SVG_DASHED, 1.4}};
    svg_plot p = svg_plot_defaults();
    p.title = "bits per character";
    p.xlabel = by_symbols ? "training symbols seen" : "step";
    p.ylabel = "BPC";
    p.width = 960;
    svg_write(devnull, &p, s, 2);
    metrics_curve_free(&c);

    rewind(f);
    char train[4096], eval[4096];
    metrics_last_lines(f, train, eval, sizeof train);
    if (strchr(train, '\n') || strchr(eval, '\n') || strstr(train, "\"event\"") || strstr(eval, "\"event\"")) abort();
    if (eval[0] && !strstr(eval, "\"eval\"")) abort();
    json_w j;
    json_begin(&j, devnull);
    json_str(&j, "last_train_metrics", train);
    json_str(&j, "last_eval_metrics", eval);
    json_end(&j);
    fclose(f);
    return 0;
}
