/* AdamW with global-norm gradient clipping.  Moments live in two buffers with
 * the parameter table's layout; weight decay applies to the tensors the table
 * marks (2-D weight matrices). */
#ifndef AR_OPTIM_H
#define AR_OPTIM_H

#include "model.h"

typedef struct {
    const ar_backend *be;
    float *m, *v; /* device, pt.total floats */
    size_t n;
    long t;       /* optimizer steps taken (bias correction) */
} ar_adamw;

void ar_adamw_init(ar_adamw *o, const ar_model *model);
void ar_adamw_free(ar_adamw *o);

/* Global L2 norm of the gradient buffer. */
double ar_grad_norm(const ar_model *model);

/* One step: clips to grad_clip (if > 0) using `gnorm`, then updates every
 * parameter with learning rate lr. */
void ar_adamw_step(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr, double gnorm);

#endif
