/* The CPU backend's causal multi-head attention (lib/cpu/attention_cpu.c);
 * its math is in lib/backend.h.  The CUDA version is in
 * lib/cuda/attention_cuda.cu. */
#ifndef AR_CPU_ATTENTION_H
#define AR_CPU_ATTENTION_H

void cpu_attention_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                       int B, int T, int nh, int hd);
void cpu_attention_bwd(float *dq, float *dk, float *dv, float *datt, const float *dy,
                       const float *att, const float *q, const float *k, const float *v, int B,
                       int T, int nh, int hd);
/* incremental decoding against a key/value cache (lib/decode.c) */
void cpu_rope_fwd_at(float *x, int n, int pos0, int nh, int hd);
void cpu_attention_decode(float *y, float *att, const float *q, const float *k, const float *v,
                          int n, int pos0, int nh, int hd);

#endif
