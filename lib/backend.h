/* The compute backend: one table of operations over device buffers.
 *
 * The model, optimizer and trainer call only these entries; lib/cpu/ fills
 * the table with CBLAS + OpenMP code, lib/cuda/ with CUDA kernels and
 * cuBLAS.  The ops are listed once, with their math, in lib/ops.def, which
 * generates their members below and both backends' tables (cpu_<op>,
 * cuda_<op>); the arguments of the larger ones are structs of
 * lib/op_args.h.  Each family of ops has one file per backend, of the same
 * name:
 *     backend_cpu.c    backend_cuda.cu    memory, device, the table
 *     ops_cpu.h        ops_cuda.h         the kernels' prototypes (from ops.def)
 *     kernels_cpu.c    kernels_cuda.cu    elementwise, embedding, RMSNorm,
 *                                         rotary, SwiGLU, cross-entropy, AdamW
 *     matmul_cpu.c     matmul_cuda.cu     linear
 *     attention_cpu.c  attention_cuda.cu  causal attention (attention_regs_cuda.cu:
 *                                         its register kernels)
 *     depth_cpu.c      depth_cuda.cu      two-phase depth attention
 *     mixer_cpu.c      mixer_cuda.cu      general one-phase depth mixing
 *     wsum_cpu.c       wsum_cuda.cu       weighted sums of buffers (wsum, wmix)
 * Pointers passed to ops are device pointers obtained from be->alloc (for the
 * CPU backend these are ordinary host pointers).  Arrays of pointers (the
 * depth-attention source lists) are host arrays holding device pointers.
 *
 * Conventions (every op, every backend):
 *   - row-major; N = number of token positions (B*T); "x W^T" follows
 *     nn.Linear with W stored [out, in];
 *   - parameter gradients always ACCUMULATE (+=), so gradient accumulation
 *     over micro-batches needs no extra buffer;
 *   - activation gradients accumulate where the comment says "+=" and are
 *     overwritten where it says "=";
 *   - eps of every RMSNorm is AR_RMS_EPS;
 *   - subnormal floats may be flushed to zero (the CPU backend sets FTZ
 *     and DAZ on its threads: lib/cpu/backend_cpu.c says why). */
#ifndef AR_BACKEND_H
#define AR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "op_args.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AR_RMS_EPS 1e-6f
#define AR_WMIX_MAX 8      /* most outputs of one wmix op */
#define AR_WMIX_MAX_IN 256 /* most inputs of one wmix op */
#define AR_LIST_MAX 256    /* most buffers in any op's list argument (the CUDA backend's kernels take a list by value) */
#define AR_HEAD_CHUNK_FLOATS (16u << 20) /* the CPU backend's head_floats() */

