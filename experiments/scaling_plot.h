/* The scaling-law figure of `attnres fit-scaling`: log-log axes, each
 * group's points and fitted curve in one colour, a legend with each fitted
 * formula and a note with the compute-equivalence ratios. */
#ifndef AR_SCALING_PLOT_H
#define AR_SCALING_PLOT_H

#include "../core/error.h"
#include "scaling.h"

int ar_scaling_plot(const char *path, const ar_scaling *s, ar_err *e);

#endif
