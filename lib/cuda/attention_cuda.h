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
 * Every thread of the block takes part.  A thread issues the loads of a
 * batch (LOAD_BATCH groups of each tile) before its first store, so it
 * waits for the memory once a batch instead of once an element (one load
 * in flight a thread leaves a tile's load at the memory's latency times
 * the elements a thread holds); the groups are float4 where the rows
 * allow (hd and C multiples of 4, the sources 16-byte aligned). */
#define LOAD_BATCH 8
template <int W, typename E>
__device__ static inline void load_rows_w(E *d0, const float *s0, E *d1, const float *s1, int C, int r0, int T, int bt,
                                          int hd, int ld)
{
    int gw = hd / W, n = bt * gw; /* groups of W floats a tile */
    for (int e0 = threadIdx.x; e0 < n; e0 += LOAD_BATCH * blockDim.x) {
        float x[2][LOAD_BATCH][W];
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; u++) {
            int e = e0 + u * (int)blockDim.x, r = e / gw, c = e % gw * W;
            bool in = e < n && r0 + r < T;
            size_t at = in ? (size_t)(r0 + r) * C + c : 0;
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const float *s = t ? s1 : s0;
                bool ld_it = in && (t == 0 || d1);
                if constexpr (W == 4) {
                    float4 v = ld_it ? *(const float4 *)(s + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    x[t][u][0] = v.x, x[t][u][1] = v.y, x[t][u][2] = v.z, x[t][u][3] = v.w;
                } else {
                    x[t][u][0] = ld_it ? s[at] : 0.0f;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < LOAD_BATCH; u++) {
            int e = e0 + u * (int)blockDim.x, r = e / gw, c = e % gw * W;
            if (e >= n)
                break;
#pragma unroll
            for (int w = 0; w < W; w++) {
                tile_store(d0 + (size_t)r * ld + c + w, x[0][u][w]);
                if (d1)
                    tile_store(d1 + (size_t)r * ld + c + w, x[1][u][w]);
            }
        }
    }
}

template <typename E>
__device__ static void load_rows2(E *d0, const float *s0, E *d1, const float *s1, int C, int r0, int T, int bt, int hd,
                                  int ld = 0)
{
    if (!ld)
        ld = hd;
    bool vec = hd % 4 == 0 && C % 4 == 0 && (uintptr_t)s0 % 16 == 0 && (!d1 || (uintptr_t)s1 % 16 == 0);
    if (vec)
        load_rows_w<4>(d0, s0, d1, s1, C, r0, T, bt, hd, ld);
    else
        load_rows_w<1>(d0, s0, d1, s1, C, r0, T, bt, hd, ld);
}

template <typename E>
__device__ static void load_rows(E *dst, const float *src, int C, int r0, int T, int bt, int hd, int ld = 0)
{
    load_rows2(dst, src, (E *)0, (const float *)0, C, r0, T, bt, hd, ld);
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
