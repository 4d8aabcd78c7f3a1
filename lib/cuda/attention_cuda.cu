/* Causal multi-head attention on the GPU.
 *
 * Training (attention_fwd, attention_bwd): fused kernels in the manner of
 * FlashAttention-2 (Dao, 2023) that never form the T x T probabilities in
 * memory.  Each thread block holds tiles of bt rows of q, k, v (and dy) of
 * one head in shared memory and forms the scores of a bt x bt tile there;
 * the forward keeps a running max and sum per query row (the online
 * softmax) and saves each row's log-sum-exp L, from which the backward
 * forms P = exp(s - L) again, tile by tile.  Three kernels:
 *   forward    one block per (query tile, head): y and L;
 *   dk, dv     one block per (key tile, head), over the query tiles at or
 *              after it: dv += P^T dy, dk += ds^T q / sqrt(hd);
 *   dq         one block per (query tile, head), over the key tiles at or
 *              before it: dq += ds k / sqrt(hd);
 * with ds = P (dP - D), dP = dy v^T and D = rowsum(dy * y) from a row
 * kernel first.  Splitting dq from dk, dv costs recomputing s and dP once
 * more but needs no atomic adds, so the gradients are the same bits run
 * after run (the backend has no float atomics).  Tiles above the diagonal
 * are never formed; inside a diagonal tile the masked entries are zeros.
 *
 * The tile products (tiles_cuda.h) run on tensor cores (WMMA, bf16
 * operands, fp32 accumulation) when the backend's products are bf16
 * (set_bf16) and hd is a multiple of 16, and in fp32 otherwise; the
 * softmax, its running max and sum, L and D are fp32 either way.  bt is the
 * largest of 64, 32, 16 (8 in fp32) whose tiles fit the device's shared
 * memory per block.  Under bf16 with hd a multiple of 16, up to 128 for
 * the forward and 64 for the backward, the same three kernels run on
 * registers instead (flash_*_mma_kernel): each warp's fragments, scores,
 * probabilities and accumulators in registers (mma_cuda.h), as
 * FlashAttention-2 keeps them (attention_regs_cuda.cu).
 *
 * Decoding (attention_decode): the products of a few new queries against
 * the cache on cuBLAS, the probabilities formed whole (they are n x Tk, not
 * T x T). */
#include "ops_cuda.h"

#include "attention_cuda.h"
#include "cuda_util.h"
#include "matmul_cuda.h"
#include "tiles_cuda.h"

#include <math.h>
#include <stdio.h>

/* rows (query positions) per block of the row kernels: one warp each */
#define ROWS 8
/* threads per block of the fused kernels: 8 warps */
#define FUSED_THREADS 256

enum { FWD, BWD_KV, BWD_Q };

static unsigned row_blocks(size_t rows) { return (unsigned)((rows + ROWS - 1) / ROWS); }

/* Where each tile lives in a fused kernel's dynamic shared memory (byte
 * offsets, 128-byte aligned), for tiles of bt rows, head dimension hd and
 * operands of esz bytes (4: fp32, 2: bf16):
 *   q, k, v, dy   bt x hd operands (dy: backward only)
 *   s             bt x bt scores, fp32
 *   p             bt x bt probabilities as an operand (not in the dq kernel)
 *   dp, ds        bt x bt: dy v^T (fp32) and ds as an operand (backward)
 *   a0, a1        bt x hd fp32 accumulators: y (forward); dk, dv; dq
 *   r0, r1        bt per-row values: running max and sum (forward); L and D */
struct att_tiles {
    size_t q, k, v, dy, s, p, dp, ds, a0, a1, r0, r1, bytes;
};

__host__ __device__ static inline size_t take(size_t *at, size_t bytes)
{
    size_t o = *at;
    *at += (bytes + 127) & ~(size_t)127;
    return o;
}

