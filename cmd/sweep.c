/* attnres sweep: parse the command line, load the grid, call
 * ar_sweep_run_all, show what happens. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../formats/sweep.h"
#include "../parallel/comm.h"
#include "../experiments/sweep.h"
#include "../run/data.h"
#include "cmds.h"
#include "options.h"
#include "signals.h"
#include "sweep_view.h"

static const char *usage = "attnres sweep [CONFIG] [--set KEY=VALUE]... [--out DIR] [--jobs J] [--sizes LIST] "
                           "[--dry-run] [--device cpu|cuda] [--precision fp32|bf16]";

static void print_plan(const ar_sweep *s, const char *out, int jobs)
{
    printf("sweep of %d runs (%d sizes x %d variants) into '%s', %d at a time\n", s->nruns, s->nsizes,
           s->nvariants, out, jobs);
    printf("%-24s %6s %3s %9s %8s %11s %11s %10s\n", "run", "d", "n", "N", "steps", "tokens", "FLOPs",
           "PF-days");
    double total = 0;
    for (int i = 0; i < s->nruns; i++) {
        const ar_sweep_run *r = &s->runs[i];
        ar_sweep_compute c;
        ar_err e;
        if (ar_sweep_compute_of(r, &c, &e) != 0)
            continue;
        total += c.flops;
        printf("%-24s %6d %3d %9ld %8ld %11ld %11.3e %10.3e\n", r->name, r->cfg.model.d_model, r->cfg.model.n_layer,
               c.nonembed_params, r->cfg.train.steps, r->tokens, c.flops, c.pflops_days);
    }
    printf("total %.3e FLOPs (%.3e PFLOP/s-days)\n", total, total / (1e15 * 86400));
    fflush(stdout);
}

/* A missing device or data fails now, not after the first run's setup:
 * 0, or -1 after the error message. */
static int check_runs(const ar_sweep *s, ar_err *e)
{
    for (int i = 0; i < s->nruns; i++) {
        if (cli_check_device(&s->runs[i].cfg, e) != 0) {
            cli_error("run '%s': %s", s->runs[i].name, e->msg);
            return -1;
        }
        if (ar_data_check_train(&s->runs[i].cfg.data, e) != 0) {
            cli_error("run '%s': %s", s->runs[i].name, e->msg);
            return -1;
        }
    }
    return 0;
}

int cmd_sweep(int argc, char **argv)
{
    const char *config = NULL, *sizes = NULL;
    long jobs = 1;
    int dry = 0, rc = AR_EXIT_USAGE, loaded = 0;
    ar_sweep s;
    static const char *const own[] = {"--jobs", "--sizes", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_OUT | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--jobs")) {
            if (cli_parse_long(a, v, 1, &jobs) != 0) {
                fprintf(stderr, "usage: %s\n", usage);
                goto done;
            }
        } else if (!strcmp(a, "--sizes")) {
            if (!*v) {
                cli_usage_error(usage, "'--sizes' expects a comma-separated list of the grid's size names");
                goto done;
            }
            sizes = v;
        } else if (!strcmp(a, "--dry-run"))
            dry = 1;
        else if (cli_opts_argument(&so, a, &config) != 0)
            goto done;
    }
    if (so.bad)
        goto done;
    rc = AR_EXIT_FAIL;
    /* --device and --precision override every run's config */
    cli_opts_device_as_sets(&so);
    ar_err e = {{0}};
    loaded = (config ? ar_sweep_load(&s, config, so.sets, so.nsets, &e)
                     : ar_sweep_parse(&s, ar_sweep_builtin_yaml, strlen(ar_sweep_builtin_yaml), AR_SWEEP_BUILTIN_NAME,
                                      NULL, so.sets, so.nsets, &e)) == 0;
    if (!loaded) {
        cli_error("%s", e.msg);
        goto done;
    }
    if (sizes && ar_sweep_keep_sizes(&s, sizes, &e) != 0) {
        cli_usage_error(usage, "%s: %s", config ? config : AR_SWEEP_BUILTIN_NAME, e.msg);
        rc = AR_EXIT_USAGE;
        goto done;
    }
    if (ar_sweep_resolve_budgets(&s, &e) != 0) {
        cli_error("%s: %s", config ? config : AR_SWEEP_BUILTIN_NAME, e.msg);
        goto done;
    }
    if (check_runs(&s, &e) != 0)
        goto done;
    char outbuf[AR_PATH_MAX];
    const char *out = so.out;
    if (!out) {
        sweep_default_out(config, "", "scaling", outbuf, sizeof outbuf);
        out = outbuf;
    }
    print_plan(&s, out, (int)jobs);
    sweep_warn_configs(&s);
    if (dry) {
        rc = AR_EXIT_OK;
        goto done;
    }
    if (sweep_check_jobs(usage, jobs) != 0) {
        rc = AR_EXIT_USAGE;
        goto done;
    }
    cli_catch_signals(NULL, NULL);
    sweep_view v = {.s = &s, .tty = jobs == 1 && isatty(STDOUT_FILENO)};
    ar_sweep_opts o = {.out_dir = out, .jobs = (int)jobs, .event = sweep_view_event,
                       .progress = sweep_view_progress, .ud = &v, .interrupt = &cli_interrupted};
    ar_sweep_result res;
    int st = ar_sweep_run_ranks(&s, &o, ar_comm_world(), &res, &e);
    sweep_view_end(&v);
    if (st != 0) {
        cli_error("%s", e.msg);
    } else if (res.interrupted) {
        printf("interrupted: %d of %d runs finished, the others keep their checkpoints; run the same "
               "command again to continue\n",
               res.finished, s.nruns);
        rc = cli_interrupt_status();
    } else {
        printf("sweep done: %d runs (%d reused, %d trained); results in '%s/results.csv'\n"
               "fit the scaling laws with: attnres fit-scaling %s --out %s/scaling.png\n",
               res.finished, res.skipped, res.trained, out, out, out);
        rc = AR_EXIT_OK;
    }
done:
    if (loaded)
        ar_sweep_free(&s);
    cli_opts_free(&so);
    return rc;
}
