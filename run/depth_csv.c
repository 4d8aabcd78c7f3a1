/* The numbers behind the depth figures, as CSV. */
#include "depth_csv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/atomic.h"
#include "../formats/csv.h"
#include "../lib/mixing.h"

typedef struct {
    const ar_depth_run *runs;
    int nr;
} table;

static const char *role(int l, int L)
{
    return l == L + 1 ? "output" : l % 2 ? "attn" : "mlp";
}

/* 0, or -1 with errno set (as ar_write_atomic wants) after a write error. */
static int status(FILE *f)
{
    if (!ferror(f))
        return 0;
    if (!errno)
        errno = EIO;
    return -1;
}

static void row_head(FILE *f, const ar_depth_run *r, int l, int L)
{
    ar_csv_write_field(f, r->name);
    fprintf(f, ",%ld,%s,%d,%s", r->step, ar_res_kind_name(r->cfg.residual.kind), l, role(l, L));
}

/* %.9g: more digits than a float holds, so the weights read back exactly
 * as the model computed them (to double rounding of the mean). */
static int fill_weights(FILE *f, void *ud)
{
    const table *t = ud;
    fprintf(f, "run,step,kind,mixer,role,source,block,first,last,partial,weight\n");
    for (int k = 0; k < t->nr; k++) {
        const ar_depth_run *r = &t->runs[k];
        int L = ar_cfg_sublayers(&r->cfg);
        ar_source *src = ar_xcalloc((size_t)L + 2, sizeof *src);
        for (int l = 1; l <= L + 1 && r->w; l++) {
            int n = ar_mixer_sources(&r->cfg, l, src);
            for (int s = 0; s < n && s < r->w->n[l - 1]; s++) {
                row_head(f, r, l, L);
                fprintf(f, ",%d,%d,%d,%d,%d,%.9g\n", s, src[s].block, src[s].first, src[s].last, src[s].partial,
                        ar_depth_attn_row(r->w, l)[s]);
            }
        }
        free(src);
    }
    return status(f);
}

static int fill_matrix(FILE *f, void *ud)
{
    const table *t = ud;
    fprintf(f, "run,step,kind,mixer,role,source,m\n");
    for (int k = 0; k < t->nr; k++) {
        const ar_depth_run *r = &t->runs[k];
        int L = ar_cfg_sublayers(&r->cfg);
        for (int l = 1; l <= L + 1; l++)
            for (int i = 0; i < l; i++) {
                row_head(f, r, l, L);
                fprintf(f, ",%d,%.9g\n", i, r->M[(size_t)(l - 1) * (L + 1) + i]);
            }
    }
    return status(f);
}

/* %.9g, or an empty field for an undefined value */
static void num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, ",%.9g", x);
    else
        fputc(',', f);
}

static int fill_stats(FILE *f, void *ud)
{
    const table *t = ud;
    int most = 0;
    for (int k = 0; k < t->nr; k++)
        for (int l = 1; t->runs[k].route && l <= t->runs[k].route->L + 1; l++)
            most = t->runs[k].route->n[l - 1] > most ? t->runs[k].route->n[l - 1] : most;
    fprintf(f, "run,step,kind,mixer,role,n_sources,tokens,entropy,entropy_norm,eff_sources,mean_max");
    for (int i = 0; i < most; i++)
        fprintf(f, ",top_share_%d", i);
    fputc('\n', f);
    double *share = ar_xcalloc((size_t)most + 1, sizeof(double));
    for (int k = 0; k < t->nr; k++) {
        const ar_depth_run *r = &t->runs[k];
        const ar_depth_route *a = r->route;
        for (int l = 1; a && a->acc && l <= a->L + 1; l++) {
            ar_route_stats st;
            ar_route_stats_of(ar_depth_route_acc(a, l), a->n[l - 1], &st, share);
            row_head(f, r, l, a->L);
            fprintf(f, ",%d,%ld", st.n, a->tokens);
            num(f, st.entropy);
            num(f, st.entropy_norm);
            num(f, st.eff_sources);
            num(f, st.max_weight);
            for (int i = 0; i < most; i++)
                if (i < st.n)
                    num(f, share[i]);
                else
                    fputc(',', f);
            fputc('\n', f);
        }
    }
    free(share);
    return status(f);
}

int ar_depth_stats_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e)
{
    table t = {runs, nr};
    return ar_write_atomic(path, fill_stats, &t, e);
}

int ar_depth_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e)
{
    table t = {runs, nr};
    return ar_write_atomic(path, fill_weights, &t, e);
}

int ar_depth_matrix_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e)
{
    table t = {runs, nr};
    return ar_write_atomic(path, fill_matrix, &t, e);
}
