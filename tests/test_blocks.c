/* model.residual.block_sizes: blocks of different sizes at different depths
 * (core/blocks.h).  A list of all S trains bit for bit as block_size S (the
 * last block shorter too), a list of 1s as Full AttnRes, on the two-phase
 * and on the general depth mixer; an uneven list against finite
 * differences; its source lists, residual rows and mixing matrix against
 * hand-written ones; its pipeline plan against a hand count; and a run with
 * a list resumes bit for bit from its checkpoint. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blocks.h"
#include "formats/config.h"
#include "lib/mixing.h"
#include "lib/model.h"
#include "lib/optim.h"
#include "lib/residual.h"
#include "run/checkpoint.h"
#include "parallel/pipe_plan.h"
#include "run/train.h"
#include "modelutil.h"
#include "resumeutil.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(2);
    return be;
}

/* n_layer layers (L = 2 n_layer), d 16, T 8, then the --set overrides
 * (NULL-terminated). */
static ar_config tiny(int n_layer, const char *const *sets)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = n_layer;
    c.model.n_head = 2;
    c.model.d_ff = 24;
    c.model.seq_len = 8;
    ar_err e = {{0}};
    for (int i = 0; sets && sets[i]; i++)
        cr_assert_eq(ar_config_set(&c, sets[i], &e), 0, "--set %s: %s", sets[i], e.msg);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    return c;
}

#define SETS(...) ((const char *const[]){__VA_ARGS__, NULL})

static ar_model *create(const ar_config *c)
{
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &c->model, cpu(), 3, &e), 0, "%s", e.msg);
    return m;
}

/* Four AdamW steps of two micro-batches (B = 3, then 2) through both
 * training entry points, the same weights to start: every loss, every
 * gradient after each step and the weights at the end, bit for bit.
 * Returns whether everything matched (the caller decides what it expects).
 * Where the two configs resolve to the same block layout (core/blocks.h:
 * a list of all S and block_size S, a list of 1s, block_size 1 and full),
 * both models run the same code on the same source lists, shapes and
 * thread count (2), so every sum is added in the same order: bit equality
 * holds by construction, and any difference is a difference in layout. */
static int train_same_bits(const ar_config *ca, const ar_config *cb, const char *what)
{
    ar_model *a = create(ca), *b = create(cb);
    cr_assert_eq(a->pt.n, b->pt.n, "%s: %d vs %d tensors", what, a->pt.n, b->pt.n);
    cr_assert_eq(a->pt.total, b->pt.total, "%s", what);
    for (int i = 0; i < a->pt.n; i++) /* the same tensors in the same places */
        cr_assert(!strcmp(a->pt.p[i].name, b->pt.p[i].name) && a->pt.p[i].offset == b->pt.p[i].offset,
                  "%s: tensor %d is '%s' vs '%s'", what, i, a->pt.p[i].name, b->pt.p[i].name);
    tu_model_randomize(a, 5);
    memcpy(b->params, a->params, a->pt.total * sizeof(float));
    ar_adamw oa, ob;
    ar_adamw_init(&oa, a);
    ar_adamw_init(&ob, b);
    int T = ca->model.seq_len, same = 1;
    int32_t in[24], tg[24];
    for (int step = 0; step < 4; step++) {
        ar_model_zero_grad(a);
        ar_model_zero_grad(b);
        for (int mb = 0; mb < 2; mb++) {
            int B = 3 - mb;
            tu_tokens(in, tg, B * T, 100 + 10 * (uint64_t)step + (uint64_t)mb);
            float scale = 1.0f / (float)(2 * B * T);
            double la, lb;
            if (step % 2) {
                la = ar_model_forward(a, in, tg, B, NULL);
                ar_model_backward(a, scale);
                lb = ar_model_forward(b, in, tg, B, NULL);
                ar_model_backward(b, scale);
            } else {
                la = ar_model_forward_backward(a, in, tg, B, scale, NULL);
                lb = ar_model_forward_backward(b, in, tg, B, scale, NULL);
            }
            same &= la == lb;
        }
        same &= memcmp(a->grads, b->grads, a->pt.total * sizeof(float)) == 0;
        ar_adamw_step(&oa, a, &ca->train, 1e-2, 1.0);
        ar_adamw_step(&ob, b, &cb->train, 1e-2, 1.0);
    }
    same &= memcmp(a->params, b->params, a->pt.total * sizeof(float)) == 0;
    /* training moved the weights (a comparison of two untouched models
     * would prove nothing) */
    ar_model *init = create(ca);
    tu_model_randomize(init, 5);
    cr_expect(memcmp(init->params, a->params, a->pt.total * sizeof(float)) != 0, "%s: weights did not move", what);
    ar_model_free(init);
    ar_adamw_free(&oa);
    ar_adamw_free(&ob);
    ar_model_free(a);
    ar_model_free(b);
    return same;
}

