/* GPT-2's byte-level BPE (bpe.h says what it computes).  Loading builds two
 * tables: each token's bytes by id (for decoding) and the merges as a hash
 * of id pairs -> (rank, merged id), so encoding never looks at strings:
 * a piece becomes byte ids, and pairs of ids merge by rank. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* data/gpt2/encoder.json and vocab.bpe, compiled in (meson.build, cmd/embed.c) */
extern const char ar_gpt2_encoder_json[];
extern const char ar_gpt2_vocab_bpe[];
#define BUILTIN_ENCODER "built-in data/gpt2/encoder.json"
#define BUILTIN_MERGES "built-in data/gpt2/vocab.bpe"

/* GPT-2's regex with \s spelled as the White_Space property (bpe.h). */
#define WS "\\p{White_Space}"
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" WS
                                   "+(?![^" WS "])|" WS "+";

#define MAX_IDS (1 << 24) /* ids above are refused: vocab_size is allocated */
#define NO_RANK INT32_MAX

typedef struct {
    uint64_t key; /* (left + 1) << 32 | right; 0 = empty slot */
    int32_t rank, id;
} pair_slot;

struct ar_bpe {
    int vocab;            /* largest id + 1 */
    size_t *tok_off;      /* token id's bytes: tok_bytes[tok_off[id] ..], */
    int32_t *tok_len;     /* tok_len[id] of them; -1 where no token has the id */
    unsigned char *tok_bytes;
    int32_t byte_id[256]; /* the token of each single byte */
    pair_slot *pairs;
    size_t pair_mask;
    pcre2_code *re;
    int jit; /* the pattern is JIT-compiled */
};

/* ------------------------------------------------------------ the alphabet */

/* GPT-2's bytes_to_unicode: the printable bytes ! .. ~, 0xA1 .. 0xAC and
 * 0xAE .. 0xFF stand for themselves; the other 68 become U+0100 + n, n
 * counting them in byte order.  So every key of encoder.json is printable
 * and each of its characters is one byte. */
#define N_ALPHABET (256 + 68)
static void byte_alphabet(int byte_of_cp[N_ALPHABET])
{
    int n = 0;
    for (int cp = 0; cp < N_ALPHABET; cp++)
        byte_of_cp[cp] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_of_cp[printable ? b : 256 + n++] = b;
    }
}

/* The bytes a key stands for, into out (cap >= strlen(s): each character
 * is at least one UTF-8 byte and gives one byte).  The length, or -1 at the
 * first character outside the alphabet (its code point in *bad). */
