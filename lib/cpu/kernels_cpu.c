/* The CPU backend's elementwise and row ops: copy, add, scale, sumsq,
 * embedding, RMSNorm, rotary position embedding, SwiGLU, softmax
 * cross-entropy and AdamW, each with its math (lib/ops.def) above it.
 * Determinism as the whole backend (backend_cpu.c): static schedules, and
 * reductions over tokens through fixed chunks added in order. */
#include "ops_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "loops.h"
#include "rmsnorm_row.h"
#include "workspace.h"

/* Fixed chunk of the deterministic sumsq reduction. */
#define SUMSQ_CHUNK 16384

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */

/* y = x */
void cpu_copy(float *y, const float *x, size_t n)
{
    if (!n || y == x)
        return;
    uintptr_t yb = (uintptr_t)y, xb = (uintptr_t)x, nb = n * sizeof(float);
    if (n <= PAR_MIN || (yb < xb + nb && xb < yb + nb)) { /* small, or overlapping */
        memmove(y, x, nb);
        return;
    }
    /* on every thread, as add (one thread's memmove of a 256 KiB
     * activation took about 4x a two-thread add's time) */
    long nn = (long)n;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nn; i++)
        y[i] = x[i];
}

/* y += x */
void cpu_add(float *y, const float *x, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++)
        y[i] += x[i];
}

/* y *= a */
void cpu_scale(float *y, float a, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++)
        y[i] *= a;
}

typedef double v8d __attribute__((vector_size(8 * sizeof(double))));

/* sum_i x_i^2 over one run, in double: element i goes to lane i mod 32 of
 * four 8-double accumulators, the lanes are added in a fixed tree and the
 * tail in order.  One running double was bound by the latency of its adds
 * (a gradient norm took 1% of bench-medium's step, one 16384-float chunk
 * at a time); the order is still fixed, so the bits are the same on every
 * call and thread count. */
/* 8 floats at p as doubles: a statement expression, not a function, since
 * returning a 64-byte vector by value has an AVX-512 calling convention,
 * which GCC warns of in every build without AVX-512 */
#define ld8d(p)                                                                                    \
    ({                                                                                             \
        v8f v_;                                                                                    \
        memcpy(&v_, (p), sizeof v_);                                                               \
        __builtin_convertvector(v_, v8d);                                                          \
    })

static double sumsq_run(const float *x, size_t n)
{
    /* 32 floats a step, whatever the build's vector width: the same
     * order, so the same bits, on every build */
    v8d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        v8d d0 = ld8d(x + i), d1 = ld8d(x + i + 8), d2 = ld8d(x + i + 16), d3 = ld8d(x + i + 24);
        a0 += d0 * d0;
        a1 += d1 * d1;
        a2 += d2 * d2;
        a3 += d3 * d3;
    }
    v8d a = (a0 + a1) + (a2 + a3);
    double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* sum_i x_i^2 in double: runs over fixed chunks of SUMSQ_CHUNK elements,
 * added in chunk order (independent of the thread count). */
