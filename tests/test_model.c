/* The whole model: golden float64 references, finite differences for every
 * kind, and the identities between residual kinds. */
#include <criterion/criterion.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"
#include "formats/safetensors.h"
#include "lib/model.h"
#include "modelutil.h"
#include "run/checkpoint.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(2);
    return be;
}

/* ---------- golden references ---------- */

/* head_chunk: rows per output-head chunk (ar_head_chunk; 0: the default,
 * one chunk of all 16 rows) */
static void check_golden_chunked(const char *name, int head_chunk)
{
    const char *g = tu_golden_dir();
    if (!g)
        cr_skip_test("golden folder absent");
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/%s", g, name);
    snprintf(path, sizeof path, "%s/case.json", dir);
    size_t n;
    char *txt = tu_read_file(path, &n);
    cr_assert(txt, "cannot read %s", path);
    ar_err e = {{0}};
    ar_json *cs = ar_json_parse(txt, n, &e);
    cr_assert(cs, "%s", e.msg);
    const ar_json *toks = ar_json_get(cs, "tokens");
    double ref_loss = ar_json_get(cs, "loss")->num;
    int B = toks->n, T1 = toks->items[0].n, T = T1 - 1;
    int32_t *in = calloc((size_t)B * T, sizeof *in), *tg = calloc((size_t)B * T, sizeof *tg);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int32_t)toks->items[b].items[t].inum;
            tg[b * T + t] = (int32_t)toks->items[b].items[t + 1].inum;
        }

    ar_config cfg;
    ar_model *m;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ar_head_chunk = head_chunk;
    int rc = ar_ckpt_load_model(path, cpu(), B, &cfg, &m, NULL, &e);
    ar_head_chunk = 0;
    cr_assert_eq(rc, 0, "%s", e.msg);
    cr_assert_eq(cfg.model.seq_len, T);
    cr_assert_eq(m->head_rows, head_chunk ? head_chunk : B * T);
    /* float against the float64 reference.  Before the head the forward
     * chains about ten reductions of at most 24 terms (d 16, d_ff 24, T 8,
     * at most 5 sources), each within gamma(24) = 1.4e-6 of its terms'
     * magnitudes in the worst case and within sqrt(24) u = 3e-7 in the
     * probabilistic model of rounding (Higham and Mary, SIAM J. Sci.
     * Comput. 41(5), 2019), where independent roundings add like a random
     * walk.  Logits: 1e-5 in norm, three times the probabilistic chain.
     * Loss: the mean of 16 rows' logsumexp(z) - z_t, whose errors average:
     * 1e-6 relative.  Gradients: the backward adds the head's 256-term
     * sums (sqrt(256) u = 1e-6) and the weights' 16-token sums to the
     * forward's error, each of up to 20 chained reductions: 1e-4 in norm. */
    double loss = ar_model_forward(m, in, tg, B, NULL);
    cr_expect(fabs(loss - ref_loss) / ref_loss < 1e-6, "%s: loss %.9f vs golden %.9f", name, loss,
              ref_loss);

    ar_st_file lf, gf;
    snprintf(path, sizeof path, "%s/logits.safetensors", dir);
    cr_assert_eq(ar_st_read(&lf, path, &e), 0, "%s", e.msg);
    size_t nl = (size_t)B * T * m->V;
    float *ref = malloc(nl * sizeof(float));
    int64_t lshape[3] = {B, T, m->V};
    cr_assert_eq(ar_st_get_f32(&lf, "logits", lshape, 3, ref, &e), 0, "%s", e.msg);
    float *logits = malloc(nl * sizeof(float));
    ar_model_logits(m, 0, B * T, logits);
    double le = tu_rel_err(logits, ref, nl);
    cr_expect(le < 1e-5, "%s: logits rel err %g", name, le);
    free(logits);
    free(ref);
    ar_st_free(&lf);

    ar_model_zero_grad(m);
    ar_model_backward(m, 1.0f / (float)(B * T));
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    cr_assert_eq(ar_st_read(&gf, path, &e), 0, "%s", e.msg);
    cr_assert_eq(gf.n, m->pt.n, "%s: golden has %d gradient tensors, model %d", name, gf.n, m->pt.n);
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float *r = malloc(p->numel * sizeof(float));
        cr_assert_eq(ar_st_get_f32(&gf, p->name, p->shape, p->ndim, r, &e), 0, "%s", e.msg);
        double err = tu_rel_err(ar_model_grad(m, i), r, p->numel);
        cr_expect(err < 1e-4, "%s: gradient of '%s' rel err %g", name, p->name, err);
        free(r);
    }
    ar_st_free(&gf);
    ar_model_free(m);
    ar_json_free(cs);
    free(txt);
    free(in);
    free(tg);
}

