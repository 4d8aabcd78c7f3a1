/* plot-sweep (experiments/sweep_plot.h, cmd/plot_sweep.c): axis expressions, the
 * grids read from a results table (cells, empty cells, optimum, common
 * compute), each error naming what was expected, the figure, and the
 * command through the binary. */
#include <criterion/criterion.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/sweep_plot.h"
#include "testutil.h"

static const char *HEAD = "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run,"
                          "final_val_loss,final_eval_windows,final_eval_tokens,n_layer,d_model,n_head\n";

/* A row of a run of shape (L, d, H) with final loss f (NULL: empty). */
static void row(char *buf, size_t cap, const char *variant, int L, int d, int H, const char *f)
{
    size_t u = strlen(buf);
    snprintf(buf + u, cap - u, "%s,L%dd%dh%d,1000,4096,1.2e13,1.4e-7,3.0,1.0,10,r,%s,4,64,%d,%d,%d\n", variant, L, d,
             H, f ? f : "", L, d, H);
}

static const char *write_table(const char *dir, const char *text)
{
    const char *p = tu_path(dir, "results.csv");
    tu_write_file(p, text, strlen(text));
    return p;
}

Test(plot_sweep, axis_expressions)
{
    ar_axis_expr x;
    ar_err e;
    cr_assert_eq(ar_axis_expr_parse("d_model/L_b", &x, &e), 0, "%s", e.msg);
    cr_assert_str_eq(x.num, "d_model");
    cr_assert_str_eq(x.den, "n_layer");
    cr_assert_eq(ar_axis_expr_parse(" n_head / L_b ", &x, &e), 0, "%s", e.msg);
    cr_assert_str_eq(x.num, "n_head");
    cr_assert_str_eq(x.den, "n_layer");
    cr_assert_eq(ar_axis_expr_parse("d_model", &x, &e), 0, "%s", e.msg);
    cr_assert_str_eq(x.num, "d_model");
    cr_assert_str_eq(x.den, "");
    cr_assert_eq(ar_axis_expr_parse("L_b", &x, &e), 0, "%s", e.msg);
    cr_assert_str_eq(x.num, "n_layer");
    const char *bad[] = {"", "/", "d_model/", "/n_layer", "d_model*2", "a/b/c", "d model", "d_model-n_head"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(ar_axis_expr_parse(bad[i], &x, &e), -1, "'%s' accepted", bad[i]);
        cr_assert(strstr(e.msg, "unknown axis expression") && strstr(e.msg, "COLUMN/COLUMN"), "%s", e.msg);
    }
}

/* Two methods over d/L in {8, 16} x H/L in {0.5, 1}: the cells where the
 * ratios put them, an empty cell where a run has no value and where no run
 * is, each method's own optimum. */
