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

/* ---- ops: check, open, run the CPU op, close ---- */

#define RUN(call)     \
    do {              \
        calls++;      \
        enter();      \
        call;         \
        leave();      \
    } while (0)

static void g_copy(float *y, const float *x, size_t n)
{
    dev("copy", "y", y, F(n), 0);
    dev("copy", "x", x, F(n), 0);
    RUN(cpu()->copy(y, x, n));
}

static void g_add(float *y, const float *x, size_t n)
{
    dev("add", "y", y, F(n), 0);
    dev("add", "x", x, F(n), 0);
    RUN(cpu()->add(y, x, n));
}

static void g_scale(float *y, float a, size_t n)
{
    dev("scale", "y", y, F(n), 0);
    RUN(cpu()->scale(y, a, n));
}

static double g_sumsq(const float *x, size_t n)
{
    dev("sumsq", "x", x, F(n), 0);
    double s;
    RUN(s = cpu()->sumsq(x, n));
    return s;
}

static void g_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d)
{
    dev("embedding_fwd", "out", out, F((size_t)N * d), 0);
    dev("embedding_fwd", "tok", tok, (size_t)N * sizeof(int32_t), 0);
    dev("embedding_fwd", "wte", wte, F(d), 0); /* V rows; V is not an argument */
    RUN(cpu()->embedding_fwd(out, tok, wte, N, d));
}

static void g_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d)
{
    dev("embedding_bwd", "dwte", dwte, F(d), 0);
    dev("embedding_bwd", "dout", dout, F((size_t)N * d), 0);
    dev("embedding_bwd", "tok", tok, (size_t)N * sizeof(int32_t), 0);
    RUN(cpu()->embedding_bwd(dwte, dout, tok, N, d));
}

static void g_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d)
{
    size_t nd = (size_t)N * d;
    dev("rmsnorm_fwd", "out", out, F(nd), 0);
    dev("rmsnorm_fwd", "rstd", rstd, F(N), 0);
    dev("rmsnorm_fwd", "x", x, F(nd), 0);
    dev("rmsnorm_fwd", "g", g, F(d), 0);
    RUN(cpu()->rmsnorm_fwd(out, rstd, x, g, N, d));
}

static void g_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x, const float *g,
                          const float *rstd, int overwrite, int N, int d)
{
    size_t nd = (size_t)N * d;
    dev("rmsnorm_bwd", "dx", dx, F(nd), 0);
    dev("rmsnorm_bwd", "dg", dg, F(d), 0);
    dev("rmsnorm_bwd", "dout", dout, F(nd), 0);
    dev("rmsnorm_bwd", "x", x, F(nd), 0);
    dev("rmsnorm_bwd", "g", g, F(d), 0);
    dev("rmsnorm_bwd", "rstd", rstd, F(N), 0);
    RUN(cpu()->rmsnorm_bwd(dx, dg, dout, x, g, rstd, overwrite, N, d));
}

static void g_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    dev("matmul_fwd", "out", out, F((size_t)N * outd), 0);
    dev("matmul_fwd", "x", x, F((size_t)N * in), 0);
    dev("matmul_fwd", "W", W, F((size_t)outd * in), 0);
    RUN(cpu()->matmul_fwd(out, x, W, N, in, outd));
}

static void g_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W, int N, int in,
                         int outd)
{
    dev("matmul_bwd", "dx", dx, F((size_t)N * in), 1);
    dev("matmul_bwd", "dW", dW, F((size_t)outd * in), 0);
    dev("matmul_bwd", "dout", dout, F((size_t)N * outd), 0);
    dev("matmul_bwd", "x", x, F((size_t)N * in), 0);
    dev("matmul_bwd", "W", W, F((size_t)outd * in), 0);
    RUN(cpu()->matmul_bwd(dx, dW, dout, x, W, N, in, outd));
}

static void g_rope_fwd(float *x, int B, int T, int nh, int hd)
{
    dev("rope_fwd", "x", x, F((size_t)B * T * nh * hd), 0);
    RUN(cpu()->rope_fwd(x, B, T, nh, hd));
}

static void g_rope_bwd(float *dx, int B, int T, int nh, int hd)
{
    dev("rope_bwd", "dx", dx, F((size_t)B * T * nh * hd), 0);
    RUN(cpu()->rope_bwd(dx, B, T, nh, hd));
}

