/* The general depth mixer's ops on the CPU (math in lib/ops.def), for
 * lib/residual_mixer.c: depth_mix_fwd/bwd, one-phase depth mixing with
 * sigmoid scores, keys without RMSNorm, per-token queries, static logits,
 * uniform weights and multiple heads.
 *
 * Determinism as the rest of the CPU backend: tokens are split into fixed
 * chunks of MIX_CHUNK; each chunk's parameter gradients go to its own
 * partial, and the partials are summed in chunk order, so results do not
 * depend on the thread count.  Inner loops run in float over contiguous
 * channels so that the compiler vectorises them. */
#include "mixer_cpu.h"
#include "ops_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "depth_rows.h"
#include "head_lanes.h"
#include "loops.h"
#include "rmsnorm_row.h"
#include "vec.h"
#include "workspace.h"

#define MIX_CHUNK 32
#define MAX_SRC_HEADS 4096 /* n * H per token on the stack */

/* alpha's layout (lib/op_args.h) is source-major, token i's weight of
 * source s for head a at alpha[(i n + s) H + a]: a source's H heads are
 * one vector load for the fast kernels.  The per-token loops of the simple
 * ops and of the one-piece backward work head-major, a[a n + s] (a head's
 * softmax over n contiguous floats), and convert a token's row with these. */
static inline void alpha_to_heads(float *a, const float *row, int n, int H)
{
    for (int s = 0; s < n; s++)
        for (int hh = 0; hh < H; hh++)
            a[hh * n + s] = row[(size_t)s * H + hh];
}

static inline void alpha_from_heads(float *row, const float *a, int n, int H)
{
    for (int s = 0; s < n; s++)
        for (int hh = 0; hh < H; hh++)
            row[(size_t)s * H + hh] = a[hh * n + s];
}

/* logits of token i into a[H*n] (head-major), then scores */
static void mix_logits(float *a, float *rs, const float *const *src, int n, const float *q,
                       const float *g, const float *theta, int sigmoid, int H, size_t i, int d)
{
    int e = d / H;
    for (int s = 0; s < n; s++) {
        const float *x = src[s] + i * d;
        float r = 1.0f;
        if (g) {
            float ss = 0;
            for (int j = 0; j < d; j++)
                ss += x[j] * x[j];
            r = rms_rstd(ss, d);
            rs[s] = r;
        }
        for (int hh = 0; hh < H; hh++) {
            float z = 0;
            if (theta)
                z = theta[s];
            else if (q) {
                const int j0 = hh * e;
                if (g)
                    for (int j = j0; j < j0 + e; j++)
                        z += q[j] * g[j] * x[j];
                else
                    for (int j = j0; j < j0 + e; j++)
                        z += q[j] * x[j];
                z *= r;
            }
            a[hh * n + s] = z;
        }
    }
    for (int hh = 0; hh < H; hh++) {
        float *ah = a + hh * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                ah[s] = 1.0f / (1.0f + expf(-ah[s]));
            continue;
        }
        float mx = ah[0];
        for (int s = 1; s < n; s++)
            mx = ah[s] > mx ? ah[s] : mx;
        double sum = 0;
        for (int s = 0; s < n; s++) {
            ah[s] = expf(ah[s] - mx);
            sum += ah[s];
        }
        for (int s = 0; s < n; s++)
            ah[s] = (float)(ah[s] / sum);
    }
}

void cpu_depth_mix_fwd_simple(const ar_depth_mix *m, float *h)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    float *alpha = m->alpha, *rstd = m->rstd;
    int e = d / H;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float a[MAX_SRC_HEADS]; /* head-major */
        const float *q = w ? w + (size_t)i * wstride : NULL;
        mix_logits(a, g ? rstd + (size_t)i * n : NULL, src, n, q, g, theta, sigmoid, H, (size_t)i, d);
        alpha_from_heads(alpha + (size_t)i * H * n, a, n, H);
        float *y = h + (size_t)i * d;
        memset(y, 0, (size_t)d * sizeof(float));
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            for (int hh = 0; hh < H; hh++) {
                float as = a[hh * n + s];
                for (int j = hh * e; j < (hh + 1) * e; j++)
                    y[j] += as * x[j];
            }
        }
    }
}

/* d logit of token i per head from da = dh.x: sigmoid a (1 - a) da, or
 * softmax a (da - sum_s a da) with the sum in double. */
static void simple_dlogits(float *dl, const float *a, const float *da, int n, int H, int sigmoid)
{
    for (int hh = 0; hh < H; hh++) {
        const float *ah = a + hh * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                dl[hh * n + s] = da[hh * n + s] * ah[s] * (1.0f - ah[s]);
        } else {
            double cd = 0;
            for (int s = 0; s < n; s++)
                cd += (double)ah[s] * da[hh * n + s];
            for (int s = 0; s < n; s++)
                dl[hh * n + s] = ah[s] * (float)(da[hh * n + s] - cd);
        }
    }
}

/* Adds the per-chunk partials (each stride floats: dw d, dg d, dtheta n)
 * in chunk order, so that the thread count does not change the sums; a
 * NULL gradient is not wanted. */
static void mix_reduce(const float *part, int nch, size_t stride, int n, int d, float *dw, float *dg,
                       float *dtheta)
{
    for (int c = 0; c < nch; c++) {
        const float *pw = part + (size_t)c * stride, *pg = pw + d, *pt = pg + d;
        if (dw)
            for (int j = 0; j < d; j++)
                dw[j] += pw[j];
        if (dg)
            for (int j = 0; j < d; j++)
                dg[j] += pg[j];
        if (dtheta)
            for (int s = 0; s < n; s++)
                dtheta[s] += pt[s];
    }
}

void cpu_depth_mix_bwd_simple(const ar_depth_mix *m, float *const *dsrc, float *dw, float *dg,
                              float *dtheta, const float *dh)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    const float *alpha = m->alpha, *rstd = m->rstd;
    int e = d / H;
    int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK;
    int shared_w = w && !theta && wstride == 0 && dw;
    /* per chunk partials (float within a chunk of MIX_CHUNK tokens):
     * dw (d), dg (d), dtheta (n) */
    size_t stride = (size_t)2 * d + n;
    float *part = cpu_ws(WS_A, (size_t)nch * stride * sizeof(float));
    memset(part, 0, (size_t)nch * stride * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nch; c++) {
        float *pw = part + (size_t)c * stride, *pg = pw + d, *pt = pg + d;
        float da[MAX_SRC_HEADS], dl[MAX_SRC_HEADS], dot[MAX_SRC_HEADS], a[MAX_SRC_HEADS];
        int i1 = (c + 1) * MIX_CHUNK < N ? (c + 1) * MIX_CHUNK : N;
        for (int i = c * MIX_CHUNK; i < i1; i++) {
            alpha_to_heads(a, alpha + (size_t)i * H * n, n, H);
            const float *gy = dh + (size_t)i * d;
            const float *q = w && !theta ? w + (size_t)i * wstride : NULL;
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                for (int hh = 0; hh < H; hh++) {
                    const int j0 = hh * e, j1 = j0 + e;
                    float acc = 0, u = 0;
                    for (int j = j0; j < j1; j++)
                        acc += gy[j] * x[j];
                    if (q && g)
                        for (int j = j0; j < j1; j++)
                            u += q[j] * g[j] * x[j];
                    else if (q)
                        for (int j = j0; j < j1; j++)
                            u += q[j] * x[j];
                    da[hh * n + s] = acc;
                    dot[hh * n + s] = u;
                }
            }
            simple_dlogits(dl, a, da, n, H, sigmoid);
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                float r = g ? rstd[(size_t)i * n + s] : 1.0f;
                float cross = 0; /* sum_h dl dot: through rstd */
                for (int hh = 0; hh < H; hh++)
                    cross += dl[hh * n + s] * dot[hh * n + s];
                const float c3 = cross * r * r * r / d;
                if (theta)
                    for (int hh = 0; hh < H; hh++)
                        pt[s] += dl[hh * n + s];
                for (int hh = 0; hh < H; hh++) {
                    const float as = a[hh * n + s], ca = dl[hh * n + s] * r;
                    const int j0 = hh * e, j1 = j0 + e;
                    if (dx) {
                        if (q && g)
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j] + ca * q[j] * g[j] - c3 * x[j];
                        else if (q)
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j] + ca * q[j];
                        else
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j];
                    }
                    if (!q)
                        continue;
                    /* d logit / d q_j = r g_j x_j;  d logit / d g_j = r q_j x_j */
                    if (shared_w && g)
                        for (int j = j0; j < j1; j++)
                            pw[j] += ca * g[j] * x[j];
                    else if (shared_w)
                        for (int j = j0; j < j1; j++)
                            pw[j] += ca * x[j];
                    else if (dw) {
                        float *dwi = dw + (size_t)i * d;
                        if (g)
                            for (int j = j0; j < j1; j++)
                                dwi[j] += ca * g[j] * x[j];
                        else
                            for (int j = j0; j < j1; j++)
                                dwi[j] += ca * x[j];
                    }
                    if (g && dg)
                        for (int j = j0; j < j1; j++)
                            pg[j] += ca * q[j] * x[j];
                }
            }
        }
    }
    mix_reduce(part, nch, stride, n, d, shared_w ? dw : NULL, g && dg && w && !theta ? dg : NULL,
               theta ? dtheta : NULL);
}

/* ------------------------------------------------------------------------
 * The fast path (what the backend table holds).  The simple ops above are
 * its reference (tests/test_residual_variants.c compares the two) and run the
 * shapes it does not take.
 *
 * Per token, each source row is read from memory once: one vector sweep
 * gives its key RMSNorm's sum of squares and the query dot product(s)
 * together (the RMSNorm is fused: logit = rstd (u.x), u = q g, no
 * normalised copy), with the next token's row prefetched; the mixing sweep
 * that follows finds the token's n rows in L1.  Every inner loop is a
 * branch-free loop of VL-float vectors (vec.h): flags are decided per
 * token or per source, outside them.  Heads: a VL-column block holds whole
 * heads (e = d/H divides VL; their dot products by a butterfly of lane
 * shuffles) or lies inside one head (VL divides e), so per-head weights
 * become a column vector by one permute or broadcast.  Narrow heads (e <
 * VL, H a multiple of VL: the ablation's 16 heads of 4 at d 64) are
 * packed VL to a vector instead (row_pack), and their logits, weights
 * and logit gradients handled a vector of heads at a time; head by head
 * they had taken twice one head's time and more (each head's sum stored
 * alone and read back by a vector load that waited for every store).
 * Scratch comes from the backend's workspace (no allocation per call); the backward keeps the
 * parameter gradient's partial as one row T = sum dl r x per chunk (or per
 * token for per-token queries), multiplied by g or q once at the end. */

