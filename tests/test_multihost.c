/* Data parallelism across "hosts": network namespaces joined by a bridge
 * (tools/netns-hosts.sh), one rank per namespace, MPI over TCP between
 * their addresses, launched by mpirun through the harness's agent instead
 * of ssh.  Skips where namespaces cannot be made (not root, no
 * CAP_NET_ADMIN) or there is no MPI.  Under AddressSanitizer the ranks
 * skip the leak check, as in mpiutil.h's MPIRUN (Open MPI's own).
 *
 * Covers: tools/netns-hosts.sh; parallel/ (data parallelism) over TCP. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "run/checkpoint.h"
#include "mpiutil.h"
#include "core/clock.h"
#include "testutil.h"

#define TINY                                                                                             \
    "--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.d_ff=64 "             \
    "--set model.seq_len=16 --set train.batch_size=2 --set train.grad_accum=4 --set train.steps=6 "      \
    "--set train.warmup=2 --set train.log_every=1 --set train.eval_every=3 --set train.eval_windows=6 "  \
    "--set train.save_every=3 --set train.threads=1 --set data.train=corpus.txt"

/* this test process's own namespaces and subnet (tests run side by side) */
static char env[160];

/* `tools/netns-hosts.sh ARGS` for this test's hosts: its output, the
 * status in st */
static char *harness(int *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *harness(int *st, const char *fmt, ...)
{
    char args[512], cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s '%s/tools/netns-hosts.sh' %s", env, tu_source_dir(), args);
    return tu_run(cmd, st);
}

/* The shell words that run `attnres train` on hosts 1..N under mpirun, one
 * rank of one thread each (arguments: env, the source dir, N, the binary;
 * the train arguments follow) */
#define ON_HOSTS                                                                                         \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s timeout -k 5 200 "                     \
    "'%s/tools/netns-hosts.sh' mpirun %d -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS=detect_leaks=0 '%s' train "

static void hosts_down(void)
{
    if (!env[0])
        return;
    int st;
    free(harness(&st, "down"));
}

/* n hosts up, or the test skipped with the harness's reason */
static void hosts_up(int n)
{
    mu_need_mpi();
    if (!tu_source_dir())
        cr_skip_test("AR_SOURCE_DIR is not set");
    int pid = (int)getpid();
    snprintf(env, sizeof env, "AR_NETNS=ar%d AR_NETNS_NET=10.87.%d", pid % 10000000, pid % 250);
    int st;
    char *o = harness(&st, "check");
    if (st != 0)
        cr_skip_test("no network namespaces here: %s", o);
    free(o);
    o = harness(&st, "up %d", n);
    cr_assert_eq(st, 0, "netns-hosts.sh up %d: %s", n, o);
    free(o);
}

/* bytes host i has sent */
static long long sent(int i)
{
    int st;
    char *o = harness(&st, "bytes %d", i);
    long long tx = -1, rx = -1;
    cr_assert(st == 0 && sscanf(o, "%lld %lld", &tx, &rx) == 2, "bytes %d: %s", i, o);
    free(o);
    return tx;
}

TestSuite(multihost, .fini = hosts_down);

/* The launch of `train TINY ARGS --out out` on hosts 1..n, retried once
 * where mpirun failed before training began (a launch through the
 * namespaces has failed so, rarely, before any attnres process started);
 * tx gets each host's bytes sent. */
static void train_on_hosts(const char *dir, int n, const char *args, const char *out, long long *tx)
{
    long long t0[8];
    for (int h = 0; h < n; h++)
        t0[h] = sent(h + 1);
    int st;
    char *o = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(o);
        o = mu_sh(dir, &st, "rm -rf %s; " ON_HOSTS TINY " %s --out %s 2>&1", out, env, tu_source_dir(), n,
                  mu_bin(), args, out);
        if (st == 0 || strstr(o, "training run in"))
            break;
    }
    cr_assert_eq(st, 0, "%d hosts, %s: %s", n, args, o);
    free(o);
    for (int h = 0; h < n; h++)
        tx[h] = sent(h + 1) - t0[h];
}

