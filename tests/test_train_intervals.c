/* Every combination of small step intervals trains, and resumes bit for
 * bit: a grid of train.steps x log_every x eval_every x save_every, with
 * grad_accum cycling through 1..3, values chosen so that most do not
 * divide each other.  Each cell trains once straight through, and once
 * stopped part way and resumed:
 *   - even cells stop by the interrupt flag (ar_train saves at that step);
 *   - odd cells crash: a forked child trains and _exits after step k, so
 *     the run resumes from its last periodic checkpoint, with metrics
 *     lines past it that the resume must drop.
 * The resumed run must end with the same weights, byte for byte, and hold
 * each logged step once, with the straight run's loss.  Bit for bit by
 * construction: every run (the forked children too) runs the same code on
 * the same shapes with train.threads 1, and a checkpoint holds every float
 * the next step reads (weights, moments, step, data position).
 *
 * Covers: run/train.c (its step intervals: log, eval, save, grad_accum; the
 * resume after an interrupt or a crash). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/json.h"
#include "formats/metrics.h"
#include "formats/safetensors.h"
#include "run/train.h"
#include "testutil.h"

static ar_config cell_config(const char *corpus, long steps, long log_every, long eval_every, long save_every,
                             int accum)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 32;
    c.model.seq_len = 8;
    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 1;
    c.model.residual.num_blocks = 0;
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.1;
    c.train.steps = steps;
    c.train.batch_size = 2;
    c.train.grad_accum = accum;
    c.train.warmup = 3; /* longer than some runs: they end inside it */
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.log_every = log_every;
    c.train.eval_every = eval_every;
    c.train.save_every = save_every;
    c.train.eval_windows = 2;
    c.train.keep_checkpoints = 0;
    c.train.threads = 1;
    return c;
}

static volatile sig_atomic_t stop;
static long stop_after;

/* grad_hook runs inside step `step`, before the interrupt flag is read */
static void stop_at(struct ar_model *m, long step, void *ud)
{
    (void)m;
    (void)ud;
    if (step == stop_after)
        stop = 1;
}

/* ... and inside step k + 1 the crash comes after all of step k's work */
static void crash_at(struct ar_model *m, long step, void *ud)
{
    (void)m;
    (void)ud;
    if (step == stop_after + 1)
        _exit(0);
}

/* A child that trains until crash_at ends it, after step k's log and save. */
static void train_and_crash(const ar_config *c, const char *run, long k)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        stop_after = k;
        ar_train_opts o = {.out_dir = run, .grad_hook = crash_at};
        ar_train_result r;
        ar_err e = {{0}};
        int rc = ar_train(c, &o, &r, &e);
        if (rc != 0)
            fprintf(stderr, "crashing child: %s\n", e.msg);
        _exit(rc == 0 ? 3 : 2); /* reached the end: it was to crash first */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child did not stop at step %ld (status %d)", run, k,
              st);
}

static void compare_metrics(const char *straight, const char *resumed, const char *cell)
{
    ar_json **a, **b;
    int na, nb;
    ar_err e;
    cr_assert_eq(ar_metrics_read(tu_path(straight, "metrics.jsonl"), &a, &na, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_metrics_read(tu_path(resumed, "metrics.jsonl"), &b, &nb, &e), 0, "%s", e.msg);
    /* the resumed run may also log the step it was stopped at */
    int j = 0;
    long prev = 0;
    for (int i = 0; i < nb; i++) {
        long s = (long)ar_json_get(b[i], "step")->inum;
        cr_expect_gt(s, prev, "%s: step %ld logged after step %ld", cell, s, prev);
        prev = s;
        if (j < na && (long)ar_json_get(a[j], "step")->inum == s) {
            cr_expect_eq(ar_json_get(a[j], "loss")->num, ar_json_get(b[i], "loss")->num,
                         "%s: step %ld's loss differs", cell, s);
            j++;
        }
    }
    cr_expect_eq(j, na, "%s: %d of the straight run's %d metrics lines are in the resumed run", cell, j, na);
    ar_metrics_free(a, na);
    ar_metrics_free(b, nb);
}

Test(train_intervals, every_combination_trains_and_resumes_bit_for_bit, .timeout = 600)
{
    const char *dir = tu_tmpdir();
    char corpus[2048];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    tu_write_corpus_lines(corpus, 60, 7);
    const long steps[] = {1, 5, 7}, logs[] = {1, 3, 10}, evals[] = {0, 2, 3}, saves[] = {0, 1, 3, 5};
    int cell = 0;
    for (int is = 0; is < 3; is++)
        for (int il = 0; il < 3; il++)
            for (int ie = 0; ie < 3; ie++)
                for (int iv = 0; iv < 4; iv++, cell++) {
                    int accum = 1 + cell % 3;
                    long S = steps[is];
                    ar_config c = cell_config(corpus, S, logs[il], evals[ie], saves[iv], accum);
                    char name[160], a[2200], b[2200];
                    snprintf(name, sizeof name, "steps %ld log_every %ld eval_every %ld save_every %ld grad_accum %d",
                             S, logs[il], evals[ie], saves[iv], accum);
                    snprintf(a, sizeof a, "%s/c%d-straight", dir, cell);
                    snprintf(b, sizeof b, "%s/c%d-resumed", dir, cell);
                    ar_train_result r;
                    ar_err e = {{0}};
                    ar_train_opts oa = {.out_dir = a};
                    cr_assert_eq(ar_train(&c, &oa, &r, &e), 0, "%s: %s", name, e.msg);
                    cr_assert_eq(r.step, S, "%s", name);
                    const char *files[] = {"model.safetensors", "metrics.jsonl", "loss.png", "dynamics.png",
                                           "depth_attn.png"};
                    for (int f = 0; f < 5; f++)
                        cr_expect_eq(access(tu_path(a, files[f]), F_OK), 0, "%s: no %s", name, files[f]);
                    if (S == 1)
                        continue;
                    /* stop after step k in 1..S-1; a crash needs a checkpoint at or before k */
                    long k = 1 + cell % (S - 1);
                    long first_save = saves[iv] > 0 ? saves[iv] : S;
                    int crash = cell % 2 == 1 && first_save <= k;
                    if (crash) {
                        train_and_crash(&c, b, k);
                    } else {
                        stop = 0;
                        stop_after = k;
                        ar_train_opts ob = {.out_dir = b, .grad_hook = stop_at, .interrupt = &stop};
                        cr_assert_eq(ar_train(&c, &ob, &r, &e), 0, "%s: %s", name, e.msg);
                        cr_assert(r.interrupted && r.step == k, "%s: stopped at %ld, not %ld", name, r.step, k);
                    }
                    ar_train_opts orr = {.out_dir = b, .resume = 1};
                    cr_assert_eq(ar_train(&c, &orr, &r, &e), 0, "%s (resumed after step %ld): %s", name, k, e.msg);
                    cr_assert_eq(r.step, S, "%s", name);
                    size_t na, nb;
                    char *wa = tu_model_bytes(a, &na), *wb = tu_model_bytes(b, &nb);
                    cr_expect(na == nb && memcmp(wa, wb, na) == 0,
                              "%s: %s after step %ld and resuming does not end with the straight run's weights",
                              name, crash ? "crashing" : "stopping", k);
                    free(wa);
                    free(wb);
                    compare_metrics(a, b, name);
                }
}
