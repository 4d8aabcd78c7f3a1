/* Sixteen-float vectors for the CPU backend's row kernels (GCC/Clang vector
 * extensions: one AVX-512 register where the target has it, two AVX or four
 * SSE registers otherwise, from the same source).
 *
 * Why not `omp simd` alone: a kernel that keeps several rows' sums at once
 * (C dot products of one source row, C output rows from k source rows)
 * needs them in registers across an inner loop over rows, which the
 * auto-vectoriser does not do; and its reduction epilogue stores each sum
 * to the stack and adds the lanes one by one. */
#ifndef AR_CPU_VEC_H
#define AR_CPU_VEC_H

#include <string.h>

#define VL 16
typedef float v16f __attribute__((vector_size(VL * sizeof(float))));
typedef float v8f __attribute__((vector_size(8 * sizeof(float))));
typedef float v4f __attribute__((vector_size(4 * sizeof(float))));

/* memcpy: unaligned loads and stores without aliasing trouble (compiles to
 * one vmovups) */
static inline v16f v_ld(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v_st(float *p, v16f v) { memcpy(p, &v, sizeof v); }

static inline v16f v_set1(float a) { return (v16f){0} + a; }

/* Non-temporal ("streaming") store of 16 floats at p, 64-byte aligned: the
 * line goes to memory without first being read into the cache (which a
 * plain store to a line not in cache does), for rows written now and read
 * again only after much other work.  V_STREAM 0: no such instruction is
 * used, a plain store.  v_stream_fence orders a thread's streaming stores
 * before what it does next (before the barrier that ends its share). */
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#define V_STREAM 1
static inline void v_stream(float *p, v16f v)
{
#if defined(__AVX512F__)
    _mm512_stream_ps(p, (__m512)v);
#else
    _mm256_stream_ps(p, (__m256)__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_stream_ps(p + 8, (__m256)__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
#endif
}
static inline void v_stream_fence(void) { _mm_sfence(); }
#else
#define V_STREAM 0
static inline void v_stream(float *p, v16f v) { v_st(p, v); }
static inline void v_stream_fence(void) {}
#endif

/* sum of the 16 lanes, as a tree (shuffles, not memcpy: taking the
 * address of a sum would keep it in memory inside the loop that builds it) */
static inline float v_hsum(v16f v)
{
    v8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4f c = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (c[0] + c[2]) + (c[1] + c[3]);
}

#endif
