/* The CUDA emulator: lib/cuda's kernels, runtime calls, cuBLAS and cub
 * calls run on the CPU, so that CI compares every CUDA kernel of our own
 * with the CPU backend (tests/test_backend_ops.c, test_backend_train.c
 * with AR_TEST_BACKEND_B=emu) on a machine without a GPU.
 *
 * How.  tests/cuda_emu/launch.py rewrites each .cu file of lib/cuda (launches and
 * dynamic shared memory only) and g++ compiles it against the stand-in
 * headers of tests/cuda_emu/include, into libattnres-cuda-emu.so, which
 * has the real module's entry point.  A launch runs the grid's blocks one
 * after another; the threads of a block are fibers (ucontext) on one OS
 * thread, each run until it exits or waits:
 *   __syncthreads   waits until every thread of the block is there;
 *   __shfl_xor_sync and __syncwarp wait until every lane of the warp is
 *                   there (the value moves through a per-warp slot);
 * and the scheduler then releases the waiters, in thread order.
 *
 * What it checks beyond the values: a launch's configuration (threads per
 * block, grid size, dynamic shared memory against the 48 KiB default and
 * the per-kernel opt-in) as the runtime does, returning its error through
 * cudaGetLastError; a barrier that part of a block or warp never reaches
 * (a thread exited, or waits at another barrier): the emulator names the
 * kernel, block and threads and aborts, where a GPU would hang or be
 * undefined; copies, memsets, sorts and cuBLAS operands that leave the
 * cudaMalloc'ed buffers; cuBLAS's documented argument rules (leading
 * dimensions, operations, types, compute types).  New device memory and
 * each block's dynamic shared memory are filled with NaN, so a read before
 * a write shows.
 *
 * What it cannot show: races (threads run in a fixed order, one at a time,
 * so a missing barrier between a write and another thread's read may go
 * unseen; AR_CUDA_EMU_ORDER=reverse runs the other order, which shows most
 * of them as different results), the GPU's floating point (tensor-core
 * bf16 products: the stand-ins round the operands to bf16 and multiply in
 * fp32, cuBLAS's
 * with CBLAS, WMMA's (include/mma.h) in k order;
 * the device's expf, logf and division are the host's), memory limits,
 * streams' concurrency, and speed. */
#include "cuda_runtime.h"

#include "cuda_bf16.h"
#include "cub/device/device_radix_sort.cuh"
#include "cublas_v2.h"

#include <algorithm>
#include <cblas.h>
#include <map>
#include <numeric>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

/* ---------------------------------------------------------------- memory */

std::map<uintptr_t, size_t> g_alloc; /* start -> bytes of every cudaMalloc */
cudaError_t g_last = cudaSuccess;      /* the launch error cudaGetLastError returns */

