#include "csv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A growing byte buffer for the field being read. */
typedef struct {
    char *s;
    size_t len, cap;
} buf;

static void buf_put(buf *b, char c)
{
    if (b->len + 1 >= b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        char *s = ar_xmalloc(cap);
        if (b->len)
            memcpy(s, b->s, b->len);
        free(b->s);
        b->s = s;
        b->cap = cap;
    }
    b->s[b->len++] = c;
}

static char *buf_take(buf *b)
{
    char *s = ar_xmalloc(b->len + 1);
    if (b->len)
        memcpy(s, b->s, b->len);
    s[b->len] = '\0';
    b->len = 0;
    return s;
}

/* A growing array of strings. */
typedef struct {
    char **v;
    size_t n, cap;
} strs;

static void strs_push(strs *a, char *s)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        char **v = ar_xmalloc(cap * sizeof *v);
        if (a->n)
            memcpy(v, a->v, a->n * sizeof *v);
        free(a->v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = s;
}

static void strs_free(strs *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

void ar_csv_free(ar_csv *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->ncols; i++)
        free(c->header[i]);
    free(c->header);
    for (size_t i = 0; i < (size_t)c->nrows * (size_t)c->ncols; i++)
        free(c->cells[i]);
    free(c->cells);
    free(c->line);
    free(c->name);
    free(c);
}

__attribute__((format(printf, 4, 5))) static int fail_line(ar_err *e, const char *name, long line,
                                                           const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ar_fail(e, "%s:%ld: %s", name, line, msg);
}

/* Only LF / CRLF line breaks and the end of the text remain from here on:
 * blank lines up to the end of the text are ignored. */
static int only_blank_lines_left(const char *t, size_t i, size_t len)
{
    for (; i < len; i++)
        if (t[i] != '\n' && t[i] != '\r')
            return 0;
    return 1;
}

/* The text being read: where, and the line there (from 1). */
typedef struct {
    const char *t;
    size_t i, len;
    long line;
    const char *name;
} reader;

/* A quoted field, from its opening quote to past its closing one, into f:
 * "" is a quote, line breaks are kept.  0, or -1 with e set. */
static int read_quoted(reader *r, buf *f, ar_err *e)
{
    long open_line = r->line;
    r->i++;
    for (;;) {
        if (r->i >= r->len) {
            fail_line(e, r->name, open_line, "unterminated quoted field (the quote opened on this line is never closed)");
            return -1;
        }
        char c = r->t[r->i];
        if (c == '"') {
            if (r->i + 1 < r->len && r->t[r->i + 1] == '"') {
                buf_put(f, '"');
                r->i += 2;
                continue;
            }
            r->i++;
            break;
        }
        if (c == '\0') {
            fail_line(e, r->name, r->line, "NUL byte in a field");
            return -1;
        }
        if (c == '\n')
            r->line++;
        buf_put(f, c);
        r->i++;
    }
    if (r->i < r->len && r->t[r->i] != ',' && r->t[r->i] != '\n' && r->t[r->i] != '\r') {
        fail_line(e, r->name, r->line, "text after the closing quote of a field (a quote inside a quoted field is written \"\")");
        return -1;
    }
    return 0;
}

/* An unquoted field, up to the comma or line break after it, into f; 0, or
 * -1 with e set. */
static int read_unquoted(reader *r, buf *f, ar_err *e)
{
    while (r->i < r->len && r->t[r->i] != ',' && r->t[r->i] != '\n' && r->t[r->i] != '\r') {
        if (r->t[r->i] == '"') {
            fail_line(e, r->name, r->line, "a quote inside an unquoted field (quote the whole field and double the quote)");
            return -1;
        }
        if (r->t[r->i] == '\0') {
            fail_line(e, r->name, r->line, "NUL byte in a field");
            return -1;
        }
        buf_put(f, r->t[r->i]);
        r->i++;
    }
    return 0;
}

/* One record's fields appended to rec, reading past its line break (field:
 * the buffer for each in turn); 0, or -1 with e set. */
static int read_record(reader *r, buf *field, strs *rec, ar_err *e)
{
    for (;;) {
        if (r->i < r->len && r->t[r->i] == '"') {
            if (read_quoted(r, field, e) != 0)
                return -1;
        } else if (read_unquoted(r, field, e) != 0)
            return -1;
        strs_push(rec, buf_take(field));
        if (r->i < r->len && r->t[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->len && r->t[r->i] == '\r') {
            if (r->i + 1 >= r->len || r->t[r->i + 1] != '\n') {
                fail_line(e, r->name, r->line, "carriage return without a line feed");
                return -1;
            }
            r->i++;
        }
        if (r->i < r->len) { /* '\n' */
            r->i++;
            r->line++;
        }
        return 0;
    }
}

/* Every column of the header named, and no name twice; 0, or -1 with e
 * set. */
static int check_header(char *const *header, int ncols, const char *name, long line, ar_err *e)
{
    for (int a = 0; a < ncols; a++) {
        if (!header[a][0]) {
            fail_line(e, name, line, "column %d of the header has no name", a + 1);
            return -1;
        }
        for (int b = 0; b < a; b++)
            if (strcmp(header[a], header[b]) == 0) {
                fail_line(e, name, line, "duplicate column '%s' in the header", header[a]);
                return -1;
            }
    }
    return 0;
}

/* (*lines)[(*n)++] = line, growing the array (capacity *cap) as needed. */
static void push_line(int **lines, size_t *n, size_t *cap, long line)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        int *l = ar_xmalloc(*cap * sizeof *l);
        if (*n)
            memcpy(l, *lines, *n * sizeof *l);
        free(*lines);
        *lines = l;
    }
    (*lines)[(*n)++] = (int)line;
}