static void expect_same_bits(const ar_config *ca, const ar_config *cb, const char *what)
{
    cr_expect(train_same_bits(ca, cb, what), "%s: losses, gradients or weights differ", what);
}

/* Both depth mixers: the two-phase one of plain AttnRes, and the general
 * one (ar_depth_general, which flagged variants always use). */
static void on_both_mixers(void (*check)(const char *mixer))
{
    int saved = ar_depth_general;
    ar_depth_general = 0;
    check("two-phase");
    ar_depth_general = 1;
    check("general");
    ar_depth_general = saved;
}

static void list_of_S(const char *mixer)
{
    char what[160];
    /* L = 6 */
    ar_config a = tiny(3, SETS("model.residual.block_sizes=[2, 2, 2]"));
    ar_config b = tiny(3, SETS("model.residual.block_size=2"));
    snprintf(what, sizeof what, "%s: [2,2,2] vs block_size 2", mixer);
    expect_same_bits(&a, &b, what);
    /* S does not divide L: block_size 4 at L = 6 is blocks {1..4}, {5, 6} */
    a = tiny(3, SETS("model.residual.block_sizes=[4, 2]"));
    b = tiny(3, SETS("model.residual.block_size=4"));
    snprintf(what, sizeof what, "%s: [4,2] vs block_size 4", mixer);
    expect_same_bits(&a, &b, what);
    /* L = 8, S = 3: {1..3}, {4..6}, {7, 8} */
    a = tiny(4, SETS("model.residual.block_sizes=[3,3,2]"));
    b = tiny(4, SETS("model.residual.block_size=3"));
    snprintf(what, sizeof what, "%s: [3,3,2] vs block_size 3", mixer);
    expect_same_bits(&a, &b, what);
    /* num_blocks 3 at L = 8 is S = ceil(8/3) = 3 */
    b = tiny(4, SETS("model.residual.num_blocks=3"));
    snprintf(what, sizeof what, "%s: [3,3,2] vs num_blocks 3", mixer);
    expect_same_bits(&a, &b, what);
}

Test(blocks, list_of_S_trains_as_block_size_S, .timeout = 300) { on_both_mixers(list_of_S); }

/* The ablation variants built on block (block-no-key-norm, heads) take the
 * list the same way: they run on the general mixer. */
Test(blocks, flagged_block_variants_with_a_list_of_S, .timeout = 300)
{
    ar_config a = tiny(3, SETS("model.residual.block_sizes=[4,2]", "model.residual.key_norm=false"));
    ar_config b = tiny(3, SETS("model.residual.block_size=4", "model.residual.key_norm=false"));
    expect_same_bits(&a, &b, "block-no-key-norm [4,2] vs S 4");
    a = tiny(3, SETS("model.residual.block_sizes=[2,2,2]", "model.residual.heads=2", "model.residual.score=sigmoid"));
    b = tiny(3, SETS("model.residual.block_size=2", "model.residual.heads=2", "model.residual.score=sigmoid"));
    expect_same_bits(&a, &b, "heads 2, sigmoid: [2,2,2] vs S 2");
}

