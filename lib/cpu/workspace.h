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

/* Two-phase depth attention (lib/cpu/depth_cpu.c); see lib/backend.h. */
void cpu_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha, const int *n,
                         float *const *rs, const float *const *src, int k, const float *const *w,
                         const float *const *g, int C, int N, int d);
void cpu_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                         float *const *rsi, const float *const *intra, const float *w,
                         const float *g, int N, int d);
void cpu_depth_recompute(float *const *h, const float *const *alpha,
                         const float *const *const *src, const int *n, int C, int N, int d);
void cpu_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot,
                         const float *dh, const float *h, const float *alpha, const float *lse,
                         int n, int k,
                         const float *const *rsi, const float *const *intra, const float *w,
                         const float *g, int N, int d);
void cpu_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg,
                         const float *const *dh, const float *const *cdot,
                         const float *const *alpha, const float *const *lse, const int *n,
                         const float *const *rs, const float *const *src, int k,
                         const float *const *w, const float *const *g, int C, int overwrite,
                         int N, int d);

#endif
