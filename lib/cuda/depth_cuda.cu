/* Depth attention on the GPU: the two-phase ops of a chunk of mixers
 * (depth_fwd_inter, depth_fwd_merge, depth_bwd_intra, depth_bwd_inter; the
 * schedule is in lib/residual_depth.c).  The math of each op is in
 * lib/ops.def; the CPU versions are in lib/cpu/depth_cpu.c; the row-block
 * layout is rows_cuda.h.
 *
 * The forward ops read each source once per pass: they mix by online
 * softmax (running max m, l = sum exp(z - m), acc = sum exp(z - m) x,
 * rescaled when m grows), which equals the CPU's two sweeps to rounding.
 * Mixers of a chunk are processed CG at a time, their per-channel
 * accumulators in registers. */
#include "ops_cuda.h"

#include <cuda_bf16.h>
#include <math.h>

#include "../backend.h"
#include "rows_cuda.h"

#define CG 4            /* mixers per kernel pass */

/* Channels a thread, V (the kernels' template argument): 4 where a row
 * fits in MAXT threads of 4 (d <= 2048: 192 threads at d 768), else 8
 * (rows up to 4096).  Fewer channels a thread hold fewer registers, so
 * more blocks fit an SM to cover the memory's latency: with 8, at d 768,
 * registers allowed 5 blocks of 96 threads an SM, 23% occupancy (Nsight
 * Compute on an H200, BENCHMARKS.md), and the kernels waited on memory
 * three quarters of the time. */
static int depth_v(int d) { return d <= 4 * MAXT ? 4 : 8; }

/* This thread's channels of row x (source s of list l, from element o)
 * into xv, and block-wide the key's r = 1/sqrt(mean x^2 + eps) (returned)
 * and logit *z = r (u.x). */
template <int V>
__device__ __forceinline__ float key_logit(const clist &l, int s, size_t o, const float *u, float *xv, int tid,
                                           int T, int d, float *z, int kn = 1)
{
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < V; q++) {
        int j = tid + q * T;
        xv[q] = j < d ? list_value(l, s, o + j) : 0.0f;
        v[0] += xv[q] * xv[q];
        v[1] += u[q] * xv[q];
    }
    block_sum<2>(v);
    float r = kn ? 1.0f / sqrtf(v[0] / d + AR_RMS_EPS) : 1.0f; /* kn 0: no key norm */
    *z = r * v[1];
    return r;
}

/* Token i's sublayer input, fused: h = acc / l (this thread's channels),
 * xn[i,:] = h r ng with r = 1/sqrt(mean h^2 + eps) (= nrstd[i]), as
 * rmsnorm_fwd would write it (xn fp32, or bf16 storage where x16:
 * lib/backend.h, alloc_act). */
template <int V>
__device__ __forceinline__ void store_rmsnorm(const float *acc, float l, const float *ng, void *xn, int x16,
                                              float *nrstd, size_t i, int tid, int T, int d)
{
    float hv[V], v[1] = {0.0f};
#pragma unroll
    for (int q = 0; q < V; q++) {
        hv[q] = acc[q] / l;
        v[0] += hv[q] * hv[q];
    }
    block_sum<1>(v);
    float rr = 1.0f / sqrtf(v[0] / d + AR_RMS_EPS);
    if (tid == 0)
        nrstd[i] = rr;
#pragma unroll
    for (int q = 0; q < V; q++) {
        int j = tid + q * T;
        if (j < d)
            ar_store_at(xn, x16, i * d + j, hv[q] * rr * ng[j]);
    }
}

/* Online softmax, one more source with logit z and row xv:
 *   m' = max(m, z);  l = l e^{m-m'} + e^{z-m'};  acc = acc e^{m-m'} + e^{z-m'} xv */
template <int V>
__device__ __forceinline__ void online_add(float z, const float *xv, float *m, float *l, float *acc)
{
    float mn = fmaxf(*m, z), sc = expf(*m - mn), p = expf(z - mn);
    *l = *l * sc + p;
#pragma unroll
    for (int q = 0; q < V; q++)
        acc[q] = acc[q] * sc + p * xv[q];
    *m = mn;
}