__host__ __device__ static inline att_tiles tiles_of(int kind, int bt, int hd, size_t esz)
{
    att_tiles t = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t at = 0, op = (size_t)bt * hd * esz, sq = (size_t)bt * bt, acc = (size_t)bt * hd * sizeof(float);
    t.q = take(&at, op), t.k = take(&at, op), t.v = take(&at, op);
    t.s = take(&at, sq * sizeof(float));
    if (kind != BWD_Q)
        t.p = take(&at, sq * esz);
    t.a0 = take(&at, acc);
    t.r0 = take(&at, bt * sizeof(float)), t.r1 = take(&at, bt * sizeof(float));
    if (kind != FWD) {
        t.dy = take(&at, op);
        t.dp = take(&at, sq * sizeof(float));
        t.ds = take(&at, sq * esz);
    }
    if (kind == BWD_KV)
        t.a1 = take(&at, acc);
    t.bytes = at;
    return t;
}

/* acc's rows r0 + r < T to dst (rows C apart; fp32, or bf16 storage),
 * each divided by div[r] (div NULL: as they are) */
template <typename O>
__device__ static void store_rows(O *dst, const float *acc, const float *div, int C, int r0, int T, int bt, int hd)
{
    for (int e = threadIdx.x; e < bt * hd; e += blockDim.x) {
        int r = e / hd, c = e % hd;
        if (r0 + r < T)
            ar_store(dst + (size_t)(r0 + r) * C + c, div ? acc[e] / div[r] : acc[e]);
    }
}

/* Forward, query tile i0 (the last tiles, with the most key tiles, first)
 * of head bh = blockIdx.y.  Per key tile j0 <= i0, for row r (query
 * t = i0 + r) and key c (j0 + c <= t):
 *   s = q k^T / sqrt(hd);  m' = max(m, max_c s);  p = exp(s - m');
 *   l = l exp(m - m') + sum_c p;  o = o exp(m - m') + p v;  m = m'
 * then y = o / l and L = m + log l.  Every row sees key j0 (j0 <= i0 <= t),
 * so m' is finite from the first tile on. */
template <typename E, typename ST>
__global__ static void __launch_bounds__(FUSED_THREADS)
    flash_fwd_kernel(ST *y, float *lse, const ST *q, const ST *k, const ST *v, int T, int nh, int hd, int bt, float scale)
{
    extern __shared__ __align__(128) float smem[];
    att_tiles L = tiles_of(FWD, bt, hd, sizeof(E));
    char *base = (char *)smem;
    E *Qs = (E *)(base + L.q), *Ks = (E *)(base + L.k), *Vs = (E *)(base + L.v), *P = (E *)(base + L.p);
    float *S = (float *)(base + L.s), *O = (float *)(base + L.a0);
    float *mrow = (float *)(base + L.r0), *lrow = (float *)(base + L.r1);
    int bh = blockIdx.y, C = nh * hd, i0 = (gridDim.x - 1 - blockIdx.x) * bt;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    size_t h0 = head_start(bh, T, nh, hd);
    load_rows(Qs, q + h0, C, i0, T, bt, hd);
    for (int e = threadIdx.x; e < bt * hd; e += blockDim.x)
        O[e] = 0.0f;
    for (int r = threadIdx.x; r < bt; r += blockDim.x)
        mrow[r] = -INFINITY, lrow[r] = 0.0f;
    int jend = min(T, i0 + bt);
    for (int j0 = 0; j0 < jend; j0 += bt) {
        __syncthreads(); /* the last tile's reads of k, v and p are done */
        load_rows2(Ks, k + h0, Vs, v + h0, C, j0, T, bt, hd);
        __syncthreads();
        tile_mm(S, bt, Qs, hd, 0, Ks, hd, 1, bt, bt, hd, scale, 0);
        __syncthreads();
        for (int r = warp; r < bt; r += warps) {
            int t = i0 + r;
            const float *s = S + (size_t)r * bt;
            float m = mrow[r], mx = m;
            for (int c = lane; c < bt; c += 32)
                if (j0 + c <= t)
                    mx = fmaxf(mx, s[c]);
            mx = ar_warp_max(mx);
            float sum = 0.0f;
            for (int c = lane; c < bt; c += 32) {
                float p = j0 + c <= t ? expf(s[c] - mx) : 0.0f;
                ar_store(P + (size_t)r * bt + c, p);
                sum += p;
            }
            sum = ar_warp_sum(sum);
            float corr = expf(m - mx); /* 0 on the first tile (m = -inf) */
            for (int c = lane; c < hd; c += 32)
                O[(size_t)r * hd + c] *= corr;
            if (lane == 0)
                lrow[r] = lrow[r] * corr + sum, mrow[r] = mx;
        }
        __syncthreads();
        tile_mm(O, hd, P, bt, 0, Vs, hd, 0, bt, hd, bt, 1.0f, 1);
    }
    __syncthreads();
    store_rows(y + h0, O, lrow, C, i0, T, bt, hd);
    for (int r = threadIdx.x; r < bt; r += blockDim.x)
        if (i0 + r < T)
            lse[(size_t)bh * T + i0 + r] = mrow[r] + logf(lrow[r]);
}

