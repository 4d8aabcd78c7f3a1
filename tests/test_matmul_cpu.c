/* The CPU backend's linear layers (lib/ops.def: matmul_fwd, matmul_bwd)
 * against the simple path, a double-precision triple loop, on random
 * inputs: out = x W^T, dx += dout W, dW += dout^T x, on shapes that take
 * every tile and tail of the libxsmm path (lib/cpu/matmul_xsmm.c: tokens
 * not a multiple of 32, in not of 64, outd not of 32, N not of 256) and
 * shapes it leaves to OpenBLAS (a weight of more than 32768 floats), and
 * both sides of that limit.
 *
 * Bound, per output element: a K-term float sum (the += base one more
 * term) in any order is within gamma(K + 1) of the magnitudes of its terms
 * (K = in, outd or N); computed here in double from |x|, |W|, |dout|.
 *
 * Built with libxsmm, its tiles are fixed by the shape alone, so its
 * results must be equal bit for bit on 1 and 2 threads; meson runs this
 * file once more under LIBXSMM_TARGET=hsw, the AVX2 kernels that AVX2-only
 * CPUs run, whatever this machine has.
 *
 * With -Dblis_products, BLIS's forward and dx products are checked the
 * same way on every CPU, and the backend is checked to send them there on
 * AMD CPUs alone, with every cblas_* name still resolving to OpenBLAS.
 *
 * Covers: lib/cpu/matmul_cpu.c, lib/cpu/matmul_xsmm.c, lib/cpu/matmul_blis.c,
 * lib/cpu/blis_setup.c. */
/* the C library's headers before BLIS's cblas.h, which defines
 * _POSIX_C_SOURCE and so would hide MAP_ANONYMOUS */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cblas.h>
#include <criterion/criterion.h>

#include "lib/backend.h"
#include "lib/cpu/matmul_blis.h"
#include "testutil.h"

static const ar_backend *be;
static uint64_t seed = 9100;

static void setup(void)
{
    be = ar_backend_cpu();
    be->set_threads(2);
}

TestSuite(matmul_cpu, .init = setup);

static float *rnd(size_t n)
{
    float *x = be->alloc((n ? n : 1) * sizeof(float));
    cr_assert(x, "out of memory");
    tu_fill_uniform(x, n, -1, 1, seed++);
    return x;
}

static float *copy(const float *a, size_t n)
{
    float *x = be->alloc((n ? n : 1) * sizeof(float));
    cr_assert(x, "out of memory");
    memcpy(x, a, n * sizeof(float));
    return x;
}

/* |got - exact| <= gamma(K + 1) mag for every element */
static void expect_within(const char *what, const float *got, const double *exact, const double *mag,
                          size_t n, int K, int N, int in, int outd)
{
    double g = tu_gamma(K + 1);
    size_t worst = 0;
    double wq = 0;
    for (size_t i = 0; i < n; i++) {
        double q = fabs(got[i] - exact[i]) / (g * mag[i] + 1e-300);
        if (!(q <= wq)) /* NaN counts as worst */
            wq = q, worst = i;
    }
    cr_expect(wq <= 1.0, "%s N=%d in=%d outd=%d: element %zu is %.9g, exact %.9g, error %.3g of the bound",
              what, N, in, outd, worst, got[worst], exact[worst], wq);
}

/* The exact out = x W^T into ex, and the magnitudes of its terms into
 * mag, in double */
static void fwd_exact(const float *x, const float *W, int N, int in, int outd, double *ex, double *mag)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < outd; o++) {
            double s = 0, m = 0;
            for (int i = 0; i < in; i++) {
                double t = (double)x[(size_t)n * in + i] * W[(size_t)o * in + i];
                s += t, m += fabs(t);
            }
            ex[(size_t)n * outd + o] = s, mag[(size_t)n * outd + o] = m;
        }
}

/* The exact dx = base + dout W (base NULL: none) into ex, and the
 * magnitudes of its terms into mag, in double */
