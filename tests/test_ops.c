/* Tests of the CPU backend's op table (lib/backend.h).
 *
 * For every op with a backward: a finite-difference gradient check of every
 * input and parameter.  The scalar loss is L = sum(out * R) with a fixed
 * random R, computed in double from the float outputs; central differences
 * use the float-representable step actually taken.  The pass criterion is
 * the relative error ||g - g_fd|| / ||g_fd|| over all entries of one
 * gradient, below FD_TOL.
 *
 * Also: forwards and backwards against naive double-precision loops, at
 * sizes that are multiples of nothing (N=7, d=12, T=5, nh=3, hd=4) and at
 * large sizes (these take the threaded and blocked code paths), each element
 * held to a bound from the sums behind it (check_bnd); the += / =
 * conventions, attention and depth-attention invariants, RoPE inversion,
 * AdamW against a scalar reference, and bitwise determinism of the backward
 * reductions with 2 threads.
 *
 * Covers: lib/cpu/ (attention_cpu.c, kernels_cpu.c, matmul_cpu.c,
 * backend_cpu.c) through the op table of lib/ops.def; the one-phase
 * reference of depth attention is tests/depth_attn_ref.c, a test-only op. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "depth_attn_ref.h"
#include "lib/backend.h"
#include "testutil.h"

/* Finite differences with step FD_EPS = 1e-2 (1e-3 for inputs the op is
 * linear in): the relative error ||g - g_fd|| / ||g_fd|| must be below
 * FD_TOL = 2e-3.  This is no rounding bound: a central difference is off by
 * its truncation, eps^2 |f'''| / 6 (about 2e-5 of |f'| for these ops' O(1)
 * curvature at O(1) inputs; none for linear inputs), and by the rounding of
 * its two losses over 2 eps (the outputs one entry moves carry errors of
 * random sign, about sqrt(K) u of their magnitude, K <= 70 the longest sum
 * behind them: a few 1e-4 of |g| at eps = 1e-3).  FD_TOL sits above both
 * and below a wrong term of a few percent; each op's precision is held by
 * its double reference. */
#define FD_EPS 1e-2f
#define FD_TOL 2e-3

/* Bounds from the arithmetic (testutil.h), u = 2^-24:
 * - fast_expf (the CPU's softmaxes) is within 1.5 u of exp over its whole
 *   domain (every float checked), libm's expf within 1 u: U_EXP = 2 u.
 * - rstd = 1/sqrt(sum x^2 / d + eps) in float: the d-term sum of squares is
 *   off by gamma(d) relative (every term positive), the division and the
 *   + eps by 2 u more; the square root halves that and adds u, the
 *   reciprocal u: RSTD_REL(d) = gamma(d)/2 + 3 u.
 * Each bound below counts one rounding more than the op has, for
 * second-order terms and the double reference's own rounding. */
#define U TU_U_FLOAT
#define U_EXP (2 * U)
#define RSTD_REL(d) (tu_gamma(d) / 2 + 3 * U)

static const ar_backend *be;

static void setup(void)
{
    be = ar_backend_cpu();
    be->set_threads(2);
}

TestSuite(ops, .init = setup);

/* ---- helpers ---------------------------------------------------------- */

static uint64_t seed_ctr = 1000;

static float *rnd(size_t n, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    tu_fill_uniform(x, n, lo, hi, seed_ctr++);
    return x;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *dup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double dotf(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

typedef double (*loss_fn)(void *ctx);

/* Central differences of f over every entry of x; returns
 * ||g - g_fd|| / ||g_fd||. */
static double fd_check(float *x, size_t n, const float *g, loss_fn f, void *ctx, float eps)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        float xp = save + eps, xm = save - eps;
        x[i] = xp;
        double lp = f(ctx);
        x[i] = xm;
        double lm = f(ctx);
        x[i] = save;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        num += (g[i] - fd) * (g[i] - fd);
        den += fd * fd;
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

#define CHECK_FD(name, x, n, g, f, ctx, eps)                                             \
    do {                                                                                 \
        double e_ = fd_check((x), (n), (g), (f), (ctx), (eps));                          \
        cr_assert(e_ < FD_TOL, "%s: finite-difference rel err %g >= %g", name, e_, FD_TOL); \
    } while (0)

/* |a_i - ref_i| <= bnd_i for every i: an op in float against its
 * definition in double, bnd_i the bound that the op's roundings leave on
 * element i (each reference below derives its own from the lengths of the
 * sums behind the element and the sums of their terms' magnitudes). */
static void check_bnd(const char *name, const float *a, const double *ref, const double *bnd,
                      size_t n)
{
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - ref[i]);
        double q = e == 0 ? 0 : e <= bnd[i] ? e / bnd[i] : isnan(e) ? INFINITY : 1 + e / bnd[i];
        if (q > worst)
            worst = q, wi = i;
    }
    cr_assert(worst <= 1.0, "%s: element %zu of %zu: %.9g vs reference %.9g: |diff| %.3g > bound %.3g",
              name, wi, n, a[wi], ref[wi], fabs(a[wi] - ref[wi]), bnd[wi]);
}

/* dst == base + delta (the += convention).  The op adds m terms t_k onto
 * base, delta is the same op run onto zeros: both are the (m+1)-term sum
 * base + sum t_k, in orders that may differ (a blocked BLAS, an FMA that
 * fuses the last product into the +=), so they differ by at most
 * 2 gamma(m+1) (|base| + sum |t_k|).  M bounds sum |t_k| (0 where m = 1:
 * |delta| is then the one term). */
static void check_accum(const char *name, const float *after, const float *base,
                        const float *delta, size_t n, int m, double M)
{
    for (size_t i = 0; i < n; i++) {
        float want = base[i] + delta[i];
        double tol = 2 * tu_gamma(m + 1) * (fabs(base[i]) + fabs(delta[i]) + M);
        cr_assert(fabsf(after[i] - want) <= tol,
                  "%s: not accumulated at %zu: %g vs %g + %g (bound %.3g)", name, i, after[i],
                  base[i], delta[i], tol);
    }
}

/* ---- memory and elementwise ------------------------------------------- */

Test(ops, alloc_aligned_zeroed)
{
    size_t sizes[] = {1, 3, 64, 100, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        unsigned char *p = be->alloc(sizes[k]);
        cr_assert(p != NULL);
        cr_assert((uintptr_t)p % 64 == 0, "not 64-byte aligned");
        for (size_t i = 0; i < sizes[k]; i++)
            cr_assert(p[i] == 0);
        be->free(p);
    }
    float h[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    float *d = be->alloc(sizeof h);
    be->upload(d, h, sizeof h);
    be->download(back, d, sizeof h);
    cr_assert(memcmp(h, back, sizeof h) == 0);
    be->zero(d, sizeof h);
    for (int i = 0; i < 5; i++)
        cr_assert(d[i] == 0.0f);
    be->sync();
    be->free(d);
}

Test(ops, elementwise)
{
    size_t ns[] = {7, 1000 + 13, 16384, 100003}; /* scalar; one chunk of vectors and a tail; several */
    for (int k = 0; k < 4; k++) {
        size_t n = ns[k];
        float *x = rnd(n, -1, 1), *y = rnd(n, -1, 1), *y0 = dup(y, n);
        /* add and scale: one IEEE operation per element, as here: the same bits */
        be->add(y, x, n);
        for (size_t i = 0; i < n; i++)
            cr_assert(y[i] == y0[i] + x[i]);
        be->scale(y, 0.5f, n);
        for (size_t i = 0; i < n; i++)
            cr_assert(y[i] == (y0[i] + x[i]) * 0.5f);
        be->copy(y, x, n);
        cr_assert(memcmp(y, x, n * sizeof(float)) == 0);
        /* overlapping ranges of one buffer, as memmove (the disjoint large
         * copies above take the threads) */
        be->copy(y + 1, y, n - 1);
        cr_assert(y[0] == x[0] && memcmp(y + 1, x, (n - 1) * sizeof(float)) == 0, "copy up, n %zu", n);
        be->copy(y, y + 1, n - 1);
        cr_assert(memcmp(y, x, (n - 1) * sizeof(float)) == 0, "copy down, n %zu", n);
        be->copy(y, x, n);
        double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += (double)x[i] * x[i];
        /* the op and the reference add the same n squares (exact in double)
         * in two orders: 2 gamma_d(n) of their sum */
        double s1 = be->sumsq(x, n), s2 = be->sumsq(x, n), tol = 2 * tu_gamma_d(n) * ref;
        cr_assert(fabs(s1 - ref) <= tol, "sumsq %.17g vs %.17g (bound %.3g)", s1, ref, tol);
        /* the same code on the same data; and its chunks are fixed, added in
         * order, whatever the thread count */
        cr_assert(memcmp(&s1, &s2, sizeof s1) == 0, "sumsq not deterministic");
        be->set_threads(1);
        double s3 = be->sumsq(x, n);
        be->set_threads(2);
        cr_assert(memcmp(&s1, &s3, sizeof s1) == 0, "sumsq on 1 and 2 threads: %.17g vs %.17g", s3, s1);
        /* sumsq_chunks: sumsq of each chunk, bit for bit, in chunks below,
         * at and above sumsq's own (16384), with a ragged last chunk */
        size_t chunks[] = {1000, 16384, 40000};
        for (int q = 0; q < 3; q++) {
            size_t ch = chunks[q], nc = (n + ch - 1) / ch;
            double *cs = malloc((nc + 1) * sizeof(double));
            cs[nc] = -1.0; /* past the last chunk: untouched */
            for (int th = 1; th <= 2; th++) {
                be->set_threads(th);
                be->sumsq_chunks(cs, x, n, ch);
                for (size_t c = 0; c < nc; c++) {
                    size_t lo = c * ch;
                    double want = be->sumsq(x + lo, lo + ch < n ? ch : n - lo);
                    cr_assert(memcmp(&cs[c], &want, sizeof want) == 0,
                              "sumsq_chunks n %zu chunk %zu, chunk %zu on %d threads: %.17g vs %.17g", n, ch, c, th,
                              cs[c], want);
                }
                cr_assert_eq(cs[nc], -1.0, "sumsq_chunks wrote past its last chunk");
            }
            free(cs);
        }
        free(x);
        free(y);
        free(y0);
    }
}

/* ---- embedding -------------------------------------------------------- */

typedef struct {
    int N, d;
    const int32_t *tok;
    float *wte, *out;
    const float *R;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    be->embedding_fwd(c->out, c->tok, c->wte, c->N, c->d);
    return dotf(c->out, c->R, (size_t)c->N * c->d);
}

Test(ops, embedding)
{
    int N = 7, d = 12, V = 5;
    int32_t tok[7] = {3, 0, 4, 3, 1, 3, 0}; /* repeats */
    float *wte = rnd((size_t)V * d, -1, 1), *out = zeros((size_t)N * d);
    float *R = rnd((size_t)N * d, -1, 1);
    be->embedding_fwd(out, tok, wte, N, d);
    for (int i = 0; i < N; i++) /* a copy */
        cr_assert(memcmp(out + i * d, wte + tok[i] * d, d * sizeof(float)) == 0);

    float *dwte = zeros((size_t)V * d);
    be->embedding_bwd(dwte, R, tok, N, d);
    emb_ctx c = {N, d, tok, wte, out, R};
    CHECK_FD("embedding dwte", wte, (size_t)V * d, dwte, emb_loss, &c, 1e-3f);

    /* += onto a nonzero buffer: up to 3 rows of |R| <= 1 per token */
    float *base = rnd((size_t)V * d, -1, 1), *acc = dup(base, (size_t)V * d);
    be->embedding_bwd(acc, R, tok, N, d);
    check_accum("embedding dwte", acc, base, dwte, (size_t)V * d, 3, 3.0);
    free(wte), free(out), free(R), free(dwte), free(base), free(acc);
}

Test(ops, embedding_large_reference)
{
    int N = 2003, d = 40, V = 37;
    int32_t *tok = malloc(N * sizeof(int32_t));
    float *u = rnd(N, 0, 1);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(u[i] * V) % V;
    float *dout = rnd((size_t)N * d, -1, 1), *dwte = zeros((size_t)V * d);
    double *ref = calloc((size_t)V * d, sizeof(double)), *bnd = calloc((size_t)V * d, sizeof(double));
    int *cnt = calloc(V, sizeof(int));
    for (int i = 0; i < N; i++) {
        cnt[tok[i]]++;
        for (int j = 0; j < d; j++) {
            ref[tok[i] * d + j] += dout[i * d + j];
            bnd[tok[i] * d + j] += fabs(dout[i * d + j]);
        }
    }
    /* a row of dwte is the sum of its token's m rows of dout, onto 0 */
    for (int v = 0; v < V; v++)
        for (int j = 0; j < d; j++)
            bnd[v * d + j] *= tu_gamma(cnt[v] + 1);
    be->embedding_bwd(dwte, dout, tok, N, d);
    check_bnd("embedding_bwd large", dwte, ref, bnd, (size_t)V * d);
    free(tok), free(u), free(dout), free(dwte), free(ref), free(bnd), free(cnt);
}

/* ---- RMSNorm ---------------------------------------------------------- */

typedef struct {
    int N, d;
    float *x, *g, *out, *rstd;
    const float *R;
} rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    be->rmsnorm_fwd(c->out, c->rstd, c->x, c->g, c->N, c->d);
    return dotf(c->out, c->R, (size_t)c->N * c->d);
}

