/* PNG figures: valid files of the requested size with visible content,
 * log axes, errors for nothing to draw, atomic writes. */
#include <cairo.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "viz/plot.h"

static const char *dir;

static void setup(void)
{
    dir = tu_tmpdir();
}

TestSuite(plot, .init = setup);

static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    cr_assert(dp != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(dp);
    return n;
}

/* Checks the PNG signature, decodes the file, and returns its size and the
 * number of distinct pixel values (a blank canvas has one). */
static int check_png(const char *path, int *w, int *h)
{
    size_t n;
    unsigned char *raw = (unsigned char *)tu_read_file(path, &n);
    cr_assert(raw != NULL, "%s was not written", path);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    cr_assert(n > 8 && memcmp(raw, sig, 8) == 0, "%s lacks the PNG signature", path);
    free(raw);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    cr_assert_eq(cairo_surface_status(s), CAIRO_STATUS_SUCCESS, "cairo cannot read %s", path);
    *w = cairo_image_surface_get_width(s);
    *h = cairo_image_surface_get_height(s);
    cairo_surface_flush(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s), distinct = 1;
    uint32_t first = *(const uint32_t *)d, other = first;
    for (int y = 0; y < *h && distinct < 3; y++)
        for (int x = 0; x < *w; x++) {
            uint32_t p = *(const uint32_t *)(d + (size_t)y * stride + 4 * (size_t)x) & 0xffffff;
            if (p != (first & 0xffffff) && (distinct == 1 || p != other)) {
                other = p;
                distinct++;
            }
        }
    cairo_surface_destroy(s);
    return distinct;
}

Test(plot, line_plot_is_a_png_of_the_requested_size)
{
    enum { N = 200 };
    double x[N], y1[N], y2[N];
    for (int i = 0; i < N; i++) {
        x[i] = i * 10;
        y1[i] = 5.5 * exp(-i / 40.0) + 1.2 + 0.05 * sin(i);
        y2[i] = i % 20 == 0 ? 5.6 * exp(-i / 45.0) + 1.3 : NAN;
    }
    ar_series s[2] = {{.label = "train", .x = x, .y = y1, .n = N},
                      {.label = "validation", .x = x, .y = y2, .n = N, .markers = 1}};
    ar_plot_opts o = {.title = "Loss", .xlabel = "step", .ylabel = "cross-entropy (nats/token)",
                      .width = 640, .height = 400};
    const char *p = tu_path(dir, "loss.png");
    ar_err e = {{0}};
    cr_assert_eq(ar_plot_lines(p, &o, s, 2, &e), 0, "%s", e.msg);
    int w, h;
    cr_assert_geq(check_png(p, &w, &h), 3, "the figure looks blank");
    cr_assert_eq(w, 640);
    cr_assert_eq(h, 400);
    /* 0 x 0 asks for the default size */
    o.width = o.height = 0;
    cr_assert_eq(ar_plot_lines(p, &o, s, 2, &e), 0, "%s", e.msg);
    check_png(p, &w, &h);
    cr_assert_eq(w, 900);
    cr_assert_eq(h, 560);
    cr_assert_eq(count_entries(dir), 1, "no temporary file may remain");
}

Test(plot, log_axes_skip_non_positive_values)
{
    enum { N = 8 };
    double x[N], y[N], y2[N];
    for (int i = 0; i < N; i++) {
        x[i] = pow(10, 15 + i * 0.5); /* compute, FLOPs */
        y[i] = 4.0 * pow(x[i] / 1e15, -0.05);
        y2[i] = 3.8 * pow(x[i] / 1e15, -0.055);
    }
    x[0] = 0;   /* not drawable on a log x axis */
    y2[3] = -1; /* not drawable on a log y axis */
    ar_series s[2] = {{.label = "baseline", .x = x, .y = y, .n = N, .markers = 1},
                      {.label = "block AttnRes", .x = x, .y = y2, .n = N, .markers = 1}};
    ar_plot_opts o = {.title = "Scaling", .xlabel = "compute (FLOPs)", .ylabel = "validation loss",
                      .logx = 1, .logy = 1};
    const char *p = tu_path(dir, "scaling.png");
    ar_err e = {{0}};
    cr_assert_eq(ar_plot_lines(p, &o, s, 2, &e), 0, "%s", e.msg);
    int w, h;
    cr_assert_geq(check_png(p, &w, &h), 3);
    double bad[2] = {-1, 0};
    ar_series only_bad = {.label = "x", .x = x, .y = bad, .n = 2};
    cr_assert_eq(ar_plot_lines(tu_path(dir, "bad.png"), &o, &only_bad, 1, &e), -1);
    cr_assert(strstr(e.msg, "log"), "%s", e.msg);
}

