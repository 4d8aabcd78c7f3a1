/* The CUDA backend's fused kernels: elementwise ops, sums, embedding,
 * RMSNorm, rotary, SwiGLU, cross-entropy and AdamW, each with the math of
 * its lib/ops.def entry (and of lib/cpu/kernels_cpu.c) above it.
 *
 * Shapes: rows of d up to 4096 floats are handled one warp per row (RMSNorm)
 * or one block per row (embedding); rows of V up to 50304 logits one block
 * of 512 threads per row (cross-entropy).  Flat elementwise ops use
 * grid-stride loops over size_t indices.
 *
 * Reductions are deterministic: no float atomics.  A double sum over a
 * buffer is two fixed-shape passes (per-block partials, then one block over
 * the partials); a column sum over tokens (dg of RMSNorm) is per-chunk
 * partials of a fixed row chunking, then added in chunk order; dwte sums
 * repeated tokens in token order after a stable sort. */
#include "ops_cuda.h"

#include "../backend.h"
#include "cuda_util.h"
#include "workspace_cuda.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

/* threads per block of the flat elementwise kernels */
#define BS 256
/* grid cap of the grid-stride loops */
#define MAX_BLOCKS 65536
/* rows per block of the warp-per-row kernels (8 warps) */
#define ROWS 8
/* the two-pass double sum: threads per block, most blocks of pass one */
#define RED_BS 256
#define RED_MAXB 1024
/* threads per row of the cross-entropy kernel */
#define XENT_BS 512
/* the RMSNorm dg column sum: most row chunks, fewest rows per chunk */
#define DG_MAXCH 256
#define DG_MINROWS 32

