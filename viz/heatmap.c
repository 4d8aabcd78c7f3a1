/* Heatmaps with cairo: viridis cells (perceptually uniform, readable in
 * grey and by the common colour-vision deficiencies), a colour bar per
 * panel, row and column labels, values printed in cells large enough, and
 * dashed outlines on marked cells.  Panels sit in a grid, all with cells of
 * one size, so the matrices of one figure compare at a glance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canvas.h"
#include "draw.h"
#include "plot.h"

typedef struct {
    const ar_heat_panel *p;
    const double *m;
    int rows, cols;
    const char *const *rl, *const *cl;
    double vmin, vmax;
    double fs_title, fs_label, fs_tick, pad, fh;
    double cw, ch, gap, hx, hy, cbx, cby, cbw, cbh, cbt, W, H; /* cbt: width of the bar's tick labels */
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
    return k <= 1 ? 1 : (int)vz_nice_step(k);
}

static double labels_w(cairo_t *cr, const char *const *labels, int n, int stride)
{
    char buf[32];
    double w = 0;
    for (int i = 0; i < n; i += stride)
        w = fmax(w, vz_text_w(cr, axis_text(labels, i, buf, sizeof buf)));
    return w;
}

static int has(const char *s)
{
    return s && *s;
}

/* Top of row r: rows from gap_before on sit below the gap. */
static double row_y(const heat *h, int r)
{
    return h->hy + r * h->ch + (h->p->gap_before > 0 && r >= h->p->gap_before ? h->gap : 0);
}

static double heat_h(const heat *h)
{
    return h->rows * h->ch + (h->p->gap_before > 0 && h->p->gap_before < h->rows ? h->gap : 0);
}

/* The colour range: the panel's own, else the data's. */
static int value_range(heat *h, const char *path, ar_err *e)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)h->rows * h->cols; i++)
        if (isfinite(h->m[i])) {
            lo = fmin(lo, h->m[i]);
            hi = fmax(hi, h->m[i]);
        }
    if (!isfinite(lo))
        return ar_fail(e, "cannot plot '%s': no finite values to plot", path);
    h->vmin = isfinite(h->p->vmin) ? h->p->vmin : lo;
    h->vmax = isfinite(h->p->vmax) ? h->p->vmax : hi;
    if (h->vmax < h->vmin)
        h->vmax = h->vmin;
    return 0;
}

/* Square cells that fill about tw x th px, at most 56 px; a long thin
 * matrix gets its short side stretched to 200 px, so it does not shrink to
 * a sliver. */
