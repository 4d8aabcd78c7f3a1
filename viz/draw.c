/* The drawing kit of viz/ (draw.h): colours, text, number labels, axis
 * ticks. */
#include "draw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FONT "DejaVu Sans"
#define MINUS "\xe2\x88\x92" /* U+2212, as matplotlib prints negatives */

/* Okabe-Ito (colour-blind safe) minus its yellow, plus an olive: eight hues
 * that stay distinct in the common colour-vision deficiencies and on white. */
const vz_rgb vz_palette[8] = {
    {0.000, 0.447, 0.698}, /* blue */
    {0.902, 0.624, 0.000}, /* orange */
    {0.000, 0.620, 0.451}, /* bluish green */
    {0.835, 0.369, 0.000}, /* vermillion */
    {0.800, 0.475, 0.655}, /* reddish purple */
    {0.337, 0.706, 0.914}, /* sky blue */
    {0.000, 0.000, 0.000}, /* black */
    {0.600, 0.600, 0.200}, /* olive */
};

/* matplotlib's viridis at 0, 0.1, ..., 1; linear interpolation between
 * these stays within a fraction of a step of the full table. */
const vz_rgb vz_viridis[11] = {
    {0x44 / 255.0, 0x01 / 255.0, 0x54 / 255.0}, {0x48 / 255.0, 0x24 / 255.0, 0x75 / 255.0},
    {0x41 / 255.0, 0x44 / 255.0, 0x87 / 255.0}, {0x35 / 255.0, 0x5f / 255.0, 0x8d / 255.0},
    {0x2a / 255.0, 0x78 / 255.0, 0x8e / 255.0}, {0x21 / 255.0, 0x91 / 255.0, 0x8c / 255.0},
    {0x22 / 255.0, 0xa8 / 255.0, 0x84 / 255.0}, {0x44 / 255.0, 0xbf / 255.0, 0x70 / 255.0},
    {0x7a / 255.0, 0xd1 / 255.0, 0x51 / 255.0}, {0xbd / 255.0, 0xdf / 255.0, 0x26 / 255.0},
    {0xfd / 255.0, 0xe7 / 255.0, 0x25 / 255.0},
};

