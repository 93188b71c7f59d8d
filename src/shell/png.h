/* defines: a minimal PNG writer (8-bit RGB, one IDAT compressed by zlib) and a small rasteriser on its canvas: lines
 * of a width, filled rectangles and discs, digits for tick values; and a line plot drawn with them (png_plot.c), so
 * that lipt plot writes a PNG without any converter installed. */
#ifndef LIPT_SHELL_PNG_H
#define LIPT_SHELL_PNG_H

#include <stdint.h>

#include "lipt/core.h"
#include "svg.h"

typedef struct {
    int w, h;
    uint8_t *rgb; /* w * h * 3 bytes, row by row */
} png_canvas;

typedef struct { uint8_t r, g, b; } png_rgb;

/* A white canvas of w x h pixels (1 .. 8192 each). LIPT_OK, or LIPT_ERR_NOMEM / LIPT_ERR_ARG in err. */
lipt_status png_canvas_init(png_canvas *c, int w, int h, lipt_error *err);
void png_canvas_free(png_canvas *c);
/* "#rrggbb" -> a colour; anything else -> grey. */
png_rgb png_color(const char *svg_colour);
/* Drawing: coordinates in pixels (y down), clipped to the canvas; alpha in [0, 1] blends over what is there. */
void png_fill_rect(png_canvas *c, double x0, double y0, double x1, double y1, png_rgb col);
void png_disc(png_canvas *c, double x, double y, double r, png_rgb col, double alpha);
void png_line(png_canvas *c, double x0, double y0, double x1, double y1, double width, png_rgb col, double alpha);
/* Text of digits, '.', '-', '+' and 'e' (other bytes are gaps) in a 3x5 font scaled by `scale`, its top-left corner at
 * (x, y); returns its width in pixels. */
int png_digits(png_canvas *c, double x, double y, const char *text, int scale, png_rgb col);
/* The canvas as a PNG file at path, through lipt's atomic writer. LIPT_OK, or the reason in err. */
lipt_status png_write_file(const char *path, const png_canvas *c, lipt_error *err);

/* The plot svg_write draws, rasterised: axes, grid, tick values and the series (lines and markers); no title, axis
 * names or legend (the PNG has digits only: the SVG has the words). */
lipt_status png_plot_file(const char *path, const svg_plot *p, const svg_series *s, int n_series, lipt_error *err);

#endif
