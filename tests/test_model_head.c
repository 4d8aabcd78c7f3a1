/* The output head in row chunks (lib/model.h, ar_head_chunk): the same loss
 * and gradients as one chunk, the logits on demand, finite differences
 * through several chunks, the rows rule, and a 50257-token vocabulary with
 * no N x V buffer. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "guard_backend.h"
#include "lib/model.h"
#include "modelutil.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(2);
    return be;
}

static ar_model_cfg tiny(ar_res_kind kind, int block_size, int V)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg m = c.model;
    m.vocab = V;
    m.vocab_bytes = V == 256;
    m.d_model = 12;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 20;
    m.seq_len = 7; /* 14 and 7 rows: chunks of 5 are 5, 5, 4 and 4, 3 */
    m.residual.kind = kind;
    m.residual.block_size = block_size;
    return m;
}

static ar_model *create(ar_model_cfg mc, const ar_backend *be, int max_batch, int head_chunk)
{
    ar_model *m;
    ar_err e = {{0}};
    ar_head_chunk = head_chunk;
    int rc = ar_model_create(&m, &mc, be, max_batch, &e);
    ar_head_chunk = 0;
    cr_assert_eq(rc, 0, "%s", e.msg);
    return m;
}

/* n ids uniform in [0, V) (the whole vocabulary, not only bytes) */
static void ids(int32_t *x, int n, int V, uint64_t seed)
{
    float *u = malloc((size_t)n * sizeof(float));
    tu_fill_uniform(u, (size_t)n, 0, (float)V, seed);
    for (int i = 0; i < n; i++)
        x[i] = (int32_t)u[i] < V ? (int32_t)u[i] : V - 1;
    free(u);
}

/* Two micro-batches (B = 2, then B = 1: the chunk boundaries move) with the
 * gradients accumulated; sum of their summed losses in *nats. */
static void two_steps(ar_model *m, double *nats)
{
    int T = m->T, V = m->V;
    int32_t in[14], tg[14];
    ar_model_zero_grad(m);
    *nats = 0;
    for (int s = 0; s < 2; s++) {
        int B = 2 - s;
        ids(in, B * T, V, 10 + (uint64_t)s);
        ids(tg, B * T, V, 20 + (uint64_t)s);
        double sum;
        ar_model_forward(m, in, tg, B, &sum);
        ar_model_backward(m, 1.0f / (float)(B * T));
        *nats += sum;
    }
}

/* Largest over tensors of max |ga - gb| / max |gb| (a tensor whose
 * gradient is zero in b, like the query of a mixer with one source, must
 * be zero in a too). */
static double grad_diff(ar_model *a, ar_model *b)
{
    double worst = 0;
    for (int i = 0; i < a->pt.n; i++) {
        const float *ga = ar_model_grad(a, i), *gb = ar_model_grad(b, i);
        double d = 0, s = 0;
        for (size_t j = 0; j < a->pt.p[i].numel; j++) {
            d = fmax(d, fabs((double)ga[j] - gb[j]));
            s = fmax(s, fabs((double)gb[j]));
        }
        worst = fmax(worst, s > 0 ? d / s : d);
    }
    return worst;
}

/* A bound on sum_k |h_k W_jk| over the vocabulary: the head's input h is
 * RMSNorm's output g * x / rms(x), and |x_k| / rms(x) <= sqrt(d). */
static double logit_magnitude(ar_model *m)
{
    const float *g = ar_model_param(m, m->final_norm), *W = ar_model_param(m, m->lm_head);
    double A = 0;
    for (int j = 0; j < m->V; j++) {
        double s = 0;
        for (int k = 0; k < m->d; k++)
            s += fabs((double)g[k] * W[(size_t)j * m->d + k]);
        A = fmax(A, s);
    }
    return sqrt((double)m->d) * A;
}

/* The head in chunks of at most `rows` rows against one chunk of all 14.
 * The two paths run the same code on other row counts, so BLAS may add
 * each product's terms in another order (other kernels for the edge tiles,
 * another split over threads).
 * - Loss: each logit is a d-term dot product of magnitude at most A
 *   (logit_magnitude), so the two paths' logits differ by at most
 *   2 gamma(d) A.  A row's loss, logsumexp(z) - z_target, moves by at most
 *   twice the largest change of a logit; its exponentials (a few u each,
 *   summed in double) and its rounding to float add 8 u + 2 u |loss|.
 * - Gradients: the reordered sums are the logits (d terms), dh = dz W (V
 *   terms, sum |dz| <= 2 scale per row) and lm_head's sum over rows (N
 *   terms); each is off by at most 2 gamma(n) of its terms' magnitudes.
 *   The backward through 2 layers of width <= 20 carries that with a gain
 *   below 4 here, and no tensor's largest entry is below a quarter of
 *   its terms' magnitudes: 2 gamma(max(V, N, d)) * 4 * 4.  (A misplaced
 *   chunk or a lost row moves them by 1e-2 and more.) */
