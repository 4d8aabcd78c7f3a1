/* attnres plot: training-dynamics figures of one or more runs from their
 * metrics.jsonl (viz/dynamics.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/config.h"
#include "../formats/run_record.h"
#include "../viz/dynamics.h"
#include "cmds.h"

static const char *usage = "attnres plot RUN... [--out FILE] [--format png|svg|pdf]";

/* RUN is a run directory (its metrics.jsonl) or a metrics file itself. */
static void metrics_path(const char *run, char *out, size_t cap)
{
    struct stat st;
    if (stat(run, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(out, cap, "%s/metrics.jsonl", run);
    else
        snprintf(out, cap, "%s", run);
}

int cmd_plot(int argc, char **argv)
{
    const char *out = NULL;
    ar_fig_format format = AR_FIG_AUTO;
    const char **args = ar_xcalloc((size_t)argc + 1, sizeof *args);
    int nr = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--out") || !strcmp(a, "--format")) {
            if (i + 1 >= argc) {
                free(args);
                return cli_usage_error(usage, "'%s' needs a value", a);
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--out"))
                out = v;
            else if (cli_parse_format(usage, v, &format) != 0) {
                free(args);
                return AR_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1]) {
            free(args);
            return cli_usage_error(usage, "unknown option '%s'", a);
        } else {
            args[nr++] = a;
        }
    }
    if (nr == 0) {
        free(args);
        return cli_usage_error(usage, "missing the run (a run directory or its metrics.jsonl)");
    }
    if (nr > 1 && !out) {
        free(args);
        return cli_usage_error(usage, "several runs need '--out FILE' for their common figure");
    }
    if (format == AR_FIG_AUTO && out)
        format = ar_fig_format_of(out, AR_FIG_AUTO);
    ar_run_record *rec = ar_xcalloc((size_t)nr, sizeof *rec);
    ar_dyn_run *d = ar_xcalloc((size_t)nr, sizeof *d);
    char (*names)[256] = ar_xcalloc((size_t)nr, sizeof *names);
    ar_err e = {{0}};
    int rc = 0, loaded = 0;
    for (; loaded < nr && rc == 0; loaded++) {
        char path[AR_PATH_MAX + 32];
        metrics_path(args[loaded], path, sizeof path);
        rc = ar_run_record_read(&rec[loaded], path, &e);
        ar_run_label(args[loaded], names[loaded], sizeof names[loaded]);
        d[loaded] = (ar_dyn_run){.name = names[loaded], .path = args[loaded], .rec = &rec[loaded]};
    }
    if (rc != 0)
        loaded--; /* the failed one freed itself */
    for (int i = 0; i < nr && rc == 0; i++) /* one name per run: else the argument as given */
        for (int j = 0; j < nr; j++)
            if (i != j && !strcmp(d[i].name, d[j].name))
                d[i].name = args[i];
    char path[AR_PATH_MAX + 64];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else
        cli_figure_path(args[0], "dynamics", format, path, sizeof path);
    ar_fig_meta meta = {.format = format};
    if (rc == 0)
        rc = ar_dynamics_figure(path, d, nr, &meta, &e);
    if (rc == 0)
        printf("wrote '%s'\n", path);
    else
        cli_error("%s", e.msg);
    for (int k = 0; k < loaded; k++)
        ar_run_record_free(&rec[k]);
    free(rec);
    free(d);
    free(names);
    free(args);
    return rc == 0 ? AR_EXIT_OK : AR_EXIT_FAIL;
}
