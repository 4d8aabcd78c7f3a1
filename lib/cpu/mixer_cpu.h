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
void cpu_depth_mix_cdot(float *cdot, const float *dh, const float *h, int H, int N, int d);
void cpu_depth_mix_bwd_chunk(float *const *dsrc, const float *const *src, int s0, int s1, int C, float *const *dw, float *const *dg,
                             float *const *dtheta, const float *const *dh, const float *const *cdot,
                             const float *const *alpha, const float *const *rstd, const int *n,
                             const float *const *w, const float *const *g, const float *const *theta,
                             int sigmoid, int H, int N, int d);
/* its scalar version: the fast op's reference, and what it runs for the
 * shapes the fast ops do not take (below) */
void cpu_depth_mix_bwd_chunk_simple(float *const *dsrc, const float *const *src, int s0, int s1, int C, float *const *dw,
                                    float *const *dg, float *const *dtheta, const float *const *dh,
                                    const float *const *cdot, const float *const *alpha,
                                    const float *const *rstd, const int *n, const float *const *w,
                                    const float *const *g, const float *const *theta, int sigmoid,
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
