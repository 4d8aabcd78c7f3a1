/* The pipeline figure: rows held per chunk, and the schedule
 * (pipeline_figure.h). */
#include "pipeline_figure.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "draw.h"

#define DOT " \xc2\xb7 "     /* U+00B7 between a title's parts */
#define ENDASH "\xe2\x80\x93" /* sublayers 3-4 */

/* ---------------------------------------------------------------- colours */

/* Cells: kept sky blue, received orange, produced bluish green (the
 * Okabe-Ito hues, told apart in the common colour-vision deficiencies),
 * absent a light grey. */
static vz_rgb state_colour(int s)
{
    switch (s) {
    case AR_PFIG_KEPT: return vz_palette[5];
    case AR_PFIG_RECEIVED: return vz_palette[1];
    case AR_PFIG_PRODUCED: return vz_palette[2];
    default: return (vz_rgb){0.92, 0.92, 0.92};
    }
}

/* Forward blue, backward vermillion; virtual stage v of V lighter by up to
 * 55% towards white, so the first virtual stage is the darkest. */
static vz_rgb op_colour(char kind, int virt, int V)
{
    vz_rgb c = vz_palette[kind == 'B' ? 3 : 0];
    double t = V > 1 ? 0.55 * vz_clampd(virt, 0, V - 1) / (V - 1) : 0;
    return (vz_rgb){c.r + (1 - c.r) * t, c.g + (1 - c.g) * t, c.b + (1 - c.b) * t};
}

static void to_bytes(vz_rgb c, int rgb[3])
{
    rgb[0] = (int)lround(c.r * 255);
    rgb[1] = (int)lround(c.g * 255);
    rgb[2] = (int)lround(c.b * 255);
}

void ar_pfig_state_rgb(int s, int rgb[3])
{
    to_bytes(state_colour(s), rgb);
}

void ar_pfig_op_rgb(char kind, int virt, int V, int rgb[3])
{
    to_bytes(op_colour(kind, virt, V), rgb);
}

/* Text on a coloured box: white on dark fills, near black on light ones
 * (relative luminance, Rec. 709 weights). */
static void ink_on(cairo_t *cr, vz_rgb fill)
{
    double lum = 0.2126 * fill.r + 0.7152 * fill.g + 0.0722 * fill.b;
    vz_set_grey(cr, lum < 0.55 ? 1.0 : 0.1);
}

/* ---------------------------------------------------------------- legends */

typedef struct {
    vz_rgb fill;
    const char *text;
} swatch;

/* A row of swatches with their texts from x at height y (the swatches'
 * top); returns its width, drawing only when draw is set. */
static double legend_row(cairo_t *cr, const swatch *s, int n, double x, double y, double fs, int draw)
{
    double box = fs, gap = 0.5 * fs, sep = 1.6 * fs, x0 = x;
    vz_font(cr, fs, 0);
    for (int i = 0; i < n; i++) {
        if (draw) {
            vz_set_rgb(cr, s[i].fill);
            cairo_rectangle(cr, x, y, box, box);
            cairo_fill_preserve(cr);
            vz_set_grey(cr, 0.55);
            cairo_set_line_width(cr, 0.8);
            cairo_stroke(cr);
            vz_set_grey(cr, 0.1);
            vz_text_at(cr, s[i].text, x + box + gap, y + box / 2, 0, 0.5);
        }
        x += box + gap + vz_text_w(cr, s[i].text) + (i + 1 < n ? sep : 0);
    }
    return x - x0;
}

/* ----------------------------------------------------------------- layout */

typedef struct {
    double W, H, pad, fs_title, fs_panel, fs, fs_small;
    int title_lines;
    /* panel (a) */
    double lw;            /* row labels' column */
    double gap, pitch, cw, ch, gx, cy;
    int label_every;      /* row labels on every k-th row when rows are thin */
    double ya_title, ya_legend, ya_head, ya_note;
    /* panel (b) */
    double yb_title, yb_legend, tx, tx1, ly, lh, lpitch, y_axis;
} layout;

static void chunk_head(const ar_pfig_chunk *c, int i, char *l1, char *l2, size_t cap)
{
    snprintf(l1, cap, "c%d: rank %d, v%d", i, c->rank, c->virt);
    if (c->lo == c->hi)
        snprintf(l2, cap, "sublayer %d", c->lo);
    else
        snprintf(l2, cap, "sublayers %d" ENDASH "%d", c->lo, c->hi);
}

