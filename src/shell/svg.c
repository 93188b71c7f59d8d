/* A small SVG line-plot writer: axes, ticks and labels on linear or log scales, series with markers, a legend; several
 * such plots as the panels of one document. */
#include "svg.h"
#include "run.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

const char *svg_color(int i) {
    const int n = (int)(sizeof palette / sizeof palette[0]);
    return palette[((i % n) + n) % n];
}

svg_plot svg_plot_defaults(void) {
    svg_plot p;
    memset(&p, 0, sizeof p);
    p.width = 760;
    p.height = 480;
    p.xmin = p.xmax = p.ymin = p.ymax = NAN;
    return p;
}

/* The length (1..4) of the well-formed UTF-8 character at s that XML 1.0 allows in text, or 0: a control byte (C0
 * or DEL), a stray or cut continuation, an overlong form, a surrogate, U+FFFE / U+FFFF or a code point above
 * U+10FFFF. */
static int xml_char_len(const unsigned char *s) {
    const unsigned c = s[0];
    if (c < 0x80) return c >= 0x20 && c != 0x7f;
    int n;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = cp << 6 | (s[i] & 0x3F);
    }
    const unsigned min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;
    return n;
}

/* Text from names, labels and titles (run folders, --labels, a corpus's name) as XML character data: the markup
 * characters escaped, and what XML cannot hold (control bytes, malformed UTF-8) shown as U+FFFD, one per byte, so
 * the figure stays a valid document whatever the input. */
static void put_escaped(FILE *f, const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    while (s && *s) {
        const int n = xml_char_len(s);
        if (n == 0) {
            fputs("\xEF\xBF\xBD", f);
            s++;
            continue;
        }
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fwrite(s, 1, (size_t)n, f);
        }
        s += n;
    }
}

/* One axis: its range in data units and the map to pixels. */
typedef struct {
    int log;
    double lo, hi;   /* data units */
    double p0, p1;   /* pixels of lo and hi */
} axis;

/* |v| <= 1e300: a range between two finite extremes (+-1e308) would overflow to inf and every tick to nan */
static int usable(double v, int log) { return isfinite(v) && fabs(v) <= 1e300 && (!log || v > 0); }

static double ax_px(const axis *a, double v) {
    const double f = a->log ? log10(v) : v, f0 = a->log ? log10(a->lo) : a->lo, f1 = a->log ? log10(a->hi) : a->hi;
    return a->p0 + (f - f0) / (f1 - f0) * (a->p1 - a->p0);
}

/* 1, 2 or 5 times a power of ten, near raw. */
static double nice_step(double raw) {
    if (!(raw > 0)) return 1;
    const double e = pow(10, floor(log10(raw))), m = raw / e;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * e;
}

/* Range from the data (values vals[0..n)) unless fixed by the caller, rounded out to ticks. */
static void ax_range(axis *a, const double *vals, size_t n, double fix_lo, double fix_hi) {
    double mn = INFINITY, mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (usable(vals[i], a->log)) {
            mn = fmin(mn, vals[i]);
            mx = fmax(mx, vals[i]);
        }
    if (usable(fix_lo, a->log)) mn = fix_lo;
    if (usable(fix_hi, a->log)) mx = fix_hi;
    if (!(mn <= mx)) { /* no data: a placeholder range */
        mn = a->log ? 1 : 0;
        mx = a->log ? 10 : 1;
    }
    if (a->log) {
        double d0 = floor(log10(mn) + 1e-9), d1 = ceil(log10(mx) - 1e-9);
        if (d1 <= d0) d1 = d0 + 1;
        a->lo = usable(fix_lo, 1) ? fix_lo : pow(10, d0);
        a->hi = usable(fix_hi, 1) ? fix_hi : pow(10, d1);
        if (!(a->hi > a->lo)) a->hi = a->lo * 10;
    } else {
        if (mx == mn) {
            const double pad = mn == 0 ? 1 : fabs(mn) * 0.1;
            mn -= pad;
            mx += pad;
        }
        const double st = nice_step((mx - mn) / 5);
        a->lo = isfinite(fix_lo) ? fix_lo : floor(mn / st + 1e-9) * st;
        a->hi = isfinite(fix_hi) ? fix_hi : ceil(mx / st - 1e-9) * st;
        if (!(a->hi > a->lo)) a->hi = a->lo + st;
    }
}