static void chunked_vs_one(ar_model_cfg mc, int rows)
{
    ar_model *one = create(mc, cpu(), 2, 0), *ch = create(mc, cpu(), 2, rows);
    cr_assert_eq(one->head_rows, 14, "V %d: the default is one chunk here", mc.vocab);
    cr_assert_lt(ch->head_rows, 14);
    cr_assert_leq(ch->head_rows, rows);
    tu_model_randomize(one, 31);
    memcpy(ch->params, one->params, one->pt.total * sizeof(float));
    double l1, lc;
    two_steps(one, &l1);
    two_steps(ch, &lc);
    int n_rows = 14 + 7, d = one->d;
    double loss_tol = n_rows * (4 * tu_gamma(d) * logit_magnitude(one) + 8 * TU_U_FLOAT) +
                      2 * TU_U_FLOAT * fabs(l1);
    cr_expect(fabs(lc - l1) <= loss_tol, "V %d, chunks of %d: loss %.15g vs %.15g (bound %.3g)", mc.vocab, rows,
              lc, l1, loss_tol);
    double g = grad_diff(ch, one), g_tol = 2 * tu_gamma(fmax(mc.vocab, n_rows)) * 16;
    cr_expect(g <= g_tol, "V %d, chunks of %d: gradients differ by %g (bound %.3g)", mc.vocab, rows, g, g_tol);
    ar_model_free(one);
    ar_model_free(ch);
}

Test(model_head, chunks_equal_one_chunk_bytes)
{
    int rows[] = {1, 4, 5, 9};
    for (int i = 0; i < 4; i++) {
        chunked_vs_one(tiny(AR_RES_BASELINE, 0, 256), rows[i]);
        chunked_vs_one(tiny(AR_RES_BLOCK, 2, 256), rows[i]);
    }
}

Test(model_head, chunks_equal_one_chunk_1000)
{
    int rows[] = {1, 4, 5, 9};
    for (int i = 0; i < 4; i++) {
        chunked_vs_one(tiny(AR_RES_BASELINE, 0, 1000), rows[i]);
        chunked_vs_one(tiny(AR_RES_FULL, 0, 1000), rows[i]);
    }
}

/* ar_model_forward_backward (the head's gradient taken in the forward) against
 * ar_model_forward then ar_model_backward (every chunk but the last computed
 * again): the same loss and gradients, bit for bit, over two accumulated
 * micro-batches whose chunk boundaries move, for chunks of 1..14 rows. */
static void fused_vs_two_pass(ar_model_cfg mc, int rows)
{
    ar_model *a = create(mc, cpu(), 2, rows), *b = create(mc, cpu(), 2, rows);
    tu_model_randomize(a, 41);
    memcpy(b->params, a->params, a->pt.total * sizeof(float));
    int T = a->T, V = a->V;
    int32_t in[14], tg[14];
    ar_model_zero_grad(a);
    ar_model_zero_grad(b);
    for (int s = 0; s < 2; s++) {
        int B = 2 - s;
        float scale = 1.0f / (float)(B * T);
        ids(in, B * T, V, 50 + (uint64_t)s);
        ids(tg, B * T, V, 60 + (uint64_t)s);
        double sa, sb;
        double la = ar_model_forward(a, in, tg, B, &sa);
        ar_model_backward(a, scale);
        double lb = ar_model_forward_backward(b, in, tg, B, scale, &sb);
        cr_expect(la == lb && sa == sb, "V %d, chunks of %d, step %d: loss %.17g vs %.17g", V, rows,
                  s, la, lb);
    }
    for (int i = 0; i < a->pt.n; i++)
        cr_expect(memcmp(ar_model_grad(a, i), ar_model_grad(b, i),
                         a->pt.p[i].numel * sizeof(float)) == 0,
                  "V %d, chunks of %d: gradient of %s differs", V, rows, a->pt.p[i].name);
    /* and the fused path really took a gradient (not zeros equal to zeros) */
    cr_expect(ar_model_grad(b, b->lm_head)[0] != 0, "V %d: the output layer got no gradient", V);
    ar_model_free(a);
    ar_model_free(b);
}

