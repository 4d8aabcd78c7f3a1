/* Shared by the CPU backend's op files: when a loop is worth its threads
 * (PAR_MIN), scalar helpers written so that the loops calling them
 * vectorise without -ffast-math (fast_expf, sum8, sum8d), and fast_expf
 * on a vector of VL lanes (v_expf). */
#ifndef AR_CPU_LOOPS_H
#define AR_CPU_LOOPS_H

#include <stdint.h>

#include "vec.h"

/* Below this many elements an elementwise loop runs on one thread: the
 * fork/join costs more than the work. */
#define PAR_MIN 32768

/* exp(x) in float, written so that loops calling it vectorise (no libm
 * call, no branches): Cephes expf.  n = round(x/ln2) by the 1.5*2^23 trick,
 * r = x - n ln2 (two-part ln2), e^r by a degree-6 polynomial on
 * [-ln2/2, ln2/2], times 2^n built in the exponent bits.  Relative error
 * about 1e-7 (a couple of ulp).  x is clamped to [-87.3, 88.3] so 2^n stays
 * a normal float: exp(-inf..-87.3) returns ~1.2e-38 instead of 0, which is
 * harmless wherever it is added to a sum containing exp(0) = 1. */
/* The arithmetic of fast_expf and v_expf, on x already clamped (T float
 * or vf): fn = round(x / ln2), r = x - fn ln2, p = e^r */
#define EXPF_CORE(x, fn, r, p, T)                                                                  \
    do {                                                                                           \
        fn = ((x) * 1.44269504088896341f + 12582912.0f) - 12582912.0f;                             \
        r = (x) - fn * 0.693359375f;                                                               \
        r = r + fn * 2.12194440e-4f;                                                               \
        p = (T){0} + 1.9875691500e-4f;                                                             \
        p = p * r + 1.3981999507e-3f;                                                              \
        p = p * r + 8.3334519073e-3f;                                                              \
        p = p * r + 4.1665795894e-2f;                                                              \
        p = p * r + 1.6666665459e-1f;                                                              \
        p = p * r + 5.0000001201e-1f;                                                              \
        p = p * r * r + r + 1.0f;                                                                  \
    } while (0)

static inline float fast_expf(float x)
{
    /* clamp with bit masks: a ternary here gets turned into a branch (the
     * clamped path is constant-folded) and the calling loop no longer
     * vectorises */
    union {
        float f;
        int32_t i;
    } ux = {x}, ulo = {-87.3f}, uhi = {88.3f};
    int32_t mlo = -(int32_t)(x < -87.3f), mhi = -(int32_t)(x > 88.3f);
    ux.i = (ux.i & ~(mlo | mhi)) | (ulo.i & mlo) | (uhi.i & mhi);
    x = ux.f;
    float fn, r, p;
    EXPF_CORE(x, fn, r, p, float);
    union {
        uint32_t u;
        float f;
    } e;
    e.u = (uint32_t)((int32_t)fn + 127) << 23;
    return p * e.f;
}

/* fast_expf on VL lanes, the same operations (clamp, EXPF_CORE, 2^n in the
 * exponent bits), for kernels that hold their logits in registers (a loop
 * over lanes of fast_expf vectorises only where its operands are in
 * memory). */
static inline vf v_expf(vf x)
{
    /* the clamp: lo where x < lo, hi where x > hi, else x (NaN stays NaN:
     * v_max and v_min give their second operand where either is NaN) */
    x = v_min(v_set1(88.3f), v_max(v_set1(-87.3f), x));
    vf fn, r, p;
    EXPF_CORE(x, fn, r, p, vf);
    vi n = __builtin_convertvector(fn, vi);
    return p * (vf)((n + 127) << 23);
}

/* max of x[0..n), n >= 1, with 16 interleaved maxima, so that it
 * vectorises (GCC leaves `#pragma omp simd reduction(max ...)` over a
 * ternary as a scalar chain of maxss, a quarter of attention_fwd's time at
 * T 64).  A max is exact: any order gives the same result. */
static inline float max16(const float *x, int n)
{
    float acc[16], m = x[0];
    for (int l = 0; l < 16; l++)
        acc[l] = x[0];
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (int l = 0; l < 16; l++)
        m = acc[l] > m ? acc[l] : m;
    return m;
}

/* sum of x[0..n) in T with 8 interleaved partial sums (vectorises without
 * -ffast-math; the order is fixed, so the result is deterministic):
 * sum8 in float, sum8d in double */
#define SUM8(name, T)                                                          \
    static inline T name(const float *x, int n)                                \
    {                                                                          \
        T acc[8] = {0};                                                        \
        int i = 0;                                                             \
        for (; i + 8 <= n; i += 8)                                             \
            for (int l = 0; l < 8; l++)                                        \
                acc[l] += x[i + l];                                            \
        T s = 0;                                                               \
        for (; i < n; i++)                                                     \
            s += x[i];                                                         \
        for (int l = 0; l < 8; l++)                                            \
            s += acc[l];                                                       \
        return s;                                                              \
    }
SUM8(sum8, float)
SUM8(sum8d, double)
#undef SUM8

#endif
