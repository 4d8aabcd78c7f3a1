/* Causal attention on registers: the fused kernels of attention_cuda.cu
 * (the math and the three-kernel scheme are in its top comment) with each
 * warp's fragments, scores, probabilities and accumulators in registers,
 * through mma.sync (mma_cuda.h), as FlashAttention-2 keeps them.  bf16
 * products only; attention_cuda.cu calls these where they apply and runs
 * its shared-memory kernels elsewhere. */
#include "attention_cuda.h"
#include "cuda_util.h"
#include "mma_cuda.h"

#include <math.h>

/* bf16 products, hd = HD a multiple of 16 (up to 128 for the forward, 64
 * for the backward, what a warp's registers hold).  The same arithmetic as
 * attention_cuda.cu's kernels, but each warp keeps its 16
 * rows' fragments (q, or k and v), scores, probabilities and accumulators
 * in registers, and only the other side's tiles pass through shared
 * memory.  Blocks of 4 warps, tiles of 64 rows.  Lane (g, q) = (lane / 4,
 * lane % 4) holds rows g and g + 8 of its warp's 16; the four lanes of a
 * row (the same g) hold its 64 scores of a tile between them, 2 per 8
 * columns, so a row's max and sum are reduced over those four lanes.  The
 * scores' accumulator layout is the next product's operand layout, so the
 * probabilities (and ds) go from one to the other in registers, rounded
 * to bf16 there as the shared-memory kernels round them. */
#define MMA_ROWS 64
#define MMA_THREADS 128
/* Rows of a bf16 tile in shared memory are HD + 8 elements apart: the 8
 * rows of an 8 x 8 matrix an ldmatrix reads (16 bytes each) then start 16
 * bytes further round the 32 banks each and together cover all 32 (with
 * rows HD apart, HD a multiple of 64, all eight would hit the same four);
 * every row stays 16-byte aligned, as ldmatrix needs. */
#define MMA_LD(HD) ((HD) + 8)

__device__ static inline float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ static inline float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* A warp's A fragments (mma_cuda.h) of rows r0 .. r0 + 15 of a 64 x HD
 * bf16 tile in shared memory, for the HD / 16 k-steps over its columns:
 * one ldmatrix.x4 a k-step, lanes 0-7 naming rows r0 .. r0 + 7 (a[0]),
 * 8-15 rows r0 + 8 .. (a[1]), 16-31 the same 8 columns on (a[2], a[3]) */
template <int HD> __device__ static inline void row_fragments(uint32_t (*fa)[4], const bf16 *tile, int r0, int g, int qd)
{
    int lane = g * 4 + qd;
    const bf16 *row = tile + (r0 + (lane & 7) + (lane & 8)) * MMA_LD(HD) + (lane >> 4) * 8;
    for (int ks = 0; ks < HD / 16; ks++)
        ar_ldmatrix<4, 0>(fa[ks], row + ks * 16);
}

/* The warp's rows of two tiles, rows i0 .. of a and of b (B x T x C
 * buffers from the head's start), as A fragments, staged through the
 * shared tiles ta and tb (every thread of the block calls it) */
template <int HD, typename SA, typename SB>
__device__ static inline void own_fragments(uint32_t (*fa)[4], uint32_t (*fb)[4], bf16 *ta, bf16 *tb, const SA *a,
                                            const SB *b, int C, int i0, int T, int r0, int g, int qd)
{
    load_rows2(ta, a, tb, b, C, i0, T, MMA_ROWS, HD, MMA_LD(HD));
    __syncthreads();
    row_fragments<HD>(fa, ta, r0, g, qd);
    row_fragments<HD>(fb, tb, r0, g, qd);
}

/* acc (16 x 8 blocks nb = 0..7, 64 columns) += rows (A fragments) times
 * the 64 rows of tile as B^T: the tile's row nb 8 + g gives column g of
 * block nb (a product against a tile's rows: q k^T, dy v^T).  B's
 * fragments by ldmatrix.x2, lanes 0-7 and 8-15 naming the block's 8 rows
 * at the k-step's columns 0 and 8 (an x4 for two k-steps at once held
 * more registers: 178 a thread in the dq kernel, 2 blocks an SM for 3). */
template <int HD>
__device__ static inline void times_rows(float (*acc)[4], const uint32_t (*fa)[4], const bf16 *tile, int g, int qd)
{
    int lane = g * 4 + qd;
    const bf16 *row = tile + (lane & 7) * MMA_LD(HD) + (lane >> 3) * 8;
    for (int nb = 0; nb < 8; nb++)
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t b[2];
            ar_ldmatrix<2, 0>(b, row + nb * 8 * MMA_LD(HD) + ks * 16);
            ar_mma_16816(acc[nb], fa[ks], b, acc[nb]);
        }
}

