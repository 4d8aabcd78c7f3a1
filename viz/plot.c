/* Line plots with cairo, in the look of a default matplotlib figure: white
 * canvas, framed axes, outward ticks with 1-2-5 steps (decades on log
 * axes), light grid, and a legend placed where it hides the fewest data.
 * One figure or several side by side (panels); written through
 * viz/canvas.h, so every file carries its metadata and appears atomically. */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canvas.h"
#include "draw.h"

/* ------------------------------------------------------------ line plots */

typedef struct {
    double W, H, s;                           /* canvas and scale (1 at 900 x 560) */
    double fs_title, fs_label, fs_tick, fs_legend, tick_len, pad, lw;
    double x0, x1, y0, y1;                    /* axes box: left, right, top, bottom */
    vz_axis ax, ay;
    vz_ticks tx, ty;
    int empty;                                /* nothing to draw: frame and o->empty only */
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
            if (s[k].ylo && s[k].yhi && point_ok(o, x, s[k].ylo[i]) && point_ok(o, x, s[k].yhi[i])) {
                lim[2] = fmin(lim[2], fmin(s[k].ylo[i], s[k].yhi[i]));
                lim[3] = fmax(lim[3], fmax(s[k].ylo[i], s[k].yhi[i]));
            }
        }
    if (finite == 0)
        return ar_fail(e, "cannot plot '%s': no finite points to plot", path);
    if (ok == 0)
        return ar_fail(e, "cannot plot '%s': no positive values to plot on the log %s axis", path,
                       o->logx && o->logy ? "x or y" : o->logx ? "x" : "y");
    return 0;
}

/* A W x H plot; text scale s (0: from the size, 1 at 900 x 560). */
static void fig_style(fig *f, double W, double H, double s)
{
    f->W = W;
    f->H = H;
    /* Text shrinks more slowly than the canvas, so small figures stay legible. */
    f->s = s > 0 ? s : vz_clampd(sqrt(fmin(f->W / 900, f->H / 560)), 0.75, 3);
    f->fs_title = 16 * f->s;
    f->fs_label = 14 * f->s;
    f->fs_tick = 12 * f->s;
    f->fs_legend = 12 * f->s;
    f->tick_len = 5 * f->s;
    f->pad = 12 * f->s;
    f->lw = 2 * f->s;
}

static double max_label_w(cairo_t *cr, const vz_ticks *t, double size)
{
    double w = 0;
    for (int i = 0; i < t->n; i++)
        w = fmax(w, vz_label_w(cr, &t->lab[i], size));
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
    vz_fit_ticks(cr, &f->ty, &f->ay, 0, f->fs_tick);
    f->x0 = f->pad + (yl ? f->fs_label * 1.3 + 6 * f->s : 0) + max_label_w(cr, &f->ty, f->fs_tick) +
            f->tick_len + 6 * f->s;
    f->x1 = f->W - 2 * f->pad;
    for (int pass = 0; pass < 2; pass++) {
        f->ax.p0 = f->x0;
        f->ax.p1 = f->x1;
        vz_fit_ticks(cr, &f->tx, &f->ax, 1, f->fs_tick);
        double lastw = 0;
        for (int i = 0; i < f->tx.n; i++)
            if (vz_ax_px(&f->ax, f->tx.v[i]) + vz_label_w(cr, &f->tx.lab[i], f->fs_tick) / 2 > f->W - f->pad)
                lastw = fmax(lastw, vz_label_w(cr, &f->tx.lab[i], f->fs_tick));
        if (lastw == 0)
            break;
        f->x1 = f->W - f->pad - lastw / 2 - 2;
    }
}

static void draw_grid(cairo_t *cr, const fig *f)
{
    cairo_set_line_width(cr, 1);
    vz_set_grey(cr, 0.88);
    for (int i = 0; i < f->tx.n; i++) {
        double x = vz_half(vz_ax_px(&f->ax, f->tx.v[i]));
        cairo_move_to(cr, x, f->y0);
        cairo_line_to(cr, x, f->y1);
    }
    for (int i = 0; i < f->ty.n; i++) {
        double y = vz_half(vz_ax_px(&f->ay, f->ty.v[i]));
        cairo_move_to(cr, f->x0, y);
        cairo_line_to(cr, f->x1, y);
    }
    cairo_stroke(cr);
}

