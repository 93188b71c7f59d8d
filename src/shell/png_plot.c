/* The line plot of svg.c rasterised into a PNG (png.h): the same series, axes rounded out to ticks, grid lines and
 * tick values in digits; the words (title, axis names, legend) stay in the SVG. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "png.h"

typedef struct {
    int log;
    double lo, hi; /* in the axis's units: log10 of the data on a log axis */
    double p0, p1; /* pixels of lo and hi */
} png_axis;

/* A point's value on an axis, or NAN when it cannot be drawn (non-finite, huge, <= 0 on a log axis). */
static double ax_val(const png_axis *a, double v) {
    if (!isfinite(v) || fabs(v) > 1e300 || (a->log && v <= 0)) return NAN;
    return a->log ? log10(v) : v;
}

static double ax_px(const png_axis *a, double u) { return a->p0 + (u - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0); }

/* 1, 2 or 5 times a power of ten, near raw. */
static double nice(double raw) {
    if (!(raw > 0) || !isfinite(raw)) return 1;
    const double e = pow(10, floor(log10(raw))), m = raw / e;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * e;
}

/* The range of every drawable value of the series on one axis (x: which = 0), or of the plot's fixed ends. */
static void ax_range(png_axis *a, const svg_series *s, int ns, int which, double fix_lo, double fix_hi) {
    double mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++) {
            const double u = ax_val(a, which ? s[i].y[j] : s[i].x[j]);
            if (isfinite(u)) mn = fmin(mn, u), mx = fmax(mx, u);
        }
    if (isfinite(ax_val(a, fix_lo))) mn = ax_val(a, fix_lo);
    if (isfinite(ax_val(a, fix_hi))) mx = ax_val(a, fix_hi);
    if (!(mn <= mx)) mn = 0, mx = 1; /* no data */
    if (mx == mn) mn -= mn == 0 ? 1 : fabs(mn) * 0.1, mx += mx == 0 ? 1 : fabs(mx) * 0.1;
    const double st = a->log ? fmax(1, round((mx - mn) / 5)) : nice((mx - mn) / 5);
    a->lo = floor(mn / st + 1e-9) * st;
    a->hi = ceil(mx / st - 1e-9) * st;
    if (!(a->hi > a->lo)) a->hi = a->lo + st;
}

/* Grid lines and tick values of one axis (x: vertical = 0). */
static void ax_ticks(png_canvas *c, const png_axis *a, int vertical, const png_axis *other) {
    const double st = a->log ? fmax(1, round((a->hi - a->lo) / 6)) : nice((a->hi - a->lo) / 6);
    const png_rgb grid = {225, 225, 225}, ink = {60, 60, 60};
    for (double u = ceil(a->lo / st - 1e-9) * st; u <= a->hi + st * 1e-9; u += st) {
        const double px = ax_px(a, u);
        char t[32];
        snprintf(t, sizeof t, "%g", a->log ? pow(10, u) : fabs(u) < st * 1e-9 ? 0.0 : u);
        if (vertical) {
            png_line(c, px, other->p1, px, other->p0, 1, grid, 1);
            png_digits(c, px - 4.0 * (double)strlen(t), other->p0 + 6, t, 2, ink);
        } else {
            png_line(c, other->p0, px, other->p1, px, 1, grid, 1);
            png_digits(c, other->p0 - 8 - 8.0 * (double)strlen(t), px - 5, t, 2, ink);
        }
    }
}

static void draw_series(png_canvas *c, const png_axis *ax, const png_axis *ay, const svg_series *s, int i) {
    const png_rgb col = png_color(s->color ? s->color : svg_color(i));
    const double w = s->stroke > 0 ? s->stroke * 1.25 : 2, alpha = s->line == SVG_FAINT ? 0.25 : 1;
    double px = NAN, py = NAN, along = 0; /* along: the length drawn, for dashes */
    for (int j = 0; j < s->n; j++) {
        const double ux = ax_val(ax, s->x[j]), uy = ax_val(ay, s->y[j]);
        if (!isfinite(ux) || !isfinite(uy)) { /* a gap breaks the line, as in the SVG */
            px = py = NAN;
            continue;
        }
        const double x = ax_px(ax, ux), y = ax_px(ay, uy);
        if (isfinite(px) && s->line != SVG_NO_LINE) {
            const double len = hypot(x - px, y - py);
            const double period = s->line == SVG_DASHED ? 10 : s->line == SVG_DOTTED ? 5 : 0;
            if (period == 0 || len == 0) png_line(c, px, py, x, y, w, col, alpha);
            else /* on for the first 60% of each period along the whole line */
                for (double t = 0; t < len; t += 1) {
                    if (fmod(along + t, period) < 0.6 * period)
                        png_line(c, px + (x - px) * t / len, py + (y - py) * t / len, px + (x - px) * fmin(len, t + 1) / len,
                                 py + (y - py) * fmin(len, t + 1) / len, w, col, alpha);
                }
            along += len;
        }
        if (s->marker != SVG_MARK_NONE && (s->mark_every <= 1 || j % s->mark_every == 0)) png_disc(c, x, y, 3, col, 1);
        px = x, py = y;
    }
}

lipt_status png_plot_file(const char *path, const svg_plot *p, const svg_series *s, int ns, lipt_error *err) {
    png_canvas c;
    lipt_status st = png_canvas_init(&c, p->width > 0 ? p->width : 760, p->height > 0 ? p->height : 480, err);
    if (st != LIPT_OK) return st;
    /* margins: room for the y tick values on the left and the x tick values below */
    png_axis ax = {p->logx, 0, 1, 90, c.w - 20.0}, ay = {p->logy, 0, 1, c.h - 40.0, 20};
    ax_range(&ax, s, ns, 0, p->xmin, p->xmax);
    ax_range(&ay, s, ns, 1, p->ymin, p->ymax);
    ax_ticks(&c, &ax, 1, &ay);
    ax_ticks(&c, &ay, 0, &ax);
    const png_rgb ink = {60, 60, 60};
    png_line(&c, ax.p0, ay.p0, ax.p1, ay.p0, 1.2, ink, 1); /* the axes */
    png_line(&c, ax.p0, ay.p0, ax.p0, ay.p1, 1.2, ink, 1);
    for (int i = 0; i < ns; i++) draw_series(&c, &ax, &ay, &s[i], i);
    st = png_write_file(path, &c, err);
    png_canvas_free(&c);
    return st;
}
