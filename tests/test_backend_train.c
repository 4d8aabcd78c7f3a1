/* Whole training runs on two backends: backend A = the CPU backend, backend
 * B = the CUDA backend.  Tiny baseline, full and block models train 20 steps
 * through ar_train (run/train.h) from the same seed and data on each; the
 * gradients of step 1 (per tensor), the per-step losses and gradient norms,
 * the final validation loss and the final checkpoint's tensors must agree.
 * Then each run resumes on the other backend for 5 more steps (the
 * checkpoints are the same files whichever backend wrote them), and the two
 * continuations must agree too.
 *
 * fp32 bounds: step 1 starts from identical weights and batches, so its
 * loss differs only by the forward's rounding (1e-5 relative), its gradient
 * only by the backward's (||a - b|| <= 1e-3 ||a|| per tensor: this catches
 * a wrong backward of a tensor that moves the total norm too little to
 * see).  Later steps add the optimizer's amplification of rounding
 * differences (Adam divides by sqrt(v)): 1e-3 relative for losses, 1e-2 for
 * gradient norms, and per checkpoint tensor ||a - b|| <= 2e-2 ||a||
 * (weights move by ~lr = 1e-2 a step; a wrong gradient or a scrambled
 * tensor is off by O(1)).  A CPU run whose matrix products carry 1e-6
 * relative noise stays within 2e-6 (gradients), 2e-7 (losses) and 1e-5
 * (checkpoints) of the exact one: the margins are wide.
 *
 * bf16 products on B (full_bf16) against fp32 on A: every product's inputs
 * rounded to 2^-9; CPU runs with 4e-3 noise in their products reach 2e-4
 * (step-1 gradient norm), 5e-3 (step-1 gradients), 2e-3 (losses) and 0.1
 * (gradient norms, checkpoints): bounds 1e-2, 5e-2, 2e-2, 0.3.
 *
 * Without a usable CUDA backend every test skips with ar_backend_cuda's
 * reason.  AR_TEST_BACKEND_B=cpu makes B the CPU backend too, which checks
 * this harness without a GPU (meson's backend_train_cpu_b runs it so): the
 * two runs are then the same code on the same shapes with the same thread
 * count (train.threads 2, one process), bit-identical by construction, and
 * every bound below is 0.
 *
 * Covers: lib/cuda/ through run/train.c, and checkpoints (run/checkpoint.c)
 * across backends. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "lib/backend.h"
#include "lib/model.h"
#include "run/train.h"
#include "testutil.h"

static const ar_backend *A, *B;
static char b_kind, why[2048];

static void setup(void)
{
    A = ar_backend_cpu();
    B = tu_backend_b(&b_kind, why, sizeof why);
}

TestSuite(backend_train, .init = setup);

#define STEPS 20
#define MORE 5

#define MAXP 256

/* per-step loss and gradient norm from the progress callback (log_every 1);
 * step 1's gradient, tensor by tensor, from the gradient hook */
typedef struct {
    double loss[STEPS + MORE + 1], gnorm[STEPS + MORE + 1];
    int seen;
    float *g1;
    int np;
    char name[MAXP][96];
    size_t off[MAXP], numel[MAXP];
} trace;

static void grads_of_step_1(struct ar_model *m, long step, void *ud)
{
    trace *t = ud;
    if (step != 1 || t->g1)
        return;
    t->g1 = malloc(m->pt.total * sizeof(float));
    m->be->download(t->g1, m->grads, m->pt.total * sizeof(float));
    t->np = m->pt.n < MAXP ? m->pt.n : MAXP;
    for (int i = 0; i < t->np; i++) {
        snprintf(t->name[i], sizeof t->name[i], "%s", m->pt.p[i].name);
        t->off[i] = m->pt.p[i].offset;
        t->numel[i] = m->pt.p[i].numel;
    }
}

/* ||a - b|| / ||a|| in double, and the worst element */
static double rel_norm(const float *a, const float *b, size_t n, size_t *worst)
{
    double num = 0, den = 0, w = -1;
    *worst = 0;
    for (size_t k = 0; k < n; k++) {
        double dd = (double)a[k] - b[k];
        num += dd * dd, den += (double)a[k] * a[k];
        if (fabs(dd) > w || !isfinite(dd))
            w = isfinite(dd) ? fabs(dd) : INFINITY, *worst = k;
    }
    return isfinite(num) ? sqrt(num) / fmax(sqrt(den), 1e-30) : INFINITY;
}