static long key_bytes(const int byte_of_cp[N_ALPHABET], const char *s, size_t len, unsigned char *out,
                      unsigned *bad)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    long n = 0;
    while (p < end) {
        unsigned cp = *p;
        int extra = cp < 0x80 ? 0 : cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3;
        if (extra) /* well formed: the JSON parser checked the UTF-8 */
            cp &= 0x3Fu >> extra;
        for (int k = 1; k <= extra && p + k < end; k++)
            cp = cp << 6 | (p[k] & 0x3Fu);
        p += 1 + extra;
        if (cp >= N_ALPHABET || byte_of_cp[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[n++] = (unsigned char)byte_of_cp[cp];
    }
    return n;
}

/* ------------------------------------------------------------ hashing */

static uint64_t fnv1a(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static const pair_slot *find_pair(const ar_bpe *b, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(left + 1) << 32 | (uint32_t)right;
    for (size_t i = mix64(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        const pair_slot *s = &b->pairs[i];
        if (s->key == key)
            return s;
        if (s->key == 0)
            return NULL;
    }
}

/* ------------------------------------------------------------ loading */

/* A whole file, NUL-terminated (malloc'd). */
static char *read_file(const char *path, size_t *len, ar_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ar_fail(e, "cannot read '%s': %s", path, ar_strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *s = ar_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *t = realloc(s, cap);
            if (!t)
                ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
            s = t;
        }
        size_t k = fread(s + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0)
            break;
    }
    int bad = ferror(f);
    int err = errno;
    fclose(f);
    if (bad) {
        free(s);
        ar_fail(e, "cannot read '%s': %s", path, ar_strerror(err));
        return NULL;
    }
    s[n] = 0;
    *len = n;
    return s;
}

/* Token bytes -> id while loading (the merges name tokens by their text). */
typedef struct {
    size_t *slot; /* id + 1, 0 = empty */
    size_t mask;
} tok_index;

static size_t *index_slot(const ar_bpe *b, const tok_index *x, const unsigned char *s, size_t n)
{
    for (size_t i = fnv1a(s, n) & x->mask;; i = (i + 1) & x->mask) {
        size_t v = x->slot[i];
        if (v == 0)
            return &x->slot[i];
        int32_t id = (int32_t)(v - 1);
        if ((size_t)b->tok_len[id] == n && memcmp(b->tok_bytes + b->tok_off[id], s, n) == 0)
            return &x->slot[i];
    }
}

static int32_t index_find(const ar_bpe *b, const tok_index *x, const unsigned char *s, size_t n)
{
    size_t v = *index_slot(b, x, s, n);
    return v ? (int32_t)(v - 1) : -1;
}

/* encoder.json -> the token table and its index. */
static int load_encoder(ar_bpe *b, const char *text, size_t len, const char *path, tok_index *x, ar_err *e)
{
    ar_json *j = ar_json_parse(text, len, e);
    if (!j)
        return ar_wrap(e, "'%s'", path);
    int rc = -1, byte_of_cp[N_ALPHABET];
    byte_alphabet(byte_of_cp);
    if (j->type != AR_JSON_OBJ || j->n == 0) {
        ar_fail(e, "'%s': expected a JSON object of tokens and their ids", path);
        goto done;
    }
    int max_id = -1;
    size_t total = 0;
    for (int i = 0; i < j->n; i++) {
        const ar_json *v = &j->items[i];
        if (v->type != AR_JSON_NUM || !v->is_int || v->inum < 0 || v->inum >= MAX_IDS) {
            ar_fail(e, "'%s': token '%s': the id must be an integer in 0..%d", path, j->keys[i], MAX_IDS - 1);
            goto done;
        }
        if (v->inum > max_id)
            max_id = (int)v->inum;
        total += strlen(j->keys[i]);
    }
    b->vocab = max_id + 1;
    b->tok_off = ar_xcalloc((size_t)b->vocab, sizeof *b->tok_off);
    b->tok_len = ar_xmalloc((size_t)b->vocab * sizeof *b->tok_len);
    for (int id = 0; id < b->vocab; id++)
        b->tok_len[id] = -1;
    b->tok_bytes = ar_xmalloc(total + 1);
    x->mask = pow2_at_least(2 * (size_t)j->n) - 1;
    x->slot = ar_xcalloc(x->mask + 1, sizeof *x->slot);
    size_t at = 0;
    for (int i = 0; i < j->n; i++) {
        const char *key = j->keys[i];
        int id = (int)j->items[i].inum;
        unsigned bad = 0;
        long n = key_bytes(byte_of_cp, key, strlen(key), b->tok_bytes + at, &bad);
        if (n < 0) {
            ar_fail(e, "'%s': token '%s' (id %d) has U+%04X, outside GPT-2's byte-level alphabet", path, key, id,
                    bad);
            goto done;
        }
        if (n == 0) {
            ar_fail(e, "'%s': the empty token (id %d)", path, id);
            goto done;
        }
        if (b->tok_len[id] >= 0) {
            ar_fail(e, "'%s': id %d is given twice (to '%s' and to a token before it)", path, id, key);
            goto done;
        }
        b->tok_off[id] = at;
        b->tok_len[id] = (int32_t)n;
        /* distinct keys are distinct bytes (the alphabet is one to one), so
         * the slot is a free one */
        *index_slot(b, x, b->tok_bytes + at, (size_t)n) = (size_t)id + 1;
        at += (size_t)n;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_id[c] = index_find(b, x, &byte, 1);
        if (b->byte_id[c] < 0) {
            int cp = 0;
            while (byte_of_cp[cp] != c)
                cp++;
            ar_fail(e, "'%s': the token of byte 0x%02X (U+%04X) is missing: every byte needs one", path, c, cp);
            goto done;
        }
    }
    rc = 0;
done:
    ar_json_free(j);
    return rc;
}

/* One token of a merge line: its id, or -1 after the error. */
static int32_t merge_token(const ar_bpe *b, const tok_index *x, const int byte_of_cp[N_ALPHABET], const char *s,
                           size_t n, unsigned char *buf, const char *path, int line, const char *enc_path,
                           ar_err *e)
{
    unsigned bad = 0;
    long k = key_bytes(byte_of_cp, s, n, buf, &bad);
    if (k < 0)
        return ar_fail(e, "'%s':%d: token '%.*s' has U+%04X, outside GPT-2's byte-level alphabet", path, line,
                       (int)n, s, bad);
    int32_t id = index_find(b, x, buf, (size_t)k);
    if (id < 0)
        return ar_fail(e, "'%s':%d: token '%.*s' is missing from the encoder '%s'", path, line, (int)n, s,
                       enc_path);
    return id;
}

/* vocab.bpe -> the pair table: line r of merges (from 0) has rank r. */
static int load_merges(ar_bpe *b, const char *text, size_t len, const char *path, const tok_index *x,
                       const char *enc_path, ar_err *e)
{
    int byte_of_cp[N_ALPHABET];
    byte_alphabet(byte_of_cp);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    b->pair_mask = pow2_at_least(2 * (lines + 1)) - 1;
    b->pairs = ar_xcalloc(b->pair_mask + 1, sizeof *b->pairs);
    unsigned char *buf = ar_xmalloc(len + 1);
    int rc = -1, line = 0;
    int32_t rank = 0;
    for (size_t at = 0; at < len;) {
        const char *s = text + at;
        size_t n = strcspn(s, "\n"); /* text is NUL-terminated; a NUL byte ends the line early */
        if (at + n < len && s[n] != '\n') {
            ar_fail(e, "'%s':%d: a NUL byte", path, line + 1);
            goto done;
        }
        at += n + 1;
        line++;
        if (n && s[n - 1] == '\r')
            n--;
        if (line == 1 && n >= 8 && memcmp(s, "#version", 8) == 0)
            continue;
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1))) {
            ar_fail(e, "'%s':%d: expected a merge of two tokens 'A B', found '%.*s'", path, line, (int)n, s);
            goto done;
        }
        size_t na = (size_t)(sp - s), nb = n - na - 1;
        int32_t l = merge_token(b, x, byte_of_cp, s, na, buf, path, line, enc_path, e);
        int32_t r = l < 0 ? -1 : merge_token(b, x, byte_of_cp, sp + 1, nb, buf, path, line, enc_path, e);
        if (r < 0)
            goto done;
        size_t nl = (size_t)b->tok_len[l], nr = (size_t)b->tok_len[r];
        memcpy(buf, b->tok_bytes + b->tok_off[l], nl);
        memcpy(buf + nl, b->tok_bytes + b->tok_off[r], nr);
        int32_t m = index_find(b, x, buf, nl + nr);
        if (m < 0) {
            ar_fail(e, "'%s':%d: merge '%.*s': the merged token '%.*s%.*s' is missing from the encoder '%s'", path,
                    line, (int)n, s, (int)na, s, (int)nb, sp + 1, enc_path);
            goto done;
        }
        uint64_t key = (uint64_t)(l + 1) << 32 | (uint32_t)r;
        size_t i = mix64(key) & b->pair_mask;
        while (b->pairs[i].key && b->pairs[i].key != key)
            i = (i + 1) & b->pair_mask;
        if (b->pairs[i].key) {
            ar_fail(e, "'%s':%d: merge '%.*s' is given twice (first as rank %ld)", path, line, (int)n, s,
                    (long)b->pairs[i].rank);
            goto done;
        }
        b->pairs[i] = (pair_slot){key, rank++, m};
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

static int compile_pattern(ar_bpe *b, ar_err *e)
{
    int code;
    PCRE2_SIZE at;
    b->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &at, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ar_fail(e, "GPT-2's pre-tokenisation pattern: PCRE2 at %zu: %s", (size_t)at, (const char *)msg);
    }
    /* without JIT (a build or a CPU that lacks it) the interpreter matches */
    b->jit = pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

ar_bpe *ar_bpe_load(const char *encoder_json, const char *vocab_bpe, ar_err *e)
{
    ar_bpe *b = ar_xcalloc(1, sizeof *b);
    char *enc_text = NULL, *merge_text = NULL;
    size_t enc_len, merge_len;
    const char *enc_path = encoder_json ? encoder_json : BUILTIN_ENCODER;
    const char *merge_path = vocab_bpe ? vocab_bpe : BUILTIN_MERGES;
    tok_index x = {0};
    int rc = -1;
    const char *et = ar_gpt2_encoder_json, *mt = ar_gpt2_vocab_bpe;
    if (encoder_json && !(et = enc_text = read_file(encoder_json, &enc_len, e)))
        goto done;
    if (vocab_bpe && !(mt = merge_text = read_file(vocab_bpe, &merge_len, e)))
        goto done;
    if (!encoder_json)
        enc_len = strlen(et);
    if (!vocab_bpe)
        merge_len = strlen(mt);
    rc = load_encoder(b, et, enc_len, enc_path, &x, e);
    if (rc == 0)
        rc = load_merges(b, mt, merge_len, merge_path, &x, enc_path, e);
    if (rc == 0)
        rc = compile_pattern(b, e);
done:
    free(x.slot);
    free(enc_text);
    free(merge_text);
    if (rc != 0) {
        ar_bpe_free(b);
        return NULL;
    }
    return b;
}

void ar_bpe_free(ar_bpe *b)
{
    if (!b)
        return;
    free(b->tok_off);
    free(b->tok_len);
    free(b->tok_bytes);
    free(b->pairs);
    pcre2_code_free(b->re);
    free(b);
}

int ar_bpe_vocab_size(const ar_bpe *b)
{
    return b->vocab;
}

int ar_bpe_token_bytes(const ar_bpe *b, int32_t id, char *out, size_t cap)
{
    if (id < 0 || id >= b->vocab || b->tok_len[id] < 0)
        return -1;
    size_t n = (size_t)b->tok_len[id];
    memcpy(out, b->tok_bytes + b->tok_off[id], n < cap ? n : cap);
    return (int)n;
}

/* ------------------------------------------------------------ merging */

/* The growing output and the scratch of one ar_bpe_encode call. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
    /* short pieces */
    const pair_slot **pr; /* pr[k]: the merge of t[k], t[k+1], or NULL */
    /* long pieces */
    size_t *next, *prev;
    struct cand {
        int32_t rank, left, right;
        size_t pos;
    } *heap;
    size_t nheap, scratch_cap, heap_cap;
} work;

