/* The CUDA depth-mixing ops: depth attention (one-phase and two-phase),
 * the ablation variants' general mixer, and the weighted sum of buffers.
 * The math of each op is in lib/backend.h; the CPU reference is
 * lib/cpu/backend_cpu.c (depth_attn_*), lib/cpu/depth_cpu.c and
 * lib/cpu/ablate_cpu.c.
 *
 * Layout of the work: one thread block per token row (a chunk of rows in
 * the backward ops), blockDim.x = T threads, thread t owning the channels
 * j = t + q T (q < MAXV), so a row's values live in registers between the
 * block reductions that give its dot products and norms.  The depth
 * attention forward ops so read each source once per pass: they mix by
 * online softmax (running max m, l = sum exp(z - m), acc = sum exp(z - m) x,
 * rescaled when m grows), which equals the CPU's two sweeps to rounding.
 *
 * Source lists arrive as host arrays of device pointers; they are passed to
 * kernels by value (structs of at most MAXP pointers; a kernel taking two or
 * three lists has more than 4 KiB of parameters, which CUDA 12.1+ allows on
 * sm_70 and later).  Mixers of a chunk are processed CG at a time, their
 * per-channel accumulators in registers.
 *
 * Determinism: block reductions add in a fixed order; parameter gradients
 * that sum over tokens go through one partial per block of a fixed token
 * count (a function of N only), added in block order by a second kernel
 * into the accumulating output.  No float atomics. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../backend.h"
#include "cuda_util.h"
#include "depth_cuda.h"

#define MAXV 8          /* channels per thread */
#define MAXT 512        /* threads per row block, so rows up to MAXV * MAXT = 4096 */
#define MAXP 256        /* pointers in one source list */
#define CG 4            /* mixers per kernel pass */
#define RED_WARPS 8192  /* warps of a token reduction (about) */
#define RED_BLOCKS 2048 /* blocks of a token reduction (at most) */
#define SMEM_DEFAULT 49152 /* dynamic shared memory without opt-in */

struct clist {
    const float *p[MAXP];
};
struct mlist {
    float *p[MAXP];
};

/* ------------------------------------------------------------------------ */
/* host helpers                                                              */

static void die(const char *op, const char *fmt, long a, long b)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, a, b);
    ar_cuda_die(op, msg, __FILE__, __LINE__);
}

static clist make_clist(const float *const *a, int n, const char *op)
{
    clist l;
    memset(&l, 0, sizeof l);
    if (n > MAXP)
        die(op, "'sources' (%ld in one list) exceed the limit of %ld", n, MAXP);
    for (int s = 0; s < n; s++)
        l.p[s] = a[s];
    return l;
}

/* a may be NULL (every entry NULL) */
static mlist make_mlist(float *const *a, int n, const char *op)
{
    mlist l;
    memset(&l, 0, sizeof l);
    if (n > MAXP)
        die(op, "'sources' (%ld in one list) exceed the limit of %ld", n, MAXP);
    for (int s = 0; a && s < n; s++)
        l.p[s] = a[s];
    return l;
}

/* Threads of a row block: ceil(d / MAXV) rounded up to whole warps. */
static int row_threads(int d, const char *op)
{
    if (d > MAXV * MAXT)
        die(op, "'d' = %ld exceeds the limit of %ld channels", d, MAXV * MAXT);
    int t = (d + MAXV - 1) / MAXV;
    return (t + 31) / 32 * 32;
}

/* Dynamic shared memory beyond the default 48 KiB needs an opt-in per kernel
 * (H100: up to 227 KiB; the depth_mix scratch grows with heads x sources). */
static void smem_opt_in(const void *kernel, size_t bytes, long hn, const char *op)
{
    if (bytes <= SMEM_DEFAULT)
        return;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
        cudaSuccess)
        die(op, "'shared memory' of %ld bytes (%ld heads x sources) exceeds the device limit",
            (long)bytes, hn);
}

/* depth_mix: d splits into H channel groups of e = d/H */
static void check_heads(int H, int d, const char *op)
{
    if (H < 1 || d % H)
        die(op, "'d' = %ld is not a multiple of the %ld heads", d, H);
}

/* Tokens per block of a token reduction, and the block count: a function of
 * N and the block size T only, so the summation order does not depend on the
 * device.  About RED_WARPS warps in all (small rows: more, smaller blocks),
 * at most RED_BLOCKS partials. */
static int red_tokens(int N, int T)
{
    int target = RED_WARPS / (T / 32);
    target = target < RED_BLOCKS ? target : RED_BLOCKS;
    return (N + target - 1) / target;
}
static int red_nblk(int N, int tpb) { return (N + tpb - 1) / tpb; }

/* Device scratch for per-block partials, grown only when too small (the
 * stream is drained first: queued kernels may still read the old one). */
static void *ws_ptr;
static size_t ws_cap;

static void *workspace(size_t bytes)
{
    if (bytes <= ws_cap)
        return ws_ptr;
    if (ws_ptr) {
        AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream()));
        AR_CUDA_CHECK(cudaFree(ws_ptr));
        ws_ptr = NULL;
        ws_cap = 0;
    }
    AR_CUDA_CHECK(cudaMalloc(&ws_ptr, bytes));
    ws_cap = bytes;
    return ws_ptr;
}

/* ------------------------------------------------------------------------ */
/* device helpers                                                            */

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
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
        v[k] = warp_sum(v[k]);
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

/* The same for one double (any block size that is a multiple of 32, up to 1024). */
__device__ __forceinline__ double block_sum_d(double v)
{
    __shared__ double sred[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    if (lane == 0)
        sred[wid] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < nw; w++)
        t += sred[w];
    __syncthreads();
    return t;
}

/* This thread's channels of row x into xv, and block-wide the key's
 * r = 1/sqrt(mean x^2 + eps) (returned) and logit *z = r (u.x). */
__device__ __forceinline__ float key_logit(const float *x, const float *u, float *xv, int tid, int T,
                                           int d, float *z)
{
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        xv[q] = j < d ? x[j] : 0.0f;
        v[0] += xv[q] * xv[q];
        v[1] += u[q] * xv[q];
    }
    block_sum<2>(v);
    float r = 1.0f / sqrtf(v[0] / d + AR_RMS_EPS);
    *z = r * v[1];
    return r;
}

