/* Error reporting for the whole library.
 *
 * Every fallible function returns 0 on success and -1 on failure, filling the
 * caller's ar_err with one message in the project's style: lowercase, no
 * trailing period, the subject in single quotes, and where it applies the
 * place ("file:line:col: ...").  The CLI prints it as "attnres: error: MSG".
 * A message is one line: control characters in it are shown as '?'.
 * The library never prints and never exits. */
#ifndef AR_ERROR_H
#define AR_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_err {
    char msg[2048];
} ar_err;

/* Formats msg into e (if e is non-NULL) and returns -1, so callers can write
 * `return ar_fail(e, "...", ...);`.  If e already holds a message it is
 * replaced. */
int ar_fail(ar_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message (adds context on the way up). */
int ar_wrap(ar_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* strerror(err) in the messages' style: "permission denied", not
 * "Permission denied" (a per-thread buffer, valid until the next call). */
const char *ar_strerror(int err);

/* malloc/calloc that abort the process with a message on out-of-memory
 * (there is no sensible recovery from that inside a training step). */
void *ar_xmalloc(size_t n);
void *ar_xcalloc(size_t n, size_t size);
char *ar_xstrdup(const char *s);

#ifdef __cplusplus
}
#endif

#endif
