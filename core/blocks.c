/* Block layouts (blocks.h). */
#include "blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Fills start/of from the blocks' sizes, each at least 1, cut at L. */
static void fill(ar_blocks *b, int L, const int *size, int n, int S)
{
    b->L = L;
    b->start = ar_xcalloc((size_t)L + 2, sizeof(int));
    b->of = ar_xcalloc((size_t)L + 1, sizeof(int));
    b->nb = 0;
    int l = 1;
    for (int k = 0; l <= L; k++) {
        int s = size ? (k < n ? size[k] : L) : S;
        if (s < 1)
            s = 1;
        if (size && k == n - 1)
            s = L - l + 1; /* the list's last block ends at L */
        if (s > L - l + 1)
            s = L - l + 1;
        b->start[++b->nb] = l;
        for (int i = 0; i < s; i++)
            b->of[l + i] = b->nb;
        l += s;
    }
    b->start[b->nb + 1] = L + 1;
}

void ar_blocks_uniform(ar_blocks *b, int L, int S)
{
    fill(b, L, NULL, 0, S < 1 ? 1 : S);
    b->last_partial = S >= 1 && S <= L && L % S != 0;
}

void ar_blocks_sizes(ar_blocks *b, int L, const int *size, int n)
{
    fill(b, L, size, n, 1);
    b->last_partial = 0;
}

void ar_blocks_of_cfg(ar_blocks *b, const ar_model_cfg *m)
{
    const ar_residual_cfg *r = &m->residual;
    int L = ar_cfg_sublayers(m);
    if (r->kind == AR_RES_BLOCK && r->block_sizes.n > 0)
        ar_blocks_sizes(b, L, r->block_sizes.v, r->block_sizes.n);
    else
        ar_blocks_uniform(b, L, ar_cfg_block_size(m));
}

void ar_blocks_copy(ar_blocks *dst, const ar_blocks *src)
{
    *dst = *src;
    dst->start = ar_xcalloc((size_t)src->L + 2, sizeof(int));
    dst->of = ar_xcalloc((size_t)src->L + 1, sizeof(int));
    memcpy(dst->start, src->start, ((size_t)src->nb + 2) * sizeof(int));
    memcpy(dst->of, src->of, ((size_t)src->L + 1) * sizeof(int));
}

void ar_blocks_free(ar_blocks *b)
{
    free(b->start);
    free(b->of);
    memset(b, 0, sizeof *b);
}

int ar_cfg_same_blocks(const ar_model_cfg *a, const ar_model_cfg *b)
{
    ar_blocks x, y;
    ar_blocks_of_cfg(&x, a);
    ar_blocks_of_cfg(&y, b);
    int same = x.L == y.L && x.nb == y.nb && memcmp(x.start, y.start, ((size_t)x.nb + 2) * sizeof(int)) == 0;
    ar_blocks_free(&x);
    ar_blocks_free(&y);
    return same;
}

void ar_int_list_text(const int *v, int count, const char *sep, char *buf, size_t n)
{
    size_t used = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%d", i ? sep : "", v[i]);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}

void ar_cfg_blocks_label(const ar_model_cfg *m, char *buf, size_t n)
{
    const ar_residual_cfg *r = &m->residual;
    if (r->kind == AR_RES_BLOCK && r->block_sizes.n > 0) {
        char list[1024];
        ar_int_list_text(r->block_sizes.v, r->block_sizes.n, ",", list, sizeof list);
        snprintf(buf, n, "blocks %s", list);
    } else {
        snprintf(buf, n, "S = %d", ar_cfg_block_size(m));
    }
}
