/* Reliability (docs/reliability.md): checksummed checkpoints, the last K
 * checkpoints, exact resume after SIGKILL at random moments, SIGINT and
 * SIGTERM, non-finite steps, unwritable directories, full disks (a file
 * size limit), runs that are not ours, and the run-directory lock.
 *
 * Library tests train a tiny model in-process; process tests run the real
 * binary ($AR_BIN) with fork/exec and send it signals.
 *
 * Covers: run/checkpoint.c, run/train.c, cmd/signals.c and cmd/train.c,
 * formats/safetensors.c (checksums). */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "formats/config.h"
#include "formats/json.h"
#include "formats/metrics.h"
#include "formats/safetensors.h"
#include "lib/model.h"
#include "run/checkpoint.h"
#include "run/machine.h"
#include "run/train.h"
#include "lib/backend.h"
#include "core/clock.h"
#include "testutil.h"

#ifndef AR_BLAS_BLIS
char *openblas_get_config(void); /* OpenBLAS's own */
#endif

/* ---------------------------------------------------------------- fixtures */

/* A fresh directory with corpus.txt; the path is static storage. */
static const char *fresh_dir(void)
{
    static char d[4096];
    snprintf(d, sizeof d, "%s", tu_tmpdir());
    tu_write_corpus_lines(tu_path(d, "corpus.txt"), 300, 7);
    return d;
}

static ar_config tiny(const char *dir, long steps)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 32;
    c.model.seq_len = 16;
    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 1;
    snprintf(c.data.train, sizeof c.data.train, "%s", tu_path(dir, "corpus.txt"));
    c.data.val_fraction = 0.1;
    c.train.steps = steps;
    c.train.batch_size = 4;
    c.train.warmup = 2;
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.eval_every = 0;
    c.train.eval_windows = 4;
    c.train.save_every = 2;
    c.train.log_every = 1;
    c.train.threads = 1;
    return c;
}

/* The tiny config as a YAML file for the binary, with a constant learning
 * rate so that runs of different lengths share their first steps. */
static const char *tiny_yaml(const char *dir, long steps, int save_every)
{
    char text[1024];
    snprintf(text, sizeof text,
             "model: {d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, seq_len: 16,\n"
             "        residual: {kind: block, block_size: 1}}\n"
             "data: {train: '%s', val_fraction: 0.1}\n"
             "train: {steps: %ld, batch_size: 4, warmup: 2, lr: 1.0e-2, schedule: constant, eval_every: 0,\n"
             "        eval_windows: 4, save_every: %d, log_every: 1, threads: 1}\n",
             tu_path(dir, "corpus.txt"), steps, save_every);
    static char path[4200];
    snprintf(path, sizeof path, "%s/tiny.yaml", dir);
    tu_write_file(path, text, strlen(text));
    return path;
}

typedef struct {
    char text[8192];
    int n;
} warnings;

static void collect_warning(const char *msg, void *ud)
{
    warnings *w = ud;
    size_t len = strlen(w->text);
    snprintf(w->text + len, sizeof w->text - len, "%s\n", msg);
    w->n++;
}

static int train(const ar_config *c, const char *run, int resume, ar_train_result *r, ar_err *e)
{
    ar_train_opts o = {.out_dir = run, .resume = resume};
    return ar_train(c, &o, r, e);
}

static char *slurp(const char *path, size_t *n)
{
    char *b = tu_read_file(path, n);
    cr_assert(b != NULL, "cannot read %s", path);
    return b;
}

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static long meta_step(const char *file)
{
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, file, &e), 0, "%s", e.msg);
    cr_assert(f.crc_verified, "'%s' has no verified CRC-32s", file);
    long s = atol(ar_st_meta(&f, "step"));
    ar_st_free(&f);
    return s;
}

