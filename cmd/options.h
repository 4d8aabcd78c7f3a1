/* The options several commands share: --set KEY=VALUE (or --set=KEY=VALUE),
 * --device cpu|cuda, --precision fp32|bf16, --threads N and --out PATH.
 * Each command names those it takes; to it the others stay unknown
 * options.  A command's parsing:
 *
 *     cli_opts so;
 *     cli_opts_init(&so, usage, CLI_SET | CLI_OUT, own, argc, argv);
 *     for (const char *a, *v; (a = cli_opts_next(&so, &v));)
 *         ... the command's own options and arguments ...
 *     if (so.bad) ... exit status AR_EXIT_USAGE ...
 *     ... cli_opts_apply(&so, &cfg, &e) ...
 *     cli_opts_free(&so);
 */
#ifndef AR_CMD_OPTIONS_H
#define AR_CMD_OPTIONS_H

#include "../core/config.h"
#include "../core/error.h"

enum {
    CLI_SET = 1 << 0,
    CLI_DEVICE = 1 << 1,
    CLI_PRECISION = 1 << 2,
    CLI_THREADS = 1 << 3,
    CLI_OUT = 1 << 4,
};

typedef struct {
    const char *usage;      /* the command's, for usage errors */
    unsigned takes;         /* CLI_* */
    const char *const *own; /* the command's own options that take a value */
    int argc, i;            /* the command line and the argument at hand */
    char **argv;
    const char **sets;      /* the --set values in order */
    int nsets;
    const char *out;        /* NULL: not given */
    int threads;            /* -1: not given */
    int dev, prec;          /* ar_device, ar_precision; -1: not given */
    int bad;                /* parsing stopped at a missing or wrong value */
} cli_opts;

/* Nothing given yet, for the command line argv (argv[0] the command's
 * name).  own lists the command's own options that take a value,
 * NULL-terminated (NULL: none). */
void cli_opts_init(cli_opts *o, const char *usage, unsigned takes, const char *const *own, int argc, char **argv);
/* The next argument for the command itself, past the shared options it
 * takes, which are consumed on the way; *v is the value of one of its own
 * options (else NULL).  NULL at the end, or after the error message of a
 * missing or bad value: then o->bad is set, for exit status
 * AR_EXIT_USAGE. */
const char *cli_opts_next(cli_opts *o, const char **v);
/* An argument that no option took: the first that is no option goes into
 * *first (the command's CONFIG or RUN); 0, or -1 after the error of an
 * unknown option or of a second argument. */
int cli_opts_argument(const cli_opts *o, const char *a, const char **first);
/* Over c, in this order: every --set, --threads, then --device and
 * --precision, where --device cpu without --precision also selects fp32,
 * the only precision of the CPU backend.  0, or -1 with e set by a --set. */
int cli_opts_apply(const cli_opts *o, ar_config *c, ar_err *e);
/* --device and --precision as the last two --set values (the same rule as
 * cli_opts_apply), for a command whose configs are made from the --set
 * values elsewhere (a sweep applies them to each of its runs). */
void cli_opts_device_as_sets(cli_opts *o);
void cli_opts_free(cli_opts *o);

#endif