Test(model_head, fused_gradient_equals_two_passes)
{
    int rows[] = {1, 4, 5, 14};
    for (int i = 0; i < 4; i++) {
        fused_vs_two_pass(tiny(AR_RES_BASELINE, 0, 1000), rows[i]);
        fused_vs_two_pass(tiny(AR_RES_BLOCK, 2, 256), rows[i]);
        fused_vs_two_pass(tiny(AR_RES_FULL, 0, 1000), rows[i]);
    }
}

/* Guards the comparison above: a different head gives different results. */
Test(model_head, a_changed_head_differs)
{
    ar_model_cfg mc = tiny(AR_RES_BASELINE, 0, 1000);
    ar_model *a = create(mc, cpu(), 2, 0), *b = create(mc, cpu(), 2, 5);
    tu_model_randomize(a, 31);
    memcpy(b->params, a->params, a->pt.total * sizeof(float));
    ar_model_param(b, b->lm_head)[7 * mc.d_model + 3] += 0.5f;
    double la, lb;
    two_steps(a, &la);
    two_steps(b, &lb);
    cr_expect_gt(fabs(la - lb), 1e-6);
    cr_expect_gt(grad_diff(b, a), 1e-4);
    ar_model_free(a);
    ar_model_free(b);
}

/* ar_model_logits after a forward without targets: log-sum-exp minus the
 * target's logit, in double, is the loss of the forward with targets. */
Test(model_head, logits_on_demand_give_the_loss)
{
    ar_model_cfg mc = tiny(AR_RES_BLOCK, 3, 1000);
    ar_model *m = create(mc, cpu(), 2, 5);
    tu_model_randomize(m, 8);
    int N = 14, V = mc.vocab;
    int32_t in[14], tg[14];
    ids(in, N, V, 1);
    ids(tg, N, V, 2);
    double nats;
    ar_model_forward(m, in, tg, 2, &nats);
    cr_assert_eq(ar_model_forward(m, in, NULL, 2, NULL), 0.0);
    float *z = malloc((size_t)N * V * sizeof(float));
    ar_model_logits(m, 0, 8, z); /* in two calls: rows 0..7, 8..13 */
    ar_model_logits(m, 8, 6, z + (size_t)8 * V);
    double want = 0;
    for (int i = 0; i < N; i++) {
        const float *r = z + (size_t)i * V;
        double mx = r[0], s = 0;
        for (int c = 1; c < V; c++)
            mx = fmax(mx, r[c]);
        for (int c = 0; c < V; c++)
            s += exp(r[c] - mx);
        want += log(s) + mx - r[tg[i]];
    }
    cr_expect(fabs(nats - want) <= 1e-6 * want, "loss %.9g, from the logits %.9g", nats, want);
    free(z);
    ar_model_free(m);
}

/* Finite differences on every tensor (the head's included) with the head in
 * chunks of at most 5 rows (14 rows: 5, 5, 4) and a vocabulary of 1000. */
Test(model_head, finite_differences_in_chunks)
{
    ar_head_chunk = 5;
    tu_model_fd_check(tiny(AR_RES_BASELINE, 0, 1000), "baseline, head chunks of 5", NULL);
    tu_model_fd_check(tiny(AR_RES_BLOCK, 2, 1000), "block2, head chunks of 5", NULL);
    ar_head_chunk = 0;
}

/* On the guard backend, whose buffers host code cannot touch and whose ops
 * check that every pointer lies inside its buffer: the chunk pointers
 * stay inside, and the loss is the CPU backend's. */
Test(model_head, chunks_on_the_guard_backend)
{
    ar_model_cfg mc = tiny(AR_RES_FULL, 0, 1000);
    ar_model *c = create(mc, cpu(), 2, 5), *g = create(mc, guard_backend(), 2, 5);
    tu_model_randomize(c, 5);
    tu_model_randomize(g, 5);
    double lc, lg;
    two_steps(c, &lc);
    two_steps(g, &lg);
    cr_expect_eq(lc, lg, "guard %.15g vs cpu %.15g", lg, lc);
    ar_model_free(c);
    ar_model_free(g);
}

