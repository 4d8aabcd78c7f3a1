#include "optim.h"

#include <math.h>

void ar_adamw_init(ar_adamw *o, const ar_model *model)
{
    o->be = model->be;
    o->n = model->pt.total;
    o->m = o->be->alloc(o->n * sizeof(float));
    o->v = o->be->alloc(o->n * sizeof(float));
    o->t = 0;
}

void ar_adamw_free(ar_adamw *o)
{
    o->be->free(o->m);
    o->be->free(o->v);
}

double ar_grad_norm(const ar_model *model)
{
    return sqrt(model->be->sumsq(model->grads, model->pt.total));
}

void ar_adamw_step(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr, double gnorm)
{
    /* Clipping scales the whole gradient by min(1, clip/||g||), as
     * torch.nn.utils.clip_grad_norm_ (which adds 1e-6 to the norm). */
    double gscale = 1.0;
    if (tc->grad_clip > 0 && gnorm > tc->grad_clip)
        gscale = tc->grad_clip / (gnorm + 1e-6);
    o->t++;
    for (int i = 0; i < model->pt.n; i++) {
        const ar_param *p = &model->pt.p[i];
        float wd = p->decay ? (float)tc->weight_decay : 0.0f;
        o->be->adamw(model->params + p->offset, model->grads + p->offset, o->m + p->offset,
                     o->v + p->offset, p->numel, (float)gscale, (float)lr, (float)tc->beta1,
                     (float)tc->beta2, (float)tc->eps, wd, o->t);
    }
}