static void sent_text(const ar_pfig_chunk *c, char *l1, char *l2, size_t cap)
{
    snprintf(l1, cap, "sent %d", c->sent);
    if (c->sent_naive >= 0)
        snprintf(l2, cap, "(naive %d)", c->sent_naive);
    else
        l2[0] = '\0';
}

/* Rows sent per micro-batch over every transition; naive -1 when any
 * chunk lacks its naive count. */
static void totals(const ar_pfig *f, long *sent, long *naive)
{
    *sent = 0;
    *naive = 0;
    for (int c = 0; c + 1 < f->C; c++) {
        *sent += f->chunk[c].sent;
        if (f->chunk[c].sent_naive < 0 || *naive < 0)
            *naive = -1;
        else
            *naive += f->chunk[c].sent_naive;
    }
}

static int n_swatches_b(const ar_pfig *f) { return 2 * f->V + 1; }

/* Panel (b)'s legend: forward and backward per virtual stage, then idle. */
static void swatches_b(const ar_pfig *f, swatch *s, char (*txt)[48])
{
    int k = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int v = 0; v < f->V; v++, k++) {
            char c = kind ? 'B' : 'F';
            if (f->V > 1)
                snprintf(txt[k], 48, "%s, v%d", kind ? "backward" : "forward", v);
            else
                snprintf(txt[k], 48, "%s", kind ? "backward" : "forward");
            s[k] = (swatch){op_colour(c, v, f->V), txt[k]};
        }
    snprintf(txt[k], 48, "idle (bubble)");
    s[k] = (swatch){{0.955, 0.955, 0.955}, txt[k]};
}

/* Panel (a)'s legend: the four states. */
static void fill_swatches_a(swatch *s)
{
    static const int st[] = {AR_PFIG_KEPT, AR_PFIG_RECEIVED, AR_PFIG_PRODUCED, AR_PFIG_ABSENT};
    static const char *const text[] = {"kept (cached from the rank's earlier chunks)", "received at this transition",
                                       "produced by this chunk", "not held"};
    for (int i = 0; i < 4; i++)
        s[i] = (swatch){state_colour(st[i]), text[i]};
}

