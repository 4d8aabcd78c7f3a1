/* Backend comparison tests, in the style of ggml's test-backend-ops: every
 * entry of the op table (lib/backend.h), forward and backward, runs on
 * backend A = the CPU backend (the reference semantics) and on backend B =
 * the CUDA backend with the same random inputs; the results are downloaded
 * and compared elementwise.  One test per op family, several shapes each:
 * small ones that are multiples of nothing (d = 72, N = 37, T = 13, ...) and
 * a medium one (d = 512, N = 1024).
 *
 * Pass criterion, per element i of an output (a_i A's, b_i B's):
 *     |a_i - b_i| <= bnd_i,
 * bnd_i the sum of the two backends' bounds on their error against the
 * exact result of the same float inputs, derived from the op's arithmetic
 * (testutil.h): the lengths of its sums, which either backend may add in
 * any order (OpenBLAS and cuBLAS kernels, vector lanes, warps and block
 * trees, FMA or not), and the magnitudes of their terms, computed here in
 * double from the inputs; each op's bound function says how.  Elementary
 * functions: expf within 2 ulp, 4 u relative (CUDA's documented maximum;
 * the CPU's fast_expf is within 1.43 u over every float of its domain,
 * libm's within 1 u), logf within 1 ulp (2 u |log|), sqrtf and division
 * correctly rounded (nvcc without fast math).  cuBLAS runs in fp32: the
 * handle's math mode is CUBLAS_DEFAULT_MATH and the products' compute type
 * CUBLAS_COMPUTE_32F (lib/cuda/backend_cuda.cu, matmul_cuda.cu), neither
 * of which allows TF32; set_bf16(1) rounds the operands to bf16 (into
 * bf16 copies, or inside cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF), which
 * the bf16 bounds count.  Where both backends do the same correctly rounded
 * operations in the same order (copies, add, scale, the embedding's token
 * order, the cross-entropy backward) the results must be equal.
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
 * AR_TEST_BACKEND_B=cpu makes B the CPU backend too: the same code on the
 * same shapes and thread count, so every result must then be equal bit for
 * bit; that run checks the harness and computes every bound (checked to be
 * finite and at least the rounding of the result itself) without a GPU
 * (meson's backend_ops_cpu_b runs it so);
 * harness_detects_differences checks that a comparison does fail on a
 * perturbed result.
 *
 * Covers: lib/cuda/ (every kernel) against lib/cpu/, through the op table of
 * lib/ops.def and lib/backend.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "lib/backend.h"
#include "testutil.h"

static const ar_backend *A, *B;
static int b_is_cpu;
static char b_kind, why[2048];

static void setup(void)
{
    A = ar_backend_cpu();
    A->set_threads(2);
    B = tu_backend_b(&b_kind, why, sizeof why);
    b_is_cpu = b_kind == 'c';
    if (B && !b_is_cpu)
        B->set_threads(2);
}

TestSuite(backend_ops, .init = setup);

#define NEED_B() tu_need_backend_b(B, b_kind, why)

/* ---- tensors held on both backends ----------------------------------- */

/* n elements (float, or int32 for tokens): h the host values uploaded to
 * both, a and b the device buffers. */
typedef struct {
    size_t n;
    float *h;
    float *a, *b;
    int b16; /* b is bf16 storage (B's alloc_act under bf16): n bf16 values */
} tp;

#define MAXT 1024
static tp *reg[MAXT]; /* everything made by a case, freed by release() */
static int nreg;
#define MAXB 4096
static void *breg[MAXB]; /* host arrays of a case (bounds), freed by release() */
static int nbreg;
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

/* x rounded to bf16 (to nearest, ties to even), as a float, and its bits */
static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* B's values of t into dst (n floats; widened from bf16 storage) */
static void b_get(const tp *t, float *dst)
{
    if (!t->b16) {
        B->download(dst, t->b, t->n * sizeof(float));
        return;
    }
    uint16_t *h = malloc((t->n ? t->n : 1) * sizeof *h);
    B->download(h, t->b, t->n * sizeof *h);
    for (size_t i = 0; i < t->n; i++)
        dst[i] = bf16_value(h[i]);
    free(h);
}

/* t's host values onto B (as bf16 into bf16 storage: they must be bf16
 * values already) */
static void b_put(tp *t)
{
    if (!t->b16) {
        B->upload(t->b, t->h, t->n * sizeof(float));
        return;
    }
    uint16_t *h = malloc((t->n ? t->n : 1) * sizeof *h);
    for (size_t i = 0; i < t->n; i++) {
        h[i] = bf16_bits(t->h[i]);
        cr_assert(bf16_value(h[i]) == t->h[i], "%s: %g is not a bf16 value", ctx, t->h[i]);
    }
    B->upload(t->b, h, t->n * sizeof *h);
    free(h);
}

/* a copy of t's host values (its initial values, or A's result after take()) */
static tp *dup_tp(const tp *t) { return from_host(t->h, t->n); }

/* Both backends continue from A's result: the next op gets equal inputs. */
static void take(tp *t)
{
    A->download(t->h, t->a, t->n * sizeof(float));
    b_put(t);
}

static void release(void)
{
    for (int i = 0; i < nreg; i++) {
        A->free(reg[i]->a);
        B->free(reg[i]->b);
        free(reg[i]->h), free(reg[i]);
    }
    nreg = 0;
    for (int i = 0; i < nbreg; i++)
        free(breg[i]);
    nbreg = 0;
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

#define U TU_U_FLOAT
/* one expf: 2 ulp, 4 u relative (see the top of the file) */
#define U_EXP (4 * U)
/* rstd = 1/sqrt(sum x^2 / d + eps) in float: the d-term sum of squares is
 * off by gamma(d) relative (its terms are positive), the division and the
 * + eps by 2 u more; the square root halves that and adds u, the
 * reciprocal u. */
#define RSTD_REL(d) (tu_gamma(d) / 2 + 3 * U)

static void *keep(void *p)
{
    cr_assert(p, "out of memory");
    cr_assert(nbreg < MAXB);
    return breg[nbreg++] = p;
}

static double *bnew(size_t n) { return keep(calloc(n ? n : 1, sizeof(double))); }

/* A's values of t now (its result, or its inputs before the op) */
static float *res_a(const tp *t)
{
    float *r = keep(malloc((t->n ? t->n : 1) * sizeof(float)));
    A->download(r, t->a, t->n * sizeof(float));
    return r;
}

/* bf16 storage: see the bf16_storage test */
static int b_stores; /* B's alloc_act gives bf16 storage */

/* n values in bf16 storage on B (floats on A): h rounded to bf16 */
static tp *stored_from(const float *h, size_t n)
{
    cr_assert(nreg < MAXT);
    tp *t = calloc(1, sizeof *t);
    t->n = n;
    t->h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        t->h[i] = bf16_value(bf16_bits(h[i]));
    t->a = A->alloc((n ? n : 1) * sizeof(float));
    t->b = ar_alloc_act(B, n ? n : 1);
    t->b16 = b_stores;
    A->upload(t->a, t->h, n * sizeof(float));
    b_put(t);
    reg[nreg++] = t;
    return t;
}

/* n bf16 values uniform in [lo, hi) (rounded), in storage on B */
static tp *stored(size_t n, float lo, float hi)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    tu_fill_uniform(h, n, lo, hi, seed++);
    tp *t = stored_from(h, n);
    free(h);
    return t;
}

/* Both backends go on from A's result rounded to bf16 (as B's storage
 * holds it), so the next op reads the same values on both. */
static void take16(tp *t)
{
    A->download(t->h, t->a, t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++)
        t->h[i] = bf16_value(bf16_bits(t->h[i]));
    A->upload(t->a, t->h, t->n * sizeof(float));
    b_put(t);
}

/* bnd of an fp32 result widened by its rounding into bf16 storage (above),
 * where B stores bf16 */
static double *rounded_bounds(const tp *t, const double *bnd)
{
    double *r = bnew(t->n);
    const float *a = res_a(t);
    for (size_t i = 0; i < t->n; i++)
        r[i] = bnd[i] + (t->b16 ? 0x1p-8 * (fabs(a[i]) + bnd[i]) : 0);
    return r;
}

/* Compares cols columns from col0 of rows rows (row stride ld) of A's
 * result ra and B's rb, element i against bnd[i] (bnd indexed as ra; NULL:
 * equality).  Returns the worst |a-b| / bound (> 1: fail; a non-finite
 * value on either side: INFINITY) and describes the worst element in msg. */
static double compare(const char *what, const float *ra, const float *rb, size_t rows, size_t ld,
                      size_t col0, size_t cols, const double *bnd, char *msg, size_t cap)
{
    double worst = -1;
    size_t wi = col0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = col0; c < col0 + cols; c++) {
            size_t i = r * ld + c;
            double a = ra[i], b = rb[i], q;
            if (!isfinite(a) || !isfinite(b))
                q = INFINITY;
            else if (a == b)
                q = 0;
            else
                q = bnd && bnd[i] > 0 ? fabs(a - b) / bnd[i] : INFINITY;
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
    snprintf(msg, cap, "%s: %s: worst element %s: A %.9g, B %.9g, |diff| %.3g, bound %.3g", ctx, what,
             where, a, b, fabs(a - b), bnd ? bnd[wi] : 0.0);
    return worst;
}

/* compare() of t's results on A and B, downloaded.  With B the CPU backend
 * too, the results must be equal (the same code, shapes and thread count);
 * the bounds, not needed then, must still be finite and 0 (equality
 * asked) or at least u |a_i| (each backend's bound counts at least the
 * rounding of the result). */
static double measure(const char *what, tp *t, size_t rows, size_t ld, size_t col0, size_t cols,
                      const double *bnd, char *msg, size_t cap)
{
    float *ra = malloc(t->n * sizeof(float)), *rb = malloc(t->n * sizeof(float));
    A->download(ra, t->a, t->n * sizeof(float));
    b_get(t, rb);
    if (b_is_cpu && bnd)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = col0; c < col0 + cols; c++) {
                size_t i = r * ld + c;
                cr_expect(isfinite(bnd[i]) && (bnd[i] == 0 || bnd[i] >= U * fabs(ra[i])),
                          "%s: %s: the bound of element %zu is %g for a value of %g", ctx, what, i, bnd[i],
                          ra[i]);
            }
    double q = compare(what, ra, rb, rows, ld, col0, cols, b_is_cpu ? NULL : bnd, msg, cap);
    free(ra), free(rb);
    return q;
}

/* a part of t: rows x cols from column col0 of rows of ld (alpha's columns) */
static void check_cols(const char *what, tp *t, size_t rows, size_t ld, size_t col0, size_t cols,
                       const double *bnd)
{
    char msg[1024];
    double q = measure(what, t, rows, ld, col0, cols, bnd, msg, sizeof msg);
    cr_expect(q <= 1.0, "%s", msg);
}

/* t elementwise within bnd */
static void check(const char *what, tp *t, const double *bnd) { check_cols(what, t, 1, t->n, 0, t->n, bnd); }
/* u and v equal bit for bit on each backend (each against itself) */
static void same_on_each(const char *what, const tp *u, const tp *v)
{
    size_t n = u->n, i = 0;
    const float *ua = res_a(u), *va = res_a(v);
    float *ub = keep(malloc((n ? n : 1) * sizeof(float))), *vb = keep(malloc((n ? n : 1) * sizeof(float)));
    b_get(u, ub);
    b_get(v, vb);
    for (i = 0; i < n && memcmp(&ua[i], &va[i], sizeof(float)) == 0; i++)
        ;
    cr_expect(i == n, "%s: %s on A: [%zu] %.9g against %.9g", ctx, what, i, i < n ? ua[i] : 0.0, i < n ? va[i] : 0.0);
    for (i = 0; i < n && memcmp(&ub[i], &vb[i], sizeof(float)) == 0; i++)
        ;
    cr_expect(i == n, "%s: %s on B: [%zu] %.9g against %.9g", ctx, what, i, i < n ? ub[i] : 0.0, i < n ? vb[i] : 0.0);
}
/* t equal on both backends */
static void check_eq(const char *what, tp *t) { check_cols(what, t, 1, t->n, 0, t->n, NULL); }

/* A returned scalar (sumsq, the summed loss): |a - b| <= bound (equal with
 * B the CPU backend) */
static void check_scalar(const char *what, double a, double b, double bound)
{
    cr_expect(isfinite(a) && isfinite(b) && fabs(a - b) <= (b_is_cpu ? 0 : bound),
              "%s: %s: A %.17g, B %.17g, |diff| %.3g > %.3g", ctx, what, a, b, fabs(a - b), bound);
}

/* ---- the harness itself ---------------------------------------------- */

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

static void matmul_bounds(tp *x, tp *W, tp *dout, const float *dx0, const float *dW0, int N, int in, int outd,
                          double rho, double **bo, double **bx, double **bw);

/* The comparison catches a small relative change of one element, a "+="
 * that overwrites, and a NaN; it passes bitwise-equal results. */