static void compare_step1_grads(const char *what, const trace *ta, const trace *tb, double bound)
{
    cr_assert(ta->g1 && tb->g1, "%s: no gradient of step 1", what);
    cr_assert_eq(ta->np, tb->np, "%s: %d tensors on A, %d on B", what, ta->np, tb->np);
    for (int i = 0; i < ta->np; i++) {
        cr_assert(strcmp(ta->name[i], tb->name[i]) == 0 && ta->numel[i] == tb->numel[i]);
        const float *a = ta->g1 + ta->off[i], *b = tb->g1 + tb->off[i];
        size_t wi;
        double r = rel_norm(a, b, ta->numel[i], &wi);
        cr_expect(r <= bound,
                  "%s: step 1 gradient of '%s' (%zu values): ||A-B||/||A|| = %.3g > %g; worst [%zu]: "
                  "A %.9g, B %.9g",
                  what, ta->name[i], ta->numel[i], r, bound, wi, a[wi], b[wi]);
    }
}

static void record(const ar_progress *p, void *ud)
{
    trace *t = ud;
    if (p->step >= 1 && p->step <= STEPS + MORE) {
        t->loss[p->step] = p->loss;
        t->gnorm[p->step] = p->grad_norm;
        t->seen++;
    }
}

/* A --set applied after the kind (NULL: none), for the cases below that
 * need more than a kind. */
static const char *extra_set;

static ar_config tiny(const char *corpus, ar_res_kind kind)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 24;
    c.model.n_layer = 3;
    c.model.n_head = 2;
    c.model.d_ff = 40;
    c.model.seq_len = 16;
    c.model.residual.kind = kind;
    c.model.residual.block_size = kind == AR_RES_BLOCK ? 2 : 0;
    c.model.residual.num_blocks = 0;
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.1;
    c.train.steps = STEPS;
    c.train.batch_size = 4;
    c.train.warmup = 3;
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.eval_every = 0;
    c.train.eval_windows = 8;
    c.train.save_every = 0;
    c.train.log_every = 1;
    c.train.threads = 2;
    ar_err e = {{0}};
    if (extra_set)
        cr_assert_eq(ar_config_set(&c, extra_set, &e), 0, "%s", e.msg);
    return c;
}

static void train(const ar_backend *be, const ar_config *c, const char *dir, int resume, trace *t,
                  ar_train_result *r)
{
    ar_train_opts o = {.out_dir = dir, .resume = resume, .be = be, .progress = record,
                       .grad_hook = grads_of_step_1, .ud = t};
    ar_err e = {{0}};
    cr_assert_eq(ar_train(c, &o, r, &e), 0, "%s run in '%s': %s", be == A ? "A" : "B", dir, e.msg);
}

static int rel_ok(double a, double b, double rtol)
{
    return isfinite(a) && isfinite(b) && fabs(a - b) <= rtol * fabs(a);
}

/* relative bounds (see the top of the file) */
typedef struct {
    double loss1, gnorm1, grad1; /* step 1: loss, gradient norm, gradients per tensor */
    double loss, gnorm, ckpt;    /* later steps; checkpoint tensors */
} bounds;

static const bounds FP32 = {1e-5, 1e-4, 1e-3, 1e-3, 1e-2, 2e-2};
static const bounds BF16 = {1e-2, 1e-2, 5e-2, 2e-2, 0.3, 0.3};

/* losses and gradient norms of steps s0..s1 */
static void compare_traces(const char *what, const trace *ta, const trace *tb, int s0, int s1,
                           bounds bd)
{
    for (int s = s0; s <= s1; s++) {
        double lt = s == 1 ? bd.loss1 : bd.loss, gt = s == 1 ? bd.gnorm1 : bd.gnorm;
        cr_expect(rel_ok(ta->loss[s], tb->loss[s], lt), "%s: step %d: loss A %.9g, B %.9g (rel %g)", what,
                  s, ta->loss[s], tb->loss[s], lt);
        cr_expect(rel_ok(ta->gnorm[s], tb->gnorm[s], gt), "%s: step %d: grad norm A %.9g, B %.9g (rel %g)",
                  what, s, ta->gnorm[s], tb->gnorm[s], gt);
    }
}

