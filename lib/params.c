#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"

int ar_params_add(ar_param_table *t, const char *name, int64_t d0, int64_t d1, ar_init_kind init,
                  float std, int group)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        ar_param *np = ar_xmalloc((size_t)t->cap * sizeof *np);
        if (t->n)
            memcpy(np, t->p, (size_t)t->n * sizeof *np);
        free(t->p);
        t->p = np;
    }
    ar_param *p = &t->p[t->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    p->offset = t->total;
    p->init = init;
    p->std = std;
    /* Decoupled weight decay only on 2-D weight matrices (embedding,
     * projections, lm_head), as nanoGPT/GPT-3: gains and depth-attention
     * queries are scale parameters that decay would bias toward zero. */
    p->decay = p->ndim == 2;
    p->lr_scale = 1.0f;
    p->group = group;
    t->total += (p->numel + 15) & ~(size_t)15;
    return t->n++;
}

int ar_params_find(const ar_param_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0)
            return i;
    return -1;
}

void ar_params_free(ar_param_table *t)
{
    free(t->p);
    memset(t, 0, sizeof *t);
}
