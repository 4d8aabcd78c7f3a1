/* The CPU backend: every entry of the op table in lib/backend.h over flat
 * float arrays, in the style of llm.c: each op a plain forward/backward pair
 * (cpu_<op>, the math of each in lib/ops.def).
 *
 * Matrix products go through CBLAS (OpenBLAS, OpenMP build); the remaining
 * loops are parallelised with OpenMP over rows / tokens / (batch, head).
 *
 * Determinism: results are bit-reproducible run to run with the same thread
 * count.  There are no float atomics; every loop uses a static schedule; and
 * every reduction across tokens (parameter gradients dg, dw, dwte; sumsq;
 * the xent loss sum) is either computed by looping over output columns in
 * parallel with the token loop sequential inside, or summed from partials of
 * a fixed chunking in a fixed order.  Those reductions therefore do not even
 * depend on the thread count.  OpenBLAS sgemm splits only the output (M, N)
 * among its threads, so it is reproducible for a given thread count too.
 *
 * This file: memory, the workspace, device queries and the table.  The ops
 * are in one file per family, each mirrored by lib/cuda/<family>_cuda.cu:
 *   kernels_cpu.c     elementwise, embedding, RMSNorm, rotary, SwiGLU,
 *                     cross-entropy, AdamW
 *   matmul_cpu.c      linear layers
 *   attention_cpu.c   causal multi-head attention
 *   depth_cpu.c       two-phase depth attention (Full/Block AttnRes)
 *   mixer_cpu.c       the general depth mixer (lib/residual_mixer.c)
 *   wsum_cpu.c        weighted sums of buffers (DenseFormer, mHC; wsum, wmix) */
#include "../backend.h"
#include "ops_cpu.h"

#include <cblas.h>
#if defined(AR_BLAS_BLIS) || defined(AR_HAVE_BLIS_PRODUCTS)
#include "blis_setup.h"
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

/* ------------------------------------------------------------------------ */
/* memory                                                                    */

static void *cpu_alloc(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0)
        n = 64;
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

static void cpu_free(void *p) { free(p); }

static void cpu_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_download(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
}

static void cpu_sync(void) {}

/* Subnormal floats are flushed to zero on output (FTZ) and read as zero on
 * input (DAZ) on every thread that runs ops.  x86 handles a subnormal
 * operand or result with a microcode assist of about a hundred cycles, and
 * training can fill whole gradients with them (softmax weights that
 * underflow): input-query's training step at bench-small ran 3.6x slower
 * with them, nearly all of it in OpenBLAS's backward products.  Nothing
 * below 1.2e-38 carries signal in fp32 training; GPUs' fast paths flush
 * them too.  Threads inherit the mode from the thread that creates them
 * (pthread_create(3)), so setting it on the caller and on the OpenMP pool
 * covers OpenBLAS's OpenMP threads as well. */
static void flush_subnormals_here(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

static void flush_subnormals(void)
{
    flush_subnormals_here();
#pragma omp parallel
    flush_subnormals_here();
}

/* n <= 0: OMP_NUM_THREADS if set, else every processor (omp_get_max_threads
 * before any omp_set_num_threads call says exactly that, so remember it). */
static void cpu_set_threads(int n)
{
    static int initial;
    if (!initial)
        initial = omp_get_max_threads();
    if (n <= 0)
        n = initial;
    omp_set_num_threads(n);
#if defined(AR_BLAS_BLIS) || defined(AR_HAVE_BLIS_PRODUCTS)
    ar_blis_set_threads(n);
#endif
#ifndef AR_BLAS_BLIS
    openblas_set_num_threads(n);
#endif
    flush_subnormals();
}

/* ------------------------------------------------------------------------ */
/* device, and the table                                                     */

/* matrix products stay fp32: OpenBLAS has no bf16 sgemm worth using here */
static int cpu_set_bf16(int on) { return on ? -1 : 0; }
static const char *cpu_device_name(void) { return "cpu"; }
static double cpu_peak_bf16_flops(void) { return 0; }
static size_t cpu_mem_peak(void) { return 0; }
static size_t cpu_head_floats(void) { return AR_HEAD_CHUNK_FLOATS; }

/* products in fp32: no copies to keep */
static void cpu_set_weight_copy(const float *p, size_t n) { (void)p, (void)n; }
/* the probabilities, B x nh x T x T (lib/cpu/attention_cpu.c) */
static size_t cpu_attention_state(int B, int T, int nh) { return (size_t)B * nh * T * T; }

static const ar_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .alloc_act = NULL, /* every activation in fp32 */
    .act_size = NULL,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .set_threads = cpu_set_threads,
    .set_bf16 = cpu_set_bf16,
    .device_name = cpu_device_name,
    .peak_bf16_flops = cpu_peak_bf16_flops,
    .mem_peak = cpu_mem_peak,
    .head_floats = cpu_head_floats,
    .set_weight_copy = cpu_set_weight_copy,
    .attention_state = cpu_attention_state,
#define AR_OP(ret, name, params, args, uses) .name = cpu_##name,
#include "../ops.def"
#undef AR_OP
};

const ar_backend *ar_backend_cpu(void)
{
    static int flushed;
    if (!flushed) {
        flush_subnormals();
        flushed = 1;
    }
    return &cpu_backend;
}
