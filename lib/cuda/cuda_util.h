/* Shared by the CUDA backend's translation units (the .cu files of lib/cuda).
 *
 * Every op is enqueued on one stream (ar_cuda_stream()); cuBLAS is bound to
 * it.  download and sync wait for it; everything else is asynchronous, so the
 * host never reads a device buffer except through download.
 *
 * A failing CUDA or cuBLAS call inside an op cannot be reported through the
 * op table (its entries return void, as the CPU ones never fail): like
 * ar_xmalloc on out-of-memory, it prints "attnres: error: cuda: ..." naming
 * the call and the place, and exits with status 1.  Checkpoints are written
 * atomically, so nothing saved is lost. */
#ifndef AR_CUDA_UTIL_H
#define AR_CUDA_UTIL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaStream_t ar_cuda_stream(void);
cublasHandle_t ar_cuda_cublas(void);
/* Non-zero when matrix products run in bf16 (set_bf16). */
int ar_cuda_bf16(void);

/* Non-zero when p lies inside a buffer of bf16 storage (the backend's
 * alloc_act under bf16 products, lib/backend.h): its values are bf16. */
int ar_cu_bf16_stored(const void *p);
/* Stops with an error where p is bf16 storage: op takes none there. */
void ar_cu_no_bf16_storage(const char *op, const char *arg, const void *p);

/* Reports a failed call and exits (see above). */
void ar_cuda_die(const char *what, const char *detail, const char *file, int line);

#ifdef __cplusplus
}

#include <initializer_list>

/* A buffer argument and its name in an error message */
struct ar_cu_arg {
    const char *name;
    const void *p;
};
/* Stops where any of args is bf16 storage: op takes those in fp32 only
 * (the ops that take bf16 storage list their other buffers so). */
static inline void ar_cu_fp32_only(const char *op, std::initializer_list<ar_cu_arg> args)
{
    for (const ar_cu_arg &a : args)
        ar_cu_no_bf16_storage(op, a.name, a.p);
}
#endif

#define AR_CUDA_CHECK(call)                                                      \
    do {                                                                         \
        cudaError_t ar_cuda_err_ = (call);                                       \
        if (ar_cuda_err_ != cudaSuccess)                                         \
            ar_cuda_die(#call, cudaGetErrorString(ar_cuda_err_), __FILE__, __LINE__); \
    } while (0)

#define AR_CUBLAS_CHECK(call)                                                    \
    do {                                                                         \
        cublasStatus_t ar_cublas_st_ = (call);                                   \
        if (ar_cublas_st_ != CUBLAS_STATUS_SUCCESS)                              \
            ar_cuda_die(#call, cublasGetStatusString(ar_cublas_st_), __FILE__, __LINE__); \
    } while (0)

/* After a kernel launch: launch errors (bad configuration) surface at once;
 * execution errors at the next synchronising call. */
#define AR_CUDA_LAUNCHED() AR_CUDA_CHECK(cudaGetLastError())

/* ---- device helpers for the kernels (warp = 32 lanes, full mask) ---- */
#ifdef __CUDACC__
#include <cuda_bf16.h>

/* An element of an fp32 or bf16 buffer (bf16: tiles on tensor cores, and
 * lib/backend.h's bf16 storage) as a float, and a float stored into one
 * (to bf16: rounded to nearest, ties to even). */
__device__ static inline float ar_value(float x) { return x; }
__device__ static inline float ar_value(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ static inline void ar_store(float *p, float x) { *p = x; }
__device__ static inline void ar_store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }
/* Element i of a buffer that is bf16 where b16 (a flag uniform over a
 * launch: lib/backend.h's bf16 storage), else fp32, read as a float, and
 * a float stored there (rounded to bf16 where b16) */
__device__ static inline float ar_value_at(const void *p, int b16, size_t i)
{
    return b16 ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}
__device__ static inline void ar_store_at(void *p, int b16, size_t i, float x)
{
    if (b16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(x);
    else
        ((float *)p)[i] = x;
}

__device__ static inline float ar_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline double ar_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float ar_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

#endif