/* Token i's sublayer input, fused: h = acc / l (this thread's channels),
 * xn[i,:] = h r ng with r = 1/sqrt(mean h^2 + eps) (= nrstd[i]), as
 * rmsnorm_fwd would write it. */
__device__ __forceinline__ void store_rmsnorm(const float *acc, float l, const float *ng, float *xn,
                                              float *nrstd, size_t i, int tid, int T, int d)
{
    float hv[MAXV], v[1] = {0.0f};
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        hv[q] = acc[q] / l;
        v[0] += hv[q] * hv[q];
    }
    block_sum<1>(v);
    float rr = 1.0f / sqrtf(v[0] / d + AR_RMS_EPS);
    if (tid == 0)
        nrstd[i] = rr;
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        if (j < d)
            xn[i * d + j] = hv[q] * rr * ng[j];
    }
}

/* Online softmax, one more source with logit z and row xv:
 *   m' = max(m, z);  l = l e^{m-m'} + e^{z-m'};  acc = acc e^{m-m'} + e^{z-m'} xv */
__device__ __forceinline__ void online_add(float z, const float *xv, float *m, float *l, float *acc)
{
    float mn = fmaxf(*m, z), sc = expf(*m - mn), p = expf(z - mn);
    *l = *l * sc + p;
#pragma unroll
    for (int q = 0; q < MAXV; q++)
        acc[q] = acc[q] * sc + p * xv[q];
    *m = mn;
}

/* Per-head sums over the channel groups G_a = [a e, (a+1) e):
 *   out[k*H + a] = sum_{j in G_a} f[k][j]   (k < NF; f[k][q] is channel t + q T)
 * 8 sums per block reduction (8/NF heads at a time).  out is shared memory,
 * written by thread 0 and readable by all on return. */
template <int NF>
__device__ void head_sums(const float (&f)[NF][MAXV], int H, int e, int d, float *out)
{
    constexpr int HG = 8 / NF;
    int T = blockDim.x, tid = threadIdx.x;
    for (int a0 = 0; a0 < H; a0 += HG) {
        float v[NF * HG];
#pragma unroll
        for (int x = 0; x < NF * HG; x++)
            v[x] = 0.0f;
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            int hh = j < d ? j / e - a0 : -1;
#pragma unroll
            for (int b = 0; b < HG; b++)
                if (hh == b) {
#pragma unroll
                    for (int k = 0; k < NF; k++)
                        v[k * HG + b] += f[k][q];
                }
        }
        block_sum<NF * HG>(v);
        if (tid == 0)
            for (int b = 0; b < HG && a0 + b < H; b++)
                for (int k = 0; k < NF; k++)
                    out[k * H + a0 + b] = v[k * HG + b];
    }
    __syncthreads();
}

/* Column sums of the per-block partials, acc_j = sum_b part[b*stride + j]:
 * thread (x, y) = (t % 32, t / 32) of a block of RED_TY warps adds rows
 * b = y, y + RED_TY, ... of channel j = 32 blockIdx + x, then warp 0 adds the
 * RED_TY sums in order (fixed order: deterministic).  The result is valid
 * in warp 0 only. */
#define RED_TY 16
__device__ __forceinline__ float column_sum(const float *part, int nb, size_t stride, int len)
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
__global__ void reduce_wg_kernel(float *dw, float *dg, const float *part, int nb, size_t stride,
                                 const float *w, const float *g, int d)
{
    float acc = column_sum(part, nb, stride, d);
    int j = blockIdx.x * 32 + threadIdx.x;
    if (threadIdx.x >= 32 || j >= d)
        return;
    if (dw)
        dw[j] += g[j] * acc;
    if (dg)
        dg[j] += w[j] * acc;
}

/* y[j] += acc_j, j < len */
__global__ void reduce_add_kernel(float *y, const float *part, int nb, size_t stride, int len)
{
    float acc = column_sum(part, nb, stride, len);
    int j = blockIdx.x * 32 + threadIdx.x;
    if (threadIdx.x >= 32 || j >= len)
        return;
    y[j] += acc;
}

static void reduce_wg(float *dw, float *dg, const float *part, int nb, size_t stride,
                      const float *w, const float *g, int d)
{
    if (!dw && !dg)
        return;
    reduce_wg_kernel<<<(d + 31) / 32, 32 * RED_TY, 0, ar_cuda_stream()>>>(dw, dg, part, nb, stride,
                                                                            w, g, d);
    AR_CUDA_LAUNCHED();
}

static void reduce_add(float *y, const float *part, int nb, size_t stride, int len)
{
    if (len <= 0)
        return;
    reduce_add_kernel<<<(len + 31) / 32, 32 * RED_TY, 0, ar_cuda_stream()>>>(y, part, nb, stride,
                                                                              len);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* depth attention, one phase                                                */

/* Token i (one block), u = w*g:
 *   r_s = 1/sqrt(mean_j x_s[j]^2 + eps) (= rstd[i,s]);  z_s = r_s (u.x_s)
 *   alpha[i,:] = softmax(z);  h[i,:] = sum_s alpha_s x_s
 * one read of each source by online softmax; zs (shared, n) keeps z. */
__global__ void __launch_bounds__(MAXT)
attn_fwd_kernel(float *h, float *alpha, float *rstd, clist src, int n, const float *w,
                const float *g, int d)
{
    extern __shared__ float zs[];
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x;
    float u[MAXV], acc[MAXV];
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        u[q] = j < d ? w[j] * g[j] : 0.0f;
        acc[q] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int s = 0; s < n; s++) {
        float xv[MAXV], z;
        float r = key_logit(src.p[s] + i * d, u, xv, tid, T, d, &z);
        if (tid == 0) {
            rstd[i * n + s] = r;
            zs[s] = z;
        }
        online_add(z, xv, &m, &l, acc);
    }
    __syncthreads(); /* zs complete */
    for (int s = tid; s < n; s += T)
        alpha[i * n + s] = expf(zs[s] - m) / l;
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        if (j < d)
            h[i * d + j] = n > 0 ? acc[q] / l : 0.0f;
    }
}

