/* Depth attention on the CPU: the two-phase ops (the AttnRes report's
 * Algorithm 1 and Appendix B; the math of each op is in lib/ops.def, the
 * schedule in lib/residual_depth.c).
 *
 * Why it is fast here: every op walks the tokens (or tiles of a few
 * consecutive tokens) in the outer loop and, for one token, visits all C
 * mixers of a chunk and all their sources.  A source row (d floats) is
 * read from memory once and then served from L1 to every mixer that uses
 * it, so a chunk costs one pass over its shared sources instead of C
 * passes (forward) or 3C passes (backward).  The key
 * RMSNorm is fused into the logit: one sweep of a row gives both sum x^2 and
 * u.x, so logit = rstd * (u.x) needs no normalised copy.  Inside a token,
 * the kernels (dots and inter_update in depth_rows.h, mix below) keep
 * every running sum of a VL-float column in registers while they sweep
 * the rows (vec.h), and
 * prefetch the next token's rows, which are 4*d bytes apart in each of
 * several buffers: too many short streams for the hardware prefetcher.
 * That made phase 1 about 1.5x faster at the medium bench shape
 * (BENCHMARKS.md, "Depth-attention time per step").
 *
 * Determinism: parameter-gradient reductions over tokens go through
 * partials of RED_CHUNK tokens added in chunk order, so results do not
 * depend on the thread count. */
#include "ops_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "loops.h"
#include "depth_rows.h"
#include "rmsnorm_row.h"
#include "vec.h"
#include "workspace.h"

#define RED_CHUNK 128

/* a.b, in the same order as every dot product of dots: where a mixer has
 * one source (h = x exactly) dh.x - dh.h must cancel to zero. */
static float dotf(const float *a, const float *b, int d)
{
    float s;
    dots_n(&a, 1, b, d, &s, NULL, 0);
    return s;
}

/* Columns j .. j + W VL - 1 (W = 1 or 2) of y[c] = sum_{s<k} a[c*k + s] x[s]
 * for c < CC <= 4, the sums in registers through the sweep of the k rows.
 * Two vectors a row at once give 2 CC independent chains of multiply-adds
 * (one vector gave CC <= 4: too few to cover the FMA latency at d 64) and
 * let each row's streaming stores fill whole 64-byte lines when a vector
 * holds 32 bytes (AVX2: half-line non-temporal stores interleaved over
 * four rows made phase 1 about 2x slower on an AMD Zen 3; BENCHMARKS.md,
 * "Phase 1 on an AVX2 CPU").  Each element takes the same fused
 * multiply-adds (v_fma) in the same order whatever W. */
static inline __attribute__((always_inline)) void mix_cols(float *const *y, int CC, const float *a,
                                                            const float *const *x, int k, int npf,
                                                            int nt, int j, int W, int d)
{
    const float *w0 = a, *w1 = a + (CC > 1) * k, *w2 = a + (CC > 2) * 2 * k,
                *w3 = a + (CC > 3) * 3 * k;
    vf y0 = {0}, y1 = {0}, y2 = {0}, y3 = {0}; /* named: see dots_n */
    vf z0 = {0}, z1 = {0}, z2 = {0}, z3 = {0}; /* columns j + VL on, where W = 2 */
    for (int s = 0; s < npf; s++) {
        __builtin_prefetch(x[s] + j + d, 0, 3);
        if (W > 1)
            __builtin_prefetch(x[s] + j + VL + d, 0, 3);
    }
    for (int s = 0; s < k; s++) {
        vf xv = v_ld(x[s] + j), xw = W > 1 ? v_ld(x[s] + j + VL) : xv;
#define MIX_ROW(c, wc, yc, zc)                                                                     \
    if (CC > c)                                                                                    \
        V_FMA2(v_set1(wc[s]), xv, yc, xw, zc, W > 1);
        MIX_ROW(0, w0, y0, z0)
        MIX_ROW(1, w1, y1, z1)
        MIX_ROW(2, w2, y2, z2)
        MIX_ROW(3, w3, y3, z3)
#undef MIX_ROW
    }
#define MIX_ST(c, v, u)                                                                            \
    do {                                                                                           \
        if ((nt >> (c)) & 1) {                                                                     \
            v_stream(y[c] + j, v);                                                                 \
            if (W > 1)                                                                             \
                v_stream(y[c] + j + VL, u);                                                        \
        } else {                                                                                   \
            v_st(y[c] + j, v);                                                                     \
            if (W > 1)                                                                             \
                v_st(y[c] + j + VL, u);                                                            \
        }                                                                                          \
    } while (0)
    MIX_ST(0, y0, z0);
    if (CC > 1)
        MIX_ST(1, y1, z1);
    if (CC > 2)
        MIX_ST(2, y2, z2);
    if (CC > 3)
        MIX_ST(3, y3, z3);
#undef MIX_ST
}

