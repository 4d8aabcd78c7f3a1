/* PNG figures with cairo, in the look of a default matplotlib figure: white
 * canvas, framed axes, outward ticks with 1-2-5 steps (decades on log
 * axes), light grid, a legend placed where it hides the fewest data, and
 * a viridis heatmap with a colour bar.
 *
 * Text goes through cairo's toy font API with DejaVu Sans (fontconfig falls
 * back to any sans face if it is missing).  Output is written to
 * PATH.tmp.<pid> and renamed, so a figure on disk is always complete. */
#include "plot.h"

#include "../formats/atomic.h"

#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FONT "DejaVu Sans"
#define MAXT 48   /* ticks per axis: far more than ever fit */
#define MINUS "\xe2\x88\x92" /* U+2212, as matplotlib prints negatives */

typedef struct {
    double r, g, b;
} rgb;

/* Okabe-Ito (colour-blind safe) minus its yellow, plus an olive: eight hues
 * that stay distinct in the common colour-vision deficiencies and on white. */
static const rgb palette[8] = {
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
static const rgb viridis[11] = {
    {0x44 / 255.0, 0x01 / 255.0, 0x54 / 255.0}, {0x48 / 255.0, 0x24 / 255.0, 0x75 / 255.0},
    {0x41 / 255.0, 0x44 / 255.0, 0x87 / 255.0}, {0x35 / 255.0, 0x5f / 255.0, 0x8d / 255.0},
    {0x2a / 255.0, 0x78 / 255.0, 0x8e / 255.0}, {0x21 / 255.0, 0x91 / 255.0, 0x8c / 255.0},
    {0x22 / 255.0, 0xa8 / 255.0, 0x84 / 255.0}, {0x44 / 255.0, 0xbf / 255.0, 0x70 / 255.0},
    {0x7a / 255.0, 0xd1 / 255.0, 0x51 / 255.0}, {0xbd / 255.0, 0xdf / 255.0, 0x26 / 255.0},
    {0xfd / 255.0, 0xe7 / 255.0, 0x25 / 255.0},
};

static void set_rgb(cairo_t *cr, rgb c)
{
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

static void set_grey(cairo_t *cr, double v)
{
    cairo_set_source_rgb(cr, v, v, v);
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static rgb viridis_at(double t)
{
    t = clampd(t, 0, 1) * 10;
    int i = t >= 10 ? 9 : (int)t;
    double f = t - i;
    rgb a = viridis[i], b = viridis[i + 1];
    return (rgb){a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

/* ------------------------------------------------------------------ text */

/* A tick label: plain text, or base with a superscript (10 and exponent). */
typedef struct {
    char base[40];
    char sup[12];
} label;

static void font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double text_w(cairo_t *cr, const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

/* Height of a digit in the current font: the ink that tick labels are
 * centred on (font ascent would leave numbers visibly low). */
static double digit_h(cairo_t *cr)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, "0", &te);
    return te.height;
}

/* Draws s with its anchor at (x, y): ax 0/0.5/1 = left/centre/right;
 * ay 0/0.5/1 = top/middle/baseline-bottom of the digit height. */
static void text_at(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    double h = digit_h(cr);
    cairo_move_to(cr, x - ax * text_w(cr, s), y + h * (1 - ay));
    cairo_show_text(cr, s);
}

/* Text rotated a quarter turn anticlockwise (reads bottom to top), anchored
 * like text_at in its own rotated frame. */
static void text_up(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, s, 0, 0, ax, ay);
    cairo_restore(cr);
}

static double label_w(cairo_t *cr, const label *l, double size)
{
    font(cr, size, 0);
    double w = text_w(cr, l->base);
    if (l->sup[0]) {
        font(cr, size * 0.7, 0);
        w += 1 + text_w(cr, l->sup);
        font(cr, size, 0);
    }
    return w;
}

static void label_at(cairo_t *cr, const label *l, double size, double x, double y, double ax, double ay)
{
    double w = label_w(cr, l, size), h = digit_h(cr);
    double x0 = x - ax * w, base = y + h * (1 - ay);
    cairo_move_to(cr, x0, base);
    cairo_show_text(cr, l->base);
    if (!l->sup[0])
        return;
    double bw = text_w(cr, l->base);
    font(cr, size * 0.7, 0);
    cairo_move_to(cr, x0 + bw + 1, base - 0.4 * size);
    cairo_show_text(cr, l->sup);
    font(cr, size, 0);
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
static void put_num(char *dst, size_t cap, const char *s)
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
static void fmt_tick(label *l, double v, double step)
{
    memset(l, 0, sizeof *l);
    if (fabs(v) < step * 1e-6)
        v = 0; /* 0.1 + 0.2 - 0.3 is not zero, but its label should be */
    double a = fabs(v);
    int sexp = (int)floor(log10(step) + 1e-9);
    char buf[40];
    if (a != 0 && (a >= 1e6 || a < 1e-4)) {
        int ex = (int)floor(log10(a) + 1e-9);
        int dec = (int)clampd(ex - sexp, 0, 8);
        snprintf(buf, sizeof buf, "%.*f", dec, v / pow(10, ex));
        trim_zeros(buf);
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "e%d", ex);
    } else {
        snprintf(buf, sizeof buf, "%.*f", sexp < 0 ? -sexp : 0, v);
    }
    put_num(l->base, sizeof l->base, buf);
}

/* Short general label ("%.3g"-like) for values with no step of their own. */
static void fmt_value(char *dst, size_t cap, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.3g", v);
    char *e = strchr(buf, 'e');
    if (e) { /* "1.5e-05" -> "1.5e-5" */
        int ex = atoi(e + 1);
        snprintf(e, sizeof buf - (size_t)(e - buf), "e%d", ex);
    }
    put_num(dst, cap, buf);
}

/* Power of ten as a label: plain where short ("0.01" .. "1000"), else 10^k. */
static void fmt_decade(label *l, int k, int plain)
{
    memset(l, 0, sizeof *l);
    if (plain) {
        snprintf(l->base, sizeof l->base, "%.*f", k < 0 ? -k : 0, pow(10, k));
        return;
    }
    snprintf(l->base, sizeof l->base, "10");
    char buf[12];
    snprintf(buf, sizeof buf, "%d", k);
    put_num(l->sup, sizeof l->sup, buf);
}

/* ----------------------------------------------------------------- axes */

typedef struct {
    double lo, hi; /* data range shown */
    int log;
    double p0, p1; /* pixels of lo and hi */
} axis;

static double ax_u(const axis *a, double v)
{
    return a->log ? log10(v) : v;
}

static double ax_px(const axis *a, double v)
{
    double u0 = ax_u(a, a->lo), u1 = ax_u(a, a->hi);
    return a->p0 + (ax_u(a, v) - u0) / (u1 - u0) * (a->p1 - a->p0);
}

typedef struct {
    int n, nminor;
    double v[MAXT];
    label lab[MAXT];
    double minor[4 * MAXT];
} ticks;

static void add_tick(ticks *t, double v)
{
    if (t->n < MAXT)
        t->v[t->n++] = v;
}

static void add_minor(ticks *t, double v)
{
    if (t->nminor < 4 * MAXT)
        t->minor[t->nminor++] = v;
}

/* 1, 2 or 5 times a power of ten, the smallest such step >= raw. */
static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10) * mag;
}

static void linear_ticks(ticks *t, double lo, double hi, int target)
{
    memset(t, 0, sizeof *t);
    double step = nice_step((hi - lo) / (target > 0 ? target : 1));
    for (double k = ceil(lo / step - 1e-9); k <= floor(hi / step + 1e-9) && t->n < MAXT; k++)
        add_tick(t, k * step);
    for (int i = 0; i < t->n; i++)
        fmt_tick(&t->lab[i], t->v[i], step);
}

/* Labels fit when neighbours keep a gap: along x the half widths plus a
 * margin, along y about two text heights. */
static int ticks_fit(cairo_t *cr, const ticks *t, const axis *a, int along_x, double size)
{
    font(cr, size, 0);
    double h = digit_h(cr);
    for (int i = 1; i < t->n; i++) {
        double d = fabs(ax_px(a, t->v[i]) - ax_px(a, t->v[i - 1]));
        double need = along_x ? (label_w(cr, &t->lab[i], size) + label_w(cr, &t->lab[i - 1], size)) / 2 + size
                              : 2.2 * h;
        if (d < need)
            return 0;
    }
    return 1;
}

/* Most ticks that fit, starting from about one per 100 px (x) or 60 px (y). */
static void fit_linear(cairo_t *cr, ticks *t, const axis *a, int along_x, double size)
{
    double len = fabs(a->p1 - a->p0), per = along_x ? 100 : 60;
    int target = (int)clampd(round(len / (per * size / 12)), 2, 10);
    for (; target >= 1; target--) {
        linear_ticks(t, a->lo, a->hi, target);
        if (ticks_fit(cr, t, a, along_x, size))
            return;
    }
}

/* Log axis spanning at least one decade boundary pair: ticks at decades
 * (every `stride`-th when they crowd), minor ticks at 2..9 times. */
static int decade_ticks(cairo_t *cr, ticks *t, const axis *a, int along_x, double size)
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
static void mantissa_ticks(ticks *t, const axis *a, const int *ms, int nm)
{
    memset(t, 0, sizeof *t);
    for (int k = (int)floor(log10(a->lo)) - 1; k <= (int)ceil(log10(a->hi)); k++)
        for (int i = 0; i < nm; i++) {
            double v = ms[i] * pow(10, k);
            if (v >= a->lo * (1 - 1e-12) && v <= a->hi * (1 + 1e-12) && t->n < MAXT) {
                fmt_tick(&t->lab[t->n], v, pow(10, k));
                add_tick(t, v);
            }
        }
}

static void fit_log(cairo_t *cr, ticks *t, const axis *a, int along_x, double size)
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
    ticks lin;
    fit_linear(cr, &lin, a, along_x, size);
    if (lin.n > n125)
        *t = lin;
    else
        mantissa_ticks(t, a, m125, 3);
}