/* D[bh T + t] = sum_j dy[t, j] y[t, j] over head bh's hd channels: one warp
 * per row r = bh T + t (y fp32, or bf16 storage) */
template <typename ST>
__global__ static void rowdot_kernel(float *D, const float *dy, const ST *y, size_t rows, int T, int nh, int hd)
{
    size_t r = (size_t)blockIdx.x * ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int bh = (int)(r / (size_t)T), t = (int)(r % (size_t)T);
    size_t o = head_start(bh, T, nh, hd) + (size_t)t * nh * hd;
    float s = 0.0f;
    for (int j = lane; j < hd; j += 32)
        s += dy[o + j] * ar_value(y[o + j]);
    s = ar_warp_sum(s);
    if (lane == 0)
        D[r] = s;
}

/* The backward's probabilities and ds of a tile, from s (scaled scores)
 * and dP in shared memory, query rows i0 + r < T, keys j0 + c <= i0 + r:
 *   p = exp(s - L[r]);  ds = p (dP - D[r]);  both 0 where masked
 * (P NULL: p not kept as an operand, the dq kernel's case) */
template <typename E>
__device__ static void tile_ds(E *P, E *dS, const float *S, const float *dP, const float *Lr, const float *Dr,
                               int i0, int j0, int T, int bt)
{
    for (int e = threadIdx.x; e < bt * bt; e += blockDim.x) {
        int r = e / bt, c = e % bt, t = i0 + r;
        float p = t < T && j0 + c <= t ? expf(S[e] - Lr[r]) : 0.0f;
        if (P)
            ar_store(P + e, p);
        ar_store(dS + e, p * (dP[e] - Dr[r]));
    }
}

/* dk, dv of key tile j0 of head bh, over the query tiles i0 >= j0:
 *   dv += P^T dy;  dk += ds^T q / sqrt(hd)    (=: written once, at the end) */