/* d a multiple of VL, H dividing d, e = d/H a multiple or a divisor of VL */
static int fast_shape(int H, int d)
{
    if (H < 1 || d % VL != 0 || d % H != 0)
        return 0;
    int e = d / H;
    return e % VL == 0 || VL % e == 0;
}

/* The lanes' heads within a VL-column block for head_cols: lane l holds
 * head l/e when a block holds several (e < VL). */
static inline vi head_idx(int e)
{
    vi idx;
    for (int l = 0; l < VL; l++)
        idx[l] = e < VL ? l / e : 0;
    return idx;
}

/* The query with the key norm's gain folded in, u = q g, in workspace slot
 * ws (q itself without key norm). */
static const float *gain_query(const float *q, const float *g, int d, int ws)
{
    if (!g)
        return q;
    float *t = cpu_ws(ws, (size_t)d * sizeof(float));
    for (int j = 0; j < d; j++)
        t[j] = q[j] * g[j];
    return t;
}

/* Token i's query with the key norm's gain folded in: q_i g into ur (d
 * floats), or q_i itself without key norm (q_i = w + i wstride). */
static inline const float *token_query(const float *w, size_t wstride, const float *g, size_t i, int d,
                                       float *ur)
{
    const float *q = w + i * wstride;
    if (!g)
        return q;
    for (int j = 0; j < d; j++)
        ur[j] = q[j] * g[j];
    return ur;
}

/* Per-head values spread over the columns of VL-block b: column j gets
 * v[j/e].  Below VL, e divides VL, a power of two, so b VL / e is a shift
 * (GCC emitted an integer division a block for it).  The load is of the
 * whole vector v[VL m .. VL m + VL-1] holding the block's first head h0,
 * its lanes moved by the shuffle (idx + h0 - VL m): callers have just
 * stored those rows a vector at a time, and a load that starts inside a
 * vector just stored cannot take its value from the store (it waits for
 * the store to reach the cache).  v is read up to VL floats past VL m
 * (callers pad). */
static inline __attribute__((always_inline)) vf head_cols(const float *v, int b, int e, vi idx)
{
    if (e >= VL)
        return v_set1(v[b * VL / e]);
    const int h0 = (b * VL) >> __builtin_ctz((unsigned)e);
    return __builtin_shuffle(v_ld(v + (h0 & ~(VL - 1))), idx + (h0 & (VL - 1)));
}

/* out[a] = r sum_{j in G_a} p[j], a < H.  The scale is taken here, on the
 * scalar stores: a vector pass over out right after them would wait on
 * store forwarding (scalar stores cannot forward to a vector load), which
 * perf put at a fifth of the heads forward. */
static inline void head_sums(const float *p, int H, int e, int d, float r, float *out)
{
    if (e >= VL) {
        for (int a = 0; a < H; a++) {
            vf acc = {0};
            for (int j = a * e; j < (a + 1) * e; j += VL)
                acc += v_ld(p + j);
            out[a] = r * v_hsum(acc);
        }
        return;
    }
    for (int b = 0; b < d / VL; b++) {
        vf v = v_ld(p + b * VL);
        /* the butterfly: lane l gets the sum of its aligned group of e */
#if VL == 16
        if (e >= 2)
            v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
        if (e >= 4)
            v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
        if (e >= 8)
            v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
#elif VL == 8
        if (e >= 2)
            v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
        if (e >= 4)
            v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
#else
        if (e >= 2)
            v += __builtin_shufflevector(v, v, 1, 0, 3, 2);
#endif
        float *o = out + b * VL / e;
        for (int l = 0; l < VL / e; l++)
            o[l] = r * v[l * e];
    }
}

/* Pairwise sums of adjacent lanes of a then b, in order: lane l of the
 * result is a[2l] + a[2l+1] for l < VL/2, then b's (head_lanes.h's even and
 * odd lanes added). */
static inline vf v_padd(vf a, vf b) { return HL_EV(a, b) + HL_OD(a, b); }

/* Pairwise sums within each 128-bit lane of a and b (one in-lane shuffle
 * each, where v_padd's cross lanes): per 4-lane group k, (a[4k]+a[4k+1],
 * a[4k+2]+a[4k+3], b[4k]+b[4k+1], b[4k+2]+b[4k+3]). */
#if VL == 16
#define IP_EVEN 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30
#define IP_ODD 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31
#elif VL == 8
#define IP_EVEN 0, 2, 8, 10, 4, 6, 12, 14
#define IP_ODD 1, 3, 9, 11, 5, 7, 13, 15
#else
#define IP_EVEN 0, 2, 4, 6
#define IP_ODD 1, 3, 5, 7
#endif
static inline vf v_ipadd(vf a, vf b)
{
    return __builtin_shufflevector(a, b, IP_EVEN) + __builtin_shufflevector(a, b, IP_ODD);
}

/* Where v_ipadd's tree over e blocks (e = 2 or 4) leaves head l of the VL
 * it packs: lane perm[l].  Found by running the tree on lane numbers (the
 * lane a pair sum comes from is its left operand's). */
static vi pack_perm(int e)
{
    static const int ev[VL] = {IP_EVEN};
    int org[4][VL], t[VL];
    for (int b = 0; b < e && e <= 4; b++)
        for (int l = 0; l < VL; l++)
            org[b][l] = b * VL + l;
    for (int w = e; w > 1 && e <= 4; w /= 2)
        for (int k = 0; k < w / 2; k++) {
            for (int l = 0; l < VL; l++)
                t[l] = ev[l] < VL ? org[2 * k][ev[l]] : org[2 * k + 1][ev[l] - VL];
            memcpy(org[k], t, sizeof t);
        }
    vi perm = {0};
    for (int l = 0; l < VL && e <= 4; l++)
        perm[org[0][l] / e] = l;
    return perm;
}

/* Heads packed across the lanes, for e < VL with H a multiple of VL: the
 * sums of a group's e consecutive column blocks p[0..e-1] (VL heads) by a
 * tree of pairwise sums (in-lane v_ipadd and one permute by perm,
 * pack_perm(e), for e <= 4; v_padd for e = 8), whose lanes add in
 * head_sums' butterfly order, so the same bits: one vector of VL heads'
 * sums, where head_sums stores each head's sum alone (a vector load of
 * those scalar stores waits for each of them). */
static inline __attribute__((always_inline)) vf pack_tree(const vf *p, int e, vi perm)
{
    if (e == 1)
        return p[0];
    if (e == 2)
        return __builtin_shuffle(v_ipadd(p[0], p[1]), perm);
    if (e == 4)
        return __builtin_shuffle(v_ipadd(v_ipadd(p[0], p[1]), v_ipadd(p[2], p[3])), perm);
    return v_padd(v_padd(v_padd(p[0], p[1]), v_padd(p[2], p[3])),
                  v_padd(v_padd(p[4], p[5]), v_padd(p[6], p[7])));
}

/* One sweep of row x (d = e H floats) for packed heads: outa[a] = sum_{j
 * in G_a} a[j] x[j] for every head a, VL heads a vector (pack_tree on the
 * products in registers), the same of b into outb (b NULL: none), and
 * with sq *xx = x.x in row_sweep's two chains (even and odd column
 * blocks), so the same bits as row_sweep's.  Prefetches the next token's
 * row (x + d). */
static inline __attribute__((always_inline)) void row_pack_e(const float *a, const float *b, const float *x,
                                                              int e, int H, int sq, vi perm, float *outa,
                                                              float *outb, float *xx)
{
    vf q0 = {0}, q1 = {0};
    for (int g = 0; g < H / VL; g++) {
        const int b0 = g * e;
        vf pa[8], pb[8];
        for (int t = 0; t < e; t++) {
            const int j = (b0 + t) * VL;
            vf xv = v_ld(x + j);
            __builtin_prefetch(x + j + e * H, 0, 3);
            if (sq && ((b0 + t) & 1))
                q1 += xv * xv;
            else if (sq)
                q0 += xv * xv;
            pa[t] = v_ld(a + j) * xv;
            if (b)
                pb[t] = v_ld(b + j) * xv;
        }
        v_st(outa + g * VL, pack_tree(pa, e, perm));
        if (b)
            v_st(outb + g * VL, pack_tree(pb, e, perm));
    }
    if (sq)
        *xx = v_hsum(q0 + q1);
}

/* row_pack_e with e a constant in each branch (the tree unrolled).
 * Inlined: as a call (GCC's choice for plain inline) its outputs went
 * through memory, and the heads' forward and backward were 5-7% slower. */
static inline __attribute__((always_inline)) void row_pack(const float *a, const float *b, const float *x,
                                                            int e, int H, int sq, vi perm, float *outa,
                                                            float *outb, float *xx)
{
    if (e == 1)
        row_pack_e(a, b, x, 1, H, sq, perm, outa, outb, xx);
    else if (e == 2)
        row_pack_e(a, b, x, 2, H, sq, perm, outa, outb, xx);
    else if (e == 4)
        row_pack_e(a, b, x, 4, H, sq, perm, outa, outb, xx);
    else
        row_pack_e(a, b, x, 8, H, sq, perm, outa, outb, xx);
}

/* whether row_pack takes heads of e channels, H of them: e a divisor of
 * VL below it (1, 2, 4 or 8), H a multiple of VL */
static inline int packed_heads(int e, int H) { return e < VL && VL % e == 0 && H % VL == 0; }

/* One sweep of row x (d % VL == 0): *xx = x.x (sq), and with u: H1 ? *z =
 * u.x : p = u*x (d floats).  Prefetches the next token's row (x + d). */