/* score: sigmoid: acc += sigmoid(z) x (weights not normalised) */
template <int V>
__device__ __forceinline__ void sigmoid_add(float z, const float *xv, float *acc)
{
    float p = 1.0f / (1.0f + expf(-z));
#pragma unroll
    for (int q = 0; q < V; q++)
        acc[q] += p * xv[q];
}

/* The logit gradient of weight a from da = dh.x: softmax a (da - cdot) (0
 * for one source), sigmoid a (1 - a) da; and u.x for the key norm's r^3
 * term from a (0 where dl is 0). */
__device__ __forceinline__ float logit_grad(int sigmoid, float a, float da, float cdot, int n)
{
    return sigmoid ? a * (1.0f - a) * da : n > 1 ? a * (da - cdot) : 0.0f;
}
__device__ __forceinline__ float key_dot_of(int sigmoid, float a, float dl, float lse, float r)
{
    if (dl == 0.0f)
        return 0.0f;
    return sigmoid ? (logf(a) - log1pf(-a)) / r : (logf(a) + lse) / r;
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
template <int V>
__global__ void __launch_bounds__(MAXT)
inter_fwd_kernel(fwd_grp p, int G, mlist rs, int write_rs, clist src, int k, const float *ng,
                 void *xn, int x16, float *nrstd, int sigmoid, int d)
{
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x;
    float u[CG][V], acc[CG][V], m[CG], l[CG];
#pragma unroll
    for (int c = 0; c < CG; c++) {
        m[c] = -INFINITY;
        l[c] = sigmoid ? 1.0f : 0.0f; /* sigmoid: no normaliser */
#pragma unroll
        for (int q = 0; q < V; q++) {
            int j = tid + q * T;
            u[c][q] = c < G && j < d ? (p.g[c] ? p.w[c][j] * p.g[c][j] : p.w[c][j]) : 0.0f;
            acc[c][q] = 0.0f;
        }
    }
    for (int s = 0; s < k; s++) {
        float xv[V], v[CG + 1];
#pragma unroll
        for (int c = 0; c <= CG; c++)
            v[c] = 0.0f;
#pragma unroll
        for (int q = 0; q < V; q++) {
            int j = tid + q * T;
            xv[q] = j < d ? list_value(src, s, i * d + j) : 0.0f;
            v[CG] += xv[q] * xv[q];
#pragma unroll
            for (int c = 0; c < CG; c++)
                v[c] += u[c][q] * xv[q];
        }
        block_sum<CG + 1>(v);
        float r = p.g[0] ? 1.0f / sqrtf(v[CG] / d + AR_RMS_EPS) : 1.0f; /* g NULL: no key norm */
        if (tid == 0 && write_rs)
            rs.p[s][i] = r;
#pragma unroll
        for (int c = 0; c < CG; c++) {
            if (c >= G)
                break;
            float z = r * v[c];
            if (tid == 0)
                p.alpha[c][i * p.n[c] + s] = z; /* raw logit; phase 2 normalises */
            if (sigmoid) {
                sigmoid_add<V>(z, xv, acc[c]);
                continue;
            }
            float mn = fmaxf(m[c], z), sc = expf(m[c] - mn), e = expf(z - mn);
            l[c] = l[c] * sc + e;
#pragma unroll
            for (int q = 0; q < V; q++)
                acc[c][q] = acc[c][q] * sc + e * xv[q];
            m[c] = mn;
        }
    }
#pragma unroll
    for (int c = 0; c < CG; c++) {
        if (c >= G)
            break;
        if (tid == 0)
            p.lse[c][i] = sigmoid ? 0.0f : m[c] + logf(l[c]);
        if (c == 0 && xn) { /* uniform over the block */
            store_rmsnorm<V>(acc[0], l[0], ng, xn, x16, nrstd, i, tid, T, d);
            continue;
        }
        if (!p.o[c])
            continue; /* not wanted (uniform over the block) */
#pragma unroll
        for (int q = 0; q < V; q++) {
            int j = tid + q * T;
            if (j < d)
                p.o[c][i * d + j] = acc[c][q] / l[c];
        }
    }
}

/* nf's xn may be bf16 storage (lib/backend.h, alloc_act: the model's xn
 * under bf16), its gain and rstd not: 1 where xn is.  (The sources may be
 * too, all or none: make_src_list; every other buffer is fp32.) */
static int norm_out_storage(const char *op, const ar_norm_out *nf)
{
    if (!nf)
        return 0;
    ar_cu_fp32_only(op, {{"the norm's 'gain'", nf->gain}, {"the norm's 'rstd'", nf->rstd}});
    return ar_cu_bf16_stored(nf->xn);
}

extern "C" void cuda_depth_fwd_inter(const ar_depth_inter *chunk, float *const *o,
                                     const ar_norm_out *nf)
{
    float *const *lse = chunk->lse, *const *alpha = chunk->alpha, *const *rs = chunk->rs;
    const float *const *src = chunk->src, *const *w = chunk->w, *const *g = chunk->g;
    const int *n = chunk->n;
    int k = chunk->k, C = chunk->C, sigmoid = chunk->sigmoid, N = chunk->N, d = chunk->d;
    const float *ng = nf ? nf->gain : NULL;
    float *xn = nf ? nf->xn : NULL, *nrstd = nf ? nf->rstd : NULL;
    const char *op = "depth_fwd_inter";
    int x16 = norm_out_storage(op, nf);
    if (N <= 0 || d <= 0 || C <= 0)
        return;
    int v = depth_v(d), T = row_threads_v(d, v, op);
    clist sl = make_src_list(src, k, op);
    mlist rl = make_mlist(rs, k, op);
    no_storage_in(op, "an 'o'", (const void *const *)o, C);
    no_storage_in(op, "an 'lse'", (const void *const *)lse, C);
    no_storage_in(op, "an 'alpha'", (const void *const *)alpha, C);
    no_storage_in(op, "a query", (const void *const *)w, C);
    no_storage_in(op, "a gain", (const void *const *)g, g ? C : 0);
    for (int c0 = 0; c0 < C; c0 += CG) {
        int G = C - c0 < CG ? C - c0 : CG;
        fwd_grp p;
        memset(&p, 0, sizeof p);
        for (int c = 0; c < G; c++) {
            p.o[c] = o[c0 + c];
            p.lse[c] = lse[c0 + c];
            p.alpha[c] = alpha[c0 + c];
            p.w[c] = w[c0 + c];
            p.g[c] = g ? g[c0 + c] : NULL;
            p.n[c] = n[c0 + c];
        }
        float *x = c0 == 0 ? xn : NULL;
        if (v == 4)
            inter_fwd_kernel<4><<<N, T, 0, ar_cuda_stream()>>>(p, G, rl, c0 == 0, sl, k, ng, x, x16, nrstd,
                                                             sigmoid, d);
        else
            inter_fwd_kernel<8><<<N, T, 0, ar_cuda_stream()>>>(p, G, rl, c0 == 0, sl, k, ng, x, x16, nrstd,
                                                             sigmoid, d);
        AR_CUDA_LAUNCHED();
    }
}

/* Phase 2 of one mixer (one block per token i), j = n-k intra sources,
 * continuing phase 1's online softmax from m = lse[i], l = 1, acc = o = h
 * (h bf16 storage where h16: then xn is given, and h only read):
 *   r_t = rstd(x_t) (= rsi[t][i]);  z_t = r_t (u.x_t)  (zt, shared)
 *   m' = max(m, z_t): l = l e^{m-m'} + e^{z_t-m'}, acc = acc e^{m-m'} + e^{z_t-m'} x_t
 *   LSE = m + log l (= lse[i]);  h = acc / l  (or xn = h r' ng, nrstd = r')
 *   alpha[i,s] = exp(alpha[i,s] - LSE) (s < k);  alpha[i,k+t] = exp(z_t - LSE)
 * With j = 0 only lse and alpha change (LSE = lse exactly: l = 1). */
template <int V>
__global__ void __launch_bounds__(MAXT)
merge_kernel(float *h, int h16, float *lse, float *alpha, int n, int k, mlist rsi, clist intra,
             const float *w, const float *g, const float *ng, void *xn, int x16, float *nrstd, int sigmoid,
             int d)
{
    extern __shared__ float zt[];
    size_t i = blockIdx.x;
    int T = blockDim.x, tid = threadIdx.x, nj = n - k;
    float u[V], acc[V];
#pragma unroll
    for (int q = 0; q < V; q++) {
        int j = tid + q * T;
        u[q] = j < d ? (g ? w[j] * g[j] : w[j]) : 0.0f;
        acc[q] = nj > 0 && j < d ? ar_value_at(h, h16, i * d + j) : 0.0f;
    }
    float m = lse[i], l = 1.0f;
    for (int t = 0; t < nj; t++) {
        float xv[V], z;
        float r = key_logit<V>(intra, t, i * d, u, xv, tid, T, d, &z, g != NULL);
        if (tid == 0) {
            rsi.p[t][i] = r;
            zt[t] = z;
        }
        if (sigmoid)
            sigmoid_add<V>(z, xv, acc);
        else
            online_add<V>(z, xv, &m, &l, acc);
    }
    float LSE = sigmoid ? 0.0f : m + logf(l);
    __syncthreads(); /* zt complete; every thread has read lse[i] */
    if (tid == 0)
        lse[i] = LSE;
    float *al = alpha + i * n;
    for (int s = tid; s < k; s += T)
        al[s] = sigmoid ? 1.0f / (1.0f + expf(-al[s])) : expf(al[s] - LSE);
    for (int t = tid; t < nj; t += T)
        al[k + t] = sigmoid ? 1.0f / (1.0f + expf(-zt[t])) : expf(zt[t] - LSE);
    if (nj == 0)
        return; /* h = o already */
    if (!xn) {
#pragma unroll
        for (int q = 0; q < V; q++) {
            int j = tid + q * T;
            if (j < d)
                h[i * d + j] = acc[q] / l;
        }
        return;
    }
    store_rmsnorm<V>(acc, l, ng, xn, x16, nrstd, i, tid, T, d);
}

extern "C" void cuda_depth_fwd_merge(const ar_depth_intra *m, float *h, const ar_norm_out *nf)
{
    float *lse = m->lse, *alpha = m->alpha, *const *rsi = m->rsi;
    const float *const *intra = m->src + m->k;
    const float *w = m->w, *g = m->g;
    int n = m->n, k = m->k, sigmoid = m->sigmoid, N = m->N, d = m->d;
    const float *ng = nf ? nf->gain : NULL;
    float *xn = nf ? nf->xn : NULL, *nrstd = nf ? nf->rstd : NULL;
    const char *op = "depth_fwd_merge";
    int x16 = norm_out_storage(op, nf), nj = n - k;
    /* h in bf16 storage: a source read in place (lib/residual_depth.c),
     * only where the norm is written instead of h */
    int h16 = ar_cu_bf16_stored(h);
    if (h16 && !(nf && nj > 0))
        ar_cuda_die(op, "'h' is bf16 storage (alloc_act), which this op takes only to read: with a norm and "
                        "sources of the mixer's own", __FILE__, __LINE__);
    ar_cu_fp32_only(op, {{"'lse'", lse}, {"'alpha'", alpha}, {"'w'", w}, {"'g'", g}});
    if (N <= 0 || d <= 0)
        return;
    int v = depth_v(d), T = row_threads_v(d, v, op);
    clist il = make_src_list(intra, nj, op);
    mlist rl = make_mlist(rsi, nj, op);
    if (v == 4)
        merge_kernel<4><<<N, T, (size_t)(nj > 0 ? nj : 1) * sizeof(float), ar_cuda_stream()>>>(
            h, h16, lse, alpha, n, k, rl, il, w, g, ng, xn, x16, nrstd, sigmoid, d);
    else
        merge_kernel<8><<<N, T, (size_t)(nj > 0 ? nj : 1) * sizeof(float), ar_cuda_stream()>>>(
            h, h16, lse, alpha, n, k, rl, il, w, g, ng, xn, x16, nrstd, sigmoid, d);
    AR_CUDA_LAUNCHED();
}

/* Backward, intra part of one mixer; tokens [b tpb, (b+1) tpb) of block b;
 * src lists all n sources, the intra ones from k:
 *   dxn given (h NULL): xh = xn / ng (where ng_j = 0: nr sum_s alpha_s src[s]),
 *              dh = nr (ng dxn - xh m), m = (ng dxn).xh / d, written to dh
 *              (=);  npart[b,:] = sum of dxn xh  (then ar_cu_reduce_add into dng);
 *              cdot = dh.xh / nr
 *   else:      cdot[i] = dh.h (=)
 *   for t < n-k with a = alpha[i,k+t] != 0, r = rsi[t][i], x = src[k+t]:
 *     dl = a (dh.x - cdot) (0 where n = 1);  ux = (log a + lse[i]) / r   (phase 2's lse)
 *     dintra[t] += a dh + dl r u - dl ux r^3 x / d
 *   part[b,:] = sum of dl r x   (then ar_cu_reduce_wg)
 * Each thread reads and writes only its own columns of a row.  Kept whole:
 * the norm's backward, cdot and the sources' gradients of a token share the
 * thread's register rows (gy, u, pp, pn) and the block sums between them;
 * split, each step would take them all as arguments. */
template <int V>
__global__ void __launch_bounds__(MAXT)
intra_bwd_kernel(mlist dintra, float *part, float *npart, float *cdot, float *dh, const float *h,
                 const float *dxn, const void *xn, int x16, const float *ng,
                 const float *nrstd, const float *alpha, const float *lse, int n, int k,
                 clist rsi, clist src, const float *w, const float *g, int sigmoid, int N, int d, int tpb)
{
    int T = blockDim.x, tid = threadIdx.x, nj = n - k;
    float u[V], pp[V], pn[V];
#pragma unroll
    for (int q = 0; q < V; q++) {
        int j = tid + q * T;
        u[q] = j < d ? (g ? w[j] * g[j] : w[j]) : 0.0f;
        pp[q] = 0.0f;
        pn[q] = 0.0f;
    }
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        float gy[V], v[1] = {0.0f}, c;
        const float *al = alpha + i * n;
        if (dxn) {
            float dv[V], xh[V], nr = nrstd[i];
#pragma unroll
            for (int q = 0; q < V; q++) {
                int j = tid + q * T;
                float gj = j < d ? ng[j] : 1.0f;
                dv[q] = j < d ? dxn[i * d + j] : 0.0f;
                if (gj != 0.0f) {
                    xh[q] = (j < d ? ar_value_at(xn, x16, i * d + j) : 0.0f) / gj;
                } else { /* the norm zeroed this channel: h from the sources */
                    float acc = 0.0f;
                    for (int s = 0; s < n; s++)
                        acc += al[s] * list_value(src, s, i * d + j);
                    xh[q] = nr * acc;
                }
                v[0] += gj * dv[q] * xh[q];
            }
            block_sum<1>(v);
            float m = v[0] / d;
            v[0] = 0.0f;
#pragma unroll
            for (int q = 0; q < V; q++) {
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
            for (int q = 0; q < V; q++) {
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
            float xv[V], v1[1] = {0.0f};
#pragma unroll
            for (int q = 0; q < V; q++) {
                int j = tid + q * T;
                xv[q] = j < d ? list_value(src, k + t, i * d + j) : 0.0f;
                v1[0] += gy[q] * xv[q];
            }
            block_sum<1>(v1);
            float dl = logit_grad(sigmoid, a, v1[0], c, n);
            float c1 = dl * r, c2 = g ? dl * key_dot_of(sigmoid, a, dl, L, r) * r * r * r / d : 0.0f; /* no key norm: no r^3 term */
            float *dx = dintra.p[t] + i * d;
#pragma unroll
            for (int q = 0; q < V; q++) {
                int j = tid + q * T;
                if (j < d) {
                    dx[j] += a * gy[q] + c1 * u[q] - c2 * xv[q];
                    pp[q] += c1 * xv[q];
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < V; q++) {
        int j = tid + q * T;
        if (j < d) {
            part[(size_t)blockIdx.x * d + j] = pp[q];
            if (dxn)
                npart[(size_t)blockIdx.x * d + j] = pn[q];
        }
    }
}

extern "C" void cuda_depth_bwd_intra(const ar_depth_intra *m, float *const *dintra, float *dw,
                                     float *dg, float *cdot, float *dh, const float *h,
                                     const ar_norm_grad *norm)
{
    const float *alpha = m->alpha, *lse = m->lse;
    const float *const *rsi = (const float *const *)m->rsi, *const *src = m->src;
    const float *w = m->w, *g = m->g;
    int n = m->n, k = m->k, sigmoid = m->sigmoid, N = m->N, d = m->d;
    const float *dxn = norm ? norm->dxn : NULL, *xn = norm ? norm->xn : NULL;
    const float *ng = norm ? norm->gain : NULL, *nrstd = norm ? norm->rstd : NULL;
    float *dng = norm ? norm->dgain : NULL;
    const char *op = "depth_bwd_intra";
    int x16 = norm && ar_cu_bf16_stored(norm->xn);
    ar_cu_fp32_only(op, {{"'dw'", dw}, {"'dg'", dg}, {"'cdot'", cdot}, {"'dh'", dh}, {"'h'", h}, {"'dxn'", dxn},
                         {"'gain'", ng}, {"'rstd'", nrstd}, {"'dgain'", dng}, {"'alpha'", alpha}, {"'lse'", lse},
                         {"'w'", w}, {"'g'", g}});
    if (N <= 0 || d <= 0)
        return;
    int v = depth_v(d), T = row_threads_v(d, v, op), nj = n - k, tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    clist sl = make_src_list(src, n, op), rl = make_clist(rsi, nj, op);
    mlist dl = make_mlist(dintra, nj, op);
    /* partials: nb x d for dw/dg, then nb x d for dng */
    float *part = (float *)ar_cu_ws(CU_WS_ROWS, (size_t)2 * nb * d * sizeof(float));
    float *npart = part + (size_t)nb * d;
    if (v == 4)
        intra_bwd_kernel<4><<<nb, T, 0, ar_cuda_stream()>>>(dl, part, npart, cdot, dh, h, dxn, xn, x16,
                                                          ng, nrstd, alpha, lse, n, k, rl, sl, w, g,
                                                          sigmoid, N, d, tpb);
    else
        intra_bwd_kernel<8><<<nb, T, 0, ar_cuda_stream()>>>(dl, part, npart, cdot, dh, h, dxn, xn, x16,
                                                          ng, nrstd, alpha, lse, n, k, rl, sl, w, g,
                                                          sigmoid, N, d, tpb);
    AR_CUDA_LAUNCHED();
    if (nj > 0)
        ar_cu_reduce_wg(dw, dg, part, nb, (size_t)d, w, g, d);
    if (dxn)
        ar_cu_reduce_add(dng, npart, nb, (size_t)d, d);
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
 *   part[b,c,:] = sum of dl_c r x   (then ar_cu_reduce_wg per mixer)
 * The dh_c rows of a token stay in registers for all its sources; repeated
 * dsrc pointers are handled in source order (one thread per channel). */
template <int V>
__global__ void __launch_bounds__(MAXT)
inter_bwd_kernel(mlist dsrc, float *part, bwd_grp p, int G, clist rs, clist src, int k,
                 int overwrite, int sigmoid, int N, int d, int tpb)
{
    int T = blockDim.x, tid = threadIdx.x;
    float pp[CG][V];
#pragma unroll
    for (int c = 0; c < CG; c++)
#pragma unroll
        for (int q = 0; q < V; q++)
            pp[c][q] = 0.0f;
    int i0 = blockIdx.x * tpb, i1 = min(N, i0 + tpb);
    for (int ii = i0; ii < i1; ii++) {
        size_t i = ii;
        float gy[CG][V];
#pragma unroll
        for (int c = 0; c < CG; c++)
#pragma unroll
            for (int q = 0; q < V; q++) {
                int j = tid + q * T;
                gy[c][q] = c < G && j < d ? p.dh[c][i * d + j] : 0.0f;
            }
        for (int s = 0; s < k; s++) {
            float xv[V], v[CG];
#pragma unroll
            for (int c = 0; c < CG; c++)
                v[c] = 0.0f;
#pragma unroll
            for (int q = 0; q < V; q++) {
                int j = tid + q * T;
                xv[q] = j < d ? list_value(src, s, i * d + j) : 0.0f;
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
                float dl = logit_grad(sigmoid, a[c], v[c], p.cdot[c][i], p.n[c]);
                c1[c] = dl * r;
                norm += dl * key_dot_of(sigmoid, a[c], dl, p.lse[c][i], r); /* 0 where dl is */
            }
            float cx = p.g[0] ? -norm * r * r * r / d : 0.0f; /* g NULL: no key norm, no r^3 term */
            float *dx = dsrc.p[s] + i * d;
#pragma unroll
            for (int q = 0; q < V; q++) {
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
                        y += c1[c] * (p.g[c] ? p.w[c][j] * p.g[c][j] : p.w[c][j]);
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
        for (int q = 0; q < V; q++) {
            int j = tid + q * T;
            if (j < d)
                part[((size_t)blockIdx.x * CG + c) * d + j] = pp[c][q];
        }
    }
}

extern "C" void cuda_depth_bwd_inter(const ar_depth_inter *chunk, float *const *dsrc,
                                     float *const *dw, float *const *dg, const float *const *dh,
                                     const float *const *cdot, int overwrite)
{
    const float *const *alpha = (const float *const *)chunk->alpha;
    const float *const *lse = (const float *const *)chunk->lse;
    const float *const *rs = (const float *const *)chunk->rs;
    const float *const *src = chunk->src, *const *w = chunk->w, *const *g = chunk->g;
    const int *n = chunk->n;
    int k = chunk->k, C = chunk->C, sigmoid = chunk->sigmoid, N = chunk->N, d = chunk->d;
    const char *op = "depth_bwd_inter";
    if (N <= 0 || d <= 0 || C <= 0 || k <= 0)
        return;
    int v = depth_v(d), T = row_threads_v(d, v, op), tpb = red_tokens(N, T), nb = red_nblk(N, tpb);
    clist sl = make_src_list(src, k, op), rl = make_clist(rs, k, op);
    mlist dl = make_mlist(dsrc, k, op);
    no_storage_in(op, "a 'dh'", (const void *const *)dh, C);
    no_storage_in(op, "a 'cdot'", (const void *const *)cdot, C);
    no_storage_in(op, "an 'alpha'", (const void *const *)alpha, C);
    no_storage_in(op, "an 'lse'", (const void *const *)lse, C);
    no_storage_in(op, "a query", (const void *const *)w, C);
    no_storage_in(op, "a gain", (const void *const *)g, g ? C : 0);
    no_storage_in(op, "a 'dw'", (const void *const *)dw, C);
    no_storage_in(op, "a 'dg'", (const void *const *)dg, g ? C : 0);
    float *part = (float *)ar_cu_ws(CU_WS_ROWS, (size_t)nb * CG * d * sizeof(float));
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
            p.g[c] = g ? g[c0 + c] : NULL;
            p.n[c] = n[c0 + c];
        }
        /* later groups add onto the first group's result */
        if (v == 4)
            inter_bwd_kernel<4><<<nb, T, 0, ar_cuda_stream()>>>(dl, part, p, G, rl, sl, k,
                                                              overwrite && c0 == 0, sigmoid, N, d, tpb);
        else
            inter_bwd_kernel<8><<<nb, T, 0, ar_cuda_stream()>>>(dl, part, p, G, rl, sl, k,
                                                              overwrite && c0 == 0, sigmoid, N, d, tpb);
        AR_CUDA_LAUNCHED();
        for (int c = 0; c < G; c++)
            ar_cu_reduce_wg(dw[c0 + c], g ? dg[c0 + c] : NULL, part + (size_t)c * d, nb, (size_t)CG * d,
                            w[c0 + c], g ? g[c0 + c] : NULL, d);
    }
}