static unsigned flat_blocks(size_t n)
{
    size_t b = (n + BS - 1) / BS;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

/* threads for a block that loops over a row of d: d rounded up to a warp,
 * at most 256 */
static unsigned row_threads(int d)
{
    unsigned t = ((unsigned)d + 31) / 32 * 32;
    return t < 256 ? t : 256;
}

/* threads per cross-entropy row: XENT_BS, or fewer for a short row */
static unsigned xent_threads(int V) { return V <= 256 ? row_threads(V) : XENT_BS; }

#define GRID_STRIDE(i, n)                                                         \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);        \
         i += (size_t)gridDim.x * blockDim.x)

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the total.  The leading barrier lets a caller use it twice. */
__device__ static double block_sum_d(double v)
{
    __shared__ double sh[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ar_warp_sum_d(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    return ar_warp_sum_d(lane < nw ? sh[lane] : 0.0);
}

__device__ static float block_max(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ar_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    return ar_warp_max(lane < nw ? sh[lane] : -INFINITY);
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */

/* Where x (or y) is bf16 storage (lib/backend.h, alloc_act): 1, else 0 */
static int stored16(const void *p) { return ar_cu_bf16_stored(p) ? 1 : 0; }

/* y = x, each fp32 or bf16 storage: a value into bf16 storage is rounded
 * (to nearest even), one out of it is exact */
template <typename Y, typename X> __global__ static void convert_kernel(Y *y, const X *x, size_t n)
{
    GRID_STRIDE(i, n)
    ar_store(&y[i], ar_value(x[i]));
}

/* y = x (a device-to-device copy on the stream; y == x is a no-op), each
 * fp32 or bf16 storage: the same storage is copied byte for byte */
void cuda_copy(float *y, const float *x, size_t n)
{
    if (!n || y == x)
        return;
    int y16 = stored16(y), x16 = stored16(x);
    if (y16 == x16) {
        AR_CUDA_CHECK(cudaMemcpyAsync(y, x, n * (y16 ? 2 : sizeof(float)), cudaMemcpyDeviceToDevice,
                                      ar_cuda_stream()));
        return;
    }
    typedef __nv_bfloat16 bf;
    if (y16)
        convert_kernel<bf, float><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>((bf *)y, x, n);
    else
        convert_kernel<float, bf><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(y, (const bf *)x, n);
    AR_CUDA_LAUNCHED();
}

/* y += x, each fp32 or bf16 storage: the sum in fp32, rounded once into y
 * where y is stored */
template <typename Y, typename X> __global__ static void add_kernel(Y *y, const X *x, size_t n)
{
    GRID_STRIDE(i, n)
    ar_store(&y[i], ar_value(y[i]) + ar_value(x[i]));
}

/* y *= a */
__global__ static void scale_kernel(float *y, float a, size_t n)
{
    GRID_STRIDE(i, n)
    y[i] *= a;
}

void cuda_add(float *y, const float *x, size_t n)
{
    if (!n)
        return;
    cudaStream_t st = ar_cuda_stream();
    unsigned nb = flat_blocks(n);
    typedef __nv_bfloat16 bf;
    switch (stored16(y) * 2 + stored16(x)) {
    case 0: add_kernel<float, float><<<nb, BS, 0, st>>>(y, x, n); break;
    case 1: add_kernel<float, bf><<<nb, BS, 0, st>>>(y, (const bf *)x, n); break;
    case 2: add_kernel<bf, float><<<nb, BS, 0, st>>>((bf *)y, x, n); break;
    default: add_kernel<bf, bf><<<nb, BS, 0, st>>>((bf *)y, (const bf *)x, n); break;
    }
    AR_CUDA_LAUNCHED();
}

void cuda_scale(float *y, float a, size_t n)
{
    if (!n)
        return;
    scale_kernel<<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(y, a, n);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* double sums: sum_i x_i or sum_i x_i^2                                     */

/* part[b] = sum of block b's grid-stride share of x_i (sq: x_i^2), in
 * double; x fp32, or bf16 storage (sumsq) */
template <typename X> __global__ static void sum_part_kernel(double *part, const X *x, size_t n, int sq)
{
    double s = 0.0;
    GRID_STRIDE(i, n)
    {
        double v = ar_value(x[i]);
        s += sq ? v * v : v;
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* *out = sum_b part[b] (one block) */
__global__ static void sum_final_kernel(double *out, const double *part, int np)
{
    double s = 0.0;
    for (int b = threadIdx.x; b < np; b += blockDim.x)
        s += part[b];
    s = block_sum_d(s);
    if (threadIdx.x == 0)
        *out = s;
}

/* Blocks of pass one: a function of n only, so the sum is reproducible. */
static size_t sum_blocks(size_t n)
{
    size_t nb = (n + (size_t)RED_BS * 4 - 1) / ((size_t)RED_BS * 4);
    return nb > RED_MAXB ? RED_MAXB : nb;
}

/* *out (device) = the sum, from the nb partials at part (device scratch) */
static void sum_into(double *out, double *part, const float *x, size_t n, int sq)
{
    cudaStream_t st = ar_cuda_stream();
    size_t nb = sum_blocks(n);
    if (stored16(x))
        sum_part_kernel<__nv_bfloat16><<<(unsigned)nb, RED_BS, 0, st>>>(part, (const __nv_bfloat16 *)x, n, sq);
    else
        sum_part_kernel<float><<<(unsigned)nb, RED_BS, 0, st>>>(part, x, n, sq);
    AR_CUDA_LAUNCHED();
    sum_final_kernel<<<1, RED_BS, 0, st>>>(out, part, (int)nb);
    AR_CUDA_LAUNCHED();
}

/* *out (device) = the sum, left on the device */
static void sum_double_to(double *out, const float *x, size_t n, int sq)
{
    if (!n) {
        AR_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), ar_cuda_stream()));
        return;
    }
    sum_into(out, (double *)ar_cu_ws(CU_WS_RED, sum_blocks(n) * sizeof(double)), x, n, sq);
}

/* The same sum read on the host: waits for the stream. */
static double sum_double(const float *x, size_t n, int sq)
{
    if (!n)
        return 0.0;
    double *part = (double *)ar_cu_ws(CU_WS_RED, (sum_blocks(n) + 1) * sizeof(double));
    sum_into(part, part + 1, x, n, sq);
    double r = 0.0;
    cudaStream_t st = ar_cuda_stream();
    AR_CUDA_CHECK(cudaMemcpyAsync(&r, part, sizeof r, cudaMemcpyDeviceToHost, st));
    AR_CUDA_CHECK(cudaStreamSynchronize(st));
    return r;
}

/* returns sum_i x_i^2 (accumulated in double); x fp32 or bf16 storage */
double cuda_sumsq(const float *x, size_t n) { return sum_double(x, n, 1); }

/* out[c] = sum of x_i^2 over chunk c, one block per chunk (its threads
 * stride the chunk, then block_sum_d): a fixed order, so reproducible */
__global__ static void sumsq_chunks_kernel(double *out, const float *x, size_t n, size_t chunk)
{
    size_t lo = (size_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double v = x[i];
        s += v * v;
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0)
        out[blockIdx.x] = s;
}

/* asynchronous: the sums stay on the device */
void cuda_sumsq_chunks(double *out, const float *x, size_t n, size_t chunk)
{
    size_t nc = (n + chunk - 1) / chunk;
    if (!nc)
        return;
    sumsq_chunks_kernel<<<(unsigned)nc, RED_BS, 0, ar_cuda_stream()>>>(out, x, n, chunk);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                 */

/* out[i,:] = wte[tok[i],:]    one block per token; out fp32 or bf16
 * storage (rounded) */
template <typename O>
__global__ static void embedding_fwd_kernel(O *out, const int32_t *tok, const float *wte, int d)
{
    size_t i = blockIdx.x;
    const float *src = wte + (size_t)tok[i] * d;
    O *dst = out + i * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
        ar_store(&dst[j], src[j]);
}

void cuda_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d)
{
    ar_cu_no_bf16_storage("embedding_fwd", "'wte'", wte);
    if (N <= 0 || d <= 0)
        return;
    typedef __nv_bfloat16 bf;
    if (stored16(out))
        embedding_fwd_kernel<bf><<<N, row_threads(d), 0, ar_cuda_stream()>>>((bf *)out, tok, wte, d);
    else
        embedding_fwd_kernel<float><<<N, row_threads(d), 0, ar_cuda_stream()>>>(out, tok, wte, d);
    AR_CUDA_LAUNCHED();
}

__global__ static void iota_kernel(int32_t *v, int n)
{
    GRID_STRIDE(i, (size_t)n)
    v[i] = (int32_t)i;
}

/* dwte[tok[i],:] += dout[i,:] over the tokens sorted stably by id
 * (key = sorted ids, idx = their positions): block p starts a run of equal
 * ids (or exits) and adds the run's rows in position order, one add at a
 * time onto dwte's value, the CPU backend's order exactly. */
__global__ static void embedding_bwd_kernel(float *dwte, const float *dout, const int32_t *key,
                                            const int32_t *idx, int N, int d)
{
    int p = blockIdx.x;
    int t = key[p];
    if (p > 0 && key[p - 1] == t)
        return;
    float *dst = dwte + (size_t)t * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float acc = dst[j];
        for (int q = p; q < N && key[q] == t; q++)
            acc += dout[(size_t)idx[q] * d + j];
        dst[j] = acc;
    }
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Deterministic without atomics: a stable radix sort of (tok[i], i) puts
 * repeated tokens next to each other in position order, then one block per
 * distinct token sums its rows.  Workspace: sorted keys, positions in and
 * out, cub's scratch. */
void cuda_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d)
{
    if (N <= 0 || d <= 0)
        return;
    cudaStream_t st = ar_cuda_stream();
    size_t tmp = 0;
    AR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, tmp, tok, (int32_t *)NULL,
                                                  (const int32_t *)NULL, (int32_t *)NULL, N, 0,
                                                  32, st));
    size_t arr = align256((size_t)N * sizeof(int32_t));
    char *ws = (char *)ar_cu_ws(CU_WS_SORT, 3 * arr + tmp);
    int32_t *key = (int32_t *)ws, *pos = (int32_t *)(ws + arr), *idx = (int32_t *)(ws + 2 * arr);
    iota_kernel<<<flat_blocks((size_t)N), BS, 0, st>>>(pos, N);
    AR_CUDA_LAUNCHED();
    AR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + 3 * arr, tmp, tok, key, pos, idx, N, 0, 32,
                                                  st));
    embedding_bwd_kernel<<<N, row_threads(d), 0, st>>>(dwte, dout, key, idx, N, d);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

