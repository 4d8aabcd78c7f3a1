/* Causal multi-head attention on the CPU: the score and value products on
 * CBLAS, the causal softmax and its backward as plain loops.  The sgemms
 * are called per (batch, head) inside an OpenMP parallel region; the
 * OpenMP build of OpenBLAS runs single-threaded when it is called from
 * inside a parallel region. */
#include "ops_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"

#include "loops.h"
#include "matmul_xsmm.h"
#include "vec.h"
#include "workspace.h"

/* Row-block size of the causal attention sgemm tiling, and the most
 * blocks (T up to 4096) whose products run on libxsmm kernels. */
#define ATT_BLOCK 64
#define ATT_MAX_BLOCKS 64

/* x[c] = exp(x[c] - mx), c < n, as fast_expf: v_expf over whole vectors
 * (the same operations; GCC vectorises a loop of fast_expf with eight mask
 * instructions for its clamp, where v_expf takes a max and a min), then
 * fast_expf on the tail. */
static inline void exp_shifted(float *x, int n, float mx)
{
    const vf vmx = v_set1(mx);
    int c = 0;
    for (; c + VL <= n; c += VL)
        v_st(x + c, v_expf(v_ld(x + c) - vmx));
    for (; c < n; c++)
        x[c] = fast_expf(x[c] - mx);
}

/* Head bh = b*nh + h of a B x T x (nh*hd) buffer starts at b*T*C + h*hd
 * (C = nh*hd), its rows C floats apart. */
static size_t head_offset(int bh, int T, int nh, int hd)
{
    int b = bh / nh, h = bh % nh;
    return (size_t)b * T * nh * hd + (size_t)h * hd;
}

/* The per-head products on libxsmm kernels, dispatched once per call for
 * every row block (use = 0 where libxsmm is not built or has no kernel:
 * then CBLAS): at T 64 OpenBLAS's small-matrix path spent about as long
 * packing and dispatching as multiplying.  Column-major, for row block
 * [r0, r1) of M rows (columns [c0, c1) of Mc, K = T - c0, in the
 * backward's second loop), with kt / vt the head's keys (scaled by
 * 1/sqrt(hd)) / values transposed, hd x T:
 *   score  S^T (r1 x M, ld T)   = kt read as (r1 x hd, ld T) x q^T (hd x M, ld C)
 *   value  y^T (hd x M, ld C)   = v^T (hd x r1, ld C) x att^T (r1 x M, ld T)
 *   dscore dA^T (r1 x M, ld T)  = vt read as (r1 x hd, ld T) x dy^T (hd x M, ld C)
 *   dq     dq^T (hd x M, ld C)  = k^T (hd x r1, ld C) x ds^T (r1 x M, ld T)
 *   dvk    dv^T (hd x Mc, ld C) = dy^T (hd x K, ld C) x att[c0:T, c0:c1] (K x Mc,
 *          read transposed from its ld-T rows), and dk^T the same from q and ds */
typedef struct {
    int use;
    /* score and dscore have the same shape, and so have value and dq */
    xsmm_kern score[ATT_MAX_BLOCKS], value[ATT_MAX_BLOCKS], dvk[ATT_MAX_BLOCKS];
} att_kernels;

/* bwd: the backward's kernels too */
static att_kernels att_plan(int T, int hd, int C, int bwd)
{
    att_kernels p = {0};
    int nb = (T + ATT_BLOCK - 1) / ATT_BLOCK;
    if (nb > ATT_MAX_BLOCKS)
        return p;
    for (int b = 0; b < nb; b++) {
        int r0 = b * ATT_BLOCK, r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, M = r1 - r0;
        p.score[b] = xsmm_dispatch(r1, M, hd, T, C, T, 0.0f, 0);
        p.value[b] = xsmm_dispatch(hd, M, r1, C, T, C, 0.0f, 0);
        p.dvk[b] = bwd ? xsmm_dispatch(hd, M, T - r0, C, T, C, 0.0f, 1) : p.value[b];
        if (!p.score[b] || !p.value[b] || !p.dvk[b])
            return p;
    }
    p.use = 1;
    return p;
}