/* Sizes from the text (measured on cr) and the counts. */
static void lay_out(cairo_t *cr, const ar_pfig *f, layout *l)
{
    memset(l, 0, sizeof *l);
    l->pad = 14;
    l->fs_title = 16;
    l->fs_panel = 14;
    l->fs = 12;
    l->fs_small = 11;
    l->title_lines = f->title ? vz_lines_n(f->title) : 0;

    /* panel (a): widths of the row labels, the column heads and the counts */
    vz_font(cr, l->fs_small, 0);
    for (int q = 0; q < f->nrows; q++)
        l->lw = fmax(l->lw, vz_text_w(cr, f->row_label[q]));
    l->lw += 8;
    double headw = 0, sentw = 0;
    char a[96], b[96];
    for (int c = 0; c < f->C; c++) {
        chunk_head(&f->chunk[c], c, a, b, sizeof a);
        headw = fmax(headw, fmax(vz_text_w(cr, a), vz_text_w(cr, b)));
        if (c + 1 < f->C) {
            sent_text(&f->chunk[c], a, b, sizeof a);
            sentw = fmax(sentw, fmax(vz_text_w(cr, a), vz_text_w(cr, b)));
        }
    }
    l->gap = fmax(sentw + 14, 44);
    double pitch_min = fmax(headw + 10, l->gap + 16), cw_max = 56;
    double need_a = 2 * l->pad + l->lw + f->C * pitch_min;

    /* panel (b): the lane labels and both legends */
    vz_font(cr, l->fs, 0);
    char rl[32];
    snprintf(rl, sizeof rl, "rank %d", f->P - 1);
    double lanew = vz_text_w(cr, rl) + 12;
    swatch sa[4], sb[2 * 64 + 1];
    char txt[2 * 64 + 1][48];
    fill_swatches_a(sa);
    swatches_b(f, sb, txt);
    double lega = legend_row(cr, sa, 4, 0, 0, l->fs, 0), legb = legend_row(cr, sb, n_swatches_b(f), 0, 0, l->fs, 0);
    vz_font(cr, l->fs_small, 0);
    double notew = f->rows_note ? vz_text_w(cr, f->rows_note) : 0;
    vz_font(cr, l->fs_title, 1);
    double titlew = f->title ? vz_lines_w(cr, f->title) : 0;
    double textw = fmax(fmax(lega, legb), fmax(titlew, notew));
    l->W = ceil(fmax(fmax(1100, need_a), textw + 2 * l->pad));

    /* the grid of cells, as wide as the figure allows (cells at most
     * cw_max wide), centred */
    l->pitch = fmin((l->W - 2 * l->pad - l->lw) / f->C, l->gap + cw_max);
    l->pitch = fmax(l->pitch, pitch_min);
    l->cw = l->pitch - l->gap;
    double gridw = l->lw + f->C * l->pitch - l->gap;
    l->gx = floor((l->W - gridw) / 2 + l->lw);
    l->ch = floor(vz_clampd(320.0 / f->nrows, 4, 16));
    l->label_every = (int)ceil((l->fs_small + 1) / l->ch);

    /* top to bottom */
    double y = l->pad + l->title_lines * 1.35 * l->fs_title + 10;
    l->ya_title = y;
    y += l->fs_panel + 12;
    l->ya_legend = y;
    y += l->fs + 14;
    l->ya_head = y;
    y += 2 * 1.35 * l->fs_small + 6;
    l->cy = y;
    y += f->nrows * l->ch + 10;
    l->ya_note = y;
    y += l->fs_small + 28;
    l->yb_title = y;
    y += l->fs_panel + 12;
    l->yb_legend = y;
    y += l->fs + 14;
    l->tx = l->pad + lanew;
    l->tx1 = l->W - l->pad - 10;
    l->ly = y;
    l->lh = 26;
    l->lpitch = 32;
    y += f->P * l->lpitch - (l->lpitch - l->lh);
    l->y_axis = y + 4;
    y = l->y_axis + 6 + l->fs + 10 + l->fs + l->pad;
    l->H = ceil(y);
}

/* --------------------------------------------------------------- panel a */

static void arrow(cairo_t *cr, double x0, double x1, double y)
{
    double head = 6;
    cairo_set_line_width(cr, 1.4);
    cairo_move_to(cr, x0, y);
    cairo_line_to(cr, x1 - head, y);
    cairo_stroke(cr);
    cairo_move_to(cr, x1, y);
    cairo_line_to(cr, x1 - head, y - head / 2);
    cairo_line_to(cr, x1 - head, y + head / 2);
    cairo_close_path(cr);
    cairo_fill(cr);
}