/* Tokens [b tpb, (b+1) tpb) of block b, u = w*g, per token:
 *   da_s = dh.x_s, ux_s = u.x_s (shared, n each), cbar = sum_s alpha_s da_s
 *   dl_s = alpha_s (da_s - cbar)
 *   dsrc[s] += alpha_s dh + dl_s r_s u - dl_s ux_s r_s^3 x_s / d
 *   part[b,:] = sum over tokens and s of dl_s r_s x_s   (then reduce_wg)
 * dh is held in registers before any dsrc row is written, so dh may be one
 * of the dsrc; repeated dsrc pointers add in source order (one thread per
 * channel). */
__global__ void __launch_bounds__(MAXT)
attn_bwd_kernel(mlist dsrc, float *part, const float *dh, const float *alpha, const float *rstd,
                clist src, int n, const float *w, const float *g, int N, int d, int tpb)
{
    extern __shared__ float sh[];
    float *da = sh, *ux = sh + n;
    int T = blockDim.x, tid = threadIdx.x;
    float u[MAXV], pp[MAXV];
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        u[q] = j < d ? w[j] * g[j] : 0.0f;
        pp[q] = 0.0f;
    }
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        float gy[MAXV];
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            gy[q] = j < d ? dh[i * d + j] : 0.0f;
        }
        for (int s = 0; s < n; s++) {
            const float *x = src.p[s] + i * d;
            float v[2] = {0.0f, 0.0f};
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                float xv = j < d ? x[j] : 0.0f;
                v[0] += gy[q] * xv;
                v[1] += u[q] * xv;
            }
            block_sum<2>(v);
            if (tid == 0) {
                da[s] = v[0];
                ux[s] = v[1];
            }
        }
        __syncthreads(); /* da, ux complete */
        const float *al = alpha + i * n, *rs = rstd + i * n;
        float cbar = 0.0f;
        for (int s = 0; s < n; s++)
            cbar += al[s] * da[s];
        for (int s = 0; s < n; s++) {
            const float *x = src.p[s] + i * d;
            float *dx = dsrc.p[s] + i * d;
            float a = al[s], r = rs[s];
            float dl = a * (da[s] - cbar);
            float c1 = dl * r;
            float c2 = dl * ux[s] * r * r * r / d;
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                if (j < d) {
                    float xv = x[j];
                    dx[j] += a * gy[q] + c1 * u[q] - c2 * xv;
                    pp[q] += c1 * xv;
                }
            }
        }
        __syncthreads(); /* da, ux read by all before the next token writes them */
    }
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        if (j < d)
            part[(size_t)blockIdx.x * d + j] = pp[q];
    }
}

extern "C" void cuda_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src,
                                    int n, const float *w, const float *g, int N, int d)
{
    const char *op = "depth_attn_fwd";
    if (N <= 0 || d <= 0)
        return;
    int T = row_threads(d, op);
    clist sl = make_clist(src, n, op);
    attn_fwd_kernel<<<N, T, (size_t)(n > 0 ? n : 1) * sizeof(float), ar_cuda_stream()>>>(
        h, alpha, rstd, sl, n, w, g, d);
    AR_CUDA_LAUNCHED();
}

extern "C" void cuda_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh,
                                    const float *alpha, const float *rstd,
                                    const float *const *src, int n, const float *w,
                                    const float *g, int N, int d)
{
    const char *op = "depth_attn_bwd";
    if (N <= 0 || d <= 0 || n <= 0)
        return;
    int T = row_threads(d, op), tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    clist sl = make_clist(src, n, op);
    mlist dl = make_mlist(dsrc, n, op);
    float *part = (float *)workspace((size_t)nb * d * sizeof(float));
    attn_bwd_kernel<<<nb, T, (size_t)2 * n * sizeof(float), ar_cuda_stream()>>>(
        dl, part, dh, alpha, rstd, sl, n, w, g, N, d, tpb);
    AR_CUDA_LAUNCHED();
    reduce_wg(dw, dg, part, nb, (size_t)d, w, g, d);
}

/* ------------------------------------------------------------------------ */
/* two-phase depth attention                                                 */

/* Up to CG mixers of a chunk, for one kernel pass. */
struct fwd_grp {
    float *o[CG], *lse[CG], *alpha[CG];
    const float *w[CG], *g[CG];
    int n[CG];
};

/* Phase 1 for mixers c < G of a group (one block per token i), u_c = w_c g_c:
 *   r_s = 1/sqrt(mean_j x_s[j]^2 + eps) (= rs[s][i], written by the first
 *   group only);  z[c,s] = r_s (u_c.x_s) (= alpha[c][i,s], raw)
 *   lse[c][i] = log sum_{s<k} exp z[c,s];  o[c][i,:] = sum_s exp(z - lse) x_s
 * (not where o[c] is NULL) or, for mixer 0 with xn: xn = o r' ng, nrstd[i] = r' = rstd(o), o unwritten.
 * One read of each shared source per group, by online softmax. */
__global__ void __launch_bounds__(MAXT)
inter_fwd_kernel(fwd_grp p, int G, mlist rs, int write_rs, clist src, int k, const float *ng,
                 float *xn, float *nrstd, int d)
{
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x;
    float u[CG][MAXV], acc[CG][MAXV], m[CG], l[CG];
#pragma unroll
    for (int c = 0; c < CG; c++) {
        m[c] = -INFINITY;
        l[c] = 0.0f;
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            u[c][q] = c < G && j < d ? p.w[c][j] * p.g[c][j] : 0.0f;
            acc[c][q] = 0.0f;
        }
    }
    for (int s = 0; s < k; s++) {
        const float *x = src.p[s] + i * d;
        float xv[MAXV], v[CG + 1];
#pragma unroll
        for (int c = 0; c <= CG; c++)
            v[c] = 0.0f;
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            xv[q] = j < d ? x[j] : 0.0f;
            v[CG] += xv[q] * xv[q];
#pragma unroll
            for (int c = 0; c < CG; c++)
                v[c] += u[c][q] * xv[q];
        }
        block_sum<CG + 1>(v);
        float r = 1.0f / sqrtf(v[CG] / d + AR_RMS_EPS);
        if (tid == 0 && write_rs)
            rs.p[s][i] = r;
#pragma unroll
        for (int c = 0; c < CG; c++) {
            if (c >= G)
                break;
            float z = r * v[c];
            if (tid == 0)
                p.alpha[c][i * p.n[c] + s] = z; /* raw logit; phase 2 normalises */
            float mn = fmaxf(m[c], z), sc = expf(m[c] - mn), e = expf(z - mn);
            l[c] = l[c] * sc + e;
#pragma unroll
            for (int q = 0; q < MAXV; q++)
                acc[c][q] = acc[c][q] * sc + e * xv[q];
            m[c] = mn;
        }
    }