/* out and rstd with their bounds: rstd within RSTD_REL(d) (+ u, see
 * above), out = x rstd g two roundings more */
static void rms_ref_fwd(double *out, double *rstd, double *bout, double *brs, const float *x,
                        const float *g, int N, int d)
{
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        double r = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
        rstd[i] = r;
        brs[i] = (RSTD_REL(d) + U) * r;
        for (int j = 0; j < d; j++) {
            out[i * d + j] = x[i * d + j] * r * g[j];
            bout[i * d + j] = (RSTD_REL(d) + 3 * U) * fabs(out[i * d + j]);
        }
    }
}

/* dx = d/dx sum(out*dout), dg likewise, in double: out_j = x_j r g_j,
 * dr/dx_k = -r^3 x_k / d, at the forward's float rstd r (the op's input:
 * as every backward reference here, it takes the forward's saved outputs,
 * so the bounds count the backward's own roundings).  The op forms
 * xh = x r, m = sum_j g_j dout_j xh_j / d (a d-term sum, S = its terms'
 * magnitudes) and dx_k = r (g_k dout_k - xh_k m): within
 * gamma(d + 9) (r |g_k dout_k| + r |xh_k| S / d), counting its roundings;
 * dg_j, the N-term sum of dout_ij xh_ij in any grouping, within
 * gamma(N + 3) sum_i |dout_ij xh_ij|. */
static void rms_ref_bwd(double *dx, double *dg, double *bdx, double *bdg, const float *dout,
                        const float *x, const float *g, const float *rstd, int N, int d)
{
    double cx = tu_gamma(d + 9), cg = tu_gamma(N + 3);
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * d, *di = dout + (size_t)i * d;
        double r = rstd[i], s = 0, S = 0;
        for (int j = 0; j < d; j++) {
            s += (double)di[j] * g[j] * xi[j];
            S += fabs((double)di[j] * g[j] * xi[j] * r);
        }
        for (int k = 0; k < d; k++) {
            dx[i * d + k] = (double)di[k] * g[k] * r - s * r * r * r * xi[k] / d;
            bdx[i * d + k] = cx * (r * fabs((double)g[k] * di[k]) + r * r * fabs(xi[k]) * S / d);
            dg[k] += (double)di[k] * xi[k] * r;
            bdg[k] += cg * fabs((double)di[k] * xi[k] * r);
        }
    }
}

Test(ops, rmsnorm)
{
    int N = 7, d = 12;
    size_t nd = (size_t)N * d;
    float *x = rnd(nd, -1, 1), *g = rnd(d, 0.5f, 1.5f), *R = rnd(nd, -1, 1);
    float *out = zeros(nd), *rstd = zeros(N);
    be->rmsnorm_fwd(out, rstd, x, g, N, d);
    double *rout = calloc(nd, sizeof(double)), *rr = calloc(N, sizeof(double));
    double *bout = calloc(nd, sizeof(double)), *brs = calloc(N, sizeof(double));
    rms_ref_fwd(rout, rr, bout, brs, x, g, N, d);
    check_bnd("rmsnorm out", out, rout, bout, nd);
    check_bnd("rmsnorm rstd", rstd, rr, brs, N);

    float *dx = zeros(nd), *dg = zeros(d);
    be->rmsnorm_bwd(dx, dg, R, x, g, rstd, 0, N, d);
    rms_ctx c = {N, d, x, g, out, rstd, R};
    CHECK_FD("rmsnorm dx", x, nd, dx, rms_loss, &c, FD_EPS);
    CHECK_FD("rmsnorm dg", g, d, dg, rms_loss, &c, FD_EPS);

    /* += */
    be->rmsnorm_fwd(out, rstd, x, g, N, d);
    float *bx = rnd(nd, -1, 1), *bg = rnd(d, -1, 1);
    float *ax = dup(bx, nd), *ag = dup(bg, d);
    be->rmsnorm_bwd(ax, ag, R, x, g, rstd, 0, N, d);
    check_accum("rmsnorm dx", ax, bx, dx, nd, 1, 0);
    check_accum("rmsnorm dg", ag, bg, dg, d, 1, 0);

    /* overwrite: dx = (bits of += onto zeros), whatever dx held: the same
     * code forms each y before the +=, and y + 0 (or an FMA's r t + 0) is y
     * (r t rounded once); dg still += */
    float *ox = rnd(nd, -9, 9), *og = dup(bg, d);
    be->rmsnorm_bwd(ox, og, R, x, g, rstd, 1, N, d);
    cr_expect(memcmp(ox, dx, nd * sizeof(float)) == 0, "rmsnorm overwrite dx differs from += onto zeros");
    check_accum("rmsnorm dg (overwrite)", og, bg, dg, d, 1, 0);
    free(ox), free(og);
    free(x), free(g), free(R), free(out), free(rstd), free(rout), free(rr), free(bout), free(brs);
    free(dx), free(dg), free(bx), free(bg), free(ax), free(ag);
}

Test(ops, rmsnorm_large_reference)
{
    int N = 613, d = 100;
    size_t nd = (size_t)N * d;
    float *x = rnd(nd, -2, 2), *g = rnd(d, 0.5f, 1.5f), *dout = rnd(nd, -1, 1);
    float *out = zeros(nd), *rstd = zeros(N), *dx = zeros(nd), *dg = zeros(d);
    be->rmsnorm_fwd(out, rstd, x, g, N, d);
    be->rmsnorm_bwd(dx, dg, dout, x, g, rstd, 0, N, d);
    double *rout = calloc(nd, sizeof(double)), *rr = calloc(N, sizeof(double));
    double *rdx = calloc(nd, sizeof(double)), *rdg = calloc(d, sizeof(double));
    double *bout = calloc(nd, sizeof(double)), *brs = calloc(N, sizeof(double));
    double *bdx = calloc(nd, sizeof(double)), *bdg = calloc(d, sizeof(double));
    rms_ref_fwd(rout, rr, bout, brs, x, g, N, d);
    rms_ref_bwd(rdx, rdg, bdx, bdg, dout, x, g, rstd, N, d);
    check_bnd("rmsnorm out large", out, rout, bout, nd);
    check_bnd("rmsnorm rstd large", rstd, rr, brs, N);
    check_bnd("rmsnorm dx large", dx, rdx, bdx, nd);
    check_bnd("rmsnorm dg large", dg, rdg, bdg, d);
    /* += onto nonzero buffers, rows of 16-float vectors */
    float *bx = rnd(nd, -1, 1), *bg = rnd(d, -1, 1), *ax = dup(bx, nd), *ag = dup(bg, d);
    be->rmsnorm_bwd(ax, ag, dout, x, g, rstd, 0, N, d);
    check_accum("rmsnorm dx large", ax, bx, dx, nd, 1, 0);
    check_accum("rmsnorm dg large", ag, bg, dg, d, 1, 0);
    free(bx), free(bg), free(ax), free(ag);
    /* dg's N-term sums of random sign cancel to ~1/sqrt(N) of their terms'
     * magnitudes, below which gamma(N) would hide a relative error of 1e-4:
     * once more with |x| (the same rstd) and |dout|, terms of one sign */
    for (size_t i = 0; i < nd; i++)
        x[i] = fabsf(x[i]), dout[i] = fabsf(dout[i]), dx[i] = 0;
    memset(dg, 0, d * sizeof(float));
    memset(rdx, 0, nd * sizeof(double)), memset(rdg, 0, d * sizeof(double));
    memset(bdx, 0, nd * sizeof(double)), memset(bdg, 0, d * sizeof(double));
    be->rmsnorm_bwd(dx, dg, dout, x, g, rstd, 0, N, d);
    rms_ref_bwd(rdx, rdg, bdx, bdg, dout, x, g, rstd, N, d);
    check_bnd("rmsnorm dx large (|x|, |dout|)", dx, rdx, bdx, nd);
    check_bnd("rmsnorm dg large (|x|, |dout|)", dg, rdg, bdg, d);
    free(x), free(g), free(dout), free(out), free(rstd), free(dx), free(dg);
    free(rout), free(rr), free(rdx), free(rdg), free(bout), free(brs), free(bdx), free(bdg);
}

