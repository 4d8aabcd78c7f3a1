/* Internals shared by the CUDA backend's core translation units:
 * backend_cuda.cu (memory, device, cuBLAS products, the table),
 * attention_cuda.cu and kernels_cuda.cu.  Every op has the semantics of
 * its entry in lib/backend.h and runs on ar_cuda_stream(). */
#ifndef AR_OPS_CUDA_H
#define AR_OPS_CUDA_H

#include "cuda_util.h"

#include <stddef.h>
#include <stdint.h>

/* Grow-only device scratch, one buffer per slot: at least `bytes` bytes,
 * 256-byte aligned, contents undefined.  A slot is reallocated (after a
 * stream sync) only when a call asks for more than it holds, so the
 * training loop allocates nothing in steady state.  Ops are ordered on the
 * one stream, so an op may reuse a slot an earlier op used; within one op,
 * areas in use at the same time need distinct slots. */
enum { CU_WS_RED, CU_WS_PART, CU_WS_ROPE, CU_WS_SORT, CU_WS_NSLOTS };
void *ar_cu_ws(int slot, size_t bytes);

/* Row-major products on cuBLAS, with cblas_sgemm's row-major meaning:
 *   C (M x N, ldc) = alpha op(A) op(B) + beta C,  op(A) M x K, op(B) K x N
 * (ta: A is stored K x M and transposed).  In bf16 or fp32 as set_bf16
 * says.  The batched form repeats it `batch` times, the i-th product on
 * A + i*sA, B + i*sB, C + i*sC. */
void ar_cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);
void ar_cu_gemm_batched(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                        int ldc, long long sC, int batch);

/* attention_cuda.cu */
void ar_cu_attention_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                         int B, int T, int nh, int hd);
void ar_cu_attention_bwd(float *dq, float *dk, float *dv, float *datt, const float *dy,
                         const float *att, const float *q, const float *k, const float *v, int B,
                         int T, int nh, int hd);

/* kernels_cuda.cu */
void ar_cu_add(float *y, const float *x, size_t n);
void ar_cu_scale(float *y, float a, size_t n);
double ar_cu_sumsq(const float *x, size_t n);
void ar_cu_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d);
void ar_cu_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d);
void ar_cu_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d);
void ar_cu_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x, const float *g,
                       const float *rstd, int overwrite, int N, int d);
void ar_cu_rope_fwd(float *x, int B, int T, int nh, int hd);
void ar_cu_rope_bwd(float *dx, int B, int T, int nh, int hd);
void ar_cu_swiglu_fwd(float *out, const float *gate, const float *up, size_t n);
void ar_cu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                      const float *up, size_t n);
double ar_cu_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets,
                      int N, int V);
void ar_cu_xent_bwd(float *dlogits, const float *probs, const int32_t *targets, float scale, int N,
                    int V);
void ar_cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr,
                 float b1, float b2, float eps, float wd, long t);

/* ---- device helpers for the kernels (warp = 32 lanes, full mask) ---- */
#ifdef __CUDACC__
__device__ static inline float ar_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline double ar_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float ar_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

#endif