#pragma unroll
    for (int c = 0; c < CG; c++) {
        if (c >= G)
            break;
        if (tid == 0)
            p.lse[c][i] = m[c] + logf(l[c]);
        if (c == 0 && xn) { /* uniform over the block */
            store_rmsnorm(acc[0], l[0], ng, xn, nrstd, i, tid, T, d);
            continue;
        }
        if (!p.o[c])
            continue; /* not wanted (uniform over the block) */
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            if (j < d)
                p.o[c][i * d + j] = acc[c][q] / l[c];
        }
    }
}

extern "C" void cuda_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha,
                                     const int *n, float *const *rs, const float *const *src,
                                     int k, const float *const *w, const float *const *g, int C,
                                     const float *ng, float *xn, float *nrstd, int N, int d)
{
    const char *op = "depth_fwd_inter";
    if (N <= 0 || d <= 0 || C <= 0)
        return;
    int T = row_threads(d, op);
    clist sl = make_clist(src, k, op);
    mlist rl = make_mlist(rs, k, op);
    for (int c0 = 0; c0 < C; c0 += CG) {
        int G = C - c0 < CG ? C - c0 : CG;
        fwd_grp p;
        memset(&p, 0, sizeof p);
        for (int c = 0; c < G; c++) {
            p.o[c] = o[c0 + c];
            p.lse[c] = lse[c0 + c];
            p.alpha[c] = alpha[c0 + c];
            p.w[c] = w[c0 + c];
            p.g[c] = g[c0 + c];
            p.n[c] = n[c0 + c];
        }
        float *x = c0 == 0 ? xn : NULL;
        inter_fwd_kernel<<<N, T, 0, ar_cuda_stream()>>>(p, G, rl, c0 == 0, sl, k, ng, x, nrstd,
                                                         d);
        AR_CUDA_LAUNCHED();
    }
}

/* Phase 2 of one mixer (one block per token i), j = n-k intra sources,
 * continuing phase 1's online softmax from m = lse[i], l = 1, acc = o = h:
 *   r_t = rstd(x_t) (= rsi[t][i]);  z_t = r_t (u.x_t)  (zt, shared)
 *   m' = max(m, z_t): l = l e^{m-m'} + e^{z_t-m'}, acc = acc e^{m-m'} + e^{z_t-m'} x_t
 *   LSE = m + log l (= lse[i]);  h = acc / l  (or xn = h r' ng, nrstd = r')
 *   alpha[i,s] = exp(alpha[i,s] - LSE) (s < k);  alpha[i,k+t] = exp(z_t - LSE)
 * With j = 0 only lse and alpha change (LSE = lse exactly: l = 1). */
__global__ void __launch_bounds__(MAXT)
merge_kernel(float *h, float *lse, float *alpha, int n, int k, mlist rsi, clist intra,
             const float *w, const float *g, const float *ng, float *xn, float *nrstd, int d)
{
    extern __shared__ float zt[];
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x, nj = n - k;
    float u[MAXV], acc[MAXV];
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        u[q] = j < d ? w[j] * g[j] : 0.0f;
        acc[q] = nj > 0 && j < d ? h[i * d + j] : 0.0f;
    }
    float m = lse[i], l = 1.0f;
    for (int t = 0; t < nj; t++) {
        float xv[MAXV], z;
        float r = key_logit(intra.p[t] + i * d, u, xv, tid, T, d, &z);
        if (tid == 0) {
            rsi.p[t][i] = r;
            zt[t] = z;
        }
        online_add(z, xv, &m, &l, acc);
    }
    float LSE = m + logf(l);
    __syncthreads(); /* zt complete; every thread has read lse[i] */
    if (tid == 0)
        lse[i] = LSE;
    float *al = alpha + i * n;
    for (int s = tid; s < k; s += T)
        al[s] = expf(al[s] - LSE);
    for (int t = tid; t < nj; t += T)
        al[k + t] = expf(zt[t] - LSE);
    if (nj == 0)
        return; /* h = o already */
    if (!xn) {
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            if (j < d)
                h[i * d + j] = acc[q] / l;
        }
        return;
    }
    store_rmsnorm(acc, l, ng, xn, nrstd, i, tid, T, d);
}

extern "C" void cuda_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                                     float *const *rsi, const float *const *intra, const float *w,
                                     const float *g, const float *ng, float *xn, float *nrstd,
                                     int N, int d)
{
    const char *op = "depth_fwd_merge";
    if (N <= 0 || d <= 0)
        return;
    int T = row_threads(d, op), nj = n - k;
    clist il = make_clist(intra, nj, op);
    mlist rl = make_mlist(rsi, nj, op);
    merge_kernel<<<N, T, (size_t)(nj > 0 ? nj : 1) * sizeof(float), ar_cuda_stream()>>>(
        h, lse, alpha, n, k, rl, il, w, g, ng, xn, nrstd, d);
    AR_CUDA_LAUNCHED();
}

/* Backward, intra part of one mixer; tokens [b tpb, (b+1) tpb) of block b;
 * src lists all n sources, the intra ones from k:
 *   dxn given (h NULL): xh = xn / ng (where ng_j = 0: nr sum_s alpha_s src[s]),
 *              dh = nr (ng dxn - xh m), m = (ng dxn).xh / d, written to dh
 *              (=);  npart[b,:] = sum of dxn xh  (then reduce_add into dng);
 *              cdot = dh.xh / nr
 *   else:      cdot[i] = dh.h (=)
 *   for t < n-k with a = alpha[i,k+t] != 0, r = rsi[t][i], x = src[k+t]:
 *     dl = a (dh.x - cdot) (0 where n = 1);  ux = (log a + lse[i]) / r   (phase 2's lse)
 *     dintra[t] += a dh + dl r u - dl ux r^3 x / d
 *   part[b,:] = sum of dl r x   (then reduce_wg)
 * Each thread reads and writes only its own columns of a row. */
