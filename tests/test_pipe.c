/* Pipeline parallelism under mpirun (parallel/pipe.h): runs of P = 2 (V = 1,
 * 2), P = 4 (V = 2) and P = 2 x data-parallel 2 against one process, for
 * baseline, Full and Block AttnRes, block boundaries on chunk boundaries
 * (S = 2) and across them (S = 3), cached and naive, 1F1B and GPipe; the
 * bytes a run moved against the plan's count; checkpoints resumed across
 * layouts; the errors of bad layouts; a rank killed mid-run.
 *
 * Tolerance.  Every stage runs the model's code on micro-batches of the
 * same shape (train.batch_size) with one thread, as one process does, but
 * adds some terms in another order: a block's partial sum continued on
 * another stage (at most L + 1 = 9 terms in the forward), a block's
 * gradient from its consumers on several stages, the micro-batches in
 * order instead of dp.h's tree (at most 4 x 9 = 36 terms in the backward).
 * Each such sum differs by at most 2 gamma(n) of its terms' magnitudes
 * (1.1e-6 forward, 4.3e-6 backward).  Step 1's loss differs by those
 * forward sums only; from step 2 on the runs start from other weights,
 * and how far apart AdamW takes them is not a matter of the arithmetic
 * alone: its first steps move each weight by lr g / (|g| + eps), which
 * turns a rounding difference in an entry whose g is within that rounding
 * of zero into a weight difference of up to 2 lr, and how many entries lie
 * there depends on the data.  WEIGHT_TOL (per tensor, relative L2) and LOSS_TOL
 * (relative) are therefore margins over the rounding of the sums above as
 * AdamW carries it while no entry flips, not bounds derived from the
 * arithmetic: one flip (2 lr = 3e-3 in a 32 x 32 matrix of norm 0.6: 5e-3)
 * would fail the test, not pass it wrongly, and a wrong gradient anywhere
 * moves them by 1e-2 and more. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpiutil.h"
#include "core/blocks.h"
#include "run/checkpoint.h"
#include "parallel/pipe_plan.h"
#include "testutil.h"

#define WEIGHT_TOL 1e-4
#define LOSS_TOL 1e-6

/* n_layer 4: L = 8 sublayers, enough for P x V = 8 chunks */
#define PTINY                                                                                            \
    "--set model.d_model=32 --set model.n_layer=4 --set model.n_head=2 --set model.d_ff=64 "             \
    "--set model.seq_len=16 --set train.batch_size=2 --set train.grad_accum=4 --set train.steps=6 "      \
    "--set train.warmup=2 --set train.log_every=1 --set train.eval_every=3 --set train.eval_windows=6 "  \
    "--set train.save_every=3 --set train.threads=1 --set data.train=corpus.txt"

static void ptrain(const char *dir, int ranks, const char *opts, const char *out)
{
    int st;
    char *o = ranks > 0 ? mu_sh(dir, &st, MPIRUN "%d '%s' train " PTINY " %s --out %s 2>&1", ranks, mu_bin(), opts, out)
                        : mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train " PTINY " %s --out %s 2>&1", mu_bin(), opts, out);
    cr_assert_eq(st, 0, "%d ranks, %s: exit %d\n%s", ranks, opts, st, o);
    free(o);
}

typedef struct {
    int ranks;
    const char *opts; /* the parallel settings */
    int P, V, cache;  /* for the byte count */
} layout;

/* Bytes of rows a step moves forward, from the plan of the blocks b. */
static double predicted_fwd_bytes(const ar_blocks *b, int baseline, const layout *y)
{
    ar_pipe_plan pl;
    ar_err e;
    int D = y->ranks / y->P, M = 4 / D;
    cr_assert_eq(ar_pipe_plan_make_blocks(&pl, b, baseline, y->P, y->V, M, y->cache, AR_PIPE_1F1B, &e), 0, "%s",
                 e.msg);
    double rows = (double)ar_pipe_rows_per_mb(&pl) * 4; /* 4 micro-batches a step */
    ar_pipe_plan_free(&pl);
    return rows * 2 * 16 * 32 * sizeof(float); /* B T d floats a row */
}