/* The backward's two products of a tile pair, from zero: a = fa times
 * ta's rows, b = fb times tb's rows (s and dP, or their transposes) */
template <int HD>
__device__ static inline void two_products(float (*a)[4], const uint32_t (*fa)[4], const bf16 *ta, float (*b)[4],
                                           const uint32_t (*fb)[4], const bf16 *tb, int g, int qd)
{
    for (int nb = 0; nb < 8; nb++)
        for (int e = 0; e < 4; e++)
            a[nb][e] = b[nb][e] = 0.0f;
    times_rows<HD>(a, fa, ta, g, qd);
    times_rows<HD>(b, fb, tb, g, qd);
}

/* acc (16 x HD) += x (16 x 64, in accumulator layout: x[nb] the 8 columns
 * nb 8 ..) times tile (64 x HD): x's accumulators are its A fragments,
 * rounded to bf16 (p v, P^T dy, ds k, ...).  B's fragments are column
 * pairs of the tile: ldmatrix.x4.trans, two 8-column blocks at once
 * (lanes 0-15 name rows kp 16 .. kp 16 + 15 at column nd 8, lanes 16-31
 * the same rows at nd 8 + 8). */
template <int HD>
__device__ static inline void times_tile(float (*acc)[4], const float (*x)[4], const bf16 *tile, int g, int qd)
{
    constexpr int LD = MMA_LD(HD);
    int lane = g * 4 + qd;
    const bf16 *row = tile + ((lane & 7) + (lane & 8)) * LD + (lane >> 4) * 8;
    for (int kp = 0; kp < 4; kp++) {
        uint32_t xa[4] = {ar_pack_bf16(x[2 * kp][0], x[2 * kp][1]), ar_pack_bf16(x[2 * kp][2], x[2 * kp][3]),
                          ar_pack_bf16(x[2 * kp + 1][0], x[2 * kp + 1][1]),
                          ar_pack_bf16(x[2 * kp + 1][2], x[2 * kp + 1][3])};
        for (int nd = 0; nd < HD / 8; nd += 2) {
            uint32_t b[4];
            ar_ldmatrix<4, 1>(b, row + kp * 16 * LD + nd * 8);
            ar_mma_16816(acc[nd], xa, b, acc[nd]);
            ar_mma_16816(acc[nd + 1], xa, b + 2, acc[nd + 1]);
        }
    }
}

/* Forward, query tile i0 (the last first): per key tile, s = q k^T, the
 * online softmax's max and sum per row, y += p v; then y / l and L.  ST: q,
 * k, v and y's type (float, or bf16 storage), in every kernel here. */