typedef struct ar_backend {
    const char *name;

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes); /* zero-filled, 64-byte aligned */
    void (*free)(void *p);
    /* Memory for n values of an activation (an op's output that later ops
     * read), in the backend's storage precision when it is called: under
     * bf16 products (set_bf16(1)) the CUDA backend stores them in bf16, 2 n
     * bytes, half the memory and traffic of fp32.  Only the ops lib/ops.def
     * marks "bf16 storage" take such a buffer, where it says; they read it
     * as bf16 and round what they write into it to bf16 (to nearest, ties
     * to even), and do their arithmetic in fp32.  The CUDA backend stops
     * with an error naming the op where any other op is given one, as an
     * argument of its own or in a list of buffers (the depth ops' sources
     * may be, all or none of a list).  Its bytes are the host's to move
     * whole (upload, download), never to offset as floats.  Freed with
     * free.  NULL where every activation is fp32 (the CPU backend):
     * callers alloc n floats instead (ar_alloc_act). */
    float *(*alloc_act)(size_t n);
    /* Bytes of one value alloc_act gives now: 2 (bf16) or 4; NULL with
     * alloc_act (ar_act_size). */
    size_t (*act_size)(void);
    void (*upload)(void *dst, const void *src, size_t bytes);   /* host -> device */
    void (*download)(void *dst, const void *src, size_t bytes); /* device -> host */
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);
    void (*set_threads)(int n); /* 0 = all cores */
    /* Matrix products in bf16 with fp32 accumulation (on = 1) or in fp32
     * (on = 0, the default).  Returns 0, or -1 where the backend has no bf16
     * path (the CPU backend). */
    int (*set_bf16)(int on);
    /* A short name of the device ("NVIDIA H100 80GB HBM3"; the CPU backend:
     * "cpu") and its dense bf16 tensor peak in FLOP/s (0 where unknown: the
     * CPU backend), the denominator of bench's model FLOPs utilisation. */
    const char *(*device_name)(void);
    double (*peak_bf16_flops)(void);
    /* The most bytes this process has held in alloc at once (device memory
     * on a device; the CUDA backend counts its buffers and its ops'
     * workspace, not the CUDA context or cuBLAS's own workspace), 0 where
     * the backend does not count
     * (the CPU backend: its memory is the process's resident set). */
    size_t (*mem_peak)(void);
    /* The most floats of each of the output head's two chunk buffers
     * (lib/model.h: the head works over chunks of rows): larger chunks
     * cost memory and save time (fewer products, each of which adds into
     * all of the head's gradient).  The CPU backend's: AR_HEAD_CHUNK_FLOATS
     * (64 MiB). */
    size_t (*head_floats)(void);
    /* Floats of causal attention's saved state (ar_attention.att) at a
     * shape, and of its backward's scratch (datt), each: the CPU backend
     * saves the probabilities, B nh T T (and takes as much scratch); the
     * CUDA backend's fused kernels save a log-sum-exp per row, B nh T (and
     * take B nh T of scratch: each row's dy.y). */
    size_t (*attention_state)(int B, int T, int nh);
    /* The model's parameters, [p, p + n floats) (p NULL or n 0: none):
     * under bf16 products the CUDA backend reads any operand inside them
     * from one bf16 copy it keeps (counted in mem_peak), rounded when a
     * product first needs it after anything wrote inside the range
     * through this table (an op's output, upload, zero; freeing memory
     * inside it forgets the range), instead of rounding each product's
     * weight anew.  The same roundings: the same products, bit for bit.
     * Setting the range already set keeps the copy; another range replaces
     * it (one range at a time: the model calls this before its products).
     * The CPU backend (no bf16 path) does nothing. */
    void (*set_weight_copy)(const float *p, size_t n);

    /* ---- the ops, each declared and described once in lib/ops.def ---- */
#define AR_OP(ret, name, params, args, uses) ret(*name) params;
#include "ops.def"
#undef AR_OP
} ar_backend;

/* n values of an activation: be->alloc_act(n) where the backend has it,
 * else n floats of be->alloc. */
static inline float *ar_alloc_act(const ar_backend *be, size_t n)
{
    return be->alloc_act ? be->alloc_act(n) : (float *)be->alloc(n * sizeof(float));
}

/* Bytes of one value ar_alloc_act gives now: 2 in bf16 storage, else 4. */
static inline size_t ar_act_size(const ar_backend *be) { return be->act_size ? be->act_size() : sizeof(float); }

/* The CPU backend (always built). */
const ar_backend *ar_backend_cpu(void);

/* What runs the CPU backend's linear-layer products besides the CBLAS:
 * "libxsmm 1.17 AVX-512 (cpx)" where built with -Dcpu_gemm=libxsmm
 * (lib/cpu/matmul_xsmm.c), NULL where the CBLAS runs them all. */
const char *ar_cpu_small_products(void);
/* What runs the CPU backend's large forward and dx products instead of the
 * CBLAS: "BLIS 0.9.0 zen3" where built with -Dblis_products and the CPU is
 * an AMD one (lib/cpu/matmul_blis.c), else NULL. */
const char *ar_cpu_large_products(void);

/* The CUDA backend on the current CUDA device (lib/cuda/), created on first
 * use.  NULL with e set where attnres was built without CUDA
 * (lib/cuda/backend_cuda_load.c) or no CUDA device can be used. */
struct ar_err;
const ar_backend *ar_backend_cuda(struct ar_err *e);
/* 1 when this build has the CUDA backend compiled in. */
int ar_cuda_built(void);

/* The backend of a train.device value ("cpu" or NULL: the CPU backend;
 * "cuda": ar_backend_cuda) with bf16 matrix products on or off (set_bf16).
 * NULL with e set, naming the key, where that device cannot be used
 * ("'train.device' cuda: " and ar_backend_cuda's message) or has no bf16
 * path ("'train.precision' bf16 needs 'train.device' cuda ...").
 * lib/backend_select.c */
const ar_backend *ar_backend_open(const char *device, int bf16, struct ar_err *e);

#ifdef __cplusplus
}
#endif

#endif
