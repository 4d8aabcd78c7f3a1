/* The CPU backend's row vectors (GCC/Clang vector extensions): VL floats,
 * one register of the widest kind the build targets: 16 with AVX-512, 8
 * with AVX or AVX2, 4 with SSE only.  So the vector width is chosen at
 * build time, by -march (meson's -Dnative, the default, takes the
 * machine's own).  A vector wider than the registers is split by the
 * compiler, and GCC splits badly: on an AVX2 build 16-float vectors turned
 * scalar-times-vector into sixteen scalar stores and a reload, and the
 * depth ops ran 3-7x slower than with 8-float vectors (BENCHMARKS.md,
 * "AVX2").
 *
 * Why not `omp simd` alone: a kernel that keeps several rows' sums at once
 * (C dot products of one source row, C output rows from k source rows)
 * needs them in registers across an inner loop over rows, which the
 * auto-vectoriser does not do; and its reduction epilogue stores each sum
 * to the stack and adds the lanes one by one. */
#ifndef AR_CPU_VEC_H
#define AR_CPU_VEC_H

#include <string.h>

#if defined(AR_VL) /* an experiment's choice: 4, 8 or 16 (at most the registers' width) */
#define VL AR_VL
#elif defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int vi __attribute__((vector_size(VL * sizeof(int))));
typedef float v8f __attribute__((vector_size(8 * sizeof(float))));
typedef float v4f __attribute__((vector_size(4 * sizeof(float))));

/* memcpy: unaligned loads and stores without aliasing trouble (compiles to
 * one vmovups) */
