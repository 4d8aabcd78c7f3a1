#include "scaling_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../viz/plot.h"

#define CURVE_N 200

int ar_scaling_plot(const char *path, const ar_scaling *s, ar_err *e)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < s->ng; k++)
        for (int i = 0; i < s->g[k].n; i++) {
            lo = fmin(lo, s->g[k].x[i]);
            hi = fmax(hi, s->g[k].x[i]);
        }
    if (s->ng > 1 && isfinite(s->at) && s->at > 0) {
        lo = fmin(lo, s->at);
        hi = fmax(hi, s->at);
    }
    /* The curves reach a little past the data on both sides. */
    double l0 = log(lo) - 0.05 * (log(hi) - log(lo)), l1 = log(hi) + 0.05 * (log(hi) - log(lo));
    int ns = 2 * s->ng;
    ar_series *ser = ar_xcalloc((size_t)ns, sizeof *ser);
    double *cx = ar_xmalloc(CURVE_N * sizeof *cx), *cy = ar_xmalloc((size_t)s->ng * CURVE_N * sizeof *cy);
    char (*labels)[256] = ar_xcalloc((size_t)s->ng, sizeof *labels);
    for (int i = 0; i < CURVE_N; i++)
        cx[i] = exp(l0 + (l1 - l0) * i / (CURVE_N - 1));
    for (int k = 0; k < s->ng; k++) {
        const ar_scaling_group *g = &s->g[k];
        char formula[160];
        ar_fit_formula(&g->fit, formula, sizeof formula);
        snprintf(labels[k], sizeof labels[k], "%s: %s", g->name, formula);
        for (int i = 0; i < CURVE_N; i++)
            cy[(size_t)k * CURVE_N + i] = ar_fit_eval(&g->fit, cx[i]);
        ser[2 * k] = (ar_series){.label = labels[k], .x = cx, .y = cy + (size_t)k * CURVE_N, .n = CURVE_N,
                                 .color = k + 1};
        ser[2 * k + 1] = (ar_series){.x = g->x, .y = g->y, .n = g->n, .markers = 1, .no_line = 1, .color = k + 1};
    }
    /* The note: one line per non-baseline group. */
    size_t cap = 256 + (size_t)s->ng * 200;
    char *note = ar_xcalloc(cap, 1);
    size_t used = 0;
    if (s->ng > 1) {
        used += (size_t)snprintf(note + used, cap - used, "compute vs '%s' at C = %.3g (C'/C, 95%% CI):",
                                 s->g[s->baseline].name, s->at);
        for (int k = 0; k < s->ng && used < cap; k++) {
            const ar_scaling_group *g = &s->g[k];
            if (g->is_baseline)
                continue;
            if (isfinite(g->ratio.ratio) && isfinite(g->ratio.se))
                used += (size_t)snprintf(note + used, cap - used, "\n%s: %.3fx \xc2\xb1 %.3f [%.3f, %.3f]", g->name,
                                         g->ratio.ratio, g->ratio.se, g->ratio.ci[0], g->ratio.ci[1]);
            else if (isfinite(g->ratio.ratio))
                used += (size_t)snprintf(note + used, cap - used, "\n%s: %.3fx", g->name, g->ratio.ratio);
            else
                used += (size_t)snprintf(note + used, cap - used, "\n%s: n/a (baseline never reaches its loss)",
                                         g->name);
        }
    }
    char title[400], xl[200];
    snprintf(title, sizeof title, "Scaling law: %s vs %s (%s form)", s->ycol, s->xcol, ar_fit_form_name(s->form));
    snprintf(xl, sizeof xl, "compute C (%s)", s->xcol);
    ar_plot_opts o = {.title = title, .xlabel = xl, .ylabel = s->ycol, .logx = 1, .logy = 1,
                      .note = s->ng > 1 ? note : NULL};
    int rc = ar_plot_lines(path, &o, ser, ns, e);
    free(note);
    free(labels);
    free(cy);
    free(cx);
    free(ser);
    return rc;
}