static void fit_ticks(cairo_t *cr, ticks *t, const axis *a, int along_x, double size)
{
    if (a->log)
        fit_log(cr, t, a, along_x, size);
    else
        fit_linear(cr, t, a, along_x, size);
}

/* Data range widened by 5% on each side (matplotlib's margins), in log
 * space for log axes; a single value gets a range around it. */
static void pad_range(axis *a, double lo, double hi)
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

/* ------------------------------------------------------------ line plots */

typedef struct {
    double W, H, s;                           /* canvas and scale (1 at 900 x 560) */
    double fs_title, fs_label, fs_tick, fs_legend, tick_len, pad, lw;
    double x0, x1, y0, y1;                    /* axes box: left, right, top, bottom */
    axis ax, ay;
    ticks tx, ty;
} fig;

static int point_ok(const ar_plot_opts *o, double x, double y)
{
    return isfinite(x) && isfinite(y) && (!o->logx || x > 0) && (!o->logy || y > 0);
}

/* Data limits over the points that can be drawn, or an error saying why
 * none can. */
static int data_limits(const ar_plot_opts *o, const ar_series *s, int ns, double lim[4], const char *path,
                       ar_err *e)
{
    long finite = 0, ok = 0;
    lim[0] = lim[2] = INFINITY;
    lim[1] = lim[3] = -INFINITY;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            finite += isfinite(x) && isfinite(y);
            if (!point_ok(o, x, y))
                continue;
            ok++;
            lim[0] = fmin(lim[0], x);
            lim[1] = fmax(lim[1], x);
            lim[2] = fmin(lim[2], y);
            lim[3] = fmax(lim[3], y);
        }
    if (finite == 0)
        return ar_fail(e, "cannot plot '%s': no finite points to plot", path);
    if (ok == 0)
        return ar_fail(e, "cannot plot '%s': no positive values to plot on the log %s axis", path,
                       o->logx && o->logy ? "x or y" : o->logx ? "x" : "y");
    return 0;
}