static void list_of_ones(const char *mixer)
{
    char what[160];
    ar_config a = tiny(3, SETS("model.residual.block_sizes=[1,1,1,1,1,1]"));
    ar_config full = tiny(3, SETS("model.residual.kind=full"));
    ar_config s1 = tiny(3, SETS("model.residual.block_size=1"));
    snprintf(what, sizeof what, "%s: [1,1,1,1,1,1] vs full", mixer);
    expect_same_bits(&a, &full, what);
    snprintf(what, sizeof what, "%s: block_size 1 vs full", mixer);
    expect_same_bits(&s1, &full, what);
}

Test(blocks, list_of_ones_trains_as_full, .timeout = 300) { on_both_mixers(list_of_ones); }

/* Guards the tests above against comparing a thing with itself: an uneven
 * list is a different model from every S. */
Test(blocks, uneven_list_is_a_different_model, .timeout = 120)
{
    ar_config a = tiny(3, SETS("model.residual.block_sizes=[1,3,2]"));
    const char *others[] = {"model.residual.block_size=1", "model.residual.block_size=2", "model.residual.block_size=3",
                            "model.residual.block_sizes=[3,1,2]"};
    for (int i = 0; i < 4; i++) {
        ar_config b = tiny(3, SETS(others[i]));
        cr_expect(!train_same_bits(&a, &b, others[i]), "[1,3,2] trains as %s", others[i]);
    }
}

/* ---- gradients ---- */

Test(blocks, uneven_list_matches_finite_differences, .timeout = 300)
{
    /* L = 6, at the step of every model check (h = 1e-2) */
    const char *lists[] = {"model.residual.block_sizes=[1, 3, 2]", "model.residual.block_sizes=[3, 1, 2]",
                           "model.residual.block_sizes=[2, 4]"};
    for (int i = 0; i < 3; i++) {
        ar_config c = tiny(3, SETS(lists[i]));
        tu_model_fd_check(c.model, lists[i], NULL);
    }
    /* L = 8, blocks {1}, {2,3,4}, {5,6}, {7,8}.  This deeper random model
     * curves more: at h = 1e-2 the central difference of mixer 4's query is
     * 8% off, at 3e-3 0.8%, at 1e-3 0.1% (truncation, O(h^2), the same on
     * both mixers), so it is checked at h = 3e-3: truncation within 2e-2 of
     * g.u, rounding 50 u / h (tests/modelutil.h). */
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    tu_model_fd_check_step(c.model, "block_sizes [1,3,2,2], two-phase", 3e-3f);
    /* chunks of 3 mixers cut across the blocks: shared prefixes of 1, 2 and 3 */
    int saved = ar_depth_chunk;
    ar_depth_chunk = 3;
    tu_model_fd_check_step(c.model, "block_sizes [1,3,2,2], chunks of 3", 3e-3f);
    ar_depth_chunk = saved;
    saved = ar_depth_general;
    ar_depth_general = 1;
    tu_model_fd_check_step(c.model, "block_sizes [1,3,2,2], general mixer", 3e-3f);
    ar_depth_general = saved;
    c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]", "model.residual.score=sigmoid",
                     "model.residual.key_norm=false"));
    tu_model_fd_check_step(c.model, "block_sizes [1,3,2,2], sigmoid, no key norm", 3e-3f);
    c = tiny(4, SETS("model.residual.block_sizes=[5, 1, 2]"));
    c.model.recompute = AR_RECOMPUTE_SUBLAYER;
    tu_model_fd_check_step(c.model, "block_sizes [5,1,2], recompute sublayer", 3e-3f);
}

/* The two-phase schedule's chunking changes an uneven list's loss, logits
 * and gradients only by rounding, and the general mixer agrees with it to
 * the same rounding: tu_model_mixing_bound. */
Test(blocks, uneven_list_independent_of_the_depth_chunk, .timeout = 120)
{
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    int saved = ar_depth_chunk, saved_general = ar_depth_general;
    ar_depth_chunk = 1;
    ar_model *a = create(&c);
    tu_model_randomize(a, 9);
    for (int k = 0; k < 4; k++) {
        ar_depth_chunk = k < 3 ? 2 + k : 4;
        ar_depth_general = k == 3;
        ar_model *b = create(&c);
        memcpy(b->params, a->params, a->pt.total * sizeof(float));
        double d = tu_model_diff(a, b, 2), tol = tu_model_mixing_bound(a, 2);
        cr_expect(d < tol, "chunk %d, general %d: off by %g from chunk 1 (bound %g)", ar_depth_chunk,
                  ar_depth_general, d, tol);
        ar_model_free(b);
    }
    ar_depth_chunk = saved;
    ar_depth_general = saved_general;
    ar_model_free(a);
}