/* ---- matmul ----------------------------------------------------------- */

typedef struct {
    int N, in, outd;
    float *x, *W, *out;
    const float *R;
} mm_ctx;

static double mm_loss(void *p)
{
    mm_ctx *c = p;
    be->matmul_fwd(c->out, c->x, c->W, c->N, c->in, c->outd);
    return dotf(c->out, c->R, (size_t)c->N * c->outd);
}

static void mm_check(int N, int in, int outd, int fd)
{
    float *x = rnd((size_t)N * in, -1, 1), *W = rnd((size_t)outd * in, -1, 1);
    float *R = rnd((size_t)N * outd, -1, 1);
    float *out = rnd((size_t)N * outd, -9, 9); /* garbage: fwd overwrites */
    be->matmul_fwd(out, x, W, N, in, outd);
    /* each output is a K-term sum (K = in, outd, N for out, dx, dW; dx and
     * dW onto zeros) in whatever order the BLAS kernel takes: within
     * gamma(K + 1) of the sum of its |terms| */
    size_t no = (size_t)N * outd, nx = (size_t)N * in, nw = (size_t)outd * in;
    double *ref = calloc(no, sizeof(double)), *bnd = calloc(no, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int o = 0; o < outd; o++) {
            double s = 0, a = 0;
            for (int k = 0; k < in; k++) {
                s += (double)x[i * in + k] * W[o * in + k];
                a += fabs((double)x[i * in + k] * W[o * in + k]);
            }
            ref[i * outd + o] = s;
            bnd[i * outd + o] = tu_gamma(in + 1) * a;
        }
    check_bnd("matmul out", out, ref, bnd, no);

    float *dx = zeros(nx), *dW = zeros(nw);
    be->matmul_bwd(dx, dW, R, x, W, 0, N, in, outd);
    /* reference backward */
    double *rdx = calloc(nx, sizeof(double)), *rdW = calloc(nw, sizeof(double));
    double *bdx = calloc(nx, sizeof(double)), *bdW = calloc(nw, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int o = 0; o < outd; o++)
            for (int k = 0; k < in; k++) {
                rdx[i * in + k] += (double)R[i * outd + o] * W[o * in + k];
                rdW[o * in + k] += (double)R[i * outd + o] * x[i * in + k];
                bdx[i * in + k] += tu_gamma(outd + 1) * fabs((double)R[i * outd + o] * W[o * in + k]);
                bdW[o * in + k] += tu_gamma(N + 1) * fabs((double)R[i * outd + o] * x[i * in + k]);
            }
    check_bnd("matmul dx", dx, rdx, bdx, nx);
    check_bnd("matmul dW", dW, rdW, bdW, nw);
    if (fd) {
        mm_ctx c = {N, in, outd, x, W, out, R};
        CHECK_FD("matmul dx", x, (size_t)N * in, dx, mm_loss, &c, 1e-3f);
        CHECK_FD("matmul dW", W, (size_t)outd * in, dW, mm_loss, &c, 1e-3f);
    }
    /* += onto nonzero buffers, and dx NULL */
    float *bx = rnd((size_t)N * in, -1, 1), *bW = rnd((size_t)outd * in, -1, 1);
    float *ax = dup(bx, (size_t)N * in), *aW = dup(bW, (size_t)outd * in);
    be->matmul_bwd(ax, aW, R, x, W, 0, N, in, outd);
    /* |R|, |W|, |x| <= 1: the K terms' magnitudes add to at most K */
    check_accum("matmul dx", ax, bx, dx, nx, outd, outd);
    check_accum("matmul dW", aW, bW, dW, nw, N, N);
    memcpy(aW, bW, nw * sizeof(float));
    be->matmul_bwd(NULL, aW, R, x, W, 0, N, in, outd);
    check_accum("matmul dW (dx NULL)", aW, bW, dW, nw, N, N);
    /* overwrite: dx = dout W from garbage, as from zeros above (the same
     * sums: the overwrite starts where += starts from 0) */
    float *ox = rnd((size_t)N * in, -1, 1);
    memcpy(aW, bW, nw * sizeof(float));
    be->matmul_bwd(ox, aW, R, x, W, 1, N, in, outd);
    check_bnd("matmul dx (overwrite)", ox, rdx, bdx, nx);
    check_accum("matmul dW (overwrite)", aW, bW, dW, nw, N, N);
    free(ox);
    free(x), free(W), free(R), free(out), free(ref), free(dx), free(dW), free(rdx), free(rdW);
    free(bnd), free(bdx), free(bdW);
    free(bx), free(bW), free(ax), free(aW);
}

Test(ops, matmul) { mm_check(7, 12, 5, 1); }

Test(ops, matmul_large_reference) { mm_check(301, 67, 45, 0); }

/* ---- RoPE ------------------------------------------------------------- */

/* y and its bound: the op's cos and sin are those of the same double angle
 * rounded to float (u each); an output x0 c - x1 s takes two products and
 * a sum: within gamma(4) (|x0 cos a| + |x1 sin a|) */
static void rope_ref(double *y, double *bnd, const float *x, int B, int T, int nh, int hd)
{
    int h2 = hd / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                size_t o = (((size_t)b * T + t) * nh + h) * hd;
                for (int j = 0; j < h2; j++) {
                    double a = t * pow(10000.0, -2.0 * j / hd), c = cos(a), s = sin(a);
                    double x0 = x[o + j], x1 = x[o + j + h2];
                    y[o + j] = x0 * c - x1 * s;
                    y[o + j + h2] = x0 * s + x1 * c;
                    bnd[o + j] = tu_gamma(4) * (fabs(x0 * c) + fabs(x1 * s));
                    bnd[o + j + h2] = tu_gamma(4) * (fabs(x0 * s) + fabs(x1 * c));
                }
            }
}

/* rope_bwd(rope_fwd(x)) against x, n heads of hd.  With the float table's
 * c and s (c^2 + s^2 within 2 u of 1), each rotation of a pair (x0, x1) is
 * off by gamma(2) (|x0| + |x1|) per component, and the second rotates the
 * first's error (2 gamma(2) (|x0| + |x1|)) and adds its own (its inputs are
 * at most |x0| + |x1| each): within (2 u + 4 gamma(2) + u) (|x0| + |x1|). */
static void check_rope_inverse(const char *name, const float *y, const float *x, size_t n, int hd)
{
    int h2 = hd / 2;
    double c = 3 * U + 4 * tu_gamma(2);
    for (size_t o = 0; o < n * hd; o += hd)
        for (int j = 0; j < h2; j++) {
            double m = fabs(x[o + j]) + fabs(x[o + j + h2]);
            for (int p = 0; p < 2; p++) {
                size_t i = o + j + p * h2;
                cr_assert(fabs(y[i] - (double)x[i]) <= c * m, "%s: element %zu: %.9g vs %.9g (bound %.3g)",
                          name, i, y[i], x[i], c * m);
            }
        }
}

typedef struct {
    int B, T, nh, hd;
    float *x, *tmp;
    const float *R;
} rope_ctx;

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->nh * c->hd;
    memcpy(c->tmp, c->x, n * sizeof(float));
    be->rope_fwd(c->tmp, c->B, c->T, c->nh, c->hd);
    return dotf(c->tmp, c->R, n);
}

Test(ops, rope)
{
    int B = 2, T = 5, nh = 3, hd = 4;
    size_t n = (size_t)B * T * nh * hd;
    float *x = rnd(n, -1, 1), *y = dup(x, n), *R = rnd(n, -1, 1);
    double *ref = calloc(n, sizeof(double)), *bnd = calloc(n, sizeof(double));
    be->rope_fwd(y, B, T, nh, hd);
    rope_ref(ref, bnd, x, B, T, nh, hd);
    check_bnd("rope fwd", y, ref, bnd, n);
    /* position 0 is the identity: cos 0 = 1 and sin 0 = 0 exactly, and
     * x0 1 - x1 0 = x0 */
    for (int h = 0; h < nh * hd; h++)
        cr_assert(y[h] == x[h]);

    /* bwd(fwd(x)) = x */
    be->rope_bwd(y, B, T, nh, hd);
    check_rope_inverse("rope_bwd(rope_fwd(x))", y, x, (size_t)B * T * nh, hd);

    /* gradient: dL/dx = rope_bwd(R) */
    float *g = dup(R, n), *tmp = zeros(n);
    be->rope_bwd(g, B, T, nh, hd);
    rope_ctx c = {B, T, nh, hd, x, tmp, R};
    CHECK_FD("rope dx", x, n, g, rope_loss, &c, 1e-3f);

    /* larger head dim, longer sequence (threaded path) */
    int T2 = 301, nh2 = 3, hd2 = 38;
    size_t n2 = (size_t)T2 * nh2 * hd2;
    float *x2 = rnd(n2, -1, 1), *y2 = dup(x2, n2);
    double *ref2 = calloc(n2, sizeof(double)), *bnd2 = calloc(n2, sizeof(double));
    be->rope_fwd(y2, 1, T2, nh2, hd2);
    rope_ref(ref2, bnd2, x2, 1, T2, nh2, hd2);
    check_bnd("rope fwd large", y2, ref2, bnd2, n2);
    be->rope_bwd(y2, 1, T2, nh2, hd2);
    check_rope_inverse("rope inverse large", y2, x2, (size_t)T2 * nh2, hd2);
    free(x), free(y), free(R), free(ref), free(g), free(tmp), free(x2), free(y2), free(ref2);
    free(bnd), free(bnd2);
}

/* ---- attention -------------------------------------------------------- */

