#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/backend.h"
#include "cmds.h"

int cli_quiet;

void cli_error(const char *fmt, ...)
{
    if (cli_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("attnres: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_usage_error(const char *usage, const char *fmt, ...)
{
    if (cli_quiet)
        return AR_EXIT_USAGE;
    va_list ap;
    va_start(ap, fmt);
    fputs("attnres: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fprintf(stderr, "usage: %s\n", usage);
    return AR_EXIT_USAGE;
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    }
    return 0;
}

int cli_parse_long(const char *opt, const char *s, long min, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < min) {
        cli_error("'%s' expects an integer >= %ld, got '%s'", opt, min, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_int(const char *opt, const char *s, long min, int *out)
{
    long v;
    if (cli_parse_long(opt, s, min, &v) != 0)
        return -1;
    if (v > INT_MAX) {
        cli_error("'%s' expects an integer <= %d, got '%s'", opt, INT_MAX, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_int_list(const char *s, int **out, int *n)
{
    *n = 0;
    *out = calloc(strlen(s) / 2 + 2, sizeof(int));
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 100000 || (*end && *end != ','))
            return -1;
        (*out)[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return -1;
    }
    return *n > 0 ? 0 : -1;
}

int cli_parse_positive(const char *usage, const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= 0)
        return cli_usage_error(usage, "'%s' expects a positive number, got '%s'", opt, s);
    *out = v;
    return 0;
}

int cli_check_device(const ar_config *c, ar_err *e)
{
    if (c->train.device != AR_DEVICE_CUDA || ar_cuda_built())
        return 0;
    return ar_backend_open("cuda", c->train.precision == AR_PREC_BF16, e) ? 0 : -1;
}

/* Plain-text rendering for machines without man(1): drops requests and
 * font escapes, keeps the words. */
static void print_roff_plain(const char *roff)
{
    const char *p = roff;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        int request = n > 0 && (p[0] == '.' || p[0] == '\'');
        if (request && n > 4 && (strncmp(p, ".SH ", 4) == 0 || strncmp(p, ".SS ", 4) == 0)) {
            fputc('\n', stdout);
            p += 4;
            n -= 4;
            request = 0;
        }
        if (!request) {
            for (size_t i = 0; i < n; i++) {
                if (p[i] == '\\' && i + 1 < n) {
                    char c = p[i + 1];
                    if (c == 'f' && i + 2 < n) {
                        i += 2;
                        continue;
                    }
                    if (c == '-' || c == '\\' || c == '.' || c == '&' || c == 'e') {
                        if (c != '&')
                            fputc(c == 'e' ? '\\' : c, stdout);
                        i++;
                        continue;
                    }
                }
                if (p[i] == '"')
                    continue;
                fputc(p[i], stdout);
            }
            fputc('\n', stdout);
        }
        p += n + (eol ? 1 : 0);
    }
}

int cli_show_man(const char *page)
{
    const char *roff = NULL;
    for (int i = 0; i < cli_n_man_pages; i++)
        if (strcmp(cli_man_pages[i].name, page) == 0)
            roff = cli_man_pages[i].roff;
    if (!roff) {
        cli_error("no manual page for '%s'", page);
        return AR_EXIT_FAIL;
    }
    char tmp[] = "/tmp/attnres-man-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        size_t n = strlen(roff);
        int ok = write(fd, roff, n) == (ssize_t)n;
        close(fd);
        if (ok) {
            /* man -l renders a local file; when stdout is no terminal it
             * prints plain text, like git help. */
            char cmd[256];
            snprintf(cmd, sizeof cmd, "man -l %s 2>/dev/null", tmp);
            if (!isatty(STDOUT_FILENO))
                snprintf(cmd, sizeof cmd, "MANPAGER=cat MANWIDTH=80 man -l %s 2>/dev/null", tmp);
            fflush(stdout);
            int st = system(cmd);
            unlink(tmp);
            if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return AR_EXIT_OK;
        } else {
            unlink(tmp);
        }
    }
    print_roff_plain(roff);
    return AR_EXIT_OK;
}