Test(plot_sweep, grid_cells_and_optimum)
{
    const char *dir = tu_tmpdir();
    char t[4096];
    snprintf(t, sizeof t, "%s", HEAD);
    row(t, sizeof t, "baseline", 4, 32, 2, "2.10");   /* d/L 8, H/L 0.5 */
    row(t, sizeof t, "baseline", 4, 64, 4, "2.00");   /* 16, 1 */
    row(t, sizeof t, "baseline", 8, 64, 8, "2.05");   /* 8, 1 */
    row(t, sizeof t, "baseline", 8, 128, 4, "nan");   /* 16, 0.5: no value */
    row(t, sizeof t, "block", 4, 32, 2, "1.90");      /* 8, 0.5: the block optimum */
    row(t, sizeof t, "block", 8, 128, 4, "1.95");     /* 16, 0.5 */
    row(t, sizeof t, "block", 4, 64, 4, "");          /* 16, 1: empty field */
    const char *path = write_table(dir, t);
    ar_axis_expr x, y;
    ar_err e;
    cr_assert_eq(ar_axis_expr_parse("d_model/L_b", &x, &e), 0);
    cr_assert_eq(ar_axis_expr_parse("n_head/L_b", &y, &e), 0);
    ar_sweep_grid g;
    cr_assert_eq(ar_sweep_grid_load(&g, (const char *[]){dir}, 1, &x, &y, NULL, &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.metric, "final_val_loss");
    cr_assert_eq(g.nm, 2);
    cr_assert_str_eq(g.method[0], "baseline");
    cr_assert_str_eq(g.method[1], "block");
    cr_assert_eq(g.nx, 2);
    cr_assert_eq(g.ny, 2);
    /* Exact compares: the axes are quotients of small integers that are
     * powers of two apart (32/4, 64/4, 4/4, 2/4), the common compute is the
     * midrange of two equal integers below 2^53, and each cell holds one
     * run's value, read by strtod: the double nearest its decimal. */
    cr_assert_eq(g.xs[0], 8);
    cr_assert_eq(g.xs[1], 16);
    cr_assert_eq(g.ys[0], 1); /* the largest on top */
    cr_assert_eq(g.ys[1], 0.5);
    cr_assert_eq(g.flops, 1.2e13);
    /* v[(m * ny + r) * nx + c] */
#define V(m, r, c) g.v[((m) * g.ny + (r)) * g.nx + (c)]
    cr_assert_eq(V(0, 1, 0), 2.10);
    cr_assert_eq(V(0, 0, 1), 2.00);
    cr_assert_eq(V(0, 0, 0), 2.05);
    cr_assert(isnan(V(0, 1, 1)), "a nan value leaves the cell empty");
    cr_assert_eq(V(1, 1, 0), 1.90);
    cr_assert_eq(V(1, 1, 1), 1.95);
    cr_assert(isnan(V(1, 0, 1)), "an empty value leaves the cell empty");
    cr_assert(isnan(V(1, 0, 0)), "no run: an empty cell");
#undef V
    cr_assert_eq(g.best[0], 0 * 2 + 1, "baseline's optimum is (H/L 1, d/L 16)");
    cr_assert_eq(g.best[1], 1 * 2 + 0, "block's optimum is (H/L 0.5, d/L 8)");

    /* the figure: one panel per method */
    const char *png = tu_path(dir, "fig.png");
    cr_assert_eq(ar_sweep_grid_plot(&g, &x, &y, png, NULL, &e), 0, "%s", e.msg);
    size_t n;
    char *b = tu_read_file(png, &n);
    cr_assert(b && n > 1000 && memcmp(b, "\x89PNG", 4) == 0);
    free(b);
    ar_sweep_grid_free(&g);

    /* another metric, plain columns: x d_model, y n_layer */
    cr_assert_eq(ar_axis_expr_parse("d_model", &x, &e), 0);
    cr_assert_eq(ar_axis_expr_parse("n_layer", &y, &e), 0);
    cr_assert_eq(ar_sweep_grid_load(&g, (const char *[]){path}, 1, &x, &y, "val_loss", &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.metric, "val_loss");
    cr_assert_eq(g.nx, 3); /* 32, 64, 128 */
    cr_assert_eq(g.ny, 2); /* 8, 4 */
    cr_assert_float_eq(g.ys[0], 8, 0);
    ar_sweep_grid_free(&g);
}

static void expect_load_error(const char *dir, const char *text, const char *xs, const char *ys, const char *metric,
                              const char *want1, const char *want2)
{
    if (text)
        write_table(dir, text);
    ar_axis_expr x, y;
    ar_err e;
    cr_assert_eq(ar_axis_expr_parse(xs, &x, &e), 0);
    cr_assert_eq(ar_axis_expr_parse(ys, &y, &e), 0);
    ar_sweep_grid g;
    cr_assert_eq(ar_sweep_grid_load(&g, (const char *[]){dir}, 1, &x, &y, metric, &e), -1, "accepted:\n%s", text ? text : "(none)");
    cr_assert(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)), "expected '%s' and '%s' in\n  %s", want1,
              want2 ? want2 : "", e.msg);
}