static inline __attribute__((always_inline)) void row_sweep(const float *u, const float *x, int d,
                                                             int H1, int sq, float *z, float *p,
                                                             float *xx)
{
    vf s0 = {0}, s1 = {0}, q0 = {0}, q1 = {0};
    int j = 0;
    for (; j + 2 * VL <= d; j += 2 * VL) {
        vf x0 = v_ld(x + j), x1 = v_ld(x + j + VL);
        __builtin_prefetch(x + j + d, 0, 3);
        __builtin_prefetch(x + j + d + VL, 0, 3);
        if (sq) {
            q0 += x0 * x0;
            q1 += x1 * x1;
        }
        if (u && H1) {
            s0 += v_ld(u + j) * x0;
            s1 += v_ld(u + j + VL) * x1;
        } else if (u) {
            v_st(p + j, v_ld(u + j) * x0);
            v_st(p + j + VL, v_ld(u + j + VL) * x1);
        }
    }
    if (j < d) {
        vf x0 = v_ld(x + j);
        __builtin_prefetch(x + j + d, 0, 3);
        if (sq)
            q0 += x0 * x0;
        if (u && H1)
            s0 += v_ld(u + j) * x0;
        else if (u)
            v_st(p + j, v_ld(u + j) * x0);
    }
    if (sq)
        *xx = v_hsum(q0 + q1);
    if (u && H1)
        *z = v_hsum(s0 + s1);
}

/* softmax over s of each head's n logits (or sigmoid), in place */
static void mix_scores(float *a, int n, int H, int sigmoid)
{
    for (int hh = 0; hh < H; hh++) {
        float *ah = a + (size_t)hh * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                ah[s] = 1.0f / (1.0f + fast_expf(-ah[s]));
            continue;
        }
        float mx = ah[0];
        for (int s = 1; s < n; s++)
            mx = ah[s] > mx ? ah[s] : mx;
        for (int s = 0; s < n; s++)
            ah[s] = fast_expf(ah[s] - mx);
        float inv = 1.0f / sum8(ah, n);
        for (int s = 0; s < n; s++)
            ah[s] *= inv;
    }
}

/* The same over source-major logits z[s*P + a] (a < H; source rows P
 * apart, P at least H rounded up to VL: lanes past H are computed and not
 * used): VL heads at a time across the vector lanes, or VL tokens of a
 * tile (a token's one head a lane).  rs (or NULL): source s's logits are
 * first scaled by rs[s] (one rounding, as the simple op's r (u.x)), in the
 * pass that takes their maximum.  a (or NULL; only with H % VL == 0): the
 * weights are also stored there, rows of H (alpha's layout), in the pass
 * that normalises them. */
static void mix_scores_sm(float *z, int n, int H, int P, int sigmoid, const float *rs, float *a)
{
    for (int h0 = 0; h0 < H; h0 += VL) {
        float *z0 = z + h0;
        if (sigmoid) {
            for (int s = 0; rs && s < n; s++)
                v_st(z0 + s * P, v_ld(z0 + s * P) * rs[s]);
            for (int s = 0; s < n; s++)
                for (int l = 0; l < VL; l++)
                    z0[s * P + l] = 1.0f / (1.0f + fast_expf(-z0[s * P + l]));
            for (int s = 0; a && s < n; s++)
                v_st(a + (size_t)s * H + h0, v_ld(z0 + s * P));
            continue;
        }
        /* in registers: a loop over lanes with its maxima and sums in
         * arrays stores them one lane at a time and reloads them as
         * vectors, a wait on each store */
        vf mx = v_ld(z0), sum = {0};
        if (rs) {
            mx = mx * rs[0];
            v_st(z0, mx);
            for (int s = 1; s < n; s++) {
                vf t = v_ld(z0 + s * P) * rs[s];
                v_st(z0 + s * P, t);
                mx = v_max(t, mx);
            }
        } else {
            for (int s = 1; s < n; s++)
                mx = v_max(v_ld(z0 + s * P), mx);
        }
        for (int s = 0; s < n; s++) {
            vf t = v_expf(v_ld(z0 + s * P) - mx);
            v_st(z0 + s * P, t);
            sum += t;
        }
        vf inv = 1.0f / sum;
        for (int s = 0; s < n; s++) {
            vf t = v_ld(z0 + s * P) * inv;
            v_st(z0 + s * P, t);
            if (a)
                v_st(a + (size_t)s * H + h0, t);
        }
    }
}

/* y = sum_s a[s] x[s] (one head, d % VL == 0): four column blocks per sweep
 * of the n rows, their sums in registers */
static inline void mix_rows1(float *y, const float *a, const float *const *x, int n, int d)
{
    int b = 0;
    for (; b + 4 * VL <= d; b += 4 * VL) {
        vf y0 = {0}, y1 = {0}, y2 = {0}, y3 = {0};
        for (int s = 0; s < n; s++) {
            const float *xs = x[s] + b;
            y0 += a[s] * v_ld(xs);
            y1 += a[s] * v_ld(xs + VL);
            y2 += a[s] * v_ld(xs + 2 * VL);
            y3 += a[s] * v_ld(xs + 3 * VL);
        }
        v_st(y + b, y0);
        v_st(y + b + VL, y1);
        v_st(y + b + 2 * VL, y2);
        v_st(y + b + 3 * VL, y3);
    }
    for (; b < d; b += VL) {
        vf y0 = {0};
        for (int s = 0; s < n; s++)
            y0 += a[s] * v_ld(x[s] + b);
        v_st(y + b, y0);
    }
}

/* Where head_cols finds column block b's weights (e < VL): the offset
 * VL m of the vector holding its first head h0, and the lane shuffle idx +
 * h0 - VL m.  The same for every token: worked out once a call. */
static void head_cols_places(int nblk, int e, vi idx, int *off, vi *ix)
{
    for (int b = 0; b < nblk && e < VL; b++) {
        const int h0 = (b * VL) >> __builtin_ctz((unsigned)e);
        off[b] = h0 & ~(VL - 1);
        ix[b] = idx + (h0 & (VL - 1));
    }
}

/* y = sum_s a_s x_s with per-head weights, H > 1: column j of source s
 * weighted by at[s P + j/e] (rows P floats apart, padded for head_cols).
 * Four column blocks a sweep of the n rows, four independent chains of
 * multiply-adds (one block at a time waited on its own chain), each
 * block's sum over s in order; below VL each block's weights by the
 * places of head_cols_places (off, ix), worked out once a call: with
 * head_cols inside the loop over s GCC recomputed them once a source, and
 * in AVX2 code (16 vector registers) kept the places and the four sums on
 * the stack, once a token. */
static inline __attribute__((always_inline)) void mix_rows_heads(float *y, const float *at, int P,
                                                                  const float *const *x, int n, int d,
                                                                  int e, vi idx, const int *off,
                                                                  const vi *ix)
{
    for (int b0 = 0; b0 < d / VL; b0 += 4) {
        const int nb = d / VL - b0 < 4 ? d / VL - b0 : 4;
        if (e < VL && nb == 4) {
            vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            const int *o = off + b0;
            const vi *q = ix + b0;
            for (int s = 0; s < n; s++) {
                const float *a = at + (size_t)s * P, *xs = x[s] + b0 * VL;
                a0 += __builtin_shuffle(v_ld(a + o[0]), q[0]) * v_ld(xs);
                a1 += __builtin_shuffle(v_ld(a + o[1]), q[1]) * v_ld(xs + VL);
                a2 += __builtin_shuffle(v_ld(a + o[2]), q[2]) * v_ld(xs + 2 * VL);
                a3 += __builtin_shuffle(v_ld(a + o[3]), q[3]) * v_ld(xs + 3 * VL);
            }
            v_st(y + b0 * VL, a0);
            v_st(y + (b0 + 1) * VL, a1);
            v_st(y + (b0 + 2) * VL, a2);
            v_st(y + (b0 + 3) * VL, a3);
            continue;
        }
        for (int t = 0; t < nb; t++) {
            vf acc = {0};
            for (int s = 0; s < n; s++)
                acc += head_cols(at + (size_t)s * P, b0 + t, e, idx) * v_ld(x[s] + (b0 + t) * VL);
            v_st(y + (b0 + t) * VL, acc);
        }
    }
}

/* The weights of mixing without a query, the same for every token:
 * theta's scores (uniform without theta), in workspace slot WS_B, as a
 * token's row of alpha (source-major). */
static const float *static_weights(const float *theta, int n, int H, int sigmoid)
{
    float *a0 = cpu_ws(WS_B, (size_t)H * n * sizeof(float)), ah[H * n];
    for (int k = 0; k < H * n; k++)
        ah[k] = theta ? theta[k % n] : 0.0f;
    mix_scores(ah, n, H, sigmoid);
    alpha_from_heads(a0, ah, n, H);
    return a0;
}

/* Whether source s's key-norm rstd is in the caller's cache (ar_depth_mix:
 * rsc, rsc_ok), so that its row's squares need not be summed again. */
static inline int cached(const ar_depth_mix *m, int s) { return m->rsc && m->rsc_ok[s]; }

/* After a forward that took every source's rstd (key norm), read or
 * computed and then stored in rsc: all of them are in the cache now. */
static void cache_filled(const ar_depth_mix *m)
{
    for (int s = 0; m->rsc && m->g && s < m->n; s++)
        m->rsc_ok[s] = 1;
}

/* One head with a query, a tile of nt <= MIX_TILE consecutive tokens from
 * i0 (per-mixer query u, or per token where wstride), in three passes:
 *   A: each token's rows in turn, one sweep each: u.x_s into z[s][t] and
 *      x_s.x_s (key norm) into xx[s][t];
 *   B: r = rstd(x_s) with the tile's tokens across the vector lanes (rstd
 *      written), z *= r (one rounding, as the simple op), then the
 *      softmax (or sigmoid) over s, the tokens across the lanes
 *      (mix_scores_sm with the tokens as its heads);
 *   C: token by token, alpha's row and h = sum_s a_s x_s.
 * Why tiles: token by token, the scores are a chain of dependent scalar
 * steps (max, exp, sum, divide) after the token's sweeps, which the next
 * token's sweeps cannot overlap: a third of the op at d 64 with a few
 * sources.  Pass C reads the tile's rows again, from L2 where they
 * outgrow L1: at d 256 that costs more than the chains (BENCHMARKS.md,
 * "Per-token chains"), so cpu_depth_mix_fwd takes tiles only for rows of
 * at most MIX_TILE_MAX_D floats.  ur (d floats): scratch for a per-token
 * query times the gain. */