double cpu_sumsq(const float *x, size_t n)
{
    long nc = (long)((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    if (nc <= 1)
        return sumsq_run(x, n);
    double *part = cpu_ws(WS_C, (size_t)nc * sizeof(double));
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nc; c++) {
        size_t lo = (size_t)c * SUMSQ_CHUNK;
        size_t hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
        part[c] = sumsq_run(x + lo, hi - lo);
    }
    double s = 0;
    for (long c = 0; c < nc; c++)
        s += part[c];
    return s;
}

/* out[c] = sumsq of chunk c (the same calls as sumsq on each chunk, so the
 * same bits); chunks of at most SUMSQ_CHUNK on threads, one run each */
void cpu_sumsq_chunks(double *out, const float *x, size_t n, size_t chunk)
{
    long nc = (long)((n + chunk - 1) / chunk);
    if (chunk > SUMSQ_CHUNK) { /* sumsq itself runs on threads */
        for (long c = 0; c < nc; c++) {
            size_t lo = (size_t)c * chunk;
            out[c] = cpu_sumsq(x + lo, lo + chunk < n ? chunk : n - lo);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (long c = 0; c < nc; c++) {
        size_t lo = (size_t)c * chunk;
        out[c] = sumsq_run(x + lo, lo + chunk < n ? chunk : n - lo);
    }
}

/* Splits [0, n) into `parts` near-equal contiguous ranges; range k. */
static void split_range(int n, int parts, int k, int *lo, int *hi)
{
    int q = n / parts, r = n % parts;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

/* Number of column chunks for the column-parallel reductions: one per
 * thread, but no chunk narrower than 16 floats. */
static int col_chunks(int d)
{
    int t = omp_get_max_threads();
    int c = d / 16;
    if (c < 1)
        c = 1;
    return c < t ? c : t;
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                 */

/* out[i,:] = wte[tok[i],:]    (N x d) */
void cpu_embedding_fwd(float *out, const int32_t *tok, const float *wte, int N, int d)
{
#pragma omp parallel for schedule(static) if ((long)N * d > PAR_MIN)
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * d, wte + (size_t)tok[i] * d, (size_t)d * sizeof(float));
}

/* dwte[tok[i],:] += dout[i,:]
 * Parallel over column chunks; within a chunk tokens are added in order, so
 * repeated tokens accumulate deterministically. */
void cpu_embedding_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int d)
{
    int nc = col_chunks(d);
#pragma omp parallel for schedule(static) num_threads(nc) if (nc > 1 && (long)N * d > PAR_MIN)
    for (int c = 0; c < nc; c++) {
        int j0, j1;
        split_range(d, nc, c, &j0, &j1);
        for (int i = 0; i < N; i++) {
            float *dst = dwte + (size_t)tok[i] * d;
            const float *src = dout + (size_t)i * d;
            for (int j = j0; j < j1; j++)
                dst[j] += src[j];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

/* rstd[i] = 1/sqrt(mean_j x[i,j]^2 + eps);  out[i,j] = x[i,j]*rstd[i]*g[j] */
void cpu_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *g, int N, int d)
{
#pragma omp parallel for schedule(static) if ((long)N * d > PAR_MIN)
    for (int i = 0; i < N; i++)
        cpu_rmsnorm_row(out + (size_t)i * d, rstd + i, x + (size_t)i * d, g, d);
}

/* xh = x*rstd, gy = g*dout:
 *   dx[i,:] += rstd[i] * (gy - xh * mean_j(gy*xh))
 *   dg[j]   += sum_i dout[i,j]*xh[i,j]
 * One pass over the rows: dg through partial sums of RMS_RED rows added in
 * order (deterministic, thread-count independent), not a second sweep of
 * dout and x. */
#define RMS_RED 128
void cpu_rmsnorm_bwd(float *dx, float *dg, const float *dout, const float *x,
                     const float *g, const float *rstd, int overwrite, int N, int d)
{
    int nch = (N + RMS_RED - 1) / RMS_RED;
    float *part = cpu_ws(WS_C, (size_t)nch * d * sizeof(float));
#pragma omp parallel if ((long)N * d > PAR_MIN)
    {
        float xh[d];
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            float *pp = part + (size_t)ch * d;
            memset(pp, 0, (size_t)d * sizeof(float));
            int i1 = (ch + 1) * RMS_RED < N ? (ch + 1) * RMS_RED : N;
            for (int i = ch * RMS_RED; i < i1; i++) {
                const float *xi = x + (size_t)i * d;
                for (int j = 0; j < d; j++)
                    xh[j] = xi[j] * rstd[i];
                cpu_rmsnorm_bwd_row(dx + (size_t)i * d, pp, dout + (size_t)i * d, xh, g, rstd[i],
                                    overwrite, d);
            }
        }
    }
    for (int j = 0; j < d; j++) {
        double acc = 0.0;
        for (int ch = 0; ch < nch; ch++)
            acc += part[(size_t)ch * d + j];
        dg[j] += (float)acc;
    }
}

/* ------------------------------------------------------------------------ */
/* rotary position embedding (rotate-half, theta 10000)                      */

/* cos/sin table T x hd/2: angle t*10000^(-2j/hd) in double, rounded to
 * float; kept in the workspace and rebuilt only when (T, hd) changes. */
static float *rope_table(int T, int hd)
{
    static int cT = -1, chd = -1;
    int h2 = hd / 2;
    float *tab = cpu_ws(WS_ROPE, (size_t)T * h2 * 2 * sizeof(float) + (size_t)h2 * sizeof(double));
    if (T == cT && hd == chd)
        return tab;
    cT = T, chd = hd;
    double *freq = (double *)(tab + (size_t)T * h2 * 2);
    for (int j = 0; j < h2; j++)
        freq[j] = pow(10000.0, -2.0 * j / hd);
#pragma omp parallel for schedule(static) if ((long)T * h2 > 4096)
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < h2; j++) {
            double a = (double)t * freq[j];
            tab[((size_t)t * h2 + j) * 2] = (float)cos(a);
            tab[((size_t)t * h2 + j) * 2 + 1] = (float)sin(a);
        }
    }
    return tab;
}

/* Rotates every (j, j+hd/2) pair of every head of x (B x T x nh x hd) by the
 * angle +a (dir = +1, forward) or -a (dir = -1, inverse = transpose). */
static void rope_apply(float *x, int B, int T, int nh, int hd, float dir)
{
    int h2 = hd / 2;
    if (h2 == 0)
        return;
    float *tab = rope_table(T, hd);
    long BT = (long)B * T;
#pragma omp parallel for schedule(static) if (BT * nh * hd > PAR_MIN)
    for (long bt = 0; bt < BT; bt++) {
        int t = (int)(bt % T);
        const float *cs = tab + (size_t)t * h2 * 2;
        for (int h = 0; h < nh; h++) {
            float *xh = x + ((size_t)bt * nh + h) * hd;
            for (int j = 0; j < h2; j++) {
                float c = cs[2 * j], s = dir * cs[2 * j + 1];
                float x0 = xh[j], x1 = xh[j + h2];
                xh[j] = x0 * c - x1 * s;
                xh[j + h2] = x0 * s + x1 * c;
            }
        }
    }
}

/* x'_j = x_j cos a - x_{j+hd/2} sin a ;  x'_{j+hd/2} = x_j sin a + x_{j+hd/2} cos a
 * a = t * 10000^(-2j/hd), in place. */
void cpu_rope_fwd(float *x, int B, int T, int nh, int hd)
{
    rope_apply(x, B, T, nh, hd, 1.0f);
}

/* The rotation is orthogonal: the backward is the inverse rotation (angle -a)
 * applied to dx in place. */
void cpu_rope_bwd(float *dx, int B, int T, int nh, int hd)
{
    rope_apply(dx, B, T, nh, hd, -1.0f);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU gate                                                               */

/* out = silu(gate) * up,  silu(a) = a*sigmoid(a)     (=)
 * Whole vectors by v_expf, the tail by fast_expf (the same operations):
 * GCC vectorises a loop of fast_expf with eight mask instructions for its
 * clamp, where v_expf takes a max and a min. */
static inline void swiglu_fwd_at(float *out, const float *gate, const float *up, size_t i, int vec)
{
    if (vec) {
        vf a = v_ld(gate + i), sg = 1.0f / (1.0f + v_expf(-a));
        v_st(out + i, a * sg * v_ld(up + i));
    } else {
        float a = gate[i], sg = 1.0f / (1.0f + fast_expf(-a));
        out[i] = a * sg * up[i];
    }
}

void cpu_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    long nv = (long)(n / VL);
#pragma omp parallel for schedule(static) if ((long)n > PAR_MIN)
    for (long b = 0; b < nv; b++)
        swiglu_fwd_at(out, gate, up, (size_t)b * VL, 1);
    for (size_t i = (size_t)nv * VL; i < n; i++)
        swiglu_fwd_at(out, gate, up, i, 0);
}

/* (=) dgate = dout*up*sigmoid(a)*(1 + a*(1-sigmoid(a))),  dup = dout*silu(a)
 * (vectors and tail as swiglu_fwd) */
static inline void swiglu_bwd_at(float *dgate, float *dup, const float *dout, const float *gate,
                                 const float *up, size_t i, int vec)
{
    if (vec) {
        vf a = v_ld(gate + i), u = v_ld(up + i), go = v_ld(dout + i);
        vf sg = 1.0f / (1.0f + v_expf(-a));
        v_st(dgate + i, go * u * sg * (1.0f + a * (1.0f - sg)));
        v_st(dup + i, go * a * sg);
    } else {
        float a = gate[i], u = up[i], go = dout[i];
        float sg = 1.0f / (1.0f + fast_expf(-a));
        dgate[i] = go * u * sg * (1.0f + a * (1.0f - sg));
        dup[i] = go * a * sg;
    }
}

void cpu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                    const float *up, size_t n)
{
    long nv = (long)(n / VL);
#pragma omp parallel for schedule(static) if ((long)n > PAR_MIN)
    for (long b = 0; b < nv; b++)
        swiglu_bwd_at(dgate, dup, dout, gate, up, (size_t)b * VL, 1);
    for (size_t i = (size_t)nv * VL; i < n; i++)
        swiglu_bwd_at(dgate, dup, dout, gate, up, i, 0);
}

/* ------------------------------------------------------------------------ */
/* softmax cross-entropy                                                     */

/* One row: p = softmax(z) (V floats, =); returns -log p[t] = log(sum exp)
 * - (z_t - max), stable (the row max subtracted).  z_t is read first, so
 * p may be z. */
static float xent_row(const float *z, float *p, int t, int V)
{
    float mx = max16(z, V), zt = z[t];
    for (int c = 0; c < V; c++)
        p[c] = fast_expf(z[c] - mx);
    double sum = sum8d(p, V);
    float inv = (float)(1.0 / sum);
    for (int c = 0; c < V; c++)
        p[c] *= inv;
    return (float)(log(sum) - ((double)zt - mx));
}

/* One row: dz = scale (p - onehot(t)); dz may be p */
static void xent_grad_row(float *dz, const float *p, int t, float scale, int V)
{
    float pt = p[t];
    for (int c = 0; c < V; c++)
        dz[c] = scale * p[c];
    dz[t] = scale * (pt - 1.0f);
}

/* the losses' sum in double, in row order */
static double losses_sum(const float *losses, int N)
{
    double tot = 0.0;
    for (int i = 0; i < N; i++)
        tot += losses[i];
    return tot;
}

/* probs = softmax(logits) (N x V, =); losses[i] = -log probs[i, targets[i]];
 * *sum = sum_i losses[i] (double, summed in row order). */
void cpu_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V,
                  double *sum)
{
#pragma omp parallel for schedule(static) if ((long)N * V > PAR_MIN)
    for (int i = 0; i < N; i++)
        losses[i] = xent_row(logits + (size_t)i * V, probs + (size_t)i * V, targets[i], V);
    *sum = losses_sum(losses, N);
}