template <typename E, typename ST>
__global__ static void __launch_bounds__(FUSED_THREADS)
    flash_bwd_kv_kernel(float *dk, float *dv, const ST *q, const ST *k, const ST *v, const float *dy,
                        const float *lse, const float *D, int T, int nh, int hd, int bt, float scale)
{
    extern __shared__ __align__(128) float smem[];
    att_tiles L = tiles_of(BWD_KV, bt, hd, sizeof(E));
    char *base = (char *)smem;
    E *Qs = (E *)(base + L.q), *Ks = (E *)(base + L.k), *Vs = (E *)(base + L.v), *dYs = (E *)(base + L.dy);
    E *P = (E *)(base + L.p), *dS = (E *)(base + L.ds);
    float *S = (float *)(base + L.s), *dP = (float *)(base + L.dp);
    float *dK = (float *)(base + L.a0), *dV = (float *)(base + L.a1);
    float *Lr = (float *)(base + L.r0), *Dr = (float *)(base + L.r1);
    int bh = blockIdx.y, C = nh * hd, j0 = blockIdx.x * bt;
    size_t h0 = head_start(bh, T, nh, hd);
    load_rows2(Ks, k + h0, Vs, v + h0, C, j0, T, bt, hd);
    for (int e = threadIdx.x; e < bt * hd; e += blockDim.x)
        dK[e] = 0.0f, dV[e] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += bt) {
        __syncthreads(); /* the last tile's reads of q, dy, P and ds are done */
        load_rows2(Qs, q + h0, dYs, dy + h0, C, i0, T, bt, hd);
        load_row_values(Lr, Dr, lse, D, bh, i0, T, bt);
        __syncthreads();
        tile_mm(S, bt, Qs, hd, 0, Ks, hd, 1, bt, bt, hd, scale, 0);
        tile_mm(dP, bt, dYs, hd, 0, Vs, hd, 1, bt, bt, hd, 1.0f, 0);
        __syncthreads();
        tile_ds(P, dS, S, dP, Lr, Dr, i0, j0, T, bt);
        __syncthreads();
        tile_mm(dV, hd, P, bt, 1, dYs, hd, 0, bt, hd, bt, 1.0f, 1);
        tile_mm(dK, hd, dS, bt, 1, Qs, hd, 0, bt, hd, bt, scale, 1);
    }
    __syncthreads();
    store_rows(dk + h0, dK, NULL, C, j0, T, bt, hd);
    store_rows(dv + h0, dV, NULL, C, j0, T, bt, hd);
}

/* dq of query tile i0 (the last first) of head bh, over the key tiles
 * j0 <= i0:  dq += ds k / sqrt(hd)    (=: written once, at the end) */
template <typename E, typename ST>
__global__ static void __launch_bounds__(FUSED_THREADS)
    flash_bwd_q_kernel(float *dq, const ST *q, const ST *k, const ST *v, const float *dy,
                       const float *lse, const float *D, int T, int nh, int hd, int bt, float scale)
{
    extern __shared__ __align__(128) float smem[];
    att_tiles L = tiles_of(BWD_Q, bt, hd, sizeof(E));
    char *base = (char *)smem;
    E *Qs = (E *)(base + L.q), *Ks = (E *)(base + L.k), *Vs = (E *)(base + L.v), *dYs = (E *)(base + L.dy);
    E *dS = (E *)(base + L.ds);
    float *S = (float *)(base + L.s), *dP = (float *)(base + L.dp), *dQ = (float *)(base + L.a0);
    float *Lr = (float *)(base + L.r0), *Dr = (float *)(base + L.r1);
    int bh = blockIdx.y, C = nh * hd, i0 = (gridDim.x - 1 - blockIdx.x) * bt;
    size_t h0 = head_start(bh, T, nh, hd);
    load_rows2(Qs, q + h0, dYs, dy + h0, C, i0, T, bt, hd);
    load_row_values(Lr, Dr, lse, D, bh, i0, T, bt);
    for (int e = threadIdx.x; e < bt * hd; e += blockDim.x)
        dQ[e] = 0.0f;
    int jend = min(T, i0 + bt);
    for (int j0 = 0; j0 < jend; j0 += bt) {
        __syncthreads(); /* the last tile's reads of k and ds are done */
        load_rows2(Ks, k + h0, Vs, v + h0, C, j0, T, bt, hd);
        __syncthreads();
        tile_mm(S, bt, Qs, hd, 0, Ks, hd, 1, bt, bt, hd, scale, 0);
        tile_mm(dP, bt, dYs, hd, 0, Vs, hd, 1, bt, bt, hd, 1.0f, 0);
        __syncthreads();
        tile_ds((E *)NULL, dS, S, dP, Lr, Dr, i0, j0, T, bt);
        __syncthreads();
        tile_mm(dQ, hd, dS, bt, 0, Ks, hd, 0, bt, hd, bt, scale, 1);
    }
    __syncthreads();
    store_rows(dq + h0, dQ, NULL, C, i0, T, bt, hd);
}