/* Tick label text for value v (step: the linear tick spacing). */
static void linear_label(char *buf, size_t len, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    const int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-4)) snprintf(buf, len, "%g", v);
    else snprintf(buf, len, "%.*f", dec, v);
}

/* A decade label: plain (0.001 .. 10000) when the whole axis fits that range, else 10 with a superscript. */
static void put_decade_label(FILE *f, int k, int plain, double x, double y, const char *anchor) {
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"11\">", x, y, anchor);
    if (plain) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.*f", k < 0 ? -k : 0, pow(10, k));
        fputs(buf, f);
    } else {
        fprintf(f, "10<tspan dy=\"-5\" font-size=\"8\">%d</tspan>", k);
    }
    fputs("</text>\n", f);
}

/* major: 1 labelled with a grid line, 2 a labelled minor tick, 0 a plain minor tick; decade: k of 10^k (log). */
typedef struct { double v; int major; int decade; } tick;

/* Ticks of an axis into t (at most cap); returns the count. */
static int ax_ticks(const axis *a, tick *t, int cap) {
    int n = 0;
    if (a->log) {
        const int k0 = (int)ceil(log10(a->lo) - 1e-9), k1 = (int)floor(log10(a->hi) + 1e-9);
        const int ndec = k1 - k0 + 1, stride = ndec > 10 ? (ndec + 9) / 10 : 1;
        for (int k = k0; k <= k1 && n < cap; k++)
            t[n++] = (tick){pow(10, k), (k - k0) % stride == 0, k};
        /* minor ticks 2..9 x 10^k when the axis is short enough to show them; labelled when there are
         * too few decades to read the axis otherwise */
        const int label_minor = ndec < 2;
        if (log10(a->hi / a->lo) <= 8)
            for (int k = (int)floor(log10(a->lo)); k <= k1 && n < cap; k++)
                for (int m = 2; m <= 9 && n < cap; m++) {
                    const double v = m * pow(10, k);
                    if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9)) t[n++] = (tick){v, label_minor ? 2 : 0, k};
                }
    } else {
        const double st = nice_step((a->hi - a->lo) / 6);
        for (double v = ceil(a->lo / st - 1e-9) * st; v <= a->hi + st * 1e-9 && n < cap; v += st)
            t[n++] = (tick){v, 1, 0};
    }
    return n;
}

static void put_marker(FILE *f, svg_marker mk, double x, double y, const char *col) {
    const double r = 3.5;
    switch (mk) {
    case SVG_MARK_CIRCLE: fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"%s\"/>\n", x, y, r, col); break;
    case SVG_MARK_SQUARE:
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", x - r, y - r, 2 * r, 2 * r, col);
        break;
    case SVG_MARK_TRIANGLE:
        fprintf(f, "<path d=\"M%.2f,%.2f L%.2f,%.2f L%.2f,%.2f Z\" fill=\"%s\"/>\n", x, y - 1.25 * r, x + 1.15 * r,
                y + 0.8 * r, x - 1.15 * r, y + 0.8 * r, col);
        break;
    case SVG_MARK_DIAMOND:
        fprintf(f, "<path d=\"M%.2f,%.2f L%.2f,%.2f L%.2f,%.2f L%.2f,%.2f Z\" fill=\"%s\"/>\n", x, y - 1.3 * r,
                x + 1.3 * r, y, x, y + 1.3 * r, x - 1.3 * r, y, col);
        break;
    case SVG_MARK_CROSS:
        fprintf(f, "<path d=\"M%.2f,%.2f L%.2f,%.2f M%.2f,%.2f L%.2f,%.2f\" stroke=\"%s\" stroke-width=\"1.6\"/>\n", x - r,
                y - r, x + r, y + r, x - r, y + r, x + r, y - r, col);
        break;
    case SVG_MARK_NONE: break;
    }
}

static void put_stroke_style(FILE *f, const svg_series *s, const char *col) {
    fprintf(f, "fill=\"none\" stroke=\"%s\" stroke-width=\"%.2f\" stroke-linejoin=\"round\"", col,
            s->stroke > 0 ? s->stroke : 1.6);
    if (s->line == SVG_FAINT) fputs(" stroke-opacity=\"0.25\"", f);
    if (s->line == SVG_DASHED) fputs(" stroke-dasharray=\"7,4\"", f);
    if (s->line == SVG_DOTTED) fputs(" stroke-dasharray=\"1.5,3.5\" stroke-linecap=\"round\"", f);
}

