/* Data-parallel training under mpirun (parallel/dp.h): the bytes of
 * model.safetensors from 2 and 4 ranks against one process with the same
 * grad_accum, for baseline, Full and Block AttnRes; ZeRO-1 against
 * unsharded; a resume with another number of ranks; a grad_accum the ranks
 * do not divide; a rank killed mid-run.  Skips where this build has no MPI
 * or mpirun is missing.
 *
 * Bit identity holds by construction: every rank and the one process run
 * 1 thread (the thread count changes how sums are split), every
 * micro-batch has the same shape (train.batch_size) wherever it runs, the
 * step's gradient is dp.h's fixed tree over the micro-batches on any
 * number of ranks, the gradient norm is summed in fixed chunks, AdamW is
 * elementwise (so a shard updates its part as the whole would), and an
 * evaluation adds its batches' sums in batch order on any number of
 * ranks.
 *
 * Covers: parallel/dp.c, parallel/parallel_dp.c and parallel/comm_mpi.c,
 * through `attnres train` under mpirun (cmd/train.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "formats/tokens.h"
#include "run/checkpoint.h"
#include "mpiutil.h"
#include "parallel/watchdog.h"
#include "testutil.h"

#define TINY                                                                                             \
    "--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.d_ff=64 "             \
    "--set model.seq_len=16 --set train.batch_size=2 --set train.grad_accum=4 --set train.steps=6 "      \
    "--set train.warmup=2 --set train.log_every=1 --set train.eval_every=3 --set train.eval_windows=6 "  \
    "--set train.save_every=3 --set train.threads=1 --set data.train=corpus.txt"

static void train(const char *dir, int ranks, const char *kind, const char *extra, const char *out)
{
    int st;
    char *o = ranks > 0 ? mu_sh(dir, &st, MPIRUN "%d '%s' train " TINY " %s %s --out %s", ranks, mu_bin(), kind, extra, out)
                        : mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train " TINY " %s %s --out %s", mu_bin(), kind, extra, out);
    cr_assert_eq(st, 0, "%s ranks, %s %s: exit %d\n%s", ranks > 0 ? "mpirun" : "1 process", kind, extra, st, o);
    free(o);
}

static void ranks_match_one_process(const char *kind, const char *name)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    train(dir, 0, kind, "", "one");
    train(dir, 2, kind, "", "two");
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/one/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/two/model.safetensors", dir);
    mu_same_tensors(a, b, name);
    snprintf(a, sizeof a, "%s/one/optimizer.safetensors", dir);
    snprintf(b, sizeof b, "%s/two/optimizer.safetensors", dir);
    mu_same_tensors(a, b, name);
    /* the same losses, evaluations included, logged once by rank 0 */
    size_t na, nb;
    char *ma = tu_read_file(tu_path(tu_path(dir, "one"), "metrics.jsonl"), &na);
    char *mb = tu_read_file(tu_path(tu_path(dir, "two"), "metrics.jsonl"), &nb);
    int la = 0, lb = 0;
    for (size_t i = 0; i < na; i++)
        la += ma[i] == '\n';
    for (size_t i = 0; i < nb; i++)
        lb += mb[i] == '\n';
    cr_expect_eq(la, lb, "%s: %d metrics lines from one process, %d from two ranks", name, la, lb);
    int seen[3];
    tu_expect_same_metric_values(ma, mb, name, seen);
    free(ma);
    free(mb);
}

Test(dp, two_ranks_baseline_bit_identical, .timeout = 300)
{
    ranks_match_one_process("--set model.residual.kind=baseline", "baseline");
}
Test(dp, two_ranks_full_bit_identical, .timeout = 300)
{
    ranks_match_one_process("--set model.residual.kind=full", "full");
}
Test(dp, two_ranks_block_bit_identical, .timeout = 300)
{
    ranks_match_one_process("--set model.residual.kind=block --set model.residual.block_size=2", "block");
}

/* On a directory of uint16 token shards (windows drawn over the
 * concatenated stream, some spanning two shards): 2 ranks, the bytes of one
 * process. */