/* dst (hd x T) = f x^T of one head's rows x (T x hd, ld C) */
static void head_transposed(float *dst, const float *x, float f, int T, int hd, int C)
{
    for (int j = 0; j < hd; j++) {
        float *dr = dst + (size_t)j * T;
        const float *xc = x + j;
        for (int c = 0; c < T; c++)
            dr[c] = xc[(size_t)c * C] * f;
    }
}

/* q,k,v,y: B x T x C (C = nh*hd); att: B x nh x T x T.
 *   s = q k^T / sqrt(hd) (causal), att = softmax(s), y = att v        (=)
 * Per (b, h), in parallel; heads are strided views (ld = C) of the
 * interleaved rows.  Rows are tiled in blocks of ATT_BLOCK: row block
 * [r0, r1) only needs key columns [0, r1), which skips most of the masked
 * upper triangle in both sgemms.  att is written in full (zeros above the
 * diagonal). */
void cpu_attention_fwd(const ar_attention *a, float *y)
{
    const float *q = a->q, *k = a->k, *v = a->v;
    int B = a->B, T = a->T, nh = a->nh, hd = a->hd;
    float *att = a->att;
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    att_kernels kp = att_plan(T, hd, C, 0);
    /* per thread: the head's keys, transposed and scaled (hd x T) */
    float *ktall = kp.use ? cpu_ws(WS_GEMM, (size_t)omp_get_max_threads() * hd * T * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * nh; bh++) {
        size_t off = head_offset(bh, T, nh, hd);
        const float *qb = q + off, *kb = k + off, *vb = v + off;
        float *yb = y + off;
        float *A = att + (size_t)bh * T * T;
        float *kt = kp.use ? ktall + (size_t)omp_get_thread_num() * hd * T : NULL;
        if (kt)
            head_transposed(kt, kb, scale, T, hd, C);
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            int M = r1 - r0;
            /* scores for rows [r0,r1), columns [0,r1) */
            if (kt)
                xsmm_run(kp.score[r0 / ATT_BLOCK], kt, qb + (size_t)r0 * C, A + (size_t)r0 * T);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hd, scale,
                            qb + (size_t)r0 * C, C, kb, C, 0.0f, A + (size_t)r0 * T, T);
            for (int r = r0; r < r1; r++) {
                float *ar = A + (size_t)r * T;
                float mx = max16(ar, r + 1);
                /* whole groups of 16 columns up to r1 (written by the
                 * product, so finite), leaving the vector loops no scalar
                 * tail; the columns past r are zeroed before the sum */
                int cend = (r + 16) / 16 * 16 < r1 ? (r + 16) / 16 * 16 : r1;
                exp_shifted(ar, cend, mx);
                const float zero = f_held(0.0f); /* no call to memset a row */
                for (int c = r + 1; c < cend; c++)
                    ar[c] = zero;
                float inv = 1.0f / sum8(ar, r + 1);
                for (int c = 0; c < cend; c++)
                    ar[c] *= inv;
                if (cend < T)
                    memset(ar + cend, 0, (size_t)(T - cend) * sizeof(float));
            }
            /* y[r0:r1] = att[r0:r1, 0:r1] v[0:r1] */
            if (kt)
                xsmm_run(kp.value[r0 / ATT_BLOCK], vb, A + (size_t)r0 * T, yb + (size_t)r0 * C);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hd, r1, 1.0f,
                            A + (size_t)r0 * T, T, vb, C, 0.0f, yb + (size_t)r0 * C, C);
        }
    }
}