/* Legend labels are set at 12 px, about 7.2 px per character (generous for wide fonts); the legend takes at most
 * 45 % of the plot's width, longer labels are shortened in the middle so the axes are never squeezed. */
static size_t legend_max_chars(int W) {
    const double c = (0.45 * W - 48) / 7.2;
    return c < 12 ? 12 : (size_t)c;
}

/* The axes of a plot W x H px: the box left of the legend (its width from the longest label, capped), the ranges
 * from the usable points unless fixed by the plot. */
static void plot_axes(const svg_plot *p, const svg_series *s, int ns, int W, int H, axis *ax, axis *ay) {
    size_t maxlab = 0;
    int n_leg = 0;
    for (int i = 0; i < ns; i++)
        if (s[i].label) {
            n_leg++;
            if (strlen(s[i].label) > maxlab) maxlab = strlen(s[i].label);
        }
    if (maxlab > legend_max_chars(W)) maxlab = legend_max_chars(W);
    const double leg_w = n_leg ? 48 + 7.2 * (double)maxlab : 0;
    const double left = 78, right = n_leg ? leg_w + 24 : 24, top = p->title ? 38 : 18, bottom = 58;
    *ax = (axis){p->logx, 0, 1, left, W - right};
    *ay = (axis){p->logy, 0, 1, H - bottom, top};

    size_t total = 0;
    for (int i = 0; i < ns; i++) total += s[i].n > 0 ? (size_t)s[i].n : 0;
    double *vx = malloc((total + 1) * sizeof *vx), *vy = malloc((total + 1) * sizeof *vy);
    LIPT_CHECK(vx && vy, "svg: out of memory");
    size_t m = 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++)
            if (usable(s[i].x[j], p->logx) && usable(s[i].y[j], p->logy)) {
                vx[m] = s[i].x[j];
                vy[m] = s[i].y[j];
                m++;
            }
    ax_range(ax, vx, m, p->xmin, p->xmax);
    ax_range(ay, vy, m, p->ymin, p->ymax);
    free(vx);
    free(vy);
}

/* Grid lines, ticks and tick labels of both axes. */
static void draw_ticks(FILE *f, const axis *ax, const axis *ay) {
    tick t[256];
    for (int dim = 0; dim < 2; dim++) {
        const axis *a = dim ? ay : ax;
        const int nt = ax_ticks(a, t, 256);
        const double st = a->log ? 0 : nice_step((a->hi - a->lo) / 6);
        const int plain = a->log && log10(a->lo) >= -3 - 1e-9 && log10(a->hi) <= 4 + 1e-9;
        for (int i = 0; i < nt; i++) {
            const double q = ax_px(a, t[i].v);
            const int labelled = t[i].major == 1 || t[i].major == 2;
            const double len = t[i].major ? 6 : 3.5;
            if (dim == 0) {
                if (t[i].major == 1)
                    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e3e3e3\"/>\n", q, ay->p0, q, ay->p1);
                fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\"/>\n", q, ay->p0, q, ay->p0 + len);
            } else {
                if (t[i].major == 1)
                    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e3e3e3\"/>\n", ax->p0, q, ax->p1, q);
                fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"black\"/>\n", ax->p0 - len, q, ax->p0, q);
            }
            if (!labelled) continue;
            const double lx = dim == 0 ? q : ax->p0 - 9, ly = dim == 0 ? ay->p0 + 20 : q + 4;
            const char *anchor = dim == 0 ? "middle" : "end";
            if (a->log && t[i].major == 1) {
                put_decade_label(f, t[i].decade, plain, lx, ly, anchor);
            } else {
                char buf[48];
                if (a->log) snprintf(buf, sizeof buf, "%g", t[i].v);
                else linear_label(buf, sizeof buf, t[i].v, st);
                fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"11\">%s</text>\n", lx, ly, anchor, buf);
            }
        }
    }
}

