/* Weighted sums of buffers with learned coefficients on the GPU:
 * wsum_fwd/bwd, the mixing of DenseFormer (lib/residual_denseformer.c) and
 * mHC (lib/residual_mhc.c), and wmix_fwd/bwd, several sums of the same
 * inputs in one pass (mHC's streams).  The math is in lib/ops.def; the
 * CPU versions are in lib/cpu/wsum_cpu.c.  wsum's buffer lists travel as
 * rows_cuda.h's source lists, wmix's outputs (and dy) as lists of
 * AR_WMIX_MAX, its inputs (and dx) as source lists of AR_WMIX_MAX_IN.
 * Determinism: the coefficient gradients are per-block partials in double,
 * added in block order. */
#include "ops_cuda.h"

#include "../backend.h"
#include "rows_cuda.h"

#define WSUM_T 256
#define WSUM_BLOCKS 1024

/* Sum of one double over the block's threads: warps by butterfly, then the
 * warp sums in warp order, so every thread returns the same value (any
 * block size that is a multiple of 32, up to 1024). */
__device__ static __forceinline__ double block_sum_d(double v)
{
    __shared__ double sred[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ar_warp_sum_d(v);
    if (lane == 0)
        sred[wid] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < nw; w++)
        t += sred[w];
    __syncthreads();
    return t;
}

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

/* The coefficient gradients from the per-block partials, for a p x n
 * matrix of coefficients with rows ldc apart (wsum: p = 1):
 *   dC[(t / n) ldc + t % n] += (float) sum_b part[b pn + t],  t < pn = p n
 * one block per t, the partials added in block order. */
__global__ void coef_grad_kernel(float *dC, int ldc, const double *part, int nb, int n, int pn)
{
    int t = blockIdx.x;
    double acc = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x)
        acc += part[(size_t)b * pn + t];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0)
        dC[(size_t)(t / n) * ldc + t % n] += (float)acc;
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
    double *part = dc ? (double *)ar_cu_ws(CU_WS_ROWS, nb * n * sizeof(double)) : NULL;
    wsum_bwd_kernel<<<(unsigned)nb, WSUM_T, 0, ar_cuda_stream()>>>(dl, part, dy, xl, c, n, len,
                                                                   per);
    AR_CUDA_LAUNCHED();
    if (dc) {
        coef_grad_kernel<<<n, WSUM_T, 0, ar_cuda_stream()>>>(dc, n, part, (int)nb, n, n);
        AR_CUDA_LAUNCHED();
    }
}

/* wmix's output lists (y, dy): at most AR_WMIX_MAX pointers each.  Its
 * inputs (x, dx) travel as source lists: with two of those wmix_bwd has
 * more than 4 KiB of parameters (rows_cuda.h).  T: const float or float. */
static_assert(AR_WMIX_MAX_IN <= MAXP, "wmix's inputs travel as source lists");
template <class T> struct wlist {
    T *p[AR_WMIX_MAX];
};
typedef wlist<const float> wl_c;
typedef wlist<float> wl_m;

/* a may be NULL (every entry NULL); fp32 buffers only (bf16 storage in it
 * stops with an error, as make_clist) */
template <class T> static wlist<T> make_wlist(T *const *a, int n, const char *op)
{
    wlist<T> l;
    memset(&l, 0, sizeof l);
    if (n < 1 || n > AR_WMIX_MAX)
        die(op, "%ld buffers in one list (1 to %ld)", n, AR_WMIX_MAX);
    no_storage_in(op, "a listed buffer", (const void *const *)a, n);
    for (int s = 0; a && s < n; s++)
        l.p[s] = a[s];
    return l;
}

/* y[i][k] = sum_j C[i ldc + j] x[j][k]  (j in order; each input read once) */
__global__ void wmix_fwd_kernel(wl_m y, int p, clist x, int n, const float *C, int ldc, size_t len,
                                const float *zc, float *z)
{
    __shared__ float cs[AR_WMIX_MAX * AR_WMIX_MAX_IN], zs[AR_WMIX_MAX];
    for (int t = threadIdx.x; t < p * n; t += blockDim.x)
        cs[t] = C[(size_t)(t / n) * ldc + t % n];
    for (int t = threadIdx.x; z && t < p; t += blockDim.x)
        zs[t] = zc[t];
    __syncthreads();
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < len;
         k += (size_t)gridDim.x * blockDim.x) {
        float acc[AR_WMIX_MAX], x0 = x.p[0][k];
        for (int i = 0; i < AR_WMIX_MAX; i++)
            acc[i] = i < p ? cs[i * n] * x0 : 0.0f;
        for (int j = 1; j < n; j++) {
            float xv = x.p[j][k];
            for (int i = 0; i < AR_WMIX_MAX; i++)
                if (i < p)
                    acc[i] = fmaf(cs[i * n + j], xv, acc[i]);
        }
        for (int i = 0; i < AR_WMIX_MAX; i++)
            if (i < p)
                y.p[i][k] = acc[i];
        if (z) { /* the sum of the outputs in wsum_fwd_kernel's form: the same bits */
            float v = 0.0f;
            for (int i = 0; i < AR_WMIX_MAX; i++)
                if (i < p)
                    v += zs[i] * acc[i];
            z[k] = v;
        }
    }
}