Test(dp, two_ranks_on_shards_bit_identical, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    char sd[4200], p[4300];
    snprintf(sd, sizeof sd, "%s/shards", dir);
    cr_assert_eq(mkdir(sd, 0755), 0);
    uint32_t r = 12345;
    int32_t x[2500];
    for (int s = 0; s < 3; s++) {
        size_t n = 700 + 400 * (size_t)s;
        for (size_t i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            x[i] = (int32_t)(r >> 8) % 300;
        }
        snprintf(p, sizeof p, "%s/part_%d.bin", sd, s);
        ar_err e = {{0}};
        cr_assert_eq(ar_tokens_write_llmc(p, x, n, 0, &e), 0, "%s", e.msg);
    }
    const char *kind = "--set model.residual.kind=block --set model.residual.block_size=2 "
                       "--set model.vocab=300 --set data.train=shards";
    train(dir, 0, kind, "", "one");
    train(dir, 2, kind, "", "two");
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/one/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/two/model.safetensors", dir);
    mu_same_tensors(a, b, "block on shards");
}

/* 4 ranks of one micro-batch each, and ZeRO-1 on 2 and 4 ranks: the bytes
 * of one process. */
Test(dp, four_ranks_and_sharded_optimizer_bit_identical, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    const char *kind = "--set model.residual.kind=block --set model.residual.block_size=2";
    train(dir, 0, kind, "", "one");
    train(dir, 4, kind, "", "four");
    train(dir, 2, kind, "--set parallel.shard_optimizer=true", "zero2");
    train(dir, 4, kind, "--set parallel.shard_optimizer=true", "zero4");
    const char *runs[] = {"four", "zero2", "zero4"};
    for (int i = 0; i < 3; i++)
        for (int f = 0; f < 2; f++) {
            const char *file = f ? "optimizer.safetensors" : "model.safetensors";
            char a[4200], b[4200];
            snprintf(a, sizeof a, "%s/one/%s", dir, file);
            snprintf(b, sizeof b, "%s/%s/%s", dir, runs[i], file);
            mu_same_tensors(a, b, runs[i]);
        }
}

/* Stopped after 3 steps on 2 sharded ranks, resumed in one process: the
 * bytes of 6 steps straight (constant rate, so the cut changes no lr). */
Test(dp, resume_with_another_number_of_ranks, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    const char *kind = "--set model.residual.kind=full --set train.schedule=constant";
    train(dir, 0, kind, "", "straight");
    train(dir, 2, kind, "--set parallel.shard_optimizer=true --set train.steps=3", "cut");
    int st;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train --resume cut --set train.steps=6", mu_bin());
    cr_assert_eq(st, 0, "%s", o);
    free(o);
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/straight/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/cut/model.safetensors", dir);
    mu_same_tensors(a, b, "resumed");
    /* and back: 1 process for 3 steps, 4 ranks for the rest */
    train(dir, 0, kind, "--set train.steps=3", "cut1");
    o = mu_sh(dir, &st, MPIRUN "4 '%s' train --resume cut1 --set train.steps=6", mu_bin());
    cr_assert_eq(st, 0, "%s", o);
    free(o);
    snprintf(b, sizeof b, "%s/cut1/model.safetensors", dir);
    mu_same_tensors(a, b, "resumed on 4 ranks");
}

Test(dp, grad_accum_the_ranks_do_not_divide_is_refused, .timeout = 120)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    int st;
    char *o = mu_sh(dir, &st, MPIRUN_REFUSED "2 '%s' train " TINY " --set train.grad_accum=3 --out odd 2>&1", mu_bin());
    cr_expect_neq(st, 0, "%s", o);
    cr_expect(strstr(o, "attnres: error: 'train.grad_accum' (3) is not a multiple of the 2 ranks"), "%s", o);
    /* said once, by rank 0 */
    const char *first = strstr(o, "is not a multiple");
    cr_expect(first && !strstr(first + 1, "is not a multiple"), "the error is printed more than once:\n%s", o);
    cr_expect_neq(access(tu_path(dir, "odd"), F_OK), 0, "a refused run left its directory");
    free(o);
}

/* A long run of 2 ranks into RUN, in the background; once RUN/ready has
 * content, the shell command `signal`; then up to 60 s for the job to end.
 * The output: "ended" if it did, then the job's log. */
static char *signalled_run(const char *dir, const char *run, const char *mca, const char *extra,
                           const char *ready, const char *signal)
{
    int st;
    char *o = mu_sh(dir, &st,
                 "rm -f %s.status; (timeout 300 env %s " MPIRUN "2 '%s' train " TINY " --set train.steps=1000000 "
                 "--set model.d_model=128 --set model.seq_len=64 %s --out %s > %s.log 2>&1; echo $? > %s.status) & "
                 "for i in $(seq 600); do [ -s %s/%s ] && break; sleep 0.1; done; sleep 0.5; %s; "
                 "for i in $(seq 600); do [ -f %s.status ] && echo ended && break; sleep 0.1; done; cat %s.log",
                 run, mca, mu_bin(), extra, run, run, run, run, ready, signal, run, run);
    cr_assert_eq(st, 0, "%s", o);
    return o;
}