/* The model tensors of two checkpoints: same names, dtypes and shapes, and
 * values within ||a - b|| <= bound ||a|| per tensor. */
static void compare_checkpoints(const char *what, const char *da, const char *db, double bound)
{
    ar_st_file fa, fb;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&fa, tu_path(da, "model.safetensors"), &e), 0, "%s", e.msg);
    cr_assert_eq(ar_st_read(&fb, tu_path(db, "model.safetensors"), &e), 0, "%s", e.msg);
    cr_expect_eq(fa.n, fb.n, "%s: %d tensors on A, %d on B", what, fa.n, fb.n);
    for (int i = 0; i < fa.n; i++) {
        const ar_st_tensor *ta = &fa.t[i], *tb = ar_st_find(&fb, ta->name);
        cr_expect(tb != NULL, "%s: '%s' missing from B's checkpoint", what, ta->name);
        if (!tb)
            continue;
        cr_expect(strcmp(ta->dtype, "F32") == 0 && strcmp(tb->dtype, "F32") == 0,
                  "%s: '%s': dtypes %s and %s", what, ta->name, ta->dtype, tb->dtype);
        int same = ta->ndim == tb->ndim && ta->end - ta->begin == tb->end - tb->begin;
        for (int k = 0; same && k < ta->ndim; k++)
            same = ta->shape[k] == tb->shape[k];
        cr_expect(same, "%s: '%s' has different shapes on A and B", what, ta->name);
        if (!same || strcmp(ta->dtype, "F32") != 0)
            continue;
        size_t n = (ta->end - ta->begin) / sizeof(float);
        float *a = malloc(n * sizeof(float) + 1), *b = malloc(n * sizeof(float) + 1);
        memcpy(a, fa.data + ta->begin, n * sizeof(float));
        memcpy(b, fb.data + tb->begin, n * sizeof(float));
        size_t wi;
        double r = rel_norm(a, b, n, &wi);
        cr_expect(r <= bound,
                  "%s: tensor '%s' (%zu values): ||A-B||/||A|| = %.3g > %g; worst [%zu]: A %.9g, B %.9g",
                  what, ta->name, n, r, bound, wi, a[wi], b[wi]);
        free(a), free(b);
    }
    ar_st_free(&fa);
    ar_st_free(&fb);
}

/* A new temporary folder with a corpus and the paths of two runs in it,
 * named na and nb */
static void corpus_and_runs(char corpus[2048], char da[4200], const char *na, char db[4200], const char *nb)
{
    const char *dir = tu_tmpdir();
    snprintf(corpus, 2048, "%s/corpus.txt", dir);
    snprintf(da, 4200, "%s/%s", dir, na);
    snprintf(db, 4200, "%s/%s", dir, nb);
    tu_write_corpus_lines(corpus, 300, 1);
}

static void compare_runs(ar_res_kind kind, int bf16)
{
    tu_need_backend_b(B, b_kind, why);
    /* the CPU backend (AR_TEST_BACKEND_B=cpu) has no bf16 path: -1, fp32 */
    int rc = B->set_bf16(bf16);
    cr_assert(rc == 0 || (bf16 && B == A), "set_bf16(%d) failed on '%s'", bf16, B->name);
    bounds bd = B == A ? (bounds){0, 0, 0, 0, 0, 0} : bf16 ? BF16 : FP32;
    char corpus[2048], ra[4200], rb[4200];
    corpus_and_runs(corpus, ra, "a", rb, "b");
    ar_config c = tiny(corpus, kind);
    char name[160];
    snprintf(name, sizeof name, "%s%s%s%s", ar_res_kind_name(kind), extra_set ? " " : "", extra_set ? extra_set : "",
             bf16 ? " (bf16 on B)" : "");
    trace ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    ar_train_result resa, resb;
    train(A, &c, ra, 0, &ta, &resa);
    train(B, &c, rb, 0, &tb, &resb);
    cr_assert_eq(ta.seen, STEPS, "%s: A reported %d steps", name, ta.seen);
    cr_assert_eq(tb.seen, STEPS, "%s: B reported %d steps", name, tb.seen);
    cr_expect_eq(resa.skipped + resb.skipped, 0, "%s: steps skipped (A %ld, B %ld)", name, resa.skipped,
                 resb.skipped);
    compare_step1_grads(name, &ta, &tb, bd.grad1);
    compare_traces(name, &ta, &tb, 1, STEPS, bd);
    cr_expect(rel_ok(resa.final_val_loss, resb.final_val_loss, bd.loss),
              "%s: final val loss A %.9g, B %.9g", name, resa.final_val_loss, resb.final_val_loss);
    compare_checkpoints(name, ra, rb, bd.ckpt);

    /* each checkpoint resumes on the other backend: A's run continues on B,
     * B's on A, MORE steps each */
    c.train.steps = STEPS + MORE;
    train(B, &c, ra, 1, &ta, &resa);
    train(A, &c, rb, 1, &tb, &resb);
    cr_assert_eq(resa.step, STEPS + MORE);
    cr_assert_eq(resb.step, STEPS + MORE);
    char what[224];
    snprintf(what, sizeof what, "%s resumed on the other backend", name);
    compare_traces(what, &ta, &tb, STEPS + 1, STEPS + MORE, bd);
    compare_checkpoints(what, ra, rb, bd.ckpt);
    free(ta.g1), free(tb.g1);
    B->set_bf16(0);
}

