/* Training on sharded token sets: the shards of a directory or glob train
 * exactly as one file holding the same tokens, resume exactly, evaluate a
 * sharded validation set shard by shard, stop at a bad id naming its shard
 * and offset, and keep the peak memory of a run independent of the data's
 * size.
 *
 * Bit identity holds by construction: the same code, shapes and threads,
 * and the windows drawn are the same (a window's offset is a function of
 * the seed and the micro-batch, read from the concatenated stream).
 *
 * Covers: run/data.c (splits, sampling, evaluation windows), run/train.c
 * (sampling through the token set, the data fingerprint), run/eval.c, over
 * formats/token_set.c. */
#include <criterion/criterion.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "formats/token_set.h"
#include "formats/tokens.h"
#include "run/data.h"
#include "run/eval.h"
#include "run/train.h"
#include "resumeutil.h"
#include "testutil.h"

extern char **environ;

enum { VOCAB = 300, T = 16 };

/* n pseudo-random ids below VOCAB (xorshift; seed > 0). */
static int32_t *random_ids(size_t n, uint32_t seed)
{
    int32_t *x = malloc(n * sizeof *x);
    cr_assert(x);
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        x[i] = (int32_t)(seed % VOCAB);
    }
    return x;
}

/* x[0..n) as one uint16 token file `one`, and as shards cut at cuts[0..nc)
 * (increasing, inside (0, n)) in directory `shards`, named so that their
 * name order is their order. */
static void write_sets(const char *dir, const int32_t *x, size_t n, const size_t *cuts, int nc)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(tu_path(dir, "one.bin"), x, n, 0, &e), 0, "%s", e.msg);
    char sd[4200], p[4300];
    snprintf(sd, sizeof sd, "%s", tu_path(dir, "shards"));
    cr_assert_eq(mkdir(sd, 0755), 0);
    for (int i = 0; i <= nc; i++) {
        size_t lo = i ? cuts[i - 1] : 0, hi = i < nc ? cuts[i] : n;
        snprintf(p, sizeof p, "%s/train_%06d.bin", sd, i + 1);
        cr_assert_eq(ar_tokens_write_llmc(p, x + lo, hi - lo, 0, &e), 0, "%s", e.msg);
    }
}

static ar_config tiny(const char *train, const char *val)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 32;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.d_ff = 64;
    c.model.seq_len = T;
    c.model.vocab_bytes = 0;
    c.model.vocab = VOCAB;
    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 2;
    c.model.residual.num_blocks = 0;
    snprintf(c.data.train, sizeof c.data.train, "%s", train);
    snprintf(c.data.val, sizeof c.data.val, "%s", val ? val : "");
    c.data.val_fraction = 0.1;
    c.train.steps = 12;
    c.train.batch_size = 4;
    c.train.grad_accum = 2;
    c.train.warmup = 2;
    c.train.eval_every = 6;
    c.train.eval_windows = 8;
    c.train.save_every = 0;
    c.train.log_every = 1;
    c.train.threads = 2;
    return c;
}

static void train_into(const ar_config *c, const char *out)
{
    ar_err e = {{0}};
    ar_train_result r;
    ar_train_opts o = {.out_dir = out};
    cr_assert_eq(ar_train(c, &o, &r, &e), 0, "%s: %s", c->data.train, e.msg);
}

/* The same tokens as one file, a directory of shards and a glob of them:
 * the same windows, so the same bytes of weights and the same metrics. */
Test(train_shards, shards_train_as_one_file, .timeout = 180)
{
    const char *dir = tu_tmpdir();
    size_t cuts[] = {1500, 1520, 4100, 7000}; /* a shard of 20 tokens: windows span it */
    int32_t *x = random_ids(9000, 7);
    write_sets(dir, x, 9000, cuts, 4);
    int32_t *v = random_ids(1000, 11);
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(tu_path(dir, "val.bin"), v, 1000, 0, &e), 0, "%s", e.msg);
    const char *specs[] = {"one.bin", "shards", "shards/train_*.bin"};
    for (int i = 0; i < 3; i++) {
        char spec[4200], val[4200], out[4200];
        snprintf(spec, sizeof spec, "%s/%s", dir, specs[i]);
        snprintf(val, sizeof val, "%s/val.bin", dir);
        snprintf(out, sizeof out, "%s/run%d", dir, i);
        ar_config c = tiny(spec, val);
        train_into(&c, out);
    }
    size_t n0, n, nm;
    char *w0 = tu_model_bytes(tu_path(dir, "run0"), &n0);
    char *m0 = tu_read_file(tu_path(tu_path(dir, "run0"), "metrics.jsonl"), &nm);
    for (int i = 1; i < 3; i++) {
        char run[16];
        snprintf(run, sizeof run, "run%d", i);
        char *w = tu_model_bytes(tu_path(dir, run), &n);
        cr_assert_eq(n, n0);
        cr_expect(memcmp(w, w0, n) == 0, "%s: the weights differ from one file's", specs[i]);
        free(w);
        /* the metrics differ only in their timings */
        char *m = tu_read_file(tu_path(tu_path(dir, run), "metrics.jsonl"), &nm);
        int seen[3];
        tu_expect_same_metric_values(m0, m, specs[i], seen);
        for (int k = 0; k < 3; k++)
            cr_expect_gt(seen[k], 0, "%s: metric %d never logged", specs[i], k);
        free(m);
    }
    free(w0);
    free(m0);
    free(x);
    free(v);
}

