/* attnres data check: a token set's shards, its size and its largest id,
 * from one full pass over its tokens (formats/token_set.h), and with
 * --vocab the first id outside a vocabulary. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/clock.h"
#include "../formats/token_set.h"
#include "cmds.h"
#include "options.h"

static const char *usage = "attnres data check SET [--vocab N]";

typedef struct {
    int tty;       /* stderr is a terminal: the line is redrawn */
    double start, last;
    int drawn;     /* a line without its newline is on the terminal */
} progress_line;

/* "\r checked 45% ..." at most 10 times a second, on a terminal only. */
static void on_progress(void *ud, size_t done, size_t total)
{
    progress_line *p = ud;
    double t = ar_now_s();
    if (!p->tty || (t - p->last < 0.1 && done < total))
        return;
    p->last = t;
    fprintf(stderr, "\rchecking: %zu of %zu tokens (%.0f%%)", done, total,
            total ? 100.0 * (double)done / (double)total : 100.0);
    fflush(stderr);
    p->drawn = 1;
}

static void end_line(progress_line *p)
{
    if (p->drawn)
        fputc('\n', stderr);
    p->drawn = 0;
}

static int check(const char *spec, int32_t vocab, ar_err *e)
{
    ar_token_set *ts = ar_token_set_open(spec, e);
    if (!ts)
        return -1;
    int n = ar_token_set_shards(ts);
    size_t total = ar_token_set_count(ts);
    const char *fmt = ar_token_format_name(ar_token_set_format(ts));
    printf("%s: %d shard%s of %s tokens\n", spec, n, n == 1 ? "" : "s", fmt);
    for (int i = 0; i < n; i++)
        printf("  %s  %zu tokens\n", ar_token_set_shard_path(ts, i),
               ar_token_set_shard_first(ts, i + 1) - ar_token_set_shard_first(ts, i));
    fflush(stdout);

    progress_line p = {.tty = isatty(STDERR_FILENO), .start = ar_now_s()};
    int32_t max_id = -1;
    int rc = ar_token_set_check(ts, vocab, &max_id, on_progress, &p, e);
    end_line(&p);
    if (rc == 0) {
        double secs = ar_now_s() - p.start;
        fprintf(stderr, "checked %zu tokens in %.2f s (%.1f M tokens/s)\n", total, secs,
                secs > 0 ? 1e-6 * (double)total / secs : 0.0);
        printf("tokens      %zu\n", total);
        if (vocab > 0)
            printf("largest id  %ld (below --vocab %ld)\n", (long)max_id, (long)vocab);
        else
            printf("largest id  %ld\n", (long)max_id);
    }
    ar_token_set_free(ts);
    return rc;
}

int cmd_data(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(usage, "missing the subcommand (check)");
    if (strcmp(argv[1], "check") != 0)
        return cli_usage_error(usage, "'%s' is not a subcommand of 'attnres data' (expected check)", argv[1]);
    const char *spec = NULL;
    int vocab = 0, rc = AR_EXIT_USAGE;
    static const char *const own[] = {"--vocab", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, 0, own, argc - 1, argv + 1);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--vocab")) {
            if (cli_parse_int(a, v, 1, &vocab) != 0)
                goto done;
        } else if (cli_opts_argument(&so, a, &spec) != 0) {
            goto done;
        }
    }
    if (so.bad)
        goto done;
    if (!spec) {
        cli_usage_error(usage, "missing the token set (a file, a directory of shards or a glob pattern)");
        goto done;
    }
    ar_err e = {{0}};
    rc = AR_EXIT_OK;
    if (check(spec, (int32_t)vocab, &e) != 0) {
        cli_error("%s", e.msg);
        rc = AR_EXIT_FAIL;
    }
done:
    cli_opts_free(&so);
    return rc;
}