Test(backend_train, baseline, .timeout = 300) { compare_runs(AR_RES_BASELINE, 0); }
Test(backend_train, full, .timeout = 300) { compare_runs(AR_RES_FULL, 0); }
Test(backend_train, block, .timeout = 300) { compare_runs(AR_RES_BLOCK, 0); }
Test(backend_train, full_bf16, .timeout = 300) { compare_runs(AR_RES_FULL, 1); }
/* the residual rows in bf16 storage: the baseline's running sum, and
 * with blocks of 2 the blocks' */
Test(backend_train, baseline_bf16, .timeout = 300) { compare_runs(AR_RES_BASELINE, 1); }
Test(backend_train, block_bf16, .timeout = 300) { compare_runs(AR_RES_BLOCK, 1); }
/* blocks of different sizes (L = 6) */
Test(backend_train, block_sizes_uneven, .timeout = 300)
{
    extra_set = "model.residual.block_sizes=[1, 3, 2]";
    compare_runs(AR_RES_BLOCK, 0);
}

/* ||a - b|| <= 2e-2 ||a|| for A's n floats at pa and B's n bf16 at pb */
static void expect_stored_close(const float *pa, const float *pb, size_t n, const char *what, int recompute)
{
    float *a = malloc(n * sizeof *a);
    uint16_t *h = malloc(n * sizeof *h);
    A->download(a, pa, n * sizeof *a);
    B->download(h, pb, n * sizeof *h);
    double d2 = 0, a2 = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float b;
        memcpy(&b, &u, sizeof b);
        d2 += ((double)a[i] - b) * ((double)a[i] - b), a2 += (double)a[i] * a[i];
    }
    cr_expect(a2 > 0 && sqrt(d2) <= 2e-2 * sqrt(a2), "%s%s: ||a - b|| = %.3g of ||a|| = %.3g", what,
              recompute ? " (recompute)" : "", sqrt(d2), sqrt(a2));
    free(a), free(h);
}

/* Under bf16 products the model keeps its sublayers' normalised inputs
 * and inner activations (xn, q, k, v, y; mxn, gate, up, act) and Block
 * AttnRes its residual rows P_0..P_L in bf16 storage (lib/backend.h,
 * alloc_act; lib/model.c, lib/residual_depth.c), and so does the
 * baseline (lib/residual_sum.c): after one forward from
 * the same weights and tokens, B's bytes of each, read as bf16, are A's
 * fp32 values to within the bf16 run's error, ||a - b|| <= 2e-2 ||a||
 * (every product's inputs and these values rounded to 2^-8; a buffer
 * still in fp32, read as bf16, gives values of no relation to A's), and
 * the recomputing model (cfg.recompute sublayer) keeps its one set so
 * too. */