static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void check_metric_steps(const char *run, long steps)
{
    ar_json **rows;
    int n;
    ar_err e = {{0}};
    cr_assert_eq(ar_metrics_read(tu_path(run, "metrics.jsonl"), &rows, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, steps, "%s: %d metric lines, expected %ld", run, n, steps);
    for (int i = 0; i < n; i++)
        cr_assert_eq(ar_json_get(rows[i], "step")->inum, i + 1, "%s: line %d", run, i + 1);
    ar_metrics_free(rows, n);
}

/* ---------------------------------------------------------------- processes */

static const char *bin(void)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    return b;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Starts `attnres train ARGS...` (NULL-terminated) in dir with stdout and
 * stderr to dir/out.txt and dir/err.txt; fsize_limit > 0 sets RLIMIT_FSIZE. */
static pid_t spawn(const char *dir, long fsize_limit, ...)
{
    const char *argv[32] = {bin(), "train"};
    int argc = 2;
    va_list ap;
    va_start(ap, fsize_limit);
    for (const char *a; argc < 31 && (a = va_arg(ap, const char *));)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    char out[4200], err[4200];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || chdir(dir) != 0)
            _exit(127);
        dup2(fo, 1);
        dup2(fe, 2);
        if (fsize_limit > 0) {
            struct rlimit rl = {(rlim_t)fsize_limit, (rlim_t)fsize_limit};
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid: the exit status, or -signal if it was killed. */
static int wait_for(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        cr_assert_eq(errno, EINTR);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

#define RUN(dir, ...) wait_for(spawn(dir, 0, __VA_ARGS__, (const char *)NULL))

static char *output(const char *dir, const char *which)
{
    return slurp(tu_path(dir, which), NULL);
}

/* Polls until file holds at least `lines` newlines (or `timeout` s pass). */
static int wait_lines(const char *file, int lines, double timeout)
{
    double t0 = ar_now_s();
    while (ar_now_s() - t0 < timeout) {
        size_t n = 0;
        char *b = tu_read_file(file, &n);
        int k = 0;
        for (size_t i = 0; b && i < n; i++)
            k += b[i] == '\n';
        free(b);
        if (k >= lines)
            return 1;
        sleep_s(0.002);
    }
    return 0;
}

/* ================================================================ checksums */

Test(reliability, corrupted_checkpoint_is_an_error_naming_the_tensor, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 2);
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(train(&c, run, 0, &r, &e), 0, "%s", e.msg);
    const char *model = tu_path(run, "model.safetensors");
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, model, &e), 0, "%s", e.msg);
    cr_assert(f.crc_verified);
    const ar_st_tensor *t = ar_st_find(&f, "blocks.0.mlp.up.weight");
    cr_assert(t && t->has_crc);
    uint64_t begin = t->begin;
    ar_st_free(&f);
    /* One bit of the tensor's 6th byte; the data area starts after the
     * 8-byte length and the header. */
    size_t n;
    char *b = slurp(model, &n);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | (unsigned char)b[i];
    b[8 + h + begin + 5] ^= 0x10;
    tu_write_file(model, b, n);
    free(b);

    cr_assert_neq(train(&c, run, 1, &r, &e), 0, "a damaged checkpoint was resumed");
    cr_expect(strstr(e.msg, "'blocks.0.mlp.up.weight'") && strstr(e.msg, "CRC-32 mismatch") && strstr(e.msg, model),
              "%s", e.msg);
    ar_model *m;
    long step;
    cr_assert_neq(ar_ckpt_load_model(model, ar_backend_cpu(), 1, &c, &m, &step, &e), 0);
    cr_expect(strstr(e.msg, "'blocks.0.mlp.up.weight'"), "%s", e.msg);
    if (tu_bin()) {
        int st;
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "'%s' eval '%s' --data '%s'", tu_bin(), run, c.data.train);
        char *out = tu_run(cmd, &st);
        cr_expect_eq(st, 1, "%s", out);
        cr_expect(strstr(out, "attnres: error: '") && strstr(out, "tensor 'blocks.0.mlp.up.weight': CRC-32 mismatch"),
                  "%s", out);
        free(out);
    }
}

/* A checkpoint of attnres 0.1.0: no crc32 entries and no training state in
 * the metadata.  It still resumes, to the same weights.  (Bit for bit by
 * construction, here and in the resumes below: the same code, shapes and
 * thread count, train.threads 1, on both sides, and the checkpoint holds
 * every float the next step reads.) */
Test(reliability, checkpoint_without_crcs_still_resumes_exactly, .timeout = 60)
{
    const char *dir = fresh_dir();
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    ar_config c = tiny(dir, 6);
    c.train.schedule = AR_SCHED_CONSTANT; /* the same rates whatever train.steps */
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(train(&c, a, 0, &r, &e), 0, "%s", e.msg);
    c.train.steps = 4;
    cr_assert_eq(train(&c, b, 0, &r, &e), 0, "%s", e.msg);

    /* Rewrite b's files the old way: tensors and the old metadata only. */
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int k = 0; k < 2; k++) {
        const char *p = tu_path(b, files[k]);
        ar_st_file f;
        cr_assert_eq(ar_st_read(&f, p, &e), 0, "%s", e.msg);
        ar_jw w;
        ar_jw_init(&w);
        ar_jw_obj_begin(&w);
        ar_jw_key(&w, "__metadata__");
        ar_jw_obj_begin(&w);
        const char *keep[] = {"config", "step", "adam_t", "attnres_version"};
        for (int i = 0; i < 4; i++)
            if (ar_st_meta(&f, keep[i])) {
                ar_jw_key(&w, keep[i]);
                ar_jw_str(&w, ar_st_meta(&f, keep[i]));
            }
        ar_jw_obj_end(&w);
        for (int i = 0; i < f.n; i++) {
            ar_jw_key(&w, f.t[i].name);
            ar_jw_obj_begin(&w);
            ar_jw_key(&w, "dtype");
            ar_jw_str(&w, f.t[i].dtype);
            ar_jw_key(&w, "shape");
            ar_jw_arr_begin(&w);
            for (int d = 0; d < f.t[i].ndim; d++)
                ar_jw_int(&w, f.t[i].shape[d]);
            ar_jw_arr_end(&w);
            ar_jw_key(&w, "data_offsets");
            ar_jw_arr_begin(&w);
            ar_jw_int(&w, (long long)f.t[i].begin);
            ar_jw_int(&w, (long long)f.t[i].end);
            ar_jw_arr_end(&w);
            ar_jw_obj_end(&w);
        }
        ar_jw_obj_end(&w);
        size_t hl = w.len + (8 - w.len % 8) % 8, n = 8 + hl + f.data_size;
        unsigned char *raw = malloc(n);
        for (int i = 0; i < 8; i++)
            raw[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        memset(raw + 8, ' ', hl);
        memcpy(raw + 8, w.s, w.len);
        memcpy(raw + 8 + hl, f.data, f.data_size);
        tu_write_file(p, raw, n);
        free(raw);
        ar_jw_free(&w);
        ar_st_free(&f);
        cr_assert_eq(ar_st_read(&f, p, &e), 0, "%s", e.msg);
        cr_assert(!f.crc_verified && ar_st_meta(&f, "data_position") == NULL, "not an old-style file");
        ar_st_free(&f);
    }
    c.train.steps = 6;
    cr_assert_eq(train(&c, b, 1, &r, &e), 0, "%s", e.msg);
    cr_expect(same_file(tu_path(a, "model.safetensors"), tu_path(b, "model.safetensors")),
              "resuming an old-style checkpoint gave other weights");
}