/* ---- launching ---- */

/* How a shape runs: tile rows bt, tensor cores or not, and the grid. */
struct att_plan {
    int bt, tc;
    dim3 grid;
};

/* The most dynamic shared memory a block may opt into on this device. */
static size_t smem_limit(void)
{
    static int limit = -1;
    if (limit < 0) {
        int dev = 0;
        AR_CUDA_CHECK(cudaGetDevice(&dev));
        AR_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return (size_t)limit;
}

static att_plan plan_for(int B, int T, int nh, int hd)
{
    att_plan p;
    p.tc = ar_cuda_bf16() && hd % 16 == 0;
    size_t esz = p.tc ? sizeof(bf16) : sizeof(float), limit = smem_limit();
    for (p.bt = 64; p.bt >= (p.tc ? 16 : 8); p.bt /= 2)
        if (tiles_of(BWD_KV, p.bt, hd, esz).bytes <= limit)
            break;
    char why[160];
    if (p.bt < (p.tc ? 16 : 8)) {
        snprintf(why, sizeof why, "head dimension %d: the fused kernels' smallest tiles need more than the %zu bytes "
                 "of shared memory a block may have", hd, limit);
        ar_cuda_die("attention", why, __FILE__, __LINE__);
    }
    if ((size_t)B * nh > 65535) {
        snprintf(why, sizeof why, "%d sequences x %d heads: more than 65535 (the grid's second dimension)", B, nh);
        ar_cuda_die("attention", why, __FILE__, __LINE__);
    }
    p.grid = dim3((unsigned)((T + p.bt - 1) / p.bt), (unsigned)(B * nh));
    return p;
}

/* Lets kernel fn take `bytes` of dynamic shared memory (past the 48 KiB
 * every kernel may have, a block must opt in). */
template <typename F> static size_t smem_for(F fn, int kind, const att_plan &p, int hd)
{
    size_t bytes = tiles_of(kind, p.bt, hd, p.tc ? sizeof(bf16) : sizeof(float)).bytes;
    if (bytes > 48 * 1024)
        AR_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return bytes;
}

/* E: the tiles' element type (bf16 on tensor cores, else float); ST: q, k,
 * v and y's (float, or bf16 storage) */
template <typename E, typename ST> static void fwd(const ar_attention *a, float *y, const att_plan &p, float scale)
{
    size_t sm = smem_for(flash_fwd_kernel<E, ST>, FWD, p, a->hd);
    flash_fwd_kernel<E, ST><<<p.grid, FUSED_THREADS, sm, ar_cuda_stream()>>>(
        (ST *)y, a->att, (const ST *)a->q, (const ST *)a->k, (const ST *)a->v, a->T, a->nh, a->hd, p.bt, scale);
    AR_CUDA_LAUNCHED();
}

template <typename E, typename ST>
static void bwd(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv, const float *D,
                const att_plan &p, float scale)
{
    const ST *q = (const ST *)a->q, *k = (const ST *)a->k, *v = (const ST *)a->v;
    size_t sm = smem_for(flash_bwd_kv_kernel<E, ST>, BWD_KV, p, a->hd);
    flash_bwd_kv_kernel<E, ST><<<p.grid, FUSED_THREADS, sm, ar_cuda_stream()>>>(dk, dv, q, k, v, dy, a->att, D, a->T,
                                                                             a->nh, a->hd, p.bt, scale);
    AR_CUDA_LAUNCHED();
    sm = smem_for(flash_bwd_q_kernel<E, ST>, BWD_Q, p, a->hd);
    flash_bwd_q_kernel<E, ST><<<p.grid, FUSED_THREADS, sm, ar_cuda_stream()>>>(dq, q, k, v, dy, a->att, D, a->T,
                                                                            a->nh, a->hd, p.bt, scale);
    AR_CUDA_LAUNCHED();
}

/* q, k, v (and y where given) are bf16 storage: all of them or none; the
 * saved state never */
static int attention_stored(const ar_attention *a, const void *y, const char *op)
{
    int s = ar_cu_bf16_stored(a->q);
    if (ar_cu_bf16_stored(a->k) != s || ar_cu_bf16_stored(a->v) != s || (y && ar_cu_bf16_stored(y) != s))
        ar_cuda_die(op, "q, k, v and y must all be bf16 storage (alloc_act) or none of them", __FILE__, __LINE__);
    ar_cu_no_bf16_storage(op, "the saved state 'att'", a->att);
    return s;
}

/* y = softmax(q k^T / sqrt(hd), causal) v (=); a->att: each row's L */
void cuda_attention_fwd(const ar_attention *a, float *y)
{
    if (a->B <= 0 || a->T <= 0 || a->nh <= 0 || a->hd <= 0)
        return;
    int st = attention_stored(a, y, "attention_fwd");
    att_plan p = plan_for(a->B, a->T, a->nh, a->hd);
    float scale = 1.0f / sqrtf((float)a->hd);
    if (p.tc && ar_cu_attention_fwd_regs(a, y, scale))
        return;
    if (p.tc)
        st ? fwd<bf16, bf16>(a, y, p, scale) : fwd<bf16, float>(a, y, p, scale);
    else
        st ? fwd<float, bf16>(a, y, p, scale) : fwd<float, float>(a, y, p, scale);
}

/* dv = P^T dy;  ds = P (dy v^T - D) / sqrt(hd), D = rowsum(dy y);
 * dq = ds k;  dk = ds^T q   (=; datt: D, B x nh x T) */
void cuda_attention_bwd(const ar_attention *a, const float *y, const float *dy, float *dq, float *dk, float *dv,
                        float *datt)
{
    if (a->B <= 0 || a->T <= 0 || a->nh <= 0 || a->hd <= 0)
        return;
    int st = attention_stored(a, y, "attention_bwd");
    ar_cu_fp32_only("attention_bwd", {{"'dy'", dy}, {"'dq'", dq}, {"'dk'", dk}, {"'dv'", dv}, {"'datt'", datt}});
    att_plan p = plan_for(a->B, a->T, a->nh, a->hd);
    float scale = 1.0f / sqrtf((float)a->hd);
    size_t rows = (size_t)a->B * a->nh * a->T;
    if (st)
        rowdot_kernel<bf16><<<row_blocks(rows), ROWS * 32, 0, ar_cuda_stream()>>>(datt, dy, (const bf16 *)y, rows,
                                                                                 a->T, a->nh, a->hd);
    else
        rowdot_kernel<float><<<row_blocks(rows), ROWS * 32, 0, ar_cuda_stream()>>>(datt, dy, y, rows, a->T, a->nh,
                                                                                  a->hd);
    AR_CUDA_LAUNCHED();
    if (p.tc && ar_cu_attention_bwd_regs(a, dy, dq, dk, dv, datt, scale))
        return;
    if (p.tc)
        st ? bwd<bf16, bf16>(a, dy, dq, dk, dv, datt, p, scale) : bwd<bf16, float>(a, dy, dq, dk, dv, datt, p, scale);
    else
        st ? bwd<float, bf16>(a, dy, dq, dk, dv, datt, p, scale)
           : bwd<float, float>(a, dy, dq, dk, dv, datt, p, scale);
}

/* ------------------------------------------------------------------------ */
/* incremental decoding against a key/value cache                            */

/* One thread per pair: i = (row*nh + h)*h2 + j, row at position pos0 + row;
 * a = t * 10000^(-2j/hd) in double, cos and sin rounded to float as the
 * rope tables (kernels_cuda.cu, and the CPU's) round them:
 *   x'_j = x_j cos a - x_{j+hd/2} sin a ;  x'_{j+hd/2} = x_j sin a + x_{j+hd/2} cos a */
__global__ static void rope_at_kernel(float *x, size_t pairs, int pos0, int nh, int hd)
{
    int h2 = hd / 2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < pairs;
         i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i % h2);
        size_t rh = i / h2; /* row*nh + h */
        double a = (double)(pos0 + (int)(rh / nh)) * pow(10000.0, -2.0 * j / hd);
        float c = (float)cos(a), s = (float)sin(a);
        float *xh = x + rh * hd;
        float x0 = xh[j], x1 = xh[j + h2];
        xh[j] = x0 * c - x1 * s;
        xh[j + h2] = x0 * s + x1 * c;
    }
}

