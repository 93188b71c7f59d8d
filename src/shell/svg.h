/* defines: a small SVG line-plot writer (axes with ticks and labels, linear or log scales, several series with
 * markers and a legend), and a grid of such plots in one document, for the experiment figures. */
#ifndef LIPT_EVAL_SVG_H
#define LIPT_EVAL_SVG_H

#include <stdio.h>

#include "lipt/core.h"

typedef enum { SVG_MARK_NONE, SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND, SVG_MARK_CROSS } svg_marker;
/* SVG_FAINT: solid at a quarter opacity (raw values drawn behind their smoothing) */
typedef enum { SVG_SOLID, SVG_DASHED, SVG_DOTTED, SVG_NO_LINE, SVG_FAINT } svg_line;

typedef struct {
    const char *label;   /* legend text; NULL keeps the series out of the legend */
    const double *x, *y; /* n points; a non-finite point (or one <= 0 on a log axis) is skipped and breaks the line */
    int n;
    const char *color;   /* any SVG colour; NULL picks from the palette by series index */
    svg_marker marker;
    int mark_every;      /* a marker on every k-th point (0 or 1: all) */
    svg_line line;
    double stroke;       /* line width in px; 0: 1.6 */
} svg_series;

typedef struct {
    const char *title, *xlabel, *ylabel; /* may be NULL */
    int logx, logy;
    int width, height;                   /* whole picture in px (the legend sits right of the axes) */
    double xmin, xmax, ymin, ymax;       /* axis range; NAN: from the data (rounded out to ticks) */
} svg_plot;

/* title, labels NULL; linear axes; 760 x 480; every range NAN. */
svg_plot svg_plot_defaults(void);

/* Palette colour i (cycled). */
const char *svg_color(int i);

/* Write the plot to f (a complete standalone SVG document). */
void svg_write(FILE *f, const svg_plot *p, const svg_series *s, int n_series);
/* Write it to path (via path.tmp and a rename, so a reader never sees half a file). */
lipt_status svg_write_file(const char *path, const svg_plot *p, const svg_series *s, int n_series, lipt_error *err);

/* One panel of a multi-plot figure: a plot (its own title, axes and legend; width x height is its cell) and its series.
 * plot NULL: an empty cell (e.g. to start the next group of panels on a new row). */
typedef struct {
    const svg_plot *plot;
    const svg_series *series;
    int n_series;
} svg_panel;

typedef struct {
    const char *title; /* above the grid; may be NULL */
    const char *note;  /* one line below the grid (e.g. what the panels share); may be NULL */
    int cols;          /* panels per row (<= 0: 1); they fill the grid row by row */
} svg_panels;

/* Write n panels as one standalone SVG document: a grid of cols columns, every cell the size of the largest panel. */
void svg_write_panels(FILE *f, const svg_panels *g, const svg_panel *panels, int n);
/* The same to path, atomically (as svg_write_file). */
lipt_status svg_write_panels_file(const char *path, const svg_panels *g, const svg_panel *panels, int n, lipt_error *err);

#endif