static void pipes_match_blocks(const char *model, const ar_blocks *b, int baseline, const layout *ys, int ny)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    ptrain(dir, 0, model, "one");
    char ref[4200], got[4200], mref[4200], mgot[4200];
    snprintf(ref, sizeof ref, "%s/one/model.safetensors", dir);
    snprintf(mref, sizeof mref, "%s/one/metrics.jsonl", dir);
    double lref[16], lgot[16], vref[4], vgot[4], bytes[16];
    int nref = mu_metric_values(mref, "loss", lref, 16), nv = mu_metric_values(mref, "val_loss", vref, 4);
    cr_assert_eq(nref, 6);
    for (int i = 0; i < ny; i++) {
        char out[32], opts[512], what[600];
        snprintf(out, sizeof out, "p%d", i);
        snprintf(opts, sizeof opts, "%s %s", model, ys[i].opts);
        snprintf(what, sizeof what, "%s, %d ranks", opts, ys[i].ranks);
        ptrain(dir, ys[i].ranks, opts, out);
        snprintf(got, sizeof got, "%s/%s/model.safetensors", dir, out);
        snprintf(mgot, sizeof mgot, "%s/%s/metrics.jsonl", dir, out);
        mu_close_tensors(ref, got, WEIGHT_TOL, what);
        cr_expect_eq(mu_metric_values(mgot, "loss", lgot, 16), nref, "%s", what);
        for (int k = 0; k < nref; k++)
            cr_expect(fabs(lgot[k] - lref[k]) <= LOSS_TOL * lref[k], "%s: step %d loss %.9g, one process %.9g", what,
                      k + 1, lgot[k], lref[k]);
        cr_expect_eq(mu_metric_values(mgot, "val_loss", vgot, 4), nv, "%s", what);
        for (int k = 0; k < nv; k++)
            cr_expect(fabs(vgot[k] - vref[k]) <= LOSS_TOL * vref[k], "%s: val_loss %.9g, one process %.9g", what,
                      vgot[k], vref[k]);
        /* the bytes moved are the plan's count, every step */
        int nb = mu_metric_values(mgot, "pipe_fwd_bytes", bytes, 16);
        cr_expect_eq(nb, 6, "%s: %d metrics lines give pipe_fwd_bytes", what, nb);
        double want = predicted_fwd_bytes(b, baseline, &ys[i]);
        for (int k = 0; k < nb; k++)
            cr_expect_eq(bytes[k], want, "%s: step %d moved %.0f bytes forward, the plan says %.0f", what, k + 1,
                         bytes[k], want);
        nb = mu_metric_values(mgot, "pipe_bwd_bytes", bytes, 16);
        for (int k = 0; k < nb; k++)
            cr_expect_eq(bytes[k], want, "%s: step %d moved %.0f gradient bytes back, the plan says %.0f", what,
                         k + 1, bytes[k], want);
    }
}

/* Blocks of S (L = 8). */
static void pipes_match_one_process(const char *model, int S, int baseline, const layout *ys, int ny)
{
    ar_blocks b;
    ar_blocks_uniform(&b, 8, S);
    pipes_match_blocks(model, &b, baseline, ys, ny);
    ar_blocks_free(&b);
}

static const layout common[] = {
    {2, "--set parallel.pipeline=2", 2, 1, 1},
    {2, "--set parallel.pipeline=2 --set parallel.virtual=2", 2, 2, 1},
    {4, "--set parallel.pipeline=4 --set parallel.virtual=2", 4, 2, 1},
    {4, "--set parallel.pipeline=2", 2, 1, 1}, /* x data-parallel 2 */
};

Test(pipe, baseline_matches_one_process, .timeout = 600)
{
    pipes_match_one_process("--set model.residual.kind=baseline", 9, 1, common, 4);
}

Test(pipe, full_attnres_matches_one_process, .timeout = 600)
{
    pipes_match_one_process("--set model.residual.kind=full", 1, 0, common, 4);
}

/* S = 2: every chunk boundary (after sublayer 2, 4, 6 or 4) ends a block */
Test(pipe, block_attnres_aligned_matches_one_process, .timeout = 600)
{
    pipes_match_one_process("--set model.residual.kind=block --set model.residual.block_size=2", 2, 0, common, 4);
}

