/* Bar chart with error bars (viz/bar_chart.h). */
#include "bar_chart.h"

#include <math.h>
#include <stdio.h>

#include "draw.h"

/* The value axis's range: the values with their error bars and the
 * reference line, widened when flat, then padded so the bars' feet stay
 * visible.  0, or -1 when no value is finite. */
static int value_range(const ar_bar_opts *o, const double *value, const double *err, int n, double *lo_out,
                       double *hi_out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!isfinite(value[i]))
            continue;
        double d = isfinite(err[i]) ? err[i] : 0;
        lo = fmin(lo, value[i] - d);
        hi = fmax(hi, value[i] + d);
    }
    if (isfinite(o->ref)) {
        lo = fmin(lo, o->ref);
        hi = fmax(hi, o->ref);
    }
    if (!isfinite(lo))
        return -1;
    if (hi - lo < 1e-9 * fmax(1, fabs(hi))) {
        lo -= 0.01 * fmax(1e-3, fabs(lo));
        hi += 0.01 * fmax(1e-3, fabs(hi));
    }
    double span = hi - lo;
    *lo_out = lo - 0.25 * span; /* the bars' feet stay visible */
    *hi_out = hi + 0.08 * span;
    return 0;
}

/* Where things go: the plot area [x0, x1] x [y0, y1] in pixels, the value
 * axis and its ticks, the font sizes. */
typedef struct {
    double pad, fs_tick, fs_label, fs_title;
    double x0, x1, y0, y1;
    int rotate; /* the bar labels run upwards: they would crowd */
    vz_axis ay;
    vz_ticks ty;
} layout;

static void draw_grid(cairo_t *cr, const layout *l)
{
    cairo_set_line_width(cr, 1);
    vz_set_grey(cr, 0.88);
    for (int i = 0; i < l->ty.n; i++) {
        double y = vz_half(vz_ax_px(&l->ay, l->ty.v[i]));
        cairo_move_to(cr, l->x0, y);
        cairo_line_to(cr, l->x1, y);
    }
    cairo_stroke(cr);
}

/* Bar i of n, centred in its slot: its error bar, its value above and its
 * label under the axis. */
static void draw_bar(cairo_t *cr, const layout *l, int i, int n, const char *label, double value, double err)
{
    double slot = (l->x1 - l->x0) / n, bw = slot * 0.62;
    double cx = l->x0 + slot * (i + 0.5), top = vz_ax_px(&l->ay, value);
    vz_set_rgb(cr, vz_palette[i == 0 ? 7 : 0]);
    cairo_rectangle(cr, cx - bw / 2, top, bw, l->y1 - top);
    cairo_fill(cr);
    if (isfinite(err) && err > 0) {
        double a = vz_ax_px(&l->ay, value - err), b = vz_ax_px(&l->ay, value + err);
        vz_set_grey(cr, 0.1);
        cairo_set_line_width(cr, 1.5);
        cairo_move_to(cr, cx, a);
        cairo_line_to(cr, cx, b);
        cairo_move_to(cr, cx - bw / 5, a);
        cairo_line_to(cr, cx + bw / 5, a);
        cairo_move_to(cr, cx - bw / 5, b);
        cairo_line_to(cr, cx + bw / 5, b);
        cairo_stroke(cr);
    }
    /* the value above the bar */
    char v[32];
    snprintf(v, sizeof v, "%.4f", value);
    vz_set_grey(cr, 0.1);
    vz_font(cr, l->fs_tick * 0.85, 0);
    double vy = vz_ax_px(&l->ay, value + (isfinite(err) ? err : 0)) - 4;
    vz_text_at(cr, v, cx, vy, 0.5, 1);
    vz_font(cr, l->fs_tick, 0);
    if (l->rotate)
        vz_text_up(cr, label, cx, l->y1 + 6, 1, 0.5);
    else
        vz_text_at(cr, label, cx, l->y1 + 6, 0.5, 0);
}

