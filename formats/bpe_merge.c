/* BPE merging of one piece (Sennrich et al. 2016, as GPT-2's encoder.py
 * applies it): while some adjacent pair of tokens has a merge, replace the
 * pair of lowest rank, the leftmost of equal ranks, by its merged token.
 * Two ways to the same result: a quadratic scan for short pieces (words,
 * where it is fastest) and a heap for long ones (runs of spaces or
 * symbols, where O(n^2) would be slow). */
#include <string.h>

#include "bpe_internal.h"

#define SHORT_PIECE 64

/* Short piece t[0..m): one scan of the piece per merge, pr[k] the merge of
 * t[k], t[k+1] (NULL: none), kept up to date around each merge.  Returns
 * the new length. */
static size_t merge_short(const ar_bpe *b, int32_t *t, size_t m, const pair_slot **pr)
{
    for (size_t k = 0; k + 1 < m; k++)
        pr[k] = bpe_find_pair(b, t[k], t[k + 1]);
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
            pr[best - 1] = bpe_find_pair(b, t[best - 1], t[best]);
        if (best + 1 < m)
            pr[best] = bpe_find_pair(b, t[best], t[best + 1]);
    }
    return m;
}

/* A candidate merge: the pair (left, right) with left at position pos, as
 * it was when pushed. */
struct bpe_cand {
    int32_t rank, left, right;
    size_t pos;
};

/* Min-heap order (rank, pos): the leftmost of the lowest rank on top, the
 * same choice merge_short makes. */
static int cand_less(const struct bpe_cand *a, const struct bpe_cand *c)
{
    return a->rank < c->rank || (a->rank == c->rank && a->pos < c->pos);
}

static void heap_push(bpe_merge_scratch *w, const ar_bpe *b, const int32_t *t, size_t i, size_t j)
{
    const pair_slot *s = bpe_find_pair(b, t[i], t[j]);
    if (!s)
        return;
    if (w->nheap == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = bpe_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    struct bpe_cand c = {s->rank, t[i], t[j], i};
    size_t k = w->nheap++;
    while (k > 0 && cand_less(&c, &w->heap[(k - 1) / 2])) {
        w->heap[k] = w->heap[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    w->heap[k] = c;
}

static struct bpe_cand heap_pop(bpe_merge_scratch *w)
{
    struct bpe_cand top = w->heap[0], last = w->heap[--w->nheap];
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

/* Long piece t[0..m): a merged pair lives on in its left node of a linked
 * list, its right node dies (t[] = -1).  Positions never move, so a
 * candidate's pos stays valid; one is stale once either side has merged
 * since its push, which popping checks against the list as it is then.
 * The merge that survives the check is the one merge_short would make
 * next: a live pair's candidate is in the heap from when it formed.
 * Compacts t, returns the new length. */
static size_t merge_long(const ar_bpe *b, bpe_merge_scratch *w, int32_t *t, size_t m)
{
    const size_t end = (size_t)-1;
    if (w->list_cap < m) {
        w->next = bpe_xrealloc(w->next, m * sizeof *w->next);
        w->prev = bpe_xrealloc(w->prev, m * sizeof *w->prev);
        w->list_cap = m;
    }
    for (size_t i = 0; i < m; i++) {
        w->next[i] = i + 1 < m ? i + 1 : end;
        w->prev[i] = i ? i - 1 : end;
    }
    w->nheap = 0;
    for (size_t i = 0; i + 1 < m; i++)
        heap_push(w, b, t, i, i + 1);
    while (w->nheap) {
        struct bpe_cand c = heap_pop(w);
        size_t i = c.pos, j = w->next[i];
        if (t[i] != c.left || j == end || t[j] != c.right)
            continue; /* stale */
        t[i] = bpe_find_pair(b, c.left, c.right)->id;
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

size_t bpe_merge(const ar_bpe *b, bpe_merge_scratch *s, int32_t *t, size_t m)
{
    if (m > SHORT_PIECE)
        return merge_long(b, s, t, m);
    const pair_slot *pr[SHORT_PIECE];
    return merge_short(b, t, m, pr);
}

void bpe_merge_scratch_free(bpe_merge_scratch *s)
{
    free(s->next);
    free(s->prev);
    free(s->heap);
}
