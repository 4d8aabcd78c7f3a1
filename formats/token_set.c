/* Token sets (token_set.h): shards found by file, directory or glob, each
 * validated from its header and size alone, then read in place through a
 * read-only memory map.
 *
 * Memory.  A map costs no memory until its pages are touched, and touched
 * pages of a file map count in the process's RSS until they are unmapped.
 * A training run reads windows scattered over the whole set, so without
 * care its RSS would grow towards the size of the data.  After every copy
 * the pages it touched are released with MADV_DONTNEED: for a MAP_SHARED
 * file map that only drops this process's page-table entries (the page
 * cache keeps the data, and the next touch maps it again), so RSS stays
 * independent of how many windows a run has read.  MADV_RANDOM stops the
 * kernel reading ahead of a fault, but one fault still maps more than its
 * page: the cached pages around it ("fault-around", fault_around_bytes,
 * 64 KiB of virtual addresses by default) and, with large page-cache
 * folios (ext4 and tmpfs on recent kernels), the whole folio, up to 2 MiB
 * of file offsets on x86-64 (measured here: one 514-byte window mapped
 * 1.2 MB).  So the span released is the copied bytes rounded out to both
 * alignments and clipped to the map; a window of a few hundred bytes would
 * otherwise release nothing.  Releasing a page another thread is copying
 * is harmless: it faults back in from the page cache.  The cost, about
 * 10 us a window for the refault, is small next to a training step. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "token_set.h"

#include "tokens.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define HEADER_BYTES 1024
#define AROUND_ALIGN ((uintptr_t)64 << 10) /* the kernel's default fault_around_bytes */
#define FOLIO_ALIGN ((size_t)2 << 20)       /* the largest page-cache folio (a PMD on x86-64) */
#define CHECK_CHUNK ((size_t)1 << 20)       /* tokens per step of ar_token_set_check */
#define PRINT_TOKENS 4096                   /* tokens at each end of a shard in the fingerprint */

typedef struct {
    char *path;
    unsigned char *map; /* the whole file, mapped (NULL: held in heap or borrowed) */
    size_t map_len;
    unsigned char *heap;      /* inflated gzip data (NULL: none) */
    const unsigned char *tok; /* the first token */
    size_t n, first;          /* its tokens; the stream index of the first */
    int native;               /* int32 in host order (a wrapped array), not little-endian */
} shard;

struct ar_token_set {
    char *name; /* the spec, for messages */
    shard *sh;
    int nsh;
    size_t count;
    ar_token_format fmt;
};

static const char *format_name(ar_token_format f)
{
    return f == AR_TOKENS_U16 ? "uint16" : f == AR_TOKENS_U32 ? "uint32" : "text";
}

const char *ar_token_format_name(ar_token_format f)
{
    return format_name(f);
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---------------------------------------------------------------- finding the shards */

typedef struct {
    char **v;
    int n, cap;
} path_list;

static void list_add(path_list *l, char *p)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, (size_t)l->cap * sizeof *v);
        if (!v)
            ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
        l->v = v;
    }
    l->v[l->n++] = p;
}

static void list_free(path_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (path_list){0};
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Every regular file of dir whose name does not start with '.', as paths
 * dir/name. */
static int list_dir(const char *dir, path_list *l, ar_err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return ar_fail_kind(e, ar_errno_kind(errno), "'%s': %s", dir, ar_strerror(errno));
    size_t nd = strlen(dir);
    int slash = nd > 0 && dir[nd - 1] == '/';
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        size_t len = nd + 1 + strlen(de->d_name) + 1;
        char *p = ar_xmalloc(len);
        snprintf(p, len, "%s%s%s", dir, slash ? "" : "/", de->d_name);
        if (is_regular(p))
            list_add(l, p);
        else
            free(p);
    }
    closedir(d);
    if (l->n == 0)
        return ar_fail_kind(e, AR_ERR_NOT_FOUND,
                            "'%s': the directory holds no shards (regular files whose name does not start with '.')",
                            dir);
    return 0;
}

static int list_glob(const char *pattern, path_list *l, ar_err *e)
{
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc != 0 && rc != GLOB_NOMATCH) {
        globfree(&g);
        return ar_fail_kind(e, AR_ERR_IO, "'%s': cannot expand the pattern (%s)", pattern,
                            rc == GLOB_NOSPACE ? "out of memory" : "a read error");
    }
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        if (is_regular(g.gl_pathv[i]))
            list_add(l, ar_xstrdup(g.gl_pathv[i]));
    globfree(&g);
    if (l->n == 0)
        return ar_fail_kind(e, AR_ERR_NOT_FOUND, "'%s' matches no file", pattern);
    return 0;
}

