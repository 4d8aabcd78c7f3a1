/* The CPU backend's weighted sum of buffers with learned coefficients
 * (lib/cpu/wsum_cpu.c; DenseFormer, mHC); its math is in lib/backend.h.
 * The CUDA version is in lib/cuda/wsum_cuda.cu. */
#ifndef AR_CPU_WSUM_H
#define AR_CPU_WSUM_H

#include <stddef.h>

void cpu_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len);
void cpu_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c,
                  int n, size_t len);

#endif