static inline vf v_ld(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v_st(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline vf v_set1(float a) { return (vf){0} + a; }

/* a b + c rounded once where the build has FMA, else a b + c.  Explicit,
 * because GCC's contraction of `c += a * b` depends on what its passes see:
 * one kernel got a multiply and an add for one output row and an FMA for
 * four, so the same sum rounded differently with the shape of the call. */
#if defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
static inline vf v_fma(vf a, vf b, vf c)
{
#if VL == 16
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif VL == 8
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return (vf)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
#endif
}
#else
static inline vf v_fma(vf a, vf b, vf c) { return a * b + c; }
#endif

/* a b rounded to float and kept so: the empty asm hides the product from
 * GCC, which under the default -ffp-contract=fast would fuse it with a
 * following add into one multiply-add (one rounding fewer, other bits),
 * for sums whose order other kernels must match bit for bit. */
static inline vf v_mul_rounded(vf a, vf b)
{
    vf p = a * b;
    __asm__("" : "+v"(p));
    return p;
}

/* A vector load whose value GCC cannot trace back to memory: a loop that
 * stores it elsewhere is then not a copy loop, which GCC's loop
 * distribution turns into a call to memcpy (the call spills every vector
 * register live across it, and the heads' kernels spent a third of their
 * time there). */
static inline vf v_ld_held(const float *p)
{
    vf v = v_ld(p);
    __asm__("" : "+v"(v));
    return v;
}

/* the same for one float */
static inline float f_held(float x)
{
    __asm__("" : "+v"(x));
    return x;
}

/* dst[0..n) = src[0..n) by held loads (no call to memcpy), VL floats at a
 * time and the tail one by one */
static inline void copy_held(float *dst, const float *src, int n)
{
    int j = 0;
    for (; j + VL <= n; j += VL)
        v_st(dst + j, v_ld_held(src + j));
    for (; j < n; j++)
        dst[j] = f_held(src[j]);
}

/* y1 = a x1 + y1 and, where two (a constant), y2 = a x2 + y2: one
 * multiplier for two columns of a row or two rows of a column */
#define V_FMA2(a, x1, y1, x2, y2, two)                                                             \
    do {                                                                                           \
        vf a_ = (a);                                                                               \
        (y1) = v_fma(a_, (x1), (y1));                                                              \
        if (two)                                                                                   \
            (y2) = v_fma(a_, (x2), (y2));                                                          \
    } while (0)

/* Non-temporal ("streaming") store of VL floats at p, aligned to them: the
 * line goes to memory without first being read into the cache (which a
 * plain store to a line not in cache does), for rows written now and read
 * again only after much other work.  V_STREAM 0: no such instruction is
 * used, a plain store.  v_stream_fence orders a thread's streaming stores
 * before what it does next (before the barrier that ends its share). */
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#define V_STREAM 1
static inline void v_stream(float *p, vf v)
{
#if VL == 16
    _mm512_stream_ps(p, (__m512)v);
#elif VL == 8
    _mm256_stream_ps(p, (__m256)v);
#else
    _mm_stream_ps(p, (__m128)v);
#endif
}
static inline void v_stream_fence(void) { _mm_sfence(); }
#else
#define V_STREAM 0
static inline void v_stream(float *p, vf v) { v_st(p, v); }
static inline void v_stream_fence(void) {}
#endif

/* the square root lane by lane, correctly rounded as sqrtf */
static inline vf v_sqrt(vf a)
{
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_sqrt_ps((__m512)a);
#elif VL == 8 && defined(__AVX__)
    return (vf)_mm256_sqrt_ps((__m256)a);
#else
    for (int l = 0; l < VL; l++)
        a[l] = __builtin_sqrtf(a[l]);
    return a;
#endif
}

/* max(a, b) lane by lane as the scalar a > b ? a : b (b where either is
 * NaN), and min(a, b) as a < b ? a : b (b where either is NaN): x86's
 * maxps and minps are defined so (one instruction), elsewhere a compare
 * and a blend */
#if VL == 4 && defined(__SSE__)
#include <xmmintrin.h>
#endif
static inline vf v_max(vf a, vf b)
{
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif VL == 8 && defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#elif VL == 4 && defined(__SSE__)
    return (vf)_mm_max_ps((__m128)a, (__m128)b);
#else
    vi m = a > b;
    return (vf)(((vi)a & m) | ((vi)b & ~m));
#endif
}

static inline vf v_min(vf a, vf b)
{
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_min_ps((__m512)a, (__m512)b);
#elif VL == 8 && defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
#elif VL == 4 && defined(__SSE__)
    return (vf)_mm_min_ps((__m128)a, (__m128)b);
#else
    vi m = a < b;
    return (vf)(((vi)a & m) | ((vi)b & ~m));
#endif
}

/* sum of the VL lanes, as a tree (shuffles, not memcpy: taking the
 * address of a sum would keep it in memory inside the loop that builds it) */
static inline float v_hsum(vf v)
{
#if VL == 16
    v8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4f c = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
#elif VL == 8
    v4f c = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
#else
    v4f c = v;
#endif
    return (c[0] + c[2]) + (c[1] + c[3]);
}

/* Lane l = v_hsum(v[l]) for l < VL, bit for bit (the same adds of the same
 * pairs: halves, then quarters, then (c0 + c2) + (c1 + c3)), as one tree
 * over the VL vectors at once: each step adds two vectors' halves side by
 * side, so VL sums take about 3 VL instructions where VL separate trees take
 * about 8 VL and VL scalar stores.  For sums kept a token a lane.  The
 * vectors enter the tree in the order that brings lane l's own to lane l. */
#define V_H3(r, s, L)                                                                              \
    (__builtin_shufflevector(r, s, L(0, 1, 0, 1)) + __builtin_shufflevector(r, s, L(2, 3, 2, 3)))
#define V_H4(r, s, L)                                                                              \
    (__builtin_shufflevector(r, s, L(0, 2, 0, 2)) + __builtin_shufflevector(r, s, L(1, 3, 1, 3)))
#if VL == 16
/* chunk k (lanes 4k..4k+3) of the result: r's lanes 4k + a, 4k + b, then s's */
#define V_L4(a, b, c, e)                                                                           \
    a, b, 16 + c, 16 + e, 4 + a, 4 + b, 20 + c, 20 + e, 8 + a, 8 + b, 24 + c, 24 + e, 12 + a,       \
        12 + b, 28 + c, 28 + e
static inline vf v_hsums(const vf *v)
{
    vf p[8], r[4];
    /* pair i: positions 2i and 2i + 1; position q takes v[4 (q % 4) + q / 4] */
    for (int i = 0; i < 8; i++) {
        vf x = v[4 * ((2 * i) % 4) + (2 * i) / 4], y = v[4 * ((2 * i + 1) % 4) + (2 * i + 1) / 4];
        p[i] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30,
                                       31);
    }
    for (int i = 0; i < 4; i++)
        r[i] = __builtin_shufflevector(p[2 * i], p[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                       19, 24, 25, 26, 27) +
               __builtin_shufflevector(p[2 * i], p[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                       23, 28, 29, 30, 31);
    vf t0 = V_H3(r[0], r[1], V_L4), t1 = V_H3(r[2], r[3], V_L4);
    return V_H4(t0, t1, V_L4);
}
#elif VL == 8
#define V_L4(a, b, c, e) a, b, 8 + c, 8 + e, 4 + a, 4 + b, 12 + c, 12 + e
static inline vf v_hsums(const vf *v)
{
    vf p[4];
    /* pair i: positions 2i and 2i + 1; position q takes v[4 (q % 2) + q / 2] */
    for (int i = 0; i < 4; i++) {
        vf x = v[i], y = v[4 + i];
        p[i] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15);
    }
    vf t0 = V_H3(p[0], p[1], V_L4), t1 = V_H3(p[2], p[3], V_L4);
    return V_H4(t0, t1, V_L4);
}
#else
#define V_L4(a, b, c, e) a, b, 4 + c, 4 + e
static inline vf v_hsums(const vf *v)
{
    vf t0 = V_H3(v[0], v[1], V_L4), t1 = V_H3(v[2], v[3], V_L4);
    return V_H4(t0, t1, V_L4);
}
#endif
#undef V_L4
#undef V_H3
#undef V_H4

#endif
