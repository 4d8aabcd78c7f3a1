/* Decoding benchmark (lib/decode.h): prefill and decode tokens/s and the
 * memory of the key/value and depth caches, for the variants of `attnres
 * bench` (baseline, Block N=8, Block S=4, Full) of one config's shape, on
 * random weights, timed round-robin in one process (odd rounds in reverse
 * order) so that the machine's drift hits every variant alike.
 *
 *   prefill: a whole context of T tokens from position 0, in chunks of C
 *   decode:  a prompt of T/4 tokens fed (untimed), then one token a step
 *            up to position T (attention over 1/4 to all of the context),
 *            each step's logits downloaded as generation would
 * Each measurement repeats its pass for about 0.3 s.  Overheads against
 * the baseline: the median of per-round ratios of time per token; the same
 * for the time outside the linear layers' products (timed around
 * matmul_fwd and matvec_fwd), which carry most of a loaded machine's
 * noise; and the ratio of the best rounds' decode rates (the least
 * disturbed).  And the residual scheme's own time per decoded token,
 * measured alone (the part of a step that differs between variants).
 *
 * A second copy of the baseline runs too (baseline'): the spread between
 * two identical models is the noise floor of the comparison (at the
 * medium shape, whose decoding streams 100 MB of weights a token, where
 * the weights happen to lie moves an identical model by up to 10%).
 *
 * usage: bench_decode CONFIG [ROUNDS] [THREADS] [CHUNK]   (defaults 7, 2, 64) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "lib/decode.h"
#include "lib/model.h"
#include "lib/residual.h"
#include "experiments/bench.h"
#include "core/clock.h"

/* The CPU backend with the linear layers timed (matmul_fwd, and
 * matvec_fwd of one-token steps): their products are the same work in
 * every variant and carry most of the noise of a loaded machine; the time
 * outside them is each variant's own (ar_bench_overhead_outside_mm). */
static double mm_s;
static void timed_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    double t0 = ar_now_s();
    ar_backend_cpu()->matmul_fwd(out, x, W, N, in, outd);
    mm_s += ar_now_s() - t0;
}
static void timed_matvec_fwd(float *out, const float *x, const float *W, int in, int outd)
{
    double t0 = ar_now_s();
    ar_backend_cpu()->matvec_fwd(out, x, W, in, outd);
    mm_s += ar_now_s() - t0;
}

typedef struct {
    ar_config cfg;
    ar_model *m;
    ar_decoder *dec;
    float *logits;
} variant;

/* tokens/s of `passes` prefills of tok[0..T); *mm (or NULL): the fraction
 * of the time in matmul_fwd */
static double prefill_rate(variant *v, const int32_t *tok, int T, int passes, double *mm)
{
    ar_err e;
    double m0 = mm_s, t0 = ar_now_s();
    for (int p = 0; p < passes; p++) {
        ar_decoder_reset(v->dec);
        if (ar_decoder_feed(v->dec, tok, T, v->logits, &e) != 0) {
            fprintf(stderr, "bench_decode: %s\n", e.msg);
            exit(1);
        }
    }
    double dt = ar_now_s() - t0;
    if (mm)
        *mm = (mm_s - m0) / dt;
    return (double)T * passes / dt;
}

/* tokens/s of `passes` decodes from position P to T (the prompt untimed);
 * *mm as prefill_rate's */
static double decode_rate(variant *v, const int32_t *tok, int P, int T, int passes, double *mm)
{
    ar_err e;
    double dt = 0, m = 0;
    for (int p = 0; p < passes; p++) {
        ar_decoder_reset(v->dec);
        if (ar_decoder_feed(v->dec, tok, P, v->logits, &e) != 0) {
            fprintf(stderr, "bench_decode: %s\n", e.msg);
            exit(1);
        }
        double m0 = mm_s, t0 = ar_now_s();
        for (int i = P; i < T; i++)
            ar_decoder_step(v->dec, tok + i, 1, v->logits, 0, &e);
        dt += ar_now_s() - t0;
        m += mm_s - m0;
    }
    if (mm)
        *mm = m / dt;
    return (double)(T - P) * passes / dt;
}

/* Microseconds per token of the residual scheme alone in a decoding step
 * (N = 1): the embedding row, then per sublayer the mixer (with the
 * sublayer's RMSNorm, fused or not) and accept_fwd, and the final mixer,
 * with no sublayer between (their outputs are the rows left there): the
 * part of a step that differs between variants, free of the products'
 * noise.  On the holder model's own scheme (m's, not the decoder's). */
