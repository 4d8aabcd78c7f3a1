/* attnres train: parse the command line, resolve the config, call ar_train,
 * show progress. */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/atomic.h"
#include "../formats/config.h"
#include "../study/train.h"
#include "cmds.h"

static const char *usage =
    "attnres train [CONFIG] [--set KEY=VALUE]... [--out DIR] [--resume DIR] [--force] [--threads N] "
    "[--device cpu|cuda] [--precision fp32|bf16]";

/* The number of the first SIGINT or SIGTERM, 0 before one. */
static volatile sig_atomic_t interrupted;

static void say(const char *s) { (void)ar_write_all(STDERR_FILENO, s, strlen(s)); }

/* First SIGINT (Ctrl-C) or SIGTERM: finish the step, save, stop with
 * status 128 + the signal's number.  Second: stop at once with 128 + its
 * number; the previous checkpoint is intact (every file is replaced by
 * rename, and a half-written temporary file is removed by the next run). */
static void on_signal(int sig)
{
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (interrupted) {
        say("\nattnres: ");
        say(name);
        say(" again: stopping at once; the last checkpoint is kept\n");
        _exit(128 + sig);
    }
    interrupted = sig;
    say("\nattnres: ");
    say(name);
    say(": finishing this step, then saving a checkpoint and stopping (signal again to stop at once)\n");
}

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

int cmd_train(int argc, char **argv)
{
    const char *config = NULL, *out = NULL, *resume = NULL;
    int force = 0;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0;
    long threads = -1;
    int dev = -1, prec = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "--set") || !strcmp(a, "--out") || !strcmp(a, "--resume") || !strcmp(a, "--threads") ||
             !strcmp(a, "--device") || !strcmp(a, "--precision")) &&
            i + 1 >= argc) {
            free(sets);
            return cli_usage_error(usage, "'%s' needs a value", a);
        }
        if (!strcmp(a, "--set"))
            sets[nsets++] = argv[++i];
        else if (!strncmp(a, "--set=", 6))
            sets[nsets++] = a + 6;
        else if (!strcmp(a, "--out"))
            out = argv[++i];
        else if (!strcmp(a, "--resume"))
            resume = argv[++i];
        else if (!strcmp(a, "--force"))
            force = 1;
        else if (!strcmp(a, "--device") || !strcmp(a, "--precision")) {
            if (cli_device_option(usage, a, argv[++i], &dev, &prec) != 0) {
                free(sets);
                return AR_EXIT_USAGE;
            }
        }
        else if (!strcmp(a, "--threads")) {
            if (cli_parse_long(a, argv[++i], 0, &threads) != 0 || threads > INT_MAX) {
                if (threads > INT_MAX)
                    cli_error("'%s' expects an integer <= %d, got '%s'", a, INT_MAX, argv[i]);
                free(sets);
                return AR_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1]) {
            free(sets);
            return cli_usage_error(usage, "unknown option '%s'", a);
        } else if (!config)
            config = a;
        else {
            free(sets);
            return cli_usage_error(usage, "unexpected argument '%s'", a);
        }
    }
    if (resume && out && strcmp(resume, out) != 0) {
        free(sets);
        return cli_usage_error(usage, "'--resume' continues the run in its own directory; drop '--out'");
    }
    if (resume && force) {
        free(sets);
        return cli_usage_error(usage, "'--force' starts a new run and '--resume' continues one; give one of them");
    }
    ar_config cfg;
    ar_err e = {{0}};
    char resume_cfg[4200];
    ar_config_defaults(&cfg);
    if (resume && !config) {
        snprintf(resume_cfg, sizeof resume_cfg, "%s/config.yaml", resume);
        config = resume_cfg;
    }
    if (config && ar_config_load(&cfg, config, &e) != 0)
        goto fail;
    for (int i = 0; i < nsets; i++)
        if (ar_config_set(&cfg, sets[i], &e) != 0)
            goto fail;
    if (threads >= 0)
        cfg.train.threads = (int)threads;
    cli_apply_device(&cfg, dev, prec);
    if (ar_config_validate(&cfg, &e) != 0)
        goto fail;
    if (access(cfg.data.train, R_OK) != 0 && strcmp(cfg.data.train, AR_DEFAULT_CORPUS) == 0) {
        ar_fail(&e, "training data '%s' not found: run 'tools/get-data.sh' to install the King James "
                    "Bible corpus there, or choose a file with --set data.train=FILE",
                AR_DEFAULT_CORPUS);
        goto fail;
    }
    char outbuf[AR_PATH_MAX + 64];
    if (resume)
        out = resume;
    else if (!out) {
        default_out(config, outbuf, sizeof outbuf);
        out = outbuf;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A file size limit (ulimit -f) makes write() fail with EFBIG, which is
     * reported like a full disk, instead of killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    int tty = isatty(STDOUT_FILENO);
    ar_train_opts o = {.out_dir = out, .resume = resume != NULL, .force = force, .progress = show_progress,
                       .warn = show_warning, .ud = &tty, .interrupt = &interrupted};
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
        free(sets);
        return 128 + (int)interrupted;
    }
    printf("done: %ld steps, train loss %.4f, val loss %.4f", res.step, res.final_loss,
           res.final_val_loss);
    if (cfg.model.vocab_bytes)
        printf(" (%.3f bits/byte)", res.final_val_loss / M_LN2);
    printf(", %.0f tok/s\nrun saved in '%s' (model.safetensors, metrics.jsonl, loss.png, dynamics.png%s)\n",
           res.tok_per_s, out, cfg.model.residual.kind == AR_RES_BASELINE ? "" : ", depth_attn.png");
    free(sets);
    return AR_EXIT_OK;
fail:
    cli_error("%s", e.msg);
    free(sets);
    return AR_EXIT_FAIL;
}
