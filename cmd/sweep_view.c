#include "sweep_view.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../formats/config.h"
#include "../parallel/comm.h"
#include "cmds.h"

void sweep_view_end(sweep_view *v)
{
    if (v->live) {
        fputc('\n', stdout);
        v->live = 0;
    }
}

void sweep_view_event(const ar_sweep_run *r, ar_sweep_event ev, const char *detail, void *ud)
{
    sweep_view *v = ud;
    FILE *f = v->out ? v->out : stdout;
    sweep_view_end(v);
    int i = (int)(r - v->s->runs) + 1, n = v->s->nruns;
    switch (ev) {
    case AR_SWEEP_SKIPPED: fprintf(f, "[%d/%d] %s: already finished (%s), reused\n", i, n, r->name, detail); break;
    case AR_SWEEP_STARTED:
        fprintf(f, "[%d/%d] %s: training %ld steps (%ld tokens)\n", i, n, r->name, r->cfg.train.steps, r->tokens);
        break;
    case AR_SWEEP_RESUMED:
        fprintf(f, "[%d/%d] %s: resuming from %s of %ld\n", i, n, r->name, detail, r->cfg.train.steps);
        break;
    case AR_SWEEP_FINISHED: fprintf(f, "[%d/%d] %s: done, %s\n", i, n, r->name, detail); break;
    case AR_SWEEP_INTERRUPTED: fprintf(f, "[%d/%d] %s: interrupted, checkpoint saved\n", i, n, r->name); break;
    case AR_SWEEP_FAILED: fprintf(f, "[%d/%d] %s: failed\n", i, n, r->name); break;
    }
    fflush(f);
}

/* With one job on a terminal: one live line.  Otherwise a line per
 * evaluation, so that concurrent runs stay readable. */
void sweep_view_progress(const ar_sweep_run *r, const ar_progress *p, void *ud)
{
    sweep_view *v = ud;
    FILE *f = v->out ? v->out : stdout;
    char val[32];
    if (isfinite(p->val_loss))
        snprintf(val, sizeof val, "%.4f", p->val_loss);
    else
        snprintf(val, sizeof val, "-");
    if (v->tty) {
        fprintf(f, "\r\033[K%s: step %ld/%ld | loss %.4f | val %s | %.0f tok/s | ETA %.0f s", r->name, p->step,
               p->steps, p->loss, val, p->tok_per_s, p->eta_s);
        v->live = 1;
    } else if (p->is_eval) {
        fprintf(f, "%s: step %ld/%ld loss %.4f val %s tok/s %.0f\n", r->name, p->step, p->steps, p->loss, val,
               p->tok_per_s);
    }
    fflush(f);
}

void sweep_default_out(const char *config, const char *prefix, const char *fallback, char *out, size_t n)
{
    char stem[256];
    snprintf(stem, sizeof stem, "%s", fallback);
    if (config) {
        const char *b = strrchr(config, '/');
        b = b ? b + 1 : config;
        snprintf(stem, sizeof stem, "%.200s", b);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem)
            *dot = 0;
    }
    snprintf(out, n, "runs/%s%s", prefix, stem);
}

void sweep_warn_configs(const ar_sweep *s)
{
    char msg[512], other[512];
    for (int i = 0; i < s->nruns; i++) {
        if (!ar_config_warning(&s->runs[i].cfg, msg, sizeof msg))
            continue;
        int seen = 0, more = 0;
        for (int j = 0; j < s->nruns; j++)
            if (j != i && ar_config_warning(&s->runs[j].cfg, other, sizeof other) && strcmp(other, msg) == 0) {
                seen |= j < i;
                more++;
            }
        if (seen)
            continue;
        if (more)
            fprintf(stderr, "attnres: warning: run '%s' and %d other%s: %s\n", s->runs[i].name, more,
                    more == 1 ? "" : "s", msg);
        else
            fprintf(stderr, "attnres: warning: run '%s': %s\n", s->runs[i].name, msg);
    }
}

int sweep_check_jobs(const char *usage, long jobs)
{
    if (ar_comm_world()->size == 1 || jobs <= 1)
        return 0;
    return cli_usage_error(usage, "'--jobs' trains runs side by side in one process; under mpirun each rank "
                                  "trains one run at a time: drop '--jobs'");
}