/* [p, p + bytes) inside one allocation */
bool on_device(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_alloc.upper_bound(a);
    if (it == g_alloc.begin())
        return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* ---------------------------------------------------------------- fibers */

enum state { READY, AT_SYNC, AT_WARP, DONE };

struct fiber {
    void *sp; /* its stack pointer while it waits (x86-64) */
    ucontext_t uc; /* elsewhere: its context */
    state st;
    unsigned tid; /* linear thread index in the block */
    uint3 idx;
};

/* one lane's operands of a register-level tensor-core product (mma_cuda.h) */
struct mma_in {
    uint32_t a[4], b[2];
    float c[4];
};

struct warp {
    int gen;              /* releases so far: slot[gen & 1] takes the next values */
    uint64_t slot[2][32];
    mma_in mma[2][32];
    float mma_d[2][16][8]; /* the product, formed by the first lane to ask */
    bool mma_done[2];
    const uint16_t *ldm[2][32]; /* each lane's row address of an ldmatrix */
    uint32_t ldm_r[2][32][4];   /* every lane's registers, read by the first lane to ask */
    bool ldm_done[2];
};

const size_t STACK = 64 << 10;
std::vector<fiber> g_fib;
std::vector<char *> g_stack;
std::vector<warp> g_warp;
fiber *g_cur;
std::function<void()> *g_body;
const char *g_name;
std::vector<float> g_smem; /* a block's dynamic shared memory, from a 256-byte boundary in it */
std::map<const void *, int> g_smem_optin;

void wait_as(state s);

/* A fiber runs the launch's body for one thread after another, across
 * blocks and launches, and never returns. */
void fiber_main()
{
    for (;;) {
        (*g_body)();
        wait_as(DONE);
    }
}

#if defined(__x86_64__)
/* The switch: push the System V callee-saved registers, swap stack
 * pointers, pop and return into the other side (swapcontext would also
 * make two system calls a switch, for the signal mask, and the fibers
 * switch millions of times a test). */
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(".text\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch,.-emu_switch\n");

void *g_sched_sp;

/* A new fiber's stack as emu_switch leaves a waiting one: six registers,
 * then fiber_main as the return address, 16-byte aligned as at a call. */
void start(fiber &f, char *stack)
{
    uintptr_t top = ((uintptr_t)stack + STACK) & ~(uintptr_t)15;
    void **ret = (void **)(top - 16);
    *ret = (void *)fiber_main;
    for (int r = 1; r <= 6; r++)
        ret[-r] = NULL;
    f.sp = ret - 6;
}

void wait_as(state s)
{
    g_cur->st = s;
    emu_switch(&g_cur->sp, g_sched_sp);
}

/* Runs fiber f until it waits or is done. */
void resume(fiber &f)
{
    g_cur = &f;
    threadIdx = f.idx;
    emu_switch(&g_sched_sp, f.sp);
}
#else
ucontext_t g_sched;

void start(fiber &f, char *stack)
{
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack;
    f.uc.uc_stack.ss_size = STACK;
    f.uc.uc_link = NULL;
    makecontext(&f.uc, fiber_main, 0);
}

void wait_as(state s)
{
    g_cur->st = s;
    swapcontext(&g_cur->uc, &g_sched);
}

void resume(fiber &f)
{
    g_cur = &f;
    threadIdx = f.idx;
    swapcontext(&g_sched, &f.uc);
}
#endif

const char *state_name(state s)
{
    return s == AT_SYNC ? "__syncthreads" : s == AT_WARP ? "a warp shuffle or __syncwarp" : s == DONE ? "exited" : "running";
}

[[noreturn]] void divergent(unsigned a, unsigned b, const char *what)
{
    const fiber &x = g_fib[a], &y = g_fib[b];
    fail("kernel '%s', block (%u,%u,%u): %s: thread %u is at %s while thread %u is %s%s", g_name, blockIdx.x,
         blockIdx.y, blockIdx.z, what, x.tid, state_name(x.st), y.tid, y.st == DONE ? "" : "at ",
         state_name(y.st));
}

/* AR_CUDA_EMU_ORDER=reverse: threads run in the reverse of their index
 * order between barriers, and a grid's blocks in reverse order too.  A
 * kernel that reads what another thread (or block) writes without a
 * barrier between them (a race, which the fixed order may hide) then
 * reads other values than in the forward order: running a comparison in
 * both orders shows most such races.  Read at each launch. */
bool g_reverse;

/* Runs one block of n threads to its end. */
void run_block(unsigned n)
{
    unsigned nw = (n + 31) / 32;
    for (unsigned w = 0; w < nw; w++)
        g_warp[w].gen = 0;
    for (unsigned t = 0; t < n; t++) {
        fiber &f = g_fib[t];
        f.st = READY;
        f.tid = t;
        f.idx = uint3{t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
    }
    for (;;) {
        for (unsigned i = 0; i < n; i++) {
            fiber &f = g_fib[g_reverse ? n - 1 - i : i];
            if (f.st == READY)
                resume(f);
        }
        /* every thread now waits or is done: release whole warps first */
        bool released = false;
        unsigned done = 0, at_sync = 0;
        for (unsigned w = 0; w < nw; w++) {
            unsigned t0 = w * 32, t1 = std::min(n, t0 + 32), first = t1;
            bool all = true;
            for (unsigned t = t0; t < t1; t++)
                if (g_fib[t].st == AT_WARP) {
                    if (first == t1)
                        first = t;
                } else {
                    all = false;
                }
            if (first == t1)
                continue; /* no lane at a warp barrier */
            if (t1 - t0 < 32)
                fail("kernel '%s', block (%u,%u,%u): a full-mask warp operation in a warp of %u threads (blockDim "
                     "%u,%u,%u)",
                     g_name, blockIdx.x, blockIdx.y, blockIdx.z, t1 - t0, blockDim.x, blockDim.y, blockDim.z);
            if (!all)
                for (unsigned t = t0; t < t1; t++)
                    if (g_fib[t].st != AT_WARP)
                        divergent(first, t, "a full-mask warp operation not reached by every lane");
            g_warp[w].gen++;
            for (unsigned t = t0; t < t1; t++)
                g_fib[t].st = READY;
            released = true;
        }
        if (released)
            continue;
        for (unsigned t = 0; t < n; t++) {
            done += g_fib[t].st == DONE;
            at_sync += g_fib[t].st == AT_SYNC;
        }
        if (done == n)
            return;
        /* at_sync + done == n here */
        if (done) {
            unsigned a = 0, b = 0;
            while (g_fib[a].st != AT_SYNC)
                a++;
            while (g_fib[b].st != DONE)
                b++;
            divergent(a, b, "__syncthreads not reached by every thread");
        }
        for (unsigned t = 0; t < n; t++)
            g_fib[t].st = READY;
    }
}

} // namespace

/* ---------------------------------------------------------------- kernels */

void __syncthreads(void) { wait_as(AT_SYNC); }

void __syncwarp(unsigned mask)
{
    if (mask != 0xffffffffu)
        fail("kernel '%s': __syncwarp with mask %#x: the emulator takes only full masks", g_name, mask);
    wait_as(AT_WARP);
}

uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask)
{
    if (mask != 0xffffffffu)
        fail("kernel '%s': a shuffle with mask %#x: the emulator takes only full masks", g_name, mask);
    if (lane_mask < 0 || lane_mask > 31)
        fail("kernel '%s': __shfl_xor_sync with lane mask %d", g_name, lane_mask);
    unsigned lane = g_cur->tid & 31;
    warp &w = g_warp[g_cur->tid >> 5];
    w.slot[w.gen & 1][lane] = bits;
    wait_as(AT_WARP);
    return w.slot[(w.gen - 1) & 1][lane ^ (unsigned)lane_mask];
}