/* floats of the parameters (= of the gradient) in a run's model file */
static long long param_floats(const char *file)
{
    ar_st_file f;
    ar_err e;
    cr_assert_eq(ar_st_read(&f, file, &e), 0, "%s", e.msg);
    long long n = 0;
    for (int i = 0; i < f.n; i++)
        n += (long long)(f.t[i].end - f.t[i].begin) / 4;
    ar_st_free(&f);
    return n;
}

#define QUIET "--set train.eval_every=0 --set train.save_every=0"

/* Data parallelism on 2 and 4 hosts: bit-identical to one process, and
 * the hosts together send per step what the gradient's all-reduce plans:
 * recursive halving, then doubling, over P ranks moves 2 (P - 1) times the
 * gradient's floats in all, however each bucket's parts are cut (which
 * makes one host's share uneven at P = 4: parts end on 16384-float
 * boundaries).  Read from the interfaces' counters as the difference
 * between a run of 12 steps and one of 6 (start-up, the final evaluation
 * and save cancel).  TCP/IP headers and acknowledgements, and the step's
 * few small collectives, come on top: at most 10% and 4 KiB a host and
 * step. */
Test(multihost, data_parallel_across_hosts_as_one_process, .timeout = 300)
{
    hosts_up(4);
    const char *dir = mu_setup_dir();
    int st;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train " TINY " " QUIET " --out one", mu_bin());
    cr_assert_eq(st, 0, "one process: %s", o);
    free(o);
    long long P = param_floats(tu_path(dir, "one/model.safetensors"));
    for (int n = 2; n <= 4; n += 2) {
        long long t6[4], t12[4];
        train_on_hosts(dir, n, QUIET, "six", t6);
        mu_same_tensors(tu_path(dir, "one/model.safetensors"), tu_path(dir, "six/model.safetensors"), "weights");
        mu_same_tensors(tu_path(dir, "one/optimizer.safetensors"), tu_path(dir, "six/optimizer.safetensors"),
                        "optimizer");
        train_on_hosts(dir, n, QUIET " --set train.steps=12", "twelve", t12);
        double plan = 2.0 * (n - 1) * (double)P * 4, per_step = 0;
        for (int h = 0; h < n; h++)
            per_step += (double)(t12[h] - t6[h]) / 6;
        cr_log_info("%d hosts: %.0f bytes a step, all-reduce %.0f", n, per_step, plan);
        cr_expect(per_step >= plan && per_step <= 1.1 * plan + 4096.0 * n,
                  "%d hosts sent %.0f bytes a step in all, the all-reduce plans %.0f", n, per_step, plan);
    }
}

#define MAXLINES 1024 /* metrics lines a test reads */

/* the mean of a metric over a metrics file's lines that have it */
static double metric_mean(const char *file, const char *key)
{
    double v[MAXLINES], sum = 0;
    int k = mu_metric_values(file, key, v, MAXLINES);
    cr_assert(k > 0, "%s has no %s", file, key);
    for (int i = 0; i < k; i++)
        sum += v[i];
    return sum / k;
}

/* A pipeline of 2 stages with 2 virtual stages each, a stage a host:
 * within the pipeline's tolerance of one process (test_pipe.c: rounding
 * only, 1e-4 of each tensor's norm), and the bytes the hosts send per step
 * are the residual rows the run counts (pipe_fwd_bytes forward and
 * pipe_bwd_bytes back, which test_pipe checks against the plan), with
 * TCP/IP's and MPI's headers and the receiver's acknowledgements on top
 * (rows of 4 KiB here: three segments of 66 header bytes each and half as
 * many acknowledgements, about 8%, and MPI's own headers), and the step's
 * small collectives: at most 20% and 16 KiB. */
