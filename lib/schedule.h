/* Learning-rate schedules (attnres-config(5), train.schedule). */
#ifndef AR_SCHEDULE_H
#define AR_SCHEDULE_H

#include "../core/config.h"

/* Learning rate for optimizer step `step` (0-based, < steps):
 *   warmup (all):  lr * (step+1)/warmup                      for step < warmup
 *   cosine:        min_lr + (lr-min_lr) * (1 + cos(pi*p))/2,  p = (step-warmup)/(steps-1-warmup)
 *   wsd:           lr until the last D = round(decay_frac*steps) steps, then
 *                  lr + (min_lr-lr) * (step-(steps-D)+1)/D   (reaches min_lr at the last step)
 *   constant:      lr */
double ar_lr_at(const ar_train_cfg *t, long step);

#endif