static void check_golden(const char *name) { check_golden_chunked(name, 0); }

Test(golden, baseline) { check_golden("baseline"); }
Test(golden, full) { check_golden("full"); }
Test(golden, block2) { check_golden("block2"); }
Test(golden, block3) { check_golden("block3"); }
/* the head in chunks of 6, 6, 4 rows: the same references */
Test(golden, baseline_head_chunks) { check_golden_chunked("baseline", 6); }
Test(golden, block3_head_chunks) { check_golden_chunked("block3", 6); }

/* ---------- tiny models with random weights ---------- */

static ar_model_cfg tiny(ar_res_kind kind, int block_size, int num_blocks)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg m = c.model;
    m.vocab = 256;
    m.vocab_bytes = 1;
    m.d_model = 12;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 20;
    m.seq_len = 6;
    m.residual.kind = kind;
    m.residual.block_size = block_size;
    m.residual.num_blocks = num_blocks;
    return m;
}

/* Directional finite differences per tensor (tests/modelutil.h, with the
 * bound from the central difference's truncation and rounding). */
static void fd_check(ar_model_cfg mc)
{
    tu_model_fd_check(mc, ar_res_kind_name(mc.residual.kind), NULL);
}

Test(finite_differences, baseline) { fd_check(tiny(AR_RES_BASELINE, 0, 0)); }
Test(finite_differences, full) { fd_check(tiny(AR_RES_FULL, 0, 0)); }
Test(finite_differences, block2) { fd_check(tiny(AR_RES_BLOCK, 2, 0)); }
Test(finite_differences, block3) { fd_check(tiny(AR_RES_BLOCK, 3, 0)); }
Test(finite_differences, num_blocks1) { fd_check(tiny(AR_RES_BLOCK, 0, 1)); }

/* Every third channel of every sublayer input norm's gain set to 0: where
 * AttnRes rebuilds h from xn = RMSNorm(h) for the norm's backward, those
 * channels must come from the sources instead (xn is 0 there). */
static void zero_norm_gains(ar_model *m)
{
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        if (!strstr(p->name, "attn_norm.weight") && !strstr(p->name, "mlp_norm.weight"))
            continue;
        float *g = ar_model_param(m, i);
        for (size_t j = 0; j < p->numel; j += 3)
            g[j] = 0.0f;
    }
}

Test(finite_differences, full_zero_norm_gains)
{
    tu_model_fd_check_prep(tiny(AR_RES_FULL, 0, 0), "full, zero gains", NULL, zero_norm_gains);
}
Test(finite_differences, block2_zero_norm_gains)
{
    tu_model_fd_check_prep(tiny(AR_RES_BLOCK, 2, 0), "block2, zero gains", NULL, zero_norm_gains);
}

/* Forward + backward of two configs with the same weights (copied by
 * tensor name); returns their relative difference in loss, logits and
 * gradients (tu_model_diff). */
static double compare_kinds(ar_model_cfg a, ar_model_cfg b)
{
    ar_model *ma, *mb;
    ar_err e;
    int B = 2;
    cr_assert_eq(ar_model_create(&ma, &a, cpu(), B, &e), 0);
    cr_assert_eq(ar_model_create(&mb, &b, cpu(), B, &e), 0);
    cr_assert_eq(ma->pt.n, mb->pt.n);
    tu_model_randomize(ma, 11);
    for (int i = 0; i < ma->pt.n; i++) {
        int j = ar_params_find(&mb->pt, ma->pt.p[i].name);
        cr_assert(j >= 0, "tensor '%s' missing", ma->pt.p[i].name);
        memcpy(ar_model_param(mb, j), ar_model_param(ma, i), ma->pt.p[i].numel * sizeof(float));
    }
    double d = tu_model_diff(ma, mb, B);
    ar_model_free(ma);
    ar_model_free(mb);
    return d;
}

/* Full AttnRes is the depth-attention code with blocks of one sublayer, and
 * num_blocks resolves to a block_size before the model is built: in each
 * pair both models run the same code on the same sources, shapes and
 * threads, so they agree bit for bit. */