/* ================================================================ last K */

Test(reliability, keeps_the_last_k_checkpoints, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200], ck[4300];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(ck, sizeof ck, "%s/checkpoints", run);
    ar_config c = tiny(dir, 10);
    c.train.keep_checkpoints = 3;
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(train(&c, run, 0, &r, &e), 0, "%s", e.msg);
    DIR *d = opendir(ck);
    cr_assert(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            n++;
            cr_expect(!strcmp(de->d_name, "step-6") || !strcmp(de->d_name, "step-8") ||
                          !strcmp(de->d_name, "step-10"),
                      "unexpected '%s' in checkpoints/", de->d_name);
        }
    closedir(d);
    cr_expect_eq(n, 3, "%d checkpoints kept, expected 3", n);
    cr_expect_eq(meta_step(tu_path(ck, "step-6/model.safetensors")), 6);
    cr_expect_eq(meta_step(tu_path(ck, "step-8/optimizer.safetensors")), 8);
    cr_expect(same_file(tu_path(ck, "step-10/model.safetensors"), tu_path(run, "model.safetensors")));
    struct stat s1, s2;
    cr_assert_eq(stat(tu_path(ck, "step-10/model.safetensors"), &s1), 0);
    cr_assert_eq(stat(tu_path(run, "model.safetensors"), &s2), 0);
    cr_expect_eq(s1.st_ino, s2.st_ino, "the newest checkpoint is not a hard link of the run's files");
    cr_expect_neq(meta_step(tu_path(ck, "step-6/model.safetensors")), meta_step(tu_path(run, "model.safetensors")));

    /* keep_checkpoints 0 on a resumed run removes them all. */
    c.train.steps = 12;
    c.train.keep_checkpoints = 0;
    cr_assert_eq(train(&c, run, 1, &r, &e), 0, "%s", e.msg);
    d = opendir(ck);
    n = 0;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    cr_expect_eq(n, 0, "keep_checkpoints 0 left %d checkpoints", n);
}

/* ================================================================ numerical faults */

typedef struct {
    long from, to;   /* poison the gradient of these steps */
    long param_at;   /* poison a weight at this step (0: never) */
    warnings w;
} faults;

static void inject(ar_model *m, long step, void *ud)
{
    faults *f = ud;
    if (step >= f->from && step <= f->to)
        m->grads[3] = NAN;
    if (step == f->param_at)
        m->params[m->pt.p[0].offset + 1] = INFINITY;
}

static void inject_warn(const char *msg, void *ud) { collect_warning(msg, &((faults *)ud)->w); }

Test(reliability, non_finite_steps_are_skipped_with_a_warning, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 8);
    faults f = {.from = 3, .to = 4};
    ar_train_opts o = {.out_dir = run, .grad_hook = inject, .warn = inject_warn, .ud = &f};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.step, 8);
    cr_expect_eq(r.skipped, 2);
    cr_expect_eq(f.w.n, 2, "warnings:\n%s", f.w.text);
    cr_expect(strstr(f.w.text, "step 3: non-finite gradient (nan): update skipped (1 in a row"), "%s", f.w.text);
    cr_expect(strstr(f.w.text, "step 4: non-finite gradient (nan): update skipped (2 in a row"), "%s", f.w.text);
    ar_json **rows;
    int n;
    cr_assert_eq(ar_metrics_read(tu_path(run, "metrics.jsonl"), &rows, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 8);
    for (int i = 0; i < n; i++) {
        const ar_json *sk = ar_json_get(rows[i], "skipped");
        int want = i == 2 || i == 3;
        cr_expect_eq(sk != NULL, want, "line %d: skipped", i + 1);
        if (want) {
            cr_expect_eq(ar_json_get(rows[i], "bad_steps")->inum, i - 1);
            cr_expect(strstr(ar_json_get(rows[i], "warning")->str, "non-finite gradient"));
            cr_expect_eq(ar_json_get(rows[i], "grad_norm")->type, AR_JSON_NULL);
        }
    }
    ar_metrics_free(rows, n);
    /* The optimizer made 6 updates, not 8. */
    ar_st_file of;
    cr_assert_eq(ar_st_read(&of, tu_path(run, "optimizer.safetensors"), &e), 0, "%s", e.msg);
    cr_expect_str_eq(ar_st_meta(&of, "adam_t"), "6");
    ar_st_free(&of);
}