/* y[c] = sum_{s<k} a[c*k + s] x[s] for c < CC <= 4: one sweep of the k rows
 * x[s] for all CC outputs per 2 VL columns (mix_cols), their sums in
 * registers.  The next token's row of x[s] (d floats on) is prefetched for
 * s < npf: rows not yet in cache, which the hardware prefetcher, meeting a
 * new 4 KiB page every other token in each of several buffers, fetches too
 * late.  y[c] may be one of the x[s]: each column is read for all outputs
 * before any is written.  Bit c of nt: y[c] by streaming stores (64-byte
 * aligned, d % VL == 0). */
static inline __attribute__((always_inline)) void mix_n(float *const *y, int CC,
                                                         const float *a, const float *const *x,
                                                         int k, int npf, int nt, int d)
{
    int j = 0;
    for (; j + 2 * VL <= d; j += 2 * VL)
        mix_cols(y, CC, a, x, k, npf, nt, j, 2, d);
    for (; j + VL <= d; j += VL)
        mix_cols(y, CC, a, x, k, npf, nt, j, 1, d);
    for (; j < d; j++) {
        float acc[4] = {0};
        for (int s = 0; s < k; s++)
            for (int c = 0; c < CC; c++)
                acc[c] += a[c * k + s] * x[s][j];
        for (int c = 0; c < CC; c++)
            y[c][j] = acc[c];
    }
}

/* y[c] = sum_{s<k} a[c*k + s] x[s] for c < C, four outputs per sweep of the
 * x rows (see mix_n; bit c of nt: y[c] streamed). */
static void mix(float *const *y, int C, const float *a, const float *const *x, int k, int npf,
                int nt, int d)
{
    for (int c0 = 0; c0 < C; c0 += 4) {
        const float *ac = a + (size_t)c0 * k;
        int ntc = nt >> c0;
        switch (C - c0) {
        case 1:
            mix_n(y + c0, 1, ac, x, k, npf, ntc, d);
            break;
        case 2:
            mix_n(y + c0, 2, ac, x, k, npf, ntc, d);
            break;
        case 3:
            mix_n(y + c0, 3, ac, x, k, npf, ntc, d);
            break;
        default:
            mix_n(y + c0, 4, ac, x, k, npf, ntc, d);
        }
    }
}

/* u[c] = w[c] * g[c] (w[c] without key norm, g NULL), C rows of d, in
 * workspace slot WS_A. */
static float *queries(const float *const *w, const float *const *g, int C, int d)
{
    float *u = cpu_ws(WS_A, (size_t)C * d * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int j = 0; j < d; j++)
            u[(size_t)c * d + j] = g ? w[c][j] * g[c][j] : w[c][j];
    return u;
}

/* score: sigmoid's weight 1 / (1 + e^-z) */
static inline float sigmoidf_fast(float z) { return 1.0f / (1.0f + fast_expf(-z)); }

/* The key's scale: rstd of the row from its sum of squares, or 1 without
 * key norm (the logit is then u.x itself). */
static inline float key_rstd(int key_norm, float xx, int d)
{
    return key_norm ? rms_rstd(xx, d) : 1.0f;
}

/* Phase 1, over tiles of TILE tokens.  Pass A, source by source: z[c,s] =
 * rstd_s (u_c . x_s) for every mixer and every token of the tile (one read
 * of each x_s, TILE consecutive rows: long runs the hardware prefetcher
 * follows, where token by token it met k streams of one 2 KiB row each;
 * and the tile's dot products are independent, so they overlap).  Pass B,
 * per mixer, the softmax over the k shared sources for all TILE tokens at
 * once, a token a vector lane (the max, the exps, the division and the
 * sum vectorise across tokens; token by token they were scalar, k of each
 * per mixer, and at d 64 they cost more than the dot products).  Pass C,
 * token by token: o_c = sum_s softmax_s x_s for all C mixers in one sweep
 * of the rows (still in L1 or L2: TILE * k rows).  Every weight takes the
 * same operations in the same order as token by token. */
#define TILE 16
/* Pass A for one source: z[c zs + l] = rstd_l (u_c . x_{i0+l}) for the
 * tile's tokens l < i1 - i0 (the idle lanes of a last tile 0) and c < C
 * <= 4, rstd_l into rs[i0 + l] (1 without key norm).  The dot products two
 * tokens a sweep (the u_c rows load once for both) with their sums left in
 * vectors (acc: (C + 1) TILE of them, a token a slot); then reduced a tile
 * at once, a token a lane (v_hsums: the bits of each token's own v_hsum),
 * and scaled by the rstd formed in the same lanes.  d % VL == 0. */
