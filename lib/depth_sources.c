/* The source list of a depth mixer (depth_sources.h). */
#include "depth_sources.h"

#include <stdlib.h>

#include "../core/error.h"

int ar_depth_sources(const ar_blocks *bl, int window, int m, ar_source *out)
{
    int L = bl->L;
    int nblk, partial_last; /* complete blocks b_0..b_{nblk-1}, then maybe a partial one */
    if (m == L + 1) {
        nblk = bl->nb + 1;
        partial_last = bl->last_partial;
        if (partial_last)
            nblk--; /* b_nb is the trailing, shorter block */
    } else {
        nblk = bl->of[m];                      /* m is in block nblk: b_0 .. b_{nblk-1} are complete */
        partial_last = m > bl->start[nblk];    /* m is its block's i-th, i >= 2: b_nblk^{i-1} */
    }
    int n = nblk + partial_last;
    /* sources 1..skip fall before the window (the partial one, last, never does) */
    int skip = window > 0 && n - 1 > window ? n - 1 - window : 0;
    if (!out)
        return n - skip;
    int k = 0;
    for (int b = 0; b < nblk; b++)
        if (b == 0 || b > skip)
            out[k++] = (ar_source){.first = bl->start[b], .last = ar_blocks_end(bl, b), .block = b};
    if (partial_last)
        out[k++] = (ar_source){
            .first = bl->start[nblk], .last = m == L + 1 ? L : m - 1, .block = nblk, .partial = 1};
    return k;
}

int *ar_depth_source_rows(const ar_blocks *b, int window, int m, int *n)
{
    ar_source *src = ar_xcalloc((size_t)b->L + 1, sizeof *src);
    *n = ar_depth_sources(b, window, m, src);
    int *rows = ar_xcalloc((size_t)*n, sizeof(int));
    for (int s = 0; s < *n; s++)
        rows[s] = src[s].last;
    free(src);
    return rows;
}