static void dx_exact(const float *base, const float *dout, const float *W, int N, int in, int outd, double *ex,
                     double *mag)
{
    for (int n = 0; n < N; n++)
        for (int i = 0; i < in; i++) {
            double s = base ? base[(size_t)n * in + i] : 0, m = fabs(s);
            for (int o = 0; o < outd; o++) {
                double t = (double)dout[(size_t)n * outd + o] * W[(size_t)o * in + i];
                s += t, m += fabs(t);
            }
            ex[(size_t)n * in + i] = s, mag[(size_t)n * in + i] = m;
        }
}

static void matmul_case(int N, int in, int outd)
{
    size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd;
    float *x = rnd(nx), *W = rnd(nw), *dout = rnd(no);
    float *out = rnd(no), *dx = rnd(nx), *dW = rnd(nw); /* garbage / += bases */
    float *dx0 = copy(dx, nx), *dW0 = copy(dW, nw), *dW2 = copy(dW, nw);
    double *ex = malloc((no > nx ? (no > nw ? no : nw) : (nx > nw ? nx : nw)) * sizeof(double));
    double *mag = malloc((no > nx ? (no > nw ? no : nw) : (nx > nw ? nx : nw)) * sizeof(double));
    cr_assert(ex && mag);

    be->matmul_fwd(out, x, W, N, in, outd);
    fwd_exact(x, W, N, in, outd, ex, mag);
    expect_within("matmul_fwd out", out, ex, mag, no, in, N, in, outd);

    be->matmul_bwd(dx, dW, dout, x, W, 0, N, in, outd);
    dx_exact(dx0, dout, W, N, in, outd, ex, mag);
    expect_within("matmul_bwd dx", dx, ex, mag, nx, outd, N, in, outd);
    for (int o = 0; o < outd; o++)
        for (int i = 0; i < in; i++) {
            double s = dW0[(size_t)o * in + i], m = fabs(s);
            for (int n = 0; n < N; n++) {
                double t = (double)dout[(size_t)n * outd + o] * x[(size_t)n * in + i];
                s += t, m += fabs(t);
            }
            ex[(size_t)o * in + i] = s, mag[(size_t)o * in + i] = m;
        }
    expect_within("matmul_bwd dW", dW, ex, mag, nw, N, N, in, outd);

    /* dx NULL: dW alone, the same dW */
    be->matmul_bwd(NULL, dW2, dout, x, W, 0, N, in, outd);
    cr_expect(memcmp(dW2, dW, nw * sizeof(float)) == 0, "N=%d in=%d outd=%d: dW differs when dx is NULL",
              N, in, outd);

    /* overwrite: dx = dout W, whatever dx held (NaN here: a kernel that
     * reads it, even times zero, fails); dW still += */
    float *dxo = rnd(nx), *dW3 = copy(dW0, nw);
    for (size_t i = 0; i < nx; i++)
        dxo[i] = NAN;
    be->matmul_bwd(dxo, dW3, dout, x, W, 1, N, in, outd);
    dx_exact(NULL, dout, W, N, in, outd, ex, mag);
    expect_within("matmul_bwd (overwrite) dx", dxo, ex, mag, nx, outd, N, in, outd);
    cr_expect(memcmp(dW3, dW, nw * sizeof(float)) == 0, "N=%d in=%d outd=%d: dW differs under overwrite", N, in,
              outd);
    be->free(dxo), be->free(dW3);

    be->free(x), be->free(W), be->free(dout), be->free(out), be->free(dx), be->free(dW);
    be->free(dx0), be->free(dW0), be->free(dW2);
    free(ex), free(mag);
}