/* The run resumes from its checkpoint, for two more steps. */
static void resumes(const char *dir, const char *run, const char *launcher)
{
    ar_config saved;
    long step = 0;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, run), &saved, &step, &e), 0, "the checkpoint: %s", e.msg);
    int st;
    char *o = mu_sh(dir, &st, "%s '%s' train --resume %s --set train.steps=%ld", launcher, mu_bin(), run, step + 2);
    cr_expect_eq(st, 0, "resuming from the checkpoint of step %ld failed:\n%s", step, o);
    cr_expect(strstr(o, "done:"), "%s", o);
    free(o);
}

/* A job stopped by `signal` (a shell command) once `ready` appears in its
 * run directory: it must end within 60 s; returns its output. */
static char *job_ends(const char *dir, const char *run, const char *mca, const char *extra, const char *ready,
                      const char *signal)
{
    char *o = signalled_run(dir, run, mca, extra, ready, signal);
    cr_expect(strncmp(o, "ended", 5) == 0, "the job did not end within 60 s of '%s':\n%s", signal, o);
    return o;
}

/* A rank killed mid-run: mpirun ends the job within seconds, naming the
 * rank; the checkpoint already saved is intact and the run resumes. */
Test(dp, a_killed_rank_ends_the_job_and_the_run_resumes, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    char *o = job_ends(dir, "k", "", "--set train.save_every=2", "model.safetensors",
                       "kill -9 $(pgrep -f -n \"^[^ ]*attnres train .* --out k$\")");
    cr_expect(strstr(o, "rank") && (strstr(o, "signal 9") || strstr(o, "Killed")),
              "mpirun does not say which rank died:\n%s", o);
    free(o);
    resumes(dir, "k", "OMP_NUM_THREADS=1");
}

/* SIGUSR1 to mpirun, which passes it on to every rank unchanged (and
 * kills nobody: here even with no wait before its kills): every rank
 * stops after the same step, rank 0 saves once, and the run resumes from
 * that checkpoint. */
Test(dp, sigusr1_to_mpirun_saves_once_and_stops_every_rank, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    char *o = job_ends(dir, "u", "OMPI_MCA_odls_base_sigkill_timeout=0",
                       "--set train.save_every=0 --set train.eval_every=0", "metrics.jsonl",
                       "kill -USR1 $(pgrep -f -n \"^mpirun .* --out u$\")");
    cr_expect(strstr(o, "checkpoint saved; continue with: attnres train --resume u"), "%s", o);
    const char *first = strstr(o, "interrupted at step");
    cr_expect(first && !strstr(first + 1, "interrupted at step"), "not said once, by rank 0:\n%s", o);
    free(o);
    resumes(dir, "u", MPIRUN "2");
}

/* Ctrl-C (SIGINT) to mpirun is Open MPI's abort: SIGTERM to every rank,
 * SIGKILL odls_base_sigkill_timeout (1) seconds later, so whether the
 * ranks' last step and save end in time depends on the step.  What holds
 * either way: the job ends, and the run resumes (from the checkpoint the
 * ranks saved, or the periodic one before it). */
Test(dp, sigint_to_mpirun_ends_the_job_and_the_run_resumes, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    free(job_ends(dir, "s", "", "--set train.save_every=2 --set train.eval_every=0", "model.safetensors",
                  "kill -INT $(pgrep -f -n \"^mpirun .* --out s$\")"));
    resumes(dir, "s", MPIRUN "2");
}

/* ablate under mpirun: the runs are spread over the ranks, each trained
 * whole by one rank, and rank 0 writes the report: the same val_loss and
 * final_val_loss columns as one process.  A command that cannot use ranks says so. */
