/* Training and evaluation end to end: schedules, the optimizer's decay rule,
 * learning on a tiny corpus, exact resume, and the evaluation protocol on a
 * model whose loss can be computed by hand. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/config.h"
#include "formats/json.h"
#include "formats/metrics.h"
#include "formats/safetensors.h"
#include "lib/optim.h"
#include "lib/schedule.h"
#include "run/checkpoint.h"
#include "run/data.h"
#include "run/eval.h"
#include "run/train.h"
#include "resumeutil.h"
#include "testutil.h"

/* ---------- schedules ---------- */

static ar_train_cfg sched(ar_sched_kind k)
{
    ar_config c;
    ar_config_defaults(&c);
    c.train.schedule = k;
    c.train.steps = 100;
    c.train.warmup = 10;
    c.train.lr = 1.0;
    c.train.min_lr = 0.1;
    c.train.decay_frac = 0.2;
    return c.train;
}

/* The rates are closed forms in double.  Warmup with lr 1.0 is (s + 1) /
 * 10, one correctly rounded division, as the literals 0.1, 0.5 and 1.0 are
 * and as (s + 1) / 10.0 is: exact compares.  The decays are at most six
 * operations on values in [0, 1] (and cos, within an ulp), each rounding
 * within 2^-53: either side is within 8 x 2^-53 of the exact rate, so
 * SCHED_TOL = 16 x 2^-53 bounds their difference; the plateaus return lr
 * itself, exactly. */
#define SCHED_TOL (16 * TU_U_DOUBLE)

Test(schedule, warmup_is_linear)
{
    ar_train_cfg t = sched(AR_SCHED_COSINE);
    cr_expect_eq(ar_lr_at(&t, 0), 0.1);
    cr_expect_eq(ar_lr_at(&t, 4), 0.5);
    cr_expect_eq(ar_lr_at(&t, 9), 1.0);
}

/* steps < warmup: every step is a warmup step, under every schedule, the
 * same rates as the first steps of a longer run */
Test(schedule, run_shorter_than_warmup_stays_in_warmup)
{
    ar_sched_kind kinds[] = {AR_SCHED_COSINE, AR_SCHED_WSD, AR_SCHED_CONSTANT};
    for (int k = 0; k < 3; k++) {
        ar_train_cfg t = sched(kinds[k]);
        ar_train_cfg longer = t;
        t.steps = 4; /* warmup 10 */
        for (long s = 0; s < t.steps; s++) {
            cr_expect_eq(ar_lr_at(&t, s), (double)(s + 1) / 10.0, "schedule %d step %ld", k, s);
            cr_expect_eq(ar_lr_at(&t, s), ar_lr_at(&longer, s));
        }
    }
}

Test(schedule, cosine_reaches_min_lr)
{
    ar_train_cfg t = sched(AR_SCHED_COSINE);
    cr_expect_float_eq(ar_lr_at(&t, 10), 1.0, SCHED_TOL);
    cr_expect_float_eq(ar_lr_at(&t, 54), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 44 / 89.0)), SCHED_TOL);
    cr_expect_float_eq(ar_lr_at(&t, 99), 0.1, SCHED_TOL);
    /* consecutive rates differ by 2e-4 or more, far above the rounding */
    for (long s = 11; s < 100; s++)
        cr_expect_lt(ar_lr_at(&t, s), ar_lr_at(&t, s - 1));
}

Test(schedule, wsd_is_stable_then_decays)
{
    ar_train_cfg t = sched(AR_SCHED_WSD);
    cr_expect_eq(ar_lr_at(&t, 50), 1.0);
    cr_expect_eq(ar_lr_at(&t, 79), 1.0);
    cr_expect_float_eq(ar_lr_at(&t, 80), 1.0 - 0.9 / 20, SCHED_TOL);
    cr_expect_float_eq(ar_lr_at(&t, 99), 0.1, SCHED_TOL);
}

Test(schedule, constant)
{
    ar_train_cfg t = sched(AR_SCHED_CONSTANT);
    cr_expect_eq(ar_lr_at(&t, 10), 1.0);
    cr_expect_eq(ar_lr_at(&t, 99), 1.0);
}

/* ---------- fixtures ---------- */