/* Block b covers elements [b per, (b+1) per):
 *   dx[j][k] = (accumulate ? dx[j][k] : 0) + sum_i C[i ldc + j] dy[i][k]
 *   part[b p n + i n + j] = sum_k dy[i][k] x[j][k]  (double; part NULL: skipped) */
__global__ void wmix_bwd_kernel(mlist dx, int accumulate, double *part, wl_c dy, int p, clist x, int n,
                                const float *C, int ldc, size_t len, size_t per)
{
    __shared__ float cs[AR_WMIX_MAX * AR_WMIX_MAX_IN];
    for (int t = threadIdx.x; t < p * n; t += blockDim.x)
        cs[t] = C[(size_t)(t / n) * ldc + t % n];
    __syncthreads();
    size_t k0 = (size_t)blockIdx.x * per, k1 = k0 + per < len ? k0 + per : len;
    if (dx.p[0])
        for (size_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
            float g[AR_WMIX_MAX];
            for (int i = 0; i < p; i++)
                g[i] = dy.p[i][k];
            for (int j = 0; j < n; j++) {
                float v = accumulate ? dx.p[j][k] : 0.0f;
                for (int i = 0; i < p; i++)
                    v += cs[i * n + j] * g[i];
                dx.p[j][k] = v;
            }
        }
    if (!part)
        return;
    for (int i = 0; i < p; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (size_t k = k0 + threadIdx.x; k < k1; k += blockDim.x)
                acc += (double)dy.p[i][k] * x.p[j][k];
            acc = block_sum_d(acc);
            if (threadIdx.x == 0)
                part[(size_t)blockIdx.x * p * n + i * n + j] = acc;
        }
}

extern "C" void cuda_wmix_fwd(const ar_wmix *m, float *const *y, const float *const *x)
{
    const float *C = m->C;
    int p = m->p, n = m->n, ldc = m->ldc;
    size_t len = m->len;
    const char *op = "wmix_fwd";
    if (len == 0)
        return;
    wl_m yl = make_wlist(y, p, op);
    if (n < 1 || n > AR_WMIX_MAX_IN)
        die(op, "%ld inputs (1 to %ld)", n, AR_WMIX_MAX_IN);
    clist xl = make_clist(x, n, op);
    if (m->z)
        no_storage_in(op, "z", (const void *const *)&m->z, 1);
    size_t nb = (len + WSUM_T - 1) / WSUM_T;
    if (nb > 4 * WSUM_BLOCKS)
        nb = 4 * WSUM_BLOCKS;
    wmix_fwd_kernel<<<(unsigned)nb, WSUM_T, 0, ar_cuda_stream()>>>(yl, p, xl, n, C, ldc, len, m->zc,
                                                                   m->z);
    AR_CUDA_LAUNCHED();
}

extern "C" void cuda_wmix_bwd(const ar_wmix *m, float *const *dx, int accumulate, float *dC,
                              const float *const *dy, const float *const *x)
{
    const float *C = m->C;
    int p = m->p, n = m->n, ldc = m->ldc;
    size_t len = m->len;
    const char *op = "wmix_bwd";
    if (len == 0)
        return;
    if (n < 1 || n > AR_WMIX_MAX_IN)
        die(op, "%ld inputs (1 to %ld)", n, AR_WMIX_MAX_IN);
    mlist dl = make_mlist(dx, n, op);
    wl_c yl = make_wlist(dy, p, op);
    clist xl = make_clist(x, n, op);
    size_t nb = (len + 8 * WSUM_T - 1) / (8 * WSUM_T);
    if (nb > WSUM_BLOCKS)
        nb = WSUM_BLOCKS;
    size_t per = (len + nb - 1) / nb;
    nb = (len + per - 1) / per;
    double *part = dC ? (double *)ar_cu_ws(CU_WS_ROWS, nb * p * n * sizeof(double)) : NULL;
    wmix_bwd_kernel<<<(unsigned)nb, WSUM_T, 0, ar_cuda_stream()>>>(dl, accumulate, part, yl, p, xl, n,
                                                                   C, ldc, len, per);
    AR_CUDA_LAUNCHED();
    if (dC) {
        coef_grad_kernel<<<p * n, WSUM_T, 0, ar_cuda_stream()>>>(dC, ldc, part, (int)nb, n, p * n);
        AR_CUDA_LAUNCHED();
    }
}
