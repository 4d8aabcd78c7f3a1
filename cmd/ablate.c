/* attnres ablate: parse the command line, plan the variant x seed runs
 * (experiments/ablate.c), train them with the sweep machinery (reusing finished
 * runs, resuming interrupted ones) and write the report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../experiments/ablate.h"
#include "../parallel/comm.h"
#include "../run/data.h"
#include "ablate_depths.h"
#include "cmds.h"
#include "options.h"
#include "signals.h"
#include "sweep_view.h"

static const char *usage =
    "attnres ablate [CONFIG] --variant LIST|all [--seeds K] [--block-sizes LIST] [--block-layouts L1[;L2...]] "
    "[--set KEY=VALUE]... "
    "[--out DIR] [--jobs J] [--device cpu|cuda] [--precision fp32|bf16] [--depths LIST]";

/* --block-layouts "2,2,4,8;4,4,4,4": one Block AttnRes variant a layout.
 * A malformed layout is a wrong command line (*rc: usage, the error's kind
 * AR_ERR_BAD_VALUE); a layout that does not fit the model fails like a bad
 * config. */
static int add_layouts(ar_ablation *ab, const ar_config *cfg, const char *layouts, int *rc)
{
    ar_err e = {{0}};
    if (ar_ablate_add_layouts(ab, cfg, layouts, &e) == 0)
        return 0;
    cli_error("%s", e.msg);
    *rc = e.kind == AR_ERR_BAD_VALUE ? AR_EXIT_USAGE : AR_EXIT_FAIL;
    return -1;
}