/* as a GPU's, aligned for any type and for WMMA's 256-bit tiles */
/* PTX mma.m16n8k16 (bf16 in, fp32 out) as lib/cuda/mma_cuda.h lays out its
 * fragments: every lane posts its own, the warp meets, the first lane to
 * run after rebuilds A (16 x 16), B (16 x 8) and C (16 x 8) and forms
 * A B + C, the products exact (bf16 times bf16 fits a float) and added in
 * k order after C; each lane takes its four entries. */
static float bf16_lo(uint32_t r) { return __bfloat162float(__nv_bfloat16{(uint16_t)(r & 0xffffu)}); }
static float bf16_hi(uint32_t r) { return __bfloat162float(__nv_bfloat16{(uint16_t)(r >> 16)}); }

void ar_mma_emulated(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
    unsigned lane = g_cur->tid & 31;
    warp &w = g_warp[g_cur->tid >> 5];
    mma_in &mine = w.mma[w.gen & 1][lane];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, c, sizeof mine.c);
    w.mma_done[w.gen & 1] = false;
    wait_as(AT_WARP);
    int buf = (w.gen - 1) & 1;
    float(*D)[8] = w.mma_d[buf];
    unsigned g = lane >> 2, q = lane & 3;
    if (w.mma_done[buf]) {
        d[0] = D[g][2 * q], d[1] = D[g][2 * q + 1], d[2] = D[g + 8][2 * q], d[3] = D[g + 8][2 * q + 1];
        return;
    }
    const mma_in *all = w.mma[buf];
    float A[16][16], B[16][8], C[16][8];
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l >> 2, q = l & 3;
        const mma_in &m = all[l];
        A[g][2 * q] = bf16_lo(m.a[0]), A[g][2 * q + 1] = bf16_hi(m.a[0]);
        A[g + 8][2 * q] = bf16_lo(m.a[1]), A[g + 8][2 * q + 1] = bf16_hi(m.a[1]);
        A[g][2 * q + 8] = bf16_lo(m.a[2]), A[g][2 * q + 9] = bf16_hi(m.a[2]);
        A[g + 8][2 * q + 8] = bf16_lo(m.a[3]), A[g + 8][2 * q + 9] = bf16_hi(m.a[3]);
        B[2 * q][g] = bf16_lo(m.b[0]), B[2 * q + 1][g] = bf16_hi(m.b[0]);
        B[2 * q + 8][g] = bf16_lo(m.b[1]), B[2 * q + 9][g] = bf16_hi(m.b[1]);
        C[g][2 * q] = m.c[0], C[g][2 * q + 1] = m.c[1];
        C[g + 8][2 * q] = m.c[2], C[g + 8][2 * q + 1] = m.c[3];
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float s = C[i][j];
            for (int k = 0; k < 16; k++)
                s += A[i][k] * B[k][j];
            D[i][j] = s;
        }
    w.mma_done[buf] = true;
    d[0] = D[g][2 * q], d[1] = D[g][2 * q + 1], d[2] = D[g + 8][2 * q], d[3] = D[g + 8][2 * q + 1];
}

