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