#define MIX_TILE 16
#define MIX_TILE_MAX_D 128
static void mix_fwd_tile1(const ar_depth_mix *m, float *h, const float *u, size_t i0, int nt, float *zt,
                          float *xt, float *ur, float *aloc, const float **xs)
{
    const float *const *src = m->src;
    const float *g = m->g;
    const int n = m->n, d = m->d;
    const size_t wstride = (size_t)m->wstride;
    if (nt < MIX_TILE) { /* the idle lanes: finite, unused */
        memset(zt, 0, (size_t)n * MIX_TILE * sizeof(float));
        memset(xt, 0, (size_t)n * MIX_TILE * sizeof(float));
    }
    for (int t = 0; t < nt; t++) {
        size_t i = i0 + (size_t)t;
        const float *uu = wstride ? token_query(m->w, wstride, g, i, d, ur) : u;
        for (int s = 0; s < n; s++) {
            if (g && !cached(m, s))
                row_sweep(uu, src[s] + i * d, d, 1, 1, &zt[s * MIX_TILE + t], NULL, &xt[s * MIX_TILE + t]);
            else
                row_sweep(uu, src[s] + i * d, d, 1, 0, &zt[s * MIX_TILE + t], NULL, NULL);
        }
    }
    if (g)
        for (int s = 0; s < n; s++) {
            float *z = zt + s * MIX_TILE, *r = xt + s * MIX_TILE;
            if (cached(m, s)) {
                const float *c = m->rsc[s] + i0;
                if (nt == MIX_TILE)
                    for (int l = 0; l < MIX_TILE; l++)
                        r[l] = c[l];
                else
                    for (int l = 0; l < MIX_TILE; l++) /* idle lanes: z is 0 */
                        r[l] = l < nt ? c[l] : 1.0f;
            } else {
                for (int l = 0; l < MIX_TILE; l++)
                    r[l] = rms_rstd(r[l], d);
                for (int t = 0; m->rsc && t < nt; t++)
                    m->rsc[s][i0 + t] = r[t];
            }
            for (int l = 0; l < MIX_TILE; l++)
                z[l] = r[l] * z[l];
        }
    /* each token's n rstd, consecutive in rstd: token by token */
    for (int t = 0; g && t < nt; t++)
        for (int s = 0; s < n; s++)
            m->rstd[(i0 + t) * n + s] = xt[s * MIX_TILE + t];
    mix_scores_sm(zt, n, MIX_TILE, MIX_TILE, m->sigmoid, NULL, NULL);
    for (int t = 0; t < nt; t++) {
        size_t i = i0 + (size_t)t;
        float *a = m->weights_unread ? aloc : m->alpha + i * n;
        for (int s = 0; s < n; s++) {
            a[s] = zt[s * MIX_TILE + t];
            xs[s] = src[s] + i * d;
        }
        mix_rows1(h + i * d, a, xs, n, d);
    }
}

/* One head with a query over tiles of MIX_TILE tokens (mix_fwd_tile1) */
static void mix_fwd_tiled1(const ar_depth_mix *m, float *h)
{
    const int n = m->n, d = m->d, N = m->N, unread = m->weights_unread;
    const float *u = m->wstride == 0 ? gain_query(m->w, m->g, d, WS_A) : NULL;
    /* per thread: the tile's logits and sums of squares, a token a lane */
    const size_t per = 2 * (size_t)n * MIX_TILE;
    float *tiles = cpu_ws(WS_B, (size_t)omp_get_max_threads() * per * sizeof(float));
    const int ntile = (N + MIX_TILE - 1) / MIX_TILE;
#pragma omp parallel if ((long)N * n * d > PAR_MIN)
    {
        float *zt = tiles + (size_t)omp_get_thread_num() * per, *xt = zt + (size_t)n * MIX_TILE;
        float ur[m->wstride ? d : 1], aloc[unread ? n : 1];
        const float *xs[n];
#pragma omp for schedule(static)
        for (int tb = 0; tb < ntile; tb++) {
            int i0 = tb * MIX_TILE, nt = N - i0 < MIX_TILE ? N - i0 : MIX_TILE;
            mix_fwd_tile1(m, h, u, (size_t)i0, nt, zt, xt, ur, aloc, xs);
        }
    }
    cache_filled(m);
}

void cpu_depth_mix_fwd(const ar_depth_mix *m, float *h)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    float *alpha = m->alpha, *rstd = m->rstd;
    if (n < 1 || !fast_shape(H, d)) {
        cpu_depth_mix_fwd_simple(m, h);
        return;
    }
    if (H == 1 && w && !theta && d <= MIX_TILE_MAX_D) {
        mix_fwd_tiled1(m, h);
        return;
    }
    const int e = d / H, Hn = H * n, P = H + VL; /* P: padded per-source head row */
    const int hasq = w && !theta;
    /* the shared query u = q g (q without key norm) */
    const float *u = hasq && wstride == 0 ? gain_query(w, g, d, WS_A) : NULL;
    /* no query: the weights are the same for every token */
    const float *a0 = hasq ? NULL : static_weights(theta, n, H, sigmoid);
    const vi idx = head_idx(e);
    const int packed = packed_heads(e, H), unread = m->weights_unread;
    const vi perm = pack_perm(e);
#pragma omp parallel if ((long)N * n * d > PAR_MIN)
    {
        float ur[hasq && wstride ? d : 1], pr[H > 1 ? d : 1], xx[n];
        float at[H > 1 ? n * P : 1], aloc[unread ? Hn : 1];
        const float *xs[n];
        int hoff[d / VL];
        vi hix[d / VL];
        head_cols_places(d / VL, e, idx, hoff, hix);
        memset(at, 0, sizeof at); /* the pad lanes too: they go through the scores */
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            float *a = unread ? aloc : alpha + (size_t)i * Hn;
            const float *uu = hasq && wstride ? token_query(w, (size_t)wstride, g, (size_t)i, d, ur) : u;
            for (int s = 0; s < n; s++)
                xs[s] = src[s] + (size_t)i * d;
            if (hasq) {
                /* the dot products and sums of squares source by source
                 * (no sum where the cache holds the row's rstd), then every
                 * source's rstd at once (independent divisions and square
                 * roots, where one source's would wait on the next row's
                 * sweep) and the logits scaled by it: r (u.x), one rounding
                 * as in the simple op */
                for (int s = 0; s < n; s++) {
                    const int sq = g && !cached(m, s);
                    if (H > 1 && packed && sq)
                        row_pack(uu, NULL, xs[s], e, H, 1, perm, at + s * P, NULL, &xx[s]);
                    else if (H > 1 && packed)
                        row_pack(uu, NULL, xs[s], e, H, 0, perm, at + s * P, NULL, NULL);
                    else if (H == 1 && sq)
                        row_sweep(uu, xs[s], d, 1, 1, &a[s], NULL, &xx[s]);
                    else if (H == 1)
                        row_sweep(uu, xs[s], d, 1, 0, &a[s], NULL, NULL);
                    else if (sq)
                        row_sweep(uu, xs[s], d, 0, 1, NULL, pr, &xx[s]);
                    else
                        row_sweep(uu, xs[s], d, 0, 0, NULL, pr, NULL);
                    if (H > 1 && !packed)
                        head_sums(pr, H, e, d, 1.0f, at + s * P);
                }
                if (g) {
                    float *rs = rstd + (size_t)i * n;
                    for (int s = 0; s < n; s++)
                        rs[s] = cached(m, s) ? m->rsc[s][i] : rms_rstd(xx[s], d);
                    for (int s = 0; m->rsc && s < n; s++)
                        if (!cached(m, s))
                            m->rsc[s][i] = rs[s];
                    if (H == 1)
                        for (int s = 0; s < n; s++)
                            a[s] = rs[s] * a[s];
                }
                if (H == 1) {
                    mix_scores(a, n, 1, sigmoid);
                } else {
                    /* heads across the lanes, then alpha: the same rows
                     * (stored by the scores' last pass where whole
                     * vectors fit them) */
                    const int vst = !unread && H % VL == 0;
                    mix_scores_sm(at, n, H, P, sigmoid, g ? rstd + (size_t)i * n : NULL, vst ? a : NULL);
                    for (int s = 0; s < n && !unread && !vst; s++)
                        copy_held(a + (size_t)s * H, at + (size_t)s * P, H);
                }
            } else {
                for (int s = 0; g && s < n; s++) {
                    float xx, r;
                    if (cached(m, s)) {
                        r = m->rsc[s][i];
                    } else {
                        row_sweep(NULL, xs[s], d, 1, 1, NULL, NULL, &xx);
                        r = rms_rstd(xx, d);
                        if (m->rsc)
                            m->rsc[s][i] = r;
                    }
                    rstd[(size_t)i * n + s] = r;
                }
                copy_held(a, a0, Hn);
                if (H > 1)
                    for (int s = 0; s < n; s++)
                        copy_held(at + (size_t)s * P, a0 + (size_t)s * H, H);
            }
            float *y = h + (size_t)i * d;
            if (H == 1) {
                mix_rows1(y, a, xs, n, d);
                continue;
            }
            mix_rows_heads(y, at, P, xs, n, d, e, idx, hoff, hix);
        }
    }
    cache_filled(m);
}

/* Sweep 2 of the backward for one source row: dx += A dh + C u - c3 x and
 * T += C x, A and C per-column weights (head_cols of a and of dl r). */
static inline __attribute__((always_inline)) void bwd_row(float *dx, float *T, const float *x,
                                                           const float *gy, const float *u,
                                                           const float *av, const float *cv,
                                                           float c3, int e, vi idx, int hasq,
                                                           int wantT, int d)
{
    for (int b = 0; b < d / VL; b++) {
        const int j = b * VL;
        vf xv = v_ld(x + j), A = head_cols(av, b, e, idx);
        if (hasq) {
            vf C = head_cols(cv, b, e, idx);
            if (dx)
                v_st(dx + j, v_ld(dx + j) + A * v_ld(gy + j) + C * v_ld(u + j) - c3 * xv);
            if (wantT)
                v_st(T + j, v_ld(T + j) + C * xv);
        } else if (dx) {
            v_st(dx + j, v_ld(dx + j) + A * v_ld(gy + j));
        }
    }
}

/* Sweep 1 of the backward for one source row: H1 ? *za = a.x, *zb = b.x :
 * pa = a*x, pb = b*x (b NULL: only a's).  Prefetches the next token's row. */
