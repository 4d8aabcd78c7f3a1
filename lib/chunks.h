/* Pipeline parallelism (parallel/pipe_plan.h) cuts the L sublayers into C
 * contiguous chunks; chunk c (0..C-1) starts at sublayer
 *     first(c) = 1 + floor(c L / C),
 * so chunk sizes differ by at most one and first(C) = L + 1.  The model's
 * residual schemes need the same cut (no two-phase depth chunk spans it),
 * so it lives here, below both. */
#ifndef AR_CHUNKS_H
#define AR_CHUNKS_H

static inline int ar_chunk_first(int L, int C, int c) { return 1 + (int)((long)c * L / C); }

#endif
