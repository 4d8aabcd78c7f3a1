/* Atomic file replacement, the one way every attnres file is written:
 * the content goes to PATH.tmp.<pid> in the same directory, is flushed and
 * fsync'ed, renamed over PATH, and the directory is fsync'ed so the rename
 * itself is durable.  A crash at any moment leaves the old file or the whole
 * new one; a failure removes the temporary file and leaves PATH untouched. */
#ifndef AR_ATOMIC_H
#define AR_ATOMIC_H

#include <stdio.h>

#include "error.h"

/* Writes the content into f; returns 0, or -1 with errno set. */
typedef int (*ar_atomic_fill)(FILE *f, void *ud);

/* Errors read "cannot write 'PATH': <step>: <reason>", the step being
 * "cannot create 'TMP'", "write error on 'TMP'", "cannot rename 'TMP' over
 * it" or "cannot sync directory 'DIR'". */
int ar_write_atomic(const char *path, ar_atomic_fill fill, void *ud, ar_err *e);

/* mkdir -p: creates path and its missing parents (mode 0777 less umask). */
int ar_mkdir_p(const char *path, ar_err *e);

/* ar_mkdir_p that says what it made: *first_new is the length of the
 * prefix of path naming the first directory it created (path's
 * directories up to there already existed), or -1 if it created none. */
int ar_mkdir_p_new(const char *path, int *first_new, ar_err *e);

/* Undoes ar_mkdir_p_new: removes the directories it made, deepest first,
 * while they are empty. */
void ar_rmdir_new(const char *path, int first_new);

/* fsync of directory dir, so the names created, renamed or removed in it
 * are durable ("cannot sync directory 'DIR': <reason>"). */
int ar_sync_dir(const char *dir, ar_err *e);

/* Gives the file src a second name dst (a new file; dst must not exist):
 * a hard link, or where the file system has none an atomic copy.  Files
 * that are only ever replaced by rename, never changed in place, can share
 * their bytes this way. */
int ar_link_or_copy(const char *src, const char *dst, ar_err *e);

/* write(2) until all n bytes are out, retrying after EINTR; 0, or -1 with
 * errno set.  Async-signal-safe (signal handlers, forked children). */
int ar_write_all(int fd, const void *buf, size_t n);

#endif
