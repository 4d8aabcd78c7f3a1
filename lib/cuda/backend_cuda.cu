/* The CUDA backend: the op table of lib/backend.h on one NVIDIA GPU.
 *
 * This file: the shared stream and cuBLAS handle (cuda_util.h), memory and
 * device queries, the matrix products, and ar_cuda_module_open() (the entry
 * point lib/cuda/backend_cuda_load.c calls after dlopen), which fills
 * the table.  The fused kernels are in kernels_cuda.cu, causal attention in
 * attention_cuda.cu, depth mixing in depth_cuda.cu.
 *
 * Ordering.  Every op is enqueued on one stream (created blocking, so it
 * also orders after any legacy default-stream call); cuBLAS is bound to it.
 * upload, download, sumsq and xent_fwd wait for the stream before they
 * return, so the host buffer of an upload may be reused at once and the
 * host values returned are final; free (and a growing workspace) waits
 * before it releases memory queued ops may use.  Everything else is
 * asynchronous.
 *
 * cuBLAS mapping.  cuBLAS is column-major; our buffers are row-major.  A
 * row-major M x N matrix with leading dimension ld is, byte for byte, the
 * column-major N x M matrix of its transpose with the same ld.  So the
 * row-major product
 *     C = alpha op(A) op(B) + beta C          (C: M x N)
 * is the column-major product C^T = op(B)^T op(A)^T, i.e.
 *     cublasGemmEx(opB, opA, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc)
 * with the operands swapped, the op flags passed through unchanged and the
 * leading dimensions those of the row-major storage.  ar_cu_gemm takes
 * cblas_sgemm's row-major arguments (ta, tb: 1 = transposed), so every call
 * reads like the CPU backend's cblas_sgemm call it mirrors (N tokens):
 *     out = x W^T      gemm(0, 1, N, outd, in, 1, x, in, W, in, 0, out, outd)
 *     dx += dout W     gemm(0, 0, N, in, outd, 1, dout, outd, W, in, 1, dx, in)
 *     dW += dout^T x   gemm(1, 0, outd, in, N, 1, dout, outd, x, in, 1, dW, in)
 * Attention uses the strided-batched form over heads (or over the batch):
 * head h of q (B x T x nh*hd) is the T x hd matrix at q + b*T*C + h*hd with
 * leading dimension C = nh*hd, so consecutive heads are hd floats apart.
 *
 * Precision.  Buffers are always fp32 (parameters are the fp32 master
 * weights; the optimizer state and every reduction stay fp32 or double).
 *   fp32 (default): compute type CUBLAS_COMPUTE_32F under
 *     CUBLAS_DEFAULT_MATH, i.e. true fp32 FMA products, no TF32: results
 *     agree with the CPU backend to ~1e-5 relative (summation order only).
 *   bf16 (set_bf16(1)): compute type CUBLAS_COMPUTE_32F_FAST_16BF on the
 *     same fp32 buffers: cuBLAS rounds A and B to bf16 inside the product
 *     and runs it on tensor cores with fp32 accumulation and fp32 output.
 *     This applies to every product (linear layers, and attention's q k^T,
 *     att v and their backward products); norms, softmaxes, cross-entropy
 *     and AdamW stay fp32.
 *
 * Determinism.  No float atomics: RMSNorm's dg and the double sums use
 * fixed two-level partials, dwte adds repeated tokens in token order after
 * a stable sort; cuBLAS is run-to-run reproducible on one stream with its
 * atomics disallowed (the default). */
#include "../../core/error.h"
#include "../backend.h"
#include "cuda_util.h"
#include "depth_cuda.h"
#include "ops_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t g_stream;
static cublasHandle_t g_cublas;
static int g_bf16;
static char g_name[256];
static double g_peak;

/* ------------------------------------------------------------------------ */
/* cuda_util.h                                                               */

extern "C" cudaStream_t ar_cuda_stream(void)
{
    if (!g_stream)
        AR_CUDA_CHECK(cudaStreamCreate(&g_stream));
    return g_stream;
}

extern "C" cublasHandle_t ar_cuda_cublas(void)
{
    if (!g_cublas) {
        AR_CUBLAS_CHECK(cublasCreate(&g_cublas));
        AR_CUBLAS_CHECK(cublasSetStream(g_cublas, ar_cuda_stream()));
        AR_CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));
    }
    return g_cublas;
}

extern "C" int ar_cuda_bf16(void) { return g_bf16; }

/* The place is shown from "lib/" on: __FILE__ holds the build's path. */
extern "C" void ar_cuda_die(const char *what, const char *detail, const char *file, int line)
{
    const char *f = strstr(file, "lib/");
    fprintf(stderr, "attnres: error: cuda: '%s' failed: %s (%s:%d)\n", what, detail,
            f ? f : file, line);
    exit(1);
}