/* Naive causal attention in double: y and att_r (B x nh x T x T), and the
 * backward into dq, dk, dv (B x T x C) at the op's float att (the
 * backward's input), each with its bound (b*), from the op's arithmetic
 * (CPU: sgemm, then fast_expf and sum8 per row):
 * - scores s = q.k / sqrt(hd), an hd-term sum scaled by a float 1/sqrt(hd)
 *   (2 u): within gamma(hd + 3) P_tc, P_tc = sum_j |q_tj k_cj| / sqrt(hd);
 * - a softmax row moves by at most twice its scores' largest error
 *   (relative); s - max adds u |s - max| <= 2 u Pm_t (Pm_t = max_c P_tc),
 *   twice (numerator, sum); the exps 2 U_EXP; the (t+1)-term positive sum
 *   gamma(t) relative; 1/sum and the product 2 u.  So att is within
 *   eps_t = 2 gamma(hd + 5) Pm_t + 2 U_EXP + gamma(t + 3) relative;
 * - y_t = sum_c att_tc v_c: (eps_t + gamma(t + 2)) sum_c att_tc |v_c|;
 * - backward: dA = dy.v (hd terms, W_tc = sum_j |dy_tj v_cj|), dot_t =
 *   sum_c att dA (D_t = sum_c att_tc W_tc), ds = att (dA - dot) / sqrt(hd):
 *   within gamma(hd + t + 7) G_tc, G_tc = att_tc (W_tc + D_t) / sqrt(hd);
 *   then dq_t = sum_c ds_tc k_c, dk_c = sum_r ds_rc q_r and dv_c =
 *   sum_r att_rc dy_r carry their terms' bounds plus gamma(length + 1) of
 *   their magnitudes. */
static void attn_ref(double *y, double *att_r, double *dq, double *dk, double *dv, double *by,
                     double *batt, double *bdq, double *bdk, double *bdv, const float *att,
                     const float *dy, const float *q, const float *k, const float *v, int B, int T,
                     int nh, int hd)
{
    int C = nh * hd;
    double sc = 1.0 / sqrt((double)hd);
    double *ds = malloc((size_t)T * T * sizeof(double)), *G = malloc((size_t)T * T * sizeof(double));
    double *eds = malloc(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            double *A = att_r + ((size_t)b * nh + h) * T * T;
            double *bA = batt + ((size_t)b * nh + h) * T * T;
            const float *Af = att + ((size_t)b * nh + h) * T * T;
#define IX(t, j) (((size_t)b * T + (t)) * C + (size_t)h * hd + (j))
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, Pm = 0;
                for (int c = 0; c < T; c++) {
                    double s = 0, P = 0;
                    if (c <= t) {
                        for (int j = 0; j < hd; j++) {
                            s += (double)q[IX(t, j)] * k[IX(c, j)];
                            P += fabs((double)q[IX(t, j)] * k[IX(c, j)]);
                        }
                        s *= sc;
                        mx = fmax(mx, s);
                        Pm = fmax(Pm, P * sc);
                    }
                    A[t * T + c] = s;
                }
                double ep = 2 * tu_gamma(hd + 5) * Pm + 2 * U_EXP + tu_gamma(t + 3), sum = 0;
                for (int c = 0; c <= t; c++)
                    sum += (A[t * T + c] = exp(A[t * T + c] - mx));
                for (int c = 0; c < T; c++) {
                    A[t * T + c] = c <= t ? A[t * T + c] / sum : 0.0;
                    bA[t * T + c] = ep * A[t * T + c];
                }
                for (int j = 0; j < hd; j++) {
                    double s = 0, m = 0;
                    for (int c = 0; c <= t; c++) {
                        s += A[t * T + c] * v[IX(c, j)];
                        m += A[t * T + c] * fabs(v[IX(c, j)]);
                    }
                    y[IX(t, j)] = s;
                    by[IX(t, j)] = (ep + tu_gamma(t + 2)) * m;
                }
            }
            for (int t = 0; t < T; t++) {
                double dot = 0, D = 0;
                for (int c = 0; c <= t; c++) {
                    double da = 0, W = 0;
                    for (int j = 0; j < hd; j++) {
                        da += (double)dy[IX(t, j)] * v[IX(c, j)];
                        W += fabs((double)dy[IX(t, j)] * v[IX(c, j)]);
                    }
                    ds[t * T + c] = da;
                    G[t * T + c] = W;
                    dot += da * Af[t * T + c];
                    D += W * Af[t * T + c];
                }
                for (int c = 0; c <= t; c++) {
                    ds[t * T + c] = Af[t * T + c] * (ds[t * T + c] - dot) * sc;
                    G[t * T + c] = Af[t * T + c] * (G[t * T + c] + D) * sc;
                }
                eds[t] = tu_gamma(hd + t + 7);
            }
            for (int t = 0; t < T; t++)
                for (int j = 0; j < hd; j++) {
                    double sq = 0, sk = 0, sv = 0, mq = 0, mk = 0, mv = 0;
                    for (int c = 0; c <= t; c++) {
                        sq += ds[t * T + c] * k[IX(c, j)];
                        mq += G[t * T + c] * fabs(k[IX(c, j)]);
                    }
                    for (int r = t; r < T; r++) {
                        sk += ds[r * T + t] * q[IX(r, j)];
                        sv += Af[r * T + t] * dy[IX(r, j)];
                        mk += (eds[r] + tu_gamma(T + 1)) * G[r * T + t] * fabs(q[IX(r, j)]);
                        mv += tu_gamma(T + 1) * Af[r * T + t] * fabs(dy[IX(r, j)]);
                    }
                    dq[IX(t, j)] = sq;
                    dk[IX(t, j)] = sk;
                    dv[IX(t, j)] = sv;
                    bdq[IX(t, j)] = (eds[t] + tu_gamma(t + 2)) * mq;
                    bdk[IX(t, j)] = mk;
                    bdv[IX(t, j)] = mv;
                }
#undef IX
        }
    free(ds), free(G), free(eds);
}

typedef struct {
    int B, T, nh, hd;
    float *q, *k, *v, *y, *att;
    const float *R;
} attn_ctx;

static double attn_loss(void *p)
{
    attn_ctx *c = p;
    be->attention_fwd(&(ar_attention){c->q, c->k, c->v, c->att, c->B, c->T, c->nh, c->hd}, c->y);
    return dotf(c->y, c->R, (size_t)c->B * c->T * c->nh * c->hd);
}

/* att: zeros above the diagonal (written so), each row sums to 1: the op
 * scales its t+1 exps by 1/sum8 of them, so the row adds to
 * 1 + gamma(t + 3) at most (the sum, 1/sum, the products; one more for the
 * double sum here) */
static void attn_invariants(const float *att, int B, int T, int nh)
{
    for (int bh = 0; bh < B * nh; bh++)
        for (int t = 0; t < T; t++) {
            const float *row = att + ((size_t)bh * T + t) * T;
            double s = 0;
            for (int c = 0; c < T; c++) {
                if (c > t)
                    cr_assert(row[c] == 0.0f, "att nonzero above the diagonal");
                else
                    cr_assert(row[c] >= 0.0f);
                s += row[c];
            }
            cr_assert(fabs(s - 1.0) <= tu_gamma(t + 3), "att row %d sums to 1 + %g", t, s - 1);
        }
}

/* Runs fwd+bwd at a size and compares everything with the naive reference.
 * The output buffers start as garbage: fwd and bwd overwrite (=). */
static void attn_check(int B, int T, int nh, int hd, int fd)
{
    int C = nh * hd;
    size_t n = (size_t)B * T * C, na = (size_t)B * nh * T * T;
    float *q = rnd(n, -1.5f, 1.5f), *k = rnd(n, -1.5f, 1.5f), *v = rnd(n, -1, 1);
    float *R = rnd(n, -1, 1);
    float *y = rnd(n, -5, 5), *att = rnd(na, -5, 5), *datt = rnd(na, -5, 5);
    float *dq = rnd(n, -5, 5), *dk = rnd(n, -5, 5), *dv = rnd(n, -5, 5);
    double *ry = calloc(n, sizeof(double)), *ratt = calloc(na, sizeof(double));
    double *rdq = calloc(n, sizeof(double)), *rdk = calloc(n, sizeof(double));
    double *rdv = calloc(n, sizeof(double)), *by = calloc(n, sizeof(double));
    double *batt = calloc(na, sizeof(double)), *bdq = calloc(n, sizeof(double));
    double *bdk = calloc(n, sizeof(double)), *bdv = calloc(n, sizeof(double));

    be->attention_fwd(&(ar_attention){q, k, v, att, B, T, nh, hd}, y);
    be->attention_bwd(&(ar_attention){q, k, v, att, B, T, nh, hd}, y, R, dq, dk, dv, datt);
    attn_ref(ry, ratt, rdq, rdk, rdv, by, batt, bdq, bdk, bdv, att, R, q, k, v, B, T, nh, hd);
    check_bnd("attention y", y, ry, by, n);
    check_bnd("attention att", att, ratt, batt, na);
    check_bnd("attention dq", dq, rdq, bdq, n);
    check_bnd("attention dk", dk, rdk, bdk, n);
    check_bnd("attention dv", dv, rdv, bdv, n);
    attn_invariants(att, B, T, nh);

    if (fd) {
        attn_ctx c = {B, T, nh, hd, q, k, v, y, att, R};
        CHECK_FD("attention dq", q, n, dq, attn_loss, &c, FD_EPS);
        CHECK_FD("attention dk", k, n, dk, attn_loss, &c, FD_EPS);
        CHECK_FD("attention dv", v, n, dv, attn_loss, &c, 1e-3f);
    }
    free(q), free(k), free(v), free(R), free(y), free(att), free(datt);
    free(dq), free(dk), free(dv), free(ry), free(ratt), free(rdq), free(rdk), free(rdv);
    free(by), free(batt), free(bdq), free(bdk), free(bdv);
}

Test(ops, attention) { attn_check(2, 5, 3, 4, 1); }

/* T crosses the row-block tiling at a non-multiple */
Test(ops, attention_large_reference) { attn_check(2, 150, 3, 12, 0); }

Test(ops, attention_gradcheck_blocked) { attn_check(1, 70, 1, 4, 1); }

/* ---- SwiGLU ----------------------------------------------------------- */

typedef struct {
    size_t n;
    float *gate, *up, *out;
    const float *R;
} sw_ctx;

static double sw_loss(void *p)
{
    sw_ctx *c = p;
    be->swiglu_fwd(c->out, c->gate, c->up, c->n);
    return dotf(c->out, c->R, c->n);
}

