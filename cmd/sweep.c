/* attnres sweep: parse the command line, load the grid, call
 * ar_sweep_run_all, show what happens. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/sweep.h"
#include "../study/sweep.h"
#include "cmds.h"
#include "sweep_view.h"

static const char *usage = "attnres sweep [CONFIG] [--set KEY=VALUE]... [--out DIR] [--jobs J] [--dry-run] "
                           "[--device cpu|cuda] [--precision fp32|bf16]";

static void print_plan(const ar_sweep *s, const char *out, int jobs)
{
    printf("sweep of %d runs (%d sizes x %d variants) into '%s', %d at a time\n", s->nruns, s->nsizes,
           s->nvariants, out, jobs);
    printf("%-24s %6s %3s %9s %8s %11s %11s %10s\n", "run", "d", "n", "N", "steps", "tokens", "FLOPs",
           "PF-days");
    double total = 0;
    for (int i = 0; i < s->nruns; i++) {
        const ar_sweep_run *r = &s->runs[i];
        ar_sweep_compute c;
        ar_err e;
        if (ar_sweep_compute_of(r, &c, &e) != 0)
            continue;
        total += c.flops;
        printf("%-24s %6d %3d %9ld %8ld %11ld %11.3e %10.3e\n", r->name, r->cfg.model.d_model, r->cfg.model.n_layer,
               c.nonembed_params, r->cfg.train.steps, r->tokens, c.flops, c.pflops_days);
    }
    printf("total %.3e FLOPs (%.3e PFLOP/s-days)\n", total, total / (1e15 * 86400));
    fflush(stdout);
}

int cmd_sweep(int argc, char **argv)
{
    const char *config = NULL, *out = NULL;
    long jobs = 1;
    int dry = 0;
    /* --device and --precision become the last --set of every run */
    const char **sets = calloc((size_t)argc + 2, sizeof *sets);
    int nsets = 0, rc = AR_EXIT_FAIL, dev = -1, prec = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "--set") || !strcmp(a, "--out") || !strcmp(a, "--jobs") || !strcmp(a, "--device") ||
             !strcmp(a, "--precision")) &&
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
        else if (!strcmp(a, "--jobs")) {
            if (cli_parse_long("--jobs", argv[++i], 1, &jobs) != 0) {
                free(sets);
                fprintf(stderr, "usage: %s\n", usage);
                return AR_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--device") || !strcmp(a, "--precision")) {
            if (cli_device_option(usage, a, argv[++i], &dev, &prec) != 0) {
                free(sets);
                return AR_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--dry-run"))
            dry = 1;
        else if (a[0] == '-' && a[1]) {
            free(sets);
            return cli_usage_error(usage, "unknown option '%s'", a);
        } else if (!config)
            config = a;
        else {
            free(sets);
            return cli_usage_error(usage, "unexpected argument '%s'", a);
        }
    }
    if (dev >= 0)
        sets[nsets++] = dev == AR_DEVICE_CUDA ? "train.device=cuda" : "train.device=cpu";
    if (prec >= 0 || dev == AR_DEVICE_CPU)
        sets[nsets++] = prec == AR_PREC_BF16 ? "train.precision=bf16" : "train.precision=fp32";
    ar_sweep s;
    ar_err e = {{0}};
    int loaded = config ? ar_sweep_load(&s, config, sets, nsets, &e)
                        : ar_sweep_parse(&s, ar_sweep_builtin_yaml, strlen(ar_sweep_builtin_yaml),
                                         AR_SWEEP_BUILTIN_NAME, NULL, sets, nsets, &e);
    free(sets);
    if (loaded != 0) {
        cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    /* A missing device or data fails now, not after the first run's setup. */
    for (int i = 0; i < s.nruns; i++) {
        if (cli_check_device(&s.runs[i].cfg, &e) != 0) {
            cli_error("run '%s': %s", s.runs[i].name, e.msg);
            ar_sweep_free(&s);
            return AR_EXIT_FAIL;
        }
        const char *train = s.runs[i].cfg.data.train;
        if (access(train, R_OK) == 0)
            continue;
        if (strcmp(train, AR_DEFAULT_CORPUS) == 0)
            cli_error("training data '%s' not found: run 'tools/get-data.sh' to install the King James Bible "
                      "corpus there, or choose a file with --set data.train=FILE",
                      AR_DEFAULT_CORPUS);
        else
            cli_error("training data '%s' of run '%s' not found", train, s.runs[i].name);
        ar_sweep_free(&s);
        return AR_EXIT_FAIL;
    }
    char outbuf[AR_PATH_MAX];
    if (!out) {
        sweep_default_out(config, "", "scaling", outbuf, sizeof outbuf);
        out = outbuf;
    }
    print_plan(&s, out, (int)jobs);
    sweep_warn_configs(&s);
    if (dry) {
        ar_sweep_free(&s);
        return AR_EXIT_OK;
    }
    sweep_catch_signals();
    sweep_view v = {.s = &s, .tty = jobs == 1 && isatty(STDOUT_FILENO)};
    ar_sweep_opts o = {.out_dir = out, .jobs = (int)jobs, .event = sweep_view_event,
                       .progress = sweep_view_progress, .ud = &v, .interrupt = &sweep_interrupted};
    ar_sweep_result res;
    int st = ar_sweep_run_all(&s, &o, &res, &e);
    sweep_view_end(&v);
    if (st != 0) {
        cli_error("%s", e.msg);
    } else if (res.interrupted) {
        printf("interrupted: %d of %d runs finished, the others keep their checkpoints; run the same "
               "command again to continue\n",
               res.finished, s.nruns);
        rc = 130;
    } else {
        printf("sweep done: %d runs (%d reused, %d trained); results in '%s/results.csv'\n"
               "fit the scaling laws with: attnres fit-scaling %s --out %s/scaling.png\n",
               res.finished, res.skipped, res.trained, out, out, out);
        rc = AR_EXIT_OK;
    }
    ar_sweep_free(&s);
    return rc;
}
