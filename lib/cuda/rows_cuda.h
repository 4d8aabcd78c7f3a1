/* Row blocks: the thread layout, source lists and token reductions shared
 * by the CUDA depth-mixing ops (depth_cuda.cu, mixer_cuda.cu, wsum_cuda.cu;
 * the math of each op is in lib/ops.def).
 *
 * Layout of the work: one thread block per token row (a chunk of rows in
 * the backward ops), blockDim.x = T threads, thread t owning the channels
 * j = t + q T (q < MAXV), so a row's values live in registers between the
 * block reductions that give its dot products and norms.
 *
 * Source lists arrive as host arrays of device pointers; they are passed to
 * kernels by value (structs of at most MAXP pointers; a kernel taking two or
 * three lists has more than 4 KiB of parameters, which CUDA 12.1+ allows on
 * sm_70 and later).
 *
 * Determinism: block reductions add in a fixed order; parameter gradients
 * that sum over tokens go through one partial per block of a fixed token
 * count (a function of N only), in the CU_WS_ROWS workspace, added in block
 * order by a second kernel (ar_cu_reduce_wg, ar_cu_reduce_add) into the
 * accumulating output.  No float atomics. */
#ifndef AR_CUDA_ROWS_H
#define AR_CUDA_ROWS_H

#include <stdio.h>
#include <string.h>

#include "../backend.h"
#include "cuda_util.h"
#include "workspace_cuda.h"

#define MAXV 8          /* channels per thread */
#define MAXT 512        /* threads per row block, so rows up to MAXV * MAXT = 4096 */
#define MAXP AR_LIST_MAX /* pointers in one source list */
#define RED_WARPS 8192  /* warps of a token reduction (about) */
#define RED_BLOCKS 2048 /* blocks of a token reduction (at most) */

/* A list of read-only buffers; b16: every one is bf16 storage (lib/backend.h,
 * alloc_act), read through list_value (make_src_list). */
struct clist {
    const float *p[MAXP];
    int b16;
};
struct mlist {
    float *p[MAXP];
};

/* ------------------------------------------------------------------------ */
/* host helpers                                                              */

static inline void die(const char *op, const char *fmt, long a, long b)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, a, b);
    ar_cuda_die(op, msg, __FILE__, __LINE__);
}

/* Stops where any of a[0..n-1] (a host array, or NULL) is bf16 storage. */
static inline void no_storage_in(const char *op, const char *what, const void *const *a, int n)
{
    for (int s = 0; a && s < n; s++)
        ar_cu_no_bf16_storage(op, what, a[s]);
}

/* The host array a of n device pointers (NULL: every entry NULL) as a
 * kernel argument */
static inline clist list_of(const float *const *a, int n, const char *op)
{
    clist l;
    memset(&l, 0, sizeof l);
    if (n > MAXP)
        die(op, "'sources' (%ld in one list) exceed the limit of %ld", n, MAXP);
    for (int s = 0; a && s < n; s++)
        l.p[s] = a[s];
    return l;
}

/* A list of fp32 buffers: bf16 storage in it stops with an error. */
static inline clist make_clist(const float *const *a, int n, const char *op)
{
    no_storage_in(op, "a listed buffer", (const void *const *)a, n);
    return list_of(a, n, op);
}

/* A list of sources all fp32 or all bf16 storage (the depth ops' sources
 * under bf16: the residual rows); mixed storage stops with an error. */
static inline clist make_src_list(const float *const *a, int n, const char *op)
{
    clist l = list_of(a, n, op);
    for (int s = 0; s < n; s++) {
        int b = ar_cu_bf16_stored(a[s]);
        if (s == 0)
            l.b16 = b;
        else if (b != l.b16)
            ar_cuda_die(op, "the sources must all be bf16 storage (alloc_act) or none of them", __FILE__, __LINE__);
    }
    return l;
}

/* the same for outputs: fp32 buffers only */
static inline mlist make_mlist(float *const *a, int n, const char *op)
{
    no_storage_in(op, "a listed buffer", (const void *const *)a, n);
    clist c = list_of((const float *const *)a, n, op);
    mlist l;
    memcpy(l.p, c.p, sizeof l.p);
    return l;
}

/* Threads of a row block of v channels a thread (v <= MAXV): ceil(d / v)
 * rounded up to whole warps; row_threads: v = MAXV. */
static inline int row_threads_v(int d, int v, const char *op)
{
    if (d > v * MAXT)
        die(op, "'d' = %ld exceeds the limit of %ld channels", d, (long)v * MAXT);
    int t = (d + v - 1) / v;
    return (t + 31) / 32 * 32;
}
static inline int row_threads(int d, const char *op) { return row_threads_v(d, MAXV, op); }

/* Tokens per block of a token reduction, and the block count: a function of
 * N and the block size T only, so the summation order does not depend on the
 * device.  About RED_WARPS warps in all (small rows: more, smaller blocks),
 * at most RED_BLOCKS partials. */
static inline int red_tokens(int N, int T)
{
    int target = RED_WARPS / (T / 32);
    target = target < RED_BLOCKS ? target : RED_BLOCKS;
    return (N + target - 1) / target;
}
static inline int red_nblk(int N, int tpb) { return (N + tpb - 1) / tpb; }

/* Column sums over the nb per-block partials part[b*stride + j] (blocks in
 * order), added into the accumulating output (rows_cuda.cu):
 *   ar_cu_reduce_wg:  dw[j] += g[j] acc_j;  dg[j] += w[j] acc_j, j < d
 *                     (dw or dg NULL: skipped; g NULL, no key norm:
 *                     dw[j] += acc_j and no dg)
 *   ar_cu_reduce_add: y[j] += acc_j, j < len */
void ar_cu_reduce_wg(float *dw, float *dg, const float *part, int nb, size_t stride, const float *w,
                     const float *g, int d);
void ar_cu_reduce_add(float *y, const float *part, int nb, size_t stride, int len);

/* ------------------------------------------------------------------------ */
/* device helpers                                                            */

/* Element idx of list entry s as a float */
__device__ __forceinline__ float list_value(const clist &l, int s, size_t idx)
{
    return ar_value_at(l.p[s], l.b16, idx);
}

/* v[k] = sum over the block's threads of v[k], k < NV: warps by butterfly
 * (every lane gets the same bits), then the warp sums in warp order, so
 * every thread returns the same value.  Called by all threads of the block;
 * the trailing barrier lets the next call reuse the shared array. */
template <int NV> __device__ __forceinline__ void block_sum(float (&v)[NV])
{
    __shared__ float sred[NV * (MAXT / 32)];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < NV; k++)
        v[k] = ar_warp_sum(v[k]);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < NV; k++)
            sred[wid * NV + k] = v[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < NV; k++) {
        float t = 0.0f;
        for (int w = 0; w < nw; w++)
            t += sred[w * NV + k];
        v[k] = t;
    }
    __syncthreads();
}

#endif