static ar_config tiny_run(const char *corpus, ar_res_kind kind)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 32;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.d_ff = 64;
    c.model.seq_len = 32;
    c.model.residual.kind = kind;
    c.model.residual.block_size = kind == AR_RES_BLOCK ? 2 : 0;
    c.model.residual.num_blocks = 0;
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.1;
    c.train.steps = 50;
    c.train.batch_size = 8;
    c.train.warmup = 5;
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.eval_every = 25;
    c.train.eval_windows = 16;
    c.train.save_every = 0;
    c.train.log_every = 5;
    c.train.threads = 2;
    return c;
}

static void read_rows(const char *dir, ar_json ***rows, int *n)
{
    ar_err e;
    cr_assert_eq(ar_metrics_read(tu_path(dir, "metrics.jsonl"), rows, n, &e), 0, "%s", e.msg);
}

/* ---------- learning ---------- */

static void learns(ar_res_kind kind)
{
    const char *dir = tu_tmpdir();
    char corpus[2048], run[4200];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    tu_write_corpus_lines(corpus, 600, 1);
    ar_config c = tiny_run(corpus, kind);
    ar_train_opts o = {.out_dir = run};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.step, 50);
    ar_json **rows;
    int n;
    read_rows(run, &rows, &n);
    cr_assert_geq(n, 2);
    double first = ar_json_get(rows[0], "loss")->num;
    /* ln 256 = 5.545 at initialisation; 50 steps must reach well below. */
    cr_expect_gt(first, 4.0, "first logged loss %g", first);
    cr_expect_lt(r.final_val_loss, 3.0, "val loss after 50 steps %g", r.final_val_loss);
    cr_expect_lt(r.final_loss, first - 1.5);
    const ar_json *last = rows[n - 1];
    cr_expect(ar_json_get(last, "val_loss") != NULL);
    const ar_json *orms = ar_json_get(last, "out_rms");
    cr_assert(orms && orms->n == 4);
    cr_expect(ar_json_get(last, "grad_rms") && ar_json_get(last, "grad_rms")->n == 4);
    const ar_json *da = ar_json_get(last, "depth_attn");
    if (kind == AR_RES_BASELINE) {
        cr_expect(da == NULL);
    } else {
        cr_assert(da && da->n == 5, "depth_attn should list L+1 = 5 mixers");
        /* Each token's weights exp(z_i - LSE) (fast_expf, within 2e-7
         * relative; LSE from a float sum and logf) add to 1 within
         * 2 x 2e-7 + gamma(n + 2) + 2 u |LSE|; the token mean rounded to
         * float and the sum here add (n + 1) u.  The logits of this 50-step
         * run stay below 50 (pseudo-queries start at zero and move by about
         * lr a step; keys are RMS-normalised): below 1e-5 in all.  A mixer
         * that does not normalise, or drops a source, misses by 1e-2. */
        for (int l = 0; l < da->n; l++) {
            double s = 0;
            for (int i = 0; i < da->items[l].n; i++)
                s += da->items[l].items[i].num;
            cr_expect_float_eq(s, 1.0, 1e-4, "mixer %d weights sum to %g", l + 1, s);
        }
    }
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.yaml", "loss.png"};
    for (int i = 0; i < 4; i++) {
        size_t sz = 0;
        char *b = tu_read_file(tu_path(run, files[i]), &sz);
        cr_expect(b && sz > 0, "run directory lacks %s", files[i]);
        free(b);
    }
    ar_metrics_free(rows, n);
}

Test(train, baseline_learns, .timeout = 120) { learns(AR_RES_BASELINE); }
Test(train, block_learns, .timeout = 120) { learns(AR_RES_BLOCK); }

Test(train, refuses_to_overwrite_a_run, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    char corpus[2048], run[4200];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    tu_write_corpus_lines(corpus, 200, 1);
    ar_config c = tiny_run(corpus, AR_RES_FULL);
    c.train.steps = 2;
    c.train.warmup = 1;
    ar_train_opts o = {.out_dir = run};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    size_t n0, n1;
    char *before = tu_read_file(tu_path(run, "model.safetensors"), &n0);
    cr_expect_neq(ar_train(&c, &o, &r, &e), 0);
    cr_expect(strstr(e.msg, "already holds a checkpoint"), "%s", e.msg);
    char *after = tu_read_file(tu_path(run, "model.safetensors"), &n1);
    cr_expect(n0 == n1 && memcmp(before, after, n0) == 0, "the saved model changed");
    free(before);
    free(after);
}

