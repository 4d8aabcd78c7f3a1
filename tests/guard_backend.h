/* A backend that makes the device/host boundary of lib/backend.h physical.
 *
 * It runs every op of ar_backend_cpu(), but its allocations are mmap'ed
 * pages kept PROT_NONE except while one of its own entries runs (the
 * allocations that entry's arguments point into are unprotected, the CPU
 * op runs, they are protected again).  Host code that reads or writes
 * device memory directly, as it could with the CPU backend and cannot with
 * a GPU's, dies with SIGSEGV, and the handler says which allocation it
 * touched.  Each allocation ends at a page that stays PROT_NONE, so an op
 * that runs past its buffer, or into one it was not given, faults too.
 *
 * Every entry also checks its arguments the other way round: each device
 * pointer must lie, with the extent that the op's "uses" in lib/ops.def
 * gives it, inside one live allocation of this backend, and each array of
 * pointers (a depth-attention source list) must be host memory.  A
 * violation aborts with the op and argument named.  The entries are
 * generated from lib/ops.def, one per op. */
#ifndef AR_GUARD_BACKEND_H
#define AR_GUARD_BACKEND_H

#include "lib/backend.h"

const ar_backend *guard_backend(void);

/* Live allocations, and op calls (entries other than alloc/free) so far. */
long guard_backend_live(void);
long guard_backend_calls(void);
/* Entries so far that bring device values to the host (download, and the
 * ops that return a value): each a wait for the device on a GPU. */
long guard_backend_reads(void);

#endif
