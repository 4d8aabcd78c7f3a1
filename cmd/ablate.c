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
#include "../experiments/table4.h"
#include "../formats/json.h"
#include "../parallel/comm.h"
#include "../run/data.h"
#include "ablate_axis.h"
#include "cmds.h"
#include "options.h"
#include "signals.h"
#include "sweep_view.h"

static const char *usage =
    "attnres ablate [CONFIG] --variant LIST|all [--seeds K] [--block-sizes LIST] [--block-layouts L1[;L2...]] "
    "[--set KEY=VALUE]... "
    "[--out DIR] [--jobs J] [--device cpu|cuda] [--precision fp32|bf16] [--depths LIST] [--tokens LIST] [--json]";

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

/* The command line, as parsed. */
typedef struct {
    const char *config, *variants, *bs, *layouts, *depths, *tokens;
    long jobs, seeds;
    int *bsz, nbs; /* --block-sizes parsed; the caller frees bsz */
    int json;      /* --json: the results as JSON on stdout, progress on stderr */
} ablate_args;

/* The command's own options and CONFIG into a; 0, or -1 after the usage
 * error. */
static int parse_args(cli_opts *so, ablate_args *a)
{
    for (const char *o, *v; (o = cli_opts_next(so, &v));) {
        if (!strcmp(o, "--variant"))
            a->variants = v;
        else if (!strncmp(o, "--variant=", 10))
            a->variants = o + 10;
        else if (!strcmp(o, "--block-sizes"))
            a->bs = v;
        else if (!strcmp(o, "--block-layouts"))
            a->layouts = v;
        else if (!strcmp(o, "--depths"))
            a->depths = v;
        else if (!strcmp(o, "--tokens"))
            a->tokens = v;
        else if (!strcmp(o, "--json"))
            a->json = 1;
        else if (!strcmp(o, "--jobs") || !strcmp(o, "--seeds")) {
            if (cli_parse_long(o, v, 1, !strcmp(o, "--jobs") ? &a->jobs : &a->seeds) != 0) {
                fprintf(stderr, "usage: %s\n", usage);
                return -1;
            }
        } else if (cli_opts_argument(so, o, &a->config) != 0)
            return -1;
    }
    if (so->bad)
        return -1;
    if (!a->variants && !a->bs && !a->layouts) {
        cli_usage_error(usage, "'--variant' is required (one of: %s, or all)", ar_ablate_variant_list());
        return -1;
    }
    if (a->bs && cli_parse_int_list(a->bs, &a->bsz, &a->nbs) != 0) {
        cli_usage_error(usage, "'--block-sizes' expects a comma-separated list of positive integers, got '%s'",
                        a->bs);
        return -1;
    }
    return 0;
}

/* The losses of the final evaluations, a line a variant; the paired
 * columns compare each variant with the first. */