static void g_attention_fwd(float *y, float *att, const float *q, const float *k, const float *v, int B, int T,
                            int nh, int hd)
{
    size_t n = (size_t)B * T * nh * hd, na = (size_t)B * nh * T * T;
    dev("attention_fwd", "y", y, F(n), 0);
    dev("attention_fwd", "att", att, F(na), 0);
    dev("attention_fwd", "q", q, F(n), 0);
    dev("attention_fwd", "k", k, F(n), 0);
    dev("attention_fwd", "v", v, F(n), 0);
    RUN(cpu()->attention_fwd(y, att, q, k, v, B, T, nh, hd));
}

static void g_attention_bwd(float *dq, float *dk, float *dv, float *datt, const float *dy, const float *att,
                            const float *q, const float *k, const float *v, int B, int T, int nh, int hd)
{
    size_t n = (size_t)B * T * nh * hd, na = (size_t)B * nh * T * T;
    const char *op = "attention_bwd";
    dev(op, "dq", dq, F(n), 0);
    dev(op, "dk", dk, F(n), 0);
    dev(op, "dv", dv, F(n), 0);
    dev(op, "datt", datt, F(na), 0);
    dev(op, "dy", dy, F(n), 0);
    dev(op, "att", att, F(na), 0);
    dev(op, "q", q, F(n), 0);
    dev(op, "k", k, F(n), 0);
    dev(op, "v", v, F(n), 0);
    RUN(cpu()->attention_bwd(dq, dk, dv, datt, dy, att, q, k, v, B, T, nh, hd));
}

/* ---- decoding against a key/value cache ---- */

static void g_rope_fwd_at(float *x, int n, int pos0, int nh, int hd)
{
    dev("rope_fwd_at", "x", x, F((size_t)n * nh * hd), 0);
    RUN(cpu()->rope_fwd_at(x, n, pos0, nh, hd));
}

/* k, v: the cache's first Tk = pos0 + n rows, the rows attended over */
static void g_attention_decode(float *y, float *att, const float *q, const float *k, const float *v, int n,
                               int pos0, int nh, int hd)
{
    const char *op = "attention_decode";
    size_t C = (size_t)nh * hd, Tk = (size_t)pos0 + (size_t)n;
    dev(op, "y", y, F((size_t)n * C), 0);
    dev(op, "att", att, F((size_t)nh * n * Tk), 0);
    dev(op, "q", q, F((size_t)n * C), 0);
    dev(op, "k", k, F(Tk * C), 0);
    dev(op, "v", v, F(Tk * C), 0);
    RUN(cpu()->attention_decode(y, att, q, k, v, n, pos0, nh, hd));
}

static void g_matvec_fwd(float *out, const float *x, const float *W, int in, int outd)
{
    dev("matvec_fwd", "out", out, F(outd), 0);
    dev("matvec_fwd", "x", x, F(in), 0);
    dev("matvec_fwd", "W", W, F((size_t)outd * in), 0);
    RUN(cpu()->matvec_fwd(out, x, W, in, outd));
}

static void g_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    dev("swiglu_fwd", "out", out, F(n), 0);
    dev("swiglu_fwd", "gate", gate, F(n), 0);
    dev("swiglu_fwd", "up", up, F(n), 0);
    RUN(cpu()->swiglu_fwd(out, gate, up, n));
}

static void g_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         size_t n)
{
    dev("swiglu_bwd", "dgate", dgate, F(n), 0);
    dev("swiglu_bwd", "dup", dup, F(n), 0);
    dev("swiglu_bwd", "dout", dout, F(n), 0);
    dev("swiglu_bwd", "gate", gate, F(n), 0);
    dev("swiglu_bwd", "up", up, F(n), 0);
    RUN(cpu()->swiglu_bwd(dgate, dup, dout, gate, up, n));
}

/* ---- depth attention ---- */

static void g_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n, const float *w,
                             const float *g, int N, int d)
{
    const char *op = "depth_attn_fwd";
    size_t nd = (size_t)N * d;
    dev(op, "h", h, F(nd), 0);
    dev(op, "alpha", alpha, F((size_t)N * n), 0);
    dev(op, "rstd", rstd, F((size_t)N * n), 0);
    dev_list(op, "src", src, n, nd, 0);
    dev(op, "w", w, F(d), 0);
    dev(op, "g", g, F(d), 0);
    RUN(cpu()->depth_attn_fwd(h, alpha, rstd, src, n, w, g, N, d));
}