/* A run that fails before its first step leaves the file system as it
 * was: the directories it made are gone, a directory that was there holds
 * what it held (no lock file, no probe). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "'%s' is gone", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

Test(train, failure_at_start_leaves_nothing_behind, .timeout = 60)
{
    const char *dir = tu_tmpdir();
    char empty[2048], tiny[2048], nested[2200], top[2200], there[2200];
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    snprintf(tiny, sizeof tiny, "%s/tiny.txt", dir);
    tu_write_file(empty, "", 0);
    tu_write_file(tiny, "abc", 3);
    snprintf(top, sizeof top, "%s/new", dir);
    snprintf(nested, sizeof nested, "%s/new/deeper/run", dir);
    snprintf(there, sizeof there, "%s/there", dir);
    cr_assert_eq(mkdir(there, 0777), 0);
    const char *data[] = {empty, tiny};
    for (int i = 0; i < 2; i++) {
        ar_config c = tiny_run(data[i], AR_RES_BLOCK);
        ar_train_result r;
        ar_err e = {{0}};
        ar_train_opts o = {.out_dir = nested};
        cr_expect_neq(ar_train(&c, &o, &r, &e), 0, "training on '%s' should fail", data[i]);
        cr_expect(strstr(e.msg, data[i]), "the message names the data file: %s", e.msg);
        cr_expect_neq(access(top, F_OK), 0, "'%s' was made and left behind", top);
        o.out_dir = there;
        cr_expect_neq(ar_train(&c, &o, &r, &e), 0);
        cr_expect_eq(entries(there), 0, "'%s' holds %d new entries", there, entries(there));
    }
    /* a lock file that was there before stays */
    tu_write_file(tu_path(there, ".attnres.lock"), "", 0);
    ar_config c = tiny_run(empty, AR_RES_BLOCK);
    ar_train_result r;
    ar_err e = {{0}};
    ar_train_opts o = {.out_dir = there};
    cr_expect_neq(ar_train(&c, &o, &r, &e), 0);
    cr_expect_eq(access(tu_path(there, ".attnres.lock"), F_OK), 0, "the existing lock file was removed");
    cr_expect_eq(entries(there), 1);
}

/* ---------- exact resume ---------- */

/* Bit for bit by construction: both runs are this process, the same code,
 * shapes (batch 8, grad_accum 2) and thread count (train.threads 2), and a
 * checkpoint holds every float the next step reads (weights, both moments,
 * the step, the data position). */