/* At most 2^24 / V rows (64 MiB of floats), the batch in equal chunks */
Test(model_head, rows_rule)
{
    cr_expect_eq(ar_head_rows(256, 4096), 4096, "bytes at bench-small: one chunk");
    cr_expect_eq(ar_head_rows(256, 65536), 65536);
    cr_expect_eq(ar_head_rows(256, 65537), 32769, "two chunks of 32769 and 32768");
    cr_expect_eq(ar_head_rows(50257, 4096), 316, "13 chunks of at most 333 rows");
    cr_expect_leq((double)333 * 50257 * sizeof(float), 64.0 * 1024 * 1024);
    cr_expect_gt((double)334 * 50257 * sizeof(float), 64.0 * 1024 * 1024);
    cr_expect_eq(ar_head_rows(50257, 333), 333);
    cr_expect_eq(ar_head_rows(50257, 334), 167);
    cr_expect_eq(ar_head_rows(40000000, 4096), 1, "a vocabulary over the budget: one row");
    cr_expect_eq(ar_head_rows(50257, 100), 100, "never more rows than the batch has");
    ar_head_chunk = 7;
    cr_expect_eq(ar_head_rows(50257, 4096), 7);
    cr_expect_eq(ar_head_rows(50257, 5), 5);
    cr_expect_eq(ar_head_rows(50257, 8), 4);
    ar_head_chunk = 0;
}

/* ---- GPT-2's vocabulary with no N x V buffer ---- */

static size_t big_alloc, total_alloc;
static ar_backend counted;
static void *counted_alloc(size_t bytes)
{
    big_alloc = bytes > big_alloc ? bytes : big_alloc;
    total_alloc += bytes;
    return ar_backend_cpu()->alloc(bytes);
}

/* V = 50257, N = 16 x 64 = 1024 rows: one logits buffer would be 206 MB.
 * Every allocation stays under 64 MiB (the largest are the head chunks, 4
 * of 256 rows), all of them together under one N x V buffer, and the loss
 * of the initial model on ids over the whole vocabulary is about log V. */
Test(model_head, gpt2_vocabulary_allocates_chunks_only)
{
    counted = *ar_backend_cpu();
    counted.alloc = counted_alloc;
    ar_model_cfg mc = tiny(AR_RES_BLOCK, 2, 50257);
    mc.d_model = 16;
    mc.seq_len = 64;
    int B = 16, N = B * mc.seq_len;
    ar_model *m = create(mc, &counted, B, 0);
    cr_assert_eq(m->head_rows, 256);
    size_t nv = (size_t)N * mc.vocab * sizeof(float);
    cr_expect_leq(big_alloc, (size_t)AR_HEAD_CHUNK_FLOATS * sizeof(float), "largest allocation %zu",
                  big_alloc);
    cr_expect_lt(total_alloc, nv, "allocated %zu bytes in all, one N x V buffer is %zu", total_alloc, nv);
    ar_model_init(m, 3);
    int32_t *in = malloc((size_t)N * sizeof *in), *tg = malloc((size_t)N * sizeof *tg);
    ids(in, N, mc.vocab, 6);
    ids(tg, N, mc.vocab, 7);
    ar_model_zero_grad(m);
    double loss = ar_model_forward(m, in, tg, B, NULL);
    ar_model_backward(m, 1.0f / (float)N);
    cr_expect(fabs(loss - log(50257.0)) < 0.05, "initial loss %g, log V %g", loss, log(50257.0));
    double gn = 0;
    for (size_t j = 0; j < m->pt.total; j++)
        gn += (double)m->grads[j] * m->grads[j];
    cr_expect(isfinite(gn) && gn > 0, "gradient norm^2 %g", gn);
    free(in);
    free(tg);
    ar_model_free(m);
}

/* The chunk budget is the backend's (head_floats): the CUDA backend's
 * larger chunks, here a CPU backend that asks for 64 Mi floats, take
 * V = 50257, N = 1024 in one chunk instead of 4. */
static size_t big_head_floats(void) { return (size_t)64 << 20; }
Test(model_head, the_backend_sets_the_chunk_budget)
{
    counted = *ar_backend_cpu();
    counted.alloc = counted_alloc;
    counted.head_floats = big_head_floats;
    ar_model_cfg mc = tiny(AR_RES_BLOCK, 2, 50257);
    mc.d_model = 16;
    mc.seq_len = 64;
    ar_model *m = create(mc, &counted, 16, 0);
    cr_expect_eq(m->head_rows, 1024, "rows per chunk %d", m->head_rows);
    cr_expect_eq(ar_head_rows_within(50257, 4096, (size_t)64 << 20), 1024, "4 chunks of 1024 (at most 1335)");
    ar_model_free(m);
}
