/* Backend comparison tests, in the style of ggml's test-backend-ops: every
 * entry of the op table (lib/backend.h), forward and backward, runs on
 * backend A = the CPU backend (the reference semantics) and on backend B =
 * the CUDA backend with the same random inputs; the results are downloaded
 * and compared elementwise.  One test per op family, several shapes each:
 * small ones that are multiples of nothing (d = 72, N = 37, T = 13, ...) and
 * a medium one (d = 512, N = 1024).
 *
 * Pass criterion, per output tensor a and b (A's and B's):
 *     |a_i - b_i| <= atol + rtol |a_i|,   atol = arms * rms(a)
 * The absolute part is relative to the tensor's RMS: an element that is a
 * sum cancelling to ~0 carries the rounding error of its terms, not of its
 * value.  fp32 ops: rtol = arms = 1e-4 (the two backends sum in different
 * orders: ~sqrt(K) 2^-24 relative for K terms, 1e-6 at K = 1024; a wrong
 * term, index or mask is off by 1e-3 or far more; CPU results from inputs
 * perturbed by 3e-7 relative, a stand-in for a different summation order,
 * stay within a fifth of every bound here).  Looser or tighter bounds say why
 * where they are used.
 *
 * Inputs are never zeros: gradient buffers of "+=" ops start from random
 * values (an op that overwrites fails), outputs of "=" ops start from random
 * garbage (an op that skips an element or accumulates fails).  Ops fed by
 * an earlier op's result (a backward, phase 2 after phase 1) get A's result
 * on both backends, so each op is compared on its own.  A failure names the
 * op, the shapes, the tensor, the worst index and both values.
 *
 * Without a usable CUDA backend (built without CUDA, or no GPU here) every
 * comparison test skips with ar_backend_cuda's reason.
 * AR_TEST_BACKEND_B=cpu makes B the CPU backend too: everything must then
 * pass (exactly), which checks the harness itself without a GPU (meson's
 * backend_ops_cpu_b runs it so);
 * harness_detects_differences checks that a comparison does fail on a
 * perturbed result. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lib/backend.h"
#include "testutil.h"

static const ar_backend *A, *B;
static int b_is_cpu;
static char why[2048];

static void setup(void)
{
    A = ar_backend_cpu();
    A->set_threads(2);
    const char *env = getenv("AR_TEST_BACKEND_B");
    if (env && strcmp(env, "cpu") == 0) {
        B = ar_backend_cpu();
        b_is_cpu = 1;
        return;
    }
    ar_err e = {{0}};
    B = ar_backend_cuda(&e);
    if (!B)
        snprintf(why, sizeof why, "%s", e.msg);
    else
        B->set_threads(2);
}

TestSuite(backend_ops, .init = setup);

#define NEED_B()                                                       \
    do {                                                               \
        if (!B)                                                        \
            cr_skip_test("no CUDA backend to compare with: %s", why); \
    } while (0)

/* ---- tensors held on both backends ----------------------------------- */

/* n elements (float, or int32 for tokens): h the host values uploaded to
 * both, a and b the device buffers. */
typedef struct {
    size_t n;
    float *h;
    float *a, *b;
} tp;

#define MAXT 1024
static tp *reg[MAXT]; /* everything made by a case, freed by release() */
static int nreg;
static uint64_t seed = 4242;
static char ctx[256]; /* "op shapes" of the current case */

static void at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void at(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
}

static tp *from_host(const void *h, size_t n)
{
    cr_assert(nreg < MAXT);
    tp *t = calloc(1, sizeof *t);
    size_t bytes = (n ? n : 1) * sizeof(float);
    t->n = n;
    t->h = malloc(bytes);
    memcpy(t->h, h, n * sizeof(float));
    t->a = A->alloc(bytes);
    t->b = B->alloc(bytes);
    A->upload(t->a, t->h, n * sizeof(float));
    B->upload(t->b, t->h, n * sizeof(float));
    reg[nreg++] = t;
    return t;
}

/* uniform in [lo, hi) */
static tp *rnd(size_t n, float lo, float hi)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    tu_fill_uniform(h, n, lo, hi, seed++);
    tp *t = from_host(h, n);
    free(h);
    return t;
}

/* garbage for an output that the op must overwrite */
static tp *junk(size_t n) { return rnd(n, -7, 7); }

/* n int32 in [0, V) */
static tp *ints(size_t n, int V)
{
    int32_t *h = malloc((n ? n : 1) * sizeof(int32_t));
    float u[1];
    for (size_t i = 0; i < n; i++) {
        tu_fill_uniform(u, 1, 0, (float)V, seed++);
        h[i] = (int32_t)u[0] < V ? (int32_t)u[0] : V - 1;
    }
    tp *t = from_host(h, n);
    free(h);
    return t;
}

/* a copy of t's host values (its initial values, or A's result after take()) */
static tp *dup_tp(const tp *t) { return from_host(t->h, t->n); }

/* Both backends continue from A's result: the next op gets equal inputs. */
static void take(tp *t)
{
    A->download(t->h, t->a, t->n * sizeof(float));
    B->upload(t->b, t->h, t->n * sizeof(float));
}

static void release(void)
{
    for (int i = 0; i < nreg; i++) {
        A->free(reg[i]->a);
        B->free(reg[i]->b);
        free(reg[i]->h), free(reg[i]);
    }
    nreg = 0;
}

/* Lists of tensors (depth-attention sources): host arrays of device
 * pointers, one per backend. */
#define MAXL 32
typedef struct {
    float *p[2][MAXL];
} tl;

static tl list(tp *const *t, int n)
{
    tl l;
    memset(&l, 0, sizeof l);
    for (int s = 0; s < n; s++) {
        l.p[0][s] = t[s] ? t[s]->a : NULL;
        l.p[1][s] = t[s] ? t[s]->b : NULL;
    }
    return l;
}

/* BOTH stmt: runs stmt with be = A, then be = B; D(t) is t's buffer on be,
 * DL(l) the list on be, CL(l) the same as a const list. */
#define BOTH                                         \
    for (int side_ = 0; side_ < 2; side_++)          \
        for (const ar_backend *be = side_ ? B : A, *once_ = be; once_; once_ = NULL)
#define D(t) (side_ ? (t)->b : (t)->a)
#define DI(t) ((const int32_t *)D(t))
#define DL(l) ((l).p[side_])
#define CL(l) ((const float *const *)(l).p[side_])

/* ---- comparison ------------------------------------------------------ */

typedef struct {
    double rtol, arms;
} tol;

static const tol FP32 = {1e-4, 1e-4};

/* Compares cols columns from col0 of rows rows (row stride ld) of A's
 * result ra and B's rb.  Returns the worst |a-b| / bound (> 1: fail; a
 * non-finite value on either side: INFINITY) and describes the worst
 * element in msg. */
