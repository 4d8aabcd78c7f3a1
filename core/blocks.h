/* The block layout of a residual config: which sublayers each block of
 * Block AttnRes holds (docs/reference.md §2.4).
 *
 * Block 0 is the embedding v_0 alone; blocks 1..nb cut sublayers 1..L into
 * runs of consecutive sublayers, block n holding start[n] .. start[n+1]-1.
 * model.residual.block_size S gives blocks of S (the last one shorter when
 * S does not divide L), num_blocks N gives S = ceil(L/N), block_sizes
 * [s_1, .., s_nb] gives block n s_n sublayers; so block_size S is the list
 * [S, .., S, L - (ceil(L/S)-1) S].  Kinds without blocks have the layout of
 * ar_cfg_block_size (Full: blocks of 1; baseline: one block). */
#ifndef AR_BLOCKS_H
#define AR_BLOCKS_H

#include <stddef.h>

#include "config.h"

typedef struct {
    int L;            /* sublayers */
    int nb;           /* blocks after the embedding */
    int *start;       /* start[n], n = 0..nb+1: first sublayer of block n;
                         start[0] = 0 (v_0), start[1] = 1, start[nb+1] = L+1 */
    int *of;          /* of[l], l = 0..L: the block holding sublayer l (of[0] = 0) */
    int last_partial; /* 1: the last block is shorter than the others because
                         block_size S does not divide L (figures mark it) */
} ar_blocks;

/* Blocks of S >= 1 sublayers, the last one shorter when S does not divide L
 * (S > L: one block). */
void ar_blocks_uniform(ar_blocks *b, int L, int S);
/* Blocks of size[0..n-1] sublayers.  The sizes should be positive and sum
 * to L (ar_config_validate checks a config's); otherwise they are clamped
 * so that the blocks still cover exactly 1..L (a short list's last block
 * runs to L). */
void ar_blocks_sizes(ar_blocks *b, int L, const int *size, int n);
/* The layout of a model config: block_sizes when given (kind block), else
 * ar_blocks_uniform(L, ar_cfg_block_size(m)). */
void ar_blocks_of_cfg(ar_blocks *b, const ar_model_cfg *m);
void ar_blocks_copy(ar_blocks *dst, const ar_blocks *src);
void ar_blocks_free(ar_blocks *b);

/* Last sublayer of block n: end(n) = start[n+1] - 1 (end(0) = 0). */
static inline int ar_blocks_end(const ar_blocks *b, int n) { return b->start[n + 1] - 1; }
/* Whether sublayer l (>= 1) is the first of its block. */
static inline int ar_blocks_opens(const ar_blocks *b, int l) { return b->start[b->of[l]] == l; }
/* Whether row l (0..L) is a block's last: P_l is then the summary b_n. */
static inline int ar_blocks_closes(const ar_blocks *b, int l) { return ar_blocks_end(b, b->of[l]) == l; }

/* Whether two configs cut their sublayers into the same blocks (block_size
 * 2 and block_sizes [2, 2, 2, 2] do, at L = 8). */
int ar_cfg_same_blocks(const ar_model_cfg *a, const ar_model_cfg *b);

/* "2,2,4,8" (sep ",") or "2-2-4-8" (sep "-"): the list's entries joined by
 * sep, cut to fit n bytes. */
void ar_int_list_text(const int *v, int count, const char *sep, char *buf, size_t n);

/* How a block config describes its layout in labels: "S = 4" or
 * "blocks 1,3,2,2". */
void ar_cfg_blocks_label(const ar_model_cfg *m, char *buf, size_t n);

#endif
