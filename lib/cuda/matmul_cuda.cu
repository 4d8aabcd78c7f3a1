/* Linear layers and every matrix product of the CUDA backend, on cuBLAS.
 *
 * cuBLAS mapping.  cuBLAS is column-major; our buffers are row-major.  A
 * row-major M x N matrix with leading dimension ld is, byte for byte, the
 * column-major N x M matrix of its transpose with the same ld.  So the
 * row-major product
 *     C = alpha op(A) op(B) + beta C          (C: M x N)
 * is the column-major product C^T = op(B)^T op(A)^T, i.e.
 *     cublasGemmEx(opB, opA, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc)
 * with the operands swapped, the op flags passed through unchanged and the
 * leading dimensions those of the row-major storage.  ar_cu_gemm takes
 * cblas_sgemm's row-major arguments (ta, tb: 1 = transposed), so every call
 * reads like the CPU backend's cblas_sgemm call it mirrors (N tokens):
 *     out = x W^T      gemm(0, 1, N, outd, in, 1, x, in, W, in, 0, out, outd)
 *     dx += dout W     gemm(0, 0, N, in, outd, 1, dout, outd, W, in, 1, dx, in)
 *     dW += dout^T x   gemm(1, 0, outd, in, N, 1, dout, outd, x, in, 1, dW, in)
 * Attention uses the strided-batched form over heads (or over the batch):
 * head h of q (B x T x nh*hd) is the T x hd matrix at q + b*T*C + h*hd with
 * leading dimension C = nh*hd, so consecutive heads are hd floats apart.
 *
 * Precision.  Buffers are fp32 (parameters are the fp32 master weights;
 * the optimizer state and every reduction stay fp32 or double), but for
 * the activations a model keeps in bf16 storage under bf16 (lib/backend.h,
 * alloc_act: the sublayers' xn, q, k, v, y, gate, up, act), which the
 * linear layers read as bf16 operands as they are and write as cuBLAS's
 * bf16 output (the fp32 sum rounded once, to nearest even).
 *   fp32 (default): compute type CUBLAS_COMPUTE_32F under
 *     CUBLAS_DEFAULT_MATH, i.e. true fp32 FMA products, no TF32: results
 *     agree with the CPU backend to ~1e-5 relative (summation order only).
 *   bf16 (set_bf16(1)): A and B rounded to bf16 (to nearest, ties to
 *     even), the product on tensor cores with fp32 accumulation and fp32
 *     output.  Two ways to the same numbers: where both of C's sides are
 *     at least BF16_COPY (the linear layers of training), the operands are
 *     rounded into bf16 copies in the workspace and cuBLAS multiplies
 *     bf16 by bf16 (CUDA_R_16BF, CUBLAS_COMPUTE_32F): at bench-gpt2-small's
 *     shapes on an H200 a step's products take 20 ms so against 45 ms in
 *     the other way (bench/bench_gemm_cuda.cu), and a step's matmul ops,
 *     the roundings included, 36 ms against 65 (BENCHMARKS.md);
 *     elsewhere (a row of decoding: W is read once, and a copy would read
 *     it twice) compute type CUBLAS_COMPUTE_32F_FAST_16BF on the fp32
 *     buffers, cuBLAS rounding A and B inside.  Norms, softmaxes,
 *     cross-entropy and AdamW stay fp32.
 *   The weights' copy: an operand inside the range given to
 *     set_weight_copy (the model's parameters) is read from one bf16 copy
 *     of the whole range, rounded when a product first needs it after
 *     anything wrote inside the range (the backend's table marks every
 *     op's float * arguments, uploads and memsets: backend_cuda.cu), so a
 *     training step rounds the weights once, not once per product (the
 *     output layer's weight was rounded for each of its row chunks,
 *     forward and backward).  The same roundings: the same products, bit
 *     for bit. */
#include "matmul_cuda.h"
#include "ops_cuda.h"

#include "cuda_util.h"
#include "workspace_cuda.h"

#include <cuda_bf16.h>
#include <stdint.h>

/* both sides of C at least this: the bf16 copies pay (above) */
#define BF16_COPY 64