static double compare(const char *what, const float *ra, const float *rb, size_t rows, size_t ld,
                      size_t col0, size_t cols, tol tl_, char *msg, size_t cap)
{
    double ss = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = col0; c < col0 + cols; c++) {
            double v = ra[r * ld + c];
            ss += v * v;
        }
    size_t cnt = rows * cols;
    double rms = cnt ? sqrt(ss / cnt) : 0, atol = tl_.arms * rms;
    double worst = -1;
    size_t wi = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = col0; c < col0 + cols; c++) {
            size_t i = r * ld + c;
            double a = ra[i], b = rb[i], q;
            if (!isfinite(a) || !isfinite(b))
                q = INFINITY;
            else {
                double bound = atol + tl_.rtol * fabs(a);
                q = bound > 0 ? fabs(a - b) / bound : (a == b ? 0 : INFINITY);
            }
            if (q > worst)
                worst = q, wi = i;
        }
    if (worst < 0)
        worst = 0;
    double a = ra[wi], b = rb[wi];
    char where[96];
    if (rows == 1)
        snprintf(where, sizeof where, "[%zu] of %zu", wi, cols);
    else
        snprintf(where, sizeof where, "[%zu, %zu] of %zu x %zu", wi / ld, wi % ld, rows, ld);
    snprintf(msg, cap,
             "%s: %s: worst element %s: A %.9g, B %.9g, |diff| %.3g, bound %.3g (rtol %g, "
             "atol %g * rms %.3g)",
             ctx, what, where, a, b, fabs(a - b), tl_.arms * rms + tl_.rtol * fabs(a), tl_.rtol,
             tl_.arms, rms);
    return worst;
}

/* compare() of t's results on A and B, downloaded */
static double measure(const char *what, tp *t, size_t rows, size_t ld, size_t col0, size_t cols,
                      tol tl_, char *msg, size_t cap)
{
    float *ra = malloc(t->n * sizeof(float)), *rb = malloc(t->n * sizeof(float));
    A->download(ra, t->a, t->n * sizeof(float));
    B->download(rb, t->b, t->n * sizeof(float));
    double q = compare(what, ra, rb, rows, ld, col0, cols, tl_, msg, cap);
    free(ra), free(rb);
    return q;
}

/* a part of t: rows x cols from column col0 of rows of ld (alpha's columns) */
static void check_cols(const char *what, tp *t, size_t rows, size_t ld, size_t col0, size_t cols,
                       tol tl_)
{
    char msg[1024];
    double q = measure(what, t, rows, ld, col0, cols, tl_, msg, sizeof msg);
    cr_expect(q <= 1.0, "%s", msg);
}

static void check_tol(const char *what, tp *t, tol tl_) { check_cols(what, t, 1, t->n, 0, t->n, tl_); }
static void check(const char *what, tp *t) { check_tol(what, t, FP32); }

/* A returned scalar (sumsq, the summed loss): relative rtol */
static void check_scalar(const char *what, double a, double b, double rtol)
{
    cr_expect(isfinite(a) && isfinite(b) && fabs(a - b) <= rtol * fabs(a),
              "%s: %s: A %.12g, B %.12g, rel diff %.3g > %g", ctx, what, a, b,
              fabs(a - b) / fmax(fabs(a), 1e-300), rtol);
}

/* ---- the harness itself ---------------------------------------------- */

/* The comparison catches a small relative change of one element, a "+="
 * that overwrites, and a NaN; it passes bitwise-equal results. */
/* A build with CUDA must at least find and load its module
 * (lib/cuda/backend_cuda_load.c): without a GPU the module itself reports
 * that no device is usable; "cannot find" or "cannot load" would mean the
 * build or the loader is broken, and every comparison would skip unseen. */
Test(backend_ops, cuda_module_loads_where_built)
{
    if (!ar_cuda_built())
        cr_skip_test("this build has no CUDA backend");
    ar_err e = {{0}};
    if (ar_backend_cuda(&e))
        return;
    cr_assert(strncmp(e.msg, "cannot find", 11) != 0 && strncmp(e.msg, "cannot load", 11) != 0 &&
                  strstr(e.msg, "not an attnres cuda module") == NULL,
              "the cuda module did not load: %s", e.msg);
    cr_assert(strstr(e.msg, "cuda") || strstr(e.msg, "CUDA"), "unexpected message: %s", e.msg);
}

Test(backend_ops, harness_detects_differences)
{
    const ar_backend *saveB = B;
    B = A; /* runs without CUDA: both sides on the CPU */
    char msg[1024];
    size_t n = 37 * 72;
    tp *x = rnd(n, -1, 1);
    float *b = malloc(n * sizeof(float));
    at("harness n=%zu", n);
    memcpy(b, x->h, n * sizeof(float));
    cr_expect_eq(compare("x", x->h, b, 1, n, 0, n, FP32, msg, sizeof msg), 0.0, "%s", msg);
    b[100] *= 1.0f + 3e-4f;
    cr_expect_gt(compare("x", x->h, b, 1, n, 0, n, FP32, msg, sizeof msg), 1.0,
                 "a 3e-4 relative change went unnoticed");
    cr_expect(strstr(msg, "[100]") != NULL, "the worst element is not the changed one: %s", msg);
    b[100] = x->h[100];
    b[n - 1] = NAN;
    cr_expect_gt(compare("x", x->h, b, 1, n, 0, n, FP32, msg, sizeof msg), 1.0,
                 "a NaN went unnoticed");
    free(b);
    /* dW += dout^T x run as dW = dout^T x */
    int N = 13, in = 72, outd = 37;
    tp *xi = rnd((size_t)N * in, -1, 1), *W = rnd((size_t)outd * in, -1, 1);
    tp *dout = rnd((size_t)N * outd, -1, 1), *dW = rnd((size_t)outd * in, -1, 1);
    A->matmul_bwd(NULL, dW->a, dout->a, xi->a, W->a, N, in, outd);
    A->zero(dW->b, dW->n * sizeof(float));
    A->matmul_bwd(NULL, dW->b, dout->b, xi->b, W->b, N, in, outd);
    cr_expect_gt(measure("dW", dW, 1, dW->n, 0, dW->n, FP32, msg, sizeof msg), 1.0,
                 "an overwriting backward went unnoticed");
    release();
    B = saveB;
}

/* ---- memory and elementwise ------------------------------------------ */

Test(backend_ops, memory)
{
    NEED_B();
    size_t sizes[] = {1, 3, 64, 1000, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t bytes = sizes[k];
        unsigned char *h = malloc(bytes), *back = malloc(bytes);
        void *p = B->alloc(bytes);
        cr_assert(p != NULL, "alloc(%zu) failed", bytes);
        cr_expect((uintptr_t)p % 64 == 0, "alloc(%zu) is not 64-byte aligned", bytes);
        memset(back, 0xab, bytes);
        B->download(back, p, bytes);
        size_t nz = 0;
        for (size_t i = 0; i < bytes; i++)
            nz += back[i] != 0;
        cr_expect_eq(nz, 0, "alloc(%zu): %zu bytes not zero-filled", bytes, nz);
        for (size_t i = 0; i < bytes; i++)
            h[i] = (unsigned char)(i * 131 + 7);
        B->upload(p, h, bytes);
        B->download(back, p, bytes);
        cr_expect(memcmp(h, back, bytes) == 0, "upload + download of %zu bytes changed them", bytes);
        B->zero(p, bytes);
        B->sync();
        B->download(back, p, bytes);
        nz = 0;
        for (size_t i = 0; i < bytes; i++)
            nz += back[i] != 0;
        cr_expect_eq(nz, 0, "zero(%zu): %zu bytes left", bytes, nz);
        B->free(p);
        free(h), free(back);
    }
    const char *name = B->device_name();
    cr_expect(name && *name, "device_name is empty");
    cr_expect(B->peak_bf16_flops() >= 0);
    cr_expect_eq(B->set_bf16(0), 0, "set_bf16(0) must succeed on every backend");
}