static void internals_storage_case(ar_res_kind kind, int recompute)
{
    tu_need_backend_b(B, b_kind, why);
    if (B == A || B->set_bf16(1) != 0 || !B->alloc_act)
        cr_skip_test("'%s' has no bf16 storage", B->name);
    ar_config c = tiny("unused", kind);
    c.model.recompute = recompute ? AR_RECOMPUTE_SUBLAYER : AR_RECOMPUTE_NONE;
    int nb = 2, N = nb * c.model.seq_len, F = c.model.d_ff, d = c.model.d_model;
    int32_t tok[64], tgt[64];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 7 + 3) % c.model.vocab, tgt[i] = (i * 5 + 1) % c.model.vocab;
    ar_model *ma, *mb;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&ma, &c.model, A, nb, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_model_create(&mb, &c.model, B, nb, &e), 0, "%s", e.msg);
    ar_model_init(ma, 5), ar_model_init(mb, 5);
    /* the last block's forward leaves the (shared, under recompute) set holding its values */
    ar_model_forward(ma, tok, tgt, nb, NULL);
    ar_model_forward(mb, tok, tgt, nb, NULL);
    int k = c.model.n_layer - 1;
    const ar_block_act *xa = &ma->act[k], *xb = &mb->act[k];
    const char *names[] = {"xn", "q", "k", "v", "y", "mxn", "gate", "up", "act"};
    float *bufa[] = {xa->xn, xa->q, xa->k, xa->v, xa->y, xa->mxn, xa->gate, xa->up, xa->act};
    float *bufb[] = {xb->xn, xb->q, xb->k, xb->v, xb->y, xb->mxn, xb->gate, xb->up, xb->act};
    char what[64];
    for (int t = 0; t < 9; t++) {
        snprintf(what, sizeof what, "block %d's %s", k, names[t]);
        expect_stored_close(bufa[t], bufb[t], (size_t)N * (t < 6 ? d : F), what, recompute);
    }
    for (int q = 0; q <= 2 * c.model.n_layer; q++) {
        snprintf(what, sizeof what, "residual row P_%d", q);
        expect_stored_close(ma->res->vt->row(ma->res, q), mb->res->vt->row(mb->res, q), (size_t)N * d, what,
                            recompute);
    }
    ar_model_free(ma), ar_model_free(mb);
    B->set_bf16(0);
}

Test(backend_train, internals_in_bf16_storage) { internals_storage_case(AR_RES_BLOCK, 0); }
Test(backend_train, internals_in_bf16_storage_recomputed) { internals_storage_case(AR_RES_BLOCK, 1); }
Test(backend_train, internals_in_bf16_storage_baseline) { internals_storage_case(AR_RES_BASELINE, 0); }

/* Every residual scheme and option under bf16: one forward and backward of
 * each on B with bf16 products and storage against A in fp32, from the same
 * weights and tokens: the loss within the bf16 run's step-1 bound (BF16:
 * 1e-2) and all gradients within its 5e-2 (||a - b|| <= 5e-2 ||a||).  An
 * op given a buffer of a storage it does not take stops the process, so
 * this is also the check that no scheme hands one over. */
static const char *const bf16_variants[][4] = {
    {"model.residual.kind=baseline"},
    {"model.residual.kind=full"},
    {"model.residual.kind=block", "model.residual.block_size=2"},
    {"model.residual.kind=block", "model.residual.block_sizes=[1, 3, 2]", "model.residual.key_norm=false"},
    {"model.residual.kind=full", "model.residual.score=sigmoid"},
    {"model.residual.kind=full", "model.residual.query=input", "model.residual.query_norm=true"},
    {"model.residual.kind=block", "model.residual.block_size=2", "model.residual.heads=2"},
    {"model.residual.kind=static"},
    {"model.residual.kind=swa", "model.residual.window=2"},
    {"model.residual.kind=mhc"},
    {"model.residual.kind=denseformer"},
    {"model.residual.kind=rescaled"},
};

