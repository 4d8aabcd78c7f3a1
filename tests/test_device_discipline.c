/* Host code never touches device memory: every residual kind trains,
 * evaluates, saves, resumes and measures its depth statistics through
 * run/train.h and friends, and bench times its steps, on the guard backend
 * (guard_backend.h), whose buffers are unreadable outside its own ops.  A
 * direct access anywhere in lib/ (or a host pointer handed to an op) ends
 * the test with a message naming it.  The guard computes with the CPU
 * ops, so its runs must also equal the CPU backend's bit for bit, and
 * resuming on the other backend (another "device") must work from the same
 * checkpoint.
 *
 * Covers: every host-side caller of the backend: lib/ (model, residuals,
 * decode, mixing), run/ (train, eval, checkpoint, depth_stats) and
 * experiments/bench.c, run on tests/guard_backend.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/tokens.h"
#include "guard_backend.h"
#include "lib/decode.h"
#include "lib/mixing.h"
#include "experiments/bench.h"
#include "run/checkpoint.h"
#include "run/data.h"
#include "run/depth_stats.h"
#include "run/eval.h"
#include "run/train.h"
#include "testutil.h"

/* A model small enough that the guard's mprotect calls, not the math,
 * are the cost: 4 steps with an evaluation (collect_stats) every 2, and a
 * checkpoint with its figures at the end of each invocation. */