/* ------------------------------------------------------------------------ */
/* memory                                                                    */

/* cudaMalloc aligns to 256 bytes; the size is rounded up to 64 (at least
 * 64) as the CPU backend does, and all of it is zeroed. */
static void *cu_alloc(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0)
        n = 64;
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, n);
    if (err != cudaSuccess) {
        char detail[160];
        snprintf(detail, sizeof detail, "%s (%zu bytes)", cudaGetErrorString(err), n);
        ar_cuda_die("cudaMalloc", detail, __FILE__, __LINE__);
    }
    AR_CUDA_CHECK(cudaMemsetAsync(p, 0, n, ar_cuda_stream()));
    return p;
}

/* Waits for the stream first: queued ops may still use p. */
static void cu_free(void *p)
{
    if (!p)
        return;
    AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream()));
    AR_CUDA_CHECK(cudaFree(p));
}

/* Synchronous: the host buffer may be reused on return (even if pinned). */
static void cu_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cudaStream_t st = ar_cuda_stream();
    AR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st));
    AR_CUDA_CHECK(cudaStreamSynchronize(st));
}

/* Ordered after every queued op; the host buffer is filled on return. */
static void cu_download(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cudaStream_t st = ar_cuda_stream();
    AR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st));
    AR_CUDA_CHECK(cudaStreamSynchronize(st));
}

static void cu_zero(void *p, size_t bytes)
{
    if (bytes)
        AR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ar_cuda_stream()));
}

static void cu_sync(void) { AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream())); }

/* the GPU schedules itself */
static void cu_set_threads(int n) { (void)n; }

void *ar_cu_ws(int slot, size_t bytes)
{
    static void *buf[CU_WS_NSLOTS];
    static size_t cap[CU_WS_NSLOTS];
    if (bytes > cap[slot]) {
        if (buf[slot]) {
            AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream()));
            AR_CUDA_CHECK(cudaFree(buf[slot]));
            buf[slot] = NULL;
            cap[slot] = 0;
        }
        size_t n = (bytes + 255) & ~(size_t)255;
        AR_CUDA_CHECK(cudaMalloc(&buf[slot], n));
        cap[slot] = n;
    }
    return buf[slot];
}

/* y = x (a device-to-device copy on the stream; y == x is a no-op) */
static void cu_copy(float *y, const float *x, size_t n)
{
    if (n && y != x)
        AR_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                      ar_cuda_stream()));
}

/* ------------------------------------------------------------------------ */
/* device                                                                    */

static int cu_set_bf16(int on)
{
    g_bf16 = on != 0;
    return 0;
}

static const char *cu_device_name(void) { return g_name; }

static double cu_peak_bf16_flops(void) { return g_peak; }

/* Dense bf16 tensor-core FLOPs per clock per SM (one FMA = 2 FLOPs):
 * A100 (sm_80) 2048; GA10x / Ada (sm_86, sm_89) 512; H100 (sm_90) 4096;
 * B200 (sm_100) 8192; others unknown (0). */
static int bf16_flops_per_clock_per_sm(int major, int minor)
{
    if (major == 8 && minor == 0)
        return 2048;
    if (major == 8 && (minor == 6 || minor == 9))
        return 512;
    if (major == 9 && minor == 0)
        return 4096;
    if (major == 10 && minor == 0)
        return 8192;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* matrix products (the mapping is in the comment at the top)                */

static cublasComputeType_t compute_type(void)
{
    return g_bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

void ar_cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    AR_CUBLAS_CHECK(cublasGemmEx(ar_cuda_cublas(), op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F,
                                 ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                 compute_type(), CUBLAS_GEMM_DEFAULT));
}

void ar_cu_gemm_batched(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                        int ldc, long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return;
    AR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ar_cuda_cublas(), op(tb), op(ta), N, M, K, &alpha,
                                               B, CUDA_R_32F, ldb, sB, A, CUDA_R_32F, lda, sA,
                                               &beta, C, CUDA_R_32F, ldc, sC, batch,
                                               compute_type(), CUBLAS_GEMM_DEFAULT));
}

/* out = x W^T     x: N x in, W: outd x in, out: N x outd   (=) */
static void cu_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    ar_cu_gemm(0, 1, N, outd, in, 1.0f, x, in, W, in, 0.0f, out, outd);
}

/* dx += dout W   (skipped when dx is NULL);   dW += dout^T x */
static void cu_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W,
                          int N, int in, int outd)
{
    if (dx)
        ar_cu_gemm(0, 0, N, in, outd, 1.0f, dout, outd, W, in, 1.0f, dx, in);
    ar_cu_gemm(1, 0, outd, in, N, 1.0f, dout, outd, x, in, 1.0f, dW, in);
}

/* ------------------------------------------------------------------------ */
/* the table                                                                 */

static ar_backend cuda_backend;