/* rstd[i] = 1/sqrt(mean_j x[i,j]^2 + eps);  out[i,j] = x[i,j]*rstd[i]*g[j]
 * one warp per row */
/* out and x each fp32, or bf16 storage where o16, x16 (lib/backend.h,
 * alloc_act) */
__global__ static void rmsnorm_fwd_kernel(void *out, int o16, float *rstd, const float *x, int x16, const float *g,
                                          int N, int d)
{
    int i = blockIdx.x * ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (i >= N)
        return;
    size_t o = (size_t)i * d;
    float ss = 0.0f;
    for (int j = lane; j < d; j += 32) {
        float v = ar_value_at(x, x16, o + j);
        ss += v * v;
    }
    ss = ar_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / d + AR_RMS_EPS);
    if (lane == 0)
        rstd[i] = r;
    for (int j = lane; j < d; j += 32)
        ar_store_at(out, o16, o + j, ar_value_at(x, x16, o + j) * r * g[j]);
}

void cuda_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d)
{
    if (N <= 0 || d <= 0)
        return;
    ar_cu_fp32_only("rmsnorm_fwd", {{"'rstd'", rstd}, {"'g'", g}});
    rmsnorm_fwd_kernel<<<(N + ROWS - 1) / ROWS, ROWS * 32, 0, ar_cuda_stream()>>>(out, stored16(out), rstd, x,
                                                                                   stored16(x), g, N, d);
    AR_CUDA_LAUNCHED();
}