static void print_stats(const ar_ablation *ab, const ar_ablate_stat *stat)
{
    printf("%-20s %5s %10s %8s %10s %10s %5s %10s %10s\n", "variant", "seeds", "final_loss", "std", "diff",
           "p_welch", "pairs", "paired", "p_paired");
    for (int v = 0; v < ab->nvariants; v++) {
        const ar_paired *pp = &stat[v].paired;
        printf("%-20s %5d %10.4f %8.4f %+10.4f ", ab->variant[v], stat[v].n, stat[v].mean, stat[v].sd,
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
}

/* --json: the runs, every variant's statistics and the comparison with the
 * report's Table 4, as results.md has them (attnres-ablate(1), JSON). */
static void print_json(const ar_ablation *ab, const ar_ablate_stat *stat, const char *out,
                       const ar_sweep_result *res)
{
    ar_table4_cmp *cmp = ar_xcalloc((size_t)ab->nvariants, sizeof *cmp);
    int nboth = 0;
    double rho = ar_table4_compare(ab->variant, stat, ab->nvariants, cmp, &nboth);
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "out");
    ar_jw_str(&w, out);
    ar_jw_key(&w, "runs");
    ar_jw_int(&w, ab->sweep.nruns);
    ar_jw_key(&w, "finished");
    ar_jw_int(&w, res->finished);
    ar_jw_key(&w, "seeds");
    ar_jw_int(&w, ab->nseeds);
    ar_jw_key(&w, "variants");
    ar_jw_arr_begin(&w);
    for (int v = 0; v < ab->nvariants; v++) {
        const ar_ablate_stat *st = &stat[v];
        const ar_paired *pp = &st->paired;
        ar_jw_obj_begin(&w);
        ar_jw_key(&w, "variant");
        ar_jw_str(&w, ab->variant[v]);
        ar_jw_key(&w, "finished_seeds");
        ar_jw_int(&w, st->n);
        const char *keys[] = {"mean_loss", "std", "diff", "p_welch", "paired_mean", "paired_se", "paired_t",
                              "paired_p"};
        double vals[] = {st->n ? st->mean : NAN, st->n ? st->sd : NAN, v && st->n ? st->diff : NAN,
                         v ? st->p : NAN, v ? pp->mean : NAN, v ? pp->se : NAN, v ? pp->t : NAN,
                         v ? pp->p : NAN};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            ar_jw_key(&w, keys[k]);
            ar_jw_num(&w, vals[k]);
        }
        ar_jw_key(&w, "pairs");
        ar_jw_int(&w, v ? pp->pairs : 0);
        ar_jw_key(&w, "report_delta");
        ar_jw_num(&w, cmp[v].pub ? cmp[v].pub->delta : NAN);
        ar_jw_key(&w, "measured_delta");
        ar_jw_num(&w, cmp[v].measured);
        ar_jw_key(&w, "same_sign");
        if (cmp[v].same_sign < 0)
            ar_jw_null(&w);
        else
            ar_jw_bool(&w, cmp[v].same_sign);
        ar_jw_obj_end(&w);
    }
    ar_jw_arr_end(&w);
    ar_jw_key(&w, "table4");
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "report_baseline_loss");
    ar_jw_num(&w, AR_TABLE4_BASELINE);
    ar_jw_key(&w, "variants_compared");
    ar_jw_int(&w, nboth);
    ar_jw_key(&w, "spearman");
    ar_jw_num(&w, rho);
    ar_jw_obj_end(&w);
    ar_jw_obj_end(&w);
    printf("%s\n", w.s);
    ar_jw_free(&w);
    free(cmp);
}

/* Trains the planned runs into OUT/runs (OUT: --out, else named after the
 * config) and writes the report of whatever finished; the exit status.
 * *stat is allocated here for the caller to free. */