Test(reliability, stops_after_max_bad_steps_keeping_the_last_checkpoint, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 20);
    c.train.save_every = 3;
    c.train.max_bad_steps = 4;
    faults f = {.from = 5, .to = 1000};
    ar_train_opts o = {.out_dir = run, .grad_hook = inject, .warn = inject_warn, .ud = &f};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_neq(ar_train(&c, &o, &r, &e), 0, "training went on through non-finite steps");
    cr_expect(strstr(e.msg, "steps 5 to 8: 4 steps in a row with a non-finite loss or gradient"), "%s", e.msg);
    cr_expect(strstr(e.msg, "(step 6) is kept"), "%s", e.msg);
    cr_expect_eq(r.step, 8);
    cr_expect_eq(f.w.n, 4, "%s", f.w.text);
    cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), 6);
}

/* The count of bad steps in a row is part of the checkpoint: a run stopped
 * in the middle of a streak stops at the same step after a resume. */
static volatile sig_atomic_t stop_now;
static void stop_at_6(const ar_progress *p, void *ud)
{
    (void)ud;
    if (p->step == 5)
        stop_now = 1;
}

Test(reliability, bad_step_streak_survives_a_resume, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 20);
    c.train.save_every = 0;
    c.train.max_bad_steps = 4;
    faults f = {.from = 5, .to = 1000};
    stop_now = 0;
    ar_train_opts o = {.out_dir = run, .grad_hook = inject, .warn = inject_warn, .ud = &f,
                       .progress = stop_at_6, .interrupt = &stop_now};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_assert(r.interrupted && r.step == 6, "stopped at %ld", r.step);
    ar_st_file mf;
    cr_assert_eq(ar_st_read(&mf, tu_path(run, "model.safetensors"), &e), 0, "%s", e.msg);
    cr_expect_str_eq(ar_st_meta(&mf, "bad_steps"), "2");
    ar_st_free(&mf);
    o.resume = 1;
    o.progress = NULL;
    o.interrupt = NULL;
    cr_assert_neq(ar_train(&c, &o, &r, &e), 0);
    cr_expect(strstr(e.msg, "steps 5 to 8: 4 steps in a row"), "%s", e.msg);
    cr_expect(strstr(e.msg, "(step 6) is kept"), "%s", e.msg);
}

Test(reliability, non_finite_weights_are_never_saved, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 10);
    faults f = {.from = -1, .to = -1, .param_at = 5};
    ar_train_opts o = {.out_dir = run, .grad_hook = inject, .ud = &f};
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_neq(ar_train(&c, &o, &r, &e), 0);
    cr_expect(strstr(e.msg, "step 5: the update made tensor 'embed.weight' non-finite"), "%s", e.msg);
    cr_expect(strstr(e.msg, "(step 4) is kept"), "%s", e.msg);
    cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), 4);

    /* And the saver itself refuses, before touching any file. */
    ar_model *m;
    long step;
    cr_assert_eq(ar_ckpt_load_model(run, ar_backend_cpu(), 1, &c, &m, &step, &e), 0, "%s", e.msg);
    size_t n0;
    char *before = slurp(tu_path(run, "model.safetensors"), &n0);
    ar_model_param(m, 3)[2] = NAN;
    cr_assert_neq(ar_ckpt_save(run, &c, m, NULL, 9, &e), 0);
    cr_expect(strstr(e.msg, "not saving step 9 in '") && strstr(e.msg, "holds a non-finite value (nan at element 2)") &&
                  strstr(e.msg, m->pt.p[3].name),
              "%s", e.msg);
    size_t n1;
    char *after = slurp(tu_path(run, "model.safetensors"), &n1);
    cr_expect(n0 == n1 && memcmp(before, after, n0) == 0, "the checkpoint changed");
    free(before);
    free(after);
    ar_model_free(m);
}

/* A genuinely diverging run, no injection: lr 1e30 overflows the forward
 * pass from step 2 on. */
Test(reliability, diverging_run_stops_with_warnings_for_each_step, .timeout = 60)
{
    const char *dir = fresh_dir();
    const char *cfg = tiny_yaml(dir, 20, 2);
    int st = RUN(dir, cfg, "--out", "run", "--set", "train.lr=1e30", "--set", "train.min_lr=0", "--set",
                 "train.schedule=constant", "--set", "train.warmup=0");
    char *err = output(dir, "err.txt");
    cr_expect_eq(st, 1, "exit status %d:\n%s", st, err);
    for (int s = 2; s <= 6; s++) {
        char want[128];
        snprintf(want, sizeof want, "attnres: warning: step %d: non-finite loss (nan): update skipped", s);
        cr_expect(strstr(err, want), "missing '%s' in:\n%s", want, err);
    }
    cr_expect(strstr(err, "attnres: error: steps 2 to 6: 5 steps in a row with a non-finite loss or gradient "
                          "(train.max_bad_steps is 5); training stopped; the checkpoint in 'run' (step 4) is kept"),
              "%s", err);
    free(err);
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), 4);
}

/* ================================================================ resume */