static void tile_logits(const float *const *u, int C, const float *xs, int i0, int i1, int N, int d,
                        int key_norm, vf *acc, float *z, size_t zs, float *rs)
{
    int nt = i1 - i0;
    /* rows of at most 128 floats: two rows 4 KiB on in this source (a
     * tile ahead at d 64) for each pair, where the next pair's (what dots_t
     * prefetches, among its loads) came too late from memory; longer rows
     * keep dots_t's (a burst of 2 rows' lines a pair was slower there) */
    int ahead = d <= 128 ? 1024 / d : 0;
    for (int i = i0; i < i1; i += 2) {
        dots_raw(u, C, xs + (size_t)i * d, i + 1 < i1 ? xs + (size_t)(i + 1) * d : NULL, d, key_norm,
                 acc + (i - i0), TILE, !ahead);
        for (int t = i + ahead; ahead && t < i + ahead + 2 && t < N; t++)
            for (size_t b = 0; b < (size_t)d * sizeof(float); b += 64)
                __builtin_prefetch((const char *)(xs + (size_t)t * d) + b, 0, 3);
    }
    for (int l = nt; l < TILE; l++)
        for (int c = 0; c <= C; c++)
            acc[c * TILE + l] = (vf){0};
    for (int l = 0; l < TILE; l += VL) {
        vf r = key_norm ? v_rms_rstd(v_hsums(acc + C * TILE + l), d) : v_set1(1.0f); /* key_rstd's */
        float rl[VL];
        v_st(rl, r);
        for (int q = 0; q < VL && l + q < nt; q++)
            rs[i0 + l + q] = rl[q];
        for (int c = 0; c < C; c++)
            v_st(z + c * zs + l, v_hsums(acc + c * TILE + l) * r);
    }
}

/* pass B1: one mixer's k x TILE logits zc (lane l: token l) into weights,
 * lse[l] of the first nt lanes (the others hold zeros) */
static void tile_softmax(float *zc, int k, float *lse, int nt)
{
    float mx[TILE], sum[TILE];
    for (int l = 0; l < TILE; l++)
        mx[l] = zc[l], sum[l] = 0.0f;
    for (int s = 1; s < k; s++)
        for (int l = 0; l < TILE; l++)
            mx[l] = zc[s * TILE + l] > mx[l] ? zc[s * TILE + l] : mx[l];
    for (int s = 0; s < k; s++)
        for (int l = 0; l < TILE; l++) {
            float e = fast_expf(zc[s * TILE + l] - mx[l]);
            zc[s * TILE + l] = e;
            sum[l] += e;
        }
    for (int l = 0; l < nt; l++)
        lse[l] = mx[l] + logf(sum[l]);
    for (int s = 0; s < k; s++)
        for (int l = 0; l < TILE; l++)
            zc[s * TILE + l] /= sum[l];
}