Test(ops, swiglu)
{
    size_t n = 7 * 12;
    float *gate = rnd(n, -4, 4), *up = rnd(n, -1, 1), *R = rnd(n, -1, 1);
    float *out = rnd(n, -9, 9);
    double *ref = calloc(n, sizeof(double)), *bnd = calloc(n, sizeof(double));
    be->swiglu_fwd(out, gate, up, n);
    /* sigmoid 1/(1 + exp(-a)): U_EXP, the sum and the reciprocal u each;
     * then two products: U_EXP + 4 u relative (+ u) */
    for (size_t i = 0; i < n; i++) {
        ref[i] = gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
        bnd[i] = (U_EXP + 5 * U) * fabs(ref[i]);
    }
    check_bnd("swiglu out", out, ref, bnd, n);

    float *dg = rnd(n, -9, 9), *du = rnd(n, -9, 9); /* garbage: bwd overwrites */
    be->swiglu_bwd(dg, du, R, gate, up, n);
    sw_ctx c = {n, gate, up, out, R};
    CHECK_FD("swiglu dgate", gate, n, dg, sw_loss, &c, FD_EPS);
    CHECK_FD("swiglu dup", up, n, du, sw_loss, &c, 1e-3f);
    /* extreme gates stay finite */
    float eg[4] = {-200, -90, 90, 200}, eu[4] = {1, 1, 1, 1}, eo[4], ed[4], edu[4];
    be->swiglu_fwd(eo, eg, eu, 4);
    be->swiglu_bwd(ed, edu, eu, eg, eu, 4);
    for (int i = 0; i < 4; i++)
        cr_assert(isfinite(eo[i]) && isfinite(ed[i]) && isfinite(edu[i]));
    free(gate), free(up), free(R), free(out), free(ref), free(bnd), free(dg), free(du);
}

/* ---- depth attention -------------------------------------------------- */

/* One token of depth attention in double: rstd r[s], softmax weights al[s],
 * P[s] = r_s sum_j |w_j g_j x_sj| (the logit's terms' magnitude) and the
 * weights' relative bound eps: the op's logit (u = w g rounded, the d-term
 * dot, times its rstd within RSTD_REL(d)) is within
 * (gamma(d + 2) + RSTD_REL(d)) P_s; a softmax moves by at most twice its
 * logits' largest error (relative), lg - max adds u |lg - max| <= 2 u Pm
 * twice (Pm = max_s P_s), the exps 2 U_EXP, the n-term sum gamma(n), the
 * division u:
 *   eps = 2 (gamma(d + 4) + RSTD_REL(d)) Pm + 2 U_EXP + gamma(n + 2). */
static double da_token(double *r, double *al, double *P, double *ux, const float *const *src,
                       int n, const float *w, const float *g, int i, int d)
{
    double mx = -INFINITY, sum = 0, Pm = 0;
    for (int s = 0; s < n; s++) {
        const float *x = src[s] + (size_t)i * d;
        double ss = 0, dot = 0, a = 0;
        for (int j = 0; j < d; j++) {
            ss += (double)x[j] * x[j];
            dot += (double)w[j] * g[j] * x[j];
            a += fabs((double)w[j] * g[j] * x[j]);
        }
        r[s] = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
        ux[s] = dot;
        P[s] = a;
        al[s] = dot * r[s];
        mx = fmax(mx, al[s]);
        Pm = fmax(Pm, a * r[s]);
    }
    for (int s = 0; s < n; s++)
        sum += (al[s] = exp(al[s] - mx));
    for (int s = 0; s < n; s++)
        al[s] /= sum;
    return 2 * (tu_gamma(d + 4) + RSTD_REL(d)) * Pm + 2 * U_EXP + tu_gamma(n + 2);
}

/* h and alpha with their bounds: alpha within eps, h = sum_s alpha_s x_s
 * (n terms) within (eps + gamma(n + 1)) sum_s alpha_s |x_s| */
static void da_ref_fwd(double *h, double *alpha, double *bh, double *bal, const float *const *src,
                       int n, const float *w, const float *g, int N, int d)
{
    double *r = malloc(n * sizeof(double)), *al = malloc(n * sizeof(double));
    double *P = malloc(n * sizeof(double)), *ux = malloc(n * sizeof(double));
    for (int i = 0; i < N; i++) {
        double eps = da_token(r, al, P, ux, src, n, w, g, i, d);
        for (int j = 0; j < d; j++)
            h[(size_t)i * d + j] = bh[(size_t)i * d + j] = 0;
        for (int s = 0; s < n; s++) {
            alpha[(size_t)i * n + s] = al[s];
            bal[(size_t)i * n + s] = eps * al[s];
            for (int j = 0; j < d; j++) {
                h[(size_t)i * d + j] += al[s] * src[s][(size_t)i * d + j];
                bh[(size_t)i * d + j] += (eps + tu_gamma(n + 1)) * al[s] * fabs(src[s][(size_t)i * d + j]);
            }
        }
    }
    free(r), free(al), free(P), free(ux);
}

/* backward in double, by the chain rule written out independently of the
 * header's closed form: logit_s = (u . x_s) r_s with r_s = (mean x_s^2+eps)^-1/2,
 * at the forward's float alpha and rstd (the op's inputs).  Bounds: with
 * W_s = sum_j |dh_j x_sj| and D = sum_s alpha_s W_s, the op's da_s = dh.x_s
 * (d terms), mean = sum_s alpha_s da_s and dl_s = alpha_s (da_s - mean)
 * are within e_dl = gamma(d + n + 3) of L_s = alpha_s (W_s + D); c1 = dl r
 * within e_dl + u, c2 = dl (u.x) r^3 / d within e_dl + gamma(d + 6) (u.x
 * from the rounded u = w g); dsrc_j = alpha dh_j + c1 u_j - c2 x_j within
 * (e_dl + gamma(d + 10)) times its three terms' magnitudes; dw_j =
 * g_j sum_(i,s) c1 x_sj (N n terms, in chunks) within
 * |g_j| (e_dl + gamma(N n + 4)) sum L_s r_s |x_sj|; dg alike with w. */
static void da_ref_bwd(double **dsrc, double *dw, double *dg, double **bdsrc, double *bdw,
                       double *bdg, const float *dh, const float *alpha, const float *rstd,
                       const float *const *src, int n, const float *w, const float *g, int N, int d)
{
    double *dal = malloc(n * sizeof(double)), *W = malloc(n * sizeof(double));
    double *ux = malloc(n * sizeof(double)), *P = malloc(n * sizeof(double));
    double edl = tu_gamma(d + n + 3), ex = edl + tu_gamma(d + 10), ew = edl + tu_gamma((double)N * n + 4);
    for (int i = 0; i < N; i++) {
        const float *al = alpha + (size_t)i * n, *r = rstd + (size_t)i * n;
        /* dL/dalpha_s = dh . x_s; dL/dlogit via softmax jacobian */
        double mean = 0, D = 0;
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double a = 0, m = 0, dot = 0, p = 0;
            for (int j = 0; j < d; j++) {
                a += (double)dh[(size_t)i * d + j] * x[j];
                m += fabs((double)dh[(size_t)i * d + j] * x[j]);
                dot += (double)w[j] * g[j] * x[j];
                p += fabs((double)w[j] * g[j] * x[j]);
            }
            dal[s] = a, W[s] = m, ux[s] = dot, P[s] = p;
            mean += al[s] * a;
            D += al[s] * m;
        }
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double dlog = al[s] * (dal[s] - mean), L = al[s] * (W[s] + D), rs = r[s];
            for (int j = 0; j < d; j++) {
                double u = (double)w[j] * g[j], xj = x[j];
                /* d logit / d x_j = u_j r + (u.x) (-r^3 x_j / d) */
                dsrc[s][(size_t)i * d + j] += al[s] * dh[(size_t)i * d + j] +
                                              dlog * (u * rs - ux[s] * rs * rs * rs * xj / d);
                bdsrc[s][(size_t)i * d + j] += ex * (al[s] * fabs(dh[(size_t)i * d + j]) + L * rs * fabs(u) +
                                                     L * P[s] * rs * rs * rs * fabs(xj) / d);
                dw[j] += dlog * g[j] * xj * rs;
                dg[j] += dlog * w[j] * xj * rs;
                bdw[j] += fabs(g[j]) * ew * L * rs * fabs(xj);
                bdg[j] += fabs(w[j]) * ew * L * rs * fabs(xj);
            }
        }
    }
    free(dal), free(W), free(ux), free(P);
}

typedef struct {
    int n, N, d;
    const float *const *src;
    float *w, *g, *h, *alpha, *rstd;
    const float *R;
} da_ctx;

static double da_loss(void *p)
{
    da_ctx *c = p;
    ref_depth_attn_fwd(c->h, c->alpha, c->rstd, c->src, c->n, c->w, c->g, c->N, c->d);
    return dotf(c->h, c->R, (size_t)c->N * c->d);
}

/* fwd/bwd against the double reference; with fd also finite differences of
 * every source, w and g; then the += convention. */
static void da_check(int n, int N, int d, int fd)
{
    size_t nd = (size_t)N * d;
    float **src = malloc(n * sizeof(float *)), **dsrc = malloc(n * sizeof(float *));
    double **rdsrc = malloc(n * sizeof(double *)), **bdsrc = malloc(n * sizeof(double *));
    for (int s = 0; s < n; s++) {
        src[s] = rnd(nd, -1.5f, 1.5f);
        /* sources of different scale, as in a real residual stream */
        for (size_t i = 0; i < nd; i++)
            src[s][i] *= 0.5f + s;
        dsrc[s] = zeros(nd);
        rdsrc[s] = calloc(nd, sizeof(double));
        bdsrc[s] = calloc(nd, sizeof(double));
    }
    float *w = rnd(d, -1, 1), *g = rnd(d, 0.5f, 1.5f), *R = rnd(nd, -1, 1);
    float *h = rnd(nd, -9, 9), *alpha = zeros((size_t)N * n), *rstd = zeros((size_t)N * n);
    double *rh = calloc(nd, sizeof(double)), *ral = calloc((size_t)N * n, sizeof(double));
    double *bh = calloc(nd, sizeof(double)), *bal = calloc((size_t)N * n, sizeof(double));
    const float *const *csrc = (const float *const *)src;

    ref_depth_attn_fwd(h, alpha, rstd, csrc, n, w, g, N, d);
    da_ref_fwd(rh, ral, bh, bal, csrc, n, w, g, N, d);
    check_bnd("depth_attn h", h, rh, bh, nd);
    check_bnd("depth_attn alpha", alpha, ral, bal, (size_t)N * n);

    float *dw = zeros(d), *dg = zeros(d);
    double *rdw = calloc(d, sizeof(double)), *rdg = calloc(d, sizeof(double));
    double *bdw = calloc(d, sizeof(double)), *bdg = calloc(d, sizeof(double));
    ref_depth_attn_bwd(dsrc, dw, dg, R, alpha, rstd, csrc, n, w, g, N, d);
    da_ref_bwd(rdsrc, rdw, rdg, bdsrc, bdw, bdg, R, alpha, rstd, csrc, n, w, g, N, d);
    for (int s = 0; s < n; s++)
        check_bnd("depth_attn dsrc", dsrc[s], rdsrc[s], bdsrc[s], nd);
    check_bnd("depth_attn dw", dw, rdw, bdw, d);
    check_bnd("depth_attn dg", dg, rdg, bdg, d);

    if (fd) {
        da_ctx c = {n, N, d, csrc, w, g, h, alpha, rstd, R};
        for (int s = 0; s < n; s++)
            CHECK_FD("depth_attn dsrc", src[s], nd, dsrc[s], da_loss, &c, FD_EPS);
        CHECK_FD("depth_attn dw", w, d, dw, da_loss, &c, FD_EPS);
        CHECK_FD("depth_attn dg", g, d, dg, da_loss, &c, FD_EPS);
        ref_depth_attn_fwd(h, alpha, rstd, csrc, n, w, g, N, d);
    }

    /* += onto nonzero buffers */
    float **asrc = malloc(n * sizeof(float *)), **bsrc = malloc(n * sizeof(float *));
    for (int s = 0; s < n; s++) {
        bsrc[s] = rnd(nd, -1, 1);
        asrc[s] = dup(bsrc[s], nd);
    }
    float *bw = rnd(d, -1, 1), *bg = rnd(d, -1, 1), *aw = dup(bw, d), *ag = dup(bg, d);
    ref_depth_attn_bwd(asrc, aw, ag, R, alpha, rstd, csrc, n, w, g, N, d);
    for (int s = 0; s < n; s++) {
        check_accum("depth_attn dsrc", asrc[s], bsrc[s], dsrc[s], nd, 1, 0);
        free(asrc[s]), free(bsrc[s]);
    }
    check_accum("depth_attn dw", aw, bw, dw, d, 1, 0);
    check_accum("depth_attn dg", ag, bg, dg, d, 1, 0);

    for (int s = 0; s < n; s++)
        free(src[s]), free(dsrc[s]), free(rdsrc[s]), free(bdsrc[s]);
    free(src), free(dsrc), free(rdsrc), free(bdsrc), free(asrc), free(bsrc);
    free(w), free(g), free(R), free(h), free(alpha), free(rstd), free(rh), free(ral), free(bh), free(bal);
    free(dw), free(dg), free(rdw), free(rdg), free(bdw), free(bdg), free(bw), free(bg), free(aw), free(ag);
}

