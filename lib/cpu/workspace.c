/* The CPU ops' grow-only scratch (workspace.h): its own file, below the
 * kernels that take it and the backend table that lists them. */
#include "workspace.h"

void *cpu_ws(int slot, size_t bytes)
{
    static void *buf[WS_NSLOTS];
    static size_t cap[WS_NSLOTS];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        size_t n = (bytes + 63) & ~(size_t)63;
        buf[slot] = aligned_alloc(64, n);
        if (!buf[slot])
            abort();
        cap[slot] = n;
    }
    return buf[slot];
}