void cpu_depth_fwd_inter(const ar_depth_inter *chunk, float *const *o, const ar_norm_out *nf)
{
    float *const *lse = chunk->lse, *const *alpha = chunk->alpha, *const *rs = chunk->rs;
    const float *const *src = chunk->src, *const *w = chunk->w, *const *g = chunk->g;
    const int *n = chunk->n;
    int k = chunk->k, C = chunk->C, sigmoid = chunk->sigmoid, N = chunk->N, d = chunk->d;
    const float *ng = nf ? nf->gain : NULL;
    float *xn = nf ? nf->xn : NULL, *nrstd = nf ? nf->rstd : NULL;
    const float *u = queries(w, g, C, d);
    int key_norm = g != NULL;
    int nthr = omp_get_max_threads(), ntile = (N + TILE - 1) / TILE;
    /* per thread: z (C x k x TILE, a token a lane), then one token's
     * weights (C x k) */
    size_t ck = (size_t)C * k, per = (TILE + 1) * ck;
    float *zall = cpu_ws(WS_B, (size_t)nthr * per * sizeof(float));
    /* o rows are streamed to memory: phase 2 reads them only after the
     * sublayers between have long evicted them (not so the fused row hr,
     * normalised at once) */
    int stream = V_STREAM && d % VL == 0;
    for (int c = 0; c < C; c++)
        stream &= !o[c] || (uintptr_t)o[c] % 64 == 0;
    /* pass A's sums reduced a tile at once (v_hsums), the same bits as
     * token by token */
    int raw_sums = C <= 4 && d % VL == 0;
#pragma omp parallel if ((long)N * d * k * C > PAR_MIN)
    {
        float *zt = zall + (size_t)omp_get_thread_num() * per, *a = zt + TILE * ck;
        const float *ur[C], *x[k > 0 ? k : 1];
        float *y[C], zc[C], hr[xn ? d : 1];
        vf acc[(4 + 1) * TILE]; /* pass A's sums, unreduced: C logits and x.x a token */
        for (int c = 0; c < C; c++)
            ur[c] = u + (size_t)c * d;
#pragma omp for schedule(static) nowait
        for (int tb = 0; tb < ntile; tb++) {
            int i0 = tb * TILE, i1 = i0 + TILE < N ? i0 + TILE : N, nt = i1 - i0;
            if (nt < TILE) /* the last tile's idle lanes: finite, unused */
                memset(zt, 0, TILE * ck * sizeof(float));
            for (int s = 0; raw_sums && s < k; s++)
                tile_logits(ur, C, src[s], i0, i1, N, d, key_norm, acc, zt + (size_t)s * TILE,
                            (size_t)k * TILE, rs[s]);
            for (int s = 0; !raw_sums && s < k; s++) {
                /* the dot products, then each token's rstd and scaling
                 * across the tile's lanes (a division and a square root
                 * a token, in vectors) */
                float xx[TILE] = {0}, r[TILE];
                int i = i0;
                if (C <= 4) /* two tokens a sweep: the u_c rows load once for both */
                    for (; i + 1 < i1; i += 2) {
                        const float *xr = src[s] + (size_t)i * d;
                        float z2[4];
                        dots_pair(ur, C, xr, xr + d, d, zc, z2, key_norm ? &xx[i - i0] : NULL,
                                  key_norm ? &xx[i + 1 - i0] : NULL, 1);
                        for (int c = 0; c < C; c++) {
                            zt[((size_t)c * k + s) * TILE + (i - i0)] = zc[c];
                            zt[((size_t)c * k + s) * TILE + (i + 1 - i0)] = z2[c];
                        }
                    }
                for (; i < i1; i++) {
                    dots(ur, C, src[s] + (size_t)i * d, d, zc, key_norm ? &xx[i - i0] : NULL, 1);
                    for (int c = 0; c < C; c++)
                        zt[((size_t)c * k + s) * TILE + (i - i0)] = zc[c];
                }
                for (int l = 0; l < TILE; l++)
                    r[l] = key_rstd(key_norm, xx[l], d);
                for (int i = i0; i < i1; i++)
                    rs[s][i] = r[i - i0];
                for (int c = 0; c < C; c++)
                    for (int l = 0; l < TILE; l++)
                        zt[((size_t)c * k + s) * TILE + l] *= r[l];
            }
            for (int c = 0; c < C; c++) {
                float *zr = zt + (size_t)c * k * TILE;
                for (int i = i0; i < (chunk->weights_unread ? i0 : i1); i++) /* raw logits; phase 2 normalises */
                    for (int s = 0; s < k; s++)
                        alpha[c][(size_t)i * n[c] + s] = zr[s * TILE + (i - i0)];
                if (sigmoid) { /* independent weights, no normaliser */
                    for (int q = 0; q < k * TILE; q++)
                        zr[q] = sigmoidf_fast(zr[q]);
                    for (int i = i0; i < i1; i++)
                        lse[c][i] = 0.0f;
                } else {
                    tile_softmax(zr, k, lse[c] + i0, nt);
                }
            }
            for (int i = i0; i < i1; i++) {
                for (int s = 0; s < k; s++)
                    x[s] = src[s] + (size_t)i * d;
                /* the outputs wanted, with their weight rows (token i's
                 * lane of z) in a */
                int nc = 0, ntm = 0;
                for (int c = 0; c < C; c++) {
                    float *yc = c == 0 && xn ? hr : o[c] ? o[c] + (size_t)i * d : NULL;
                    if (!yc)
                        continue;
                    for (int s = 0; s < k; s++)
                        a[nc * k + s] = zt[((size_t)c * k + s) * TILE + (i - i0)];
                    ntm |= (stream && yc != hr) << nc;
                    y[nc++] = yc;
                }
                if (nc)
                    mix(y, nc, a, x, k, 0, ntm, d);
                if (xn)
                    cpu_rmsnorm_row(xn + (size_t)i * d, nrstd + i, hr, ng, d);
            }
        }
        if (stream)
            v_stream_fence();
    }
}

/* The softmax part of phase 2 for a tile of nt tokens, a token a lane:
 * z (j x TILE) the intra logits, lse (nt) phase 1's, al the tile's alpha
 * rows (n apart, phase 1's raw logits in the first k), at ((j + 1) x TILE)
 * the weights of o and the intra sources.  The k shared weights go
 * through lanes too (copied in and out: a copy costs less than a scalar
 * exp). */