Test(ops, depth_attn) { da_check(3, 7, 12, 1); }

Test(ops, depth_attn_single_source) { da_check(1, 5, 12, 1); }

Test(ops, depth_attn_large_reference) { da_check(6, 401, 72, 0); }

Test(ops, depth_attn_zero_query_uniform)
{
    int n = 4, N = 7, d = 12;
    size_t nd = (size_t)N * d;
    float *src[4];
    for (int s = 0; s < n; s++)
        src[s] = rnd(nd, -2, 2);
    float *w = zeros(d), *g = rnd(d, 0.5f, 1.5f);
    float *h = zeros(nd), *alpha = zeros((size_t)N * n), *rstd = zeros((size_t)N * n);
    ref_depth_attn_fwd(h, alpha, rstd, (const float *const *)src, n, w, g, N, d);
    /* every logit is 0 exactly, exp(0) = 1, 1/4 exact */
    for (int i = 0; i < N * n; i++)
        cr_assert(alpha[i] == 0.25f, "alpha %g != 1/n", alpha[i]);
    /* h = sum_s x_s / 4 (exact products): gamma(n + 1) of sum_s |x_s| / 4 */
    for (size_t i = 0; i < nd; i++) {
        double m = ((double)src[0][i] + src[1][i] + src[2][i] + src[3][i]) / n;
        double a = (fabs(src[0][i]) + fabs(src[1][i]) + fabs(src[2][i]) + fabs(src[3][i])) / n;
        cr_assert(fabs(h[i] - m) <= tu_gamma(n + 1) * a, "h[%zu] %.9g != mean of sources %.9g", i, h[i], m);
    }
    for (int s = 0; s < n; s++)
        free(src[s]);
    free(w), free(g), free(h), free(alpha), free(rstd);
}

/* a repeated dsrc pointer receives both contributions */
Test(ops, depth_attn_repeated_dsrc)
{
    int n = 2, N = 5, d = 12;
    size_t nd = (size_t)N * d;
    float *src[2] = {rnd(nd, -1, 1), rnd(nd, -1, 1)};
    float *w = rnd(d, -1, 1), *g = rnd(d, 0.5f, 1.5f), *dh = rnd(nd, -1, 1);
    float *h = zeros(nd), *alpha = zeros((size_t)N * n), *rstd = zeros((size_t)N * n);
    const float *const *cs = (const float *const *)src;
    ref_depth_attn_fwd(h, alpha, rstd, cs, n, w, g, N, d);
    float *d0 = zeros(nd), *d1 = zeros(nd), *same = zeros(nd);
    float *dw = zeros(d), *dg = zeros(d);
    float *sep[2] = {d0, d1}, *rep[2] = {same, same};
    ref_depth_attn_bwd(sep, dw, dg, dh, alpha, rstd, cs, n, w, g, N, d);
    ref_depth_attn_bwd(rep, dw, dg, dh, alpha, rstd, cs, n, w, g, N, d);
    /* the same code: each source's row term is formed before its +=, so the
     * repeated pointer gets (0 + t0) + t1 and the separate ones t0 and t1:
     * the same bits */
    for (size_t i = 0; i < nd; i++)
        cr_assert(same[i] == d0[i] + d1[i], "element %zu: %.9g vs %.9g + %.9g", i, same[i], d0[i], d1[i]);
    free(src[0]), free(src[1]), free(w), free(g), free(dh), free(h), free(alpha), free(rstd);
    free(d0), free(d1), free(same), free(dw), free(dg);
}

/* ---- cross-entropy ---------------------------------------------------- */

typedef struct {
    int N, V;
    float *logits, *losses, *probs;
    const int32_t *tg;
    float scale;
} xe_ctx;

/* xent_fwd's sum of losses */
static double xent(float *losses, float *probs, const float *logits, const int32_t *tg, int N, int V)
{
    double sum = NAN;
    be->xent_fwd(losses, probs, logits, tg, N, V, &sum);
    return sum;
}

static double xe_loss(void *p)
{
    xe_ctx *c = p;
    return c->scale * xent(c->losses, c->probs, c->logits, c->tg, c->N, c->V);
}

/* One row of xent_fwd against double: probs p_c = exp(z_c - mx) / S, the
 * sum of probs, and loss = log S - (z_t - mx).  The op rounds z_c - mx
 * (u |z_c - mx|) and takes its exp (U_EXP); S, their V-term sum in double,
 * is then within eS = sum_c p_c (u |z_c - mx| + U_EXP) relative; 1/S
 * rounded to float and the product add 2 u.  So p_c is within
 * u |z_c - mx| + U_EXP + eS + 3 u (relative; + u), the probs sum to 1
 * within the sum of those, and the loss (log S in double, then rounded to
 * float) is within eS + u |loss| + u.  Returns the loss and sets *lb to its
 * bound. */
static double xent_row_check(const float *z, const float *p, float loss, int tgt, int V, double *lb)
{
    double mx = -INFINITY, s = 0, eS = 0, ps = 0, pb = 0;
    for (int c = 0; c < V; c++)
        mx = fmax(mx, z[c]);
    for (int c = 0; c < V; c++)
        s += exp(z[c] - mx);
    for (int c = 0; c < V; c++)
        eS += exp(z[c] - mx) / s * (U * fabs(z[c] - mx) + U_EXP);
    for (int c = 0; c < V; c++) {
        double pr = exp(z[c] - mx) / s, b = (U * fabs(z[c] - mx) + U_EXP + eS + 4 * U) * pr;
        cr_assert(fabs(p[c] - pr) <= b, "prob %d: %.9g vs %.9g (bound %.3g)", c, p[c], pr, b);
        ps += p[c];
        pb += b;
    }
    cr_assert(fabs(ps - 1) <= pb, "probs sum to 1 + %g (bound %.3g)", ps - 1, pb);
    double l = log(s) - (z[tgt] - mx);
    *lb = eS + U * fabs(l) + U;
    cr_assert(fabs(loss - l) <= *lb, "loss %.9g vs %.9g (bound %.3g)", loss, l, *lb);
    return l;
}

Test(ops, xent)
{
    int N = 7, V = 13;
    int32_t tg[7] = {0, 12, 5, 5, 3, 7, 11};
    float *logits = rnd((size_t)N * V, -3, 3), *losses = zeros(N), *probs = zeros((size_t)N * V);
    double tot = xent(losses, probs, logits, tg, N, V);
    double rtot = 0, tb = 0, lb;
    for (int i = 0; i < N; i++) {
        rtot += xent_row_check(logits + i * V, probs + i * V, losses[i], tg[i], V, &lb);
        tb += lb;
    }
    /* the float losses, added in double */
    cr_assert(fabs(tot - rtot) <= tb, "total %.12g vs %.12g (bound %.3g)", tot, rtot, tb);

    float scale = 1.0f / N;
    float *dl = rnd((size_t)N * V, -9, 9); /* garbage: bwd overwrites */
    be->xent_bwd(dl, probs, tg, scale, N, V);
    xe_ctx c = {N, V, logits, losses, probs, tg, scale};
    CHECK_FD("xent dlogits", logits, (size_t)N * V, dl, xe_loss, &c, FD_EPS);
    free(logits), free(losses), free(probs), free(dl);
}

Test(ops, xent_uniform_and_extreme)
{
    int N = 3, V = 256;
    int32_t tg[3] = {0, 100, 255};
    float *logits = zeros((size_t)N * V), *losses = zeros(N), *probs = zeros((size_t)N * V);
    for (int i = 0; i < N * V; i++)
        logits[i] = 1.75f; /* any constant */
    double tot = xent(losses, probs, logits, tg, N, V), rtot = 0, tb = 0, lb;
    for (int i = 0; i < N; i++) {
        rtot += xent_row_check(logits + i * V, probs + i * V, losses[i], tg[i], V, &lb);
        tb += lb;
    }
    /* (the reference's loss is log V: 256 exps of 0, each 1) */
    cr_assert(fabs(tot - rtot) <= tb, "total %.12g vs %.12g (bound %.3g)", tot, rtot, tb);
    /* huge logits: stable, no inf/nan.  exp(-2000) is clamped to about
     * FLT_MIN, 255 of which vanish next to exp(0) = 1 in a double sum: the
     * loss is 2000 and probs[7] is 1, each within its float rounding and
     * (probs[7]) its exp's U_EXP and the reciprocal's u */
    for (int c = 0; c < V; c++)
        logits[c] = c == 7 ? 1000.0f : -1000.0f;
    xent(losses, probs, logits, tg, 1, V);
    cr_assert(isfinite(losses[0]) && fabs(losses[0] - 2000.0) <= U * 2000, "loss %g", losses[0]);
    cr_assert(fabsf(probs[7] - 1.0f) <= U_EXP + 2 * U, "probs[7] %.9g", probs[7]);
    /* logits spread over 80 nats: every prob to its bound (80 u relative
     * for the rounding of z - max alone) */
    for (int c = 0; c < V; c++)
        logits[c] = 20.0f - 80.0f * (float)((c * 37) % V) / V;
    xent(losses, probs, logits, tg, 1, V);
    xent_row_check(logits, probs, losses[0], tg[0], V, &lb);
    free(logits), free(losses), free(probs);
}