/* A run on a glob of shards stopped and resumed: the bytes of one that was
 * not; the checkpoint records the set's fingerprint. */
Test(train_shards, resume_on_shards_is_exact, .timeout = 180)
{
    tu_resume x;
    tu_resume_init(&x);
    const char *dir = tu_tmpdir();
    size_t cuts[] = {2000, 5000};
    int32_t *ids = random_ids(8000, 3);
    write_sets(dir, ids, 8000, cuts, 2);
    char spec[4200];
    snprintf(spec, sizeof spec, "%s/shards/*.bin", dir);
    ar_config c = tiny(spec, NULL);
    ar_train_result r;
    ar_err e = {{0}};
    tu_resume_straight(&x, &c, &r);
    tu_resume_stop(&x, &c, 5, &r);
    cr_assert(r.interrupted);
    cr_assert_eq(r.step, 6, "interrupted at step %ld", r.step);
    cr_assert_eq(tu_resume_continue(&x, &c, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.step, 12);
    tu_resume_expect_same_weights(&x);

    ar_token_set *ts = ar_token_set_open(spec, &e);
    cr_assert(ts, "%s", e.msg);
    char want[16];
    snprintf(want, sizeof want, "%08x", (unsigned)ar_token_set_fingerprint(ts));
    ar_token_set_free(ts);
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, tu_path(x.b, "model.safetensors"), &e), 0, "%s", e.msg);
    const char *fp = ar_st_meta(&f, "data_fingerprint"), *nt = ar_st_meta(&f, "data_tokens");
    cr_assert(fp && nt);
    cr_expect_str_eq(fp, want);
    cr_expect_str_eq(nt, "7200"); /* 8000 less the val_fraction 0.1 tail */
    ar_st_free(&f);
    free(ids);
}

/* data.val a directory of two shards: each its own stream of windows, the
 * first shard's then the second's, none spanning the two. */
Test(train_shards, sharded_validation_is_evaluated_shard_by_shard)
{
    const char *dir = tu_tmpdir();
    int32_t *x = random_ids(3000, 5);
    size_t cuts[] = {1000};
    write_sets(dir, x, 1700, cuts, 1); /* shards of 1000 and 700 tokens */
    ar_config c = tiny(tu_path(dir, "one.bin"), tu_path(dir, "shards"));
    ar_dataset ds;
    ar_err e = {{0}};
    cr_assert_eq(ar_dataset_open(&ds, &c.data, &c.model, &e), 0, "%s", e.msg);
    cr_assert_eq(ds.nval, 2);
    size_t w1 = (1000 - 1) / T, w2 = (700 - 1) / T;
    cr_assert_eq(ar_eval_data_windows(&ds.eval, T), w1 + w2);
    int32_t in[T], tg[T], want_in[T], want_tg[T];
    for (size_t w = 0; w < w1 + w2; w++) {
        const int32_t *s = w < w1 ? x : x + 1000;
        size_t k = w < w1 ? w : w - w1;
        ar_eval_window(s, k, T, want_in, want_tg);
        cr_assert_eq(ar_eval_data_window(&ds.eval, w, T, in, tg, &e), 0, "%s", e.msg);
        cr_assert_arr_eq(in, want_in, sizeof in, "window %zu", w);
        cr_assert_arr_eq(tg, want_tg, sizeof tg, "window %zu", w);
    }
    ar_dataset_close(&ds);
    free(x);
}

/* An id not below the vocabulary stops training at the step that reads
 * it, with the shard and the token's offset in it; nothing is saved. */