/* ---- sources, rows and the mixing matrix, by hand ---- */

/* L = 8, block_sizes [1, 3, 2, 2]: blocks b_1 = {1}, b_2 = {2, 3, 4},
 * b_3 = {5, 6}, b_4 = {7, 8}.  Mixer m's sources as (first, last, block,
 * partial); -1 ends a list. */
static const int WANT[9][6][4] = {
    /* m = 1: the first of block 1 */
    {{0, 0, 0, 0}, {-1}},
    /* m = 2: the first of block 2 */
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {-1}},
    /* m = 3, 4: inside block 2, with its partial sum */
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 2, 2, 1}, {-1}},
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 3, 2, 1}, {-1}},
    /* m = 5, 6: block 3 */
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 4, 2, 0}, {-1}},
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 4, 2, 0}, {5, 5, 3, 1}, {-1}},
    /* m = 7, 8: block 4 */
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 4, 2, 0}, {5, 6, 3, 0}, {-1}},
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 4, 2, 0}, {5, 6, 3, 0}, {7, 7, 4, 1}, {-1}},
    /* m = 9: h_out, every block complete (none is partial: the list says
     * where each block ends) */
    {{0, 0, 0, 0}, {1, 1, 1, 0}, {2, 4, 2, 0}, {5, 6, 3, 0}, {7, 8, 4, 0}, {-1}},
};

static int want_n(int m)
{
    int n = 0;
    while (WANT[m - 1][n][0] >= 0)
        n++;
    return n;
}

Test(blocks, source_lists_by_hand)
{
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    ar_source src[16];
    for (int m = 1; m <= 9; m++) {
        int n = ar_mixer_sources(&c.model, m, src);
        cr_assert_eq(n, want_n(m), "mixer %d: %d sources, want %d", m, n, want_n(m));
        cr_expect_eq(ar_mixer_sources(&c.model, m, NULL), n);
        for (int s = 0; s < n; s++) {
            const int *w = WANT[m - 1][s];
            cr_expect(src[s].first == w[0] && src[s].last == w[1] && src[s].block == w[2] && src[s].partial == w[3],
                      "mixer %d source %d: (%d, %d, block %d, partial %d), want (%d, %d, %d, %d)", m, s, src[s].first,
                      src[s].last, src[s].block, src[s].partial, w[0], w[1], w[2], w[3]);
        }
    }
    /* the layout itself */
    ar_blocks b;
    ar_blocks_of_cfg(&b, &c.model);
    int start[] = {0, 1, 2, 5, 7, 9}, of[] = {0, 1, 2, 2, 2, 3, 3, 4, 4};
    cr_assert_eq(b.nb, 4);
    cr_expect(memcmp(b.start, start, sizeof start) == 0);
    cr_expect(memcmp(b.of, of, sizeof of) == 0);
    cr_expect_eq(b.last_partial, 0);
    ar_blocks_free(&b);
    /* block_size 3 at L = 8 marks its shorter last block partial in h_out's list */
    c = tiny(4, SETS("model.residual.block_size=3"));
    cr_assert_eq(ar_mixer_sources(&c.model, 9, src), 4);
    cr_expect(src[3].first == 7 && src[3].last == 8 && src[3].block == 3 && src[3].partial == 1);
}

/* The residual schemes read exactly those rows: source i of mixer m is
 * P_last (the embedding for b_0), on both mixers. */
static void rows_of(const char *mixer)
{
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    ar_model *m = create(&c);
    ar_residual *r = m->res;
    const ar_residual_vt *v = r->vt;
    for (int l = 1; l <= 9; l++) {
        cr_assert_eq(v->n_sources(r, l), want_n(l), "%s: mixer %d has %d sources", mixer, l, v->n_sources(r, l));
        for (int s = 0; s < want_n(l); s++) {
            int last = WANT[l - 1][s][1];
            const float *want = last == 0 ? v->embed_out(r) : v->output_buf(r, last);
            cr_expect_eq(v->source(r, l, s), want, "%s: mixer %d source %d is not P_%d", mixer, l, s, last);
        }
    }
    ar_model_free(m);
}