Test(backend_ops, elementwise)
{
    NEED_B();
    size_t sizes[] = {1, 37, 72 * 13, 1024 * 512 + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        at("elementwise n=%zu", n);
        tp *x = rnd(n, -2, 2), *y = junk(n), *z = rnd(n, -2, 2), *w = rnd(n, -2, 2);
        BOTH be->copy(D(y), D(x), n);
        check("copy y", y);
        BOTH be->add(D(z), D(x), n);
        check("add y", z);
        BOTH be->scale(D(w), -0.37f, n);
        check("scale y", w);
        double s[2] = {0, 0};
        BOTH s[side_] = be->sumsq(D(x), n);
        /* accumulated in double on both: only the float squares' rounding */
        check_scalar("sumsq", s[0], s[1], 1e-6);
        release();
    }
}

/* ---- embedding ------------------------------------------------------- */

static void embedding_case(int N, int d, int V)
{
    at("embedding N=%d d=%d V=%d", N, d, V);
    tp *tok = ints(N, V), *wte = rnd((size_t)V * d, -1, 1), *out = junk((size_t)N * d);
    BOTH be->embedding_fwd(D(out), DI(tok), D(wte), N, d);
    check("embedding_fwd out", out);
    /* repeated tokens (V < N) accumulate into the same row */
    tp *dout = rnd((size_t)N * d, -1, 1), *dwte = rnd((size_t)V * d, -1, 1);
    BOTH be->embedding_bwd(D(dwte), D(dout), DI(tok), N, d);
    check("embedding_bwd dwte", dwte);
    release();
}

Test(backend_ops, embedding)
{
    NEED_B();
    embedding_case(13, 72, 50);
    embedding_case(37, 20, 7);
    embedding_case(1, 5, 3);
    embedding_case(1024, 512, 256);
}

/* ---- RMSNorm --------------------------------------------------------- */

static void rmsnorm_case(int N, int d)
{
    at("rmsnorm N=%d d=%d", N, d);
    size_t nd = (size_t)N * d;
    tp *x = rnd(nd, -2, 2), *g = rnd(d, 0.5f, 1.5f), *out = junk(nd), *rstd = junk(N);
    BOTH be->rmsnorm_fwd(D(out), D(rstd), D(x), D(g), N, d);
    check("rmsnorm_fwd out", out);
    check("rmsnorm_fwd rstd", rstd);
    take(rstd);
    tp *dout = rnd(nd, -1, 1), *dx = rnd(nd, -1, 1), *dg = rnd(d, -1, 1);
    BOTH be->rmsnorm_bwd(D(dx), D(dg), D(dout), D(x), D(g), D(rstd), 0, N, d);
    check("rmsnorm_bwd dx", dx);
    check("rmsnorm_bwd dg", dg);
    tp *ox = junk(nd);
    BOTH be->rmsnorm_bwd(D(ox), D(dg), D(dout), D(x), D(g), D(rstd), 1, N, d);
    check("rmsnorm_bwd (overwrite) dx", ox);
    check("rmsnorm_bwd (overwrite) dg", dg);
    release();
}

Test(backend_ops, rmsnorm)
{
    NEED_B();
    rmsnorm_case(13, 72);
    rmsnorm_case(37, 20);
    rmsnorm_case(1, 7);
    rmsnorm_case(1024, 512);
}

/* ---- matmul ---------------------------------------------------------- */

/* bf16 products: inputs rounded to 8 significant bits (relative error up
 * to 2^-9 each, so ~1.6e-3 rms per product), accumulated in fp32: the
 * error of an output is ~1.6e-3 of the output's RMS whatever K (K terms
 * with independent errors against a sum of K terms), ~8e-3 at the worst of
 * 5e5 elements (5 sigma).  Bound: 3e-2 of the RMS plus 1e-2 relative;
 * sgemm on bf16-rounded inputs against fp32 reaches 0.3 of it at these
 * shapes.  A wrong product is off by O(1). */
static const tol BF16 = {1e-2, 3e-2};

static void matmul_case(int N, int in, int outd, int bf16)
{
    at("matmul%s N=%d in=%d out=%d", bf16 ? " bf16" : "", N, in, outd);
    tol t = bf16 ? BF16 : FP32;
    tp *x = rnd((size_t)N * in, -1, 1), *W = rnd((size_t)outd * in, -1, 1);
    tp *out = junk((size_t)N * outd);
    BOTH be->matmul_fwd(D(out), D(x), D(W), N, in, outd);
    check_tol("matmul_fwd out", out, t);
    if (bf16 && !b_is_cpu && N * in > 1000) {
        /* the bf16 path is taken: B is off by more than fp32 rounding */
        char msg[1024];
        double q = measure("out", out, 1, out->n, 0, out->n, (tol){0, 1e-5}, msg, sizeof msg);
        cr_expect_gt(q, 1.0, "%s: set_bf16(1) gives fp32 results", ctx);
    }
    tp *dout = rnd((size_t)N * outd, -1, 1), *dx = rnd((size_t)N * in, -1, 1);
    tp *dW = rnd((size_t)outd * in, -1, 1), *dW2 = dup_tp(dW);
    BOTH be->matmul_bwd(D(dx), D(dW), D(dout), D(x), D(W), N, in, outd);
    check_tol("matmul_bwd dx", dx, t);
    check_tol("matmul_bwd dW", dW, t);
    BOTH be->matmul_bwd(NULL, D(dW2), D(dout), D(x), D(W), N, in, outd);
    check_tol("matmul_bwd (dx NULL) dW", dW2, t);
    release();
}

Test(backend_ops, matmul)
{
    NEED_B();
    cr_assert_eq(B->set_bf16(0), 0);
    matmul_case(13, 72, 37, 0);
    matmul_case(37, 20, 96, 0);
    matmul_case(1, 5, 3, 0);
    matmul_case(1024, 512, 512, 0);
    matmul_case(1024, 512, 257, 0);
}

static void attention_case(int Bn, int T, int nh, int hd, tol t);

/* Attention's products run in bf16 too (logits, att v and the backward's):
 * a bf16 emulation of the op reaches 0.3 of this bound at T = 512, where
 * att v averages hundreds of rounded terms. */
static const tol BF16_ATT = {5e-2, 0.2};

/* set_bf16(1): matrix products (linear layers and attention's) in bf16 */
Test(backend_ops, matmul_bf16)
{
    NEED_B();
    int rc = B->set_bf16(1);
    if (b_is_cpu)
        cr_assert_eq(rc, -1, "the CPU backend has no bf16 path");
    else
        cr_assert_eq(rc, 0, "set_bf16(1) failed on '%s'", B->name);
    matmul_case(13, 72, 37, 1);
    matmul_case(37, 20, 96, 1);
    matmul_case(1, 5, 3, 1);
    matmul_case(1024, 512, 512, 1);
    attention_case(2, 13, 3, 8, BF16_ATT);
    attention_case(1, 70, 1, 72, BF16_ATT);
    attention_case(2, 512, 8, 64, BF16_ATT);
    cr_assert_eq(B->set_bf16(0), 0);
    /* and back to fp32 */
    matmul_case(37, 72, 13, 0);
}

/* ---- rotary ---------------------------------------------------------- */

/* fp32, but the angle t*freq of a float computation is off by ~t 2^-24
 * radians (6e-5 at t = 1023) where the CPU's table is built in double: the
 * bound is twice the fp32 one. */
static const tol ROPE = {2e-4, 2e-4};

