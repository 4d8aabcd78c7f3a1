/* The drawing kit the figure files of viz/ share (internal to viz/): colours,
 * text through cairo's font renderer, number labels, and axes with ticks in
 * the look of a default matplotlib figure.
 *
 * Text goes through cairo's toy font API with DejaVu Sans (fontconfig falls
 * back to any sans face if it is missing). */
#ifndef AR_VIZ_DRAW_H
#define AR_VIZ_DRAW_H

#include <cairo.h>
#include <stddef.h>

#define VZ_MAXT 48 /* ticks per axis: far more than ever fit */

typedef struct {
    double r, g, b;
} vz_rgb;

/* Okabe-Ito (colour-blind safe) minus its yellow, plus an olive. */
extern const vz_rgb vz_palette[8];
/* matplotlib's viridis at 0, 0.1, ..., 1 (the colour bar's stops). */
extern const vz_rgb vz_viridis[11];

void vz_set_rgb(cairo_t *cr, vz_rgb c);
void vz_set_grey(cairo_t *cr, double v);
double vz_clampd(double v, double lo, double hi);
/* viridis at t in [0, 1] (clamped), linear between the 11 stops. */
vz_rgb vz_viridis_at(double t);
/* Crisp 1 px lines sit on half pixels. */
double vz_half(double v);

/* ------------------------------------------------------------------ text */

/* A tick label: plain text, or base with a superscript (10 and exponent). */
typedef struct {
    char base[40];
    char sup[12];
} vz_label;

void vz_font(cairo_t *cr, double size, int bold);
double vz_text_w(cairo_t *cr, const char *s);
/* Height of a digit in the current font: the ink labels are centred on. */
double vz_digit_h(cairo_t *cr);
/* Draws s with its anchor at (x, y): ax 0/0.5/1 = left/centre/right;
 * ay 0/0.5/1 = top/middle/baseline-bottom of the digit height. */
void vz_text_at(cairo_t *cr, const char *s, double x, double y, double ax, double ay);
/* Text rotated a quarter turn anticlockwise (reads bottom to top). */
void vz_text_up(cairo_t *cr, const char *s, double x, double y, double ax, double ay);
/* Multi-line text ('\n' breaks lines): widest line, and drawing with the
 * first line's anchor at (x, y) and lines `step` pixels apart. */
double vz_lines_w(cairo_t *cr, const char *s);
int vz_lines_n(const char *s);
void vz_lines_at(cairo_t *cr, const char *s, double x, double y, double ax, double step);
double vz_label_w(cairo_t *cr, const vz_label *l, double size);
void vz_label_at(cairo_t *cr, const vz_label *l, double size, double x, double y, double ax, double ay);

/* Copies a formatted number, printing a leading '-' as a real minus sign. */
void vz_put_num(char *dst, size_t cap, const char *s);
/* Label for tick value v on an axis with tick step `step`. */
void vz_fmt_tick(vz_label *l, double v, double step);
/* Short general label ("%.3g"-like) for values with no step of their own. */
void vz_fmt_value(char *dst, size_t cap, double v);

/* ----------------------------------------------------------------- axes */

typedef struct {
    double lo, hi; /* data range shown */
    int log;
    double p0, p1; /* pixels of lo and hi */
} vz_axis;

double vz_ax_px(const vz_axis *a, double v);

typedef struct {
    int n, nminor;
    double v[VZ_MAXT];
    vz_label lab[VZ_MAXT];
    double minor[4 * VZ_MAXT];
} vz_ticks;

/* 1, 2 or 5 times a power of ten, the smallest such step >= raw. */
double vz_nice_step(double raw);
/* About `target` ticks at 1-2-5 steps over [lo, hi]. */
void vz_linear_ticks(vz_ticks *t, double lo, double hi, int target);
/* The most ticks whose labels fit along the axis (decades on log axes). */
void vz_fit_ticks(cairo_t *cr, vz_ticks *t, const vz_axis *a, int along_x, double size);
/* Data range widened by 5% on each side (matplotlib's margins). */
void vz_pad_range(vz_axis *a, double lo, double hi);

#endif
