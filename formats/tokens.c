/* Token streams: raw (or gzip) text as bytes, and llm.c/nanoGPT token files.
 *
 * Every read goes through zlib's gz* API, which passes plain files through
 * unchanged and inflates gzip ones, so ".gz" is decided by content, not by
 * name, and a gzipped token file works too.  Token files are read straight
 * into the int32 array (uint16 ids are widened in place), and buffers grow
 * with the data actually read, so a corrupt header claiming billions of
 * tokens cannot make us allocate for them. */
#include "tokens.h"

#include "../core/atomic.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)
#define CHUNK (1 << 16)

/* strerror text in the project's lowercase message style. */
static void errno_text(int err, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char)(buf[0] - 'A' + 'a');
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* ---------------------------------------------------------------- reading */

static int open_gz(gzFile *g, const char *path, ar_err *e)
{
    errno = 0;
    *g = gzopen(path, "rb");
    if (*g)
        return 0;
    int err = errno;
    char why[256];
    if (err)
        errno_text(err, why, sizeof why);
    else
        snprintf(why, sizeof why, "cannot open");
    return ar_fail_kind(e, err ? ar_errno_kind(err) : AR_ERR_IO, "'%s': %s", path, why);
}

/* Reads up to n bytes, retrying short reads so that a short result means the
 * end of the data.  Returns the count, or -1 with a message (a corrupt or
 * truncated gzip stream is reported here, never taken for end of file). */
static long read_full(gzFile g, const char *path, void *buf, size_t n, ar_err *e)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > (size_t)INT_MAX ? (size_t)INT_MAX : n - got;
        int k = gzread(g, (char *)buf + got, (unsigned)want);
        if (k <= 0)
            break; /* end of data, or an error that gzerror reports below */
        got += (size_t)k;
    }
    /* zlib reports a gzip stream cut short only through gzerror. */
    int code;
    const char *msg = gzerror(g, &code);
    if (code == Z_OK || code == Z_STREAM_END)
        return (long)got;
    char why[256];
    if (code == Z_ERRNO) {
        errno_text(errno, why, sizeof why);
        return ar_fail_kind(e, AR_ERR_IO, "'%s': cannot read: %s", path, why);
    }
    /* zlib prefixes its message with the path, which we already quote. */
    size_t np = strlen(path);
    if (strncmp(msg, path, np) == 0 && strncmp(msg + np, ": ", 2) == 0)
        msg += np + 2;
    return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': corrupt gzip data: %s", path, msg);
}

/* Counts the bytes left in the stream (to report how long a file really is). */
static long count_rest(gzFile g, const char *path, ar_err *e)
{
    char *buf = ar_xmalloc(CHUNK);
    long total = 0, k;
    while ((k = read_full(g, path, buf, CHUNK, e)) > 0)
        total += k;
    free(buf);
    return k < 0 ? -1 : total;
}

static void set_max(ar_tokens *t)
{
    t->max_token = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->tok[i] > t->max_token)
            t->max_token = t->tok[i];
}

/* Text: one token per byte.  `head` holds the first nhead bytes already read
 * while sniffing the format. */
static int load_text(ar_tokens *t, gzFile g, const char *path, const unsigned char *head, size_t nhead,
                     ar_err *e)
{
    size_t cap = nhead > CHUNK ? nhead : CHUNK, n = 0;
    int32_t *tok = ar_xmalloc(cap * sizeof *tok);
    unsigned char *buf = ar_xmalloc(CHUNK);
    const unsigned char *src = head;
    long k = (long)nhead;
    for (;;) {
        if (n + (size_t)k > cap) {
            while (n + (size_t)k > cap)
                cap *= 2;
            tok = realloc(tok, cap * sizeof *tok);
            if (!tok)
                ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
        }
        for (long i = 0; i < k; i++)
            tok[n++] = src[i];
        k = read_full(g, path, buf, CHUNK, e);
        if (k <= 0)
            break;
        src = buf;
    }
    free(buf);
    if (k < 0) {
        free(tok);
        return -1;
    }
    t->tok = tok;
    t->n = n;
    t->is_bytes = 1;
    set_max(t);
    return 0;
}

/* Reads exactly `want` bytes of token data into a buffer grown as data
 * arrives; *got < want means the file ended early. */
static unsigned char *read_payload(gzFile g, const char *path, size_t want, size_t *got, ar_err *e)
{
    size_t cap = want < CHUNK ? (want ? want : 1) : CHUNK, n = 0;
    unsigned char *buf = ar_xmalloc(cap);
    while (n < want) {
        if (n == cap) {
            cap = cap * 2 < want ? cap * 2 : want;
            unsigned char *nb = realloc(buf, cap);
            if (!nb)
                ar_xmalloc((size_t)-1);
            buf = nb;
        }
        long k = read_full(g, path, buf + n, cap - n, e);
        if (k < 0) {
            free(buf);
            return NULL;
        }
        n += (size_t)k;
        if (n < cap)
            break; /* a short read is the end of the data */
    }
    *got = n;
    return buf;
}

/* Turns the raw little-endian payload into int32 ids (reusing the buffer:
 * uint16 ids are widened from the back so nothing is overwritten early). */