/* (=) losses, *sum as cpu_xent_fwd; dlogits = scale * (probs -
 * onehot(targets)) with probs as cpu_xent_fwd forms them: the same rows,
 * so the bits of cpu_xent_fwd then cpu_xent_bwd; dlogits may be logits. */
void cpu_xent_fwd_bwd(float *losses, float *dlogits, const float *logits, const int32_t *targets, int N, int V,
                      float scale, double *sum)
{
#pragma omp parallel for schedule(static) if ((long)N * V > PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *dz = dlogits + (size_t)i * V;
        losses[i] = xent_row(logits + (size_t)i * V, dz, targets[i], V);
        xent_grad_row(dz, dz, targets[i], scale, V);
    }
    *sum = losses_sum(losses, N);
}

/* (=) dlogits = scale * (probs - onehot(targets)); dlogits may be probs
 * itself (the model turns its probabilities into dlogits in place). */
void cpu_xent_bwd(float *dlogits, const float *probs, const int32_t *targets,
                  float scale, int N, int V)
{
#pragma omp parallel for schedule(static) if ((long)N * V > PAR_MIN)
    for (int i = 0; i < N; i++)
        xent_grad_row(dlogits + (size_t)i * V, probs + (size_t)i * V, targets[i], scale, V);
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                     */

/* g' = gscale * g
 * m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 * p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p )
 * bias corrections 1-b^t computed in double. */
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, const ar_adamw_hparams *s,
               ar_step_rec *rec)
{
    if (rec->skip)
        return;
    float gscale = rec->gscale, lr = s->lr, b1 = s->b1, b2 = s->b2, eps = s->eps, wd = s->wd;
    float bc1 = rec->bc1, bc2 = rec->bc2;
    long nn = (long)n;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1;
        float vh = vi / bc2;
        float pi = p[i] - lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
        p[i] = pi;
        bad |= !isfinite(pi);
    }
    if (bad)
        rec->bad_param = 1;
}

/* The step's record from its losses and gradient norm (lib/ops.def), in the
 * host's order and arithmetic (run/train.c's before the record existed). */
void cpu_step_check(const ar_step_check *c, ar_step_rec *rec)
{
    double loss = 0, ss = 0;
    for (int a = 0; a < c->A; a++) {
        double sum = 0;
        for (int k = 0; k < c->nc; k++)
            sum += c->parts[(size_t)a * c->nc + k];
        loss += sum / c->N / c->A;
    }
    for (size_t i = 0; i < c->nsums; i++)
        ss += c->sums[i];
    double gnorm = c->norm_given ? c->sums[0] : sqrt(ss);
    rec->loss = loss;
    rec->gnorm = gnorm;
    rec->skip = !isfinite(loss) || !isfinite(gnorm);
    rec->gscale = c->clip > 0 && gnorm > c->clip ? (float)(c->clip / (gnorm + 1e-6)) : 1.0f;
    rec->t += !rec->skip;
    rec->bc1 = (float)(1.0 - pow((double)c->b1, (double)rec->t));
    rec->bc2 = (float)(1.0 - pow((double)c->b2, (double)rec->t));
    rec->bad_param = 0;
}
