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

/* lane l = base[idx[l]]: one gather instruction where the build has AVX2
 * or AVX-512 (strided per-head weights into a vector without VL scalar
 * stores and a reload) */
static inline vf v_gather(const float *base, vi idx)
{
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_i32gather_ps((__m512i)idx, base, 4);
#elif VL == 8 && defined(__AVX2__)
    return (vf)_mm256_i32gather_ps(base, (__m256i)idx, 4);
#else
    vf v;
    for (int l = 0; l < VL; l++)
        v[l] = base[idx[l]];
    return v;
#endif
}

/* max(a, b) lane by lane as the scalar a > b ? a : b (b where either is
 * NaN): a compare and a blend, no stores */
static inline vf v_max(vf a, vf b)
{
    vi m = a > b;
    return (vf)(((vi)a & m) | ((vi)b & ~m));
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

#endif