static void fig_style(fig *f, const ar_plot_opts *o)
{
    f->W = o->width > 0 ? o->width : 900;
    f->H = o->height > 0 ? o->height : 560;
    /* Text shrinks more slowly than the canvas, so small figures stay legible. */
    f->s = clampd(sqrt(fmin(f->W / 900, f->H / 560)), 0.75, 3);
    f->fs_title = 16 * f->s;
    f->fs_label = 14 * f->s;
    f->fs_tick = 12 * f->s;
    f->fs_legend = 12 * f->s;
    f->tick_len = 5 * f->s;
    f->pad = 12 * f->s;
    f->lw = 2 * f->s;
}

static double max_label_w(cairo_t *cr, const ticks *t, double size)
{
    double w = 0;
    for (int i = 0; i < t->n; i++)
        w = fmax(w, label_w(cr, &t->lab[i], size));
    return w;
}

/* Margins follow the text actually drawn: the y tick labels set the left
 * margin, the last x tick label the right one. */
static void fig_layout(cairo_t *cr, fig *f, const ar_plot_opts *o)
{
    int title = o->title && *o->title, xl = o->xlabel && *o->xlabel, yl = o->ylabel && *o->ylabel;
    f->y0 = f->pad + (title ? f->fs_title * 1.2 + 8 * f->s : 4 * f->s);
    f->y1 = f->H - f->pad - (xl ? f->fs_label * 1.3 + 6 * f->s : 0) - f->fs_tick * 1.2 - f->tick_len -
            6 * f->s;
    f->ay.p0 = f->y1;
    f->ay.p1 = f->y0;
    fit_ticks(cr, &f->ty, &f->ay, 0, f->fs_tick);
    f->x0 = f->pad + (yl ? f->fs_label * 1.3 + 6 * f->s : 0) + max_label_w(cr, &f->ty, f->fs_tick) +
            f->tick_len + 6 * f->s;
    f->x1 = f->W - 2 * f->pad;
    for (int pass = 0; pass < 2; pass++) {
        f->ax.p0 = f->x0;
        f->ax.p1 = f->x1;
        fit_ticks(cr, &f->tx, &f->ax, 1, f->fs_tick);
        double lastw = 0;
        for (int i = 0; i < f->tx.n; i++)
            if (ax_px(&f->ax, f->tx.v[i]) + label_w(cr, &f->tx.lab[i], f->fs_tick) / 2 > f->W - f->pad)
                lastw = fmax(lastw, label_w(cr, &f->tx.lab[i], f->fs_tick));
        if (lastw == 0)
            break;
        f->x1 = f->W - f->pad - lastw / 2 - 2;
    }
}

/* Crisp 1 px lines sit on half pixels. */
static double half(double v)
{
    return floor(v) + 0.5;
}

static void draw_grid(cairo_t *cr, const fig *f)
{
    cairo_set_line_width(cr, 1);
    set_grey(cr, 0.88);
    for (int i = 0; i < f->tx.n; i++) {
        double x = half(ax_px(&f->ax, f->tx.v[i]));
        cairo_move_to(cr, x, f->y0);
        cairo_line_to(cr, x, f->y1);
    }
    for (int i = 0; i < f->ty.n; i++) {
        double y = half(ax_px(&f->ay, f->ty.v[i]));
        cairo_move_to(cr, f->x0, y);
        cairo_line_to(cr, f->x1, y);
    }
    cairo_stroke(cr);
}

