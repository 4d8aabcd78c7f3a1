/* What the fused attention's two files share (attention_cuda.cu: the
 * shared-memory kernels, the dispatch and decoding; attention_regs_cuda.cu:
 * the kernels on registers): the tile loads and the register kernels'
 * entry points. */
#ifndef AR_CUDA_ATTENTION_H
#define AR_CUDA_ATTENTION_H

#include "../op_args.h"
#include "tiles_cuda.h"

/* dst[r ld + c] = src[(r0 + r) C + c] for rows r0 + r < T, 0 after (bt x hd;
 * ld = hd where not given) */
template <typename E>
__device__ static void load_rows(E *dst, const float *src, int C, int r0, int T, int bt, int hd, int ld = 0)
{
    if (!ld)
        ld = hd;
    for (int e = threadIdx.x; e < bt * hd; e += blockDim.x) {
        int r = e / hd, c = e % hd;
        tile_store(dst + (size_t)r * ld + c, r0 + r < T ? src[(size_t)(r0 + r) * C + c] : 0.0f);
    }
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