Test(multihost, a_pipeline_across_two_hosts, .timeout = 300)
{
    hosts_up(2);
    const char *dir = mu_setup_dir();
    const char *deep = QUIET " --set model.n_layer=4 --set parallel.pipeline=2 --set parallel.virtual=2";
    int st;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train " TINY " " QUIET " --set model.n_layer=4 --out one",
                    mu_bin());
    cr_assert_eq(st, 0, "one process: %s", o);
    free(o);
    long long t6[2], t12[2];
    train_on_hosts(dir, 2, deep, "six", t6);
    mu_close_tensors(tu_path(dir, "one/model.safetensors"), tu_path(dir, "six/model.safetensors"), 1e-4,
                     "P = 2, V = 2 on two hosts");
    char deep12[256];
    snprintf(deep12, sizeof deep12, "%s --set train.steps=12", deep);
    train_on_hosts(dir, 2, deep12, "twelve", t12);
    const char *mf = tu_path(dir, "twelve/metrics.jsonl");
    double plan = metric_mean(mf, "pipe_fwd_bytes") + metric_mean(mf, "pipe_bwd_bytes");
    double per_step = (double)(t12[0] - t6[0] + t12[1] - t6[1]) / 6;
    cr_log_info("pipeline on 2 hosts: %.0f bytes a step, rows %.0f", per_step, plan);
    cr_expect(per_step >= plan && per_step <= 1.2 * plan + 16384,
              "the two hosts sent %.0f bytes a step, the pipeline's rows are %.0f", per_step, plan);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Starts `train TINY ARGS --out NAME` on hosts 1 and 2 in the background:
 * its output goes to NAME.log, its status to NAME.rc when it ends. */
static void start_on_hosts(const char *dir, const char *args, const char *name)
{
    int st;
    char *o = mu_sh(dir, &st, "(" ON_HOSTS TINY " %s --out %s > %s.log 2>&1; echo $? > %s.rc) </dev/null >/dev/null 2>&1 &",
                    env, tu_source_dir(), 2, mu_bin(), args, name, name, name);
    cr_assert_eq(st, 0, "%s", o);
    free(o);
}

/* Waits up to secs from t0 for path to exist, or for stop (may be NULL). */
static int wait_for(const char *path, const char *stop, double t0, double secs)
{
    while (!exists(path) && !(stop && exists(stop)) && ar_now_s() - t0 < secs)
        usleep(100000);
    return exists(path);
}

/* A fault mid-run on two hosts (fault: a shell command, run once the
 * first checkpoint is written): the job ends within a minute with status
 * non-zero and an error containing `says` (and, where says2 is set, that
 * too); the checkpoint is intact and, after `repair`, the run resumes
 * from it for two more steps. */
static void fault_ends_the_job(const char *fault, const char *repair, const char *says, const char *says2)
{
    hosts_up(2);
    const char *dir = mu_setup_dir();
    start_on_hosts(dir,
                   "--set train.steps=1000000 --set train.eval_every=0 --set train.save_every=20 "
                   "--set parallel.timeout_s=3",
                   "cut");
    const char *ck = tu_path(dir, "cut/model.safetensors"), *rcf = tu_path(dir, "cut.rc");
    cr_assert(wait_for(ck, rcf, ar_now_s(), 120) && !exists(rcf),
              "no checkpoint within 120 s, or the run ended first:\n%s", tu_read_file(tu_path(dir, "cut.log"), NULL));
    int st;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "export %s; cd '%s/tools'; %s", env, tu_source_dir(), fault);
    char *o = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s: %s", fault, o);
    free(o);
    double tcut = ar_now_s();
    wait_for(rcf, NULL, tcut, 90);
    double took = ar_now_s() - tcut;
    char *log = tu_read_file(tu_path(dir, "cut.log"), NULL);
    cr_assert(exists(rcf), "the job did not end within 90 s of '%s':\n%s", fault, log);
    char *rc = tu_read_file(rcf, NULL);
    cr_expect(atoi(rc) != 0, "the job ended with status 0");
    free(rc);
    /* well inside the launch's own timeout (200 s): mpirun's status, not timeout's */
    cr_expect(took < 60, "the job took %.0f s to end after '%s'", took, fault);
    cr_expect(strstr(log, says) && (!says2 || strstr(log, says2)), "no error with '%s' and '%s':\n%s", says,
              says2 ? says2 : "", log);
    free(log);
    snprintf(cmd, sizeof cmd, "export %s; cd '%s/tools'; %s", env, tu_source_dir(), repair);
    free(tu_run(cmd, &st));
    ar_config saved;
    long step = 0;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "cut"), &saved, &step, &e), 0, "the checkpoint: %s", e.msg);
    o = mu_sh(dir, &st, ON_HOSTS "--resume cut --set train.steps=%ld 2>&1", env, tu_source_dir(), 2, mu_bin(),
              step + 2);
    cr_expect_eq(st, 0, "resuming from step %ld failed:\n%s", step, o);
    cr_expect(strstr(o, "done:"), "%s", o);
    free(o);
}

