/* Incremental decoding (lib/decode.h), sampling (run/generate.h) and
 * `attnres generate`: the decode ops against the training ops, the logits
 * of the key/value-cached path against a full forward for every residual
 * kind and ablation variant and several prefill chunks, greedy and seeded
 * generation, the context's sliding window, the sampler's distributions,
 * and the command end to end on a run it trains. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/bpe.h"
#include "formats/config.h"
#include "formats/json.h"
#include "lib/decode.h"
#include "lib/model.h"
#include "lib/residual.h"
#include "run/checkpoint.h"
#include "run/generate.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(2);
    return be;
}

/* ---------- the decode ops against the training ops ---------- */

/* rope_fwd_at on rows pos0..pos0+n-1 gives them the bits rope_fwd gives
 * them inside a whole sequence. */
Test(decode, rope_at_is_rope_fwd_at_those_positions)
{
    const ar_backend *be = cpu();
    int T = 40, nh = 3, hd = 8, d = nh * hd;
    float *full = malloc((size_t)T * d * sizeof(float)), *part = malloc((size_t)T * d * sizeof(float));
    tu_fill_uniform(full, (size_t)T * d, -2, 2, 11);
    memcpy(part, full, (size_t)T * d * sizeof(float));
    be->rope_fwd(full, 1, T, nh, hd);
    int cuts[][2] = {{0, 1}, {0, 7}, {7, 1}, {8, 13}, {21, 19}, {39, 1}};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        int pos0 = cuts[c][0], n = cuts[c][1];
        float *x = malloc((size_t)n * d * sizeof(float));
        memcpy(x, part + (size_t)pos0 * d, (size_t)n * d * sizeof(float));
        be->rope_fwd_at(x, n, pos0, nh, hd);
        cr_expect(memcmp(x, full + (size_t)pos0 * d, (size_t)n * d * sizeof(float)) == 0,
                  "rope_fwd_at(pos0 %d, n %d) differs from rope_fwd", pos0, n);
        free(x);
    }
    /* and position matters: row 5 rotated as position 6 is not row 5 */
    float *x = malloc((size_t)d * sizeof(float));
    memcpy(x, part + 5 * d, (size_t)d * sizeof(float));
    be->rope_fwd_at(x, 1, 6, nh, hd);
    cr_expect(memcmp(x, full + 5 * d, (size_t)d * sizeof(float)) != 0);
    free(x);
    free(full);
    free(part);
}

/* fast_expf (lib/cpu/loops.h, Cephes' expf): within 2e-7 relative. */
#define EXP_REL 2e-7

/* Bounds on |attention_decode - attention_fwd| for row t (one head): the
 * two run the same arithmetic with the products on other shapes (sgemv or
 * sgemm of n rows against sgemm of row blocks), so each sum may be added in
 * another order; u = 2^-24, gamma as in testutil.h.
 * - A score s_c = scale q.k_c, hd terms: the two differ by at most
 *   2 gamma(hd) scale sum |q||k_c| + 2u |s_c| (BLAS applies alpha before
 *   or after the sum).
 * - The softmax arguments s_c - max move by that, plus the largest such
 *   change through the max, plus a rounding u |s_c - max| on each side; the
 *   exponentials by that relative, plus EXP_REL on each side; their sum
 *   (t + 1 terms, sum8) by the sum of those, plus 2 gamma(t + 1) of it; a
 *   probability p_c = e_c / Z by both relative changes, plus 2u a side.
 * - y_j = sum_c p_c v_cj, t + 1 terms: 2 gamma(t + 1) sum p_c |v_cj|, plus
 *   sum |dp_c| |v_cj|.
 * dp (t + 1 values) and dy (hd values) are written to out. */
static void attention_row_bound(const float *q, const float *k, const float *v, int t, int C, int hd, double *dp,
                                double *dy)
{
    const double u = TU_U_FLOAT, scale = 1.0 / sqrt((double)hd);
    double *sc = malloc((size_t)(t + 1) * sizeof(double)), *ds = malloc((size_t)(t + 1) * sizeof(double));
    double mx = -INFINITY, dmx = 0;
    for (int c = 0; c <= t; c++) {
        double sv = 0, sa = 0;
        for (int j = 0; j < hd; j++) {
            sv += (double)q[j] * k[(size_t)c * C + j];
            sa += fabs((double)q[j] * k[(size_t)c * C + j]);
        }
        sc[c] = scale * sv;
        ds[c] = 2 * tu_gamma(hd) * scale * sa + 2 * u * fabs(sc[c]);
        mx = fmax(mx, sc[c]);
        dmx = fmax(dmx, ds[c]);
    }
    double Z = 0, dZ = 0;
    for (int c = 0; c <= t; c++) {
        double e = exp(sc[c] - mx), re = ds[c] + dmx + 2 * u * fabs(sc[c] - mx) + 2 * EXP_REL;
        dp[c] = re; /* relative, for now */
        Z += e;
        dZ += e * re;
    }
    dZ += 2 * tu_gamma(t + 1) * Z;
    for (int j = 0; j < hd; j++)
        dy[j] = 0;
    for (int c = 0; c <= t; c++) {
        double pc = exp(sc[c] - mx) / Z;
        dp[c] = pc * (dp[c] + dZ / Z + 4 * u);
        for (int j = 0; j < hd; j++)
            dy[j] += (2 * tu_gamma(t + 1) * pc + dp[c]) * fabs((double)v[(size_t)c * C + j]);
    }
    free(sc);
    free(ds);
}

/* attention_decode of rows pos0..pos0+n-1 against the first pos0+n keys
 * and values is those rows of attention_fwd, probabilities included, each
 * value within attention_row_bound's bound. */
