/* The figures every training run leaves in its directory, drawn from
 * metrics.jsonl (and config.yaml for the depth figure) alone, so they can
 * be redrawn for any run, even a crashed one:
 *   loss.png        training and validation loss against step
 *   dynamics.png    loss against tokens, output and gradient RMS across
 *                   depth at the last evaluation (viz/dynamics.h)
 *   depth_attn.png  (AttnRes kinds) the token-averaged depth-attention
 *                   weights of the last evaluation, pre-attention and
 *                   pre-MLP sublayers side by side (viz/depth_figure.h) */
#include "run_figures.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/config.h"
#include "../formats/config.h"
#include "../formats/run_record.h"
#include "../lib/mixing.h"
#include "../viz/depth_figure.h"
#include "../viz/dynamics.h"
#include "../viz/plot.h"

static int plot_losses(const char *path, const ar_run_record *r, const ar_fig_meta *m, ar_err *e)
{
    if (r->n + r->nv == 0)
        return 0;
    ar_series s[2] = {{.label = "train", .x = r->step, .y = r->loss, .n = r->n},
                      {.label = "validation", .x = r->vstep, .y = r->vloss, .n = r->nv, .markers = 1}};
    ar_plot_opts o = {.title = "Loss", .xlabel = "step", .ylabel = "cross-entropy (nats/token)", .meta = m};
    return ar_plot_lines(path, &o, s, r->nv > 0 ? 2 : 1, e);
}

/* The weights of the record's last depth_attn, checked against the
 * sources the config gives each mixer. */
static int depth_from_record(const ar_run_record *r, const ar_model_cfg *mc, ar_depth_attn *a, const char *mpath,
                             ar_err *e)
{
    int L = ar_cfg_sublayers(mc);
    if (r->nmix != L + 1)
        return ar_fail(e, "'%s': depth_attn of step %ld lists %d mixers, the run's config has %d", mpath,
                       r->da_step, r->nmix, L + 1);
    ar_depth_attn_alloc(a, L);
    for (int l = 1; l <= L + 1; l++) {
        int n = ar_mixer_sources(mc, l, NULL);
        if (r->nsrc[l - 1] != n) {
            ar_depth_attn_free(a);
            return ar_fail(e, "'%s': depth_attn of step %ld gives mixer %d %d weights, the run's config %d sources",
                           mpath, r->da_step, l, r->nsrc[l - 1], n);
        }
        a->n[l - 1] = n;
        for (int i = 0; i < n; i++)
            ar_depth_attn_row(a, l)[i] = r->da[r->off[l - 1] + i];
    }
    return 0;
}

static int plot_depth(const char *dir, const char *name, const ar_run_record *r, const char *mpath, ar_err *e)
{
    char cpath[AR_PATH_MAX + 32], path[AR_PATH_MAX + 32], step[32];
    snprintf(cpath, sizeof cpath, "%s/config.yaml", dir);
    ar_config cfg;
    ar_config_defaults(&cfg);
    if (ar_config_load(&cfg, cpath, e) != 0)
        return -1;
    if (!ar_res_has_depth_attn(cfg.model.residual.kind))
        return 0;
    ar_depth_attn a;
    if (depth_from_record(r, &cfg.model, &a, mpath, e) != 0)
        return -1;
    ar_depth_run run = {.name = name, .path = dir, .step = r->da_step, .cfg = cfg.model, .w = &a,
                        .what = "weights: mean over the first validation batch (metrics.jsonl)"};
    snprintf(step, sizeof step, "%ld", r->da_step);
    ar_fig_meta m = {.run = dir, .step = step};
    snprintf(path, sizeof path, "%s/depth_attn.png", dir);
    int rc = ar_depth_figure(path, &run, 1, &m, NULL, e);
    ar_depth_attn_free(&a);
    return rc;
}

int ar_train_figures(const char *run_dir, ar_err *e)
{
    char mpath[AR_PATH_MAX + 32], path[AR_PATH_MAX + 32], name[256], step[32];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", run_dir);
    /* a checkpoint can fall due before the first logged step: nothing to
     * draw yet */
    if (access(mpath, F_OK) != 0 && errno == ENOENT)
        return 0;
    ar_run_record r;
    if (ar_run_record_read(&r, mpath, e) != 0)
        return -1;
    ar_run_label(run_dir, name, sizeof name);
    snprintf(step, sizeof step, "%ld", r.last_step);
    ar_fig_meta m = {.run = run_dir, .step = step};
    snprintf(path, sizeof path, "%s/loss.png", run_dir);
    int rc = plot_losses(path, &r, &m, e);
    if (rc == 0 && r.n > 0) {
        ar_dyn_run d = {.name = name, .path = run_dir, .rec = &r};
        snprintf(path, sizeof path, "%s/dynamics.png", run_dir);
        rc = ar_dynamics_figure(path, &d, 1, &m, e);
    }
    if (rc == 0 && r.nmix > 0)
        rc = plot_depth(run_dir, name, &r, mpath, e);
    ar_run_record_free(&r);
    return rc;
}