static void g_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh, const float *alpha,
                             const float *rstd, const float *const *src, int n, const float *w, const float *g,
                             int N, int d)
{
    const char *op = "depth_attn_bwd";
    size_t nd = (size_t)N * d;
    dev_list(op, "dsrc", (const float *const *)dsrc, n, nd, 0);
    dev(op, "dw", dw, F(d), 0);
    dev(op, "dg", dg, F(d), 0);
    dev(op, "dh", dh, F(nd), 0);
    dev(op, "alpha", alpha, F((size_t)N * n), 0);
    dev(op, "rstd", rstd, F((size_t)N * n), 0);
    dev_list(op, "src", src, n, nd, 0);
    dev(op, "w", w, F(d), 0);
    dev(op, "g", g, F(d), 0);
    RUN(cpu()->depth_attn_bwd(dsrc, dw, dg, dh, alpha, rstd, src, n, w, g, N, d));
}

/* a host array of C ints */
static void host_ints(const char *op, const char *arg, const int *v, int C)
{
    if (C > 0 && !v)
        bad(op, arg, "is NULL", v, 0);
    host(op, arg, v);
}

static void g_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha, const int *n,
                              float *const *rs, const float *const *src, int k, const float *const *w,
                              const float *const *g, int C, const float *ng, float *xn, float *nrstd, int sigmoid,
                              int N, int d)
{
    const char *op = "depth_fwd_inter";
    size_t nd = (size_t)N * d;
    host_ints(op, "n", n, C);
    /* mixer 0's o is not written when xn is given; a NULL o[c] never is */
    if (C > 0) {
        host(op, "o", o);
        for (int c = xn ? 1 : 0; c < C; c++)
            dev(op, "o", o[c], F(nd), 1);
    }
    dev_list(op, "lse", (const float *const *)lse, C, N, 0);
    host(op, "alpha", alpha);
    for (int c = 0; c < C; c++)
        dev(op, "alpha", alpha[c], F((size_t)N * n[c]), 0);
    dev_list(op, "rs", (const float *const *)rs, k, N, 0);
    dev_list(op, "src", src, k, nd, 0);
    dev_list(op, "w", w, C, d, 0);
    if (g) /* NULL: no key norm */
        dev_list(op, "g", g, C, d, 0);
    dev(op, "xn", xn, F(nd), 1);
    dev(op, "ng", ng, F(d), !xn);
    dev(op, "nrstd", nrstd, F(N), !xn);
    RUN(cpu()->depth_fwd_inter(o, lse, alpha, n, rs, src, k, w, g, C, ng, xn, nrstd, sigmoid, N, d));
}

static void g_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k, float *const *rsi,
                              const float *const *intra, const float *w, const float *g, const float *ng, float *xn,
                              float *nrstd, int sigmoid, int N, int d)
{
    const char *op = "depth_fwd_merge";
    size_t nd = (size_t)N * d;
    dev(op, "h", h, F(nd), 0);
    dev(op, "lse", lse, F(N), 0);
    dev(op, "alpha", alpha, F((size_t)N * n), 0);
    dev_list(op, "rsi", (const float *const *)rsi, n - k, N, 0);
    dev_list(op, "intra", intra, n - k, nd, 0);
    dev(op, "w", w, F(d), 0);
    dev(op, "g", g, F(d), 1); /* NULL: no key norm */
    dev(op, "xn", xn, F(nd), 1);
    dev(op, "ng", ng, F(d), !xn);
    dev(op, "nrstd", nrstd, F(N), !xn);
    RUN(cpu()->depth_fwd_merge(h, lse, alpha, n, k, rsi, intra, w, g, ng, xn, nrstd, sigmoid, N, d));
}

