/* The CUDA backend: the op table of lib/backend.h on one NVIDIA GPU.
 *
 * This file: the shared stream and cuBLAS handle (cuda_util.h), memory, the
 * workspace and device queries, and ar_cuda_module_open() (the entry point
 * lib/cuda/backend_cuda_load.c calls after dlopen), which fills the table.
 * The ops (cuda_<op>, lib/ops.def's) are in one file per family, each
 * mirroring lib/cpu/<family>_cpu.c:
 *   kernels_cuda.cu     elementwise, embedding, RMSNorm, rotary, SwiGLU,
 *                       cross-entropy, AdamW
 *   matmul_cuda.cu      linear layers, and the cuBLAS products of all ops
 *                       (its mapping of row-major products and precision)
 *   attention_cuda.cu   causal multi-head attention (fused: tiles_cuda.h;
 *                       its kernels on registers: attention_regs_cuda.cu)
 *   depth_cuda.cu       two-phase depth attention (Full/Block AttnRes)
 *   mixer_cuda.cu       the general depth mixer (lib/residual_mixer.c)
 *   wsum_cuda.cu        weighted sums of buffers (DenseFormer, mHC)
 * with rows_cuda.cu/.h the row-block layout the last three share.
 *
 * Ordering.  Every op is enqueued on one stream (created blocking, so it
 * also orders after any legacy default-stream call); cuBLAS is bound to it.
 * download and sumsq wait for the stream before they return, so the host
 * values returned are final; an upload returns with its host buffer free
 * for reuse, waiting for the stream only when it is large (cu_upload);
 * free (and a growing workspace) waits before it releases memory queued
 * ops may use.  Everything else is asynchronous: a training step on one
 * GPU waits once, for its record, after its update is queued
 * (lib/optim.h).
 *
 * Determinism.  No float atomics: RMSNorm's dg and the double sums use
 * fixed two-level partials, dwte adds repeated tokens in token order after
 * a stable sort; cuBLAS is run-to-run reproducible on one stream with its
 * atomics disallowed (the default). */
#include "../../core/error.h"
#include "../backend.h"
#include "cuda_util.h"
#include "device_peak.h"
#include "matmul_cuda.h"
#include "ops_cuda.h"
#include "workspace_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <utility>

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

/* The bytes held in buffers and workspace: each live buffer's size (a
 * list: buffers are made when a model is, and freed when it is), their
 * sum and its most. */
typedef struct {
    void *p;
    size_t n;
} held_buf;
static held_buf *g_held;
static size_t g_nheld, g_held_cap, g_held_bytes, g_held_peak;

/* appends b to a growing list (*list, *len of *cap) */
static void push_buf(held_buf **list, size_t *len, size_t *cap, held_buf b)
{
    if (*len == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        held_buf *h = (held_buf *)realloc(*list, c * sizeof *h);
        if (!h)
            ar_cuda_die("realloc", "out of host memory for a list of device buffers", __FILE__, __LINE__);
        *list = h, *cap = c;
    }
    (*list)[(*len)++] = b;
}

static void hold(void *p, size_t n)
{
    push_buf(&g_held, &g_nheld, &g_held_cap, held_buf{p, n});
    g_held_bytes += n;
    if (g_held_bytes > g_held_peak)
        g_held_peak = g_held_bytes;
}

static void release(void *p)
{
    for (size_t i = g_nheld; i-- > 0;)
        if (g_held[i].p == p) {
            g_held_bytes -= g_held[i].n;
            g_held[i] = g_held[--g_nheld];
            return;
        }
}

static size_t cu_mem_peak(void) { return g_held_peak; }

/* The output head's chunks: 512 MiB each (the CPU backend's are 64 MiB).
 * Each chunk's dW += dlogits^T hn reads and writes all of dW (V x d: 154
 * MB at GPT-2's vocabulary), so at bench-gpt2-small (N = 16384 rows) 64
 * MiB chunks (50 of 328 rows) moved ~15 GB a step for it; 512 MiB ones
 * are 7 chunks of 2341 rows, for 1 GiB of device memory. */
static size_t cu_head_floats(void) { return (size_t)128 << 20; }

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
    hold(p, n);
    return p;
}

/* The buffers of bf16 storage (alloc_act under bf16 products), in order
 * of address: a model's nine a block, looked up by every op's pointer
 * arguments (a binary search: the ops of a step ask thousands of times). */
static held_buf *g_b16;
static size_t g_nb16, g_b16_cap;