Test(blocks, residual_rows_by_hand) { on_both_mixers(rows_of); }

/* With weights abar_{m,s} = m + s/10 (distinct everywhere), M[m][i] is the
 * weight of the source holding v_i: by hand, owner[m][i] below. */
Test(blocks, mixing_matrix_by_hand)
{
    static const int owner[9][9] = {
        {0},
        {0, 1},
        {0, 1, 2},
        {0, 1, 2, 2},
        {0, 1, 2, 2, 2},
        {0, 1, 2, 2, 2, 3},
        {0, 1, 2, 2, 2, 3, 3},
        {0, 1, 2, 2, 2, 3, 3, 4},
        {0, 1, 2, 2, 2, 3, 3, 4, 4},
    };
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    int L = 8;
    ar_depth_attn w;
    ar_depth_attn_alloc(&w, L);
    for (int m = 1; m <= L + 1; m++) {
        w.n[m - 1] = want_n(m);
        for (int s = 0; s < want_n(m); s++)
            ar_depth_attn_row(&w, m)[s] = m + s / 10.0;
    }
    double *M = malloc(sizeof(double) * (L + 1) * (L + 1));
    ar_err e = {{0}};
    cr_assert_eq(ar_mixing_matrix(&c.model, NULL, &w, M, &e), 0, "%s", e.msg);
    for (int m = 1; m <= L + 1; m++)
        for (int i = 0; i <= L; i++) {
            double got = M[(size_t)(m - 1) * (L + 1) + i];
            if (i >= m)
                cr_expect(isnan(got), "M[%d][%d] = %g, want NaN (v_%d comes later)", m, i, got, i);
            else
                cr_expect_eq(got, m + owner[m - 1][i] / 10.0, "M[%d][%d] = %g, want the weight of source %d", m, i,
                             got, owner[m - 1][i]);
        }
    /* weights of another layout's length are refused */
    w.n[4] = 4;
    cr_expect_neq(ar_mixing_matrix(&c.model, NULL, &w, M, &e), 0);
    free(M);
    ar_depth_attn_free(&w);
}

/* ---- the pipeline plan of an uneven list, by hand ---- */