static cublasComputeType_t compute_type(void)
{
    return ar_cuda_bf16() ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* y[i] = bf16(x[i]), i < n; four at a time where x is 16-byte aligned */
__global__ static void round_bf16_kernel(__nv_bfloat16 *y, const float *x, size_t n, int by4)
{
    size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x, done = 0;
    if (by4) {
        for (size_t i = i0; i < n / 4; i += step) {
            float4 v = ((const float4 *)x)[i];
            y[4 * i] = __float2bfloat16(v.x), y[4 * i + 1] = __float2bfloat16(v.y);
            y[4 * i + 2] = __float2bfloat16(v.z), y[4 * i + 3] = __float2bfloat16(v.w);
        }
        done = n / 4 * 4;
    }
    for (size_t i = done + i0; i < n; i += step)
        y[i] = __float2bfloat16(x[i]);
}

/* a bf16 copy of the n floats at x in workspace slot `slot` */
static const __nv_bfloat16 *bf16_copy(int slot, const float *x, size_t n)
{
    __nv_bfloat16 *y = (__nv_bfloat16 *)ar_cu_ws(slot, n * sizeof *y);
    int by4 = (uintptr_t)x % 16 == 0;
    size_t work = by4 ? n / 4 : n, blocks = (work + 255) / 256;
    round_bf16_kernel<<<(unsigned)(blocks < 4096 ? (blocks ? blocks : 1) : 4096), 256, 0, ar_cuda_stream()>>>(
        y, x, n, by4);
    AR_CUDA_LAUNCHED();
    return y;
}

/* the parameters' range and their bf16 copy (set_weight_copy) */
static struct {
    const float *lo;
    size_t n;
    const __nv_bfloat16 *copy;
    int fresh; /* the copy holds the range's current values */
} g_weights;

extern "C" void ar_cu_weight_copy(const float *p, size_t n)
{
    if (p == g_weights.lo && n == g_weights.n)
        return; /* the same range: the copy stays */
    g_weights.lo = n ? p : NULL;
    g_weights.n = p ? n : 0;
    g_weights.fresh = 0;
}

static int in_weights(const void *q)
{
    const char *lo = (const char *)g_weights.lo;
    return g_weights.n && (const char *)q >= lo && (const char *)q < lo + g_weights.n * sizeof(float);
}

extern "C" void ar_cu_weights_written(const void *q)
{
    if (in_weights(q))
        g_weights.fresh = 0;
}

extern "C" void ar_cu_weights_freed(const void *q)
{
    if (in_weights(q))
        ar_cu_weight_copy(NULL, 0);
}

/* a bf16 copy of the n floats at x: a view of the weights' copy where x
 * lies inside their range (rounding the range first where it is out of
 * date), else rounded into workspace slot `slot` */
static const __nv_bfloat16 *bf16_operand(int slot, const float *x, size_t n)
{
    if (n && in_weights(x) && x + n <= g_weights.lo + g_weights.n) {
        if (!g_weights.fresh) {
            g_weights.copy = bf16_copy(CU_WS_WEIGHTS, g_weights.lo, g_weights.n);
            g_weights.fresh = 1;
        }
        return g_weights.copy + (x - g_weights.lo);
    }
    return bf16_copy(slot, x, n);
}

/* floats a row-major operand of rows x cols with leading dimension ld spans */
static size_t span(int rows, int cols, int ld) { return rows && cols ? (size_t)(rows - 1) * ld + cols : 0; }

/* an M x N product with a K-long sum takes bf16 copies of its operands */
static int by_copies(int M, int N, int K) { return ar_cuda_bf16() && M >= BF16_COPY && N >= BF16_COPY && K > 0; }

/* ar_cu_gemm's product on bf16 operands (cuBLAS bf16 x bf16, fp32 sums),
 * into fp32 C, or into bf16 C where c16 (bf16 storage: the sum rounded
 * once, to nearest even) */
static void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const __nv_bfloat16 *A, int lda,
                      const __nv_bfloat16 *B, int ldb, float beta, void *C, int ldc, int c16 = 0)
{
    AR_CUBLAS_CHECK(cublasGemmEx(ar_cuda_cublas(), op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                                 CUDA_R_16BF, lda, &beta, C, c16 ? CUDA_R_16BF : CUDA_R_32F, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* an activation operand in bf16: the buffer itself where it is bf16
 * storage (lib/backend.h, alloc_act), else as bf16_operand */
static const __nv_bfloat16 *bf16_input(int slot, const float *x, size_t n)
{
    return ar_cu_bf16_stored(x) ? (const __nv_bfloat16 *)x : bf16_operand(slot, x, n);
}

void ar_cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (by_copies(M, N, K)) {
        const __nv_bfloat16 *a = bf16_operand(CU_WS_MM_A, A, ta ? span(K, M, lda) : span(M, K, lda));
        const __nv_bfloat16 *b = bf16_operand(CU_WS_MM_B, B, tb ? span(N, K, ldb) : span(K, N, ldb));
        gemm_bf16(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
        return;
    }
    AR_CUBLAS_CHECK(cublasGemmEx(ar_cuda_cublas(), op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F,
                                 ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                 compute_type(), CUBLAS_GEMM_DEFAULT));
}

void ar_cu_gemm_batched(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                        int ldc, long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return;
    AR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ar_cuda_cublas(), op(tb), op(ta), N, M, K, &alpha,
                                               B, CUDA_R_32F, ldb, sB, A, CUDA_R_32F, lda, sA,
                                               &beta, C, CUDA_R_32F, ldc, sC, batch,
                                               compute_type(), CUBLAS_GEMM_DEFAULT));
}

/* out = x W^T     x: N x in, W: outd x in, out: N x outd   (=)
 * x and out may be bf16 storage: then the product is bf16 (W rounded as
 * under set_bf16(1)) whatever its shape, and out the sum rounded to
 * bf16. */
void cuda_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    ar_cu_no_bf16_storage("matmul_fwd", "'W'", W);
    int x16 = ar_cu_bf16_stored(x), o16 = ar_cu_bf16_stored(out);
    if (x16 || o16) {
        if (N <= 0 || outd <= 0)
            return;
        const __nv_bfloat16 *a = bf16_input(CU_WS_MM_A, x, (size_t)N * in);
        const __nv_bfloat16 *b = bf16_operand(CU_WS_MM_B, W, (size_t)outd * in);
        gemm_bf16(0, 1, N, outd, in, 1.0f, a, in, b, in, 0.0f, out, outd, o16);
        return;
    }
    ar_cu_gemm(0, 1, N, outd, in, 1.0f, x, in, W, in, 0.0f, out, outd);
}