Test(decode, attention_decode_is_attention_fwd_rows)
{
    const ar_backend *be = cpu();
    int T = 70, nh = 2, hd = 24, d = nh * hd;
    size_t nd = (size_t)T * d;
    float *q = malloc(nd * sizeof(float)), *k = malloc(nd * sizeof(float)), *v = malloc(nd * sizeof(float));
    float *y = malloc(nd * sizeof(float)), *att = malloc((size_t)nh * T * T * sizeof(float));
    tu_fill_uniform(q, nd, -1.5f, 1.5f, 1);
    tu_fill_uniform(k, nd, -1.5f, 1.5f, 2);
    tu_fill_uniform(v, nd, -1, 1, 3);
    be->attention_fwd(&(ar_attention){q, k, v, att, 1, T, nh, hd}, y);
    int cuts[][2] = {{0, 1}, {0, 70}, {5, 1}, {13, 3}, {64, 6}, {69, 1}};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        int pos0 = cuts[c][0], n = cuts[c][1], Tk = pos0 + n;
        float *yd = malloc((size_t)n * d * sizeof(float)), *ad = malloc((size_t)nh * n * Tk * sizeof(float));
        tu_fill_uniform(yd, (size_t)n * d, -9, 9, 4); /* garbage: the op overwrites */
        tu_fill_uniform(ad, (size_t)nh * n * Tk, -9, 9, 5);
        be->attention_decode(yd, ad, q + (size_t)pos0 * d, k, v, n, pos0, nh, hd);
        double dp[70], dy[24];
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < n; i++) {
                int t = pos0 + i;
                attention_row_bound(q + (size_t)t * d + h * hd, k + h * hd, v + h * hd, t, d, hd, dp, dy);
                const float *a = ad + ((size_t)h * n + i) * Tk, *r = att + ((size_t)h * T + t) * T;
                const float *yr = yd + (size_t)i * d + h * hd, *yf = y + (size_t)t * d + h * hd;
                for (int j = 0; j < hd; j++)
                    cr_expect(fabs((double)yr[j] - yf[j]) <= dy[j],
                              "head %d row %d (pos0 %d) y[%d]: %.9g vs %.9g (bound %.3g)", h, t, pos0, j, yr[j], yf[j],
                              dy[j]);
                for (int cc = 0; cc <= t; cc++)
                    cr_expect(fabs((double)a[cc] - r[cc]) <= dp[cc],
                              "att head %d row %d (pos0 %d) key %d: %.9g vs %.9g", h, t, pos0, cc, a[cc], r[cc]);
                for (int cc = pos0 + i + 1; cc < Tk; cc++)
                    cr_expect(a[cc] == 0.0f, "att head %d row %d: a future key %d has weight %g", h, pos0 + i,
                              cc, a[cc]);
            }
        free(yd);
        free(ad);
    }
    free(q), free(k), free(v), free(y), free(att);
}

/* matvec_fwd is one row of matmul_fwd, to rounding, into garbage: each
 * output is an `in`-term dot product that sgemv and sgemm may add in other
 * orders, so they differ by at most 2 gamma(in) sum_k |x_k W_jk|. */
Test(decode, matvec_is_a_one_row_matmul)
{
    const ar_backend *be = cpu();
    int shapes[][2] = {{1, 1}, {5, 3}, {192, 512}, {512, 192}, {72, 37}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int in = shapes[c][0], outd = shapes[c][1];
        float *W = malloc((size_t)in * outd * sizeof(float)), *x = malloc((size_t)in * sizeof(float));
        float *a = malloc((size_t)outd * sizeof(float)), *b = malloc((size_t)outd * sizeof(float));
        tu_fill_uniform(W, (size_t)in * outd, -1, 1, 40 + c);
        tu_fill_uniform(x, (size_t)in, -1, 1, 50 + c);
        tu_fill_uniform(a, (size_t)outd, -9, 9, 60 + c);
        be->matmul_fwd(b, x, W, 1, in, outd);
        be->matvec_fwd(a, x, W, in, outd);
        for (int j = 0; j < outd; j++) {
            double mag = 0;
            for (int kk = 0; kk < in; kk++)
                mag += fabs((double)x[kk] * W[(size_t)j * in + kk]);
            cr_expect(fabs((double)a[j] - b[j]) <= 2 * tu_gamma(in) * mag, "matvec_fwd %d -> %d [%d]: %.9g vs %.9g",
                      in, outd, j, a[j], b[j]);
        }
        free(W), free(x), free(a), free(b);
    }
}

/* ---------- exactness: cached decoding = the full forward ---------- */

enum { TT = 16 }; /* the test models' seq_len */

/* The cached path runs the forward's arithmetic with its sums on other
 * shapes (matvec or n-row products, attention_decode, the decode depth
 * ops), so a position's logits differ from the full forward's by the sums
 * added in another order.  On the test models (d 32, d_ff 48, 3 blocks, 2
 * heads of 16, T 16, at most 7 depth sources) a position's path holds, per
 * block, six 32-term projections (q, k, v, o, gate, up), one 48-term (down),
 * the attention's scores (16 terms), normaliser and values (at most 16
 * each), two depth mixers (32-term scores, at most 7-term normaliser and
 * mix), then the final mixer and the 32-term head: each off by at most
 * 2 gamma(K) relative to its terms' magnitudes.  Their sum is DECODE_SUMS
 * (1.45e-4).  These models' weights are at their init scale and every
 * sublayer reads an RMS-normalised input, so the sums' terms stay within
 * a factor 2 of their results in norm and the blocks pass a relative
 * change on with a gain below 2: the logits' relative L2 error is below
 * 4 DECODE_SUMS.  A stale cache row, a wrong position or a wrong depth
 * source moves them by 1e-2 and more. */
#define DECODE_SUMS                                                                                      \
    (3 * (16 * tu_gamma(32) + 2 * tu_gamma(48) + 6 * tu_gamma(16) + 8 * tu_gamma(7)) +                  \
     2 * tu_gamma(32) + 4 * tu_gamma(7) + 2 * tu_gamma(32))
#define DECODE_TOL (4 * DECODE_SUMS)

