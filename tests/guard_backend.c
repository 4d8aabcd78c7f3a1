/* The guarded CPU backend of guard_backend.h. */
#include "guard_backend.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/atomic.h"

/* One allocation: `map` pages of which the last is the fence; the caller's
 * `bytes` end where the fence begins (rounded up to 64, so `user` keeps the
 * 64-byte alignment of be->alloc). */
typedef struct {
    char *map;
    size_t map_len;  /* data pages + one fence page */
    char *user;
    size_t bytes;    /* as asked */
} region;

static region *regs;
static int nregs, capregs;
static int depth;    /* > 0 while one of our entries runs: its pages open */
static long calls;
static long reads;   /* entries that bring device values to the host: waits on a GPU */
static size_t page;

/* The allocations the running entry's arguments point into: only these
 * are opened (so an op that strays into a buffer it was not given faults
 * too, and a step costs a few mprotect calls per op, not one per buffer). */
#define MAX_OPEN 4096
static int open_set[MAX_OPEN];
static int nopen;

static const ar_backend *cpu(void) { return ar_backend_cpu(); }

static size_t data_len(const region *r) { return r->map_len - page; }

static void set_prot(const region *r, int prot)
{
    if (mprotect(r->map, data_len(r), prot) != 0) {
        perror("guard backend: mprotect");
        abort();
    }
}

static void set_open(int prot)
{
    for (int i = 0; i < nopen; i++)
        set_prot(&regs[open_set[i]], prot);
}

/* open the argument's allocations for the duration of one entry */
static void enter(void)
{
    depth++;
    set_open(PROT_READ | PROT_WRITE);
}

static void leave(void)
{
    depth--;
    set_open(PROT_NONE);
    nopen = 0;
}

static void mark_open(const region *r)
{
    int i = (int)(r - regs);
    for (int j = 0; j < nopen; j++)
        if (open_set[j] == i)
            return;
    if (nopen == MAX_OPEN)
        abort();
    open_set[nopen++] = i;
}

static const region *find(const void *p)
{
    const char *c = p;
    for (int i = 0; i < nregs; i++)
        if (c >= regs[i].map && c < regs[i].map + regs[i].map_len)
            return &regs[i];
    return NULL;
}

/* ---- the SIGSEGV report ---- */

static void say(const char *s) { (void)ar_write_all(STDERR_FILENO, s, strlen(s)); }

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const region *r = find(si->si_addr);
    char msg[256];
    if (r && depth == 0)
        snprintf(msg, sizeof msg,
                 "guard backend: host code touched device memory at %p (byte %ld of an allocation of %zu bytes) "
                 "outside any backend op; backtrace:\n",
                 si->si_addr, (long)((char *)si->si_addr - r->user), r->bytes);
    else if (r)
        snprintf(msg, sizeof msg,
                 "guard backend: an op touched %p (byte %ld of an allocation of %zu bytes), past a buffer or in one "
                 "that is not among its arguments\n",
                 si->si_addr, (long)((char *)si->si_addr - r->user), r->bytes);
    else
        snprintf(msg, sizeof msg, "guard backend: SIGSEGV at %p, not in device memory\n", si->si_addr);
    say(msg);
    void *bt[32];
    int n = backtrace(bt, 32);
    backtrace_symbols_fd(bt, n, STDERR_FILENO);
    say("(addr2line -f -e THE_TEST_EXECUTABLE 0x... with the +0x... offsets above names the functions)\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handler(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
}

/* ---- argument checks ---- */

__attribute__((noreturn)) static void bad(const char *op, const char *arg, const char *why, const void *p,
                                          size_t bytes)
{
    fprintf(stderr, "guard backend: %s: '%s' (%p, %zu bytes) %s\n", op, arg, p, bytes, why);
    abort();
}

/* p .. p+bytes lies in one live allocation (NULL allowed where nullable) */
static void dev(const char *op, const char *arg, const void *p, size_t bytes, int nullable)
{
    if (!p) {
        if (!nullable)
            bad(op, arg, "is NULL", p, bytes);
        return;
    }
    const region *r = find(p);
    if (!r)
        bad(op, arg, "is not device memory of this backend", p, bytes);
    const char *c = p;
    if (c < r->user || (size_t)(c - r->user) + bytes > r->bytes)
        bad(op, arg, "runs outside its allocation", p, bytes);
    mark_open(r);
}

static size_t F(size_t n) { return n * sizeof(float); }

/* a host array of n device pointers, each to `floats` floats */
static void dev_list(const char *op, const char *arg, const float *const *list, int n, size_t floats,
                     int nullable_entries)
{
    if (n > 0 && !list)
        bad(op, arg, "is NULL", list, 0);
    if (n > 0 && find(list))
        bad(op, arg, "is a pointer array in device memory (it must be a host array)", list, 0);
    for (int i = 0; i < n; i++)
        dev(op, arg, list[i], F(floats), nullable_entries);
}

static void host(const char *op, const char *arg, const void *p)
{
    if (p && find(p))
        bad(op, arg, "is device memory where the op takes host memory", p, 0);
}

/* ---- memory ---- */