/* (=, overwrites dq dk dv; datt is B x nh x T x T scratch):
 *   dv = att^T dy;  dA = dy v^T;  ds = att*(dA - rowsum(dA*att)) / sqrt(hd);
 *   dq = ds k;  dk = ds^T q
 * Same row tiling as the forward: for row block [r0,r1) dA, ds and dq use
 * columns [0,r1); dv and dk are computed per column block [c0,c1) from rows
 * [c0,T) only (att and ds vanish above the diagonal). */
void cpu_attention_bwd(const ar_attention *a, const float *y, const float *dy, float *dq, float *dk,
                       float *dv, float *datt)
{
    const float *q = a->q, *k = a->k, *v = a->v;
    int B = a->B, T = a->T, nh = a->nh, hd = a->hd;
    const float *att = a->att;
    (void)y; /* the saved probabilities give rowsum(dA*att) directly */
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    att_kernels kp = att_plan(T, hd, C, 1);
    /* per thread: the head's values transposed (hd x T) */
    float *vtall = kp.use ? cpu_ws(WS_GEMM, (size_t)omp_get_max_threads() * hd * T * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * nh; bh++) {
        size_t off = head_offset(bh, T, nh, hd);
        const float *qb = q + off, *kb = k + off, *vb = v + off, *dyb = dy + off;
        float *dqb = dq + off, *dkb = dk + off, *dvb = dv + off;
        const float *A = att + (size_t)bh * T * T;
        float *D = datt + (size_t)bh * T * T;
        float *vt = kp.use ? vtall + (size_t)omp_get_thread_num() * hd * T : NULL;
        if (vt)
            head_transposed(vt, vb, 1.0f, T, hd, C);
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            int M = r1 - r0;
            /* dA[r0:r1, 0:r1] = dy[r0:r1] v[0:r1]^T */
            if (vt)
                xsmm_run(kp.score[r0 / ATT_BLOCK], vt, dyb + (size_t)r0 * C, D + (size_t)r0 * T);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hd, 1.0f,
                            dyb + (size_t)r0 * C, C, vb, C, 0.0f, D + (size_t)r0 * T, T);
            /* softmax backward, in place: ds; columns past r are 0 (att is),
             * up to the end of their group of 16 (no scalar tail), then up
             * to r1 explicitly */
            for (int r = r0; r < r1; r++) {
                const float *ar = A + (size_t)r * T;
                float *dr = D + (size_t)r * T;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int c = 0; c <= r; c++)
                    dot += dr[c] * ar[c];
                int cend = (r + 16) / 16 * 16 < r1 ? (r + 16) / 16 * 16 : r1;
                for (int c = 0; c < cend; c++)
                    dr[c] = ar[c] * (dr[c] - dot) * scale;
                const float zero = f_held(0.0f); /* no call to memset a row */
                for (int c = r + 1; c < r1; c++)
                    dr[c] = zero;
            }
            /* dq[r0:r1] = ds[r0:r1, 0:r1] k[0:r1] */
            if (vt)
                xsmm_run(kp.value[r0 / ATT_BLOCK], kb, D + (size_t)r0 * T, dqb + (size_t)r0 * C);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hd, r1, 1.0f,
                            D + (size_t)r0 * T, T, kb, C, 0.0f, dqb + (size_t)r0 * C, C);
        }
        for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
            int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
            int M = c1 - c0, K = T - c0;
            if (vt) {
                xsmm_kern f = kp.dvk[c0 / ATT_BLOCK];
                xsmm_run(f, dyb + (size_t)c0 * C, A + (size_t)c0 * T + c0, dvb + (size_t)c0 * C);
                xsmm_run(f, qb + (size_t)c0 * C, D + (size_t)c0 * T + c0, dkb + (size_t)c0 * C);
                continue;
            }
            /* dv[c0:c1] = att[c0:T, c0:c1]^T dy[c0:T] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, hd, K, 1.0f,
                        A + (size_t)c0 * T + c0, T, dyb + (size_t)c0 * C, C, 0.0f,
                        dvb + (size_t)c0 * C, C);
            /* dk[c0:c1] = ds[c0:T, c0:c1]^T q[c0:T] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, hd, K, 1.0f,
                        D + (size_t)c0 * T + c0, T, qb + (size_t)c0 * C, C, 0.0f,
                        dkb + (size_t)c0 * C, C);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* incremental decoding against a key/value cache                            */