/* A test model (d 32, 3 blocks, 2 heads, T 16, bytes) with the residual
 * settings `sets` ("key=value", NULL-terminated): ar_model_init, then every
 * zero-initialised tensor (queries, static logits, the input query's W,
 * DenseFormer's and mHC's mixing logits) drawn uniform in [-0.5, 0.5], so
 * that no mixing is uniform. */
static ar_model *test_model(const char *const *sets, int T, uint64_t seed)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 32;
    c.model.n_layer = 3;
    c.model.n_head = 2;
    c.model.d_ff = 48;
    c.model.seq_len = T;
    ar_residual_cfg plain = c.model.residual; /* the defaults of every residual key, then kind baseline */
    plain.kind = AR_RES_BASELINE;
    plain.block_size = 0;
    c.model.residual = plain;
    ar_err e = {{0}};
    for (int i = 0; sets && sets[i]; i++)
        cr_assert_eq(ar_config_set(&c, sets[i], &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    ar_model *m;
    cr_assert_eq(ar_model_create(&m, &c.model, cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, seed);
    float *h = malloc(m->pt.total * sizeof(float));
    m->be->download(h, m->params, m->pt.total * sizeof(float));
    for (int i = 0; i < m->pt.n; i++)
        if (m->pt.p[i].init == AR_INIT_ZEROS)
            tu_fill_uniform(h + m->pt.p[i].offset, m->pt.p[i].numel, -0.5f, 0.5f, seed * 977 + (uint64_t)i);
    m->be->upload(m->params, h, m->pt.total * sizeof(float));
    free(h);
    return m;
}

/* The logits of every position of tok[0..T) from the full forward
 * (ar_model_forward, then ar_model_logits), T x V on the host. */
static float *full_logits(ar_model *m, const int32_t *tok)
{
    size_t TV = (size_t)m->T * m->V;
    ar_model_forward(m, tok, NULL, 1, NULL);
    float *dev = m->be->alloc(TV * sizeof(float)), *h = malloc(TV * sizeof(float));
    ar_model_logits(m, 0, m->T, dev);
    m->be->download(h, dev, TV * sizeof(float));
    m->be->free(dev);
    return h;
}

/* The same from the decoder, in steps of `chunk` tokens (every row's
 * logits); the worst relative L2 error of a position's logits against ref. */
static double decode_err(ar_decoder *dec, ar_model *m, const int32_t *tok, const float *ref)
{
    int T = m->T, V = m->V, chunk = ar_decoder_chunk(dec);
    float *got = malloc((size_t)T * V * sizeof(float));
    ar_err e = {{0}};
    ar_decoder_reset(dec);
    for (int p = 0; p < T; p += chunk) {
        int n = T - p < chunk ? T - p : chunk;
        cr_assert_eq(ar_decoder_pos(dec), p);
        cr_assert_eq(ar_decoder_step(dec, tok + p, n, got + (size_t)p * V, 1, &e), 0, "%s", e.msg);
    }
    double worst = 0;
    for (int t = 0; t < T; t++) {
        double r = tu_rel_err(got + (size_t)t * V, ref + (size_t)t * V, (size_t)V);
        worst = r > worst ? r : worst;
    }
    free(got);
    return worst;
}

typedef struct {
    const char *name;
    const char *sets[6]; /* NULL-terminated */
} variant;

/* every residual kind and ablation variant (docs/reference.md §2.11) */
static const variant variants[] = {
    {"baseline", {"model.residual.kind=baseline"}},
    {"full", {"model.residual.kind=full"}},
    {"block S=2", {"model.residual.kind=block", "model.residual.block_size=2"}},
    {"block S=4 (last block partial)", {"model.residual.kind=block", "model.residual.block_size=4"}},
    {"block N=2", {"model.residual.kind=block", "model.residual.num_blocks=2"}},
    {"block sizes [1,3,2]", {"model.residual.kind=block", "model.residual.block_sizes=[1, 3, 2]"}},
    {"block sizes [3,1,1,1]", {"model.residual.kind=block", "model.residual.block_sizes=[3, 1, 1, 1]"}},
    {"static", {"model.residual.kind=static"}},
    {"denseformer", {"model.residual.kind=denseformer"}},
    {"swa W=2", {"model.residual.kind=swa", "model.residual.window=2"}},
    {"mhc", {"model.residual.kind=mhc"}},
    {"mhc 3 streams", {"model.residual.kind=mhc", "model.residual.streams=3"}},
    {"rescaled", {"model.residual.kind=rescaled"}},
    {"sigmoid", {"model.residual.kind=full", "model.residual.score=sigmoid"}},
    {"no-key-norm", {"model.residual.kind=full", "model.residual.key_norm=false"}},
    {"input-query", {"model.residual.kind=full", "model.residual.query=input"}},
    {"input-query scaled, normed, gated", {"model.residual.kind=full", "model.residual.query=input",
                                           "model.residual.query_scale=head", "model.residual.query_norm=true",
                                           "model.residual.query_gate=true"}},
    {"heads 2", {"model.residual.kind=block", "model.residual.block_size=2", "model.residual.heads=2"}},
    {"block-no-key-norm", {"model.residual.kind=block", "model.residual.block_size=2", "model.residual.key_norm=false"}},
    {"block-no-key-norm sizes [1,3,2]", {"model.residual.kind=block", "model.residual.block_sizes=[1,3,2]",
                                         "model.residual.key_norm=false"}},
    {"heads 2 sizes [2,1,3]", {"model.residual.kind=block", "model.residual.block_sizes=[2,1,3]", "model.residual.heads=2"}},
    {"swa sigmoid input-query", {"model.residual.kind=swa", "model.residual.window=3", "model.residual.score=sigmoid",
                                 "model.residual.query=input"}},
};

Test(decode, logits_equal_the_full_forward_for_every_variant, .timeout = 120)
{
    int chunks[] = {1, 3, 5, TT};
    double worst_all = 0;
    int32_t tok[TT];
    for (size_t vi = 0; vi < sizeof variants / sizeof *variants; vi++) {
        const variant *va = &variants[vi];
        ar_model *m = test_model(va->sets, TT, 3 + vi);
        for (int t = 0; t < TT; t++)
            tok[t] = (int32_t)((t * 37 + vi * 11 + 5) % 256);
        float *ref = full_logits(m, tok);
        for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
            ar_decoder *dec;
            ar_err e = {{0}};
            cr_assert_eq(ar_decoder_create(&dec, m, chunks[ci], TT, &e), 0, "%s: %s", va->name, e.msg);
            double err = decode_err(dec, m, tok, ref);
            cr_expect(err <= DECODE_TOL, "%s, prefill chunk %d: logits off by %.3g (relative L2, worst position)",
                      va->name, chunks[ci], err);
            worst_all = err > worst_all ? err : worst_all;
            /* a reset decoder gives the same bits again (the same code,
             * shapes and thread count) */
            double again = decode_err(dec, m, tok, ref);
            cr_expect_eq(again, err, "%s, chunk %d: a second pass after reset differs", va->name, chunks[ci]);
            ar_decoder_free(dec);
        }
        free(ref);
        ar_model_free(m);
    }
    cr_log_info("cached decoding vs full forward: worst relative L2 error of a position's logits %.3g", worst_all);
}

/* The two-phase schedule's chunking (ar_depth_chunk) and the general mixer
 * (ar_depth_general) decode the same. */
Test(decode, logits_equal_for_every_depth_schedule)
{
    int32_t tok[TT];
    for (int t = 0; t < TT; t++)
        tok[t] = (int32_t)((t * 91 + 7) % 256);
    const char *block[] = {"model.residual.kind=block", "model.residual.block_size=2", NULL};
    const char *full[] = {"model.residual.kind=full", NULL};
    const char *const *kinds[] = {block, full};
    int saved_chunk = ar_depth_chunk, saved_general = ar_depth_general;
    for (int k = 0; k < 2; k++)
        for (int sched = 0; sched < 3; sched++) {
            ar_depth_chunk = sched == 0 ? 1 : 4;
            ar_depth_general = sched == 2;
            ar_model *m = test_model(kinds[k], TT, 21);
            float *ref = full_logits(m, tok);
            ar_decoder *dec;
            ar_err e = {{0}};
            cr_assert_eq(ar_decoder_create(&dec, m, 3, TT, &e), 0, "%s", e.msg);
            double err = decode_err(dec, m, tok, ref);
            cr_expect(err <= DECODE_TOL, "%s, depth chunk %d, general %d: off by %.3g", k ? "full" : "block",
                      ar_depth_chunk, ar_depth_general, err);
            ar_decoder_free(dec);
            free(ref);
            ar_model_free(m);
        }
    ar_depth_chunk = saved_chunk;
    ar_depth_general = saved_general;
}

Test(decode, steps_that_do_not_fit_are_refused)
{
    ar_model *m = test_model(NULL, TT, 1);
    ar_decoder *dec;
    ar_err e = {{0}};
    cr_expect_neq(ar_decoder_create(&dec, m, 0, TT, &e), 0);
    cr_assert_eq(ar_decoder_create(&dec, m, 4, 6, &e), 0, "%s", e.msg);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_expect_neq(ar_decoder_step(dec, tok, 5, NULL, 0, &e), 0, "5 tokens in a chunk of 4");
    cr_expect(strstr(e.msg, "1 to 4 tokens"), "%s", e.msg);
    cr_expect_neq(ar_decoder_step(dec, tok, 0, NULL, 0, &e), 0);
    cr_assert_eq(ar_decoder_step(dec, tok, 4, NULL, 0, &e), 0, "%s", e.msg);
    cr_expect_neq(ar_decoder_step(dec, tok, 3, NULL, 0, &e), 0, "past the context of 6");
    cr_expect(strstr(e.msg, "context of 6"), "%s", e.msg);
    cr_expect_eq(ar_decoder_pos(dec), 4, "a refused step changed the position");
    cr_expect_neq(ar_decoder_feed(dec, tok, 3, NULL, &e), 0);
    cr_expect_eq(ar_decoder_feed(dec, tok, 2, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(ar_decoder_pos(dec), 6);
    ar_decoder_free(dec);
    ar_model_free(m);
}

Test(decode, depth_cache_memory_formula)
{
    ar_model_cfg c = {.vocab = 256, .vocab_bytes = 1, .d_model = 64, .n_layer = 4, .n_head = 2, .d_ff = 64,
                      .seq_len = 128};
    c.residual.kind = AR_RES_BASELINE;
    cr_expect_eq(ar_decode_depth_reps(&c), 1);
    c.residual.kind = AR_RES_FULL;
    cr_expect_eq(ar_decode_depth_reps(&c), 9, "full: L+1 = 9");
    c.residual.kind = AR_RES_BLOCK;
    c.residual.block_size = 4;
    cr_expect_eq(ar_decode_depth_reps(&c), 3, "block S=4, L=8: N=2 blocks, 3 representations");
    c.residual.block_size = 3;
    cr_expect_eq(ar_decode_depth_reps(&c), 4, "block S=3, L=8: N=3 (the last partial)");
    c.residual.block_size = 0;
    c.residual.num_blocks = 8;
    cr_expect_eq(ar_decode_depth_reps(&c), 9, "block N=8, L=8");
    c.residual.num_blocks = 0;
    c.residual.kind = AR_RES_SWA;
    c.residual.window = 3;
    cr_expect_eq(ar_decode_depth_reps(&c), 4);
    c.residual.window = 20;
    cr_expect_eq(ar_decode_depth_reps(&c), 9, "a window past L is full");
    c.residual.kind = AR_RES_DENSEFORMER;
    cr_expect_eq(ar_decode_depth_reps(&c), 5);
    c.residual.kind = AR_RES_MHC;
    cr_expect_eq(ar_decode_depth_reps(&c), 4);
    c.residual.kind = AR_RES_BLOCK;
    c.residual.block_size = 4;
    cr_expect_eq(ar_decode_depth_cache_bytes(&c, 64), (size_t)64 * 3 * 64 * 4);
    cr_expect_eq(ar_decode_kv_cache_bytes(&c, 128), (size_t)2 * 4 * 128 * 64 * 4);
}

/* ---------- generation ---------- */

typedef struct {
    int32_t tok[512];
    int n;
} collected;

static void collect(int32_t tok, void *ud)
{
    collected *c = ud;
    cr_assert(c->n < 512);
    c->tok[c->n++] = tok;
}

static ar_gen_stats generate(ar_model *m, int chunk, const ar_sample_cfg *sc, const int32_t *prompt, int np,
                             int n_new, collected *out)
{
    ar_decoder *dec;
    ar_err e = {{0}};
    cr_assert_eq(ar_decoder_create(&dec, m, chunk, m->T, &e), 0, "%s", e.msg);
    ar_sampler *s = ar_sampler_create(sc, m->V);
    ar_gen_stats st;
    out->n = 0;
    cr_assert_eq(ar_generate(dec, s, prompt, np, n_new, collect, out, &st, &e), 0, "%s", e.msg);
    cr_assert_eq(st.generated, n_new);
    cr_assert_eq(out->n, n_new);
    ar_sampler_free(s);
    ar_decoder_free(dec);
    return st;
}

static int32_t argmax_row(const float *z, int V)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[b])
            b = i;
    return b;
}

/* Checks that greedy generation through the cache picked, at every step,
 * the argmax of the full forward over the tokens in the window
 * (generate.h's policy: the window slides to its last ceil(T/2) tokens
 * when the context is full), following the tokens it picked.  The cached
 * logits are within DECODE_TOL ||z|| of the full forward's, so the pick
 * may be another token only where two logits are within twice that: a
 * near tie, which the check accepts.  Returns the slides. */
static int check_greedy(ar_model *m, const int32_t *prompt, int np, const collected *got, int chunk)
{
    int32_t win[TT + 1], pad[TT];
    int nw = np, keep = TT - TT / 2, slides = 0;
    memcpy(win, prompt, (size_t)np * sizeof *win);
    for (int i = 0; i < got->n; i++) {
        memset(pad, 0, sizeof pad);
        memcpy(pad, win, (size_t)nw * sizeof *win);
        float *z = full_logits(m, pad);
        const float *zr = z + (size_t)(nw - 1) * m->V;
        int32_t want = argmax_row(zr, m->V), t = got->tok[i];
        double norm = 0;
        for (int v = 0; v < m->V; v++)
            norm += (double)zr[v] * zr[v];
        double tie = 2 * DECODE_TOL * sqrt(norm);
        cr_assert(t == want || (double)zr[t] >= (double)zr[want] - tie,
                  "chunk %d, token %d: decoded %d (logit %.9g), full forward %d (logit %.9g; ties within %.3g)", chunk,
                  i, t, zr[t], want, zr[want], tie);
        free(z);
        win[nw++] = t;
        if (nw > TT) { /* the cache held T tokens: slide */
            memmove(win, win + nw - keep, (size_t)keep * sizeof *win);
            nw = keep;
            slides++;
        }
    }
    return slides;
}

Test(decode, greedy_generation_is_the_full_forward_argmax_with_sliding, .timeout = 120)
{
    const char *sets[] = {"model.residual.kind=block", "model.residual.block_size=2", NULL};
    ar_model *m = test_model(sets, TT, 8);
    int32_t prompt[5] = {72, 101, 108, 108, 111};
    int n_new = 40;
    ar_sample_cfg greedy = {.temperature = 0, .top_p = 1};
    collected got;
    ar_gen_stats st = generate(m, 4, &greedy, prompt, 5, n_new, &got);
    int slides = check_greedy(m, prompt, 5, &got, 4);
    cr_expect_gt(slides, 0, "the test must slide");
    cr_expect_eq(st.slides, slides);
    /* greedy is reproducible (the same code, shapes and thread count: the
     * same bits), and another prefill chunk picks the full forward's argmax
     * too (other shapes: to rounding, as above) */
    collected again, one;
    generate(m, 4, &greedy, prompt, 5, n_new, &again);
    generate(m, 1, &greedy, prompt, 5, n_new, &one);
    cr_expect(memcmp(got.tok, again.tok, (size_t)n_new * sizeof(int32_t)) == 0, "greedy differs run to run");
    check_greedy(m, prompt, 5, &one, 1);
    /* top-k 1 at any temperature is greedy: the same decoding (chunk 4) and
     * the same logits, of which both keep the largest */
    ar_sample_cfg k1 = {.temperature = 1.3, .top_k = 1, .top_p = 1, .seed = 9};
    collected topk1;
    generate(m, 4, &k1, prompt, 5, n_new, &topk1);
    cr_expect(memcmp(got.tok, topk1.tok, (size_t)n_new * sizeof(int32_t)) == 0, "top-k 1 is not greedy");
    ar_model_free(m);
}

Test(decode, seeded_sampling_is_reproducible)
{
    const char *sets[] = {"model.residual.kind=full", NULL};
    ar_model *m = test_model(sets, TT, 4);
    int32_t prompt[3] = {10, 20, 30};
    ar_sample_cfg sc = {.temperature = 0.9, .top_k = 50, .top_p = 0.95, .seed = 5};
    collected a, b, c;
    generate(m, 3, &sc, prompt, 3, 60, &a);
    generate(m, 3, &sc, prompt, 3, 60, &b);
    sc.seed = 6;
    generate(m, 3, &sc, prompt, 3, 60, &c);
    cr_expect(memcmp(a.tok, b.tok, sizeof(int32_t) * 60) == 0, "the same seed sampled differently");
    cr_expect(memcmp(a.tok, c.tok, sizeof(int32_t) * 60) != 0, "seeds 5 and 6 sampled the same 60 tokens");
    ar_model_free(m);
}

/* ---------- the sampler ---------- */

/* frequencies of n draws from logits z (V = 4) */
static void draw(const ar_sample_cfg *sc, const float *z, int n, double *freq)
{
    ar_sampler *s = ar_sampler_create(sc, 4);
    memset(freq, 0, 4 * sizeof *freq);
    for (int i = 0; i < n; i++) {
        int32_t t = ar_sample(s, z);
        cr_assert(t >= 0 && t < 4, "sampled id %d", t);
        freq[t] += 1.0 / n;
    }
    ar_sampler_free(s);
}

Test(decode, sampler_distributions)
{
    float z[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY};
    double f[4];
    ar_sample_cfg sc = {.temperature = 1, .top_p = 1, .seed = 1};
    draw(&sc, z, 40000, f);
    double want1[4] = {0.5, 0.3, 0.2, 0};
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(f[i] - want1[i]) < 0.012, "T=1: id %d drawn %.4f, want %.2f", i, f[i], want1[i]);
    /* T = 2: p ∝ sqrt(p) */
    sc.temperature = 2;
    draw(&sc, z, 40000, f);
    double s = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    double want2[4] = {sqrt(0.5) / s, sqrt(0.3) / s, sqrt(0.2) / s, 0};
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(f[i] - want2[i]) < 0.012, "T=2: id %d drawn %.4f, want %.3f", i, f[i], want2[i]);
    /* top-k 2: only the two largest, renormalised */
    sc.temperature = 1;
    sc.top_k = 2;
    draw(&sc, z, 40000, f);
    cr_expect(f[2] == 0 && f[3] == 0, "top-k 2 drew id 2 or 3");
    cr_expect(fabs(f[0] - 0.625) < 0.012, "top-k 2: id 0 drawn %.4f, want 0.625", f[0]);
    /* top-p 0.6: {0, 1} (0.5 alone does not reach it); 0.85: all three */
    sc.top_k = 0;
    sc.top_p = 0.6;
    draw(&sc, z, 20000, f);
    cr_expect(f[2] == 0 && f[0] > 0.55 && f[1] > 0.3, "top-p 0.6: %.3f %.3f %.3f", f[0], f[1], f[2]);
    sc.top_p = 0.85;
    draw(&sc, z, 20000, f);
    cr_expect(f[2] > 0.15, "top-p 0.85 must keep id 2: %.3f", f[2]);
    /* greedy: the first of equal maxima; top-k 2 among ties: the lower ids */
    float tie[4] = {1, 3, 3, 2};
    sc = (ar_sample_cfg){.temperature = 0, .top_p = 1};
    draw(&sc, tie, 10, f);
    cr_expect(f[1] > 0.999, "greedy picks the lowest of tied ids");
    sc = (ar_sample_cfg){.temperature = 1, .top_k = 1, .top_p = 1, .seed = 3};
    draw(&sc, tie, 10, f);
    cr_expect(f[1] > 0.999, "top-k 1 picks the lowest of tied ids");
    sc.top_k = 2;
    draw(&sc, tie, 4000, f);
    cr_expect(f[0] == 0 && f[3] == 0 && f[1] > 0.4 && f[2] > 0.4, "top-k 2 over a tie: %.3f %.3f", f[1], f[2]);
}