static void heat_cells(heat *h, double tw, double th)
{
    double bw = vz_clampd(tw / h->cols, 1, 56), bh = vz_clampd(th / h->rows, 1, 56);
    double sq = floor(fmin(bw, bh));
    h->cw = h->ch = sq;
    if (h->rows * sq < 200)
        h->ch = fmax(sq, floor(fmin(bh, ceil(200.0 / h->rows))));
    if (h->cols * sq < 200)
        h->cw = fmax(sq, floor(fmin(bw, ceil(200.0 / h->cols))));
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

static double cbar_label_w(cairo_t *cr, heat *h)
{
    char a[40], b[40];
    vz_fmt_value(a, sizeof a, h->vmin);
    vz_fmt_value(b, sizeof b, h->vmax);
    h->cbt = fmax(vz_text_w(cr, a), vz_text_w(cr, b)) + 10; /* room for in-between tick labels too */
    return h->cbt + (has(h->p->cbar_label) ? h->fs_label * 1.3 + 4 : 0);
}

/* The panel's size and the places of its parts, from its text. */
static void heat_layout(cairo_t *cr, heat *h)
{
    const ar_heat_panel *p = h->p;
    vz_font(cr, h->fs_tick, 0);
    h->fh = vz_digit_h(cr);
    heat_strides(cr, h);
    h->gap = p->gap_before > 0 ? fmax(6, round(h->ch * 0.3)) : 0;
    double rw = labels_w(cr, h->rl, h->rows, h->rstride);
    double cext = h->crot ? labels_w(cr, h->cl, h->cols, h->cstride) : h->fh;
    double cbw_text = cbar_label_w(cr, h);
    int nt = vz_lines_n(p->title);
    h->hx = round(h->pad + (has(p->ylabel) ? h->fs_label * 1.3 + 8 : 0) + rw + 10);
    h->hy = round(h->pad + (nt ? nt * h->fs_title * 1.25 + 8 : 0));
    double hw = h->cols * h->cw, hh = heat_h(h);
    h->cbw = 16;
    h->cbh = fmax(hh, 140);
    h->cbx = h->hx + hw + 20;
    h->cby = h->hy;
    h->W = ceil(h->cbx + h->cbw + 8 + cbw_text + h->pad);
    double below = 10 + cext + (has(p->xlabel) ? 10 + h->fs_label * 1.3 : 0) +
                   (has(p->mark_note) ? 8 + vz_lines_n(p->mark_note) * h->fs_tick * 1.3 : 0);
    h->H = ceil(fmax(h->hy + hh + below + h->pad, h->cby + h->cbh + h->fh + h->pad));
    /* Text wider than the panel widens it, the content centred. */
    double need = 0;
    if (nt) {
        vz_font(cr, h->fs_title, 1);
        need = vz_lines_w(cr, p->title) + 2 * h->pad;
    }
    if (has(p->mark_note)) {
        vz_font(cr, h->fs_tick, 0);
        need = fmax(need, vz_lines_w(cr, p->mark_note) + 2 * h->pad);
    }
    if (need > h->W) {
        double shift = round((need - h->W) / 2);
        h->hx += shift;
        h->cbx += shift;
        h->W = ceil(need);
    }
}

static vz_rgb heat_colour(const heat *h, double v)
{
    return vz_viridis_at(h->vmax > h->vmin ? (v - h->vmin) / (h->vmax - h->vmin) : 0.5);
}

static double lum(vz_rgb c)
{
    return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
}

static void frame(cairo_t *cr, const heat *h, int r0, int r1)
{
    if (r1 <= r0)
        return;
    double y0 = row_y(h, r0);
    cairo_rectangle(cr, h->hx - 0.5, y0 - 0.5, h->cols * h->cw + 1, (r1 - r0) * h->ch + 1);
    cairo_stroke(cr);
}

static void draw_cells(cairo_t *cr, const heat *h)
{
    for (int r = 0; r < h->rows; r++)
        for (int c = 0; c < h->cols; c++) {
            double v = h->m[(size_t)r * h->cols + c];
            if (isfinite(v))
                vz_set_rgb(cr, heat_colour(h, v));
            else
                vz_set_grey(cr, 0.94); /* empty cell: lighter than any colour of the map */
            cairo_rectangle(cr, h->hx + c * h->cw, row_y(h, r), h->cw, h->ch);
            cairo_fill(cr);
        }
    vz_set_grey(cr, 0.3);
    cairo_set_line_width(cr, 1);
    int g = h->p->gap_before > 0 && h->p->gap_before < h->rows ? h->p->gap_before : h->rows;
    frame(cr, h, 0, g);
    frame(cr, h, g, h->rows);
}

/* Dashed outline inside each marked cell, dark on light colours and light
 * on dark ones. */
static void draw_marks(cairo_t *cr, const heat *h)
{
    if (!h->p->marked)
        return;
    double in = fmax(2, floor(fmin(h->cw, h->ch) * 0.08)), lw = fmin(h->cw, h->ch) >= 24 ? 2 : 1;
    double dash[2] = {3 * lw, 2 * lw};
    cairo_save(cr);
    cairo_set_line_width(cr, lw);
    cairo_set_dash(cr, dash, 2, 0);
    for (int r = 0; r < h->rows; r++)
        for (int c = 0; c < h->cols; c++) {
            size_t i = (size_t)r * h->cols + c;
            if (!h->p->marked[i])
                continue;
            double v = h->m[i];
            vz_rgb col = isfinite(v) ? heat_colour(h, v) : (vz_rgb){0.94, 0.94, 0.94};
            vz_set_grey(cr, lum(col) < 0.45 ? 1 : 0.1);
            cairo_rectangle(cr, h->hx + c * h->cw + in + lw / 2, row_y(h, r) + in + lw / 2, h->cw - 2 * in - lw,
                            h->ch - 2 * in - lw);
            cairo_stroke(cr);
        }
    cairo_restore(cr);
}

/* A filled five-pointed star in the top right corner of each starred cell
 * (outer radius 0.15 of the cell, inner radius 0.4 of it), dark on light
 * colours and light on dark ones, with a thin outline of the other. */
static void draw_stars(cairo_t *cr, const heat *h)
{
    if (!h->p->starred)
        return;
    double R = fmax(3, 0.15 * fmin(h->cw, h->ch)), r = 0.4 * R;
    cairo_save(cr);
    cairo_set_line_width(cr, 1);
    for (int row = 0; row < h->rows; row++)
        for (int c = 0; c < h->cols; c++) {
            size_t i = (size_t)row * h->cols + c;
            if (!h->p->starred[i])
                continue;
            double v = h->m[i];
            vz_rgb col = isfinite(v) ? heat_colour(h, v) : (vz_rgb){0.94, 0.94, 0.94};
            int dark = lum(col) < 0.45;
            double cx = h->hx + (c + 1) * h->cw - R - 2, cy = row_y(h, row) + R + 2;
            for (int k = 0; k < 10; k++) {
                double a = -M_PI / 2 + k * M_PI / 5, rad = k % 2 ? r : R;
                if (k == 0)
                    cairo_move_to(cr, cx + rad * cos(a), cy + rad * sin(a));
                else
                    cairo_line_to(cr, cx + rad * cos(a), cy + rad * sin(a));
            }
            cairo_close_path(cr);
            vz_set_grey(cr, dark ? 1 : 0.1);
            cairo_fill_preserve(cr);
            vz_set_grey(cr, dark ? 0.1 : 1);
            cairo_stroke(cr);
        }
    cairo_restore(cr);
}

/* Cell values printed inside cells, when every one of them fits. */
static void annotate_cells(cairo_t *cr, const heat *h)
{
    if (fmin(h->cw, h->ch) < 24 || (long)h->rows * h->cols > 900)
        return;
    double amax = fmax(fabs(h->vmin), fabs(h->vmax));
    int dec = h->p->decimals > 0 ? h->p->decimals : amax < 0.1 ? 3 : amax < 10 ? 2 : amax < 100 ? 1 : 0;
    vz_font(cr, fmin(11, fmin(h->cw * 0.3, h->ch * 0.45)), 0);
    char buf[48], txt[48];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < (size_t)h->rows * h->cols; i++) {
            double v = h->m[i];
            if (!isfinite(v))
                continue;
            snprintf(buf, sizeof buf, "%.*f", dec, v);
            vz_put_num(txt, sizeof txt, buf);
            if (pass == 0 && vz_text_w(cr, txt) > h->cw - 8)
                return; /* one value too wide: print none */
            if (pass == 0)
                continue;
            vz_set_grey(cr, lum(heat_colour(h, v)) < 0.45 ? 1 : 0.1);
            int r = (int)(i / (size_t)h->cols), col = (int)(i % (size_t)h->cols);
            vz_text_at(cr, txt, h->hx + (col + 0.5) * h->cw, row_y(h, r) + 0.5 * h->ch, 0.5, 0.5);
        }
}