/* The frame around the axes and the axis titles (the y one turned upright). */
static void draw_frame(FILE *f, const svg_plot *p, int H, const axis *ax, const axis *ay) {
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"black\"/>\n", ax->p0, ay->p1,
            ax->p1 - ax->p0, ay->p0 - ay->p1);
    if (p->xlabel) {
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"12\">", (ax->p0 + ax->p1) / 2, (double)H - 14);
        put_escaped(f, p->xlabel);
        fputs("</text>\n", f);
    }
    if (p->ylabel) {
        const double cx = 20, cy = (ay->p0 + ay->p1) / 2;
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 %.2f %.2f)\">",
                cx, cy, cx, cy);
        put_escaped(f, p->ylabel);
        fputs("</text>\n", f);
    }
}

/* The series, clipped to the axes: a line broken at unusable points, then the markers. */
static void draw_series(FILE *f, const svg_plot *p, const svg_series *s, int ns, const char *clip, const axis *ax,
                        const axis *ay) {
    fprintf(f, "<g clip-path=\"url(#%s)\">\n", clip);
    for (int i = 0; i < ns; i++) {
        const char *col = s[i].color ? s[i].color : svg_color(i);
        if (s[i].line != SVG_NO_LINE) {
            fputs("<path d=\"", f);
            int pen = 0, any = 0;
            for (int j = 0; j < s[i].n; j++) {
                if (!usable(s[i].x[j], p->logx) || !usable(s[i].y[j], p->logy)) {
                    pen = 0;
                    continue;
                }
                fprintf(f, "%s%.2f,%.2f ", pen ? "L" : "M", ax_px(ax, s[i].x[j]), ax_px(ay, s[i].y[j]));
                pen = any = 1;
            }
            if (!any) fputs("M0,0", f);
            fputs("\" ", f);
            put_stroke_style(f, &s[i], col);
            fputs("/>\n", f);
        }
        const int every = s[i].mark_every > 1 ? s[i].mark_every : 1;
        if (s[i].marker != SVG_MARK_NONE)
            for (int j = 0; j < s[i].n; j += every)
                if (usable(s[i].x[j], p->logx) && usable(s[i].y[j], p->logy))
                    put_marker(f, s[i].marker, ax_px(ax, s[i].x[j]), ax_px(ay, s[i].y[j]), col);
    }
    fputs("</g>\n", f);
}

/* The legend, right of the axes: the labelled series only. */
static void draw_legend(FILE *f, const svg_series *s, int ns, const axis *ax, const axis *ay, int W) {
    const size_t cap = legend_max_chars(W);
    double ly = ay->p1 + 10;
    const double lx = ax->p1 + 18;
    for (int i = 0; i < ns; i++) {
        if (!s[i].label) continue;
        const char *col = s[i].color ? s[i].color : svg_color(i);
        if (s[i].line != SVG_NO_LINE) {
            fprintf(f, "<path d=\"M%.2f,%.2f L%.2f,%.2f\" ", lx, ly, lx + 30, ly);
            put_stroke_style(f, &s[i], col);
            fputs("/>\n", f);
        }
        put_marker(f, s[i].marker, lx + 15, ly, col);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"12\">", lx + 38, ly + 4);
        const size_t len = strlen(s[i].label);
        if (len <= cap) put_escaped(f, s[i].label);
        else { /* head … tail, cut on UTF-8 character boundaries */
            char buf[1024];
            size_t h = (cap - 1) / 2, t = len - (cap - 1 - h);
            while (h > 0 && ((unsigned char)s[i].label[h] & 0xC0) == 0x80) h--;
            while (t < len && ((unsigned char)s[i].label[t] & 0xC0) == 0x80) t++;
            snprintf(buf, sizeof buf, "%.*s\xe2\x80\xa6%s", (int)h, s[i].label, s[i].label + t);
            put_escaped(f, buf);
        }
        fputs("</text>\n", f);
        ly += 18;
    }
}

/* One plot in the box [0, W] x [0, H] of the current user space (a panel translates it); clip: the clip-path id
 * (unique within the document). */
