/* Tests of the CPU backend's op table (lib/backend.h).
 *
 * For every op with a backward: a finite-difference gradient check of every
 * input and parameter.  The scalar loss is L = sum(out * R) with a fixed
 * random R, computed in double from the float outputs; central differences
 * use the float-representable step actually taken.  The pass criterion is
 * the relative error ||g - g_fd|| / ||g_fd|| over all entries of one
 * gradient, below FD_TOL.
 *
 * Also: forwards against naive double-precision loops at sizes that are
 * multiples of nothing (N=7, d=12, T=5, nh=3, hd=4), large-size forwards and
 * backwards against naive references (these take the threaded and blocked
 * code paths), the += / = conventions, attention and depth-attention
 * invariants, RoPE inversion, AdamW against a scalar reference, and bitwise
 * determinism of the backward reductions with 2 threads. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backend.h"
#include "testutil.h"

/* Finite differences in float with step FD_EPS = 1e-2 (1e-3 for inputs the
 * op is linear in, where there is no truncation error): the relative error
 * ||g - g_fd|| / ||g_fd|| must be < FD_TOL = 2e-3.  Observed values are
 * 1e-5 .. 1.2e-4, so the bound has >15x margin and still catches a wrong
 * term of a few percent. */
#define FD_EPS 1e-2f
#define FD_TOL 2e-3
/* float op vs double reference: rel err < REF_TOL */
#define REF_TOL 1e-5

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