Test(backend_ops, harness_detects_differences)
{
    const ar_backend *saveB = B;
    B = A; /* runs without CUDA: both sides on the CPU */
    char msg[1024];
    size_t n = 37 * 72;
    tp *x = rnd(n, -1, 1);
    float *b = malloc(n * sizeof(float));
    at("harness n=%zu", n);
    /* x as the result of a few roundings on either side: 2 gamma(4) |x| */
    double *bx = bnew(n);
    for (size_t i = 0; i < n; i++)
        bx[i] = 2 * tu_gamma(4) * fabs(x->h[i]);
    memcpy(b, x->h, n * sizeof(float));
    cr_expect_eq(compare("x", x->h, b, 1, n, 0, n, bx, msg, sizeof msg), 0.0, "%s", msg);
    b[100] *= 1.0f + 3e-6f;
    cr_expect_gt(compare("x", x->h, b, 1, n, 0, n, bx, msg, sizeof msg), 1.0,
                 "a 3e-6 relative change went unnoticed");
    cr_expect(strstr(msg, "[100]") != NULL, "the worst element is not the changed one: %s", msg);
    b[100] = x->h[100];
    b[n - 1] = NAN;
    cr_expect_gt(compare("x", x->h, b, 1, n, 0, n, bx, msg, sizeof msg), 1.0,
                 "a NaN went unnoticed");
    free(b);
    /* dW += dout^T x run as dW = dout^T x */
    int N = 13, in = 72, outd = 37;
    tp *xi = rnd((size_t)N * in, -1, 1), *W = rnd((size_t)outd * in, -1, 1);
    tp *dout = rnd((size_t)N * outd, -1, 1), *dW = rnd((size_t)outd * in, -1, 1);
    double *bo, *bdx, *bdw;
    matmul_bounds(xi, W, dout, NULL, dW->h, N, in, outd, 0, &bo, &bdx, &bdw);
    A->matmul_bwd(NULL, dW->a, dout->a, xi->a, W->a, 0, N, in, outd);
    A->zero(dW->b, dW->n * sizeof(float));
    A->matmul_bwd(NULL, dW->b, dout->b, xi->b, W->b, 0, N, in, outd);
    cr_expect_gt(measure("dW", dW, 1, dW->n, 0, dW->n, bdw, msg, sizeof msg), 1.0,
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
    cr_expect_geq(B->head_floats(), AR_HEAD_CHUNK_FLOATS, "head chunks below the CPU backend's");
    /* mem_peak: the high-water mark of the bytes held, where counted */
    size_t p0 = B->mem_peak(), big = (size_t)3 << 20;
    if (strcmp(B->name, "cpu") == 0) {
        cr_expect_eq(p0, 0, "the CPU backend counts no memory of its own");
    } else {
        void *a = B->alloc(big);
        size_t p1 = B->mem_peak();
        cr_expect_geq(p1, big, "mem_peak %zu after holding %zu bytes", p1, big);
        B->free(a);
        void *b = B->alloc(big / 3);
        cr_expect_eq(B->mem_peak(), p1, "mem_peak moved from %zu to %zu below the high-water mark", p1,
                     B->mem_peak());
        B->free(b);
        a = B->alloc(big), b = B->alloc(big);
        cr_expect_geq(B->mem_peak(), p1 + big, "mem_peak %zu holding two buffers of %zu", B->mem_peak(), big);
        B->free(a), B->free(b);
    }
}

Test(backend_ops, elementwise)
{
    NEED_B();
    size_t sizes[] = {1, 37, 72 * 13, 1024 * 512 + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        at("elementwise n=%zu", n);
        tp *x = rnd(n, -2, 2), *y = junk(n), *z = rnd(n, -2, 2), *w = rnd(n, -2, 2);
        /* a copy, and one correctly rounded add or product per element (no
         * result here is subnormal, which only the CPU would flush): equal */
        BOTH be->copy(D(y), D(x), n);
        check_eq("copy y", y);
        BOTH be->add(D(z), D(x), n);
        check_eq("add y", z);
        BOTH be->scale(D(w), -0.37f, n);
        check_eq("scale y", w);
        double s[2] = {0, 0}, ss = 0;
        BOTH s[side_] = be->sumsq(D(x), n);
        /* the n squares are exact in double; both add them in double, in
         * other orders: each within gamma_d(n) of their sum */
        for (size_t i = 0; i < n; i++)
            ss += (double)x->h[i] * x->h[i];
        check_scalar("sumsq", s[0], s[1], 2 * tu_gamma_d(n) * ss);
        /* sumsq_chunks: each chunk's sum on the device, the same bound per chunk */
        size_t ch = 5000, nc = (n + ch - 1) / ch;
        double *cs[2];
        BOTH {
            double *dev = be->alloc(nc * sizeof(double));
            cs[side_] = malloc(nc * sizeof(double));
            be->sumsq_chunks(dev, D(x), n, ch);
            be->download(cs[side_], dev, nc * sizeof(double));
            be->free(dev);
        }
        for (size_t c = 0; c < nc; c++) {
            size_t lo = c * ch, hi = lo + ch < n ? lo + ch : n;
            double sc = 0;
            for (size_t i = lo; i < hi; i++)
                sc += (double)x->h[i] * x->h[i];
            check_scalar("sumsq_chunks", cs[0][c], cs[1][c], 2 * tu_gamma_d(hi - lo) * sc);
        }
        free(cs[0]);
        free(cs[1]);
        release();
    }
}

/* ---- embedding ------------------------------------------------------- */

/* The forward copies rows; the backward adds each token's row onto dwte in
 * token order on both backends (the CUDA kernel after a stable sort by
 * token): the same float additions in the same order, so equal. */
static void embedding_case(int N, int d, int V)
{
    at("embedding N=%d d=%d V=%d", N, d, V);
    tp *tok = ints(N, V), *wte = rnd((size_t)V * d, -1, 1), *out = junk((size_t)N * d);
    BOTH be->embedding_fwd(D(out), DI(tok), D(wte), N, d);
    check_eq("embedding_fwd out", out);
    /* repeated tokens (V < N) accumulate into the same row */
    tp *dout = rnd((size_t)N * d, -1, 1), *dwte = rnd((size_t)V * d, -1, 1);
    BOTH be->embedding_bwd(D(dwte), D(dout), DI(tok), N, d);
    check_eq("embedding_bwd dwte", dwte);
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

/* Bounds of the backward with r the given rstd (both backends read the
 * same floats):
 * - dx_j (+= onto base_j, or = with base NULL) = r (g_j dout_j - x_j r m),
 *   m = sum_q g_q dout_q x_q r / d: the d-term sum of two-rounding
 *   products, then / d and the products with r (the CPU rounds x r first,
 *   the CUDA kernel scales the sum: the same count), the subtraction, the
 *   += : within gamma(d + 10) (r |g_j dout_j| + r^2 |x_j| S / d + |base_j|),
 *   S = sum_q |g_q dout_q x_q|;
 * - dg_j += sum_i dout_ij x_ij r_i: N terms of two roundings, in partials
 *   of any grouping (float or double), the += : within
 *   gamma(N + 4) (sum_i |dout_ij x_ij| r_i + |base_j|).
 * Each backend's bound once: bx and bg get twice these. */
static void rmsnorm_bwd_bounds(const float *dout, const float *x, const float *g, const float *r,
                               const float *base, const float *gbase, int N, int d, double *bx, double *bg)
{
    for (int q = 0; q < d; q++)
        bg[q] = fabs(gbase[q]);
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * d, *di = dout + (size_t)i * d;
        double S = 0, ri = r[i];
        for (int q = 0; q < d; q++) {
            S += fabs((double)g[q] * di[q] * xi[q]);
            bg[q] += fabs((double)di[q] * xi[q]) * ri;
        }
        for (int q = 0; q < d; q++) {
            size_t o = (size_t)i * d + q;
            double M = ri * fabs((double)g[q] * di[q]) + ri * ri * fabs(xi[q]) * S / d + (base ? fabs(base[o]) : 0);
            bx[o] = 2 * tu_gamma(d + 10) * M;
        }
    }
    for (int q = 0; q < d; q++)
        bg[q] *= 2 * tu_gamma(N + 4);
}

/* st: out in bf16 storage (the bf16_storage test) */
/* st: 1 out in bf16 storage, 2 x (both directions) in it, 3 both (the
 * bf16_storage test; x holds bf16 values on both backends then) */
static void rmsnorm_case(int N, int d, int st)
{
    at("rmsnorm%s%s N=%d d=%d", st & 1 ? " into bf16 storage" : "", st & 2 ? " from bf16 storage" : "", N, d);
    size_t nd = (size_t)N * d;
    tp *x = st & 2 ? stored(nd, -2, 2) : rnd(nd, -2, 2), *g = rnd(d, 0.5f, 1.5f);
    tp *out = st & 1 ? stored(nd, -7, 7) : junk(nd), *rstd = junk(N);
    BOTH be->rmsnorm_fwd(D(out), D(rstd), D(x), D(g), N, d);
    /* rstd within RSTD_REL(d) on each side, out = x rstd g two roundings
     * more (the extra u: the bound's use of A's values for the exact ones) */
    float *ra = res_a(rstd), *oa = res_a(out);
    double *bo = bnew(nd), *br = bnew(N);
    for (int i = 0; i < N; i++)
        br[i] = 2 * (RSTD_REL(d) + U) * fabs(ra[i]);
    for (size_t i = 0; i < nd; i++)
        bo[i] = 2 * (RSTD_REL(d) + tu_gamma(3)) * fabs(oa[i]);
    check("rmsnorm_fwd out", out, rounded_bounds(out, bo));
    check("rmsnorm_fwd rstd", rstd, br);
    take(rstd);
    tp *dout = rnd(nd, -1, 1), *dx = rnd(nd, -1, 1), *dg = rnd(d, -1, 1);
    double *bx = bnew(nd), *bg = bnew(d);
    rmsnorm_bwd_bounds(dout->h, x->h, g->h, rstd->h, dx->h, dg->h, N, d, bx, bg);
    BOTH be->rmsnorm_bwd(D(dx), D(dg), D(dout), D(x), D(g), D(rstd), 0, N, d);
    check("rmsnorm_bwd dx", dx, bx);
    check("rmsnorm_bwd dg", dg, bg);
    take(dg); /* the overwrite runs from A's dg on both */
    tp *ox = junk(nd);
    rmsnorm_bwd_bounds(dout->h, x->h, g->h, rstd->h, NULL, dg->h, N, d, bx, bg);
    BOTH be->rmsnorm_bwd(D(ox), D(dg), D(dout), D(x), D(g), D(rstd), 1, N, d);
    check("rmsnorm_bwd (overwrite) dx", ox, bx);
    check("rmsnorm_bwd (overwrite) dg", dg, bg);
    release();
}

Test(backend_ops, rmsnorm)
{
    NEED_B();
    rmsnorm_case(13, 72, 0);
    rmsnorm_case(37, 20, 0);
    rmsnorm_case(1, 7, 0);
    rmsnorm_case(1024, 512, 0);
}

/* ---- matmul ---------------------------------------------------------- */

/* bf16 products (set_bf16(1)): each input rounded to bf16, 8 significant
 * bits, within 2^-7 relative whichever way cuBLAS rounds, so each product
 * within (1 + 2^-7)^2 - 1 = 2^-6 + 2^-14 relative of fp32's; the sums stay
 * fp32.  A wrong product is off by the size of the output. */
#define RHO_BF16 (0x1p-6 + 0x1p-14)

/* Bounds of the three products, from their terms' magnitudes, summed by
 * A's own sgemm on absolute values (positive terms: within gamma(K) of
 * their exact sum, the factor 1 + gamma(K)):
 *   out = x W^T (K = in), dx += dout W (K = outd), dW += dout^T x (K = N).
 * An output is a K-term sum (+= : the base one more term) in any order,
 * within gamma(K + 1) of its terms' magnitudes on each backend; B's
 * products with bf16 inputs rho more (0 in fp32):
 *   bnd = (2 gamma(K + 1) + rho) (1 + gamma(K)) (sum_k |t_k| + |base|).
 * dx0, dW0: the bases (NULL: none); bo, bx, bw: the bounds. */
static void matmul_bounds(tp *x, tp *W, tp *dout, const float *dx0, const float *dW0, int N, int in, int outd,
                          double rho, double **bo, double **bx, double **bw)
{
    size_t no = (size_t)N * outd, nx = (size_t)N * in, nw = (size_t)outd * in;
    float *ax = A->alloc(nx * sizeof(float)), *aw = A->alloc(nw * sizeof(float));
    float *ad = A->alloc(no * sizeof(float)), *ao = A->alloc(no * sizeof(float));
    float *adx = A->alloc(nx * sizeof(float)), *adw = A->alloc(nw * sizeof(float));
    float *h = malloc((nx > nw ? (nx > no ? nx : no) : (nw > no ? nw : no)) * sizeof(float));
    for (size_t i = 0; i < nx; i++)
        h[i] = fabsf(x->h[i]);
    A->upload(ax, h, nx * sizeof(float));
    for (size_t i = 0; i < nw; i++)
        h[i] = fabsf(W->h[i]);
    A->upload(aw, h, nw * sizeof(float));
    for (size_t i = 0; i < no; i++)
        h[i] = fabsf(dout->h[i]);
    A->upload(ad, h, no * sizeof(float));
    A->matmul_fwd(ao, ax, aw, N, in, outd);
    A->matmul_bwd(adx, adw, ad, ax, aw, 0, N, in, outd);
    *bo = bnew(no), *bx = bnew(nx), *bw = bnew(nw);
    double co = (2 * tu_gamma(in + 1) + rho) * (1 + tu_gamma(in));
    double cx = (2 * tu_gamma(outd + 1) + rho) * (1 + tu_gamma(outd));
    double cw = (2 * tu_gamma(N + 1) + rho) * (1 + tu_gamma(N));
    A->download(h, ao, no * sizeof(float));
    for (size_t i = 0; i < no; i++)
        (*bo)[i] = co * h[i];
    A->download(h, adx, nx * sizeof(float));
    for (size_t i = 0; i < nx; i++)
        (*bx)[i] = cx * (h[i] + (dx0 ? fabs(dx0[i]) : 0));
    A->download(h, adw, nw * sizeof(float));
    for (size_t i = 0; i < nw; i++)
        (*bw)[i] = cw * (h[i] + (dW0 ? fabs(dW0[i]) : 0));
    A->free(ax), A->free(aw), A->free(ad), A->free(ao), A->free(adx), A->free(adw);
    free(h);
}

static void matmul_case(int N, int in, int outd, int bf16)
{
    at("matmul%s N=%d in=%d out=%d", bf16 ? " bf16" : "", N, in, outd);
    double rho = bf16 ? RHO_BF16 : 0;
    tp *x = rnd((size_t)N * in, -1, 1), *W = rnd((size_t)outd * in, -1, 1);
    tp *out = junk((size_t)N * outd);
    tp *dout = rnd((size_t)N * outd, -1, 1), *dx = rnd((size_t)N * in, -1, 1);
    tp *dW = rnd((size_t)outd * in, -1, 1), *dW2 = dup_tp(dW);
    double *bo, *bx, *bw, *bo32, *bx32, *bw32;
    matmul_bounds(x, W, dout, dx->h, dW->h, N, in, outd, rho, &bo, &bx, &bw);
    matmul_bounds(x, W, dout, dx->h, dW->h, N, in, outd, 0, &bo32, &bx32, &bw32);
    BOTH be->matmul_fwd(D(out), D(x), D(W), N, in, outd);
    check("matmul_fwd out", out, bo);
    if (bf16 && !b_is_cpu && N * in > 1000) {
        /* the bf16 path is taken: B is off by more than fp32 allows */
        char msg[1024];
        double q = measure("out", out, 1, out->n, 0, out->n, bo32, msg, sizeof msg);
        cr_expect_gt(q, 1.0, "%s: set_bf16(1) gives fp32 results", ctx);
    }
    BOTH be->matmul_bwd(D(dx), D(dW), D(dout), D(x), D(W), 0, N, in, outd);
    check("matmul_bwd dx", dx, bx);
    check("matmul_bwd dW", dW, bw);
    BOTH be->matmul_bwd(NULL, D(dW2), D(dout), D(x), D(W), 0, N, in, outd);
    check("matmul_bwd (dx NULL) dW", dW2, bw);
    /* overwrite: dx = dout W from garbage, its bounds without a base */
    double *bo0, *bx0, *bw0;
    matmul_bounds(x, W, dout, NULL, NULL, N, in, outd, rho, &bo0, &bx0, &bw0);
    tp *ox = junk((size_t)N * in);
    BOTH be->matmul_bwd(D(ox), D(dW2), D(dout), D(x), D(W), 1, N, in, outd);
    check("matmul_bwd (overwrite) dx", ox, bx0);
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

/* B's products of W (outd x in, inside the parameters' range when wc)
 * into fresh buffers, downloaded to o (N x outd), dx (N x in), dW (outd x
 * in; from 0) */
static void wc_products(float *o, float *dx, float *dW, const float *x, const float *W, const float *dout,
                        int N, int in, int outd)
{
    size_t no = (size_t)N * outd, nx = (size_t)N * in, nw = (size_t)outd * in;
    float *bo = B->alloc(no * sizeof(float)), *bx = B->alloc(nx * sizeof(float));
    float *bw = B->alloc(nw * sizeof(float));
    B->matmul_fwd(bo, x, W, N, in, outd);
    B->matmul_bwd(bx, bw, dout, x, W, 0, N, in, outd);
    B->download(o, bo, no * sizeof(float));
    B->download(dx, bx, nx * sizeof(float));
    B->download(dW, bw, nw * sizeof(float));
    B->free(bo), B->free(bx), B->free(bw);
}

/* set_weight_copy: with bf16 products, operands inside the parameters'
 * range come from one bf16 copy of it, bit for bit the products that round
 * their operands themselves (the same roundings); after an op, an upload
 * or a zero writes inside the range, the next product sees the new
 * weights (a stale copy would give the old ones' products). */
Test(backend_ops, weight_copy_bf16)
{
    NEED_B();
    int bf16 = B->set_bf16(1) == 0;
    cr_assert(bf16 || b_is_cpu, "set_bf16(1) failed on '%s'", B->name);
    int N = 96, in = 80, outd = 72; /* both sides >= 64: CUDA's bf16 copies */
    size_t nw = (size_t)outd * in, nx = (size_t)N * in, no = (size_t)N * outd;
    size_t off = 48, P = off + nw + 40; /* W inside the range, not at its start */
    float *h = malloc((P > nx ? P : nx) * sizeof(float));
    float *o1 = malloc(no * 4), *x1 = malloc(nx * 4), *w1 = malloc(nw * 4);
    float *o2 = malloc(no * 4), *x2 = malloc(nx * 4), *w2 = malloc(nw * 4);
    float *params = B->alloc(P * sizeof(float)), *W = params + off;
    float *x = B->alloc(nx * sizeof(float)), *dout = B->alloc(no * sizeof(float));
    tu_fill_uniform(h, P, -1, 1, 9101);
    B->upload(params, h, P * sizeof(float));
    tu_fill_uniform(h, nx, -1, 1, 9102);
    B->upload(x, h, nx * sizeof(float));
    tu_fill_uniform(h, no, -1, 1, 9103);
    B->upload(dout, h, no * sizeof(float));
    /* Wr: W's values outside the range, which products round themselves */
    float *Wr = B->alloc(nw * sizeof(float));
    const char *step[] = {"as uploaded", "after scale (an op) wrote inside the range",
                          "after an upload inside the range", "after zero inside the range"};
    size_t peak = 0;
    B->set_weight_copy(params, P);
    for (int k = 0; k < 4; k++) {
        if (k == 1)
            B->scale(W + 5, -0.75f, nw - 9);
        else if (k == 2) {
            tu_fill_uniform(h, 100, -2, 2, 9104);
            B->upload(W + 200, h, 100 * sizeof(float));
        } else if (k == 3)
            B->zero(W + 3 * in, (size_t)in * sizeof(float)); /* row 3 of W */
        B->copy(Wr, W, nw);
        wc_products(o1, x1, w1, x, Wr, dout, N, in, outd);
        if (k == 0) /* the products' buffers and rounded operands counted */
            peak = B->mem_peak();
        wc_products(o2, x2, w2, x, W, dout, N, in, outd);
        if (k == 0 && bf16)
            cr_expect_geq(B->mem_peak(), peak + P * 2, "%s: the weights' copy was not made (peak %zu -> %zu)",
                          B->name, peak, B->mem_peak());
        cr_expect(memcmp(o1, o2, no * 4) == 0, "%s, %s: matmul_fwd differs with the weights' copy", B->name, step[k]);
        cr_expect(memcmp(x1, x2, nx * 4) == 0, "%s, %s: matmul_bwd dx differs with the weights' copy", B->name, step[k]);
        cr_expect(memcmp(w1, w2, nw * 4) == 0, "%s, %s: matmul_bwd dW differs with the weights' copy", B->name, step[k]);
    }
    B->free(Wr);
    B->set_weight_copy(NULL, 0);
    B->free(params), B->free(x), B->free(dout);
    free(h), free(o1), free(x1), free(w1), free(o2), free(x2), free(w2);
    B->set_bf16(0);
}

static void attention_case(int Bn, int T, int nh, int hd, int bf16);

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
    matmul_case(67, 65, 66, 1); /* CUDA's bf16 copies (both sides >= 64) with tails past the last float4 */
    attention_case(2, 13, 3, 8, 1);
    attention_case(1, 70, 1, 72, 1);
    attention_case(2, 512, 8, 64, 1);
    /* head dimensions of CUDA's register-level forward, tiles cut short,
     * on inputs bf16 holds exactly (the tighter bound) */
    attention_case(2, 13, 3, 16, 2);
    attention_case(1, 70, 2, 32, 2);
    attention_case(1, 100, 1, 128, 2);
    attention_case(1, 1, 2, 48, 2);
    attention_case(2, 200, 2, 64, 2);
    attention_case(1, 40, 1, 144, 2); /* past 128: the forward on shared-memory tiles too */
    cr_assert_eq(B->set_bf16(0), 0);
    /* and back to fp32 */
    matmul_case(37, 72, 13, 0);
}

/* ---- rotary ---------------------------------------------------------- */

/* Rotary bounds for rows of nh heads of hd at positions pos(row): both
 * backends round cos a and sin a of the same double angle to float (u
 * each), then x0 c -/+ x1 s takes two products and a sum: each within
 * gamma(4) (|x0 cos a| + |x1 sin a|) (the extra u of gamma(5): the host's
 * own angle and the double cos, sin of either side, far below u). */
static double *rope_bounds(const float *x, int rows, int nh, int hd, int T, int pos0)
{
    int h2 = hd / 2;
    double *bnd = bnew((size_t)rows * nh * hd);
    for (int row = 0; row < rows; row++) {
        int t = T ? row % T : pos0 + row;
        for (int h = 0; h < nh; h++) {
            size_t o = ((size_t)row * nh + h) * hd;
            for (int j = 0; j < h2; j++) {
                double a = t * pow(10000.0, -2.0 * j / hd), c = fabs(cos(a)), sn = fabs(sin(a));
                double x0 = fabs(x[o + j]), x1 = fabs(x[o + j + h2]);
                bnd[o + j] = 2 * tu_gamma(5) * (x0 * c + x1 * sn);
                bnd[o + j + h2] = 2 * tu_gamma(5) * (x0 * sn + x1 * c);
            }
        }
    }
    return bnd;
}

static void rope_case(int Bn, int T, int nh, int hd)
{
    at("rope B=%d T=%d nh=%d hd=%d", Bn, T, nh, hd);
    size_t n = (size_t)Bn * T * nh * hd;
    tp *x = rnd(n, -2, 2);
    double *bx = rope_bounds(x->h, Bn * T, nh, hd, T, 0);
    BOTH be->rope_fwd(D(x), Bn, T, nh, hd);
    check("rope_fwd x", x, bx);
    tp *dx = rnd(n, -2, 2);
    double *bd = rope_bounds(dx->h, Bn * T, nh, hd, T, 0);
    BOTH be->rope_bwd(D(dx), Bn, T, nh, hd);
    check("rope_bwd dx", dx, bd);
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

/* Bounds of causal attention, per head, from q, k, v (rows of nh heads of
 * hd, ld C = nh hd), query rows i = 0..n-1 at positions pos0 + i over Tk
 * keys (attention_fwd: n = Tk = T, pos0 = 0); rho: B's products' bf16
 * rounding (0: fp32; A's always 0).  With sc = 1/sqrt(hd) and
 * S_ic = sc sum_j |q_ij k_cj| (|s_ic| <= S_ic), S_i = max_(c <= pos0+i):
 * - logits s = sc q.k: hd terms, the scale (alpha of the product) and the
 *   scale's own two roundings: within (gamma(hd + 3) + rho) S_ic;
 * - att = softmax over the row's t + 1 = pos0 + i + 1 logits: twice the
 *   logits' largest error, the exps' arguments s - max rounded (u 2 S_i)
 *   and the exps (U_EXP), in numerator and sum, the (t + 1)-term sum, 1/sum
 *   and the product:
 *       e_i = 2 (gamma(hd + 3) + rho) S_i + 4 u S_i + 2 U_EXP + gamma(t + 3)
 *   relative, per backend;
 * - y = att v: Tk terms (CUDA adds the masked zeros, exactly) with att's
 *   error: within (e_i + gamma(Tk + 1) + rho) sum_c att_ic |v_cj|.
 * - L = log sum_c exp s_c, the log-sum-exp a fused backend (B) saves in
 *   place of att (its running max and sum over tiles of at least 8 keys):
 *   the logits' error e_s = (gamma(hd + 3) + rho) S_i, the exps'
 *   arguments (4 u S_i), each exp and each rescaling of the running sum
 *   (two U_EXP per tile, t / 8 + 2 tiles), the sum (gamma(t + 3)), and the
 *   log and the final addition (3 u (S_i + log(t + 1)): |max| <= S_i and
 *   1 <= sum <= t + 1):
 *       b_L = e_s + 4 u S_i + (t / 4 + 4) U_EXP + gamma(t + 3) + 3 u (S_i + log(t + 1))
 * The backward (bw, n = Tk = T), at the forward's att as given (A's, read
 * by both), with P_tc = sum_j |dy_tj v_cj|, Q_t = sum_c att_tc P_tc and
 * DS_tc = sc att_tc (P_tc + Q_t) (|ds_tc| <= DS_tc):
 * - ds = att (dA - sum_c dA att) sc: dA an hd-term product (+ rho), the
 *   T-term dot, the subtraction, two products and sc's roundings: within
 *   e_ds = gamma(T + hd + 5) + rho of DS;
 * - dv = att^T dy: within (gamma(T + 1) + rho) sum_t att_tc |dy_tj|;
 * - dq = ds k, dk = ds^T q: T terms with ds's error: within
 *   (gamma(T + 1) + rho + e_ds) sum_c DS_tc |k_cj| (and with q).
 * A fused backend (fused != 0) forms att again as P = exp(s - L) from its
 * own L, within e_P = expm1(e_s + b_L + u (2 S_i + log(t + 1))) (1 + U_EXP)
 * + U_EXP relative, and takes sum_c dA att as D = dy.y from the y given
 * (A's, within c_y = e0 + gamma(T + 1) of sum_c att |v| per channel, so D
 * within (c_y + gamma(hd + 1)) Q_t); with e_P and c_y their largest over
 * the head's rows, B's part of e_ds is
 *   e_P + (1 + e_P) (gamma(hd + 2) + rho + c_y + gamma(hd + 1) + gamma(4))
 * and dv's gets e_P more; its y, 3 u (t / 8 + 2) more (the online
 * softmax's rescaling of o and l, one product and one sum a tile).
 * Each array gets A's bound plus B's. */
typedef struct {
    double *y, *att, *lse, *blse, *dq, *dk, *dv;
} att_bnd;

static void attention_bounds(att_bnd *b, const float *q, const float *k, const float *v, const float *dy,
                             const float *att, int Bn, int n, int pos0, int nh, int hd, double rho, int fused)
{
    int Tk = pos0 + n, C = nh * hd;
    double sc = 1.0 / sqrt((double)hd);
    size_t nq = (size_t)Bn * n * C, nk = (size_t)Bn * Tk * C;
    b->y = bnew(nq), b->att = bnew((size_t)Bn * nh * n * Tk), b->dq = b->dk = b->dv = NULL;
    b->lse = bnew((size_t)Bn * nh * n), b->blse = bnew((size_t)Bn * nh * n);
    if (dy)
        b->dq = bnew(nq), b->dk = bnew(nk), b->dv = bnew(nk);
    double *S = malloc((size_t)Tk * sizeof(double)), *al = malloc((size_t)Tk * sizeof(double));
    double *DS = dy ? malloc((size_t)n * Tk * sizeof(double)) : NULL;
    for (int bb = 0; bb < Bn; bb++)
        for (int h = 0; h < nh; h++) {
#define QX(i, j) ((((size_t)bb * n + (i)) * C) + (size_t)h * hd + (j))
#define KX(c, j) ((((size_t)bb * Tk + (c)) * C) + (size_t)h * hd + (j))
            /* attention_decode's att is nh x n x Tk (B = 1), attention_fwd's B x nh x T x T */
            double *ba = b->att + ((size_t)bb * nh + h) * n * Tk;
            double e_p = 0, c_y = 0; /* the head's largest e_P and c_y */
            for (int i = 0; i < n; i++) {
                int t = pos0 + i;
                double mx = -INFINITY, Si = 0, sum = 0;
                for (int c = 0; c <= t; c++) {
                    double s = 0, a = 0;
                    for (int j = 0; j < hd; j++) {
                        s += (double)q[QX(i, j)] * k[KX(c, j)];
                        a += fabs((double)q[QX(i, j)] * k[KX(c, j)]);
                    }
                    al[c] = sc * s, S[c] = sc * a;
                    mx = fmax(mx, al[c]), Si = fmax(Si, S[c]);
                }
                for (int c = 0; c <= t; c++)
                    sum += al[c] = exp(al[c] - mx);
                double e0 = 2 * tu_gamma(hd + 3) * Si + 4 * U * Si + 2 * U_EXP + tu_gamma(t + 3);
                double e1 = e0 + 2 * rho * Si;
                size_t li = ((size_t)bb * nh + h) * n + i;
                double e_s = (tu_gamma(hd + 3) + rho) * Si, lt = log(t + 1.0);
                b->lse[li] = mx + log(sum);
                b->blse[li] = e_s + 4 * U * Si + (t / 4 + 4) * U_EXP + tu_gamma(t + 3) + 3 * U * (Si + lt);
                e_p = fmax(e_p, expm1(e_s + b->blse[li] + U * (2 * Si + lt)) * (1 + U_EXP) + U_EXP);
                c_y = fmax(c_y, e0 + tu_gamma(Tk + 1));
                for (int c = 0; c <= t; c++) {
                    al[c] /= sum;
                    ba[(size_t)i * Tk + c] = (e0 + e1) * al[c];
                }
                double cy = e0 + e1 + 2 * tu_gamma(Tk + 1) + rho;
                if (fused) /* the online softmax rescales o and l once a tile (t / 8 + 2 tiles) */
                    cy += 3 * U * (t / 8 + 2);
                for (int j = 0; j < hd; j++) {
                    double m = 0;
                    for (int c = 0; c <= t; c++)
                        m += al[c] * fabs(v[KX(c, j)]);
                    b->y[QX(i, j)] = cy * m;
                }
            }
            if (!dy)
                continue;
            /* the backward, at the given att (n = Tk = T, pos0 = 0) */
            const float *A_ = att + ((size_t)bb * nh + h) * n * Tk;
            int T = n;
            double eb = 2 * tu_gamma(T + hd + 5) + rho, cv = 2 * tu_gamma(T + 1) + rho; /* A's plus B's */
            if (fused) {
                eb = tu_gamma(T + hd + 5) + e_p +
                     (1 + e_p) * (tu_gamma(hd + 2) + rho + c_y + tu_gamma(hd + 1) + tu_gamma(4));
                cv += e_p;
            }
            for (int t = 0; t < T; t++) {
                double Q = 0;
                for (int c = 0; c <= t; c++) {
                    double P = 0;
                    for (int j = 0; j < hd; j++)
                        P += fabs((double)dy[QX(t, j)] * v[KX(c, j)]);
                    DS[(size_t)t * T + c] = P;
                    Q += A_[(size_t)t * T + c] * P;
                }
                for (int c = 0; c <= t; c++)
                    DS[(size_t)t * T + c] = sc * A_[(size_t)t * T + c] * (DS[(size_t)t * T + c] + Q);
            }
            double cqk = 2 * tu_gamma(T + 1) + rho + eb;
            for (int t = 0; t < T; t++)
                for (int j = 0; j < hd; j++) {
                    double mq = 0, mk = 0, mv = 0;
                    for (int c = 0; c <= t; c++)
                        mq += DS[(size_t)t * T + c] * fabs(k[KX(c, j)]);
                    for (int r = t; r < T; r++) {
                        mk += DS[(size_t)r * T + t] * fabs(q[QX(r, j)]);
                        mv += A_[(size_t)r * T + t] * fabs(dy[QX(r, j)]);
                    }
                    b->dq[QX(t, j)] = cqk * mq;
                    b->dk[KX(t, j)] = cqk * mk;
                    b->dv[KX(t, j)] = cv * mv;
                }
#undef QX
#undef KX
        }
    free(S), free(al), free(DS);
}

/* B's log-sum-exps (the first Bn nh T floats of its att) against the exact
 * ones of the float inputs, within b_L */
static void check_lse(tp *att, const att_bnd *b, size_t rows)
{
    float *r = keep(malloc(att->n * sizeof(float)));
    B->download(r, att->b, att->n * sizeof(float));
    size_t worst = 0;
    double wq = -1;
    for (size_t i = 0; i < rows; i++) {
        double q = isfinite(r[i]) ? fabs(r[i] - b->lse[i]) / b->blse[i] : INFINITY;
        if (q > wq)
            wq = q, worst = i;
    }
    cr_expect(wq <= 1, "%s: attention_fwd log-sum-exp [%zu] of %zu: B %.9g, exact %.9g, bound %.3g", ctx, worst,
              rows, r[worst], b->lse[worst], b->blse[worst]);
}

/* Attention on both backends; where B saves log-sum-exps (a fused
 * backend: attention_state B nh T, not the CPU's B nh T T) those are
 * checked against the exact ones, and each backend's backward runs from
 * its own forward's state; where both save probabilities, these are
 * compared and B's backward runs from A's, as every other op. */
/* t's values rounded to bf16 (to nearest, ties to even), on both backends */
static void round_bf16(tp *t)
{
    for (size_t i = 0; i < t->n; i++) {
        uint32_t u;
        memcpy(&u, &t->h[i], sizeof u);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&t->h[i], &u, sizeof u);
    }
    A->upload(t->a, t->h, t->n * sizeof(float));
    B->upload(t->b, t->h, t->n * sizeof(float));
}

/* bf16: 0 fp32 products; 1 bf16 products (RHO_BF16: any rounding of both
 * operands, as cuBLAS may); 2 bf16 products on inputs that bf16 holds
 * exactly (q, k, v, dy rounded first): then only the kernels' own operands
 * are rounded, the probabilities and ds, one operand of a product, to
 * nearest: within 2^-9 relative, a bound tight enough to show a wrong
 * fragment layout or mask that RHO_BF16 would pass; 3 the same with q, k,
 * v and y in bf16 storage (the bf16_storage test), as the model runs
 * attention under bf16: q and k rotated in place first (rope_fwd), y
 * written rounded to bf16, the backward reading all four. */
static void attention_case(int Bn, int T, int nh, int hd, int bf16)
{
    at("attention%s B=%d T=%d nh=%d hd=%d",
       bf16 == 3 ? " in bf16 storage" : bf16 == 2 ? " bf16 (exact inputs)" : bf16 ? " bf16" : "", Bn, T, nh, hd);
    double rho = bf16 >= 2 ? 0x1p-9 : bf16 ? RHO_BF16 : 0;
    int st = bf16 == 3;
    size_t n = (size_t)Bn * T * nh * hd, sa = A->attention_state(Bn, T, nh), sb = B->attention_state(Bn, T, nh);
    int fused = B->attention_state(1, 2, 1) != A->attention_state(1, 2, 1); /* (at T = 1 both are B nh) */
    cr_assert(sa == (size_t)Bn * nh * T * T && (!fused || sb == (size_t)Bn * nh * T),
              "%s: attention_state: A %zu, B %zu floats", ctx, sa, sb);
    tp *q = st ? stored(n, -1.5f, 1.5f) : rnd(n, -1.5f, 1.5f), *k = st ? stored(n, -1.5f, 1.5f) : rnd(n, -1.5f, 1.5f);
    tp *v = st ? stored(n, -1, 1) : rnd(n, -1, 1), *y = st ? stored(n, -7, 7) : junk(n), *att = junk(sa);
    if (bf16 == 2)
        round_bf16(q), round_bf16(k), round_bf16(v);
    for (int i = 0; st && i < 2; i++) {
        tp *x = i ? k : q;
        double *bx = rope_bounds(x->h, Bn * T, nh, hd, T, 0);
        BOTH be->rope_fwd(D(x), Bn, T, nh, hd);
        check(i ? "rope_fwd k" : "rope_fwd q", x, rounded_bounds(x, bx));
        take16(x);
    }
    att_bnd bf, bb;
    attention_bounds(&bf, q->h, k->h, v->h, NULL, NULL, Bn, T, 0, nh, hd, rho, fused);
    BOTH be->attention_fwd(&(ar_attention){D(q), D(k), D(v), D(att), Bn, T, nh, hd}, D(y));
    check("attention_fwd y", y, st ? rounded_bounds(y, bf.y) : bf.y);
    if (fused) {
        check_lse(att, &bf, sb);
    } else {
        check("attention_fwd att", att, bf.att); /* zeros above the diagonal included */
        take(att);
    }
    if (st) /* the fused backward's D = dy.y reads it */
        take16(y);
    else
        take(y);
    tp *dy = rnd(n, -1, 1), *dq = junk(n), *dk = junk(n), *dv = junk(n), *datt = junk(sa);
    if (bf16 >= 2)
        round_bf16(dy);
    attention_bounds(&bb, q->h, k->h, v->h, dy->h, res_a(att), Bn, T, 0, nh, hd, rho, fused);
    BOTH be->attention_bwd(&(ar_attention){D(q), D(k), D(v), D(att), Bn, T, nh, hd}, D(y), D(dy), D(dq), D(dk),
                           D(dv), D(datt));
    check("attention_bwd dq", dq, bb.dq);
    check("attention_bwd dk", dk, bb.dk);
    check("attention_bwd dv", dv, bb.dv);
    release();
}

Test(backend_ops, attention)
{
    NEED_B();
    attention_case(2, 13, 3, 8, 0);
    attention_case(1, 37, 2, 24, 0);
    attention_case(1, 37, 3, 6, 0); /* hd not a multiple of 4: tiles loaded a float at a time */
    attention_case(1, 1, 2, 4, 0);
    attention_case(1, 70, 1, 72, 0);
    attention_case(2, 512, 8, 64, 0);
    attention_case(1, 20, 1, 128, 0);
}

/* ---- incremental decoding: rotary at positions, attention on a cache -- */

/* n new rows at positions pos0..pos0+n-1 of a cache of Tk = pos0+n rows.
 * rope_fwd_at: both backends take the angle in double (rope_bounds).
 * attention_decode: y and the probabilities, from garbage (both "=";
 * attention_bounds with the n query rows at pos0..).
 * matvec_fwd: a decoding step's linear layer, in = nh*hd: an in-term sum
 * on either side (sgemv, cuBLAS), 2 gamma(in + 1) sum_k |W_ok x_k|. */
static void decode_case(int n, int pos0, int nh, int hd)
{
    at("decode n=%d pos0=%d nh=%d hd=%d", n, pos0, nh, hd);
    int C = nh * hd, Tk = pos0 + n;
    tp *x = rnd((size_t)n * C, -2, 2);
    double *bx = rope_bounds(x->h, n, nh, hd, 0, pos0);
    BOTH be->rope_fwd_at(D(x), n, pos0, nh, hd);
    check("rope_fwd_at x", x, bx);
    tp *q = rnd((size_t)n * C, -1.5f, 1.5f), *k = rnd((size_t)Tk * C, -1.5f, 1.5f);
    tp *v = rnd((size_t)Tk * C, -1, 1), *y = junk((size_t)n * C), *att = junk((size_t)nh * n * Tk);
    att_bnd ba;
    attention_bounds(&ba, q->h, k->h, v->h, NULL, NULL, 1, n, pos0, nh, hd, 0, 0);
    BOTH be->attention_decode(D(y), D(att), D(q), D(k), D(v), n, pos0, nh, hd);
    check("attention_decode y", y, ba.y);
    check("attention_decode att", att, ba.att); /* zeros right of the diagonal included */
    /* one token's linear layer: out = W x, into garbage */
    int outd = 3 * hd + 1;
    tp *W = rnd((size_t)outd * C, -1, 1), *xv = rnd((size_t)C, -1, 1), *o = junk((size_t)outd);
    double *bo = bnew(outd);
    for (int r = 0; r < outd; r++) {
        for (int j = 0; j < C; j++)
            bo[r] += fabs((double)W->h[(size_t)r * C + j] * xv->h[j]);
        bo[r] *= 2 * tu_gamma(C + 1);
    }
    BOTH be->matvec_fwd(D(o), D(xv), D(W), C, outd);
    check("matvec_fwd out", o, bo);
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

/* With sg = sigmoid(a) = 1/(1 + exp(-a)): its exp's error is damped by
 * exp(-a)/(1 + exp(-a)) <= 1, the sum and the reciprocal add u each, so
 * sg is within U_EXP + gamma(2) relative on each backend.
 * - out = a sg up: two products more: (U_EXP + gamma(4)) |out|;
 * - dup = dout a sg: the same;
 * - dgate = dout up sg F, F = 1 + a (1 - sg): F carries sg's error times
 *   |a| and three roundings, within (U_EXP + gamma(3)) (1 + |a|); with
 *   sg's and three products: (2 U_EXP + gamma(8)) |dout up sg| (1 + |a|).
 * Each backend once, so twice these (one u more for second-order terms). */
static void swiglu_bounds(const tp *gate, const tp *up, const tp *dout, double **bo, double **bg, double **bu)
{
    size_t n = gate->n;
    *bo = bnew(n), *bg = bnew(n), *bu = bnew(n);
    for (size_t i = 0; i < n; i++) {
        double a = gate->h[i], sg = 1 / (1 + exp(-a)), go = fabs(dout->h[i]), u = fabs(up->h[i]);
        (*bo)[i] = 2 * (U_EXP + tu_gamma(5)) * fabs(a * sg) * u;
        (*bu)[i] = 2 * (U_EXP + tu_gamma(5)) * go * fabs(a * sg);
        (*bg)[i] = 2 * (2 * U_EXP + tu_gamma(9)) * go * u * sg * (1 + fabs(a));
    }
}

static void swiglu_case(size_t n)
{
    at("swiglu n=%zu", n);
    tp *gate = rnd(n, -5, 5), *up = rnd(n, -2, 2), *out = junk(n);
    tp *dout = rnd(n, -1, 1), *dgate = junk(n), *dup = junk(n);
    double *bo, *bg, *bu;
    swiglu_bounds(gate, up, dout, &bo, &bg, &bu);
    BOTH be->swiglu_fwd(D(out), D(gate), D(up), n);
    check("swiglu_fwd out", out, bo);
    BOTH be->swiglu_bwd(D(dgate), D(dup), D(dout), D(gate), D(up), n);
    check("swiglu_bwd dgate", dgate, bg);
    check("swiglu_bwd dup", dup, bu);
    release();
}

Test(backend_ops, swiglu)
{
    NEED_B();
    swiglu_case(1);
    swiglu_case(37 * 72);
    swiglu_case(1024 * 512 + 3);
}

/* ---- bf16 storage (lib/backend.h, alloc_act) -------------------------
 * Under set_bf16(1) B's alloc_act holds bf16 values (the CUDA backend);
 * A's buffers are floats, and so are B's where B has no alloc_act (the
 * CPU backend: the same code on both sides, equal results).  An input in
 * bf16 storage holds bf16 values on both backends (rounded on the host),
 * so both read the same numbers; an output in it is B's fp32 result
 * rounded once to bf16, within 2^-8 of it relative (to nearest with 8
 * significant bits: half of the spacing 2^-7 |x|, at most), so against
 * A's fp32 value a
 *     |a - b| <= bnd + 2^-8 (|a| + bnd)
 * with bnd the bound of the fp32 result.  The MLP's chain, as the model
 * runs it with its gate, up and act in bf16 storage: gate = x Wg^T and up
 * = x Wu^T into storage, act = swiglu(gate, up) from and into storage,
 * out = act Wd^T and its backward from act in storage, swiglu's backward
 * from gate and up in storage; each op on A's rounded result of the one
 * before (take16), so each is compared on its own. */
static void bf16_storage_case(int N, int d, int F)
{
    at("bf16 storage N=%d d=%d F=%d", N, d, F);
    size_t nf = (size_t)N * F, nd = (size_t)N * d;
    tp *x = rnd(nd, -1, 1), *Wg = rnd((size_t)F * d, -1, 1), *Wu = rnd((size_t)F * d, -1, 1);
    tp *Wd = rnd((size_t)d * F, -1, 1), *dout = rnd(nd, -1, 1), *dact0 = rnd(nf, -1, 1);
    tp *gate = stored(nf, -7, 7), *up = stored(nf, -7, 7), *act = stored(nf, -7, 7); /* garbage */
    double *bo, *bx, *bw;
    /* gate, up = x W^T into storage */
    matmul_bounds(x, Wg, dact0, NULL, NULL, N, d, F, RHO_BF16, &bo, &bx, &bw);
    BOTH be->matmul_fwd(D(gate), D(x), D(Wg), N, d, F);
    check("matmul_fwd into bf16 storage: gate", gate, rounded_bounds(gate, bo));
    matmul_bounds(x, Wu, dact0, NULL, NULL, N, d, F, RHO_BF16, &bo, &bx, &bw);
    BOTH be->matmul_fwd(D(up), D(x), D(Wu), N, d, F);
    check("matmul_fwd into bf16 storage: up", up, rounded_bounds(up, bo));
    take16(gate), take16(up);
    /* act = swiglu(gate, up), from and into storage (swiglu_case's bounds) */
    double *bs, *bg, *bu;
    swiglu_bounds(gate, up, dact0, &bs, &bg, &bu);
    BOTH be->swiglu_fwd(D(act), D(gate), D(up), nf);
    check("swiglu_fwd in bf16 storage: act", act, rounded_bounds(act, bs));
    take16(act);
    /* out = act Wd^T from storage, and its backward (dx: dact) */
    tp *out = junk(nd), *dact = rnd(nf, -1, 1), *dWd = rnd((size_t)d * F, -1, 1);
    matmul_bounds(act, Wd, dout, dact->h, dWd->h, N, F, d, RHO_BF16, &bo, &bx, &bw);
    BOTH be->matmul_fwd(D(out), D(act), D(Wd), N, F, d);
    check("matmul_fwd from bf16 storage: out", out, bo);
    BOTH be->matmul_bwd(D(dact), D(dWd), D(dout), D(act), D(Wd), 0, N, F, d);
    check("matmul_bwd from bf16 storage: dact", dact, bx);
    check("matmul_bwd from bf16 storage: dWd", dWd, bw);
    /* swiglu's backward from gate and up in storage */
    tp *dgate = junk(nf), *dup = junk(nf);
    BOTH be->swiglu_bwd(D(dgate), D(dup), D(dact0), D(gate), D(up), nf);
    check("swiglu_bwd from bf16 storage: dgate", dgate, bg);
    check("swiglu_bwd from bf16 storage: dup", dup, bu);
    release();
}

/* The residual rows' ops in bf16 storage (the depth schemes' P_l under
 * bf16): the embedding into storage and copies into it (A's fp32 value
 * rounded once), copies out of it and between stored buffers (exact),
 * sums into it (A's fp32 sum rounded once) or from it into fp32 (the same
 * fp32 sum), and the sum of squares of stored values (the elementwise
 * test's bound: the same values on both). */
static void rows_storage_case(int N, int d, int V)
{
    size_t n = (size_t)N * d;
    at("bf16 storage rows N=%d d=%d", N, d);
    double *zero = bnew(n);
    tp *tok = ints(N, V), *wte = rnd((size_t)V * d, -1, 1), *p0 = stored(n, -7, 7);
    BOTH be->embedding_fwd(D(p0), DI(tok), D(wte), N, d);
    check("embedding_fwd into bf16 storage", p0, rounded_bounds(p0, zero));
    take16(p0);
    tp *x = rnd(n, -2, 2), *s1 = stored(n, -7, 7), *f1 = junk(n), *s2 = stored(n, -7, 7);
    BOTH be->copy(D(s1), D(x), n);
    check("copy fp32 into bf16 storage", s1, rounded_bounds(s1, zero));
    take16(s1);
    BOTH be->copy(D(f1), D(s1), n);
    check_eq("copy out of bf16 storage", f1);
    BOTH be->copy(D(s2), D(s1), n);
    check_eq("copy between bf16 storage", s2);
    BOTH be->add(D(s2), D(p0), n);
    check("add bf16 storage into bf16 storage", s2, rounded_bounds(s2, zero));
    take16(s2);
    BOTH be->add(D(s2), D(x), n);
    check("add fp32 into bf16 storage", s2, rounded_bounds(s2, zero));
    take16(s2);
    BOTH be->add(D(f1), D(s2), n);
    check_eq("add bf16 storage into fp32", f1);
    double q[2] = {0, 0}, ss = 0;
    BOTH q[side_] = be->sumsq(D(s2), n);
    for (size_t i = 0; i < n; i++)
        ss += (double)s2->h[i] * s2->h[i];
    check_scalar("sumsq of bf16 storage", q[0], q[1], 2 * tu_gamma_d(n) * ss);
    release();
}

Test(backend_ops, bf16_storage)
{
    NEED_B();
    int rc = B->set_bf16(1);
    cr_assert(rc == 0 || b_is_cpu, "set_bf16(1) failed on '%s'", B->name);
    cr_assert(b_is_cpu || B->alloc_act, "'%s' has bf16 products and no bf16 storage", B->name);
    b_stores = rc == 0 && B->alloc_act != NULL;
    bf16_storage_case(13, 72, 37);  /* sides under 64: no bf16 copies otherwise */
    bf16_storage_case(1, 5, 3);
    bf16_storage_case(67, 65, 66);  /* the copies' shapes, tails past the last float4 */
    bf16_storage_case(256, 128, 344);
    rmsnorm_case(13, 72, 1);
    rmsnorm_case(1024, 512, 1);
    rmsnorm_case(13, 72, 3);
    rmsnorm_case(37, 20, 2);
    attention_case(2, 13, 3, 16, 3);  /* the register kernels, tiles cut short */
    attention_case(1, 70, 2, 32, 3);
    attention_case(1, 100, 1, 128, 3); /* forward on registers, backward on shared memory */
    attention_case(1, 37, 2, 24, 3);   /* hd not a multiple of 16: fp32 tiles from bf16 */
    attention_case(1, 37, 3, 6, 3);    /* hd not a multiple of 4: loaded a value at a time */
    attention_case(2, 200, 2, 64, 3);
    rows_storage_case(13, 72, 50);
    rows_storage_case(1024, 512 + 3, 256);
    b_stores = 0;
    cr_assert_eq(B->set_bf16(0), 0);
    /* storage follows the setting when it is made: fp32 again */
    if (!b_is_cpu) {
        float *p = ar_alloc_act(B, 100), h[100], back[100];
        tu_fill_uniform(h, 100, -1, 1, 77);
        B->upload(p, h, sizeof h);
        B->copy(p, p, 100); /* an op that takes no bf16 storage: p is fp32 now */
        B->download(back, p, sizeof back);
        cr_expect(memcmp(h, back, sizeof h) == 0, "alloc_act after set_bf16(0) is not fp32");
        B->free(p);
    }
}

/* Any op not marked "bf16 storage" in lib/ops.def stops, naming itself,
 * when given such a buffer, rather than read bf16 bytes as floats: a child
 * process gives it one and must exit with status 1. */
static void refused(void (*give)(float *stored_buf, float *plain, size_t n))
{
    NEED_B();
    if (b_is_cpu || B->set_bf16(1) != 0 || !B->alloc_act)
        cr_skip_test("'%s' has no bf16 storage", B->name);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        size_t n = 256;
        float *s16 = B->alloc_act(n), *p = B->alloc(n * sizeof(float));
        give(s16, p, n);
        B->sync();
        _exit(0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "the op took a buffer of bf16 storage (status %d)", st);
    B->set_bf16(0);
}
static void give_scale(float *s16, float *p, size_t n) { (void)p, B->scale(s16, 2.0f, n); }
static void give_weight(float *s16, float *p, size_t n) { B->matmul_fwd(p, p, s16, 16, 16, (int)(n / 16)); }
static void give_mixed_swiglu(float *s16, float *p, size_t n) { B->swiglu_fwd(p, s16, s16, n); }
static void give_listed(float *s16, float *p, size_t n)
{
    const float *x[2] = {p, s16};
    B->wsum_fwd(p, x, p, 2, 0, n);
}
static void give_mixed(float *s16, float *p, size_t n)
{
    float *y[1] = {p};
    const float *x[1] = {s16};
    B->wmix_fwd(&(ar_wmix){.p = 1, .n = 1, .C = p, .ldc = 1, .len = n}, y, x);
}
Test(backend_ops, bf16_storage_refused_by_scale) { refused(give_scale); }
Test(backend_ops, bf16_storage_refused_in_a_list) { refused(give_listed); }
Test(backend_ops, bf16_storage_refused_in_a_wmix_list) { refused(give_mixed); }
Test(backend_ops, bf16_storage_refused_as_a_weight) { refused(give_weight); }
Test(backend_ops, bf16_storage_refused_mixed_in_swiglu) { refused(give_mixed_swiglu); }

/* ---- cross-entropy --------------------------------------------------- */

/* Per row, on each backend: e_c = exp(z_c - max) in float, within
 * U_EXP + u |z_c - max| relative (the argument's rounding); their sum in
 * double within the mean of those, weighted by p (eb), plus gamma_d(V);
 * p_c = e_c (float)(1/sum): two roundings more:
 *     |dp_c| <= (U_EXP + u |z_c - max| + eb + gamma(2) + gamma_d(V + 1)) p_c;
 * loss = log(sum) - (z_t - max) (double) rounded to float: log's argument
 * within eb + gamma_d(V), so the loss within that plus gamma_d(4) (1 + |loss|)
 * and u |loss|.  The summed loss: the N losses' bounds and the double sums
 * of either side, 2 gamma_d(N) sum |loss|.  The backward, scale * p or
 * scale * (p - 1) per element on both, is the same correctly rounded
 * operations: equal. */
static void xent_case(int N, int V)
{
    at("xent N=%d V=%d", N, V);
    size_t nv = (size_t)N * V;
    tp *logits = rnd(nv, -6, 6), *tg = ints(N, V), *losses = junk(N), *probs = junk(nv);
    double *bp = bnew(nv), *bl = bnew(N), btot = 0, ltot = 0;
    for (int i = 0; i < N; i++) {
        const float *z = logits->h + (size_t)i * V;
        double mx = -INFINITY, sum = 0, eb = 0;
        for (int c = 0; c < V; c++)
            mx = fmax(mx, z[c]);
        for (int c = 0; c < V; c++)
            sum += exp(z[c] - mx);
        for (int c = 0; c < V; c++)
            eb += exp(z[c] - mx) / sum * (U_EXP + U * fabs(z[c] - mx));
        eb += tu_gamma_d(V);
        for (int c = 0; c < V; c++)
            bp[(size_t)i * V + c] = 2 * (U_EXP + U * fabs(z[c] - mx) + eb + tu_gamma(2) + tu_gamma_d(V + 1)) *
                                    exp(z[c] - mx) / sum;
        double l = log(sum) - (z[((const int32_t *)tg->h)[i]] - mx);
        bl[i] = 2 * (eb * (1 + eb) + tu_gamma_d(4) * (1 + fabs(l)) + U * fabs(l));
        btot += bl[i], ltot += fabs(l);
    }
    btot += 2 * tu_gamma_d(N) * ltot;
    double s[2] = {0, 0}, *sum[2] = {A->alloc(sizeof(double)), B->alloc(sizeof(double))};
    BOTH be->xent_fwd(D(losses), D(probs), D(logits), DI(tg), N, V, sum[side_]);
    A->download(&s[0], sum[0], sizeof(double));
    B->download(&s[1], sum[1], sizeof(double));
    A->free(sum[0]), B->free(sum[1]);
    check("xent_fwd losses", losses, bl);
    check("xent_fwd probs", probs, bp);
    check_scalar("xent_fwd sum", s[0], s[1], btot);
    take(probs);
    float scale = 1.0f / N;
    tp *dl = junk(nv), *inplace = dup_tp(probs);
    BOTH be->xent_bwd(D(dl), D(probs), DI(tg), scale, N, V);
    check_eq("xent_bwd dlogits", dl);
    BOTH be->xent_bwd(D(inplace), D(inplace), DI(tg), scale, N, V);
    check_eq("xent_bwd in place dlogits", inplace);
    /* xent_fwd_bwd: on each backend the bits of its own xent_fwd then
     * xent_bwd, into a buffer of its own and in place of the logits */
    tp *lr = junk(N), *pr = junk(nv), *dr = junk(nv), *lf = junk(N), *df = junk(nv), *li = junk(N),
       *ip = dup_tp(logits);
#define SIDE(t) (side ? (t)->b : (t)->a)
    for (int side = 0; side < 2; side++) {
        const ar_backend *be = side ? B : A;
        const int32_t *T = (const int32_t *)SIDE(tg);
        double *ds = be->alloc(3 * sizeof(double)), s3[3];
        be->xent_fwd(SIDE(lr), SIDE(pr), SIDE(logits), T, N, V, ds);
        be->xent_bwd(SIDE(dr), SIDE(pr), T, scale, N, V);
        be->xent_fwd_bwd(SIDE(lf), SIDE(df), SIDE(logits), T, N, V, scale, ds + 1);
        be->xent_fwd_bwd(SIDE(li), SIDE(ip), SIDE(ip), T, N, V, scale, ds + 2);
        const tp *same[3][2] = {{dr, df}, {dr, ip}, {lr, lf}}, *lo[2] = {lr, li};
        for (int k = 0; k < 4; k++) {
            const tp *x = k < 3 ? same[k][0] : lo[0], *y = k < 3 ? same[k][1] : lo[1];
            float *hx = keep(malloc(x->n * sizeof(float))), *hy = keep(malloc(x->n * sizeof(float)));
            be->download(hx, SIDE(x), x->n * sizeof(float));
            be->download(hy, SIDE(y), x->n * sizeof(float));
            cr_expect(memcmp(hx, hy, x->n * sizeof(float)) == 0,
                      "%s: %s: xent_fwd_bwd (%s) differs from xent_fwd then xent_bwd", ctx, be->name,
                      (const char *[]){"dlogits", "dlogits in place", "losses", "losses in place"}[k]);
        }
        be->download(s3, ds, sizeof s3);
        cr_expect(s3[0] == s3[1] && s3[1] == s3[2], "%s: %s: sums %.17g, %.17g, %.17g", ctx, be->name, s3[0],
                  s3[1], s3[2]);
        be->free(ds);
    }
#undef SIDE
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

/* A step's record on both backends (r uploaded to each) */
typedef struct {
    ar_step_rec *d[2];
} recs;

static recs recs_of(const ar_step_rec *r)
{
    recs x = {{A->alloc(sizeof *r), B->alloc(sizeof *r)}};
    A->upload(x.d[0], r, sizeof *r);
    B->upload(x.d[1], r, sizeof *r);
    return x;
}

static void recs_read(recs *x, ar_step_rec out[2])
{
    A->download(&out[0], x->d[0], sizeof out[0]);
    B->download(&out[1], x->d[1], sizeof out[1]);
    A->free(x->d[0]), B->free(x->d[1]);
}

/* The same float expression on both backends (the bias corrections bc1,
 * bc2 in the record, computed on the host in double and rounded), FMA-contracted or
 * not; per element, each backend:
 * - m = b1 m + (1 - b1) g gs (1 - b1 exact): within gamma(4) Mt,
 *   Mt = b1 |m| + (1 - b1) |g gs|;
 * - v = b2 v + (1 - b2) (g gs)^2, positive terms: within gamma(6) v;
 * - p -= lr (mh / (sqrt(vh) + eps) + wd p), mh = m / bc1, vh = v / bc2:
 *   mh within gamma(5) Mt / bc1; the denominator D within gamma(7)/2 + 2 u
 *   relative (half of vh's, the root, the + eps); the quotient q, the sum
 *   with wd p, the product with lr and the subtraction: within
 *   lr (gamma(5) Mt / (bc1 D) + gamma(6) |q| + gamma(3) wd |p|) + u |p'|.
 * Twice each (both backends). */
static void adamw_case(size_t n, long t)
{
    at("adamw n=%zu t=%ld", n, t);
    tp *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 1e-4f, 1e-2f);
    float gs = 0.8f, lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    float bc1 = (float)(1.0 - pow((double)b1, (double)t)), bc2 = (float)(1.0 - pow((double)b2, (double)t));
    double *bp = bnew(n), *bm = bnew(n), *bv = bnew(n);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g->h[i] * gs, Mt = b1 * fabs(m->h[i]) + (1 - (double)b1) * fabs(gi);
        double mi = b1 * (double)m->h[i] + (1 - (double)b1) * gi;
        double vi = b2 * (double)v->h[i] + (1 - (double)b2) * gi * gi;
        double D = sqrt(vi / bc2) + eps, q = mi / bc1 / D, pn = p->h[i] - lr * (q + wd * (double)p->h[i]);
        bm[i] = 2 * tu_gamma(4) * Mt;
        bv[i] = 2 * tu_gamma(6) * vi;
        bp[i] = 2 * (lr * (tu_gamma(5) * Mt / (bc1 * D) + tu_gamma(6) * fabs(q) + tu_gamma(3) * wd * fabs(p->h[i])) +
                     U * fabs(pn));
    }
    ar_adamw_hparams hp = {.lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .wd = wd};
    ar_step_rec r = {.t = t, .gscale = gs, .bc1 = bc1, .bc2 = bc2}, out[2];
    recs rr = recs_of(&r);
    BOTH be->adamw(D(p), D(g), D(m), D(v), n, &hp, rr.d[side_]);
    recs_read(&rr, out);
    cr_expect(out[0].bad_param == 0 && out[1].bad_param == 0, "%s: adamw flagged a finite update", ctx);
    check("adamw p", p, bp);
    check("adamw m", m, bm);
    check("adamw v", v, bv);
    /* a skipped step: nothing moves; a gradient of inf: the flag */
    take(p); /* p->h: A's result, now on both */
    r.skip = 1;
    rr = recs_of(&r);
    BOTH be->adamw(D(p), D(g), D(m), D(v), n, &hp, rr.d[side_]);
    recs_read(&rr, out);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    A->download(pa, p->a, n * sizeof(float));
    B->download(pb, p->b, n * sizeof(float));
    cr_expect(memcmp(pa, p->h, n * sizeof(float)) == 0 && memcmp(pb, p->h, n * sizeof(float)) == 0,
              "%s: a skipped adamw step changed p", ctx);
    r.skip = 0;
    float inf = INFINITY;
    A->upload(g->a + n / 2, &inf, sizeof inf);
    B->upload(g->b + n / 2, &inf, sizeof inf);
    rr = recs_of(&r);
    BOTH be->adamw(D(p), D(g), D(m), D(v), n, &hp, rr.d[side_]);
    recs_read(&rr, out);
    cr_expect(out[0].bad_param == 1 && out[1].bad_param == 1, "%s: a non-finite parameter not flagged (A %d, B %d)",
              ctx, out[0].bad_param, out[1].bad_param);
    free(pa), free(pb);
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

/* ---- a step's decision ------------------------------------------------ */

/* step_check on both backends: the same double operations in the same
 * order (sums, a division, sqrt, the clipping quotient, all correctly
 * rounded), so equal records, but for the bias corrections: pow in double
 * is within 2 ulp on CUDA, which may move the float rounding of 1 - b^t by
 * one float ulp (u relative, as 1 - b^t >= 0.05 here). */
static void step_check_case(int Acount, int nc, size_t nsums, int norm_given, double clip, long t0)
{
    at("step_check A=%d nc=%d nsums=%zu%s clip=%g", Acount, nc, nsums, norm_given ? " norm given" : "", clip);
    size_t np = (size_t)Acount * nc;
    double *hp = malloc(np * sizeof(double)), *hs = malloc(nsums * sizeof(double));
    float u[2];
    for (size_t i = 0; i < np; i++) {
        tu_fill_uniform(u, 1, 0, 5000, seed++);
        hp[i] = u[0] * 1.000001;
    }
    for (size_t i = 0; i < nsums; i++) {
        tu_fill_uniform(u, 1, 0, 3, seed++);
        hs[i] = (double)u[0] * u[0] / 7;
    }
    double *dp[2] = {A->alloc(np * sizeof(double)), B->alloc(np * sizeof(double))};
    double *ds[2] = {A->alloc(nsums * sizeof(double)), B->alloc(nsums * sizeof(double))};
    A->upload(dp[0], hp, np * sizeof(double)), B->upload(dp[1], hp, np * sizeof(double));
    A->upload(ds[0], hs, nsums * sizeof(double)), B->upload(ds[1], hs, nsums * sizeof(double));
    ar_step_rec r = {.t = t0, .bad_param = 1}, out[2];
    recs rr = recs_of(&r);
    BOTH
    {
        ar_step_check c = {.parts = dp[side_], .A = Acount, .nc = nc, .N = 4096, .sums = ds[side_],
                           .nsums = nsums, .norm_given = norm_given, .clip = clip, .b1 = 0.9f, .b2 = 0.95f};
        be->step_check(&c, rr.d[side_]);
    }
    recs_read(&rr, out);
    cr_expect(out[0].loss == out[1].loss && out[0].gnorm == out[1].gnorm && out[0].gscale == out[1].gscale &&
                  out[0].t == out[1].t && out[0].skip == out[1].skip && out[1].bad_param == 0 &&
                  out[1].t == t0 + 1,
              "%s: A loss %.17g norm %.17g scale %.9g t %lld; B %.17g %.17g %.9g %lld", ctx, out[0].loss,
              out[0].gnorm, out[0].gscale, (long long)out[0].t, out[1].loss, out[1].gnorm, out[1].gscale,
              (long long)out[1].t);
    cr_expect(fabs(out[0].bc1 - out[1].bc1) <= U * out[0].bc1 && fabs(out[0].bc2 - out[1].bc2) <= U * out[0].bc2,
              "%s: bias corrections A %.9g %.9g, B %.9g %.9g", ctx, out[0].bc1, out[0].bc2, out[1].bc1, out[1].bc2);
    A->free(dp[0]), B->free(dp[1]), A->free(ds[0]), B->free(ds[1]);
    free(hp), free(hs);
}

Test(backend_ops, step_check)
{
    NEED_B();
    step_check_case(1, 1, 1, 0, 1.0, 0);
    step_check_case(4, 3, 7600, 0, 1.0, 41);
    step_check_case(2, 8, 100, 0, 0, 7);
    step_check_case(1, 1, 1, 1, 0.5, 1000);
}

/* ---- depth attention: sources and queries ----------------------------- */

/* n sources with growing scales, as in a residual stream */
/* The sources in bf16 storage, as the depth schemes' residual rows under
 * bf16 (depth_two_phase_bf16_storage) */
static int src_stored;

static void sources(tp **src, int n, int N, int d)
{
    size_t nd = (size_t)N * d;
    for (int s = 0; s < n; s++) {
        float *h = malloc(nd * sizeof(float));
        tu_fill_uniform(h, nd, -1.5f, 1.5f, seed++);
        for (size_t i = 0; i < nd; i++)
            h[i] *= 0.5f + 0.7f * s;
        src[s] = src_stored ? stored_from(h, nd) : from_host(h, nd);
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

/* ---- depth-attention bounds (one backend's; the checks add A's and B's) --
 *
 * A source x (a row of d) of a mixer with query u = w g (w without key
 * norm: g NULL, r = 1) at one token: r = rstd(x), z = r (u.x),
 * UX = sum_j |u_j x_j|, zeta = r UX >= |z|.  A backend's logit is within
 * ez = (gamma(d + 2) + RSTD_REL(d)) zeta (u = w g rounded, the d-term dot,
 * the product with r; r's own error; no RSTD_REL without key norm).
 * Softmax weights over n logits with errors at most ezm, every logit, lse
 * and LSE below Zl = max zeta + log n in magnitude, reached through at most
 * ns exps or logs (one-phase CPU: 1; CUDA's online softmax: one per source
 * and a rescale per new maximum; two phases: phase 1's and phase 2's exps
 * and logs): a softmax moves by at most twice its logits' largest error,
 * each exp or log adds U_EXP (a log 2 u |log| <= 2 u Zl) and its
 * argument's rounding (a difference below 2 Zl), the sums of positive
 * terms, products and divisions gamma(2n + 6):
 *     sm_eps = 2 ezm + ns (U_EXP + 2 u (2 Zl + 1)) + gamma(2n + 6)
 * relative.  A sigmoid weight: ez + U_EXP + gamma(2) (its exp's error is
 * damped by exp(-z)/(1 + exp(-z)) <= 1). */
typedef struct {
    double r, z, UX, zeta, ez;
} srcst;

static void src_stat(srcst *st, const float *x, const double *u, int kn, int d)
{
    double ss = 0, dot = 0, a = 0;
    for (int j = 0; j < d; j++) {
        ss += (double)x[j] * x[j];
        dot += u[j] * x[j];
        a += fabs(u[j] * x[j]);
    }
    st->r = kn ? 1.0 / sqrt(ss / d + (double)AR_RMS_EPS) : 1.0;
    st->z = st->r * dot, st->UX = a, st->zeta = st->r * a;
    st->ez = (tu_gamma(d + 2) + (kn ? RSTD_REL(d) : 0)) * st->zeta;
}

static double sm_eps(double ezm, double Zl, int ns, int n)
{
    return 2 * ezm + ns * (U_EXP + 2 * U * (2 * Zl + 1)) + tu_gamma(2 * n + 6);
}

/* u = w g (w without g) in double */
static double *query_u(const float *w, const float *g, int d)
{
    double *u = bnew(d);
    for (int j = 0; j < d; j++)
        u[j] = g ? (double)w[j] * g[j] : w[j];
    return u;
}

/* One mixer's term for one source row x at one token, one backend:
 *   dsrc_j += a dh_j + dl r u_j - dl (u.x) r^3 x_j / d    (r^3 term: key norm)
 *   P_j += dl r x_j                                       (dw = g P, dg = w P)
 * given |dl| <= DL, dl within edl, u.x within eux, dh within edh_j (NULL:
 * exact).  es gets the term's error but for the roundings of forming it
 * (at most 8 on each of its three parts: the callers' gamma(8) ms), ms the
 * three parts' magnitudes; P, eP the same for P (two roundings: c1 = dl r,
 * c1 x). */
static void bwd_term(double *es, double *ms, double *P, double *eP, const float *x, const float *dh,
                     const double *edh, const double *u, double a, double DL, double edl, double r, double UX,
                     double eux, int kn, int d)
{
    double r3 = kn ? r * r * r / d : 0;
    for (int j = 0; j < d; j++) {
        double xj = fabs(x[j]), uj = fabs(u[j]);
        double T = a * fabs(dh[j]) + DL * (r * uj + UX * r3 * xj);
        ms[j] += T;
        es[j] += (edh ? a * edh[j] : 0) + edl * (r * uj + UX * r3 * xj) + DL * r3 * xj * eux;
        if (P) {
            P[j] += DL * r * xj;
            eP[j] += edl * r * xj + tu_gamma(2) * DL * r * xj;
        }
    }
}

/* u.x from a weight a and the lse it was formed with, as both backends'
 * two-phase backwards may take it (the CPU's for rows over 256 floats,
 * CUDA's always): (log a + lse) / r is z but for z's error ez, a's exp and
 * its argument's rounding and the log and the sum (the lse's own error
 * cancels: a was formed with it); sigmoid: (log a - log(1 - a)) / r, a's
 * relative error (U_EXP + gamma(2)) amplified by 1/(1 - a).  Either side
 * may take the d-term dot instead: eux counts both.  A weight of 0, or a
 * sigmoid's of exactly 1 (saturated: key_norm false leaves logits
 * unnormalised), has dl = 0 on both backends, which read the same a, so
 * its u.x is never used: the dot's error alone, finite. */
static double ux_err(double UX, double ez, double a, double Zl, double r, int sigmoid, int d)
{
    double e = tu_gamma(d + 2) * UX;
    if (a <= 0 || (sigmoid && a >= 1))
        return e;
    if (sigmoid)
        return e + (ez + (U_EXP + tu_gamma(2)) / (1 - a) + 2 * U * (fabs(log(a)) + fabs(log1p(-a)) + 1)) / r;
    return e + (ez + U_EXP + 7 * U * Zl) / r;
}

/* dsrc (one backend): the terms' errors es, plus gamma(8) of their parts'
 * magnitudes ms (their own roundings), plus their sum with the base in any
 * order: m terms and the base, gamma(m + 1) (ms + |base|). */
static void ds_bound(double *out, const double *es, const double *ms, const float *base, int m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] += es[i] + tu_gamma(8) * ms[i] + tu_gamma(m + 1) * (ms[i] + (base ? fabs(base[i]) : 0));
}

/* dw (or dg) += c_j P_j, c = g (or w; 1 without key norm), P a sum of cnt
 * terms in any grouping, onto base: one backend within
 * |c_j| (eP_j + gamma(cnt) P_j) + u (|base_j| + |c_j| P_j) (the product
 * and the +=) */
static void dw_bound(double *out, const double *P, const double *eP, const float *c, const float *base, double cnt,
                     int d)
{
    for (int j = 0; j < d; j++) {
        double cj = c ? fabs(c[j]) : 1;
        out[j] += cj * (eP[j] + tu_gamma(cnt) * P[j]) + tu_gamma(2) * (fabs(base[j]) + cj * P[j]);
    }
}

/* ---- depth attention, two phases ------------------------------------- */

/* The sublayer's RMSNorm of a row y fused into a depth op (xn = y r ng,
 * nrstd = r = rstd(y)), given y's exact value ye and one backend's bound
 * ey on its y: r moves by at most ||ey|| / ||ye|| relative (first order:
 * r = (sum y^2 / d + eps)^(-1/2)) plus its own RSTD_REL(d); xn two
 * products more.  Adds twice (A and B) to bx (N x d) and br (N). */
static void norm_bounds(double *bx, double *br, const double *ye, const double *ey, const float *ng, int N, int d)
{
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        double yy = 0, ee = 0;
        for (int q = 0; q < d; q++)
            yy += ye[o + q] * ye[o + q], ee += ey[o + q] * ey[o + q];
        double r = 1.0 / sqrt(yy / d + (double)AR_RMS_EPS), rho = sqrt(ee) / fmax(sqrt(yy), 1e-300);
        br[i] += 2 * r * (rho + RSTD_REL(d) + U);
        for (int q = 0; q < d; q++)
            bx[o + q] += 2 * fabs(ng[q]) * r * (ey[o + q] + fabs(ye[o + q]) * (rho + RSTD_REL(d) + tu_gamma(2)));
    }
}

/* Phase 1 of one mixer (query u, its first k sources), one backend, per
 * token: the weights over the k shared logits within
 * eps = sm_eps(max ez, Zl, k + 2, k) (CUDA's online softmax takes a
 * weight through up to k exps, then the log of lse), o = sum_s a_s x_s
 * within (eps + gamma(k + 2)) sum_s a_s |x_s|; lse = log sum exp z within
 * max ez + (k + 2) (U_EXP + 2 u (2 Zl + 1)) + gamma(2k + 4) (a log-sum-exp
 * moves by at most its arguments' largest error; the same roundings);
 * the raw logits within ez.  Sigmoid: each weight within
 * ez + U_EXP + gamma(2), no normaliser, lse 0 on both.  Writes the bounds
 * doubled (A and B): bo (N x d), blse (N), blog (N x n, columns < k), and
 * oe, the exact o. */
static void inter_bounds(double *bo, double *blse, double *blog, double *oe, tp **src, int k, int n, const double *u,
                         int kn, int sig, int N, int d)
{
    srcst st[MAXL];
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        double mx = -INFINITY, zm = 0, ezm = 0, sum = 0, a[MAXL], ea[MAXL];
        for (int s = 0; s < k; s++) {
            src_stat(&st[s], src[s]->h + o, u, kn, d);
            mx = fmax(mx, st[s].z), zm = fmax(zm, st[s].zeta), ezm = fmax(ezm, st[s].ez);
            blog[(size_t)i * n + s] = 2 * st[s].ez;
        }
        double Zl = zm + log(k), eps = sm_eps(ezm, Zl, k + 2, k);
        for (int s = 0; s < k; s++) {
            if (sig) {
                a[s] = 1 / (1 + exp(-st[s].z));
                ea[s] = st[s].ez + U_EXP + tu_gamma(2);
            } else {
                sum += a[s] = exp(st[s].z - mx);
                ea[s] = eps;
            }
        }
        blse[i] = sig ? 0 : 2 * (ezm + (k + 2) * (U_EXP + 2 * U * (2 * Zl + 1)) + tu_gamma(2 * k + 4));
        for (int q = 0; q < d; q++)
            bo[o + q] = oe[o + q] = 0;
        for (int s = 0; s < k; s++) {
            if (!sig)
                a[s] /= sum;
            for (int q = 0; q < d; q++) {
                double x = src[s]->h[o + q];
                oe[o + q] += a[s] * x;
                bo[o + q] += 2 * (ea[s] + tu_gamma(k + 2)) * a[s] * fabs(x);
            }
        }
    }
}

/* Phase 2 of one mixer, one backend, from phase 1's o, lse and raw logits
 * as given (A's) and its j own sources: o joins as one more source whose
 * logit lse has no error, each own source's logit within ez; every
 * weight (o's, the own sources', the k shared ones re-formed as
 * exp(z_s - LSE)) within eps = sm_eps(max ez, Zl, j + 3, n) (CUDA: up to j
 * rescales, the log and alpha's exp; the CPU: three exps and a log), Zl
 * over every logit and lse; h within (eps + gamma(j + 2)) (w_o |o| +
 * sum_t w_t |x_t|); LSE like lse in phase 1.  Sigmoid: o + sum_t
 * sigmoid(z_t) x_t within gamma(j + 1) (|o| + ...) and the weights' errors;
 * the shared weights sigmoid(z_s) within U_EXP + gamma(2); lse stays 0.
 * Doubled into bh, blse, bal (N x n), brs (rstd of the own sources, N x j),
 * and he, the exact h. */
static void merge_bounds(double *bh, double *blse, double *bal, double *brs, double *he, const float *o0,
                         const float *lse0, const float *z0, tp **intra, int j, int k, int n, const double *u, int kn,
                         int sig, int N, int d)
{
    srcst st[MAXL];
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        const float *zs = z0 + (size_t)i * n;
        double L = lse0[i], zm = fabs(L), ezm = 0;
        for (int s = 0; s < k; s++)
            zm = fmax(zm, fabs(zs[s]));
        for (int t = 0; t < j; t++) {
            src_stat(&st[t], intra[t]->h + o, u, kn, d);
            zm = fmax(zm, st[t].zeta), ezm = fmax(ezm, st[t].ez);
            brs[(size_t)i * j + t] = kn ? 2 * (RSTD_REL(d) + U) * st[t].r : 0;
        }
        double Zl = zm + log(n), eps = sm_eps(ezm, Zl, j + 3, n), LSE = L;
        if (!sig) {
            double m = L, S = 0;
            for (int t = 0; t < j; t++)
                m = fmax(m, st[t].z);
            S = exp(L - m);
            for (int t = 0; t < j; t++)
                S += exp(st[t].z - m);
            LSE = m + log(S);
        }
        blse[i] = sig ? 0 : 2 * (ezm + (j + 3) * (U_EXP + 2 * U * (2 * Zl + 1)) + tu_gamma(2 * j + 4));
        double wo = sig ? 1 : exp(L - LSE), wt[MAXL], et[MAXL];
        for (int s = 0; s < k; s++) {
            double as = sig ? 1 / (1 + exp(-(double)zs[s])) : exp(zs[s] - LSE);
            bal[(size_t)i * n + s] = 2 * (sig ? U_EXP + tu_gamma(2) : eps) * as;
        }
        for (int t = 0; t < j; t++) {
            wt[t] = sig ? 1 / (1 + exp(-st[t].z)) : exp(st[t].z - LSE);
            et[t] = sig ? st[t].ez + U_EXP + tu_gamma(2) : eps;
            bal[(size_t)i * n + k + t] = 2 * et[t] * wt[t];
        }
        for (int q = 0; q < d; q++) {
            double ho = o0[o + q], e = wo * ho, b = (sig ? tu_gamma(j + 1) : eps + tu_gamma(j + 2)) * wo * fabs(ho);
            for (int t = 0; t < j; t++) {
                double x = intra[t]->h[o + q];
                e += wt[t] * x;
                b += ((sig ? tu_gamma(j + 1) : tu_gamma(j + 2)) + et[t]) * wt[t] * fabs(x);
            }
            he[o + q] = e;
            bh[o + q] = 2 * b;
        }
    }
}