/* xh = x*rstd, gy = g*dout:  dx[i,:] += rstd[i] * (gy - xh * mean_j(gy*xh))
 * i.e. with m = rstd * sum_j g dout x / d:  dx += r (g dout - x r m)
 * (overwrite: dx = ...).  one warp per row; x fp32 or bf16 storage (x16) */
__global__ static void rmsnorm_bwd_dx_kernel(float *dx, const float *dout, const float *x, int x16,
                                             const float *g, const float *rstd, int overwrite,
                                             int N, int d)
{
    int i = blockIdx.x * ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (i >= N)
        return;
    size_t o = (size_t)i * d;
    const float *doi = dout + o;
    float *dxi = dx + o;
    float r = rstd[i];
    float dot = 0.0f;
    for (int j = lane; j < d; j += 32)
        dot += g[j] * doi[j] * ar_value_at(x, x16, o + j);
    dot = ar_warp_sum(dot) * r;
    float m = dot / d;
    for (int j = lane; j < d; j += 32) {
        float v = r * (g[j] * doi[j] - ar_value_at(x, x16, o + j) * r * m);
        dxi[j] = overwrite ? v : dxi[j] + v;
    }
}

/* part[c,j] = sum_{i in chunk c} dout[i,j] x[i,j] rstd[i]   (double)
 * grid: x over columns, y over chunks of `rows` rows */
__global__ static void rmsnorm_dg_part_kernel(double *part, const float *dout, const float *x, int x16,
                                              const float *rstd, int N, int d, int rows)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
    if (j >= d)
        return;
    int i0 = c * rows, i1 = i0 + rows < N ? i0 + rows : N;
    double acc = 0.0;
    for (int i = i0; i < i1; i++) {
        size_t o = (size_t)i * d + j;
        acc += dout[o] * ar_value_at(x, x16, o) * rstd[i];
    }
    part[(size_t)c * d + j] = acc;
}

/* dg[j] += sum_c part[c,j], chunks in order */
__global__ static void rmsnorm_dg_final_kernel(float *dg, const double *part, int nch, int d)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d)
        return;
    double s = 0.0;
    for (int c = 0; c < nch; c++)
        s += part[(size_t)c * d + j];
    dg[j] += (float)s;
}