/* ---------- attnres generate ---------- */

static const char *bin(void)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    return b;
}

/* Runs `attnres ARGS` in dir; stdout into dir/out, stderr into dir/err;
 * returns the exit status. */
static int run(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(const char *dir, const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    /* grouped: tu_run's own 2>&1 then applies to the group, not to the command */
    snprintf(cmd, sizeof cmd, "{ cd '%s' && '%s' %s >out 2>err; }", dir, bin(), args);
    int st;
    free(tu_run(cmd, &st));
    return st;
}

static char *file_of(const char *dir, const char *name, size_t *n)
{
    char *s = tu_read_file(tu_path(dir, name), n);
    cr_assert(s, "cannot read %s/%s", dir, name);
    return s;
}

static void expect_error(const char *dir, int st, int want, const char *needle)
{
    char *err = file_of(dir, "err", NULL);
    cr_expect_eq(st, want, "exit status %d, expected %d; stderr:\n%s", st, want, err);
    cr_expect(strstr(err, "attnres: error: ") == err, "no 'attnres: error: ' first:\n%s", err);
    if (needle)
        cr_expect(strstr(err, needle), "expected '%s' in:\n%s", needle, err);
    free(err);
}

/* The SYNOPSIS of man/attnres-generate.1, escapes stripped, lines joined. */
static void synopsis(char *out, size_t cap)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    char path[4200];
    snprintf(path, sizeof path, "%s/man/attnres-generate.1", src);
    char *s = tu_read_file(path, NULL);
    cr_assert(s);
    char *p = strstr(s, "\n.SH SYNOPSIS\n.nf\n");
    cr_assert(p);
    p += strlen("\n.SH SYNOPSIS\n.nf\n");
    char *end = strstr(p, "\n.fi\n");
    cr_assert(end);
    size_t k = 0;
    for (; p < end && k + 1 < cap; p++) {
        if (p[0] == '\\' && p[1] == 'f') {
            p += 2;
            continue;
        }
        if (p[0] == '\\' && p[1] == '-') {
            out[k++] = '-';
            p++;
            continue;
        }
        out[k++] = *p == '\n' ? ' ' : *p;
    }
    out[k] = 0;
    free(s);
}