static int decode_ids(ar_tokens *t, unsigned char *raw, size_t n, int u32, const char *path, ar_err *e)
{
    int32_t *tok = realloc(raw, (n ? n : 1) * sizeof *tok);
    if (!tok)
        ar_xmalloc((size_t)-1);
    const unsigned char *b = (const unsigned char *)tok;
    if (u32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = le32(b + 4 * i);
            if (v > (uint32_t)INT32_MAX) {
                free(tok);
                return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token %zu is %lu, above the largest supported id %ld",
                                    path, i, (unsigned long)v, (long)INT32_MAX);
            }
            tok[i] = (int32_t)v;
        }
    } else {
        for (size_t i = n; i-- > 0;)
            tok[i] = (int32_t)(b[2 * i] | b[2 * i + 1] << 8);
    }
    t->tok = tok;
    t->n = n;
    t->is_bytes = 0;
    set_max(t);
    return 0;
}

/* An llm.c token file whose first 4 bytes (in head) matched a known magic. */
static int load_llmc(ar_tokens *t, gzFile g, const char *path, const unsigned char *head, size_t nhead,
                     ar_err *e)
{
    if (nhead < HEADER_BYTES)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token file header is truncated (%zu of %d bytes)", path, nhead,
                            HEADER_BYTES);
    uint32_t magic = le32(head);
    int32_t version = (int32_t)le32(head + 4), count = (int32_t)le32(head + 8);
    int u32 = magic == AR_LLMC_MAGIC_U32;
    int32_t want_version = u32 ? 7 : 1;
    if (version != want_version)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token file magic %lu needs version %d, found version %ld", path,
                            (unsigned long)magic, (int)want_version, (long)version);
    if (count < 0)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': header token count is negative (%ld)", path, (long)count);
    if (count == 0)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': token file holds no tokens (header count 0)", path);

    size_t width = u32 ? 4 : 2, want = (size_t)count * width, got = 0;
    unsigned char *raw = read_payload(g, path, want, &got, e);
    if (!raw)
        return -1;
    long extra = got == want ? count_rest(g, path, e) : 0;
    if (extra < 0) {
        free(raw);
        return -1;
    }
    if (got != want || extra > 0) {
        free(raw);
        return ar_fail_kind(e, AR_ERR_FORMAT,
                            "'%s': header says %ld tokens (%zu bytes) but the file holds %zu bytes of tokens", path,
                            (long)count, want, got + (size_t)extra);
    }
    return decode_ids(t, raw, (size_t)count, u32, path, e);
}

int ar_tokens_load(ar_tokens *t, const char *path, ar_err *e)
{
    memset(t, 0, sizeof *t);
    t->max_token = -1;
    gzFile g;
    if (open_gz(&g, path, e) < 0)
        return -1;
    unsigned char head[HEADER_BYTES];
    long nhead = read_full(g, path, head, sizeof head, e);
    int rc;
    if (nhead < 0)
        rc = -1;
    else if (nhead == 0)
        rc = ar_fail_kind(e, AR_ERR_FORMAT, "'%s' is empty", path);
    else if (nhead >= 4 && (le32(head) == AR_LLMC_MAGIC_U16 || le32(head) == AR_LLMC_MAGIC_U32))
        rc = load_llmc(t, g, path, head, (size_t)nhead, e);
    else
        rc = load_text(t, g, path, head, (size_t)nhead, e);
    gzclose(g);
    return rc;
}

void ar_tokens_free(ar_tokens *t)
{
    free(t->tok);
    memset(t, 0, sizeof *t);
    t->max_token = -1;
}

/* ---------------------------------------------------------------- writing */

/* Every id must fit the chosen layout; a silently wrapped id would be a
 * different token. */
static int check_range(const char *path, const int32_t *tok, size_t n, int u32, ar_err *e)
{
    if (n > (size_t)INT32_MAX)
        return ar_fail(e, "'%s': %zu tokens do not fit the header's int32 count", path, n);
    long hi = u32 ? (long)INT32_MAX : 65535L;
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] > hi)
            return ar_fail(e, "'%s': token %zu is %ld, outside the %s layout's range 0..%ld", path, i,
                           (long)tok[i], u32 ? "uint32" : "uint16", hi);
    return 0;
}

static int write_body(FILE *f, const int32_t *tok, size_t n, int u32)
{
    unsigned char hdr[HEADER_BYTES] = {0};
    put_le32(hdr, u32 ? AR_LLMC_MAGIC_U32 : AR_LLMC_MAGIC_U16);
    put_le32(hdr + 4, u32 ? 7 : 1);
    put_le32(hdr + 8, (uint32_t)n);
    if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr)
        return -1;
    unsigned char buf[4096];
    size_t width = u32 ? 4 : 2, per = sizeof buf / width;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        for (size_t j = 0; j < m; j++) {
            uint32_t v = (uint32_t)tok[i + j];
            if (u32) {
                put_le32(buf + 4 * j, v);
            } else {
                buf[2 * j] = (unsigned char)v;
                buf[2 * j + 1] = (unsigned char)(v >> 8);
            }
        }
        if (fwrite(buf, width, m, f) != m)
            return -1;
    }
    return 0;
}

typedef struct {
    const int32_t *tok;
    size_t n;
    int u32;
} token_body;

static int fill_body(FILE *f, void *ud)
{
    const token_body *b = ud;
    return write_body(f, b->tok, b->n, b->u32);
}

int ar_tokens_write_llmc(const char *path, const int32_t *tok, size_t n, int u32, ar_err *e)
{
    if (check_range(path, tok, n, u32, e) < 0)
        return -1;
    token_body b = {tok, n, u32};
    return ar_write_atomic(path, fill_body, &b, e);
}
