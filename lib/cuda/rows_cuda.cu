/* The token reductions of the row-block ops (rows_cuda.h): column sums of
 * per-block partials, in a fixed order, into an accumulating output. */
#include "rows_cuda.h"

/* Column sums of the per-block partials, acc_j = sum_b part[b*stride + j]:
 * thread (x, y) = (t % 32, t / 32) of a block of RED_TY warps adds rows
 * b = y, y + RED_TY, ... of channel j = 32 blockIdx + x, then warp 0 adds the
 * RED_TY sums in order (fixed order: deterministic).  The result is valid
 * in warp 0 only. */
#define RED_TY 16
__device__ static __forceinline__ float column_sum(const float *part, int nb, size_t stride,
                                                  int len)
{
    __shared__ float sh[RED_TY][32];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, j = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    if (j < len)
        for (int b = ty; b < nb; b += RED_TY)
            acc += part[(size_t)b * stride + j];
    sh[ty][tx] = acc;
    __syncthreads();
    acc = 0.0f;
    if (ty == 0)
        for (int y = 0; y < RED_TY; y++)
            acc += sh[y][tx];
    return acc;
}

/* dw[j] += g[j] acc_j;  dg[j] += w[j] acc_j  (the query and key-gain
 * gradients of depth attention, whose logit depends on w and g through
 * u = w*g) */
__global__ static void reduce_wg_kernel(float *dw, float *dg, const float *part, int nb,
                                        size_t stride, const float *w, const float *g, int d)
{
    float acc = column_sum(part, nb, stride, d);
    int j = blockIdx.x * 32 + threadIdx.x;
    if (threadIdx.x >= 32 || j >= d)
        return;
    if (dw)
        dw[j] += g ? g[j] * acc : acc; /* g NULL: no key-norm gain */
    if (dg && g)
        dg[j] += w[j] * acc;
}

/* y[j] += acc_j, j < len */
__global__ static void reduce_add_kernel(float *y, const float *part, int nb, size_t stride, int len)
{
    float acc = column_sum(part, nb, stride, len);
    int j = blockIdx.x * 32 + threadIdx.x;
    if (threadIdx.x >= 32 || j >= len)
        return;
    y[j] += acc;
}

void ar_cu_reduce_wg(float *dw, float *dg, const float *part, int nb, size_t stride, const float *w,
                     const float *g, int d)
{
    if (!dw && !dg)
        return;
    reduce_wg_kernel<<<(d + 31) / 32, 32 * RED_TY, 0, ar_cuda_stream()>>>(dw, dg, part, nb, stride,
                                                                            w, g, d);
    AR_CUDA_LAUNCHED();
}

void ar_cu_reduce_add(float *y, const float *part, int nb, size_t stride, int len)
{
    if (len <= 0)
        return;
    reduce_add_kernel<<<(len + 31) / 32, 32 * RED_TY, 0, ar_cuda_stream()>>>(y, part, nb, stride,
                                                                              len);
    AR_CUDA_LAUNCHED();
}
