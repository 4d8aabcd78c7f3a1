/* Figures of what depth mixing learned and of training dynamics: PNG files
 * read back with libpng (size, text chunks, pixel colours), the averaged
 * depth-attention weights against the model's own per-window weights, the
 * mixing matrices, metrics checks placed by line, and the figures a
 * training run leaves behind.
 *
 * Covers: viz/depth_figure.c, viz/heatmap.c, viz/dynamics.c, viz/canvas.c
 * and viz/png.c, lib/mixing.c (source lists, mixing matrices),
 * run/run_figures.c, and `attnres plot-depth-attn` / `plot-attn`
 * (cmd/plot_depth_attn.c). */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <math.h>
#include <png.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/csv.h"
#include "formats/run_record.h"
#include "lib/mixing.h"
#include "run/checkpoint.h"
#include "formats/tokens.h"
#include "modelutil.h"
#include "run/data.h"
#include "run/depth_stats.h"
#include "run/train.h"
#include "testutil.h"
#include "viz/depth_figure.h"
#include "viz/dynamics.h"
#include "viz/plot.h"

/* ------------------------------------------------------------- helpers */

/* A PNG decoded by libpng: size, RGB pixels and its text chunks. */
typedef struct {
    int w, h;
    unsigned char *rgb; /* w*h*3 */
    int ntext;
    char keys[16][80], texts[16][4096];
} decoded_png;

static void read_png(const char *path, decoded_png *p)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "%s was not written", path);
    unsigned char sig[8];
    cr_assert_eq(fread(sig, 1, 8, f), 8);
    cr_assert(png_sig_cmp(sig, 0, 8) == 0, "%s lacks the PNG signature", path);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info);
    cr_assert(setjmp(png_jmpbuf(png)) == 0, "libpng cannot read %s", path);
    png_init_io(png, f);
    png_set_sig_bytes(png, 8);
    png_read_png(png, info, PNG_TRANSFORM_STRIP_16 | PNG_TRANSFORM_PACKING | PNG_TRANSFORM_EXPAND, NULL);
    p->w = (int)png_get_image_width(png, info);
    p->h = (int)png_get_image_height(png, info);
    cr_assert_eq(png_get_color_type(png, info), PNG_COLOR_TYPE_RGB, "%s is not 8-bit RGB", path);
    png_bytepp rows = png_get_rows(png, info);
    p->rgb = malloc((size_t)p->w * p->h * 3);
    for (int y = 0; y < p->h; y++)
        memcpy(p->rgb + (size_t)y * p->w * 3, rows[y], (size_t)p->w * 3);
    png_textp tx;
    int n = 0;
    png_get_text(png, info, &tx, &n);
    for (int i = 0; i < n && i < 16; i++) {
        snprintf(p->keys[i], sizeof p->keys[i], "%s", tx[i].key);
        snprintf(p->texts[i], sizeof p->texts[i], "%s", tx[i].text);
    }
    p->ntext = n < 16 ? n : 16;
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
}

static const char *text_of(const decoded_png *p, const char *key)
{
    for (int i = 0; i < p->ntext; i++)
        if (strcmp(p->keys[i], key) == 0)
            return p->texts[i];
    return NULL;
}

static void expect_text(const decoded_png *p, const char *key, const char *want)
{
    const char *got = text_of(p, key);
    cr_assert(got != NULL, "no tEXt chunk '%s'", key);
    cr_assert_str_eq(got, want, "tEXt '%s'", key);
}

static void pixel(const decoded_png *p, double x, double y, int rgb[3])
{
    int xi = (int)floor(x), yi = (int)floor(y);
    cr_assert(xi >= 0 && xi < p->w && yi >= 0 && yi < p->h, "pixel (%d, %d) outside %d x %d", xi, yi, p->w, p->h);
    const unsigned char *q = p->rgb + ((size_t)yi * p->w + xi) * 3;
    for (int c = 0; c < 3; c++)
        rgb[c] = q[c];
}

/* The colour of cell (r, c) of a heatmap, sampled near its top left
 * corner (away from the value printed in its middle). */
static void cell_colour(const decoded_png *p, const ar_heat_geom *g, int r, int c, int gap_rows, int rgb[3])
{
    double y = g->y + r * g->ch + (gap_rows >= 0 && r >= gap_rows ? g->gap : 0);
    pixel(p, g->x + c * g->cw + 1.5, y + 1.5, rgb);
}

