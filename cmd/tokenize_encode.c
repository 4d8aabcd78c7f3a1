/* One text -> its GPT-2 ids on several threads, the same ids for any
 * thread count by construction, and tokenize's progress line.
 *
 * The text is cut into chunks of about CHUNK bytes, each encoded on its own
 * (ar_bpe_encode; an ar_bpe is read-only and each call keeps its own piece
 * cache, formats/bpe.h), and their ids are handed on in the text's order.
 * Two facts make this equal to encoding the whole text at once:
 *
 *  1. A cut falls only at a safe place: p with text[p-1] == '\n' and
 *     text[p-2], text[p] printable ASCII other than the space.  There the
 *     whole text has a piece boundary at p, and the pieces on either side
 *     are those of text[..p) and text[p..) alone.  In GPT-2's pattern
 *     (formats/bpe_pretok.c)
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     only the last two alternatives match a '\n', and only in a run of
 *     white space, which cannot take in the non-space text[p-2]: so a
 *     piece starts at p-1.  There \s+(?!\S) fails in the whole text
 *     (text[p] is no space) and \s+ takes the '\n' alone; in text[..p)
 *     \s+(?!\S) takes it alone (the end of the text is no \S): the same
 *     piece [p-1, p) either way.  No alternative looks behind its start,
 *     and none looks more than one character past its end, so the matches
 *     before p-1 (which end by p-2 and look at most at p-2) and those from
 *     p on (whose start is p) are the same in the chunk as in the whole.
 *     The invalid-UTF-8 view (bpe_pretok.c) agrees too: a well-formed
 *     sequence never holds an ASCII byte, so the scan for them restarts at
 *     every ASCII byte, and at p in particular.
 *  2. Where the cuts fall depends on the text alone (CHUNK is fixed), not
 *     on the thread count, which only decides who encodes which chunk.
 *     So even a flaw in 1 could not make two thread counts differ.
 *
 * A text with no safe place (one long line) is one chunk, on one thread.
 * The tests compare the chunked ids with ar_bpe_encode's on the whole text
 * and across --threads 1, 2 and 4. */
#define _GNU_SOURCE /* memrchr */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenize.h"

#define CHUNK (256u << 10)   /* 256 KiB of text, about 4 ms of one core's encoding */
#define ROUND_PER_THREAD 16 /* chunks a thread encodes between two hand-overs */

/* ------------------------------------------------------------ cuts */

static int solid(unsigned char c)
{
    return c > ' ' && c < 0x7F;
}

/* The first safe place p >= from (rule 1 above), or len where none is. */
static size_t next_cut(const char *text, size_t len, size_t from)
{
    size_t p = from < 2 ? 2 : from;
    while (p < len) {
        const char *nl = memchr(text + p - 1, '\n', len - (p - 1));
        if (!nl)
            break;
        p = (size_t)(nl - text) + 1;
        if (p < len && solid((unsigned char)text[p - 2]) && solid((unsigned char)text[p]))
            return p;
        p++;
    }
    return len;
}

size_t tok_last_cut(const char *text, size_t len)
{
    for (size_t q = len; q > 1;) { /* text[q - 1] == '\n' makes p = q a candidate */
        const char *nl = memrchr(text, '\n', q - 1);
        if (!nl)
            break;
        size_t p = (size_t)(nl - text) + 1;
        if (p >= 2 && p < len && solid((unsigned char)text[p - 2]) && solid((unsigned char)text[p]))
            return p;
        q = p - 1;
    }
    return 0;
}

/* The chunks' starts, and len after the last: malloc'd, *n chunks. */
static size_t *cuts_of(const char *text, size_t len, size_t *n)
{
    size_t cap = len / CHUNK + 2, k = 0;
    size_t *at = ar_xmalloc(cap * sizeof *at);
    at[k++] = 0;
    for (size_t p = 0; p < len;) {
        p = next_cut(text, len, p + CHUNK);
        if (k == cap) {
            cap *= 2;
            size_t *t = realloc(at, cap * sizeof *at);
            if (!t)
                ar_xmalloc((size_t)-1);
            at = t;
        }
        at[k++] = p;
    }
    *n = k - 1;
    return at;
}

/* ------------------------------------------------------------ progress */

void tok_progress_start(tok_progress *p)
{
    *p = (tok_progress){.tty = isatty(STDERR_FILENO), .start = ar_now_s()};
    p->shown = p->start;
}

/* "1,234,567" into out (at least 27 bytes). */
static const char *commas(size_t v, char *out)
{
    char d[24];
    int n = snprintf(d, sizeof d, "%zu", v), k = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[k++] = ',';
        out[k++] = d[i];
    }
    out[k] = 0;
    return out;
}

/* At most 4 times a second, and only on a terminal. */
static void progress_tick(tok_progress *p)
{
    double t = ar_now_s();
    if (!p->tty || t - p->shown < 0.25)
        return;
    p->shown = t;
    char c[32];
    fprintf(stderr, "\rtokenize: %.1f MB, %s tokens, %.1f MB/s ", 1e-6 * (double)p->bytes, commas(p->tokens, c),
            1e-6 * (double)p->bytes / (t - p->start));
    fflush(stderr);
}

void tok_progress_end(tok_progress *p, const char *summary)
{
    /* \033[K clears what is left of the in-place line */
    if (p->tty && p->shown > p->start)
        fputs("\r\033[K", stderr);
    if (summary)
        fprintf(stderr, "tokenize: %s\n", summary);
    fflush(stderr);
}

/* ------------------------------------------------------------ encoding */

typedef struct {
    int32_t *ids;
    size_t n;
    int failed;
    ar_err e;
} chunk_out;

int tok_encode(const ar_bpe *b, const char *name, size_t base, const char *text, size_t len, int threads,
               tok_put_fn put, void *ud, tok_progress *p, ar_err *e)
{
    size_t nchunks;
    size_t *at = cuts_of(text, len, &nchunks);
    size_t round = (size_t)(threads > 0 ? threads : 1) * ROUND_PER_THREAD;
    chunk_out *out = ar_xcalloc(round, sizeof *out);
    int rc = 0;
    for (size_t r0 = 0; r0 < nchunks && rc == 0; r0 += round) {
        long m = (long)(nchunks - r0 < round ? nchunks - r0 : round);
        double t0 = ar_now_s();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (long i = 0; i < m; i++) {
            chunk_out *c = &out[i];
            size_t s = at[r0 + (size_t)i], end = at[r0 + (size_t)i + 1];
            c->ids = NULL;
            c->n = 0;
            c->failed = ar_bpe_encode(b, text + s, end - s, &c->ids, &c->n, &c->e) != 0;
            if (c->failed)
                ar_wrap(&c->e, "'%s', in the text from byte %zu", name, base + s);
        }
        p->encode_s += ar_now_s() - t0;
        for (long i = 0; i < m; i++) {
            chunk_out *c = &out[i];
            if (rc == 0 && c->failed) {
                *e = c->e;
                rc = -1;
            }
            if (rc == 0 && (rc = put(ud, c->ids, c->n, e)) == 0) {
                p->bytes += at[r0 + (size_t)i + 1] - at[r0 + (size_t)i];
                p->tokens += c->n;
                progress_tick(p);
            }
            free(c->ids);
        }
    }
    free(out);
    free(at);
    return rc;
}