static void tile_merge_weights(const float *z, int j, float *lse, float *al, int n, int k, float *at, int nt)
{
    /* al NULL: the weights are not kept (weights_unread), only at */
    float M[TILE], S[TILE], L[TILE], b[TILE], lv[TILE];
    for (int l = 0; l < TILE; l++)
        lv[l] = l < nt ? lse[l] : 0.0f;
    /* VL lanes at a time in registers (lane by lane, each lane's exps were
     * scalar calls in a chain) */
    for (int v = 0; v < TILE; v += VL) {
        vf m = v_ld(lv + v);
        for (int t = 0; t < j; t++)
            m = v_max(v_ld(z + t * TILE + v), m);
        vf sum = v_expf(v_ld(lv + v) - m);
        for (int t = 0; t < j; t++)
            sum += v_expf(v_ld(z + t * TILE + v) - m);
        v_st(M + v, m);
        v_st(S + v, sum);
    }
    for (int l = 0; l < nt; l++)
        L[l] = M[l] + logf(S[l]);
    for (int l = nt; l < TILE; l++)
        L[l] = 0.0f;
    for (int l = 0; l < TILE; l++)
        at[l] = fast_expf((l < nt ? lse[l] : 0.0f) - L[l]);
    for (int l = 0; l < nt; l++)
        lse[l] = L[l]; /* the backward recovers u.x_s = (log alpha_s + LSE) / rstd_s */
    for (int s = 0; al && s < k; s++) {
        for (int l = 0; l < TILE; l++)
            b[l] = l < nt ? al[(size_t)l * n + s] : 0.0f;
        for (int l = 0; l < TILE; l++)
            b[l] = fast_expf(b[l] - L[l]);
        for (int l = 0; l < nt; l++)
            al[(size_t)l * n + s] = b[l];
    }
    for (int t = 0; t < j; t++) {
        for (int l = 0; l < TILE; l++)
            at[(t + 1) * TILE + l] = fast_expf(z[t * TILE + l] - L[l]);
        for (int l = 0; al && l < nt; l++)
            al[(size_t)l * n + k + t] = at[(t + 1) * TILE + l];
    }
}

/* Phase 2: the j = n - k intra sources join by online softmax:
 *   LSE = log(exp(lse) + sum_t exp z_t),  h = exp(lse - LSE) o + sum_t exp(z_t - LSE) x_t
 * Over tiles of TILE tokens as phase 1: the logits source by source, the
 * weights across the tile's tokens in vector lanes (tile_merge_weights),
 * then per token h, o and the x_t in one sweep, as a mix of j + 1 rows. */
void cpu_depth_fwd_merge(const ar_depth_intra *m, float *h, const ar_norm_out *nf)
{
    float *lse = m->lse, *alpha = m->alpha, *const *rsi = m->rsi;
    const float *const *intra = m->src + m->k;
    const float *w = m->w, *g = m->g;
    int n = m->n, k = m->k, sigmoid = m->sigmoid, N = m->N, d = m->d;
    const float *ng = nf ? nf->gain : NULL;
    float *xn = nf ? nf->xn : NULL, *nrstd = nf ? nf->rstd : NULL;
    const float *u = queries(&w, g ? &g : NULL, 1, d);
    int j = n - k, ntile = (N + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) if ((long)N * d * (j + 1) > PAR_MIN)
    for (int tb = 0; tb < ntile; tb++) {
        int i0 = tb * TILE, i1 = i0 + TILE < N ? i0 + TILE : N, nt = i1 - i0;
        /* z: the intra logits, a token a lane (idle lanes 0); at: the
         * weights of o and the intra sources, likewise */
        float zt[(j > 0 ? j : 1) * TILE], at[(j + 1) * TILE], aw[j + 1], hr[xn ? d : 1];
        const float *x[j + 1];
        memset(zt, 0, sizeof zt);
        vf acc[2 * TILE];
        for (int t = 0; d % VL == 0 && t < j; t++)
            tile_logits(&u, 1, intra[t], i0, i1, N, d, g != NULL, acc, zt + t * TILE, 0, rsi[t]);
        for (int t = 0; d % VL != 0 && t < j; t++) /* two tokens a sweep, as in phase 1 */
            for (int i = i0; i < i1; i += 2) {
                const float *xr = intra[t] + (size_t)i * d;
                float xx[2], ux[2];
                if (i + 1 < i1)
                    dots_pair(&u, 1, xr, xr + d, d, ux, ux + 1, xx, xx + 1, 1);
                else
                    dots(&u, 1, xr, d, ux, xx, 1);
                for (int l = 0; l < 2 && i + l < i1; l++) {
                    float r = key_rstd(g != NULL, xx[l], d);
                    rsi[t][i + l] = r;
                    zt[t * TILE + (i + l - i0)] = r * ux[l];
                }
            }
        float *al0 = m->weights_unread ? NULL : alpha + (size_t)i0 * n;
        if (sigmoid) { /* h = o + sum_t sigmoid(z_t) x_t: no normaliser */
            for (int l = 0; l < nt; l++) {
                float *al = al0 ? al0 + (size_t)l * n : NULL;
                for (int s = 0; al && s < k; s++)
                    al[s] = sigmoidf_fast(al[s]);
                at[l] = 1.0f;
                for (int t = 0; t < j; t++) {
                    at[(t + 1) * TILE + l] = sigmoidf_fast(zt[t * TILE + l]);
                    if (al)
                        al[k + t] = at[(t + 1) * TILE + l];
                }
            }
        } else {
            tile_merge_weights(zt, j, lse + i0, al0, n, k, at, nt);
        }
        if (j == 0)
            continue; /* h = o already */
        for (int i = i0; i < i1; i++) {
            float *hi = h + (size_t)i * d;
            x[0] = hi;
            for (int t = 0; t < j; t++)
                x[t + 1] = intra[t] + (size_t)i * d;
            for (int t = 0; t <= j; t++)
                aw[t] = at[t * TILE + (i - i0)];
            /* h in place, or in a row of its own before the sublayer's RMSNorm */
            float *y = xn ? hr : hi;
            mix(&y, 1, aw, x, j + 1, 1, 0, d);
            if (xn)
                cpu_rmsnorm_row(xn + (size_t)i * d, nrstd + i, hr, ng, d);
        }
    }
}