Test(plot, nothing_finite_is_an_error)
{
    double x[3] = {1, 2, 3}, y[3] = {NAN, INFINITY, NAN};
    ar_series s = {.label = "nan", .x = x, .y = y, .n = 3};
    ar_plot_opts o = {.title = "t"};
    ar_err e = {{0}};
    const char *p = tu_path(dir, "nan.png");
    cr_assert_eq(ar_plot_lines(p, &o, &s, 1, &e), -1);
    cr_assert(strstr(e.msg, "no finite points"), "%s", e.msg);
    cr_assert_eq(ar_plot_lines(p, &o, &s, 0, &e), -1);
    double m[4] = {NAN, NAN, NAN, NAN};
    cr_assert_eq(ar_plot_heatmap(p, "t", "x", "y", m, 2, 2, NULL, NULL, &e), -1);
    cr_assert(strstr(e.msg, "no finite values"), "%s", e.msg);
    cr_assert_eq(count_entries(dir), 0);
}

Test(plot, single_point_and_constant_series_still_draw)
{
    double x[1] = {5}, y[1] = {2};
    ar_series s = {.label = "one", .x = x, .y = y, .n = 1};
    ar_plot_opts o = {0};
    ar_err e = {{0}};
    const char *p = tu_path(dir, "one.png");
    cr_assert_eq(ar_plot_lines(p, &o, &s, 1, &e), 0, "%s", e.msg);
    int w, h;
    cr_assert_geq(check_png(p, &w, &h), 3);
}

Test(plot, heatmap_is_a_png_with_content)
{
    enum { R = 13, C = 13 };
    double m[R * C];
    const char *rl[R], *cl[C];
    static char rbuf[R][16], cbuf[C][16];
    for (int r = 0; r < R; r++) {
        snprintf(rbuf[r], 16, r == R - 1 ? "output" : "%d %s", r + 1, r % 2 ? "mlp" : "attn");
        rl[r] = rbuf[r];
        double sum = 0;
        for (int c = 0; c < C; c++) {
            m[r * C + c] = c <= r ? exp(-0.3 * (r - c)) + (c == 0) : NAN;
            sum += c <= r ? m[r * C + c] : 0;
        }
        for (int c = 0; c <= r; c++)
            m[r * C + c] /= sum;
    }
    for (int c = 0; c < C; c++) {
        snprintf(cbuf[c], 16, c == 0 ? "emb" : "%d", c);
        cl[c] = cbuf[c];
    }
    const char *p = tu_path(dir, "depth.png");
    ar_err e = {{0}};
    cr_assert_eq(ar_plot_heatmap(p, "Depth attention weights", "source (0 = embedding)", "mixer (sublayer input)", m,
                                 R, C, rl, cl, &e),
                 0, "%s", e.msg);
    int w, h;
    cr_assert_geq(check_png(p, &w, &h), 3);
    cr_assert(w > C * 10 && h > R * 10, "%d x %d is too small for the matrix", w, h);
    /* index labels, a constant matrix and a wide one */
    double flat[6] = {1, 1, 1, 1, 1, 1};
    cr_assert_eq(ar_plot_heatmap(p, NULL, NULL, NULL, flat, 2, 3, NULL, NULL, &e), 0, "%s", e.msg);
    double *big = malloc(sizeof(double) * 40 * 300);
    for (int i = 0; i < 40 * 300; i++)
        big[i] = sin(i * 0.01) * (i % 300);
    cr_assert_eq(ar_plot_heatmap(p, "wide", "col", "row", big, 40, 300, NULL, NULL, &e), 0, "%s", e.msg);
    free(big);
    cr_assert_geq(check_png(p, &w, &h), 3);
    cr_assert_eq(count_entries(dir), 1);
}

Test(plot, failed_write_leaves_no_temporary_file)
{
    double x[2] = {0, 1}, y[2] = {0, 1};
    ar_series s = {.label = "a", .x = x, .y = y, .n = 2};
    ar_plot_opts o = {0};
    ar_err e = {{0}};
    const char *missing = tu_path(dir, "no/such/dir/fig.png");
    cr_assert_eq(ar_plot_lines(missing, &o, &s, 1, &e), -1);
    cr_assert(strstr(e.msg, "cannot write") && strstr(e.msg, "no such file"), "%s", e.msg);
    /* The temporary file can be written but not renamed over a directory:
     * it must be removed again. */
    const char *sub = tu_path(dir, "taken.png");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(ar_plot_lines(sub, &o, &s, 1, &e), -1);
    cr_assert(strstr(e.msg, "cannot write"), "%s", e.msg);
    double m[1] = {1};
    cr_assert_eq(ar_plot_heatmap(sub, "t", NULL, NULL, m, 1, 1, NULL, NULL, &e), -1);
    cr_assert_eq(count_entries(dir), 1, "only the directory may remain");
}
