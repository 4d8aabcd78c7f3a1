/* What the files of GPT-2's BPE share; bpe.h is the API and says what is
 * computed.  The files, by step:
 *
 *   bpe_vocab.c   encoder.json + vocab.bpe (or the built-in pair) -> ar_bpe
 *   bpe_pretok.c  text -> pieces (GPT-2's regex on PCRE2)
 *   bpe_merge.c   one piece's byte ids -> its merged ids
 *   bpe_encode.c  ar_bpe_encode: pieces, merged, behind a cache
 *   bpe_decode.c  id -> bytes
 *
 * Loading turns every string into ids once, so encoding never compares
 * text: a piece becomes byte ids, and pairs of ids merge by rank through a
 * hash of id pairs -> (rank, merged id). */
#ifndef AR_BPE_INTERNAL_H
#define AR_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "bpe.h"

#define MAX_IDS (1 << 24) /* ids above are refused: vocab_size is allocated */
#define NO_RANK INT32_MAX

/* One merge "A B": key = (A + 1) << 32 | B (so 0 is never a key and marks
 * an empty slot), rank = its line in vocab.bpe, id = the token of AB. */
typedef struct {
    uint64_t key;
    int32_t rank, id;
} pair_slot;

struct ar_bpe {
    int vocab;            /* largest id + 1 */
    size_t *tok_off;      /* token id's bytes: tok_bytes[tok_off[id] ..], */
    int32_t *tok_len;     /* tok_len[id] of them; -1 where no token has the id */
    unsigned char *tok_bytes;
    int32_t byte_id[256]; /* the token of each single byte */
    pair_slot *pairs;     /* open addressing, linear probing, mask + 1 slots */
    size_t pair_mask;
    pcre2_code *re;
    int jit; /* the pattern is JIT-compiled */
};

/* ------------------------------------------------------------ shared helpers */

/* FNV-1a over bytes: token text while loading, pieces in the cache. */
static inline uint64_t bpe_fnv1a(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* MurmurHash3's finaliser, first half: spreads a pair key's two ids over
 * the low bits the mask keeps. */
static inline uint64_t bpe_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Table sizes are powers of two (probing masks), at least 16. */
static inline size_t bpe_pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static inline uint64_t bpe_pair_key(int32_t left, int32_t right)
{
    return (uint64_t)(left + 1) << 32 | (uint32_t)right;
}

/* The slot of key: its own, or the empty one where it would go. */
static inline pair_slot *bpe_pair_probe(const ar_bpe *b, uint64_t key)
{
    size_t i = bpe_mix64(key) & b->pair_mask;
    while (b->pairs[i].key && b->pairs[i].key != key)
        i = (i + 1) & b->pair_mask;
    return &b->pairs[i];
}

/* The merge of (left, right), or NULL where vocab.bpe has none. */
static inline const pair_slot *bpe_find_pair(const ar_bpe *b, int32_t left, int32_t right)
{
    const pair_slot *s = bpe_pair_probe(b, bpe_pair_key(left, right));
    return s->key ? s : NULL;
}

/* realloc that aborts with the project's out-of-memory message, as
 * ar_xmalloc does, rather than return NULL. */
static inline void *bpe_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q)
        ar_xmalloc((size_t)-1);
    return q;
}

/* ------------------------------------------------------------ bpe_pretok.c */

/* Compiles GPT-2's pattern into b->re (JIT where PCRE2 has it). */
int bpe_pattern_compile(ar_bpe *b, ar_err *e);

/* One ar_bpe_encode call's walk over text[0..len), piece by piece. */
typedef struct {
    pcre2_match_data *md;
    PCRE2_SPTR view; /* what the pattern matches (bpe_pretok.c) */
    char *copy;      /* view's storage where it is not the text itself */
    size_t len;
} bpe_pieces;

void bpe_pieces_begin(bpe_pieces *p, const ar_bpe *b, const char *text, size_t len);
/* The end of the piece that starts at pos < len, into *end; 0, or -1 with
 * e set (a PCRE2 failure). */
int bpe_pieces_next(const ar_bpe *b, bpe_pieces *p, size_t pos, size_t *end, ar_err *e);
void bpe_pieces_end(bpe_pieces *p);

/* ------------------------------------------------------------ bpe_merge.c */

/* Scratch of the long-piece merge, kept across the pieces of one call. */
typedef struct {
    size_t *next, *prev;
    struct bpe_cand *heap;
    size_t nheap, list_cap, heap_cap;
} bpe_merge_scratch;

/* t[0..m) byte ids -> the piece's merged ids in place; returns their count. */
size_t bpe_merge(const ar_bpe *b, bpe_merge_scratch *s, int32_t *t, size_t m);
void bpe_merge_scratch_free(bpe_merge_scratch *s);

#endif