/* x: n x nh x hd, row i at absolute position t = pos0 + i; for every pair
 * (j, j+hd/2) of every head, a = t * 10000^(-2j/hd):
 *   x'_j = x_j cos a - x_{j+hd/2} sin a ;  x'_{j+hd/2} = x_j sin a + x_{j+hd/2} cos a
 * in place.  cos and sin are taken in double and rounded to float exactly
 * as rope_fwd's table (kernels_cpu.c), so a row gets the same bits as it
 * does at its position in a whole sequence. */
void cpu_rope_fwd_at(float *x, int n, int pos0, int nh, int hd)
{
    int h2 = hd / 2;
    if (h2 == 0)
        return;
    double *freq = ar_xmalloc((size_t)h2 * sizeof *freq);
    for (int j = 0; j < h2; j++)
        freq[j] = pow(10000.0, -2.0 * j / hd);
#pragma omp parallel for schedule(static) if ((long)n * nh * hd > PAR_MIN)
    for (int i = 0; i < n; i++) {
        double t = (double)(pos0 + i);
        for (int j = 0; j < h2; j++) {
            double a = t * freq[j];
            float c = (float)cos(a), s = (float)sin(a);
            for (int h = 0; h < nh; h++) {
                float *xh = x + ((size_t)i * nh + h) * hd;
                float x0 = xh[j], x1 = xh[j + h2];
                xh[j] = x0 * c - x1 * s;
                xh[j + h2] = x0 * s + x1 * c;
            }
        }
    }
    free(freq);
}

/* q, y: n x C (C = nh*hd); k, v: Tk x C with Tk = pos0 + n; att: nh x n x Tk.
 * Per head h (a strided view, ld = C):
 *   att_h = scale q_h k_h^T (n x Tk);  row i causal: columns c <= pos0 + i,
 *   softmaxed (exp_shifted and sum8, as attention_fwd), zeros after;
 *   y_h = att_h v_h                                                     (=)
 * The heads run in parallel once the work is worth the threads; in decoding
 * (n = 1) it rarely is, and the two products (sgemv there) are OpenBLAS's
 * to thread. */
void cpu_attention_decode(float *y, float *att, const float *q, const float *k, const float *v,
                          int n, int pos0, int nh, int hd)
{
    int C = nh * hd, Tk = pos0 + n;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static) if ((long)nh * n * Tk * hd > PAR_MIN)
    for (int h = 0; h < nh; h++) {
        float *A = att + (size_t)h * n * Tk;
        if (n == 1) /* one query: the products are sgemv (sgemm with M = 1 costs several times more) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, Tk, hd, scale, k + (size_t)h * hd, C,
                        q + (size_t)h * hd, 1, 0.0f, A, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, Tk, hd, scale,
                        q + (size_t)h * hd, C, k + (size_t)h * hd, C, 0.0f, A, Tk);
        for (int i = 0; i < n; i++) {
            float *ar = A + (size_t)i * Tk;
            int last = pos0 + i;
            float mx = max16(ar, last + 1);
            exp_shifted(ar, last + 1, mx);
            float inv = 1.0f / sum8(ar, last + 1);
            for (int c = 0; c <= last; c++)
                ar[c] *= inv;
            if (last + 1 < Tk)
                memset(ar + last + 1, 0, (size_t)(Tk - last - 1) * sizeof(float));
        }
        if (n == 1)
            cblas_sgemv(CblasRowMajor, CblasTrans, Tk, hd, 1.0f, v + (size_t)h * hd, C, A, 1, 0.0f,
                        y + (size_t)h * hd, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, Tk, 1.0f, A, Tk,
                        v + (size_t)h * hd, C, 0.0f, y + (size_t)h * hd, C);
    }
}