__global__ void __launch_bounds__(MAXT)
intra_bwd_kernel(mlist dintra, float *part, float *npart, float *cdot, float *dh, const float *h,
                 const float *dxn, const float *xn, const float *ng,
                 const float *nrstd, const float *alpha, const float *lse, int n, int k,
                 clist rsi, clist src, const float *w, const float *g, int N, int d, int tpb)
{
    int T = blockDim.x, tid = threadIdx.x, nj = n - k;
    float u[MAXV], pp[MAXV], pn[MAXV];
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        u[q] = j < d ? w[j] * g[j] : 0.0f;
        pp[q] = 0.0f;
        pn[q] = 0.0f;
    }
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        float gy[MAXV], v[1] = {0.0f}, c;
        const float *al = alpha + i * n;
        if (dxn) {
            float dv[MAXV], xh[MAXV], nr = nrstd[i];
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                float gj = j < d ? ng[j] : 1.0f;
                dv[q] = j < d ? dxn[i * d + j] : 0.0f;
                if (gj != 0.0f) {
                    xh[q] = j < d ? xn[i * d + j] / gj : 0.0f;
                } else { /* the norm zeroed this channel: h from the sources */
                    float acc = 0.0f;
                    for (int s = 0; s < n; s++)
                        acc += al[s] * src.p[s][i * d + j];
                    xh[q] = nr * acc;
                }
                v[0] += gj * dv[q] * xh[q];
            }
            block_sum<1>(v);
            float m = v[0] / d;
            v[0] = 0.0f;
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                gy[q] = j < d ? nr * (ng[j] * dv[q] - xh[q] * m) : 0.0f;
                pn[q] += dv[q] * xh[q];
                v[0] += gy[q] * xh[q];
                if (j < d)
                    dh[i * d + j] = gy[q];
            }
            block_sum<1>(v);
            c = v[0] / nr;
        } else {
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                gy[q] = j < d ? dh[i * d + j] : 0.0f;
                v[0] += gy[q] * (j < d ? h[i * d + j] : 0.0f);
            }
            block_sum<1>(v);
            c = v[0];
        }
        if (tid == 0)
            cdot[i] = c;
        float L = lse[i];
        for (int t = 0; t < nj; t++) {
            float a = al[k + t];
            if (a == 0.0f)
                continue; /* underflowed weight: no contribution (uniform over the block) */
            float r = rsi.p[t][i];
            const float *x = src.p[k + t] + i * d;
            float xv[MAXV], v1[1] = {0.0f};
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                xv[q] = j < d ? x[j] : 0.0f;
                v1[0] += gy[q] * xv[q];
            }
            block_sum<1>(v1);
            float dl = n > 1 ? a * (v1[0] - c) : 0.0f; /* one source: no logit gradient */
            float c1 = dl * r, c2 = dl * ((logf(a) + L) / r) * r * r * r / d;
            float *dx = dintra.p[t] + i * d;
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                if (j < d) {
                    dx[j] += a * gy[q] + c1 * u[q] - c2 * xv[q];
                    pp[q] += c1 * xv[q];
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < MAXV; q++) {
        int j = tid + q * T;
        if (j < d) {
            part[(size_t)blockIdx.x * d + j] = pp[q];
            if (dxn)
                npart[(size_t)blockIdx.x * d + j] = pn[q];
        }
    }
}

extern "C" void cuda_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot,
                                     float *dh, const float *h, const float *dxn,
                                     const float *xn, const float *ng, float *dng,
                                     const float *nrstd, const float *alpha, const float *lse,
                                     int n, int k, const float *const *rsi,
                                     const float *const *src, const float *w, const float *g,
                                     int N, int d)
{
    const char *op = "depth_bwd_intra";
    if (N <= 0 || d <= 0)
        return;
    int T = row_threads(d, op), nj = n - k, tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    clist sl = make_clist(src, n, op), rl = make_clist(rsi, nj, op);
    mlist dl = make_mlist(dintra, nj, op);
    /* partials: nb x d for dw/dg, then nb x d for dng */
    float *part = (float *)workspace((size_t)2 * nb * d * sizeof(float));
    float *npart = part + (size_t)nb * d;
    intra_bwd_kernel<<<nb, T, 0, ar_cuda_stream()>>>(dl, part, npart, cdot, dh, h, dxn, xn,
                                                      ng, nrstd, alpha, lse, n, k, rl, sl, w, g,
                                                      N, d, tpb);
    AR_CUDA_LAUNCHED();
    if (nj > 0)
        reduce_wg(dw, dg, part, nb, (size_t)d, w, g, d);
    if (dxn)
        reduce_add(dng, npart, nb, (size_t)d, d);
}

/* Up to CG mixers of a chunk, for one backward pass. */
struct bwd_grp {
    const float *dh[CG], *cdot[CG], *alpha[CG], *lse[CG], *w[CG], *g[CG];
    int n[CG];
};

/* Backward, shared part, mixers c < G of a group; tokens [b tpb, (b+1) tpb)
 * of block b; per token and shared source s (x = x_s, r = rs[s][i]):
 *   dl_c = alpha_c[i,s] (dh_c.x - cdot_c[i]) (0 where n_c = 1);  ux_c = (log alpha_c + lse_c[i]) / r
 *   dsrc[s] = (overwrite ? 0 : dsrc[s]) + sum_c alpha_c dh_c + sum_c dl_c r u_c
 *             - (sum_{c: alpha_c != 0} dl_c ux_c) r^3 x / d
 *   part[b,c,:] = sum of dl_c r x   (then reduce_wg per mixer)
 * The dh_c rows of a token stay in registers for all its sources; repeated
 * dsrc pointers are handled in source order (one thread per channel). */
__global__ void __launch_bounds__(MAXT)
inter_bwd_kernel(mlist dsrc, float *part, bwd_grp p, int G, clist rs, clist src, int k,
                 int overwrite, int N, int d, int tpb)
{
    int T = blockDim.x, tid = threadIdx.x;
    float pp[CG][MAXV];
#pragma unroll
    for (int c = 0; c < CG; c++)
#pragma unroll
        for (int q = 0; q < MAXV; q++)
            pp[c][q] = 0.0f;
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        float gy[CG][MAXV];
#pragma unroll
        for (int c = 0; c < CG; c++)
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                gy[c][q] = c < G && j < d ? p.dh[c][i * d + j] : 0.0f;
            }
        for (int s = 0; s < k; s++) {
            const float *x = src.p[s] + i * d;
            float xv[MAXV], v[CG];
#pragma unroll
            for (int c = 0; c < CG; c++)
                v[c] = 0.0f;
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                xv[q] = j < d ? x[j] : 0.0f;
#pragma unroll
                for (int c = 0; c < CG; c++)
                    v[c] += gy[c][q] * xv[q];
            }
            block_sum<CG>(v);
            float r = rs.p[s][i], norm = 0.0f, a[CG], c1[CG];