Test(kinds, block_size_1_equals_full)
{
    double d = compare_kinds(tiny(AR_RES_BLOCK, 1, 0), tiny(AR_RES_FULL, 0, 0));
    cr_expect_eq(d, 0.0, "block_size 1 differs from full by %g", d);
}

Test(kinds, num_blocks_equals_block_size)
{
    /* L = 4: num_blocks 2 -> S = 2; num_blocks 3 -> S = ceil(4/3) = 2; 1 -> S = 4. */
    cr_expect_eq(compare_kinds(tiny(AR_RES_BLOCK, 0, 2), tiny(AR_RES_BLOCK, 2, 0)), 0.0);
    cr_expect_eq(compare_kinds(tiny(AR_RES_BLOCK, 0, 3), tiny(AR_RES_BLOCK, 2, 0)), 0.0);
    cr_expect_eq(compare_kinds(tiny(AR_RES_BLOCK, 0, 1), tiny(AR_RES_BLOCK, 4, 0)), 0.0);
}

Test(kinds, different_block_sizes_differ)
{
    /* Guards the tests above against comparing a thing with itself. */
    cr_expect_gt(compare_kinds(tiny(AR_RES_BLOCK, 2, 0), tiny(AR_RES_BLOCK, 3, 0)), 1e-2);
    cr_expect_gt(compare_kinds(tiny(AR_RES_FULL, 0, 0), tiny(AR_RES_BLOCK, 2, 0)), 1e-2);
}

Test(kinds, zero_queries_give_uniform_weights)
{
    ar_model_cfg kinds[] = {tiny(AR_RES_FULL, 0, 0), tiny(AR_RES_BLOCK, 3, 0)};
    for (int k = 0; k < 2; k++) {
        ar_model *m;
        ar_err e;
        cr_assert_eq(ar_model_create(&m, &kinds[k], cpu(), 2, &e), 0);
        ar_model_init(m, 1); /* queries are initialised to zero */
        int32_t in[64], tg[64];
        tu_tokens(in, tg, 2 * m->T, 9);
        ar_model_forward(m, in, tg, 2, NULL);
        for (int l = 1; l <= m->L + 1; l++) {
            int n = m->res->vt->n_sources(m->res, l);
            float w[64];
            m->res->vt->mean_weights(m->res, l, 2 * m->T, w);
            /* zero queries make every logit exactly 0, so every weight is
             * 1/n rounded once, and the mean over 2T tokens adds 2T equal
             * floats: within gamma(2T + 1) of 1/n */
            for (int i = 0; i < n; i++)
                cr_expect_float_eq(w[i], 1.0f / n, tu_gamma(2 * m->T + 1) / n, "mixer %d source %d: %g", l, i,
                                   w[i]);
        }
        ar_model_free(m);
    }
}

Test(kinds, source_lists_follow_the_block_rule)
{
    /* L = 4, S = 3: blocks {1,2,3}, {4}; b_0 = P_0, b_1 = P_3, b_2 = P_4. */
    ar_model_cfg mc = tiny(AR_RES_BLOCK, 3, 0);
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &mc, cpu(), 1, &e), 0);
    ar_residual *r = m->res;
    const ar_residual_vt *v = r->vt;
    int want_n[] = {0, 1, 2, 2, 2, 3};
    for (int l = 1; l <= 5; l++)
        cr_expect_eq(v->n_sources(r, l), want_n[l], "mixer %d has %d sources", l, v->n_sources(r, l));
    const float *P0 = v->embed_out(r);
    for (int l = 1; l <= 5; l++)
        cr_expect_eq(v->source(r, l, 0), P0, "mixer %d: first source is not the embedding", l);
    cr_expect_eq(v->source(r, 2, 1), v->output_buf(r, 1));
    cr_expect_eq(v->source(r, 3, 1), v->output_buf(r, 2));
    cr_expect_eq(v->source(r, 4, 1), v->output_buf(r, 3));
    cr_expect_eq(v->source(r, 5, 1), v->output_buf(r, 3));
    cr_expect_eq(v->source(r, 5, 2), v->output_buf(r, 4));
    ar_model_free(m);
}