static ar_config tiny(const char *corpus, const char *const *sets)
{
    ar_config c;
    ar_config_defaults(&c);
    const char *base[] = {"model.d_model=16", "model.n_layer=2", "model.n_head=2", "model.d_ff=32",
                          "model.seq_len=8", "train.steps=4", "train.batch_size=2", "train.warmup=1",
                          "train.eval_every=2", "train.eval_windows=4", "train.save_every=0",
                          "train.log_every=1", "train.keep_checkpoints=1", "train.threads=1",
                          "data.val_fraction=0.2"};
    ar_err e = {{0}};
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        cr_assert_eq(ar_config_set(&c, base[i], &e), 0, "%s", e.msg);
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    for (int i = 0; sets[i]; i++)
        cr_assert_eq(ar_config_set(&c, sets[i], &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    return c;
}

static void train(const ar_config *c, const char *dir, const ar_backend *be, int resume, ar_train_result *r)
{
    ar_train_opts o = {.out_dir = dir, .resume = resume, .be = be};
    ar_err e = {{0}};
    cr_assert_eq(ar_train(c, &o, r, &e), 0, "%s (%s)", e.msg, dir);
    cr_assert_eq(r->step, c->train.steps);
}

/* eval with gradients, their file, and the depth statistics and mixing
 * matrix that plot-depth-attn draws, all on the guard */
static void evaluate(const char *run, const char *tmp)
{
    const ar_backend *g = guard_backend();
    ar_config cfg;
    ar_model *m = NULL;
    long step = 0;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_load_model(run, g, 4, &cfg, &m, &step, &e), 0, "%s", e.msg);
    ar_dataset ds;
    cr_assert_eq(ar_dataset_open(&ds, &cfg.data, &cfg.model, &e), 0, "%s", e.msg);
    ar_eval_result r;
    m->collect_stats = 1;
    cr_assert_eq(ar_evaluate_data(m, &ds.eval, 6, 1, &r, &e), 0, "%s", e.msg);
    m->collect_stats = 0;
    cr_expect(isfinite(r.loss) && r.loss > 0, "eval loss %g", r.loss);
    cr_assert_eq(ar_ckpt_save_grads(tu_path(tmp, "grads.safetensors"), m, &e), 0, "%s", e.msg);
    ar_res_kind k = cfg.model.residual.kind;
    ar_depth_attn w = {0};
    int measured = 0;
    if (ar_res_has_depth_attn(k)) {
        cr_assert_eq(ar_depth_attn_measure(m, &ds.eval, 4, &w, NULL, &e), 0, "%s", e.msg);
        measured = 1;
    }
    if (measured || !ar_mixing_needs_weights(k)) {
        int L1 = m->L + 1;
        double *M = calloc((size_t)L1 * L1, sizeof *M);
        cr_assert_eq(ar_mixing_matrix(&cfg.model, m, measured ? &w : NULL, M, &e), 0, "%s", e.msg);
        free(M);
    }
    if (measured)
        ar_depth_attn_free(&w);
    ar_dataset_close(&ds);
    ar_model_free(m);
}

/* Decoding with the key/value cache (lib/decode.c; ops rope_fwd_at,
 * attention_decode, matvec_fwd): a prefill with every row's logits, one
 * in steps of the chunk, then single tokens (matvec_fwd's case), on the
 * guard and on the CPU: the logits equal bit for bit. */
static void decode(const char *run)
{
    const ar_backend *be[2] = {guard_backend(), ar_backend_cpu()};
    const int32_t tok[8] = {10, 65, 32, 97, 98, 99, 100, 101};
    float *lg[2] = {NULL, NULL};
    size_t nl = 0;
    for (int b = 0; b < 2; b++) {
        ar_config cfg;
        ar_model *m = NULL;
        ar_decoder *dec = NULL;
        long step = 0;
        ar_err e = {{0}};
        cr_assert_eq(ar_ckpt_load_model(run, be[b], 1, &cfg, &m, &step, &e), 0, "%s", e.msg);
        int V = cfg.model.vocab, T = cfg.model.seq_len;
        cr_assert_eq(T, 8);
        cr_assert_eq(ar_decoder_create(&dec, m, 3, T, &e), 0, "%s", e.msg);
        nl = (size_t)(3 + 1 + 3) * V;
        lg[b] = calloc(nl, sizeof(float));
        cr_assert_eq(ar_decoder_step(dec, tok, 3, lg[b], 1, &e), 0, "%s", e.msg);
        cr_assert_eq(ar_decoder_feed(dec, tok + 3, 2, lg[b] + (size_t)3 * V, &e), 0, "%s", e.msg);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(ar_decoder_step(dec, tok + 5 + i, 1, lg[b] + (size_t)(4 + i) * V, 0, &e), 0, "%s", e.msg);
        cr_assert_eq(ar_decoder_pos(dec), 8);
        ar_decoder_free(dec);
        ar_model_free(m);
    }
    for (size_t i = 0; i < nl; i++)
        cr_assert(isfinite(lg[0][i]) && memcmp(&lg[0][i], &lg[1][i], sizeof(float)) == 0,
                  "decoding: logit %zu is %.9g on the guard, %.9g on the CPU", i, lg[0][i], lg[1][i]);
    free(lg[0]);
    free(lg[1]);
}

static void discipline(const char *const *sets)
{
    const char *tmp = tu_tmpdir();
    char corpus[2048], run[2100], ref[2100];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", tmp);
    snprintf(run, sizeof run, "%s/run", tmp);
    snprintf(ref, sizeof ref, "%s/ref", tmp);
    tu_write_corpus_lines(corpus, 60, 3);
    ar_config c = tiny(corpus, sets);
    const ar_backend *g = guard_backend(), *cpu = ar_backend_cpu();
    ar_train_result r, rc;

    /* fresh run: forward, backward, AdamW, two evaluations with
     * statistics, a checkpoint and its figures */
    train(&c, run, g, 0, &r);
    train(&c, ref, cpu, 0, &rc);
    cr_expect_eq(r.final_loss, rc.final_loss, "guard %.9g, cpu %.9g", r.final_loss, rc.final_loss);
    cr_expect_eq(r.final_val_loss, rc.final_val_loss, "guard %.9g, cpu %.9g", r.final_val_loss,
                 rc.final_val_loss);

    /* resume across backends both ways, and on the guard from a checkpoint
     * the guard wrote: the checkpoint belongs to no device */
    c.train.steps = 6;
    train(&c, run, cpu, 1, &r);
    train(&c, ref, g, 1, &rc);
    c.train.steps = 8;
    train(&c, run, g, 1, &r);
    train(&c, ref, cpu, 1, &rc);
    cr_expect_eq(r.final_loss, rc.final_loss, "guard-resumed %.9g, cpu-resumed %.9g", r.final_loss,
                 rc.final_loss);

    evaluate(run, tmp);
    decode(run);
    cr_expect_eq(guard_backend_live(), 0, "%ld device buffers not freed", guard_backend_live());
    cr_expect_gt(guard_backend_calls(), 0);
}

#define KIND(test, ...)                                                                                   \
    Test(device_discipline, test)                                                                         \
    {                                                                                                     \
        const char *sets[] = {__VA_ARGS__, NULL};                                                         \
        discipline(sets);                                                                                 \
    }

KIND(baseline, "model.residual.kind=baseline")
KIND(full, "model.residual.kind=full")
KIND(block, "model.residual.kind=block", "model.residual.block_size=3")
KIND(static_, "model.residual.kind=static")
KIND(rescaled, "model.residual.kind=rescaled")
KIND(swa, "model.residual.kind=swa", "model.residual.window=2")
KIND(denseformer, "model.residual.kind=denseformer")
KIND(mhc, "model.residual.kind=mhc", "model.residual.streams=3")
KIND(full_sigmoid_heads, "model.residual.kind=full", "model.residual.score=sigmoid", "model.residual.heads=2")
KIND(block_input_query_no_key_norm, "model.residual.kind=block", "model.residual.block_size=2",
     "model.residual.query=input", "model.residual.key_norm=false")
/* the input query's stabilisers: the gate's broadcast product and sum, the norm, the scale */
KIND(full_input_query_stabilised, "model.residual.kind=full", "model.residual.query=input",
     "model.residual.query_scale=head", "model.residual.query_norm=true", "model.residual.query_gate=true")
/* Muon's Newton-Schulz products and momentum buffers, on the guard */
KIND(block_muon, "model.residual.kind=block", "model.residual.block_size=3", "train.optimizer=muon")

/* bench's timing loop (train and inference steps, paired models) */
Test(device_discipline, bench)
{
    const char *sets[] = {"model.residual.kind=block", "model.residual.block_size=2", NULL};
    ar_config c[2];
    c[0] = tiny("unused.txt", sets);
    c[1] = c[0];
    c[1].model.residual.kind = AR_RES_BASELINE;
    ar_bench_opts o = {.be = guard_backend(), .threads = 1, .steps = 2, .warmup = 1, .repeat = 1};
    ar_bench_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_bench_variant(&c[0], &o, &r, &e), 0, "%s", e.msg);
    cr_assert_str_eq(r.device, "guard");
    double train[2], infer[2], tmm[2], imm[2];
    ar_op_tally ops[4];
    cr_assert_eq(ar_bench_paired(c, 2, &o, train, infer, tmm, imm, ops, &e), 0, "%s", e.msg);
    cr_expect(train[0] > 0 && infer[1] > 0);
    cr_expect(isnan(tmm[0]) && isnan(imm[1]), "matrix-product time on a backend other than the CPU's");
    /* a device's op times: steps of their own after the paired rounds */
    cr_expect(ops[0].calls[AR_OP_matmul_fwd] > 0 && ops[0].steps == o.steps && ops[0].wall > 0 &&
                  ops[3].calls[AR_OP_matmul_fwd] > 0 && ops[3].steps == o.steps,
              "device op times: %ld matmul_fwd calls, %ld steps", ops[0].calls[AR_OP_matmul_fwd], ops[0].steps);
    cr_expect_eq(guard_backend_live(), 0);
}

