/* Row kernels the depth ops share (lib/cpu/depth_cpu.c's two-phase ops,
 * lib/cpu/mixer_cpu.c's general mixer): dot products of one row with up
 * to four others in one sweep, and the backward's update of one source
 * row for all the mixers of a chunk in one sweep.  Every running sum of a
 * VL-float column stays in a register (vec.h says why not omp simd). */
#ifndef AR_CPU_DEPTH_ROWS_H
#define AR_CPU_DEPTH_ROWS_H

#include <stddef.h>

#include "vec.h"

/* out[c] = a[c].x for c < CC <= 8 (4 where T = 2), and *xx = x.x (xx may
 * be NULL): one sweep of x with CC + 1 sums in registers (a single dot
 * product is bound by the latency of its one chain of adds, not by
 * memory).  Inlined with a constant CC, so the sums stay in registers.
 * pf: prefetch the next token's row of x (see mix_n).  T = 2: the same
 * for a second row x2 into out2 and xx2 in the same sweep (two tokens:
 * 2 CC + 2 chains, each a row loads once); every dot product takes the
 * same fused multiply-adds (v_fma) in the same order whatever T.
 * raw (not NULL, d % VL == 0): the sums are left as vectors, unreduced:
 * a[c].x in raw[c rs], x.x in raw[CC rs] (where xx is not NULL), x2's one
 * vector on (raw[c rs + 1]); v_hsums then reduces a tile of them at once
 * (to what v_hsum gives here, bit for bit). */
static inline __attribute__((always_inline)) void dots_t(const float *const *a, int CC, int T,
                                                          const float *x, const float *x2, int d,
                                                          float *out, float *out2, float *xx,
                                                          float *xx2, int pf, vf *raw, int rs)
{
    /* named sums, not an array: GCC keeps an array of vectors on the
     * stack, and the loop then waits on store-to-load forwarding */
    const float *a0 = a[0], *a1 = a[CC > 1], *a2 = a[CC > 2 ? 2 : 0], *a3 = a[CC > 3 ? 3 : 0];
    const float *a4 = a[CC > 4 ? 4 : 0], *a5 = a[CC > 5 ? 5 : 0], *a6 = a[CC > 6 ? 6 : 0],
                *a7 = a[CC > 7 ? 7 : 0];
    vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, q = {0};
    vf s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0}; /* rows 4-7, where T = 1 */
    vf t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0}, p = {0}; /* x2's, where T = 2 */
    int j = 0;
    for (; j + VL <= d; j += VL) {
        vf xv = v_ld(x + j), yv = T > 1 ? v_ld(x2 + j) : xv;
        if (pf)
            __builtin_prefetch(x + j + T * d, 0, 3);
        if (xx)
            q = v_fma(xv, xv, q);
        if (T > 1 && xx2)
            p = v_fma(yv, yv, p);
#define DOTS_T(c, ac, sc, tc)                                                                      \
    if (CC > c)                                                                                    \
        V_FMA2(v_ld(ac + j), xv, sc, yv, tc, T > 1);
        DOTS_T(0, a0, s0, t0)
        DOTS_T(1, a1, s1, t1)
        DOTS_T(2, a2, s2, t2)
        DOTS_T(3, a3, s3, t3)
        if (T == 1) {
            DOTS_T(4, a4, s4, t0)
            DOTS_T(5, a5, s5, t0)
            DOTS_T(6, a6, s6, t0)
            DOTS_T(7, a7, s7, t0)
        }
#undef DOTS_T
    }
    if (raw) {
        vf sv[4] = {s0, s1, s2, s3}, tv[4] = {t0, t1, t2, t3};
        for (int c = 0; c < CC && c < 4; c++) {
            raw[c * rs] = sv[c];
            if (T > 1)
                raw[c * rs + 1] = tv[c];
        }
        if (xx)
            raw[CC * rs] = q;
        if (T > 1 && xx2)
            raw[CC * rs + 1] = p;
        return;
    }
    float qs = v_hsum(q), sc[8] = {v_hsum(s0), v_hsum(s1), v_hsum(s2), v_hsum(s3),
                                   v_hsum(s4), v_hsum(s5), v_hsum(s6), v_hsum(s7)};
    float ps = v_hsum(p), tc[4] = {v_hsum(t0), v_hsum(t1), v_hsum(t2), v_hsum(t3)};
    for (; j < d; j++) {
        qs += x[j] * x[j];
        for (int c = 0; c < CC; c++)
            sc[c] += a[c][j] * x[j];
        if (T > 1) {
            ps += x2[j] * x2[j];
            for (int c = 0; c < CC; c++)
                tc[c] += a[c][j] * x2[j];
        }
    }
    for (int c = 0; c < CC; c++)
        out[c] = sc[c];
    if (xx)
        *xx = qs;
    if (T > 1) {
        for (int c = 0; c < CC; c++)
            out2[c] = tc[c];
        if (xx2)
            *xx2 = ps;
    }
}

