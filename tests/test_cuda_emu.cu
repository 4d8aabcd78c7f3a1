/* The CUDA emulator itself (tests/cuda_emu): that its barriers, shuffles,
 * launch checks and library stand-ins behave as the GPU and its libraries
 * do, and that it refuses what a GPU would hang on or do undefined, so a
 * pass of backend_ops_emu and backend_train_emu means something.  Written
 * in CUDA and rewritten by tests/cuda_emu/launch.py like lib/cuda.
 *
 * Covers: tests/cuda_emu/emu.cc, launch.py and the stand-in headers. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "mma_cuda.h"

static float *dev(size_t n)
{
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
    return (float *)p;
}

/* ---- barriers and shuffles ------------------------------------------- */

__device__ static float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* out[b] = sum of in[b*blockDim + t] over the block: warp sums, then the
 * first warp over the warps' sums in shared memory */
__global__ static void block_sum_kernel(float *out, const float *in)
{
    __shared__ float sh[32];
    int t = threadIdx.x, lane = t & 31, w = t >> 5, nw = blockDim.x >> 5;
    float v = warp_sum(in[blockIdx.x * blockDim.x + t]);
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = warp_sum(lane < nw ? sh[lane] : 0.0f);
        if (lane == 0)
            out[blockIdx.x] = v;
    }
}

Test(cuda_emu, barriers_and_shuffles_reduce_a_block)
{
    int nb = 3, bs = 256;
    float h[768], got[3];
    for (int i = 0; i < nb * bs; i++)
        h[i] = (float)(i % 7) - 2.5f + 0.125f * (i % 3);
    float *in = dev(nb * bs), *out = dev(nb);
    cudaMemcpyAsync(in, h, sizeof h, cudaMemcpyHostToDevice);
    block_sum_kernel<<<nb, bs, 0, 0>>>(out, in);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost);
    for (int b = 0; b < nb; b++) {
        double want = 0;
        for (int t = 0; t < bs; t++)
            want += h[b * bs + t];
        /* every term a multiple of 1/8 below 8: the float sums are exact */
        cr_expect_eq(got[b], (float)want, "block %d: %g vs %g", b, got[b], want);
    }
    cudaFree(in);
    cudaFree(out);
}

/* each lane gets its partner's value; the values move through the lanes
 * in the order of the rounds, so a stale slot would show */
__global__ static void shuffle_kernel(int *out)
{
    int v = threadIdx.x;
    for (int o = 1; o < 32; o <<= 1)
        v = v * 3 + __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

Test(cuda_emu, shuffles_take_the_partner_of_the_same_round)
{
    int *out = (int *)dev(64), got[64], want[64];
    shuffle_kernel<<<1, 64>>>(out);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost);
    for (int t = 0; t < 64; t++)
        want[t] = t;
    for (int o = 1; o < 32; o <<= 1) {
        int next[64];
        for (int t = 0; t < 64; t++)
            next[t] = want[t] * 3 + want[t ^ o];
        memcpy(want, next, sizeof want);
    }
    for (int t = 0; t < 64; t++)
        cr_expect_eq(got[t], want[t], "lane %d", t);
    cudaFree(out);
}

/* threadIdx, blockIdx over three dimensions, and dynamic shared memory
 * filled with NaN at each block's start */
__global__ static void index_kernel(int *out, int *nan_seen)
{
    extern __shared__ float dyn[];
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int n = blockDim.x * blockDim.y * blockDim.z;
    if (t == 0)
        nan_seen[b] = isnan(dyn[5]) ? 1 : 0;
    __syncthreads();
    dyn[5] = 1.0f; /* the next block must see NaN again */
    out[b * n + t] = b * 1000 + t;
}

Test(cuda_emu, indices_in_three_dimensions)
{
    dim3 g(2, 3, 2), blk(4, 2, 3);
    int nb = 12, n = 24, got[288], seen[12];
    int *out = (int *)dev(nb * n), *ns = (int *)dev(nb);
    index_kernel<<<g, blk, 64 * sizeof(float)>>>(out, ns);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cudaMemcpyAsync(got, out, sizeof got, cudaMemcpyDeviceToHost);
    cudaMemcpyAsync(seen, ns, sizeof seen, cudaMemcpyDeviceToHost);
    for (int b = 0; b < nb; b++) {
        cr_expect_eq(seen[b], 1, "block %d's shared memory was not refilled", b);
        for (int t = 0; t < n; t++)
            cr_expect_eq(got[b * n + t], b * 1000 + t);
    }
}