static void draw_holdings(cairo_t *cr, const ar_pfig *f, const layout *l)
{
    long sent, naive;
    totals(f, &sent, &naive);
    char t[256], nv[48] = "";
    if (naive >= 0)
        snprintf(nv, sizeof nv, " (naive %ld)", naive);
    snprintf(t, sizeof t, "(a) Rows each rank holds when a chunk starts" DOT "sent per micro-batch: %ld%s", sent, nv);
    vz_set_grey(cr, 0.1);
    vz_font(cr, l->fs_panel, 1);
    vz_text_at(cr, t, l->W / 2, l->ya_title, 0.5, 0);
    swatch sa[4];
    fill_swatches_a(sa);
    double w = legend_row(cr, sa, 4, 0, 0, l->fs, 0);
    legend_row(cr, sa, 4, (l->W - w) / 2, l->ya_legend, l->fs, 1);

    /* row labels, on every label_every-th row */
    vz_font(cr, l->fs_small, 0);
    vz_set_grey(cr, 0.2);
    for (int q = 0; q < f->nrows; q += l->label_every)
        vz_text_at(cr, f->row_label[q], l->gx - 6, l->cy + (q + 0.5) * l->ch, 1, 0.5);

    char a[96], b[96];
    double gh = f->nrows * l->ch;
    for (int c = 0; c < f->C; c++) {
        const ar_pfig_chunk *k = &f->chunk[c];
        double x = l->gx + c * l->pitch, xm = x + l->cw / 2;
        chunk_head(k, c, a, b, sizeof a);
        vz_font(cr, l->fs_small, 0);
        vz_set_grey(cr, 0.1);
        vz_text_at(cr, a, xm, l->ya_head, 0.5, 0);
        vz_set_grey(cr, 0.35);
        vz_text_at(cr, b, xm, l->ya_head + 1.35 * l->fs_small, 0.5, 0);
        for (int q = 0; q < f->nrows; q++) {
            vz_set_rgb(cr, state_colour(k->state[q]));
            cairo_rectangle(cr, x, l->cy + q * l->ch, l->cw, l->ch);
            cairo_fill(cr);
        }
        /* white lines between the rows once they are tall enough to keep */
        if (l->ch >= 6) {
            vz_set_grey(cr, 1);
            cairo_set_line_width(cr, 1);
            for (int q = 1; q < f->nrows; q++) {
                double y = round(l->cy + q * l->ch) + 0.5;
                cairo_move_to(cr, x, y - 1);
                cairo_line_to(cr, x + l->cw, y - 1);
            }
            cairo_stroke(cr);
        }
        vz_set_grey(cr, 0.6);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, x + 0.5, l->cy + 0.5, l->cw - 1, gh - 1);
        cairo_stroke(cr);
        if (c + 1 == f->C)
            continue;
        /* the transition to the next chunk: an arrow, the rows it sends */
        double ya = l->cy + gh / 2 - l->fs_small;
        vz_set_grey(cr, 0.3);
        arrow(cr, x + l->cw + 4, x + l->pitch - 4, ya);
        sent_text(k, a, b, sizeof a);
        vz_font(cr, l->fs_small, 1);
        vz_set_grey(cr, 0.1);
        vz_text_at(cr, a, x + l->cw + l->gap / 2, ya + 7, 0.5, 0);
        if (b[0]) {
            vz_font(cr, l->fs_small, 0);
            vz_set_grey(cr, 0.35);
            vz_text_at(cr, b, x + l->cw + l->gap / 2, ya + 7 + 1.35 * l->fs_small, 0.5, 0);
        }
    }
    if (f->rows_note) {
        vz_font(cr, l->fs_small, 0);
        vz_set_grey(cr, 0.35);
        vz_text_at(cr, f->rows_note, l->W / 2, l->ya_note, 0.5, 0);
    }
}

/* --------------------------------------------------------------- panel b */