Test(train_shards, a_bad_id_stops_training_naming_its_shard, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    int32_t *x = random_ids(6000, 9);
    for (size_t i = 3000; i < 6000; i++)
        x[i] = VOCAB + 7; /* all of the second shard */
    size_t cuts[] = {3000};
    write_sets(dir, x, 6000, cuts, 1);
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(tu_path(dir, "val.bin"), x, 1000, 0, &e), 0, "%s", e.msg);
    char val[4200];
    snprintf(val, sizeof val, "%s", tu_path(dir, "val.bin"));
    ar_config c = tiny(tu_path(dir, "shards"), val);
    c.train.eval_every = 0;
    char out[4200];
    snprintf(out, sizeof out, "%s/run", dir);
    ar_train_result r;
    ar_train_opts o = {.out_dir = out};
    cr_assert_eq(ar_train(&c, &o, &r, &e), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s/shards/train_000002.bin': token ", dir);
    cr_expect(strstr(e.msg, want), "%s", e.msg);
    cr_expect(strstr(e.msg, "has id 307 but the vocabulary holds 300 ids"), "%s", e.msg);
    cr_expect(access(tu_path(out, "model.safetensors"), F_OK) != 0, "a checkpoint was written");
    free(x);
}

/* Peak RSS (ru_maxrss, KiB) of `attnres train` on data.train = spec. */
static long peak_kib(const char *dir, const char *spec)
{
    const char *bin = getenv("AR_BIN");
    char data[4300], val[4300], out[4300];
    snprintf(data, sizeof data, "data.train=%s", spec);
    snprintf(val, sizeof val, "data.val=%s/val.bin", dir);
    snprintf(out, sizeof out, "%s/run-%d", dir, (int)strlen(spec));
    char *argv[] = {(char *)bin, "train", "--set", "model.d_model=32", "--set", "model.n_layer=2",
                    "--set", "model.n_head=2", "--set", "model.d_ff=64", "--set", "model.seq_len=64",
                    "--set", "model.vocab=300", "--set", data, "--set", val, "--set", "train.steps=6", "--set", "train.warmup=2",
                    "--set", "train.batch_size=8", "--set", "train.eval_every=3", "--set", "train.eval_windows=4",
                    "--set", "train.final_eval_windows=4", "--set", "train.log_every=1", "--threads", "1",
                    "--out", out, "--force", NULL};
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, bin, NULL, NULL, argv, environ), 0);
    int st;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "attnres train on %s: status %d", spec, st);
    return ru.ru_maxrss;
}

/* The memory claim: a run over 256 MiB of shards peaks within a few MiB of
 * the same run over one shard of 1 MiB.  What may differ: the pages a run
 * touches, which are the windows it reads (6 steps x 8 windows + 3
 * evaluations x 4 = 60 windows of 65 uint16 tokens), each released after
 * it is copied, and the page tables of the mapping's touched regions (one
 * 4 KiB table per 2 MiB region a window lands in: at most 60 x 4 KiB =
 * 240 KiB), plus a table of a few shards.  Were the windows' pages kept,
 * with the kernel's 64 KiB fault-around each, they would add at most
 * 60 x 2 x 64 KiB = 7.5 MiB; 8 MiB is above either, and 30 times below
 * the set. */
Test(train_shards, peak_memory_does_not_grow_with_the_data, .timeout = 300)
{
    if (!getenv("AR_BIN"))
        cr_skip_test("AR_BIN is not set");
    const char *dir = tu_tmpdir();
    int32_t *v = random_ids(4000, 13);
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(tu_path(dir, "val.bin"), v, 4000, 0, &e), 0, "%s", e.msg);
    /* 1 MiB: one shard of 512 Ki tokens; 256 MiB: four of 32 Mi */
    size_t small = (size_t)1 << 19, big = (size_t)1 << 25;
    int32_t *x = random_ids(big, 17);
    cr_assert_eq(mkdir(tu_path(dir, "small"), 0755), 0);
    cr_assert_eq(mkdir(tu_path(dir, "big"), 0755), 0);
    cr_assert_eq(ar_tokens_write_llmc(tu_path(tu_path(dir, "small"), "s.bin"), x, small, 0, &e), 0, "%s", e.msg);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "b%d.bin", i);
        cr_assert_eq(ar_tokens_write_llmc(tu_path(tu_path(dir, "big"), name), x, big, 0, &e), 0, "%s", e.msg);
    }
    free(x);
    free(v);
    long a = peak_kib(dir, tu_path(dir, "small")), b = peak_kib(dir, tu_path(dir, "big"));
    cr_expect(b - a < 8 * 1024, "peak RSS %ld KiB over 256 MiB of shards, %ld KiB over 1 MiB", b, a);
}