static void draw_frame_ticks(cairo_t *cr, const fig *f)
{
    vz_set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, vz_half(f->x0), vz_half(f->y0), floor(f->x1) - floor(f->x0), floor(f->y1) - floor(f->y0));
    cairo_stroke(cr);
    for (int i = 0; i < f->tx.n; i++) {
        double x = vz_half(vz_ax_px(&f->ax, f->tx.v[i]));
        cairo_move_to(cr, x, vz_half(f->y1));
        cairo_line_to(cr, x, vz_half(f->y1) + f->tick_len);
    }
    for (int i = 0; i < f->tx.nminor; i++) {
        double x = vz_half(vz_ax_px(&f->ax, f->tx.minor[i]));
        cairo_move_to(cr, x, vz_half(f->y1));
        cairo_line_to(cr, x, vz_half(f->y1) + f->tick_len * 0.6);
    }
    for (int i = 0; i < f->ty.n; i++) {
        double y = vz_half(vz_ax_px(&f->ay, f->ty.v[i]));
        cairo_move_to(cr, vz_half(f->x0), y);
        cairo_line_to(cr, vz_half(f->x0) - f->tick_len, y);
    }
    for (int i = 0; i < f->ty.nminor; i++) {
        double y = vz_half(vz_ax_px(&f->ay, f->ty.minor[i]));
        cairo_move_to(cr, vz_half(f->x0), y);
        cairo_line_to(cr, vz_half(f->x0) - f->tick_len * 0.6, y);
    }
    cairo_stroke(cr);
    for (int i = 0; i < f->tx.n; i++)
        vz_label_at(cr, &f->tx.lab[i], f->fs_tick, vz_ax_px(&f->ax, f->tx.v[i]), f->y1 + f->tick_len + 5 * f->s, 0.5, 0);
    for (int i = 0; i < f->ty.n; i++)
        vz_label_at(cr, &f->ty.lab[i], f->fs_tick, f->x0 - f->tick_len - 5 * f->s, vz_ax_px(&f->ay, f->ty.v[i]), 1, 0.5);
}

static void draw_titles(cairo_t *cr, const fig *f, const ar_plot_opts *o)
{
    vz_set_grey(cr, 0.1);
    if (o->xlabel && *o->xlabel) {
        vz_font(cr, f->fs_label, 0);
        vz_text_at(cr, o->xlabel, (f->x0 + f->x1) / 2, f->H - f->pad - 0.25 * f->fs_label, 0.5, 1);
    }
    if (o->ylabel && *o->ylabel) {
        vz_font(cr, f->fs_label, 0);
        vz_text_up(cr, o->ylabel, f->pad + 0.45 * f->fs_label, (f->y0 + f->y1) / 2, 0.5, 0.5);
    }
    if (o->title && *o->title) {
        vz_font(cr, f->fs_title, 1);
        double w = vz_text_w(cr, o->title), cx = (f->x0 + f->x1) / 2;
        if (cx - w / 2 < f->pad || cx + w / 2 > f->W - f->pad)
            cx = f->W / 2; /* too wide for the axes: centre on the canvas */
        vz_text_at(cr, o->title, cx, f->pad + 0.1 * f->fs_title, 0.5, 0);
    }
}

/* Series k: palette colour; past the eighth, the colours repeat dashed so
 * that every series stays distinguishable. */