/* ---- what a GPU would hang on: the emulator aborts ------------------ */

__global__ static void early_exit_kernel(float *x)
{
    if (threadIdx.x == 5)
        return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

Test(cuda_emu, a_barrier_part_of_the_block_misses_aborts, .signal = SIGABRT)
{
    float *x = dev(64);
    early_exit_kernel<<<1, 64>>>(x);
}

__global__ static void divergent_shuffle_kernel(float *x)
{
    if (threadIdx.x < 16)
        x[threadIdx.x] = warp_sum(1.0f);
}

Test(cuda_emu, a_shuffle_part_of_the_warp_misses_aborts, .signal = SIGABRT)
{
    float *x = dev(32);
    divergent_shuffle_kernel<<<1, 32>>>(x);
}

__global__ static void every_lane_shuffle_kernel(float *x) { x[threadIdx.x] = warp_sum(1.0f); }

Test(cuda_emu, a_full_shuffle_in_a_short_warp_aborts, .signal = SIGABRT)
{
    float *x = dev(48);
    every_lane_shuffle_kernel<<<1, 48>>>(x); /* the second warp has 16 lanes */
}

/* ---- launch configuration, as the runtime checks it ------------------ */

__global__ static void nothing_kernel(float *x) { x[0] = 0.0f; }

Test(cuda_emu, bad_launches_are_reported_not_run)
{
    float *x = dev(1), one = 1.0f, got;
    cudaMemcpyAsync(x, &one, 4, cudaMemcpyHostToDevice);
    nothing_kernel<<<1, 1025>>>(x);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "1025 threads");
    cr_expect_eq(cudaGetLastError(), cudaSuccess, "the error is read once");
    nothing_kernel<<<0, 32>>>(x);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "an empty grid");
    nothing_kernel<<<1, 32, 49153>>>(x);
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidConfiguration, "more than 48 KiB without opt-in");
    cudaMemcpyAsync(&got, x, 4, cudaMemcpyDeviceToHost);
    cr_expect_eq(got, 1.0f, "a refused launch ran");
    cr_assert_eq(cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536),
                 cudaSuccess);
    nothing_kernel<<<1, 32, 65536>>>(x);
    cr_expect_eq(cudaGetLastError(), cudaSuccess, "with the opt-in");
    cr_expect_neq(cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300000),
                  cudaSuccess, "past the device's 227 KiB");
}

/* ---- memory ----------------------------------------------------------- */