static inline __attribute__((always_inline)) void dots_n(const float *const *a, int CC,
                                                          const float *x, int d, float *out,
                                                          float *xx, int pf)
{
    dots_t(a, CC, 1, x, NULL, d, out, NULL, xx, NULL, pf, NULL, 0);
}

/* dots_t for two rows and C <= 4 (a constant CC through the switch). */
static inline __attribute__((always_inline)) void dots_pair(const float *const *a, int C,
                                                             const float *x, const float *x2,
                                                             int d, float *out, float *out2,
                                                             float *xx, float *xx2, int pf)
{
    switch (C) {
    case 1: dots_t(a, 1, 2, x, x2, d, out, out2, xx, xx2, pf, NULL, 0); break;
    case 2: dots_t(a, 2, 2, x, x2, d, out, out2, xx, xx2, pf, NULL, 0); break;
    case 3: dots_t(a, 3, 2, x, x2, d, out, out2, xx, xx2, pf, NULL, 0); break;
    default: dots_t(a, 4, 2, x, x2, d, out, out2, xx, xx2, pf, NULL, 0);
    }
}

/* dots_t's unreduced sums (raw, rs as there) for C <= 4 rows of a, of
 * one row x (x2 NULL) or two (x2 one row on); the sum of squares where
 * xx. */
static inline __attribute__((always_inline)) void dots_raw(const float *const *a, int C,
                                                            const float *x, const float *x2,
                                                            int d, int xx, vf *raw, int rs, int pf)
{
    float sink, *q = xx ? &sink : NULL; /* not NULL: sum x.x (into raw) */
#define DOTS_RAW(CC)                                                                               \
    do {                                                                                           \
        if (x2)                                                                                    \
            dots_t(a, CC, 2, x, x2, d, NULL, NULL, q, q, pf, raw, rs);                             \
        else                                                                                       \
            dots_t(a, CC, 1, x, NULL, d, NULL, NULL, q, NULL, pf, raw, rs);                        \
    } while (0)
    switch (C) {
    case 1: DOTS_RAW(1); break;
    case 2: DOTS_RAW(2); break;
    case 3: DOTS_RAW(3); break;
    default: DOTS_RAW(4);
    }
#undef DOTS_RAW
}

/* out[c] = a[c].x for c < C, and *xx = x.x (xx may be NULL), up to eight
 * rows of a per sweep of x (the depth backward's C dh rows and C queries of
 * a chunk of four: 2C chains at once, each x loaded once; inlined: a
 * constant NULL xx drops the sum of squares). */
static inline __attribute__((always_inline)) void dots(const float *const *a, int C,
                                                        const float *x, int d, float *out,
                                                        float *xx, int pf)
{
    int c0 = 0;
    do {
        int cc = C - c0 < 8 ? C - c0 : 8;
        float *q = c0 == 0 ? xx : NULL;
        int p = pf && c0 == 0;
        switch (cc) {
#define DOTS_CASE(n)                                                                               \
    case n:                                                                                        \
        dots_n(a + c0, n, x, d, out + c0, q, p);                                                   \
        break;
            DOTS_CASE(0)
            DOTS_CASE(1)
            DOTS_CASE(2)
            DOTS_CASE(3)
            DOTS_CASE(4)
            DOTS_CASE(5)
            DOTS_CASE(6)
            DOTS_CASE(7)
#undef DOTS_CASE
        default:
            dots_n(a + c0, 8, x, d, out + c0, q, p);
        }
        c0 += 8;
    } while (c0 < C);
}

/* Columns j .. j + W VL - 1 (W = 1 or 2) of inter_update_n below.  Two
 * vectors at once: dx's sum is one chain of 2C + 1 multiply-adds a vector,
 * and two independent chains hide its latency (bound by it at d 64 with
 * one); each element takes the same fused multiply-adds (v_fma) in the
 * same order whatever W. */