static void expect_colour(const int got[3], int r, int g, int b, const char *what)
{
    cr_assert(abs(got[0] - r) <= 1 && abs(got[1] - g) <= 1 && abs(got[2] - b) <= 1,
              "%s: colour #%02x%02x%02x, expected #%02x%02x%02x", what, got[0], got[1], got[2], r, g, b);
}

static ar_config tiny_cfg(ar_res_kind kind, int n_layer, int S)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = n_layer;
    c.model.n_head = 2;
    c.model.d_ff = 24;
    c.model.seq_len = 8;
    c.model.residual.kind = kind;
    c.model.residual.block_size = kind == AR_RES_BLOCK ? S : 0;
    c.model.residual.num_blocks = 0;
    c.train.threads = 1;
    return c;
}

static ar_model *tiny_model(const ar_config *c, int max_batch)
{
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c->model, ar_backend_cpu(), max_batch, &e), 0, "%s", e.msg);
    ar_model_init(m, 7);
    return m;
}

/* Non-zero pseudo-queries, so the weights are far from uniform. */
static void random_queries(ar_model *m, float scale)
{
    for (int i = 0; i < m->pt.n; i++)
        if (strstr(m->pt.p[i].name, "res.query"))
            tu_fill_uniform(ar_model_param(m, i), m->pt.p[i].numel, -scale, scale, 100 + (uint64_t)i);
}

static void write_text(const char *path, int lines)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < lines; i++)
        fprintf(f, "in the beginning %d was the word, and the word was %d.\n", i, i * 7 % 13);
    fclose(f);
}


TestSuite(figures, .timeout = 60);

/* --------------------------------------------------------- PNG encoding */

Test(figures, png_has_promised_size_and_metadata)
{
    const char *dir = tu_tmpdir();
    double x[3] = {0, 1, 2}, y[3] = {3, 2, 2.5};
    ar_series s = {.label = "loss", .x = x, .y = y, .n = 3};
    ar_fig_meta meta = {.run = "runs/a", .step = "1200", .command = "attnres plot runs/a"};
    ar_plot_opts o = {.title = "Loss", .width = 640, .height = 400, .meta = &meta};
    ar_err e = {{0}};
    const char *p = tu_path(dir, "loss.png");
    cr_assert_eq(ar_plot_lines(p, &o, &s, 1, &e), 0, "%s", e.msg);
    decoded_png f;
    read_png(p, &f);
    cr_assert_eq(f.w, 640);
    cr_assert_eq(f.h, 400);
    expect_text(&f, "Title", "Loss");
    expect_text(&f, "attnres:run", "runs/a");
    expect_text(&f, "attnres:step", "1200");
    expect_text(&f, "attnres:command", "attnres plot runs/a");
    cr_assert(text_of(&f, "Software") && strncmp(text_of(&f, "Software"), "attnres ", 8) == 0);
    free(f.rgb);

    /* Without a command the file records this process's own command line,
     * and a heatmap figure is exactly the size its layout reports. */
    double m[4] = {0, 1, 2, NAN};
    ar_heat_panel hp = {.title = "two\nlines", .m = m, .rows = 2, .cols = 2, .vmin = NAN, .vmax = NAN};
    ar_heat_geom g;
    ar_fig_meta m2 = {.run = "r", .step = "5"};
    p = tu_path(dir, "heat.png");
    cr_assert_eq(ar_plot_heatmaps(p, "two / lines", &hp, 1, 1, &m2, &g, &e), 0, "%s", e.msg);
    read_png(p, &f);
    cr_assert_eq(f.w, g.W);
    cr_assert_eq(f.h, g.H);
    expect_text(&f, "Title", "two / lines");
    /* (criterion runs each test in a worker process: its argv[0] is what
     * /proc/self/cmdline gives) */
    char self[4096], argv0[256] = "";
    ar_fig_command_line(self, sizeof self);
    FILE *cl = fopen("/proc/self/cmdline", "rb");
    cr_assert(cl != NULL);
    size_t k = fread(argv0, 1, sizeof argv0 - 1, cl);
    fclose(cl);
    argv0[k] = '\0';
    const char *a0 = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
    cr_assert(strncmp(self, a0, strlen(a0)) == 0, "command line '%s' does not start with '%s'", self, a0);
    expect_text(&f, "attnres:command", self);
    free(f.rgb);
}

