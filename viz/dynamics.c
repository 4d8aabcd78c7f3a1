/* Training-dynamics figure (dynamics.h). */
#include "dynamics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

/* 1..L as doubles: the x of the per-sublayer panels. */
static double *depths(int L)
{
    double *x = ar_xcalloc((size_t)L + 1, sizeof(double));
    for (int i = 0; i < L; i++)
        x[i] = i + 1;
    return x;
}

/* Mean over the mixers with a defined H / ln n (more than one source) of
 * series v (nrt x nmix), per record, into out. */
static void mixer_mean(const ar_run_record *r, const double *v, double *out)
{
    for (int k = 0; k < r->nrt; k++) {
        double s = 0;
        int c = 0;
        for (int l = 0; l < r->rt_nmix; l++) {
            size_t i = (size_t)k * r->rt_nmix + l;
            if (isfinite(r->rt_hnorm[i]) && isfinite(v[i])) {
                s += v[i];
                c++;
            }
        }
        out[k] = c ? s / c : NAN;
    }
}

int ar_dynamics_figure(const char *path, const ar_dyn_run *runs, int nr, const ar_fig_meta *meta, ar_err *e)
{
    for (int k = 0; k < nr; k++)
        if (runs[k].rec->n == 0)
            return ar_fail(e, "cannot plot '%s': run '%s' has no training records yet", path, runs[k].name);
    ar_series *loss = ar_xcalloc((size_t)nr * 2, sizeof *loss);
    ar_series *orms = ar_xcalloc((size_t)nr, sizeof *orms), *grms = ar_xcalloc((size_t)nr, sizeof *grms);
    char (*lab)[3][300] = ar_xcalloc((size_t)nr, sizeof *lab);
    double **xs = ar_xcalloc((size_t)nr, sizeof *xs);
    ar_series *route = ar_xcalloc((size_t)nr * 2, sizeof *route);
    double **rmean = ar_xcalloc((size_t)nr * 2, sizeof *rmean);
    char (*rlab)[2][300] = ar_xcalloc((size_t)nr, sizeof *rlab);
    int routed = 0;
    for (int k = 0; k < nr; k++) {
        const ar_run_record *r = runs[k].rec;
        if (r->nrt == 0)
            continue;
        routed = 1;
        for (int j = 0; j < 2; j++) {
            rmean[2 * k + j] = ar_xcalloc((size_t)r->nrt + 1, sizeof(double));
            mixer_mean(r, j ? r->rt_max : r->rt_hnorm, rmean[2 * k + j]);
            snprintf(rlab[k][j], sizeof rlab[k][j], "%s%s%s", nr > 1 ? runs[k].name : "", nr > 1 ? " " : "",
                     j ? "mean max weight" : "H / ln n");
            /* one run: two colours; several: the run's colour, the max weight dotted */
            route[2 * k + j] = (ar_series){.label = rlab[k][j], .x = r->rt_tokens, .y = rmean[2 * k + j], .n = r->nrt,
                                           .markers = j, .color = nr > 1 ? k + 1 : j + 1};
        }
    }
    for (int k = 0; k < nr; k++) {
        const ar_run_record *r = runs[k].rec;
        if (nr == 1) {
            snprintf(lab[k][0], sizeof lab[k][0], "train");
            snprintf(lab[k][1], sizeof lab[k][1], "validation");
        } else {
            snprintf(lab[k][0], sizeof lab[k][0], "%s train", runs[k].name);
            snprintf(lab[k][1], sizeof lab[k][1], "%s validation", runs[k].name);
        }
        snprintf(lab[k][2], sizeof lab[k][2], "%s (step %ld)", runs[k].name, r->eval_step);
        /* Train as a line, validation as dots on a line, in the run's colour. */
        loss[2 * k] = (ar_series){.label = lab[k][0], .x = r->tokens, .y = r->loss, .n = r->n, .color = k + 1};
        loss[2 * k + 1] = (ar_series){.label = r->nv ? lab[k][1] : NULL, .x = r->vtokens, .y = r->vloss,
                                      .n = r->nv, .markers = 1, .color = k + 1};
        xs[k] = depths(r->L);
        const char *el = r->L > 0 ? lab[k][2] : NULL; /* no legend entry without data */
        orms[k] = (ar_series){.label = el, .x = xs[k], .y = r->out_rms, .n = r->L, .markers = 1,
                              .color = k + 1};
        grms[k] = (ar_series){.label = el, .x = xs[k], .y = r->grad_rms, .n = r->L, .markers = 1,
                              .color = k + 1};
    }
    ar_plot_opts oa = {.title = "Loss", .xlabel = "training tokens", .ylabel = "cross-entropy (nats/token)",
                       .empty = "no losses with token counts"};
    ar_plot_opts ob = {.title = "Sublayer output RMS (last evaluation)", .xlabel = "sublayer l",
                       .ylabel = "RMS of output v_l", .logy = 1, .empty = "no evaluation logged yet"};
    ar_plot_opts oc = {.title = "Gradient RMS (last evaluation)", .xlabel = "sublayer l",
                       .ylabel = "RMS of sublayer l's parameter gradients", .logy = 1,
                       .empty = "no evaluation logged yet"};
    ar_plot_opts od = {.title = "Depth routing (validation)", .xlabel = "training tokens",
                       .ylabel = "mean over mixers with n > 1 sources",
                       .note = "H / ln n: normalised entropy of the depth weights\nmax weight: mean largest weight",
                       .empty = "no routing statistics logged"};
    ar_line_panel p[4] = {{&oa, loss, 2 * nr}, {&ob, orms, nr}, {&oc, grms, nr}, {&od, route, 2 * nr}};
    /* metadata: runs and last steps, comma-separated */
    size_t rcap = 2048, scap = 512, rn = 0, sn = 0;
    char *run = ar_xcalloc(rcap, 1), *step = ar_xcalloc(scap, 1);
    for (int k = 0; k < nr; k++) {
        rn += (size_t)snprintf(run + rn, rcap - rn, "%s%s", k ? ", " : "", runs[k].path ? runs[k].path : runs[k].name);
        sn += (size_t)snprintf(step + sn, scap - sn, "%s%ld", k ? ", " : "", runs[k].rec->last_step);
        rn = rn < rcap ? rn : rcap - 1;
        sn = sn < scap ? sn : scap - 1;
    }
    ar_fig_meta m = meta ? *meta : (ar_fig_meta){0};
    if (!m.run)
        m.run = run;
    if (!m.step)
        m.step = step;
    char title[2200];
    size_t tn = (size_t)snprintf(title, sizeof title, "Training dynamics:");
    for (int k = 0; k < nr && tn < sizeof title; k++)
        tn += (size_t)snprintf(title + tn, sizeof title - tn, "%s %s", k ? "," : "", runs[k].name);
    int rc = ar_plot_line_panels(path, title, p, routed ? 4 : 3, routed ? AR_DYNAMICS_ROUTING_WIDTH : AR_DYNAMICS_WIDTH,
                                 AR_DYNAMICS_HEIGHT, &m, e);
    for (int k = 0; k < 2 * nr; k++)
        free(rmean[k]);
    free(rmean);
    free(rlab);
    free(route);
    for (int k = 0; k < nr; k++)
        free(xs[k]);
    free(xs);
    free(lab);
    free(loss);
    free(orms);
    free(grms);
    free(run);
    free(step);
    return rc;
}
