/* A stand-in for the CUDA runtime, for running lib/cuda's kernels on the CPU
 * (tests/cuda_emu/emu.cc; the why and what in its top comment).  Declares
 * what the CUDA backend uses and nothing more: the runtime calls, the
 * kernel-side names (threadIdx, __syncthreads, __shfl_xor_sync, ...) and the
 * launch that tests/cuda_emu/launch.py writes in place of <<<...>>>.  Device
 * memory is host memory; every call runs synchronously. */
#ifndef AR_CUDA_EMU_RUNTIME_H
#define AR_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __CUDACC__ 1

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
#define cudaEventDisableTiming 0x02

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
};

enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};

struct uint3 {
    unsigned x, y, z;
};

struct float2 {
    float x, y;
};

struct alignas(8) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }

struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* ---- the runtime calls (emu.cc) ---- */
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
/* pinned host memory and events: every call runs synchronously, so an
 * event has always happened; the checks are the runtime's (a live
 * allocation or event) */
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev);
cudaError_t emu_func_set_attribute(const void *fn, cudaFuncAttribute attr, int value);
template <typename F> cudaError_t cudaFuncSetAttribute(F fn, cudaFuncAttribute attr, int value)
{
    return emu_func_set_attribute((const void *)fn, attr, value);
}

/* ---- kernels ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* Blocks run one at a time, so a block's shared arrays can be statics of
 * their function (dynamic shared memory: launch.py's rewrite of
 * `extern __shared__`, emu_dynamic_smem()). */
#define __shared__ static

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

/* the device's integer min and max */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
/* lane ^ lane_mask's value of v, every lane of mask taking part */
uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask);
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    (void)width;
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = emu_shfl_xor(mask, b, lane_mask);
    memcpy(&v, &b, sizeof v);
    return v;
}
void *emu_dynamic_smem(void);

/* name<<<grid, block, smem, stream>>>(args) as launch.py writes it:
 * emu_launch(&name, "name", emu_config(grid, block, smem, stream),
 *            [=]() { name(args); }) */
struct emu_cfg {
    dim3 grid, block;
    size_t smem;
};
inline emu_cfg emu_config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t s = 0)
{
    (void)s;
    return emu_cfg{grid, block, smem};
}
void emu_launch(const void *fn, const char *name, emu_cfg cfg, std::function<void()> body);

#endif
