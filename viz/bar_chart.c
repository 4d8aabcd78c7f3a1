/* Bar chart with error bars (viz/bar_chart.h). */
#include "bar_chart.h"

#include <math.h>
#include <stdio.h>

#include "draw.h"

int ar_plot_bars(const char *path, const ar_bar_opts *o, const char *const *label, const double *value,
                 const double *err, int n, ar_err *e)
{
    if (n < 1)
        return ar_fail(e, "no bars to draw in '%s'", path);
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
        return ar_fail(e, "no finite values to draw in '%s'", path);
    if (hi - lo < 1e-9 * fmax(1, fabs(hi))) {
        lo -= 0.01 * fmax(1e-3, fabs(lo));
        hi += 0.01 * fmax(1e-3, fabs(hi));
    }
    double span = hi - lo;
    lo -= 0.25 * span; /* the bars' feet stay visible */
    hi += 0.08 * span;

    int W = 900, H = 560;
    ar_canvas cv;
    if (ar_canvas_open(&cv, path, W, H, AR_FIG_AUTO, e) != 0)
        return -1;
    cairo_t *cr = cv.cr;
    double pad = 14, fs_tick = 12, fs_label = 14, fs_title = 16;
    /* room for the bar labels under the axis: rotated when they crowd */
    vz_font(cr, fs_tick, 0);
    double maxw = 0;
    for (int i = 0; i < n; i++)
        maxw = fmax(maxw, vz_text_w(cr, label[i]));
    double x0 = 80, x1 = W - pad - 10, y0 = pad + fs_title + 16;
    int rotate = maxw > (x1 - x0) / n - 8;
    double y1 = H - pad - fs_label - 14 - (rotate ? maxw : fs_tick + 6);
    vz_axis ay = {.lo = lo, .hi = hi, .p0 = y1, .p1 = y0};
    vz_ticks ty;
    vz_fit_ticks(cr, &ty, &ay, 0, fs_tick);
    /* grid */
    cairo_set_line_width(cr, 1);
    vz_set_grey(cr, 0.88);
    for (int i = 0; i < ty.n; i++) {
        double y = vz_half(vz_ax_px(&ay, ty.v[i]));
        cairo_move_to(cr, x0, y);
        cairo_line_to(cr, x1, y);
    }
    cairo_stroke(cr);
    /* bars */
    double slot = (x1 - x0) / n, bw = slot * 0.62;
    for (int i = 0; i < n; i++) {
        if (!isfinite(value[i]))
            continue;
        double cx = x0 + slot * (i + 0.5), top = vz_ax_px(&ay, value[i]);
        vz_set_rgb(cr, vz_palette[i == 0 ? 7 : 0]);
        cairo_rectangle(cr, cx - bw / 2, top, bw, y1 - top);
        cairo_fill(cr);
        if (isfinite(err[i]) && err[i] > 0) {
            double a = vz_ax_px(&ay, value[i] - err[i]), b = vz_ax_px(&ay, value[i] + err[i]);
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
        snprintf(v, sizeof v, "%.4f", value[i]);
        vz_set_grey(cr, 0.1);
        vz_font(cr, fs_tick * 0.85, 0);
        double vy = vz_ax_px(&ay, value[i] + (isfinite(err[i]) ? err[i] : 0)) - 4;
        vz_text_at(cr, v, cx, vy, 0.5, 1);
        vz_font(cr, fs_tick, 0);
        if (rotate)
            vz_text_up(cr, label[i], cx, y1 + 6, 1, 0.5);
        else
            vz_text_at(cr, label[i], cx, y1 + 6, 0.5, 0);
    }
    /* reference line */
    if (isfinite(o->ref)) {
        double y = vz_half(vz_ax_px(&ay, o->ref));
        double dash[2] = {6, 4};
        vz_set_rgb(cr, vz_palette[5]);
        cairo_set_line_width(cr, 1.5);
        cairo_set_dash(cr, dash, 2, 0);
        cairo_move_to(cr, x0, y);
        cairo_line_to(cr, x1, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        if (o->ref_label) {
            vz_font(cr, fs_tick, 0);
            vz_text_at(cr, o->ref_label, x0 + 4, y - 4, 0, 1);
        }
    }
    /* frame, ticks, labels */
    vz_set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, vz_half(x0), vz_half(y0), floor(x1) - floor(x0), floor(y1) - floor(y0));
    for (int i = 0; i < ty.n; i++) {
        double y = vz_half(vz_ax_px(&ay, ty.v[i]));
        cairo_move_to(cr, vz_half(x0), y);
        cairo_line_to(cr, vz_half(x0) - 5, y);
    }
    cairo_stroke(cr);
    for (int i = 0; i < ty.n; i++)
        vz_label_at(cr, &ty.lab[i], fs_tick, x0 - 9, vz_ax_px(&ay, ty.v[i]), 1, 0.5);
    vz_set_grey(cr, 0.1);
    if (o->ylabel) {
        vz_font(cr, fs_label, 0);
        vz_text_up(cr, o->ylabel, pad + 0.45 * fs_label, (y0 + y1) / 2, 0.5, 0.5);
    }
    if (o->title) {
        vz_font(cr, fs_title, 1);
        vz_text_at(cr, o->title, (x0 + x1) / 2, pad, 0.5, 0);
    }
    return ar_canvas_close(&cv, path, o->title ? o->title : "bar chart", o->meta, e);
}