/* rel err of a float array against a double reference */
static double rel_err_d(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
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

#define CHECK_REL(name, a, ref, n, tol)                                        \
    do {                                                                       \
        double e_ = rel_err_d((a), (ref), (n));                                \
        cr_assert(e_ < (tol), "%s: rel err %g >= %g", name, e_, (double)(tol)); \
    } while (0)

/* dst == base + delta (the += convention), up to float rounding */
static void check_accum(const char *name, const float *after, const float *base,
                        const float *delta, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float want = base[i] + delta[i];
        cr_assert(fabsf(after[i] - want) <= 1e-5f * (1.0f + fabsf(want)),
                  "%s: not accumulated at %zu: %g vs %g + %g", name, i, after[i], base[i],
                  delta[i]);
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
        be->add(y, x, n);
        for (size_t i = 0; i < n; i++)
            cr_assert(y[i] == y0[i] + x[i]);
        be->scale(y, 0.5f, n);
        for (size_t i = 0; i < n; i++)
            cr_assert(y[i] == (y0[i] + x[i]) * 0.5f);
        be->copy(y, x, n);
        cr_assert(memcmp(y, x, n * sizeof(float)) == 0);
        double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += (double)x[i] * x[i];
        double s1 = be->sumsq(x, n), s2 = be->sumsq(x, n);
        cr_assert(fabs(s1 - ref) <= 1e-12 * ref, "sumsq %.17g vs %.17g", s1, ref);
        cr_assert(memcmp(&s1, &s2, sizeof s1) == 0, "sumsq not deterministic");
        be->set_threads(1);
        double s3 = be->sumsq(x, n);
        be->set_threads(2);
        cr_assert(memcmp(&s1, &s3, sizeof s1) == 0, "sumsq on 1 and 2 threads: %.17g vs %.17g", s3, s1);
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
    for (int i = 0; i < N; i++)
        cr_assert(memcmp(out + i * d, wte + tok[i] * d, d * sizeof(float)) == 0);

    float *dwte = zeros((size_t)V * d);
    be->embedding_bwd(dwte, R, tok, N, d);
    emb_ctx c = {N, d, tok, wte, out, R};
    CHECK_FD("embedding dwte", wte, (size_t)V * d, dwte, emb_loss, &c, 1e-3f);

    /* += onto a nonzero buffer */
    float *base = rnd((size_t)V * d, -1, 1), *acc = dup(base, (size_t)V * d);
    be->embedding_bwd(acc, R, tok, N, d);
    check_accum("embedding dwte", acc, base, dwte, (size_t)V * d);
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
    double *ref = calloc((size_t)V * d, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < d; j++)
            ref[tok[i] * d + j] += dout[i * d + j];
    be->embedding_bwd(dwte, dout, tok, N, d);
    CHECK_REL("embedding_bwd large", dwte, ref, (size_t)V * d, REF_TOL);
    free(tok), free(u), free(dout), free(dwte), free(ref);
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

static void rms_ref_fwd(double *out, double *rstd, const float *x, const float *g, int N, int d)
{
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        double r = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
        rstd[i] = r;
        for (int j = 0; j < d; j++)
            out[i * d + j] = x[i * d + j] * r * g[j];
    }
}

/* dx = d/dx sum(out*dout), dg likewise, in double from first principles:
 * out_j = x_j r g_j, dr/dx_k = -r^3 x_k / d */
static void rms_ref_bwd(double *dx, double *dg, const float *dout, const float *x,
                        const float *g, int N, int d)
{
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * d, *di = dout + (size_t)i * d;
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += (double)xi[j] * xi[j];
        double r = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
        double s = 0;
        for (int j = 0; j < d; j++)
            s += (double)di[j] * g[j] * xi[j];
        for (int k = 0; k < d; k++) {
            dx[i * d + k] = (double)di[k] * g[k] * r - s * r * r * r * xi[k] / d;
            dg[k] += (double)di[k] * xi[k] * r;
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
    rms_ref_fwd(rout, rr, x, g, N, d);
    CHECK_REL("rmsnorm out", out, rout, nd, REF_TOL);
    CHECK_REL("rmsnorm rstd", rstd, rr, N, REF_TOL);

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
    check_accum("rmsnorm dx", ax, bx, dx, nd);
    check_accum("rmsnorm dg", ag, bg, dg, d);

    /* overwrite: dx = (bits of += onto zeros), whatever dx held; dg still += */
    float *ox = rnd(nd, -9, 9), *og = dup(bg, d);
    be->rmsnorm_bwd(ox, og, R, x, g, rstd, 1, N, d);
    cr_expect(memcmp(ox, dx, nd * sizeof(float)) == 0, "rmsnorm overwrite dx differs from += onto zeros");
    check_accum("rmsnorm dg (overwrite)", og, bg, dg, d);
    free(ox), free(og);
    free(x), free(g), free(R), free(out), free(rstd), free(rout), free(rr);
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
    rms_ref_fwd(rout, rr, x, g, N, d);
    rms_ref_bwd(rdx, rdg, dout, x, g, N, d);
    CHECK_REL("rmsnorm out large", out, rout, nd, REF_TOL);
    CHECK_REL("rmsnorm dx large", dx, rdx, nd, REF_TOL);
    CHECK_REL("rmsnorm dg large", dg, rdg, d, REF_TOL);
    free(x), free(g), free(dout), free(out), free(rstd), free(dx), free(dg);
    free(rout), free(rr), free(rdx), free(rdg);
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
    double *ref = calloc((size_t)N * outd, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int o = 0; o < outd; o++) {
            double s = 0;
            for (int k = 0; k < in; k++)
                s += (double)x[i * in + k] * W[o * in + k];
            ref[i * outd + o] = s;
        }
    CHECK_REL("matmul out", out, ref, (size_t)N * outd, REF_TOL);

    float *dx = zeros((size_t)N * in), *dW = zeros((size_t)outd * in);
    be->matmul_bwd(dx, dW, R, x, W, N, in, outd);
    /* reference backward */
    double *rdx = calloc((size_t)N * in, sizeof(double));
    double *rdW = calloc((size_t)outd * in, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int o = 0; o < outd; o++)
            for (int k = 0; k < in; k++) {
                rdx[i * in + k] += (double)R[i * outd + o] * W[o * in + k];
                rdW[o * in + k] += (double)R[i * outd + o] * x[i * in + k];
            }
    CHECK_REL("matmul dx", dx, rdx, (size_t)N * in, REF_TOL);
    CHECK_REL("matmul dW", dW, rdW, (size_t)outd * in, REF_TOL);
    if (fd) {
        mm_ctx c = {N, in, outd, x, W, out, R};
        CHECK_FD("matmul dx", x, (size_t)N * in, dx, mm_loss, &c, 1e-3f);
        CHECK_FD("matmul dW", W, (size_t)outd * in, dW, mm_loss, &c, 1e-3f);
    }
    /* += onto nonzero buffers, and dx NULL */
    float *bx = rnd((size_t)N * in, -1, 1), *bW = rnd((size_t)outd * in, -1, 1);
    float *ax = dup(bx, (size_t)N * in), *aW = dup(bW, (size_t)outd * in);
    be->matmul_bwd(ax, aW, R, x, W, N, in, outd);
    check_accum("matmul dx", ax, bx, dx, (size_t)N * in);
    check_accum("matmul dW", aW, bW, dW, (size_t)outd * in);
    memcpy(aW, bW, (size_t)outd * in * sizeof(float));
    be->matmul_bwd(NULL, aW, R, x, W, N, in, outd);
    check_accum("matmul dW (dx NULL)", aW, bW, dW, (size_t)outd * in);
    free(x), free(W), free(R), free(out), free(ref), free(dx), free(dW), free(rdx), free(rdW);
    free(bx), free(bW), free(ax), free(aW);
}

Test(ops, matmul) { mm_check(7, 12, 5, 1); }

Test(ops, matmul_large_reference) { mm_check(301, 67, 45, 0); }

/* ---- RoPE ------------------------------------------------------------- */

static void rope_ref(double *y, const float *x, int B, int T, int nh, int hd)
{
    int h2 = hd / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                size_t o = (((size_t)b * T + t) * nh + h) * hd;
                for (int j = 0; j < h2; j++) {
                    double a = t * pow(10000.0, -2.0 * j / hd);
                    y[o + j] = x[o + j] * cos(a) - x[o + j + h2] * sin(a);
                    y[o + j + h2] = x[o + j] * sin(a) + x[o + j + h2] * cos(a);
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
    double *ref = calloc(n, sizeof(double));
    be->rope_fwd(y, B, T, nh, hd);
    rope_ref(ref, x, B, T, nh, hd);
    CHECK_REL("rope fwd", y, ref, n, REF_TOL);
    /* position 0 is the identity */
    for (int h = 0; h < nh * hd; h++)
        cr_assert(y[h] == x[h]);

    /* bwd(fwd(x)) = x */
    be->rope_bwd(y, B, T, nh, hd);
    cr_assert(tu_rel_err(y, x, n) < 1e-6, "rope_bwd(rope_fwd(x)) != x");

    /* gradient: dL/dx = rope_bwd(R) */
    float *g = dup(R, n), *tmp = zeros(n);
    be->rope_bwd(g, B, T, nh, hd);
    rope_ctx c = {B, T, nh, hd, x, tmp, R};
    CHECK_FD("rope dx", x, n, g, rope_loss, &c, 1e-3f);

    /* larger head dim, longer sequence (threaded path) */
    int T2 = 301, nh2 = 3, hd2 = 38;
    size_t n2 = (size_t)T2 * nh2 * hd2;
    float *x2 = rnd(n2, -1, 1), *y2 = dup(x2, n2);
    double *ref2 = calloc(n2, sizeof(double));
    be->rope_fwd(y2, 1, T2, nh2, hd2);
    rope_ref(ref2, x2, 1, T2, nh2, hd2);
    CHECK_REL("rope fwd large", y2, ref2, n2, REF_TOL);
    be->rope_bwd(y2, 1, T2, nh2, hd2);
    cr_assert(tu_rel_err(y2, x2, n2) < 1e-5, "rope inverse large");
    free(x), free(y), free(R), free(ref), free(g), free(tmp), free(x2), free(y2), free(ref2);
}

/* ---- attention -------------------------------------------------------- */

/* Naive causal attention in double; att_r gets B x nh x T x T. If dy is
 * non-NULL also the backward into dq, dk, dv (B x T x C). */
static void attn_ref(double *y, double *att_r, double *dq, double *dk, double *dv,
                     const float *dy, const float *q, const float *k, const float *v, int B,
                     int T, int nh, int hd)
{
    int C = nh * hd;
    double sc = 1.0 / sqrt((double)hd);
    double *ds = malloc((size_t)T * T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            double *A = att_r + ((size_t)b * nh + h) * T * T;
#define IX(t, j) (((size_t)b * T + (t)) * C + (size_t)h * hd + (j))
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int c = 0; c < T; c++) {
                    double s = 0;
                    if (c <= t) {
                        for (int j = 0; j < hd; j++)
                            s += (double)q[IX(t, j)] * k[IX(c, j)];
                        s *= sc;
                        mx = fmax(mx, s);
                    }
                    A[t * T + c] = s;
                }
                double sum = 0;
                for (int c = 0; c <= t; c++)
                    sum += (A[t * T + c] = exp(A[t * T + c] - mx));
                for (int c = 0; c < T; c++)
                    A[t * T + c] = c <= t ? A[t * T + c] / sum : 0.0;
                for (int j = 0; j < hd; j++) {
                    double s = 0;
                    for (int c = 0; c <= t; c++)
                        s += A[t * T + c] * v[IX(c, j)];
                    y[IX(t, j)] = s;
                }
            }
            if (!dy)
                continue;
            for (int t = 0; t < T; t++) {
                double dot = 0;
                for (int c = 0; c <= t; c++) {
                    double da = 0;
                    for (int j = 0; j < hd; j++)
                        da += (double)dy[IX(t, j)] * v[IX(c, j)];
                    ds[t * T + c] = da;
                    dot += da * A[t * T + c];
                }
                for (int c = 0; c <= t; c++)
                    ds[t * T + c] = A[t * T + c] * (ds[t * T + c] - dot) * sc;
            }
            for (int t = 0; t < T; t++)
                for (int j = 0; j < hd; j++) {
                    double sq = 0, sk = 0, sv = 0;
                    for (int c = 0; c <= t; c++)
                        sq += ds[t * T + c] * k[IX(c, j)];
                    for (int r = t; r < T; r++) {
                        sk += ds[r * T + t] * q[IX(r, j)];
                        sv += A[r * T + t] * dy[IX(r, j)];
                    }
                    dq[IX(t, j)] = sq;
                    dk[IX(t, j)] = sk;
                    dv[IX(t, j)] = sv;
                }
#undef IX
        }
    free(ds);
}

typedef struct {
    int B, T, nh, hd;
    float *q, *k, *v, *y, *att;
    const float *R;
} attn_ctx;

static double attn_loss(void *p)
{
    attn_ctx *c = p;
    be->attention_fwd(c->y, c->att, c->q, c->k, c->v, c->B, c->T, c->nh, c->hd);
    return dotf(c->y, c->R, (size_t)c->B * c->T * c->nh * c->hd);
}

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
            cr_assert(fabs(s - 1.0) < 1e-5, "att row sum %g", s);
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
    double *rdv = calloc(n, sizeof(double));

    be->attention_fwd(y, att, q, k, v, B, T, nh, hd);
    be->attention_bwd(dq, dk, dv, datt, R, att, q, k, v, B, T, nh, hd);
    attn_ref(ry, ratt, rdq, rdk, rdv, R, q, k, v, B, T, nh, hd);
    CHECK_REL("attention y", y, ry, n, REF_TOL);
    CHECK_REL("attention att", att, ratt, na, REF_TOL);
    CHECK_REL("attention dq", dq, rdq, n, REF_TOL);
    CHECK_REL("attention dk", dk, rdk, n, REF_TOL);
    CHECK_REL("attention dv", dv, rdv, n, REF_TOL);
    attn_invariants(att, B, T, nh);

    if (fd) {
        attn_ctx c = {B, T, nh, hd, q, k, v, y, att, R};
        CHECK_FD("attention dq", q, n, dq, attn_loss, &c, FD_EPS);
        CHECK_FD("attention dk", k, n, dk, attn_loss, &c, FD_EPS);
        CHECK_FD("attention dv", v, n, dv, attn_loss, &c, 1e-3f);
    }
    free(q), free(k), free(v), free(R), free(y), free(att), free(datt);
    free(dq), free(dk), free(dv), free(ry), free(ratt), free(rdq), free(rdk), free(rdv);
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
    double *ref = calloc(n, sizeof(double));
    be->swiglu_fwd(out, gate, up, n);
    for (size_t i = 0; i < n; i++)
        ref[i] = gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
    CHECK_REL("swiglu out", out, ref, n, REF_TOL);

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
    free(gate), free(up), free(R), free(out), free(ref), free(dg), free(du);
}

