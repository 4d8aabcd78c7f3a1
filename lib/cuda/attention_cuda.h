/* The CUDA backend's causal multi-head attention (lib/cuda/attention_cuda.cu);
 * its math is in lib/backend.h.  The CPU version is in
 * lib/cpu/attention_cpu.c. */
#ifndef AR_CUDA_ATTENTION_H
#define AR_CUDA_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

void cuda_attention_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                        int B, int T, int nh, int hd);
void cuda_attention_bwd(float *dq, float *dk, float *dv, float *datt, const float *dy,
                        const float *att, const float *q, const float *k, const float *v, int B,
                        int T, int nh, int hd);
/* incremental decoding against a key/value cache (lib/decode.c) */
void cuda_rope_fwd_at(float *x, int n, int pos0, int nh, int hd);
void cuda_attention_decode(float *y, float *att, const float *q, const float *k, const float *v,
                           int n, int pos0, int nh, int hd);

#ifdef __cplusplus
}
#endif

#endif