static inline __attribute__((always_inline)) void row_sweep2(const float *a, const float *b,
                                                              const float *x, int d, int H1,
                                                              float *za, float *zb, float *pa,
                                                              float *pb)
{
    vf s0 = {0}, s1 = {0}, t0 = {0}, t1 = {0};
    int j = 0;
    for (; j + 2 * VL <= d; j += 2 * VL) {
        vf x0 = v_ld(x + j), x1 = v_ld(x + j + VL);
        __builtin_prefetch(x + j + d, 0, 3);
        __builtin_prefetch(x + j + d + VL, 0, 3);
        if (H1) {
            s0 += v_ld(a + j) * x0;
            s1 += v_ld(a + j + VL) * x1;
            if (b) {
                t0 += v_ld(b + j) * x0;
                t1 += v_ld(b + j + VL) * x1;
            }
        } else {
            v_st(pa + j, v_ld(a + j) * x0);
            v_st(pa + j + VL, v_ld(a + j + VL) * x1);
            if (b) {
                v_st(pb + j, v_ld(b + j) * x0);
                v_st(pb + j + VL, v_ld(b + j + VL) * x1);
            }
        }
    }
    if (j < d) {
        vf x0 = v_ld(x + j);
        __builtin_prefetch(x + j + d, 0, 3);
        if (H1) {
            s0 += v_ld(a + j) * x0;
            if (b)
                t0 += v_ld(b + j) * x0;
        } else {
            v_st(pa + j, v_ld(a + j) * x0);
            if (b)
                v_st(pb + j, v_ld(b + j) * x0);
        }
    }
    if (H1) {
        *za = v_hsum(s0 + s1);
        if (b)
            *zb = v_hsum(t0 + t1);
    }
}

/* dl of one head for one source from da = dh.x and its weight as:
 * softmax as (da - cd) (cd = sum_s a da, cdot) or sigmoid da as (1 - as);
 * and the same for VL heads at once */
static inline float chunk_dl(float da, float as, float cd, int sigmoid)
{
    return sigmoid ? da * as * (1.0f - as) : as * (da - cd);
}

static inline vf v_chunk_dl(vf da, vf as, vf cd, int sigmoid)
{
    return sigmoid ? da * as * (1.0f - as) : as * (da - cd);
}

/* d logit of one token per head from da = dh.x: sigmoid a (1 - a) da, or
 * softmax a (da - sum_s a da) with the sum in float. */
static inline void mix_dlogits(float *dl, const float *a, const float *da, int n, int H, int sigmoid)
{
    for (int hh = 0; hh < H; hh++) {
        const float *ah = a + hh * n, *dah = da + hh * n;
        float *dlh = dl + hh * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                dlh[s] = dah[s] * ah[s] * (1.0f - ah[s]);
        } else {
            float cd = 0;
            for (int s = 0; s < n; s++)
                cd += ah[s] * dah[s];
            for (int s = 0; s < n; s++)
                dlh[s] = ah[s] * (dah[s] - cd);
        }
    }
}

/* mix_dlogits over source-major rows (a[s H + h], packed heads: H a
 * multiple of VL), VL heads a vector: the same sums in the same order,
 * lane by lane (GCC may fuse their products and adds differently from
 * the scalar loop's, so the last bit can differ). */
static inline void mix_dlogits_sm(float *dl, const float *a, const float *da, int n, int H, int sigmoid)
{
    for (int h0 = 0; h0 < H; h0 += VL) {
        vf cd = {0};
        for (int s = 0; s < n && !sigmoid; s++)
            cd += v_ld(a + (size_t)s * H + h0) * v_ld(da + (size_t)s * H + h0);
        for (int s = 0; s < n; s++) {
            const size_t o = (size_t)s * H + h0;
            v_st(dl + o, v_chunk_dl(v_ld(da + o), v_ld(a + o), cd, sigmoid));
        }
    }
}

/* Kept whole: per chunk of tokens, sweep 1 (da, dot), the d logit, sweep 2
 * (dsrc and T = sum dl r x) and the per-token query's gradients share the
 * parallel region's per-thread rows (T, ur, pr, pr2, av, cv: VLAs sized by
 * d, H and n) and the token's pointers; split apart, each piece would take
 * a dozen of them as arguments and the sweeps would no longer read against
 * the equations above. */
void cpu_depth_mix_bwd(const ar_depth_mix *m, float *const *dsrc, float *dw, float *dg, float *dtheta,
                       const float *dh)
{
    const float *const *src = m->src;
    const float *w = m->w, *g = m->g, *theta = m->theta;
    int n = m->n, wstride = m->wstride, sigmoid = m->sigmoid, H = m->H, N = m->N, d = m->d;
    const float *alpha = m->alpha, *rstd = m->rstd;
    if (n < 1 || !fast_shape(H, d)) {
        cpu_depth_mix_bwd_simple(m, dsrc, dw, dg, dtheta, dh);
        return;
    }
    const int e = d / H, Hn = H * n, P = H + VL;
    const int hasq = w && !theta;
    const int shared = hasq && wstride == 0;
    const int wantT = hasq && (dw || (g && dg));
    const int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK;
    /* per chunk partials: dw (d), dg (d), dtheta (n) */
    const size_t stride = (size_t)2 * d + n;
    float *part = cpu_ws(WS_A, (size_t)nch * stride * sizeof(float));
    const float *u = shared ? gain_query(w, g, d, WS_B) : NULL;
    const vi idx = head_idx(e);
    const int packed = packed_heads(e, H);
    const vi perm = pack_perm(e);
#pragma omp parallel if (nch > 1 && (long)N * n * d > PAR_MIN)
    {
        float T[d], ur[hasq && !shared ? d : 1], pr[H > 1 ? d : 1], pr2[H > 1 ? d : 1];
        float da[Hn], dl[Hn], dot[Hn], zh[H], zh2[H], av[P], cv[P], ahm[Hn];
        const float *xs[n];
        memset(av, 0, sizeof av);
        memset(cv, 0, sizeof cv);
#pragma omp for schedule(static)
        for (int c = 0; c < nch; c++) {
            float *pw = part + (size_t)c * stride, *pg = pw + d, *pt = pg + d;
            memset(pw, 0, stride * sizeof(float));
            memset(T, 0, sizeof T);
            int i1 = (c + 1) * MIX_CHUNK < N ? (c + 1) * MIX_CHUNK : N;
            for (int i = c * MIX_CHUNK; i < i1; i++) {
                /* packed heads keep alpha's source-major rows (VL heads a
                 * vector, da, dot and dl laid out alike); other heads go
                 * head-major for mix_dlogits */
                const float *a = alpha + (size_t)i * Hn, *gy = dh + (size_t)i * d;
                if (H > 1 && !packed) {
                    alpha_to_heads(ahm, a, n, H);
                    a = ahm;
                }
                const float *q = hasq ? w + (size_t)i * wstride : NULL;
                const float *uu = hasq && !shared ? token_query(w, (size_t)wstride, g, (size_t)i, d, ur) : u;
                for (int s = 0; s < n; s++)
                    xs[s] = src[s] + (size_t)i * d;
                /* sweep 1: da = dh.x and dot = u.x, per head */
                for (int s = 0; s < n; s++) {
                    if (H == 1 && hasq) {
                        row_sweep2(gy, uu, xs[s], d, 1, &da[s], &dot[s], NULL, NULL);
                    } else if (H == 1) {
                        row_sweep2(gy, NULL, xs[s], d, 1, &da[s], NULL, NULL, NULL);
                        dot[s] = 0;
                    } else if (packed) {
                        row_pack(gy, hasq ? uu : NULL, xs[s], e, H, 0, perm, da + (size_t)s * H,
                                 hasq ? dot + (size_t)s * H : NULL, NULL);
                    } else {
                        if (hasq)
                            row_sweep2(gy, uu, xs[s], d, 0, NULL, NULL, pr, pr2);
                        else
                            row_sweep2(gy, NULL, xs[s], d, 0, NULL, NULL, pr, NULL);
                        head_sums(pr, H, e, d, 1.0f, zh);
                        for (int hh = 0; hh < H; hh++)
                            da[hh * n + s] = zh[hh];
                        if (hasq) {
                            head_sums(pr2, H, e, d, 1.0f, zh2);
                            for (int hh = 0; hh < H; hh++)
                                dot[hh * n + s] = zh2[hh];
                        } else {
                            for (int hh = 0; hh < H; hh++)
                                dot[hh * n + s] = 0;
                        }
                    }
                }
                if (packed)
                    mix_dlogits_sm(dl, a, da, n, H, sigmoid);
                else
                    mix_dlogits(dl, a, da, n, H, sigmoid);
                /* sweep 2: dsrc, and T = sum dl r x */
                for (int s = 0; s < n; s++) {
                    float r = g ? rstd[(size_t)i * n + s] : 1.0f, cross = 0, sdl = 0;
                    if (packed) { /* VL heads a vector, source s's row of each */
                        vf crossv = {0}, sdlv = {0};
                        for (int h0 = 0; h0 < H; h0 += VL) {
                            size_t o = (size_t)s * H + h0;
                            vf dlv = v_ld(dl + o);
                            v_st(av + h0, v_ld_held(a + o));
                            v_st(cv + h0, dlv * r);
                            if (hasq)
                                crossv += dlv * v_ld(dot + o);
                            sdlv += dlv;
                        }
                        cross = v_hsum(crossv);
                        sdl = v_hsum(sdlv);
                    }
                    for (int hh = 0; hh < H && !packed; hh++) {
                        av[hh] = a[hh * n + s];
                        cv[hh] = dl[hh * n + s] * r;
                        cross += dl[hh * n + s] * dot[hh * n + s];
                        sdl += dl[hh * n + s];
                    }
                    if (theta)
                        pt[s] += sdl;
                    /* through rstd: only with key norm */
                    const float c3 = g ? cross * r * r * r / d : 0.0f;
                    float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                    if (hasq && wantT && dx)
                        bwd_row(dx, T, xs[s], gy, uu, av, cv, c3, e, idx, 1, 1, d);
                    else if (hasq && wantT)
                        bwd_row(NULL, T, xs[s], gy, uu, av, cv, c3, e, idx, 1, 1, d);
                    else if (hasq && dx)
                        bwd_row(dx, T, xs[s], gy, uu, av, cv, c3, e, idx, 1, 0, d);
                    else if (dx)
                        bwd_row(dx, T, xs[s], gy, uu, av, cv, c3, e, idx, 0, 0, d);
                }
                if (wantT && !shared) {
                    /* per-token query: dw_i += g T, dg += q T */
                    if (dw) {
                        float *dwi = dw + (size_t)i * d;
                        if (g)
                            for (int j = 0; j < d; j++)
                                dwi[j] += g[j] * T[j];
                        else
                            for (int j = 0; j < d; j++)
                                dwi[j] += T[j];
                    }
                    if (g && dg)
                        for (int j = 0; j < d; j++)
                            pg[j] += q[j] * T[j];
                    memset(T, 0, sizeof T);
                }
            }
            if (wantT && shared) {
                if (dw) {
                    if (g)
                        for (int j = 0; j < d; j++)
                            pw[j] = g[j] * T[j];
                    else
                        memcpy(pw, T, sizeof T);
                }
                if (g && dg)
                    for (int j = 0; j < d; j++)
                        pg[j] = w[j] * T[j];
            }
        }
    }
    mix_reduce(part, nch, stride, n, d, shared && dw ? dw : NULL, hasq && g && dg ? dg : NULL,
               theta ? dtheta : NULL);
}