static void draw_heat_labels(cairo_t *cr, const heat *h)
{
    char buf[32];
    double bottom = h->hy + heat_h(h);
    vz_set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    vz_font(cr, h->fs_tick, 0);
    for (int r = 0; r < h->rows; r += h->rstride) {
        double y = row_y(h, r) + 0.5 * h->ch;
        cairo_move_to(cr, h->hx - 0.5, vz_half(y));
        cairo_line_to(cr, h->hx - 5, vz_half(y));
        cairo_stroke(cr);
        vz_text_at(cr, axis_text(h->rl, r, buf, sizeof buf), h->hx - 8, y, 1, 0.5);
    }
    for (int c = 0; c < h->cols; c += h->cstride) {
        double x = h->hx + (c + 0.5) * h->cw;
        cairo_move_to(cr, vz_half(x), bottom + 0.5);
        cairo_line_to(cr, vz_half(x), bottom + 5);
        cairo_stroke(cr);
        const char *s = axis_text(h->cl, c, buf, sizeof buf);
        if (h->crot)
            vz_text_up(cr, s, x, bottom + 8, 1, 0.5);
        else
            vz_text_at(cr, s, x, bottom + 8, 0.5, 0);
    }
}

static void cbar_tick(cairo_t *cr, const heat *h, double y, const char *txt)
{
    double x = h->cbx + h->cbw;
    cairo_move_to(cr, x, vz_half(y));
    cairo_line_to(cr, x + 4, vz_half(y));
    cairo_stroke(cr);
    vz_text_at(cr, txt, x + 7, y, 0, 0.5);
}

