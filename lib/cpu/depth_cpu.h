/* The CPU backend's depth-attention ops (lib/cpu/depth_cpu.c): one-phase
 * and two-phase; their math is in lib/backend.h, which they fill in for the
 * CPU table.  The CUDA versions are in lib/cuda/depth_cuda.cu. */
#ifndef AR_CPU_DEPTH_H
#define AR_CPU_DEPTH_H

void cpu_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d);
void cpu_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh,
                        const float *alpha, const float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d);

void cpu_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha, const int *n,
                         float *const *rs, const float *const *src, int k, const float *const *w,
                         const float *const *g, int C, const float *ng, float *xn, float *nrstd,
                         int sigmoid, int N, int d);
void cpu_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                         float *const *rsi, const float *const *intra, const float *w,
                         const float *g, const float *ng, float *xn, float *nrstd, int sigmoid,
                         int N, int d);
void cpu_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot, float *dh,
                         const float *h, const float *dxn, const float *xn,
                         const float *ng, float *dng, const float *nrstd, const float *alpha,
                         const float *lse, int n, int k, const float *const *rsi,
                         const float *const *src, const float *w, const float *g, int sigmoid,
                         int N, int d);
void cpu_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg,
                         const float *const *dh, const float *const *cdot,
                         const float *const *alpha, const float *const *lse, const int *n,
                         const float *const *rs, const float *const *src, int k,
                         const float *const *w, const float *const *g, int C, int overwrite,
                         int sigmoid, int N, int d);

#endif