/* The backward of one mixer's intra part (its own sources src[k..n-1]),
 * one backend, at A's alpha, lse, rsi and h as given:
 * - cdot = dh.h, a d-term dot: within gamma(d) sum_j |dh_j h_j|;
 *   fused (dxn, xn, ng, nr given, h not): xh_j = xn_j / ng_j (at most two
 *   roundings: 2 u |xh_j|) or, where ng_j = 0, nr sum_s alpha_s x_sj (n
 *   terms: gamma(n + 1)); with X_j >= |xh_j| its magnitude and e_j its
 *   error, m = sum ng dxn xh / d is within gamma(d + 3) S + E,
 *   S = sum_q |ng_q dxn_q| X_q / d, E = sum_q |ng_q dxn_q| e_q / d, and
 *   dh_j = nr (ng_j dxn_j - xh_j m) within
 *   nr (gamma(d + 8) (|ng_j dxn_j| + X_j S) + e_j S + X_j E);
 *   cdot = dh.xh / nr with dh's and xh's errors; dng += sum_i dxn xh, N
 *   terms, with xh's errors;
 * - dl_t = a (dh.x_t - cdot) (sigmoid: a (1 - a) dh.x_t; 0 for one
 *   source): the dot, cdot's and dh's errors, the subtraction and
 *   products: within a (sum_j edh_j |x_tj| + e_cdot + gamma(d + 3)
 *   (A_t + |cdot|)), A_t = sum_j |dh_j x_tj|;
 * - u.x: ux_err; the terms into dintra and P: bwd_term, ds_bound (three
 *   terms onto the base), dw_bound (N j terms).
 * Adds A's and B's bounds: bcd (N), bdh (N x d, fused), bng (d, fused),
 * bdi[t] (N x d), bw, bg (d). */
