/* What the fused attention's two files share (attention_cuda.cu: the
 * shared-memory kernels, the dispatch and decoding; attention_regs_cuda.cu:
 * the kernels on registers): the tile loads and the register kernels'
 * entry points. */
#ifndef AR_CUDA_ATTENTION_H
#define AR_CUDA_ATTENTION_H

#include "../op_args.h"
#include "tiles_cuda.h"

#include <stdint.h>

/* Rows r0 .. r0 + bt - 1 of one or two B x T x C buffers (src from the
 * head's start) into tiles, 0 at rows >= T (bt x hd; ld = hd where not
 * given):
 *   d0[r ld + c] = s0[(r0 + r) C + c],  d1[r ld + c] = s1[(r0 + r) C + c]
 * Each source fp32 or bf16 (bf16 storage, lib/backend.h's alloc_act: q,
 * k, v and y of the model under bf16 products).  Every thread of the block
 * takes part.  A thread issues the loads of a batch (LOAD_BATCH groups of
 * each tile) before its first store, so it waits for the memory once a
 * batch instead of once an element (one load in flight a thread leaves a
 * tile's load at the memory's latency times the elements a thread holds);
 * the groups are 4 elements (a float4, or 4 bf16 in 8 bytes) where the
 * rows allow (hd and C multiples of 4, the sources aligned to a group). */
#define LOAD_BATCH 8
__device__ static inline void load_group(float (&x)[4], const float *p)
{
    float4 v = *(const float4 *)p;
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ static inline void load_group(float (&x)[4], const bf16 *p)
{
    uint2 v = *(const uint2 *)p; /* 4 bf16 in one 8-byte load */
    bf16 h[4];
    __builtin_memcpy(h, &v, sizeof h);
    x[0] = __bfloat162float(h[0]), x[1] = __bfloat162float(h[1]);
    x[2] = __bfloat162float(h[2]), x[3] = __bfloat162float(h[3]);
}

template <int W, typename E, typename S0, typename S1>
__device__ static inline void load_rows_w(E *d0, const S0 *s0, E *d1, const S1 *s1, int C, int r0, int T, int bt,
                                          int hd, int ld)
{
    int gw = hd / W, n = bt * gw; /* groups of W elements a tile */
    for (int e0 = threadIdx.x; e0 < n; e0 += LOAD_BATCH * blockDim.x) {
        float x[2][LOAD_BATCH][W];
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; u++) {
            int e = e0 + u * (int)blockDim.x, r = e / gw, c = e % gw * W;
            bool in = e < n && r0 + r < T;
            size_t at = in ? (size_t)(r0 + r) * C + c : 0;
            bool ld1 = in && d1;
            if constexpr (W == 4) {
                if (in)
                    load_group(x[0][u], s0 + at);
                else
                    x[0][u][0] = x[0][u][1] = x[0][u][2] = x[0][u][3] = 0.0f;
                if (ld1)
                    load_group(x[1][u], s1 + at);
                else
                    x[1][u][0] = x[1][u][1] = x[1][u][2] = x[1][u][3] = 0.0f;
            } else {
                x[0][u][0] = in ? ar_value(s0[at]) : 0.0f;
                x[1][u][0] = ld1 ? ar_value(s1[at]) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; u++) {
            int e = e0 + u * (int)blockDim.x, r = e / gw, c = e % gw * W;
            if (e >= n)
                break;
#pragma unroll
            for (int w = 0; w < W; w++) {
                ar_store(d0 + (size_t)r * ld + c + w, x[0][u][w]);
                if (d1)
                    ar_store(d1 + (size_t)r * ld + c + w, x[1][u][w]);
            }
        }
    }
}

template <typename E, typename S0, typename S1>
__device__ static void load_rows2(E *d0, const S0 *s0, E *d1, const S1 *s1, int C, int r0, int T, int bt, int hd,
                                  int ld = 0)
{
    if (!ld)
        ld = hd;
    bool vec = hd % 4 == 0 && C % 4 == 0 && (uintptr_t)s0 % (4 * sizeof(S0)) == 0 &&
               (!d1 || (uintptr_t)s1 % (4 * sizeof(S1)) == 0);
    if (vec)
        load_rows_w<4>(d0, s0, d1, s1, C, r0, T, bt, hd, ld);
    else
        load_rows_w<1>(d0, s0, d1, s1, C, r0, T, bt, hd, ld);
}

template <typename E, typename S>
__device__ static void load_rows(E *dst, const S *src, int C, int r0, int T, int bt, int hd, int ld = 0)
{
    load_rows2(dst, src, (E *)0, (const S *)0, C, r0, T, bt, hd, ld);
}

/* Head bh = b nh + h of a B x T x C buffer starts at b T C + h hd. */
__device__ static inline size_t head_start(int bh, int T, int nh, int hd)
{
    return (size_t)(bh / nh) * T * nh * hd + (size_t)(bh % nh) * hd;
}

/* L and D of rows i0 .. i0 + bt - 1 into shared memory (0 after T) */
__device__ static inline void load_row_values(float *Lr, float *Dr, const float *lse, const float *D, int bh, int i0,
                                       int T, int bt)
{
    for (int r = threadIdx.x; r < bt; r += blockDim.x) {
        int t = i0 + r;
        Lr[r] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
        Dr[r] = t < T ? D[(size_t)bh * T + t] : 0.0f;
    }
}

/* The kernels on registers (attention_regs_cuda.cu), where they apply:
 * bf16 products (the caller checks) and hd a multiple of 16 up to 128
 * (forward) or 64 (backward).  Return 1 with the work queued, 0 where the
 * shape is not theirs.  D: rowsum(dy y) per row, as the backward's. */
int ar_cu_attention_fwd_regs(const ar_attention *a, float *y, float scale);
int ar_cu_attention_bwd_regs(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv, const float *D,
                             float scale);

#endif