Test(reliability, resume_warns_where_it_cannot_be_exact, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 4);
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(train(&c, run, 0, &r, &e), 0, "%s", e.msg);
    c.train.steps = 6;
    c.train.threads = 2;
    tu_write_corpus_lines(c.data.train, 301, 7);
    warnings w = {{0}, 0};
    ar_train_opts o = {.out_dir = run, .resume = 1, .warn = collect_warning, .ud = &w};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_expect(strstr(w.text, "with settings that differ from the checkpoint's: train.steps 4 -> 6"), "%s", w.text);
    cr_expect(strstr(w.text, "was trained with 1 thread and resumes with 2"), "%s", w.text);
    cr_expect(strstr(w.text, "the training data of '") && strstr(w.text, "differ from the checkpoint's"), "%s", w.text);
    cr_expect(strstr(w.text, "train.threads") == NULL, "threads is not a setting of the run:\n%s", w.text);
    cr_expect_eq(w.n, 3, "%s", w.text);

    /* Resumed again with what the checkpoint now holds: no warning. */
    warnings quiet = {{0}, 0};
    o.ud = &quiet;
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(quiet.n, 0, "%s", quiet.text);
}

/* The checkpoint names the machine that saved it (cpu, blas, build), and a
 * resume warns where the OpenBLAS kernels or the build differ, naming both:
 * trained under OPENBLAS_CORETYPE=Haswell, resumed under Sandybridge; then
 * the build's name in the file replaced (same length, so the header keeps
 * its offsets) and resumed on the kernels the checkpoint now records. */
Test(reliability, resume_warns_on_other_kernels_or_build, .timeout = 120)
{
#if !defined(__x86_64__)
    cr_skip_test("Haswell and Sandybridge are x86-64 kernel sets");
#endif
#ifdef AR_BLAS_BLIS
    cr_skip_test("built with -Dblas=blis: OPENBLAS_CORETYPE picks nothing");
#else
    if (!strstr(openblas_get_config(), "DYNAMIC_ARCH"))
        cr_skip_test("OpenBLAS without DYNAMIC_ARCH runs the kernels it was built for");
    const char *dir = fresh_dir();
    tu_write_corpus_lines(tu_path(dir, "corpus.txt"), 300, 3);
    const char *set = "--set model.d_model=16 --set model.n_layer=2 --set model.n_head=2 --set model.d_ff=32 "
                      "--set model.seq_len=16 --set train.batch_size=4 --set train.eval_every=0 "
                      "--set train.save_every=2 --set data.train=corpus.txt --threads 1";
    char cmd[8192];
    int st;
    snprintf(cmd, sizeof cmd, "cd '%s' && OPENBLAS_CORETYPE=Haswell '%s' train %s --set train.steps=2 --out run",
             dir, bin(), set);
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    ar_config c;
    ar_ckpt_state cs;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_read_state(tu_path(tu_path(dir, "run"), "model.safetensors"), &c, &cs, &e), 0, "%s",
                 e.msg);
    ar_machine here;
    ar_machine_describe(&here);
    cr_expect_str_eq(cs.machine.cpu, here.cpu);
    cr_expect_str_eq(cs.machine.build, here.build);
    /* the OpenBLAS part, before " + libxsmm ..." where the small products
     * run there (lib/backend.h, ar_cpu_small_products) */
    char ob[sizeof cs.machine.blas];
    snprintf(ob, sizeof ob, "%s", cs.machine.blas);
    char *plus = strstr(ob, " + ");
    if (plus)
        *plus = '\0';
    const char *k = strrchr(ob, ' ');
    cr_expect(k && !strcmp(k, " Haswell"), "blas '%s' does not name the kernels it ran, Haswell", cs.machine.blas);

    snprintf(cmd, sizeof cmd, "cd '%s' && OPENBLAS_CORETYPE=Sandybridge '%s' train --resume run --set train.steps=4 2>&1",
             dir, bin());
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    const char *after = ar_cpu_small_products() ? " + " : " on ";
    char h[32], sb[32];
    snprintf(h, sizeof h, " Haswell%s", after);
    snprintf(sb, sizeof sb, " Sandybridge%s", after);
    cr_expect(strstr(out, "was trained with OpenBLAS") && strstr(out, h) && strstr(out, sb) &&
                  strstr(out, "not be bit-identical"),
              "no warning naming both kernel sets:\n%s", out);
    cr_expect(strstr(out, "trained by a build for") == NULL, "the build did not change:\n%s", out);
    free(out);

    /* the build's name replaced in the file, byte for byte */
    size_t n;
    char *f = tu_read_file(tu_path(tu_path(dir, "run"), "model.safetensors"), &n);
    char *b = memmem(f, n, here.build, strlen(here.build));
    cr_assert(b, "the file holds no build '%s'", here.build);
    memset(b, 'z', strlen(here.build));
    tu_write_file(tu_path(tu_path(dir, "run"), "model.safetensors"), f, n);
    free(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && OPENBLAS_CORETYPE=Sandybridge '%s' train --resume run --set train.steps=6 2>&1",
             dir, bin());
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "was trained by a build for zz") && strstr(out, here.build), "no warning on the build:\n%s",
              out);
    cr_expect(strstr(out, "was trained with OpenBLAS") == NULL, "the kernels did not change this time:\n%s", out);
    free(out);
#endif
}

/* ================================================================ foreign runs, locks */