typedef struct {
    const float *dh, *h, *dxn, *xn, *ng, *nr, *dng0, *alpha, *lse, *dw0, *dg0, *w, *g;
    tp **src, **dintra;
    const float *const *rsi;
} intra_in;

static void intra_bounds(const intra_in *in, int n, int k, int sig, int N, int d, double *bcd, double *bdh,
                         double *bng, double **bdi, double *bw, double *bg)
{
    int j = n - k, kn = in->g != NULL;
    size_t nd = (size_t)N * d;
    const double *u = query_u(in->w, in->g, d);
    double *es[MAXL], *ms[MAXL], *P = bnew(d), *eP = bnew(d), *Png = bnew(d), *eng = bnew(d);
    double *dhe = bnew(d), *edh = bnew(d), *X = bnew(d), *ex = bnew(d);
    for (int t = 0; t < j; t++)
        es[t] = bnew(nd), ms[t] = bnew(nd);
    srcst st[MAXL];
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        const float *al = in->alpha + (size_t)i * n;
        double zm = 0, cd = 0, ecd = 0;
        for (int s = 0; s < n; s++) {
            src_stat(&st[s], in->src[s]->h + o, u, kn, d);
            zm = fmax(zm, st[s].zeta);
        }
        double Zl = zm + log(n);
        if (in->dxn) {
            double nr = in->nr[i], m = 0, S = 0, E = 0, c1 = 0, c2 = 0, c3 = 0;
            for (int q = 0; q < d; q++) {
                double xh;
                if (in->ng[q] != 0) {
                    xh = (double)in->xn[o + q] / in->ng[q];
                    X[q] = fabs(xh), ex[q] = tu_gamma(2) * X[q];
                } else {
                    double acc = 0, mag = 0;
                    for (int s = 0; s < n; s++)
                        acc += al[s] * (double)in->src[s]->h[o + q], mag += al[s] * fabs(in->src[s]->h[o + q]);
                    xh = nr * acc, X[q] = nr * mag, ex[q] = tu_gamma(n + 1) * X[q];
                }
                double gd = (double)in->ng[q] * in->dxn[o + q];
                m += gd * xh, S += fabs(gd) * X[q], E += fabs(gd) * ex[q];
                dhe[q] = xh; /* xh until dh is formed below */
                Png[q] += fabs((double)in->dxn[o + q]) * X[q];
                eng[q] += fabs((double)in->dxn[o + q]) * ex[q];
            }
            m /= d, S /= d, E /= d;
            for (int q = 0; q < d; q++) {
                double gd = (double)in->ng[q] * in->dxn[o + q], xh = dhe[q];
                dhe[q] = nr * (gd - xh * m);
                edh[q] = nr * (tu_gamma(d + 8) * (fabs(gd) + X[q] * S) + ex[q] * S + X[q] * E);
                bdh[o + q] += 2 * edh[q];
                cd += dhe[q] * xh / nr;
                c1 += fabs(dhe[q]) * X[q], c2 += edh[q] * X[q], c3 += fabs(dhe[q]) * ex[q];
            }
            ecd = (tu_gamma(d + 1) * c1 + c2 + c3) / nr + U * fabs(cd);
        } else {
            for (int q = 0; q < d; q++) {
                dhe[q] = in->dh[o + q], edh[q] = 0;
                cd += (double)in->dh[o + q] * in->h[o + q];
                ecd += fabs((double)in->dh[o + q] * in->h[o + q]);
            }
            ecd *= tu_gamma(d);
        }
        bcd[i] += 2 * ecd;
        for (int t = 0; t < j; t++) {
            const float *x = in->src[k + t]->h + o;
            double a = al[k + t], r = in->rsi[t][i], A = 0, ed = 0;
            for (int q = 0; q < d; q++)
                A += fabs(dhe[q] * x[q]), ed += edh[q] * fabs(x[q]);
            double DL, edl;
            if (sig)
                DL = a * (1 - a) * A, edl = a * (1 - a) * (ed + tu_gamma(d + 3) * A);
            else if (n > 1)
                DL = a * (A + fabs(cd)), edl = a * (ed + ecd + tu_gamma(d + 3) * (A + fabs(cd)));
            else
                DL = edl = 0;
            float dhf[4096];
            cr_assert(d <= 4096);
            for (int q = 0; q < d; q++)
                dhf[q] = (float)dhe[q];
            bwd_term(es[t] + o, ms[t] + o, P, eP, x, dhf, edh, u, a, DL, edl, r, st[k + t].UX,
                     ux_err(st[k + t].UX, st[k + t].ez, a, Zl, r, sig, d), kn, d);
        }
    }
    for (int side = 0; side < 2; side++) {
        for (int t = 0; t < j; t++)
            ds_bound(bdi[t], es[t], ms[t], in->dintra[t]->h, 3, nd);
        if (j > 0) {
            dw_bound(bw, P, eP, kn ? in->g : NULL, in->dw0, (double)N * j, d);
            if (kn)
                dw_bound(bg, P, eP, in->w, in->dg0, (double)N * j, d);
        }
        if (in->dxn)
            for (int q = 0; q < d; q++)
                bng[q] += eng[q] + tu_gamma(N + 2) * Png[q] + tu_gamma(2) * (fabs(in->dng0[q]) + Png[q]);
    }
    if (j == 0) /* no own sources: dw and dg untouched on both */
        for (int q = 0; q < d; q++)
            bw[q] = bg[q] = 0;
}