/* PTX ldmatrix.m8n8.x{n}[.trans].b16 (mma_cuda.h): every lane posts its
 * row address (16-byte aligned, or the call aborts), the warp meets, and
 * lane (g, q) takes from matrix m (rows: the addresses of lanes 8m ..
 * 8m + 7) its elements (g, 2q..2q+1), or (2q..2q+1, g) transposed, the
 * lower-numbered one in the low half.  The first lane to run after the
 * meeting reads every lane's registers, so that what the lanes run next
 * (until the warp meets again) cannot change what the others load. */
void ar_ldmatrix_emulated(uint32_t *r, int n, int trans, const void *row)
{
    unsigned lane = g_cur->tid & 31;
    warp &w = g_warp[g_cur->tid >> 5];
    if ((lane < 8u * (unsigned)n) && (uintptr_t)row % 16)
        fail("kernel '%s', block (%u,%u,%u), thread %u: ldmatrix row at %p: not 16-byte aligned", g_name,
             blockIdx.x, blockIdx.y, blockIdx.z, g_cur->tid, row);
    w.ldm[w.gen & 1][lane] = (const uint16_t *)row;
    w.ldm_done[w.gen & 1] = false;
    wait_as(AT_WARP);
    int buf = (w.gen - 1) & 1;
    if (!w.ldm_done[buf]) {
        const uint16_t *const *rows = w.ldm[buf];
        for (unsigned l = 0; l < 32; l++) {
            unsigned g = l >> 2, q = l & 3;
            for (int m = 0; m < n; m++) {
                const uint16_t *const *mr = rows + 8 * m;
                uint32_t lo = trans ? mr[2 * q][g] : mr[g][2 * q], hi = trans ? mr[2 * q + 1][g] : mr[g][2 * q + 1];
                w.ldm_r[buf][l][m] = lo | hi << 16;
            }
        }
        w.ldm_done[buf] = true;
    }
    for (int m = 0; m < n; m++)
        r[m] = w.ldm_r[buf][lane][m];
}