void cuda_rope_fwd_at(float *x, int n, int pos0, int nh, int hd)
{
    size_t pairs = (size_t)n * nh * (hd / 2);
    if (pairs == 0)
        return;
    unsigned blocks = (unsigned)((pairs + 255) / 256);
    rope_at_kernel<<<blocks < 65535u ? blocks : 65535u, 256, 0, ar_cuda_stream()>>>(x, pairs, pos0,
                                                                                   nh, hd);
    AR_CUDA_LAUNCHED();
}

/* Row r = h*n + i of att (Tk columns) holds query i's scores; it sees
 * columns c <= pos0 + i:
 *   att[r,c] = exp(s_c - max) / sum_{c' <= pos0+i} exp(s_c' - max),  0 after. */
__global__ static void decode_softmax_kernel(float *att, size_t rows, int n, int pos0, int Tk)
{
    size_t r = (size_t)blockIdx.x * ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int last = pos0 + (int)(r % (size_t)n);
    float *a = att + r * Tk;
    float mx = -INFINITY;
    for (int c = lane; c <= last; c += 32)
        mx = fmaxf(mx, a[c]);
    mx = ar_warp_max(mx);
    float sum = 0.0f;
    for (int c = lane; c <= last; c += 32) {
        float e = expf(a[c] - mx);
        a[c] = e;
        sum += e;
    }
    float inv = 1.0f / ar_warp_sum(sum);
    for (int c = lane; c < Tk; c += 32)
        a[c] = c <= last ? a[c] * inv : 0.0f;
}