/* the model turns probabilities into dlogits in place: same result as apart */
Test(ops, xent_backward_in_place)
{
    int N = 9, V = 37;
    int32_t tg[9] = {0, 36, 5, 5, 12, 1, 30, 7, 0};
    float *logits = rnd((size_t)N * V, -3, 3), *losses = zeros(N), *probs = zeros((size_t)N * V);
    float *apart = zeros((size_t)N * V);
    xent(losses, probs, logits, tg, N, V);
    be->xent_bwd(apart, probs, tg, 0.25f, N, V);
    be->xent_bwd(probs, probs, tg, 0.25f, N, V);
    cr_assert(memcmp(apart, probs, (size_t)N * V * sizeof(float)) == 0,
              "in-place xent backward differs from the out-of-place one");
    free(logits), free(losses), free(probs), free(apart);
}

/* ---- AdamW ------------------------------------------------------------ */

/* One AdamW step in double on rp, rm, rv (the op's float constants), and
 * the running bounds ep, em, ev on the op's distance from them: m takes
 * three roundings of b1 |m| + (1 - b1) |g'| (g' = g gs rounded), v five of
 * b2 v + (1 - b2) g'^2, and both carry the previous step's error times
 * b1, b2; m/bc1 and v/bc2 two more (bc rounded to float); sqrt halves v's
 * relative error and, with + eps and the division, adds 3 u; the update
 * q + wd p, the product by lr and the subtraction from p a rounding each. */
static void adamw_ref_step(double *rp, double *rm, double *rv, double *ep, double *em, double *ev,
                           const float *g, size_t n, float gs, float lr, float b1, float b2, float eps,
                           float wd, long t)
{
    double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * gs;
        em[i] = b1 * em[i] + tu_gamma(3) * (b1 * fabs(rm[i]) + (1 - (double)b1) * fabs(gi));
        ev[i] = b2 * ev[i] + tu_gamma(5) * (b2 * rv[i] + (1 - (double)b2) * gi * gi);
        rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
        rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
        double mh = rm[i] / bc1, vh = rv[i] / bc2, den = sqrt(vh) + eps, q = mh / den;
        double rel_v = rv[i] > 0 ? ev[i] / rv[i] + tu_gamma(2) : 0;
        double eq = (em[i] + tu_gamma(2) * fabs(rm[i])) / bc1 / den + fabs(q) * (rel_v / 2 + 3 * U);
        double upd = q + wd * rp[i];
        ep[i] += lr * (eq + wd * (ep[i] + U * fabs(rp[i])) + tu_gamma(2) * fabs(upd));
        rp[i] -= lr * upd;
        ep[i] += U * fabs(rp[i]);
    }
}

/* The record of a step that updates, with clipping factor gs at step t
 * (bias corrections as step_check makes them) */
static ar_step_rec adamw_rec(float gs, long t, float b1, float b2)
{
    ar_step_rec r = {.t = t, .gscale = gs};
    r.bc1 = (float)(1.0 - pow((double)b1, (double)t));
    r.bc2 = (float)(1.0 - pow((double)b2, (double)t));
    return r;
}

Test(ops, adamw_reference)
{
    size_t n = 37;
    float *p = rnd(n, -1, 1), *m = zeros(n), *v = zeros(n);
    double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double));
    double *rv = calloc(n, sizeof(double)), *ep = calloc(n, sizeof(double));
    double *em = calloc(n, sizeof(double)), *ev = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i];
    float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    for (long t = 1; t <= 5; t++) {
        float *g = rnd(n, -1, 1);
        ar_adamw_hparams hp = {.lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .wd = wd};
        ar_step_rec rec = adamw_rec(gs, t, b1, b2);
        be->adamw(p, g, m, v, n, &hp, &rec);
        cr_assert_eq(rec.bad_param, 0);
        adamw_ref_step(rp, rm, rv, ep, em, ev, g, n, gs, lr, b1, b2, eps, wd, t);
        free(g);
    }
    for (size_t i = 0; i < n; i++) {
        cr_assert(fabs(p[i] - rp[i]) <= ep[i], "p[%zu] %.9g vs %.9g (bound %.3g)", i, p[i], rp[i], ep[i]);
        cr_assert(fabs(m[i] - rm[i]) <= em[i], "m[%zu] %.9g vs %.9g (bound %.3g)", i, m[i], rm[i], em[i]);
        cr_assert(fabs(v[i] - rv[i]) <= ev[i], "v[%zu] %.9g vs %.9g (bound %.3g)", i, v[i], rv[i], ev[i]);
    }
    /* first step with zero decay: the reference moves each weight by
     * lr g / (|g| + eps) (m/bc1 = g, sqrt(v/bc2) = |g|), within lr eps / |g|
     * of lr*sign(g) */
    float q[3] = {0.5f, -0.5f, 0.0f}, gg[3] = {2.0f, -0.01f, 1.0f}, mm[3] = {0}, vv[3] = {0};
    double rq[3] = {0.5, -0.5, 0.0}, rmm[3] = {0}, rvv[3] = {0}, eq[3] = {0}, emm[3] = {0}, evv[3] = {0};
    ar_adamw_hparams hp = {.lr = 0.01f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f, .wd = 0.0f};
    ar_step_rec rec = adamw_rec(1.0f, 1, 0.9f, 0.999f);
    be->adamw(q, gg, mm, vv, 3, &hp, &rec);
    adamw_ref_step(rq, rmm, rvv, eq, emm, evv, gg, 3, 1.0f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    for (int i = 0; i < 3; i++) {
        double step = 0.01f * (gg[i] > 0 ? 1 : -1), qi = i == 0 ? 0.5 : i == 1 ? -0.5 : 0.0;
        cr_assert(fabs(rq[i] - (qi - step)) <= 0.01f * 1e-8f / fabs(gg[i]) + 1e-15, "reference q[%d] %.12g", i,
                  rq[i]);
        cr_assert(fabs(q[i] - rq[i]) <= eq[i], "q[%d] %.9g vs %.9g (bound %.3g)", i, q[i], rq[i], eq[i]);
    }
    free(p), free(m), free(v), free(rp), free(rm), free(rv), free(ep), free(em), free(ev);
}

/* A skipped step leaves parameters and moments alone; an update that
 * makes a parameter non-finite raises the record's flag, and only then. */
Test(ops, adamw_skips_and_flags)
{
    size_t n = 70;
    float *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -1, 1), *v = rnd(n, 0, 1);
    float *p0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float)), *v0 = malloc(n * sizeof(float));
    memcpy(p0, p, n * sizeof(float)), memcpy(m0, m, n * sizeof(float)), memcpy(v0, v, n * sizeof(float));
    ar_adamw_hparams hp = {.lr = 1e-2f, .b1 = 0.9f, .b2 = 0.95f, .eps = 1e-8f, .wd = 0.1f};
    ar_step_rec rec = adamw_rec(1.0f, 3, 0.9f, 0.95f);
    rec.skip = 1;
    be->adamw(p, g, m, v, n, &hp, &rec);
    cr_assert(memcmp(p, p0, n * sizeof(float)) == 0 && memcmp(m, m0, n * sizeof(float)) == 0 &&
                  memcmp(v, v0, n * sizeof(float)) == 0,
              "a skipped step changed the parameters or moments");
    rec.skip = 0;
    be->adamw(p, g, m, v, n, &hp, &rec);
    cr_assert(memcmp(p, p0, n * sizeof(float)) != 0 && rec.bad_param == 0);
    g[n - 5] = INFINITY; /* g' inf: m, v and p become inf or nan */
    be->adamw(p, g, m, v, n, &hp, &rec);
    cr_assert_eq(rec.bad_param, 1, "a non-finite parameter was not flagged");
    free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0);
}

/* step_check against the host's arithmetic: the mean of the micro-batches'
 * losses summed in order, the norm, the clipping factor, the skip and
 * the step count with its bias corrections */
Test(ops, step_check_decides_as_the_host)
{
    int A = 3, nc = 4;
    double parts[12], sums[5] = {0.5, 2.25, 1e-3, 7.0, 0.125}, N = 640;
    for (int i = 0; i < A * nc; i++)
        parts[i] = 100.0 + 37.0 * i / 7.0;
    ar_step_check c = {.parts = parts, .A = A, .nc = nc, .N = N, .sums = sums, .nsums = 5, .clip = 1.0,
                       .b1 = 0.9f, .b2 = 0.95f};
    ar_step_rec rec = {.t = 4, .bad_param = 1};
    be->step_check(&c, &rec);
    double loss = 0, ss = 0;
    for (int a = 0; a < A; a++) {
        double s = 0;
        for (int k = 0; k < nc; k++)
            s += parts[a * nc + k];
        loss += s / N / A;
    }
    for (int i = 0; i < 5; i++)
        ss += sums[i];
    cr_assert_eq(rec.loss, loss);
    cr_assert_eq(rec.gnorm, sqrt(ss));
    cr_assert_eq(rec.gscale, (float)(1.0 / (sqrt(ss) + 1e-6)));
    cr_assert(rec.skip == 0 && rec.t == 5 && rec.bad_param == 0);
    cr_assert_eq(rec.bc1, (float)(1.0 - pow(0.9f, 5.0)));
    cr_assert_eq(rec.bc2, (float)(1.0 - pow(0.95f, 5.0)));
    /* under the threshold: no clipping */
    c.clip = 100;
    be->step_check(&c, &rec);
    cr_assert(rec.gscale == 1.0f && rec.t == 6);
    /* a non-finite loss or norm: skipped, the count unchanged */
    parts[5] = NAN;
    be->step_check(&c, &rec);
    cr_assert(rec.skip == 1 && rec.t == 6 && isnan(rec.loss));
    parts[5] = 1.0;
    sums[2] = INFINITY;
    be->step_check(&c, &rec);
    cr_assert(rec.skip == 1 && rec.t == 6 && isinf(rec.gnorm));
    /* a norm given as it is */
    double given[2] = {2.5, 3.0};
    ar_step_check g = {.parts = given, .A = 1, .nc = 1, .N = 1, .sums = given + 1, .nsums = 1, .norm_given = 1,
                       .clip = 1.0, .b1 = 0.9f, .b2 = 0.95f};
    be->step_check(&g, &rec);
    cr_assert(rec.loss == 2.5 && rec.gnorm == 3.0 && rec.skip == 0 && rec.t == 7);
    cr_assert_eq(rec.gscale, (float)(1.0 / (3.0 + 1e-6)));
}