/* What one process reads back from the device in a training step: the
 * step's record, once, after its update is queued (lib/optim.h).  Its
 * loss, the gradient norm, the clipping and the skip decision stay on the
 * device; so does every micro-batch's loss (grad_accum 3).  Counted from
 * one step's gradient hook to the next's, on steps that neither log,
 * evaluate nor save. */
typedef struct {
    long at[16];
    int n;
} read_marks;

static void mark_reads(struct ar_model *m, long step, void *ud)
{
    (void)m, (void)step;
    read_marks *r = ud;
    if (r->n < 16)
        r->at[r->n++] = guard_backend_reads();
}

Test(device_discipline, a_step_reads_the_device_once)
{
    const char *tmp = tu_tmpdir();
    char corpus[2048], run[2100];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", tmp);
    snprintf(run, sizeof run, "%s/run", tmp);
    tu_write_corpus_lines(corpus, 60, 3);
    const char *sets[] = {"model.residual.kind=block", "model.residual.block_size=2", "train.grad_accum=3",
                          "train.steps=6", "train.log_every=100", "train.eval_every=0", "train.grad_clip=0.5",
                          NULL};
    ar_config c = tiny(corpus, sets);
    read_marks marks = {.n = 0};
    ar_train_opts o = {.out_dir = run, .be = guard_backend(), .grad_hook = mark_reads, .ud = &marks};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(marks.n, 6);
    for (int i = 1; i < 5; i++) /* steps 2..5: none logs; step 6, the last, does */
        cr_expect_eq(marks.at[i + 1] - marks.at[i], 1, "step %d read the device %ld times", i + 1,
                     marks.at[i + 1] - marks.at[i]);
    cr_expect(isfinite(r.final_loss) && r.final_loss > 0);
}

/* Every op of lib/backend.h has its guarded entry, as the CPU backend has
 * its own: the table is pointers only, so a NULL word is an op that the
 * guard would crash on (one added to the table and the backends but not to
 * tests/guard_backend.c). */
Test(device_discipline, guard_has_every_op)
{
    typedef void (*fn)(void);
    enum { WORDS = sizeof(ar_backend) / sizeof(fn) };
    cr_assert_eq(sizeof(ar_backend) % sizeof(fn), 0, "ar_backend holds something other than pointers");
    fn g[WORDS], c[WORDS];
    memcpy(g, guard_backend(), sizeof g);
    memcpy(c, ar_backend_cpu(), sizeof c);
    for (int i = 0; i < WORDS; i++)
        cr_expect(!c[i] || g[i], "word %d of ar_backend (in lib/backend.h's order) is set on the CPU backend, not "
                                 "on the guard",
                  i);
}

/* The checker itself: a direct read of a device buffer is fatal. */
Test(device_discipline, host_read_of_device_memory_faults, .signal = SIGSEGV)
{
    const ar_backend *g = guard_backend();
    float *x = g->alloc(16 * sizeof(float));
    float h[16] = {1};
    g->upload(x, h, sizeof h);
    g->download(h, x, sizeof h);
    cr_assert_eq(h[0], 1.0f);
    volatile float v = x[0];
    (void)v;
}

/* ... and so is a host buffer handed to an op as device memory. */
Test(device_discipline, host_pointer_given_to_an_op_aborts, .signal = SIGABRT)
{
    const ar_backend *g = guard_backend();
    float *x = g->alloc(16 * sizeof(float));
    float h[16] = {0};
    g->copy(x, h, 16);
}