void vz_set_rgb(cairo_t *cr, vz_rgb c)
{
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

void vz_set_grey(cairo_t *cr, double v)
{
    cairo_set_source_rgb(cr, v, v, v);
}

double vz_clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

vz_rgb vz_viridis_at(double t)
{
    t = vz_clampd(t, 0, 1) * 10;
    int i = t >= 10 ? 9 : (int)t;
    double f = t - i;
    vz_rgb a = vz_viridis[i], b = vz_viridis[i + 1];
    return (vz_rgb){a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

double vz_half(double v)
{
    return floor(v) + 0.5;
}

/* ------------------------------------------------------------------ text */

void vz_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double vz_text_w(cairo_t *cr, const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

/* Height of a digit in the current font: the ink that tick labels are
 * centred on (font ascent would leave numbers visibly low). */
double vz_digit_h(cairo_t *cr)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, "0", &te);
    return te.height;
}

/* Draws s with its anchor at (x, y): ax 0/0.5/1 = left/centre/right;
 * ay 0/0.5/1 = top/middle/baseline-bottom of the digit height. */
void vz_text_at(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    double h = vz_digit_h(cr);
    cairo_move_to(cr, x - ax * vz_text_w(cr, s), y + h * (1 - ay));
    cairo_show_text(cr, s);
}

/* Text rotated a quarter turn anticlockwise (reads bottom to top), anchored
 * like text_at in its own rotated frame. */
void vz_text_up(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, -M_PI / 2);
    vz_text_at(cr, s, 0, 0, ax, ay);
    cairo_restore(cr);
}

/* Calls fn for each '\n'-separated line of s (at most 511 bytes each). */
static void each_line(const char *s, void (*fn)(const char *line, int i, void *ud), void *ud)
{
    char line[512];
    int i = 0;
    for (const char *p = s; p && *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        fn(line, i++, ud);
        p += len + (p[len] == '\n');
    }
}

typedef struct {
    cairo_t *cr;
    double w, x, y, ax, step;
} lines_ctx;

static void widest(const char *line, int i, void *ud)
{
    (void)i;
    lines_ctx *c = ud;
    double w = vz_text_w(c->cr, line);
    if (w > c->w)
        c->w = w;
}

static void draw_line(const char *line, int i, void *ud)
{
    lines_ctx *c = ud;
    vz_text_at(c->cr, line, c->x, c->y + i * c->step, c->ax, 0);
}

double vz_lines_w(cairo_t *cr, const char *s)
{
    lines_ctx c = {.cr = cr};
    each_line(s, widest, &c);
    return c.w;
}

int vz_lines_n(const char *s)
{
    int n = 0;
    for (const char *p = s; p && *p; p += strcspn(p, "\n"), p += *p == '\n')
        n++;
    return n;
}

void vz_lines_at(cairo_t *cr, const char *s, double x, double y, double ax, double step)
{
    lines_ctx c = {.cr = cr, .x = x, .y = y, .ax = ax, .step = step};
    each_line(s, draw_line, &c);
}

double vz_label_w(cairo_t *cr, const vz_label *l, double size)
{
    vz_font(cr, size, 0);
    double w = vz_text_w(cr, l->base);
    if (l->sup[0]) {
        vz_font(cr, size * 0.7, 0);
        w += 1 + vz_text_w(cr, l->sup);
        vz_font(cr, size, 0);
    }
    return w;
}

void vz_label_at(cairo_t *cr, const vz_label *l, double size, double x, double y, double ax, double ay)
{
    double w = vz_label_w(cr, l, size), h = vz_digit_h(cr);
    double x0 = x - ax * w, base = y + h * (1 - ay);
    cairo_move_to(cr, x0, base);
    cairo_show_text(cr, l->base);
    if (!l->sup[0])
        return;
    double bw = vz_text_w(cr, l->base);
    vz_font(cr, size * 0.7, 0);
    cairo_move_to(cr, x0 + bw + 1, base - 0.4 * size);
    cairo_show_text(cr, l->sup);
    vz_font(cr, size, 0);
}

/* --------------------------------------------------------------- numbers */

/* Drops trailing zeros after a decimal point ("2.50" -> "2.5", "3.0" -> "3"). */
static void trim_zeros(char *s)
{
    char *dot = strchr(s, '.');
    if (!dot)
        return;
    char *end = s + strlen(s);
    while (end > dot + 1 && end[-1] == '0')
        *--end = '\0';
    if (end == dot + 1)
        *dot = '\0';
}

/* Copies a formatted number, printing a leading '-' as a real minus sign. */
void vz_put_num(char *dst, size_t cap, const char *s)
{
    size_t o = 0, n;
    if (s[0] == '-' && cap > sizeof MINUS) {
        memcpy(dst, MINUS, sizeof MINUS - 1);
        o = sizeof MINUS - 1;
        s++;
    }
    n = strlen(s);
    if (o + n >= cap)
        n = cap - o - 1; /* labels are short; never reached in practice */
    memcpy(dst + o, s, n);
    dst[o + n] = '\0';
}

/* Label for tick value v on an axis with tick step `step`: as many decimals
 * as the step needs, so that all labels of an axis agree; very large or
 * small magnitudes as "2.5e6". */
void vz_fmt_tick(vz_label *l, double v, double step)
{
    memset(l, 0, sizeof *l);
    if (fabs(v) < step * 1e-6)
        v = 0; /* 0.1 + 0.2 - 0.3 is not zero, but its label should be */
    double a = fabs(v);
    int sexp = (int)floor(log10(step) + 1e-9);
    char buf[40];
    if (a != 0 && (a >= 1e6 || a < 1e-4)) {
        int ex = (int)floor(log10(a) + 1e-9);
        int dec = (int)vz_clampd(ex - sexp, 0, 8);
        snprintf(buf, sizeof buf, "%.*f", dec, v / pow(10, ex));
        trim_zeros(buf);
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "e%d", ex);
    } else {
        snprintf(buf, sizeof buf, "%.*f", sexp < 0 ? -sexp : 0, v);
    }
    vz_put_num(l->base, sizeof l->base, buf);
}