/* The shared part of a chunk's backward, one backend, at the given dh,
 * cdot, alpha, lse and rstd (A's): per token, shared source s and mixer
 * c, dl = a (dh_c.x_s - cdot_c) (sigmoid a (1 - a) dh_c.x_s; 0 for a
 * mixer of one source) within gamma(d + 3) of a (A + |cdot|); u.x by
 * ux_err; into dsrc[s] up to 3 C terms onto the base (bwd_term,
 * ds_bound), into P_c N k terms (dw_bound).  base NULL: overwrite. */
static void inter_bwd_bounds(tp **src, int k, int C, const int *n, tp **dh, tp **cdot, tp **alpha, tp **rs, tp **w,
                             tp **g, int kn, int sig, tp **dsrc, int overwrite, tp **dw, tp **dg, int N, int d,
                             double **bds, double **bw, double **bg)
{
    size_t nd = (size_t)N * d;
    double *es[MAXL], *ms[MAXL], *P[8], *eP[8];
    const double *u[8];
    for (int s = 0; s < k; s++)
        es[s] = bnew(nd), ms[s] = bnew(nd);
    for (int c = 0; c < C; c++)
        P[c] = bnew(d), eP[c] = bnew(d), u[c] = query_u(w[c]->h, kn ? g[c]->h : NULL, d);
    srcst st[MAXL];
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        for (int c = 0; c < C; c++) {
            double zm = 0;
            for (int s = 0; s < n[c]; s++) {
                src_stat(&st[s], src[s]->h + o, u[c], kn, d);
                zm = fmax(zm, st[s].zeta);
            }
            double Zl = zm + log(n[c]), cd = cdot[c]->h[i];
            for (int s = 0; s < k; s++) {
                const float *x = src[s]->h + o, *dhc = dh[c]->h + o;
                double a = alpha[c]->h[(size_t)i * n[c] + s], r = rs[s]->h[i], A = 0, DL;
                for (int q = 0; q < d; q++)
                    A += fabs((double)dhc[q] * x[q]);
                DL = sig ? a * (1 - a) * A : n[c] > 1 ? a * (A + fabs(cd)) : 0;
                bwd_term(es[s] + o, ms[s] + o, P[c], eP[c], x, dhc, NULL, u[c], a, DL, tu_gamma(d + 3) * DL, r,
                         st[s].UX, ux_err(st[s].UX, st[s].ez, a, Zl, r, sig, d), kn, d);
            }
        }
    }
    for (int side = 0; side < 2; side++) {
        for (int s = 0; s < k; s++)
            ds_bound(bds[s], es[s], ms[s], overwrite ? NULL : dsrc[s]->h, 3 * C, nd);
        for (int c = 0; c < C; c++) {
            dw_bound(bw[c], P[c], eP[c], kn ? g[c]->h : NULL, dw[c]->h, (double)N * k, d);
            if (kn)
                dw_bound(bg[c], P[c], eP[c], w[c]->h, dg[c]->h, (double)N * k, d);
        }
    }
}

