/* metrics.jsonl: one JSON object per line (docs/reference.md §4.5).
 *
 * Appends are durable line by line: each line goes out in one write() and is
 * fsync'ed, so a crash leaves at most a partial last line.  Readers skip such
 * a partial last line; a bad line anywhere else is an error.  Resuming a run
 * first cuts the file back to the checkpoint's step. */
#ifndef AR_METRICS_H
#define AR_METRICS_H

#include "../core/error.h"
#include "json.h"

/* Appends json_line (one JSON object, no newline inside) plus '\n' to path,
 * creating the file if needed, then fsyncs.  If the file ends in an
 * unterminated line (a crash mid-append), a '\n' is written first so the new
 * record stays a line of its own. */
int ar_metrics_append(const char *path, const char *json_line, ar_err *e);

/* Reads every record of path into *rows (a malloc'd array of *n parsed
 * objects; free with ar_metrics_free).  Blank lines are ignored; an
 * unparseable last line is skipped silently (an interrupted append); an
 * unparseable or non-object line elsewhere fails with "path:line: ...". */
int ar_metrics_read(const char *path, ar_json ***rows, int *n, ar_err *e);
void ar_metrics_free(ar_json **rows, int n);
/* ar_metrics_read that also gives, in *linenos (malloc'd, *n entries), the
 * 1-based line of each record, so readers can place their own complaints
 * about a record's fields ("path:line: ..."). */
int ar_metrics_read_lines(const char *path, ar_json ***rows, int **linenos, int *n, ar_err *e);

/* Atomically rewrites path (temporary file, fsync, rename) keeping only the
 * lines whose "step" is <= step, byte for byte; lines with no numeric "step"
 * (run-level notes) are kept, a partial last line is dropped.  A missing
 * file is not an error: there is nothing to cut. */
int ar_metrics_truncate_after(const char *path, long step, ar_err *e);

#endif