static void g_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot, float *dh,
                              const float *h, const float *dxn, const float *xn, const float *ng,
                              float *dng, const float *nrstd, const float *alpha, const float *lse, int n, int k,
                              const float *const *rsi, const float *const *src, const float *w, const float *g,
                              int sigmoid, int N, int d)
{
    const char *op = "depth_bwd_intra";
    size_t nd = (size_t)N * d;
    dev_list(op, "dintra", (const float *const *)dintra, n - k, nd, 0);
    dev(op, "dw", dw, F(d), 0);
    dev(op, "dg", dg, F(d), !g); /* no key norm: no gain, no gradient */
    dev(op, "cdot", cdot, F(N), 0);
    dev(op, "dh", dh, F(nd), 0);
    dev(op, "h", h, F(nd), !!dxn);
    dev(op, "dxn", dxn, F(nd), 1);
    dev(op, "xn", xn, F(nd), !dxn);
    dev(op, "ng", ng, F(d), !dxn);
    dev(op, "dng", dng, F(d), !dxn);
    dev(op, "nrstd", nrstd, F(N), !dxn);
    dev(op, "alpha", alpha, F((size_t)N * n), 0);
    dev(op, "lse", lse, F(N), 0);
    dev_list(op, "rsi", rsi, n - k, N, 0);
    host(op, "src", src);
    dev_list(op, "src", src, n, nd, 0);
    dev(op, "w", w, F(d), 0);
    dev(op, "g", g, F(d), 1);
    RUN(cpu()->depth_bwd_intra(dintra, dw, dg, cdot, dh, h, dxn, xn, ng, dng, nrstd, alpha, lse, n, k,
                               rsi, src, w, g, sigmoid, N, d));
}

static void g_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg, const float *const *dh,
                              const float *const *cdot, const float *const *alpha, const float *const *lse,
                              const int *n, const float *const *rs, const float *const *src, int k,
                              const float *const *w, const float *const *g, int C, int overwrite, int sigmoid,
                              int N, int d)
{
    const char *op = "depth_bwd_inter";
    size_t nd = (size_t)N * d;
    host_ints(op, "n", n, C);
    dev_list(op, "dsrc", (const float *const *)dsrc, k, nd, 0);
    dev_list(op, "dw", (const float *const *)dw, C, d, 0);
    if (g) /* NULL with dg: no key norm */
        dev_list(op, "dg", (const float *const *)dg, C, d, 0);
    dev_list(op, "dh", dh, C, nd, 0);
    dev_list(op, "cdot", cdot, C, N, 0);
    host(op, "alpha", alpha);
    for (int c = 0; c < C; c++)
        dev(op, "alpha", alpha[c], F((size_t)N * n[c]), 0);
    dev_list(op, "lse", lse, C, N, 0);
    dev_list(op, "rs", rs, k, N, 0);
    dev_list(op, "src", src, k, nd, 0);
    dev_list(op, "w", w, C, d, 0);
    if (g)
        dev_list(op, "g", g, C, d, 0);
    RUN(cpu()->depth_bwd_inter(dsrc, dw, dg, dh, cdot, alpha, lse, n, rs, src, k, w, g, C, overwrite, sigmoid, N, d));
}

/* ---- one-phase depth mixing, weighted sums ---- */

static void g_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n, const float *w,
                            int wstride, const float *g, const float *theta, int sigmoid, int H, int N, int d)
{
    const char *op = "depth_mix_fwd";
    size_t nd = (size_t)N * d;
    dev(op, "h", h, F(nd), 0);
    dev(op, "alpha", alpha, F((size_t)N * H * n), 0);
    dev(op, "rstd", rstd, F((size_t)N * n), !g);
    dev_list(op, "src", src, n, nd, 0);
    dev(op, "w", w, F(wstride ? nd : (size_t)d), 1);
    dev(op, "g", g, F(d), 1);
    dev(op, "theta", theta, F(n), 1);
    RUN(cpu()->depth_mix_fwd(h, alpha, rstd, src, n, w, wstride, g, theta, sigmoid, H, N, d));
}