/* dx first, then dg (the CPU backend's order); x fp32 or bf16 storage */
void cuda_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x, const float *g,
                      const float *rstd, int overwrite, int N, int d)
{
    ar_cu_fp32_only("rmsnorm_bwd", {{"'dx'", dx}, {"'dg'", dg}, {"'dout'", dout}, {"'g'", g}, {"'rstd'", rstd}});
    if (N <= 0 || d <= 0)
        return;
    cudaStream_t st = ar_cuda_stream();
    int x16 = stored16(x);
    rmsnorm_bwd_dx_kernel<<<(N + ROWS - 1) / ROWS, ROWS * 32, 0, st>>>(dx, dout, x, x16, g, rstd,
                                                                        overwrite, N, d);
    AR_CUDA_LAUNCHED();
    int nch = (N + DG_MINROWS - 1) / DG_MINROWS;
    if (nch > DG_MAXCH)
        nch = DG_MAXCH;
    int rows = (N + nch - 1) / nch;
    nch = (N + rows - 1) / rows;
    double *part = (double *)ar_cu_ws(CU_WS_PART, (size_t)nch * d * sizeof(double));
    dim3 grid((unsigned)((d + BS - 1) / BS), (unsigned)nch);
    rmsnorm_dg_part_kernel<<<grid, BS, 0, st>>>(part, dout, x, x16, rstd, N, d, rows);
    AR_CUDA_LAUNCHED();
    rmsnorm_dg_final_kernel<<<(d + BS - 1) / BS, BS, 0, st>>>(dg, part, nch, d);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* rotary position embedding (rotate-half, theta 10000)                      */

/* tab[t,j] = (cos a, sin a), a = t * 10000^(-2j/hd), in double rounded to
 * float as the CPU backend's table */
__global__ static void rope_table_kernel(float2 *tab, int T, int h2, int hd)
{
    GRID_STRIDE(i, (size_t)T * h2)
    {
        int t = (int)(i / h2), j = (int)(i % h2);
        double a = (double)t * pow(10000.0, -2.0 * j / hd);
        tab[i] = make_float2((float)cos(a), (float)sin(a));
    }
}

/* For every pair (j, j+hd/2) of every head of x (B x T x nh x hd), with
 * c = cos a, s = dir * sin a (dir -1: the inverse rotation):
 *   x'_j = x_j c - x_{j+hd/2} s ;  x'_{j+hd/2} = x_j s + x_{j+hd/2} c
 * one thread per pair; i = ((bt*nh + h)*h2 + j), t = bt mod T */
template <typename S>
__global__ static void rope_kernel(S *x, const float2 *tab, size_t pairs, int T, int nh, int hd, float dir)
{
    int h2 = hd / 2;
    GRID_STRIDE(i, pairs)
    {
        int j = (int)(i % h2);
        size_t row = i / h2; /* bt*nh + h */
        int t = (int)((row / nh) % T);
        float2 cs = tab[(size_t)t * h2 + j];
        float c = cs.x, s = dir * cs.y;
        S *xh = x + row * hd;
        float x0 = ar_value(xh[j]), x1 = ar_value(xh[j + h2]);
        ar_store(xh + j, x0 * c - x1 * s);
        ar_store(xh + j + h2, x0 * s + x1 * c);
    }
}

/* The table lives in its own workspace slot and is rebuilt only when
 * (T, hd) changes; a larger table means a change, so a regrown slot is
 * always refilled. */
static void rope_apply(float *x, int B, int T, int nh, int hd, float dir)
{
    static int cT = -1, chd = -1;
    int h2 = hd / 2;
    if (B <= 0 || T <= 0 || nh <= 0 || h2 <= 0)
        return;
    cudaStream_t st = ar_cuda_stream();
    size_t ntab = (size_t)T * h2;
    float2 *tab = (float2 *)ar_cu_ws(CU_WS_ROPE, ntab * sizeof(float2));
    if (T != cT || hd != chd) {
        rope_table_kernel<<<flat_blocks(ntab), BS, 0, st>>>(tab, T, h2, hd);
        AR_CUDA_LAUNCHED();
        cT = T, chd = hd;
    }
    size_t pairs = (size_t)B * T * nh * h2;
    if (ar_cu_bf16_stored(x))
        rope_kernel<__nv_bfloat16><<<flat_blocks(pairs), BS, 0, st>>>((__nv_bfloat16 *)x, tab, pairs, T, nh, hd, dir);
    else
        rope_kernel<float><<<flat_blocks(pairs), BS, 0, st>>>(x, tab, pairs, T, nh, hd, dir);
    AR_CUDA_LAUNCHED();
}

/* x may be bf16 storage (q and k of the model under bf16): the rotation
 * in fp32, the result rounded to bf16 */
void cuda_rope_fwd(float *x, int B, int T, int nh, int hd) { rope_apply(x, B, T, nh, hd, 1.0f); }

/* the rotation is orthogonal: its inverse (angle -a) is the backward (dx
 * a gradient: fp32) */
void cuda_rope_bwd(float *dx, int B, int T, int nh, int hd)
{
    ar_cu_no_bf16_storage("rope_bwd", "'dx'", dx);
    rope_apply(dx, B, T, nh, hd, -1.0f);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU gate                                                               */

/* out = silu(gate) * up,  silu(a) = a*sigmoid(a)     (=)
 * gate, up and out fp32 (S = float) or all bf16 storage (S = bf16: read
 * as bf16, the product in fp32, out rounded to bf16) */
template <typename S> __global__ static void swiglu_fwd_kernel(S *out, const S *gate, const S *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float a = ar_value(gate[i]);
        float sg = 1.0f / (1.0f + expf(-a));
        ar_store(out + i, a * sg * ar_value(up[i]));
    }
}

/* (=) dgate = dout*up*sigmoid(a)*(1 + a*(1-sigmoid(a))),  dup = dout*silu(a)
 * (gate and up fp32 or bf16 storage; the gradients fp32) */
template <typename S>
__global__ static void swiglu_bwd_kernel(float *dgate, float *dup, const float *dout, const S *gate, const S *up,
                                         size_t n)
{
    GRID_STRIDE(i, n)
    {
        float a = ar_value(gate[i]), u = ar_value(up[i]), go = dout[i];
        float sg = 1.0f / (1.0f + expf(-a));
        dgate[i] = go * u * sg * (1.0f + a * (1.0f - sg));
        dup[i] = go * a * sg;
    }
}

/* Where gate and up are bf16 storage (lib/backend.h alloc_act), and out
 * in the forward too: all of them, or none. */
static int swiglu_storage(const char *op, const void *gate, const void *up, const void *out)
{
    int g = ar_cu_bf16_stored(gate), u = ar_cu_bf16_stored(up), o = out ? ar_cu_bf16_stored(out) : g;
    if (g != u || g != o)
        ar_cuda_die(op, out ? "'out', 'gate' and 'up' must all be bf16 storage (alloc_act) or none of them"
                            : "'gate' and 'up' must both be bf16 storage (alloc_act) or neither",
                    __FILE__, __LINE__);
    return g;
}

void cuda_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    if (!n)
        return;
    if (swiglu_storage("swiglu_fwd", gate, up, out))
        swiglu_fwd_kernel<__nv_bfloat16><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(
            (__nv_bfloat16 *)out, (const __nv_bfloat16 *)gate, (const __nv_bfloat16 *)up, n);
    else
        swiglu_fwd_kernel<float><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(out, gate, up, n);
    AR_CUDA_LAUNCHED();
}

void cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, size_t n)
{
    if (!n)
        return;
    ar_cu_fp32_only("swiglu_bwd", {{"'dgate'", dgate}, {"'dup'", dup}, {"'dout'", dout}});
    if (swiglu_storage("swiglu_bwd", gate, up, NULL))
        swiglu_bwd_kernel<__nv_bfloat16><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(
            dgate, dup, dout, (const __nv_bfloat16 *)gate, (const __nv_bfloat16 *)up, n);
    else
        swiglu_bwd_kernel<float><<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(dgate, dup, dout, gate, up, n);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* softmax cross-entropy                                                     */

/* A row's W-float groups (W = 4: float4, where V is a multiple of 4 and the
 * buffers 16-byte aligned, so every row is; else W = 1), XENT_U of them a
 * thread at a time: the kernels are bound by memory, and a thread issues
 * a batch's loads before it uses the first (a loop that uses each load
 * before the next waits for the memory once a group). */
#define XENT_U 4
template <int W> struct xent_group;
template <> struct xent_group<1> {
    float x[1];
    __device__ void load(const float *p) { x[0] = *p; }
    __device__ void store(float *p) const { *p = x[0]; }
};
template <> struct xent_group<4> {
    float x[4];
    __device__ void load(const float *p)
    {
        float4 v = *(const float4 *)p;
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    }
    __device__ void store(float *p) const { *(float4 *)p = make_float4(x[0], x[1], x[2], x[3]); }
};

/* g[u] = the group at c0 + u step of row z, for those before V (the rest
 * hold fill) */
template <int W>
__device__ static inline void xent_batch(xent_group<W> (&g)[XENT_U], const float *z, int c0, int step, int V,
                                         float fill)
{
#pragma unroll
    for (int u = 0; u < XENT_U; u++) {
        int c = c0 + u * step;
        if (c < V)
            g[u].load(z + c);
        else
            for (int w = 0; w < W; w++)
                g[u].x[w] = fill;
    }
}

static int xent_width(const void *a, const void *b, int V)
{
    return V % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 ? 4 : 1;
}

/* probs = softmax(logits) (=);  losses[i] = log(sum) - (z_t - max), with
 * sum = sum_c exp(z_c - max) in double.  One block per row, three passes
 * over it: the max, the sum, then p_c = exp(z_c - max) / sum written once
 * (GRAD: scale (p_c - [c == t]) instead, as xent_bwd_kernel forms it from
 * p_c, for xent_fwd_bwd).  Every thread has read z_t before the
 * reductions' barriers, and each p_c is written by the thread that read
 * z_c, so probs may even alias logits. */
template <int W, int GRAD>
__global__ static void xent_fwd_kernel(float *losses, float *probs, const float *logits, const int32_t *targets, int V,
                                       float scale)
{
    size_t i = blockIdx.x;
    const float *z = logits + i * V;
    float *p = probs + i * V;
    int t = targets[i];
    float zt = z[t];
    int step = (int)blockDim.x * W, c0 = threadIdx.x * W;
    xent_group<W> g[XENT_U];
    float mx = -INFINITY;
    for (int c = c0; c < V; c += XENT_U * step) {
        xent_batch(g, z, c, step, V, -INFINITY);
#pragma unroll
        for (int u = 0; u < XENT_U; u++)
            for (int w = 0; w < W; w++)
                mx = fmaxf(mx, g[u].x[w]);
    }
    mx = block_max(mx);
    double sum = 0.0;
    for (int c = c0; c < V; c += XENT_U * step) {
        xent_batch(g, z, c, step, V, -INFINITY);
#pragma unroll
        for (int u = 0; u < XENT_U; u++)
            for (int w = 0; w < W; w++)
                sum += expf(g[u].x[w] - mx); /* 0 for the fill */
    }
    sum = block_sum_d(sum);
    float inv = (float)(1.0 / sum);
    for (int c = c0; c < V; c += XENT_U * step) {
        xent_batch(g, z, c, step, V, 0.0f);
#pragma unroll
        for (int u = 0; u < XENT_U; u++) {
            if (c + u * step >= V)
                break;
            for (int w = 0; w < W; w++) {
                float pc = expf(g[u].x[w] - mx) * inv;
                g[u].x[w] = !GRAD ? pc : c + u * step + w == t ? scale * (pc - 1.0f) : scale * pc;
            }
            g[u].store(p + c + u * step);
        }
    }
    if (threadIdx.x == 0)
        losses[i] = (float)(log(sum) - ((double)zt - mx));
}

/* the forward's rows (grad: xent_fwd_bwd's), *sum = sum_i losses[i]
 * (double) left on the device */
static void xent_rows(float *losses, float *out, const float *logits, const int32_t *targets, int N, int V,
                      float scale, int grad, double *sum)
{
    if (N > 0 && V > 0) {
        unsigned bs = xent_threads(V);
        int w4 = xent_width(out, logits, V) == 4;
        if (w4 && grad)
            xent_fwd_kernel<4, 1><<<N, bs, 0, ar_cuda_stream()>>>(losses, out, logits, targets, V, scale);
        else if (w4)
            xent_fwd_kernel<4, 0><<<N, bs, 0, ar_cuda_stream()>>>(losses, out, logits, targets, V, scale);
        else if (grad)
            xent_fwd_kernel<1, 1><<<N, bs, 0, ar_cuda_stream()>>>(losses, out, logits, targets, V, scale);
        else
            xent_fwd_kernel<1, 0><<<N, bs, 0, ar_cuda_stream()>>>(losses, out, logits, targets, V, scale);
        AR_CUDA_LAUNCHED();
    }
    sum_double_to(sum, losses, N > 0 ? (size_t)N : 0, 0);
}

void cuda_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V,
                   double *sum)
{
    xent_rows(losses, probs, logits, targets, N, V, 0.0f, 0, sum);
}