Test(figures, svg_and_pdf_carry_their_metadata)
{
    const char *dir = tu_tmpdir();
    double x[2] = {0, 1}, y[2] = {1, 2};
    ar_series s = {.label = "a", .x = x, .y = y, .n = 2};
    ar_fig_meta meta = {.run = "runs/<b>", .step = "7", .command = "attnres plot"};
    ar_plot_opts o = {.title = "Loss & more", .meta = &meta};
    ar_err e = {{0}};
    cr_assert_eq(ar_plot_lines(tu_path(dir, "f.svg"), &o, &s, 1, &e), 0, "%s", e.msg);
    char *svg = tu_read_file(tu_path(dir, "f.svg"), NULL);
    cr_assert(svg && strstr(svg, "<svg"), "not an SVG");
    cr_assert(strstr(svg, "<title>Loss &amp; more</title>"), "no escaped title");
    cr_assert(strstr(svg, "run: runs/&lt;b&gt;; step: 7"), "no run in <desc>");
    free(svg);
    meta.format = AR_FIG_PDF; /* the format wins over the extension */
    cr_assert_eq(ar_plot_lines(tu_path(dir, "f.png"), &o, &s, 1, &e), 0, "%s", e.msg);
    size_t n;
    char *pdf = tu_read_file(tu_path(dir, "f.png"), &n);
    cr_assert(n > 5 && memcmp(pdf, "%PDF-", 5) == 0, "not a PDF");
    cr_assert(memmem(pdf, n, "Loss & more", 11) != NULL, "no title in the PDF metadata");
    free(pdf);
}

/* ------------------------------------------------------------- colours */

Test(figures, known_weights_map_to_known_colours)
{
    /* viridis: 0 -> #440154, 0.5 -> #21918c, 1 -> #fde725; NaN -> light grey */
    const char *dir = tu_tmpdir();
    double m[4] = {0, 0.5, 1, NAN};
    ar_heat_panel hp = {.m = m, .rows = 1, .cols = 4, .vmin = 0, .vmax = 1};
    ar_heat_geom g;
    ar_err e = {{0}};
    const char *p = tu_path(dir, "c.png");
    cr_assert_eq(ar_plot_heatmaps(p, "c", &hp, 1, 1, NULL, &g, &e), 0, "%s", e.msg);
    decoded_png f;
    read_png(p, &f);
    int c[3];
    cell_colour(&f, &g, 0, 0, -1, c);
    expect_colour(c, 0x44, 0x01, 0x54, "value 0");
    cell_colour(&f, &g, 0, 1, -1, c);
    expect_colour(c, 0x21, 0x91, 0x8c, "value 0.5");
    cell_colour(&f, &g, 0, 2, -1, c);
    expect_colour(c, 0xfd, 0xe7, 0x25, "value 1");
    cell_colour(&f, &g, 0, 3, -1, c);
    expect_colour(c, 240, 240, 240, "empty cell");
    free(f.rgb);

    /* The depth figure of a Full AttnRes model with L = 2 and weights
     * chosen by hand: mixer 1 [1], mixer 2 [0, 1], h_out [0.5, 0, 0.5].
     * Left panel rows: l = 1, then h_out below the gap; right panel: l = 2. */
    ar_config cfg = tiny_cfg(AR_RES_FULL, 1, 1);
    ar_depth_attn w;
    ar_depth_attn_alloc(&w, 2);
    const double rows[3][3] = {{1}, {0, 1}, {0.5, 0, 0.5}};
    for (int l = 1; l <= 3; l++) {
        w.n[l - 1] = l;
        for (int i = 0; i < l; i++)
            ar_depth_attn_row(&w, l)[i] = rows[l - 1][i];
    }
    ar_depth_run run = {.name = "hand", .step = 3, .cfg = cfg.model, .w = &w};
    ar_heat_geom dg[2];
    p = tu_path(dir, "depth.png");
    cr_assert_eq(ar_depth_figure(p, &run, 1, NULL, dg, &e), 0, "%s", e.msg);
    read_png(p, &f);
    cell_colour(&f, &dg[0], 0, 0, 1, c);
    expect_colour(c, 0xfd, 0xe7, 0x25, "l = 1, v_0 (weight 1)");
    cell_colour(&f, &dg[0], 1, 0, 1, c);
    expect_colour(c, 0x21, 0x91, 0x8c, "h_out, v_0 (weight 0.5)");
    cell_colour(&f, &dg[0], 1, 1, 1, c);
    expect_colour(c, 0x44, 0x01, 0x54, "h_out, v_1 (weight 0)");
    cell_colour(&f, &dg[1], 0, 1, -1, c);
    expect_colour(c, 0xfd, 0xe7, 0x25, "l = 2, v_1 (weight 1)");
    cell_colour(&f, &dg[1], 0, 2, -1, c);
    expect_colour(c, 240, 240, 240, "l = 2 has no v_2");
    free(f.rgb);
    ar_depth_attn_free(&w);
}