/* ------------------------------------------------------------------------
 * The backward in pieces (lib/ops.def: depth_mix_cdot, depth_mix_bwd_chunk):
 * a chunk of C mixers that share sources takes each shared source row from
 * memory once per token, and its gradient row once, instead of once per
 * mixer; cdot stands in for the softmax's sum over all of a mixer's
 * sources. */

#define MIX_CHUNK_MAX 8 /* mixers per chunk op call */

void cpu_depth_mix_cdot(float *cdot, const float *dh, const float *h, int H, int N, int d)
{
    const int e = d / H;
    if (fast_shape(H, d)) {
        /* the chunk op's dh.x in the same order: one head's by dots, packed
         * heads' by row_pack's tree (the order head_lanes_dot keeps in the
         * lane form), wider heads' from the products by head_sums, so
         * that for a mixer of one source (h = x) dh.x - cdot is exactly 0;
         * a scalar loop would be one chain of d dependent multiply-adds a
         * token */
        const int packed = packed_heads(e, H);
        const vi perm = pack_perm(e);
#pragma omp parallel if ((long)N * d > PAR_MIN)
        {
            float p[d];
#pragma omp for schedule(static)
            for (int i = 0; i < N; i++) {
                const float *gy = dh + (size_t)i * d, *x = h + (size_t)i * d;
                if (H == 1) {
                    dots_n(&gy, 1, x, d, cdot + i, NULL, 0);
                    continue;
                }
                if (packed) {
                    row_pack(gy, NULL, x, e, H, 0, perm, cdot + (size_t)i * H, NULL, NULL);
                    continue;
                }
                for (int j = 0; j < d; j += VL)
                    v_st(p + j, v_ld(gy + j) * v_ld(x + j));
                head_sums(p, H, e, d, 1.0f, cdot + (size_t)i * H);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) if ((long)N * d > PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *gy = dh + (size_t)i * d, *x = h + (size_t)i * d;
        for (int a = 0; a < H; a++) {
            float acc = 0;
            for (int j = a * e; j < (a + 1) * e; j++)
                acc += gy[j] * x[j];
            cdot[(size_t)i * H + a] = acc;
        }
    }
}


/* Adds the per-token-chunk partials (per mixer: dw d, dg d, dtheta ns) in
 * chunk order: the thread count does not change the sums. */
static void chunk_reduce(const float *part, int nch, int C, size_t pc, int s0, int ns, int d, float *const *dw,
                         float *const *dg, float *const *dtheta, int hasq, int keyn, int hastheta)
{
    for (int ch = 0; ch < nch; ch++)
        for (int c = 0; c < C; c++) {
            const float *pw = part + ((size_t)ch * C + c) * pc, *pg = pw + d, *pt = pg + d;
            if (hasq && dw[c])
                for (int j = 0; j < d; j++)
                    dw[c][j] += pw[j];
            if (hasq && keyn && dg[c])
                for (int j = 0; j < d; j++)
                    dg[c][j] += pg[j];
            if (hastheta && dtheta[c])
                for (int t = 0; t < ns; t++)
                    dtheta[c][s0 + t] += pt[t];
        }
}

/* A chunk whose mixers hold its sources at shifted places (off): the
 * same chunk with each mixer's rows of alpha, rstd and dtheta begun at its
 * offset, so that place s + off[c] is index s of them and the kernels
 * below index by s alone.  The arrays al, rs, dt (C entries) hold the
 * shifted pointers; returns the chunk to run (c itself without off). */
static const ar_depth_mix_chunk *chunk_placed(const ar_depth_mix_chunk *c, ar_depth_mix_chunk *tmp,
                                              const float **al, const float **rs, float **dt,
                                              float *const **dtheta)
{
    if (!c->off)
        return c;
    *tmp = *c;
    for (int q = 0; q < c->C; q++) {
        int o = c->off[q];
        al[q] = c->alpha[q] + (size_t)o * c->H; /* source-major rows */
        rs[q] = c->rstd[q] ? c->rstd[q] + o : NULL;
        dt[q] = *dtheta && (*dtheta)[q] ? (*dtheta)[q] + o : NULL;
    }
    tmp->alpha = al, tmp->rstd = rs, tmp->off = NULL;
    *dtheta = dt;
    return tmp;
}

void cpu_depth_mix_bwd_chunk_simple(const ar_depth_mix_chunk *chunk, float *const *dsrc,
                                    float *const *dw, float *const *dg, float *const *dtheta,
                                    const float *const *dh, const float *const *cdot)
{
    ar_depth_mix_chunk placed;
    const float *al[chunk->C > 0 ? chunk->C : 1], *rs[chunk->C > 0 ? chunk->C : 1];
    float *dt[chunk->C > 0 ? chunk->C : 1];
    chunk = chunk_placed(chunk, &placed, al, rs, dt, &dtheta);
    const float *const *src = chunk->src, *const *alpha = chunk->alpha, *const *rstd = chunk->rstd;
    const float *const *w = chunk->w, *const *g = chunk->g, *const *theta = chunk->theta;
    const int *n = chunk->n;
    int s0 = chunk->s0, s1 = chunk->s1, C = chunk->C, sigmoid = chunk->sigmoid, H = chunk->H;
    int N = chunk->N, d = chunk->d;
    if (s1 <= s0 || C < 1 || N < 1)
        return;
    const int e = d / H, ns = s1 - s0;
    const int hasq = w[0] && !theta[0], keyn = g[0] != NULL, hastheta = theta[0] != NULL;
    const int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK;
    const size_t pc = (size_t)2 * d + ns, stride = (size_t)C * pc;
    float *part = cpu_ws(WS_A, (size_t)nch * stride * sizeof(float));
    memset(part, 0, (size_t)nch * stride * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nch; ch++) {
        int i1 = (ch + 1) * MIX_CHUNK < N ? (ch + 1) * MIX_CHUNK : N;
        for (int i = ch * MIX_CHUNK; i < i1; i++)
            for (int s = s0; s < s1; s++) {
                const float *x = src[s] + (size_t)i * d;
                float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                for (int c = 0; c < C; c++) {
                    float *pw = part + ((size_t)ch * C + c) * pc, *pg = pw + d, *pt = pg + d;
                    const float *gy = dh[c] + (size_t)i * d, *q = hasq ? w[c] : NULL, *gc = g[c];
                    const float *a = alpha[c] + ((size_t)i * n[c] + s) * H; /* source s's heads */
                    const float r = keyn ? rstd[c][(size_t)i * n[c] + s] : 1.0f;
                    float dl[H], dot[H], cross = 0;
                    for (int hh = 0; hh < H; hh++) {
                        float acc = 0, u = 0;
                        for (int j = hh * e; j < (hh + 1) * e; j++) {
                            acc += gy[j] * x[j];
                            if (q)
                                u += q[j] * (gc ? gc[j] : 1.0f) * x[j];
                        }
                        dl[hh] = chunk_dl(acc, a[hh], cdot[c][(size_t)i * H + hh], sigmoid);
                        dot[hh] = u;
                        cross += dl[hh] * u;
                        if (hastheta)
                            pt[s - s0] += dl[hh];
                    }
                    const float c3 = keyn ? cross * r * r * r / d : 0.0f;
                    for (int hh = 0; hh < H; hh++) {
                        const float as = a[hh], ca = dl[hh] * r;
                        for (int j = hh * e; j < (hh + 1) * e; j++) {
                            const float gj = gc ? gc[j] : 1.0f;
                            if (dx)
                                dx[j] += as * gy[j] + (q ? ca * q[j] * gj : 0.0f) - c3 * x[j];
                            if (q) {
                                pw[j] += ca * gj * x[j];
                                pg[j] += ca * q[j] * x[j];
                            }
                        }
                    }
                    (void)dot;
                }
            }
    }
    chunk_reduce(part, nch, C, pc, s0, ns, d, dw, dg, dtheta, hasq, keyn, hastheta);
}

/* Token chunk ch of a chunk backward begins: its partials (stride floats)
 * and the C rows of T (d floats each, one after another) zeroed; returns
 * the partials, *i1 the chunk's end. */
static float *chunk_start(float *part, size_t stride, int ch, float *T, int C, int d, int N, int *i1)
{
    float *pch = part + (size_t)ch * stride;
    memset(pch, 0, stride * sizeof(float));
    memset(T, 0, (size_t)C * d * sizeof(float));
    *i1 = (ch + 1) * MIX_CHUNK < N ? (ch + 1) * MIX_CHUNK : N;
    return pch;
}

/* One head (H = 1), the chunk's C mixers at once, per token and source:
 * one sweep of the row for every dh_c.x (and u_c.x), then one for its
 * gradient row, dx += sum_c (a_c dh_c + C_c u_c) - (sum_c c3_c) x and
 * T_c += C_c x (the two-phase backward's kernels, depth_rows.h), where
 * mixer by mixer took C of each.  Tokens in tiles of bwd_tile, source by
 * source within a tile (depth_rows.h).  The rest as
 * cpu_depth_mix_bwd_chunk. */
static void mix_bwd_chunk_one_head(const ar_depth_mix_chunk *chunk, float *const *dsrc, const float *u,
                                   float *part, size_t pc, int wantT, const float *const *dh,
                                   const float *const *cdot)
{
    const float *const *src = chunk->src, *const *alpha = chunk->alpha, *const *rstd = chunk->rstd;
    const float *const *w = chunk->w, *const *g = chunk->g, *const *theta = chunk->theta;
    const int *n = chunk->n;
    int s0 = chunk->s0, s1 = chunk->s1, C = chunk->C, sigmoid = chunk->sigmoid, N = chunk->N, d = chunk->d;
    const int hasq = w[0] && !theta[0], keyn = g[0] != NULL, hastheta = theta[0] != NULL;
    const int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK, ns = s1 - s0;
    const size_t stride = (size_t)C * pc;
    const int tile = bwd_tile(C, d);
#pragma omp parallel if (nch > 1 && (long)N * ns * C * d > PAR_MIN)
    {
        float T[MIX_CHUNK_MAX][d];
        float *Tp[MIX_CHUNK_MAX], a[MIX_CHUNK_MAX], cv[MIX_CHUNK_MAX], t[2 * MIX_CHUNK_MAX];
        const float *rows[2 * MIX_CHUNK_MAX], **gy = rows, **ur = rows + C;
        for (int c = 0; c < C; c++) {
            Tp[c] = T[c];
            ur[c] = hasq ? u + (size_t)c * d : NULL;
        }
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            int i1;
            float *pch = chunk_start(part, stride, ch, &T[0][0], C, d, N, &i1);
            for (int i0 = ch * MIX_CHUNK; i0 < i1; i0 += tile) {
                int t1 = i0 + tile < i1 ? i0 + tile : i1;
                for (int s = s0; s < s1; s++)
                    for (int i = i0; i < t1; i++) {
                        for (int c = 0; c < C; c++)
                            gy[c] = dh[c] + (size_t)i * d;
                        const float *x = src[s] + (size_t)i * d;
                        float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                        for (int c = 0; c < C; c++)
                            a[c] = alpha[c][(size_t)i * n[c] + s];
                        if (!hasq && !hastheta) { /* uniform: no logit, dx += sum_c a_c dh_c */
                            if (dx)
                                inter_update(dx, 1, C, a, gy, NULL, NULL, 0.0f, x, NULL, 0, 0, d);
                            continue;
                        }
                        dots(rows, hasq ? 2 * C : C, x, d, t, NULL, 1);
                        float c3 = 0;
                        for (int c = 0; c < C; c++) {
                            const float r = keyn ? rstd[c][(size_t)i * n[c] + s] : 1.0f;
                            const float dl = chunk_dl(t[c], a[c], cdot[c][i], sigmoid);
                            cv[c] = dl * r;
                            if (hastheta)
                                pch[(size_t)c * pc + 2 * d + (s - s0)] += dl;
                            if (keyn && hasq) /* through rstd: only with key norm */
                                c3 += dl * t[C + c] * r * r * r / d;
                        }
                        if (dx && hasq && wantT)
                            inter_update(dx, 1, C, a, gy, cv, ur, -c3, x, Tp, 1, 1, d);
                        else if (dx && hasq)
                            inter_update(dx, 1, C, a, gy, cv, ur, -c3, x, NULL, 1, 0, d);
                        else if (dx)
                            inter_update(dx, 1, C, a, gy, NULL, NULL, -c3, x, NULL, 0, 0, d);
                        else if (wantT) /* no gradient wanted for this source: T alone */
                            for (int c = 0; c < C; c++)
                                for (int j = 0; j < d; j++)
                                    T[c][j] += cv[c] * x[j];
                    }
            }
            for (int c = 0; c < C && wantT; c++) {
                float *pw = pch + (size_t)c * pc, *pg = pw + d;
                for (int j = 0; j < d; j++) {
                    pw[j] = (keyn ? g[c][j] : 1.0f) * T[c][j];
                    pg[j] = w[c][j] * T[c][j];
                }
            }
        }
    }
}

/* Packed heads (packed_heads(e, H)), one token and source of a chunk in
 * head-lane form (head_lanes.h), for all C mixers, per group of VL heads:
 *   da = sum_j dt_j xt_j,  dot = sum_j ut_j xt_j   (the VL heads' sums, vertical)
 *   dl = alpha (da - cdot)  |  da alpha (1 - alpha),   cv = dl r
 *   dxt += alpha dt + cv ut,   Tt_c += cv xt
 * xt the source row x in head-lane form, dt_c and ut_c mixer c's dh row
 * and query (already in that form), alpha_c the token's weights from
 * this source, its H heads at wt[c] (alpha's source-major row: VL heads
 * one vector load, already in head-lane form).  dxt goes back to
 * column form once, and the key norm's term -(sum_c sum_a dl u.x r^3/d) x,
 * one scalar for all mixers, is taken after.  sdl (with static logits):
 * sum_a dl per mixer. */
static inline __attribute__((always_inline)) void lanes_token(
    const float *x, float *dx, const float *dt, const float *ut, float *Tt, const float *const *wt,
    const float *const *cd, const float *rv, int C, int e, int H, int d, int sigmoid, int hasq, int keyn,
    int logits, int wantT, float *sdl)
{
    vf c3v = {0};
    for (int g = 0; g < H / VL; g++) {
        const size_t o = (size_t)g * e * VL;
        vf xb[8], xt[8], dxt[8];
        for (int j = 0; j < e; j++) {
            xb[j] = v_ld(x + o + (size_t)j * VL);
            dxt[j] = (vf){0};
        }
        head_lanes_in(xb, e, xt);
        for (int c = 0; c < C; c++) {
            vf D[8], U[8];
            for (int j = 0; j < e; j++) {
                D[j] = v_ld(dt + (size_t)c * d + o + (size_t)j * VL);
                U[j] = hasq ? v_ld(ut + (size_t)c * d + o + (size_t)j * VL) : (vf){0};
            }
            const vf as = v_ld(wt[c] + (size_t)g * VL);
            vf cv = {0};
            if (logits) {
                const vf da = head_lanes_dot(D, xt, e);
                const vf dl = v_chunk_dl(da, as, v_ld(cd[c] + (size_t)g * VL), sigmoid);
                cv = dl * rv[c];
                if (keyn && hasq) /* through rstd: only with key norm */
                    c3v = v_fma(dl * head_lanes_dot(U, xt, e), v_set1(rv[c] * rv[c] * rv[c] / d), c3v);
                if (sdl)
                    sdl[c] += v_hsum(dl);
            }
            if (dx)
                for (int j = 0; j < e; j++)
                    dxt[j] = hasq ? v_fma(cv, U[j], v_fma(as, D[j], dxt[j])) : v_fma(as, D[j], dxt[j]);
            if (wantT)
                for (int j = 0; j < e; j++) {
                    float *t = Tt + (size_t)c * d + o + (size_t)j * VL;
                    v_st(t, v_fma(cv, xt[j], v_ld(t)));
                }
        }
        if (dx) {
            head_lanes_out(dxt, e, xb);
            for (int j = 0; j < e; j++)
                v_st(dx + o + (size_t)j * VL, v_ld(dx + o + (size_t)j * VL) + xb[j]);
        }
    }
    if (dx && keyn && hasq) {
        const vf c3 = v_set1(v_hsum(c3v));
        for (int j = 0; j < d; j += VL)
            v_st(dx + j, v_ld(dx + j) - c3 * v_ld(x + j));
    }
}

/* Packed heads, the chunk's C mixers at once in head-lane form
 * (lanes_token): each mixer's query goes to that form once a call, its
 * dh rows once a tile of tokens (dt), each source row once a token, and
 * the gradient rows' sum over mixers back once a token and source; T
 * stays in head-lane form until the chunk's end.  Mixer by mixer
 * (pack_tree sums, head_cols weights) each (token, mixer, source) took
 * some forty lane shuffles; here 2e a token and source, shared by the C
 * mixers, and 2e a token and mixer for a tile's sources.  Tokens in tiles
 * of bwd_tile, source by source within a tile (depth_rows.h); the rest as
 * cpu_depth_mix_bwd_chunk. */
static void mix_bwd_chunk_lanes(const ar_depth_mix_chunk *chunk, float *const *dsrc, const float *u,
                                float *part, size_t pc, int wantT, const float *const *dh,
                                const float *const *cdot)
{
    const float *const *src = chunk->src, *const *alpha = chunk->alpha, *const *rstd = chunk->rstd;
    const float *const *w = chunk->w, *const *g = chunk->g, *const *theta = chunk->theta;
    const int *n = chunk->n;
    int s0 = chunk->s0, s1 = chunk->s1, C = chunk->C, sigmoid = chunk->sigmoid, H = chunk->H;
    int N = chunk->N, d = chunk->d;
    const int hasq = w[0] && !theta[0], keyn = g[0] != NULL, hastheta = theta[0] != NULL;
    const int logits = hasq || hastheta, e = d / H;
    const int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK, ns = s1 - s0;
    const size_t stride = (size_t)C * pc;
    const int tile = bwd_tile(C, d);
    float *ut = cpu_ws(WS_C, (size_t)C * d * sizeof(float));
    for (int c = 0; c < C && hasq; c++)
        head_lanes_row_in(u + (size_t)c * d, e, H, ut + (size_t)c * d);
#pragma omp parallel if (nch > 1 && (long)N * ns * C * d > PAR_MIN)
    {
        float Tt[MIX_CHUNK_MAX * d], dt[(size_t)tile * C * d], aw[(size_t)tile * C * 4 * H], row[d];
        float rv[MIX_CHUNK_MAX], sdl[MIX_CHUNK_MAX];
        const float *cd[MIX_CHUNK_MAX], *wt[MIX_CHUNK_MAX];
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            int i1;
            float *pch = chunk_start(part, stride, ch, Tt, C, d, N, &i1);
            for (int i0 = ch * MIX_CHUNK; i0 < i1; i0 += tile) {
                int t1 = i0 + tile < i1 ? i0 + tile : i1;
                for (int i = i0; i < t1; i++)
                    for (int c = 0; c < C; c++)
                        head_lanes_row_in(dh[c] + (size_t)i * d, e, H, dt + ((size_t)(i - i0) * C + c) * d);
                for (int s = s0; s < s1; s++) {
                    /* the tile's weights of the next four sources: a token's
                     * run of them is contiguous in alpha (4 H floats), one
                     * stream, where a source at a time strode through the
                     * rows (slower in the model, from memory) */
                    const int sb = s0 + (s - s0) / 4 * 4, sn = s1 - sb < 4 ? s1 - sb : 4;
                    if (s == sb)
                        for (int i = i0; i < t1; i++)
                            for (int c = 0; c < C; c++)
                                copy_held(aw + ((size_t)(i - i0) * C + c) * 4 * H,
                                          alpha[c] + ((size_t)i * n[c] + s) * H, sn * H);
                    for (int i = i0; i < t1; i++) {
                        const float *x = src[s] + (size_t)i * d;
                        float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                        for (int c = 0; c < C; c++) {
                            cd[c] = cdot[c] + (size_t)i * H;
                            wt[c] = aw + (((size_t)(i - i0) * C + c) * 4 + (size_t)(s - sb)) * H;
                            rv[c] = keyn ? rstd[c][(size_t)i * n[c] + s] : 1.0f;
                            sdl[c] = 0;
                        }
                        const float *dti = dt + (size_t)(i - i0) * C * d;
                        float *sd = hastheta ? sdl : NULL;
#define LANES_TOKEN(E)                                                                                 \
    lanes_token(x, dx, dti, ut, Tt, wt, cd, rv, C, E, H, d, sigmoid, hasq, keyn, logits, wantT, sd)
                        if (e == 1)
                            LANES_TOKEN(1);
                        else if (e == 2)
                            LANES_TOKEN(2);
                        else if (e == 4)
                            LANES_TOKEN(4);
                        else
                            LANES_TOKEN(8);
#undef LANES_TOKEN
                        for (int c = 0; c < C && hastheta; c++)
                            pch[(size_t)c * pc + 2 * d + (s - s0)] += sdl[c];
                    }
                }
            }
            for (int c = 0; c < C && wantT; c++) {
                float *pw = pch + (size_t)c * pc, *pg = pw + d;
                head_lanes_row_out(Tt + (size_t)c * d, e, H, row);
                for (int j = 0; j < d; j++) {
                    pw[j] = (keyn ? g[c][j] : 1.0f) * row[j];
                    pg[j] = w[c][j] * row[j];
                }
            }
        }
    }
}

