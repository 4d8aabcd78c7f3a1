/* Figure surfaces and their files (canvas.h). */
#include "canvas.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/atomic.h"
#include "png.h"

#ifndef AR_VERSION
#define AR_VERSION "0.0.0"
#endif

int ar_fig_format_parse(const char *name, ar_fig_format *out)
{
    static const char *const names[] = {"png", "svg", "pdf"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (ar_fig_format)(AR_FIG_PNG + i);
            return 0;
        }
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

ar_fig_format ar_fig_format_of(const char *path, ar_fig_format f)
{
    if (f != AR_FIG_AUTO)
        return f;
    return ends_with(path, ".svg") ? AR_FIG_SVG : ends_with(path, ".pdf") ? AR_FIG_PDF : AR_FIG_PNG;
}

const char *ar_fig_format_ext(ar_fig_format f)
{
    return f == AR_FIG_SVG ? ".svg" : f == AR_FIG_PDF ? ".pdf" : ".png";
}

/* Appends s to buf (capacity cap, used *n), single-quoted when it holds
 * anything but plain word characters. */
static void put_arg(char *buf, size_t cap, size_t *n, const char *s)
{
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p))
            plain = 0;
    char tmp[1024];
    size_t k = 0;
    if (!plain)
        tmp[k++] = '\'';
    for (const char *p = s; *p && k + 6 < sizeof tmp; p++) {
        if (*p == '\'' && !plain) { /* ' inside quotes: close, escaped quote, reopen */
            memcpy(tmp + k, "'\\''", 4);
            k += 4;
        } else {
            tmp[k++] = *p;
        }
    }
    if (!plain)
        tmp[k++] = '\'';
    tmp[k] = '\0';
    int w = snprintf(buf + *n, cap - *n, "%s%s", *n ? " " : "", tmp);
    if (w > 0)
        *n = *n + (size_t)w < cap ? *n + (size_t)w : cap - 1;
}

void ar_fig_command_line(char *buf, size_t cap)
{
    snprintf(buf, cap, "attnres");
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return;
    char raw[8192];
    size_t len = fread(raw, 1, sizeof raw - 1, f);
    fclose(f);
    if (len == 0)
        return;
    raw[len] = '\0';
    size_t n = 0;
    buf[0] = '\0';
    /* argv[0] as its last path component: where the binary lives is noise. */
    const char *a0 = strrchr(raw, '/') ? strrchr(raw, '/') + 1 : raw;
    put_arg(buf, cap, &n, a0);
    for (size_t i = strlen(raw) + 1; i < len; i += strlen(raw + i) + 1)
        put_arg(buf, cap, &n, raw + i);
}

/* ---------------------------------------------------------------- canvas */