/* -------------------------------------------------- sources and matrices */

Test(figures, mixer_sources_match_the_model_and_cover_every_output_once)
{
    int cases[][3] = {{AR_RES_FULL, 3, 1}, {AR_RES_BLOCK, 3, 2}, {AR_RES_BLOCK, 3, 4}, {AR_RES_BLOCK, 4, 3},
                      {AR_RES_BLOCK, 2, 4}, {AR_RES_BLOCK, 3, 6}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ar_config c = tiny_cfg((ar_res_kind)cases[k][0], cases[k][1], cases[k][2]);
        ar_model *m = tiny_model(&c, 1);
        int L = m->L;
        ar_source src[32];
        for (int l = 1; l <= L + 1; l++) {
            int n = ar_mixer_sources(&c.model, l, src);
            cr_assert_eq(n, m->res->vt->n_sources(m->res, l), "S = %d, mixer %d: %d sources, the model has %d",
                         cases[k][2], l, n, m->res->vt->n_sources(m->res, l));
            /* the sources are consecutive runs v_0 .. v_{l-1} (h_out: .. v_L) */
            int next = 0;
            for (int s = 0; s < n; s++) {
                cr_assert_eq(src[s].first, next, "S = %d, mixer %d, source %d starts at v_%d", cases[k][2], l, s,
                             src[s].first);
                cr_assert_geq(src[s].last, src[s].first);
                cr_assert_eq(src[s].block, s);
                next = src[s].last + 1;
            }
            cr_assert_eq(next, l == L + 1 ? L + 1 : l, "S = %d, mixer %d covers v_0..v_%d", cases[k][2], l,
                         next - 1);
        }
        ar_model_free(m);
    }
    ar_config b = tiny_cfg(AR_RES_BASELINE, 2, 0);
    cr_assert_eq(ar_mixer_sources(&b.model, 2, NULL), 0);
}

/* swa: v_0 and the last `window` outputs before the mixer, each its own
 * column of Full's; the matrix gives them their weights and the outputs
 * before the window 0. */
Test(figures, swa_sources_slide_and_its_matrix_is_zero_before_the_window)
{
    ar_config c = tiny_cfg(AR_RES_SWA, 3, 0);
    c.model.residual.window = 2;
    ar_model *m = tiny_model(&c, 1);
    int L = m->L;
    cr_assert_eq(ar_mixer_columns(&c.model), L + 1);
    ar_source src[32];
    ar_depth_attn w;
    ar_depth_attn_alloc(&w, L);
    for (int l = 1; l <= L + 1; l++) {
        int n = ar_mixer_sources(&c.model, l, src);
        cr_assert_eq(n, m->res->vt->n_sources(m->res, l), "mixer %d: %d sources, the model has %d", l, n,
                     m->res->vt->n_sources(m->res, l));
        int last = l == L + 1 ? L : l - 1, want = 1 + (last < 2 ? last : 2);
        cr_assert_eq(n, want, "mixer %d: %d sources, want v_0 and %d", l, n, want - 1);
        cr_assert_eq(src[0].block, 0);
        for (int s = 1; s < n; s++) {
            int v = last - (n - 1 - s); /* the window ends at v_last */
            cr_assert(src[s].first == v && src[s].last == v && src[s].block == v,
                      "mixer %d, source %d: v_%d..v_%d in column %d, want v_%d", l, s, src[s].first, src[s].last,
                      src[s].block, v);
        }
        w.n[l - 1] = n;
        for (int s = 0; s < n; s++)
            ar_depth_attn_row(&w, l)[s] = 0.1 * l + 0.01 * s;
    }
    double M[64];
    ar_err e = {{0}};
    cr_assert_eq(ar_mixing_matrix(&c.model, NULL, &w, M, &e), 0, "%s", e.msg);
    /* h_5 (L = 6) reads [v_0, v_3, v_4]: v_1 and v_2 get 0; v_5 does not exist yet */
    const double *h5 = M + 4 * (L + 1), *a5 = ar_depth_attn_row(&w, 5);
    cr_expect_eq(h5[0], a5[0]);
    cr_expect_eq(h5[1], 0.0);
    cr_expect_eq(h5[2], 0.0);
    cr_expect_eq(h5[3], a5[1]);
    cr_expect_eq(h5[4], a5[2]);
    cr_expect(isnan(h5[5]) && isnan(h5[6]));
    ar_depth_attn_free(&w);
    ar_model_free(m);
}