/* u.x_s from the saved weight: logit = log(alpha_s) + LSE = rstd_s (u.x_s),
 * one log instead of a sweep over x_s.  Only called with alpha_s > 0. */
static inline float key_dot(float a, float LSE, float r) { return (logf(a) + LSE) / r; }
/* The same under score: sigmoid, logit = log(a / (1 - a)): only called
 * with 0 < a < 1 (dl = a (1 - a) da is 0 otherwise). */
static inline float key_dot_sigmoid(float a, float r) { return (logf(a) - log1pf(-a)) / r; }

/* The logit gradient dl of weight a from da = dh.x: softmax a (da - cdot)
 * (0 for a mixer of one source: exactly), sigmoid a (1 - a) da. */
static inline float logit_grad(int sigmoid, float a, float da, float cdot, int n)
{
    if (sigmoid)
        return a * (1.0f - a) * da;
    return n > 1 ? a * (da - cdot) : 0.0f;
}

/* u.x for the key norm's r^3 term, from the saved weight (0 where dl is):
 * one log (two under sigmoid) instead of a sweep of x.  Rows of at most
 * UX_BY_DOT floats take the dot product u.x instead, in the sweep that
 * forms dh.x: a few more multiply-adds per row there cost less than the
 * scalar logs (Full at d 64, 16 blocks: logf was 1.3% of the training
 * step, and sigmoid needs log1pf too). */
#define UX_BY_DOT 256
static inline float key_dot_of(int sigmoid, float a, float dl, float LSE, float r)
{
    if (dl == 0.0f)
        return 0.0f;
    return sigmoid ? key_dot_sigmoid(a, r) : key_dot(a, LSE, r);
}

/* dw += g * P, dg += w * P with P the sum of the nch partials (in order);
 * without key norm (g NULL) dw += P. */
static void reduce_partials(float *dw, float *dg, const float *part, int nch, size_t stride,
                            const float *w, const float *g, int d)
{
    for (int q = 0; q < d; q++) {
        float acc = 0.0f;
        for (int ch = 0; ch < nch; ch++)
            acc += part[(size_t)ch * stride + q];
        dw[q] += g ? g[q] * acc : acc;
        if (g)
            dg[q] += w[q] * acc;
    }
}

/* The sublayer norm's backward for one token, from xn = RMSNorm(h) (so h
 * is not needed, nor rebuilt from the sources): cpu_rmsnorm_bwd_row at
 * xh = h r = xn / g (gi = 1/g; the nz columns zc where g = 0 from the
 * sources instead, xh = r sum_s alpha_s x_s).  dh goes to `row` (the
 * caller's L1 copy) and to out (streamed where st).  Returns dh.h. */
static float norm_bwd_row(float *row, float *out, int st, float *pdg, const float *dxn,
                          const float *xn, const float *g, const float *gi, const int *zc,
                          int nz, float r, const float *al, const float *const *src, int n,
                          size_t off, float *xh, int d)
{
    int j = 0;
    for (; j + VL <= d; j += VL)
        v_st(xh + j, v_ld(xn + j) * v_ld(gi + j));
    for (; j < d; j++)
        xh[j] = xn[j] * gi[j];
    for (int z = 0; z < nz; z++) {
        float acc = 0.0f;
        for (int s = 0; s < n; s++)
            acc += al[s] * src[s][off + zc[z]];
        xh[zc[z]] = r * acc;
    }
    float c = cpu_rmsnorm_bwd_row(row, pdg, dxn, xh, g, r, 1, d);
    for (j = 0; j + VL <= d; j += VL)
        if (st)
            v_stream(out + j, v_ld(row + j));
        else
            v_st(out + j, v_ld(row + j));
    for (; j < d; j++)
        out[j] = row[j];
    return c / r;
}