void cuda_xent_fwd_bwd(float *losses, float *dlogits, const float *logits, const int32_t *targets, int N, int V,
                       float scale, double *sum)
{
    xent_rows(losses, dlogits, logits, targets, N, V, scale, 1, sum);
}

/* (=) dlogits = scale * (probs - onehot(targets)); element by element, so
 * dlogits may alias probs.  One block per row. */
template <int W>
__global__ static void xent_bwd_kernel(float *dlogits, const float *probs, const int32_t *targets, float scale, int V)
{
    size_t i = blockIdx.x;
    int t = targets[i], step = (int)blockDim.x * W;
    const float *p = probs + i * V;
    float *dz = dlogits + i * V;
    xent_group<W> g[XENT_U];
    for (int c = threadIdx.x * W; c < V; c += XENT_U * step) {
        xent_batch(g, p, c, step, V, 0.0f);
#pragma unroll
        for (int u = 0; u < XENT_U; u++) {
            int cu = c + u * step;
            if (cu >= V)
                break;
            for (int w = 0; w < W; w++)
                g[u].x[w] = cu + w == t ? scale * (g[u].x[w] - 1.0f) : scale * g[u].x[w];
            g[u].store(dz + cu);
        }
    }
}

void cuda_xent_bwd(float *dlogits, const float *probs, const int32_t *targets, float scale, int N,
                   int V)
{
    if (N <= 0 || V <= 0)
        return;
    unsigned bs = xent_threads(V);
    if (xent_width(dlogits, probs, V) == 4)
        xent_bwd_kernel<4><<<N, bs, 0, ar_cuda_stream()>>>(dlogits, probs, targets, scale, V);
    else
        xent_bwd_kernel<1><<<N, bs, 0, ar_cuda_stream()>>>(dlogits, probs, targets, scale, V);
    AR_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                     */

/* Nothing where rec->skip; else, with g' = rec->gscale g:
 * m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 * p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * p ),  bc = rec's 1 - b^t;
 * rec->bad_param = 1 where a new p is not finite (threads that find one
 * all store the same 1: no atomics needed) */
__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                                    float b2, float eps, float wd, ar_step_rec *rec)
{
    if (rec->skip)
        return;
    float gscale = rec->gscale, bc1 = rec->bc1, bc2 = rec->bc2;
    int bad = 0;
    GRID_STRIDE(i, n)
    {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1;
        float vh = vi / bc2;
        float pi = p[i] - lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
        p[i] = pi;
        bad |= !isfinite(pi);
    }
    if (bad)
        rec->bad_param = 1;
}