static void draw_schedule(cairo_t *cr, const ar_pfig *f, const layout *l)
{
    char t[512];
    snprintf(t, sizeof t, "(b) Schedule: %s" DOT "bubble %.1f%%", f->sched ? f->sched : "", 100 * f->bubble);
    vz_set_grey(cr, 0.1);
    vz_font(cr, l->fs_panel, 1);
    vz_text_at(cr, t, l->W / 2, l->yb_title, 0.5, 0);
    swatch sb[2 * 64 + 1];
    char txt[2 * 64 + 1][48];
    swatches_b(f, sb, txt);
    int nb = n_swatches_b(f);
    double w = legend_row(cr, sb, nb, 0, 0, l->fs, 0);
    legend_row(cr, sb, nb, (l->W - w) / 2, l->yb_legend, l->fs, 1);

    double mk = f->makespan > 0 ? f->makespan : 1, scale = (l->tx1 - l->tx) / mk;
    vz_axis ax = {.lo = 0, .hi = mk, .p0 = l->tx, .p1 = l->tx1};
    vz_ticks tk;
    vz_fit_ticks(cr, &tk, &ax, 1, l->fs);
    double ybot = l->ly + (f->P - 1) * l->lpitch + l->lh;
    /* lanes: light grey where the rank idles, a grid line per tick */
    for (int r = 0; r < f->P; r++) {
        vz_set_grey(cr, 0.955);
        cairo_rectangle(cr, l->tx, l->ly + r * l->lpitch, l->tx1 - l->tx, l->lh);
        cairo_fill(cr);
    }
    vz_set_grey(cr, 0.85);
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < tk.n; i++) {
        double x = vz_half(vz_ax_px(&ax, tk.v[i]));
        cairo_move_to(cr, x, l->ly);
        cairo_line_to(cr, x, ybot);
    }
    cairo_stroke(cr);
    for (int r = 0; r < f->P; r++) {
        double y = l->ly + r * l->lpitch;
        vz_font(cr, l->fs, 0);
        vz_set_grey(cr, 0.1);
        char rl[32];
        snprintf(rl, sizeof rl, "rank %d", r);
        vz_text_at(cr, rl, l->tx - 8, y + l->lh / 2, 1, 0.5);
        vz_font(cr, l->fs_small, 0);
        for (int i = 0; i < f->nops[r]; i++) {
            const ar_pfig_op *o = &f->ops[r][i];
            double x0 = l->tx + o->start * scale, bw = o->dur * scale;
            vz_rgb fill = op_colour(o->kind, o->virt, f->V);
            vz_set_rgb(cr, fill);
            cairo_rectangle(cr, x0, y, bw, l->lh);
            cairo_fill(cr);
            /* a white edge between neighbouring boxes */
            if (bw >= 4) {
                vz_set_grey(cr, 1);
                cairo_set_line_width(cr, 1);
                cairo_move_to(cr, x0 + 0.5, y);
                cairo_line_to(cr, x0 + 0.5, y + l->lh);
                cairo_stroke(cr);
            }
            char mb[16];
            snprintf(mb, sizeof mb, "%d", o->mb);
            if (bw >= vz_text_w(cr, mb) + 4) {
                ink_on(cr, fill);
                vz_text_at(cr, mb, x0 + bw / 2 + 0.5, y + l->lh / 2, 0.5, 0.5);
            }
        }
    }
    /* the time axis */
    vz_set_grey(cr, 0.15);
    cairo_set_line_width(cr, 1);
    double ya = vz_half(l->y_axis);
    cairo_move_to(cr, l->tx, ya);
    cairo_line_to(cr, l->tx1, ya);
    for (int i = 0; i < tk.n; i++) {
        double x = vz_half(vz_ax_px(&ax, tk.v[i]));
        cairo_move_to(cr, x, ya);
        cairo_line_to(cr, x, ya + 5);
    }
    cairo_stroke(cr);
    for (int i = 0; i < tk.n; i++)
        vz_label_at(cr, &tk.lab[i], l->fs, vz_ax_px(&ax, tk.v[i]), ya + 9, 0.5, 0);
    if (f->time_label) {
        vz_font(cr, l->fs, 0);
        vz_text_at(cr, f->time_label, (l->tx + l->tx1) / 2, ya + 9 + l->fs + 10, 0.5, 0);
    }
}

/* -------------------------------------------------------------- the file */

int ar_pipeline_figure(const char *path, const ar_pfig *f, ar_pfig_geom *geom, ar_err *e)
{
    if (f->P < 1 || f->V < 1 || f->C != f->P * f->V || f->nrows < 1)
        return ar_fail(e, "cannot plot '%s': %d ranks x %d virtual stages in %d chunks, %d rows is no pipeline",
                       path, f->P, f->V, f->C, f->nrows);
    if (f->V > 64) /* the legend's entries */
        return ar_fail(e, "cannot plot '%s': %d virtual stages are more than the figure's 64", path, f->V);
    /* the layout follows from the text: measured on a scratch surface */
    cairo_surface_t *scratch = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *mc = cairo_create(scratch);
    layout l;
    lay_out(mc, f, &l);
    cairo_destroy(mc);
    cairo_surface_destroy(scratch);

    ar_canvas cv;
    ar_fig_format fmt = f->meta ? f->meta->format : AR_FIG_AUTO;
    if (ar_canvas_open(&cv, path, (int)l.W, (int)l.H, fmt, e) != 0)
        return -1;
    cairo_t *cr = cv.cr;
    if (f->title) {
        vz_set_grey(cr, 0.1);
        vz_font(cr, l.fs_title, 1);
        vz_lines_at(cr, f->title, l.W / 2, l.pad, 0.5, 1.35 * l.fs_title);
    }
    draw_holdings(cr, f, &l);
    draw_schedule(cr, f, &l);
    if (geom) {
        double mk = f->makespan > 0 ? f->makespan : 1;
        *geom = (ar_pfig_geom){.cx = l.gx, .cpitch = l.pitch, .cw = l.cw, .cy = l.cy, .ch = l.ch,
                               .tx = l.tx, .tscale = (l.tx1 - l.tx) / mk, .ly = l.ly, .lpitch = l.lpitch,
                               .lh = l.lh, .W = (int)l.W, .H = (int)l.H};
    }
    return ar_canvas_close(&cv, path, f->title ? f->title : "pipeline", f->meta, e);
}
