/* The linear layers' three products on each library that could run them,
 * at the model shapes researchers run on a CPU, to choose -Dcpu_gemm's
 * default (BENCHMARKS.md, "Small products"):
 *   fwd  out = x W^T     (N x outd, K = in)
 *   dx   dx += dout W    (N x in,   K = outd)
 *   dW   dW += dout^T x  (outd x in, K = N)
 * each in GFLOP/s (2 N in outd per product), best of REPS, on:
 *   cblas     cblas_sgemm of the CBLAS attnres links (OpenBLAS, or BLIS
 *             under -Dblas=blis; the header names it and its kernels);
 *   BLIS      bli_sgemm of Debian's OpenMP BLIS (libblis4-openmp), its
 *             own API (its cblas_sgemm would call the sgemm_ of OpenBLAS
 *             where a -Dblis_products build has both loaded), reading
 *             row-major operands through its general strides, when it is
 *             installed;
 *   attnres   the CPU backend's matmul ops as this build runs them (with
 *             -Dcpu_gemm=libxsmm: libxsmm's JIT kernels on 32-token tiles,
 *             lib/cpu/matmul_xsmm.c, where they take the shape; with
 *             -Dblis_products on an AMD CPU: BLIS's, lib/cpu/matmul_blis.c,
 *             for the large forward and dx products).
 *
 * usage: bench_gemm_libs THREADS [N IN OUTD]...
 *   without shapes: the products of configs/ablation.yaml (N = 1024,
 *   d 64, d_ff 176), bench-small (N = 4096, d 256, d_ff 688) and
 *   bench-medium (N = 4096, d 512, d_ff 1376). */
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backend.h"
#include "core/clock.h"
#include "run/machine.h"

#define REPS 5

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                               float, float *, int);