extern "C" int ar_cu_bf16_stored(const void *p)
{
    size_t lo = 0, hi = g_nb16; /* the last buffer starting at or below p is lo - 1 */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((const char *)g_b16[mid].p <= (const char *)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && (const char *)p < (const char *)g_b16[lo - 1].p + g_b16[lo - 1].n;
}

extern "C" void ar_cu_no_bf16_storage(const char *op, const char *arg, const void *p)
{
    if (p && g_nb16 && ar_cu_bf16_stored(p)) {
        char detail[200];
        snprintf(detail, sizeof detail, "%s is a buffer of bf16 storage (alloc_act), which this op does not take",
                 arg);
        ar_cuda_die(op, detail, __FILE__, __LINE__);
    }
}

/* n values: bf16 under bf16 products, else fp32 (lib/backend.h) */
static float *cu_alloc_act(size_t n)
{
    if (!g_bf16)
        return (float *)cu_alloc(n * sizeof(float));
    void *p = cu_alloc(n * 2);
    push_buf(&g_b16, &g_nb16, &g_b16_cap, held_buf{p, n * 2});
    for (size_t i = g_nb16 - 1; i > 0 && (char *)g_b16[i - 1].p > (char *)p; i--) /* kept in order */
        std::swap(g_b16[i], g_b16[i - 1]);
    return (float *)p;
}

/* bytes of a value alloc_act gives now */
static size_t cu_act_size(void) { return g_bf16 ? 2 : sizeof(float); }

/* Waits for the stream first: queued ops may still use p. */
static void cu_free(void *p)
{
    if (!p)
        return;
    AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream()));
    AR_CUDA_CHECK(cudaFree(p));
    release(p);
    for (size_t i = 0; i < g_nb16; i++)
        if (g_b16[i].p == p) { /* the rest move down: still in order */
            memmove(g_b16 + i, g_b16 + i + 1, (g_nb16 - i - 1) * sizeof *g_b16);
            g_nb16--;
            break;
        }
    ar_cu_weights_freed(p);
}

/* The host buffer may be reused on return.  Uploads of up to STAGE_BYTES
 * (a micro-batch's tokens, a step's few host values) go through a ring of
 * STAGE_SLOTS pinned buffers and do not wait for the device: the host
 * copies into the next slot, waiting only for that slot's last copy
 * (STAGE_SLOTS uploads ago) to have left, and queues the copy on the
 * stream, after every op queued before it.  Larger ones (parameters,
 * moments) wait for the stream. */
#define STAGE_SLOTS 8
#define STAGE_BYTES ((size_t)1 << 20)
static void *g_stage[STAGE_SLOTS];
static cudaEvent_t g_stage_left[STAGE_SLOTS];
static int g_stage_next;

static void cu_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    ar_cu_weights_written(dst);
    cudaStream_t st = ar_cuda_stream();
    if (bytes <= STAGE_BYTES) {
        int s = g_stage_next;
        g_stage_next = (s + 1) % STAGE_SLOTS;
        if (!g_stage[s]) {
            AR_CUDA_CHECK(cudaMallocHost(&g_stage[s], STAGE_BYTES));
            AR_CUDA_CHECK(cudaEventCreateWithFlags(&g_stage_left[s], cudaEventDisableTiming));
        } else {
            AR_CUDA_CHECK(cudaEventSynchronize(g_stage_left[s]));
        }
        memcpy(g_stage[s], src, bytes);
        AR_CUDA_CHECK(cudaMemcpyAsync(dst, g_stage[s], bytes, cudaMemcpyHostToDevice, st));
        AR_CUDA_CHECK(cudaEventRecord(g_stage_left[s], st));
        return;
    }
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
    if (!bytes)
        return;
    ar_cu_weights_written(p);
    AR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ar_cuda_stream()));
}

static void cu_sync(void) { AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream())); }

/* the GPU schedules itself */
static void cu_set_threads(int n) { (void)n; }

