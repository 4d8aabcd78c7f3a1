/* The CPU backend's ops for the ablation variants (lib/cpu/ablate_cpu.c);
 * their math is in lib/backend.h, which they fill in for the CPU table. */
#ifndef AR_CPU_ABLATE_H
#define AR_CPU_ABLATE_H

#include <stddef.h>

void cpu_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d);
void cpu_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                       const float *alpha, const float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d);
void cpu_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len);
void cpu_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c,
                  int n, size_t len);

#endif