/* A chunk of C mixers sharing k sources; mixer c has j[c] sources of its
 * own, Full-style (src[k .. k+j[c]-1]).  kn 0: no key norm (g and dg
 * NULL); sig 1: score sigmoid.  What two_phase_case passes from op to op:
 * the tensors (an op's checked outputs hold A's results: take()), their
 * lists, and phase 1's bounds. */
typedef struct {
    int C, k, N, d, kn, sig, ns;
    const int *j;
    int n[8]; /* sources of mixer c: k + j[c] */
    size_t nd;
    tp *src[MAXL], *rs[MAXL], *w[8], *g[8], *o[8], *lse[8], *alpha[8];
    const double *u[8];
    tl lsrc, lw, lg, lo, llse, lal, lrs;
    double *bo[8], *bl[8], *blog[8], *oe[8], *brs; /* phase 1's (inter_bounds) */
    tp *ng;                                          /* the RMSNorm gain the forwards fuse */
    tp *dsrc[MAXL], *dw[8], *dg[8], *cdot[8], *dh[8];
} two_phase;

/* The case's inputs (random, junk where an op must write) and phase 1's
 * bounds (inter_bounds), mixer by mixer; rs within RSTD_REL (1 exactly on
 * both without key norm). */
static void two_phase_setup(two_phase *x, int C, int k, const int *j, int N, int d, int kn, int sig)
{
    memset(x, 0, sizeof *x);
    x->C = C, x->k = k, x->j = j, x->N = N, x->d = d, x->kn = kn, x->sig = sig;
    char js[64] = "";
    for (int c = 0; c < C; c++)
        snprintf(js + strlen(js), sizeof js - strlen(js), "%s%d", c ? "," : "", j[c]);
    at("depth two-phase C=%d k=%d j=[%s] N=%d d=%d%s%s", C, k, js, N, d, kn ? "" : " key_norm false",
       sig ? " sigmoid" : "");
    size_t nd = x->nd = (size_t)N * d;
    int *n = x->n, jmax = 0;
    for (int c = 0; c < C; c++) {
        n[c] = k + j[c];
        jmax = j[c] > jmax ? j[c] : jmax;
    }
    int ns = x->ns = k + jmax;
    tp **src = x->src, **w = x->w, **g = x->g, **o = x->o, **lse = x->lse, **alpha = x->alpha, **rs = x->rs;
    sources(src, ns, N, d);
    const double **u = x->u;
    for (int c = 0; c < C; c++) {
        w[c] = queries(d, d), g[c] = rnd(d, 0.5f, 1.5f);
        o[c] = junk(nd), lse[c] = junk(N), alpha[c] = junk((size_t)N * n[c]);
        u[c] = query_u(w[c]->h, kn ? g[c]->h : NULL, d);
    }
    for (int s = 0; s < ns; s++)
        rs[s] = junk(N);
    x->lsrc = list(src, ns), x->lw = list(w, C), x->lg = list(g, C), x->lo = list(o, C);
    x->llse = list(lse, C), x->lal = list(alpha, C), x->lrs = list(rs, ns);

    double **bo = x->bo, **bl = x->bl, **blog = x->blog, **oe = x->oe, *brs = x->brs = bnew((size_t)k * N);
    for (int c = 0; c < C; c++) {
        bo[c] = bnew(nd), bl[c] = bnew(N), blog[c] = bnew((size_t)N * n[c]), oe[c] = bnew(nd);
        inter_bounds(bo[c], bl[c], blog[c], oe[c], src, k, n[c], u[c], kn, sig, N, d);
    }
    for (int s = 0; s < k; s++)
        for (int i = 0; i < N; i++) {
            srcst st;
            src_stat(&st, src[s]->h + (size_t)i * d, u[0], kn, d);
            brs[(size_t)s * N + i] = kn ? 2 * (RSTD_REL(d) + U) * st.r : 0;
        }
}

/* The fused norm's xn in bf16 storage (depth_two_phase_bf16_storage) */
static int xn_stored;

/* Phase 1 fused with mixer 0's RMSNorm, into fresh outputs: o[0] is not
 * written, nor (with C > 2) the last mixer's, whose o is passed as NULL. */
static void two_phase_inter_norm(two_phase *x)
{
    int C = x->C, k = x->k, N = x->N, d = x->d, kn = x->kn, sig = x->sig;
    const int *n = x->n;
    size_t nd = x->nd;
    double **bo = x->bo, **bl = x->bl, **blog = x->blog, **oe = x->oe;
    char what[96];
    tp *o2[8], *o2n[8], *lse2[8], *alpha2[8], *rs2[MAXL];
    for (int c = 0; c < C; c++)
        o2[c] = o2n[c] = junk(nd), lse2[c] = junk(N), alpha2[c] = junk((size_t)N * n[c]);
    if (C > 2)
        o2n[C - 1] = NULL;
    for (int s = 0; s < k; s++)
        rs2[s] = junk(N);
    tp *ng = x->ng = rnd(d, 0.5f, 1.5f), *xn = xn_stored ? stored(nd, -7, 7) : junk(nd), *nrstd = junk(N);
    double *bxn = bnew(nd), *bnr = bnew(N), *eo = bnew(nd);
    for (size_t i = 0; i < nd; i++)
        eo[i] = bo[0][i] / 2; /* one backend's */
    norm_bounds(bxn, bnr, oe[0], eo, ng->h, N, d);
    tl lo2 = list(o2n, C), llse2 = list(lse2, C), lal2 = list(alpha2, C), lrs2 = list(rs2, k);
    BOTH be->depth_fwd_inter(&(ar_depth_inter){.C = C, .k = k, .n = n, .src = CL(x->lsrc), .rs = DL(lrs2),
                                                 .w = CL(x->lw), .g = kn ? CL(x->lg) : NULL, .alpha = DL(lal2),
                                                 .lse = DL(llse2), .sigmoid = sig, .N = N, .d = d},
                             DL(lo2), &(ar_norm_out){D(ng), D(xn), D(nrstd)});
    check("depth_fwd_inter (xn) xn", xn, rounded_bounds(xn, bxn));
    check("depth_fwd_inter (xn) nrstd", nrstd, bnr);
    for (int c = 0; c < C; c++) {
        int written = c && o2n[c];
        snprintf(what, sizeof what, "depth_fwd_inter (xn) o[%d]%s", c, written ? "" : " (not written)");
        if (written)
            check(what, o2[c], bo[c]);
        else
            check_eq(what, o2[c]);
        snprintf(what, sizeof what, "depth_fwd_inter (xn) lse[%d]", c);
        check(what, lse2[c], bl[c]);
        snprintf(what, sizeof what, "depth_fwd_inter (xn) logits[%d]", c);
        check_cols(what, alpha2[c], N, n[c], 0, k, blog[c]);
    }
}

/* Phase 1, into the case's own o, lse, alpha and rs. */
static void two_phase_inter(two_phase *x)
{
    int C = x->C, k = x->k, N = x->N, d = x->d, kn = x->kn, sig = x->sig;
    const int *n = x->n;
    tp **o = x->o, **lse = x->lse, **alpha = x->alpha, **rs = x->rs;
    char what[96];
    BOTH be->depth_fwd_inter(&(ar_depth_inter){.C = C, .k = k, .n = n, .src = CL(x->lsrc), .rs = DL(x->lrs),
                                                 .w = CL(x->lw), .g = kn ? CL(x->lg) : NULL, .alpha = DL(x->lal),
                                                 .lse = DL(x->llse), .sigmoid = sig, .N = N, .d = d},
                             DL(x->lo), NULL);
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "depth_fwd_inter o[%d]", c);
        check(what, o[c], x->bo[c]);
        snprintf(what, sizeof what, "depth_fwd_inter lse[%d]", c);
        check(what, lse[c], x->bl[c]);
        snprintf(what, sizeof what, "depth_fwd_inter logits[%d]", c);
        check_cols(what, alpha[c], N, n[c], 0, k, x->blog[c]);
        take(o[c]), take(lse[c]), take(alpha[c]);
    }
    for (int s = 0; s < k; s++) {
        snprintf(what, sizeof what, "depth_fwd_inter rs[%d]", s);
        check(what, rs[s], x->brs + (size_t)s * N);
        take(rs[s]);
    }
}

/* Phase 2 of mixer c (merge_bounds, from A's phase 1), first fused with
 * the sublayer's RMSNorm (h is left alone) on copies, then plain. */
static void two_phase_merge(two_phase *x, int c)
{
    int k = x->k, N = x->N, d = x->d, kn = x->kn, sig = x->sig;
    const int *n = x->n, *j = x->j;
    size_t nd = x->nd;
    tp **src = x->src, **w = x->w, **g = x->g, **o = x->o, **lse = x->lse, **alpha = x->alpha, **rs = x->rs;
    tp *ng = x->ng;
    tl lsrc = x->lsrc;
    char what[96];
    tl lrsi = list(rs + k, j[c]);
    double *bh = bnew(nd), *bls = bnew(N), *bal = bnew((size_t)N * n[c]), *bri = bnew((size_t)N * (j[c] + 1));
    double *he = bnew(nd);
    /* with the sources stored, the fused merge's h is too (a source read
     * in place, lib/residual_depth.c): o rounded to bf16 on both */
    if (src_stored)
        take16(o[c]);
    merge_bounds(bh, bls, bal, bri, he, o[c]->h, lse[c]->h, alpha[c]->h, src + k, j[c], k, n[c], x->u[c], kn, sig,
                 N, d);
    if (j[c] > 0) {
        tp *h3 = src_stored ? stored_from(o[c]->h, nd) : dup_tp(o[c]), *lse3 = dup_tp(lse[c]), *al3 = dup_tp(alpha[c]);
        tp *rsi3[MAXL];
        for (int t = 0; t < j[c]; t++)
            rsi3[t] = junk(N);
        tl lrsi3 = list(rsi3, j[c]);
        tp *xn3 = xn_stored ? stored(nd, -7, 7) : junk(nd), *nr3 = junk(N);
        double *bx3 = bnew(nd), *bn3 = bnew(N), *eh = bnew(nd);
        for (size_t i = 0; i < nd; i++)
            eh[i] = bh[i] / 2; /* one backend's */
        norm_bounds(bx3, bn3, he, eh, ng->h, N, d);
        BOTH be->depth_fwd_merge(&(ar_depth_intra){.n = n[c], .k = k, .src = CL(lsrc), .rsi = DL(lrsi3),
                                                   .w = D(w[c]), .g = kn ? D(g[c]) : NULL, .alpha = D(al3),
                                                   .lse = D(lse3), .sigmoid = sig, .N = N, .d = d},
                                 D(h3), &(ar_norm_out){D(ng), D(xn3), D(nr3)});
        snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d xn", c);
        check(what, xn3, rounded_bounds(xn3, bx3));
        snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d nrstd", c);
        check(what, nr3, bn3);
        snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d h (not written)", c);
        check_eq(what, h3);
        snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d lse", c);
        check(what, lse3, bls);
        snprintf(what, sizeof what, "depth_fwd_merge (xn) mixer %d alpha", c);
        check(what, al3, bal);
    }
    BOTH be->depth_fwd_merge(&(ar_depth_intra){.n = n[c], .k = k, .src = CL(lsrc), .rsi = DL(lrsi),
                                               .w = D(w[c]), .g = kn ? D(g[c]) : NULL, .alpha = D(alpha[c]),
                                               .lse = D(lse[c]), .sigmoid = sig, .N = N, .d = d},
                             D(o[c]), NULL);
    snprintf(what, sizeof what, "depth_fwd_merge mixer %d h", c);
    check(what, o[c], bh);
    snprintf(what, sizeof what, "depth_fwd_merge mixer %d lse", c);
    check(what, lse[c], bls);
    snprintf(what, sizeof what, "depth_fwd_merge mixer %d alpha", c);
    check(what, alpha[c], bal);
    take(o[c]), take(lse[c]), take(alpha[c]);
    for (int t = 0; t < j[c]; t++) {
        double *bt = bnew(N);
        for (int i = 0; i < N; i++)
            bt[i] = bri[(size_t)i * j[c] + t];
        snprintf(what, sizeof what, "depth_fwd_merge mixer %d rsi[%d]", c, t);
        check(what, rs[k + t], bt);
        take(rs[k + t]);
    }
}

/* The intra part of mixer c's backward (intra_bounds): dh given, or with
 * fused set formed by the fused norm backward from xn (h not given; some
 * gain columns 0, where h comes from the sources). */