Test(generate_cli, usage_matches_the_man_synopsis_and_help_shows_the_page)
{
    const char *dir = tu_tmpdir();
    int st = run(dir, "generate --bogus");
    expect_error(dir, st, 2, "unknown option '--bogus'");
    char *err = file_of(dir, "err", NULL), syn[2048];
    synopsis(syn, sizeof syn);
    char *u = strstr(err, "usage: ");
    cr_assert(u, "%s", err);
    u += strlen("usage: ");
    u[strcspn(u, "\n")] = 0;
    cr_expect_str_eq(u, syn, "usage and man SYNOPSIS differ:\n  %s\n  %s", u, syn);
    free(err);
    st = run(dir, "generate --help");
    cr_expect_eq(st, 0);
    char *out = file_of(dir, "out", NULL);
    cr_expect(strstr(out, "key/value cache"), "generate --help does not show its page:\n%.300s", out);
    free(out);
    st = run(dir, "help generate");
    cr_expect_eq(st, 0);
}

/* A byte model trained for a few steps by the binary, in dir/run. */
static void train_tiny(const char *dir)
{
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    int st = run(dir,
                 "train '%s/configs/quickstart.yaml' --set data.train=corpus.txt --set train.steps=8 "
                 "--set train.warmup=2 --set model.d_model=32 --set model.n_head=2 --set model.d_ff=64 "
                 "--set model.seq_len=16 --set model.residual.block_size=2 --set train.batch_size=4 "
                 "--set train.eval_windows=2 --set train.threads=1 --out run",
                 src);
    char *err = file_of(dir, "err", NULL);
    cr_assert_eq(st, 0, "training the test run failed:\n%s", err);
    free(err);
}