/* Gradient bar with the exact minimum and maximum at its ends and round
 * values in between where they do not crowd the ends. */
static void draw_colour_bar(cairo_t *cr, const heat *h)
{
    cairo_pattern_t *g = cairo_pattern_create_linear(0, h->cby + h->cbh, 0, h->cby);
    for (int i = 0; i <= 10; i++)
        cairo_pattern_add_color_stop_rgb(g, i / 10.0, vz_viridis[i].r, vz_viridis[i].g, vz_viridis[i].b);
    if (h->vmax > h->vmin)
        cairo_set_source(cr, g);
    else
        vz_set_rgb(cr, vz_viridis_at(0.5));
    cairo_rectangle(cr, h->cbx, h->cby, h->cbw, h->cbh);
    cairo_fill(cr);
    cairo_pattern_destroy(g);
    vz_set_grey(cr, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, h->cbx - 0.5, h->cby - 0.5, h->cbw + 1, h->cbh + 1);
    cairo_stroke(cr);
    if (has(h->p->cbar_label)) {
        vz_set_grey(cr, 0.1);
        vz_font(cr, h->fs_label, 0);
        double x = h->cbx + h->cbw + 8 + h->cbt + 4 + 0.55 * h->fs_label;
        vz_text_up(cr, h->p->cbar_label, x, h->cby + h->cbh / 2, 0.5, 0.5);
        vz_set_grey(cr, 0.3);
    }
    vz_font(cr, h->fs_tick, 0);
    char txt[48];
    if (!(h->vmax > h->vmin)) {
        vz_fmt_value(txt, sizeof txt, h->vmin);
        cbar_tick(cr, h, h->cby + h->cbh / 2, txt);
        return;
    }
    vz_axis a = {h->vmin, h->vmax, 0, h->cby + h->cbh, h->cby};
    vz_ticks t;
    vz_linear_ticks(&t, h->vmin, h->vmax, (int)vz_clampd(h->cbh / 45, 2, 8));
    for (int i = 0; i < t.n; i++) {
        double y = vz_ax_px(&a, t.v[i]);
        if (y - h->cby > 2 * h->fh && h->cby + h->cbh - y > 2 * h->fh)
            cbar_tick(cr, h, y, t.lab[i].base);
    }
    vz_fmt_value(txt, sizeof txt, h->vmin);
    cbar_tick(cr, h, h->cby + h->cbh, txt);
    vz_fmt_value(txt, sizeof txt, h->vmax);
    cbar_tick(cr, h, h->cby, txt);
}

static void draw_heat_titles(cairo_t *cr, const heat *h)
{
    const ar_heat_panel *p = h->p;
    vz_set_grey(cr, 0.1);
    double cx = h->hx + h->cols * h->cw / 2, cy = h->hy + heat_h(h) / 2;
    double bottom = h->H - h->pad;
    if (has(p->mark_note)) {
        int n = vz_lines_n(p->mark_note);
        vz_font(cr, h->fs_tick, 0);
        vz_set_grey(cr, 0.3);
        double top = bottom - n * h->fs_tick * 1.3;
        vz_lines_at(cr, p->mark_note, h->pad, top + 0.3 * h->fs_tick, 0, h->fs_tick * 1.3);
        bottom = top - 8;
        vz_set_grey(cr, 0.1);
    }
    if (has(p->xlabel)) {
        vz_font(cr, h->fs_label, 0);
        double w = vz_text_w(cr, p->xlabel), x = cx;
        if (x - w / 2 < h->pad)
            x = h->pad + w / 2;
        vz_text_at(cr, p->xlabel, x, bottom - 0.25 * h->fs_label, 0.5, 1);
    }
    if (has(p->ylabel)) {
        vz_font(cr, h->fs_label, 0);
        vz_text_up(cr, p->ylabel, h->pad + 0.45 * h->fs_label, cy, 0.5, 0.5);
    }
    if (has(p->title)) {
        vz_font(cr, h->fs_title, 1);
        double w = vz_lines_w(cr, p->title);
        if (cx - w / 2 < h->pad || cx + w / 2 > h->W - h->pad)
            cx = h->W / 2;
        vz_lines_at(cr, p->title, cx, h->pad + 0.1 * h->fs_title, 0.5, h->fs_title * 1.25);
    }
}