template <int HD, typename ST>
__global__ static void __launch_bounds__(MMA_THREADS)
    flash_fwd_mma_kernel(ST *y, float *lse, const ST *q, const ST *k, const ST *v, int T, int nh, float scale)
{
    constexpr int KS = HD / 16, NB = HD / 8; /* k-steps over hd; 8-column blocks of y */
    extern __shared__ __align__(128) float smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + MMA_ROWS * MMA_LD(HD), *Vs = Ks + MMA_ROWS * MMA_LD(HD);
    int bh = blockIdx.y, C = nh * HD, i0 = (gridDim.x - 1 - blockIdx.x) * MMA_ROWS;
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16, g = lane >> 2, qd = lane & 3;
    int t0 = i0 + r0 + g, t1 = t0 + 8; /* this lane's two query positions */
    size_t h0 = head_start(bh, T, nh, HD);
    load_rows(Qs, q + h0, C, i0, T, MMA_ROWS, HD, MMA_LD(HD));
    __syncthreads();
    uint32_t qa[KS][4];
    row_fragments<HD>(qa, Qs, r0, g, qd);
    float o[NB][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    for (int nd = 0; nd < NB; nd++)
        o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    int jend = min(T, i0 + MMA_ROWS);
    for (int j0 = 0; j0 < jend; j0 += MMA_ROWS) {
        __syncthreads(); /* every warp is done with the last tile's k and v */
        load_rows2(Ks, k + h0, Vs, v + h0, C, j0, T, MMA_ROWS, HD, MMA_LD(HD));
        __syncthreads();
        /* s = q k^T: 8 blocks of 8 keys */
        float s[8][4];
        for (int nb = 0; nb < 8; nb++)
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
        times_rows<HD>(s, qa, Ks, g, qd);
        /* scaled, masked (key > position: -inf), the rows' new max */
        float mx0 = m0, mx1 = m1;
        for (int nb = 0; nb < 8; nb++)
            for (int e = 0; e < 4; e++) {
                int key = j0 + nb * 8 + 2 * qd + (e & 1), t = e < 2 ? t0 : t1;
                float x = key <= t ? s[nb][e] * scale : -INFINITY;
                s[nb][e] = x;
                if (e < 2)
                    mx0 = fmaxf(mx0, x);
                else
                    mx1 = fmaxf(mx1, x);
            }
        mx0 = quad_max(mx0), mx1 = quad_max(mx1);
        float sum0 = 0.0f, sum1 = 0.0f;
        for (int nb = 0; nb < 8; nb++)
            for (int e = 0; e < 4; e++) {
                float p = expf(s[nb][e] - (e < 2 ? mx0 : mx1));
                s[nb][e] = p;
                if (e < 2)
                    sum0 += p;
                else
                    sum1 += p;
            }
        sum0 = quad_sum(sum0), sum1 = quad_sum(sum1);
        float c0 = expf(m0 - mx0), c1 = expf(m1 - mx1); /* 0 on the first tile (m = -inf) */
        l0 = l0 * c0 + sum0, l1 = l1 * c1 + sum1, m0 = mx0, m1 = mx1;
        for (int nd = 0; nd < NB; nd++)
            o[nd][0] *= c0, o[nd][1] *= c0, o[nd][2] *= c1, o[nd][3] *= c1;
        /* o += p v, p's accumulators as operands */
        times_tile<HD>(o, s, Vs, g, qd);
    }
    for (int nd = 0; nd < NB; nd++) {
        int col = nd * 8 + 2 * qd;
        if (t0 < T)
            ar_store(y + h0 + (size_t)t0 * C + col, o[nd][0] / l0), ar_store(y + h0 + (size_t)t0 * C + col + 1, o[nd][1] / l0);
        if (t1 < T)
            ar_store(y + h0 + (size_t)t1 * C + col, o[nd][2] / l1), ar_store(y + h0 + (size_t)t1 * C + col + 1, o[nd][3] / l1);
    }
    if (qd == 0 && t0 < T)
        lse[(size_t)bh * T + t0] = m0 + logf(l0);
    if (qd == 0 && t1 < T)
        lse[(size_t)bh * T + t1] = m1 + logf(l1);
}

/* dk, dv of key tile j0 on registers (bf16, HD a multiple of 16 up to
 * 64): each warp owns 16 keys and forms, per query tile, the transposed
 * scores s^T = k q^T and dP^T = v dy^T of its keys, then
 *   P^T = exp(s^T / sqrt(hd) - L) (masked), ds^T = P^T (dP^T - D),
 *   dv += P^T dy,  dk += ds^T q / sqrt(hd)
 * with q, dy, L and D of the query tile in shared memory. */
template <int HD, typename ST>
__global__ static void __launch_bounds__(MMA_THREADS)
    flash_bwd_kv_mma_kernel(float *dk, float *dv, const ST *q, const ST *k, const ST *v, const float *dy,
                            const float *lse, const float *D, int T, int nh, float scale)
{
    constexpr int KS = HD / 16, NB = HD / 8;
    extern __shared__ __align__(128) float smem[];
    bf16 *Qs = (bf16 *)smem, *Ys = Qs + MMA_ROWS * MMA_LD(HD);
    float *Ls = (float *)(Ys + MMA_ROWS * MMA_LD(HD)), *Ds = Ls + MMA_ROWS;
    int bh = blockIdx.y, C = nh * HD, j0 = blockIdx.x * MMA_ROWS;
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16, g = lane >> 2, qd = lane & 3;
    int key0 = j0 + r0 + g, key1 = key0 + 8;
    size_t h0 = head_start(bh, T, nh, HD);
    uint32_t ka[KS][4], va[KS][4]; /* the warp's keys and values, staged through the query tiles */
    own_fragments<HD>(ka, va, Qs, Ys, k + h0, v + h0, C, j0, T, r0, g, qd);
    float dka[NB][4], dva[NB][4];
    for (int nd = 0; nd < NB; nd++)
        for (int e = 0; e < 4; e++)
            dka[nd][e] = dva[nd][e] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += MMA_ROWS) {
        __syncthreads(); /* every warp is done with the last tile */
        load_rows2(Qs, q + h0, Ys, dy + h0, C, i0, T, MMA_ROWS, HD, MMA_LD(HD));
        load_row_values(Ls, Ds, lse, D, bh, i0, T, MMA_ROWS);
        __syncthreads();
        float st[8][4], dpt[8][4];
        two_products<HD>(st, ka, Qs, dpt, va, Ys, g, qd);
        for (int nb = 0; nb < 8; nb++)
            for (int e = 0; e < 4; e++) {
                int col = nb * 8 + 2 * qd + (e & 1), t = i0 + col, key = e < 2 ? key0 : key1;
                float p = t < T && key <= t ? expf(st[nb][e] * scale - Ls[col]) : 0.0f;
                st[nb][e] = p;
                dpt[nb][e] = p * (dpt[nb][e] - Ds[col]);
            }
        times_tile<HD>(dva, st, Ys, g, qd);
        times_tile<HD>(dka, dpt, Qs, g, qd);
    }
    for (int nd = 0; nd < NB; nd++) {
        int col = nd * 8 + 2 * qd;
        if (key0 < T) {
            float *a = dk + h0 + (size_t)key0 * C + col, *b = dv + h0 + (size_t)key0 * C + col;
            a[0] = dka[nd][0] * scale, a[1] = dka[nd][1] * scale, b[0] = dva[nd][0], b[1] = dva[nd][1];
        }
        if (key1 < T) {
            float *a = dk + h0 + (size_t)key1 * C + col, *b = dv + h0 + (size_t)key1 * C + col;
            a[0] = dka[nd][2] * scale, a[1] = dka[nd][3] * scale, b[0] = dva[nd][2], b[1] = dva[nd][3];
        }
    }
}