static float *rnd(size_t n, unsigned seed)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (!x) {
        fprintf(stderr, "bench_gemm_libs: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

typedef struct {
    int N, in, outd;
    float *x, *W, *dout, *out, *dx, *dW;
} shape;

/* BLIS's bli_sgemm (blis.h: trans_t an enum, 0 no transpose; dim_t and
 * inc_t 64-bit), looked up in the library at run time */
typedef void (*bli_sgemm_fn)(int, int, int64_t, int64_t, int64_t, float *, float *, int64_t, int64_t, float *,
                             int64_t, int64_t, float *, float *, int64_t, int64_t);
static bli_sgemm_fn bli_sgemm_p;

/* a row-major cblas_sgemm on bli_sgemm: op(A) is M x K, read in place
 * through its strides (transposed: row stride 1, column stride lda) */
static void blis_rowmajor(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)order;
    int64_t rsa = ta == CblasTrans ? 1 : lda, csa = ta == CblasTrans ? lda : 1;
    int64_t rsb = tb == CblasTrans ? 1 : ldb, csb = tb == CblasTrans ? ldb : 1;
    bli_sgemm_p(0, 0, M, N, K, &alpha, (float *)A, rsa, csa, (float *)B, rsb, csb, &beta, C, ldc, 1);
}

/* the three products through one CBLAS */
static void cblas_run(cblas_sgemm_fn f, const shape *s, int which)
{
    int N = s->N, in = s->in, outd = s->outd;
    if (which == 0)
        f(CblasRowMajor, CblasNoTrans, CblasTrans, N, outd, in, 1.0f, s->x, in, s->W, in, 0.0f, s->out, outd);
    else if (which == 1)
        f(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, outd, 1.0f, s->dout, outd, s->W, in, 1.0f, s->dx, in);
    else
        f(CblasRowMajor, CblasTrans, CblasNoTrans, outd, in, N, 1.0f, s->dout, outd, s->x, in, 1.0f, s->dW, in);
}

/* the same through the backend: dW alone is matmul_bwd with dx NULL; dx
 * is matmul_bwd less that */
static void backend_run(const ar_backend *be, const shape *s, int which)
{
    if (which == 0)
        be->matmul_fwd(s->out, s->x, s->W, s->N, s->in, s->outd);
    else if (which == 2)
        be->matmul_bwd(NULL, s->dW, s->dout, s->x, s->W, 0, s->N, s->in, s->outd);
    else
        be->matmul_bwd(s->dx, s->dW, s->dout, s->x, s->W, 0, s->N, s->in, s->outd);
}

/* best GFLOP/s of REPS timed batches, each about 0.1 s */
static double rate(cblas_sgemm_fn f, const ar_backend *be, const shape *s, int which, double sub)
{
    double fl = 2.0 * s->N * s->in * s->outd;
    int it = (int)(2e10 / 200 / fl) + 1;
    double best = 0;
    for (int r = 0; r <= REPS; r++) { /* r = 0: warm-up */
        double t = ar_now_s();
        for (int i = 0; i < it; i++)
            f ? cblas_run(f, s, which) : backend_run(be, s, which);
        double dt = (ar_now_s() - t) / it - sub;
        double g = fl / (dt > 1e-9 ? dt : 1e-9) / 1e9;
        if (r > 0 && g > best)
            best = g;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (argc - 2) % 3 != 0) {
        fprintf(stderr, "usage: bench_gemm_libs THREADS [N IN OUTD]...\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(threads);
    void *blis = dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    bli_sgemm_p = blis ? (bli_sgemm_fn)dlsym(blis, "bli_sgemm") : NULL;
    cblas_sgemm_fn blis_sgemm = bli_sgemm_p ? (cblas_sgemm_fn)blis_rowmajor : NULL;
    if (blis) {
        void (*set)(long) = (void (*)(long))dlsym(blis, "bli_thread_set_num_threads");
        if (set)
            set(threads);
    }
    static const int defaults[][3] = {
        {1024, 64, 192},  {1024, 64, 64},   {1024, 64, 352},   {1024, 176, 64},  {1024, 64, 256},
        {4096, 256, 768}, {4096, 256, 256}, {4096, 256, 1376}, {4096, 688, 256},
        {4096, 512, 1536}, {4096, 512, 512}, {4096, 512, 2752}, {4096, 1376, 512},
    };
    int nshapes = argc > 2 ? (argc - 2) / 3 : (int)(sizeof defaults / sizeof defaults[0]);
    const char *small = ar_cpu_small_products();
    char linked[96];
    ar_machine_blas(linked, sizeof linked);
    char *plus = strstr(linked, " + "); /* the other libraries: the attnres column's */
    if (plus)
        *plus = '\0';
    printf("%d threads; cblas: %s's cblas_sgemm (linked); BLIS: %s; attnres: the CPU backend's matmul ops (%s)\n",
           threads, linked, blis_sgemm ? "libblis4-openmp's bli_sgemm" : "not installed",
           small ? small : "the linked CBLAS: built with -Dcpu_gemm=openblas");
    if (ar_cpu_large_products())
        printf("attnres: the large forward and dx products on %s\n", ar_cpu_large_products());
    printf("GFLOP/s, best of %d\n", REPS);
    printf("%-18s | %9s %8s %8s | %9s %8s %8s | %9s %8s %8s\n", "N x in x outd", "fwd cblas", "BLIS", "attnres",
           "dx cblas", "BLIS", "attnres", "dW cblas", "BLIS", "attnres");
    for (int i = 0; i < nshapes; i++) {
        shape s;
        s.N = argc > 2 ? atoi(argv[2 + 3 * i]) : defaults[i][0];
        s.in = argc > 2 ? atoi(argv[3 + 3 * i]) : defaults[i][1];
        s.outd = argc > 2 ? atoi(argv[4 + 3 * i]) : defaults[i][2];
        if (s.N < 1 || s.in < 1 || s.outd < 1) {
            fprintf(stderr, "bench_gemm_libs: shape %d: N, IN and OUTD must be positive integers\n", i + 1);
            return 2;
        }
        size_t nx = (size_t)s.N * s.in, nw = (size_t)s.outd * s.in, no = (size_t)s.N * s.outd;
        s.x = rnd(nx, 1), s.W = rnd(nw, 2), s.dout = rnd(no, 3);
        s.out = rnd(no, 4), s.dx = rnd(nx, 5), s.dW = rnd(nw, 6);
        double g[3][3];
        for (int w = 0; w < 3; w++) {
            g[w][0] = rate((cblas_sgemm_fn)cblas_sgemm, NULL, &s, w, 0);
            g[w][1] = blis_sgemm ? rate(blis_sgemm, NULL, &s, w, 0) : 0;
            if (w == 1) {
                /* matmul_bwd with dx is dx + dW: its time less dW's */
                double fl = 2.0 * s.N * s.in * s.outd, tdw = fl / (rate(NULL, be, &s, 2, 0) * 1e9);
                g[w][2] = rate(NULL, be, &s, 1, tdw);
            } else {
                g[w][2] = rate(NULL, be, &s, w, 0);
            }
        }
        char name[48];
        snprintf(name, sizeof name, "%d x %d x %d", s.N, s.in, s.outd);
        printf("%-18s |", name);
        for (int w = 0; w < 3; w++) {
            char b[16] = "-";
            if (blis_sgemm)
                snprintf(b, sizeof b, "%.1f", g[w][1]);
            printf(" %9.1f %8s %8.1f |", g[w][0], b, g[w][2]);
        }
        printf("\n");
        fflush(stdout);
        free(s.x), free(s.W), free(s.dout), free(s.out), free(s.dx), free(s.dW);
    }
    return 0;
}