Test(reliability, different_run_is_refused_unless_forced, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ar_config c = tiny(dir, 4);
    ar_train_result r;
    ar_err e = {{0}};
    cr_assert_eq(train(&c, run, 0, &r, &e), 0, "%s", e.msg);
    size_t n0;
    char *before = slurp(tu_path(run, "model.safetensors"), &n0);

    ar_config other = c;
    other.train.lr = 2e-2;
    cr_assert_neq(train(&other, run, 0, &r, &e), 0);
    cr_expect(strstr(e.msg, "already holds a checkpoint of a different run (train.lr 0.01 -> 0.02)") &&
                  strstr(e.msg, "--force"),
              "%s", e.msg);
    cr_assert_neq(train(&c, run, 0, &r, &e), 0);
    cr_expect(strstr(e.msg, "already holds a checkpoint of this run (step 4 of 4); use --resume"), "%s", e.msg);
    size_t n1;
    char *after = slurp(tu_path(run, "model.safetensors"), &n1);
    cr_expect(n0 == n1 && memcmp(before, after, n0) == 0, "a refused run changed the checkpoint");
    free(before);
    free(after);

    other.train.steps = 2;
    ar_train_opts o = {.out_dir = run, .force = 1};
    cr_assert_eq(ar_train(&other, &o, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), 2);
    check_metric_steps(run, 2);
    struct stat st;
    cr_expect_neq(stat(tu_path(run, "checkpoints/step-4"), &st), 0, "the old run's checkpoints are still there");
    ar_config saved;
    cr_assert_eq(ar_ckpt_read_config(run, &saved, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(saved.train.lr, 2e-2);
}

Test(reliability, cli_refuses_a_different_run_unless_forced, .timeout = 60)
{
    const char *dir = fresh_dir();
    const char *cfg = tiny_yaml(dir, 2, 2);
    cr_assert_eq(RUN(dir, cfg, "--out", "run"), 0);
    int st = RUN(dir, cfg, "--out", "run", "--set", "train.seed=2");
    char *err = output(dir, "err.txt");
    cr_expect_eq(st, 1, "%s", err);
    cr_expect(strstr(err, "attnres: error: run directory 'run' already holds a checkpoint of a different run "
                          "(train.seed 1 -> 2); use --force to overwrite it, or --out to choose another directory\n"),
              "%s", err);
    free(err);
    st = RUN(dir, cfg, "--out", "run", "--set", "train.seed=2", "--force");
    err = output(dir, "err.txt");
    cr_expect_eq(st, 0, "%s", err);
    free(err);
    ar_config saved;
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "run"), &saved, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(saved.train.seed, 2);
    st = RUN(dir, "--resume", "run", "--force");
    err = output(dir, "err.txt");
    cr_expect_eq(st, 2, "%s", err);
    cr_expect(strstr(err, "'--force' starts a new run and '--resume' continues one"), "%s", err);
    free(err);
}

Test(reliability, a_run_directory_in_use_is_refused, .timeout = 60)
{
    const char *dir = fresh_dir();
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    mkdir(run, 0777);
    /* flock locks belong to an open file description: a second open in
     * this process conflicts like another process would. */
    int fd = open(tu_path(run, ".attnres.lock"), O_RDWR | O_CREAT, 0644);
    cr_assert(fd >= 0 && flock(fd, LOCK_EX) == 0);
    ar_config c = tiny(dir, 2);
    ar_train_result r;
    ar_err e = {{0}};
    int rc = train(&c, run, 0, &r, &e);
    close(fd);
    cr_assert_neq(rc, 0, "trained in a locked directory");
    cr_expect(strstr(e.msg, "is in use by another attnres process"), "%s", e.msg);
    cr_expect(access(tu_path(run, "model.safetensors"), F_OK) != 0);
}

/* ================================================================ resource faults */

Test(reliability, unwritable_run_directory_is_a_clear_error, .timeout = 60)
{
    const char *dir = fresh_dir();
    tu_write_file(tu_path(dir, "file"), "x", 1);
    ar_config c = tiny(dir, 2);
    ar_train_result r;
    ar_err e = {{0}};
    char run[4200];
    snprintf(run, sizeof run, "%s/file/run", dir);
    cr_assert_neq(train(&c, run, 0, &r, &e), 0);
    char want[4300];
    snprintf(want, sizeof want, "cannot create directory '%s/file': not a directory", dir);
    cr_expect(strstr(e.msg, want), "%s", e.msg);

    if (geteuid() == 0) {
        cr_log_info("running as root: permission bits do not stop root, the read-only directory case is skipped");
        return;
    }
    snprintf(run, sizeof run, "%s/ro", dir);
    mkdir(run, 0555);
    cr_assert_neq(train(&c, run, 0, &r, &e), 0);
    cr_expect(strstr(e.msg, "is not writable") && strstr(e.msg, "permission denied"), "%s", e.msg);
}

/* The disk fills at the next checkpoint (simulated with RLIMIT_FSIZE below
 * the optimizer file's size): a clear error, the checkpoint already there
 * untouched, no temporary file left; a later resume ends bit-identical. */
Test(reliability, full_disk_keeps_the_previous_checkpoint, .timeout = 90)
{
    const char *dir = fresh_dir();
    const char *cfg = tiny_yaml(dir, 4, 4);
    cr_assert_eq(RUN(dir, cfg, "--out", "ref", "--set", "train.steps=8"), 0);
    cr_assert_eq(RUN(dir, cfg, "--out", "run"), 0);
    char run[4200], ref[4200], keep[4300];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(keep, sizeof keep, "%s/before", dir);
    mkdir(keep, 0777);
    struct stat ms, os;
    cr_assert_eq(stat(tu_path(run, "model.safetensors"), &ms), 0);
    cr_assert_eq(stat(tu_path(run, "optimizer.safetensors"), &os), 0);
    size_t n;
    char *b = slurp(tu_path(run, "model.safetensors"), &n);
    tu_write_file(tu_path(keep, "model"), b, n);
    free(b);
    b = slurp(tu_path(run, "optimizer.safetensors"), &n);
    tu_write_file(tu_path(keep, "optimizer"), b, n);
    free(b);

    long limit = (long)(ms.st_size + os.st_size) / 2; /* the model fits, the optimizer does not */
    int st = wait_for(spawn(dir, limit, "--resume", "run", "--set", "train.steps=8", (const char *)NULL));
    char *err = output(dir, "err.txt");
    cr_expect_eq(st, 1, "exit status %d:\n%s", st, err);
    cr_expect(strstr(err, "attnres: error: checkpoint of step 8 not saved (the checkpoint in 'run' (step 4) is kept): "
                          "cannot write 'run/optimizer.safetensors': write error on 'run/optimizer.safetensors.tmp."),
              "%s", err);
    cr_expect(strstr(err, ": file too large\n"), "%s", err);
    free(err);
    cr_expect(same_file(tu_path(run, "model.safetensors"), tu_path(keep, "model")), "the model file changed");
    cr_expect(same_file(tu_path(run, "optimizer.safetensors"), tu_path(keep, "optimizer")), "the optimizer changed");
    cr_expect_eq(count_temps(run), 0, "a temporary file was left behind");

    /* threads: 1 in the YAML, for the reference and every resume alike */
    cr_assert_eq(RUN(dir, "--resume", "run", "--set", "train.steps=8"), 0);
    cr_expect(same_file(tu_path(run, "model.safetensors"), tu_path(ref, "model.safetensors")),
              "the run resumed after the failed save differs from an uninterrupted one");
}

/* ================================================================ signals */

/* A config whose steps take a while, so that a signal lands mid-step. */
static const char *slow_yaml(const char *dir, int save_every)
{
    char text[1024];
    snprintf(text, sizeof text,
             "model: {d_model: 64, n_layer: 2, n_head: 2, d_ff: 128, seq_len: 64}\n"
             "data: {train: '%s', val_fraction: 0.1}\n"
             "train: {steps: 100000, batch_size: 8, warmup: 2, eval_every: 0, eval_windows: 2,\n"
             "        save_every: %d, log_every: 1, threads: 1}\n",
             tu_path(dir, "corpus.txt"), save_every);
    static char path[4200];
    snprintf(path, sizeof path, "%s/slow.yaml", dir);
    tu_write_file(path, text, strlen(text));
    return path;
}

Test(reliability, sigint_and_sigterm_finish_the_step_save_and_exit, .timeout = 120)
{
    /* SIGUSR1 too: the signal mpirun passes on to every rank unchanged */
    const int sigs[3] = {SIGINT, SIGTERM, SIGUSR1};
    const char *names[3] = {"SIGINT", "SIGTERM", "SIGUSR1"};
    for (int k = 0; k < 3; k++) {
        const char *dir = fresh_dir();
        const char *cfg = slow_yaml(dir, 0);
        char run[4200];
        snprintf(run, sizeof run, "%s/run", dir);
        pid_t pid = spawn(dir, 0, cfg, "--out", "run", (const char *)NULL);
        cr_assert(wait_lines(tu_path(run, "metrics.jsonl"), 3, 30), "the run did not start");
        kill(pid, sigs[k]);
        int st = wait_for(pid);
        char *out = output(dir, "out.txt"), *err = output(dir, "err.txt");
        cr_expect_eq(st, 128 + sigs[k], "%s: exit status %d\n%s%s", names[k], st, out, err);
        char note[128];
        snprintf(note, sizeof note, "attnres: %s: finishing this step, then saving a checkpoint and stopping",
                 names[k]);
        cr_expect(strstr(err, note), "%s", err);
        const char *at = strstr(out, "interrupted at step ");
        cr_assert(at, "%s", out);
        long step = atol(at + strlen("interrupted at step "));
        cr_expect(strstr(out, "checkpoint saved; continue with: attnres train --resume run"), "%s", out);
        cr_expect_geq(step, 3);
        cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), step);
        check_metric_steps(run, step);
        free(out);
        free(err);
        char more[64];
        snprintf(more, sizeof more, "train.steps=%ld", step + 1);
        cr_expect_eq(RUN(dir, "--resume", "run", "--set", more), 0);
        cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), step + 1);
    }
}

