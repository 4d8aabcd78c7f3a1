/* attnres ablate --depths / --tokens: a study along depth or token budget
 * (experiments/axis_study.h), the ablation of the command line at each
 * point, trained point by point with the sweep machinery (finished runs
 * reused, interrupted ones resumed), then the AttnRes-minus-baseline
 * differences against the axis. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../parallel/comm.h"
#include "../run/data.h"
#include "ablate_axis.h"
#include "cmds.h"
#include "signals.h"
#include "sweep_view.h"

static void print_table(const ar_axis_study *s, const ar_study_diff *d)
{
    int nv = s->ab[0].nvariants;
    printf("%-10s %-20s %5s %10s %21s %10s\n", s->axis == AR_AXIS_TOKENS ? "tokens" : "n_layer", "variant", "pairs",
           "diff", "95% CI", "p");
    for (int i = 0; i < s->n; i++)
        for (int v = 1; v < nv; v++) {
            const ar_study_diff *x = &d[i * nv + v];
            char ci[48] = "-", pv[24] = "-", df[24] = "-", at[32];
            if (isfinite(x->ci_lo))
                snprintf(ci, sizeof ci, "[%+.4f, %+.4f]", x->ci_lo, x->ci_hi);
            if (isfinite(x->t.p))
                snprintf(pv, sizeof pv, "%.3g", x->t.p);
            if (x->t.pairs >= 1)
                snprintf(df, sizeof df, "%+.4f", x->t.mean);
            if (s->axis == AR_AXIS_TOKENS)
                ar_tokens_label(s->value[i], at, sizeof at);
            else
                snprintf(at, sizeof at, "%ld", s->value[i]);
            printf("%-10s %-20s %5d %10s %21s %10s\n", at, s->ab[i].variant[v], x->t.pairs, df, ci, pv);
        }
}

/* "1M,4M,16M:1": budgets, each with an optional ":SEEDS" (0: the default). */
static int parse_budgets(const char *list, long **tok, int **seeds, int *n)
{
    *tok = NULL, *seeds = NULL, *n = 0;
    if (!list || !*list)
        return -1;
    char *copy = ar_xstrdup(list), *save = NULL;
    int cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    *tok = ar_xcalloc((size_t)cap, sizeof **tok);
    *seeds = ar_xcalloc((size_t)cap, sizeof **seeds);
    int rc = 0;
    for (char *it = strtok_r(copy, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(it, ':');
        if (colon) {
            *colon = 0;
            char *end;
            long k = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || k < 1 || k > 1000) {
                rc = -1;
                break;
            }
            (*seeds)[*n] = (int)k;
        }
        if (ar_tokens_parse(it, &(*tok)[*n]) != 0) {
            rc = -1;
            break;
        }
        (*n)++;
    }
    /* empty items ("1M,,4M") vanish in strtok: count the commas instead */
    if (rc == 0 && *n != cap)
        rc = -1;
    free(copy);
    return rc;
}

