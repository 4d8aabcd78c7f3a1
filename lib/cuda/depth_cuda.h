/* The CUDA backend's depth-attention ops (lib/cuda/depth_cuda.cu): one-phase
 * and two-phase, with the semantics stated in lib/backend.h.  Source lists
 * are host arrays of device pointers.  The CPU versions are in
 * lib/cpu/depth_cpu.c. */
#ifndef AR_CUDA_DEPTH_H
#define AR_CUDA_DEPTH_H

#ifdef __cplusplus
extern "C" {
#endif

void cuda_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                         const float *w, const float *g, int N, int d);
void cuda_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh,
                         const float *alpha, const float *rstd, const float *const *src, int n,
                         const float *w, const float *g, int N, int d);
void cuda_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha, const int *n,
                          float *const *rs, const float *const *src, int k,
                          const float *const *w, const float *const *g, int C, const float *ng,
                          float *xn, float *nrstd, int sigmoid, int N, int d);
void cuda_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                          float *const *rsi, const float *const *intra, const float *w,
                          const float *g, const float *ng, float *xn, float *nrstd, int sigmoid,
                          int N, int d);
void cuda_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot, float *dh,
                          const float *h, const float *dxn, const float *xn,
                          const float *ng, float *dng, const float *nrstd, const float *alpha,
                          const float *lse, int n, int k, const float *const *rsi,
                          const float *const *src, const float *w, const float *g, int sigmoid,
                          int N, int d);
void cuda_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg,
                          const float *const *dh, const float *const *cdot,
                          const float *const *alpha, const float *const *lse, const int *n,
                          const float *const *rs, const float *const *src, int k,
                          const float *const *w, const float *const *g, int C, int overwrite,
                          int sigmoid, int N, int d);

#ifdef __cplusplus
}
#endif

#endif