/* Whether the head-lane form pays for a chunk of C mixers and ns shared
 * sources: its conversions (each source row in and its gradient row out
 * once a token, each dh row in once a token) are shared by the C ns
 * pairs only where both are at least 2, or C is large.  Per (token,
 * mixer, source), one thread, d 64, 16 heads (bench_mix_heads, Zen 4),
 * lane form / per pair: C 1 ns 1..8 41-62 / 40-42; C 2 ns 1 48 / 40;
 * C 4 ns 1 41.5 / 40; C 8 ns 1 38.6 / 44; C 2 ns 2 37.5 / 39.5;
 * C 2 ns 4 27.6 / 38.6; C 4 ns 2 32.2 / 38.5 ns. */
static inline int lanes_pay(int C, int ns) { return C >= 2 && (ns >= 2 || C >= 8); }

/* The fast path: one head, mix_bwd_chunk_one_head (all mixers per
 * sweep); packed heads where lanes_pay, mix_bwd_chunk_lanes (head-lane
 * form); other packed heads pair by pair as wider heads, with the heads'
 * sums of the products by row_pack and their weights loaded, VL heads
 * a vector.  Wider heads (e a multiple of VL): per token and shared
 * source, the row is swept once per mixer while it sits in L1
 * (row_sweep2: dh.x and u.x, summed per head by head_sums), its gradient
 * row updated in place (bwd_row); the parameter gradients' partial is one
 * row T_c = sum dl r x per mixer and token chunk, times g or q at the
 * end.  Tokens in tiles of bwd_tile, source by source within a tile
 * (depth_rows.h). */
