/* The results-CSV reader: formats/csv.c, the table loading and fitting
 * of `attnres fit-scaling` (experiments/scaling.c) with its default columns, and
 * the grids of `attnres plot-sweep` (experiments/sweep_grid.c). */
#include "fuzz.h"

#include "../formats/csv.h"
#include "../experiments/scaling.h"
#include "../experiments/sweep_grid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_err e = {{0}};

    /* The table alone: every cell as a number. */
    ar_csv *c;
    if (ar_csv_read(&c, path, &e) != 0) {
        fuzz_check_message(&e, path);
    } else {
        for (int r = 0; r < c->nrows; r++)
            for (int k = 0; k < c->ncols; k++) {
                double x;
                if (ar_csv_num(c, r, k, &x, &e) != 0)
                    fuzz_check_message(&e, path);
            }
        if (ar_csv_require_col(c, "val_loss", &e) < 0)
            fuzz_check_message(&e, path);
        ar_csv_free(c);
    }

    /* As plot-sweep reads it: the report's axes, every cell in range. */
    {
        ar_axis_expr x, y;
        ar_sweep_grid g;
        FUZZ_CHECK(ar_axis_expr_parse("d_model/L_b", &x, &e) == 0 && ar_axis_expr_parse("n_head/L_b", &y, &e) == 0,
                   "axis expressions: %s", e.msg);
        const char *tables[] = {path};
        if (ar_sweep_grid_load(&g, tables, 1, &x, &y, NULL, &e) != 0) {
            fuzz_check_message(&e, path);
        } else {
            FUZZ_CHECK(g.nm >= 1 && g.nx >= 1 && g.ny >= 1, "an empty grid: %d x %d x %d", g.nm, g.nx, g.ny);
            for (int m = 0; m < g.nm; m++)
                FUZZ_CHECK(g.best[m] >= -1 && g.best[m] < g.nx * g.ny, "optimum %d out of range", g.best[m]);
            ar_sweep_grid_free(&g);
        }
    }

    /* As fit-scaling reads a sweep's results.csv. */
    ar_scaling s;
    const char *inputs[] = {path};
    if (ar_scaling_load(&s, inputs, 1, "variant", "pflops_days", "val_loss", &e) != 0) {
        fuzz_check_message(&e, path);
        return 0;
    }
    for (int form = 0; form < 2; form++) {
        if (ar_scaling_fit(&s, (ar_fit_form)form, NULL, 0, &e) != 0) {
            fuzz_check_message(&e, path);
            continue;
        }
        char *j = ar_scaling_json(&s);
        FUZZ_CHECK(j && j[0] == '{', "fit JSON: %s", j ? j : "(null)");
        free(j);
        FILE *devnull = fopen("/dev/null", "w");
        if (devnull) {
            ar_scaling_print(devnull, &s);
            fclose(devnull);
        }
    }
    ar_scaling_free(&s);
    return 0;
}
