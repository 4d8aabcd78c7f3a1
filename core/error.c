#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message is one line: control characters that came in with names taken
 * from files (a tensor name with a "\n" escape, a CSV column name with a
 * line break) are shown as '?'. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

__attribute__((format(printf, 3, 0))) static void vfail(ar_err *e, ar_err_kind kind, const char *fmt, va_list ap)
{
    if (e) {
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        one_line(e->msg);
        e->kind = kind;
    }
}

int ar_fail(ar_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(e, AR_ERR_OTHER, fmt, ap);
    va_end(ap);
    return -1;
}

int ar_fail_kind(ar_err *e, ar_err_kind kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(e, kind, fmt, ap);
    va_end(ap);
    return -1;
}

ar_err_kind ar_errno_kind(int err) { return err == ENOENT || err == ENOTDIR ? AR_ERR_NOT_FOUND : AR_ERR_IO; }

int ar_wrap(ar_err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char prefix[1024], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t np = strlen(prefix), cap = sizeof e->msg - 1;
    if (np > cap)
        np = cap;
    memcpy(e->msg, prefix, np);
    size_t at = np;
    for (const char *s = ": "; *s && at < cap; s++)
        e->msg[at++] = *s;
    size_t no = strlen(old);
    if (no > cap - at)
        no = cap - at;
    memcpy(e->msg + at, old, no);
    e->msg[at + no] = 0;
    one_line(e->msg);
    return -1;
}

const char *ar_strerror(int err)
{
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

static void oom(size_t n)
{
    fprintf(stderr, "attnres: error: out of memory allocating %zu bytes\n", n);
    abort();
}

void *ar_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *ar_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

char *ar_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ar_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