/* Short general label ("%.3g"-like) for values with no step of their own. */
void vz_fmt_value(char *dst, size_t cap, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.3g", v);
    char *e = strchr(buf, 'e');
    if (e) { /* "1.5e-05" -> "1.5e-5" */
        int ex = atoi(e + 1);
        snprintf(e, sizeof buf - (size_t)(e - buf), "e%d", ex);
    }
    vz_put_num(dst, cap, buf);
}

/* Power of ten as a label: plain where short ("0.01" .. "1000"), else 10^k. */
static void fmt_decade(vz_label *l, int k, int plain)
{
    memset(l, 0, sizeof *l);
    if (plain) {
        snprintf(l->base, sizeof l->base, "%.*f", k < 0 ? -k : 0, pow(10, k));
        return;
    }
    snprintf(l->base, sizeof l->base, "10");
    char buf[12];
    snprintf(buf, sizeof buf, "%d", k);
    vz_put_num(l->sup, sizeof l->sup, buf);
}

/* ----------------------------------------------------------------- axes */

static double ax_u(const vz_axis *a, double v)
{
    return a->log ? log10(v) : v;
}

double vz_ax_px(const vz_axis *a, double v)
{
    double u0 = ax_u(a, a->lo), u1 = ax_u(a, a->hi);
    return a->p0 + (ax_u(a, v) - u0) / (u1 - u0) * (a->p1 - a->p0);
}

static void add_tick(vz_ticks *t, double v)
{
    if (t->n < VZ_MAXT)
        t->v[t->n++] = v;
}

static void add_minor(vz_ticks *t, double v)
{
    if (t->nminor < 4 * VZ_MAXT)
        t->minor[t->nminor++] = v;
}

/* 1, 2 or 5 times a power of ten, the smallest such step >= raw. */
double vz_nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10) * mag;
}

void vz_linear_ticks(vz_ticks *t, double lo, double hi, int target)
{
    memset(t, 0, sizeof *t);
    double step = vz_nice_step((hi - lo) / (target > 0 ? target : 1));
    for (double k = ceil(lo / step - 1e-9); k <= floor(hi / step + 1e-9) && t->n < VZ_MAXT; k++)
        add_tick(t, k * step);
    for (int i = 0; i < t->n; i++)
        vz_fmt_tick(&t->lab[i], t->v[i], step);
}

/* Labels fit when neighbours keep a gap: along x the half widths plus a
 * margin, along y about two text heights. */
static int ticks_fit(cairo_t *cr, const vz_ticks *t, const vz_axis *a, int along_x, double size)
{
    vz_font(cr, size, 0);
    double h = vz_digit_h(cr);
    for (int i = 1; i < t->n; i++) {
        double d = fabs(vz_ax_px(a, t->v[i]) - vz_ax_px(a, t->v[i - 1]));
        double need = along_x ? (vz_label_w(cr, &t->lab[i], size) + vz_label_w(cr, &t->lab[i - 1], size)) / 2 + size
                              : 2.2 * h;
        if (d < need)
            return 0;
    }
    return 1;
}

/* Most ticks that fit, starting from about one per 100 px (x) or 60 px (y). */
static void fit_linear(cairo_t *cr, vz_ticks *t, const vz_axis *a, int along_x, double size)
{
    double len = fabs(a->p1 - a->p0), per = along_x ? 100 : 60;
    int target = (int)vz_clampd(round(len / (per * size / 12)), 2, 10);
    for (; target >= 1; target--) {
        vz_linear_ticks(t, a->lo, a->hi, target);
        if (ticks_fit(cr, t, a, along_x, size))
            return;
    }
}

/* Log axis spanning at least one decade boundary pair: ticks at decades
 * (every `stride`-th when they crowd), minor ticks at 2..9 times. */