static void draw_frame_ticks(cairo_t *cr, const fig *f)
{
    set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, half(f->x0), half(f->y0), floor(f->x1) - floor(f->x0), floor(f->y1) - floor(f->y0));
    cairo_stroke(cr);
    for (int i = 0; i < f->tx.n; i++) {
        double x = half(ax_px(&f->ax, f->tx.v[i]));
        cairo_move_to(cr, x, half(f->y1));
        cairo_line_to(cr, x, half(f->y1) + f->tick_len);
    }
    for (int i = 0; i < f->tx.nminor; i++) {
        double x = half(ax_px(&f->ax, f->tx.minor[i]));
        cairo_move_to(cr, x, half(f->y1));
        cairo_line_to(cr, x, half(f->y1) + f->tick_len * 0.6);
    }
    for (int i = 0; i < f->ty.n; i++) {
        double y = half(ax_px(&f->ay, f->ty.v[i]));
        cairo_move_to(cr, half(f->x0), y);
        cairo_line_to(cr, half(f->x0) - f->tick_len, y);
    }
    for (int i = 0; i < f->ty.nminor; i++) {
        double y = half(ax_px(&f->ay, f->ty.minor[i]));
        cairo_move_to(cr, half(f->x0), y);
        cairo_line_to(cr, half(f->x0) - f->tick_len * 0.6, y);
    }
    cairo_stroke(cr);
    for (int i = 0; i < f->tx.n; i++)
        label_at(cr, &f->tx.lab[i], f->fs_tick, ax_px(&f->ax, f->tx.v[i]), f->y1 + f->tick_len + 5 * f->s, 0.5, 0);
    for (int i = 0; i < f->ty.n; i++)
        label_at(cr, &f->ty.lab[i], f->fs_tick, f->x0 - f->tick_len - 5 * f->s, ax_px(&f->ay, f->ty.v[i]), 1, 0.5);
}

static void draw_titles(cairo_t *cr, const fig *f, const ar_plot_opts *o)
{
    set_grey(cr, 0.1);
    if (o->xlabel && *o->xlabel) {
        font(cr, f->fs_label, 0);
        text_at(cr, o->xlabel, (f->x0 + f->x1) / 2, f->H - f->pad - 0.25 * f->fs_label, 0.5, 1);
    }
    if (o->ylabel && *o->ylabel) {
        font(cr, f->fs_label, 0);
        text_up(cr, o->ylabel, f->pad + 0.45 * f->fs_label, (f->y0 + f->y1) / 2, 0.5, 0.5);
    }
    if (o->title && *o->title) {
        font(cr, f->fs_title, 1);
        double w = text_w(cr, o->title), cx = (f->x0 + f->x1) / 2;
        if (cx - w / 2 < f->pad || cx + w / 2 > f->W - f->pad)
            cx = f->W / 2; /* too wide for the axes: centre on the canvas */
        text_at(cr, o->title, cx, f->pad + 0.1 * f->fs_title, 0.5, 0);
    }
}

/* Series k: palette colour; past the eighth, the colours repeat dashed so
 * that every series stays distinguishable. */
static void series_pen(cairo_t *cr, int k, double lw)
{
    set_rgb(cr, palette[k % 8]);
    cairo_set_line_width(cr, lw);
    double dash[2] = {3 * lw, 1.5 * lw};
    cairo_set_dash(cr, dash, k >= 8 ? 2 : 0, 0);
}

static void marker(cairo_t *cr, double x, double y, double r)
{
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, r, 0, 2 * M_PI);
    cairo_fill(cr);
}

/* A series' colour: its own index, or the one it asks for. */
static int series_color(const ar_series *s, int k)
{
    return s->color > 0 ? s->color - 1 : k;
}

/* Undrawable points (NaN, or <= 0 on a log axis) break the line, as in
 * matplotlib; a point with no drawable neighbour is shown as a dot. */