int ar_csv_parse(ar_csv **out, const char *text, size_t len, const char *name, ar_err *e)
{
    *out = NULL;
    if (!name)
        name = "<csv>";
    if (len > (size_t)INT_MAX / 2)
        return ar_fail(e, "%s: file too large (%zu bytes)", name, len);
    size_t i = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    if (only_blank_lines_left(text, i, len))
        return fail_line(e, name, 1, "empty file (expected a header line of column names)");

    reader r = {.t = text, .i = i, .len = len, .line = 1, .name = name};
    buf field = {0};
    strs rec = {0}, cells = {0};
    int *lines = NULL;
    size_t nrec = 0, lines_cap = 0;
    int ncols = -1;
    char **header = NULL;
    int rc = -1;

    while (r.i < len) {
        long rec_line = r.line;
        if (read_record(&r, &field, &rec, e) != 0)
            goto out;
        if (ncols < 0) {
            if (rec.n > 100000) {
                fail_line(e, name, rec_line, "too many columns (%zu)", rec.n);
                goto out;
            }
            ncols = (int)rec.n;
            header = rec.v;
            rec.v = NULL;
            rec.n = rec.cap = 0;
            if (check_header(header, ncols, name, rec_line, e) != 0)
                goto out;
        } else {
            if (rec.n != (size_t)ncols) {
                fail_line(e, name, rec_line, "%zu field%s, expected %d as in the header", rec.n,
                          rec.n == 1 ? "" : "s", ncols);
                goto out;
            }
            for (size_t k = 0; k < rec.n; k++)
                strs_push(&cells, rec.v[k]);
            rec.n = 0;
            push_line(&lines, &nrec, &lines_cap, rec_line);
        }
        if (only_blank_lines_left(text, r.i, len))
            break;
    }

    ar_csv *c = ar_xcalloc(1, sizeof *c);
    c->name = ar_xstrdup(name);
    c->ncols = ncols;
    c->header = header;
    header = NULL;
    c->nrows = (int)nrec;
    c->cells = cells.v;
    cells.v = NULL;
    cells.n = 0;
    c->line = lines;
    lines = NULL;
    *out = c;
    rc = 0;
out:
    free(field.s);
    strs_free(&rec);
    strs_free(&cells);
    if (header) {
        for (int a = 0; a < ncols; a++)
            free(header[a]);
        free(header);
    }
    free(lines);
    return rc;
}

int ar_csv_read(ar_csv **out, const char *path, ar_err *e)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ar_fail(e, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0, got;
    char *s = ar_xmalloc(cap);
    while ((got = fread(s + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            if (cap >= (size_t)INT_MAX / 2) {
                fclose(f);
                free(s);
                return ar_fail(e, "'%s' is too large for a CSV table", path);
            }
            char *t = ar_xmalloc(cap * 2);
            memcpy(t, s, len);
            free(s);
            s = t;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    int rc = err ? ar_fail(e, "cannot read '%s'", path) : ar_csv_parse(out, s, len, path, e);
    free(s);
    return rc;
}

int ar_csv_col(const ar_csv *c, const char *name)
{
    for (int i = 0; i < c->ncols; i++)
        if (strcmp(c->header[i], name) == 0)
            return i;
    return -1;
}

int ar_csv_require_col(const ar_csv *c, const char *name, ar_err *e)
{
    int k = ar_csv_col(c, name);
    if (k >= 0)
        return k;
    char list[1024];
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < c->ncols && used < sizeof list; i++) {
        int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", c->header[i]);
        if (n < 0 || (size_t)n >= sizeof list - used)
            break;
        used += (size_t)n;
    }
    ar_fail(e, "%s:1: no column '%s' (columns: %s)", c->name, name, list);
    return -1;
}

/* "got 'text'" with control characters masked, cut at 60 bytes. */
static void shown(const char *s, char *out, size_t n)
{
    size_t k = 0, len = strlen(s);
    for (; k < len && k < 60 && k + 1 < n; k++)
        out[k] = (unsigned char)s[k] < 0x20 ? '?' : s[k];
    out[k] = '\0';
    if (len > 60 && k + 4 < n)
        strcat(out, "...");
}

int ar_csv_num(const ar_csv *c, int row, int col, double *out, ar_err *e)
{
    const char *s = ar_csv_cell(c, row, col);
    const char *p = s;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    char num[128], got[80];
    int ok = n > 0 && n < sizeof num;
    if (ok) {
        memcpy(num, p, n);
        num[n] = '\0';
        ok = strspn(num, "0123456789+-.eE") == n && strpbrk(num, "0123456789") != NULL;
    }
    if (ok) {
        char *end;
        errno = 0;
        double x = strtod(num, &end);
        if (*end == '\0' && isfinite(x)) {
            *out = x;
            return 0;
        }
    }
    shown(s, got, sizeof got);
    return fail_line(e, c->name, c->line[row], "column '%s' expects a number, got '%s'", c->header[col], got);
}

void ar_csv_write_field(FILE *f, const char *s)
{
    size_t n = strlen(s);
    int quote = strpbrk(s, ",\"\r\n") != NULL || (n > 0 && (s[0] == ' ' || s[n - 1] == ' '));
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}
