/* The machine's fused multiply-add peak in fp32, measured: every thread
 * runs independent FMA chains in the widest vectors this CPU has (chosen at
 * run time from CPUID, whatever the build's -march), enough of them to hide
 * the FMA latency on both pipes of current x86 cores; FLOPs = 2 per lane
 * per FMA.  The bound that no fp32 kernel can pass, where the sgemm
 * ceiling is what a good one reaches. */
#include "bench.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

enum { CHAINS = 12, ITERS = 1 << 20 };

/* Each of these: ITERS rounds of CHAINS (12) independent a = a m + c, the
 * sum of the lanes returned so that nothing is left out as unused.  The
 * chains are named, not an array: at -O2 GCC keeps an array of vectors on
 * the stack and each FMA then waits on a store and a load. */
#define CHAINS_STEP(FMA)                                                                            \
    a0 = FMA(a0, vm, vc), a1 = FMA(a1, vm, vc), a2 = FMA(a2, vm, vc), a3 = FMA(a3, vm, vc),     \
    a4 = FMA(a4, vm, vc), a5 = FMA(a5, vm, vc), a6 = FMA(a6, vm, vc), a7 = FMA(a7, vm, vc),     \
    a8 = FMA(a8, vm, vc), a9 = FMA(a9, vm, vc), a10 = FMA(a10, vm, vc), a11 = FMA(a11, vm, vc)
#ifdef HAVE_X86
__attribute__((target("avx512f"))) static float chains_avx512(float m, float c)
{
    __m512 vm = _mm512_set1_ps(m), vc = _mm512_set1_ps(c);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
    __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
    __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (long i = 0; i < ITERS; i++)
        CHAINS_STEP(_mm512_fmadd_ps);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float chains_avx2(float m, float c)
{
    __m256 vm = _mm256_set1_ps(m), vc = _mm256_set1_ps(c);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
    __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
    __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long i = 0; i < ITERS; i++)
        CHAINS_STEP(_mm256_fmadd_ps);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8], t = 0;
    _mm256_storeu_ps(out, s);
    for (int k = 0; k < 8; k++)
        t += out[k];
    return t;
}
#endif

/* No FMA unit: a multiply and an add, 4 lanes (SSE). */
static float chains_plain(float m, float c)
{
    float a[CHAINS][4];
    for (int j = 0; j < CHAINS; j++)
        for (int k = 0; k < 4; k++)
            a[j][k] = (float)j;
    for (long i = 0; i < ITERS; i++)
        for (int j = 0; j < CHAINS; j++)
            for (int k = 0; k < 4; k++)
                a[j][k] = a[j][k] * m + c;
    float s = 0;
    for (int j = 0; j < CHAINS; j++)
        for (int k = 0; k < 4; k++)
            s += a[j][k];
    return s;
}

double ar_bench_fma_peak_gflops(int reps, const char **isa)
{
    int lanes = 4;
    float (*chains)(float, float) = chains_plain;
    *isa = "SSE, no FMA";
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        chains = chains_avx512, lanes = 16, *isa = "AVX-512 FMA";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        chains = chains_avx2, lanes = 8, *isa = "AVX2 FMA";
#endif
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        int threads = 1;
        double t = omp_get_wtime();
#pragma omp parallel
        {
#pragma omp single
            threads = omp_get_num_threads();
            float s = chains(0.999999f, 1e-7f);
#pragma omp atomic
            sink += s;
        }
        double dt = omp_get_wtime() - t;
        double g = 2.0 * lanes * CHAINS * (double)ITERS * threads / dt / 1e9;
        best = g > best ? g : best;
    }
    (void)sink;
    return best;
}