static void draw_panel(cairo_t *cr, const heat *h)
{
    draw_cells(cr, h);
    annotate_cells(cr, h);
    draw_marks(cr, h);
    draw_stars(cr, h);
    draw_heat_labels(cr, h);
    draw_colour_bar(cr, h);
    draw_heat_titles(cr, h);
}

int ar_plot_heatmaps(const char *path, const char *title, const ar_heat_panel *p, int np, int cols,
                     const ar_fig_meta *meta, ar_heat_geom *geom, ar_err *e)
{
    if (np < 1)
        return ar_fail(e, "cannot plot '%s': no heatmaps to draw", path);
    if (cols < 1 || cols > np)
        cols = np;
    int grid_rows = (np + cols - 1) / cols;
    heat *h = ar_xcalloc((size_t)np, sizeof *h);
    double cw = INFINITY, ch = INFINITY;
    for (int k = 0; k < np; k++) {
        if (p[k].rows <= 0 || p[k].cols <= 0) {
            free(h);
            return ar_fail(e, "cannot plot '%s': the matrix is empty (%d x %d)", path, p[k].rows, p[k].cols);
        }
        h[k] = (heat){.p = &p[k], .m = p[k].m, .rows = p[k].rows, .cols = p[k].cols, .rl = p[k].row_labels,
                      .cl = p[k].col_labels, .fs_title = 16, .fs_label = 13, .fs_tick = 11, .pad = 12};
        if (value_range(&h[k], path, e) < 0) {
            free(h);
            return -1;
        }
        heat_cells(&h[k], np == 1 ? 640 : 440, 440);
        cw = fmin(cw, h[k].cw);
        ch = fmin(ch, h[k].ch);
    }
    /* Measure on a scratch surface: the canvas size follows from the text. */
    cairo_surface_t *scratch = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *mc = cairo_create(scratch);
    for (int k = 0; k < np; k++) {
        h[k].cw = cw;
        h[k].ch = ch;
        heat_layout(mc, &h[k]);
    }
    cairo_destroy(mc);
    cairo_surface_destroy(scratch);
    /* Grid: each column as wide as its widest panel, each row as tall as its
     * tallest. */
    double *colw = ar_xcalloc((size_t)cols, sizeof(double)), *rowh = ar_xcalloc((size_t)grid_rows, sizeof(double));
    for (int k = 0; k < np; k++) {
        colw[k % cols] = fmax(colw[k % cols], h[k].W);
        rowh[k / cols] = fmax(rowh[k / cols], h[k].H);
    }
    double W = 0, H = 0;
    for (int c = 0; c < cols; c++)
        W += colw[c];
    for (int r = 0; r < grid_rows; r++)
        H += rowh[r];
    ar_canvas cv;
    int rc = ar_canvas_open(&cv, path, (int)W, (int)H, meta ? meta->format : AR_FIG_AUTO, e);
    for (int k = 0; k < np && rc == 0; k++) {
        double ox = 0, oy = 0;
        for (int c = 0; c < k % cols; c++)
            ox += colw[c];
        for (int r = 0; r < k / cols; r++)
            oy += rowh[r];
        ox += floor((colw[k % cols] - h[k].W) / 2); /* centred in its column */
        cairo_save(cv.cr);
        cairo_translate(cv.cr, ox, oy);
        draw_panel(cv.cr, &h[k]);
        cairo_restore(cv.cr);
        if (geom)
            geom[k] = (ar_heat_geom){.x = ox + h[k].hx, .y = oy + h[k].hy, .cw = h[k].cw, .ch = h[k].ch,
                                     .gap = h[k].gap, .W = (int)W, .H = (int)H};
    }
    free(colw);
    free(rowh);
    free(h);
    return rc == 0 ? ar_canvas_close(&cv, path, title, meta, e) : -1;
}

int ar_plot_heatmap(const char *path, const char *title, const char *xlabel, const char *ylabel,
                    const double *m, int rows, int cols, const char *const *row_labels,
                    const char *const *col_labels, ar_err *e)
{
    ar_heat_panel p = {.title = title, .xlabel = xlabel, .ylabel = ylabel, .m = m, .rows = rows, .cols = cols,
                       .row_labels = row_labels, .col_labels = col_labels, .vmin = NAN, .vmax = NAN};
    return ar_plot_heatmaps(path, title, &p, 1, 1, NULL, NULL, e);
}