static double residual_us(variant *v, int iters)
{
    ar_model *m = v->m;
    ar_residual *r = m->res;
    const ar_backend *be = m->be;
    float *xn = be->alloc((size_t)m->d * sizeof(float)), *rs = be->alloc(sizeof(float));
    double t0 = ar_now_s();
    for (int it = 0; it < iters; it++) {
        r->vt->embed_out(r);
        for (int l = 1; l <= m->L; l++) {
            int k = (l - 1) / 2;
            ar_norm_out nf = {ar_model_param(m, l % 2 ? m->blk[k].attn_norm : m->blk[k].mlp_norm), xn, rs};
            const float *h = r->vt->input_fwd(r, l, 1, &nf);
            if (h)
                be->rmsnorm_fwd(xn, rs, h, nf.gain, 1, m->d);
            r->vt->output_buf(r, l);
            r->vt->accept_fwd(r, l, 1);
        }
        r->vt->final_fwd(r, 1);
    }
    double us = (ar_now_s() - t0) * 1e6 / iters;
    be->free(xn);
    be->free(rs);
    return us;
}

static const char *label(int v)
{
    return v < ar_bench_n_default ? ar_bench_variants[v].label : "baseline'";
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n, double *lo, double *hi)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    if (lo)
        *lo = s[0];
    if (hi)
        *hi = s[n - 1];
    free(s);
    return m;
}

/* The variants, and a second baseline: two identical models measure how
 * far apart the same work lands (weights at other addresses).  NULL after
 * the error message. */
static variant *create_variants(const ar_config *base, const ar_backend *be, int nv, int chunk, int T)
{
    ar_err e;
    variant *vs = calloc((size_t)nv, sizeof *vs);
    for (int v = 0; v < nv; v++) {
        vs[v].cfg = *base;
        ar_bench_apply_variant(&vs[v].cfg, &ar_bench_variants[v < ar_bench_n_default ? v : 0]);
        ar_model_cfg mc = vs[v].cfg.model;
        mc.seq_len = chunk; /* the weights' holder: no activations of T rows */
        if (ar_config_validate(&vs[v].cfg, &e) != 0 || ar_model_create(&vs[v].m, &mc, be, 1, &e) != 0 ||
            ar_decoder_create(&vs[v].dec, vs[v].m, chunk, T, &e) != 0) {
            fprintf(stderr, "bench_decode: %s: %s\n", label(v), e.msg);
            return NULL;
        }
        ar_model_init(vs[v].m, 1);
        vs[v].logits = malloc((size_t)mc.vocab * sizeof(float));
    }
    return vs;
}

/* What is measured, and every variant's numbers: round r of variant v at
 * [v * rounds + r]. */
typedef struct {
    int nv, rounds, T, P, chunk;
    int pp, pd;        /* prefill and decode passes a measurement */
    double *pre, *dec; /* tokens/s */
    double *pmm, *dmm; /* their fractions of time in the products */
    double *rus;       /* residual_us */
} rates;

/* Warm-up, and passes per measurement: 0.3 s at least at the best warm-up
 * rate (a loaded machine's slow passes would make it short); then the
 * rounds, the variants of odd rounds in reverse order. */
static void measure(variant *vs, const int32_t *tok, rates *m)
{
    int nv = m->nv, rounds = m->rounds, T = m->T, P = m->P;
    double wp = 0, wd = 0;
    for (int w = 0; w < 3; w++)
        for (int v = 0; v < nv; v++) {
            double p = prefill_rate(&vs[v], tok, T, 1, NULL), d = decode_rate(&vs[v], tok, P, T, 1, NULL);
            wp = p > wp ? p : wp;
            wd = d > wd ? d : wd;
        }
    m->pp = (int)ceil(0.3 * wp / T);
    m->pd = (int)ceil(0.3 * wd / (T - P));
    size_t nr = (size_t)nv * rounds;
    m->pre = calloc(nr, sizeof *m->pre), m->dec = calloc(nr, sizeof *m->dec);
    m->pmm = calloc(nr, sizeof *m->pmm), m->dmm = calloc(nr, sizeof *m->dmm), m->rus = calloc(nr, sizeof *m->rus);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nv; k++) {
            int v = r % 2 ? nv - 1 - k : k;
            m->pre[v * rounds + r] = prefill_rate(&vs[v], tok, T, m->pp, &m->pmm[v * rounds + r]);
            m->rus[v * rounds + r] = residual_us(&vs[v], 2000);
            m->dec[v * rounds + r] = decode_rate(&vs[v], tok, P, T, m->pd, &m->dmm[v * rounds + r]);
        }
}

/* A line a variant: its rates' medians and ranges, its overheads against
 * the baseline (medians of per-round values: time per token, and the part
 * of it outside the matrix products) and its caches' sizes. */
