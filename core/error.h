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

/* What kind of failure an error is, for callers that act on it (an exit
 * status, whether to add context): they test the kind, never the text,
 * which is for people and may change.  The kind is set where the error is
 * made; ar_wrap keeps it. */
typedef enum ar_err_kind {
    /* Any failure that no caller tells apart (ar_fail's kind). */
    AR_ERR_OTHER = 0,
    /* A file, directory or named thing does not exist. */
    AR_ERR_NOT_FOUND,
    /* A value the user gave is wrong on its own, whatever else is set: an
     * option's argument, a variant name, a config key or value that does
     * not parse, is out of range or names nothing known.  Values each fine
     * alone that do not fit together (a block layout that does not sum to
     * the model's depth, 'model.d_model' not divisible by 'model.n_head')
     * are OTHER.  The CLI answers a BAD_VALUE in an option's argument as a
     * wrong command line (exit status 2). */
    AR_ERR_BAD_VALUE,
    /* Reading or writing failed: permission denied, disk full, a read
     * error. */
    AR_ERR_IO,
    /* A file's contents are malformed: not valid YAML, a truncated or
     * corrupt token file. */
    AR_ERR_FORMAT,
    /* Refused before anything was changed: the previous state (the
     * checkpoint already on disk) is kept, and the message says so. */
    AR_ERR_KEPT,
} ar_err_kind;

typedef struct ar_err {
    /* kind and msg in one unnamed member, so that the `ar_err e = {{0}}`
     * written throughout zeroes both without a missing-initializer
     * warning */
    struct {
        ar_err_kind kind;
        char msg[2048];
    };
} ar_err;

/* Formats msg into e (if e is non-NULL) and returns -1, so callers can write
 * `return ar_fail(e, "...", ...);`.  If e already holds a message it is
 * replaced, and its kind becomes AR_ERR_OTHER. */
int ar_fail(ar_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ar_fail with a kind: `return ar_fail_kind(e, AR_ERR_BAD_VALUE, ...);`. */
int ar_fail_kind(ar_err *e, ar_err_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (adds context on the way up);
 * the kind stays. */
int ar_wrap(ar_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The kind of a failed system call's errno: AR_ERR_NOT_FOUND for a path
 * that does not exist (ENOENT, ENOTDIR), else AR_ERR_IO. */
ar_err_kind ar_errno_kind(int err);

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
