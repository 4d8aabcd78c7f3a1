/* The CPU backend's general depth mixer ops (lib/cpu/mixer_cpu.c), for
 * lib/residual_mixer.c; their math is in lib/backend.h, which they fill in
 * for the CPU table.  The CUDA versions are in lib/cuda/mixer_cuda.cu. */
#ifndef AR_CPU_MIXER_H
#define AR_CPU_MIXER_H

void cpu_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d);
void cpu_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                       const float *alpha, const float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d);

/* The simple one-phase versions (two sweeps of every source row per token,
 * scalar reductions): the fast ops' reference in the tests, and what they
 * run for shapes they do not take (d not a multiple of 16, or head width
 * neither a multiple nor a divisor of 16). */
void cpu_depth_mix_fwd_simple(float *h, float *alpha, float *rstd, const float *const *src, int n,
                              const float *w, int wstride, const float *g, const float *theta,
                              int sigmoid, int H, int N, int d);
void cpu_depth_mix_bwd_simple(float *const *dsrc, float *dw, float *dg, float *dtheta,
                              const float *dh, const float *alpha, const float *rstd,
                              const float *const *src, int n, const float *w, int wstride,
                              const float *g, const float *theta, int sigmoid, int H, int N, int d);

#endif