/* dx += dout W   (skipped when dx is NULL; overwrite: =);   dW += dout^T x
 * With bf16 copies dout is rounded once for both products.  x may be bf16
 * storage: then both products are bf16, whatever their shapes. */
void cuda_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W,
                     int overwrite, int N, int in, int outd)
{
    ar_cu_fp32_only("matmul_bwd", {{"'dx'", dx}, {"'dW'", dW}, {"'dout'", dout}, {"'W'", W}});
    float bx = overwrite ? 0.0f : 1.0f;
    int xs = ar_cu_bf16_stored(x);
    if (N > 0 && in > 0 && outd > 0 && (xs || (by_copies(outd, in, N) && (!dx || by_copies(N, in, outd))))) {
        const __nv_bfloat16 *d16 = bf16_operand(CU_WS_MM_A, dout, (size_t)N * outd);
        const __nv_bfloat16 *x16 = bf16_input(CU_WS_MM_B, x, (size_t)N * in);
        if (dx) {
            const __nv_bfloat16 *w16 = bf16_operand(CU_WS_MM_C, W, (size_t)outd * in);
            gemm_bf16(0, 0, N, in, outd, 1.0f, d16, outd, w16, in, bx, dx, in);
        }
        gemm_bf16(1, 0, outd, in, N, 1.0f, d16, outd, x16, in, 1.0f, dW, in);
        return;
    }
    if (dx)
        ar_cu_gemm(0, 0, N, in, outd, 1.0f, dout, outd, W, in, bx, dx, in);
    ar_cu_gemm(1, 0, outd, in, N, 1.0f, dout, outd, x, in, 1.0f, dW, in);
}

/* out = W x     x: in, W: outd x in, out: outd   (=)   (one row of matmul_fwd:
 * cuBLAS takes a one-row GEMM well, and keeps the bf16 setting) */
void cuda_matvec_fwd(float *out, const float *x, const float *W, int in, int outd)
{
    ar_cu_gemm(0, 1, 1, outd, in, 1.0f, x, in, W, in, 0.0f, out, outd);
}