static void two_phase_bwd_intra(two_phase *x, int c, int fused)
{
    int k = x->k, N = x->N, d = x->d, kn = x->kn, sig = x->sig;
    const int *n = x->n, *j = x->j;
    size_t nd = x->nd;
    tp **src = x->src, **w = x->w, **g = x->g, **o = x->o, **lse = x->lse, **alpha = x->alpha, **rs = x->rs;
    tp **dsrc = x->dsrc, **dw = x->dw, **dg = x->dg, **cdot = x->cdot, **dh = x->dh;
    char what[96];
    tp *h = fused ? NULL : o[c];
    tp *dxn = NULL, *xn = NULL, *ng = NULL, *dng = NULL, *nr = NULL;
    if (fused) {
        dxn = rnd(nd, -1, 1), xn = xn_stored ? stored(nd, -1, 1) : rnd(nd, -1, 1), dng = rnd(d, -1, 1);
        nr = rnd(N, 0.5f, 2.0f), ng = rnd(d, 0.5f, 1.5f);
        for (int q = 2; q < d; q += 5)
            ng->h[q] = 0.0f;
        ng = from_host(ng->h, d);
        dh[c] = junk(nd); /* (=) */
    }
    const float *rsi[MAXL];
    for (int t = 0; t < j[c]; t++)
        rsi[t] = rs[k + t]->h;
    intra_in in = {fused ? NULL : dh[c]->h, h ? h->h : NULL, dxn ? dxn->h : NULL, xn ? xn->h : NULL,
                   ng ? ng->h : NULL, nr ? nr->h : NULL, dng ? dng->h : NULL, alpha[c]->h, lse[c]->h,
                   dw[c]->h, dg[c]->h, w[c]->h, kn ? g[c]->h : NULL, src, dsrc + k, rsi};
    double *bcd = bnew(N), *bdh = bnew(nd), *bng = bnew(d), *bw = bnew(d), *bg = bnew(d), *bdi[MAXL];
    for (int t = 0; t < j[c]; t++)
        bdi[t] = bnew(nd);
    intra_bounds(&in, n[c], k, sig, N, d, bcd, bdh, bng, bdi, bw, bg);
    tl ldi = list(dsrc + k, j[c]), lrsi = list(rs + k, j[c]), lsrc = list(src, n[c]);
    /* no intra sources: the lists of their gradients and rstd are not read */
    BOTH be->depth_bwd_intra(&(ar_depth_intra){.n = n[c], .k = k, .src = CL(lsrc),
                                               .rsi = j[c] ? DL(lrsi) : NULL, .w = D(w[c]),
                                               .g = kn ? D(g[c]) : NULL, .alpha = D(alpha[c]),
                                               .lse = D(lse[c]), .sigmoid = sig, .N = N, .d = d},
                             j[c] ? DL(ldi) : NULL, D(dw[c]), kn ? D(dg[c]) : NULL, D(cdot[c]), D(dh[c]),
                             h ? D(h) : NULL, fused ? &(ar_norm_grad){D(ng), D(dng), D(dxn), D(xn), D(nr)} : NULL);
    const char *fz = fused ? " (fused norm)" : "";
    snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d cdot", fz, c);
    check(what, cdot[c], bcd);
    snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dw", fz, c);
    check(what, dw[c], bw);
    snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dg", fz, c);
    if (kn)
        check(what, dg[c], bg);
    take(cdot[c]), take(dw[c]), take(dg[c]);
    if (fused) {
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dh", fz, c);
        check(what, dh[c], bdh);
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dng", fz, c);
        check(what, dng, bng);
        take(dh[c]);
    }
    for (int t = 0; t < j[c]; t++) {
        snprintf(what, sizeof what, "depth_bwd_intra%s mixer %d dintra[%d]", fz, c, t);
        check(what, dsrc[k + t], bdi[t]);
        take(dsrc[k + t]);
    }
}

/* The shared part of the backward, += and overwrite (inter_bwd_bounds). */
static void two_phase_bwd_inter(two_phase *x)
{
    int C = x->C, k = x->k, N = x->N, d = x->d, kn = x->kn, sig = x->sig;
    const int *n = x->n;
    size_t nd = x->nd;
    tp **src = x->src, **w = x->w, **g = x->g, **alpha = x->alpha, **rs = x->rs;
    tp **dsrc = x->dsrc, **dw = x->dw, **dg = x->dg, **cdot = x->cdot, **dh = x->dh;
    tl lsrc = x->lsrc, lw = x->lw, lg = x->lg, lal = x->lal, llse = x->llse, lrs = x->lrs;
    char what[96];
    tl ldsrc = list(dsrc, k), ldw = list(dw, C), ldg = list(dg, C), ldh = list(dh, C);
    tl lcd = list(cdot, C);
    tp *dsrcO[MAXL], *dwO[8], *dgO[8];
    for (int s = 0; s < k; s++)
        dsrcO[s] = junk(nd);
    for (int c = 0; c < C; c++)
        dwO[c] = dup_tp(dw[c]), dgO[c] = dup_tp(dg[c]);
    double *bds[MAXL], *bdsO[MAXL], *bw[8], *bg[8], *bwO[8], *bgO[8];
    for (int s = 0; s < k; s++)
        bds[s] = bnew(nd), bdsO[s] = bnew(nd);
    for (int c = 0; c < C; c++)
        bw[c] = bnew(d), bg[c] = bnew(d), bwO[c] = bnew(d), bgO[c] = bnew(d);
    inter_bwd_bounds(src, k, C, n, dh, cdot, alpha, rs, w, g, kn, sig, dsrc, 0, dw, dg, N, d, bds, bw, bg);
    inter_bwd_bounds(src, k, C, n, dh, cdot, alpha, rs, w, g, kn, sig, dsrc, 1, dwO, dgO, N, d, bdsO, bwO, bgO);
    tl ldsrcO = list(dsrcO, k), ldwO = list(dwO, C), ldgO = list(dgO, C);
    BOTH be->depth_bwd_inter(&(ar_depth_inter){.C = C, .k = k, .n = n, .src = CL(lsrc), .rs = DL(lrs), .w = CL(lw),
                                                 .g = kn ? CL(lg) : NULL, .alpha = DL(lal), .lse = DL(llse),
                                                 .sigmoid = sig, .N = N, .d = d},
                             DL(ldsrc), DL(ldw), kn ? DL(ldg) : NULL, CL(ldh), CL(lcd), 0);
    BOTH be->depth_bwd_inter(&(ar_depth_inter){.C = C, .k = k, .n = n, .src = CL(lsrc), .rs = DL(lrs), .w = CL(lw),
                                                 .g = kn ? CL(lg) : NULL, .alpha = DL(lal), .lse = DL(llse),
                                                 .sigmoid = sig, .N = N, .d = d},
                             DL(ldsrcO), DL(ldwO), kn ? DL(ldgO) : NULL, CL(ldh), CL(lcd), 1);
    for (int s = 0; s < k; s++) {
        snprintf(what, sizeof what, "depth_bwd_inter dsrc[%d]", s);
        check(what, dsrc[s], bds[s]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dsrc[%d]", s);
        check(what, dsrcO[s], bdsO[s]);
    }
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "depth_bwd_inter dw[%d]", c);
        check(what, dw[c], bw[c]);
        snprintf(what, sizeof what, "depth_bwd_inter dg[%d]", c);
        if (kn)
            check(what, dg[c], bg[c]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dw[%d]", c);
        check(what, dwO[c], bwO[c]);
        snprintf(what, sizeof what, "depth_bwd_inter (overwrite) dg[%d]", c);
        if (kn)
            check(what, dgO[c], bgO[c]);
    }
}

/* Every op of the two-phase scheme on both backends, each fed A's results
 * of the ops before it: phase 1 (fused with a norm, then plain), phase 2
 * per mixer, the backward's intra parts from the last mixer down (fused
 * with the norm backward in turn), then its shared part. */
static void two_phase_case(int C, int k, const int *j, int N, int d, int kn, int sig)
{
    two_phase x;
    two_phase_setup(&x, C, k, j, N, d, kn, sig);
    two_phase_inter_norm(&x);
    two_phase_inter(&x);
    for (int c = 0; c < C; c++)
        two_phase_merge(&x, c);
    for (int s = 0; s < x.ns; s++)
        x.dsrc[s] = rnd(x.nd, -1, 1);
    for (int c = 0; c < C; c++) {
        x.dw[c] = rnd(d, -1, 1), x.dg[c] = rnd(d, -1, 1), x.cdot[c] = junk(N), x.dh[c] = rnd(x.nd, -1, 1);
    }
    for (int c = C - 1; c >= 0; c--)
        two_phase_bwd_intra(&x, c, (c + C) % 2);
    two_phase_bwd_inter(&x);
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
        {2, 1, two, 41, 16, 0, 1}, {3, 4, block, 13, 20, 0, 1}, /* weights may round to 1 (ux_err) */
        /* CUDA's rows of 4 channels a thread up to d 2048 (512 threads),
         * of 8 past it */
        {3, 4, block, 7, 2048, 1, 0}, {3, 4, block, 5, 2500, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        two_phase_case(cases[i].C, cases[i].k, cases[i].j, cases[i].N, cases[i].d, cases[i].kn, cases[i].sig);
}

/* The sources (the residual rows) and the sublayer's xn that the fused
 * norms write (phase 1 and 2) and the fused norm backward reads, in bf16
 * storage (lib/backend.h, alloc_act), as the model keeps them under bf16:
 * xn written rounded once (the bounds widened as the bf16_storage
 * test's), the sources and the stored h of the fused merge read as the
 * bf16 values they are on both backends (every other bound as in fp32). */
Test(backend_ops, depth_two_phase_bf16_storage)
{
    NEED_B();
    int rc = B->set_bf16(1);
    cr_assert(rc == 0 || b_is_cpu, "set_bf16(1) failed on '%s'", B->name);
    b_stores = rc == 0 && B->alloc_act != NULL;
    xn_stored = src_stored = 1;
    static const int full[4] = {0, 1, 2, 3}, block[3] = {0, 1, 1};
    two_phase_case(4, 5, full, 37, 72, 1, 0);
    two_phase_case(3, 4, block, 13, 20, 1, 1);
    two_phase_case(3, 4, block, 5, 2500, 1, 0); /* 8 channels a thread */
    xn_stored = src_stored = b_stores = 0;
    cr_assert_eq(B->set_bf16(0), 0);
}

/* ---- general depth mixing (ablation variants) ------------------------ */

enum { Q_NONE, Q_SHARED, Q_TOKEN };

/* General depth mixing, one backend, per token i and head a (channels
 * G_a, e = d/H of them), with q the shared or the token's query and
 * u = q g (q without key norm):
 * - logit theta_s (exact), 0 (no query: exact), or z = r sum_(G_a) u x_s
 *   within ez = (gamma(e + 2) + RSTD_REL(d)) zeta, zeta = r sum_(G_a)
 *   |u x_s| (no RSTD_REL without key norm);
 * - weights: softmax within sm_eps(max ez, Zl, 3, n) (one exp each, the
 *   sum in float or double, the division), sigmoid within
 *   ez + U_EXP + gamma(2); h_j = sum_s alpha x_sj within
 *   (eps + gamma(n + 1)) sum_s alpha |x_sj|.
 * The backward at alpha and rstd as given (A's; random weights in the
 * chunk test), with A_s = sum_(G_a) |dh x_s| and cd the head's
 * sum_s alpha da_s (|cd| <= sum_s alpha A_s) or the cdot given:
 * - dl = alpha (da - cd), sigmoid da alpha (1 - alpha): within
 *   gamma(e + n + 3) DL, DL = alpha (A_s + |cd|) or alpha |1 - alpha| A_s;
 * - dsrc_j += alpha dh_j + dl r u_j - (sum_a dl_a u.x_a) r^3 x_j / d: the
 *   terms as bwd_term, the cross sum over the H heads gamma(H) more, u.x
 *   an e-term dot (gamma(e + 2));
 * - dw_j += c_j sum dl r x_j (c = g, or 1; per-token queries: per token),
 *   dg_j += sum q_j dl r x_j, dtheta_s += sum_(i,a) dl: sums of their
 *   terms in any grouping (dw_bound). */
typedef struct {
    tp **src, *w, *g, *th, *dh;
    int ws, sig, H, n;
    const float *alpha, *rstd, *cdot; /* cdot NULL: from alpha (the one-mixer op) */
} mix_in;

/* one backend's backward bounds of one mixer over its sources [s0, s1):
 * es, ms per source (N x d), into P, eP (the dw sum: d, or N x d per
 * token), Pg, ePg (dg), Pt, ePt (dtheta, n) */
static void mix_bwd_terms(const mix_in *m, int s0, int s1, int N, int d, double **es, double **ms, double *P,
                          double *eP, double *Pg, double *ePg, double *Pt, double *ePt)
{
    int H = m->H, e = d / H, n = m->n, kn = m->g != NULL, hasq = m->w && !m->th;
    double *uq = bnew(d), DL[MAXL * 8], edl[MAXL * 8], UX[MAXL * 8];
    cr_assert(H <= 8 && n <= MAXL);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        /* al: token i's row of alpha, source s's head a at s H + a */
        const float *q = hasq ? m->w->h + (size_t)i * m->ws : NULL, *al = m->alpha + (size_t)i * H * n;
        for (int j = 0; j < d; j++)
            uq[j] = q ? (kn ? (double)q[j] * m->g->h[j] : q[j]) : 0;
        for (int a = 0; a < H; a++) {
            double C = 0, A[MAXL];
            for (int s = 0; s < n; s++) {
                A[s] = 0;
                for (int j = a * e; j < (a + 1) * e; j++)
                    A[s] += fabs((double)m->dh->h[o + j] * m->src[s]->h[o + j]);
                C += al[s * H + a] * A[s];
            }
            double cd = m->cdot ? fabs(m->cdot[(size_t)i * H + a]) : C;
            for (int s = s0; s < s1; s++) {
                double x = al[s * H + a], ux = 0;
                double D = m->sig ? x * fabs(1 - x) * A[s] : x * (A[s] + cd);
                for (int j = a * e; j < (a + 1) * e; j++)
                    ux += fabs(uq[j] * m->src[s]->h[o + j]);
                DL[a * MAXL + s] = D, edl[a * MAXL + s] = tu_gamma(e + n + 3) * D, UX[a * MAXL + s] = ux;
            }
        }
        for (int s = s0; s < s1; s++) {
            const float *x = m->src[s]->h + o;
            double r = kn ? m->rstd[(size_t)i * n + s] : 1, r3 = kn && hasq ? r * r * r / d : 0, cr = 0, ecr = 0;
            for (int a = 0; a < H; a++) {
                cr += DL[a * MAXL + s] * UX[a * MAXL + s];
                ecr += edl[a * MAXL + s] * UX[a * MAXL + s] + DL[a * MAXL + s] * tu_gamma(e + 2) * UX[a * MAXL + s];
                if (m->th) {
                    Pt[s] += DL[a * MAXL + s];
                    ePt[s] += edl[a * MAXL + s];
                }
            }
            ecr += tu_gamma(H) * cr;
            for (int j = 0; j < d; j++) {
                int a = j / e;
                double xj = fabs(x[j]), uj = fabs(uq[j]), D = DL[a * MAXL + s], E = edl[a * MAXL + s];
                double al_ = al[s * H + a];
                ms[s][o + j] += al_ * fabs(m->dh->h[o + j]) + D * r * uj + cr * r3 * xj;
                es[s][o + j] += E * r * uj + ecr * r3 * xj;
                if (!hasq)
                    continue;
                size_t pj = m->ws ? o + j : (size_t)j;
                double cj = kn ? fabs(m->g->h[j]) : 1;
                P[pj] += cj * D * r * xj, eP[pj] += cj * (E + tu_gamma(3) * D) * r * xj;
                Pg[j] += fabs(q[j]) * D * r * xj, ePg[j] += fabs(q[j]) * (E + tu_gamma(3) * D) * r * xj;
            }
        }
    }
}

/* depth_mix_fwd's bounds per element, both backends together: on h into
 * bh, on alpha into ba, on rstd into br (keynorm; its own rounding). */
static void mix_fwd_bounds(tp **src, int n, const tp *w, int ws, const tp *g, const tp *th, int keynorm,
                           int sigmoid, int H, int N, int d, double *bh, double *ba, double *br)
{
    int e = d / H;
    double *uq = bnew(d);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        const float *q = w && !th ? w->h + (size_t)i * ws : NULL;
        double r[MAXL];
        for (int s = 0; s < n; s++) {
            double ss = 0;
            for (int j = 0; j < d; j++)
                ss += (double)src[s]->h[o + j] * src[s]->h[o + j];
            r[s] = keynorm ? 1.0 / sqrt(ss / d + (double)AR_RMS_EPS) : 1.0;
            br[(size_t)i * n + s] = keynorm ? 2 * (RSTD_REL(d) + U) * r[s] : 0;
        }
        for (int j = 0; j < d; j++)
            uq[j] = q ? (keynorm ? (double)q[j] * g->h[j] : q[j]) : 0;
        for (int a = 0; a < H; a++) {
            double z[MAXL], ez[MAXL], zm = 0, ezm = 0, mx = -INFINITY, sum = 0;
            for (int s = 0; s < n; s++) {
                double dot = 0, mag = 0;
                for (int j = a * e; j < (a + 1) * e; j++)
                    dot += uq[j] * src[s]->h[o + j], mag += fabs(uq[j] * src[s]->h[o + j]);
                z[s] = th ? th->h[s] : r[s] * dot;
                ez[s] = th ? 0 : (tu_gamma(e + 2) + (keynorm ? RSTD_REL(d) : 0)) * r[s] * mag;
                zm = fmax(zm, th ? fabs(z[s]) : r[s] * mag), ezm = fmax(ezm, ez[s]), mx = fmax(mx, z[s]);
            }
            double eps = sm_eps(ezm, zm + log(n), 3, n), al[MAXL], ea[MAXL];
            for (int s = 0; s < n; s++) {
                if (sigmoid)
                    al[s] = 1 / (1 + exp(-z[s])), ea[s] = ez[s] + U_EXP + tu_gamma(2);
                else
                    sum += al[s] = exp(z[s] - mx), ea[s] = eps;
            }
            for (int s = 0; s < n; s++) {
                if (!sigmoid)
                    al[s] /= sum;
                ba[((size_t)i * n + s) * H + a] = 2 * ea[s] * al[s]; /* alpha's source-major layout */
                for (int j = a * e; j < (a + 1) * e; j++)
                    bh[o + j] += 2 * (ea[s] + tu_gamma(n + 1)) * al[s] * fabs(src[s]->h[o + j]);
            }
        }
    }
}

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
    double *bh = bnew(nd), *ba = bnew((size_t)N * H * n), *br = bnew((size_t)N * n);
    mix_fwd_bounds(src, n, w, ws, g, th, keynorm, sigmoid, H, N, d, bh, ba, br);
    tl ls = list(src, n);
#define OPT(t) ((t) ? D(t) : NULL)
    BOTH be->depth_mix_fwd(&(ar_depth_mix){.n = n, .src = CL(ls), .w = OPT(w), .wstride = ws, .g = OPT(g),
                                           .theta = OPT(th), .alpha = D(alpha), .rstd = D(rstd),
                                           .sigmoid = sigmoid, .H = H, .N = N, .d = d},
                           D(h));
    check("depth_mix_fwd h", h, bh);
    check("depth_mix_fwd alpha", alpha, ba);
    if (keynorm)
        check("depth_mix_fwd rstd", rstd, br);
    take(alpha), take(rstd);
    for (int s = 0; s < n; s++)
        dsrc[s] = nullg && s == 1 ? NULL : rnd(nd, -1, 1);
    tp *dh = rnd(nd, -1, 1);
    tp *dw = w && !nullg ? rnd(wn, -1, 1) : NULL, *dg = g && !nullg ? rnd(d, -1, 1) : NULL;
    tp *dth = th ? rnd(n, -1, 1) : NULL;
    /* the backward's bounds (mix_bwd_terms), both backends */
    mix_in mi = {src, w, g, th, dh, ws, sigmoid, H, n, alpha->h, rstd->h, NULL};
    double *es[MAXL], *ms[MAXL], *P = bnew(wn), *eP = bnew(wn), *Pg = bnew(d), *ePg = bnew(d);
    double *Pt = bnew(n), *ePt = bnew(n), *bd[MAXL], *bw = bnew(wn), *bg = bnew(d), *bt = bnew(n);
    for (int s = 0; s < n; s++)
        es[s] = bnew(nd), ms[s] = bnew(nd), bd[s] = bnew(nd);
    mix_bwd_terms(&mi, 0, n, N, d, es, ms, P, eP, Pg, ePg, Pt, ePt);
    for (int side = 0; side < 2; side++) {
        for (int s = 0; s < n; s++)
            if (dsrc[s])
                ds_bound(bd[s], es[s], ms[s], dsrc[s]->h, 3, nd);
        if (dw)
            dw_bound(bw, P, eP, NULL, dw->h, ws ? (double)n : (double)N * n, (int)wn);
        if (dg)
            dw_bound(bg, Pg, ePg, NULL, dg->h, (double)N * n, d);
        if (dth)
            dw_bound(bt, Pt, ePt, NULL, dth->h, (double)N * H, n);
    }
    tl ld = list(dsrc, n);
    BOTH be->depth_mix_bwd(&(ar_depth_mix){.n = n, .src = CL(ls), .w = OPT(w), .wstride = ws, .g = OPT(g),
                                           .theta = OPT(th), .alpha = D(alpha), .rstd = D(rstd),
                                           .sigmoid = sigmoid, .H = H, .N = N, .d = d},
                           DL(ld), OPT(dw), OPT(dg), OPT(dth), D(dh));
