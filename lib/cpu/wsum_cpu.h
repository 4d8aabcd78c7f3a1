/* The CPU backend's weighted sums of buffers with learned coefficients
 * (lib/cpu/wsum_cpu.c; DenseFormer, mHC); its math is in lib/backend.h.
 * The CUDA version is in lib/cuda/wsum_cuda.cu. */
#ifndef AR_CPU_WSUM_H
#define AR_CPU_WSUM_H

#include <stddef.h>

void cpu_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len);
void cpu_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c,
                  int n, size_t len);
void cpu_wmix_fwd(float *const *y, int p, const float *const *x, int n, const float *C, int ldc, size_t len);
void cpu_wmix_bwd(float *const *dx, int accumulate, float *dC, const float *const *dy, int p,
                  const float *const *x, int n, const float *C, int ldc, size_t len);

#endif
