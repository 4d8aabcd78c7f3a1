/* ar_bpe_encode: the text's pieces (bpe_pretok.c), each merged on its own
 * (bpe_merge.c), so a piece's ids depend on its bytes alone and a piece
 * seen before in the same call is copied from its first ids. */
#include <string.h>

#include "bpe_internal.h"

/* The growing output of one call. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} out_ids;

static void reserve(out_ids *w, size_t more)
{
    if (w->n + more <= w->cap)
        return;
    size_t cap = w->cap ? w->cap : 1024;
    while (cap < w->n + more)
        cap *= 2;
    w->ids = bpe_xrealloc(w->ids, cap * sizeof *w->ids);
    w->cap = cap;
}

/* ------------------------------------------------------------ the cache */

/* Pieces already merged in this call: (hash, place in the text) -> the ids
 * they gave (a place in the output; the output only grows, so they stay
 * there).  Open addressing; doubles up to CACHE_MAX slots, then starts over
 * empty, so memory stays bounded whatever the text. */
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

/* Piece text[s .. s+len): its ids appended to the output.  A piece of one
 * byte is its byte token (no pair to merge). */
static void encode_piece(const ar_bpe *b, out_ids *w, bpe_merge_scratch *ms, cache *c, const char *text, size_t s,
                         size_t len)
{
    const unsigned char *p = (const unsigned char *)text + s;
    if (len == 1) {
        reserve(w, 1);
        w->ids[w->n++] = b->byte_id[p[0]];
        return;
    }
    uint64_t h = 0;
    if (len <= CACHE_PIECE) {
        h = bpe_fnv1a(p, len);
        const cache_slot *hit = cache_find(c, text, s, len, h);
        if (hit->key_len) {
            reserve(w, hit->n);
            memcpy(w->ids + w->n, w->ids + hit->at, hit->n * sizeof *w->ids);
            w->n += hit->n;
            return;
        }
    }
    /* merged in place at the end of the output: a merge only shortens */
    reserve(w, len);
    int32_t *t = w->ids + w->n;
    for (size_t i = 0; i < len; i++)
        t[i] = b->byte_id[p[i]];
    size_t m = bpe_merge(b, ms, t, len);
    if (len <= CACHE_PIECE)
        cache_put(c, text, s, len, h, w->n, m);
    w->n += m;
}

int ar_bpe_encode(const ar_bpe *b, const char *text, size_t len, int32_t **ids, size_t *n, ar_err *e)
{
    out_ids w = {.ids = *ids, .n = *n, .cap = *n};
    bpe_merge_scratch ms = {0};
    cache c = {ar_xcalloc(256, sizeof(cache_slot)), 255, 0};
    bpe_pieces pieces;
    bpe_pieces_begin(&pieces, b, text, len);
    int rc = 0;
    reserve(&w, len / 4 + 16);
    for (size_t pos = 0, end; pos < len; pos = end) {
        if ((rc = bpe_pieces_next(b, &pieces, pos, &end, e)) != 0)
            break;
        encode_piece(b, &w, &ms, &c, text, pos, end - pos);
    }
    bpe_pieces_end(&pieces);
    free(c.slot);
    bpe_merge_scratch_free(&ms);
    *ids = w.ids;
    if (rc == 0)
        *n = w.n;
    return rc;
}