void cpu_depth_mix_bwd_chunk(const ar_depth_mix_chunk *chunk, float *const *dsrc, float *const *dw,
                             float *const *dg, float *const *dtheta, const float *const *dh,
                             const float *const *cdot)
{
    ar_depth_mix_chunk placed;
    const float *al[chunk->C > 0 ? chunk->C : 1], *rs[chunk->C > 0 ? chunk->C : 1];
    float *dt[chunk->C > 0 ? chunk->C : 1];
    chunk = chunk_placed(chunk, &placed, al, rs, dt, &dtheta);
    const float *const *src = chunk->src, *const *alpha = chunk->alpha, *const *rstd = chunk->rstd;
    const float *const *w = chunk->w, *const *g = chunk->g, *const *theta = chunk->theta;
    const int *n = chunk->n;
    int s0 = chunk->s0, s1 = chunk->s1, C = chunk->C, sigmoid = chunk->sigmoid, H = chunk->H;
    int N = chunk->N, d = chunk->d;
    if (s1 <= s0 || C < 1 || N < 1)
        return;
    if (!fast_shape(H, d) || C > MIX_CHUNK_MAX) {
        cpu_depth_mix_bwd_chunk_simple(chunk, dsrc, dw, dg, dtheta, dh, cdot);
        return;
    }
    const int e = d / H, ns = s1 - s0, P = H + VL;
    const int hasq = w[0] && !theta[0], keyn = g[0] != NULL, hastheta = theta[0] != NULL;
    int wantT = 0;
    for (int c = 0; c < C; c++)
        wantT |= hasq && (dw[c] || (keyn && dg[c]));
    const int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK;
    const size_t pc = (size_t)2 * d + ns, stride = (size_t)C * pc;
    float *part = cpu_ws(WS_A, (size_t)nch * stride * sizeof(float));
    /* u_c = w_c g_c (the key norm's gain folded into the query) */
    float *u = cpu_ws(WS_B, (size_t)C * d * sizeof(float));
    for (int c = 0; c < C && hasq; c++)
        for (int j = 0; j < d; j++)
            u[(size_t)c * d + j] = w[c][j] * (keyn ? g[c][j] : 1.0f);
    const int packed = packed_heads(e, H);
    if (H == 1 || (packed && lanes_pay(C, ns))) {
        if (H == 1)
            mix_bwd_chunk_one_head(chunk, dsrc, u, part, pc, wantT, dh, cdot);
        else
            mix_bwd_chunk_lanes(chunk, dsrc, u, part, pc, wantT, dh, cdot);
        chunk_reduce(part, nch, C, pc, s0, ns, d, dw, dg, dtheta, hasq, keyn, hastheta);
        return;
    }
    const vi idx = head_idx(e), perm = pack_perm(e);
    const int tile = bwd_tile(C, d);
#pragma omp parallel if (nch > 1 && (long)N * ns * C * d > PAR_MIN)
    {
        float T[MIX_CHUNK_MAX][d], pr[d], pr2[d];
        float da[H], dot[H], av[P], cv[P];
        memset(av, 0, sizeof av);
        memset(cv, 0, sizeof cv);
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            int i1;
            float *pch = chunk_start(part, stride, ch, &T[0][0], C, d, N, &i1);
            for (int i0 = ch * MIX_CHUNK; i0 < i1; i0 += tile) {
                int t1 = i0 + tile < i1 ? i0 + tile : i1;
                for (int s = s0; s < s1; s++)
                    for (int i = i0; i < t1; i++) {
                        const float *x = src[s] + (size_t)i * d;
                        float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                        for (int c = 0; c < C; c++) {
                            const float *gy = dh[c] + (size_t)i * d, *uc = hasq ? u + (size_t)c * d : NULL;
                            /* source s's H weights, cdot's H values */
                            const float *a = alpha[c] + ((size_t)i * n[c] + s) * H, *cd = cdot[c] + (size_t)i * H;
                            /* sweep 1: da = dh.x and dot = u.x, per head (uniform
                             * weights: no logit to differentiate, dx += dh / n only) */
                            if (!hasq && !hastheta) {
                                copy_held(av, a, H);
                                if (dx)
                                    bwd_row(dx, T[c], x, gy, NULL, av, cv, 0.0f, e, idx, 0, 0, d);
                                continue;
                            }
                            if (packed) {
                                row_pack(gy, uc, x, e, H, 0, perm, da, dot, NULL);
                            } else {
                                row_sweep2(gy, uc, x, d, 0, NULL, NULL, pr, pr2);
                                head_sums(pr, H, e, d, 1.0f, da);
                                if (uc)
                                    head_sums(pr2, H, e, d, 1.0f, dot);
                            }
                            const float r = keyn ? rstd[c][(size_t)i * n[c] + s] : 1.0f;
                            float cross = 0, sdl = 0;
                            if (packed) {
                                /* VL heads a vector, the rest lane-wise */
                                vf crossv = {0}, sdlv = {0};
                                for (int h0 = 0; h0 < H; h0 += VL) {
                                    vf as = v_ld_held(a + h0);
                                    vf dav = v_ld(da + h0);
                                    vf dl = v_chunk_dl(dav, as, v_ld(cd + h0), sigmoid);
                                    v_st(av + h0, as);
                                    v_st(cv + h0, dl * r);
                                    if (uc)
                                        crossv += dl * v_ld(dot + h0);
                                    sdlv += dl;
                                }
                                cross = v_hsum(crossv);
                                sdl = v_hsum(sdlv);
                            }
                            for (int hh = 0; hh < H && !packed; hh++) {
                                const float as = f_held(a[hh]), dl = chunk_dl(da[hh], as, cd[hh], sigmoid);
                                av[hh] = as;
                                cv[hh] = dl * r;
                                cross += uc ? dl * dot[hh] : 0.0f;
                                sdl += dl;
                            }
                            if (hastheta)
                                pch[(size_t)c * pc + 2 * d + (s - s0)] += sdl;
                            /* through rstd: only with key norm */
                            const float c3 = keyn ? cross * r * r * r / d : 0.0f;
                            /* sweep 2: dx += A dh + C u - c3 x, T += C x */
                            if (hasq && wantT)
                                bwd_row(dx, T[c], x, gy, uc, av, cv, c3, e, idx, 1, 1, d);
                            else if (hasq && dx)
                                bwd_row(dx, T[c], x, gy, uc, av, cv, c3, e, idx, 1, 0, d);
                            else if (dx)
                                bwd_row(dx, T[c], x, gy, uc, av, cv, c3, e, idx, 0, 0, d);
                        }
                    }
            }
            for (int c = 0; c < C && wantT; c++) {
                float *pw = pch + (size_t)c * pc, *pg = pw + d;
                for (int j = 0; j < d; j++) {
                    pw[j] = (keyn ? g[c][j] : 1.0f) * T[c][j];
                    pg[j] = w[c][j] * T[c][j];
                }
            }
        }
    }
    chunk_reduce(part, nch, C, pc, s0, ns, d, dw, dg, dtheta, hasq, keyn, hastheta);
}