Test(reliability, second_signal_stops_at_once_and_keeps_the_checkpoint, .timeout = 90)
{
    const char *dir = fresh_dir();
    const char *cfg = slow_yaml(dir, 1);
    char run[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    pid_t pid = spawn(dir, 0, cfg, "--out", "run", (const char *)NULL);
    cr_assert(wait_lines(tu_path(run, "metrics.jsonl"), 2, 30), "the run did not start");
    kill(pid, SIGINT);
    cr_assert(wait_lines(tu_path(dir, "err.txt"), 2, 10), "no note after the first SIGINT");
    kill(pid, SIGINT);
    int st = wait_for(pid);
    char *out = output(dir, "out.txt"), *err = output(dir, "err.txt");
    cr_expect_eq(st, 130, "exit status %d\n%s%s", st, out, err);
    cr_expect(strstr(err, "attnres: SIGINT again: stopping at once; the last checkpoint is kept"), "%s", err);
    cr_expect(strstr(out, "interrupted at step") == NULL, "the second signal did not stop at once:\n%s", out);
    free(out);
    free(err);
    long step = meta_step(tu_path(run, "model.safetensors")); /* whole and checksummed */
    cr_assert_geq(step, 1);
    char more[64];
    snprintf(more, sizeof more, "train.steps=%ld", step + 1);
    cr_expect_eq(RUN(dir, "--resume", "run", "--set", more), 0);
    cr_expect_eq(meta_step(tu_path(run, "model.safetensors")), step + 1);
    cr_expect_eq(count_temps(run), 0, "temporary files of the killed write are still there");
}

/* ================================================================ SIGKILL */

static int count_lines(const char *file)
{
    size_t n = 0;
    char *b = tu_read_file(file, &n);
    int k = 0;
    for (size_t i = 0; b && i < n; i++)
        k += b[i] == '\n';
    free(b);
    return k;
}

/* Kill -9 at pseudo-random moments (a fixed seed) during a run that saves
 * at every step, resume until done, and compare with an uninterrupted run:
 * model and optimizer files must be byte-identical, metrics must hold each
 * step once.  A kill point is "after k more steps have been logged, plus a
 * random fraction of a step's time", so kills land in the computation, in
 * the metrics append and in every part of a checkpoint write.  Byte
 * identity holds by construction: the same binary, shapes and thread count
 * (threads: 1 in the YAML) for the reference and every resume. */
Test(reliability, sigkill_at_random_moments_then_resume_is_bit_exact, .timeout = 180)
{
    const char *dir = fresh_dir();
    const long steps = 8;
    const char *cfg = tiny_yaml(dir, steps, 1);
    double t0 = ar_now_s();
    cr_assert_eq(RUN(dir, cfg, "--out", "ref"), 0);
    double step_s = (ar_now_s() - t0) / (double)steps;
    char ref[4200];
    snprintf(ref, sizeof ref, "%s/ref", dir);

    uint64_t lcg = 20251123;
    int kills = 0, landed = 0;
    for (int trial = 0; trial < 6; trial++) {
        char name[32], run[4200], metrics[4300];
        snprintf(name, sizeof name, "run%d", trial);
        snprintf(run, sizeof run, "%s/%s", dir, name);
        snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
        int times = trial == 5 ? 3 : 1; /* the last run is killed three times in a row */
        for (int k = 0; k < times; k++) {
            int have = access(tu_path(run, "model.safetensors"), F_OK) == 0;
            int lines0 = count_lines(metrics), left = (int)steps - lines0;
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            int wait = left > 0 ? (int)((lcg >> 33) % (uint64_t)left) : 0;
            double frac = (double)((lcg >> 11) & 0xfffff) / 1048576.0;
            pid_t pid = have ? spawn(dir, 0, "--resume", name, (const char *)NULL)
                             : spawn(dir, 0, cfg, "--out", name, (const char *)NULL);
            if (wait > 0)
                wait_lines(metrics, lines0 + wait, 30);
            sleep_s(frac * step_s);
            kill(pid, SIGKILL);
            kills++;
            int ks = wait_for(pid);
            landed += ks == -SIGKILL;
            cr_log_info("%s kill %d after %d more steps + %.0f%% of a step: %s, %d temporary files left", name, k,
                        wait, 100 * frac, ks == -SIGKILL ? "killed" : "had finished", count_temps(run));
        }
        int st = -1;
        for (int tries = 0; tries < 3 && st != 0; tries++) {
            int have = access(tu_path(run, "model.safetensors"), F_OK) == 0;
            st = have ? RUN(dir, "--resume", name) : RUN(dir, cfg, "--out", name);
        }
        char *err = output(dir, "err.txt");
        cr_assert_eq(st, 0, "%s did not finish after the kill: %s", name, err);
        free(err);
        cr_expect(same_file(tu_path(run, "model.safetensors"), tu_path(ref, "model.safetensors")),
                  "%s: final weights differ from the uninterrupted run", name);
        cr_expect(same_file(tu_path(run, "optimizer.safetensors"), tu_path(ref, "optimizer.safetensors")),
                  "%s: final optimizer state differs", name);
        check_metric_steps(run, steps);
        cr_expect_eq(count_temps(run), 0, "%s: temporary files left", name);
    }
    cr_log_info("%d of %d kills landed while the process was running (%.3f s a step)", landed, kills, step_s);
    cr_expect_geq(landed, kills / 2, "only %d of %d kills hit a running process", landed, kills);
}