static void print_rows(const variant *vs, const rates *m)
{
    int rounds = m->rounds, T = m->T;
    const double *pre = m->pre, *dec = m->dec, *pmm = m->pmm, *dmm = m->dmm;
    double *rp = malloc((size_t)rounds * sizeof *rp), *rd = malloc((size_t)rounds * sizeof *rd);
    double *op = malloc((size_t)rounds * sizeof *op), *od = malloc((size_t)rounds * sizeof *od);
    for (int v = 0; v < m->nv; v++) {
        double plo, phi, dlo, dhi, bdhi;
        double pm = median(pre + v * rounds, rounds, &plo, &phi), dm = median(dec + v * rounds, rounds, &dlo, &dhi);
        median(dec, rounds, NULL, &bdhi);
        for (int r = 0; r < rounds; r++) {
            int i = v * rounds + r;
            rp[r] = 100 * (pre[r] / pre[i] - 1);
            rd[r] = 100 * (dec[r] / dec[i] - 1);
            op[r] = ar_bench_overhead_outside_mm(pre[i], pmm[i], pre[r], pmm[r]);
            od[r] = ar_bench_overhead_outside_mm(dec[i], dmm[i], dec[r], dmm[r]);
        }
        const ar_model_cfg *mc = &vs[v].cfg.model;
        printf("%-10s %8.0f [%5.0f-%5.0f] %+7.2f%% %+7.2f%% %8.0f [%5.0f-%5.0f] %+7.2f%% %+7.2f%% %+7.2f%% %9.2f %7.2f "
               "%3d %10zu B %8zu B\n",
               label(v), pm, plo, phi, median(rp, rounds, NULL, NULL), median(op, rounds, NULL, NULL),
               dm, dlo, dhi, median(rd, rounds, NULL, NULL), median(od, rounds, NULL, NULL), 100 * (bdhi / dhi - 1),
               median(m->rus + v * rounds, rounds, NULL, NULL), ar_decode_kv_cache_bytes(mc, T) / 1048576.0,
               ar_decode_depth_reps(mc),
               ar_decode_depth_cache_bytes(mc, m->chunk), ar_decode_depth_cache_bytes(mc, 1));
    }
    free(rp), free(rd), free(op), free(od);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_decode CONFIG [ROUNDS] [THREADS] [CHUNK]\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 7, threads = argc > 3 ? atoi(argv[3]) : 2;
    int chunk = argc > 4 ? atoi(argv[4]) : 64;
    ar_backend timed = *ar_backend_cpu();
    timed.matmul_fwd = timed_matmul_fwd;
    timed.matvec_fwd = timed_matvec_fwd;
    const ar_backend *be = &timed;
    be->set_threads(threads);
    ar_err e;
    ar_config base;
    ar_config_defaults(&base);
    if (ar_config_load(&base, argv[1], &e) != 0) {
        fprintf(stderr, "bench_decode: %s\n", e.msg);
        return 1;
    }
    int nv = ar_bench_n_default + 1, T = base.model.seq_len, P = T / 4;
    if (chunk > T)
        chunk = T;
    variant *vs = create_variants(&base, be, nv, chunk, T);
    if (!vs)
        return 1;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int i = 0; i < T; i++)
        tok[i] = (i * 31 + 7) % base.model.vocab;
    rates m = {.nv = nv, .rounds = rounds, .T = T, .P = P, .chunk = chunk};
    measure(vs, tok, &m);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("%s: d_model %d, n_layer %d, T %d, vocab %d; prefill chunk %d; threads %d, OPENBLAS_CORETYPE=%s; "
           "%d rounds\n",
           argv[1], base.model.d_model, base.model.n_layer, T, base.model.vocab, chunk, threads, ct ? ct : "(unset)",
           rounds);
    printf("prefill: %d tokens from position 0 (x%d a measurement); decode: positions %d..%d, 1 token a step "
           "(x%d)\n",
           T, m.pp, P, T - 1, m.pd);
    printf("%-10s %21s %8s %8s %21s %8s %8s %8s %9s %7s %3s %12s %10s\n", "variant", "prefill tok/s [range]",
           "vs base", "out-mm", "decode tok/s [range]", "vs base", "out-mm", "best", "res us/t", "KV MiB", "R",
           "depth C rows", "depth 1 row");
    print_rows(vs, &m);
    printf("vs base: median over rounds of the time per token against the baseline's in the same round; out-mm: the\n"
           "same for the time outside the linear layers' products, as a share of the variant's time; best: the\n"
           "fastest rounds' decode rates compared; res us/t: microseconds per token of the residual scheme\n"
           "alone in a decoding step (median; the part of a step that differs between variants)\n");
    free(m.pmm), free(m.dmm), free(m.rus);
    for (int v = 0; v < nv; v++) {
        ar_decoder_free(vs[v].dec);
        ar_model_free(vs[v].m);
        free(vs[v].logits);
    }
    free(vs);
    free(tok);
    free(m.pre);
    free(m.dec);
    return 0;
}
