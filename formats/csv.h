/* A small strict CSV reader (RFC 4180) and field writer.
 *
 * The first record is the header; columns are looked up by name.  Fields are
 * separated by commas, records by LF or CRLF.  A field may be quoted with
 * double quotes, inside which commas, line breaks and doubled quotes ("")
 * stand for themselves.  Strictness, so that a damaged file is an error
 * rather than a silent misreading:
 *   - every record has exactly as many fields as the header;
 *   - a quote inside an unquoted field, text after a closing quote, an
 *     unterminated quoted field, a NUL byte, and duplicate or empty column
 *     names are errors;
 *   - a final line break is optional, a UTF-8 byte order mark is skipped,
 *     and nothing else is ignored: a blank line is a record of one empty
 *     field (so an error unless there is a single column).
 * Errors name the place as "NAME:LINE: ..." with LINE the 1-based line on
 * which the offending record (or the offending byte) lies.  The parser works
 * on a length-delimited buffer and never reads past it. */
#ifndef AR_CSV_H
#define AR_CSV_H

#include <stddef.h>
#include <stdio.h>

#include "../core/error.h"

typedef struct {
    char *name;      /* file name used in messages */
    int ncols;
    char **header;   /* ncols column names */
    int nrows;       /* data records, header excluded */
    char **cells;    /* nrows * ncols, row-major, NUL-terminated strings */
    int *line;       /* nrows: the line each record starts on */
} ar_csv;

/* Parses text[0..len) (NUL bytes are an error, not an end). */
int ar_csv_parse(ar_csv **out, const char *text, size_t len, const char *name, ar_err *e);
/* Reads and parses a file; name = path. */
int ar_csv_read(ar_csv **out, const char *path, ar_err *e);
void ar_csv_free(ar_csv *c);

/* Index of the column named `name`, or -1. */
int ar_csv_col(const ar_csv *c, const char *name);
/* Same, or an error "NAME:1: no column 'x' (columns: a, b, c)". */
int ar_csv_require_col(const ar_csv *c, const char *name, ar_err *e);
static inline const char *ar_csv_cell(const ar_csv *c, int row, int col)
{
    return c->cells[(size_t)row * (size_t)c->ncols + (size_t)col];
}
/* The cell as a finite decimal number (leading/trailing spaces allowed), or
 * "NAME:LINE: column 'x' expects a number, got 'abc'". */
int ar_csv_num(const ar_csv *c, int row, int col, double *out, ar_err *e);

/* Writes one field, quoted when it holds a comma, a quote, a line break or
 * leading/trailing spaces (quotes doubled). */
void ar_csv_write_field(FILE *f, const char *s);

#endif
