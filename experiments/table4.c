/* The AttnRes report's Table 4 beside an ablation measured here.
 *
 * The published deltas: the AttnRes technical report, Table 4,
 * the ablations of its 16-layer model (436 M active parameters, 87.9 B
 * tokens), each a final validation loss minus its baseline's 1.766. */
#include "table4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

static const ar_table4_row TABLE4[] = {
    {"full", "Full AttnRes", -0.029},
    {"input-query", "Full, input-dependent query", -0.035},
    {"static", "Full, input-independent mixing", -0.017},
    {"sigmoid", "Full, sigmoid scores", -0.025},
    {"no-key-norm", "Full, no key norm", -0.023},
    {"swa", "sliding window, W = 1 + 8", -0.002},
    {"block", "Block AttnRes, S = 4", -0.020},
    {"heads", "Block, multihead H = 16", -0.014},
    {"block-no-key-norm", "Block, no key norm", -0.016},
    {"denseformer", "DenseFormer", +0.001},
    {"mhc", "mHC, 4 streams", -0.019},
};

const ar_table4_row *ar_table4_rows(int *n)
{
    *n = (int)(sizeof TABLE4 / sizeof TABLE4[0]);
    return TABLE4;
}

const ar_table4_row *ar_table4_find(const char *variant)
{
    for (size_t i = 0; i < sizeof TABLE4 / sizeof TABLE4[0]; i++)
        if (strcmp(TABLE4[i].variant, variant) == 0)
            return &TABLE4[i];
    return NULL;
}

/* r[i] = the rank of x[i] among x[0..n), 1-based, ties at their mean rank */
static void ranks(const double *x, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        int below = 0, equal = 0;
        for (int j = 0; j < n; j++) {
            below += x[j] < x[i];
            equal += x[j] == x[i];
        }
        /* ranks below+1 .. below+equal, their mean */
        r[i] = below + (equal + 1) / 2.0;
    }
}

double ar_spearman(const double *x, const double *y, int n)
{
    if (n < 2)
        return NAN;
    double *rx = ar_xmalloc(2 * (size_t)n * sizeof *rx), *ry = rx + n;
    ranks(x, n, rx);
    ranks(y, n, ry);
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++)
        mx += rx[i], my += ry[i];
    mx /= n, my /= n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

static int sign_of(double v) { return (v > 0) - (v < 0); }

double ar_table4_compare(char (*names)[AR_SWEEP_NAME_MAX], const ar_ablate_stat *st, int nvariants,
                         ar_table4_cmp *cmp, int *nboth)
{
    double *x = ar_xcalloc((size_t)nvariants + 1, sizeof *x), *y = ar_xcalloc((size_t)nvariants + 1, sizeof *y);
    int k = 0;
    for (int v = 0; v < nvariants; v++) {
        ar_table4_cmp *c = &cmp[v];
        c->pub = v > 0 ? ar_table4_find(names[v]) : NULL;
        c->measured = NAN;
        if (v > 0 && st[v].paired.pairs >= 1)
            c->measured = st[v].paired.mean;
        else if (v > 0 && st[v].n > 0 && st[0].n > 0)
            c->measured = st[v].diff;
        c->same_sign = -1;
        if (c->pub && isfinite(c->measured)) {
            c->same_sign = sign_of(c->measured) == sign_of(c->pub->delta);
            x[k] = c->pub->delta, y[k] = c->measured;
            k++;
        }
    }
    double rho = ar_spearman(x, y, k);
    free(x);
    free(y);
    *nboth = k;
    return rho;
}