/* The dashed reference line and its label. */
static void draw_ref(cairo_t *cr, const layout *l, const ar_bar_opts *o)
{
    double y = vz_half(vz_ax_px(&l->ay, o->ref));
    double dash[2] = {6, 4};
    vz_set_rgb(cr, vz_palette[5]);
    cairo_set_line_width(cr, 1.5);
    cairo_set_dash(cr, dash, 2, 0);
    cairo_move_to(cr, l->x0, y);
    cairo_line_to(cr, l->x1, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    if (o->ref_label) {
        vz_font(cr, l->fs_tick, 0);
        vz_text_at(cr, o->ref_label, l->x0 + 4, y - 4, 0, 1);
    }
}

/* The frame, the value axis's ticks and labels, the title. */
static void draw_frame(cairo_t *cr, const layout *l, const ar_bar_opts *o)
{
    double x0 = l->x0, x1 = l->x1, y0 = l->y0, y1 = l->y1;
    vz_set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, vz_half(x0), vz_half(y0), floor(x1) - floor(x0), floor(y1) - floor(y0));
    for (int i = 0; i < l->ty.n; i++) {
        double y = vz_half(vz_ax_px(&l->ay, l->ty.v[i]));
        cairo_move_to(cr, vz_half(x0), y);
        cairo_line_to(cr, vz_half(x0) - 5, y);
    }
    cairo_stroke(cr);
    for (int i = 0; i < l->ty.n; i++)
        vz_label_at(cr, &l->ty.lab[i], l->fs_tick, x0 - 9, vz_ax_px(&l->ay, l->ty.v[i]), 1, 0.5);
    vz_set_grey(cr, 0.1);
    if (o->ylabel) {
        vz_font(cr, l->fs_label, 0);
        vz_text_up(cr, o->ylabel, l->pad + 0.45 * l->fs_label, (y0 + y1) / 2, 0.5, 0.5);
    }
    if (o->title) {
        vz_font(cr, l->fs_title, 1);
        vz_text_at(cr, o->title, (x0 + x1) / 2, l->pad, 0.5, 0);
    }
}

int ar_plot_bars(const char *path, const ar_bar_opts *o, const char *const *label, const double *value,
                 const double *err, int n, ar_err *e)
{
    if (n < 1)
        return ar_fail(e, "no bars to draw in '%s'", path);
    double lo, hi;
    if (value_range(o, value, err, n, &lo, &hi) != 0)
        return ar_fail(e, "no finite values to draw in '%s'", path);
    int W = 900, H = 560;
    ar_canvas cv;
    if (ar_canvas_open(&cv, path, W, H, AR_FIG_AUTO, e) != 0)
        return -1;
    cairo_t *cr = cv.cr;
    layout l = {.pad = 14, .fs_tick = 12, .fs_label = 14, .fs_title = 16};
    /* room for the bar labels under the axis: rotated when they crowd */
    vz_font(cr, l.fs_tick, 0);
    double maxw = 0;
    for (int i = 0; i < n; i++)
        maxw = fmax(maxw, vz_text_w(cr, label[i]));
    l.x0 = 80;
    l.x1 = W - l.pad - 10;
    l.y0 = l.pad + l.fs_title + 16;
    l.rotate = maxw > (l.x1 - l.x0) / n - 8;
    l.y1 = H - l.pad - l.fs_label - 14 - (l.rotate ? maxw : l.fs_tick + 6);
    l.ay = (vz_axis){.lo = lo, .hi = hi, .p0 = l.y1, .p1 = l.y0};
    vz_fit_ticks(cr, &l.ty, &l.ay, 0, l.fs_tick);
    draw_grid(cr, &l);
    for (int i = 0; i < n; i++)
        if (isfinite(value[i]))
            draw_bar(cr, &l, i, n, label[i], value[i], err[i]);
    if (isfinite(o->ref))
        draw_ref(cr, &l, o);
    draw_frame(cr, &l, o);
    return ar_canvas_close(&cv, path, o->title ? o->title : "bar chart", o->meta, e);
}