Test(plot_sweep, load_errors_name_the_file_and_what_was_expected)
{
    const char *dir = tu_tmpdir();
    char where[4200];
    snprintf(where, sizeof where, "%s/results.csv", dir);
    expect_load_error(dir, NULL, "d_model/L_b", "n_head/L_b", NULL, where, "not the output directory");
    /* a table from before the shape columns */
    expect_load_error(dir,
                      "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run\n"
                      "baseline,s1,1000,4096,1e12,1e-8,3.0,1.0,10,s1-baseline\n",
                      "d_model/L_b", "n_head/L_b", NULL, "no column 'd_model'", "the same 'attnres sweep' runs again");
    char t[4096];
    snprintf(t, sizeof t, "%s", HEAD);
    expect_load_error(dir, t, "d_model/L_b", "n_head/L_b", NULL, "no finished runs", where);
    row(t, sizeof t, "baseline", 4, 32, 2, "2.1");
    expect_load_error(dir, t, "d_model/width", "n_head/L_b", NULL, "no column 'width'", "--x 'd_model/width'");
    expect_load_error(dir, t, "d_model/L_b", "n_head/L_b", "loss", "no column 'loss'", "in --metric");
    /* the same cell twice for one method: both lines */
    row(t, sizeof t, "baseline", 8, 64, 4, "2.0");
    expect_load_error(dir, t, "d_model/L_b", "n_head/L_b", NULL, ":2 and line 3", "same cell");
    snprintf(t, sizeof t, "%s", HEAD);
    row(t, sizeof t, "baseline", 4, 32, 0, "2.1");
    expect_load_error(dir, t, "d_model/n_head", "n_layer", NULL, "divides by n_head = 0", ":2:");
    snprintf(t, sizeof t, "%s", HEAD);
    row(t, sizeof t, "baseline", 4, 32, 2, "abc");
    expect_load_error(dir, t, "d_model/L_b", "n_head/L_b", NULL, "expects a number, got 'abc'", ":2:");
}

/* The tables read as one on the axes L_b x n_head (the seed tests'). */
static int load_l_by_heads(ar_sweep_grid *g, const char *const *tables, int n, ar_err *e)
{
    ar_axis_expr x, y;
    cr_assert_eq(ar_axis_expr_parse("L_b", &x, e), 0);
    cr_assert_eq(ar_axis_expr_parse("n_head", &y, e), 0);
    return ar_sweep_grid_load(g, tables, n, &x, &y, NULL, e);
}

/* An ablate table (a `seed` column): the runs of one method in a cell are
 * averaged over the seeds with a value; the same seed twice is an error. */
Test(plot_sweep, seeds_in_a_cell_are_averaged)
{
    const char *dir = tu_tmpdir();
    const char *head = "variant,seed,final_val_loss,n_layer,d_model,n_head\n";
    char t[2048];
    snprintf(t, sizeof t, "%s"
             "baseline,1,2.0,4,64,2\nbaseline,2,2.3,4,64,2\nbaseline,3,,4,64,2\n"
             "baseline,1,1.5,8,64,2\n"
             "block,1,1.9,4,64,2\nblock,2,2.0,4,64,2\nblock,1,nan,8,64,2\n",
             head);
    write_table(dir, t);
    ar_err e;
    ar_sweep_grid g;
    cr_assert_eq(load_l_by_heads(&g, (const char *[]){dir}, 1, &e), 0, "%s", e.msg);
    cr_assert_eq(g.nm, 2);
    cr_assert_eq(g.nx, 2);
    cr_assert_eq(g.ny, 1);
    cr_assert_eq(g.seeds, 3);
    /* A mean of two decimals in double: each read within 2^-53 relative, the
     * sum and the division add two roundings, so within 4 x 2^-53 x 2.5 =
     * 1.1e-15 of the decimal mean; 1e-12 leaves 1e3 of room.  A cell of one
     * value is that value's double. */
    cr_assert_float_eq(g.v[0], 2.15, 1e-12, "baseline at L 4: mean of 2.0 and 2.3 (seed 3 has no value), got %g",
                       g.v[0]);
    cr_assert_eq(g.v[1], 1.5);
    cr_assert_float_eq(g.v[2], 1.95, 1e-12);
    cr_assert(isnan(g.v[3]), "block at L 8 has no value: empty cell, got %g", g.v[3]);
    cr_assert_eq(g.best[0], 1);
    cr_assert_eq(g.best[1], 0);
    ar_sweep_grid_free(&g);
    /* seed 2 twice for the baseline at L 4 */
    snprintf(t, sizeof t, "%sbaseline,1,2.0,4,64,2\nbaseline,2,2.3,4,64,2\nblock,2,2.0,4,64,2\nbaseline,2,2.2,4,64,2\n",
             head);
    expect_load_error(dir, t, "L_b", "n_head", NULL, ":3 and line 5", "with the same seed in the same cell");
}

