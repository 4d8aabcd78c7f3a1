#include "options.h"

#include <stdlib.h>
#include <string.h>

#include "../formats/config.h"
#include "cmds.h"

void cli_opts_init(cli_opts *o, const char *usage, unsigned takes, const char *const *own, int argc, char **argv)
{
    /* room for every argument as a --set, and the two of --device and
     * --precision (cli_opts_device_as_sets) */
    *o = (cli_opts){.usage = usage, .takes = takes, .own = own, .argc = argc, .argv = argv,
                    .sets = ar_xcalloc((size_t)argc + 2, sizeof *o->sets), .threads = -1, .dev = -1, .prec = -1};
}

void cli_opts_free(cli_opts *o)
{
    free(o->sets);
    o->sets = NULL;
}

/* The value v of opt among the n names of an enum (name(i) for i < n). */
static int parse_name(const cli_opts *o, const char *opt, const char *v, int n, const char *(*name)(int),
                      const char *expects, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v, name(i)) == 0) {
            *out = i;
            return 0;
        }
    cli_usage_error(o->usage, "'%s' expects %s, got '%s'", opt, expects, v);
    return -1;
}

static const char *device_name(int i) { return ar_device_name((ar_device)i); }
static const char *precision_name(int i) { return ar_precision_name((ar_precision)i); }

/* The value of the option at hand (which it then is); NULL after the
 * error "'OPT' needs a value". */
static const char *value_of(cli_opts *o)
{
    if (o->i + 1 >= o->argc) {
        cli_usage_error(o->usage, "'%s' needs a value", o->argv[o->i]);
        return NULL;
    }
    return o->argv[++o->i];
}

/* The argument at hand as a shared option the command takes: 1 when it was
 * one (consumed with its value), 0 when it is not, -1 after an error. */
static int take(cli_opts *o)
{
    static const struct {
        const char *name;
        unsigned flag;
    } with_value[] = {
        {"--set", CLI_SET},         {"--device", CLI_DEVICE}, {"--precision", CLI_PRECISION},
        {"--threads", CLI_THREADS}, {"--out", CLI_OUT},
    };
    const char *a = o->argv[o->i];
    if ((o->takes & CLI_SET) && strncmp(a, "--set=", 6) == 0) {
        o->sets[o->nsets++] = a + 6;
        return 1;
    }
    unsigned flag = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        if (strcmp(a, with_value[k].name) == 0)
            flag = with_value[k].flag;
    if (!(flag & o->takes))
        return 0;
    const char *v = value_of(o);
    if (!v)
        return -1;
    switch (flag) {
    case CLI_SET: o->sets[o->nsets++] = v; return 1;
    case CLI_OUT: o->out = v; return 1;
    case CLI_THREADS: return cli_parse_int(a, v, 0, &o->threads) == 0 ? 1 : -1;
    case CLI_DEVICE:
        return parse_name(o, a, v, AR_DEVICE_CUDA + 1, device_name, "cpu or cuda", &o->dev) == 0 ? 1 : -1;
    default:
        return parse_name(o, a, v, AR_PREC_BF16 + 1, precision_name, "fp32 or bf16", &o->prec) == 0 ? 1 : -1;
    }
}

static int is_own(const cli_opts *o, const char *a)
{
    for (const char *const *p = o->own; p && *p; p++)
        if (strcmp(a, *p) == 0)
            return 1;
    return 0;
}

const char *cli_opts_next(cli_opts *o, const char **v)
{
    *v = NULL;
    while (++o->i < o->argc) {
        int took = take(o);
        if (took < 0)
            break;
        if (took)
            continue;
        const char *a = o->argv[o->i];
        if (is_own(o, a) && !(*v = value_of(o)))
            break;
        return a;
    }
    o->bad = o->i < o->argc; /* stopped before the end: on an error */
    return NULL;
}

int cli_opts_argument(const cli_opts *o, const char *a, const char **first)
{
    if (a[0] == '-' && a[1])
        cli_usage_error(o->usage, "unknown option '%s'", a);
    else if (*first)
        cli_usage_error(o->usage, "unexpected argument '%s'", a);
    else {
        *first = a;
        return 0;
    }
    return -1;
}

/* The precision the options select, -1 for the config's own. */
static int precision_of(const cli_opts *o)
{
    if (o->prec >= 0)
        return o->prec;
    return o->dev == AR_DEVICE_CPU ? AR_PREC_FP32 : -1;
}

int cli_opts_apply(const cli_opts *o, ar_config *c, ar_err *e)
{
    for (int i = 0; i < o->nsets; i++)
        if (ar_config_set(c, o->sets[i], e) != 0)
            return -1;
    if (o->threads >= 0)
        c->train.threads = o->threads;
    if (o->dev >= 0)
        c->train.device = (ar_device)o->dev;
    if (precision_of(o) >= 0)
        c->train.precision = (ar_precision)precision_of(o);
    return 0;
}

void cli_opts_device_as_sets(cli_opts *o)
{
    if (o->dev >= 0)
        o->sets[o->nsets++] = o->dev == AR_DEVICE_CUDA ? "train.device=cuda" : "train.device=cpu";
    if (precision_of(o) >= 0)
        o->sets[o->nsets++] = precision_of(o) == AR_PREC_BF16 ? "train.precision=bf16" : "train.precision=fp32";
}