/* ---- determinism (2 threads, bitwise) --------------------------------- */

/* Two runs of the same code on the same shapes and 2 threads: static
 * schedules, no float atomics, OpenBLAS splitting only the output among its
 * threads: the same bits. */
Test(ops, determinism)
{
    be->set_threads(2);
    /* attention_bwd */
    {
        int B = 2, T = 130, nh = 2, hd = 16, C = nh * hd;
        size_t n = (size_t)B * T * C, na = (size_t)B * nh * T * T;
        float *q = rnd(n, -1, 1), *k = rnd(n, -1, 1), *v = rnd(n, -1, 1), *dy = rnd(n, -1, 1);
        float *y = zeros(n), *att = zeros(na);
        be->attention_fwd(&(ar_attention){q, k, v, att, B, T, nh, hd}, y);
        float *r[2][4];
        for (int run = 0; run < 2; run++) {
            for (int j = 0; j < 3; j++)
                r[run][j] = zeros(n);
            r[run][3] = zeros(na);
            be->attention_bwd(&(ar_attention){q, k, v, att, B, T, nh, hd}, y, dy, r[run][0], r[run][1],
                              r[run][2], r[run][3]);
        }
        for (int j = 0; j < 3; j++)
            cr_assert(memcmp(r[0][j], r[1][j], n * sizeof(float)) == 0, "attention_bwd differs");
        for (int run = 0; run < 2; run++)
            for (int j = 0; j < 4; j++)
                free(r[run][j]);
        free(q), free(k), free(v), free(dy), free(y), free(att);
    }
    /* depth_attn_bwd */
    {
        int n = 5, N = 700, d = 64;
        size_t nd = (size_t)N * d;
        float *src[5];
        for (int s = 0; s < n; s++)
            src[s] = rnd(nd, -1, 1);
        float *w = rnd(d, -1, 1), *g = rnd(d, 0.5f, 1.5f), *dh = rnd(nd, -1, 1);
        float *h = zeros(nd), *al = zeros((size_t)N * n), *rs = zeros((size_t)N * n);
        const float *const *cs = (const float *const *)src;
        ref_depth_attn_fwd(h, al, rs, cs, n, w, g, N, d);
        float *ds[2][5], *dw[2], *dg[2];
        for (int run = 0; run < 2; run++) {
            for (int s = 0; s < n; s++)
                ds[run][s] = zeros(nd);
            dw[run] = zeros(d);
            dg[run] = zeros(d);
            ref_depth_attn_bwd(ds[run], dw[run], dg[run], dh, al, rs, cs, n, w, g, N, d);
        }
        for (int s = 0; s < n; s++)
            cr_assert(memcmp(ds[0][s], ds[1][s], nd * sizeof(float)) == 0);
        cr_assert(memcmp(dw[0], dw[1], d * sizeof(float)) == 0, "depth_attn dw differs");
        cr_assert(memcmp(dg[0], dg[1], d * sizeof(float)) == 0, "depth_attn dg differs");
        for (int run = 0; run < 2; run++) {
            for (int s = 0; s < n; s++)
                free(ds[run][s]);
            free(dw[run]), free(dg[run]);
        }
        for (int s = 0; s < n; s++)
            free(src[s]);
        free(w), free(g), free(dh), free(h), free(al), free(rs);
    }
    /* rmsnorm_bwd */
    {
        int N = 1000, d = 96;
        size_t nd = (size_t)N * d;
        float *x = rnd(nd, -1, 1), *g = rnd(d, 0.5f, 1.5f), *dout = rnd(nd, -1, 1);
        float *out = zeros(nd), *rstd = zeros(N);
        be->rmsnorm_fwd(out, rstd, x, g, N, d);
        float *dx[2], *dg[2];
        for (int run = 0; run < 2; run++) {
            dx[run] = zeros(nd);
            dg[run] = zeros(d);
            be->rmsnorm_bwd(dx[run], dg[run], dout, x, g, rstd, 0, N, d);
        }
        cr_assert(memcmp(dx[0], dx[1], nd * sizeof(float)) == 0, "rmsnorm dx differs");
        cr_assert(memcmp(dg[0], dg[1], d * sizeof(float)) == 0, "rmsnorm dg differs");
        for (int run = 0; run < 2; run++)
            free(dx[run]), free(dg[run]);
        free(x), free(g), free(dout), free(out), free(rstd);
    }
    /* embedding_bwd, many repeated tokens */
    {
        int N = 4000, d = 64, V = 29;
        int32_t *tok = malloc(N * sizeof(int32_t));
        for (int i = 0; i < N; i++)
            tok[i] = (i * 7 + i / 13) % V;
        float *dout = rnd((size_t)N * d, -1, 1), *dw[2];
        for (int run = 0; run < 2; run++) {
            dw[run] = zeros((size_t)V * d);
            be->embedding_bwd(dw[run], dout, tok, N, d);
        }
        cr_assert(memcmp(dw[0], dw[1], (size_t)V * d * sizeof(float)) == 0,
                  "embedding dwte differs");
        free(dw[0]), free(dw[1]), free(tok), free(dout);
    }
}

/* The parameter-gradient reductions (dg, dw, dwte) and sumsq sum in an
 * order fixed by the data, not by the threads: 1 and 2 threads agree
 * bitwise. */
Test(ops, reductions_thread_count_independent)
{
    int N = 1000, d = 96, n = 3, V = 17;
    size_t nd = (size_t)N * d;
    float *x = rnd(nd, -1, 1), *g = rnd(d, 0.5f, 1.5f), *w = rnd(d, -1, 1);
    float *dout = rnd(nd, -1, 1), *out = zeros(nd), *rstd = zeros(N);
    float *src[3] = {rnd(nd, -1, 1), rnd(nd, -1, 1), rnd(nd, -1, 1)};
    const float *const *cs = (const float *const *)src;
    float *al = zeros((size_t)N * n), *rs = zeros((size_t)N * n);
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tok[i] = (i * 5 + i / 7) % V;
    be->rmsnorm_fwd(out, rstd, x, g, N, d);
    ref_depth_attn_fwd(out, al, rs, cs, n, w, g, N, d);
    float *rg[2], *dw[2], *dg[2], *de[2], *dx = zeros(nd);
    float *ds[3] = {zeros(nd), zeros(nd), zeros(nd)};
    double ss[2];
    for (int k = 0; k < 2; k++) {
        be->set_threads(k + 1);
        rg[k] = zeros(d), dw[k] = zeros(d), dg[k] = zeros(d), de[k] = zeros((size_t)V * d);
        be->rmsnorm_bwd(dx, rg[k], dout, x, g, rstd, 0, N, d);
        ref_depth_attn_bwd(ds, dw[k], dg[k], dout, al, rs, cs, n, w, g, N, d);
        be->embedding_bwd(de[k], dout, tok, N, d);
        ss[k] = be->sumsq(dout, nd);
    }
    be->set_threads(2);
    cr_assert(memcmp(rg[0], rg[1], d * sizeof(float)) == 0, "rmsnorm dg");
    cr_assert(memcmp(dw[0], dw[1], d * sizeof(float)) == 0, "depth_attn dw");
    cr_assert(memcmp(dg[0], dg[1], d * sizeof(float)) == 0, "depth_attn dg");
    cr_assert(memcmp(de[0], de[1], (size_t)V * d * sizeof(float)) == 0, "embedding dwte");
    cr_assert(memcmp(&ss[0], &ss[1], sizeof(double)) == 0, "sumsq");
    for (int k = 0; k < 2; k++)
        free(rg[k]), free(dw[k]), free(dg[k]), free(de[k]);
    for (int s = 0; s < 3; s++)
        free(src[s]), free(ds[s]);
    free(x), free(g), free(w), free(dout), free(out), free(rstd), free(al), free(rs), free(tok);
    free(dx);
}

/* The CPU backend runs with subnormals flushed (FTZ, DAZ) on every thread
 * of its pool, OpenBLAS's included: a subnormal operand reads as zero, a
 * subnormal result is written as zero (lib/cpu/backend_cpu.c says why). */
#if defined(__x86_64__) || defined(__i386__)
#include <omp.h>
#include <xmmintrin.h>

Test(ops, subnormals_flushed_on_every_thread)
{
    int bad = 0, seen = 0;
#pragma omp parallel reduction(+ : bad, seen)
    {
        unsigned csr = _mm_getcsr();
        bad += (csr & 0x8040u) != 0x8040u; /* FTZ bit 15, DAZ bit 6 */
        seen++;
    }
    cr_assert_eq(seen, 2, "set_threads(2) gave %d threads", seen);
    cr_expect_eq(bad, 0, "%d of %d OpenMP threads run without FTZ/DAZ", bad, seen);
    /* a product big enough for OpenBLAS's threads: x holds subnormals
     * (1e-39) and normals; out = x W^T must see the subnormals as zero */
    int N = 256, in = 256, outd = 256;
    float *x = calloc((size_t)N * in, 4), *W = malloc((size_t)outd * in * 4), *out = malloc((size_t)N * outd * 4);
    tu_fill_uniform(W, (size_t)outd * in, 0.5f, 1.5f, 7);
    volatile float tiny = 1e-39f;
    for (int r = 0; r < N; r++)
        for (int k = 0; k < in; k++)
            x[(size_t)r * in + k] = (r % 2) ? tiny : 0.0f;
    be->matmul_fwd(out, x, W, N, in, outd);
    for (size_t t = 0; t < (size_t)N * outd; t++)
        if (out[t] != 0.0f) {
            cr_expect(0, "out[%zu] = %g: a subnormal input was not read as zero", t, out[t]);
            break;
        }
    /* and a subnormal result is written as zero */
    float y[32];
    for (int k = 0; k < 32; k++)
        y[k] = 1e-30f;
    be->scale(y, 1e-9f, 32);
    for (int k = 0; k < 32; k++)
        cr_expect_eq(y[k], 0.0f, "scale: 1e-30 * 1e-9 gave %g, not 0", y[k]);
    free(x);
    free(W);
    free(out);
}
#endif