/* One sweep per seed, given together: read as one table, each cell the
 * mean of its seeds; tables that cannot tell their runs apart (no `seed`
 * column, or the same seed) are an error naming both files and lines. */
Test(plot_sweep, tables_of_several_seeds_are_read_as_one)
{
    /* two sweep directories (tu_path's buffer is reused: copies) */
    char d1[4200], d2[4200];
    snprintf(d1, sizeof d1, "%s", tu_path(tu_tmpdir(), "seed1"));
    snprintf(d2, sizeof d2, "%s", tu_path(tu_tmpdir(), "seed2"));
    cr_assert_eq(mkdir(d1, 0755), 0);
    cr_assert_eq(mkdir(d2, 0755), 0);
    const char *head = "variant,final_val_loss,n_layer,d_model,n_head,seed\n";
    char t[1024];
    snprintf(t, sizeof t, "%sbaseline,2.0,4,64,2,1\nblock,1.8,4,64,2,1\nbaseline,1.6,8,64,2,1\n", head);
    write_table(d1, t);
    /* the second seed lacks one cell and adds a method */
    snprintf(t, sizeof t, "%sbaseline,2.4,4,64,2,2\nblock,1.9,4,64,2,2\nfull,1.7,8,64,2,2\n", head);
    write_table(d2, t);
    ar_err e;
    ar_sweep_grid g;
    cr_assert_eq(load_l_by_heads(&g, (const char *[]){d1, d2}, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(g.nm, 3);
    cr_assert_eq(g.nx, 2);
    cr_assert_eq(g.seeds, 2);
    /* means of two decimals: within 1.1e-15 (above); one value: exact */
    cr_assert_float_eq(g.v[0], 2.2, 1e-12, "baseline at L 4: mean of both seeds, got %g", g.v[0]);
    cr_assert_eq(g.v[1], 1.6, "baseline at L 8: seed 1 alone, got %g", g.v[1]);
    cr_assert_float_eq(g.v[2], 1.85, 1e-12);
    cr_assert(isnan(g.v[3]));
    cr_assert(isnan(g.v[4]), "full at L 4 has no run: %g", g.v[4]);
    cr_assert_eq(g.v[5], 1.7);
    ar_sweep_grid_free(&g);

    /* the same table twice: the same seeds */
    char want[8500];
    snprintf(want, sizeof want, "%s/results.csv:2 and %s/results.csv:2", d1, d1);
    cr_assert_eq(load_l_by_heads(&g, (const char *[]){d1, d1}, 2, &e), -1);
    cr_assert(strstr(e.msg, want) && strstr(e.msg, "with the same seed"), "%s", e.msg);
    /* a second table from before the seed column */
    snprintf(t, sizeof t, "variant,final_val_loss,n_layer,d_model,n_head\nbaseline,2.4,4,64,2\n");
    write_table(d2, t);
    snprintf(want, sizeof want, "%s/results.csv:2 and %s/results.csv:2", d1, d2);
    cr_assert_eq(load_l_by_heads(&g, (const char *[]){d1, d2}, 2, &e), -1);
    cr_assert(strstr(e.msg, want) && strstr(e.msg, "without a `seed` column"), "%s", e.msg);
    /* the metric of the first table is every table's */
    snprintf(t, sizeof t, "variant,val_loss,n_layer,d_model,n_head,seed\nbaseline,2.4,4,64,2,2\n");
    write_table(d2, t);
    cr_assert_eq(load_l_by_heads(&g, (const char *[]){d1, d2}, 2, &e), -1);
    cr_assert(strstr(e.msg, "no column 'final_val_loss'") && strstr(e.msg, "--metric"), "%s", e.msg);
}

/* The command: exit statuses, its one-line errors, the default figure. */
Test(plot_sweep, command_line)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char t[4096], cmd[9000];
    snprintf(t, sizeof t, "%s", HEAD);
    row(t, sizeof t, "baseline", 4, 32, 2, "2.10");
    row(t, sizeof t, "baseline", 4, 64, 4, "2.00");
    row(t, sizeof t, "block", 4, 32, 2, "1.90");
    row(t, sizeof t, "block", 4, 64, 4, "1.97");
    write_table(dir, t);
    int st;
    snprintf(cmd, sizeof cmd, "'%s' plot-sweep '%s' --x d_model/L_b --y n_head/L_b", bin, dir);
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "baseline") && strstr(out, "optimum final_val_loss 2.0000 at d_model/L_b = 16"), "%s", out);
    cr_assert(strstr(out, "block") && strstr(out, "optimum final_val_loss 1.9000 at d_model/L_b = 8"), "%s", out);
    free(out);
    size_t n;
    char *b = tu_read_file(tu_path(dir, "arch_sweep.png"), &n);
    cr_assert(b && memcmp(b, "\x89PNG", 4) == 0, "no default figure DIR/arch_sweep.png");
    free(b);

    snprintf(cmd, sizeof cmd, "'%s' plot-sweep '%s' --x d_model/L_b --y n_head/L_b --out '%s/f.svg'", bin, dir, dir);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    b = tu_read_file(tu_path(dir, "f.svg"), &n);
    cr_assert(b && strstr(b, "<svg"), "--out f.svg is not SVG");
    free(b);

    snprintf(cmd, sizeof cmd, "'%s' plot-sweep '%s' --x 'd_model*2' --y n_head", bin, dir);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "attnres: error: '--x': unknown axis expression 'd_model*2'"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' plot-sweep '%s' --x d_model", bin, dir);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--y' is required"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' plot-sweep '%s/none' --x d_model --y n_head", bin, dir);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "attnres: error: '") && strstr(out, "/none' not found"), "%s", out);
    free(out);
}