Test(dp, ablate_spreads_its_runs_and_other_commands_refuse_ranks, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    int st;
    const char *args = "ablate --variant baseline,block,full --seeds 1 " TINY;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' %s --out ab1 2>&1", mu_bin(), args);
    cr_assert_eq(st, 0, "%s", o);
    free(o);
    o = mu_sh(dir, &st, MPIRUN "2 '%s' %s --out ab2 2>&1", mu_bin(), args);
    cr_assert_eq(st, 0, "%s", o);
    cr_expect(strstr(o, "ablation done: 3 runs (0 reused, 3 trained)"), "%s", o);
    free(o);
    o = mu_sh(dir, &st, "cut -d, -f1,6,10 ab1/results.csv; echo ==; cut -d, -f1,6,10 ab2/results.csv");
    char *sep = strstr(o, "==\n");
    cr_assert(sep, "%s", o);
    *sep = 0;
    cr_expect_str_eq(o, sep + 3, "the variants' results differ between 1 process and 2 ranks");
    free(o);
    o = mu_sh(dir, &st, MPIRUN_REFUSED "2 '%s' plot ab1/runs/baseline-seed1 2>&1", mu_bin());
    cr_expect_neq(st, 0);
    cr_expect(strstr(o, "attnres: error: 'attnres plot' runs in one process: start it without mpirun"), "%s", o);
    free(o);
}

/* dp.c's NCCL path (exchanges grouped and queued in order, adds by the
 * communicator, one sync), run over MPI (ATTNRES_TEST_STREAM_ORDER,
 * parallel/comm_mpi.c): the bytes of one process, unsharded and ZeRO-1. */
Test(dp, the_nccl_way_over_mpi_is_bit_identical, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    const char *kind = "--set model.residual.kind=block --set model.residual.block_size=2";
    train(dir, 0, kind, "", "one");
    int st;
    char *o = mu_sh(dir, &st, MPIRUN "2 -x ATTNRES_TEST_STREAM_ORDER=1 '%s' train " TINY " %s --out ordered", mu_bin(), kind);
    cr_assert_eq(st, 0, "%s", o);
    free(o);
    o = mu_sh(dir, &st, MPIRUN "4 -x ATTNRES_TEST_STREAM_ORDER=1 '%s' train " TINY " %s --set parallel.shard_optimizer=true "
                     "--out ordered4", mu_bin(), kind);
    cr_assert_eq(st, 0, "%s", o);
    free(o);
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/one/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/ordered/model.safetensors", dir);
    mu_same_tensors(a, b, "stream order, 2 ranks");
    snprintf(b, sizeof b, "%s/ordered4/model.safetensors", dir);
    mu_same_tensors(a, b, "stream order, 4 sharded ranks");
}

/* 3 and 6 micro-batches per rank (grad_accum 6 and 12 over 2 ranks): the
 * local sums of odd runs and of the counter's levels, against one
 * process. */
Test(dp, several_micro_batches_per_rank_bit_identical, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = mu_setup_dir();
    const char *kind = "--set model.residual.kind=full";
    const char *accum[] = {"--set train.grad_accum=6", "--set train.grad_accum=12"};
    for (int i = 0; i < 2; i++) {
        char one[16], two[16], a[4200], b[4200];
        snprintf(one, sizeof one, "one%d", i);
        snprintf(two, sizeof two, "two%d", i);
        train(dir, 0, kind, accum[i], one);
        train(dir, 2, kind, accum[i], two);
        snprintf(a, sizeof a, "%s/%s/model.safetensors", dir, one);
        snprintf(b, sizeof b, "%s/%s/model.safetensors", dir, two);
        mu_same_tensors(a, b, accum[i]);
    }
}

/* The wait watchdog without MPI: a wait past parallel.timeout_s ends the
 * process with status 1 (the message names the rank and the wait); waits
 * that end in time, nested or not, leave it running. */
Test(watchdog, a_wait_past_the_timeout_stops_the_rank, .exit_code = 1, .timeout = 30)
{
    ar_watchdog_start(0.5, 3);
    ar_watchdog_arm("a test's wait");
    sleep(5);
    cr_assert_fail("the watchdog did not stop the process");
}

Test(watchdog, waits_that_end_in_time_do_not, .timeout = 30)
{
    ar_watchdog_start(0.6, 0);
    for (int i = 0; i < 5; i++) {
        ar_watchdog_arm("outer");
        ar_watchdog_arm("inner");
        usleep(300000);
        ar_watchdog_disarm();
        usleep(200000);
        ar_watchdog_disarm(); /* the outer wait lasted 0.5 s: in time */
        usleep(300000);       /* idle: not a wait */
    }
    ar_watchdog_disarm(); /* one too many: harmless */
    usleep(900000);
}