void *emu_dynamic_smem(void) { return (void *)(((uintptr_t)g_smem.data() + 255) & ~(uintptr_t)255); }

void emu_wmma_check(const void *p, unsigned ldm, size_t elem_bytes, const char *what)
{
    if ((uintptr_t)p % 32)
        fail("kernel '%s', block (%u,%u,%u), thread %u: wmma::%s at %p: not 256-bit aligned", g_name, blockIdx.x,
             blockIdx.y, blockIdx.z, g_cur->tid, what, p);
    unsigned mult = elem_bytes == 2 ? 8 : 4;
    if (ldm % mult)
        fail("kernel '%s', block (%u,%u,%u), thread %u: wmma::%s with ldm %u: not a multiple of %u elements",
             g_name, blockIdx.x, blockIdx.y, blockIdx.z, g_cur->tid, what, ldm, mult);
    __syncwarp();
}

void emu_launch(const void *fn, const char *name, emu_cfg cfg, std::function<void()> body)
{
    dim3 g = cfg.grid, b = cfg.block;
    size_t n = (size_t)b.x * b.y * b.z;
    int optin = g_smem_optin.count(fn) ? g_smem_optin[fn] : 0;
    if (n == 0 || n > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 ||
        g.x > 2147483647u || g.y > 65535 || g.z > 65535 ||
        (cfg.smem > 49152 && cfg.smem > (size_t)optin) || cfg.smem > 232448) {
        g_last = cudaErrorInvalidConfiguration;
        return;
    }
    while (g_fib.size() < n) {
        /* fibers hold their place (a ucontext_t points into itself) */
        g_fib.reserve(1024);
        g_fib.emplace_back();
        g_stack.push_back((char *)aligned_alloc(64, STACK));
        start(g_fib.back(), g_stack.back());
    }
    if (g_warp.size() < (n + 31) / 32)
        g_warp.resize((n + 31) / 32);
    g_smem.assign((cfg.smem + sizeof(float) - 1) / sizeof(float) + 64 + 4, NAN);
    g_body = &body;
    g_name = name;
    blockDim = b;
    gridDim = g;
    const char *order = getenv("AR_CUDA_EMU_ORDER");
    g_reverse = order && strcmp(order, "reverse") == 0;
    size_t blocks = (size_t)g.x * g.y * g.z;
    for (size_t i = 0; i < blocks; i++) {
        size_t k = g_reverse ? blocks - 1 - i : i;
        blockIdx = uint3{(unsigned)(k % g.x), (unsigned)(k / g.x % g.y), (unsigned)(k / ((size_t)g.x * g.y))};
        std::fill(g_smem.begin(), g_smem.end(), NAN);
        run_block((unsigned)n);
    }
    g_body = NULL;
}

/* ---------------------------------------------------------------- runtime */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    size_t n = (bytes + 255) & ~(size_t)255;
    void *q = aligned_alloc(256, n ? n : 256);
    if (!q)
        return cudaErrorMemoryAllocation;
    memset(q, 0xff, n ? n : 256); /* NaN: cudaMalloc does not zero */
    g_alloc[(uintptr_t)q] = bytes;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    auto it = g_alloc.find((uintptr_t)p);
    if (it == g_alloc.end())
        return cudaErrorInvalidDevicePointer;
    g_alloc.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t)
{
    bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dd && !on_device(dst, bytes)) || (sd && !on_device(src, bytes)) || (!dd && on_device(dst, 1)) ||
        (!sd && on_device(src, 1)))
        return cudaErrorInvalidValue;
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t)
{
    if (!on_device(p, bytes))
        return cudaErrorInvalidValue;
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    static int one;
    *s = (cudaStream_t)&one;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

struct emu_event {
    int recorded;
};

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    if (flags & ~(unsigned)cudaEventDisableTiming)
        return cudaErrorInvalidValue;
    *ev = new emu_event{0};
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t)
{
    if (!ev)
        return cudaErrorInvalidValue;
    ev->recorded = 1;
    return cudaSuccess;
}