/* The runs' common compute: budgets met within half a step count as one
 * (within 2%: their midrange); two budgets do not. */
Test(plot_sweep, common_compute)
{
    const char *dir = tu_tmpdir();
    const char *second[] = {"1.1e13", "1.21e13"};
    for (int k = 0; k < 2; k++) {
        char t[4096];
        snprintf(t, sizeof t,
                 "%sbaseline,a,1000,4096,1.2e13,1e-7,3.0,1.0,10,r,2.1,4,64,4,32,2\n"
                 "baseline,b,1000,4096,%s,1e-7,3.0,1.0,10,r,2.0,4,64,4,64,4\n",
                 HEAD, second[k]);
        write_table(dir, t);
        ar_axis_expr x, y;
        ar_err e;
        ar_sweep_grid g;
        cr_assert_eq(ar_axis_expr_parse("d_model/L_b", &x, &e), 0);
        cr_assert_eq(ar_axis_expr_parse("n_head/L_b", &y, &e), 0);
        cr_assert_eq(ar_sweep_grid_load(&g, (const char *[]){dir}, 1, &x, &y, NULL, &e), 0, "%s", e.msg);
        if (k == 0)
            cr_assert(isnan(g.flops), "two budgets: %g", g.flops);
        else
            cr_assert_eq(g.flops, 1.205e13, "%.17g", g.flops); /* (1.2e13 + 1.21e13) / 2, exact */
        ar_sweep_grid_free(&g);
    }
}