int cli_ablate_axis(ar_study_axis axis, const ar_config *cfg, const char *config, const char *variants, int seeds,
                    int jobs, const char *out_opt, const char *list, const char *usage)
{
    long *values = NULL;
    int *seeds_at = NULL, nd = 0, rc = AR_EXIT_FAIL;
    if (axis == AR_AXIS_TOKENS) {
        if (parse_budgets(list, &values, &seeds_at, &nd) != 0) {
            free(values);
            free(seeds_at);
            return cli_usage_error(usage, "'--tokens' expects a comma-separated list of token budgets such as "
                                          "1M,4M,16M (k, M, G: thousands, millions, billions), each optionally with "
                                          ":SEEDS (16M:1), got '%s'",
                                   list);
        }
    } else {
        int *dv = NULL;
        if (cli_parse_int_list(list, &dv, &nd) != 0) {
            free(dv);
            return cli_usage_error(usage, "'--depths' expects a comma-separated list of positive integers (n_layer "
                                          "values), got '%s'",
                                   list);
        }
        values = ar_xcalloc((size_t)nd + 1, sizeof *values);
        for (int i = 0; i < nd; i++)
            values[i] = dv[i];
        free(dv);
    }
    ar_err e = {{0}};
    ar_axis_study ds;
    int planned = ar_axis_study_plan(&ds, axis, cfg, values, seeds_at, nd, variants, seeds, &e);
    free(values);
    free(seeds_at);
    if (planned != 0) {
        cli_error("%s", e.msg);
        /* a wrong variant name or list is a wrong command line */
        return e.kind == AR_ERR_BAD_VALUE ? AR_EXIT_USAGE : AR_EXIT_FAIL;
    }
    ar_study_diff *diff = NULL;
    if (ar_data_check_train(&cfg->data, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    if (sweep_check_jobs(usage, jobs) != 0) {
        rc = AR_EXIT_USAGE;
        goto done;
    }
    int tok = axis == AR_AXIS_TOKENS;
    const char *what = tok ? "token-budget study" : "depth study";
    char outbuf[AR_PATH_MAX];
    const char *out = out_opt;
    if (!out) {
        sweep_default_out(config, tok ? "tokens-" : "depths-", "default", outbuf, sizeof outbuf);
        out = outbuf;
    }
    const ar_ablation *a0 = &ds.ab[0];
    int nruns = 0;
    for (int i = 0; i < ds.n; i++)
        nruns += ds.ab[i].sweep.nruns;
    printf("%s: %d %s x %d variants = %d runs into '%s', %d at a time:", what, ds.n, tok ? "budgets" : "depths",
           a0->nvariants, nruns, out, jobs);
    for (int i = 0; i < ds.n; i++) {
        char at[64];
        ar_axis_study_point(&ds, i, at, sizeof at);
        printf("%s %s (%d seed%s)", i ? "," : "", at, ds.ab[i].nseeds, ds.ab[i].nseeds > 1 ? "s" : "");
    }
    printf("; variants ");
    for (int v = 0; v < a0->nvariants; v++)
        printf("%s%s", v ? ", " : "", a0->variant[v]);
    printf("\n");
    fflush(stdout);
    cli_catch_signals(NULL, NULL);
    int failed = 0, interrupted = 0, finished = 0, trained = 0, reused = 0;
    for (int i = 0; i < ds.n && !failed && !interrupted; i++) {
        char dir[AR_PATH_MAX + 32], runs[AR_PATH_MAX + 64], at[64];
        ar_axis_study_dir(&ds, i, out, dir, sizeof dir);
        ar_axis_study_point(&ds, i, at, sizeof at);
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
            cli_error("%s: %s", at, e.msg);
            failed = 1;
        }
        interrupted |= res.interrupted;
    }
    /* the report of whatever has finished, also after an interruption or failure */
    diff = ar_xcalloc((size_t)ds.n * a0->nvariants, sizeof *diff);
    ar_err re = {{0}};
    int rep = ar_comm_world()->rank == 0 ? ar_axis_study_report(&ds, out, diff, &re) : 0;
    const char *stem = tok ? "token_study" : "depth_study";
    if (failed) {
        /* reported above */
    } else if (rep != 0) {
        cli_error("%s", re.msg);
    } else if (interrupted) {
        printf("interrupted: %d of %d runs finished, the others keep their checkpoints; run the same command "
               "again to continue\n",
               finished, nruns);
        rc = cli_interrupt_status();
    } else {
        print_table(&ds, diff);
        ar_axis_study_summary_print(&ds, diff);
        printf("%s done: %d runs (%d reused, %d trained); '%s/%s.csv', '%s/%s.md', '%s/%s.png', each %s's "
               "ablation in '%s/%s/'\n",
               what, finished, reused, trained, out, stem, out, stem, out, stem, tok ? "budget" : "depth", out,
               tok ? "T<tokens>" : "L<depth>");
        rc = AR_EXIT_OK;
    }
done:
    free(diff);
    ar_axis_study_free(&ds);
    return rc;
}