static void series_pen(cairo_t *cr, int k, double lw)
{
    vz_set_rgb(cr, vz_palette[k % 8]);
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
        double px = vz_ax_px(&f->ax, s->x[i]), py = vz_ax_px(&f->ay, s->y[i]);
        if (run++ == 0)
            cairo_move_to(cr, px, py);
        else
            cairo_line_to(cr, px, py);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    /* error bars: a vertical line from ylo to yhi with caps 8 px wide */
    for (int i = 0; s->ylo && s->yhi && i < s->n; i++) {
        if (!point_ok(o, s->x[i], s->ylo[i]) || !point_ok(o, s->x[i], s->yhi[i]))
            continue;
        double px = vz_ax_px(&f->ax, s->x[i]), lo = vz_ax_px(&f->ay, s->ylo[i]), hi = vz_ax_px(&f->ay, s->yhi[i]);
        double cap = 4 * f->s;
        cairo_move_to(cr, px, lo);
        cairo_line_to(cr, px, hi);
        cairo_move_to(cr, px - cap, lo);
        cairo_line_to(cr, px + cap, lo);
        cairo_move_to(cr, px - cap, hi);
        cairo_line_to(cr, px + cap, hi);
        cairo_stroke(cr);
    }
    for (int i = 0; i < s->n; i++) {
        if (!point_ok(o, s->x[i], s->y[i]))
            continue;
        int alone = (i == 0 || !point_ok(o, s->x[i - 1], s->y[i - 1])) &&
                    (i == s->n - 1 || !point_ok(o, s->x[i + 1], s->y[i + 1]));
        if (s->markers || alone || s->no_line)
            marker(cr, vz_ax_px(&f->ax, s->x[i]), vz_ax_px(&f->ay, s->y[i]), s->markers ? 3.5 * f->s : f->lw);
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
            double px = vz_ax_px(&f->ax, s[k].x[i]), py = vz_ax_px(&f->ay, s[k].y[i]);
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
    vz_font(cr, f->fs_legend, 0);
    for (int k = 0; k < ns; k++)
        if (s[k].label) {
            n++;
            tw = fmax(tw, vz_text_w(cr, s[k].label));
        }
    if (n == 0)
        return (box){0, 0, 0, 0};
    box b = place_legend(f, o, s, ns, 2 * pad + sample + pad + tw, 2 * pad + n * row - (row - f->fs_legend));
    rounded(cr, &b, 4 * f->s);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    vz_set_grey(cr, 0.8);
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
        vz_set_grey(cr, 0.1);
        vz_font(cr, f->fs_legend, 0);
        vz_text_at(cr, s[k].label, b.x + 2 * pad + sample, y, 0, 0.5);
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
    vz_font(cr, f->fs_legend, 0);
    for (const char *p = o->note; *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        tw = fmax(tw, vz_text_w(cr, line));
        n++;
        p += len + (p[len] == '\n');
    }
    box b = place_box(f, o, s, ns, 2 * pad + tw, 2 * pad + n * row - (row - f->fs_legend), legend);
    rounded(cr, &b, 4 * f->s);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_fill_preserve(cr);
    vz_set_grey(cr, 0.8);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    vz_set_grey(cr, 0.1);
    double y = b.y + pad + f->fs_legend / 2;
    for (const char *p = o->note; *p;) {
        size_t len = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        vz_text_at(cr, line, b.x + pad, y, 0, 0.5);
        y += row;
        p += len + (p[len] == '\n');
    }
}

/* Axis ranges from the data, or [0, 1] x [0, 1] (1 to 10 on log axes)
 * when the panel has nothing to draw and says so (o->empty). */
static int fig_ranges(fig *f, const ar_plot_opts *o, const ar_series *s, int ns, const char *path, ar_err *e)
{
    double lim[4];
    f->ax.log = o->logx;
    f->ay.log = o->logy;
    if (data_limits(o, s, ns, lim, path, e) < 0) {
        if (!o->empty)
            return -1;
        lim[0] = lim[2] = o->logx ? 1 : 0;
        lim[1] = o->logx ? 10 : 1;
        lim[2] = o->logy ? 1 : 0;
        lim[3] = o->logy ? 10 : 1;
        f->empty = 1;
    }
    vz_pad_range(&f->ax, lim[0], lim[1]);
    vz_pad_range(&f->ay, lim[2], lim[3]);
    return 0;
}

/* One plot in the W x H box whose top left corner is the origin. */
static void draw_plot(cairo_t *cr, fig *f, const ar_plot_opts *o, const ar_series *s, int ns)
{
    fig_layout(cr, f, o);
    draw_grid(cr, f);
    cairo_save(cr);
    cairo_rectangle(cr, f->x0, f->y0, f->x1 - f->x0, f->y1 - f->y0);
    cairo_clip(cr);
    for (int k = 0; k < ns && !f->empty; k++)
        draw_series(cr, f, o, &s[k], k);
    cairo_restore(cr);
    draw_frame_ticks(cr, f);
    draw_titles(cr, f, o);
    if (f->empty) {
        vz_set_grey(cr, 0.45);
        vz_font(cr, f->fs_label, 0);
        vz_text_at(cr, o->empty, (f->x0 + f->x1) / 2, (f->y0 + f->y1) / 2, 0.5, 0.5);
        return;
    }
    box lb = draw_legend(cr, f, o, s, ns);
    draw_note(cr, f, o, s, ns, &lb);
}

int ar_plot_lines(const char *path, const ar_plot_opts *o, const ar_series *s, int ns, ar_err *e)
{
    ar_line_panel p = {.o = o, .s = s, .ns = ns};
    return ar_plot_line_panels(path, o->title, &p, 1, o->width > 0 ? o->width : 900,
                               o->height > 0 ? o->height : 560, o->meta, e);
}

int ar_plot_line_panels(const char *path, const char *title, const ar_line_panel *p, int np, int width,
                        int height, const ar_fig_meta *meta, ar_err *e)
{
    if (np < 1)
        return ar_fail(e, "cannot plot '%s': no panels to draw", path);
    fig *f = ar_xcalloc((size_t)np, sizeof *f);
    double pw = floor((double)width / np);
    /* One text scale for all panels: that of a single plot of the height,
     * so panels side by side keep the text of one plot. */
    double s = vz_clampd(sqrt(fmin(pw * 1.6 / 900, height / 560.0)), 0.75, 3);
    for (int k = 0; k < np; k++) {
        fig_style(&f[k], np == 1 ? width : pw, height, np == 1 ? 0 : s);
        if (fig_ranges(&f[k], p[k].o, p[k].s, p[k].ns, path, e) < 0) {
            free(f);
            return -1;
        }
    }
    ar_canvas c;
    if (ar_canvas_open(&c, path, width, height, meta ? meta->format : AR_FIG_AUTO, e) < 0) {
        free(f);
        return -1;
    }
    for (int k = 0; k < np; k++) {
        cairo_save(c.cr);
        cairo_translate(c.cr, k * pw, 0);
        draw_plot(c.cr, &f[k], p[k].o, p[k].s, p[k].ns);
        cairo_restore(c.cr);
    }
    free(f);
    return ar_canvas_close(&c, path, title, meta, e);
}
