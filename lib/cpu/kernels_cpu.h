/* The CPU backend's elementwise and row ops (lib/cpu/kernels_cpu.c); their
 * math is in lib/backend.h, which they fill in for the CPU table.  The CUDA
 * versions are in lib/cuda/kernels_cuda.cu. */
#ifndef AR_CPU_KERNELS_H
#define AR_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

void cpu_copy(float *y, const float *x, size_t n);
void cpu_add(float *y, const float *x, size_t n);
void cpu_scale(float *y, float a, size_t n);
double cpu_sumsq(const float *x, size_t n);
void cpu_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d);
void cpu_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d);
void cpu_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d);
void cpu_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x, const float *g,
                     const float *rstd, int overwrite, int N, int d);
void cpu_rope_fwd(float *x, int B, int T, int nh, int hd);
void cpu_rope_bwd(float *dx, int B, int T, int nh, int hd);
void cpu_swiglu_fwd(float *out, const float *gate, const float *up, size_t n);
void cpu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                    const float *up, size_t n);
double cpu_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets,
                    int N, int V);
void cpu_xent_bwd(float *dlogits, const float *probs, const int32_t *targets, float scale, int N,
                  int V);
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr,
               float b1, float b2, float eps, float wd, long t);

#endif