/* Backward of one mixer's intra sources x_t = src[k+t], with c = dh.h =
 * sum_s alpha_s da_s:
 *   dl_t = alpha_t (dh.x_t - c)   (0 for a mixer of one source: exactly)
 *   dx_t += alpha_t dh + dl_t (rstd_t u - (u.x_t) rstd_t^3 x_t / d)
 *   P    += dl_t rstd_t x_t   (dw += g P, dg += w P)
 * With dxn, dh is first formed by the sublayer norm's backward from xn
 * (norm_bwd_row; h is NULL) and streamed to dh, which the deferred shared
 * pass reads only after other sublayers' work has evicted it. */
void cpu_depth_bwd_intra(const ar_depth_intra *m, float *const *dintra, float *dw, float *dg,
                         float *cdot, float *dh, const float *h, const ar_norm_grad *norm)
{
    const float *alpha = m->alpha, *lse = m->lse;
    const float *const *rsi = (const float *const *)m->rsi, *const *src = m->src;
    const float *w = m->w, *g = m->g;
    int n = m->n, k = m->k, sigmoid = m->sigmoid, N = m->N, d = m->d;
    const float *dxn = norm ? norm->dxn : NULL, *xn = norm ? norm->xn : NULL;
    const float *ng = norm ? norm->gain : NULL, *nrstd = norm ? norm->rstd : NULL;
    float *dng = norm ? norm->dgain : NULL;
    int j = n - k;
    const float *const *intra = src + k;
    const float *u = queries(&w, g ? &g : NULL, 1, d);
    int kn = g != NULL; /* the key norm's r^3 term: none without it */
    int uxdot = kn && d <= UX_BY_DOT;
    int nch = (N + RED_CHUNK - 1) / RED_CHUNK;
    /* partials: nch x d for dw/dg, then nch x d for dng; then 1/ng and the
     * columns where ng = 0 */
    float *part = cpu_ws(WS_B, ((size_t)2 * nch + 1) * d * sizeof(float) + (size_t)d * sizeof(int));
    float *npart = part + (size_t)nch * d, *gi = npart + (size_t)nch * d;
    int *zc = (int *)(gi + d), nz = 0;
    if (j > 0)
        memset(part, 0, (size_t)nch * d * sizeof(float));
    int st = 0;
    if (dxn) {
        memset(npart, 0, (size_t)nch * d * sizeof(float));
        for (int q = 0; q < d; q++) {
            gi[q] = ng[q] != 0.0f ? 1.0f / ng[q] : 0.0f;
            if (ng[q] == 0.0f)
                zc[nz++] = q;
        }
        st = V_STREAM && d % VL == 0 && (uintptr_t)dh % 64 == 0;
    }
#pragma omp parallel if ((long)N * d * (j + 1) > PAR_MIN)
    {
        float rowb[dxn ? 2 * d : 1];
#pragma omp for schedule(static) nowait
        for (int ch = 0; ch < nch; ch++) {
            float *pp = part + (size_t)ch * d;
            int i1 = (ch + 1) * RED_CHUNK < N ? (ch + 1) * RED_CHUNK : N;
            for (int i = ch * RED_CHUNK; i < i1; i++) {
                size_t off = (size_t)i * d;
                const float *al = alpha + (size_t)i * n;
                const float *dr = dh + off;
                float c;
                if (dxn) {
                    c = norm_bwd_row(rowb, dh + off, st, npart + (size_t)ch * d, dxn + off, xn + off,
                                     ng, gi, zc, nz, nrstd[i], al, src, n, off, rowb + d, d);
                    dr = rowb;
                } else {
                    c = dotf(dr, h + off, d);
                }
                cdot[i] = c;
                for (int t = 0; t < j; t++) {
                    const float *x = intra[t] + off;
                    float *dx = dintra[t] + off;
                    float a = al[k + t], r = rsi[t][i];
                    if (a == 0.0f)
                        continue; /* underflowed weight: no contribution */
                    float t2[2];
                    const float *rows[2] = {dr, u};
                    dots(rows, uxdot ? 2 : 1, x, d, t2, NULL, 0);
                    float dl = logit_grad(sigmoid, a, t2[0], c, n);
                    float ux = !kn ? 0.0f : uxdot ? t2[1] : key_dot_of(sigmoid, a, dl, lse[i], r);
                    float c1 = dl * r, c2 = dl * ux * r * r * r / d;
#pragma omp simd
                    for (int q = 0; q < d; q++) {
                        dx[q] += a * dr[q] + c1 * u[q] - c2 * x[q];
                        pp[q] += c1 * x[q];
                    }
                }
            }
        }
        if (st)
            v_stream_fence();
    }
    if (j > 0)
        reduce_partials(dw, dg, part, nch, (size_t)d, w, g, d);
    if (dxn)
        for (int q = 0; q < d; q++) {
            double acc = 0.0;
            for (int ch = 0; ch < nch; ch++)
                acc += npart[(size_t)ch * d + q];
            dng[q] += (float)acc;
        }
}