static void rope_case(int Bn, int T, int nh, int hd)
{
    at("rope B=%d T=%d nh=%d hd=%d", Bn, T, nh, hd);
    size_t n = (size_t)Bn * T * nh * hd;
    tp *x = rnd(n, -2, 2);
    BOTH be->rope_fwd(D(x), Bn, T, nh, hd);
    check_tol("rope_fwd x", x, ROPE);
    tp *dx = rnd(n, -2, 2);
    BOTH be->rope_bwd(D(dx), Bn, T, nh, hd);
    check_tol("rope_bwd dx", dx, ROPE);
    release();
}

Test(backend_ops, rope)
{
    NEED_B();
    rope_case(2, 13, 3, 8);
    rope_case(1, 37, 2, 24);
    rope_case(3, 5, 1, 2);
    rope_case(1, 13, 1, 72);
    rope_case(2, 512, 8, 64);
    rope_case(1, 1024, 4, 128);
}

/* ---- attention ------------------------------------------------------- */

static void attention_case(int Bn, int T, int nh, int hd, tol t)
{
    at("attention%s B=%d T=%d nh=%d hd=%d", t.arms > FP32.arms ? " bf16" : "", Bn, T, nh, hd);
    size_t n = (size_t)Bn * T * nh * hd, na = (size_t)Bn * nh * T * T;
    tp *q = rnd(n, -1.5f, 1.5f), *k = rnd(n, -1.5f, 1.5f), *v = rnd(n, -1, 1);
    tp *y = junk(n), *att = junk(na);
    BOTH be->attention_fwd(D(y), D(att), D(q), D(k), D(v), Bn, T, nh, hd);
    check_tol("attention_fwd y", y, t);
    check_tol("attention_fwd att", att, t); /* zeros above the diagonal included */
    take(att);
    tp *dy = rnd(n, -1, 1), *dq = junk(n), *dk = junk(n), *dv = junk(n), *datt = junk(na);
    BOTH be->attention_bwd(D(dq), D(dk), D(dv), D(datt), D(dy), D(att), D(q), D(k), D(v), Bn,
                           T, nh, hd);
    check_tol("attention_bwd dq", dq, t);
    check_tol("attention_bwd dk", dk, t);
    check_tol("attention_bwd dv", dv, t);
    release();
}

Test(backend_ops, attention)
{
    NEED_B();
    attention_case(2, 13, 3, 8, FP32);
    attention_case(1, 37, 2, 24, FP32);
    attention_case(1, 1, 2, 4, FP32);
    attention_case(1, 70, 1, 72, FP32);
    attention_case(2, 512, 8, 64, FP32);
}

/* ---- incremental decoding: rotary at positions, attention on a cache -- */

/* n new rows at positions pos0..pos0+n-1 of a cache of Tk = pos0+n rows.
 * rope_fwd_at: both backends take the angle in double (fp32's bound).
 * attention_decode: y and the probabilities, from garbage (both "=").
 * matvec_fwd: a decoding step's linear layer, in = nh*hd. */
static void decode_case(int n, int pos0, int nh, int hd)
{
    at("decode n=%d pos0=%d nh=%d hd=%d", n, pos0, nh, hd);
    int C = nh * hd, Tk = pos0 + n;
    tp *x = rnd((size_t)n * C, -2, 2);
    BOTH be->rope_fwd_at(D(x), n, pos0, nh, hd);
    check("rope_fwd_at x", x);
    tp *q = rnd((size_t)n * C, -1.5f, 1.5f), *k = rnd((size_t)Tk * C, -1.5f, 1.5f);
    tp *v = rnd((size_t)Tk * C, -1, 1), *y = junk((size_t)n * C), *att = junk((size_t)nh * n * Tk);
    BOTH be->attention_decode(D(y), D(att), D(q), D(k), D(v), n, pos0, nh, hd);
    check("attention_decode y", y);
    check("attention_decode att", att); /* zeros right of the diagonal included */
    /* one token's linear layer: out = W x, into garbage */
    int outd = 3 * hd + 1;
    tp *W = rnd((size_t)outd * C, -1, 1), *xv = rnd((size_t)C, -1, 1), *o = junk((size_t)outd);
    BOTH be->matvec_fwd(D(o), D(xv), D(W), C, outd);
    check("matvec_fwd out", o);
    release();
}

Test(backend_ops, decode)
{
    NEED_B();
    decode_case(1, 0, 2, 8);
    decode_case(1, 37, 3, 8);
    decode_case(5, 12, 2, 24);
    decode_case(13, 0, 1, 72);
    decode_case(64, 448, 8, 64);
    decode_case(1, 1023, 4, 128);
}

/* ---- SwiGLU ---------------------------------------------------------- */

static void swiglu_case(size_t n)
{
    at("swiglu n=%zu", n);
    tp *gate = rnd(n, -5, 5), *up = rnd(n, -2, 2), *out = junk(n);
    BOTH be->swiglu_fwd(D(out), D(gate), D(up), n);
    check("swiglu_fwd out", out);
    tp *dout = rnd(n, -1, 1), *dgate = junk(n), *dup = junk(n);
    BOTH be->swiglu_bwd(D(dgate), D(dup), D(dout), D(gate), D(up), n);
    check("swiglu_bwd dgate", dgate);
    check("swiglu_bwd dup", dup);
    release();
}

Test(backend_ops, swiglu)
{
    NEED_B();
    swiglu_case(1);
    swiglu_case(37 * 72);
    swiglu_case(1024 * 512 + 3);
}

/* ---- cross-entropy --------------------------------------------------- */

static void xent_case(int N, int V)
{
    at("xent N=%d V=%d", N, V);
    size_t nv = (size_t)N * V;
    tp *logits = rnd(nv, -6, 6), *tg = ints(N, V), *losses = junk(N), *probs = junk(nv);
    double s[2] = {0, 0};
    BOTH s[side_] = be->xent_fwd(D(losses), D(probs), D(logits), DI(tg), N, V);
    check("xent_fwd losses", losses);
    check("xent_fwd probs", probs);
    check_scalar("xent_fwd sum", s[0], s[1], 1e-5);
    take(probs);
    float scale = 1.0f / N;
    tp *dl = junk(nv), *inplace = dup_tp(probs);
    BOTH be->xent_bwd(D(dl), D(probs), DI(tg), scale, N, V);
    check("xent_bwd dlogits", dl);
    BOTH be->xent_bwd(D(inplace), D(inplace), DI(tg), scale, N, V);
    check("xent_bwd in place dlogits", inplace);
    release();
}

Test(backend_ops, xent)
{
    NEED_B();
    xent_case(13, 37);
    xent_case(37, 256);
    xent_case(1, 2);
    xent_case(1024, 1000);
}

/* ---- AdamW ----------------------------------------------------------- */

/* p moves by ~lr = 1e-2 per step: its bound (2e-6 relative, a few ulp) is
 * 5000 times smaller than the update, so a wrong update term shows. */
static const tol ADAM_P = {2e-6, 1e-6};

static void adamw_case(size_t n, long t)
{
    at("adamw n=%zu t=%ld", n, t);
    tp *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 1e-4f, 1e-2f);
    BOTH be->adamw(D(p), D(g), D(m), D(v), n, 0.8f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    check_tol("adamw p", p, ADAM_P);
    check("adamw m", m);
    check("adamw v", v);
    release();
}

Test(backend_ops, adamw)
{
    NEED_B();
    adamw_case(1, 1);
    adamw_case(37 * 72, 1);
    adamw_case(37 * 72, 10);
    adamw_case(1024 * 512 + 7, 3);
}