static void draw_series(cairo_t *cr, const fig *f, const ar_plot_opts *o, const ar_series *s, int k)
{
    series_pen(cr, series_color(s, k), f->lw);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    int run = 0;
    for (int i = 0; i < s->n && !s->no_line; i++) {
        if (!point_ok(o, s->x[i], s->y[i])) {
            run = 0;
            continue;
        }
        double px = ax_px(&f->ax, s->x[i]), py = ax_px(&f->ay, s->y[i]);
        if (run++ == 0)
            cairo_move_to(cr, px, py);
        else
            cairo_line_to(cr, px, py);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    for (int i = 0; i < s->n; i++) {
        if (!point_ok(o, s->x[i], s->y[i]))
            continue;
        int alone = (i == 0 || !point_ok(o, s->x[i - 1], s->y[i - 1])) &&
                    (i == s->n - 1 || !point_ok(o, s->x[i + 1], s->y[i + 1]));
        if (s->markers || alone || s->no_line)
            marker(cr, ax_px(&f->ax, s->x[i]), ax_px(&f->ay, s->y[i]), s->markers ? 3.5 * f->s : f->lw);
    }
}

/* --------------------------------------------------------------- legend */

typedef struct {
    double x, y, w, h;
} box;

static int in_box(const box *b, double x, double y)
{
    return x >= b->x && x <= b->x + b->w && y >= b->y && y <= b->y + b->h;
}

/* How much data a legend at b would hide: drawn points plus samples every
 * few pixels along the lines between them. */
static long covered(const fig *f, const ar_plot_opts *o, const ar_series *s, int ns, const box *b)
{
    long hits = 0;
    for (int k = 0; k < ns; k++) {
        double lx = 0, ly = 0;
        int prev = 0;
        for (int i = 0; i < s[k].n; i++) {
            if (!point_ok(o, s[k].x[i], s[k].y[i])) {
                prev = 0;
                continue;
            }
            double px = ax_px(&f->ax, s[k].x[i]), py = ax_px(&f->ay, s[k].y[i]);
            hits += in_box(b, px, py);
            if (prev && !s[k].no_line) {
                int m = (int)fmin(hypot(px - lx, py - ly) / 4, 200);
                for (int j = 1; j < m; j++)
                    hits += in_box(b, lx + (px - lx) * j / m, ly + (py - ly) * j / m);
            }
            lx = px;
            ly = py;
            prev = 1;
        }
    }
    return hits;
}

static int overlap(const box *a, const box *b)
{
    return a->w > 0 && b->w > 0 && a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h &&
           b->y < a->y + a->h;
}

/* matplotlib's "best": the first of its candidate places that hides the
 * least data; avoid is a box already drawn (w = 0: none) that this one must
 * not cover. */
static box place_box(const fig *f, const ar_plot_opts *o, const ar_series *s, int ns, double w, double h,
                     const box *avoid)
{
    double in = 10 * f->s, l = f->x0 + in, r = f->x1 - in - w, t = f->y0 + in, btm = f->y1 - in - h;
    double cx = (f->x0 + f->x1 - w) / 2, cy = (f->y0 + f->y1 - h) / 2;
    const double spots[9][2] = {{r, t}, {l, t}, {l, btm}, {r, btm}, {r, cy}, {l, cy}, {cx, btm}, {cx, t}, {cx, cy}};
    box best = {spots[0][0], spots[0][1], w, h};
    long least = -1;
    for (int i = 0; i < 9; i++) {
        box b = {spots[i][0], spots[i][1], w, h};
        if (avoid && overlap(&b, avoid))
            continue;
        long c = covered(f, o, s, ns, &b);
        if (least < 0 || c < least) {
            least = c;
            best = b;
        }
    }
    return best;
}

static void rounded(cairo_t *cr, const box *b, double r)
{
    cairo_new_sub_path(cr);
    cairo_arc(cr, b->x + b->w - r, b->y + r, r, -M_PI / 2, 0);
    cairo_arc(cr, b->x + b->w - r, b->y + b->h - r, r, 0, M_PI / 2);
    cairo_arc(cr, b->x + r, b->y + b->h - r, r, M_PI / 2, M_PI);
    cairo_arc(cr, b->x + r, b->y + r, r, M_PI, 1.5 * M_PI);
    cairo_close_path(cr);
}

static box place_legend(const fig *f, const ar_plot_opts *o, const ar_series *s, int ns, double w, double h)
{
    return place_box(f, o, s, ns, w, h, NULL);
}

/* Returns the legend's box (w = 0 when there is no legend). */
static box draw_legend(cairo_t *cr, const fig *f, const ar_plot_opts *o, const ar_series *s, int ns)
{
    int n = 0;
    double tw = 0, sample = 28 * f->s, pad = 8 * f->s, row = f->fs_legend * 1.55;
    font(cr, f->fs_legend, 0);
    for (int k = 0; k < ns; k++)
        if (s[k].label) {
            n++;
            tw = fmax(tw, text_w(cr, s[k].label));
        }
    if (n == 0)
        return (box){0, 0, 0, 0};
    box b = place_legend(f, o, s, ns, 2 * pad + sample + pad + tw, 2 * pad + n * row - (row - f->fs_legend));
    rounded(cr, &b, 4 * f->s);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    set_grey(cr, 0.8);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    double y = b.y + pad + f->fs_legend / 2;
    for (int k = 0; k < ns; k++) {
        if (!s[k].label)
            continue;
        series_pen(cr, series_color(&s[k], k), f->lw);
        if (!s[k].no_line) {
            cairo_move_to(cr, b.x + pad, y);
            cairo_line_to(cr, b.x + pad + sample, y);
            cairo_stroke(cr);
        }
        cairo_set_dash(cr, NULL, 0, 0);
        if (s[k].markers || s[k].no_line)
            marker(cr, b.x + pad + sample / 2, y, s[k].markers ? 3.5 * f->s : f->lw);
        set_grey(cr, 0.1);
        font(cr, f->fs_legend, 0);
        text_at(cr, s[k].label, b.x + 2 * pad + sample, y, 0, 0.5);
        y += row;
    }
    return b;
}

/* The note: its lines in a box like the legend's, where it hides the
 * fewest data without covering the legend. */
static void draw_note(cairo_t *cr, const fig *f, const ar_plot_opts *o, const ar_series *s, int ns,
                      const box *legend)
{
    if (!o->note || !*o->note)
        return;
    double pad = 8 * f->s, row = f->fs_legend * 1.55, tw = 0;
    int n = 0;
    char line[512];
    font(cr, f->fs_legend, 0);
    for (const char *p = o->note; *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        tw = fmax(tw, text_w(cr, line));
        n++;
        p += len + (p[len] == '\n');
    }
    box b = place_box(f, o, s, ns, 2 * pad + tw, 2 * pad + n * row - (row - f->fs_legend), legend);
    rounded(cr, &b, 4 * f->s);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    set_grey(cr, 0.8);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    set_grey(cr, 0.1);
    double y = b.y + pad + f->fs_legend / 2;
    for (const char *p = o->note; *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        text_at(cr, line, b.x + pad, y, 0, 0.5);
        y += row;
        p += len + (p[len] == '\n');
    }
}

/* --------------------------------------------------------------- output */

static cairo_status_t write_cb(void *closure, const unsigned char *data, unsigned int len)
{
    return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static int fill_png(FILE *fp, void *ud)
{
    if (cairo_surface_write_to_png_stream(ud, write_cb, fp) == CAIRO_STATUS_SUCCESS)
        return 0;
    if (!errno)
        errno = EIO;
    return -1;
}

/* Atomic: readers never see half a figure, and a failure leaves no stray
 * temporary file. */
static int save_png(cairo_surface_t *sf, const char *path, ar_err *e)
{
    return ar_write_atomic(path, fill_png, sf, e);
}

/* Checks the drawing went through, then writes the PNG; frees both. */
static int finish(cairo_surface_t *sf, cairo_t *cr, const char *path, ar_err *e)
{
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    int rc = st == CAIRO_STATUS_SUCCESS
                 ? save_png(sf, path, e)
                 : ar_fail(e, "cannot draw '%s': %s", path, cairo_status_to_string(st));
    cairo_surface_destroy(sf);
    return rc;
}

static int new_canvas(int w, int h, cairo_surface_t **sf, cairo_t **cr, const char *path, ar_err *e)
{
    if (w > 20000 || h > 20000)
        return ar_fail(e, "cannot plot '%s': %d x %d pixels is too large", path, w, h);
    *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    *cr = cairo_create(*sf);
    if (cairo_status(*cr) != CAIRO_STATUS_SUCCESS) {
        cairo_status_t st = cairo_status(*cr);
        cairo_destroy(*cr);
        cairo_surface_destroy(*sf);
        return ar_fail(e, "cannot plot '%s': %s", path, cairo_status_to_string(st));
    }
    cairo_set_source_rgb(*cr, 1, 1, 1);
    cairo_paint(*cr);
    return 0;
}

int ar_plot_lines(const char *path, const ar_plot_opts *o, const ar_series *s, int ns, ar_err *e)
{
    double lim[4];
    if (data_limits(o, s, ns, lim, path, e) < 0)
        return -1;
    fig *f = calloc(1, sizeof *f);
    if (!f)
        return ar_fail(e, "cannot plot '%s': out of memory", path);
    fig_style(f, o);
    f->ax.log = o->logx;
    f->ay.log = o->logy;
    pad_range(&f->ax, lim[0], lim[1]);
    pad_range(&f->ay, lim[2], lim[3]);
    cairo_surface_t *sf;
    cairo_t *cr;
    if (new_canvas((int)f->W, (int)f->H, &sf, &cr, path, e) < 0) {
        free(f);
        return -1;
    }
    fig_layout(cr, f, o);
    draw_grid(cr, f);
    cairo_save(cr);
    cairo_rectangle(cr, f->x0, f->y0, f->x1 - f->x0, f->y1 - f->y0);
    cairo_clip(cr);
    for (int k = 0; k < ns; k++)
        draw_series(cr, f, o, &s[k], k);
    cairo_restore(cr);
    draw_frame_ticks(cr, f);
    draw_titles(cr, f, o);
    box lb = draw_legend(cr, f, o, s, ns);
    draw_note(cr, f, o, s, ns, &lb);
    free(f);
    return finish(sf, cr, path, e);
}

/* -------------------------------------------------------------- heatmap */

typedef struct {
    const double *m;
    int rows, cols;
    const char *const *rl, *const *cl;
    double vmin, vmax;
    double fs_title, fs_label, fs_tick, pad, fh;
    double cw, ch, hx, hy, cbx, cby, cbw, cbh, W, H;
    int rstride, cstride, crot; /* label every rstride-th row / cstride-th column; crot: columns vertical */
} heat;

static const char *axis_text(const char *const *labels, int i, char *buf, size_t cap)
{
    if (labels && labels[i])
        return labels[i];
    snprintf(buf, cap, "%d", i);
    return buf;
}

/* Smallest of 1, 2, 5, 10, 20, ... that is >= k: index labels then fall on
 * round numbers. */
static int nice_int(int k)
{
    return k <= 1 ? 1 : (int)nice_step(k);
}

static double labels_w(cairo_t *cr, const char *const *labels, int n, int stride)
{
    char buf[32];
    double w = 0;
    for (int i = 0; i < n; i += stride)
        w = fmax(w, text_w(cr, axis_text(labels, i, buf, sizeof buf)));
    return w;
}

static int value_range(heat *h, const char *path, ar_err *e)
{
    h->vmin = INFINITY;
    h->vmax = -INFINITY;
    for (size_t i = 0; i < (size_t)h->rows * h->cols; i++)
        if (isfinite(h->m[i])) {
            h->vmin = fmin(h->vmin, h->m[i]);
            h->vmax = fmax(h->vmax, h->m[i]);
        }
    if (!isfinite(h->vmin))
        return ar_fail(e, "cannot plot '%s': no finite values to plot", path);
    return 0;
}

/* Label strides: rows need a text height each; columns go vertical when
 * their (named) labels are wider than a cell, index labels thin out. */
static void heat_strides(cairo_t *cr, heat *h)
{
    int need_r = (int)ceil(h->fh * 1.8 / h->ch);
    h->rstride = h->rl ? need_r : nice_int(need_r);
    double cw = labels_w(cr, h->cl, h->cols, 1);
    h->crot = 0;
    h->cstride = 1;
    if (cw + 6 <= h->cw)
        return;
    if (h->cl) {
        h->crot = 1;
        h->cstride = (int)ceil(h->fh * 1.8 / h->cw);
    } else {
        h->cstride = nice_int((int)ceil((cw + 6) / h->cw));
    }
}

static double cbar_label_w(cairo_t *cr, const heat *h)
{
    char a[40], b[40];
    fmt_value(a, sizeof a, h->vmin);
    fmt_value(b, sizeof b, h->vmax);
    return fmax(text_w(cr, a), text_w(cr, b)) + 10; /* room for in-between tick labels too */
}

/* Square cells that fill about 640 x 440 px; a long thin matrix gets its
 * short side stretched to 200 px, so it does not shrink to a sliver. */
static void heat_cells(heat *h)
{
    double bw = clampd(640.0 / h->cols, 1, 56), bh = clampd(440.0 / h->rows, 1, 56);
    double sq = floor(fmin(bw, bh));
    h->cw = h->ch = sq;
    if (h->rows * sq < 200)
        h->ch = fmax(sq, floor(fmin(bh, ceil(200.0 / h->rows))));
    if (h->cols * sq < 200)
        h->cw = fmax(sq, floor(fmin(bw, ceil(200.0 / h->cols))));
}

static void heat_layout(cairo_t *cr, heat *h, const char *title, const char *xlabel, const char *ylabel)
{
    font(cr, h->fs_tick, 0);
    h->fh = digit_h(cr);
    heat_cells(h);
    heat_strides(cr, h);
    double rw = labels_w(cr, h->rl, h->rows, h->rstride);
    double cext = h->crot ? labels_w(cr, h->cl, h->cols, h->cstride) : h->fh;
    double cbw_text = cbar_label_w(cr, h);
    int has_t = title && *title, has_x = xlabel && *xlabel, has_y = ylabel && *ylabel;
    h->hx = round(h->pad + (has_y ? h->fs_label * 1.3 + 8 : 0) + rw + 10);
    h->hy = round(h->pad + (has_t ? h->fs_title * 1.2 + 12 : 0));
    double hw = h->cols * h->cw, hh = h->rows * h->ch;
    h->cbw = 16;
    h->cbh = fmax(hh, 140);
    h->cbx = h->hx + hw + 20;
    h->cby = h->hy;
    h->W = ceil(h->cbx + h->cbw + 8 + cbw_text + h->pad);
    h->H = ceil(fmax(h->hy + hh + 10 + cext + (has_x ? 10 + h->fs_label * 1.3 : 0) + h->pad,
                     h->cby + h->cbh + h->fh + h->pad));
    if (has_t) { /* a title wider than the figure widens it, content centred */
        font(cr, h->fs_title, 1);
        double need = text_w(cr, title) + 2 * h->pad;
        if (need > h->W) {
            double shift = round((need - h->W) / 2);
            h->hx += shift;
            h->cbx += shift;
            h->W = ceil(need);
        }
    }
}

static rgb heat_colour(const heat *h, double v)
{
    return viridis_at(h->vmax > h->vmin ? (v - h->vmin) / (h->vmax - h->vmin) : 0.5);
}

static void draw_cells(cairo_t *cr, const heat *h)
{
    for (int r = 0; r < h->rows; r++)
        for (int c = 0; c < h->cols; c++) {
            double v = h->m[(size_t)r * h->cols + c];
            if (isfinite(v))
                set_rgb(cr, heat_colour(h, v));
            else
                set_grey(cr, 0.94); /* empty cell: lighter than any colour of the map */
            cairo_rectangle(cr, h->hx + c * h->cw, h->hy + r * h->ch, h->cw, h->ch);
            cairo_fill(cr);
        }
    set_grey(cr, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, h->hx - 0.5, h->hy - 0.5, h->cols * h->cw + 1, h->rows * h->ch + 1);
    cairo_stroke(cr);
}

/* Cell values printed inside cells, when every one of them fits. */
static void annotate_cells(cairo_t *cr, const heat *h)
{
    if (fmin(h->cw, h->ch) < 24 || (long)h->rows * h->cols > 900)
        return;
    double amax = fmax(fabs(h->vmin), fabs(h->vmax));
    int dec = amax < 0.1 ? 3 : amax < 10 ? 2 : amax < 100 ? 1 : 0;
    font(cr, fmin(11, fmin(h->cw * 0.3, h->ch * 0.45)), 0);
    char buf[48], txt[48];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < (size_t)h->rows * h->cols; i++) {
            double v = h->m[i];
            if (!isfinite(v))
                continue;
            snprintf(buf, sizeof buf, "%.*f", dec, v);
            put_num(txt, sizeof txt, buf);
            if (pass == 0 && text_w(cr, txt) > h->cw - 4)
                return; /* one value too wide: print none */
            if (pass == 0)
                continue;
            rgb c = heat_colour(h, v);
            double lum = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
            set_grey(cr, lum < 0.45 ? 1 : 0.1);
            int r = (int)(i / (size_t)h->cols), col = (int)(i % (size_t)h->cols);
            text_at(cr, txt, h->hx + (col + 0.5) * h->cw, h->hy + (r + 0.5) * h->ch, 0.5, 0.5);
        }
}

static void draw_heat_labels(cairo_t *cr, const heat *h)
{
    char buf[32];
    double bottom = h->hy + h->rows * h->ch;
    set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    font(cr, h->fs_tick, 0);
    for (int r = 0; r < h->rows; r += h->rstride) {
        double y = h->hy + (r + 0.5) * h->ch;
        cairo_move_to(cr, h->hx - 0.5, half(y));
        cairo_line_to(cr, h->hx - 5, half(y));
        cairo_stroke(cr);
        text_at(cr, axis_text(h->rl, r, buf, sizeof buf), h->hx - 8, y, 1, 0.5);
    }
    for (int c = 0; c < h->cols; c += h->cstride) {
        double x = h->hx + (c + 0.5) * h->cw;
        cairo_move_to(cr, half(x), bottom + 0.5);
        cairo_line_to(cr, half(x), bottom + 5);
        cairo_stroke(cr);
        const char *s = axis_text(h->cl, c, buf, sizeof buf);
        if (h->crot)
            text_up(cr, s, x, bottom + 8, 1, 0.5);
        else
            text_at(cr, s, x, bottom + 8, 0.5, 0);
    }
}

static void cbar_tick(cairo_t *cr, const heat *h, double y, const char *txt)
{
    double x = h->cbx + h->cbw;
    cairo_move_to(cr, x, half(y));
    cairo_line_to(cr, x + 4, half(y));
    cairo_stroke(cr);
    text_at(cr, txt, x + 7, y, 0, 0.5);
}

/* Gradient bar with the exact minimum and maximum at its ends and round
 * values in between where they do not crowd the ends. */
static void draw_colour_bar(cairo_t *cr, const heat *h)
{
    cairo_pattern_t *g = cairo_pattern_create_linear(0, h->cby + h->cbh, 0, h->cby);
    for (int i = 0; i <= 10; i++)
        cairo_pattern_add_color_stop_rgb(g, i / 10.0, viridis[i].r, viridis[i].g, viridis[i].b);
    if (h->vmax > h->vmin)
        cairo_set_source(cr, g);
    else
        set_rgb(cr, viridis_at(0.5));
    cairo_rectangle(cr, h->cbx, h->cby, h->cbw, h->cbh);
    cairo_fill(cr);
    cairo_pattern_destroy(g);
    set_grey(cr, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, h->cbx - 0.5, h->cby - 0.5, h->cbw + 1, h->cbh + 1);
    cairo_stroke(cr);
    font(cr, h->fs_tick, 0);
    char txt[48];
    if (!(h->vmax > h->vmin)) {
        fmt_value(txt, sizeof txt, h->vmin);
        cbar_tick(cr, h, h->cby + h->cbh / 2, txt);
        return;
    }
    axis a = {h->vmin, h->vmax, 0, h->cby + h->cbh, h->cby};
    ticks t;
    linear_ticks(&t, h->vmin, h->vmax, (int)clampd(h->cbh / 45, 2, 8));
    for (int i = 0; i < t.n; i++) {
        double y = ax_px(&a, t.v[i]);
        if (y - h->cby > 2 * h->fh && h->cby + h->cbh - y > 2 * h->fh)
            cbar_tick(cr, h, y, t.lab[i].base);
    }
    fmt_value(txt, sizeof txt, h->vmin);
    cbar_tick(cr, h, h->cby + h->cbh, txt);
    fmt_value(txt, sizeof txt, h->vmax);
    cbar_tick(cr, h, h->cby, txt);
}

static void draw_heat_titles(cairo_t *cr, const heat *h, const char *title, const char *xlabel,
                             const char *ylabel)
{
    set_grey(cr, 0.1);
    double cx = h->hx + h->cols * h->cw / 2, cy = h->hy + h->rows * h->ch / 2;
    if (xlabel && *xlabel) {
        font(cr, h->fs_label, 0);
        text_at(cr, xlabel, cx, h->H - h->pad - 0.25 * h->fs_label, 0.5, 1);
    }
    if (ylabel && *ylabel) {
        font(cr, h->fs_label, 0);
        text_up(cr, ylabel, h->pad + 0.45 * h->fs_label, cy, 0.5, 0.5);
    }
    if (title && *title) {
        font(cr, h->fs_title, 1);
        double w = text_w(cr, title);
        if (cx - w / 2 < h->pad || cx + w / 2 > h->W - h->pad)
            cx = h->W / 2;
        text_at(cr, title, cx, h->pad + 0.1 * h->fs_title, 0.5, 0);
    }
}

int ar_plot_heatmap(const char *path, const char *title, const char *xlabel, const char *ylabel,
                    const double *m, int rows, int cols, const char *const *row_labels,
                    const char *const *col_labels, ar_err *e)
{
    if (rows <= 0 || cols <= 0)
        return ar_fail(e, "cannot plot '%s': the matrix is empty (%d x %d)", path, rows, cols);
    heat h = {.m = m, .rows = rows, .cols = cols, .rl = row_labels, .cl = col_labels,
              .fs_title = 16, .fs_label = 13, .fs_tick = 11, .pad = 12};
    if (value_range(&h, path, e) < 0)
        return -1;
    /* Measure on a scratch surface: the canvas size follows from the text. */
    cairo_surface_t *scratch = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *mc = cairo_create(scratch);
    heat_layout(mc, &h, title, xlabel, ylabel);
    cairo_destroy(mc);
    cairo_surface_destroy(scratch);
    cairo_surface_t *sf;
    cairo_t *cr;
    if (new_canvas((int)h.W, (int)h.H, &sf, &cr, path, e) < 0)
        return -1;
    draw_cells(cr, &h);
    annotate_cells(cr, &h);
    draw_heat_labels(cr, &h);
    draw_colour_bar(cr, &h);
    draw_heat_titles(cr, &h, title, xlabel, ylabel);
    return finish(sf, cr, path, e);
}