static void g_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                            const float *alpha, const float *rstd, const float *const *src, int n, const float *w,
                            int wstride, const float *g, const float *theta, int sigmoid, int H, int N, int d)
{
    const char *op = "depth_mix_bwd";
    size_t nd = (size_t)N * d;
    dev_list(op, "dsrc", (const float *const *)dsrc, n, nd, 1);
    dev(op, "dw", dw, F(wstride ? nd : (size_t)d), 1);
    dev(op, "dg", dg, F(d), 1);
    dev(op, "dtheta", dtheta, F(n), 1);
    dev(op, "dh", dh, F(nd), 0);
    dev(op, "alpha", alpha, F((size_t)N * H * n), 0);
    dev(op, "rstd", rstd, F((size_t)N * n), !g);
    dev_list(op, "src", src, n, nd, 0);
    dev(op, "w", w, F(wstride ? nd : (size_t)d), 1);
    dev(op, "g", g, F(d), 1);
    dev(op, "theta", theta, F(n), 1);
    RUN(cpu()->depth_mix_bwd(dsrc, dw, dg, dtheta, dh, alpha, rstd, src, n, w, wstride, g, theta, sigmoid, H, N,
                             d));
}

static void g_depth_mix_cdot(float *cdot, const float *dh, const float *h, int H, int N, int d)
{
    const char *op = "depth_mix_cdot";
    size_t nd = (size_t)N * d;
    dev(op, "cdot", cdot, F((size_t)N * H), 0);
    dev(op, "dh", dh, F(nd), 0);
    dev(op, "h", h, F(nd), 0);
    RUN(cpu()->depth_mix_cdot(cdot, dh, h, H, N, d));
}

static void g_depth_mix_bwd_chunk(float *const *dsrc, const float *const *src, int s0, int s1, int C,
                                  float *const *dw, float *const *dg, float *const *dtheta, const float *const *dh,
                                  const float *const *cdot, const float *const *alpha, const float *const *rstd,
                                  const int *n, const float *const *w, const float *const *g,
                                  const float *const *theta, int sigmoid, int H, int N, int d)
{
    const char *op = "depth_mix_bwd_chunk";
    size_t nd = (size_t)N * d;
    host_ints(op, "n", n, C);
    dev_list(op, "dsrc", (const float *const *)dsrc, s1, nd, 1);
    dev_list(op, "src", src, s1, nd, 0);
    dev_list(op, "dw", (const float *const *)dw, C, d, 1);
    dev_list(op, "dg", (const float *const *)dg, C, d, 1);
    dev_list(op, "dh", dh, C, nd, 0);
    dev_list(op, "cdot", cdot, C, (size_t)N * H, 0);
    dev_list(op, "w", w, C, d, 1);
    dev_list(op, "g", g, C, d, 1);
    host(op, "alpha", alpha);
    host(op, "rstd", rstd);
    host(op, "theta", theta);
    host(op, "dtheta", dtheta);
    for (int c = 0; c < C; c++) {
        dev(op, "alpha", alpha[c], F((size_t)N * H * n[c]), 0);
        dev(op, "rstd", rstd[c], F((size_t)N * n[c]), !g[c]);
        dev(op, "theta", theta[c], F(n[c]), 1);
        dev(op, "dtheta", dtheta[c], F(n[c]), 1);
    }
    RUN(cpu()->depth_mix_bwd_chunk(dsrc, src, s0, s1, C, dw, dg, dtheta, dh, cdot, alpha, rstd, n, w, g, theta,
                                   sigmoid, H, N, d));
}

static void g_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len)
{
    dev("wsum_fwd", "y", y, F(len), 0);
    dev_list("wsum_fwd", "x", x, n, len, 0);
    dev("wsum_fwd", "c", c, F(n), 0);
    RUN(cpu()->wsum_fwd(y, x, c, n, accumulate, len));
}

static void g_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c, int n,
                       size_t len)
{
    if (dx)
        dev_list("wsum_bwd", "dx", (const float *const *)dx, n, len, 1);
    dev("wsum_bwd", "dc", dc, F(n), 1);
    dev("wsum_bwd", "dy", dy, F(len), 0);
    dev_list("wsum_bwd", "x", x, n, len, 0);
    dev("wsum_bwd", "c", c, F(n), 0);
    RUN(cpu()->wsum_bwd(dx, dc, dy, x, c, n, len));
}

static void g_wmix_fwd(float *const *y, int p, const float *const *x, int n, const float *C, int ldc, size_t len)
{
    dev_list("wmix_fwd", "y", (const float *const *)y, p, len, 0);
    dev_list("wmix_fwd", "x", x, n, len, 0);
    dev("wmix_fwd", "C", C, F((size_t)(p - 1) * ldc + n), 0);
    RUN(cpu()->wmix_fwd(y, p, x, n, C, ldc, len));
}