#define SHORT_PIECE 64 /* longer pieces merge through a heap: O(n log n), not O(n^2) */

static void reserve(work *w, size_t more)
{
    if (w->n + more <= w->cap)
        return;
    size_t cap = w->cap ? w->cap : 1024;
    while (cap < w->n + more)
        cap *= 2;
    int32_t *p = realloc(w->ids, cap * sizeof *p);
    if (!p)
        ar_xmalloc((size_t)-1);
    w->ids = p;
    w->cap = cap;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q)
        ar_xmalloc((size_t)-1);
    return q;
}

/* Short piece t[0..m): repeatedly merge the lowest-ranked adjacent pair,
 * the leftmost of equal ranks (one merge per rank lookup of the whole
 * piece: quadratic, and fastest for words).  Returns the new length. */
static size_t merge_short(const ar_bpe *b, int32_t *t, size_t m, const pair_slot **pr)
{
    for (size_t k = 0; k + 1 < m; k++)
        pr[k] = find_pair(b, t[k], t[k + 1]);
    while (m > 1) {
        size_t best = m;
        int32_t rank = NO_RANK;
        for (size_t k = 0; k + 1 < m; k++)
            if (pr[k] && pr[k]->rank < rank) {
                rank = pr[k]->rank;
                best = k;
            }
        if (best == m)
            break;
        t[best] = pr[best]->id;
        memmove(t + best + 1, t + best + 2, (m - best - 2) * sizeof *t);
        memmove(pr + best + 1, pr + best + 2, (m - best - 2) * sizeof *pr);
        m--;
        if (best > 0)
            pr[best - 1] = find_pair(b, t[best - 1], t[best]);
        if (best + 1 < m)
            pr[best] = find_pair(b, t[best], t[best + 1]);
    }
    return m;
}

