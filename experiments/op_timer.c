/* The op timer (op_timer.h): each compute entry of the CPU table wrapped in
 * a clock read before and after. */
#include "op_timer.h"

#include <time.h>

static const ar_backend *inner;
static ar_backend table;
static ar_op_tally *tally;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void count(int op, double t0, double flops)
{
    if (!tally)
        return;
    tally->seconds[op] += now_s() - t0;
    tally->flops[op] += flops;
    tally->calls[op]++;
}

double ar_op_flops_matmul(int N, int in, int outd, int with_dx, int backward)
{
    double one = 2.0 * N * in * outd;
    return backward ? one * (with_dx ? 2 : 1) : one;
}

double ar_op_flops_attention(int B, int T, int nh, int hd, int backward)
{
    double fwd = 4.0 * B * nh * (double)T * T * hd;
    return backward ? 2 * fwd : fwd;
}

/* T_(op, entry, flops, (params), (args)): a wrapper of inner->entry. */
#define T_(op, entry, flops, params, args)                                                                   \
    static void w_##entry params                                                                              \
    {                                                                                                         \
        double t0 = now_s();                                                                                  \
        inner->entry args;                                                                                    \
        count(op, t0, flops);                                                                                 \
    }

T_(AR_OP_ZERO, zero, 0, (void *p, size_t b), (p, b))
T_(AR_OP_COPY, copy, 0, (float *y, const float *x, size_t n), (y, x, n))
T_(AR_OP_ADD, add, 0, (float *y, const float *x, size_t n), (y, x, n))
T_(AR_OP_SCALE, scale, 0, (float *y, float a, size_t n), (y, a, n))
T_(AR_OP_EMBEDDING_FWD, embedding_fwd, 0, (float *out, const int32_t *tok, const float *wte, int N, int d),
   (out, tok, wte, N, d))
T_(AR_OP_EMBEDDING_BWD, embedding_bwd, 0, (float *dwte, const float *dout, const int32_t *tok, int N, int d),
   (dwte, dout, tok, N, d))
T_(AR_OP_RMSNORM_FWD, rmsnorm_fwd, 0, (float *out, float *rstd, const float *x, const float *g, int N, int d),
   (out, rstd, x, g, N, d))
T_(AR_OP_RMSNORM_BWD, rmsnorm_bwd, 0,
   (float *dx, float *dg, const float *dout, const float *x, const float *g, const float *rstd, int ow, int N,
    int d),
   (dx, dg, dout, x, g, rstd, ow, N, d))
T_(AR_OP_MATMUL_FWD, matmul_fwd, ar_op_flops_matmul(N, in, outd, 0, 0),
   (float *out, const float *x, const float *W, int N, int in, int outd), (out, x, W, N, in, outd))
T_(AR_OP_MATMUL_BWD, matmul_bwd, ar_op_flops_matmul(N, in, outd, dx != NULL, 1),
   (float *dx, float *dW, const float *dout, const float *x, const float *W, int N, int in, int outd),
   (dx, dW, dout, x, W, N, in, outd))
T_(AR_OP_ROPE_FWD, rope_fwd, 0, (float *x, int B, int T, int nh, int hd), (x, B, T, nh, hd))
T_(AR_OP_ROPE_BWD, rope_bwd, 0, (float *dx, int B, int T, int nh, int hd), (dx, B, T, nh, hd))
T_(AR_OP_ATTENTION_FWD, attention_fwd, ar_op_flops_attention(B, T, nh, hd, 0),
   (float *y, float *att, const float *q, const float *k, const float *v, int B, int T, int nh, int hd),
   (y, att, q, k, v, B, T, nh, hd))
T_(AR_OP_ATTENTION_BWD, attention_bwd, ar_op_flops_attention(B, T, nh, hd, 1),
   (float *dq, float *dk, float *dv, float *datt, const float *dy, const float *att, const float *q,
    const float *k, const float *v, int B, int T, int nh, int hd),
   (dq, dk, dv, datt, dy, att, q, k, v, B, T, nh, hd))
T_(AR_OP_ROPE_FWD_AT, rope_fwd_at, 0, (float *x, int n, int pos0, int nh, int hd), (x, n, pos0, nh, hd))
/* n new queries against pos0 + n keys: q k^T and att v */
T_(AR_OP_ATTENTION_DECODE, attention_decode, 4.0 * nh * n * (double)(pos0 + n) * hd,
   (float *y, float *att, const float *q, const float *k, const float *v, int n, int pos0, int nh, int hd),
   (y, att, q, k, v, n, pos0, nh, hd))
T_(AR_OP_MATVEC_FWD, matvec_fwd, 2.0 * in * outd, (float *out, const float *x, const float *W, int in, int outd),
   (out, x, W, in, outd))
T_(AR_OP_SWIGLU_FWD, swiglu_fwd, 0, (float *out, const float *gate, const float *up, size_t n),
   (out, gate, up, n))
