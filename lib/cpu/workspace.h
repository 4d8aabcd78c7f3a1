/* Scratch memory of the CPU backend's ops.  Grow-only slots, so that the
 * training step loop allocates nothing once its first step has run.  Each
 * op takes the slots it needs (several at once when it needs several
 * areas); a slot is reallocated only when a call asks for more than it
 * holds.  Not for use inside a parallel region: ops take their slots
 * first, then split them among threads. */
#ifndef AR_CPU_WORKSPACE_H
#define AR_CPU_WORKSPACE_H

#include <stddef.h>
#include <stdlib.h>

enum { WS_A, WS_B, WS_C, WS_ROPE, WS_GEMM, WS_NSLOTS };

/* At least `bytes` bytes, 64-byte aligned, contents undefined. */
void *cpu_ws(int slot, size_t bytes);

/* n x s zeroed bytes of an op's own (at least one element; freed by the
 * op), or abort, as an allocation failure in the compute library does. */
static inline void *cpu_xcalloc(size_t n, size_t s)
{
    void *p = calloc(n ? n : 1, s);
    if (!p)
        abort();
    return p;
}

#endif