/* Min-heap of candidate merges by (rank, position): the leftmost of the
 * lowest rank on top. */
static int cand_less(const struct cand *a, const struct cand *c)
{
    return a->rank < c->rank || (a->rank == c->rank && a->pos < c->pos);
}

static void heap_push(work *w, const ar_bpe *b, const int32_t *t, size_t i, size_t j)
{
    const pair_slot *s = find_pair(b, t[i], t[j]);
    if (!s)
        return;
    if (w->nheap == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    struct cand c = {s->rank, t[i], t[j], i};
    size_t k = w->nheap++;
    while (k > 0 && cand_less(&c, &w->heap[(k - 1) / 2])) {
        w->heap[k] = w->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    w->heap[k] = c;
}

static struct cand heap_pop(work *w)
{
    struct cand top = w->heap[0], last = w->heap[--w->nheap];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= w->nheap)
            break;
        if (c + 1 < w->nheap && cand_less(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!cand_less(&w->heap[c], &last))
            break;
        w->heap[k] = w->heap[c];
        k = c;
    }
    if (w->nheap)
        w->heap[k] = last;
    return top;
}

/* Long piece t[0..m): the same merges in the same order as merge_short,
 * over a linked list (a merged pair lives on in its left node, t[] = -1
 * marks the dead right one) with candidates from a heap, checked when
 * popped against the list as it is then.  Compacts t, returns the new
 * length. */
static size_t merge_long(const ar_bpe *b, work *w, int32_t *t, size_t m)
{
    const size_t end = (size_t)-1;
    if (w->scratch_cap < m) {
        w->next = xrealloc(w->next, m * sizeof *w->next);
        w->prev = xrealloc(w->prev, m * sizeof *w->prev);
        w->scratch_cap = m;
    }
    for (size_t i = 0; i < m; i++) {
        w->next[i] = i + 1 < m ? i + 1 : end;
        w->prev[i] = i ? i - 1 : end;
    }
    w->nheap = 0;
    for (size_t i = 0; i + 1 < m; i++)
        heap_push(w, b, t, i, i + 1);
    while (w->nheap) {
        struct cand c = heap_pop(w);
        size_t i = c.pos, j = w->next[i];
        if (t[i] != c.left || j == end || t[j] != c.right)
            continue; /* stale: one side has merged since */
        t[i] = find_pair(b, c.left, c.right)->id;
        t[j] = -1;
        w->next[i] = w->next[j];
        if (w->next[j] != end)
            w->prev[w->next[j]] = i;
        if (w->prev[i] != end)
            heap_push(w, b, t, w->prev[i], i);
        if (w->next[i] != end)
            heap_push(w, b, t, i, w->next[i]);
    }
    size_t k = 0;
    for (size_t i = 0; i != end; i = w->next[i])
        t[k++] = t[i];
    return k;
}

/* ------------------------------------------------------------ the cache */

/* Pieces already merged in this call: (hash, place in the text) -> the ids
 * they gave (a place in the output).  Open addressing; doubles up to
 * CACHE_MAX slots, then starts over empty, so memory stays bounded. */
typedef struct {
    uint64_t h;
    size_t key, key_len, at; /* key_len 0: empty slot */
    size_t n;
} cache_slot;

typedef struct {
    cache_slot *slot;
    size_t mask, used;
} cache;

#define CACHE_MAX (1u << 17)
#define CACHE_PIECE 64 /* longer pieces are rarely repeated */

static cache_slot *cache_find(cache *c, const char *text, size_t key, size_t len, uint64_t h)
{
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        cache_slot *s = &c->slot[i];
        if (s->key_len == 0 || (s->h == h && s->key_len == len && memcmp(text + s->key, text + key, len) == 0))
            return s;
    }
}