/* the work before the record has run (every call is synchronous here) */
cudaError_t cudaEventSynchronize(cudaEvent_t ev) { return ev ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
        return "invalid device pointer";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    default:
        return "unspecified launch failure";
    }
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int)
{
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU (tests/cuda_emu)");
    prop->major = 9;
    prop->minor = 0;
    prop->totalGlobalMem = (size_t)1 << 34;
    return cudaSuccess;
}

/* The shared memory a block may opt into: 227 KiB, as an sm_90 device, or
 * AR_CUDA_EMU_SMEM bytes (a smaller device: kernels that size their tiles
 * by it then run with smaller tiles). */
static int smem_optin_limit(void)
{
    const char *v = getenv("AR_CUDA_EMU_SMEM");
    int n = v ? atoi(v) : 0;
    return n > 0 && n < 232448 ? n : 232448;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int)
{
    *value = attr == cudaDevAttrMultiProcessorCount                ? 1
             : attr == cudaDevAttrClockRate                         ? 1000000
             : attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? smem_optin_limit()
                                                                    : 0;
    return cudaSuccess;
}

cudaError_t emu_func_set_attribute(const void *fn, cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 232448)
        return cudaErrorInvalidValue; /* sm_90: at most 227 KiB per block */
    g_smem_optin[fn] = value;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- cub */

cudaError_t emu_sort_pairs(void *tmp, size_t &tmp_bytes, const int32_t *keys_in, int32_t *keys_out,
                           const int32_t *vals_in, int32_t *vals_out, int n, int begin_bit, int end_bit)
{
    if (!tmp) {
        tmp_bytes = 256;
        return cudaSuccess;
    }
    if (n < 0 || begin_bit != 0 || end_bit != 32 || tmp_bytes < 256 || !on_device(tmp, tmp_bytes))
        return cudaErrorInvalidValue;
    size_t b = (size_t)n * sizeof(int32_t);
    if (!on_device(keys_in, b) || !on_device(keys_out, b) || !on_device(vals_in, b) || !on_device(vals_out, b))
        return cudaErrorInvalidValue;
    std::vector<int> ord(n);
    std::iota(ord.begin(), ord.end(), 0);
    std::stable_sort(ord.begin(), ord.end(), [&](int a, int c) { return keys_in[a] < keys_in[c]; });
    std::vector<int32_t> k(n), v(n);
    for (int i = 0; i < n; i++)
        k[i] = keys_in[ord[i]], v[i] = vals_in[ord[i]];
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), vals_out);
    return cudaSuccess;
}

/* ---------------------------------------------------------------- cuBLAS */