#pragma unroll
            for (int c = 0; c < CG; c++) {
                a[c] = 0.0f;
                c1[c] = 0.0f;
                if (c >= G)
                    continue;
                a[c] = p.alpha[c][i * p.n[c] + s];
                float dl = p.n[c] > 1 ? a[c] * (v[c] - p.cdot[c][i]) : 0.0f; /* one source: none */
                c1[c] = dl * r;
                if (a[c] != 0.0f) /* an underflowed weight contributes nothing */
                    norm += dl * ((logf(a[c]) + p.lse[c][i]) / r);
            }
            float cx = -norm * r * r * r / d;
            float *dx = dsrc.p[s] + i * d;
#pragma unroll
            for (int q = 0; q < MAXV; q++) {
                int j = tid + q * T;
                if (j >= d)
                    continue;
                float y = overwrite ? 0.0f : dx[j];
#pragma unroll
                for (int c = 0; c < CG; c++)
                    if (c < G)
                        y += a[c] * gy[c][q];
#pragma unroll
                for (int c = 0; c < CG; c++)
                    if (c < G)
                        y += c1[c] * (p.w[c][j] * p.g[c][j]);
                dx[j] = y + cx * xv[q];
#pragma unroll
                for (int c = 0; c < CG; c++)
                    pp[c][q] += c1[c] * xv[q];
            }
        }
    }
#pragma unroll
    for (int c = 0; c < CG; c++) {
        if (c >= G)
            break;
#pragma unroll
        for (int q = 0; q < MAXV; q++) {
            int j = tid + q * T;
            if (j < d)
                part[((size_t)blockIdx.x * CG + c) * d + j] = pp[c][q];
        }
    }
}

extern "C" void cuda_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg,
                                     const float *const *dh, const float *const *cdot,
                                     const float *const *alpha, const float *const *lse,
                                     const int *n, const float *const *rs,
                                     const float *const *src, int k, const float *const *w,
                                     const float *const *g, int C, int overwrite, int N, int d)
{
    const char *op = "depth_bwd_inter";
    if (N <= 0 || d <= 0 || C <= 0 || k <= 0)
        return;
    int T = row_threads(d, op), tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    clist sl = make_clist(src, k, op), rl = make_clist(rs, k, op);
    mlist dl = make_mlist(dsrc, k, op);
    float *part = (float *)workspace((size_t)nb * CG * d * sizeof(float));
    for (int c0 = 0; c0 < C; c0 += CG) {
        int G = C - c0 < CG ? C - c0 : CG;
        bwd_grp p;
        memset(&p, 0, sizeof p);
        for (int c = 0; c < G; c++) {
            p.dh[c] = dh[c0 + c];
            p.cdot[c] = cdot[c0 + c];
            p.alpha[c] = alpha[c0 + c];
            p.lse[c] = lse[c0 + c];
            p.w[c] = w[c0 + c];
            p.g[c] = g[c0 + c];
            p.n[c] = n[c0 + c];
        }
        /* later groups add onto the first group's result */
        inter_bwd_kernel<<<nb, T, 0, ar_cuda_stream()>>>(dl, part, p, G, rl, sl, k,
                                                          overwrite && c0 == 0, N, d, tpb);
        AR_CUDA_LAUNCHED();
        for (int c = 0; c < G; c++)
            reduce_wg(dw[c0 + c], dg[c0 + c], part + (size_t)c * d, nb, (size_t)CG * d,
                      w[c0 + c], g[c0 + c], d);
    }
}

/* ------------------------------------------------------------------------ */
/* general one-phase depth mixing (the ablation variants)                    */

/* Token i (one block), H heads over channel groups of e = d/H, q = w +
 * i*wstride (NULL without w):
 *   g: r_s = rstd(x_s) (= rstd[i,s]), key k_s = x_s r_s g; else k_s = x_s
 *   logit[a,s] = theta[s] | sum_{j in G_a} q_j k_s[j] | 0   (sa, shared H x n)
 *   alpha[i,a,:] = softmax (sum in double, as the CPU) or sigmoid
 *   h[i,j] = sum_s alpha[i,a(j),s] x_s[j]
 * Scratch (shared): sa (H*n), hs (H). */
__global__ void __launch_bounds__(MAXT)
mix_fwd_kernel(float *h, float *alpha, float *rstd, clist src, int n, const float *w,
               int wstride, const float *g, const float *theta, int sigmoid, int H, int d)
{
    extern __shared__ float sm[];
    float *sa = sm, *hs = sm + (size_t)H * n;
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x, e = d / H;
    const float *q = w ? w + i * wstride : NULL;
    int dot = q && !theta;
    float qg[MAXV];
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        qg[v] = dot && j < d ? (g ? q[j] * g[j] : q[j]) : 0.0f;
    }
    for (int s = 0; s < n; s++) {
        const float *x = src.p[s] + i * d;
        float f[1][MAXV], ss[1] = {0.0f};
#pragma unroll
        for (int v = 0; v < MAXV; v++) {
            int j = tid + v * T;
            float xv = j < d ? x[j] : 0.0f;
            ss[0] += xv * xv;
            f[0][v] = qg[v] * xv;
        }
        float r = 1.0f;
        if (g) {
            block_sum<1>(ss);
            r = 1.0f / sqrtf(ss[0] / d + AR_RMS_EPS);
            if (tid == 0)
                rstd[i * n + s] = r;
        }
        if (dot)
            head_sums<1>(f, H, e, d, hs);
        for (int a = tid; a < H; a += T)
            sa[a * n + s] = theta ? theta[s] : dot ? hs[a] * r : 0.0f;
    }
    __syncthreads(); /* sa complete */
    for (int a = tid; a < H; a += T) {
        float *ah = sa + a * n, *out = alpha + i * H * n + (size_t)a * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                out[s] = ah[s] = 1.0f / (1.0f + expf(-ah[s]));
            continue;
        }
        float mx = ah[0];
        for (int s = 1; s < n; s++)
            mx = ah[s] > mx ? ah[s] : mx;
        double sum = 0.0;
        for (int s = 0; s < n; s++) {
            ah[s] = expf(ah[s] - mx);
            sum += ah[s];
        }
        for (int s = 0; s < n; s++)
            out[s] = ah[s] = (float)(ah[s] / sum);
    }
    __syncthreads(); /* weights complete */
    float acc[MAXV];
