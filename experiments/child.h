/* Work in a forked child process that sends bytes back to its parent
 * through a pipe: a run of a sweep trained beside others, a bench variant
 * measured in a process whose peak memory is its own. */
#ifndef AR_CHILD_H
#define AR_CHILD_H

#include <stddef.h>
#include <sys/types.h>

#include "../core/error.h"

typedef struct {
    pid_t pid;
    int fd;           /* the pipe's read end; -1 once closed */
    int ended;        /* reaped: status holds its wait status */
    int status;
    const char *what; /* names the process in messages ("the training process") */
} ar_child;

/* ar_child_start's flags. */
enum {
    /* A process group of its own, so that a Ctrl-C at the terminal reaches
     * the parent alone, which decides what to forward; and SIGTERM to the
     * child when the parent dies, so that no orphan goes on working. */
    AR_CHILD_OWN_GROUP = 1,
};

/* Forks a child that runs fn(ud, fd), fd the pipe's write end, and leaves
 * with _exit(fn's return value) after flushing its stdio: the parent's
 * atexit handlers never run twice, and the parent's unflushed output
 * (flushed before the fork) is not written twice.  what must stay valid
 * while c is in use.  0, or -1 with e set. */
int ar_child_start(ar_child *c, int (*fn)(void *ud, int fd), void *ud, int flags, const char *what, ar_err *e);

/* Without blocking: 1 when the child has ended (it is reaped, c->status
 * set), 0 while it runs; -1 with e set when it cannot be waited for. */
int ar_child_ended(ar_child *c, ar_err *e);

/* Reads what the child sends until it closes the pipe: the first cap bytes
 * into buf (their number in *got), the rest read and dropped so that the
 * child never blocks on a full pipe.  Then closes the pipe and waits for
 * the child, unless ar_child_ended has seen it end.  0, or -1 with e set
 * when it cannot be waited for. */
int ar_child_finish(ar_child *c, void *buf, size_t cap, size_t *got, ar_err *e);

/* 0 for an ended child that exited with status 0; otherwise -1 with e set
 * to how it ended: "WHAT was killed by signal 9 (Killed): out of memory?"
 * or "WHAT exited with status 3". */
int ar_child_check(const ar_child *c, ar_err *e);

/* Stops a child early (the parent gave up on it): sends sig, waits for it
 * and closes the pipe. */
void ar_child_stop(ar_child *c, int sig);

/* The whole round trip when the child's work is to fill n bytes of buf (in
 * its own copy, zeroed first): fill(ud, buf) runs in a child, the parent
 * receives the n bytes into its buf.  0 when all n arrived and the child
 * exited with 0; else -1 with e set ("WHAT exited with status 1 without a
 * result", or how it was killed). */
int ar_child_run(void (*fill)(void *ud, void *buf), void *ud, void *buf, size_t n, const char *what, ar_err *e);

#endif