Test(figures, mixing_matrices)
{
    ar_err e = {{0}};
    /* baseline: all ones below the diagonal, nothing above */
    ar_config b = tiny_cfg(AR_RES_BASELINE, 2, 0);
    double M[25];
    cr_assert_eq(ar_mixing_matrix(&b.model, NULL, NULL, M, &e), 0, "%s", e.msg);
    for (int l = 1; l <= 5; l++)
        for (int i = 0; i <= 4; i++) {
            double v = M[(l - 1) * 5 + i];
            if (i < l)
                cr_assert_eq(v, 1.0, "M[%d][%d] = %g", l, i, v);
            else
                cr_assert(isnan(v), "M[%d][%d] = %g above the diagonal", l, i, v);
        }
    /* block S = 2, L = 4: h_3 mixes [b_0, b_1] -> v_1 and v_2 both get b_1's
     * weight; h_4 mixes [b_0, b_1, b_2^1] */
    ar_config c = tiny_cfg(AR_RES_BLOCK, 2, 2);
    ar_depth_attn w;
    ar_depth_attn_alloc(&w, 4);
    for (int l = 1; l <= 5; l++) {
        w.n[l - 1] = ar_mixer_sources(&c.model, l, NULL);
        for (int s = 0; s < w.n[l - 1]; s++)
            ar_depth_attn_row(&w, l)[s] = 0.1 * l + 0.01 * s;
    }
    cr_assert_eq(ar_mixing_matrix(&c.model, NULL, &w, M, &e), 0, "%s", e.msg);
    /* Exact compares: the matrix copies each source's weight (0.1 l +
     * 0.01 s, as stored above) into the v_i it sums. */
    const double *h3 = M + 2 * 5, *h4 = M + 3 * 5, *out = M + 4 * 5;
    const double *a3 = ar_depth_attn_row(&w, 3), *a4 = ar_depth_attn_row(&w, 4), *a5 = ar_depth_attn_row(&w, 5);
    cr_assert_eq(h3[0], a3[0], "%.17g", h3[0]); /* 0.30 */
    cr_assert_eq(h3[1], a3[1], "%.17g", h3[1]); /* 0.31 */
    cr_assert_eq(h3[2], a3[1], "%.17g", h3[2]);
    cr_assert(isnan(h3[3]));
    cr_assert_eq(h4[3], a4[2], "v_3 is the partial sum b_2^1 of h_4"); /* 0.42 */
    cr_assert_eq(out[3], a5[2], "%.17g", out[3]);                      /* 0.52 */
    cr_assert_eq(out[4], a5[2], "%.17g", out[4]);
    /* weights that do not fit the scheme are an error, as is no weights */
    w.n[2] = 3;
    cr_assert_eq(ar_mixing_matrix(&c.model, NULL, &w, M, &e), -1);
    cr_assert(strstr(e.msg, "mixer 3"), "%s", e.msg);
    cr_assert_eq(ar_mixing_matrix(&c.model, NULL, NULL, M, &e), -1);
    ar_depth_attn_free(&w);
}

/* ------------------------------------------------------- the averaging */