static inline __attribute__((always_inline)) void inter_update_cols(float *dx, int acc, int C, const float *a,
                                                                   const float *const *dh, const float *c1,
                                                                   const float *const *u, float cx,
                                                                   const float *x, float *const *P,
                                                                   int has_u, int has_P, int j, int W, int d)
{
    /* dx (or 0) first, then cx x: one form for both (an FMA onto zeros
     * gives what overwriting gives, bit for bit) */
    vf xv = v_ld(x + j), y = acc ? v_ld(dx + j) : (vf){0};
    vf xw = W > 1 ? v_ld(x + j + VL) : xv, z = W > 1 && acc ? v_ld(dx + j + VL) : (vf){0};
    __builtin_prefetch(dx + j + d, 1, 3); /* the next token's row */
    V_FMA2(v_set1(cx), xv, y, xw, z, W > 1);
    for (int c = 0; c < C; c++) {
        vf ac = v_set1(a[c]);
        V_FMA2(ac, v_ld(dh[c] + j), y, v_ld(dh[c] + j + (W > 1) * VL), z, W > 1);
        if (has_u) {
            vf cc = v_set1(c1[c]);
            V_FMA2(cc, v_ld(u[c] + j), y, v_ld(u[c] + j + (W > 1) * VL), z, W > 1);
        }
        if (has_P) {
            vf cc = v_set1(c1[c]), p0 = v_ld(P[c] + j), p1 = W > 1 ? v_ld(P[c] + j + VL) : p0;
            V_FMA2(cc, xv, p0, xw, p1, W > 1);
            v_st(P[c] + j, p0);
            if (W > 1)
                v_st(P[c] + j + VL, p1);
        }
    }
    v_st(dx + j, y);
    if (W > 1)
        v_st(dx + j + VL, z);
}

/* One source row's backward for C mixers, one sweep:
 *   dx  = (acc ? dx : 0) + sum_c (a_c dh_c + c1_c u_c) + cx x
 *   P_c += c1_c x                                        (c < C)
 * has_u 0: no u_c term (weights without a query); has_P 0: no P.
 * Inlined with constant flags, so the unused terms cost nothing; through
 * inter_update below with a constant C as well. */
static inline __attribute__((always_inline)) void inter_update_n(float *dx, int acc, int C, const float *a,
                                                                const float *const *dh, const float *c1,
                                                                const float *const *u, float cx,
                                                                const float *x, float *const *P,
                                                                int has_u, int has_P, int d)
{
    int j = 0;
    for (; j + 2 * VL <= d; j += 2 * VL)
        inter_update_cols(dx, acc, C, a, dh, c1, u, cx, x, P, has_u, has_P, j, 2, d);
    for (; j + VL <= d; j += VL)
        inter_update_cols(dx, acc, C, a, dh, c1, u, cx, x, P, has_u, has_P, j, 1, d);
    for (; j < d; j++) {
        float y = acc ? dx[j] : 0.0f;
        y += cx * x[j];
        for (int c = 0; c < C; c++) {
            y += a[c] * dh[c][j];
            if (has_u)
                y += c1[c] * u[c][j];
            if (has_P)
                P[c][j] += c1[c] * x[j];
        }
        dx[j] = y;
    }
}

/* inter_update_n with C a constant for chunks of up to four mixers: the
 * loop over mixers unrolls, their weights stay broadcast in registers and
 * their row pointers in registers (with C known only at run time the
 * sweep reloaded both for every vector of the row). */
static inline __attribute__((always_inline)) void inter_update(float *dx, int acc, int C, const float *a,
                                                                const float *const *dh, const float *c1,
                                                                const float *const *u, float cx,
                                                                const float *x, float *const *P,
                                                                int has_u, int has_P, int d)
{
#define INTER_UPDATE_C(CC) inter_update_n(dx, acc, CC, a, dh, c1, u, cx, x, P, has_u, has_P, d)
    switch (C) {
    case 1: INTER_UPDATE_C(1); break;
    case 2: INTER_UPDATE_C(2); break;
    case 3: INTER_UPDATE_C(3); break;
    case 4: INTER_UPDATE_C(4); break;
    default: INTER_UPDATE_C(C);
    }
#undef INTER_UPDATE_C
}

/* Tokens a tile of a chunk's shared backward, which walks a tile's tokens
 * source by source: each source's rows x_s and dx_s then come as one run
 * of tile consecutive rows, which the prefetcher follows (token by token
 * they were k streams of one row each, as phase 1 of the forward found),
 * while the tile's C dh rows a token stay in L1 (at most 16 tokens, C d
 * floats each in 16 KiB). */
static inline int bwd_tile(int C, int d)
{
    int t = (16384 / (int)sizeof(float)) / (C * d);
    return t < 1 ? 1 : t > 16 ? 16 : t;
}

#endif