static int run_ablation(ar_ablation *ab, const char *config, const char *out_opt, long jobs, int json,
                        ar_ablate_stat **stat)
{
    char outbuf[AR_PATH_MAX], runs[AR_PATH_MAX + 8];
    const char *out = out_opt;
    if (!out) {
        sweep_default_out(config, "ablate-", "default", outbuf, sizeof outbuf);
        out = outbuf;
    }
    snprintf(runs, sizeof runs, "%s/runs", out);
    /* with --json, stdout holds the JSON alone */
    FILE *say = json ? stderr : stdout;
    fprintf(say, "ablation of %d variants x %d seeds = %d runs into '%s', %ld at a time: ", ab->nvariants,
            ab->nseeds, ab->sweep.nruns, out, jobs);
    for (int v = 0; v < ab->nvariants; v++)
        fprintf(say, "%s%s", v ? ", " : "", ab->variant[v]);
    fprintf(say, "\n");
    fflush(say);
    sweep_warn_configs(&ab->sweep);
    if (sweep_check_jobs(usage, jobs) != 0)
        return AR_EXIT_USAGE;
    cli_catch_signals(NULL, NULL);
    sweep_view vw = {.s = &ab->sweep, .tty = !json && jobs == 1 && isatty(STDOUT_FILENO), .out = say};
    ar_sweep_opts o = {.out_dir = runs, .jobs = (int)jobs, .event = sweep_view_event,
                       .progress = sweep_view_progress, .ud = &vw, .interrupt = &cli_interrupted};
    ar_sweep_result res;
    ar_err e = {{0}};
    int st = ar_sweep_run_ranks(&ab->sweep, &o, ar_comm_world(), &res, &e);
    sweep_view_end(&vw);
    *stat = ar_xcalloc((size_t)ab->nvariants, sizeof **stat);
    ar_err re = {{0}};
    /* the report of whatever has finished, also after an interruption or failure */
    int rep = ar_comm_world()->rank == 0 ? ar_ablate_report(ab, out, *stat, &re) : 0;
    if (st != 0) {
        cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    if (rep != 0) {
        cli_error("%s", re.msg);
        return AR_EXIT_FAIL;
    }
    if (res.interrupted) {
        fprintf(say, "interrupted: %d of %d runs finished, the others keep their checkpoints; run the same "
                     "command again to continue\n",
                res.finished, ab->sweep.nruns);
        return cli_interrupt_status();
    }
    if (json) {
        print_json(ab, *stat, out, &res);
        return AR_EXIT_OK;
    }
    print_stats(ab, *stat);
    printf("ablation done: %d runs (%d reused, %d trained); '%s/results.csv', '%s/results.md', "
           "'%s/ablation.png'%s%s%s\n",
           res.finished, res.skipped, res.trained, out, out, out, ab->nblock ? ", '" : "", ab->nblock ? out : "",
           ab->nblock ? "/block_sizes.png'" : "");
    return AR_EXIT_OK;
}

int cmd_ablate(int argc, char **argv)
{
    ablate_args a = {.jobs = 1, .seeds = 1};
    int rc = AR_EXIT_USAGE, planned = 0;
    ar_ablation ab;
    ar_ablate_stat *stat = NULL;
    static const char *const own[] = {"--variant", "--block-sizes", "--block-layouts", "--jobs", "--seeds", "--depths",
                                      "--tokens", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_OUT | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    if (parse_args(&so, &a) != 0)
        goto done;
    rc = AR_EXIT_FAIL;
    ar_err e = {{0}};
    ar_config cfg;
    ar_config_defaults(&cfg);
    if ((a.config && ar_config_load(&cfg, a.config, &e) != 0) || cli_opts_apply(&so, &cfg, &e) != 0 ||
        ar_config_validate(&cfg, &e) != 0 || cli_check_device(&cfg, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    if (a.depths || a.tokens) { /* a study along depth or tokens: cmd/ablate_axis.c */
        const char *opt = a.depths ? "--depths" : "--tokens";
        if (a.depths && a.tokens) {
            rc = cli_usage_error(usage, "'--depths' and '--tokens' do not go together: one axis per study");
            goto done;
        }
        if (a.bs || a.layouts || a.json) {
            rc = cli_usage_error(usage, "'%s' and '%s' do not go together", opt,
                                 a.bs ? "--block-sizes" : a.layouts ? "--block-layouts" : "--json");
            goto done;
        }
        rc = cli_ablate_axis(a.depths ? AR_AXIS_DEPTH : AR_AXIS_TOKENS, &cfg, a.config, a.variants, (int)a.seeds,
                             (int)a.jobs, so.out, a.depths ? a.depths : a.tokens, usage);
        goto done;
    }
    if (ar_ablate_plan(&ab, &cfg, a.variants ? a.variants : "baseline", (int)a.seeds, a.bsz, a.nbs, &e) != 0) {
        cli_error("%s", e.msg);
        /* a wrong variant name is a wrong command line */
        rc = e.kind == AR_ERR_BAD_VALUE ? AR_EXIT_USAGE : AR_EXIT_FAIL;
        goto done;
    }
    planned = 1;
    if (a.layouts && add_layouts(&ab, &cfg, a.layouts, &rc) != 0)
        goto done;
    if (ar_data_check_train(&cfg.data, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    rc = run_ablation(&ab, a.config, so.out, a.jobs, a.json, &stat);
done:
    free(stat);
    if (planned)
        ar_ablate_free(&ab);
    free(a.bsz);
    cli_opts_free(&so);
    return rc;
}
