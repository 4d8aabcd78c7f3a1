#include "schedule.h"

#include <math.h>

double ar_lr_at(const ar_train_cfg *t, long step)
{
    if (step < t->warmup)
        return t->lr * (double)(step + 1) / (double)t->warmup;
    switch (t->schedule) {
    case AR_SCHED_COSINE: {
        long span = t->steps - 1 - t->warmup;
        double p = span > 0 ? (double)(step - t->warmup) / (double)span : 1.0;
        if (p > 1)
            p = 1;
        return t->min_lr + (t->lr - t->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    }
    case AR_SCHED_WSD: {
        long D = lround(t->decay_frac * (double)t->steps);
        long start = t->steps - D;
        if (D <= 0 || step < start)
            return t->lr;
        double p = (double)(step - start + 1) / (double)D;
        return t->lr + (t->min_lr - t->lr) * (p > 1 ? 1 : p);
    }
    case AR_SCHED_CONSTANT:
        return t->lr;
    }
    return t->lr;
}