/* S = 3: blocks end at 3, 6, 8, so chunk boundaries cut blocks and the
 * partial sums travel; naive and cached, 1F1B and GPipe */
Test(pipe, block_attnres_across_boundaries_cached_and_naive, .timeout = 600)
{
    static const layout ys[] = {
        {2, "--set parallel.pipeline=2", 2, 1, 1},
        {2, "--set parallel.pipeline=2 --set parallel.virtual=2 --set parallel.cache_blocks=false", 2, 2, 0},
        {4, "--set parallel.pipeline=4 --set parallel.virtual=2", 4, 2, 1},
        {4, "--set parallel.pipeline=4 --set parallel.virtual=2 --set parallel.cache_blocks=false", 4, 2, 0},
        {2, "--set parallel.pipeline=2 --set parallel.virtual=2 --set parallel.schedule=gpipe", 2, 2, 1},
    };
    pipes_match_one_process("--set model.residual.kind=block --set model.residual.block_size=3", 3, 0, ys, 5);
}

/* block_sizes [1, 3, 2, 2]: blocks end at 1, 4, 6, 8; chunk boundaries at
 * 2 and 6 (P x V = 4) cut block 2, at 4 (P = 2) none; naive and cached */
Test(pipe, block_sizes_uneven_matches_one_process, .timeout = 600)
{
    static const layout ys[] = {
        {2, "--set parallel.pipeline=2", 2, 1, 1},
        {2, "--set parallel.pipeline=2 --set parallel.virtual=2 --set parallel.cache_blocks=false", 2, 2, 0},
        {4, "--set parallel.pipeline=4 --set parallel.virtual=2", 4, 2, 1},
    };
    ar_blocks b;
    ar_blocks_sizes(&b, 8, (const int[]){1, 3, 2, 2}, 4);
    pipes_match_blocks("--set model.residual.kind=block --set 'model.residual.block_sizes=[1, 3, 2, 2]'", &b, 0, ys,
                       3);
    ar_blocks_free(&b);
}

/* A pipelined run's checkpoint is one process's: it resumes in one
 * process, and one process's resumes pipelined (P = 2, V = 2), both
 * ending where an uninterrupted run does (within the tolerance). */
Test(pipe, checkpoints_resume_across_layouts, .timeout = 600)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    /* a constant rate: the cut at step 3 changes no lr */
    const char *model = "--set model.residual.kind=block --set model.residual.block_size=3 "
                        "--set train.schedule=constant";
    char opts[512];
    ptrain(dir, 0, model, "one");
    snprintf(opts, sizeof opts, "%s --set parallel.pipeline=2 --set train.steps=3", model);
    ptrain(dir, 2, opts, "a");
    snprintf(opts, sizeof opts, "%s --set train.steps=3", model);
    ptrain(dir, 0, opts, "b");
    int st;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train --resume a --set train.steps=6 --set parallel.pipeline=1 2>&1", mu_bin());
    cr_assert_eq(st, 0, "one process resuming a pipelined run:\n%s", o);
    free(o);
    o = mu_sh(dir, &st, MPIRUN "2 '%s' train --resume b --set train.steps=6 --set parallel.pipeline=2 "
                        "--set parallel.virtual=2 2>&1", mu_bin());
    cr_assert_eq(st, 0, "a pipeline resuming a one-process run:\n%s", o);
    free(o);
    char ref[4200], got[4200];
    snprintf(ref, sizeof ref, "%s/one/model.safetensors", dir);
    snprintf(got, sizeof got, "%s/a/model.safetensors", dir);
    mu_close_tensors(ref, got, WEIGHT_TOL, "pipelined, resumed in one process");
    snprintf(got, sizeof got, "%s/b/model.safetensors", dir);
    mu_close_tensors(ref, got, WEIGHT_TOL, "one process, resumed pipelined");
    snprintf(ref, sizeof ref, "%s/one/optimizer.safetensors", dir);
    snprintf(got, sizeof got, "%s/a/optimizer.safetensors", dir);
    mu_close_tensors(ref, got, 10 * WEIGHT_TOL, "optimizer: pipelined, resumed in one process");
}

