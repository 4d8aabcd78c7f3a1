/* The linear layers' products on libxsmm's JIT kernels, for the small
 * shapes of narrow, deep models (d 64-256), where OpenBLAS spends more time
 * packing operands and starting threads than multiplying: at N = 1024
 * tokens, d 64, these run 2-4x OpenBLAS's rate (BENCHMARKS.md, "Small
 * products").  Built with -Dcpu_gemm=libxsmm (the default where Debian's
 * libxsmm-dev is installed); products with larger weights go to OpenBLAS.
 *
 * libxsmm generates each kernel at run time for the CPU it runs on
 * (AVX-512 or AVX2 from CPUID; LIBXSMM_TARGET=hsw forces AVX2), so its
 * vector width is chosen at run time, not at build time.
 *
 * libxsmm is column-major; a row-major r x c matrix is the column-major
 * c x r matrix of the same bytes.  A kernel computes C (+)= A B on one
 * tile, m x k times k x n, every element a k-term sum in one kernel call.
 * Each tile is computed by one thread, the tiles fixed by the shape alone,
 * so the results do not depend on the thread count. */
#include "matmul_xsmm.h"

#include "workspace.h"

#include <libxsmm.h>
#include <stdio.h>
#include <string.h>

/* Tile sizes, measured on AMD Zen 3 and Zen 4 (BENCHMARKS.md): 32 tokens a
 * tile in the forward and dx; dW in 64 x 32 tiles of (in, outd), its
 * N-term sums taken 256 tokens at a time (beta = 1 chains them in order). */
enum { TOK_TILE = 32, DW_M = 64, DW_N = 32, DW_K = 256 };

/* Products whose weight matrix holds more floats than this (128 KiB) go to
 * OpenBLAS: every tile of tokens reads all of W, which then no longer
 * stays in L2 beside the tiles, and OpenBLAS's packed blocking wins (dx
 * and dW at 4096 x 688 x 256: 151 and 131 GFLOP/s against OpenBLAS's 202
 * and 186; BENCHMARKS.md, "Small products"). */
enum { XSMM_MAX_WEIGHT = 32768 };

/* whether a product of N tokens through an outd x in matrix is libxsmm's */
static int takes(int N, int in, int outd)
{
    return N > 0 && in > 0 && outd > 0 && (long)in * outd <= XSMM_MAX_WEIGHT;
}

/* libxsmm set up once, from the thread that runs the ops (not inside a
 * parallel region: kernels are dispatched before the tiles split) */
static void setup(void)
{
    static int done;
    if (!done) {
        libxsmm_init();
        done = 1;
    }
}

/* C (beta = 0: =, 1: +=) A B, m x n x k, leading dimensions la, lb, lc;
 * trans_b: B is read transposed.  NULL where libxsmm has no kernel. */
static libxsmm_smmfunction kernel(int m, int n, int k, int la, int lb, int lc, float beta, int trans_b)
{
    setup();
    float alpha = 1.0f;
    int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
    libxsmm_blasint M = m, Nn = n, K = k, lda = la, ldb = lb, ldc = lc;
    return libxsmm_smmdispatch(M, Nn, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, NULL);
}

xsmm_kern xsmm_dispatch(int m, int n, int k, int lda, int ldb, int ldc, float beta, int trans_b)
{
    return (xsmm_kern)kernel(m, n, k, lda, ldb, ldc, beta, trans_b);
}

void xsmm_run(xsmm_kern f, const float *a, const float *b, float *c)
{
    ((libxsmm_smmfunction)f)(a, b, c);
}

/* A kernel for full tiles of TOK_TILE tokens and one for the last, shorter
 * tile (the same where N is a multiple). */
typedef struct {
    libxsmm_smmfunction full, tail;
} tok_kernels;

/* C (m x n) (beta) A (m x k) B (k x n) per tile of n = TOK_TILE tokens. */
static int tok_plan(tok_kernels *t, int N, int m, int k, int la, int lb, int lc, float beta)
{
    t->full = kernel(m, TOK_TILE, k, la, lb, lc, beta, 0);
    t->tail = N % TOK_TILE ? kernel(m, N % TOK_TILE, k, la, lb, lc, beta, 0) : t->full;
    return t->full && t->tail;
}

/* Runs the plan over the tokens: A fixed, B and C stepping by their
 * leading dimensions (lb, lc) per token. */