static void draw_plot(FILE *f, const svg_plot *p, const svg_series *s, int ns, const char *clip) {
    const int W = p->width > 0 ? p->width : 760, H = p->height > 0 ? p->height : 480;
    axis ax, ay;
    plot_axes(p, s, ns, W, H, &ax, &ay);
    fprintf(f, "<defs><clipPath id=\"%s\"><rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/></clipPath></defs>\n",
            clip, ax.p0, ay.p1, ax.p1 - ax.p0, ay.p0 - ay.p1);
    if (p->title) {
        /* centred over the axes, moved right when it would start left of the figure (about 8 px per character) */
        const double half = 4.0 * (double)strlen(p->title), mid = (ax.p0 + ax.p1) / 2;
        fprintf(f, "<text x=\"%.2f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">", mid - half < 6 ? half + 6 : mid);
        put_escaped(f, p->title);
        fputs("</text>\n", f);
    }
    draw_ticks(f, &ax, &ay);
    draw_frame(f, p, H, &ax, &ay);
    draw_series(f, p, s, ns, clip, &ax, &ay);
    draw_legend(f, s, ns, &ax, &ay, W);
}

static void doc_open(FILE *f, int W, int H) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
}

void svg_write(FILE *f, const svg_plot *p, const svg_series *s, int ns) {
    doc_open(f, p->width > 0 ? p->width : 760, p->height > 0 ? p->height : 480);
    draw_plot(f, p, s, ns, "plotarea");
    fputs("</svg>\n", f);
}

/* Cell size of the grid: the largest panel (so the panels line up in rows and columns). */
static void panel_cell(const svg_panel *pn, int n, int *cw, int *ch) {
    *cw = *ch = 0;
    for (int i = 0; i < n; i++) {
        if (!pn[i].plot) continue;
        const int w = pn[i].plot->width > 0 ? pn[i].plot->width : 760, h = pn[i].plot->height > 0 ? pn[i].plot->height : 480;
        if (w > *cw) *cw = w;
        if (h > *ch) *ch = h;
    }
    if (!*cw) *cw = 760;
    if (!*ch) *ch = 480;
}

void svg_write_panels(FILE *f, const svg_panels *g, const svg_panel *pn, int n) {
    const int cols = g->cols > 0 ? g->cols : 1, rows = n > 0 ? (n + cols - 1) / cols : 1;
    int cw, ch;
    panel_cell(pn, n, &cw, &ch);
    const int top = g->title ? 34 : 0, bottom = g->note ? 26 : 0;
    const int W = cols * cw, H = top + rows * ch + bottom;
    doc_open(f, W, H);
    if (g->title) {
        fprintf(f, "<text x=\"%.2f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", W / 2.0);
        put_escaped(f, g->title);
        fputs("</text>\n", f);
    }
    for (int i = 0; i < n; i++) {
        if (!pn[i].plot) continue; /* an empty cell */
        char clip[32];
        snprintf(clip, sizeof clip, "plotarea%d", i);
        fprintf(f, "<g transform=\"translate(%d,%d)\">\n", (i % cols) * cw, top + (i / cols) * ch);
        draw_plot(f, pn[i].plot, pn[i].series, pn[i].n_series, clip);
        fputs("</g>\n", f);
    }
    if (g->note) {
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\">", W / 2.0, H - 9);
        put_escaped(f, g->note);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
}

/* What an atomic write puts in the file: one plot or a grid of panels. */
typedef struct {
    const svg_plot *p;
    const svg_series *s;
    int ns;
    const svg_panels *g;
    const svg_panel *pn;
} svg_doc;

/* Write doc to path through lipt's atomic writer: path.tmp created fresh (never through a planted symlink), fsync,
 * rename (a reader never sees half a file); a device, FIFO or folder at path is refused, never replaced. */
static lipt_status write_atomic(const char *path, const svg_doc *d, lipt_error *err) {
    lipt_output o;
    const lipt_status st = lipt_output_open(&o, path, err);
    if (st != LIPT_OK) return st;
    if (d->g) svg_write_panels(o.f, d->g, d->pn, d->ns);
    else svg_write(o.f, d->p, d->s, d->ns);
    return lipt_output_commit(&o, err);
}

lipt_status svg_write_file(const char *path, const svg_plot *p, const svg_series *s, int ns, lipt_error *err) {
    const svg_doc d = {p, s, ns, NULL, NULL};
    return write_atomic(path, &d, err);
}

lipt_status svg_write_panels_file(const char *path, const svg_panels *g, const svg_panel *pn, int n, lipt_error *err) {
    const svg_doc d = {NULL, NULL, n, g, pn};
    return write_atomic(path, &d, err);
}