Test(matmul_cpu, against_the_simple_path)
{
    static const int shapes[][3] = {
        {1, 1, 1},      {1, 5, 3},      {13, 72, 37},   {31, 64, 64},    {32, 64, 64},
        {33, 65, 33},   {100, 64, 192}, {257, 176, 64}, {300, 130, 96},  {1024, 64, 352},
        {1024, 64, 256}, {600, 256, 688}, {37, 1100, 20}, {70, 24, 1030}, {50, 128, 256}, {50, 129, 256},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        matmul_case(shapes[s][0], shapes[s][1], shapes[s][2]);
}

/* The products of one shape on 1 and then 2 threads: out, dx, dW */
static void run_on(int threads, int N, int in, int outd, const float *x, const float *W,
                   const float *dout, float *out, float *dx, float *dW)
{
    be->set_threads(threads);
    memset(dx, 0, (size_t)N * in * sizeof(float));
    memset(dW, 0, (size_t)outd * in * sizeof(float));
    be->matmul_fwd(out, x, W, N, in, outd);
    be->matmul_bwd(dx, dW, dout, x, W, 0, N, in, outd);
    be->set_threads(2);
}

Test(matmul_cpu, libxsmm_results_do_not_depend_on_the_thread_count)
{
    if (!ar_cpu_small_products())
        cr_skip_test("built with -Dcpu_gemm=openblas: OpenBLAS promises this only for one thread count");
    cr_log_info("small products: %s", ar_cpu_small_products());
    int N = 300, in = 130, outd = 96;
    size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd;
    float *x = rnd(nx), *W = rnd(nw), *dout = rnd(no);
    float *o1 = rnd(no), *o2 = rnd(no), *dx1 = rnd(nx), *dx2 = rnd(nx), *dw1 = rnd(nw), *dw2 = rnd(nw);
    run_on(1, N, in, outd, x, W, dout, o1, dx1, dw1);
    run_on(2, N, in, outd, x, W, dout, o2, dx2, dw2);
    cr_expect(memcmp(o1, o2, no * sizeof(float)) == 0, "out differs between 1 and 2 threads");
    cr_expect(memcmp(dx1, dx2, nx * sizeof(float)) == 0, "dx differs between 1 and 2 threads");
    cr_expect(memcmp(dw1, dw2, nw * sizeof(float)) == 0, "dW differs between 1 and 2 threads");
    float *all[] = {x, W, dout, o1, o2, dx1, dx2, dw1, dw2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        be->free(all[i]);
}

/* The libxsmm path is the one taken at the small shapes: its results are
 * not OpenBLAS's.  Equal results would mean the build option did nothing.
 * The two round differently on dW += dout^T x: libxsmm's kernels start
 * their sums from the base (beta = 1), OpenBLAS's sum the 1024 products
 * and then add the base; on 4096 random elements some last bit differs
 * almost surely. */
Test(matmul_cpu, libxsmm_is_the_path_taken)
{
    if (!ar_cpu_small_products())
        cr_skip_test("built with -Dcpu_gemm=openblas");
    int N = 1024, in = 64, outd = 64;
    size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd;
    float *x = rnd(nx), *dout = rnd(no), *W = rnd(nw), *dW = rnd(nw), *ref = copy(dW, nw);
    be->matmul_bwd(NULL, dW, dout, x, W, 0, N, in, outd);
    /* the same product through the CBLAS the backend links */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outd, in, N, 1.0f, dout, outd, x, in, 1.0f, ref, in);
    cr_expect(memcmp(ref, dW, nw * sizeof(float)) != 0,
              "dW equals OpenBLAS's bit for bit: the libxsmm path was not taken");
    be->free(x), be->free(dout), be->free(W), be->free(dW), be->free(ref);
}

/* ---- no read past an operand ---- */

/* n floats ending flush against a page no access reaches (a read past the
 * last float faults); *map and *len for munmap */
static float *fenced(size_t n, char **map, size_t *len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = (n ? n : 1) * sizeof(float);
    size_t pages = (bytes + pg - 1) / pg + 1;
    *len = pages * pg;
    *map = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(*map != MAP_FAILED, "mmap of %zu bytes", *len);
    cr_assert_eq(mprotect(*map + (pages - 1) * pg, pg, PROT_NONE), 0, "mprotect");
    float *p = (float *)(*map + (pages - 1) * pg - bytes);
    tu_fill_uniform(p, n ? n : 1, -1, 1, seed++);
    return p;
}

/* the product under way, said by the fault's handler */
static char under_way[160];
static volatile size_t under_way_len;

static void now_running(const char *op, int N, int in, int outd)
{
    int n = snprintf(under_way, sizeof under_way, "a product read past an operand: %s N %d in %d out %d\n", op, N,
                     in, outd);
    under_way_len = n > 0 && (size_t)n < sizeof under_way ? (size_t)n : 0;
}

/* async-signal-safe: what ran, then the default action (the test crashes) */
static void on_fault(int sig)
{
    (void)!write(STDERR_FILENO, under_way, under_way_len);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Every operand of matmul_fwd and matmul_bwd ends at a page that faults
 * when read: no library under the products (OpenBLAS, BLIS, libxsmm) may
 * read past one, as Debian 12's BLIS 0.9.0 did on its small-product path
 * (lib/cpu/blis_setup.c).  Shapes with every small remainder of the
 * libraries' register tiles (up to 6-16 rows and 16-32 columns), and a few
 * larger ones of either library's path, on 2 threads. */
Test(matmul_cpu, products_read_nothing_past_their_operands)
{
    static const int Ns[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 33, 70};
    static const int ins[] = {1, 2, 3, 5, 8, 16, 17, 33, 64};
    static const int outds[] = {1, 2, 4, 7, 16, 17, 33, 64};
    static const int large[][3] = {{1000, 300, 200}, {257, 176, 64}, {600, 256, 688}, {70, 24, 1030}};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    int nsmall = (int)(sizeof Ns / sizeof Ns[0] * sizeof ins / sizeof ins[0] * sizeof outds / sizeof outds[0]);
    int nlarge = (int)(sizeof large / sizeof large[0]);
    for (int c = 0; c < nsmall + nlarge; c++) {
        int N, in, outd;
        if (c < nsmall) {
            int ni = (int)(sizeof ins / sizeof ins[0]), no = (int)(sizeof outds / sizeof outds[0]);
            N = Ns[c / (ni * no)], in = ins[c / no % ni], outd = outds[c % no];
        } else {
            N = large[c - nsmall][0], in = large[c - nsmall][1], outd = large[c - nsmall][2];
        }
        size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd;
        char *m[6];
        size_t l[6];
        float *x = fenced(nx, &m[0], &l[0]), *W = fenced(nw, &m[1], &l[1]), *dout = fenced(no, &m[2], &l[2]);
        float *out = fenced(no, &m[3], &l[3]), *dx = fenced(nx, &m[4], &l[4]), *dW = fenced(nw, &m[5], &l[5]);
        now_running("matmul_fwd", N, in, outd);
        be->matmul_fwd(out, x, W, N, in, outd);
        now_running("matmul_bwd with dx", N, in, outd);
        be->matmul_bwd(dx, dW, dout, x, W, 0, N, in, outd);
        now_running("matmul_bwd overwriting dx", N, in, outd);
        be->matmul_bwd(dx, dW, dout, x, W, 1, N, in, outd);
        now_running("matmul_bwd without dx", N, in, outd);
        be->matmul_bwd(NULL, dW, dout, x, W, 0, N, in, outd);
        for (int i = 0; i < 6; i++)
            munmap(m[i], l[i]);
    }
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    cr_log_info("%d shapes, every operand against a fence", nsmall + nlarge);
}

/* ---- the large forward and dx products on BLIS (lib/cpu/matmul_blis.c) ---- */

/* BLIS's two products against the simple path, whatever the CPU (the
 * backend sends them there on AMD CPUs only): shapes with every remainder
 * of its zen3 and haswell register tiles (6 x 16 floats), below and above
 * the backend's 512-row cut; dx both += and overwritten (over NaN). */
Test(matmul_cpu, blis_products_against_the_simple_path)
{
#ifndef AR_HAVE_BLIS_PRODUCTS
    cr_skip_test("built without -Dblis_products");
#else
    static const int shapes[][3] = {{1, 1, 1}, {7, 17, 33}, {511, 130, 300}, {600, 256, 688}, {1000, 300, 200},
                                    {517, 1100, 31}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int N = shapes[c][0], in = shapes[c][1], outd = shapes[c][2];
        size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd, nmax = nx > no ? nx : no;
        float *x = rnd(nx), *W = rnd(nw), *dout = rnd(no), *out = rnd(no), *dx = rnd(nx), *dx0 = copy(dx, nx);
        double *ex = malloc(nmax * sizeof(double)), *mag = malloc(nmax * sizeof(double));
        cr_assert(ex && mag);
        blis_matmul_fwd(out, x, W, N, in, outd);
        fwd_exact(x, W, N, in, outd, ex, mag);
        expect_within("BLIS fwd out", out, ex, mag, no, in, N, in, outd);
        blis_matmul_dx(dx, dout, W, 0, N, in, outd);
        dx_exact(dx0, dout, W, N, in, outd, ex, mag);
        expect_within("BLIS dx (+=)", dx, ex, mag, nx, outd, N, in, outd);
        for (size_t i = 0; i < nx; i++)
            dx[i] = NAN;
        blis_matmul_dx(dx, dout, W, 1, N, in, outd);
        dx_exact(NULL, dout, W, N, in, outd, ex, mag);
        expect_within("BLIS dx (overwrite)", dx, ex, mag, nx, outd, N, in, outd);
        be->free(x), be->free(W), be->free(dout), be->free(out), be->free(dx), be->free(dx0);
        free(ex), free(mag);
    }
#endif
}

/* Where BLIS runs the large products: the backend's results are BLIS's bit
 * for bit (the same code, shape and threads), and the small ones and the
 * weight gradient stay on the CBLAS; elsewhere everything is the CBLAS's. */
Test(matmul_cpu, blis_takes_the_large_products_on_amd_cpus_only)
{
#ifndef AR_HAVE_BLIS_PRODUCTS
    cr_skip_test("built without -Dblis_products");
#else
    __builtin_cpu_init();
    int amd = __builtin_cpu_is("amd");
    cr_expect_eq(blis_takes(512), amd, "BLIS takes 512-row products: %d, on an AMD CPU: %d", blis_takes(512), amd);
    cr_expect_eq(blis_takes(511), 0, "BLIS takes a 511-row product");
    cr_expect_eq(ar_cpu_large_products() != NULL, amd, "large products named '%s' on %s CPU",
                 ar_cpu_large_products() ? ar_cpu_large_products() : "(none)", amd ? "an AMD" : "a non-AMD");
    int N = 600, in = 256, outd = 688; /* a weight libxsmm leaves */
    size_t nx = (size_t)N * in, nw = (size_t)outd * in, no = (size_t)N * outd;
    float *x = rnd(nx), *W = rnd(nw), *dout = rnd(no);
    float *out = rnd(no), *ref = rnd(no), *dx = rnd(nx), *dxref = copy(dx, nx), *dW = rnd(nw), *dWref = copy(dW, nw);
    be->matmul_fwd(out, x, W, N, in, outd);
    be->matmul_bwd(dx, dW, dout, x, W, 0, N, in, outd);
    if (amd) {
        blis_matmul_fwd(ref, x, W, N, in, outd);
        blis_matmul_dx(dxref, dout, W, 0, N, in, outd);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, outd, in, 1.0f, x, in, W, in, 0.0f, ref, outd);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, outd, 1.0f, dout, outd, W, in, 1.0f, dxref,
                    in);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outd, in, N, 1.0f, dout, outd, x, in, 1.0f, dWref, in);
    const char *lib = amd ? "BLIS's" : "the CBLAS's";
    cr_expect(memcmp(out, ref, no * sizeof(float)) == 0, "out is not %s", lib);
    cr_expect(memcmp(dx, dxref, nx * sizeof(float)) == 0, "dx is not %s", lib);
    cr_expect(memcmp(dW, dWref, nw * sizeof(float)) == 0, "dW is not the CBLAS's");
    float *all[] = {x, W, dout, out, ref, dx, dxref, dW, dWref};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        be->free(all[i]);
#endif
}

/* BLIS is linked after OpenBLAS, and both export cblas_sgemm and the BLAS
 * names: every call by name must reach OpenBLAS (GSL's included, which
 * resolve the same way), or products would run on BLIS's small-matrix
 * path and on kernels nobody chose. */
Test(matmul_cpu, cblas_names_resolve_to_openblas)
{
#ifndef AR_HAVE_BLIS_PRODUCTS
    cr_skip_test("built without -Dblis_products");
#else
    void *fns[] = {(void *)cblas_sgemm, (void *)cblas_sgemv, (void *)cblas_dgemm};
    const char *names[] = {"cblas_sgemm", "cblas_sgemv", "cblas_dgemm"};
    for (int i = 0; i < 3; i++) {
        Dl_info info;
        cr_assert(dladdr(fns[i], &info) && info.dli_fname, "dladdr(%s) found no library", names[i]);
        cr_expect(strstr(info.dli_fname, "openblas") != NULL, "%s resolves to %s, not OpenBLAS", names[i],
                  info.dli_fname);
    }
#endif
}
