/* The general depth mixer on the GPU: depth_mix_fwd/bwd, one-phase depth
 * mixing with sigmoid scores, keys without RMSNorm, per-token queries,
 * static logits, uniform weights and multiple heads (lib/residual_mixer.c).
 * The math is in lib/ops.def; the CPU versions are in lib/cpu/mixer_cpu.c;
 * the row-block layout is rows_cuda.h. */
#include "ops_cuda.h"

#include <math.h>

#include "../backend.h"
#include "rows_cuda.h"

#define SMEM_DEFAULT 49152 /* dynamic shared memory without opt-in */

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

/* Token i (one block), H heads over channel groups of e = d/H, q = w +
 * i*wstride (NULL without w):
 *   g: r_s = rstd(x_s) (= rstd[i,s]), key k_s = x_s r_s g; else k_s = x_s
 *   logit[a,s] = theta[s] | sum_{j in G_a} q_j k_s[j] | 0   (sa, shared H x n)
 *   alpha[i,a,:] = softmax (sum in double, as the CPU) or sigmoid, stored
 *   source-major (lib/op_args.h: at (i n + s) H + a)
 *   h[i,j] = sum_s alpha[i,a(j),s] x_s[j]
 * Scratch (shared): sa (H*n, head-major), hs (H). */
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
        float *ah = sa + a * n, *out = alpha + i * H * n + a; /* source s at out[s H] */
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                out[(size_t)s * H] = ah[s] = 1.0f / (1.0f + expf(-ah[s]));
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
            out[(size_t)s * H] = ah[s] = (float)(ah[s] / sum);
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

/* dl of one token, a head a thread: alpha (da - sum_s alpha da) (softmax,
 * sum in double) | da alpha (1 - alpha); al, da and dl are H x n. */
__device__ __forceinline__ void mix_dlogits(float *dl, const float *al, const float *da, int n, int H,
                                            int sigmoid, int tid, int T)
{
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
}

/* The block's partials into pb (2d + n floats): dw's d, dg's d, dtheta's
 * n; each thread its own columns. */
__device__ __forceinline__ void store_partials(float *pb, const float *pw, const float *pg, const float *pt,
                                               int n, int d, int tid, int T)
{
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

/* Backward, tokens [b tpb, (b+1) tpb) of block b; per token, q as forward
 * (NULL with theta), r_s = rstd[i,s] with g (else 1), a = a(j):
 *   da[a,s] = sum_{j in G_a} dh_j x_s[j];  ux[a,s] = sum_{j in G_a} q_j g_j x_s[j]
 *   dl = alpha (da - sum_s alpha da) (softmax, sum in double) | da alpha (1 - alpha)
 *   dsrc[s][j] += alpha[a,s] dh_j + dl[a,s] r_s q_j g_j - (sum_a dl ux) r_s^3 x_s[j] / d
 *                 (the last two terms only as far as q and g exist)
 *   dw: shared_w: part[b, j] += dl r_s g_j x_s[j];  per token: dw[i,j] += (same)
 *   dg: part[b, d+j] += dl r_s q_j x_s[j];  dtheta: part[b, 2d+s] += sum_a dl[a,s]
 * Scratch (shared): al (alpha's row head-major), da, ux, dl (H*n each), pt
 * (n), hs (2H). */
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
        for (size_t x = tid; x < hn; x += T) /* source-major in, head-major here */
            al[(x % H) * n + x / H] = alpha[i * hn + x];
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
        mix_dlogits(dl, al, da, n, H, sigmoid, tid, T);
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
    store_partials(part + blockIdx.x * ((size_t)2 * d + n), pw, pg, pt, n, d, tid, T);
}

static size_t mix_smem(int H, int n, int bwd)
{
    size_t hn = (size_t)H * n;
    return (bwd ? 4 * hn + n + 2 * (size_t)H : hn + H) * sizeof(float);
}

extern "C" void cuda_depth_mix_fwd(const ar_depth_mix *m, float *h)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    float *alpha = m->alpha, *rstd = m->rstd;
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