Test(cuda_emu, copies_stay_inside_device_buffers)
{
    float *x = dev(16), h[32] = {0};
    cr_expect_eq(cudaMemcpyAsync(x, h, 16 * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cr_expect_eq(cudaMemcpyAsync(x, h, 17 * 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue, "past the end");
    cr_expect_eq(cudaMemcpyAsync(h, x, 16 * 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue,
                 "directions swapped");
    cr_expect_eq(cudaMemsetAsync(x + 8, 0, 9 * 4), cudaErrorInvalidValue);
    cr_expect_eq(cudaFree(x + 1), cudaErrorInvalidDevicePointer);
    float *y = dev(4), g[4];
    cudaMemcpyAsync(g, y, sizeof g, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4; i++)
        cr_expect(isnan(g[i]), "new device memory is not NaN");
    cr_expect_eq(cudaFree(x), cudaSuccess);
}

Test(cuda_emu, sort_pairs_is_stable_in_signed_order)
{
    int32_t k[6] = {3, -1, 3, 0, -1, 7}, v[6] = {0, 1, 2, 3, 4, 5}, ko[6], vo[6];
    int32_t *dk = (int32_t *)dev(6), *dv = (int32_t *)dev(6), *dko = (int32_t *)dev(6), *dvo = (int32_t *)dev(6);
    cudaMemcpyAsync(dk, k, sizeof k, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dv, v, sizeof v, cudaMemcpyHostToDevice);
    size_t tmp = 0;
    cr_assert_eq(cub::DeviceRadixSort::SortPairs(NULL, tmp, dk, dko, dv, dvo, 6, 0, 32), cudaSuccess);
    void *ws = dev((tmp + 3) / 4);
    cr_assert_eq(cub::DeviceRadixSort::SortPairs(ws, tmp, dk, dko, dv, dvo, 6, 0, 32), cudaSuccess);
    cudaMemcpyAsync(ko, dko, sizeof ko, cudaMemcpyDeviceToHost);
    cudaMemcpyAsync(vo, dvo, sizeof vo, cudaMemcpyDeviceToHost);
    int32_t wk[6] = {-1, -1, 0, 3, 3, 7}, wv[6] = {1, 4, 3, 0, 2, 5};
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(ko[i], wk[i]);
        cr_expect_eq(vo[i], wv[i]);
    }
}

/* ---- cuBLAS ----------------------------------------------------------- */

/* C = A^T B column-major (A: k x m stored, lda 5; B: k x n, ldb 4; C: m x n,
 * ldc 3), against a loop; then the documented argument errors */
Test(cuda_emu, gemm_is_column_major_and_checks_its_arguments)
{
    int m = 2, n = 3, k = 4, lda = 5, ldb = 4, ldc = 3;
    float A[5 * 2], B[4 * 3], C[3 * 3], got[9];
    for (int i = 0; i < 10; i++)
        A[i] = (float)(i % 5) - 1.0f;
    for (int i = 0; i < 12; i++)
        B[i] = 0.5f * (float)(i % 4) + 0.25f;
    for (int i = 0; i < 9; i++)
        C[i] = 100.0f + i;
    float *dA = dev(10), *dB = dev(12), *dC = dev(9);
    cudaMemcpyAsync(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dC, C, sizeof C, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float al = 2.0f, be = 1.0f;
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_32F, lda, dB, CUDA_R_32F, ldb,
                              &be, dC, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    cudaMemcpyAsync(got, dC, sizeof got, cudaMemcpyDeviceToHost);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            float want = C[j * ldc + i];
            if (i < m) {
                float s = 0;
                for (int q = 0; q < k; q++)
                    s += A[i * lda + q] * B[j * ldb + q];
                want += al * s;
            }
            cr_expect_eq(got[j * ldc + i], want, "C[%d,%d]", i, j); /* small integers and quarters: exact */
        }
    /* lda below op(A)'s rows, ldc below m, an unsupported type */
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_32F, 3, dB, CUDA_R_32F, ldb,
                              &be, dC, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE);
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_32F, lda, dB, CUDA_R_32F, ldb,
                              &be, dC, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE);
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_16BF, lda, dB, CUDA_R_32F, ldb,
                              &be, dC, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_SUPPORTED);
    cublasDestroy(h);
}