/* ---- depth attention -------------------------------------------------- */

static void da_ref_fwd(double *h, double *alpha, const float *const *src, int n,
                       const float *w, const float *g, int N, int d)
{
    double *lg = malloc(n * sizeof(double));
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double ss = 0, dot = 0;
            for (int j = 0; j < d; j++) {
                ss += (double)x[j] * x[j];
                dot += (double)w[j] * g[j] * x[j];
            }
            lg[s] = dot / sqrt(ss / d + (double)AR_RMS_EPS);
            mx = fmax(mx, lg[s]);
        }
        for (int s = 0; s < n; s++)
            sum += (lg[s] = exp(lg[s] - mx));
        for (int j = 0; j < d; j++)
            h[(size_t)i * d + j] = 0;
        for (int s = 0; s < n; s++) {
            alpha[(size_t)i * n + s] = lg[s] / sum;
            for (int j = 0; j < d; j++)
                h[(size_t)i * d + j] += lg[s] / sum * src[s][(size_t)i * d + j];
        }
    }
    free(lg);
}

/* backward in double, by the chain rule written out independently of the
 * header's closed form: logit_s = (u . x_s) r_s with r_s = (mean x_s^2+eps)^-1/2 */
static void da_ref_bwd(double **dsrc, double *dw, double *dg, const float *dh,
                       const float *const *src, int n, const float *w, const float *g, int N,
                       int d)
{
    double *lg = malloc(n * sizeof(double)), *al = malloc(n * sizeof(double));
    double *r = malloc(n * sizeof(double)), *ux = malloc(n * sizeof(double));
    double *dal = malloc(n * sizeof(double));
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double ss = 0, dot = 0;
            for (int j = 0; j < d; j++) {
                ss += (double)x[j] * x[j];
                dot += (double)w[j] * g[j] * x[j];
            }
            r[s] = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
            ux[s] = dot;
            lg[s] = dot * r[s];
            mx = fmax(mx, lg[s]);
        }
        for (int s = 0; s < n; s++)
            sum += (al[s] = exp(lg[s] - mx));
        for (int s = 0; s < n; s++)
            al[s] /= sum;
        /* dL/dalpha_s = dh . x_s; dL/dlogit via softmax jacobian */
        double mean = 0;
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double a = 0;
            for (int j = 0; j < d; j++)
                a += (double)dh[(size_t)i * d + j] * x[j];
            dal[s] = a;
            mean += al[s] * a;
        }
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double dlog = al[s] * (dal[s] - mean);
            for (int j = 0; j < d; j++) {
                double u = (double)w[j] * g[j];
                /* d logit / d x_j = u_j r + (u.x) (-r^3 x_j / d) */
                dsrc[s][(size_t)i * d + j] += al[s] * dh[(size_t)i * d + j] +
                                              dlog * (u * r[s] - ux[s] * r[s] * r[s] * r[s] * x[j] / d);
                dw[j] += dlog * g[j] * x[j] * r[s];
                dg[j] += dlog * w[j] * x[j] * r[s];
            }
        }
    }
    free(lg), free(al), free(r), free(ux), free(dal);
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
    be->depth_attn_fwd(c->h, c->alpha, c->rstd, c->src, c->n, c->w, c->g, c->N, c->d);
    return dotf(c->h, c->R, (size_t)c->N * c->d);
}