T_(AR_OP_SWIGLU_BWD, swiglu_bwd, 0,
   (float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n),
   (dgate, dup, dout, gate, up, n))
T_(AR_OP_DEPTH_ATTN_FWD, depth_attn_fwd, 0,
   (float *h, float *alpha, float *rstd, const float *const *src, int n, const float *w, const float *g, int N,
    int d),
   (h, alpha, rstd, src, n, w, g, N, d))
T_(AR_OP_DEPTH_ATTN_BWD, depth_attn_bwd, 0,
   (float *const *dsrc, float *dw, float *dg, const float *dh, const float *alpha, const float *rstd,
    const float *const *src, int n, const float *w, const float *g, int N, int d),
   (dsrc, dw, dg, dh, alpha, rstd, src, n, w, g, N, d))
T_(AR_OP_DEPTH_FWD_INTER, depth_fwd_inter, 0,
   (float *const *o, float *const *lse, float *const *alpha, const int *n, float *const *rs,
    const float *const *src, int k, const float *const *w, const float *const *g, int C, const float *ng,
    float *xn, float *nrstd, int sigmoid, int N, int d),
   (o, lse, alpha, n, rs, src, k, w, g, C, ng, xn, nrstd, sigmoid, N, d))
T_(AR_OP_DEPTH_FWD_MERGE, depth_fwd_merge, 0,
   (float *h, float *lse, float *alpha, int n, int k, float *const *rsi, const float *const *intra,
    const float *w, const float *g, const float *ng, float *xn, float *nrstd, int sigmoid, int N, int d),
   (h, lse, alpha, n, k, rsi, intra, w, g, ng, xn, nrstd, sigmoid, N, d))
T_(AR_OP_DEPTH_BWD_INTRA, depth_bwd_intra, 0,
   (float *const *dintra, float *dw, float *dg, float *cdot, float *dh, const float *h, const float *dxn,
    const float *xn, const float *ng, float *dng, const float *nrstd, const float *alpha, const float *lse,
    int n, int k, const float *const *rsi, const float *const *src, const float *w, const float *g,
    int sigmoid, int N, int d),
   (dintra, dw, dg, cdot, dh, h, dxn, xn, ng, dng, nrstd, alpha, lse, n, k, rsi, src, w, g, sigmoid, N, d))
T_(AR_OP_DEPTH_BWD_INTER, depth_bwd_inter, 0,
   (float *const *dsrc, float *const *dw, float *const *dg, const float *const *dh, const float *const *cdot,
    const float *const *alpha, const float *const *lse, const int *n, const float *const *rs,
    const float *const *src, int k, const float *const *w, const float *const *g, int C, int ow,
    int sigmoid, int N, int d),
   (dsrc, dw, dg, dh, cdot, alpha, lse, n, rs, src, k, w, g, C, ow, sigmoid, N, d))
T_(AR_OP_DEPTH_MIX_FWD, depth_mix_fwd, 0,
   (float *h, float *alpha, float *rstd, const float *const *src, int n, const float *w, int wstride,
    const float *g, const float *theta, int sigmoid, int H, int N, int d),
   (h, alpha, rstd, src, n, w, wstride, g, theta, sigmoid, H, N, d))
T_(AR_OP_DEPTH_MIX_BWD, depth_mix_bwd, 0,
   (float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh, const float *alpha,
    const float *rstd, const float *const *src, int n, const float *w, int wstride, const float *g,
    const float *theta, int sigmoid, int H, int N, int d),
   (dsrc, dw, dg, dtheta, dh, alpha, rstd, src, n, w, wstride, g, theta, sigmoid, H, N, d))
T_(AR_OP_DEPTH_MIX_CDOT, depth_mix_cdot, 0, (float *cdot, const float *dh, const float *h, int H, int N, int d),
   (cdot, dh, h, H, N, d))
T_(AR_OP_DEPTH_MIX_BWD_CHUNK, depth_mix_bwd_chunk, 0,
   (float *const *dsrc, const float *const *src, int s0, int s1, int C, float *const *dw, float *const *dg,
    float *const *dtheta, const float *const *dh, const float *const *cdot, const float *const *alpha,
    const float *const *rstd, const int *n, const float *const *w, const float *const *g,
    const float *const *theta, int sigmoid, int H, int N, int d),
   (dsrc, src, s0, s1, C, dw, dg, dtheta, dh, cdot, alpha, rstd, n, w, g, theta, sigmoid, H, N, d))
T_(AR_OP_WSUM_FWD, wsum_fwd, 0, (float *y, const float *const *x, const float *c, int n, int acc, size_t len),
   (y, x, c, n, acc, len))
T_(AR_OP_WSUM_BWD, wsum_bwd, 0,
   (float *const *dx, float *dc, const float *dy, const float *const *x, const float *c, int n, size_t len),
   (dx, dc, dy, x, c, n, len))