/* The shards spec names, in name order. */
static int find_shards(const char *spec, path_list *l, ar_err *e)
{
    struct stat st;
    if (stat(spec, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            if (list_dir(spec, l, e) != 0)
                return -1;
        } else {
            list_add(l, ar_xstrdup(spec));
        }
    } else if (strpbrk(spec, "*?[")) {
        if (list_glob(spec, l, e) != 0)
            return -1;
    } else {
        return ar_fail_kind(e, ar_errno_kind(errno), "'%s': %s", spec, ar_strerror(errno));
    }
    qsort(l->v, (size_t)l->n, sizeof *l->v, by_name);
    return 0;
}

/* ---------------------------------------------------------------- one shard */

/* The format and token count of a shard from its first bytes (a header's
 * worth, or all of them where the shard is shorter) and its size. */
static int classify(const char *path, const unsigned char *head, size_t size, ar_token_format *fmt, size_t *count,
                    ar_err *e)
{
    if (size == 0)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s' is empty: a shard holds at least one token", path);
    uint32_t magic = size >= 4 ? le32(head) : 0;
    if (magic != AR_LLMC_MAGIC_U16 && magic != AR_LLMC_MAGIC_U32) {
        *fmt = AR_TOKENS_TEXT; /* one token a byte */
        *count = size;
        return 0;
    }
    int u32 = magic == AR_LLMC_MAGIC_U32;
    if (size < HEADER_BYTES)
        return ar_fail_kind(e, AR_ERR_FORMAT,
                            "'%s': token file header is truncated: magic %lu needs a %d-byte header, the file holds %zu bytes",
                            path, (unsigned long)magic, HEADER_BYTES, size);
    int32_t version = (int32_t)le32(head + 4), want = u32 ? 7 : 1;
    if (version != want)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': byte 4: token file magic %lu needs version %d, found version %ld",
                            path, (unsigned long)magic, (int)want, (long)version);
    int32_t n = (int32_t)le32(head + 8);
    if (n <= 0)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': byte 8: header token count is %ld; a shard holds at least one token",
                            path, (long)n);
    size_t width = u32 ? 4 : 2, want_bytes = (size_t)n * width, got = size - HEADER_BYTES;
    if (got != want_bytes)
        return ar_fail_kind(e, AR_ERR_FORMAT,
                            "'%s': header says %ld tokens (%zu bytes after the %d-byte header) but the file holds %zu "
                            "bytes after it (%s)",
                            path, (long)n, want_bytes, HEADER_BYTES, got, got < want_bytes ? "truncated" : "too long");
    *fmt = u32 ? AR_TOKENS_U32 : AR_TOKENS_U16;
    *count = (size_t)n;
    return 0;
}

/* A gzip shard inflated into s->heap (fd stays open: the caller's). */
static int inflate_shard(shard *s, int fd, size_t *len, ar_err *e)
{
    int fd2 = dup(fd);
    gzFile g = fd2 >= 0 ? gzdopen(fd2, "rb") : NULL;
    if (!g) {
        if (fd2 >= 0)
            close(fd2);
        return ar_fail_kind(e, AR_ERR_IO, "'%s': cannot read: %s", s->path, ar_strerror(errno ? errno : ENOMEM));
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = ar_xmalloc(cap);
    int k;
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *nb = realloc(buf, cap);
            if (!nb)
                ar_xmalloc((size_t)-1);
            buf = nb;
        }
        size_t want = cap - n > (size_t)INT_MAX ? (size_t)INT_MAX : cap - n;
        k = gzread(g, buf + n, (unsigned)want);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    int code;
    const char *msg = gzerror(g, &code);
    int rc = 0;
    if (code == Z_ERRNO)
        rc = ar_fail_kind(e, AR_ERR_IO, "'%s': cannot read: %s", s->path, ar_strerror(errno));
    else if (k < 0 || (code != Z_OK && code != Z_STREAM_END))
        rc = ar_fail_kind(e, AR_ERR_FORMAT, "'%s': corrupt gzip data after %zu inflated bytes: %s", s->path, n, msg);
    gzclose(g);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    s->heap = buf;
    *len = n;
    return 0;
}