static void tok_run(const tok_kernels *t, int N, const float *A, const float *B, int lb, float *C, int lc)
{
    int ntiles = (N + TOK_TILE - 1) / TOK_TILE;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < ntiles; i++) {
        size_t n0 = (size_t)i * TOK_TILE;
        libxsmm_smmfunction f = (int)n0 + TOK_TILE <= N ? t->full : t->tail;
        f(A, B + n0 * lb, C + n0 * lc);
    }
}

/* out (=) x W^T.  Column-major, per tile of n tokens:
 *   out^T (outd x n) = W^T (outd x in) x^T (in x n),
 * W^T being W transposed once per call (outd x in floats, against the
 * product's N outd in multiply-adds). */
int xsmm_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    tok_kernels t;
    if (!takes(N, in, outd) || !tok_plan(&t, N, outd, in, outd, in, outd, 0.0f))
        return 0;
    float *Wt = cpu_ws(WS_GEMM, (size_t)in * outd * sizeof(float));
    for (int o = 0; o < outd; o++)
        for (int i = 0; i < in; i++)
            Wt[(size_t)i * outd + o] = W[(size_t)o * in + i];
    tok_run(&t, N, Wt, x, in, out, outd);
    return 1;
}

/* dW += dout^T x:  dW^T (in x outd) += x^T (in x N) dout (N x outd), dout
 * read transposed from its column-major outd x N.  Tiles of DW_M x DW_N
 * of dW^T; each runs its N-term sum in chunks of DW_K tokens, in order.
 * The kernels: k[m full/tail][n full/tail][k full/tail]. */
typedef struct {
    libxsmm_smmfunction k[2][2][2];
} dw_kernels;

static int dw_plan(dw_kernels *p, int N, int in, int outd)
{
    int ms[2] = {DW_M, in % DW_M}, ns[2] = {DW_N, outd % DW_N}, ks[2] = {DW_K, N % DW_K};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) {
                p->k[a][b][c] = NULL;
                if (!ms[a] || !ns[b] || !ks[c])
                    continue; /* no such tail */
                p->k[a][b][c] = kernel(ms[a], ns[b], ks[c], in, outd, in, 1.0f, 1);
                if (!p->k[a][b][c])
                    return 0;
            }
    return 1;
}

static void dw_run(const dw_kernels *p, float *dW, const float *dout, const float *x, int N, int in,
                   int outd)
{
    int nm = (in + DW_M - 1) / DW_M, nn = (outd + DW_N - 1) / DW_N;
#pragma omp parallel for schedule(static) collapse(2)
    for (int j = 0; j < nn; j++)
        for (int i = 0; i < nm; i++) {
            int i0 = i * DW_M, j0 = j * DW_N;
            int a = i0 + DW_M > in, b = j0 + DW_N > outd;
            float *c = dW + (size_t)j0 * in + i0;
            for (int k0 = 0; k0 < N; k0 += DW_K)
                p->k[a][b][k0 + DW_K > N](x + (size_t)k0 * in + i0, dout + (size_t)k0 * outd + j0, c);
        }
}

/* dx += dout W (overwrite: =), per tile of tokens:
 *   dx^T (in x n) += W^T (in x outd) dout^T (outd x n),
 * W^T being row-major W read column-major; then dW as above. */
int xsmm_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W, int overwrite,
                    int N, int in, int outd)
{
    tok_kernels t;
    dw_kernels p;
    if (!takes(N, in, outd) || !dw_plan(&p, N, in, outd))
        return 0;
    if (dx && !tok_plan(&t, N, in, outd, in, outd, in, overwrite ? 0.0f : 1.0f))
        return 0;
    if (dx)
        tok_run(&t, N, W, dout, outd, dx, in);
    dw_run(&p, dW, dout, x, N, in, outd);
    return 1;
}

/* "libxsmm 1.17 AVX-512 (cpx)": the version, and the instruction set (and
 * libxsmm's name for it) that its JIT targets on this CPU. */
const char *xsmm_describe(void)
{
    static char buf[96];
    if (!buf[0]) {
        setup();
        const char *arch = libxsmm_get_target_arch();
        const char *isa = "SSE";
        if (strcmp(arch, "hsw") == 0)
            isa = "AVX2";
        else if (strcmp(arch, "snb") == 0)
            isa = "AVX";
        else if (strcmp(arch, "knl") == 0 || strcmp(arch, "knm") == 0 || strcmp(arch, "skx") == 0 ||
                 strcmp(arch, "clx") == 0 || strcmp(arch, "cpx") == 0 || strcmp(arch, "spr") == 0)
            isa = "AVX-512";
        snprintf(buf, sizeof buf, "libxsmm %s %s (%s)", LIBXSMM_CONFIG_VERSION, isa, arch);
    }
    return buf;
}
