/* lipt plot: training and validation curves of one or more runs (their metrics.jsonl) in one SVG or PNG figure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "metrics_read.h"
#include "png.h"
#include "svg.h"

#define LN2 0.69314718055994530942
#define MAX_RUNS 8 /* cli_args holds 8 positional arguments */

static const cli_opt plot_opts[] = {
    {"out", CLI_STRING, "FILE", "the figure to write: FILE.svg (SVG), or FILE.png (PNG, drawn by lipt itself: curves, "
     "grid and tick values, but no words: title, axis names and legend are the SVG's)", "runs/plot.svg"},
    {"png", CLI_FLAG, NULL, "with an --out FILE.svg: the same figure also as a PNG beside it (FILE.png)", NULL},
    {"smooth", CLI_INT, "N", "training BPC: the mean of N logged steps centred on each (no lag behind the raw values, "
     "which are drawn faint behind it; 1: raw only)", "10"},
    {"title", CLI_STRING, "TEXT", "figure title", NULL},
    {"labels", CLI_STRING, "LIST", "comma-separated legend names, one per run (default: the run folders' names)", NULL},
    {"x", CLI_STRING, "AXIS", "horizontal axis: step, or symbols (training symbols seen: step x batch x seq_len from the run's run.cfg)", "step"},
    {"valid-only", CLI_FLAG, NULL, "only the validation curves (no training BPC)", NULL},
};

/* The legend name of run i: the i-th entry of --labels, else the run's folder name (its last path component, or the
 * folder holding a metrics.jsonl given directly). */