Test(kinds, one_block_mixes_embedding_and_running_sum)
{
    /* num_blocks 1: sublayer l >= 2 sees [v_0, v_1 + ... + v_{l-1}].  With
     * zero queries, h_2 = (v_0 + v_1)/2, while the baseline (same weights)
     * has h_2 = v_0 + v_1 with the same v_1 = Attn(v_0). */
    ar_model_cfg a = tiny(AR_RES_BLOCK, 0, 1), b = tiny(AR_RES_BASELINE, 0, 0);
    ar_model *ma, *mb;
    ar_err e;
    cr_assert_eq(ar_model_create(&ma, &a, cpu(), 2, &e), 0);
    cr_assert_eq(ar_model_create(&mb, &b, cpu(), 2, &e), 0);
    ar_model_init(ma, 4);
    for (int i = 0; i < mb->pt.n; i++) {
        int j = ar_params_find(&ma->pt, mb->pt.p[i].name);
        memcpy(ar_model_param(mb, i), ar_model_param(ma, j), mb->pt.p[i].numel * sizeof(float));
    }
    int32_t in[64], tg[64];
    tu_tokens(in, tg, 2 * a.seq_len, 13);
    ar_model_forward(ma, in, tg, 2, NULL);
    ar_model_forward(mb, in, tg, 2, NULL);
    for (int l = 2; l <= ma->L + 1; l++)
        cr_expect_eq(ma->res->vt->n_sources(ma->res, l), 2);
    /* AttnRes writes sublayer 2's RMSNorm(h_2) itself (h_2 is not stored):
     * compare it with RMSNorm((v_0 + v_1)/2) from the baseline's h_2. */
    cr_assert_null(ma->res_in[2]);
    int N = 2 * a.seq_len, d = a.d_model;
    const float *gain = ar_model_param(ma, ma->blk[0].mlp_norm);
    double err = 0;
    for (int t = 0; t < N; t++) {
        const float *hb = mb->res_in[2] + (size_t)t * d;
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += 0.25 * hb[j] * hb[j];
        double rstd = 1.0 / sqrt(ss / d + AR_RMS_EPS);
        for (int j = 0; j < d; j++) {
            double want = 0.5 * hb[j] * rstd * gain[j];
            err = fmax(err, fabs(ma->act[0].mxn[(size_t)t * d + j] - want) / (fabs(want) + 1e-3));
        }
    }
    /* h_2 = v_0/2 + v_1/2 (weights 1/2 exactly: the softmax of two zero
     * logits) is exactly half of the baseline's v_0 + v_1: the halves are
     * exact and the one rounding of the sum is the same.  The reference
     * normalises it in double; the float path's d-term sum of squares is
     * within gamma(d), its mean, eps, sqrt and reciprocal add 4 u (rstd:
     * gamma(d)/2 + 3 u), the products by rstd and the gain 2 u: gamma(d + 10)/2 */
    double tol = tu_gamma(d + 10) / 2;
    cr_expect_lt(err, tol, "RMSNorm(h_2) differs from that of (v_0 + v_1)/2 by %g (bound %g)", err, tol);
    ar_model_free(ma);
    ar_model_free(mb);
}

/* The range the model names for the bf16 products' copy of its weights
 * (lib/backend.h, set_weight_copy): every parameter but the token
 * embedding, which no product reads. */
static const float *copy_p;
static size_t copy_n;
static void record_weight_copy(const float *p, size_t n)
{
    copy_p = p;
    copy_n = n;
}

Test(model, weight_copy_names_every_parameter_but_the_embedding)
{
    ar_backend rec = *cpu();
    rec.set_weight_copy = record_weight_copy;
    ar_model_cfg cfg = tiny(AR_RES_BLOCK, 2, 0);
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &cfg, &rec, 2, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    int32_t in[64], tg[64];
    tu_tokens(in, tg, 2 * m->T, 9);
    copy_p = NULL;
    ar_model_forward(m, in, tg, 2, NULL);
    const ar_param *emb = &m->pt.p[m->embed];
    cr_assert_eq(emb->offset, 0, "the embedding is no longer first in the arena");
    cr_expect(copy_p == m->params + emb->numel && copy_n == m->pt.total - emb->numel,
              "the copy covers floats [%td, %td), want [%zu, %zu)", copy_p - m->params,
              copy_p - m->params + (ptrdiff_t)copy_n, emb->numel, m->pt.total);
    ar_model_free(m);
}

/* ---------- forwards whose depth weights nobody reads ---------- */