static void cache_put(cache *c, const char *text, size_t key, size_t len, uint64_t h, size_t at, size_t n)
{
    if (2 * (c->used + 1) > c->mask + 1) {
        size_t old = c->mask + 1, cap = old < CACHE_MAX ? 2 * old : old;
        cache_slot *was = c->slot;
        c->slot = ar_xcalloc(cap, sizeof *c->slot);
        c->mask = cap - 1;
        c->used = 0;
        for (size_t i = 0; cap > old && i < old; i++)
            if (was[i].key_len) {
                *cache_find(c, text, was[i].key, was[i].key_len, was[i].h) = was[i];
                c->used++;
            }
        free(was);
    }
    *cache_find(c, text, key, len, h) = (cache_slot){h, key, len, at, n};
    c->used++;
}

/* ------------------------------------------------------------ encoding */

/* The length of the well-formed UTF-8 sequence at s[0..n) (Unicode's
 * Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF), or
 * 0 where none starts. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, lo = c == 0xE0 ? 0xA0 : lo, hi = c == 0xED ? 0x9F : hi;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, lo = c == 0xF0 ? 0x90 : lo, hi = c == 0xF4 ? 0x8F : hi;
    else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xBF)
            return 0;
    return len;
}

/* What the pattern sees: the text itself where it is valid UTF-8, else a
 * copy (malloc'd, into *copy) in which every byte that belongs to no
 * well-formed sequence is INVALID_AS, so that pre-tokenisation takes it for
 * a symbol, [^\s\p{L}\p{N}]: a byte that is no character is neither a
 * letter, a number nor a space.  Byte offsets are the same in both. */