/* ---- depth attention, one phase -------------------------------------- */

/* n sources with growing scales, as in a residual stream */
static void sources(tp **src, int n, int N, int d)
{
    size_t nd = (size_t)N * d;
    for (int s = 0; s < n; s++) {
        float *h = malloc(nd * sizeof(float));
        tu_fill_uniform(h, nd, -1.5f, 1.5f, seed++);
        for (size_t i = 0; i < nd; i++)
            h[i] *= 0.5f + 0.7f * s;
        src[s] = from_host(h, nd);
        free(h);
    }
}

/* n depth-attention queries of d channels (or N x d per-token ones):
 * uniform in +-4/sqrt(d), so that logits are O(1) as in a trained model.
 * With O(sqrt(d)) logits the softmax saturates: most weights underflow
 * (their terms go untested) and the comparison measures the conditioning
 * of the logits rather than the op. */
static tp *queries(size_t n, int d)
{
    float q = 4.0f / sqrtf((float)d);
    return rnd(n, -q, q);
}

/* repeat >= 0: dsrc[repeat] is dsrc[0]'s buffer (the op accumulates
 * repeated pointers in source order) */
static void depth_attn_case(int n, int N, int d, int repeat)
{
    at("depth_attn n=%d N=%d d=%d%s", n, N, d, repeat >= 0 ? " repeated dsrc" : "");
    size_t nd = (size_t)N * d;
    tp *src[MAXL], *dsrc[MAXL];
    sources(src, n, N, d);
    tp *w = queries(d, d), *g = rnd(d, 0.5f, 1.5f);
    tp *h = junk(nd), *alpha = junk((size_t)N * n), *rstd = junk((size_t)N * n);
    tl ls = list(src, n);
    BOTH be->depth_attn_fwd(D(h), D(alpha), D(rstd), CL(ls), n, D(w), D(g), N, d);
    check("depth_attn_fwd h", h);
    check("depth_attn_fwd alpha", alpha);
    check("depth_attn_fwd rstd", rstd);
    take(alpha), take(rstd);
    for (int s = 0; s < n; s++)
        dsrc[s] = s == repeat ? dsrc[0] : rnd(nd, -1, 1);
    tp *dh = rnd(nd, -1, 1), *dw = rnd(d, -1, 1), *dg = rnd(d, -1, 1);
    tl ld = list(dsrc, n);
    BOTH be->depth_attn_bwd(DL(ld), D(dw), D(dg), D(dh), D(alpha), D(rstd), CL(ls), n, D(w), D(g),
                            N, d);
    char what[64];
    for (int s = 0; s < n; s++) {
        snprintf(what, sizeof what, "depth_attn_bwd dsrc[%d]", s);
        check(what, dsrc[s]);
    }
    check("depth_attn_bwd dw", dw);
    check("depth_attn_bwd dg", dg);
    release();
}

Test(backend_ops, depth_attn)
{
    NEED_B();
    depth_attn_case(3, 13, 72, -1);
    depth_attn_case(1, 37, 20, -1);
    depth_attn_case(4, 13, 72, 2);
    depth_attn_case(6, 1024, 512, -1);
}

/* ---- depth attention, two phases ------------------------------------- */

/* A chunk of C mixers sharing k sources; mixer c has j[c] sources of its
 * own, Full-style (src[k .. k+j[c]-1]).  Every op of the two-phase scheme
 * on both backends, each fed A's results of the ops before it.  kn 0: no
 * key norm (g and dg NULL); sig 1: score sigmoid. */