Test(figures, zero_initialised_model_gives_uniform_rows)
{
    ar_res_kind kinds[2] = {AR_RES_FULL, AR_RES_BLOCK};
    int32_t x[200];
    for (int i = 0; i < 200; i++)
        x[i] = (i * 37 + 11) % 256;
    for (int k = 0; k < 2; k++) {
        ar_config c = tiny_cfg(kinds[k], 3, 4);
        ar_model *m = tiny_model(&c, 4); /* pseudo-queries zero: alpha = 1/n */
        /* n equal logits: the softmax's exponentials, their sum and the
         * normalisation give 1/n within a few roundings (fast_expf's couple
         * of ulp included): 8 u relative; the token averages of equal
         * values are exact in double. */
        ar_depth_attn w;
        ar_eval_result r;
        ar_err e = {{0}};
        tu_mem_eval me;
        cr_assert_eq(ar_depth_attn_measure(m, tu_mem_eval_of(&me, x, 200, 256), 0, &w, &r, &e), 0, "%s", e.msg);
        tu_mem_eval_free(&me);
        cr_assert_eq(r.windows, 24);
        cr_assert_eq(w.tokens, 24 * 8);
        for (int l = 1; l <= m->L + 1; l++) {
            int n = w.n[l - 1];
            cr_assert_gt(n, 0);
            for (int i = 0; i < n; i++)
                cr_assert_float_eq(ar_depth_attn_row(&w, l)[i], 1.0 / n, tu_gamma(8) / n, "%s mixer %d source %d",
                                   ar_res_kind_name(kinds[k]), l, i);
            cr_assert(n == m->L + 1 || isnan(ar_depth_attn_row(&w, l)[n]), "no NaN after the sources");
        }
        ar_depth_attn_free(&w);
        ar_model_free(m);
    }
    /* a baseline model has no weights */
    ar_config b = tiny_cfg(AR_RES_BASELINE, 2, 0);
    ar_model *m = tiny_model(&b, 2);
    ar_depth_attn w;
    ar_err e = {{0}};
    tu_mem_eval me;
    cr_assert_eq(ar_depth_attn_measure(m, tu_mem_eval_of(&me, x, 200, 256), 0, &w, NULL, &e), -1);
    tu_mem_eval_free(&me);
    cr_assert(strstr(e.msg, "baseline"), "%s", e.msg);
    ar_model_free(m);
}

/* The CSV of `attnres plot-depth-attn` against the model's own weights
 * (model.c's collect_stats, the eval path), averaged over 11 windows here.
 * The reference runs the command's code on its shapes (the model loaded
 * for batches of 8 windows: 8, then 3) with its one thread, so each
 * batch's mean weights are the same floats by construction and the token
 * average adds them in the same order; what remains is the CSV's %.9g
 * (within 5e-9 relative) read back by atof (2^-53 more). */
