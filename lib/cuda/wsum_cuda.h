/* The CUDA backend's weighted sums of buffers with learned coefficients
 * (lib/cuda/wsum_cuda.cu; DenseFormer, mHC); its math is in lib/backend.h.
 * Buffer lists are host arrays of device pointers.  The CPU version is in
 * lib/cpu/wsum_cpu.c. */
#ifndef AR_CUDA_WSUM_H
#define AR_CUDA_WSUM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void cuda_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate,
                   size_t len);
void cuda_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x,
                   const float *c, int n, size_t len);
void cuda_wmix_fwd(float *const *y, int p, const float *const *x, int n, const float *C, int ldc,
                   size_t len);
void cuda_wmix_bwd(float *const *dx, int accumulate, float *dC, const float *const *dy, int p,
                   const float *const *x, int n, const float *C, int ldc, size_t len);

#ifdef __cplusplus
}
#endif

#endif