Test(backend_train, every_scheme_under_bf16, .timeout = 300)
{
    tu_need_backend_b(B, b_kind, why);
    if (B == A || B->set_bf16(1) != 0 || !B->alloc_act)
        cr_skip_test("'%s' has no bf16 storage", B->name);
    int32_t tok[64], tgt[64];
    for (size_t v = 0; v < sizeof bf16_variants / sizeof *bf16_variants; v++) {
        ar_config c = tiny("unused", AR_RES_BASELINE);
        char what[256] = "";
        ar_err e = {{0}};
        for (int k = 0; k < 4 && bf16_variants[v][k]; k++) {
            cr_assert_eq(ar_config_set(&c, bf16_variants[v][k], &e), 0, "%s", e.msg);
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", k ? " " : "", bf16_variants[v][k]);
        }
        int nb = 2, N = nb * c.model.seq_len;
        for (int i = 0; i < N; i++)
            tok[i] = (i * 7 + 3 + (int)v) % c.model.vocab, tgt[i] = (i * 5 + 1) % c.model.vocab;
        ar_model *ma, *mb;
        cr_assert_eq(ar_model_create(&ma, &c.model, A, nb, &e), 0, "%s: %s", what, e.msg);
        cr_assert_eq(ar_model_create(&mb, &c.model, B, nb, &e), 0, "%s: %s", what, e.msg);
        ar_model_init(ma, 11), ar_model_init(mb, 11);
        ar_model_zero_grad(ma), ar_model_zero_grad(mb);
        float scale = 1.0f / (float)N;
        double la = ar_model_forward_backward(ma, tok, tgt, nb, scale, NULL);
        double lb = ar_model_forward_backward(mb, tok, tgt, nb, scale, NULL);
        cr_expect(rel_ok(la, lb, BF16.loss1), "%s: loss A %.9g, B %.9g", what, la, lb);
        size_t n = ma->pt.total, wi;
        float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
        A->download(ga, ma->grads, n * sizeof *ga);
        B->download(gb, mb->grads, n * sizeof *gb);
        double r = rel_norm(ga, gb, n, &wi);
        cr_expect(r <= BF16.grad1, "%s: gradients ||a - b|| / ||a|| = %.3g; worst [%zu]: A %.9g, B %.9g", what, r,
                  wi, ga[wi], gb[wi]);
        free(ga), free(gb);
        ar_model_free(ma), ar_model_free(mb);
    }
    B->set_bf16(0);
}

/* The weights' bf16 copy (lib/backend.h, set_weight_copy): training in bf16
 * on B with it and with every product rounding its own operands gives the
 * same run bit for bit (the same roundings), which a copy left out of date
 * by an optimizer step, a checkpoint's upload or a zeroing would not.  d 64
 * and 64 tokens a micro-batch: every linear layer's product has both sides
 * >= 64, where the CUDA backend multiplies bf16 copies. */
static const ar_backend *b_real;
static void no_weight_copy(const float *p, size_t n)
{
    (void)p, (void)n;
    b_real->set_weight_copy(NULL, 0);
}

Test(backend_train, weight_copy_bit_identical, .timeout = 300)
{
    tu_need_backend_b(B, b_kind, why);
    int rc = B->set_bf16(1);
    cr_assert(rc == 0 || B == A, "set_bf16(1) failed on '%s'", B->name);
    ar_backend plain = *B;
    b_real = B;
    plain.set_weight_copy = no_weight_copy;
    char corpus[2048], rc_[4200], rp[4200];
    corpus_and_runs(corpus, rc_, "copy", rp, "plain");
    ar_config c = tiny(corpus, AR_RES_BLOCK);
    c.model.d_model = 64, c.model.n_head = 2, c.model.d_ff = 128, c.model.n_layer = 2;
    c.train.steps = 6;
    trace tc, tp;
    memset(&tc, 0, sizeof tc);
    memset(&tp, 0, sizeof tp);
    ar_train_result rcopy, rplain;
    train(B, &c, rc_, 0, &tc, &rcopy);
    train(&plain, &c, rp, 0, &tp, &rplain);
    /* and on from the checkpoints (an upload into the parameters) */
    c.train.steps = 8;
    train(B, &c, rc_, 1, &tc, &rcopy);
    train(&plain, &c, rp, 1, &tp, &rplain);
    for (int s = 1; s <= 8; s++) {
        cr_expect(tc.loss[s] == tp.loss[s], "step %d: loss %.9g with the weights' copy, %.9g without", s,
                  tc.loss[s], tp.loss[s]);
        cr_expect(tc.gnorm[s] == tp.gnorm[s], "step %d: grad norm %.9g with the weights' copy, %.9g without", s,
                  tc.gnorm[s], tp.gnorm[s]);
    }
    compare_checkpoints("with and without the weights' copy", rc_, rp, 0);
    free(tc.g1), free(tp.g1);
    B->set_bf16(0);
}
