/* The CPU backend's linear layers (lib/cpu/matmul_cpu.c); their math is in
 * lib/backend.h.  The CUDA versions are in lib/cuda/matmul_cuda.cu. */
#ifndef AR_CPU_MATMUL_H
#define AR_CPU_MATMUL_H

void cpu_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd);
void cpu_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W,
                    int N, int in, int outd);
void cpu_matvec_fwd(float *out, const float *x, const float *W, int in, int outd);

#endif