static void csv_matches_eval(ar_res_kind kind, int S)
{
    const char *dir = tu_tmpdir();
    ar_config c = tiny_cfg(kind, 2, S);
    ar_backend_cpu()->set_threads(1);
    ar_model *m = tiny_model(&c, 8);
    random_queries(m, 3.0f);
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 5, &e), 0, "%s", e.msg);
    char data[4200], csv[4200], fig[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "val.txt"));
    snprintf(csv, sizeof csv, "%s", tu_path(dir, "w.csv"));
    snprintf(fig, sizeof fig, "%s", tu_path(dir, "w.png"));
    write_text(data, 4);
    int st;
    char *out = tu_run_bin(&st, "plot-depth-attn '%s' --data '%s' --max-windows 11 --csv '%s' --out '%s' --threads 1",
                        dir, data, csv, fig);
    cr_assert_eq(st, 0, "plot-depth-attn failed:\n%s", out);
    free(out);

    int L = m->L;
    double *want = calloc((size_t)(L + 1) * (L + 1), sizeof(double));
    ar_tokens t;
    cr_assert_eq(ar_tokens_load(&t, data, &e), 0, "%s", e.msg);
    int32_t in[64], tg[64];
    for (int w0 = 0; w0 < 11; w0 += 8) {
        int B = 11 - w0 < 8 ? 11 - w0 : 8;
        for (int b = 0; b < B; b++)
            ar_eval_window(t.tok, (size_t)(w0 + b), 8, in + 8 * b, tg + 8 * b);
        m->collect_stats = 1;
        ar_model_forward(m, in, tg, B, NULL);
        for (size_t i = 0; i < (size_t)(L + 1) * (L + 1); i++)
            want[i] += (double)(B * 8) * m->depth_w[i]; /* the batch's mean weight times its tokens */
    }
    for (size_t i = 0; i < (size_t)(L + 1) * (L + 1); i++)
        want[i] /= 88.0;
    ar_tokens_free(&t);

    ar_csv *tab;
    cr_assert_eq(ar_csv_read(&tab, csv, &e), 0, "%s", e.msg);
    int cm = ar_csv_col(tab, "mixer"), cs = ar_csv_col(tab, "source"), cw = ar_csv_col(tab, "weight"),
        cp = ar_csv_col(tab, "partial"), ck = ar_csv_col(tab, "kind"), cst = ar_csv_col(tab, "step");
    cr_assert(cm >= 0 && cs >= 0 && cw >= 0 && cp >= 0 && ck >= 0 && cst >= 0, "missing CSV columns");
    int expect_rows = 0, partials = 0;
    for (int l = 1; l <= L + 1; l++)
        expect_rows += m->res->vt->n_sources(m->res, l);
    cr_assert_eq(tab->nrows, expect_rows);
    double worst = 0, spread = 0;
    for (int r = 0; r < tab->nrows; r++) {
        int l = atoi(ar_csv_cell(tab, r, cm)), s = atoi(ar_csv_cell(tab, r, cs));
        double got = atof(ar_csv_cell(tab, r, cw)), ref = want[(size_t)(l - 1) * (L + 1) + s];
        worst = fmax(worst, fabs(got - ref) / ((5e-9 + TU_U_DOUBLE) * fabs(ref)));
        spread = fmax(spread, fabs(got - 1.0 / m->res->vt->n_sources(m->res, l)));
        partials += atoi(ar_csv_cell(tab, r, cp));
        cr_assert_str_eq(ar_csv_cell(tab, r, ck), ar_res_kind_name(kind));
        cr_assert_str_eq(ar_csv_cell(tab, r, cst), "5");
    }
    cr_assert_leq(worst, 1, "CSV weights differ from the model's by %g times the bound", worst);
    cr_assert_gt(spread, 0.05, "the weights are nearly uniform: the test would prove little");
    /* Block S = 2: sublayers 2 and 4 read a partial sum; Full has none. */
    cr_assert_eq(partials, kind == AR_RES_BLOCK ? 2 : 0);
    ar_csv_free(tab);

    /* --matrix: each v_i gets the weight of its source */
    out = tu_run_bin(&st, "plot-attn '%s' --data '%s' --max-windows 11 --matrix --csv '%s' --out '%s' --threads 1", dir,
                  data, csv, fig);
    cr_assert_eq(st, 0, "plot-attn --matrix failed:\n%s", out);
    free(out);
    cr_assert_eq(ar_csv_read(&tab, csv, &e), 0, "%s", e.msg);
    cr_assert_eq(tab->nrows, (L + 1) * (L + 2) / 2);
    ar_source src[16];
    int cmm = ar_csv_col(tab, "m");
    for (int r = 0; r < tab->nrows; r++) {
        int l = atoi(ar_csv_cell(tab, r, cm)), i = atoi(ar_csv_cell(tab, r, cs));
        int n = ar_mixer_sources(&c.model, l, src), s = 0;
        while (s < n && src[s].last < i)
            s++;
        double ref = want[(size_t)(l - 1) * (L + 1) + s]; /* the matrix copies its source's weight */
        cr_assert_leq(fabs(atof(ar_csv_cell(tab, r, cmm)) - ref), (5e-9 + TU_U_DOUBLE) * fabs(ref), "M[%d][%d]", l, i);
    }
    ar_csv_free(tab);
    free(want);
    ar_model_free(m);
}

Test(figures, csv_equals_the_weights_eval_computes_block) { csv_matches_eval(AR_RES_BLOCK, 2); }
Test(figures, csv_equals_the_weights_eval_computes_full) { csv_matches_eval(AR_RES_FULL, 1); }

/* ------------------------------------------------------ metrics records */