/* Opens, validates and maps one shard: its header is read with pread, its
 * tokens are never touched. */
static int open_shard(shard *s, ar_token_format *fmt, ar_err *e)
{
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ar_fail_kind(e, ar_errno_kind(errno), "'%s': %s", s->path, ar_strerror(errno));
    int rc = -1;
    struct stat st;
    unsigned char head[HEADER_BYTES];
    ssize_t nhead = 0;
    if (fstat(fd, &st) != 0) {
        ar_fail_kind(e, AR_ERR_IO, "'%s': %s", s->path, ar_strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        ar_fail_kind(e, AR_ERR_FORMAT, "'%s' is not a regular file", s->path);
        goto done;
    }
    size_t size = (size_t)st.st_size;
    size_t want = size < HEADER_BYTES ? size : HEADER_BYTES;
    while ((size_t)nhead < want) {
        ssize_t k = pread(fd, head + nhead, want - (size_t)nhead, (off_t)nhead);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            ar_fail_kind(e, AR_ERR_IO, "'%s': cannot read the header: %s", s->path, ar_strerror(errno));
            goto done;
        }
        if (k == 0)
            break; /* shrank since fstat: classify sees the shorter header */
        nhead += k;
    }
    if ((size_t)nhead < want)
        size = (size_t)nhead;
    size_t count;
    if (size >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
        /* gzip: inflated into memory, then told apart as any shard */
        size_t len = 0;
        if (inflate_shard(s, fd, &len, e) != 0 ||
            classify(s->path, s->heap, len, fmt, &count, e) != 0)
            goto done;
        s->tok = s->heap + (*fmt == AR_TOKENS_TEXT ? 0 : HEADER_BYTES);
    } else {
        if (classify(s->path, head, size, fmt, &count, e) != 0)
            goto done;
        void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            ar_fail_kind(e, AR_ERR_IO, "'%s': cannot map %zu bytes: %s", s->path, size, ar_strerror(errno));
            goto done;
        }
        (void)madvise(m, size, MADV_RANDOM); /* advice: no read-ahead around a window */
        s->map = m;
        s->map_len = size;
        s->tok = s->map + (*fmt == AR_TOKENS_TEXT ? 0 : HEADER_BYTES);
    }
    s->n = count;
    rc = 0;
done:
    close(fd);
    return rc;
}

static void free_shard(shard *s)
{
    if (s->map)
        munmap(s->map, s->map_len);
    free(s->heap);
    free(s->path);
}

/* ---------------------------------------------------------------- the set */

static ar_token_set *new_set(const char *name, int nsh)
{
    ar_token_set *ts = ar_xcalloc(1, sizeof *ts);
    ts->name = ar_xstrdup(name);
    ts->sh = ar_xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *ts->sh);
    ts->nsh = nsh;
    return ts;
}

ar_token_set *ar_token_set_open(const char *spec, ar_err *e)
{
    path_list l = {0};
    if (find_shards(spec, &l, e) != 0) {
        list_free(&l);
        return NULL;
    }
    ar_token_set *ts = new_set(spec, l.n);
    int ok = 1;
    for (int i = 0; i < l.n && ok; i++) {
        shard *s = &ts->sh[i];
        s->path = l.v[i];
        l.v[i] = NULL;
        ar_token_format fmt;
        ok = open_shard(s, &fmt, e) == 0;
        if (ok && i == 0)
            ts->fmt = fmt;
        else if (ok && fmt != ts->fmt) {
            ar_fail_kind(e, AR_ERR_FORMAT, "'%s' holds %s tokens but '%s' holds %s tokens: the shards of a set share one format",
                         s->path, format_name(fmt), ts->sh[0].path, format_name(ts->fmt));
            ok = 0;
        }
        s->first = ts->count;
        ts->count += s->n;
    }
    list_free(&l);
    if (!ok) {
        ar_token_set_free(ts);
        return NULL;
    }
    return ts;
}

ar_token_set *ar_token_set_wrap(const int32_t *tok, size_t n, const char *name)
{
    ar_token_set *ts = new_set(name, 1);
    ts->fmt = AR_TOKENS_U32;
    ts->sh[0] = (shard){.path = ar_xstrdup(name), .tok = (const unsigned char *)tok, .n = n, .native = 1};
    ts->count = n;
    return ts;
}