/* FAST_16BF rounds the operands to bf16: 1 + 2^-9 becomes 1 */
Test(cuda_emu, gemm_fast_16bf_rounds_the_operands)
{
    float a = 1.0f + 1.0f / 512, b = 1.0f, c = 0.0f;
    float *dA = dev(1), *dB = dev(1), *dC = dev(1);
    cudaMemcpyAsync(dA, &a, 4, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dB, &b, 4, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    float al = 1.0f, be = 0.0f;
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &al, dA, CUDA_R_32F, 1, dB, CUDA_R_32F, 1, &be, dC,
                 CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
    cudaMemcpyAsync(&c, dC, 4, cudaMemcpyDeviceToHost);
    cr_expect_eq(c, 1.0f);
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &al, dA, CUDA_R_32F, 1, dB, CUDA_R_32F, 1, &be, dC,
                 CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpyAsync(&c, dC, 4, cudaMemcpyDeviceToHost);
    cr_expect_eq(c, a);
    cublasDestroy(h);
}

/* bf16 operands (both) with fp32 output and compute type: exact products
 * of the bf16 values, checked on their 2-byte elements; with FAST_16BF,
 * or a bf16 output from fp32 operands, not supported; a bf16 output from
 * bf16 operands is the fp32 result rounded to nearest, ties to even */
Test(cuda_emu, gemm_takes_bf16_operands)
{
    __nv_bfloat16 a[2] = {__float2bfloat16(1.5f), __float2bfloat16(-2.0f)},
                  b[2] = {__float2bfloat16(0.25f), __float2bfloat16(3.0f)};
    __nv_bfloat16 *dA, *dB;
    cudaMalloc((void **)&dA, sizeof a);
    cudaMalloc((void **)&dB, sizeof b);
    float *dC = dev(1), c = 0.0f;
    cudaMemcpyAsync(dA, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dB, b, sizeof b, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    float al = 1.0f, be = 0.0f;
    /* C (1 x 1) = A (1 x 2) B (2 x 1) */
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dA, CUDA_R_16BF, 1, dB, CUDA_R_16BF, 2, &be,
                              dC, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    cudaMemcpyAsync(&c, dC, 4, cudaMemcpyDeviceToHost);
    cr_expect_eq(c, 1.5f * 0.25f - 2.0f * 3.0f);
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dA, CUDA_R_16BF, 1, dB, CUDA_R_16BF, 2, &be,
                              dC, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_SUPPORTED);
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dC, CUDA_R_32F, 1, dC, CUDA_R_32F, 2, &be,
                              dC, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_SUPPORTED);
    /* 1 + 3 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even):
     * to nearest even gives the latter, truncation the former */
    __nv_bfloat16 a2[2] = {__float2bfloat16(1.0f), __float2bfloat16(0x3p-8f)},
                  b2[2] = {__float2bfloat16(1.0f), __float2bfloat16(1.0f)}, c16;
    cudaMemcpyAsync(dA, a2, sizeof a2, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(dB, b2, sizeof b2, cudaMemcpyHostToDevice);
    __nv_bfloat16 *dC16;
    cudaMalloc((void **)&dC16, sizeof c16);
    cr_expect_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, dA, CUDA_R_16BF, 1, dB, CUDA_R_16BF, 2, &be,
                              dC16, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    cudaMemcpyAsync(&c16, dC16, sizeof c16, cudaMemcpyDeviceToHost);
    cr_expect_eq(__bfloat162float(c16), 1.0f + 0x1p-6f, "bf16 output %.9g, not 1 + 2^-6", __bfloat162float(c16));
    cublasDestroy(h);
}

/* a bf16 operand is checked on its 2-byte elements: 2 of them, read as 3,
 * leave the buffer */
Test(cuda_emu, gemm_bf16_operands_stay_inside_their_buffers, .signal = SIGABRT)
{
    __nv_bfloat16 *dA, *dB;
    cudaMalloc((void **)&dA, 2 * sizeof *dA);
    cudaMalloc((void **)&dB, 3 * sizeof *dB);
    float *dC = dev(1);
    cublasHandle_t h;
    cublasCreate(&h);
    float al = 1.0f, be = 0.0f;
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 3, &al, dA, CUDA_R_16BF, 1, dB, CUDA_R_16BF, 3, &be, dC,
                 CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* an operand that leaves its buffer (a leading dimension or batch stride
 * too large for it) aborts, naming the call */
Test(cuda_emu, gemm_operands_stay_inside_their_buffers, .signal = SIGABRT)
{
    float *dA = dev(4), *dB = dev(4), *dC = dev(4);
    cublasHandle_t h;
    cublasCreate(&h);
    float al = 1.0f, be = 0.0f;
    cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &al, dA, CUDA_R_32F, 2, 4, dB, CUDA_R_32F,
                               2, 0, &be, dC, CUDA_R_32F, 2, 0, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* ---- warp matrix functions (mma.h) and bf16 -------------------------- */

/* c (16 x 16, ldc 16) = a b + c0 through WMMA, a as stored (row- or
 * column-major), b row-major; one warp, the operands copied to aligned
 * dynamic shared memory first, as a kernel would */
__global__ static void wmma_kernel(float *c, const float *a, const float *b, int a_cols)
{
    using namespace nvcuda;
    extern __shared__ __align__(128) float sm[];
    __nv_bfloat16 *as = (__nv_bfloat16 *)sm, *bs = as + 256;
    for (int i = threadIdx.x; i < 256; i += 32)
        as[i] = __float2bfloat16(a[i]), bs[i] = __float2bfloat16(b[i]);
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ar;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> ac;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> br;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::load_matrix_sync(br, bs, 16);
    if (a_cols) {
        wmma::load_matrix_sync(ac, as, 16);
        wmma::mma_sync(acc, ac, br, acc);
    } else {
        wmma::load_matrix_sync(ar, as, 16);
        wmma::mma_sync(acc, ar, br, acc);
    }
    for (int i = 0; i < acc.num_elements; i++)
        acc.x[i] *= 2.0f;
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

Test(cuda_emu, wmma_multiplies_bf16_tiles_in_either_layout)
{
    float ha[256], hb[256], hc[256], out[256];
    for (int i = 0; i < 256; i++) {
        ha[i] = (float)((i * 37) % 101) / 7.0f - 6.0f; /* not bf16 values: rounding shows */
        hb[i] = (float)((i * 53) % 89) / 11.0f - 4.0f;
        hc[i] = (float)(i % 13) - 6.0f;
    }
    float *a = dev(256), *b = dev(256), *c = dev(256);
    cudaMemcpyAsync(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    for (int cols = 0; cols < 2; cols++) {
        cudaMemcpyAsync(c, hc, sizeof hc, cudaMemcpyHostToDevice);
        wmma_kernel<<<1, 32, 1024>>>(c, a, b, cols);
        cr_assert_eq(cudaGetLastError(), cudaSuccess);
        cudaMemcpyAsync(out, c, sizeof out, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double s = hc[16 * i + j];
                for (int k = 0; k < 16; k++) {
                    float av = cols ? ha[16 * k + i] : ha[16 * i + k];
                    s += (double)__bfloat162float(__float2bfloat16(av)) * __bfloat162float(__float2bfloat16(hb[16 * k + j]));
                }
                /* exact bf16 products, 16 fp32 additions */
                cr_expect(fabs(out[16 * i + j] - 2 * s) <= 2 * 17 * 0x1p-24 * 16 * 64,
                          "layout %d: c[%d,%d] = %g, expected %g", cols, i, j, out[16 * i + j], 2 * s);
            }
    }
    /* round to nearest, ties to even; NaN stays NaN */
    cr_expect_eq(__bfloat162float(__float2bfloat16(1.0f + 0x1p-8f)), 1.0f);
    cr_expect_eq(__bfloat162float(__float2bfloat16(1.0f + 0x1.8p-8f)), 1.0f + 0x1p-7f);
    cr_expect_eq(__bfloat162float(__float2bfloat16(1.0f + 0x1p-7f + 0x1p-8f)), 1.0f + 0x1p-6f);
    cr_expect(isnan(__bfloat162float(__float2bfloat16(NAN))));
    cudaFree(a), cudaFree(b), cudaFree(c);
}

/* a tile that is not 256-bit aligned, as WMMA's rules forbid */
__global__ static void wmma_misaligned_kernel(float *c)
{
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::fill_fragment(acc, 1.0f);
    nvcuda::wmma::store_matrix_sync(c + 4, acc, 16, nvcuda::wmma::mem_row_major);
}

Test(cuda_emu, wmma_refuses_a_misaligned_tile, .signal = SIGABRT)
{
    float *c = dev(512);
    wmma_misaligned_kernel<<<1, 32>>>(c);
}

/* a warp matrix operation part of the warp never reaches */
__global__ static void wmma_divergent_kernel(float *c)
{
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    if (threadIdx.x < 16)
        nvcuda::wmma::fill_fragment(acc, 1.0f);
    c[threadIdx.x] = 0.0f;
}

Test(cuda_emu, wmma_part_of_the_warp_misses_aborts, .signal = SIGABRT)
{
    float *c = dev(32);
    wmma_divergent_kernel<<<1, 32>>>(c);
}

/* ---- the reverse order (AR_CUDA_EMU_ORDER=reverse) --------------------- */

/* out[t] = the value thread t + 1 stored, read with or without the barrier
 * between the store and the read that a GPU needs (dynamic shared memory,
 * NaN at each block's start) */
__global__ static void neighbour_kernel(float *out, int barrier)
{
    extern __shared__ float s[];
    s[threadIdx.x] = (float)threadIdx.x + 1.0f;
    if (barrier)
        __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

/* the block index each block finds in a buffer the blocks before it wrote:
 * an order between blocks that CUDA does not give */
__global__ static void block_order_kernel(float *x)
{
    if (threadIdx.x == 0)
        x[blockIdx.x + 1] = x[blockIdx.x] + 1.0f;
}

Test(cuda_emu, the_reverse_order_shows_a_missing_barrier)
{
    float *d = dev(64), h[2][64];
    for (int barrier = 1; barrier >= 0; barrier--) {
        for (int order = 0; order < 2; order++) {
            if (order)
                setenv("AR_CUDA_EMU_ORDER", "reverse", 1);
            else
                unsetenv("AR_CUDA_EMU_ORDER");
            neighbour_kernel<<<1, 64, 64 * sizeof(float)>>>(d, barrier);
            cudaMemcpyAsync(h[order], d, sizeof h[order], cudaMemcpyDeviceToHost);
        }
        unsetenv("AR_CUDA_EMU_ORDER");
        int same = memcmp(h[0], h[1], sizeof h[0]) == 0;
        if (barrier)
            cr_expect(same && h[0][5] == 7.0f, "with the barrier both orders read the neighbour's value");
        else
            cr_expect(!same, "without the barrier the two orders read the same values");
    }
    /* blocks: forward, block b finds b (as the chain of earlier blocks
     * wrote it); reverse, the chain is broken */
    float *x = dev(9), hx[2][9];
    for (int order = 0; order < 2; order++) {
        if (order)
            setenv("AR_CUDA_EMU_ORDER", "reverse", 1);
        cudaMemsetAsync(x, 0, 9 * sizeof(float));
        block_order_kernel<<<8, 32>>>(x);
        cudaMemcpyAsync(hx[order], x, sizeof hx[order], cudaMemcpyDeviceToHost);
        unsetenv("AR_CUDA_EMU_ORDER");
    }
    cr_expect(hx[0][8] == 8.0f && hx[1][8] == 1.0f, "block order: forward %g, reverse %g", hx[0][8], hx[1][8]);
    cudaFree(d), cudaFree(x);
}

/* ---- register-level mma (lib/cuda/mma_cuda.h) ------------------------- */

/* ldmatrix from a 16 x 16 bf16 tile holding M[r][c] = 16 r + c (rows 24
 * elements apart, as the attention kernels pad theirs): each lane names
 * row (lane & 7) + (lane & 8) at column (lane >> 4) 8, the four 8 x 8
 * quarters, and the registers come back as out[lane][4 way + m] */
__global__ static void ldmatrix_kernel(uint32_t *out, int misalign)
{
    extern __shared__ __align__(128) float sm[];
    __nv_bfloat16 *t = (__nv_bfloat16 *)sm;
    for (int i = threadIdx.x; i < 16 * 24; i += 32)
        t[i] = __float2bfloat16((float)(i / 24 * 16 + i % 24));
    __syncwarp();
    int lane = threadIdx.x;
    const __nv_bfloat16 *row = t + ((lane & 7) + (lane & 8)) * 24 + (lane >> 4) * 8 + misalign;
    uint32_t *o = out + lane * 12;
    ar_ldmatrix<4, 0>(o, row);
    ar_ldmatrix<4, 1>(o + 4, row);
    ar_ldmatrix<2, 0>(o + 8, row);
    ar_ldmatrix<2, 1>(o + 10, row);
}

Test(cuda_emu, ldmatrix_gives_the_documented_fragments)
{
    uint32_t *d, out[32 * 12];
    cudaMalloc((void **)&d, sizeof out);
    ldmatrix_kernel<<<1, 32, 16 * 24 * 2>>>(d, 0);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cudaMemcpyAsync(out, d, sizeof out, cudaMemcpyDeviceToHost);
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, q = lane & 3;
        for (int m = 0; m < 4; m++) {
            /* quarter m: rows 8 (m & 1) on, columns 8 (m >> 1) on */
            int r0 = 8 * (m & 1), c0 = 8 * (m >> 1);
            float lo = (float)(16 * (r0 + g) + c0 + 2 * q), hi = lo + 1; /* (g, 2q..2q+1) */
            float tlo = (float)(16 * (r0 + 2 * q) + c0 + g), thi = tlo + 16; /* (2q..2q+1, g) */
            uint32_t want = ar_pack_bf16(lo, hi), twant = ar_pack_bf16(tlo, thi);
            cr_expect_eq(out[lane * 12 + m], want, "x4 lane %d matrix %d: %#x, expected %#x", lane, m,
                         out[lane * 12 + m], want);
            cr_expect_eq(out[lane * 12 + 4 + m], twant, "x4.trans lane %d matrix %d: %#x, expected %#x", lane, m,
                         out[lane * 12 + 4 + m], twant);
            if (m < 2) {
                cr_expect_eq(out[lane * 12 + 8 + m], want, "x2 lane %d matrix %d", lane, m);
                cr_expect_eq(out[lane * 12 + 10 + m], twant, "x2.trans lane %d matrix %d", lane, m);
            }
        }
    }
    cudaFree(d);
}

/* a row address that is not 16-byte aligned, as ldmatrix forbids */
Test(cuda_emu, ldmatrix_refuses_a_misaligned_row, .signal = SIGABRT)
{
    uint32_t *d;
    cudaMalloc((void **)&d, 32 * 12 * sizeof *d);
    ldmatrix_kernel<<<1, 32, 16 * 24 * 2>>>(d, 2);
}

/* Each lane loads its fragments of A (16 x 16), B (16 x 8) and C (16 x 8)
 * at the places PTX gives them, the warp multiplies, each lane stores its
 * D entries back at theirs. */
__global__ static void mma_kernel(float *d, const float *a, const float *b, const float *c)
{
    unsigned lane = threadIdx.x, g = lane / 4, q = lane % 4;
    uint32_t fa[4] = {ar_pack_bf16(a[g * 16 + 2 * q], a[g * 16 + 2 * q + 1]),
                      ar_pack_bf16(a[(g + 8) * 16 + 2 * q], a[(g + 8) * 16 + 2 * q + 1]),
                      ar_pack_bf16(a[g * 16 + 2 * q + 8], a[g * 16 + 2 * q + 9]),
                      ar_pack_bf16(a[(g + 8) * 16 + 2 * q + 8], a[(g + 8) * 16 + 2 * q + 9])};
    uint32_t fb[2] = {ar_pack_bf16(b[(2 * q) * 8 + g], b[(2 * q + 1) * 8 + g]),
                      ar_pack_bf16(b[(2 * q + 8) * 8 + g], b[(2 * q + 9) * 8 + g])};
    float fc[4] = {c[g * 8 + 2 * q], c[g * 8 + 2 * q + 1], c[(g + 8) * 8 + 2 * q], c[(g + 8) * 8 + 2 * q + 1]};
    ar_mma_16816(fc, fa, fb, fc);
    d[g * 8 + 2 * q] = fc[0], d[g * 8 + 2 * q + 1] = fc[1];
    d[(g + 8) * 8 + 2 * q] = fc[2], d[(g + 8) * 8 + 2 * q + 1] = fc[3];
}

Test(cuda_emu, mma_16816_multiplies_the_documented_fragments)
{
    float ha[256], hb[128], hc[128], out[128];
    for (int i = 0; i < 256; i++)
        ha[i] = (float)((i * 29) % 37) / 8.0f - 2.0f; /* multiples of 1/8: exact in bf16 */
    for (int i = 0; i < 128; i++) {
        hb[i] = (float)((i * 11) % 23) / 4.0f - 3.0f;
        hc[i] = (float)(i % 7) - 3.0f;
    }
    float *a = dev(256), *b = dev(128), *c = dev(128), *d = dev(128);
    cudaMemcpyAsync(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    cudaMemcpyAsync(c, hc, sizeof hc, cudaMemcpyHostToDevice);
    mma_kernel<<<1, 32>>>(d, a, b, c);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cudaMemcpyAsync(out, d, sizeof out, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double s = hc[i * 8 + j];
            for (int k = 0; k < 16; k++)
                s += (double)ha[i * 16 + k] * hb[k * 8 + j];
            /* products of eighths and quarters, sums under 2^8: exact */
            cr_expect_eq(out[i * 8 + j], (float)s, "d[%d,%d] = %g, expected %g", i, j, out[i * 8 + j], s);
        }
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(d);
}