Test(train, resume_is_bit_exact, .timeout = 180)
{
    tu_resume x;
    tu_resume_init(&x);
    ar_config c = tiny_run(x.corpus, AR_RES_BLOCK);
    c.train.steps = 20;
    c.train.grad_accum = 2;
    c.train.log_every = 1;
    ar_train_result r;
    ar_err e = {{0}};
    tu_resume_straight(&x, &c, &r);

    tu_resume_stop(&x, &c, 9, &r);
    cr_assert(r.interrupted);
    cr_assert_eq(r.step, 10, "interrupted run stopped at step %ld", r.step);
    cr_assert_eq(tu_resume_continue(&x, &c, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.step, 20);

    tu_resume_expect_same_weights(&x);

    /* metrics.jsonl of the resumed run has each step exactly once */
    ar_json **rows;
    int n;
    read_rows(x.b, &rows, &n);
    cr_expect_eq(n, 20, "%d metric lines", n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(ar_json_get(rows[i], "step")->inum, i + 1);
    ar_metrics_free(rows, n);
}

/* ---------- evaluation protocol ---------- */

/* With every output projection zero, each sublayer outputs 0, so (baseline)
 * h_out = embedding and the model is a bigram table:
 *   logits(x) = W_lm (g * e_x / rms(e_x)).
 * The protocol's loss is then computable directly from the stream. */
static double bigram_nll(const float *E, const float *W, int V, int d, int a, int b)
{
    double ms = 0;
    for (int j = 0; j < d; j++)
        ms += (double)E[a * d + j] * E[a * d + j];
    double rs = 1.0 / sqrt(ms / d + 1e-6), mx = -1e300, z = 0, lb = 0;
    double *lg = malloc((size_t)V * sizeof(double));
    for (int v = 0; v < V; v++) {
        double s = 0;
        for (int j = 0; j < d; j++)
            s += (double)W[v * d + j] * E[a * d + j] * rs;
        lg[v] = s;
        mx = fmax(mx, s);
    }
    for (int v = 0; v < V; v++)
        z += exp(lg[v] - mx);
    lb = lg[b];
    free(lg);
    return -(lb - mx - log(z));
}

/* fast_expf (lib/cpu/loops.h, Cephes' expf): within 2e-7 relative. */
#define EXP_REL 2e-7

/* A bound on |model's loss - bigram_nll| at one position (a -> b), in float
 * arithmetic with u = 2^-24.  The sublayers add exact zeros, so the head
 * sees e_a.  RMSNorm's rstd comes from a d-term float sum of squares and a
 * few roundings (gamma(d) / 2 + 3u relative, shared by the row), h =
 * e_a rstd g two more; each logit is a d-term dot product, so it is off by
 * at most (1.5 gamma(d) + 5u) A, A = max_v sum_j |W_vj h_j|.  The loss,
 * log(sum exp(z - max)) - (z_b - max), moves by at most twice the largest
 * logit error; its exponentials (EXP_REL each, and u |z - max| from their
 * arguments, weighted by the probabilities: below u) and the rounding of
 * the loss to float (u |loss|) add the rest.  The reference in double is
 * exact to 1e-15. */
static double bigram_tol(const float *E, const float *W, int V, int d, int a, int b)
{
    double ms = 0;
    for (int j = 0; j < d; j++)
        ms += (double)E[a * d + j] * E[a * d + j];
    double rs = 1.0 / sqrt(ms / d + 1e-6), A = 0;
    for (int v = 0; v < V; v++) {
        double s = 0;
        for (int j = 0; j < d; j++)
            s += fabs((double)W[v * d + j] * E[a * d + j] * rs);
        A = fmax(A, s);
    }
    return 2 * (1.5 * tu_gamma(d) + 5 * TU_U_FLOAT) * A + EXP_REL + TU_U_FLOAT +
           TU_U_FLOAT * bigram_nll(E, W, V, d, a, b) + 1e-15;
}

Test(eval, protocol_matches_hand_computation, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 16;
    c.model.seq_len = 8;
    c.model.residual.kind = AR_RES_BASELINE;
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 4, &e), 0);
    ar_model_init(m, 3);
    memset(ar_model_param(m, m->blk[0].o), 0, (size_t)16 * 16 * sizeof(float));
    memset(ar_model_param(m, m->blk[0].down), 0, (size_t)16 * 16 * sizeof(float));
    /* sharpen the table so different windows have clearly different losses */
    float *W = ar_model_param(m, m->lm_head), *E = ar_model_param(m, m->embed);
    for (size_t i = 0; i < (size_t)256 * 16; i++)
        W[i] *= 100;
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 0, &e), 0, "%s", e.msg);

    /* 45 bytes: (45-1)/8 = 5 whole windows; the last 4 bytes are never scored */
    const char *text = "In the beginning God created the heaven and t";
    size_t n = strlen(text);
    tu_write_file(tu_path(dir, "eval.txt"), text, n);
    int32_t x[64];
    for (size_t i = 0; i < n; i++)
        x[i] = (unsigned char)text[i];
    for (int maxw = 0; maxw <= 5; maxw += 3) {
        int nw = maxw ? maxw : 5;
        double want = 0, tol = 0;
        for (int i = 0; i < nw * 8; i++) {
            want += bigram_nll(E, W, 256, 16, x[i], x[i + 1]);
            tol += bigram_tol(E, W, 256, 16, x[i], x[i + 1]);
        }
        want /= nw * 8;
        tol /= nw * 8;
        ar_eval_result r;
        cr_assert_eq(ar_evaluate(m, x, n, maxw, 0, &r, &e), 0, "%s", e.msg);
        cr_expect_eq(r.windows, nw);
        cr_expect_eq(r.tokens, nw * 8);
        cr_expect(fabs(r.loss - want) <= tol, "max_windows %d: loss %.8f, by hand %.8f (bound %.3g)", maxw, r.loss,
                  want, tol);
        if (tu_bin()) {
            char cmd[8192];
            int st;
            snprintf(cmd, sizeof cmd, "%s eval %s --data %s --json%s%s", tu_bin(), dir,
                     tu_path(dir, "eval.txt"), maxw ? " --max-windows " : "", maxw ? "3" : "");
            char *out = tu_run(cmd, &st);
            cr_assert_eq(st, 0, "%s", out);
            ar_json *j = ar_json_parse(out, strlen(out), &e);
            cr_assert(j, "eval --json printed: %s", out);
            /* the command's own shapes and threads: the same bound; bits
             * per byte divide it by ln 2, perplexity is exp of it */
            cr_expect(fabs(ar_json_get(j, "loss")->num - want) <= tol);
            cr_expect_eq(ar_json_get(j, "windows")->inum, nw);
            cr_expect_eq(ar_json_get(j, "tokens")->inum, nw * 8);
            cr_expect(fabs(ar_json_get(j, "bits_per_byte")->num - want / M_LN2) <= tol / M_LN2 + 1e-15);
            cr_expect(fabs(ar_json_get(j, "perplexity")->num - exp(want)) <=
                      (expm1(tol) + 1e-15) * exp(want));
            ar_json_free(j);
            free(out);
        }
    }
    ar_model_free(m);
}