/* dq of query tile i0 (the last first) on registers: each warp owns 16
 * queries, keeps their q and dy as A fragments and L, D in registers, and
 * per key tile forms s and dP, ds = P (dP - D), dq += ds k / sqrt(hd). */
template <int HD, typename ST>
__global__ static void __launch_bounds__(MMA_THREADS)
    flash_bwd_q_mma_kernel(float *dq, const ST *q, const ST *k, const ST *v, const float *dy,
                           const float *lse, const float *D, int T, int nh, float scale)
{
    constexpr int KS = HD / 16, NB = HD / 8;
    extern __shared__ __align__(128) float smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + MMA_ROWS * MMA_LD(HD);
    int bh = blockIdx.y, C = nh * HD, i0 = (gridDim.x - 1 - blockIdx.x) * MMA_ROWS;
    int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16, g = lane >> 2, qd = lane & 3;
    int t0 = i0 + r0 + g, t1 = t0 + 8;
    size_t h0 = head_start(bh, T, nh, HD);
    uint32_t qa[KS][4], ya[KS][4]; /* the warp's queries and dy, staged through the key tiles */
    own_fragments<HD>(qa, ya, Ks, Vs, q + h0, dy + h0, C, i0, T, r0, g, qd);
    float L0 = t0 < T ? lse[(size_t)bh * T + t0] : 0.0f, L1 = t1 < T ? lse[(size_t)bh * T + t1] : 0.0f;
    float D0 = t0 < T ? D[(size_t)bh * T + t0] : 0.0f, D1 = t1 < T ? D[(size_t)bh * T + t1] : 0.0f;
    float dqa[NB][4];
    for (int nd = 0; nd < NB; nd++)
        dqa[nd][0] = dqa[nd][1] = dqa[nd][2] = dqa[nd][3] = 0.0f;
    int jend = min(T, i0 + MMA_ROWS);
    for (int j0 = 0; j0 < jend; j0 += MMA_ROWS) {
        __syncthreads(); /* every warp is done with the last tile (or the q, dy staging) */
        load_rows2(Ks, k + h0, Vs, v + h0, C, j0, T, MMA_ROWS, HD, MMA_LD(HD));
        __syncthreads();
        float s[8][4], dp[8][4];
        two_products<HD>(s, qa, Ks, dp, ya, Vs, g, qd);
        for (int nb = 0; nb < 8; nb++)
            for (int e = 0; e < 4; e++) {
                int key = j0 + nb * 8 + 2 * qd + (e & 1), t = e < 2 ? t0 : t1;
                float p = t < T && key <= t ? expf(s[nb][e] * scale - (e < 2 ? L0 : L1)) : 0.0f;
                s[nb][e] = p * (dp[nb][e] - (e < 2 ? D0 : D1));
            }
        times_tile<HD>(dqa, s, Ks, g, qd);
    }
    for (int nd = 0; nd < NB; nd++) {
        int col = nd * 8 + 2 * qd;
        if (t0 < T)
            dq[h0 + (size_t)t0 * C + col] = dqa[nd][0] * scale, dq[h0 + (size_t)t0 * C + col + 1] = dqa[nd][1] * scale;
        if (t1 < T)
            dq[h0 + (size_t)t1 * C + col] = dqa[nd][2] * scale, dq[h0 + (size_t)t1 * C + col + 1] = dqa[nd][3] * scale;
    }
}

