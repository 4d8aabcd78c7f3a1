/* Causal multi-head attention on the GPU: the four products per head on
 * cuBLAS (strided-batched, see the mapping in matmul_cuda.cu), the causal
 * softmax and its backward as warp-per-row kernels.
 *
 * q,k,v,y: B x T x C (C = nh*hd); att, datt: B x nh x T x T.  Head (b,h)
 * of q is the T x hd matrix at q + b*T*C + h*hd, leading dimension C; its
 * att block is at att + (b*nh + h)*T*T, leading dimension T.  One strided
 * batch cannot span both b and h (the offset is not linear in b*nh + h), so
 * the smaller of B, nh is a host loop and the other the batch.
 *
 * The products run over the full T x T block: the scores above the
 * diagonal are computed and then discarded by the softmax, which writes
 * exact zeros there, so att v and the backward products add only zero
 * terms for the masked positions. */
#include "ops_cuda.h"

#include "cuda_util.h"
#include "matmul_cuda.h"

#include <math.h>

/* rows (query positions) per block of the softmax kernels: one warp each */
#define ROWS 8

/* The host loop / strided batch split of the B*nh heads. */
typedef struct {
    int loop, batch;           /* trip count of the host loop, batch count */
    size_t lqkv, latt;         /* offsets per loop step: q/k/v/y, att */
    long long sqkv, satt;      /* batch strides: q/k/v/y, att */
} heads;

static heads split_heads(int B, int T, int nh, int hd)
{
    size_t C = (size_t)nh * hd, TT = (size_t)T * T;
    heads s;
    if (B <= nh) { /* loop over b, batch over h */
        s.loop = B, s.batch = nh;
        s.lqkv = (size_t)T * C, s.latt = (size_t)nh * TT;
        s.sqkv = hd, s.satt = (long long)TT;
    } else { /* loop over h, batch over b */
        s.loop = nh, s.batch = B;
        s.lqkv = (size_t)hd, s.latt = TT;
        s.sqkv = (long long)T * C, s.satt = (long long)nh * TT;
    }
    return s;
}

/* Row r of att (r = (b*nh + h)*T + t) holds the scores of query t:
 *   att[r,c] = exp(s_c - max) / sum_{c'<=t} exp(s_c' - max)  for c <= t,
 *   att[r,c] = 0                                               for c > t. */
__global__ static void causal_softmax_kernel(float *att, size_t rows, int T)
{
    size_t r = (size_t)blockIdx.x * ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int t = (int)(r % (size_t)T);
    float *a = att + r * T;
    float mx = -INFINITY;
    for (int c = lane; c <= t; c += 32)
        mx = fmaxf(mx, a[c]);
    mx = ar_warp_max(mx);
    float sum = 0.0f;
    for (int c = lane; c <= t; c += 32) {
        float e = expf(a[c] - mx);
        a[c] = e;
        sum += e;
    }
    float inv = 1.0f / ar_warp_sum(sum);
    for (int c = lane; c < T; c += 32)
        a[c] = c <= t ? a[c] * inv : 0.0f;
}

/* In place on D = dA (= dy v^T), row r with query t:
 *   ds[c] = att[c] (dA[c] - sum_{c'<=t} dA[c'] att[c']) * scale   for c <= t,
 *   ds[c] = 0 for c > t (dq = ds k and dk = ds^T q read whole rows). */
__global__ static void causal_softmax_bwd_kernel(float *D, const float *att, size_t rows, int T,
                                                 float scale)
{
    size_t r = (size_t)blockIdx.x * ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int t = (int)(r % (size_t)T);
    float *d = D + r * T;
    const float *a = att + r * T;
    float dot = 0.0f;
    for (int c = lane; c <= t; c += 32)
        dot += d[c] * a[c];
    dot = ar_warp_sum(dot);
    for (int c = lane; c < T; c += 32)
        d[c] = c <= t ? a[c] * (d[c] - dot) * scale : 0.0f;
}