/* fwd/bwd against the double reference; with fd also finite differences of
 * every source, w and g; then the += convention. */
static void da_check(int n, int N, int d, int fd)
{
    size_t nd = (size_t)N * d;
    float **src = malloc(n * sizeof(float *)), **dsrc = malloc(n * sizeof(float *));
    double **rdsrc = malloc(n * sizeof(double *));
    for (int s = 0; s < n; s++) {
        src[s] = rnd(nd, -1.5f, 1.5f);
        /* sources of different scale, as in a real residual stream */
        for (size_t i = 0; i < nd; i++)
            src[s][i] *= 0.5f + s;
        dsrc[s] = zeros(nd);
        rdsrc[s] = calloc(nd, sizeof(double));
    }
    float *w = rnd(d, -1, 1), *g = rnd(d, 0.5f, 1.5f), *R = rnd(nd, -1, 1);
    float *h = rnd(nd, -9, 9), *alpha = zeros((size_t)N * n), *rstd = zeros((size_t)N * n);
    double *rh = calloc(nd, sizeof(double)), *ral = calloc((size_t)N * n, sizeof(double));
    const float *const *csrc = (const float *const *)src;

    be->depth_attn_fwd(h, alpha, rstd, csrc, n, w, g, N, d);
    da_ref_fwd(rh, ral, csrc, n, w, g, N, d);
    CHECK_REL("depth_attn h", h, rh, nd, REF_TOL);
    CHECK_REL("depth_attn alpha", alpha, ral, (size_t)N * n, REF_TOL);

    float *dw = zeros(d), *dg = zeros(d);
    double *rdw = calloc(d, sizeof(double)), *rdg = calloc(d, sizeof(double));
    be->depth_attn_bwd(dsrc, dw, dg, R, alpha, rstd, csrc, n, w, g, N, d);
    da_ref_bwd(rdsrc, rdw, rdg, R, csrc, n, w, g, N, d);
    for (int s = 0; s < n; s++)
        CHECK_REL("depth_attn dsrc", dsrc[s], rdsrc[s], nd, REF_TOL);
    CHECK_REL("depth_attn dw", dw, rdw, d, REF_TOL);
    CHECK_REL("depth_attn dg", dg, rdg, d, REF_TOL);

    if (fd) {
        da_ctx c = {n, N, d, csrc, w, g, h, alpha, rstd, R};
        for (int s = 0; s < n; s++)
            CHECK_FD("depth_attn dsrc", src[s], nd, dsrc[s], da_loss, &c, FD_EPS);
        CHECK_FD("depth_attn dw", w, d, dw, da_loss, &c, FD_EPS);
        CHECK_FD("depth_attn dg", g, d, dg, da_loss, &c, FD_EPS);
        be->depth_attn_fwd(h, alpha, rstd, csrc, n, w, g, N, d);
    }

    /* += onto nonzero buffers */
    float **asrc = malloc(n * sizeof(float *)), **bsrc = malloc(n * sizeof(float *));
    for (int s = 0; s < n; s++) {
        bsrc[s] = rnd(nd, -1, 1);
        asrc[s] = dup(bsrc[s], nd);
    }
    float *bw = rnd(d, -1, 1), *bg = rnd(d, -1, 1), *aw = dup(bw, d), *ag = dup(bg, d);
    be->depth_attn_bwd(asrc, aw, ag, R, alpha, rstd, csrc, n, w, g, N, d);
    for (int s = 0; s < n; s++) {
        check_accum("depth_attn dsrc", asrc[s], bsrc[s], dsrc[s], nd);
        free(asrc[s]), free(bsrc[s]);
    }
    check_accum("depth_attn dw", aw, bw, dw, d);
    check_accum("depth_attn dg", ag, bg, dg, d);

    for (int s = 0; s < n; s++)
        free(src[s]), free(dsrc[s]), free(rdsrc[s]);
    free(src), free(dsrc), free(rdsrc), free(asrc), free(bsrc);
    free(w), free(g), free(R), free(h), free(alpha), free(rstd), free(rh), free(ral);
    free(dw), free(dg), free(rdw), free(rdg), free(bw), free(bg), free(aw), free(ag);
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
    be->depth_attn_fwd(h, alpha, rstd, (const float *const *)src, n, w, g, N, d);
    for (int i = 0; i < N * n; i++)
        cr_assert(alpha[i] == 0.25f, "alpha %g != 1/n", alpha[i]);
    for (size_t i = 0; i < nd; i++) {
        double m = ((double)src[0][i] + src[1][i] + src[2][i] + src[3][i]) / n;
        cr_assert(fabs(h[i] - m) < 1e-6, "h != mean of sources");
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
    be->depth_attn_fwd(h, alpha, rstd, cs, n, w, g, N, d);
    float *d0 = zeros(nd), *d1 = zeros(nd), *same = zeros(nd);
    float *dw = zeros(d), *dg = zeros(d);
    float *sep[2] = {d0, d1}, *rep[2] = {same, same};
    be->depth_attn_bwd(sep, dw, dg, dh, alpha, rstd, cs, n, w, g, N, d);
    be->depth_attn_bwd(rep, dw, dg, dh, alpha, rstd, cs, n, w, g, N, d);
    for (size_t i = 0; i < nd; i++)
        cr_assert(fabsf(same[i] - (d0[i] + d1[i])) <= 1e-6f * (1 + fabsf(same[i])));
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

static double xe_loss(void *p)
{
    xe_ctx *c = p;
    return c->scale * be->xent_fwd(c->losses, c->probs, c->logits, c->tg, c->N, c->V);
}

Test(ops, xent)
{
    int N = 7, V = 13;
    int32_t tg[7] = {0, 12, 5, 5, 3, 7, 11};
    float *logits = rnd((size_t)N * V, -3, 3), *losses = zeros(N), *probs = zeros((size_t)N * V);
    double tot = be->xent_fwd(losses, probs, logits, tg, N, V);
    double rtot = 0;
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0, ps = 0;
        for (int c = 0; c < V; c++)
            mx = fmax(mx, logits[i * V + c]);
        for (int c = 0; c < V; c++)
            s += exp(logits[i * V + c] - mx);
        for (int c = 0; c < V; c++) {
            double p = exp(logits[i * V + c] - mx) / s;
            cr_assert(fabs(probs[i * V + c] - p) < 1e-6);
            ps += probs[i * V + c];
        }
        cr_assert(fabs(ps - 1) < 1e-5);
        double l = log(s) - (logits[i * V + tg[i]] - mx);
        cr_assert(fabs(losses[i] - l) < 1e-5 * (1 + l), "loss %g vs %g", losses[i], l);
        rtot += l;
    }
    cr_assert(fabs(tot - rtot) < 1e-5 * rtot);

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
    double tot = be->xent_fwd(losses, probs, logits, tg, N, V);
    for (int i = 0; i < N; i++)
        cr_assert(fabs(losses[i] - log(256.0)) < 1e-5, "uniform loss %g != log V", losses[i]);
    cr_assert(fabs(tot - 3 * log(256.0)) < 1e-4);
    /* huge logits: stable, no inf/nan */
    for (int c = 0; c < V; c++)
        logits[c] = c == 7 ? 1000.0f : -1000.0f;
    be->xent_fwd(losses, probs, logits, tg, 1, V);
    cr_assert(isfinite(losses[0]) && fabs(losses[0] - 2000.0) < 1e-2, "loss %g", losses[0]);
    cr_assert(fabsf(probs[7] - 1.0f) < 1e-6f);
    /* logits spread over 80 nats: every prob to 1e-5 relative */
    for (int c = 0; c < V; c++)
        logits[c] = 20.0f - 80.0f * (float)((c * 37) % V) / V;
    be->xent_fwd(losses, probs, logits, tg, 1, V);
    double mx = 20.0, s = 0;
    for (int c = 0; c < V; c++)
        s += exp(logits[c] - mx);
    for (int c = 0; c < V; c++) {
        double p = exp(logits[c] - mx) / s;
        cr_assert(fabs(probs[c] - p) <= 1e-5 * p, "prob %d: %g vs %g", c, probs[c], p);
    }
    free(logits), free(losses), free(probs);
}

/* the model turns probabilities into dlogits in place: same result as apart */
Test(ops, xent_backward_in_place)
{
    int N = 9, V = 37;
    int32_t tg[9] = {0, 36, 5, 5, 12, 1, 30, 7, 0};
    float *logits = rnd((size_t)N * V, -3, 3), *losses = zeros(N), *probs = zeros((size_t)N * V);
    float *apart = zeros((size_t)N * V);
    be->xent_fwd(losses, probs, logits, tg, N, V);
    be->xent_bwd(apart, probs, tg, 0.25f, N, V);
    be->xent_bwd(probs, probs, tg, 0.25f, N, V);
    cr_assert(memcmp(apart, probs, (size_t)N * V * sizeof(float)) == 0,
              "in-place xent backward differs from the out-of-place one");
    free(logits), free(losses), free(probs), free(apart);
}

/* ---- AdamW ------------------------------------------------------------ */

Test(ops, adamw_reference)
{
    size_t n = 37;
    float *p = rnd(n, -1, 1), *m = zeros(n), *v = zeros(n);
    double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double));
    double *rv = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i];
    float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    for (long t = 1; t <= 5; t++) {
        float *g = rnd(n, -1, 1);
        be->adamw(p, g, m, v, n, gs, lr, b1, b2, eps, wd, t);
        double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            rp[i] -= lr * ((rm[i] / bc1) / (sqrt(rv[i] / bc2) + eps) + wd * rp[i]);
        }
        free(g);
    }
    for (size_t i = 0; i < n; i++) {
        cr_assert(fabs(p[i] - rp[i]) < 1e-6, "p[%zu] %g vs %g", i, p[i], rp[i]);
        cr_assert(fabs(m[i] - rm[i]) < 1e-6 * (1 + fabs(rm[i])));
        cr_assert(fabs(v[i] - rv[i]) < 1e-6 * (1 + fabs(rv[i])));
    }
    /* first step with zero decay moves each weight by ~lr*sign(g) */
    float q[3] = {0.5f, -0.5f, 0.0f}, gg[3] = {2.0f, -0.01f, 1.0f}, mm[3] = {0}, vv[3] = {0};
    be->adamw(q, gg, mm, vv, 3, 1.0f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    cr_assert(fabsf(q[0] - 0.49f) < 1e-6f && fabsf(q[1] + 0.49f) < 1e-6f &&
              fabsf(q[2] + 0.01f) < 1e-6f);
    free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

/* ---- determinism (2 threads, bitwise) --------------------------------- */

Test(ops, determinism)
{
    be->set_threads(2);
    /* attention_bwd */
    {
        int B = 2, T = 130, nh = 2, hd = 16, C = nh * hd;
        size_t n = (size_t)B * T * C, na = (size_t)B * nh * T * T;
        float *q = rnd(n, -1, 1), *k = rnd(n, -1, 1), *v = rnd(n, -1, 1), *dy = rnd(n, -1, 1);
        float *y = zeros(n), *att = zeros(na);
        be->attention_fwd(y, att, q, k, v, B, T, nh, hd);
        float *r[2][4];
        for (int run = 0; run < 2; run++) {
            for (int j = 0; j < 3; j++)
                r[run][j] = zeros(n);
            r[run][3] = zeros(na);
            be->attention_bwd(r[run][0], r[run][1], r[run][2], r[run][3], dy, att, q, k, v, B,
                              T, nh, hd);
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
        be->depth_attn_fwd(h, al, rs, cs, n, w, g, N, d);
        float *ds[2][5], *dw[2], *dg[2];
        for (int run = 0; run < 2; run++) {
            for (int s = 0; s < n; s++)
                ds[run][s] = zeros(nd);
            dw[run] = zeros(d);
            dg[run] = zeros(d);
            be->depth_attn_bwd(ds[run], dw[run], dg[run], dh, al, rs, cs, n, w, g, N, d);
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
    be->depth_attn_fwd(out, al, rs, cs, n, w, g, N, d);
    float *rg[2], *dw[2], *dg[2], *de[2], *dx = zeros(nd);
    float *ds[3] = {zeros(nd), zeros(nd), zeros(nd)};
    double ss[2];
    for (int k = 0; k < 2; k++) {
        be->set_threads(k + 1);
        rg[k] = zeros(d), dw[k] = zeros(d), dg[k] = zeros(d), de[k] = zeros((size_t)V * d);
        be->rmsnorm_bwd(dx, rg[k], dout, x, g, rstd, 0, N, d);
        be->depth_attn_bwd(ds, dw[k], dg[k], dout, al, rs, cs, n, w, g, N, d);
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