static cairo_status_t to_buf(void *closure, const unsigned char *data, unsigned int len)
{
    ar_canvas *c = closure;
    if (c->len + len + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 1 << 16;
        while (c->len + len + 1 > cap)
            cap *= 2;
        char *nb = realloc(c->buf, cap);
        if (!nb)
            return CAIRO_STATUS_NO_MEMORY;
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    return CAIRO_STATUS_SUCCESS;
}

int ar_canvas_open(ar_canvas *c, const char *path, int w, int h, ar_fig_format fmt, ar_err *e)
{
    memset(c, 0, sizeof *c);
    if (w <= 0 || h <= 0 || w > 20000 || h > 20000)
        return ar_fail(e, "cannot plot '%s': %d x %d pixels is not a drawable size", path, w, h);
    c->w = w;
    c->h = h;
    c->fmt = ar_fig_format_of(path, fmt);
    if (c->fmt == AR_FIG_SVG)
        c->sf = cairo_svg_surface_create_for_stream(to_buf, c, w, h);
    else if (c->fmt == AR_FIG_PDF)
        c->sf = cairo_pdf_surface_create_for_stream(to_buf, c, w, h);
    else
        c->sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    c->cr = cairo_create(c->sf);
    cairo_status_t st = cairo_status(c->cr);
    if (st != CAIRO_STATUS_SUCCESS) {
        ar_canvas_discard(c);
        return ar_fail(e, "cannot plot '%s': %s", path, cairo_status_to_string(st));
    }
    cairo_set_source_rgb(c->cr, 1, 1, 1);
    cairo_paint(c->cr);
    return 0;
}

void ar_canvas_discard(ar_canvas *c)
{
    if (c->cr)
        cairo_destroy(c->cr);
    if (c->sf)
        cairo_surface_destroy(c->sf);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

/* The title on one line: '\n' becomes " / ". */
static void one_line(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    for (; s && *s && k + 4 < cap; s++) {
        if (*s == '\n') {
            memcpy(out + k, " / ", 3);
            k += 3;
        } else {
            out[k++] = *s;
        }
    }
    out[k] = '\0';
}

/* A growing byte string. */
typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *data, size_t k)
{
    if (k > ((size_t)1 << 40))
        abort(); /* never: figures are megabytes */
    if (b->n + k + 1 > b->cap) {
        b->cap = (b->n + k + 1) * 2;
        char *ns = ar_xmalloc(b->cap);
        if (b->n)
            memcpy(ns, b->s, b->n);
        free(b->s);
        b->s = ns;
    }
    memcpy(b->s + b->n, data, k);
    b->n += k;
    b->s[b->n] = '\0';
}

/* Text for XML character data: &, < and > escaped. */
static void sb_put_xml(sbuf *b, const char *t)
{
    for (; *t; t++) {
        const char *rep = *t == '&' ? "&amp;" : *t == '<' ? "&lt;" : *t == '>' ? "&gt;" : NULL;
        sb_put(b, rep ? rep : t, rep ? strlen(rep) : 1);
    }
}

typedef struct {
    const char *data;
    size_t len;
} bytes;

static int fill_bytes(FILE *f, void *ud)
{
    const bytes *b = ud;
    if (fwrite(b->data, 1, b->len, f) == b->len)
        return 0;
    if (!errno)
        errno = EIO;
    return -1;
}

/* The SVG with <title> and <desc> right after its opening <svg ...> tag. */
static int write_svg(ar_canvas *c, const char *path, const char *title, const char *desc, ar_err *e)
{
    const char *svg = c->buf ? strstr(c->buf, "<svg") : NULL;
    const char *gt = svg ? strchr(svg, '>') : NULL;
    sbuf b = {0};
    if (gt) {
        size_t head = (size_t)(gt + 1 - c->buf);
        sb_put(&b, c->buf, head);
        sb_put(&b, "\n<title>", 8);
        sb_put_xml(&b, title);
        sb_put(&b, "</title>\n<desc>", 15);
        sb_put_xml(&b, desc);
        sb_put(&b, "</desc>", 7);
        sb_put(&b, c->buf + head, c->len - head);
    } else if (c->len) {
        sb_put(&b, c->buf, c->len);
    }
    bytes out = {b.s ? b.s : "", b.n};
    int rc = ar_write_atomic(path, fill_bytes, &out, e);
    free(b.s);
    return rc;
}

int ar_canvas_close(ar_canvas *c, const char *path, const char *title, const ar_fig_meta *m, ar_err *e)
{
    cairo_status_t st = cairo_status(c->cr);
    if (st != CAIRO_STATUS_SUCCESS) {
        ar_canvas_discard(c);
        return ar_fail(e, "cannot draw '%s': %s", path, cairo_status_to_string(st));
    }
    char cmd[4096], ttl[1024], what[2048];
    if (m && m->command)
        snprintf(cmd, sizeof cmd, "%s", m->command);
    else
        ar_fig_command_line(cmd, sizeof cmd);
    one_line(title ? title : "", ttl, sizeof ttl);
    const char *run = m && m->run ? m->run : "", *step = m && m->step ? m->step : "";
    snprintf(what, sizeof what, "run: %s; step: %s", run, step);
    int rc;
    if (c->fmt == AR_FIG_PNG) {
        cairo_surface_flush(c->sf);
        /* run and step only where the figure has them (fit-scaling's has not) */
        ar_png_text tx[5] = {{"Title", ttl}, {"Software", "attnres " AR_VERSION}};
        int nt = 2;
        if (*run)
            tx[nt++] = (ar_png_text){"attnres:run", run};
        if (*step)
            tx[nt++] = (ar_png_text){"attnres:step", step};
        tx[nt++] = (ar_png_text){"attnres:command", cmd};
        rc = ar_png_write(path, cairo_image_surface_get_data(c->sf), c->w, c->h,
                          cairo_image_surface_get_stride(c->sf), tx, nt, e);
    } else {
        if (c->fmt == AR_FIG_PDF) {
            cairo_pdf_surface_set_metadata(c->sf, CAIRO_PDF_METADATA_TITLE, ttl);
            cairo_pdf_surface_set_metadata(c->sf, CAIRO_PDF_METADATA_CREATOR, "attnres " AR_VERSION);
            cairo_pdf_surface_set_metadata(c->sf, CAIRO_PDF_METADATA_SUBJECT, what);
            cairo_pdf_surface_set_metadata(c->sf, CAIRO_PDF_METADATA_KEYWORDS, cmd);
        }
        cairo_destroy(c->cr);
        c->cr = NULL;
        cairo_surface_finish(c->sf); /* flushes the rest of the file into buf */
        st = cairo_surface_status(c->sf);
        if (st != CAIRO_STATUS_SUCCESS) {
            ar_canvas_discard(c);
            return ar_fail(e, "cannot draw '%s': %s", path, cairo_status_to_string(st));
        }
        if (c->fmt == AR_FIG_SVG) {
            char desc[8192];
            snprintf(desc, sizeof desc, "%s; command: %s; software: attnres %s", what, cmd, AR_VERSION);
            rc = write_svg(c, path, ttl, desc, e);
        } else {
            bytes b = {c->buf ? c->buf : "", c->len};
            rc = ar_write_atomic(path, fill_bytes, &b, e);
        }
    }
    ar_canvas_discard(c);
    return rc;
}
