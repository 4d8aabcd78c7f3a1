#include "child.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/atomic.h"

int ar_child_start(ar_child *c, int (*fn)(void *ud, int fd), void *ud, int flags, const char *what, ar_err *e)
{
    int fds[2];
    *c = (ar_child){.pid = -1, .fd = -1, .what = what};
    if (pipe(fds) != 0)
        return ar_fail(e, "cannot create a pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return ar_fail(e, "cannot start %s: %s", what, strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        if (flags & AR_CHILD_OWN_GROUP) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) /* the parent died before prctl */
                _exit(1);
        }
        int rc = fn(ud, fds[1]);
        close(fds[1]);
        fflush(NULL);
        _exit(rc);
    }
    close(fds[1]);
    c->pid = pid;
    c->fd = fds[0];
    return 0;
}

int ar_child_ended(ar_child *c, ar_err *e)
{
    if (c->ended)
        return 1;
    pid_t r = waitpid(c->pid, &c->status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return 0;
    if (r < 0)
        return ar_fail(e, "waiting for %s: %s", c->what, strerror(errno));
    c->ended = 1;
    return 1;
}

int ar_child_finish(ar_child *c, void *buf, size_t cap, size_t *got, ar_err *e)
{
    char drop[4096];
    *got = 0;
    for (;;) {
        int room = *got < cap;
        ssize_t k = room ? read(c->fd, (char *)buf + *got, cap - *got) : read(c->fd, drop, sizeof drop);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (room)
            *got += (size_t)k;
    }
    close(c->fd);
    c->fd = -1;
    while (!c->ended) {
        if (waitpid(c->pid, &c->status, 0) >= 0)
            c->ended = 1;
        else if (errno != EINTR)
            return ar_fail(e, "waiting for %s: %s", c->what, strerror(errno));
    }
    return 0;
}

/* How an ended child failed; tail follows an exit status. */
static int ended_badly(const ar_child *c, const char *tail, ar_err *e)
{
    if (WIFSIGNALED(c->status)) {
        int sig = WTERMSIG(c->status);
        /* the kernel's OOM killer sends SIGKILL */
        return ar_fail(e, "%s was killed by signal %d (%s)%s", c->what, sig, strsignal(sig),
                       sig == SIGKILL ? ": out of memory?" : "");
    }
    return ar_fail(e, "%s exited with status %d%s", c->what, WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1,
                   tail);
}

static int exited_ok(const ar_child *c)
{
    return WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
}

int ar_child_check(const ar_child *c, ar_err *e)
{
    return exited_ok(c) ? 0 : ended_badly(c, "", e);
}

void ar_child_stop(ar_child *c, int sig)
{
    if (!c->ended) {
        kill(c->pid, sig);
        while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
            ;
        c->ended = 1;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

typedef struct {
    void (*fill)(void *ud, void *buf);
    void *ud, *buf;
    size_t n;
} fill_job;

static int fill_and_send(void *ud, int fd)
{
    const fill_job *j = ud;
    memset(j->buf, 0, j->n);
    j->fill(j->ud, j->buf);
    (void)ar_write_all(fd, j->buf, j->n); /* a short result is the parent's to report */
    return 0;
}

int ar_child_run(void (*fill)(void *ud, void *buf), void *ud, void *buf, size_t n, const char *what, ar_err *e)
{
    fill_job j = {fill, ud, buf, n};
    ar_child c;
    size_t got;
    if (ar_child_start(&c, fill_and_send, &j, 0, what, e) != 0 || ar_child_finish(&c, buf, n, &got, e) != 0)
        return -1;
    if (got != n || !exited_ok(&c))
        return ended_badly(&c, " without a result", e);
    return 0;
}