#undef OPT
    char what[64];
    for (int s = 0; s < n; s++)
        if (dsrc[s]) {
            snprintf(what, sizeof what, "depth_mix_bwd dsrc[%d]", s);
            check(what, dsrc[s], bd[s]);
        }
    if (dw)
        check("depth_mix_bwd dw", dw, bw);
    if (dg)
        check("depth_mix_bwd dg", dg, bg);
    if (dth)
        check("depth_mix_bwd dtheta", dth, bt);
    release();
}

Test(backend_ops, depth_mix)
{
    NEED_B();
    /* n, N, d, H, query, keynorm, theta, sigmoid, null grads */
    mix_case(4, 13, 72, 1, Q_SHARED, 1, 0, 0, 0); /* = one-phase depth attention */
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

/* depth_mix_cdot of one mixer into cd, each e-term dot within 2 gamma(e)
 * sum_(G_a) |dh h| on both; cd then holds A's result on both. */
static void mix_cdot_check(tp *cd, tp *dh, tp *h, int H, int N, int d)
{
    int e = d / H;
    double *bc = bnew((size_t)N * H);
    for (int i = 0; i < N; i++)
        for (int a = 0; a < H; a++) {
            for (int q = a * e; q < (a + 1) * e; q++)
                bc[(size_t)i * H + a] += fabs((double)dh->h[(size_t)i * d + q] * h->h[(size_t)i * d + q]);
            bc[(size_t)i * H + a] *= 2 * tu_gamma(e + 1);
        }
    BOTH be->depth_mix_cdot(D(cd), D(dh), D(h), H, N, d);
    check("depth_mix_cdot", cd, bc);
    take(cd);
}

/* The backward in pieces (depth_mix_cdot, depth_mix_bwd_chunk): C mixers
 * with source lists of k shared then c + 1 own sources (with shift, c own
 * ones before the shared: the chunk op takes those at places s + c, as
 * swa's shifting windows), their cdot from random dh and h, then the
 * chunk op over their shared sources and the last mixer's own ones. */
static void mix_chunk_case(int k, int C, int N, int d, int H, int query, int keynorm, int theta, int sigmoid,
                           int shift)
{
    at("depth_mix_bwd_chunk k=%d C=%d N=%d d=%d H=%d query=%d keynorm=%d theta=%d sigmoid=%d shift=%d", k, C, N, d,
       H, query, keynorm, theta, sigmoid, shift);
    enum { MC = 4 };
    size_t nd = (size_t)N * d;
    /* the pool: k shared, C own after them, C - 1 own before (shift) */
    int ns = k + C + (shift ? C - 1 : 0), n[MC], off[MC];
    cr_assert(ns <= MAXL);
    tp *src[MAXL], *dsrc[MAXL], *w[MC], *g[MC], *th[MC], *dh[MC], *h[MC], *al[MC], *rs[MC], *cd[MC], *dw[MC],
        *dg[MC], *dth[MC];
    sources(src, ns, N, d);
    for (int s = 0; s < ns; s++)
        dsrc[s] = rnd(nd, -1, 1);
    /* mixer c's lists: pool index lst[c][p] of its place p */
    int lst[MC][MAXL];
    tp *sl[MC][MAXL], *dsl[MC][MAXL];
    for (int c = 0; c < C; c++) {
        off[c] = shift ? c : 0;
        n[c] = off[c] + k + c + 1;
        for (int p = 0; p < n[c]; p++) {
            lst[c][p] = p < off[c] ? k + C + p : p - off[c];
            sl[c][p] = src[lst[c][p]], dsl[c][p] = dsrc[lst[c][p]];
        }
        w[c] = query ? queries(d, d) : NULL;
        g[c] = keynorm ? rnd(d, 0.5f, 1.5f) : NULL;
        th[c] = theta ? rnd(n[c], -2, 2) : NULL;
        dh[c] = rnd(nd, -1, 1), h[c] = rnd(nd, -1, 1), cd[c] = junk((size_t)N * H);
        /* weights of a softmax or sigmoid: positive, below 1 */
        al[c] = rnd((size_t)N * H * n[c], 0.01f, 0.9f), rs[c] = rnd((size_t)N * n[c], 0.5f, 2.0f);
        dw[c] = w[c] ? rnd(d, -1, 1) : NULL, dg[c] = g[c] ? rnd(d, -1, 1) : NULL;
        dth[c] = th[c] ? rnd(n[c], -1, 1) : NULL;
    }
    /* cdot, then A's on both for the chunk op (mix_bwd_terms with the cdot
     * given) */
    for (int c = 0; c < C; c++)
        mix_cdot_check(cd[c], dh[c], h[c], H, N, d);
    /* the chunk op over the shared sources for all C mixers, then the last
     * mixer's own ones: a shared source's gradient takes 3 C terms, an own
     * one 3; a mixer's dw, dg, dtheta sum N n terms over the calls (two
     * += each: the third u of dw_bound's gamma(3)) */
    double *es[MAXL], *ms[MAXL], *bd[MAXL], *P[MC], *eP[MC], *Pg[MC], *ePg[MC], *Pt[MC], *ePt[MC];
    for (int s = 0; s < ns; s++)
        es[s] = bnew(nd), ms[s] = bnew(nd), bd[s] = bnew(nd);
    for (int c = 0; c < C; c++) {
        P[c] = bnew(d), eP[c] = bnew(d), Pg[c] = bnew(d), ePg[c] = bnew(d), Pt[c] = bnew(n[c]), ePt[c] = bnew(n[c]);
        double *esc[MAXL], *msc[MAXL];
        for (int p = 0; p < n[c]; p++)
            esc[p] = es[lst[c][p]], msc[p] = ms[lst[c][p]];
        mix_in mi = {sl[c], w[c], g[c], th[c], dh[c], 0, sigmoid, H, n[c], al[c]->h, rs[c]->h, cd[c]->h};
        mix_bwd_terms(&mi, off[c], off[c] + k, N, d, esc, msc, P[c], eP[c], Pg[c], ePg[c], Pt[c], ePt[c]);
        if (c == C - 1) {
            mix_bwd_terms(&mi, 0, off[c], N, d, esc, msc, P[c], eP[c], Pg[c], ePg[c], Pt[c], ePt[c]);
            mix_bwd_terms(&mi, off[c] + k, n[c], N, d, esc, msc, P[c], eP[c], Pg[c], ePg[c], Pt[c], ePt[c]);
        }
    }
    double *bw[MC], *bg[MC], *bt[MC];
    for (int c = 0; c < C; c++)
        bw[c] = bnew(d), bg[c] = bnew(d), bt[c] = bnew(n[c]);
    for (int side = 0; side < 2; side++) {
        for (int s = 0; s < ns; s++)
            ds_bound(bd[s], es[s], ms[s], dsrc[s]->h, s < k ? 3 * C : 3, nd);
        for (int c = 0; c < C; c++) {
            if (dw[c])
                dw_bound(bw[c], P[c], eP[c], NULL, dw[c]->h, (double)N * n[c], d);
            if (dg[c])
                dw_bound(bg[c], Pg[c], ePg[c], NULL, dg[c]->h, (double)N * n[c], d);
            if (dth[c])
                dw_bound(bt[c], Pt[c], ePt[c], NULL, dth[c]->h, (double)N * H, n[c]);
        }
    }
    tl l0 = list(sl[0], n[0]), dl0 = list(dsl[0], n[0]), lc = list(sl[C - 1], n[C - 1]),
       dlc = list(dsl[C - 1], n[C - 1]);
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
        /* mixer 0 lists the shared sources at places 0..k-1 */
        ar_depth_mix_chunk ch = {.C = C, .s0 = 0, .s1 = k, .src = CL(l0), .n = n, .off = shift ? off : NULL,
                                 .w = pw, .g = pg, .theta = pth, .alpha = pal, .rstd = prs, .sigmoid = sigmoid,
                                 .H = H, .N = N, .d = d};
        be->depth_mix_bwd_chunk(&ch, DL(dl0), pdw, pdg, pdt, pdh, pcd);
        int c = C - 1; /* the last mixer's own sources, before and after the shared */
        int runs[2][2] = {{0, off[c]}, {off[c] + k, n[c]}};
        for (int r = 0; r < 2; r++) {
            ch = (ar_depth_mix_chunk){.C = 1, .s0 = runs[r][0], .s1 = runs[r][1], .src = CL(lc), .n = n + c,
                                      .w = pw + c, .g = pg + c, .theta = pth + c, .alpha = pal + c,
                                      .rstd = prs + c, .sigmoid = sigmoid, .H = H, .N = N, .d = d};
            be->depth_mix_bwd_chunk(&ch, DL(dlc), pdw + c, pdg + c, pdt + c, pdh + c, pcd + c);
        }
    }
#undef OPT
    char what[64];
    for (int s = 0; s < ns; s++) {
        snprintf(what, sizeof what, "depth_mix_bwd_chunk dsrc[%d]", s);
        check(what, dsrc[s], bd[s]);
    }
    for (int c = 0; c < C; c++) {
        if (dw[c])
            check("depth_mix_bwd_chunk dw", dw[c], bw[c]);
        if (dg[c])
            check("depth_mix_bwd_chunk dg", dg[c], bg[c]);
        if (dth[c])
            check("depth_mix_bwd_chunk dtheta", dth[c], bt[c]);
    }
    release();
}

Test(backend_ops, depth_mix_chunk)
{
    NEED_B();
    /* k, C, N, d, H, query, keynorm, theta, sigmoid, shift */
    mix_chunk_case(3, 4, 37, 64, 1, 1, 1, 0, 0, 0);
    mix_chunk_case(5, 3, 13, 72, 4, 1, 1, 0, 1, 0);
    mix_chunk_case(2, 2, 37, 20, 1, 1, 0, 0, 0, 0);
    mix_chunk_case(4, 3, 37, 20, 1, 0, 0, 1, 0, 0);
    mix_chunk_case(4, 2, 13, 72, 1, 0, 0, 0, 0, 0);
    mix_chunk_case(6, 4, 1024, 512, 8, 1, 1, 0, 0, 0);
    /* shifted places (swa's windows): one head, heads, static logits */
    mix_chunk_case(3, 4, 37, 64, 1, 1, 1, 0, 0, 1);
    mix_chunk_case(5, 3, 13, 72, 4, 1, 1, 0, 1, 1);
    mix_chunk_case(4, 3, 37, 20, 1, 0, 0, 1, 0, 1);
}

/* ---- weighted sums --------------------------------------------------- */

/* Each backend, per element: y = sum_s c_s x_s, n terms (accumulate: onto
 * y), within gamma(n + 1) (sum_s |c_s x_s| + |y|); dx_s += c_s dy, a
 * product and an add, within gamma(2) (|c_s dy| + |dx_s|); dc_s +=
 * sum_i dy_i x_si, len terms in any grouping (float or double partials),
 * within gamma(len + 2) (sum_i |dy_i x_si| + |dc_s|).  Twice each. */
static void wsum_case(int n, size_t len)
{
    at("wsum n=%d len=%zu", n, len);
    tp *x[MAXL], *dx[MAXL];
    for (int s = 0; s < n; s++)
        x[s] = rnd(len, -1, 1);
    tp *c = rnd(n, -1, 1), *y = junk(len), *y2 = rnd(len, -1, 1);
    double *by = bnew(len), *by2 = bnew(len);
    for (size_t i = 0; i < len; i++) {
        double m = 0;
        for (int s = 0; s < n; s++)
            m += fabs((double)c->h[s] * x[s]->h[i]);
        by[i] = 2 * tu_gamma(n + 1) * m;
        by2[i] = 2 * tu_gamma(n + 1) * (m + fabs(y2->h[i]));
    }
    tl lx = list(x, n);
    BOTH be->wsum_fwd(D(y), CL(lx), D(c), n, 0, len);
    check("wsum_fwd y", y, by);
    BOTH be->wsum_fwd(D(y2), CL(lx), D(c), n, 1, len);
    check("wsum_fwd (accumulate) y", y2, by2);
    for (int s = 0; s < n; s++)
        dx[s] = s == 1 ? NULL : rnd(len, -1, 1);
    tp *dy = rnd(len, -1, 1), *dc = rnd(n, -1, 1), *dc2 = rnd(n, -1, 1);
    double *bdx[MAXL], *bdc = bnew(n), *bdc2 = bnew(n);
    for (int s = 0; s < n; s++) {
        double m = 0;
        for (size_t i = 0; i < len; i++)
            m += fabs((double)dy->h[i] * x[s]->h[i]);
        bdc[s] = 2 * tu_gamma(len + 2) * (m + fabs(dc->h[s]));
        bdc2[s] = 2 * tu_gamma(len + 2) * (m + fabs(dc2->h[s]));
        bdx[s] = bnew(len);
        if (dx[s])
            for (size_t i = 0; i < len; i++)
                bdx[s][i] = 2 * tu_gamma(2) * (fabs((double)c->h[s] * dy->h[i]) + fabs(dx[s]->h[i]));
    }
    tl ldx = list(dx, n);
    BOTH be->wsum_bwd(DL(ldx), D(dc), D(dy), CL(lx), D(c), n, len);
    char what[64];
    for (int s = 0; s < n; s++)
        if (dx[s]) {
            snprintf(what, sizeof what, "wsum_bwd dx[%d]", s);
            check(what, dx[s], bdx[s]);
            take(dx[s]); /* the next backward adds onto A's on both */
            for (size_t i = 0; i < len; i++)
                bdx[s][i] = 2 * tu_gamma(2) * (fabs((double)c->h[s] * dy->h[i]) + fabs(dx[s]->h[i]));
        }
    check("wsum_bwd dc", dc, bdc);
    /* no dx at all, and no dc */
    BOTH be->wsum_bwd(NULL, D(dc2), D(dy), CL(lx), D(c), n, len);
    check("wsum_bwd (dx NULL) dc", dc2, bdc2);
    BOTH be->wsum_bwd(DL(ldx), NULL, D(dy), CL(lx), D(c), n, len);
    for (int s = 0; s < n; s++)
        if (dx[s]) {
            snprintf(what, sizeof what, "wsum_bwd (dc NULL) dx[%d]", s);
            check(what, dx[s], bdx[s]);
        }
    release();
}

/* Each backend, per element: y_i = sum_j C_ij x_j, n terms, within
 * gamma(n + 1) sum_j |C_ij x_j|; dx_j = sum_i C_ij dy_i, p terms (onto
 * dx_j: one more), within gamma(p + 1) (sum_i |C_ij dy_i| + |dx_j|); dC_ij
 * += dy_i . x_j, len terms in any grouping, within gamma(len + 2)
 * (sum |dy_i x_j| + |dC_ij|).  Twice each. */
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
    double *by[MAXL], *bdx[MAXL], *bdx2[MAXL], *bdC = bnew(nc), *bdC2 = bnew(nc);
    for (int i = 0; i < p; i++) {
        by[i] = bnew(len);
        for (size_t t = 0; t < len; t++) {
            double m = 0;
            for (int j = 0; j < n; j++)
                m += fabs((double)C->h[(size_t)i * ldc + j] * x[j]->h[t]);
            by[i][t] = 2 * tu_gamma(n + 1) * m;
        }
    }
    for (int j = 0; j < n; j++) {
        bdx[j] = bnew(len), bdx2[j] = bnew(len);
        for (size_t t = 0; t < len; t++) {
            double m = 0;
            for (int i = 0; i < p; i++)
                m += fabs((double)C->h[(size_t)i * ldc + j] * dy[i]->h[t]);
            bdx[j][t] = 2 * tu_gamma(p + 1) * m;
            bdx2[j][t] = 2 * tu_gamma(p + 1) * (m + fabs(dx2[j]->h[t]));
        }
    }
    for (int i = 0; i < p; i++)
        for (int j = 0; j < n; j++) {
            double m = 0;
            for (size_t t = 0; t < len; t++)
                m += fabs((double)dy[i]->h[t] * x[j]->h[t]);
            bdC[(size_t)i * ldc + j] = 2 * tu_gamma(len + 2) * (m + fabs(dC->h[(size_t)i * ldc + j]));
            bdC2[(size_t)i * ldc + j] = 2 * tu_gamma(len + 2) * (m + fabs(dC2->h[(size_t)i * ldc + j]));
        }
    tl lx = list(x, n), ly = list(y, p), ldy = list(dy, p), ldx = list(dx, n), ldx2 = list(dx2, n);
    char what[64];
    ar_wmix mix[2] = {{.p = p, .n = n, .C = C->a, .ldc = ldc, .len = len},
                      {.p = p, .n = n, .C = C->b, .ldc = ldc, .len = len}}; /* per side */
    BOTH be->wmix_fwd(&mix[side_], DL(ly), CL(lx));
    for (int i = 0; i < p; i++) {
        snprintf(what, sizeof what, "wmix_fwd y[%d]", i);
        check(what, y[i], by[i]);
    }
    /* z = sum_i zc_i y_i in the same pass: on each backend the bits of
     * wsum_fwd over the outputs it wrote; across backends the y_i's own
     * bounds carried through zc, and p terms in any order onto them, each
     * |y_i| <= (1 + gamma(n)) sum_j |C_ij x_j| */
    tp *zc = rnd((size_t)p, -1, 1), *z = junk(len), *z2 = junk(len);
    double *bz = bnew(len);
    for (size_t t = 0; t < len; t++)
        for (int i = 0; i < p; i++) {
            double m = by[i][t] / (2 * tu_gamma(n + 1));
            bz[t] += fabs(zc->h[i]) * (by[i][t] + 2 * tu_gamma(p + 1) * (1 + tu_gamma(n)) * m);
        }
    ar_wmix mz[2] = {mix[0], mix[1]};
    mz[0].zc = zc->a, mz[0].z = z->a, mz[1].zc = zc->b, mz[1].z = z->b;
    BOTH be->wmix_fwd(&mz[side_], DL(ly), CL(lx));
    BOTH be->wsum_fwd(D(z2), CL(ly), D(zc), p, 0, len);
    check("wmix_fwd z", z, bz);
    same_on_each("wmix_fwd z against wsum_fwd of its outputs", z, z2);
    for (int i = 0; i < p; i++) {
        snprintf(what, sizeof what, "wmix_fwd y[%d] (with z)", i);
        check(what, y[i], by[i]);
    }
    BOTH be->wmix_bwd(&mix[side_], DL(ldx), 0, D(dC), CL(ldy), CL(lx));
    BOTH be->wmix_bwd(&mix[side_], DL(ldx2), 1, NULL, CL(ldy), CL(lx));
    for (int j = 0; j < n; j++) {
        snprintf(what, sizeof what, "wmix_bwd dx[%d]", j);
        check(what, dx[j], bdx[j]);
        snprintf(what, sizeof what, "wmix_bwd (accumulate) dx[%d]", j);
        check(what, dx2[j], bdx2[j]);
    }
    /* the gaps between rows of ldc (bound 0) keep their values on both */
    check("wmix_bwd dC", dC, bdC);
    BOTH be->wmix_bwd(&mix[side_], NULL, 0, D(dC2), CL(ldy), CL(lx));
    check("wmix_bwd (dx NULL) dC", dC2, bdC2);
    release();
}

Test(backend_ops, wmix)
{
    NEED_B();
    wmix_case(4, 5, 5, 37 * 72);
    wmix_case(5, 4, 5, 1024 * 512 + 3);
    wmix_case(4, 1, 5, 2 * 16384 + 5);
    wmix_case(1, 1, 1, 1);
    wmix_case(4, MAXL, MAXL + 3, 64 * 64 + 5); /* static's chunk: more inputs than outputs */
}

Test(backend_ops, wsum)
{
    NEED_B();
    wsum_case(3, 1);
    wsum_case(5, 37 * 72);
    wsum_case(2, 2 * 16384 + 5);
    wsum_case(4, 1024 * 512 + 3);
}