#define INVALID_AS '!'
static const char *pattern_view(const char *text, size_t len, char **copy)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    *copy = NULL;
    while (i < len) {
        size_t k = s[i] < 0x80 ? 1 : utf8_seq(s + i, len - i);
        if (k == 0) {
            if (!*copy) {
                *copy = ar_xmalloc(len);
                memcpy(*copy, text, len);
            }
            (*copy)[i] = INVALID_AS;
            k = 1;
        }
        i += k;
    }
    return *copy ? *copy : text;
}

/* Piece text[s .. s+len): its ids appended to the output. */
static void encode_piece(const ar_bpe *b, work *w, cache *c, const char *text, size_t s, size_t len)
{
    const unsigned char *p = (const unsigned char *)text + s;
    if (len == 1) {
        reserve(w, 1);
        w->ids[w->n++] = b->byte_id[p[0]];
        return;
    }
    uint64_t h = 0;
    if (len <= CACHE_PIECE) {
        h = fnv1a(p, len);
        const cache_slot *hit = cache_find(c, text, s, len, h);
        if (hit->key_len) {
            reserve(w, hit->n);
            memcpy(w->ids + w->n, w->ids + hit->at, hit->n * sizeof *w->ids);
            w->n += hit->n;
            return;
        }
    }
    reserve(w, len);
    int32_t *t = w->ids + w->n;
    for (size_t i = 0; i < len; i++)
        t[i] = b->byte_id[p[i]];
    size_t m;
    if (len <= SHORT_PIECE) {
        const pair_slot *pr[SHORT_PIECE];
        m = merge_short(b, t, len, pr);
    } else {
        m = merge_long(b, w, t, len);
    }
    if (len <= CACHE_PIECE)
        cache_put(c, text, s, len, h, w->n, m);
    w->n += m;
}

int ar_bpe_encode(const ar_bpe *b, const char *text, size_t len, int32_t **ids, size_t *n, ar_err *e)
{
    work w = {.ids = *ids, .n = *n, .cap = *n};
    cache c = {ar_xcalloc(256, sizeof(cache_slot)), 255, 0};
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!md)
        ar_xmalloc((size_t)-1);
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    char *copy;
    PCRE2_SPTR view = (PCRE2_SPTR)pattern_view(text, len, &copy);
    int rc = 0;
    size_t pos = 0;
    reserve(&w, len / 4 + 16);
    while (pos < len) {
        int r = b->jit ? pcre2_jit_match(b->re, view, len, pos, 0, md, NULL)
                       : pcre2_match(b->re, view, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            rc = ar_fail(e, "pre-tokenising at byte %zu: PCRE2: %s", pos, (const char *)msg);
            break;
        }
        /* Every character starts a match, so matches tile the text. */
        if (ov[0] != pos || ov[1] <= pos) {
            rc = ar_fail(e, "pre-tokenising at byte %zu: the pattern skipped or matched nothing", pos);
            break;
        }
        encode_piece(b, &w, &c, text, pos, ov[1] - pos);
        pos = ov[1];
    }
    pcre2_match_data_free(md);
    free(copy);
    free(c.slot);
    free(w.next);
    free(w.prev);
    free(w.heap);
    *ids = w.ids;
    if (rc == 0)
        *n = w.n;
    return rc;
}
