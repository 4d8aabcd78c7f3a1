/* The source list of a depth mixer (depth_sources.h). */
#include "depth_sources.h"

#include <stdlib.h>

#include "../core/error.h"

/* Last sublayer of block n (>= 1): end(n) = min(n*S, L); end(0) = 0. */
static int block_end(int n, int S, int L)
{
    return n * S < L ? n * S : L;
}

int ar_depth_sources(int L, int S, int window, int m, ar_source *out)
{
    int nblk, partial_last; /* complete blocks b_0..b_{nblk-1}, then maybe a partial one */
    if (m == L + 1) {
        nblk = (L + S - 1) / S + 1;
        partial_last = L % S != 0;
        if (partial_last)
            nblk--; /* b_{ceil(L/S)} is the trailing, incomplete block */
    } else {
        nblk = (m - 1) / S + 1;          /* m is in block nblk: b_0 .. b_{nblk-1} are complete */
        partial_last = (m - 1) % S >= 1; /* i >= 2: b_nblk^{i-1} */
    }
    int n = nblk + partial_last;
    /* sources 1..skip fall before the window (the partial one, last, never does) */
    int skip = window > 0 && n - 1 > window ? n - 1 - window : 0;
    if (!out)
        return n - skip;
    int k = 0;
    for (int b = 0; b < nblk; b++)
        if (b == 0 || b > skip)
            out[k++] = (ar_source){
                .first = b == 0 ? 0 : (b - 1) * S + 1, .last = block_end(b, S, L), .block = b};
    if (partial_last) {
        int first = nblk == 0 ? 0 : (nblk - 1) * S + 1; /* block nblk opens at (nblk-1)S + 1 */
        out[k++] = (ar_source){
            .first = first, .last = m == L + 1 ? L : m - 1, .block = nblk, .partial = 1};
    }
    return k;
}

int *ar_depth_source_rows(int L, int S, int window, int m, int *n)
{
    ar_source *src = ar_xcalloc((size_t)L + 1, sizeof *src);
    *n = ar_depth_sources(L, S, window, m, src);
    int *rows = ar_xcalloc((size_t)*n, sizeof(int));
    for (int s = 0; s < *n; s++)
        rows[s] = src[s].last;
    free(src);
    return rows;
}