/* ar_model_forward_unread leaves the depth weights unwritten (the CPU's
 * two-phase ops and fast general mixer skip them); everything else is computed by the same code
 * on the same values, so the loss and the final norm's output equal
 * ar_model_forward's bit for bit.  Full, Block (chunks with intra sources)
 * and sigmoid scores, random weights (queries non-zero); afterwards the
 * weights read as NaN, and the next plain forward writes them again. */
static void unread_case(ar_model_cfg mc, const char *what)
{
    ar_model *m;
    ar_err e;
    int B = 2;
    cr_assert_eq(ar_model_create(&m, &mc, cpu(), B, &e), 0, "%s", e.msg);
    tu_model_randomize(m, 23);
    int N = B * m->T;
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 5);
    size_t nh = (size_t)N * m->d;
    float *hn = malloc(nh * sizeof(float));
    float w[64], w2[64];
    cr_assert(hn);
    double s1, s2;
    double l1 = ar_model_forward(m, in, tg, B, &s1);
    memcpy(hn, m->hn, nh * sizeof(float));
    m->res->vt->mean_weights(m->res, m->L + 1, N, w);
    double l2 = ar_model_forward_unread(m, in, tg, B, &s2);
    cr_expect(l1 == l2 && s1 == s2, "%s: loss %.17g unread, %.17g read", what, l2, l1);
    cr_expect(memcmp(hn, m->hn, nh * sizeof(float)) == 0, "%s: the final norm's output differs", what);
    int n = m->res->vt->n_sources(m->res, m->L + 1);
    m->res->vt->mean_weights(m->res, m->L + 1, N, w2);
    for (int i = 0; i < n; i++)
        cr_expect(isnan(w2[i]), "%s: source %d's weight %g after an unread forward, not NaN", what, i, w2[i]);
    ar_model_forward(m, in, tg, B, NULL);
    m->res->vt->mean_weights(m->res, m->L + 1, N, w2);
    cr_expect(memcmp(w, w2, (size_t)n * sizeof(float)) == 0, "%s: the weights differ after a plain forward", what);
    /* collect_stats reads the weights: then they are written */
    m->collect_stats = 1;
    ar_model_forward_unread(m, in, tg, B, NULL);
    m->collect_stats = 0;
    m->res->vt->mean_weights(m->res, m->L + 1, N, w2);
    cr_expect(memcmp(w, w2, (size_t)n * sizeof(float)) == 0, "%s: weights unwritten under collect_stats", what);
    free(hn);
    ar_model_free(m);
}

Test(unread, outputs_equal_the_plain_forward)
{
    unread_case(tiny(AR_RES_FULL, 0, 0), "full");
    unread_case(tiny(AR_RES_BLOCK, 2, 0), "block2");
    unread_case(tiny(AR_RES_BLOCK, 3, 0), "block3");
    ar_model_cfg sig = tiny(AR_RES_FULL, 0, 0);
    sig.residual.score = AR_SCORE_SIGMOID;
    unread_case(sig, "full, sigmoid");
    ar_model_cfg nokn = tiny(AR_RES_BLOCK, 2, 0);
    nokn.residual.key_norm = AR_KEY_NORM_OFF;
    unread_case(nokn, "block2, no key norm");
    /* the general mixer's per-token weights (the op's own skipping is
     * test_residual_variants' depth_mix_fast_equals_simple) */
    ar_model_cfg heads = tiny(AR_RES_BLOCK, 2, 0);
    heads.residual.heads = 2;
    unread_case(heads, "block2, 2 heads");
    ar_model_cfg swa = tiny(AR_RES_SWA, 0, 0);
    swa.residual.window = 2;
    unread_case(swa, "swa 2");
    ar_model_cfg iq = tiny(AR_RES_FULL, 0, 0);
    iq.residual.query = AR_QUERY_INPUT;
    unread_case(iq, "full, input query");
}

/* A backward needs the weights an unread forward skipped: it refuses. */
Test(unread, a_backward_after_it_aborts, .signal = SIGABRT)
{
    ar_model_cfg mc = tiny(AR_RES_FULL, 0, 0);
    int32_t in[16], tg[16];
    ar_model *m = tu_model_random(mc, 1, 3, 2, in, tg, 16);
    ar_model_forward_unread(m, in, tg, 1, NULL);
    ar_model_backward(m, 1.0f);
}