/* Grow-only scratch (workspace_cuda.h). */
void *ar_cu_ws(int slot, size_t bytes)
{
    static void *buf[CU_WS_NSLOTS];
    static size_t cap[CU_WS_NSLOTS];
    if (bytes > cap[slot]) {
        if (buf[slot]) {
            AR_CUDA_CHECK(cudaStreamSynchronize(ar_cuda_stream()));
            AR_CUDA_CHECK(cudaFree(buf[slot]));
            release(buf[slot]);
            buf[slot] = NULL;
            cap[slot] = 0;
        }
        size_t n = (bytes + 255) & ~(size_t)255;
        AR_CUDA_CHECK(cudaMalloc(&buf[slot], n));
        hold(buf[slot], n);
        cap[slot] = n;
    }
    return buf[slot];
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

/* the fused kernels' log-sum-exp per row, B x nh x T (attention_cuda.cu) */
static size_t cu_attention_state(int B, int T, int nh) { return (size_t)B * nh * T; }

/* ------------------------------------------------------------------------ */
/* the table                                                                 */

/* Each op enters through op_<name>, which tells the weights' copy
 * (matmul_cuda.h) where the op may write, before it runs and again after
 * (a product inside the op may have rounded the weights before the op
 * wrote them): every argument of type float * (an op's outputs; const
 * pointers are its inputs, and nothing writes the parameters through a
 * pointer array or a struct: adamw and the optimizer's other ops take
 * them as float *). */
template <typename T> static inline void may_write(T) {}
static inline void may_write(float *p) { ar_cu_weights_written(p); }
template <typename R, typename... P, typename... A> static inline R marking_writes(R (*op)(P...), A... a)
{
    (may_write(a), ...);
    if constexpr (std::is_void_v<R>) {
        op(a...);
        (may_write(a), ...);
    } else {
        R r = op(a...);
        (may_write(a), ...);
        return r;
    }
}

/* bf16 storage (alloc_act): the ops that take it check their own
 * arguments (which of them may be bf16); every other op stops where any
 * pointer argument is such a buffer, rather than read its bytes as
 * floats. */
static constexpr bool same(const char *a, const char *b) { return *a == *b && (!*a || same(a + 1, b + 1)); }
static constexpr bool takes_bf16_storage(const char *op)
{
    return same(op, "matmul_fwd") || same(op, "matmul_bwd") || same(op, "swiglu_fwd") || same(op, "swiglu_bwd") ||
           same(op, "rope_fwd") || same(op, "rope_bwd") || same(op, "attention_fwd") || same(op, "attention_bwd") ||
           same(op, "rmsnorm_fwd") || same(op, "depth_fwd_inter") || same(op, "depth_fwd_merge") ||
           same(op, "depth_bwd_intra") || same(op, "depth_bwd_inter") || same(op, "copy") || same(op, "add") ||
           same(op, "sumsq") || same(op, "embedding_fwd") || same(op, "rmsnorm_bwd");
}
template <typename T> static inline void no_storage(const char *, T) {}
static inline void no_storage(const char *op, const float *p) { ar_cu_no_bf16_storage(op, "an argument", p); }
static inline void no_storage(const char *op, float *p) { ar_cu_no_bf16_storage(op, "an argument", p); }
template <typename... A> static inline void refuse_bf16_storage(const char *op, A... a) { (no_storage(op, a), ...); }

#define AR_UNPACK(...) __VA_ARGS__
#define AR_OP(ret, name, params, args, uses)                                                                 \
    static ret op_##name params                                                                              \
    {                                                                                                        \
        if constexpr (!takes_bf16_storage(#name))                                                            \
            if (g_nb16)                                                                                      \
                refuse_bf16_storage(#name, AR_UNPACK args);                                                  \
        return marking_writes(cuda_##name, AR_UNPACK args);                                                  \
    }
#include "../ops.def"
#undef AR_OP
#undef AR_UNPACK

static ar_backend cuda_backend;

static void fill_table(ar_backend *b)
{
    b->name = "cuda";
    b->alloc = cu_alloc;
    b->alloc_act = cu_alloc_act;
    b->act_size = cu_act_size;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->zero = cu_zero;
    b->sync = cu_sync;
    b->set_threads = cu_set_threads;
    b->set_bf16 = cu_set_bf16;
    b->device_name = cu_device_name;
    b->peak_bf16_flops = cu_peak_bf16_flops;
    b->mem_peak = cu_mem_peak;
    b->head_floats = cu_head_floats;
    b->attention_state = cu_attention_state;
    b->set_weight_copy = ar_cu_weight_copy;
#define AR_OP(ret, name, params, args, uses) b->name = op_##name;
#include "../ops.def"
#undef AR_OP
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
    g_peak = ar_cuda_peak_bf16(prop.name, prop.major, prop.minor, sms, khz);
    fill_table(&cuda_backend);
    ready = 1;
    return &cuda_backend;
}
