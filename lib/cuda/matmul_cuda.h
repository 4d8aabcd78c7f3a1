/* The row-major cuBLAS products of lib/cuda/matmul_cuda.cu, which its
 * linear layers (ops_cuda.h) and attention_cuda.cu use. */
#ifndef AR_CUDA_MATMUL_H
#define AR_CUDA_MATMUL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/* The backend's set_weight_copy (lib/backend.h): products under bf16 read
 * operands inside [p, p + n floats) from one bf16 copy of the range, made
 * when a product first needs it after ar_cu_weights_written; n = 0 forgets
 * the range, the range already set keeps its copy.  ar_cu_weights_written(q): something is about to write at q
 * (an op's output, an upload, a memset); inside the range, the copy is
 * out of date.  Freeing memory inside the range forgets it. */
void ar_cu_weight_copy(const float *p, size_t n);
void ar_cu_weights_written(const void *q);
void ar_cu_weights_freed(const void *q);

#ifdef __cplusplus
}
#endif

#endif
