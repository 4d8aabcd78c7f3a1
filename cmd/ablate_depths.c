/* attnres ablate --depths: a depth study (experiments/depth_study.h), the
 * ablation of the command line at each depth, trained depth by depth with
 * the sweep machinery (finished runs reused, interrupted ones resumed),
 * then the AttnRes-minus-baseline differences against depth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../parallel/comm.h"
#include "../run/data.h"
#include "../experiments/depth_study.h"
#include "ablate_depths.h"
#include "cmds.h"
#include "signals.h"
#include "sweep_view.h"

static void print_table(const ar_depth_study *s, const ar_depth_diff *d)
{
    int nv = s->ab[0].nvariants;
    printf("%-8s %-20s %5s %10s %21s %10s\n", "n_layer", "variant", "pairs", "diff", "95% CI", "p");
    for (int i = 0; i < s->ndepths; i++)
        for (int v = 1; v < nv; v++) {
            const ar_depth_diff *x = &d[i * nv + v];
            char ci[48] = "-", pv[24] = "-", df[24] = "-";
            if (isfinite(x->ci_lo))
                snprintf(ci, sizeof ci, "[%+.4f, %+.4f]", x->ci_lo, x->ci_hi);
            if (isfinite(x->t.p))
                snprintf(pv, sizeof pv, "%.3g", x->t.p);
            if (x->t.pairs >= 1)
                snprintf(df, sizeof df, "%+.4f", x->t.mean);
            printf("%-8d %-20s %5d %10s %21s %10s\n", s->depth[i], s->ab[i].variant[v], x->t.pairs, df, ci, pv);
        }
}

int cli_ablate_depths(const ar_config *cfg, const char *config, const char *variants, int seeds, int jobs,
                      const char *out_opt, const char *depths, const char *usage)
{
    int *dv = NULL, nd = 0, rc = AR_EXIT_FAIL;
    if (cli_parse_int_list(depths, &dv, &nd) != 0) {
        free(dv);
        return cli_usage_error(usage, "'--depths' expects a comma-separated list of positive integers (n_layer "
                                      "values), got '%s'",
                               depths);
    }
    ar_err e = {{0}};
    ar_depth_study ds;
    if (ar_depth_study_plan(&ds, cfg, dv, nd, variants, seeds, &e) != 0) {
        free(dv);
        cli_error("%s", e.msg);
        /* a wrong variant name or '--depths' list is a wrong command line */
        return e.kind == AR_ERR_BAD_VALUE ? AR_EXIT_USAGE : AR_EXIT_FAIL;
    }
    free(dv);
    ar_depth_diff *diff = NULL;
    if (ar_data_check_train(&cfg->data, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    if (sweep_check_jobs(usage, jobs) != 0) {
        rc = AR_EXIT_USAGE;
        goto done;
    }
    char outbuf[AR_PATH_MAX];
    const char *out = out_opt;
    if (!out) {
        sweep_default_out(config, "depths-", "default", outbuf, sizeof outbuf);
        out = outbuf;
    }
    const ar_ablation *a0 = &ds.ab[0];
    printf("depth study: %d depths x %d variants x %d seeds = %d runs into '%s', %d at a time: n_layer", ds.ndepths,
           a0->nvariants, a0->nseeds, ds.ndepths * a0->sweep.nruns, out, jobs);
    for (int i = 0; i < ds.ndepths; i++)
        printf("%s %d", i ? "," : "", ds.depth[i]);
    printf("; variants ");
    for (int v = 0; v < a0->nvariants; v++)
        printf("%s%s", v ? ", " : "", a0->variant[v]);
    printf("\n");
    fflush(stdout);
    cli_catch_signals(NULL, NULL);
    int failed = 0, interrupted = 0, finished = 0, trained = 0, reused = 0;
    for (int i = 0; i < ds.ndepths && !failed && !interrupted; i++) {
        char dir[AR_PATH_MAX + 32], runs[AR_PATH_MAX + 64];
        ar_depth_study_dir(&ds, i, out, dir, sizeof dir);
        snprintf(runs, sizeof runs, "%s/runs", dir);
        sweep_warn_configs(&ds.ab[i].sweep);
        sweep_view vw = {.s = &ds.ab[i].sweep, .tty = jobs == 1 && isatty(STDOUT_FILENO)};
        ar_sweep_opts o = {.out_dir = runs, .jobs = jobs, .event = sweep_view_event,
                           .progress = sweep_view_progress, .ud = &vw, .interrupt = &cli_interrupted};
        ar_sweep_result res;
        int st = ar_sweep_run_ranks(&ds.ab[i].sweep, &o, ar_comm_world(), &res, &e);
        sweep_view_end(&vw);
        finished += res.finished;
        trained += res.trained;
        reused += res.skipped;
        if (st != 0) {
            cli_error("depth %d: %s", ds.depth[i], e.msg);
            failed = 1;
        }
        interrupted |= res.interrupted;
    }
    /* the report of whatever has finished, also after an interruption or failure */
    diff = ar_xcalloc((size_t)ds.ndepths * a0->nvariants, sizeof *diff);
    ar_err re = {{0}};
    int rep = ar_comm_world()->rank == 0 ? ar_depth_study_report(&ds, out, diff, &re) : 0;
    if (failed) {
        /* reported above */
    } else if (rep != 0) {
        cli_error("%s", re.msg);
    } else if (interrupted) {
        printf("interrupted: %d of %d runs finished, the others keep their checkpoints; run the same command "
               "again to continue\n",
               finished, ds.ndepths * a0->sweep.nruns);
        rc = cli_interrupt_status();
    } else {
        print_table(&ds, diff);
        ar_depth_study_onset_print(&ds, diff);
        printf("depth study done: %d runs (%d reused, %d trained); '%s/depth_study.csv', '%s/depth_study.md', "
               "'%s/depth_study.png', each depth's ablation in '%s/L<depth>/'\n",
               finished, reused, trained, out, out, out, out);
        rc = AR_EXIT_OK;
    }
done:
    free(diff);
    ar_depth_study_free(&ds);
    return rc;
}
