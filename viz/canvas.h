/* Where a figure is drawn and how it is written: a cairo surface for PNG
 * (encoded by libpng, viz/png.h, with text chunks), SVG or PDF (cairo's own
 * vector surfaces), always written atomically (core/atomic.h).
 *
 * Every figure records what it shows:
 *   PNG  tEXt chunks  Title, Software ("attnres VERSION"), attnres:run and
 *                     attnres:step (where the figure has them),
 *                     attnres:command
 *   PDF  document metadata: title, creator, subject (run and step),
 *                     keywords (the command line)
 *   SVG  <title> and <desc> elements */
#ifndef AR_VIZ_CANVAS_H
#define AR_VIZ_CANVAS_H

#include <cairo.h>
#include <stddef.h>

#include "../core/error.h"

typedef enum { AR_FIG_AUTO = 0, AR_FIG_PNG, AR_FIG_SVG, AR_FIG_PDF } ar_fig_format;

typedef struct {
    const char *run;      /* the run (or runs, comma-separated) drawn; NULL = none */
    const char *step;     /* its training step (or steps); NULL = none */
    const char *command;  /* NULL = this process's command line */
    ar_fig_format format; /* AUTO = by the path's extension (.svg, .pdf; else PNG) */
} ar_fig_meta;

/* Format by name ("png", "svg", "pdf"): 0, or -1 for another name. */
int ar_fig_format_parse(const char *name, ar_fig_format *out);
/* The format a path gets: f itself, or for AUTO the extension's. */
ar_fig_format ar_fig_format_of(const char *path, ar_fig_format f);
/* ".png", ".svg" or ".pdf". */
const char *ar_fig_format_ext(ar_fig_format f);

/* This process's command line, arguments quoted for a shell where needed
 * (from /proc/self/cmdline; "attnres" where that cannot be read), into buf. */
void ar_fig_command_line(char *buf, size_t cap);

typedef struct {
    cairo_surface_t *sf;
    cairo_t *cr;
    int w, h;
    ar_fig_format fmt;
    char *buf; /* SVG/PDF: the bytes cairo has produced so far */
    size_t len, cap;
} ar_canvas;

/* A white w x h canvas for path in format fmt (AUTO: by extension). */
int ar_canvas_open(ar_canvas *c, const char *path, int w, int h, ar_fig_format fmt, ar_err *e);
/* Checks the drawing went through, writes path with the metadata (title:
 * the figure's title, '\n' read as " / "), and frees the canvas. */
int ar_canvas_close(ar_canvas *c, const char *path, const char *title, const ar_fig_meta *m, ar_err *e);
/* Frees the canvas without writing anything. */
void ar_canvas_discard(ar_canvas *c);

#endif