Test(generate_cli, streams_the_tokens_of_a_trained_run, .timeout = 300)
{
    const char *dir = tu_tmpdir();
    train_tiny(dir);
    /* greedy: 50 bytes (past the context of 16: it slides), with the
     * default prefill chunk (64, cut to the context) and with chunk 1 */
    int st = run(dir, "generate run --prompt 'And God' --tokens 50 --temperature 0 --threads 1");
    cr_assert_eq(st, 0, "%s", file_of(dir, "err", NULL));
    size_t n1, n2;
    char *g1 = file_of(dir, "out", &n1);
    cr_expect_eq(n1, 50, "greedy wrote %zu bytes, not 50", n1);
    st = run(dir, "generate run/model.safetensors --prompt 'And God' --tokens 50 --temperature 0 --prefill-chunk 1 "
                  "--threads 1");
    cr_assert_eq(st, 0);
    char *g2 = file_of(dir, "out", &n2);
    /* Each is the library's greedy generation on the checkpoint with the
     * same chunk, bit for bit by construction: the model loaded as the
     * command loads it (ar_gen_load), the same decoder code and shapes
     * (chunk, context), one thread as --threads 1.  (Two chunks against
     * each other differ to rounding: greedy_generation_is_the_full_forward
     * checks that.) */
    int32_t prompt[7];
    for (int i = 0; i < 7; i++)
        prompt[i] = (unsigned char)"And God"[i];
    ar_sample_cfg greedy = {.temperature = 0, .top_p = 1};
    const ar_backend *one = ar_backend_cpu();
    one->set_threads(1);
    const int chunks[2] = {64, 1};
    const char *outs[2] = {g1, g2};
    size_t ns[2] = {n1, n2};
    for (int k = 0; k < 2; k++) {
        ar_config cfg;
        ar_model *m;
        long step;
        ar_err e = {{0}};
        cr_assert_eq(ar_gen_load(tu_path(dir, "run"), one, chunks[k], &cfg, &m, &step, &e), 0, "%s", e.msg);
        int T = cfg.model.seq_len, chunk = chunks[k] < T ? chunks[k] : T;
        ar_decoder *dec;
        cr_assert_eq(ar_decoder_create(&dec, m, chunk, T, &e), 0, "%s", e.msg);
        ar_sampler *smp = ar_sampler_create(&greedy, m->V);
        collected lib = {.n = 0};
        ar_gen_stats gs;
        cr_assert_eq(ar_generate(dec, smp, prompt, 7, 50, collect, &lib, &gs, &e), 0, "%s", e.msg);
        cr_expect_eq(ns[k], (size_t)lib.n, "chunk %d: %zu bytes, the library %d", chunk, ns[k], lib.n);
        for (int i = 0; i < 50 && i < (int)ns[k]; i++)
            cr_expect_eq((unsigned char)outs[k][i], lib.tok[i],
                         "chunk %d, byte %d: the command wrote %d, the library %d", chunk, i,
                         (unsigned char)outs[k][i], lib.tok[i]);
        ar_sampler_free(smp);
        ar_decoder_free(dec);
        ar_model_free(m);
    }
    free(g1);
    free(g2);
    /* seeded sampling: the same bytes twice (the same command, threads and
     * seed: by construction) */
    st = run(dir, "generate run --tokens 40 --seed 7 --top-k 20 --top-p 0.9");
    cr_assert_eq(st, 0);
    g1 = file_of(dir, "out", &n1);
    st = run(dir, "generate run --tokens 40 --seed 7 --top-k 20 --top-p 0.9");
    g2 = file_of(dir, "out", &n2);
    cr_expect(n1 == 40 && n1 == n2 && memcmp(g1, g2, n1) == 0, "seeded sampling differs between runs");
    free(g1);
    free(g2);
    /* --json: one object, the tokens, the memory figures */
    st = run(dir, "generate run --prompt-file corpus.txt --truncate --tokens 30 --seed 2 --prefill-chunk 5 --json");
    cr_assert_eq(st, 0, "%s", file_of(dir, "err", NULL));
    char *out = file_of(dir, "out", &n1);
    ar_err e = {{0}};
    ar_json *j = ar_json_parse(out, n1, &e);
    cr_assert(j, "--json printed: %s", out);
    cr_expect_eq(ar_json_get(j, "generated")->inum, 30);
    cr_expect_eq(ar_json_get(j, "prompt_tokens")->inum, 16);
    cr_expect_gt(ar_json_get(j, "truncated")->inum, 1000);
    cr_expect_eq(ar_json_get(j, "seed")->inum, 2);
    cr_expect_str_eq(ar_json_get(j, "vocab")->str, "bytes");
    cr_expect_str_eq(ar_json_get(j, "residual")->str, "block");
    cr_expect(ar_json_get(j, "text") != NULL);
    cr_expect_eq(ar_json_get(j, "tokens")->n, 30);
    /* quickstart: 4 blocks, L = 8, S = 2: N = 4 blocks, R = 5 */
    cr_expect_eq(ar_json_get(j, "depth_cache_reps")->inum, 5);
    cr_expect_eq(ar_json_get(j, "depth_cache_bytes")->inum, 5 * 5 * 32 * 4);
    cr_expect_eq(ar_json_get(j, "kv_cache_bytes")->inum, 2 * 4 * 16 * 32 * 4);
    cr_expect_gt(ar_json_get(j, "slides")->inum, 0);
    cr_expect_gt(ar_json_get(j, "decode_tokens_per_s")->num, 0);
    ar_json_free(j);
    free(out);
}

