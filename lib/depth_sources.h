/* Which sources a depth mixer reads: the one plan behind the two-phase
 * Full/Block AttnRes (lib/residual_depth.c), the general depth mixer
 * (lib/residual_mixer.c) and the mixing matrices and figures
 * (lib/mixing.c), so that all three agree on every list.
 *
 * Notation (docs/reference.md §2.4): sublayers 1..L are grouped into
 * blocks of consecutive sublayers (core/blocks.h: S each, or the sizes of
 * model.residual.block_sizes); block 0 is the embedding v_0 alone, block n
 * holds start(n) .. end(n).  With P_l the running sum of the current block
 * (P_l = v_l when l opens a block, else P_{l-1} + v_l), block n's summary
 * is b_n = P_{end(n)}, and its partial sum after i sublayers is
 * b_n^i = P_{start(n)+i-1}.  Full AttnRes is S = 1 (every b_n = v_n). */
#ifndef AR_DEPTH_SOURCES_H
#define AR_DEPTH_SOURCES_H

#include "../core/blocks.h"

/* Source s of a mixer: the sum v_first + ... + v_last of the sublayer
 * outputs of one block, held by P_last (v_0 alone is block 0). */
typedef struct {
    int first, last;
    int block;   /* the block n it belongs to (0 = the embedding) */
    int partial; /* 1: the block is not complete here: the partial sum b_n^{i-1}
                    of the current block, or the final mixer's trailing block
                    when block_size S does not divide L (b->last_partial) */
} ar_source;

/* The sources of mixer m (1..L: sublayer m; L+1: h_out) under the block
 * layout b, in order:
 *     sublayer m, the i-th of block n:  [b_0, ..., b_{n-1}] (+ b_n^{i-1} if i >= 2)
 *     h_out:                            [b_0, ..., b_{nb}]
 * window W > 0 (swa, with S = 1): only b_0 and the last W sources after it,
 *     [v_0, v_max(1,m-W), ..., v_{m-1}];  W = 0: no window.
 * Returns their number and fills out[0..n) when out is non-NULL (at most
 * L+1 entries). */
int ar_depth_sources(const ar_blocks *b, int window, int m, ar_source *out);

/* The same list as the index l of each source's P_l (its .last): a new
 * array (free it) of *n entries.  The residual schemes keep their sources
 * so. */
int *ar_depth_source_rows(const ar_blocks *b, int window, int m, int *n);

#endif