#pragma unroll
    for (int v = 0; v < MAXV; v++)
        acc[v] = 0.0f;
    for (int s = 0; s < n; s++) {
        const float *x = src.p[s] + i * d;
#pragma unroll
        for (int v = 0; v < MAXV; v++) {
            int j = tid + v * T;
            if (j < d)
                acc[v] += sa[(j / e) * n + s] * x[j];
        }
    }
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        if (j < d)
            h[i * d + j] = acc[v];
    }
}

/* Backward, tokens [b tpb, (b+1) tpb) of block b; per token, q as forward
 * (NULL with theta), r_s = rstd[i,s] with g (else 1), a = a(j):
 *   da[a,s] = sum_{j in G_a} dh_j x_s[j];  ux[a,s] = sum_{j in G_a} q_j g_j x_s[j]
 *   dl = alpha (da - sum_s alpha da) (softmax, sum in double) | da alpha (1 - alpha)
 *   dsrc[s][j] += alpha[a,s] dh_j + dl[a,s] r_s q_j g_j - (sum_a dl ux) r_s^3 x_s[j] / d
 *                 (the last two terms only as far as q and g exist)
 *   dw: shared_w: part[b, j] += dl r_s g_j x_s[j];  per token: dw[i,j] += (same)
 *   dg: part[b, d+j] += dl r_s q_j x_s[j];  dtheta: part[b, 2d+s] += sum_a dl[a,s]
 * Scratch (shared): al, da, ux, dl (H*n each), pt (n), hs (2H). */
__global__ void __launch_bounds__(MAXT)
mix_bwd_kernel(mlist dsrc, float *part, float *dw, int shared_w, int want_dg, int want_dt,
               const float *dh, const float *alpha, const float *rstd, clist src, int n,
               const float *w, int wstride, const float *g, const float *theta, int sigmoid, int H,
               int N, int d, int tpb)
{
    extern __shared__ float sm[];
    size_t hn = (size_t)H * n;
    float *al = sm, *da = al + hn, *ux = da + hn, *dl = ux + hn, *pt = dl + hn, *hs = pt + n;
    int T = blockDim.x, tid = threadIdx.x, e = d / H;
    float gv[MAXV], pw[MAXV], pg[MAXV];
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        gv[v] = g && j < d ? g[j] : 1.0f;
        pw[v] = pg[v] = 0.0f;
    }
    for (int s = tid; s < n; s += T)
        pt[s] = 0.0f;
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        const float *q = w && !theta ? w + i * wstride : NULL;
        float gy[MAXV], qv[MAXV];
#pragma unroll
        for (int v = 0; v < MAXV; v++) {
            int j = tid + v * T;
            gy[v] = j < d ? dh[i * d + j] : 0.0f;
            qv[v] = q && j < d ? q[j] : 0.0f;
        }
        for (size_t x = tid; x < hn; x += T)
            al[x] = alpha[i * hn + x];
        for (int s = 0; s < n; s++) {
            const float *x = src.p[s] + i * d;
            float f[2][MAXV];
#pragma unroll
            for (int v = 0; v < MAXV; v++) {
                int j = tid + v * T;
                float xv = j < d ? x[j] : 0.0f;
                f[0][v] = gy[v] * xv;
                f[1][v] = g ? qv[v] * gv[v] * xv : qv[v] * xv;
            }
            head_sums<2>(f, H, e, d, hs);
            for (int a = tid; a < H; a += T) {
                da[a * n + s] = hs[a];
                ux[a * n + s] = hs[H + a];
            }
        }
        __syncthreads(); /* al, da, ux complete */
        for (int a = tid; a < H; a += T) {
            const float *ah = al + a * n, *dah = da + a * n;
            float *dlh = dl + a * n;
            if (sigmoid) {
                for (int s = 0; s < n; s++)
                    dlh[s] = dah[s] * ah[s] * (1.0f - ah[s]);
                continue;
            }
            double cd = 0.0;
            for (int s = 0; s < n; s++)
                cd += (double)ah[s] * dah[s];
            for (int s = 0; s < n; s++)
                dlh[s] = ah[s] * (float)(dah[s] - cd);
        }
        __syncthreads(); /* dl complete */
        if (want_dt && tid == 0)
            for (int s = 0; s < n; s++)
                for (int a = 0; a < H; a++)
                    pt[s] += dl[a * n + s];
        for (int s = 0; s < n; s++) {
            const float *x = src.p[s] + i * d;
            float *dx = dsrc.p[s] ? dsrc.p[s] + i * d : NULL;
            float r = g ? rstd[i * n + s] : 1.0f;
            float cross = 0.0f;
            for (int a = 0; a < H; a++)
                cross += dl[a * n + s] * ux[a * n + s];
            float c3 = cross * r * r * r / d;
#pragma unroll
            for (int v = 0; v < MAXV; v++) {
                int j = tid + v * T;
                if (j >= d)
                    continue;
                int a = j / e;
                float as = al[a * n + s], ca = dl[a * n + s] * r, xv = x[j];
                if (dx) {
                    if (q && g)
                        dx[j] += as * gy[v] + ca * qv[v] * gv[v] - c3 * xv;
                    else if (q)
                        dx[j] += as * gy[v] + ca * qv[v];
                    else
                        dx[j] += as * gy[v];
                }
                if (!q)
                    continue;
                float t = g ? ca * gv[v] * xv : ca * xv;
                if (shared_w)
                    pw[v] += t;
                else if (dw)
                    dw[i * d + j] += t;
                if (g && want_dg)
                    pg[v] += ca * qv[v] * xv;
            }
        }
        __syncthreads(); /* scratch read by all before the next token */
    }
    size_t stride = (size_t)2 * d + n;
    float *pb = part + blockIdx.x * stride;
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        if (j < d) {
            pb[j] = pw[v];
            pb[d + j] = pg[v];
        }
    }
    for (int s = tid; s < n; s += T)
        pb[2 * d + s] = pt[s];
}