static unsigned row_blocks(size_t rows) { return (unsigned)((rows + ROWS - 1) / ROWS); }

/* s = q k^T / sqrt(hd) (causal), att = softmax(s), y = att v        (=) */
void cuda_attention_fwd(const ar_attention *a, float *y)
{
    const float *q = a->q, *k = a->k, *v = a->v;
    int B = a->B, T = a->T, nh = a->nh, hd = a->hd;
    float *att = a->att;
    if (B <= 0 || T <= 0 || nh <= 0 || hd <= 0)
        return;
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    heads s = split_heads(B, T, nh, hd);
    /* att = scale q k^T   (T x T per head) */
    for (int l = 0; l < s.loop; l++)
        ar_cu_gemm_batched(0, 1, T, T, hd, scale, q + l * s.lqkv, C, s.sqkv, k + l * s.lqkv, C,
                           s.sqkv, 0.0f, att + l * s.latt, T, s.satt, s.batch);
    size_t rows = (size_t)B * nh * T;
    causal_softmax_kernel<<<row_blocks(rows), ROWS * 32, 0, ar_cuda_stream()>>>(att, rows, T);
    AR_CUDA_LAUNCHED();
    /* y = att v   (T x hd per head) */
    for (int l = 0; l < s.loop; l++)
        ar_cu_gemm_batched(0, 0, T, hd, T, 1.0f, att + l * s.latt, T, s.satt, v + l * s.lqkv, C,
                           s.sqkv, 0.0f, y + l * s.lqkv, C, s.sqkv, s.batch);
}

/* (=, overwrites dq dk dv; datt is scratch):
 *   dv = att^T dy;  dA = dy v^T;  ds = att*(dA - rowsum(dA*att)) / sqrt(hd);
 *   dq = ds k;  dk = ds^T q */
void cuda_attention_bwd(const ar_attention *a, const float *dy, float *dq, float *dk, float *dv,
                        float *datt)
{
    const float *q = a->q, *k = a->k, *v = a->v;
    int B = a->B, T = a->T, nh = a->nh, hd = a->hd;
    const float *att = a->att;
    if (B <= 0 || T <= 0 || nh <= 0 || hd <= 0)
        return;
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    heads s = split_heads(B, T, nh, hd);
    for (int l = 0; l < s.loop; l++) {
        size_t o = l * s.lqkv, oa = l * s.latt;
        /* dv = att^T dy   (att stored T x T, transposed) */
        ar_cu_gemm_batched(1, 0, T, hd, T, 1.0f, att + oa, T, s.satt, dy + o, C, s.sqkv, 0.0f,
                           dv + o, C, s.sqkv, s.batch);
        /* dA = dy v^T */
        ar_cu_gemm_batched(0, 1, T, T, hd, 1.0f, dy + o, C, s.sqkv, v + o, C, s.sqkv, 0.0f,
                           datt + oa, T, s.satt, s.batch);
    }
    size_t rows = (size_t)B * nh * T;
    causal_softmax_bwd_kernel<<<row_blocks(rows), ROWS * 32, 0, ar_cuda_stream()>>>(datt, att,
                                                                                    rows, T, scale);
    AR_CUDA_LAUNCHED();
    for (int l = 0; l < s.loop; l++) {
        size_t o = l * s.lqkv, oa = l * s.latt;
        /* dq = ds k */
        ar_cu_gemm_batched(0, 0, T, hd, T, 1.0f, datt + oa, T, s.satt, k + o, C, s.sqkv, 0.0f,
                           dq + o, C, s.sqkv, s.batch);
        /* dk = ds^T q */
        ar_cu_gemm_batched(1, 0, T, hd, T, 1.0f, datt + oa, T, s.satt, q + o, C, s.sqkv, 0.0f,
                           dk + o, C, s.sqkv, s.batch);
    }
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
