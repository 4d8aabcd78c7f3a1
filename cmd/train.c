/* attnres train: parse the command line, resolve the config, call ar_train,
 * show progress. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../parallel/comm.h"
#include "../parallel/pipe.h"
#include "../run/data.h"
#include "../run/train.h"
#include "cmds.h"
#include "options.h"
#include "signals.h"

static const char *usage =
    "attnres train [CONFIG] [--set KEY=VALUE]... [--out DIR] [--resume DIR] [--force] [--threads N] "
    "[--device cpu|cuda] [--precision fp32|bf16]";

static void show_warning(const char *msg, void *ud)
{
    if (*(int *)ud)
        fputs("\r\033[K", stdout); /* clear the live progress line */
    fflush(stdout);
    fprintf(stderr, "attnres: warning: %s\n", msg);
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "--:--");
        return;
    }
    long t = lround(s);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void show_progress(const ar_progress *p, void *ud)
{
    int tty = *(int *)ud;
    char el[32], eta[32], val[32];
    fmt_time(p->elapsed_s, el, sizeof el);
    fmt_time(p->eta_s, eta, sizeof eta);
    if (isfinite(p->val_loss))
        snprintf(val, sizeof val, "%.4f", p->val_loss);
    else
        snprintf(val, sizeof val, "-");
    int w = snprintf(NULL, 0, "%ld", p->steps);
    if (tty) {
        fprintf(stdout, "\r\033[Kstep %*ld/%ld | loss %.4f | val %s | lr %.2e | %.0f tok/s | %s elapsed | ETA %s",
                w, p->step, p->steps, p->loss, val, p->lr, p->tok_per_s, el, eta);
        if (p->is_eval)
            fputc('\n', stdout);
    } else {
        fprintf(stdout, "step %*ld/%ld loss %.4f val %s lr %.2e tok/s %.0f elapsed %s eta %s\n", w,
                p->step, p->steps, p->loss, val, p->lr, p->tok_per_s, el, eta);
    }
    fflush(stdout);
}

/* runs/<config stem>-<timestamp>: a fresh directory for every new run. */
static void default_out(const char *config, char *out, size_t n)
{
    char stem[AR_PATH_MAX] = "default";
    if (config) {
        const char *b = strrchr(config, '/');
        b = b ? b + 1 : config;
        snprintf(stem, sizeof stem, "%.200s", b);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem)
            *dot = 0;
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, n, "runs/%s-%s", stem, ts);
}

/* The config of this run (defaults, CONFIG or the resumed run's own,
 * --set and the other options, the checks) and its directory. */
static int resolve(cli_opts *so, const char *config, const char *resume, ar_config *cfg, char *out, size_t n,
                   ar_err *e)
{
    char resume_cfg[4200];
    ar_config_defaults(cfg);
    if (resume && !config) {
        snprintf(resume_cfg, sizeof resume_cfg, "%s/config.yaml", resume);
        config = resume_cfg;
    }
    if (config && ar_config_load(cfg, config, e) != 0)
        return -1;
    if (cli_opts_apply(so, cfg, e) != 0 || ar_config_validate(cfg, e) != 0 ||
        ar_parallel_check(ar_comm_world(), cfg, e) != 0)
        return -1;
    if (ar_data_check_train(&cfg->data, e) != 0)
        return -1;
    if (resume)
        snprintf(out, n, "%s", resume);
    else if (so->out)
        snprintf(out, n, "%s", so->out);
    else
        default_out(config, out, n);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    const char *config = NULL, *resume = NULL;
    int force = 0, rc = AR_EXIT_USAGE;
    static const char *const own[] = {"--resume", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_OUT | CLI_THREADS | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--resume"))
            resume = v;
        else if (!strcmp(a, "--force"))
            force = 1;
        else if (cli_opts_argument(&so, a, &config) != 0)
            goto done;
    }
    if (so.bad)
        goto done;
    const char *out = so.out;
    if (resume && out && strcmp(resume, out) != 0) {
        cli_usage_error(usage, "'--resume' continues the run in its own directory; drop '--out'");
        goto done;
    }
    if (resume && force) {
        cli_usage_error(usage, "'--force' starts a new run and '--resume' continues one; give one of them");
        goto done;
    }
    rc = AR_EXIT_FAIL;
    /* Rank 0 resolves the config and the run directory, and every rank of
     * an mpirun launch takes them from it, so ranks cannot disagree. */
    ar_comm *comm = ar_comm_world();
    struct {
        ar_config cfg;
        char out[AR_PATH_MAX + 64];
    } run;
    memset(&run, 0, sizeof run);
    ar_config *cfgp = &run.cfg;
    ar_err e = {{0}};
    int resolved = comm->rank == 0 ? resolve(&so, config, resume, cfgp, run.out, sizeof run.out, &e) : 0;
    if (ar_comm_agree(comm, resolved, &e) != 0 || comm->ops->bcast(comm, &run, sizeof run, 0, &e) != 0)
        goto fail;
    const ar_config cfg = run.cfg;
    out = run.out;
    /* The first signal finishes the step and saves; the second stops at
     * once, and the previous checkpoint is intact (every file is replaced
     * by rename, and a half-written temporary file is removed by the next
     * run). */
    cli_catch_signals(": finishing this step, then saving a checkpoint and stopping (signal again to stop at once)\n",
                      " again: stopping at once; the last checkpoint is kept\n");
    /* A file size limit (ulimit -f) makes write() fail with EFBIG, which is
     * reported like a full disk, instead of killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    int tty = isatty(STDOUT_FILENO);
    ar_train_opts o = {.out_dir = out, .resume = resume != NULL, .force = force, .progress = show_progress,
                       .warn = show_warning, .ud = &tty, .interrupt = &cli_interrupted, .comm = comm};
    printf("%s run in '%s': %s, d_model %d, n_layer %d, seq_len %d, %ld steps of %d x %d tokens, on %s (%s)\n",
           resume ? "resuming" : "training", out, ar_res_kind_name(cfg.model.residual.kind),
           cfg.model.d_model, cfg.model.n_layer, cfg.model.seq_len, cfg.train.steps,
           cfg.train.batch_size * cfg.train.grad_accum, cfg.model.seq_len, ar_device_name(cfg.train.device),
           ar_precision_name(cfg.train.precision));
    fflush(stdout);
    ar_train_result res;
    if (ar_train(&cfg, &o, &res, &e) != 0) {
        if (tty)
            fputc('\n', stdout);
        goto fail;
    }
    if (res.interrupted) {
        printf("interrupted at step %ld; checkpoint saved; continue with: attnres train --resume %s\n",
               res.step, out);
        rc = cli_interrupt_status();
        goto done;
    }
    printf("done: %ld steps, train loss %.4f, val loss %.4f", res.step, res.final_loss,
           res.final_val_loss);
    if (cfg.model.vocab_bytes)
        printf(" (%.3f bits/byte)", res.final_val_loss / M_LN2);
    printf(", %.0f tok/s\nrun saved in '%s' (model.safetensors, metrics.jsonl, loss.png, dynamics.png%s)\n",
           res.tok_per_s, out, cfg.model.residual.kind == AR_RES_BASELINE ? "" : ", depth_attn.png");
    rc = AR_EXIT_OK;
    goto done;
fail:
    cli_error("%s", e.msg);
done:
    cli_opts_free(&so);
    return rc;
}
