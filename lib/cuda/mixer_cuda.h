/* The CUDA backend's general depth mixer ops (lib/cuda/mixer_cuda.cu), for
 * lib/residual_mixer.c; their math is in lib/backend.h.  Source lists are
 * host arrays of device pointers.  The CPU versions are in
 * lib/cpu/mixer_cpu.c. */
#ifndef AR_CUDA_MIXER_H
#define AR_CUDA_MIXER_H

#ifdef __cplusplus
extern "C" {
#endif

void cuda_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                        const float *w, int wstride, const float *g, const float *theta,
                        int sigmoid, int H, int N, int d);
void cuda_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                        const float *alpha, const float *rstd, const float *const *src, int n,
                        const float *w, int wstride, const float *g, const float *theta,
                        int sigmoid, int H, int N, int d);
void cuda_depth_mix_cdot(float *cdot, const float *dh, const float *h, int H, int N, int d);
void cuda_depth_mix_bwd_chunk(float *const *dsrc, const float *const *src, int s0, int s1, int C,
                              float *const *dw, float *const *dg, float *const *dtheta,
                              const float *const *dh, const float *const *cdot,
                              const float *const *alpha, const float *const *rstd, const int *n,
                              const float *const *w, const float *const *g,
                              const float *const *theta, int sigmoid, int H, int N, int d);

#ifdef __cplusplus
}
#endif

#endif