struct emu_cublas {
    int math;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new emu_cublas{CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) { return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED; }

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

namespace {

/* x rounded to bf16 (to nearest, ties to even), as a float */
float to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) /* inf, nan */
        return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* floats of a column-major rows x cols operand with leading dimension ld */
size_t span(int rows, int cols, int ld) { return rows && cols ? (size_t)ld * (cols - 1) + rows : 0; }

/* One product, C = alpha op(A) op(B) + beta C, column-major, checked as
 * cuBLAS checks it and on the operands' memory. */
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void *alpha, const void *A, cudaDataType At, int lda, long long sA, const void *B,
                    cudaDataType Bt, int ldb, long long sB, const void *beta, void *C, cudaDataType Ct, int ldc,
                    long long sC, int batch, cublasComputeType_t ct)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
        k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (lda < std::max(1, ar) || ldb < std::max(1, br) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* fp32 operands and C, or bf16 ones (A and B both) with fp32 or bf16 C
     * and an fp32 compute type: the combinations the backend uses (bf16 C:
     * the fp32 result rounded to nearest even, as cuBLAS's epilogue) */
    bool in16 = At == CUDA_R_16BF && Bt == CUDA_R_16BF, c16 = Ct == CUDA_R_16BF;
    if ((!in16 && (At != CUDA_R_32F || Bt != CUDA_R_32F)) || (Ct != CUDA_R_32F && !c16) || (c16 && !in16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    bool bf16 = ct == CUBLAS_COMPUTE_32F_FAST_16BF;
    if ((ct != CUBLAS_COMPUTE_32F && !bf16) || (in16 && bf16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ct == CUBLAS_COMPUTE_32F && h->math != CUBLAS_DEFAULT_MATH)
        fail("cublas: math mode %d with CUBLAS_COMPUTE_32F would allow TF32", h->math);
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t na = span(ar, ac, lda), nb = span(br, bc, ldb), nc = span(m, n, ldc);
    std::vector<float> ra, rb, rc;
    size_t esz = in16 ? 2 : 4, csz = c16 ? 2 : 4;
    for (int i = 0; i < batch; i++) {
        const void *a0 = (const char *)A + i * sA * esz, *b0 = (const char *)B + i * sB * esz;
        const float *a = (const float *)a0, *b = (const float *)b0;
        void *c0 = (char *)C + i * sC * csz;
        float *c = (float *)c0;
        if ((k && ((na && !on_device(a0, na * esz)) || (nb && !on_device(b0, nb * esz)))) ||
            (nc && !on_device(c0, nc * csz)))
            fail("cublas: gemm %c%c m %d n %d k %d lda %d ldb %d ldc %d, batch %d of %d: an operand leaves "
                 "its device buffer",
                 ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, lda, ldb, ldc, i, batch);
        if (!m || !n)
            continue;
        if (c16) { /* the product into fp32, rounded into C at the end */
            const __nv_bfloat16 *h = (const __nv_bfloat16 *)c0;
            rc.resize(nc);
            for (size_t j = 0; j < nc; j++)
                rc[j] = __bfloat162float(h[j]);
            c = rc.data();
        }
        if (in16 && k) { /* bf16 operands: exact in float */
            const __nv_bfloat16 *ha = (const __nv_bfloat16 *)a0, *hb = (const __nv_bfloat16 *)b0;
            ra.resize(na), rb.resize(nb);
            for (size_t j = 0; j < na; j++)
                ra[j] = __bfloat162float(ha[j]);
            for (size_t j = 0; j < nb; j++)
                rb[j] = __bfloat162float(hb[j]);
            a = ra.data();
            b = rb.data();
        } else if (bf16 && k) {
            ra.assign(a, a + na);
            rb.assign(b, b + nb);
            for (float &x : ra)
                x = to_bf16(x);
            for (float &x : rb)
                x = to_bf16(x);
            a = ra.data();
            b = rb.data();
        }
        if (k == 0) {
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++)
                    c[(size_t)j * ldc + r] = be == 0.0f ? 0.0f : be * c[(size_t)j * ldc + r];
        } else {
            cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, al,
                        a, lda, b, ldb, be, c, ldc);
        }
        if (c16) { /* only C's m x n entries: the rest of its rows are not C's */
            __nv_bfloat16 *h = (__nv_bfloat16 *)c0;
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++)
                    h[(size_t)j * ldc + r] = __float2bfloat16(rc[(size_t)j * ldc + r]);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType At, int lda, const void *B,
                            cudaDataType Bt, int ldb, const void *beta, void *C, cudaDataType Ct, int ldc,
                            cublasComputeType_t ct, cublasGemmAlgo_t)
{
    return gemm(h, ta, tb, m, n, k, alpha, A, At, lda, 0, B, Bt, ldb, 0, beta, C, Ct, ldc, 0, 1, ct);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType At,
                                          int lda, long long sA, const void *B, cudaDataType Bt, int ldb,
                                          long long sB, const void *beta, void *C, cudaDataType Ct, int ldc,
                                          long long sC, int batch, cublasComputeType_t ct, cublasGemmAlgo_t)
{
    return gemm(h, ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB, beta, C, Ct, ldc, sC, batch, ct);
}