static void two_phase_case(int C, int k, const int *j, int N, int d, int kn, int sig)
{
    char js[64] = "";
    for (int c = 0; c < C; c++)
        snprintf(js + strlen(js), sizeof js - strlen(js), "%s%d", c ? "," : "", j[c]);
    at("depth two-phase C=%d k=%d j=[%s] N=%d d=%d%s%s", C, k, js, N, d, kn ? "" : " key_norm false",
       sig ? " sigmoid" : "");
    size_t nd = (size_t)N * d;
    int n[8], jmax = 0;
    for (int c = 0; c < C; c++) {
        n[c] = k + j[c];
        jmax = j[c] > jmax ? j[c] : jmax;
    }
    int ns = k + jmax;
    tp *src[MAXL] = {0}, *w[8] = {0}, *g[8] = {0}, *o[8] = {0}, *lse[8] = {0}, *alpha[8] = {0}, *rs[MAXL] = {0};
    sources(src, ns, N, d);
    for (int c = 0; c < C; c++) {
        w[c] = queries(d, d), g[c] = rnd(d, 0.5f, 1.5f);
        o[c] = junk(nd), lse[c] = junk(N), alpha[c] = junk((size_t)N * n[c]);
    }
    for (int s = 0; s < ns; s++)
        rs[s] = junk(N);
    tl lsrc = list(src, ns), lw = list(w, C), lg = list(g, C), lo = list(o, C);
    tl llse = list(lse, C), lal = list(alpha, C), lrs = list(rs, ns);
    char what[96];

    /* phase 1, fused with mixer 0's RMSNorm: o[0] is not written, nor (with
     * C > 2) the last mixer's, whose o is passed as NULL */
    tp *o2[8], *o2n[8], *lse2[8], *alpha2[8], *rs2[MAXL];
    for (int c = 0; c < C; c++)
        o2[c] = o2n[c] = junk(nd), lse2[c] = junk(N), alpha2[c] = junk((size_t)N * n[c]);
    if (C > 2)
        o2n[C - 1] = NULL;
    for (int s = 0; s < k; s++)
        rs2[s] = junk(N);
    tp *ng = rnd(d, 0.5f, 1.5f), *xn = junk(nd), *nrstd = junk(N);
    tl lo2 = list(o2n, C), llse2 = list(lse2, C), lal2 = list(alpha2, C), lrs2 = list(rs2, k);
    BOTH be->depth_fwd_inter(DL(lo2), DL(llse2), DL(lal2), n, DL(lrs2), CL(lsrc), k, CL(lw), kn ? CL(lg) : NULL, C,
                             D(ng), D(xn), D(nrstd), sig, N, d);
    check("depth_fwd_inter (xn) xn", xn);
    check("depth_fwd_inter (xn) nrstd", nrstd);
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "depth_fwd_inter (xn) o[%d]%s", c,
                 c && o2n[c] ? "" : " (not written)");
        check(what, o2[c]);
        snprintf(what, sizeof what, "depth_fwd_inter (xn) lse[%d]", c);
        check(what, lse2[c]);
        snprintf(what, sizeof what, "depth_fwd_inter (xn) logits[%d]", c);
        check_cols(what, alpha2[c], N, n[c], 0, k, FP32);
    }

    /* phase 1 */
    BOTH be->depth_fwd_inter(DL(lo), DL(llse), DL(lal), n, DL(lrs), CL(lsrc), k, CL(lw), kn ? CL(lg) : NULL, C,
                             NULL, NULL, NULL, sig, N, d);
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "depth_fwd_inter o[%d]", c);
        check(what, o[c]);
        snprintf(what, sizeof what, "depth_fwd_inter lse[%d]", c);
        check(what, lse[c]);
        snprintf(what, sizeof what, "depth_fwd_inter logits[%d]", c);
        check_cols(what, alpha[c], N, n[c], 0, k, FP32);
        take(o[c]), take(lse[c]), take(alpha[c]);
    }
    for (int s = 0; s < k; s++) {
        snprintf(what, sizeof what, "depth_fwd_inter rs[%d]", s);
        check(what, rs[s]);
        take(rs[s]);
    }

    /* phase 2 per mixer, first fused with the sublayer's RMSNorm (h is
     * left alone) on copies, then plain */
    for (int c = 0; c < C; c++) {
        tl lrsi = list(rs + k, j[c]), lintra = list(src + k, j[c]);
        if (j[c] > 0) {
            tp *h3 = dup_tp(o[c]), *lse3 = dup_tp(lse[c]), *al3 = dup_tp(alpha[c]);
            tp *rsi3[MAXL];
            for (int t = 0; t < j[c]; t++)
                rsi3[t] = junk(N);
            tl lrsi3 = list(rsi3, j[c]);
            tp *xn3 = junk(nd), *nr3 = junk(N);
            BOTH be->depth_fwd_merge(D(h3), D(lse3), D(al3), n[c], k, DL(lrsi3), CL(lintra),
                                     D(w[c]), kn ? D(g[c]) : NULL, D(ng), D(xn3), D(nr3), sig, N, d);
            snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d xn", c);
            check(what, xn3);
            snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d nrstd", c);
            check(what, nr3);
            snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d h (not written)", c);
            check(what, h3);
            snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d lse", c);
            check(what, lse3);
            snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d alpha", c);
            check(what, al3);
        }
        BOTH be->depth_fwd_merge(D(o[c]), D(lse[c]), D(alpha[c]), n[c], k, DL(lrsi), CL(lintra),
                                 D(w[c]), kn ? D(g[c]) : NULL, NULL, NULL, NULL, sig, N, d);
        snprintf(what, sizeof what, "depth_fwd_merge mixer %d h", c);
        check(what, o[c]);
        snprintf(what, sizeof what, "depth_fwd_merge mixer %d lse", c);
        check(what, lse[c]);
        snprintf(what, sizeof what, "depth_fwd_merge mixer %d alpha", c);
        check(what, alpha[c]);
        take(o[c]), take(lse[c]), take(alpha[c]);
        for (int t = 0; t < j[c]; t++) {
            snprintf(what, sizeof what, "depth_fwd_merge mixer %d rsi[%d]", c, t);
            check(what, rs[k + t]);
            take(rs[k + t]);
        }
    }

    /* backward, intra parts from the last mixer down; dh given, or (fz)
     * formed by the fused norm backward from xn (h not given; some gain
     * columns 0, where h comes from the sources), in turn */
    tp *dsrc[MAXL], *dw[8], *dg[8], *cdot[8], *dh[8];
    for (int s = 0; s < ns; s++)
        dsrc[s] = rnd(nd, -1, 1);
    for (int c = 0; c < C; c++) {
        dw[c] = rnd(d, -1, 1), dg[c] = rnd(d, -1, 1), cdot[c] = junk(N), dh[c] = rnd(nd, -1, 1);
    }
    for (int c = C - 1; c >= 0; c--) {
        int fused = (c + C) % 2;
        tp *h = fused ? NULL : o[c];
        tp *dxn = NULL, *xn = NULL, *ng = NULL, *dng = NULL, *nr = NULL;
        if (fused) {
            dxn = rnd(nd, -1, 1), xn = rnd(nd, -1, 1), dng = rnd(d, -1, 1);
            nr = rnd(N, 0.5f, 2.0f), ng = rnd(d, 0.5f, 1.5f);
            for (int q = 2; q < d; q += 5)
                ng->h[q] = 0.0f;
            ng = from_host(ng->h, d);
            dh[c] = junk(nd); /* (=) */
        }
        tl ldi = list(dsrc + k, j[c]), lrsi = list(rs + k, j[c]), lsrc = list(src, n[c]);
        /* no intra sources: the lists of their gradients and rstd are not read */
        BOTH be->depth_bwd_intra(j[c] ? DL(ldi) : NULL, D(dw[c]), kn ? D(dg[c]) : NULL, D(cdot[c]), D(dh[c]),
                                 h ? D(h) : NULL, dxn ? D(dxn) : NULL,
                                 xn ? D(xn) : NULL, ng ? D(ng) : NULL, dng ? D(dng) : NULL,
                                 nr ? D(nr) : NULL, D(alpha[c]), D(lse[c]), n[c], k,
                                 j[c] ? CL(lrsi) : NULL, CL(lsrc), D(w[c]), kn ? D(g[c]) : NULL, sig, N, d);
        const char *fz = fused ? " (fused norm)" : "";
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d cdot", fz, c);
        check(what, cdot[c]);
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dw", fz, c);
        check(what, dw[c]);
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dg", fz, c);
        if (kn)
            check(what, dg[c]);
        take(cdot[c]), take(dw[c]), take(dg[c]);
        if (fused) {
            snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dh", fz, c);
            check(what, dh[c]);
            snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dng", fz, c);
            check(what, dng);
            take(dh[c]);
        }
        for (int t = 0; t < j[c]; t++) {
            snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dintra[%d]", fz, c, t);
            check(what, dsrc[k + t]);
            take(dsrc[k + t]);
        }
    }

    /* backward, shared part: += and overwrite */
    tl ldsrc = list(dsrc, k), ldw = list(dw, C), ldg = list(dg, C), ldh = list(dh, C);
    tl lcd = list(cdot, C);
    tp *dsrcO[MAXL], *dwO[8], *dgO[8];
    for (int s = 0; s < k; s++)
        dsrcO[s] = junk(nd);
    for (int c = 0; c < C; c++)
        dwO[c] = dup_tp(dw[c]), dgO[c] = dup_tp(dg[c]);
    tl ldsrcO = list(dsrcO, k), ldwO = list(dwO, C), ldgO = list(dgO, C);
    BOTH be->depth_bwd_inter(DL(ldsrc), DL(ldw), kn ? DL(ldg) : NULL, CL(ldh), CL(lcd), CL(lal), CL(llse), n,
                             CL(lrs), CL(lsrc), k, CL(lw), kn ? CL(lg) : NULL, C, 0, sig, N, d);
    BOTH be->depth_bwd_inter(DL(ldsrcO), DL(ldwO), kn ? DL(ldgO) : NULL, CL(ldh), CL(lcd), CL(lal), CL(llse), n,
                             CL(lrs), CL(lsrc), k, CL(lw), kn ? CL(lg) : NULL, C, 1, sig, N, d);
    for (int s = 0; s < k; s++) {
        snprintf(what, sizeof what, "depth_bwd_inter dsrc[%d]", s);
        check(what, dsrc[s]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dsrc[%d]", s);
        check(what, dsrcO[s]);
    }
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "depth_bwd_inter dw[%d]", c);
        check(what, dw[c]);
        snprintf(what, sizeof what, "depth_bwd_inter dg[%d]", c);
        if (kn)
            check(what, dg[c]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dw[%d]", c);
        check(what, dwO[c]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dg[%d]", c);
        if (kn)
            check(what, dgO[c]);
    }
    release();
}