/* ---- launching ---- */

template <int HD, typename ST> static void fwd_mma(const ar_attention *a, float *y, float scale)
{
    dim3 grid((unsigned)((a->T + MMA_ROWS - 1) / MMA_ROWS), (unsigned)(a->B * a->nh));
    size_t sm = (size_t)3 * MMA_ROWS * MMA_LD(HD) * sizeof(bf16); /* q, k, v tiles */
    if (sm > 48 * 1024)
        AR_CUDA_CHECK(
            cudaFuncSetAttribute(flash_fwd_mma_kernel<HD, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    flash_fwd_mma_kernel<HD, ST><<<grid, MMA_THREADS, sm, ar_cuda_stream()>>>(
        (ST *)y, a->att, (const ST *)a->q, (const ST *)a->k, (const ST *)a->v, a->T, a->nh, scale);
    AR_CUDA_LAUNCHED();
}

template <int HD> static void fwd_mma_stored(const ar_attention *a, float *y, float scale)
{
    if (ar_cu_bf16_stored(a->q)) /* all of q, k, v, y or none (attention_cuda.cu checks) */
        fwd_mma<HD, bf16>(a, y, scale);
    else
        fwd_mma<HD, float>(a, y, scale);
}

int ar_cu_attention_fwd_regs(const ar_attention *a, float *y, float scale)
{
    switch (ar_cuda_bf16() ? a->hd : 0) {
    case 16: fwd_mma_stored<16>(a, y, scale); return 1;
    case 32: fwd_mma_stored<32>(a, y, scale); return 1;
    case 48: fwd_mma_stored<48>(a, y, scale); return 1;
    case 64: fwd_mma_stored<64>(a, y, scale); return 1;
    case 80: fwd_mma_stored<80>(a, y, scale); return 1;
    case 96: fwd_mma_stored<96>(a, y, scale); return 1;
    case 112: fwd_mma_stored<112>(a, y, scale); return 1;
    case 128: fwd_mma_stored<128>(a, y, scale); return 1;
    default: return 0;
    }
}

template <int HD, typename ST>
static void bwd_mma(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv, const float *D, float scale)
{
    dim3 grid((unsigned)((a->T + MMA_ROWS - 1) / MMA_ROWS), (unsigned)(a->B * a->nh));
    size_t sm = (size_t)2 * MMA_ROWS * MMA_LD(HD) * sizeof(bf16) + 2 * MMA_ROWS * sizeof(float);
    const ST *q = (const ST *)a->q, *k = (const ST *)a->k, *v = (const ST *)a->v;
    flash_bwd_kv_mma_kernel<HD, ST><<<grid, MMA_THREADS, sm, ar_cuda_stream()>>>(dk, dv, q, k, v, dy, a->att, D, a->T,
                                                                                a->nh, scale);
    AR_CUDA_LAUNCHED();
    flash_bwd_q_mma_kernel<HD, ST><<<grid, MMA_THREADS, sm, ar_cuda_stream()>>>(dq, q, k, v, dy, a->att, D, a->T,
                                                                               a->nh, scale);
    AR_CUDA_LAUNCHED();
}

template <int HD>
static void bwd_mma_stored(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv, const float *D,
                           float scale)
{
    if (ar_cu_bf16_stored(a->q))
        bwd_mma<HD, bf16>(a, dy, dq, dk, dv, D, scale);
    else
        bwd_mma<HD, float>(a, dy, dq, dk, dv, D, scale);
}

/* hd up to 64: the dk, dv kernel holds six 16-row fragments or
 * accumulators of hd columns a warp */
int ar_cu_attention_bwd_regs(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv, const float *D,
                             float scale)
{
    switch (a->hd) {
    case 16: bwd_mma_stored<16>(a, dy, dq, dk, dv, D, scale); return 1;
    case 32: bwd_mma_stored<32>(a, dy, dq, dk, dv, D, scale); return 1;
    case 48: bwd_mma_stored<48>(a, dy, dq, dk, dv, D, scale); return 1;
    case 64: bwd_mma_stored<64>(a, dy, dq, dk, dv, D, scale); return 1;
    default: return 0;
    }
}

