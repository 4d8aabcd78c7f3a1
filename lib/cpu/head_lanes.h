/* Narrow heads in lanes: for heads of e channels (e = 1, 2, 4 or 8, below
 * VL), a group of VL consecutive heads spans e column blocks x[0..e-1] of
 * VL floats; its head-lane form is e vectors t[0..e-1] with
 *     t[j] lane a = channel j of head a = (x as e VL floats)[a e + j],
 * so that a per-head sum over the head's channels is a vertical sum of e
 * vectors, and a per-head weight multiplies a head's channels as one
 * vector, with no lane shuffles in between.  The conversion itself is
 * log2(e) rounds of e two-register shuffles each way (even/odd lanes in,
 * their interleaving out): cheap where one conversion serves many such
 * sums, as in a chunk backward (a source row's conversion serves every
 * mixer, a gradient row's every source). */
#ifndef AR_CPU_HEAD_LANES_H
#define AR_CPU_HEAD_LANES_H

#include "vec.h"

#if VL == 16
#define HL_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define HL_ODD 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define HL_ZIPLO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define HL_ZIPHI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif VL == 8
#define HL_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#define HL_ODD 1, 3, 5, 7, 9, 11, 13, 15
#define HL_ZIPLO 0, 8, 1, 9, 2, 10, 3, 11
#define HL_ZIPHI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define HL_EVEN 0, 2, 4, 6
#define HL_ODD 1, 3, 5, 7
#define HL_ZIPLO 0, 4, 1, 5
#define HL_ZIPHI 2, 6, 3, 7
#endif

#define HL_EV(a, b) __builtin_shufflevector(a, b, HL_EVEN)
#define HL_OD(a, b) __builtin_shufflevector(a, b, HL_ODD)
#define HL_LO(a, b) __builtin_shufflevector(a, b, HL_ZIPLO)
#define HL_HI(a, b) __builtin_shufflevector(a, b, HL_ZIPHI)

/* Channel c = a e + j of the group splits by its low bit: the even
 * channels (lanes 0, 2, ... of the e VL floats) form a group of heads of
 * e/2 channels holding every head's even channels j = 2j', the odd ones
 * likewise; so t[2j'] and t[2j'+1] are those halves' head-lane vectors.
 * Written out per e (always inlined, so the vectors stay in registers). */
static inline __attribute__((always_inline)) void hl_in4(vf x0, vf x1, vf x2, vf x3, vf *t, int step)
{
    vf a = HL_EV(x0, x1), b = HL_OD(x0, x1), c = HL_EV(x2, x3), d = HL_OD(x2, x3);
    t[0] = HL_EV(a, c), t[step] = HL_EV(b, d), t[2 * step] = HL_OD(a, c), t[3 * step] = HL_OD(b, d);
}

static inline __attribute__((always_inline)) void head_lanes_in(const vf *x, int e, vf *t)
{
    if (e == 1) {
        t[0] = x[0];
    } else if (e == 2) {
        t[0] = HL_EV(x[0], x[1]), t[1] = HL_OD(x[0], x[1]);
    } else if (e == 4) {
        hl_in4(x[0], x[1], x[2], x[3], t, 1);
    } else {
        hl_in4(HL_EV(x[0], x[1]), HL_EV(x[2], x[3]), HL_EV(x[4], x[5]), HL_EV(x[6], x[7]), t, 2);
        hl_in4(HL_OD(x[0], x[1]), HL_OD(x[2], x[3]), HL_OD(x[4], x[5]), HL_OD(x[6], x[7]), t + 1, 2);
    }
}

/* The inverse of head_lanes_in: column blocks x[0..e-1] from the
 * head-lane vectors t[0..e-1] (each split undone by interleaving the
 * even and odd halves lane by lane). */
static inline __attribute__((always_inline)) void hl_out4(vf t0, vf t1, vf t2, vf t3, vf *x)
{
    vf a = HL_LO(t0, t2), c = HL_HI(t0, t2), b = HL_LO(t1, t3), d = HL_HI(t1, t3);
    x[0] = HL_LO(a, b), x[1] = HL_HI(a, b), x[2] = HL_LO(c, d), x[3] = HL_HI(c, d);
}

static inline __attribute__((always_inline)) void head_lanes_out(const vf *t, int e, vf *x)
{
    if (e == 1) {
        x[0] = t[0];
    } else if (e == 2) {
        x[0] = HL_LO(t[0], t[1]), x[1] = HL_HI(t[0], t[1]);
    } else if (e == 4) {
        hl_out4(t[0], t[1], t[2], t[3], x);
    } else {
        vf ev[4], od[4];
        hl_out4(t[0], t[2], t[4], t[6], ev);
        hl_out4(t[1], t[3], t[5], t[7], od);
        for (int k = 0; k < 4; k++)
            x[2 * k] = HL_LO(ev[k], od[k]), x[2 * k + 1] = HL_HI(ev[k], od[k]);
    }
}

/* VL heads' dot products a.x from their head-lane forms: the e products,
 * then sums of adjacent pairs, level by level, ((p0 + p1) + (p2 + p3)) +
 * .. -- the order in which pack_tree and head_sums (lib/cpu/mixer_cpu.c)
 * sum a head's products in column form, so that callers in either form,
 * which must cancel exactly against each other, agree bit for bit. */
static inline __attribute__((always_inline)) vf head_lanes_dot(const vf *a, const vf *x, int e)
{
    vf p[8];
    for (int j = 0; j < e; j++)
        p[j] = v_mul_rounded(a[j], x[j]);
    for (int w = e; w > 1; w /= 2)
        for (int j = 0; j < w / 2; j++)
            p[j] = p[2 * j] + p[2 * j + 1];
    return p[0];
}

/* A row of d = e H floats (H a multiple of VL) to head-lane form, group
 * by group: out[g e VL + j VL + a] = channel j of head g VL + a. */
static inline __attribute__((always_inline)) void head_lanes_row_in(const float *x, int e, int H, float *out)
{
    for (int g = 0; g < H / VL; g++) {
        vf b[8], t[8];
        for (int j = 0; j < e; j++)
            b[j] = v_ld(x + (size_t)(g * e + j) * VL);
        head_lanes_in(b, e, t);
        for (int j = 0; j < e; j++)
            v_st(out + (size_t)(g * e + j) * VL, t[j]);
    }
}

/* head_lanes_row_in's inverse */
static inline __attribute__((always_inline)) void head_lanes_row_out(const float *t, int e, int H, float *x)
{
    for (int g = 0; g < H / VL; g++) {
        vf b[8], v[8];
        for (int j = 0; j < e; j++)
            v[j] = v_ld(t + (size_t)(g * e + j) * VL);
        head_lanes_out(v, e, b);
        for (int j = 0; j < e; j++)
            v_st(x + (size_t)(g * e + j) * VL, b[j]);
    }
}

#endif