Test(figures, corrupt_metrics_lines_are_placed)
{
    const char *dir = tu_tmpdir();
    const char *p = tu_path(dir, "metrics.jsonl");
    const char *bad[][2] = {
        {"{\"step\":1,\"tokens\":10,\"loss\":5}\n{\"step\":2,\"tok\n{\"step\":3,\"tokens\":30,\"loss\":4}\n", ":2: "},
        {"{\"step\":1,\"tokens\":10,\"loss\":5}\n\n{\"step\":2,\"tokens\":20,\"loss\":\"4.5\"}\n{\"step\":3}\n",
         ":3: 'loss' must be a number, not a string"},
        {"{\"step\":1,\"loss\":5,\"out_rms\":[1,2]}\n{\"step\":2,\"loss\":4,\"out_rms\":[1,2,3]}\n",
         ":2: 'out_rms' lists 3 sublayers, earlier records 2"},
        {"{\"step\":1,\"loss\":5,\"depth_attn\":[[1],[0.5,\"x\"]]}\n{\"step\":2}\n",
         ":1: 'depth_attn' mixer 2 item 2 must be a number, not a string"},
        {"[1,2]\n{\"step\":2}\n", ":1: expected a JSON object per line"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        tu_write_file(p, bad[k][0], strlen(bad[k][0]));
        ar_run_record r;
        ar_err e = {{0}};
        cr_assert_eq(ar_run_record_read(&r, p, &e), -1, "case %zu was accepted", k);
        char want[4400];
        snprintf(want, sizeof want, "%s%s", p, bad[k][1]);
        cr_assert(strstr(e.msg, want) != NULL, "case %zu: expected '%s' in '%s'", k, want, e.msg);
    }
    /* An unfinished last line is an interrupted append, not an error. */
    const char *ok = "{\"step\":1,\"tokens\":10,\"loss\":5,\"val_loss\":null}\n{\"step\":2,\"tok";
    tu_write_file(p, ok, strlen(ok));
    ar_run_record r;
    ar_err e = {{0}};
    cr_assert_eq(ar_run_record_read(&r, p, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n, 1);
    cr_assert_eq(r.nv, 0);
    ar_run_record_free(&r);
}

Test(figures, run_labels)
{
    const char *dir = tu_tmpdir();
    char buf[256], path[4300];
    snprintf(path, sizeof path, "%s/", dir);
    ar_run_label(path, buf, sizeof buf);
    const char *base = strrchr(dir, '/') + 1;
    cr_assert_str_eq(buf, base);
    ar_run_label(tu_path(dir, "model.safetensors"), buf, sizeof buf);
    cr_assert_str_eq(buf, base);
    ar_run_label("weights.safetensors", buf, sizeof buf);
    cr_assert_str_eq(buf, "weights");
}

/* ---------------------------------------------------- training figures */

Test(figures, training_leaves_depth_attn_and_dynamics_pngs)
{
    const char *dir = tu_tmpdir();
    char corpus[2048], run[4200];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(run, sizeof run, "%s", tu_path(dir, "run"));
    write_text(corpus, 80);
    ar_config c = tiny_cfg(AR_RES_BLOCK, 2, 2);
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.2;
    c.train.steps = 6;
    c.train.batch_size = 2;
    c.train.warmup = 1;
    c.train.eval_every = 3;
    c.train.eval_windows = 4;
    c.train.save_every = 0;
    c.train.log_every = 1;
    ar_train_opts o = {.out_dir = run};
    ar_train_result res;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &res, &e), 0, "%s", e.msg);
    decoded_png f;
    read_png(tu_path(run, "dynamics.png"), &f);
    cr_assert_eq(f.w, AR_DYNAMICS_ROUTING_WIDTH); /* AttnRes: with the routing panel */
    cr_assert_eq(f.h, AR_DYNAMICS_HEIGHT);
    expect_text(&f, "attnres:run", run);
    expect_text(&f, "attnres:step", "6");
    free(f.rgb);
    read_png(tu_path(run, "depth_attn.png"), &f);
    expect_text(&f, "attnres:run", run);
    expect_text(&f, "attnres:step", "6");
    cr_assert(strstr(text_of(&f, "Title"), "Depth attention weights"), "%s", text_of(&f, "Title"));
    free(f.rgb);
    read_png(tu_path(run, "loss.png"), &f);
    expect_text(&f, "Title", "Loss");
    free(f.rgb);

    /* `attnres plot` redraws the figure from the run; a baseline run has
     * no depth attention, which the heatmap command says. */
    int st;
    char *out = tu_run_bin(&st, "plot '%s' --out '%s'", run, tu_path(dir, "dyn.png"));
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    read_png(tu_path(dir, "dyn.png"), &f);
    cr_assert_eq(f.w, AR_DYNAMICS_ROUTING_WIDTH);
    free(f.rgb);
}