static void run_label(const char *labels, int i, const char *run, char *out, size_t n) {
    if (labels) {
        const char *p = labels;
        for (int k = 0; k < i && p; k++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
        if (p) {
            const size_t len = strcspn(p, ",");
            snprintf(out, n, "%.*s", (int)len, p);
            return;
        }
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", run);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    if (len > 13 && strcmp(buf + len - 13, "metrics.jsonl") == 0) {
        buf[len - 13] = 0;
        len -= 13;
        while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
        if (len == 0) snprintf(buf, sizeof buf, "%s", run);
    }
    const char *slash = strrchr(buf, '/');
    snprintf(out, n, "%s", slash && slash[1] ? slash + 1 : buf);
}

typedef metrics_curve curve; /* src/shell/metrics_read.c */

/* Training symbols per step of a run: batch x seq_len from the run.cfg beside its metrics.jsonl (what lipt train
 * writes). 0 when either is missing. */
static double symbols_per_step(const char *metrics_path) {
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s", metrics_path);
    char *slash = strrchr(cfg, '/');
    if (slash) snprintf(slash + 1, sizeof cfg - (size_t)(slash + 1 - cfg), "run.cfg");
    else snprintf(cfg, sizeof cfg, "run.cfg");
    FILE *f = lipt_open_regular(cfg, NULL, NULL); /* regular files only: a FIFO is never waited on */
    if (!f) return 0;
    char line[1024];
    double batch = 0, seq = 0;
    while (fgets(line, sizeof line, f)) {
        double v;
        if (sscanf(line, " batch = %lf", &v) == 1) batch = v;
        else if (sscanf(line, " seq_len = %lf", &v) == 1) seq = v;
    }
    fclose(f);
    return batch > 0 && seq > 0 ? batch * seq : 0;
}

/* A run folder (or its metrics.jsonl) -> its curves; the training BPC smoothed over `smooth` lines. 0, or -1 with
 * the reason in err (missing, not a regular file: a FIFO is refused, never waited on). */
static int read_run(const char *run, int smooth, curve *c, char *path, size_t n, lipt_error *err) {
    struct stat sb;
    if (stat(run, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, n, "%s/metrics.jsonl", run);
    else snprintf(path, n, "%s", run);
    FILE *f = lipt_open_regular(path, NULL, err);
    if (!f) return -1;
    metrics_read_curve(f, smooth, c);
    fclose(f);
    return 0;
}

/* The figure as an SVG (svg NULL: none) and as a PNG (png NULL: none). 0, or the exit status after the message. */
static int write_figures(const char *svg, const char *png, const svg_plot *p, const svg_series *s, int ns, int runs) {
    lipt_error err = {0};
    if (svg && svg_write_file(svg, p, s, ns, &err) != LIPT_OK) return cli_fail("plot", &err);
    if (svg) fprintf(stderr, "wrote %s (%d run%s)\n", cli_shown(svg), runs, runs > 1 ? "s" : "");
    if (png && png_plot_file(png, p, s, ns, &err) != LIPT_OK) return cli_fail("plot", &err);
    if (png)
        fprintf(stderr, "wrote %s (%d run%s; a PNG has curves, grid and tick values but no words: the colours are the "
                "runs' in the order given, %s)\n", cli_shown(png), runs, runs > 1 ? "s" : "",
                svg ? "the SVG has the legend" : "write a .svg for the title, axis names and legend");
    return 0;
}

int cmd_plot(int argc, char **argv) {
    const char *C = "plot";
    cli_args a;
    int pr = cli_parse(&a, C,
                       "Plot runs: training BPC (solid, smoothed) and validation BPC (dashed, markers) against the step, one\n"
                       "colour per run. Give run folders (or metrics.jsonl files): lipt plot runs/a runs/b --out cmp.svg (or cmp.png)",
                       plot_opts, (int)(sizeof plot_opts / sizeof plot_opts[0]), argc, argv, 0, MAX_RUNS);
    if (pr) return pr > 0 ? 0 : 2;
    long smooth;
    if (cli_int(&a, "smooth", &smooth)) return 2;
    if (smooth < 1 || smooth > 100000) return cli_error(C, "--smooth must be in [1, 100000], got %ld", smooth);
    if (a.n_pos < 1) return cli_error(C, "give one or more run folders (or metrics.jsonl files)");
    if (a.n_pos > MAX_RUNS) return cli_error(C, "at most %d runs per figure, got %d", MAX_RUNS, a.n_pos);
    const char *out = cli_str(&a, "out");
    const size_t ol = strlen(out);
    const int is_svg = ol >= 4 && strcasecmp(out + ol - 4, ".svg") == 0, is_png = ol >= 4 && strcasecmp(out + ol - 4, ".png") == 0;
    if (!is_svg && !is_png) /* the format follows the name: SVG bytes in a .png would not open as one */
        return cli_error(C, "--out %s: name the figure *.svg or *.png", out);
    char png_out[1200] = "";
    if (is_png) snprintf(png_out, sizeof png_out, "%s", out);
    else if (cli_has(&a, "png")) snprintf(png_out, sizeof png_out, "%.*s.png", (int)(ol - 4), out);
    const char *xaxis = cli_str(&a, "x");
    const int by_symbols = strcmp(xaxis, "symbols") == 0;
    if (!by_symbols && strcmp(xaxis, "step") != 0) return cli_error(C, "--x must be step or symbols, got '%s'", xaxis);
    const int valid_only = cli_has(&a, "valid-only");
    curve c[MAX_RUNS];
    memset(c, 0, sizeof c);
    svg_series s[3 * MAX_RUNS];
    char lab[3 * MAX_RUNS][300];
    int ns = 0, rc = 0;
    for (int i = 0; i < a.n_pos && !rc; i++) {
        char path[1200];
        lipt_error rerr = {0};
        if (read_run(a.pos[i], (int)smooth, &c[i], path, sizeof path, &rerr) != 0) {
            rc = cli_error(C, "%s (give a run folder of lipt train, which holds metrics.jsonl, or that file)", rerr.msg);
            break;
        }
        if (c[i].dropped)
            fprintf(stderr, "note: %s: %d point%s not drawn: a value non-finite or out of range (BPC in [0, %g], step "
                    "in [0, %g])\n", cli_shown(path), c[i].dropped, c[i].dropped > 1 ? "s" : "", METRICS_MAX_BPC,
                    METRICS_MAX_STEP);
        if (c[i].n + c[i].nv == 0) fprintf(stderr, "note: %s has no logged steps yet\n", cli_shown(path));
        if (by_symbols) {
            const double per = symbols_per_step(path);
            if (per <= 0) {
                rc = cli_error(C, "%s: --x symbols needs batch and seq_len in the run.cfg beside %s (or use --x step)",
                               a.pos[i], path);
                break;
            }
            for (int k = 0; k < c[i].n; k++) c[i].step[k] *= per;
            for (int k = 0; k < c[i].nv; k++) c[i].vstep[k] *= per;
        }
        char name[256];
        run_label(cli_has(&a, "labels") ? cli_str(&a, "labels") : NULL, i, a.pos[i], name, sizeof name);
        if (!valid_only && smooth > 1) /* the raw values, faint behind their smoothing and out of the legend */
            s[ns++] = (svg_series){NULL, c[i].step, c[i].raw, c[i].n, svg_color(i), SVG_MARK_NONE, 1, SVG_FAINT, 1.0};
        if (!valid_only) {
            snprintf(lab[ns], sizeof lab[0], "%s train", name);
            s[ns] = (svg_series){lab[ns], c[i].step, c[i].bpc, c[i].n, svg_color(i), SVG_MARK_NONE, 1, SVG_SOLID, 1.4};
            ns++;
        }
        if (c[i].nv) {
            snprintf(lab[ns], sizeof lab[0], "%s valid", name);
            s[ns] = (svg_series){lab[ns], c[i].vstep, c[i].vbpc, c[i].nv, svg_color(i), SVG_MARK_CIRCLE, 1, SVG_DASHED, 1.4};
            ns++;
        }
    }
    if (!rc) {
        svg_plot p = svg_plot_defaults();
        char title[300];
        snprintf(title, sizeof title, "%s", cli_has(&a, "title") ? cli_str(&a, "title") : "bits per character");
        p.title = title;
        p.xlabel = by_symbols ? "training symbols seen" : "step";
        p.ylabel = valid_only ? "validation BPC" : smooth > 1 ? "BPC (train: centred mean, raw faint)" : "BPC";
        p.width = 960;
        rc = write_figures(is_svg ? out : NULL, png_out[0] ? png_out : NULL, &p, s, ns, a.n_pos);
    }
    for (int i = 0; i < MAX_RUNS; i++) metrics_curve_free(&c[i]);
    cli_free(&a);
    return rc;
}