static int decade_ticks(cairo_t *cr, vz_ticks *t, const vz_axis *a, int along_x, double size)
{
    double u0 = log10(a->lo), u1 = log10(a->hi);
    int k0 = (int)ceil(u0 - 1e-9), k1 = (int)floor(u1 + 1e-9);
    if (k1 - k0 < 1)
        return 0;
    static const int strides[] = {1, 2, 3, 4, 5, 10, 20, 50, 100};
    int plain = k0 >= -2 && k1 <= 3;
    for (size_t si = 0; si < sizeof strides / sizeof *strides; si++) {
        int st = strides[si];
        memset(t, 0, sizeof *t);
        for (int k = k0; k <= k1; k++) {
            if (k % st == 0) {
                fmt_decade(&t->lab[t->n], k, plain);
                add_tick(t, pow(10, k));
            } else {
                add_minor(t, pow(10, k));
            }
        }
        if (ticks_fit(cr, t, a, along_x, size) || t->n <= 2)
            break;
    }
    double px_per_decade = fabs(a->p1 - a->p0) / (u1 - u0);
    if (t->nminor == 0 && px_per_decade >= 25)
        for (int k = k0 - 1; k <= k1; k++)
            for (int m = 2; m <= 9; m++) {
                double v = m * pow(10, k);
                if (v >= a->lo && v <= a->hi)
                    add_minor(t, v);
            }
    return 1;
}

/* Log axis within about one decade: mantissa ticks m*10^k for the given
 * set of m, each labelled with its own precision. */
static void mantissa_ticks(vz_ticks *t, const vz_axis *a, const int *ms, int nm)
{
    memset(t, 0, sizeof *t);
    for (int k = (int)floor(log10(a->lo)) - 1; k <= (int)ceil(log10(a->hi)); k++)
        for (int i = 0; i < nm; i++) {
            double v = ms[i] * pow(10, k);
            if (v >= a->lo * (1 - 1e-12) && v <= a->hi * (1 + 1e-12) && t->n < VZ_MAXT) {
                vz_fmt_tick(&t->lab[t->n], v, pow(10, k));
                add_tick(t, v);
            }
        }
}

static void fit_log(cairo_t *cr, vz_ticks *t, const vz_axis *a, int along_x, double size)
{
    if (decade_ticks(cr, t, a, along_x, size))
        return;
    /* Under two decades: 1..9 times a power of ten when they fit, else
     * 1-2-5; where those give too few ticks (a fraction of a decade) plain
     * linear steps, still placed on the log scale. */
    static const int m19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, m125[] = {1, 2, 5};
    mantissa_ticks(t, a, m19, 9);
    if (t->n >= 4 && ticks_fit(cr, t, a, along_x, size))
        return;
    mantissa_ticks(t, a, m125, 3);
    int n125 = ticks_fit(cr, t, a, along_x, size) ? t->n : 0;
    vz_ticks lin;
    fit_linear(cr, &lin, a, along_x, size);
    if (lin.n > n125)
        *t = lin;
    else
        mantissa_ticks(t, a, m125, 3);
}

void vz_fit_ticks(cairo_t *cr, vz_ticks *t, const vz_axis *a, int along_x, double size)
{
    if (a->log)
        fit_log(cr, t, a, along_x, size);
    else
        fit_linear(cr, t, a, along_x, size);
}

/* Data range widened by 5% on each side (matplotlib's margins), in log
 * space for log axes; a single value gets a range around it. */
void vz_pad_range(vz_axis *a, double lo, double hi)
{
    double u0 = a->log ? log10(lo) : lo, u1 = a->log ? log10(hi) : hi;
    double span = u1 - u0;
    if (span <= fabs(u0) * 1e-12 || span == 0) {
        double d = a->log ? 0.5 : (u0 != 0 ? fabs(u0) * 0.05 : 0.5);
        u0 -= d;
        u1 += d;
    } else {
        u0 -= 0.05 * span;
        u1 += 0.05 * span;
    }
    a->lo = a->log ? pow(10, u0) : u0;
    a->hi = a->log ? pow(10, u1) : u1;
}

