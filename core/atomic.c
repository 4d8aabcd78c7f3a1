#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* strerror with a lowercase first letter, as every attnres message. */
static const char *reason(int err, char *buf, size_t n)
{
    snprintf(buf, n, "%s", strerror(err ? err : EIO));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

/* fsync of the directory makes the rename durable.  File systems that
 * cannot sync a directory answer EINVAL; that is not an error. */
static int sync_dir(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd) < 0 && errno != EINVAL ? -1 : 0;
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int ar_write_atomic(const char *path, ar_atomic_fill fill, void *ud, ar_err *e)
{
    size_t tn = strlen(path) + 32;
    char *tmp = ar_xmalloc(tn), why[256];
    snprintf(tmp, tn, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int err = errno;
        ar_fail(e, "cannot write '%s': cannot create '%s': %s", path, tmp, reason(err, why, sizeof why));
        free(tmp);
        return -1;
    }
    errno = 0;
    int rc = fill(f, ud);
    if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = -1;
    int err = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        err = errno;
    }
    if (rc != 0) {
        ar_fail(e, "cannot write '%s': write error on '%s': %s", path, tmp, reason(err, why, sizeof why));
    } else if (rename(tmp, path) != 0) {
        rc = -1;
        ar_fail(e, "cannot write '%s': cannot rename '%s' over it: %s", path, tmp,
                reason(errno, why, sizeof why));
    }
    if (rc != 0) {
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    char dir[4096];
    if (sync_dir(path, dir, sizeof dir) != 0)
        return ar_fail(e, "cannot write '%s': cannot sync directory '%s': %s", path, dir,
                       reason(errno, why, sizeof why));
    return 0;
}

/* mkdir that accepts an existing directory, and only a directory: 1 if it
 * made dir, 0 if dir was there, -1 on failure. */
static int mkdir_one(const char *dir, ar_err *e)
{
    char why[256];
    struct stat st;
    if (mkdir(dir, 0777) == 0)
        return 1;
    int err = errno;
    if (err == EEXIST && stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        err = ENOTDIR;
    }
    return ar_fail(e, "cannot create directory '%s': %s", dir, reason(err, why, sizeof why));
}

int ar_mkdir_p_new(const char *path, int *first_new, ar_err *e)
{
    char buf[4096];
    int first = -1, rc = 0;
    if (first_new)
        *first_new = -1;
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ar_fail(e, "directory name '%.64s...' is too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if ((rc = mkdir_one(buf, e)) < 0)
            break;
        if (rc == 1 && first < 0)
            first = (int)(p - buf);
        *p = '/';
    }
    if (rc >= 0 && (rc = mkdir_one(buf, e)) == 1 && first < 0)
        first = (int)strlen(buf);
    if (first_new)
        *first_new = first;
    if (rc < 0) {
        ar_rmdir_new(path, first);
        return -1;
    }
    return 0;
}

int ar_mkdir_p(const char *path, ar_err *e) { return ar_mkdir_p_new(path, NULL, e); }

void ar_rmdir_new(const char *path, int first_new)
{
    char buf[4096];
    if (first_new <= 0 || snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return;
    /* deepest first, up to the first directory made; one that is not
     * empty (rmdir fails) ends the walk */
    for (size_t n = strlen(buf); (int)n >= first_new;) {
        while (n > 1 && buf[n - 1] == '/')
            n--;
        buf[n] = 0;
        if ((int)n < first_new || (rmdir(buf) != 0 && errno != ENOENT))
            return;
        char *slash = strrchr(buf, '/');
        if (!slash)
            return;
        n = (size_t)(slash - buf);
    }
}

int ar_sync_dir(const char *dir, ar_err *e)
{
    char why[256];
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) < 0 && errno != EINVAL)) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return ar_fail(e, "cannot sync directory '%s': %s", dir, reason(err, why, sizeof why));
    }
    close(fd);
    return 0;
}

static int copy_from(FILE *f, void *ud)
{
    FILE *in = ud;
    char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, f) != k)
            return -1;
    return ferror(in) ? -1 : 0;
}

int ar_link_or_copy(const char *src, const char *dst, ar_err *e)
{
    char why[256];
    if (link(src, dst) == 0)
        return 0;
    int err = errno;
    /* No hard links here (EPERM, EXDEV, ENOTSUP, EMLINK...): copy. */
    if (err == EEXIST || err == ENOENT || err == EACCES || err == ENOSPC || err == EROFS || err == EDQUOT)
        return ar_fail(e, "cannot link '%s' to '%s': %s", dst, src, reason(err, why, sizeof why));
    FILE *in = fopen(src, "rb");
    if (!in)
        return ar_fail(e, "cannot read '%s': %s", src, reason(errno, why, sizeof why));
    int rc = ar_write_atomic(dst, copy_from, in, e);
    fclose(in);
    return rc;
}

int ar_write_all(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t k = write(fd, (const char *)buf + put, n - put);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}
