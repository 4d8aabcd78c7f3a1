/* metrics.jsonl: durable appends, tolerant reads, atomic cut-back on resume. */
#include "metrics.h"

#include "../core/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail_errno(ar_err *e, const char *what, const char *path, int err)
{
    char why[256];
    snprintf(why, sizeof why, "%s", strerror(err));
    if (why[0] >= 'A' && why[0] <= 'Z')
        why[0] = (char)(why[0] - 'A' + 'a');
    return what ? ar_fail(e, "cannot %s '%s': %s", what, path, why) : ar_fail(e, "'%s': %s", path, why);
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 1 if the file is non-empty and its last byte is not '\n'. */
static int ends_mid_line(int fd)
{
    struct stat st;
    char c;
    if (fstat(fd, &st) != 0 || st.st_size == 0)
        return 0;
    return pread(fd, &c, 1, st.st_size - 1) == 1 && c != '\n';
}

int ar_metrics_append(const char *path, const char *json_line, ar_err *e)
{
    size_t n = strlen(json_line);
    if (memchr(json_line, '\n', n))
        return ar_fail(e, "cannot append to '%s': a metrics record must be a single line", path);
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail_errno(e, "append to", path, errno);
    /* One write per record, so an interrupted append can only leave a prefix
     * of this line; a previous such prefix is closed off first. */
    int lead = ends_mid_line(fd);
    char *buf = ar_xmalloc(n + 2);
    if (lead)
        buf[0] = '\n';
    memcpy(buf + lead, json_line, n);
    buf[lead + n] = '\n';
    int rc = write_all(fd, buf, n + 1 + (size_t)lead);
    if (rc == 0)
        rc = fsync(fd);
    int err = errno;
    free(buf);
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        err = errno;
    }
    return rc == 0 ? 0 : fail_errno(e, "append to", path, err);
}

/* ---------------------------------------------------------------- reading */

/* Whole file, NUL-terminated; ENOENT is reported as *missing = 1. */
static char *slurp(const char *path, size_t *len, int *missing, ar_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing)
            *missing = errno == ENOENT;
        fail_errno(e, NULL, path, errno);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, k;
    char *buf = ar_xmalloc(cap);
    while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        ar_fail(e, "cannot read '%s'", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

typedef struct {
    char *text;  /* NUL-terminated in place */
    size_t len;
    int lineno;  /* 1-based */
} line;

static int blank(const char *s)
{
    return s[strspn(s, " \t\r")] == '\0';
}

/* Splits buf into its non-blank lines (each '\n' becomes a NUL). */
static line *split_lines(char *buf, size_t len, int *nlines)
{
    int cap = 64, n = 0, lineno = 0;
    line *v = ar_xmalloc((size_t)cap * sizeof *v);
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        *stop = '\0';
        lineno++;
        if (!blank(p)) {
            if (n == cap) {
                cap *= 2;
                line *nv = realloc(v, (size_t)cap * sizeof *v);
                if (!nv)
                    ar_xmalloc((size_t)-1);
                v = nv;
            }
            v[n++] = (line){p, (size_t)(stop - p), lineno};
        }
        p = stop + 1;
    }
    *nlines = n;
    return v;
}

/* Parses one line: 1 = *out holds an object, 0 = skip (unparseable last
 * line: an interrupted append), -1 = error naming path:line. */
static int parse_line(const char *path, const line *l, int is_last, ar_json **out, ar_err *e)
{
    ar_err pe;
    pe.msg[0] = '\0';
    ar_json *j = ar_json_parse(l->text, l->len, &pe);
    if (!j) {
        if (is_last)
            return 0;
        return ar_fail(e, "%s:%d: %s", path, l->lineno, pe.msg);
    }
    if (j->type != AR_JSON_OBJ) {
        ar_json_free(j);
        return ar_fail(e, "%s:%d: expected a JSON object per line", path, l->lineno);
    }
    *out = j;
    return 1;
}

int ar_metrics_read(const char *path, ar_json ***rows, int *n, ar_err *e)
{
    return ar_metrics_read_lines(path, rows, NULL, n, e);
}

int ar_metrics_read_lines(const char *path, ar_json ***rows, int **linenos, int *n, ar_err *e)
{
    *rows = NULL;
    *n = 0;
    if (linenos)
        *linenos = NULL;
    size_t len;
    char *buf = slurp(path, &len, NULL, e);
    if (!buf)
        return -1;
    int nl;
    line *lines = split_lines(buf, len, &nl);
    ar_json **v = ar_xcalloc((size_t)nl, sizeof *v);
    int *at = linenos ? ar_xcalloc((size_t)nl + 1, sizeof(int)) : NULL;
    int k = 0, rc = 0;
    for (int i = 0; i < nl && rc >= 0; i++) {
        rc = parse_line(path, &lines[i], i == nl - 1, &v[k], e);
        if (rc > 0 && at)
            at[k] = lines[i].lineno;
        if (rc > 0)
            k++;
    }
    free(lines);
    free(buf);
    if (rc < 0) {
        ar_metrics_free(v, k);
        free(at);
        return -1;
    }
    *rows = v;
    *n = k;
    if (linenos)
        *linenos = at;
    return 0;
}

void ar_metrics_free(ar_json **rows, int n)
{
    if (!rows)
        return;
    for (int i = 0; i < n; i++)
        ar_json_free(rows[i]);
    free(rows);
}

/* ---------------------------------------------------------------- cutting */

/* Keep a record unless it has a numeric "step" beyond the cut. */
static int keep_row(const ar_json *j, long step)
{
    const ar_json *s = ar_json_get(j, "step");
    if (!s || s->type != AR_JSON_NUM)
        return 1;
    return s->is_int ? s->inum <= step : s->num <= (double)step;
}

typedef struct {
    const line *lines;
    const int *keep;
    int nl;
} kept_lines;

static int write_lines(FILE *f, void *ud)
{
    const kept_lines *k = ud;
    for (int i = 0; i < k->nl; i++)
        if (k->keep[i] && (fwrite(k->lines[i].text, 1, k->lines[i].len, f) != k->lines[i].len ||
                           fputc('\n', f) == EOF))
            return -1;
    return 0;
}

/* Atomic replacement: a crash leaves either the old or the new file. */
static int replace_file(const char *path, const line *lines, const int *keep, int nl, ar_err *e)
{
    kept_lines k = {lines, keep, nl};
    return ar_write_atomic(path, write_lines, &k, e);
}

int ar_metrics_truncate_after(const char *path, long step, ar_err *e)
{
    size_t len;
    int missing = 0;
    char *buf = slurp(path, &len, &missing, e);
    if (!buf)
        return missing ? 0 : -1;
    int nl;
    line *lines = split_lines(buf, len, &nl);
    int *keep = ar_xcalloc((size_t)nl, sizeof *keep);
    int rc = 0;
    for (int i = 0; i < nl && rc >= 0; i++) {
        ar_json *j = NULL;
        rc = parse_line(path, &lines[i], i == nl - 1, &j, e);
        if (rc > 0) {
            keep[i] = keep_row(j, step);
            ar_json_free(j);
        }
    }
    if (rc >= 0)
        rc = replace_file(path, lines, keep, nl, e);
    free(keep);
    free(lines);
    free(buf);
    return rc < 0 ? -1 : 0;
}