int cmd_ablate(int argc, char **argv)
{
    const char *config = NULL, *variants = NULL, *bs = NULL, *layouts = NULL, *depths = NULL;
    long jobs = 1, seeds = 1;
    int rc = AR_EXIT_USAGE, planned = 0, *bsz = NULL, nbs = 0;
    ar_ablation ab;
    ar_ablate_stat *stat = NULL;
    static const char *const own[] = {"--variant", "--block-sizes", "--block-layouts", "--jobs", "--seeds", "--depths",
                                      NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_OUT | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--variant"))
            variants = v;
        else if (!strncmp(a, "--variant=", 10))
            variants = a + 10;
        else if (!strcmp(a, "--block-sizes"))
            bs = v;
        else if (!strcmp(a, "--block-layouts"))
            layouts = v;
        else if (!strcmp(a, "--depths"))
            depths = v;
        else if (!strcmp(a, "--jobs") || !strcmp(a, "--seeds")) {
            if (cli_parse_long(a, v, 1, !strcmp(a, "--jobs") ? &jobs : &seeds) != 0) {
                fprintf(stderr, "usage: %s\n", usage);
                goto done;
            }
        } else if (cli_opts_argument(&so, a, &config) != 0)
            goto done;
    }
    if (so.bad)
        goto done;
    if (!variants && !bs && !layouts) {
        cli_usage_error(usage, "'--variant' is required (one of: %s, or all)", ar_ablate_variant_list());
        goto done;
    }
    if (bs && cli_parse_int_list(bs, &bsz, &nbs) != 0) {
        cli_usage_error(usage, "'--block-sizes' expects a comma-separated list of positive integers, got '%s'", bs);
        goto done;
    }
    rc = AR_EXIT_FAIL;
    ar_err e = {{0}};
    ar_config cfg;
    ar_config_defaults(&cfg);
    if ((config && ar_config_load(&cfg, config, &e) != 0) || cli_opts_apply(&so, &cfg, &e) != 0 ||
        ar_config_validate(&cfg, &e) != 0 || cli_check_device(&cfg, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    if (depths) { /* a depth study: cmd/ablate_depths.c */
        if (bs || layouts) {
            rc = cli_usage_error(usage, "'--depths' and '%s' do not go together",
                                 bs ? "--block-sizes" : "--block-layouts");
            goto done;
        }
        rc = cli_ablate_depths(&cfg, config, variants, (int)seeds, (int)jobs, so.out, depths, usage);
        goto done;
    }
    if (ar_ablate_plan(&ab, &cfg, variants ? variants : "baseline", (int)seeds, bsz, nbs, &e) != 0) {
        cli_error("%s", e.msg);
        /* a wrong variant name is a wrong command line */
        rc = e.kind == AR_ERR_BAD_VALUE ? AR_EXIT_USAGE : AR_EXIT_FAIL;
        goto done;
    }
    planned = 1;
    if (layouts && add_layouts(&ab, &cfg, layouts, &rc) != 0)
        goto done;
    if (ar_data_check_train(&cfg.data, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    char outbuf[AR_PATH_MAX], runs[AR_PATH_MAX + 8];
    const char *out = so.out;
    if (!out) {
        sweep_default_out(config, "ablate-", "default", outbuf, sizeof outbuf);
        out = outbuf;
    }
    snprintf(runs, sizeof runs, "%s/runs", out);
    printf("ablation of %d variants x %d seeds = %d runs into '%s', %ld at a time: ", ab.nvariants, ab.nseeds,
           ab.sweep.nruns, out, jobs);
    for (int v = 0; v < ab.nvariants; v++)
        printf("%s%s", v ? ", " : "", ab.variant[v]);
    printf("\n");
    fflush(stdout);
    sweep_warn_configs(&ab.sweep);
    if (sweep_check_jobs(usage, jobs) != 0) {
        rc = AR_EXIT_USAGE;
        goto done;
    }
    cli_catch_signals(NULL, NULL);
    sweep_view vw = {.s = &ab.sweep, .tty = jobs == 1 && isatty(STDOUT_FILENO)};
    ar_sweep_opts o = {.out_dir = runs, .jobs = (int)jobs, .event = sweep_view_event,
                       .progress = sweep_view_progress, .ud = &vw, .interrupt = &cli_interrupted};
    ar_sweep_result res;
    int st = ar_sweep_run_ranks(&ab.sweep, &o, ar_comm_world(), &res, &e);
    sweep_view_end(&vw);
    stat = ar_xcalloc((size_t)ab.nvariants, sizeof *stat);
    ar_err re = {{0}};
    /* the report of whatever has finished, also after an interruption or failure */
    int rep = ar_comm_world()->rank == 0 ? ar_ablate_report(&ab, out, stat, &re) : 0;
    if (st != 0) {
        cli_error("%s", e.msg);
    } else if (rep != 0) {
        cli_error("%s", re.msg);
    } else if (res.interrupted) {
        printf("interrupted: %d of %d runs finished, the others keep their checkpoints; run the same command "
               "again to continue\n",
               res.finished, ab.sweep.nruns);
        rc = cli_interrupt_status();
    } else {
        /* the losses of the final evaluations */
        printf("%-20s %5s %10s %8s %10s %10s %5s %10s %10s\n", "variant", "seeds", "final_loss", "std", "diff",
               "p_welch", "pairs", "paired", "p_paired");
        for (int v = 0; v < ab.nvariants; v++) {
            const ar_paired *pp = &stat[v].paired;
            printf("%-20s %5d %10.4f %8.4f %+10.4f ", ab.variant[v], stat[v].n, stat[v].mean, stat[v].sd,
                   stat[v].diff);
            if (isfinite(stat[v].p))
                printf("%10.3g", stat[v].p);
            else
                printf("%10s", "-");
            if (v == 0)
                printf(" %5s %10s", "-", "-");
            else if (pp->pairs >= 2)
                printf(" %5d %+10.4f", pp->pairs, pp->mean);
            else
                printf(" %5d %10s", pp->pairs, "-");
            if (v > 0 && isfinite(pp->p))
                printf(" %10.3g\n", pp->p);
            else
                printf(" %10s\n", "-");
        }
        printf("ablation done: %d runs (%d reused, %d trained); '%s/results.csv', '%s/results.md', "
               "'%s/ablation.png'%s%s%s\n",
               res.finished, res.skipped, res.trained, out, out, out, ab.nblock ? ", '" : "", ab.nblock ? out : "",
               ab.nblock ? "/block_sizes.png'" : "");
        rc = AR_EXIT_OK;
    }
done:
    free(stat);
    if (planned)
        ar_ablate_free(&ab);
    free(bsz);
    cli_opts_free(&so);
    return rc;
}