Test(backend_ops, depth_two_phase)
{
    NEED_B();
    static const int full[4] = {0, 1, 2, 3}, block[3] = {0, 1, 1}, one[1] = {0}, two[2] = {2, 2};
    /* C, k, own sources per mixer, N, d, key norm, sigmoid */
    static const struct {
        int C, k;
        const int *j;
        int N, d, kn, sig;
    } cases[] = {
        {4, 5, full, 37, 72, 1, 0}, {3, 4, block, 13, 20, 1, 0}, {1, 6, one, 33, 20, 1, 0},
        {1, 1, one, 9, 12, 1, 0},   {2, 1, two, 41, 16, 1, 0},   {4, 6, full, 1024, 512, 1, 0},
        /* key_norm: false, score: sigmoid, both */
        {4, 5, full, 37, 72, 0, 0}, {3, 4, block, 13, 20, 0, 0}, {2, 1, two, 41, 16, 0, 0},
        {4, 5, full, 37, 72, 1, 1}, {3, 4, block, 13, 20, 1, 1}, {1, 1, one, 9, 12, 1, 1},
        {2, 1, two, 41, 16, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        two_phase_case(cases[i].C, cases[i].k, cases[i].j, cases[i].N, cases[i].d, cases[i].kn, cases[i].sig);
}

/* ---- general depth mixing (ablation variants) ------------------------ */

enum { Q_NONE, Q_SHARED, Q_TOKEN };

/* query: none, one shared or per token; keynorm: g given; theta: static
 * logits; nullg: dsrc[1], dw and dg NULL (no gradient wanted) */
static void mix_case(int n, int N, int d, int H, int query, int keynorm, int theta, int sigmoid,
                     int nullg)
{
    at("depth_mix n=%d N=%d d=%d H=%d query=%s keynorm=%d theta=%d sigmoid=%d null-grads=%d", n, N,
       d, H, query == Q_NONE ? "none" : query == Q_SHARED ? "shared" : "per-token", keynorm, theta,
       sigmoid, nullg);
    size_t nd = (size_t)N * d, wn = query == Q_TOKEN ? nd : (size_t)d;
    int ws = query == Q_TOKEN ? d : 0;
    tp *src[MAXL], *dsrc[MAXL];
    sources(src, n, N, d);
    tp *w = query != Q_NONE ? queries(wn, d) : NULL, *g = keynorm ? rnd(d, 0.5f, 1.5f) : NULL;
    tp *th = theta ? rnd(n, -2, 2) : NULL;
    tp *h = junk(nd), *alpha = junk((size_t)N * H * n), *rstd = junk((size_t)N * n);
    tl ls = list(src, n);
#define OPT(t) ((t) ? D(t) : NULL)
    BOTH be->depth_mix_fwd(D(h), D(alpha), D(rstd), CL(ls), n, OPT(w), ws, OPT(g), OPT(th),
                           sigmoid, H, N, d);
    check("depth_mix_fwd h", h);
    check("depth_mix_fwd alpha", alpha);
    if (keynorm)
        check("depth_mix_fwd rstd", rstd);
    take(alpha), take(rstd);
    for (int s = 0; s < n; s++)
        dsrc[s] = nullg && s == 1 ? NULL : rnd(nd, -1, 1);
    tp *dh = rnd(nd, -1, 1);
    tp *dw = w && !nullg ? rnd(wn, -1, 1) : NULL, *dg = g && !nullg ? rnd(d, -1, 1) : NULL;
    tp *dth = th ? rnd(n, -1, 1) : NULL;
    tl ld = list(dsrc, n);
    BOTH be->depth_mix_bwd(DL(ld), OPT(dw), OPT(dg), OPT(dth), D(dh), D(alpha), D(rstd), CL(ls), n,
                           OPT(w), ws, OPT(g), OPT(th), sigmoid, H, N, d);
#undef OPT
    char what[64];
    for (int s = 0; s < n; s++)
        if (dsrc[s]) {
            snprintf(what, sizeof what, "depth_mix_bwd dsrc[%d]", s);
            check(what, dsrc[s]);
        }
    if (dw)
        check("depth_mix_bwd dw", dw);
    if (dg)
        check("depth_mix_bwd dg", dg);
    if (dth)
        check("depth_mix_bwd dtheta", dth);
    release();
}

Test(backend_ops, depth_mix)
{
    NEED_B();
    /* n, N, d, H, query, keynorm, theta, sigmoid, null grads */
    mix_case(4, 13, 72, 1, Q_SHARED, 1, 0, 0, 0); /* = depth_attn */
    mix_case(3, 37, 20, 1, Q_SHARED, 0, 0, 0, 0); /* no key norm */
    mix_case(5, 13, 72, 1, Q_TOKEN, 1, 0, 0, 0);  /* input-dependent queries */
    mix_case(3, 37, 20, 1, Q_TOKEN, 0, 0, 0, 0);
    mix_case(4, 37, 20, 1, Q_NONE, 0, 1, 0, 0);   /* static logits */
    mix_case(3, 13, 72, 1, Q_NONE, 0, 0, 0, 0);   /* uniform weights */
    mix_case(4, 13, 72, 1, Q_SHARED, 1, 0, 1, 0); /* sigmoid scores */
    mix_case(5, 37, 72, 4, Q_SHARED, 1, 0, 0, 0); /* 4 heads of 18 channels */
    mix_case(3, 13, 72, 3, Q_TOKEN, 1, 0, 1, 0);
    mix_case(4, 13, 20, 2, Q_SHARED, 0, 0, 1, 0);
    mix_case(4, 13, 20, 1, Q_SHARED, 1, 0, 0, 1); /* NULL gradients */
    mix_case(1, 9, 12, 1, Q_SHARED, 1, 0, 0, 0);  /* one source */
    mix_case(6, 1024, 512, 1, Q_SHARED, 1, 0, 0, 0);
    mix_case(6, 1024, 512, 4, Q_TOKEN, 1, 0, 1, 0);
}

/* The backward in pieces (depth_mix_cdot, depth_mix_bwd_chunk): C mixers
 * with source lists of k shared then c + 1 own sources, their cdot from
 * random dh and h, then the chunk op over their shared sources and one
 * mixer's own ones. */
static void mix_chunk_case(int k, int C, int N, int d, int H, int query, int keynorm, int theta, int sigmoid)
{
    at("depth_mix_bwd_chunk k=%d C=%d N=%d d=%d H=%d query=%d keynorm=%d theta=%d sigmoid=%d", k, C, N, d, H,
       query, keynorm, theta, sigmoid);
    enum { MC = 4 };
    size_t nd = (size_t)N * d;
    int ns = k + C, n[MC];
    tp *src[MAXL], *dsrc[MAXL], *w[MC], *g[MC], *th[MC], *dh[MC], *h[MC], *al[MC], *rs[MC], *cd[MC], *dw[MC],
        *dg[MC], *dth[MC];
    sources(src, ns, N, d);
    for (int s = 0; s < ns; s++)
        dsrc[s] = rnd(nd, -1, 1);
    for (int c = 0; c < C; c++) {
        n[c] = k + c + 1;
        w[c] = query ? queries(d, d) : NULL;
        g[c] = keynorm ? rnd(d, 0.5f, 1.5f) : NULL;
        th[c] = theta ? rnd(n[c], -2, 2) : NULL;
        dh[c] = rnd(nd, -1, 1), h[c] = rnd(nd, -1, 1), cd[c] = junk((size_t)N * H);
        /* weights of a softmax or sigmoid: positive, below 1 */
        al[c] = rnd((size_t)N * H * n[c], 0.01f, 0.9f), rs[c] = rnd((size_t)N * n[c], 0.5f, 2.0f);
        dw[c] = w[c] ? rnd(d, -1, 1) : NULL, dg[c] = g[c] ? rnd(d, -1, 1) : NULL;
        dth[c] = th[c] ? rnd(n[c], -1, 1) : NULL;
    }
    for (int c = 0; c < C; c++) {
        BOTH be->depth_mix_cdot(D(cd[c]), D(dh[c]), D(h[c]), H, N, d);
        check("depth_mix_cdot", cd[c]);
    }
    tl ls = list(src, ns), ld = list(dsrc, ns);
#define OPT(t) ((t) ? D(t) : NULL)
    BOTH
    {
        float *pdw[MC], *pdg[MC], *pdt[MC];
        const float *pdh[MC], *pcd[MC], *pal[MC], *prs[MC], *pw[MC], *pg[MC], *pth[MC];
        for (int c = 0; c < C; c++) {
            pdw[c] = OPT(dw[c]), pdg[c] = OPT(dg[c]), pdt[c] = OPT(dth[c]);
            pdh[c] = D(dh[c]), pcd[c] = D(cd[c]), pal[c] = D(al[c]), prs[c] = D(rs[c]);
            pw[c] = OPT(w[c]), pg[c] = OPT(g[c]), pth[c] = OPT(th[c]);
        }
        be->depth_mix_bwd_chunk(DL(ld), CL(ls), 0, k, C, pdw, pdg, pdt, pdh, pcd, pal, prs, n, pw, pg, pth,
                                sigmoid, H, N, d);
        int c = C - 1; /* the last mixer's own sources */
        be->depth_mix_bwd_chunk(DL(ld), CL(ls), k, n[c], 1, pdw + c, pdg + c, pdt + c, pdh + c, pcd + c, pal + c,
                                prs + c, n + c, pw + c, pg + c, pth + c, sigmoid, H, N, d);
    }
#undef OPT
    char what[64];
    for (int s = 0; s < ns; s++) {
        snprintf(what, sizeof what, "depth_mix_bwd_chunk dsrc[%d]", s);
        check(what, dsrc[s]);
    }
    for (int c = 0; c < C; c++) {
        if (dw[c])
            check("depth_mix_bwd_chunk dw", dw[c]);
        if (dg[c])
            check("depth_mix_bwd_chunk dg", dg[c]);
        if (dth[c])
            check("depth_mix_bwd_chunk dtheta", dth[c]);
    }
    release();
}

Test(backend_ops, depth_mix_chunk)
{
    NEED_B();
    /* k, C, N, d, H, query, keynorm, theta, sigmoid */
    mix_chunk_case(3, 4, 37, 64, 1, 1, 1, 0, 0);
    mix_chunk_case(5, 3, 13, 72, 4, 1, 1, 0, 1);
    mix_chunk_case(2, 2, 37, 20, 1, 1, 0, 0, 0);
    mix_chunk_case(4, 3, 37, 20, 1, 0, 0, 1, 0);
    mix_chunk_case(4, 2, 13, 72, 1, 0, 0, 0, 0);
    mix_chunk_case(6, 4, 1024, 512, 8, 1, 1, 0, 0);
}

/* ---- weighted sums --------------------------------------------------- */

static void wsum_case(int n, size_t len)
{
    at("wsum n=%d len=%zu", n, len);
    tp *x[MAXL], *dx[MAXL];
    for (int s = 0; s < n; s++)
        x[s] = rnd(len, -1, 1);
    tp *c = rnd(n, -1, 1), *y = junk(len), *y2 = rnd(len, -1, 1);
    tl lx = list(x, n);
    BOTH be->wsum_fwd(D(y), CL(lx), D(c), n, 0, len);
    check("wsum_fwd y", y);
    BOTH be->wsum_fwd(D(y2), CL(lx), D(c), n, 1, len);
    check("wsum_fwd (accumulate) y", y2);
    for (int s = 0; s < n; s++)
        dx[s] = s == 1 ? NULL : rnd(len, -1, 1);
    tp *dy = rnd(len, -1, 1), *dc = rnd(n, -1, 1), *dc2 = rnd(n, -1, 1);
    tl ldx = list(dx, n);
    BOTH be->wsum_bwd(DL(ldx), D(dc), D(dy), CL(lx), D(c), n, len);
    char what[64];
    for (int s = 0; s < n; s++)
        if (dx[s]) {
            snprintf(what, sizeof what, "wsum_bwd dx[%d]", s);
            check(what, dx[s]);
        }
    check("wsum_bwd dc", dc);
    /* no dx at all, and no dc */
    BOTH be->wsum_bwd(NULL, D(dc2), D(dy), CL(lx), D(c), n, len);
    check("wsum_bwd (dx NULL) dc", dc2);
    BOTH be->wsum_bwd(DL(ldx), NULL, D(dy), CL(lx), D(c), n, len);
    for (int s = 0; s < n; s++)
        if (dx[s]) {
            snprintf(what, sizeof what, "wsum_bwd (dc NULL) dx[%d]", s);
            check(what, dx[s]);
        }
    release();
}

static void wmix_case(int p, int n, int ldc, size_t len)
{
    at("wmix p=%d n=%d ldc=%d len=%zu", p, n, ldc, len);
    tp *x[MAXL], *y[MAXL], *dy[MAXL], *dx[MAXL], *dx2[MAXL];
    size_t nc = (size_t)(p - 1) * ldc + n;
    for (int j = 0; j < n; j++) {
        x[j] = rnd(len, -1, 1);
        dx[j] = junk(len);
        dx2[j] = rnd(len, -1, 1);
    }
    for (int i = 0; i < p; i++) {
        y[i] = junk(len);
        dy[i] = rnd(len, -1, 1);
    }
    tp *C = rnd(nc, -1, 1), *dC = rnd(nc, -1, 1), *dC2 = rnd(nc, -1, 1);
    tl lx = list(x, n), ly = list(y, p), ldy = list(dy, p), ldx = list(dx, n), ldx2 = list(dx2, n);
    char what[64];
    BOTH be->wmix_fwd(DL(ly), p, CL(lx), n, D(C), ldc, len);
    for (int i = 0; i < p; i++) {
        snprintf(what, sizeof what, "wmix_fwd y[%d]", i);
        check(what, y[i]);
    }
    BOTH be->wmix_bwd(DL(ldx), 0, D(dC), CL(ldy), p, CL(lx), n, D(C), ldc, len);
    BOTH be->wmix_bwd(DL(ldx2), 1, NULL, CL(ldy), p, CL(lx), n, D(C), ldc, len);
    for (int j = 0; j < n; j++) {
        snprintf(what, sizeof what, "wmix_bwd dx[%d]", j);
        check(what, dx[j]);
        snprintf(what, sizeof what, "wmix_bwd (accumulate) dx[%d]", j);
        check(what, dx2[j]);
    }
    check("wmix_bwd dC", dC);
    BOTH be->wmix_bwd(NULL, 0, D(dC2), CL(ldy), p, CL(lx), n, D(C), ldc, len);
    check("wmix_bwd (dx NULL) dC", dC2);
    release();
}

Test(backend_ops, wmix)
{
    NEED_B();
    wmix_case(4, 5, 5, 37 * 72);
    wmix_case(5, 4, 5, 1024 * 512 + 3);
    wmix_case(4, 1, 5, 2 * 16384 + 5);
    wmix_case(1, 1, 1, 1);
}

Test(backend_ops, wsum)
{
    NEED_B();
    wsum_case(3, 1);
    wsum_case(5, 37 * 72);
    wsum_case(2, 2 * 16384 + 5);
    wsum_case(4, 1024 * 512 + 3);
}