/* Backward of a chunk's shared sources, all C mixers at once (deferred until
 * the chunk's lowest mixer is done: no shared source is needed earlier):
 *   dl[c,s] = alpha_c[s] (dh_c.x_s - cdot_c)   (0 for a mixer of one source)
 *   dx_s   += sum_c (alpha_c[s] dh_c + dl rstd_s u_c) - (sum_c dl (u_c.x_s)) rstd_s^3 x_s / d
 *   P_c    += sum_s dl rstd_s x_s   (dw_c += g_c P_c, dg_c += w_c P_c)
 * Tokens in tiles of bwd_tile, source by source within a tile (depth_rows.h). */
void cpu_depth_bwd_inter(const ar_depth_inter *chunk, float *const *dsrc, float *const *dw,
                         float *const *dg, const float *const *dh, const float *const *cdot,
                         int overwrite)
{
    const float *const *alpha = (const float *const *)chunk->alpha;
    const float *const *lse = (const float *const *)chunk->lse, *const *rs = (const float *const *)chunk->rs;
    const float *const *src = chunk->src, *const *w = chunk->w, *const *g = chunk->g;
    const int *n = chunk->n;
    int k = chunk->k, C = chunk->C, sigmoid = chunk->sigmoid, N = chunk->N, d = chunk->d;
    const float *u = queries(w, g, C, d);
    int kn = g != NULL; /* the key norm's r^3 term: none without it */
    int uxdot = kn && d <= UX_BY_DOT;
    int nch = (N + RED_CHUNK - 1) / RED_CHUNK;
    size_t stride = (size_t)C * d;
    float *part = cpu_ws(WS_B, (size_t)nch * stride * sizeof(float));
    memset(part, 0, (size_t)nch * stride * sizeof(float));
    int tile = bwd_tile(C, d);
#pragma omp parallel for schedule(static) if ((long)N * d * k * C > PAR_MIN)
    for (int ch = 0; ch < nch; ch++) {
        float *pp = part + (size_t)ch * stride;
        int i1 = (ch + 1) * RED_CHUNK < N ? (ch + 1) * RED_CHUNK : N;
        /* rows[0..C-1] = dh_c (per token), rows[C..2C-1] = u_c: one sweep
         * of x gives dh_c.x and, with uxdot, u_c.x */
        const float *rows[2 * C], **ur = rows + C, **dr = rows;
        float *pc[C], a[C], t[2 * C], c1[C];
        for (int c = 0; c < C; c++) {
            ur[c] = u + (size_t)c * d;
            pc[c] = pp + (size_t)c * d;
        }
        for (int i0 = ch * RED_CHUNK; i0 < i1; i0 += tile) {
            int t1 = i0 + tile < i1 ? i0 + tile : i1;
            for (int s = 0; s < k; s++)
                for (int i = i0; i < t1; i++) {
                    const float *x = src[s] + (size_t)i * d;
                    float r = rs[s][i], norm = 0.0f;
                    for (int c = 0; c < C; c++)
                        dr[c] = dh[c] + (size_t)i * d;
                    dots(rows, uxdot ? 2 * C : C, x, d, t, NULL, 1);
                    for (int c = 0; c < C; c++) {
                        a[c] = alpha[c][(size_t)i * n[c] + s];
                        float dl = logit_grad(sigmoid, a[c], t[c], cdot[c][i], n[c]);
                        c1[c] = dl * r;
                        if (kn) /* u.x: 0 where dl is */
                            norm += dl * (uxdot ? t[C + c] : key_dot_of(sigmoid, a[c], dl, lse[c][i], r));
                    }
                    inter_update(dsrc[s] + (size_t)i * d, !overwrite, C, a, dr, c1, ur,
                                 -norm * r * r * r / d, x, pc, 1, 1, d);
                }
        }
    }
    for (int c = 0; c < C; c++)
        reduce_partials(dw[c], g ? dg[c] : NULL, part + (size_t)c * d, nch, stride, w[c], g ? g[c] : NULL, d);
}