Test(eval, grads_file_holds_the_mean_loss_gradient, .timeout = 120)
{
    if (!tu_bin())
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 16;
    c.model.seq_len = 8;
    /* The reference runs the code `eval --grads` runs on the same shapes
     * (the command loads a model for batches of 8 windows; the text has 6,
     * one batch) with one thread, as --threads 1: the same gradients, bit
     * for bit, and safetensors stores the floats as they are. */
    ar_backend_cpu()->set_threads(1);
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 8, &e), 0);
    ar_model_init(m, 5);
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 0, &e), 0, "%s", e.msg);
    const char *text = "And God said, Let there be light: and there was light.";
    size_t n = strlen(text);
    tu_write_file(tu_path(dir, "eval.txt"), text, n);
    int32_t x[128];
    for (size_t i = 0; i < n; i++)
        x[i] = (unsigned char)text[i];
    ar_eval_result r;
    cr_assert_eq(ar_evaluate(m, x, n, 0, 1, &r, &e), 0);
    char cmd[8192];
    int st;
    snprintf(cmd, sizeof cmd, "%s eval %s --data %s --grads %s --threads 1", tu_bin(), dir, tu_path(dir, "eval.txt"),
             tu_path(dir, "g.safetensors"));
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, tu_path(dir, "g.safetensors"), &e), 0, "%s", e.msg);
    cr_expect_eq(f.n, m->pt.n);
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float *g = malloc(p->numel * sizeof(float));
        cr_assert_eq(ar_st_get_f32(&f, p->name, p->shape, p->ndim, g, &e), 0, "%s", e.msg);
        cr_expect(memcmp(g, ar_model_grad(m, i), p->numel * sizeof(float)) == 0, "'%s' differs: %g relative", p->name,
                  tu_rel_err(g, ar_model_grad(m, i), p->numel));
        free(g);
    }
    ar_st_free(&f);
    ar_model_free(m);
}

/* ---------- optimizer ---------- */

Test(optim, weight_decay_only_on_matrices)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 8;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 8;
    c.model.seq_len = 4;
    c.model.residual.kind = AR_RES_FULL;
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 1, &e), 0);
    ar_model_init(m, 1);
    float *before = malloc(m->pt.total * sizeof(float));
    /* nonzero everywhere so decay would show on every tensor */
    for (size_t i = 0; i < m->pt.total; i++)
        m->params[i] += 0.5f;
    memcpy(before, m->params, m->pt.total * sizeof(float));
    ar_adamw o;
    ar_adamw_init(&o, m);
    ar_model_zero_grad(m);
    c.train.weight_decay = 0.1;
    ar_adamw_step(&o, m, &c.train, 0.01, 0.0);
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float x0 = before[p->offset], x1 = m->params[p->offset];
        /* AdamW with g = 0 is p - lr (0 + wd p), three float roundings;
         * the reference x0 (1 - lr wd) three more: within 4u |x0| of each
         * other (u = 2^-24), while decay moves x0 by 1e-3 |x0| */
        if (p->ndim == 2)
            cr_expect_float_eq(x1, x0 * (1 - 0.01f * 0.1f), 4 * TU_U_FLOAT * fabsf(x0), "'%s' not decayed", p->name);
        else
            cr_expect_eq(x1, x0, "'%s' decayed", p->name);
    }
    ar_adamw_free(&o);
    free(before);
    ar_model_free(m);
}