extern "C" void cuda_depth_mix_bwd(const ar_depth_mix *m, float *const *dsrc, float *dw, float *dg,
                                   float *dtheta, const float *dh)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    const float *alpha = m->alpha, *rstd = m->rstd;
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
    float *part = (float *)ar_cu_ws(CU_WS_ROWS, (size_t)nb * stride * sizeof(float));
    mix_bwd_kernel<<<nb, T, smem, ar_cuda_stream()>>>(dl, part, dw, shared_w, want_dg, want_dt, dh,
                                                       alpha, rstd, sl, n, w, wstride, g, theta,
                                                       sigmoid, H, N, d, tpb);
    AR_CUDA_LAUNCHED();
    if (shared_w)
        ar_cu_reduce_add(dw, part, nb, stride, d);
    if (want_dg)
        ar_cu_reduce_add(dg, part + d, nb, stride, d);
    if (want_dt)
        ar_cu_reduce_add(dtheta, part + 2 * (size_t)d, nb, stride, n);
}

/* ------------------------------------------------------------------------ */
/* The backward in pieces (depth_mix_cdot, depth_mix_bwd_chunk).             */

/* Token i (one block): cdot[i,a] = sum_{j in G_a} dh[i,j] h[i,j]. */
__global__ void __launch_bounds__(MAXT)
mix_cdot_kernel(float *cdot, const float *dh, const float *h, int H, int d)
{
    extern __shared__ float hs[];
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x;
    float f[1][MAXV];
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        f[0][v] = j < d ? dh[i * d + j] * h[i * d + j] : 0.0f;
    }
    head_sums<1>(f, H, d / H, d, hs);
    for (int a = tid; a < H; a += T)
        cdot[i * H + a] = hs[a];
}

extern "C" void cuda_depth_mix_cdot(float *cdot, const float *dh, const float *h, int H, int N, int d)
{
    const char *op = "depth_mix_cdot";
    if (N <= 0 || d <= 0)
        return;
    check_heads(H, d, op);
    int T = row_threads(d, op);
    size_t smem = (size_t)H * sizeof(float);
    smem_opt_in((const void *)mix_cdot_kernel, smem, H, op);
    mix_cdot_kernel<<<N, T, smem, ar_cuda_stream()>>>(cdot, dh, h, H, d);
    AR_CUDA_LAUNCHED();
}

/* One mixer's part of the chunk op: mix_bwd_kernel over sources s0 <= s <
 * s1 of its list, the softmax's sum over all its sources given as cdot
 * (N x H), one shared query (wstride 0).  Scratch (shared): da, ux (H each),
 * hs (2H).  Partials per block: dw (d), dg (d), dtheta (s1 - s0). */
__global__ void __launch_bounds__(MAXT)
mix_bwd_part_kernel(mlist dsrc, float *part, int want_dt, const float *dh, const float *cdot,
                    const float *alpha, const float *rstd, clist src, int s0, int s1, int n,
                    const float *w, const float *g, const float *theta, int sigmoid, int H, int N,
                    int d, int tpb)
{
    extern __shared__ float sm[];
    float *da = sm, *ux = da + H, *hs = ux + H;
    int T = blockDim.x, tid = threadIdx.x, e = d / H, ns = s1 - s0;
    const float *q = w && !theta ? w : NULL;
    float gv[MAXV], qv[MAXV], pw[MAXV], pg[MAXV], pt = 0.0f;
    size_t stride = (size_t)2 * d + ns;
    float *pb = part + blockIdx.x * stride;
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        gv[v] = g && j < d ? g[j] : 1.0f;
        qv[v] = q && j < d ? q[j] : 0.0f;
        pw[v] = pg[v] = 0.0f;
    }
    for (int s = s0; s < s1; s++) {
        int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
        pt = 0.0f;
        for (int ii = i0; ii < i1; ii++) {
            size_t i = ii;
            const float *x = src.p[s] + i * d;
            float *dx = dsrc.p[s] ? dsrc.p[s] + i * d : NULL;
            float gy[MAXV], f[2][MAXV];
#pragma unroll
            for (int v = 0; v < MAXV; v++) {
                int j = tid + v * T;
                float xv = j < d ? x[j] : 0.0f;
                gy[v] = j < d ? dh[i * d + j] : 0.0f;
                f[0][v] = gy[v] * xv;
                f[1][v] = qv[v] * gv[v] * xv;
            }
            head_sums<2>(f, H, e, d, hs);
            for (int a = tid; a < H; a += T) {
                float as = alpha[(i * n + s) * H + a];
                float dav = hs[a];
                da[a] = sigmoid ? dav * as * (1.0f - as) : as * (dav - cdot[i * H + a]); /* dl */
                ux[a] = hs[H + a];
            }
            __syncthreads(); /* dl (in da) and ux complete */
            float r = g ? rstd[i * n + s] : 1.0f, cross = 0.0f, sdl = 0.0f;
            for (int a = 0; a < H; a++) {
                cross += da[a] * ux[a];
                sdl += da[a];
            }
            pt += sdl;
            float c3 = g ? cross * r * r * r / d : 0.0f;
#pragma unroll
            for (int v = 0; v < MAXV; v++) {
                int j = tid + v * T;
                if (j >= d)
                    continue;
                int a = j / e;
                float as = alpha[(i * n + s) * H + a], ca = da[a] * r, xv = x[j];
                if (dx)
                    dx[j] += as * gy[v] + (q ? ca * qv[v] * gv[v] : 0.0f) - c3 * xv;
                if (q) {
                    pw[v] += ca * gv[v] * xv;
                    pg[v] += ca * qv[v] * xv;
                }
            }
            __syncthreads(); /* da, ux read by all before the next token */
        }
        if (want_dt && tid == 0)
            pb[2 * d + (s - s0)] = pt;
    }