T_(AR_OP_WMIX_FWD, wmix_fwd, 0,
   (float *const *y, int p, const float *const *x, int n, const float *C, int ldc, size_t len),
   (y, p, x, n, C, ldc, len))
T_(AR_OP_WMIX_BWD, wmix_bwd, 0,
   (float *const *dx, int acc, float *dC, const float *const *dy, int p, const float *const *x, int n,
    const float *C, int ldc, size_t len),
   (dx, acc, dC, dy, p, x, n, C, ldc, len))
T_(AR_OP_XENT_BWD, xent_bwd, 0,
   (float *dlogits, const float *probs, const int32_t *targets, float scale, int N, int V),
   (dlogits, probs, targets, scale, N, V))
T_(AR_OP_ADAMW, adamw, 0,
   (float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr, float b1, float b2,
    float eps, float wd, long t),
   (p, g, m, v, n, gscale, lr, b1, b2, eps, wd, t))
#undef T_

/* the two entries that return a value */
static double w_sumsq(const float *x, size_t n)
{
    double t0 = now_s();
    double s = inner->sumsq(x, n);
    count(AR_OP_SUMSQ, t0, 0);
    return s;
}

static double w_xent_fwd(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V)
{
    double t0 = now_s();
    double s = inner->xent_fwd(losses, probs, logits, targets, N, V);
    count(AR_OP_XENT_FWD, t0, 0);
    return s;
}

static const char *const names[AR_OP_COUNT] = {
    "zero", "copy", "add", "scale", "sumsq",
    "embedding_fwd", "embedding_bwd",
    "rmsnorm_fwd", "rmsnorm_bwd",
    "matmul_fwd", "matmul_bwd",
    "rope_fwd", "rope_bwd",
    "attention_fwd", "attention_bwd",
    "rope_fwd_at", "attention_decode", "matvec_fwd",
    "swiglu_fwd", "swiglu_bwd",
    "depth_attn_fwd", "depth_attn_bwd",
    "depth_fwd_inter", "depth_fwd_merge", "depth_bwd_intra", "depth_bwd_inter",
    "depth_mix_fwd", "depth_mix_bwd", "depth_mix_cdot", "depth_mix_bwd_chunk",
    "wsum_fwd", "wsum_bwd", "wmix_fwd", "wmix_bwd",
    "xent_fwd", "xent_bwd",
    "adamw",
};

const char *ar_op_name(int op) { return op >= 0 && op < AR_OP_COUNT ? names[op] : "?"; }

void ar_op_timer_into(ar_op_tally *t) { tally = t; }

const ar_backend *ar_op_timer(const ar_backend *be)
{
    if (be != ar_backend_cpu())
        return NULL;
    inner = be;
    table = *be;
    table.zero = w_zero;
    table.copy = w_copy;
    table.add = w_add;
    table.scale = w_scale;
    table.sumsq = w_sumsq;
    table.embedding_fwd = w_embedding_fwd;
    table.embedding_bwd = w_embedding_bwd;
    table.rmsnorm_fwd = w_rmsnorm_fwd;
    table.rmsnorm_bwd = w_rmsnorm_bwd;
    table.matmul_fwd = w_matmul_fwd;
    table.matmul_bwd = w_matmul_bwd;
    table.rope_fwd = w_rope_fwd;
    table.rope_bwd = w_rope_bwd;
    table.attention_fwd = w_attention_fwd;
    table.attention_bwd = w_attention_bwd;
    table.rope_fwd_at = w_rope_fwd_at;
    table.attention_decode = w_attention_decode;
    table.matvec_fwd = w_matvec_fwd;
    table.swiglu_fwd = w_swiglu_fwd;
    table.swiglu_bwd = w_swiglu_bwd;
    table.depth_attn_fwd = w_depth_attn_fwd;
    table.depth_attn_bwd = w_depth_attn_bwd;
    table.depth_fwd_inter = w_depth_fwd_inter;
    table.depth_fwd_merge = w_depth_fwd_merge;
    table.depth_bwd_intra = w_depth_bwd_intra;
    table.depth_bwd_inter = w_depth_bwd_inter;
    table.depth_mix_fwd = w_depth_mix_fwd;
    table.depth_mix_bwd = w_depth_mix_bwd;
    table.depth_mix_cdot = w_depth_mix_cdot;
    table.depth_mix_bwd_chunk = w_depth_mix_bwd_chunk;
    table.wsum_fwd = w_wsum_fwd;
    table.wsum_bwd = w_wsum_bwd;
    table.wmix_fwd = w_wmix_fwd;
    table.wmix_bwd = w_wmix_bwd;
    table.xent_fwd = w_xent_fwd;
    table.xent_bwd = w_xent_bwd;
    table.adamw = w_adamw;
    return &table;
}