/* A link cut: MPI over TCP would wait on it for about 15 minutes; every
 * rank stops after parallel.timeout_s with an error naming its rank and
 * host, and mpirun (whose TCP gives up on the silent host in seconds)
 * ends the job. */
Test(multihost, a_cut_link_ends_the_job_and_the_run_resumes, .timeout = 300)
{
    fault_ends_the_job("./netns-hosts.sh link 2 down", "./netns-hosts.sh link 2 up", "attnres: error: rank ",
                       "parallel.timeout_s is 3");
}

/* The rank on host 2 killed: mpirun notices at once and names the rank,
 * its host's address and the signal. */
Test(multihost, a_killed_rank_ends_the_job_and_the_run_resumes, .timeout = 300)
{
    fault_ends_the_job("kill -9 $(ip netns pids \"$AR_NETNS\"h2 | xargs ps -o pid=,comm= -p | "
                       "awk '$2 == \"attnres\" {print $1}')",
                       "true", "rank 1", "signal 9");
}

/* A partition of 5 s that heals: the ranks wait it out (TCP retransmits;
 * parallel.timeout_s is well above it) and the run ends as if nothing had
 * happened, bit-identical to one process. */
Test(multihost, a_partition_that_heals_is_ridden_out, .timeout = 300)
{
    hosts_up(2);
    const char *dir = mu_setup_dir();
    const char *run = QUIET " --set train.steps=500 --set parallel.timeout_s=60";
    int st;
    char *o = mu_sh(dir, &st, "OMP_NUM_THREADS=1 '%s' train " TINY " %s --out one", mu_bin(), run);
    cr_assert_eq(st, 0, "one process: %s", o);
    free(o);
    start_on_hosts(dir, run, "two");
    const char *mf = tu_path(dir, "two/metrics.jsonl"), *rcf = tu_path(dir, "two.rc");
    double t0 = ar_now_s();
    /* training under way (step 5 logged), not still starting: the start's
     * broadcasts would wait the partition out unseen by any step's time */
    for (;;) {
        char *m = exists(mf) ? tu_read_file(mf, NULL) : NULL;
        int going = m && strstr(m, "\"step\":5,");
        free(m);
        if (going || exists(rcf) || ar_now_s() - t0 > 120)
            break;
        usleep(50000);
    }
    cr_assert(!exists(rcf) && ar_now_s() - t0 <= 120, "the run did not reach step 5 within 120 s, or ended first");
    free(harness(&st, "link 2 down && sleep 5 && %s '%s/tools/netns-hosts.sh' link 2 up", env, tu_source_dir()));
    cr_assert_eq(st, 0, "the partition");
    wait_for(rcf, NULL, t0, 180);
    char *log = tu_read_file(tu_path(dir, "two.log"), NULL);
    cr_assert(exists(rcf), "the run did not end:\n%s", log);
    char *rc = tu_read_file(rcf, NULL);
    cr_assert_eq(atoi(rc), 0, "the run failed after the partition healed:\n%s", log);
    free(rc);
    free(log);
    mu_same_tensors(tu_path(dir, "one/model.safetensors"), tu_path(dir, "two/model.safetensors"), "weights");
    /* the partition fell inside the run: two consecutive lines of the
     * metrics (log_every 1) are most of its 5 s apart (the wait may fall in
     * a step or in the collective between steps, which no step's time
     * holds) */
    double el[MAXLINES], gap = 0;
    int k = mu_metric_values(mf, "elapsed_s", el, MAXLINES);
    for (int i = 1; i < k; i++)
        gap = el[i] - el[i - 1] > gap ? el[i] - el[i - 1] : gap;
    cr_log_info("partition: the longest gap between steps %.2f s", gap);
    cr_expect(gap > 4, "no step waited out the partition: the longest gap between steps was %.2f s", gap);
}