void ar_token_set_free(ar_token_set *ts)
{
    if (!ts)
        return;
    for (int i = 0; i < ts->nsh; i++)
        free_shard(&ts->sh[i]);
    free(ts->sh);
    free(ts->name);
    free(ts);
}

size_t ar_token_set_count(const ar_token_set *ts) { return ts->count; }
ar_token_format ar_token_set_format(const ar_token_set *ts) { return ts->fmt; }
int ar_token_set_shards(const ar_token_set *ts) { return ts->nsh; }

const char *ar_token_set_shard_path(const ar_token_set *ts, int i)
{
    return i >= 0 && i < ts->nsh ? ts->sh[i].path : NULL;
}

size_t ar_token_set_shard_first(const ar_token_set *ts, int i)
{
    return i >= 0 && i < ts->nsh ? ts->sh[i].first : ts->count;
}

/* ---------------------------------------------------------------- reading */

/* Drops the pages holding shard bytes [lo, hi) from this process's RSS
 * (the rounding is the file comment's). */
static void release(const shard *s, size_t lo, size_t hi)
{
    if (!s->map || hi <= lo)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)s->map;
    uintptr_t end = base + ((s->map_len + page - 1) & ~(page - 1));
    /* the folio: file offsets (the map starts at offset 0) */
    uintptr_t a = base + (lo & ~(FOLIO_ALIGN - 1)), b = base + ((hi + FOLIO_ALIGN - 1) & ~(FOLIO_ALIGN - 1));
    /* fault-around: virtual addresses */
    uintptr_t a2 = (base + lo) & ~(AROUND_ALIGN - 1), b2 = (base + hi + AROUND_ALIGN - 1) & ~(AROUND_ALIGN - 1);
    a = a2 < a ? a2 : a;
    b = b2 > b ? b2 : b;
    if (a < base)
        a = base;
    if (b > end)
        b = end;
    if (a < b)
        (void)madvise((void *)a, b - a, MADV_DONTNEED); /* advice: the data stays in the file */
}

static int width_of(ar_token_format f)
{
    return (int)f; /* the enum's values are the bytes a token */
}

/* Tokens [i, i + n) of shard s into out as int32 bit patterns (a uint32 id
 * above INT32_MAX comes out negative, for the caller to refuse). */
static void widen(const shard *s, int width, size_t i, size_t n, int32_t *out)
{
    const unsigned char *p = s->tok + i * (size_t)width;
    if (s->native) {
        memcpy(out, p, n * sizeof *out);
    } else if (width == 1) {
        for (size_t k = 0; k < n; k++)
            out[k] = p[k];
    } else if (width == 2) {
        for (size_t k = 0; k < n; k++)
            out[k] = (int32_t)(p[2 * k] | p[2 * k + 1] << 8);
    } else {
        for (size_t k = 0; k < n; k++)
            out[k] = (int32_t)le32(p + 4 * k);
    }
}

/* The first token of out[0..n) (shard s's tokens from i) that is negative
 * (a uint32 id above INT32_MAX) or not below limit (> 0), as an error;
 * else 0 with the largest id in *mx. */
static int scan(const shard *s, size_t i, const int32_t *out, size_t n, int32_t limit, int32_t *mx, ar_err *e)
{
    uint32_t hi = 0; /* as unsigned: a negative id is the largest */
    for (size_t k = 0; k < n; k++)
        hi = (uint32_t)out[k] > hi ? (uint32_t)out[k] : hi;
    if (hi <= (uint32_t)INT32_MAX && (limit <= 0 || hi < (uint32_t)limit)) {
        if ((int32_t)hi > *mx)
            *mx = (int32_t)hi;
        return 0;
    }
    for (size_t k = 0;; k++) {
        uint32_t v = (uint32_t)out[k];
        if (v > (uint32_t)INT32_MAX)
            return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token %zu has id %lu, above the largest id attnres supports (%ld)",
                                s->path, i + k, (unsigned long)v, (long)INT32_MAX);
        if (limit > 0 && v >= (uint32_t)limit)
            return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token %zu has id %lu but the vocabulary holds %ld ids", s->path,
                                i + k, (unsigned long)v, (long)limit);
    }
}

