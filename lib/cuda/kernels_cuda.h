/* The CUDA backend's elementwise and row ops (lib/cuda/kernels_cuda.cu);
 * their math is in lib/backend.h, and every one runs on ar_cuda_stream().
 * The CPU versions are in lib/cpu/kernels_cpu.c. */
#ifndef AR_CUDA_KERNELS_H
#define AR_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void cuda_copy(float *y, const float *x, size_t n);
void cuda_add(float *y, const float *x, size_t n);
void cuda_scale(float *y, float a, size_t n);
double cuda_sumsq(const float *x, size_t n);
void cuda_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d);
void cuda_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d);
void cuda_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d);
void cuda_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x, const float *g,
                      const float *rstd, int overwrite, int N, int d);
void cuda_rope_fwd(float *x, int B, int T, int nh, int hd);
void cuda_rope_bwd(float *dx, int B, int T, int nh, int hd);
void cuda_swiglu_fwd(float *out, const float *gate, const float *up, size_t n);
void cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n);
double cuda_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets,
                     int N, int V);
void cuda_xent_bwd(float *dlogits, const float *probs, const int32_t *targets, float scale, int N,
                   int V);
void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr,
                float b1, float b2, float eps, float wd, long t);

#ifdef __cplusplus
}
#endif

#endif