void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, const ar_adamw_hparams *s,
                ar_step_rec *rec)
{
    if (!n)
        return;
    adamw_kernel<<<flat_blocks(n), BS, 0, ar_cuda_stream()>>>(p, g, m, v, n, s->lr, s->b1, s->b2, s->eps, s->wd,
                                                              rec);
    AR_CUDA_LAUNCHED();
}

/* The step's record (lib/ops.def), one thread, in the host's order and
 * arithmetic: a few thousand additions a step, and no wait for the host. */
__global__ static void step_check_kernel(ar_step_check c, ar_step_rec *rec)
{
    double loss = 0, ss = 0;
    for (int a = 0; a < c.A; a++) {
        double sum = 0;
        for (int k = 0; k < c.nc; k++)
            sum += c.parts[(size_t)a * c.nc + k];
        loss += sum / c.N / c.A;
    }
    for (size_t i = 0; i < c.nsums; i++)
        ss += c.sums[i];
    double gnorm = c.norm_given ? c.sums[0] : sqrt(ss);
    int skip = !isfinite(loss) || !isfinite(gnorm);
    rec->loss = loss;
    rec->gnorm = gnorm;
    rec->skip = skip;
    rec->gscale = c.clip > 0 && gnorm > c.clip ? (float)(c.clip / (gnorm + 1e-6)) : 1.0f;
    rec->t += !skip;
    rec->bc1 = (float)(1.0 - pow((double)c.b1, (double)rec->t));
    rec->bc2 = (float)(1.0 - pow((double)c.b2, (double)rec->t));
    rec->bad_param = 0;
}

void cuda_step_check(const ar_step_check *c, ar_step_rec *rec)
{
    step_check_kernel<<<1, 1, 0, ar_cuda_stream()>>>(*c, rec);
    AR_CUDA_LAUNCHED();
}
