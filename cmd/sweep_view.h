/* What attnres sweep and attnres ablate share: showing a grid of runs as it
 * trains, and where its runs go by default. */
#ifndef AR_CMD_SWEEP_VIEW_H
#define AR_CMD_SWEEP_VIEW_H

#include <stddef.h>
#include <stdio.h>

#include "../experiments/sweep.h"

typedef struct {
    const ar_sweep *s;
    int tty;  /* live progress line (one job, stdout a terminal) */
    int live; /* a live line is showing */
    FILE *out; /* where the events and progress go: NULL for stdout */
} sweep_view;

/* ar_sweep_opts.event / .progress with ud = a sweep_view. */
void sweep_view_event(const ar_sweep_run *r, ar_sweep_event ev, const char *detail, void *ud);
void sweep_view_progress(const ar_sweep_run *r, const ar_progress *p, void *ud);
/* Ends a live progress line, if one is showing. */
void sweep_view_end(sweep_view *v);

/* The config warnings of the grid's runs (ar_config_warning) on stderr,
 * each distinct one once, naming the first run it applies to. */
void sweep_warn_configs(const ar_sweep *s);

/* --jobs under mpirun: refused above 1 (forking beside MPI is unsafe, and
 * each rank is one job), with the usage error; 0 when fine. */
int sweep_check_jobs(const char *usage, long jobs);

/* runs/<prefix><config stem> (fallback stem without a config): the same on
 * every invocation, so that a rerun finds its runs. */
void sweep_default_out(const char *config, const char *prefix, const char *fallback, char *out, size_t n);

#endif