/* Each bad layout: exit status 1, one error naming the keys, no run
 * directory left behind. */
static void refused(const char *dir, int ranks, const char *opts, const char *want)
{
    int st;
    char *o = ranks > 0 ? mu_sh(dir, &st, MPIRUN_REFUSED "%d '%s' train " PTINY " %s --out bad 2>&1", ranks, mu_bin(), opts)
                        : mu_sh(dir, &st, "'%s' train " PTINY " %s --out bad 2>&1", mu_bin(), opts);
    cr_expect_neq(st, 0, "%s: accepted\n%s", opts, o);
    const char *first = strstr(o, want);
    cr_expect(first, "%s: the error does not say \"%s\":\n%s", opts, want, o);
    cr_expect(!first || !strstr(first + 1, want), "%s: the error is printed more than once:\n%s", opts, o);
    cr_expect(strstr(o, "attnres: error: "), "%s:\n%s", opts, o);
    cr_expect_neq(access(tu_path(dir, "bad"), F_OK), 0, "%s: a refused run left its directory", opts);
    free(o);
}

Test(pipe, bad_layouts_are_refused_with_the_keys, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    refused(dir, 2, "--set parallel.pipeline=2 --set parallel.virtual=8",
            "'parallel.pipeline' x 'parallel.virtual' = 2 x 8 = 16 chunks is more than the model's 8 sublayers");
    refused(dir, 2, "--set parallel.pipeline=4", "'parallel.pipeline' (4) does not divide the 2 ranks");
    refused(dir, 0, "--set parallel.pipeline=2", "'parallel.pipeline' (2) does not divide the 1 rank");
    refused(dir, 2, "--set parallel.pipeline=2 --set train.grad_accum=1", "'train.grad_accum'");
    refused(dir, 2, "--set parallel.pipeline=2 --set parallel.virtual=2 --set train.grad_accum=3",
            "do not fit the interleaved schedule");
    refused(dir, 2, "--set parallel.pipeline=2 --set model.residual.kind=swa --set model.residual.window=2",
            "'model.residual.kind' swa cannot pipeline");
    refused(dir, 2, "--set parallel.pipeline=2 --set model.residual.kind=block --set model.residual.score=sigmoid",
            "cannot pipeline");
    refused(dir, 2, "--set parallel.pipeline=2 --set parallel.shard_optimizer=true",
            "'parallel.shard_optimizer' does not combine with 'parallel.pipeline'");
    refused(dir, 2, "--set parallel.pipeline=0", "'parallel.pipeline' expects a positive integer");
}

/* A stage killed mid-run: mpirun ends the job within seconds, the
 * checkpoint already saved is intact and resumes in one process. */
Test(pipe, a_killed_stage_ends_the_job_and_the_run_resumes, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    int st;
    char *o = mu_sh(dir, &st,
                    "(timeout 300 env " MPIRUN "2 '%s' train " PTINY " --set train.steps=1000000 --set model.d_model=128 "
                    "--set model.seq_len=64 --set train.save_every=2 --set train.eval_every=0 "
                    "--set parallel.pipeline=2 --out pk > pk.log 2>&1; echo $? > pk.status) & "
                    "for i in $(seq 600); do [ -s pk/model.safetensors ] && break; sleep 0.1; done; sleep 0.5; "
                    "kill -9 $(pgrep -f -n \"^[^ ]*attnres train .* --out pk$\"); "
                    "for i in $(seq 600); do [ -f pk.status ] && echo ended && break; sleep 0.1; done; cat pk.log",
                    mu_bin());
    cr_assert_eq(st, 0, "%s", o);
    cr_expect(strncmp(o, "ended", 5) == 0, "the job did not end within 60 s of the kill:\n%s", o);
    free(o);
    ar_config saved;
    long step = 0;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "pk"), &saved, &step, &e), 0, "the checkpoint: %s", e.msg);
    o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train --resume pk --set train.steps=%ld --set parallel.pipeline=1 2>&1", mu_bin(), step + 2);
    cr_expect_eq(st, 0, "resuming from the checkpoint of step %ld failed:\n%s", step, o);
    free(o);
}
