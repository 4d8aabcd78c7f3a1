/* Grow-only scratch memory of the CPU backend, so that the training step
 * loop allocates nothing once its first step has run.  Each op takes the
 * slots it needs (several at once when it needs several areas); a slot is
 * reallocated only when a call asks for more than it holds.  Not for use
 * inside a parallel region: ops take their slots first, then split them
 * among threads. */
#ifndef AR_CPU_WORKSPACE_H
#define AR_CPU_WORKSPACE_H

#include <stddef.h>

enum { WS_A, WS_B, WS_C, WS_ROPE, WS_NSLOTS };

/* At least `bytes` bytes, 64-byte aligned, contents undefined. */
void *cpu_ws(int slot, size_t bytes);

#endif