static void fill_table(ar_backend *b)
{
    b->name = "cuda";
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->zero = cu_zero;
    b->sync = cu_sync;
    b->set_threads = cu_set_threads;
    b->set_bf16 = cu_set_bf16;
    b->device_name = cu_device_name;
    b->peak_bf16_flops = cu_peak_bf16_flops;
    b->copy = cu_copy;
    b->add = ar_cu_add;
    b->scale = ar_cu_scale;
    b->sumsq = ar_cu_sumsq;
    b->embedding_fwd = ar_cu_embedding_fwd;
    b->embedding_bwd = ar_cu_embedding_bwd;
    b->rmsnorm_fwd = ar_cu_rmsnorm_fwd;
    b->rmsnorm_bwd = ar_cu_rmsnorm_bwd;
    b->matmul_fwd = cu_matmul_fwd;
    b->matmul_bwd = cu_matmul_bwd;
    b->rope_fwd = ar_cu_rope_fwd;
    b->rope_bwd = ar_cu_rope_bwd;
    b->attention_fwd = ar_cu_attention_fwd;
    b->attention_bwd = ar_cu_attention_bwd;
    b->swiglu_fwd = ar_cu_swiglu_fwd;
    b->swiglu_bwd = ar_cu_swiglu_bwd;
    b->depth_attn_fwd = cuda_depth_attn_fwd;
    b->depth_attn_bwd = cuda_depth_attn_bwd;
    b->depth_fwd_inter = cuda_depth_fwd_inter;
    b->depth_fwd_merge = cuda_depth_fwd_merge;
    b->depth_bwd_intra = cuda_depth_bwd_intra;
    b->depth_bwd_inter = cuda_depth_bwd_inter;
    b->depth_mix_fwd = cuda_depth_mix_fwd;
    b->depth_mix_bwd = cuda_depth_mix_bwd;
    b->wsum_fwd = cuda_wsum_fwd;
    b->wsum_bwd = cuda_wsum_bwd;
    b->xent_fwd = ar_cu_xent_fwd;
    b->xent_bwd = ar_cu_xent_bwd;
    b->adamw = ar_cu_adamw;
}

/* The module's one entry point (lib/cuda/backend_cuda_load.c dlopens
 * libattnres-cuda.so and calls it; table_size guards against a module from
 * another build).  On first use: finds the current device, checks that it can run this
 * build (sm_80 code and sm_90 PTX: compute capability 8.0 or later),
 * creates the stream and the cuBLAS handle and fills the table.  Failures
 * here are reported through e (the caller can fall back or say why);
 * later CUDA failures exit through ar_cuda_die. */
extern "C" __attribute__((visibility("default"))) const ar_backend *ar_cuda_module_open(ar_err *e, size_t table_size)
{
    static int ready;
    if (table_size != sizeof(ar_backend)) {
        ar_fail(e, "the cuda module was built from another version of attnres (op table of %zu bytes, "
                   "expected %zu): rebuild and reinstall both", sizeof(ar_backend), table_size);
        return NULL;
    }
    if (ready)
        return &cuda_backend;
    int count = 0, dev = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        ar_fail(e, "no CUDA device is usable: %s", cudaGetErrorString(err));
        return NULL;
    }
    if (count == 0) {
        ar_fail(e, "no CUDA device is usable: no device was found");
        return NULL;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
        (err = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        ar_fail(e, "no CUDA device is usable: %s", cudaGetErrorString(err));
        return NULL;
    }
    if (prop.major < 8) {
        ar_fail(e, "'%s' (compute capability %d.%d) is not supported: the cuda backend needs "
                   "compute capability 8.0 or later", prop.name, prop.major, prop.minor);
        return NULL;
    }
    /* cudaDeviceProp lost clockRate in CUDA 13: the attribute is in kHz */
    int sms = 0, khz = 0;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev)) != cudaSuccess ||
        (!g_stream && (err = cudaStreamCreate(&g_stream)) != cudaSuccess)) {
        (void)cudaGetLastError();
        ar_fail(e, "cannot start cuda on '%s': %s", prop.name, cudaGetErrorString(err));
        return NULL;
    }
    if (!g_cublas) {
        cublasHandle_t h = NULL;
        cublasStatus_t st = cublasCreate(&h);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetStream(h, g_stream);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
        if (st != CUBLAS_STATUS_SUCCESS) {
            if (h)
                cublasDestroy(h);
            ar_fail(e, "cannot start cublas on '%s': %s", prop.name, cublasGetStatusString(st));
            return NULL;
        }
        g_cublas = h;
    }
    snprintf(g_name, sizeof g_name, "%s", prop.name);
    g_peak = (double)sms * khz * 1e3 * bf16_flops_per_clock_per_sm(prop.major, prop.minor);
    fill_table(&cuda_backend);
    ready = 1;
    return &cuda_backend;
}