/* q, y: n x C (C = nh*hd); k, v: Tk x C, Tk = pos0 + n; att: nh x n x Tk.
 * Heads are the strided batch (q, k, v, y: stride hd, ld C; att: stride
 * n*Tk, ld Tk):  att = scale q k^T;  causal softmax;  y = att v      (=) */
void cuda_attention_decode(float *y, float *att, const float *q, const float *k, const float *v,
                           int n, int pos0, int nh, int hd)
{
    if (n <= 0 || nh <= 0 || hd <= 0)
        return;
    int C = nh * hd, Tk = pos0 + n;
    float scale = 1.0f / sqrtf((float)hd);
    long long sa = (long long)n * Tk;
    ar_cu_gemm_batched(0, 1, n, Tk, hd, scale, q, C, hd, k, C, hd, 0.0f, att, Tk, sa, nh);
    size_t rows = (size_t)nh * n;
    decode_softmax_kernel<<<row_blocks(rows), ROWS * 32, 0, ar_cuda_stream()>>>(att, rows, n, pos0,
                                                                                Tk);
    AR_CUDA_LAUNCHED();
    ar_cu_gemm_batched(0, 0, n, hd, Tk, 1.0f, att, Tk, sa, v, C, hd, 0.0f, y, C, hd, nh);
}