static void expect_rows(const ar_pipe_plan *p, int c, const int *want, int n)
{
    cr_assert_eq(p->nsend[c], n, "transition %d sends %d rows, want %d", c, p->nsend[c], n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(p->send[c][i], want[i], "transition %d row %d: %d, want %d", c, i, p->send[c][i], want[i]);
}

Test(blocks, pipeline_plan_by_hand)
{
    /* L = 8, blocks {1}, {2,3,4}, {5,6}, {7,8}; P = 2, V = 2: chunks 1-2,
     * 3-4, 5-6, 7-8 on stages 0, 1, 0, 1.  Live rows after chunk c: the
     * block ends up to hi[c] (0, 1, 4, 6) and hi[c] itself. */
    ar_config c = tiny(4, SETS("model.residual.block_sizes=[1, 3, 2, 2]"));
    ar_blocks b;
    ar_blocks_of_cfg(&b, &c.model);
    ar_pipe_plan p;
    ar_err e = {{0}};
    cr_assert_eq(ar_pipe_plan_make_blocks(&p, &b, 0, 2, 2, 2, 0, AR_PIPE_1F1B, &e), 0, "%s", e.msg);
    cr_expect_eq(p.S, 0, "blocks of different sizes have no one S");
    /* naive: the whole history each time */
    expect_rows(&p, 0, (int[]){0, 1, 2}, 3);
    expect_rows(&p, 1, (int[]){0, 1, 4}, 3);
    expect_rows(&p, 2, (int[]){0, 1, 4, 6}, 4);
    cr_expect_eq(ar_pipe_rows_per_mb(&p), 10);
    cr_expect_eq(ar_pipe_eq7(&p), 4 * 3 / 2.0 * (4 / 4.0));
    int complete;
    cr_expect(ar_pipe_row_block(&p, 3, &complete) == 2 && !complete);
    cr_expect(ar_pipe_row_block(&p, 4, &complete) == 2 && complete);
    cr_expect(ar_pipe_row_block(&p, 1, &complete) == 1 && complete);
    ar_pipe_plan_free(&p);
    /* cached: stage 0 keeps 0, 1, 2 from chunk 0; stage 1 keeps 0..4 */
    cr_assert_eq(ar_pipe_plan_make_blocks(&p, &b, 0, 2, 2, 2, 1, AR_PIPE_1F1B, &e), 0, "%s", e.msg);
    expect_rows(&p, 0, (int[]){0, 1, 2}, 3);
    expect_rows(&p, 1, (int[]){4}, 1);
    expect_rows(&p, 2, (int[]){6}, 1);
    ar_pipe_plan_free(&p);
    ar_blocks_free(&b);
    /* and the uniform case through the same path keeps its S */
    ar_blocks_uniform(&b, 8, 3);
    cr_assert_eq(ar_pipe_plan_make_blocks(&p, &b, 0, 2, 1, 2, 0, AR_PIPE_1F1B, &e), 0, "%s", e.msg);
    cr_expect_eq(p.S, 3);
    expect_rows(&p, 0, (int[]){0, 3, 4}, 3);
    ar_pipe_plan_free(&p);
    ar_blocks_free(&b);
}

/* ---- a run with a list: its config, checkpoint and exact resume ---- */

Test(blocks, run_resumes_bit_exact_with_its_list, .timeout = 180)
{
    tu_resume x;
    tu_resume_init(&x);
    ar_config c = tiny(3, SETS("model.residual.block_sizes=[1, 3, 2]"));
    snprintf(c.data.train, sizeof c.data.train, "%s", x.corpus);
    c.data.val_fraction = 0.1;
    c.train.steps = 10;
    c.train.batch_size = 4;
    c.train.grad_accum = 2;
    c.train.warmup = 2;
    c.train.eval_every = 0;
    c.train.eval_windows = 4;
    c.train.save_every = 0;
    c.train.log_every = 1;
    c.train.threads = 2;
    ar_train_result r;
    ar_err e = {{0}};
    tu_resume_straight(&x, &c, &r);

    /* the saved config and the checkpoint's carry the list */
    size_t n;
    char *yaml = tu_read_file(tu_path(x.a, "config.yaml"), &n);
    cr_assert(yaml);
    cr_expect(strstr(yaml, "    block_sizes: [1, 3, 2]\n") && !strstr(yaml, "block_size:"), "%s", yaml);
    free(yaml);
    ar_config back;
    long step;
    cr_assert_eq(ar_ckpt_read_config(tu_path(x.a, "model.safetensors"), &back, &step, &e), 0, "%s", e.msg);
    cr_expect_eq(back.model.residual.block_sizes.n, 3);
    cr_expect(back.model.residual.block_sizes.v[0] == 1 && back.model.residual.block_sizes.v[1] == 3 &&
              back.model.residual.block_sizes.v[2] == 2);
    cr_expect_eq(back.model.residual.block_size, 0);

    tu_resume_stop(&x, &c, 5, &r);
    cr_assert(r.interrupted);
    cr_assert_eq(tu_resume_continue(&x, &c, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.step, 10);
    /* bit for bit by construction: the checkpoint holds the weights, the
     * optimiser's moments and the data position exactly, and the resumed
     * steps run the same code on the same shapes and 2 threads */
    tu_resume_expect_same_weights(&x);

    /* resuming with other blocks is refused: the model differs */
    ar_config other = c;
    other.model.residual.block_sizes.v[0] = 2;
    other.model.residual.block_sizes.v[1] = 2;
    cr_expect_neq(tu_resume_continue(&x, &other, &r, &e), 0, "resumed with blocks [2, 2, 2]");
    cr_expect(strstr(e.msg, "model section differs"), "%s", e.msg);
}