static void *g_alloc(size_t bytes)
{
    install_handler();
    if (!page)
        page = (size_t)sysconf(_SC_PAGESIZE);
    size_t cap = (bytes + 63) & ~(size_t)63;
    if (cap == 0)
        cap = 64;
    size_t data = (cap + page - 1) / page * page;
    char *map = mmap(NULL, data + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("guard backend: mmap");
        abort();
    }
    if (nregs == capregs) {
        capregs = capregs ? 2 * capregs : 64;
        regs = realloc(regs, (size_t)capregs * sizeof *regs);
        if (!regs)
            abort();
    }
    region *r = &regs[nregs++];
    *r = (region){map, data + page, map + data - cap, bytes};
    /* anonymous pages are zero, as be->alloc promises */
    return r->user;
}

static void g_free(void *p)
{
    if (!p)
        return;
    const region *r = find(p);
    if (!r || (char *)p != r->user)
        bad("free", "p", "is not an allocation of this backend", p, 0);
    munmap(r->map, r->map_len);
    int i = (int)(r - regs);
    regs[i] = regs[--nregs];
}

static void g_upload(void *dst, const void *src, size_t bytes)
{
    dev("upload", "dst", dst, bytes, bytes == 0);
    host("upload", "src", src);
    calls++;
    enter();
    cpu()->upload(dst, src, bytes);
    leave();
}

static void g_download(void *dst, const void *src, size_t bytes)
{
    dev("download", "src", src, bytes, bytes == 0);
    host("download", "dst", dst);
    calls++;
    reads++;
    enter();
    cpu()->download(dst, src, bytes);
    leave();
}

static void g_zero(void *p, size_t bytes)
{
    dev("zero", "p", p, bytes, bytes == 0);
    calls++;
    enter();
    cpu()->zero(p, bytes);
    leave();
}

static void g_sync(void) { cpu()->sync(); }
static void g_set_threads(int n) { cpu()->set_threads(n); }
static int g_set_bf16(int on) { return cpu()->set_bf16(on); }
static const char *g_device_name(void) { return "guard"; }
static double g_peak(void) { return 0; }
static size_t g_mem_peak(void) { return cpu()->mem_peak(); }
static size_t g_head_floats(void) { return cpu()->head_floats(); }
static size_t g_attention_state(int B, int T, int nh) { return cpu()->attention_state(B, T, nh); }

/* the parameters' range: device memory, all of it allocated */
static void g_set_weight_copy(const float *p, size_t n)
{
    dev("set_weight_copy", "p", p, n * sizeof *p, n == 0);
    cpu()->set_weight_copy(p, n);
}

/* a host array of len elements */
static void host_array(const char *op, const char *arg, const void *v, int len)
{
    if (len > 0 && !v)
        bad(op, arg, "is NULL", v, 0);
    host(op, arg, v);
}

/* ---- ops: check, open, run the CPU op, close ----
 * g_<op> checks the arguments as lib/ops.def's "uses" words say. */

#define DEV(p, n) dev(op, #p, p, (size_t)(n) * sizeof *(p), 0);
#define DEV_OPT(p, n) dev(op, #p, p, (size_t)(n) * sizeof *(p), 1);
#define DEV_IF(c, p, n) dev(op, #p, p, (size_t)(n) * sizeof *(p), !(c));
#define LIST(l, len, n) dev_list(op, #l, (const float *const *)(l), len, n, 0);
#define LIST_OPT(l, len, n) dev_list(op, #l, (const float *const *)(l), len, n, 1);
#define ATT_STATE(p, B, T, nh) dev(op, #p, p, cpu()->attention_state(B, T, nh) * sizeof *(p), 0);
#define HOST(p) host(op, #p, p);
#define HOST_ARRAY(v, len) host_array(op, #v, v, len);
#define EACH(i, len, words)                                                                        \
    for (int i = 0; i < (len); i++) {                                                              \
        words                                                                                      \
    }
#define WHEN(c, words)                                                                             \
    if (c) {                                                                                       \
        words                                                                                      \
    }
#define FLOPS(x)

#define CALL_void(call)                                                                            \
    calls++;                                                                                       \
    enter();                                                                                       \
    call;                                                                                          \
    leave();
#define CALL_double(call)                                                                          \
    calls++;                                                                                       \
    reads++;                                                                                       \
    enter();                                                                                       \
    double r = call;                                                                               \
    leave();                                                                                       \
    return r;
#define AR_OP(ret, name, params, args, uses)                                                       \
    static ret g_##name params                                                                     \
    {                                                                                              \
        const char *op = #name;                                                                    \
        uses CALL_##ret(cpu()->name args)                                                          \
    }
#include "lib/ops.def"
#undef AR_OP

static const ar_backend guard = {
    .name = "guard",
    .alloc = g_alloc,
    .free = g_free,
    .upload = g_upload,
    .download = g_download,
    .zero = g_zero,
    .sync = g_sync,
    .set_threads = g_set_threads,
    .set_bf16 = g_set_bf16,
    .device_name = g_device_name,
    .peak_bf16_flops = g_peak,
    .mem_peak = g_mem_peak,
    .head_floats = g_head_floats,
    .attention_state = g_attention_state,
    .set_weight_copy = g_set_weight_copy,
#define AR_OP(ret, name, params, args, uses) .name = g_##name,
#include "lib/ops.def"
#undef AR_OP
};

const ar_backend *guard_backend(void) { return &guard; }
long guard_backend_live(void) { return nregs; }
long guard_backend_reads(void) { return reads; }
long guard_backend_calls(void) { return calls; }