/* The shard holding stream index off. */
static int shard_of(const ar_token_set *ts, size_t off)
{
    int lo = 0, hi = ts->nsh - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ts->sh[mid].first <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int read_span(const ar_token_set *ts, size_t off, size_t n, int32_t limit, int32_t *out, int32_t *mx,
                     ar_err *e)
{
    if (off > ts->count || n > ts->count - off)
        return ar_fail_kind(e, AR_ERR_OTHER, "'%s': tokens %zu to %zu asked for, but the set holds %zu tokens",
                            ts->name, off, off + n, ts->count);
    int width = width_of(ts->fmt);
    for (int si = n ? shard_of(ts, off) : ts->nsh; n > 0 && si < ts->nsh; si++) {
        const shard *s = &ts->sh[si];
        size_t i = off - s->first, m = s->n - i < n ? s->n - i : n;
        if (m == 0)
            continue; /* an empty wrapped shard */
        widen(s, width, i, m, out);
        size_t lo = (size_t)(s->tok - (s->map ? s->map : s->tok)) + i * (size_t)width;
        release(s, lo, lo + m * (size_t)width);
        if (scan(s, i, out, m, limit, mx, e) != 0)
            return -1;
        out += m;
        off += m;
        n -= m;
    }
    return 0;
}

int ar_token_set_read(const ar_token_set *ts, size_t off, size_t n, int32_t limit, int32_t *out, ar_err *e)
{
    int32_t mx = -1;
    return read_span(ts, off, n, limit, out, &mx, e);
}

int ar_token_set_check(const ar_token_set *ts, int32_t limit, int32_t *max_id, ar_token_progress progress, void *ud,
                       ar_err *e)
{
    size_t chunk = ts->count < CHECK_CHUNK ? (ts->count ? ts->count : 1) : CHECK_CHUNK;
    int32_t *buf = ar_xmalloc(chunk * sizeof *buf);
    int32_t mx = -1;
    int rc = 0;
    if (progress)
        progress(ud, 0, ts->count);
    for (size_t off = 0; off < ts->count && rc == 0; off += chunk) {
        size_t m = ts->count - off < chunk ? ts->count - off : chunk;
        rc = read_span(ts, off, m, limit, buf, &mx, e);
        if (rc == 0 && progress)
            progress(ud, off + m, ts->count);
    }
    free(buf);
    if (rc == 0 && max_id)
        *max_id = mx;
    return rc;
}

/* ---------------------------------------------------------------- fingerprint */

/* CRC-32 of shard tokens [i, i + n) as int32 little-endian, through buf
 * (PRINT_TOKENS ids). */
static uLong crc_tokens(uLong crc, const shard *s, int width, size_t i, size_t n, int32_t *buf)
{
    unsigned char bytes[4 * PRINT_TOKENS];
    while (n > 0) {
        size_t m = n < PRINT_TOKENS ? n : PRINT_TOKENS;
        widen(s, width, i, m, buf);
        size_t lo = (size_t)(s->tok - (s->map ? s->map : s->tok)) + i * (size_t)width;
        release(s, lo, lo + m * (size_t)width);
        for (size_t k = 0; k < m; k++) {
            uint32_t v = (uint32_t)buf[k];
            bytes[4 * k] = (unsigned char)v;
            bytes[4 * k + 1] = (unsigned char)(v >> 8);
            bytes[4 * k + 2] = (unsigned char)(v >> 16);
            bytes[4 * k + 3] = (unsigned char)(v >> 24);
        }
        crc = crc32(crc, bytes, (uInt)(4 * m));
        i += m;
        n -= m;
    }
    return crc;
}

uint32_t ar_token_set_fingerprint(const ar_token_set *ts)
{
    int width = width_of(ts->fmt);
    int32_t buf[PRINT_TOKENS];
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int si = 0; si < ts->nsh; si++) {
        const shard *s = &ts->sh[si];
        unsigned char cnt[8];
        for (int k = 0; k < 8; k++)
            cnt[k] = (unsigned char)((uint64_t)s->n >> (8 * k));
        crc = crc32(crc, cnt, sizeof cnt);
        if (s->n < 2 * PRINT_TOKENS) {
            crc = crc_tokens(crc, s, width, 0, s->n, buf);
        } else {
            crc = crc_tokens(crc, s, width, 0, PRINT_TOKENS, buf);
            crc = crc_tokens(crc, s, width, s->n - PRINT_TOKENS, PRINT_TOKENS, buf);
        }
    }
    return (uint32_t)crc;
}
