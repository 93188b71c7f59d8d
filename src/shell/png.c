/* A minimal PNG encoder (signature, IHDR, one IDAT of zlib-compressed rows with filter 0, IEND; CRC-32 from zlib) and
 * a rasteriser for it (png.h). */
#include "png.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

lipt_status png_canvas_init(png_canvas *c, int w, int h, lipt_error *err) {
    c->rgb = NULL;
    c->w = c->h = 0;
    if (w < 1 || h < 1 || w > 8192 || h > 8192)
        return lipt_fail(err, LIPT_ERR_ARG, "a PNG of %d x %d pixels: each side must be in [1, 8192]", w, h);
    c->rgb = malloc((size_t)w * (size_t)h * 3);
    if (!c->rgb) return lipt_fail(err, LIPT_ERR_NOMEM, "cannot allocate a PNG of %d x %d pixels", w, h);
    memset(c->rgb, 255, (size_t)w * (size_t)h * 3);
    c->w = w;
    c->h = h;
    return LIPT_OK;
}

void png_canvas_free(png_canvas *c) {
    free(c->rgb);
    c->rgb = NULL;
}

png_rgb png_color(const char *s) {
    unsigned v;
    if (s && s[0] == '#' && strlen(s) == 7 && sscanf(s + 1, "%6x", &v) == 1)
        return (png_rgb){(uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    return (png_rgb){128, 128, 128};
}

static void blend(png_canvas *c, int x, int y, png_rgb col, double a) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    uint8_t *p = c->rgb + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
    const uint8_t v[3] = {col.r, col.g, col.b};
    for (int k = 0; k < 3; k++) p[k] = (uint8_t)lround(p[k] + a * (v[k] - p[k]));
}

void png_fill_rect(png_canvas *c, double x0, double y0, double x1, double y1, png_rgb col) {
    for (int y = (int)floor(fmin(y0, y1)); y <= (int)floor(fmax(y0, y1)); y++)
        for (int x = (int)floor(fmin(x0, x1)); x <= (int)floor(fmax(x0, x1)); x++) blend(c, x, y, col, 1);
}

void png_disc(png_canvas *c, double cx, double cy, double r, png_rgb col, double alpha) {
    if (!isfinite(cx) || !isfinite(cy) || fabs(cx) > 1e6 || fabs(cy) > 1e6) return;
    for (int y = (int)floor(cy - r); y <= (int)ceil(cy + r); y++)
        for (int x = (int)floor(cx - r); x <= (int)ceil(cx + r); x++) {
            const double d = hypot(x + 0.5 - cx, y + 0.5 - cy);
            const double cover = fmin(1, fmax(0, r + 0.5 - d)); /* a soft edge of one pixel */
            if (cover > 0) blend(c, x, y, col, alpha * cover);
        }
}

/* Each pixel within width/2 of the segment, its edge softened over one pixel (an antialiased thick line). */
void png_line(png_canvas *c, double x0, double y0, double x1, double y1, double width, png_rgb col, double alpha) {
    if (!isfinite(x0 + y0 + x1 + y1) || fmax(fmax(fabs(x0), fabs(x1)), fmax(fabs(y0), fabs(y1))) > 1e6) return;
    const double r = width / 2, dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    const int xa = (int)floor(fmax(0, fmin(x0, x1) - r - 1)), xb = (int)ceil(fmin(c->w - 1, fmax(x0, x1) + r + 1));
    const int ya = (int)floor(fmax(0, fmin(y0, y1) - r - 1)), yb = (int)ceil(fmin(c->h - 1, fmax(y0, y1) + r + 1));
    for (int y = ya; y <= yb; y++)
        for (int x = xa; x <= xb; x++) {
            const double px = x + 0.5 - x0, py = y + 0.5 - y0;
            const double t = len2 > 0 ? fmin(1, fmax(0, (px * dx + py * dy) / len2)) : 0;
            const double d = hypot(px - t * dx, py - t * dy);
            const double cover = fmin(1, fmax(0, r + 0.5 - d));
            if (cover > 0) blend(c, x, y, col, alpha * cover);
        }
}

int png_digits(png_canvas *c, double x, double y, const char *text, int scale, png_rgb col) {
    static const char glyphs[] = "0123456789.-+e";
    static const uint16_t rows[][5] = {
        {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7},
        {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}, {0, 0, 0, 0, 2}, {0, 0, 7, 0, 0},
        {0, 2, 7, 2, 0}, {2, 5, 7, 4, 3}};
    double at = x;
    for (const char *p = text; *p; p++) {
        const char *g = strchr(glyphs, *p);
        if (g && *p)
            for (int r = 0; r < 5; r++)
                for (int k = 0; k < 3; k++)
                    if (rows[g - glyphs][r] & (4 >> k))
                        png_fill_rect(c, at + k * scale, y + r * scale, at + (k + 1) * scale - 1,
                                      y + (r + 1) * scale - 1, col);
        at += 4 * scale;
    }
    return (int)(at - x);
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* One chunk: length, type, data, CRC-32 of type and data. */
static void chunk(FILE *f, const char *type, const uint8_t *data, uint32_t n) {
    uint8_t b[4];
    put_u32(b, n);
    fwrite(b, 1, 4, f);
    fwrite(type, 1, 4, f);
    if (n) fwrite(data, 1, n, f);
    uLong crc = crc32(0L, (const Bytef *)type, 4);
    if (n) crc = crc32(crc, data, n);
    put_u32(b, (uint32_t)crc);
    fwrite(b, 1, 4, f);
}

lipt_status png_write_file(const char *path, const png_canvas *c, lipt_error *err) {
    const size_t row = (size_t)c->w * 3 + 1, raw_n = row * (size_t)c->h; /* each row: filter byte 0, then RGB */
    uint8_t *raw = malloc(raw_n);
    uLongf z_n = compressBound((uLong)raw_n);
    uint8_t *z = malloc(z_n);
    if (!raw || !z) {
        free(raw), free(z);
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: cannot allocate the PNG's %zu bytes", path, raw_n);
    }
    for (int y = 0; y < c->h; y++) {
        raw[row * (size_t)y] = 0;
        memcpy(raw + row * (size_t)y + 1, c->rgb + (size_t)y * (size_t)c->w * 3, row - 1);
    }
    const int zrc = compress2(z, &z_n, raw, (uLong)raw_n, 9);
    free(raw);
    if (zrc != Z_OK) {
        free(z);
        return lipt_fail(err, LIPT_ERR_NOMEM, "%s: zlib could not compress the image (error %d)", path, zrc);
    }
    uint8_t ihdr[13];
    put_u32(ihdr, (uint32_t)c->w);
    put_u32(ihdr + 4, (uint32_t)c->h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0; /* 8 bits, RGB, deflate, filter 0, no interlace */
    lipt_output o;
    lipt_status st = lipt_output_open(&o, path, err);
    if (st == LIPT_OK) {
        fwrite("\x89PNG\r\n\x1a\n", 1, 8, o.f);
        chunk(o.f, "IHDR", ihdr, 13);
        chunk(o.f, "IDAT", z, (uint32_t)z_n);
        chunk(o.f, "IEND", NULL, 0);
        st = lipt_output_commit(&o, err);
    }
    free(z);
    return st;
}