static size_t mix_smem(int H, int n, int bwd)
{
    size_t hn = (size_t)H * n;
    return (bwd ? 4 * hn + n + 2 * (size_t)H : hn + H) * sizeof(float);
}

extern "C" void cuda_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src,
                                   int n, const float *w, int wstride, const float *g,
                                   const float *theta, int sigmoid, int H, int N, int d)
{
    const char *op = "depth_mix_fwd";
    if (N <= 0 || d <= 0 || n <= 0)
        return;
    check_heads(H, d, op);
    int T = row_threads(d, op);
    size_t smem = mix_smem(H, n, 0);
    smem_opt_in((const void *)mix_fwd_kernel, smem, (long)H * n, op);
    clist sl = make_clist(src, n, op);
    mix_fwd_kernel<<<N, T, smem, ar_cuda_stream()>>>(h, alpha, rstd, sl, n, w, wstride, g, theta,
                                                      sigmoid, H, d);
    AR_CUDA_LAUNCHED();
}

extern "C" void cuda_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta,
                                   const float *dh, const float *alpha, const float *rstd,
                                   const float *const *src, int n, const float *w, int wstride,
                                   const float *g, const float *theta, int sigmoid, int H, int N,
                                   int d)
{
    const char *op = "depth_mix_bwd";
    if (N <= 0 || d <= 0 || n <= 0)
        return;
    check_heads(H, d, op);
    int T = row_threads(d, op), tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    size_t smem = mix_smem(H, n, 1);
    smem_opt_in((const void *)mix_bwd_kernel, smem, (long)H * n, op);
    int shared_w = w && !theta && wstride == 0 && dw;
    int want_dg = g && dg && w && !theta;
    int want_dt = theta && dtheta;
    clist sl = make_clist(src, n, op);
    mlist dl = make_mlist(dsrc, n, op);
    size_t stride = (size_t)2 * d + n;
    float *part = (float *)workspace((size_t)nb * stride * sizeof(float));
    mix_bwd_kernel<<<nb, T, smem, ar_cuda_stream()>>>(dl, part, dw, shared_w, want_dg, want_dt, dh,
                                                       alpha, rstd, sl, n, w, wstride, g, theta,
                                                       sigmoid, H, N, d, tpb);
    AR_CUDA_LAUNCHED();
    if (shared_w)
        reduce_add(dw, part, nb, stride, d);
    if (want_dg)
        reduce_add(dg, part + d, nb, stride, d);
    if (want_dt)
        reduce_add(dtheta, part + 2 * (size_t)d, nb, stride, n);
}

/* ------------------------------------------------------------------------ */
/* weighted sum of buffers                                                   */

#define WSUM_T 256
#define WSUM_BLOCKS 1024

/* y[k] = (accumulate ? y[k] : 0) + sum_s c[s] x_s[k]  (s in order) */
__global__ void wsum_fwd_kernel(float *y, clist x, const float *c, int n, int accumulate,
                                size_t len)
{
    __shared__ float cs[MAXP];
    for (int s = threadIdx.x; s < n; s += blockDim.x)
        cs[s] = c[s];
    __syncthreads();
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < len;
         k += (size_t)gridDim.x * blockDim.x) {
        float v = accumulate ? y[k] : 0.0f;
        for (int s = 0; s < n; s++)
            v += cs[s] * x.p[s][k];
        y[k] = v;
    }
}

/* Block b covers elements [b per, (b+1) per); per source s:
 *   part[b*n + s] = sum_k dy[k] x_s[k]  (double; part NULL: skipped)
 *   dx[s][k] += c[s] dy[k]               (dx[s] NULL: skipped) */
__global__ void wsum_bwd_kernel(mlist dx, double *part, const float *dy, clist x, const float *c,
                                int n, size_t len, size_t per)
{
    size_t k0 = (size_t)blockIdx.x * per, k1 = k0 + per < len ? k0 + per : len;
    for (int s = 0; s < n; s++) {
        const float *xs = x.p[s];
        float *dxs = dx.p[s];
        float cs = c[s];
        double acc = 0.0;
        for (size_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
            float gy = dy[k];
            if (part)
                acc += (double)gy * xs[k];
            if (dxs)
                dxs[k] += cs * gy;
        }
        if (part) {
            acc = block_sum_d(acc);
            if (threadIdx.x == 0)
                part[(size_t)blockIdx.x * n + s] = acc;
        }
    }
}

/* dc[s] += (float) sum_b part[b*n + s]  (one block per s, fixed order) */
__global__ void wsum_dc_kernel(float *dc, const double *part, int nb, int n)
{
    int s = blockIdx.x;
    double acc = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x)
        acc += part[(size_t)b * n + s];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0)
        dc[s] += (float)acc;
}

extern "C" void cuda_wsum_fwd(float *y, const float *const *x, const float *c, int n,
                              int accumulate, size_t len)
{
    const char *op = "wsum_fwd";
    if (len == 0)
        return;
    clist xl = make_clist(x, n, op);
    size_t nb = (len + WSUM_T - 1) / WSUM_T;
    if (nb > 4 * WSUM_BLOCKS)
        nb = 4 * WSUM_BLOCKS;
    wsum_fwd_kernel<<<(unsigned)nb, WSUM_T, 0, ar_cuda_stream()>>>(y, xl, c, n, accumulate, len);
    AR_CUDA_LAUNCHED();
}

extern "C" void cuda_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x,
                              const float *c, int n, size_t len)
{
    const char *op = "wsum_bwd";
    if (len == 0 || n <= 0)
        return;
    clist xl = make_clist(x, n, op);
    mlist dl = make_mlist(dx, n, op);
    size_t nb = (len + 8 * WSUM_T - 1) / (8 * WSUM_T);
    if (nb > WSUM_BLOCKS)
        nb = WSUM_BLOCKS;
    size_t per = (len + nb - 1) / nb;
    nb = (len + per - 1) / per;
    double *part = dc ? (double *)workspace(nb * n * sizeof(double)) : NULL;
    wsum_bwd_kernel<<<(unsigned)nb, WSUM_T, 0, ar_cuda_stream()>>>(dl, part, dy, xl, c, n, len,
                                                                   per);
    AR_CUDA_LAUNCHED();
    if (dc) {
        wsum_dc_kernel<<<n, WSUM_T, 0, ar_cuda_stream()>>>(dc, part, (int)nb, n);
        AR_CUDA_LAUNCHED();
    }
}