static void g_wmix_bwd(float *const *dx, int accumulate, float *dC, const float *const *dy, int p,
                       const float *const *x, int n, const float *C, int ldc, size_t len)
{
    if (dx)
        dev_list("wmix_bwd", "dx", (const float *const *)dx, n, len, 0);
    dev("wmix_bwd", "dC", dC, F((size_t)(p - 1) * ldc + n), 1);
    dev_list("wmix_bwd", "dy", dy, p, len, 0);
    dev_list("wmix_bwd", "x", x, n, len, 0);
    dev("wmix_bwd", "C", C, F((size_t)(p - 1) * ldc + n), 0);
    RUN(cpu()->wmix_bwd(dx, accumulate, dC, dy, p, x, n, C, ldc, len));
}

/* ---- loss, optimizer ---- */

static double g_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V)
{
    size_t nv = (size_t)N * V;
    dev("xent_fwd", "losses", losses, F(N), 0);
    dev("xent_fwd", "probs", probs, F(nv), 0);
    dev("xent_fwd", "logits", logits, F(nv), 0);
    dev("xent_fwd", "targets", targets, (size_t)N * sizeof(int32_t), 0);
    double s;
    RUN(s = cpu()->xent_fwd(losses, probs, logits, targets, N, V));
    return s;
}

static void g_xent_bwd(float *dlogits, const float *probs, const int32_t *targets, float scale, int N, int V)
{
    size_t nv = (size_t)N * V;
    dev("xent_bwd", "dlogits", dlogits, F(nv), 0);
    dev("xent_bwd", "probs", probs, F(nv), 0);
    dev("xent_bwd", "targets", targets, (size_t)N * sizeof(int32_t), 0);
    RUN(cpu()->xent_bwd(dlogits, probs, targets, scale, N, V));
}

static void g_adamw(float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr, float b1,
                    float b2, float eps, float wd, long t)
{
    dev("adamw", "p", p, F(n), 0);
    dev("adamw", "g", g, F(n), 0);
    dev("adamw", "m", m, F(n), 0);
    dev("adamw", "v", v, F(n), 0);
    RUN(cpu()->adamw(p, g, m, v, n, gscale, lr, b1, b2, eps, wd, t));
}

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
    .copy = g_copy,
    .add = g_add,
    .scale = g_scale,
    .sumsq = g_sumsq,
    .embedding_fwd = g_embedding_fwd,
    .embedding_bwd = g_embedding_bwd,
    .rmsnorm_fwd = g_rmsnorm_fwd,
    .rmsnorm_bwd = g_rmsnorm_bwd,
    .matmul_fwd = g_matmul_fwd,
    .matmul_bwd = g_matmul_bwd,
    .rope_fwd = g_rope_fwd,
    .rope_bwd = g_rope_bwd,
    .attention_fwd = g_attention_fwd,
    .attention_bwd = g_attention_bwd,
    .rope_fwd_at = g_rope_fwd_at,
    .attention_decode = g_attention_decode,
    .matvec_fwd = g_matvec_fwd,
    .swiglu_fwd = g_swiglu_fwd,
    .swiglu_bwd = g_swiglu_bwd,
    .depth_attn_fwd = g_depth_attn_fwd,
    .depth_attn_bwd = g_depth_attn_bwd,
    .depth_fwd_inter = g_depth_fwd_inter,
    .depth_fwd_merge = g_depth_fwd_merge,
    .depth_bwd_intra = g_depth_bwd_intra,
    .depth_bwd_inter = g_depth_bwd_inter,
    .depth_mix_fwd = g_depth_mix_fwd,
    .depth_mix_bwd = g_depth_mix_bwd,
    .depth_mix_cdot = g_depth_mix_cdot,
    .depth_mix_bwd_chunk = g_depth_mix_bwd_chunk,
    .wsum_fwd = g_wsum_fwd,
    .wsum_bwd = g_wsum_bwd,
    .wmix_fwd = g_wmix_fwd,
    .wmix_bwd = g_wmix_bwd,
    .xent_fwd = g_xent_fwd,
    .xent_bwd = g_xent_bwd,
    .adamw = g_adamw,
};

const ar_backend *guard_backend(void) { return &guard; }
long guard_backend_live(void) { return nregs; }
long guard_backend_calls(void) { return calls; }