Test(generate_cli, errors, .timeout = 300)
{
    const char *dir = tu_tmpdir();
    train_tiny(dir);
    struct {
        const char *args, *needle;
        int status;
    } cases[] = {
        {"generate", "missing the checkpoint", 2},
        {"generate run --tokens 0", "'--tokens' expects an integer >= 1", 2},
        {"generate run --temperature -1", "'--temperature'", 2},
        {"generate run --top-p 0", "'--top-p'", 2},
        {"generate run --top-p 1.5", "'--top-p'", 2},
        {"generate run --top-k -1", "'--top-k'", 2},
        {"generate run --prefill-chunk 0", "'--prefill-chunk'", 2},
        {"generate run --seed -3", "'--seed'", 2},
        {"generate run --prompt a --prompt-ids 1", "give the prompt once", 2},
        {"generate run --prompt-ids 1,x", "'--prompt-ids' expects token ids", 2},
        {"generate run other", "unexpected argument 'other'", 2},
        {"generate run --tokens", "'--tokens' needs a value", 2},
        {"generate nowhere", "nowhere", 1},
        {"generate run --prompt-ids 256", "token id 256 is not below the model's vocabulary size 256", 1},
        {"generate run --prompt-file missing.txt", "'missing.txt': cannot open the prompt file", 1},
        {"generate run --prompt 0123456789abcdefg", "'--prompt': the prompt is 17 tokens, longer than the model's "
                                                     "context of 16", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = run(dir, "%s", cases[i].args);
        char *out = file_of(dir, "out", NULL);
        cr_expect_str_eq(out, "", "'%s' wrote to stdout: %s", cases[i].args, out);
        free(out);
        expect_error(dir, st, cases[i].status, cases[i].needle);
    }
    /* the same prompt with --truncate runs */
    int st = run(dir, "generate run --prompt 0123456789abcdefg --truncate --tokens 3");
    cr_expect_eq(st, 0);
}

/* A model whose vocabulary is neither bytes nor GPT-2's: ids in, ids out;
 * and GPT-2's: text through the BPE tokenizer. */
Test(generate_cli, token_id_and_gpt2_vocabularies, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    ar_err e = {{0}};
    int vocabs[] = {300, 50257};
    for (int vi = 0; vi < 2; vi++) {
        ar_config c;
        ar_config_defaults(&c);
        c.model.vocab_bytes = 0;
        c.model.vocab = vocabs[vi];
        c.model.d_model = 16;
        c.model.n_layer = 1;
        c.model.n_head = 2;
        c.model.d_ff = 16;
        c.model.seq_len = 8;
        ar_model *m;
        cr_assert_eq(ar_model_create(&m, &c.model, cpu(), 1, &e), 0, "%s", e.msg);
        ar_model_init(m, 3);
        const char *rd = tu_path(dir, vi ? "gpt2" : "ids");
        cr_assert_eq(mkdir(rd, 0777), 0);
        cr_assert_eq(ar_ckpt_save(rd, &c, m, NULL, 0, &e), 0, "%s", e.msg);
        ar_model_free(m);
    }
    int st = run(dir, "generate ids --prompt-ids 1,2,299 --tokens 5 --seed 1");
    cr_assert_eq(st, 0, "%s", file_of(dir, "err", NULL));
    char *out = file_of(dir, "out", NULL);
    int lines = 0;
    for (char *p = out; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        cr_assert(end != p && *end == '\n', "not one id a line: %s", out);
        cr_expect(id >= 0 && id < 300);
        lines++;
        p = end + 1;
    }
    cr_expect_eq(lines, 5);
    free(out);
    st = run(dir, "generate ids --prompt hello");
    expect_error(dir, st, 1, "has no tokenizer");
    st = run(dir, "generate ids --prompt-ids 300");
    expect_error(dir, st, 1, "token id 300");
    /* GPT-2: "Hello world" is 2 tokens; what is written is the tokens' bytes */
    st = run(dir, "generate gpt2 --prompt 'Hello world' --tokens 6 --seed 1 --json");
    cr_assert_eq(st, 0, "%s", file_of(dir, "err", NULL));
    size_t n;
    out = file_of(dir, "out", &n);
    ar_json *j = ar_json_parse(out, n, &e);
    cr_assert(j, "%s", out);
    cr_expect_eq(ar_json_get(j, "prompt_tokens")->inum, 2);
    cr_expect_str_eq(ar_json_get(j, "vocab")->str, "gpt2");
    const ar_json *toks = ar_json_get(j, "tokens");
    cr_assert_eq(toks->n, 6);
    st = run(dir, "generate gpt2 --prompt 'Hello world' --tokens 6 --seed 1");
    cr_assert_eq(st, 0);
    size_t nb;
    char *bytes = file_of(dir, "out", &nb);
    ar_bpe *bpe = ar_bpe_load(NULL, NULL, &e);
    cr_assert(bpe, "%s", e.msg);
    char want[2048];
    size_t k = 0;
    for (int i = 0; i < 6; i++) {
        int len = ar_bpe_token_bytes(bpe, (int32_t)toks->items[i].inum, want + k, sizeof want - k);
        cr_assert(len >= 0);
        k += (size_t)len;
    }
    cr_expect(nb == k && memcmp(bytes, want, k) == 0, "the written bytes are not the tokens' bytes");
    ar_bpe_free(bpe);
    free(bytes);
    ar_json_free(j);
    free(out);
}