#pragma unroll
    for (int v = 0; v < MAXV; v++) {
        int j = tid + v * T;
        if (j < d) {
            pb[j] = pw[v];
            pb[d + j] = pg[v];
        }
    }
}

/* One launch per mixer, in order on the stream (so their additions into
 * the shared dsrc rows do not race): the GPU reads each shared source once
 * per mixer, as depth_mix_bwd does; the CPU op's one read per chunk is a
 * cache optimisation this version does not make. */
extern "C" void cuda_depth_mix_bwd_chunk(const ar_depth_mix_chunk *chunk, float *const *dsrc,
                                         float *const *dw, float *const *dg, float *const *dtheta,
                                         const float *const *dh, const float *const *cdot)
{
    const float *const *src = chunk->src, *const *alpha = chunk->alpha, *const *rstd = chunk->rstd;
    const float *const *w = chunk->w, *const *g = chunk->g, *const *theta = chunk->theta;
    const int *n = chunk->n;
    int s0 = chunk->s0, s1 = chunk->s1, C = chunk->C, sigmoid = chunk->sigmoid, H = chunk->H;
    int N = chunk->N, d = chunk->d;
    const char *op = "depth_mix_bwd_chunk";
    if (N <= 0 || d <= 0 || s1 <= s0 || C < 1)
        return;
    check_heads(H, d, op);
    int T = row_threads(d, op), tpb = red_tokens(N, T), nb = red_nblk(N, tpb), ns = s1 - s0;
    size_t smem = (size_t)4 * H * sizeof(float);
    smem_opt_in((const void *)mix_bwd_part_kernel, smem, H, op);
    clist sl = make_clist(src, s1, op);
    mlist dl = make_mlist(dsrc, s1, op);
    size_t stride = (size_t)2 * d + ns;
    for (int c = 0; c < C; c++) {
        int hasq = w[c] && !theta[c];
        int want_dt = theta[c] && dtheta && dtheta[c];
        /* places s + o of this mixer's list: its rows of alpha (o H floats
         * in: source-major), rstd and dtheta begun at place o, indexed by s
         * as the kernel does */
        int o = chunk->off ? chunk->off[c] : 0;
        float *part = (float *)ar_cu_ws(CU_WS_ROWS, (size_t)nb * stride * sizeof(float));
        mix_bwd_part_kernel<<<nb, T, smem, ar_cuda_stream()>>>(dl, part, want_dt, dh[c], cdot[c],
                                                                alpha[c] + (size_t)o * H,
                                                                rstd[c] ? rstd[c] + o : NULL, sl, s0, s1, n[c],
                                                                w[c], g[c], theta[c], sigmoid, H, N, d, tpb);
        AR_CUDA_LAUNCHED();
        if (hasq && dw[c])
            ar_cu_reduce_add(dw[c], part, nb, stride, d);
        if (hasq && g[c] && dg[c])
            ar_cu_reduce_add(dg[c], part + d, nb, stride, d);
        if (want_dt)
            ar_cu_reduce_add(dtheta[c] + s0 + o, part + 2 * (size_t)d, nb, stride, ns);
    }
}
