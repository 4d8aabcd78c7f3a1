/* attnres fit-scaling: parse the command line, call the library's fits,
 * print the report, draw the figure. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../experiments/scaling.h"
#include "../experiments/scaling_plot.h"
#include "cmds.h"

static const char *usage =
    "attnres fit-scaling RESULTS.csv|RUN_DIR... [--group COL] [--x COL] [--y COL] [--at C] "
    "[--form power|offset] [--baseline NAME] [--out FILE.png] [--json]";

int cmd_fit_scaling(int argc, char **argv)
{
    const char *gcol = "variant", *xcol = "pflops_days", *ycol = NULL, *png = NULL, *baseline = NULL;
    double at = NAN;
    ar_fit_form form = AR_FIT_POWER;
    int json = 0, ninputs = 0;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    static const char *const valued[] = {"--group", "--x", "--y", "--at", "--form", "--baseline", "--out"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes = 0;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
            takes |= !strcmp(a, valued[k]);
        if (takes && i + 1 >= argc) {
            free(inputs);
            return cli_usage_error(usage, "'%s' needs a value", a);
        }
        const char *v = takes ? argv[++i] : NULL;
        if (!strcmp(a, "--group"))
            gcol = v;
        else if (!strcmp(a, "--x"))
            xcol = v;
        else if (!strcmp(a, "--y"))
            ycol = v;
        else if (!strcmp(a, "--baseline"))
            baseline = v;
        else if (!strcmp(a, "--out"))
            png = v;
        else if (!strcmp(a, "--at")) {
            if (cli_parse_positive(usage, a, v, &at) != 0) {
                free(inputs);
                return AR_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--form")) {
            if (!strcmp(v, "power"))
                form = AR_FIT_POWER;
            else if (!strcmp(v, "offset"))
                form = AR_FIT_OFFSET;
            else {
                free(inputs);
                return cli_usage_error(usage, "'--form' expects power or offset, got '%s'", v);
            }
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (a[0] == '-' && a[1]) {
            free(inputs);
            return cli_usage_error(usage, "unknown option '%s'", a);
        } else
            inputs[ninputs++] = a;
    }
    if (ninputs == 0) {
        free(inputs);
        return cli_usage_error(usage, "no results table or sweep directory given");
    }
    ar_scaling s;
    ar_err e = {{0}};
    int rc = ar_scaling_load(&s, inputs, ninputs, gcol, xcol, ycol, &e);
    free(inputs);
    if (rc != 0) {
        cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    if (ar_scaling_fit(&s, form, baseline, at, &e) != 0 || (png && ar_scaling_plot(png, &s, &e) != 0)) {
        cli_error("%s", e.msg);
        ar_scaling_free(&s);
        return AR_EXIT_FAIL;
    }
    if (json) {
        char *j = ar_scaling_json(&s);
        printf("%s\n", j);
        free(j);
    } else {
        ar_scaling_print(stdout, &s);
        if (png)
            printf("\nfigure: %s\n", png);
    }
    ar_scaling_free(&s);
    return AR_EXIT_OK;
}
