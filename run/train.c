#include "train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/atomic.h"
#include "../core/blocks.h"
#include "../formats/config.h"
#include "../formats/json.h"
#include "../formats/metrics.h"
#include "../formats/safetensors.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "../lib/schedule.h"
#include "checkpoint.h"
#include "../parallel/comm.h"
#include "../parallel/watchdog.h"
#include "data.h"
#include "depth_stats.h"
#include "eval.h"
#include "../parallel/parallel.h"
#include "run_figures.h"
#include "../core/clock.h"

/* splitmix64: turns (seed, micro-batch counter) into an independent RNG seed,
 * so the batch of any step is known without replaying earlier steps (which
 * is what makes --resume exact: the checkpoint stores the counter as
 * data_position). */
static unsigned long mix_seed(uint64_t seed, uint64_t k)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (unsigned long)(z ^ (z >> 31));
}

static int file_exists(const char *dir, const char *name)
{
    char p[AR_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

typedef struct {
    const ar_config *cfg;
    const ar_train_opts *o;
    ar_dataset ds;
    ar_model *m;
    ar_adamw opt;
    gsl_rng *rng;
    char metrics[AR_PATH_MAX + 64];
    double last_val;
    long pos;           /* data position: micro-batches drawn so far */
    long bad;           /* consecutive skipped steps */
    long saved_step;    /* step of the checkpoint on disk, -1 = none */
    int threads;        /* effective compute threads */
    uint32_t data_fingerprint; /* of the training set (formats/token_set.h) */
    int data_failed;    /* a window of this step could not be read: data_err says why */
    ar_err data_err;
    int lock_fd;
    int made_dir;       /* ar_mkdir_p_new's first_new for the run directory */
    int made_lock;      /* this process created .attnres.lock */
    ar_comm *comm;      /* the ranks of the run (self: one) */
    ar_parallel *par;   /* how they share a step (parallel.h) */
    int lead;           /* rank 0: reads the checkpoint, writes every file */
    int opt_ready;      /* opt is allocated */
    int device_step;    /* one process runs the whole model: the step's loss
                           and norm stay on the device until its update is
                           queued (parallel.h's loss_on_device) */
} trainer;

static void warnf(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warnf(const trainer *t, const char *fmt, ...)
{
    if (!t->o->warn || !t->lead)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->o->warn(msg, t->o->ud);
}

/* Micro-batch a of the step at the data position (parallel.h's sampler). */
static void sample_micro(void *ud, int a, int32_t *in, int32_t *tg)
{
    trainer *t = ud;
    const ar_train_cfg *tc = &t->cfg->train;
    size_t n = (size_t)tc->batch_size * t->m->T;
    gsl_rng_set(t->rng, mix_seed(tc->seed, (uint64_t)t->pos + (uint64_t)a));
    if (t->data_failed ||
        ar_sample_batch(&t->ds.train, t->ds.vocab, tc->batch_size, t->m->T, t->rng, in, tg, &t->data_err) != 0) {
        /* a bad id: the step runs to its end on valid ids and is thrown
         * away (forward_backward fails it on every rank) */
        t->data_failed = 1;
        memset(in, 0, n * sizeof *in);
        memset(tg, 0, n * sizeof *tg);
    }
}

/* One step's gradient over grad_accum micro-batches at the data position,
 * spread over the ranks (parallel.h); the loss is the mean of every
 * micro-batch's, summed in micro-batch order on every rank. */
static int forward_backward(trainer *t, double *loss, ar_err *e)
{
    int A = t->cfg->train.grad_accum;
    double *l = ar_xcalloc((size_t)A, sizeof(double));
    int rc = t->par->ops->step(t->par, sample_micro, t, l, e);
    if (rc == 0) {
        if (t->data_failed)
            *e = t->data_err;
        rc = ar_comm_agree(t->comm, t->data_failed ? -1 : 0, e);
    }
    *loss = 0;
    for (int a = 0; a < A; a++)
        *loss += l[a] / A;
    free(l);
    t->pos += A;
    return rc;
}

/* The first parameter holding a non-finite value, or -1. */
static int nonfinite_param(const ar_model *m)
{
    if (isfinite(m->be->sumsq(m->params, m->pt.total)))
        return -1;
    for (int i = 0; i < m->pt.n; i++)
        if (!isfinite(m->be->sumsq(m->params + m->pt.p[i].offset, m->pt.p[i].numel)))
            return i;
    return 0;
}

static const char *kept_text(const trainer *t, char *buf, size_t n)
{
    if (t->saved_step >= 0)
        snprintf(buf, n, "the checkpoint in '%s' (step %ld) is kept", t->o->out_dir, t->saved_step);
    else
        snprintf(buf, n, "no checkpoint was saved yet");
    return buf;
}

/* Per-sublayer RMS of the parameter gradients (group l = sublayer l's
 * weights: its norm gain, projections and depth-mixing parameters). */
static void grad_rms_by_sublayer(ar_model *m, double *out)
{
    float *g = ar_xmalloc(m->pt.total * sizeof(float));
    m->be->download(g, m->grads, m->pt.total * sizeof(float));
    double *ss = ar_xcalloc((size_t)m->L + 2, sizeof(double));
    double *cnt = ar_xcalloc((size_t)m->L + 2, sizeof(double));
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        for (size_t j = 0; j < p->numel; j++)
            ss[p->group] += (double)g[p->offset + j] * g[p->offset + j];
        cnt[p->group] += (double)p->numel;
    }
    for (int l = 1; l <= m->L; l++)
        out[l - 1] = sqrt(ss[l] / cnt[l]);
    free(ss);
    free(cnt);
    free(g);
}

static void write_list(ar_jw *w, const char *key, const double *x, int n)
{
    ar_jw_key(w, key);
    ar_jw_arr_begin(w);
    for (int i = 0; i < n; i++)
        ar_jw_num(w, x[i]);
    ar_jw_arr_end(w);
}

/* Validation, diagnostics and the metrics fields that go with them. */
static int evaluate(trainer *t, ar_jw *w, ar_err *e)
{
    ar_model *m = t->m;
    double *grms = ar_xcalloc((size_t)m->L, sizeof(double));
    /* before eval: eval does not touch grads */
    if (t->par->ops->gather_model(t->par, e) != 0) {
        free(grms);
        return -1;
    }
    grad_rms_by_sublayer(m, grms);
    /* a model that runs every sublayer, for the evaluation's duration
     * (every rank evaluates its share of the windows) */
    ar_model *em = m;
    if (t->par->ops->eval_model(t->par, &em, e) != 0) {
        free(grms);
        return -1;
    }
    ar_eval_result r;
    ar_depth_route route; /* routing statistics over every evaluated window (depth_stats.h) */
    int routed = ar_depth_route_init(&route, em->res);
    em->collect_stats = 1; /* rank 0 evaluates the first batch: the diagnostics are its */
    int rc = ar_evaluate_ranks_with(em, t->comm, &t->ds.eval, t->cfg->train.eval_windows,
                                    routed ? ar_depth_route_hook : NULL, &route, &r, e);
    em->collect_stats = 0;
    if (rc == 0 && routed)
        rc = ar_depth_route_reduce(&route, t->comm, e);
    if (rc == 0) {
        t->last_val = r.loss;
        ar_jw_key(w, "val_loss");
        ar_jw_num(w, r.loss);
        if (t->cfg->model.vocab_bytes) {
            ar_jw_key(w, "val_bits_per_byte");
            ar_jw_num(w, r.loss / M_LN2);
        }
        write_list(w, "out_rms", em->out_rms, em->L);
        write_list(w, "grad_rms", grms, em->L);
        ar_residual *res = em->res;
        if (res->vt->n_sources(res, 1) > 0) {
            /* depth_attn[l-1] = token-averaged weights of mixer l over its
             * sources (l = L+1 is the final aggregation), first eval batch,
             * the same batch as out_rms. */
            ar_jw_key(w, "depth_attn");
            ar_jw_arr_begin(w);
            for (int l = 1; l <= em->L + 1; l++) {
                const float *a = em->depth_w + (size_t)(l - 1) * (em->L + 1);
                ar_jw_arr_begin(w);
                for (int i = 0; i < res->vt->n_sources(res, l); i++)
                    ar_jw_num(w, a[i]);
                ar_jw_arr_end(w);
            }
            ar_jw_arr_end(w);
        }
        if (routed)
            ar_depth_route_json(w, "depth_routing", &route);
    }
    ar_depth_route_free(&route);
    if (em != m)
        ar_model_free(em);
    free(grms);
    return rc;
}

static int model_cfg_equal(const ar_model_cfg *a, const ar_model_cfg *b)
{
    return a->vocab == b->vocab && a->vocab_bytes == b->vocab_bytes && a->d_model == b->d_model &&
           a->n_layer == b->n_layer && a->n_head == b->n_head && a->d_ff == b->d_ff &&
           a->seq_len == b->seq_len && a->residual.kind == b->residual.kind &&
           ar_cfg_same_blocks(a, b);
}

/* Removes what a killed writer left behind: PATH.tmp.<pid> files of
 * ar_write_atomic (the directory is locked, so no other attnres process is
 * writing there). */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[AR_PATH_MAX + 300];
    while ((de = readdir(d))) {
        const char *tmp = strstr(de->d_name, ".tmp.");
        if (tmp && tmp[5] && strspn(tmp + 5, "0123456789") == strlen(tmp + 5)) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

/* Creates the run directory, checks that files can be created in it and
 * takes its lock. */
static int open_run_dir(trainer *t, ar_err *e)
{
    const char *dir = t->o->out_dir;
    char p[AR_PATH_MAX + 64];
    if (ar_mkdir_p_new(dir, &t->made_dir, e) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/.attnres-probe.%ld", dir, (long)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ar_fail(e, "run directory '%s' is not writable: cannot create a file in it: %s", dir,
                       ar_strerror(errno));
    close(fd);
    unlink(p);
    snprintf(p, sizeof p, "%s/.attnres.lock", dir);
    t->lock_fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t->lock_fd >= 0)
        t->made_lock = 1;
    else if (errno == EEXIST)
        t->lock_fd = open(p, O_RDWR | O_CLOEXEC);
    if (t->lock_fd < 0)
        return ar_fail(e, "cannot create lock file '%s': %s", p, ar_strerror(errno));
    if (flock(t->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return ar_fail(e, "run directory '%s' is in use by another attnres process (it holds the lock on '%s')",
                       dir, p);
    remove_stale_temps(dir);
    return 0;
}

/* A new run in a directory that holds a checkpoint: refused unless forced,
 * with a message that says whose checkpoint it is. */
static int check_new_run_dir(const ar_config *cfg, const ar_train_opts *o, ar_err *e)
{
    char file[AR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/model.safetensors", o->out_dir);
    if (o->force || access(file, F_OK) != 0)
        return 0;
    ar_config saved;
    long step = 0;
    ar_err re = {{0}};
    if (ar_ckpt_read_config(file, &saved, &step, &re) != 0)
        return ar_fail(e, "run directory '%s' already holds a checkpoint, which cannot be read (%s); use --force "
                          "to overwrite it, or --out to choose another directory",
                       o->out_dir, re.msg);
    char diff[512];
    if (ar_config_diff(&saved, cfg, diff, sizeof diff) > 0)
        return ar_fail(e, "run directory '%s' already holds a checkpoint of a different run (%s); use --force to "
                          "overwrite it, or --out to choose another directory",
                       o->out_dir, diff);
    return ar_fail(e, "run directory '%s' already holds a checkpoint of this run (step %ld of %ld); use --resume "
                      "to continue it, --force to start it over, or --out to choose another directory",
                   o->out_dir, step, saved.train.steps);
}

/* --force: the files of the run that was there. */
static int clear_old_run(const char *dir, ar_err *e)
{
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "optimizer.prev.safetensors",
                           "config.yaml", "metrics.jsonl", "loss.png", "dynamics.png", "depth_attn.png"};
    char p[AR_PATH_MAX + 64];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            return ar_fail(e, "cannot remove '%s': %s", p, ar_strerror(errno));
    }
    if (ar_ckpt_keep(dir, -1, 0, e) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    rmdir(p);
    return ar_sync_dir(dir, e);
}

/* A CPU run is bit-identical to an uninterrupted one only with the same
 * OpenBLAS kernel and the same build of attnres's own loops (and threads,
 * checked in load_resume); the CPU's model alone changes nothing, so it is
 * only named. */
static void warn_other_machine(const trainer *t, const char *dir, const ar_machine *saved)
{
    ar_machine now;
    ar_machine_describe(&now);
    if (saved->blas[0] && strcmp(saved->blas, now.blas) != 0)
        warnf(t, "'%s' was trained with %s on %s and resumes with %s on %s: the matrix products round "
                 "differently, so the result will not be bit-identical to an uninterrupted run (OPENBLAS_CORETYPE "
                 "chooses the kernels)",
              dir, saved->blas, saved->cpu[0] ? saved->cpu : "an unnamed CPU", now.blas, now.cpu);
    if (saved->build[0] && strcmp(saved->build, now.build) != 0)
        warnf(t, "'%s' was trained by a build for %s and resumes with one for %s: attnres's own loops round "
                 "differently, so the result will not be bit-identical to an uninterrupted run",
              dir, saved->build, now.build);
}

/* Loads the checkpoint of a resumed run and says where this invocation
 * will not reproduce the uninterrupted run. */
static int load_resume(trainer *t, long *start, ar_adamw *full, ar_err *e)
{
    const ar_config *cfg = t->cfg;
    const char *dir = t->o->out_dir;
    char file[AR_PATH_MAX + 64], diff[512];
    ar_config saved;
    ar_ckpt_state st;
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    if (ar_ckpt_read_state(file, &saved, &st, e) != 0)
        return -1;
    if (!model_cfg_equal(&saved.model, &cfg->model))
        return ar_fail(e, "'%s': the model section differs from the checkpoint's; a resumed run "
                          "must keep its model",
                       dir);
    if (saved.train.optimizer != cfg->train.optimizer)
        return ar_fail(e, "'%s' was trained with 'train.optimizer' %s and resumes with %s: the optimizer states "
                          "differ; a resumed run keeps its optimizer",
                       dir, ar_optimizer_name(saved.train.optimizer), ar_optimizer_name(cfg->train.optimizer));
    *start = st.step;
    if (ar_ckpt_load_weights(file, t->m, e) != 0 || ar_ckpt_load_optim(dir, t->m, full, st.step, e) != 0 ||
        ar_metrics_truncate_after(t->metrics, st.step, e) != 0)
        return -1;
    t->pos = st.data_position;
    t->bad = st.bad_steps;
    t->saved_step = st.step;
    if (ar_config_diff(&saved, cfg, diff, sizeof diff) > 0)
        warnf(t, "resuming '%s' at step %ld with settings that differ from the checkpoint's: %s", dir, st.step,
              diff);
    if (saved.train.device != cfg->train.device)
        warnf(t, "'%s' was trained on %s and resumes on %s: the backends round differently, so the result will "
                 "not be bit-identical to an uninterrupted run",
              dir, ar_device_name(saved.train.device), ar_device_name(cfg->train.device));
    else if (cfg->train.device == AR_DEVICE_CPU && st.threads > 0 && st.threads != t->threads)
        warnf(t, "'%s' was trained with %d thread%s and resumes with %d: sums are split differently, so the "
                 "result will not be bit-identical to an uninterrupted run",
              dir, st.threads, st.threads == 1 ? "" : "s", t->threads);
    if (cfg->train.device == AR_DEVICE_CPU && saved.train.device == AR_DEVICE_CPU)
        warn_other_machine(t, dir, &st.machine);
    /* a checkpoint of an older version has the count without a fingerprint */
    if (st.data_tokens > 0 && (st.data_tokens != (long)t->ds.train.n ||
                               (st.has_data_fingerprint && st.data_fingerprint != t->data_fingerprint)))
        warnf(t, "the training data of '%s' differ from the checkpoint's (%zu tokens, fingerprint %08x; the "
                 "checkpoint saw %ld tokens, fingerprint %08x): the batches after step %ld are not those of an "
                 "uninterrupted run",
              dir, t->ds.train.n, (unsigned)t->data_fingerprint, st.data_tokens, (unsigned)st.data_fingerprint,
              st.step);
    return 0;
}

/* What rank 0 set up (fresh or resumed weights, moments, counters) to
 * every rank, and the check that every rank reads the same data. */
static int share_state(trainer *t, long *start, ar_adamw *full, int resumed, ar_err *e)
{
    ar_comm *c = t->comm;
    ar_model *m = t->m;
    size_t n = m->pt.total;
    long st[5] = {*start, t->pos, t->bad, t->saved_step, full ? full->t : 0};
    if (c->ops->bcast(c, st, sizeof st, 0, e) != 0 || ar_comm_bcast_floats(c, m->be, m->params, n, 0, e) != 0)
        return -1;
    *start = st[0];
    t->pos = st[1];
    t->bad = st[2];
    t->saved_step = st[3];
    if (resumed) {
        float *hm = ar_xmalloc(n * sizeof(float)), *hv = ar_xmalloc(n * sizeof(float));
        if (t->lead) {
            m->be->download(hm, full->m, n * sizeof(float));
            m->be->download(hv, full->v, n * sizeof(float));
        }
        int rc = c->ops->bcast(c, hm, n * sizeof(float), 0, e);
        if (rc == 0)
            rc = c->ops->bcast(c, hv, n * sizeof(float), 0, e);
        if (rc == 0)
            ar_adamw_moments_from_full(&t->opt, hm, hv);
        t->opt.t = st[4];
        ar_adamw_sync_t(&t->opt);
        free(hm);
        free(hv);
        if (rc != 0)
            return -1;
    }
    /* every rank samples its micro-batches from its own copy of the data */
    unsigned long mine[2] = {(unsigned long)t->ds.train.n, t->data_fingerprint};
    unsigned long *all = ar_xcalloc(2 * (size_t)c->size, sizeof *all);
    int rc = c->ops->allgather(c, mine, all, sizeof mine, e);
    for (int r = 1; rc == 0 && r < c->size; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            rc = ar_fail(e, "rank %d reads other training data than rank 0 ('%s': %lu tokens, fingerprint %08lx on "
                            "rank %d; %lu tokens, fingerprint %08lx on rank 0): every rank needs the same files",
                         r, t->cfg->data.train, all[2 * r], all[2 * r + 1], r, all[0], all[1]);
    free(all);
    return rc;
}

static int setup(trainer *t, long *start, ar_err *e)
{
    const ar_config *cfg = t->cfg;
    const ar_train_opts *o = t->o;
    t->lock_fd = -1;
    t->saved_step = -1;
    if (ar_config_validate(cfg, e) != 0 || ar_parallel_check(t->comm, cfg, e) != 0)
        return -1;
    char note[512];
    if (!o->resume && ar_config_warning(cfg, note, sizeof note))
        warnf(t, "%s", note);
    if (ar_parallel_comm(&t->comm, cfg, e) != 0) /* before the backend starts on a GPU */
        return -1;
    if (t->comm->size > 1)
        ar_watchdog_start(cfg->parallel.timeout_s, t->comm->rank);
    const ar_backend *be = o->be;
    if (!be && !(be = ar_backend_open(ar_device_name(cfg->train.device), cfg->train.precision == AR_PREC_BF16, e))) {
        if (o->resume && cfg->train.device != AR_DEVICE_CPU) {
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            ar_fail(e, "%s; a checkpoint belongs to no device: '--device cpu' resumes '%s' on the CPU", why,
                    o->out_dir);
        }
        return -1;
    }
    be->set_threads(cfg->train.threads);
    t->threads = omp_get_max_threads();
    if (o->resume && o->force)
        return ar_fail(e, "'force' starts a new run and cannot be combined with 'resume'");
    int rc = 0;
    if (t->lead) {
        if (o->resume) {
            if (!file_exists(o->out_dir, "model.safetensors"))
                rc = ar_fail(e, "'%s' holds no checkpoint to resume (no model.safetensors)", o->out_dir);
        } else {
            rc = check_new_run_dir(cfg, o, e);
        }
    }
    if (ar_comm_agree(t->comm, rc, e) != 0)
        return -1;
    /* what can fail without touching the run directory, first */
    if (ar_dataset_open(&t->ds, &cfg->data, &cfg->model, e) != 0)
        rc = -1;
    if (rc == 0) {
        t->data_fingerprint = ar_token_set_fingerprint(t->ds.train_set);
        rc = ar_parallel_model(cfg, t->comm->rank, be, &t->m, e);
    }
    if (rc == 0 && !(t->par = ar_parallel_create(t->comm, cfg, t->m, e)))
        rc = -1;
    if (rc == 0) {
        int nr;
        const size_t *lo, *hi;
        t->par->ops->opt_ranges(t->par, &nr, &lo, &hi);
        ar_adamw_init_ranges(&t->opt, t->m, nr, lo, hi);
        t->opt.muon = cfg->train.optimizer == AR_OPT_MUON;
        t->opt_ready = 1;
        t->device_step = t->comm->size == 1 && !ar_pipelined(cfg);
        t->par->loss_on_device = t->device_step;
        ar_model_loss_slots(t->m, cfg->train.grad_accum);
    }
    if (rc == 0 && t->lead)
        rc = open_run_dir(t, e);
    if (ar_comm_agree(t->comm, rc, e) != 0)
        return -1;
    snprintf(t->metrics, sizeof t->metrics, "%s/metrics.jsonl", o->out_dir);
    *start = 0;
    ar_adamw full = {0};
    if (t->lead) {
        if (o->resume) {
            ar_adamw_init(&full, t->m);
            full.muon = t->opt.muon;
            rc = load_resume(t, start, &full, e);
        } else {
            if (o->force && file_exists(o->out_dir, "model.safetensors"))
                rc = clear_old_run(o->out_dir, e);
            if (rc == 0) {
                ar_model_init(t->m, cfg->train.seed);
                unlink(t->metrics);
            }
        }
    }
    rc = ar_comm_agree(t->comm, rc, e);
    if (rc == 0)
        rc = share_state(t, start, o->resume ? &full : NULL, o->resume, e);
    if (rc == 0)
        rc = t->par->ops->measure(t->par, e);
    if (full.m)
        ar_adamw_free(&full);
    if (rc != 0)
        return -1;
    t->rng = gsl_rng_alloc(gsl_rng_mt19937);
    t->last_val = NAN;
    return 0;
}

/* A run that failed before its first step leaves the directory as it
 * found it: the lock file and the directories it made are removed. */
static void undo_run_dir(trainer *t)
{
    char p[AR_PATH_MAX + 64];
    if (t->made_lock) {
        snprintf(p, sizeof p, "%s/.attnres.lock", t->o->out_dir);
        unlink(p);
    }
    ar_rmdir_new(t->o->out_dir, t->made_dir);
}

static void teardown(trainer *t)
{
    if (t->opt_ready)
        ar_adamw_free(&t->opt);
    ar_parallel_free(t->par);
    if (t->m)
        ar_model_free(t->m);
    if (t->rng)
        gsl_rng_free(t->rng);
    ar_dataset_close(&t->ds);
    if (t->lock_fd >= 0)
        close(t->lock_fd);
}

/* The step's decision, queued on the device (lib/optim.h): from the loss
 * and norm left there (one process), or from those the ranks' reductions
 * gave the host. */
static int decide(trainer *t, double loss, ar_err *e)
{
    const ar_train_cfg *tc = &t->cfg->train;
    if (t->device_step) {
        int nc;
        const double *parts = ar_model_loss_parts(t->m, &nc);
        ar_step_check_device(&t->opt, t->m, tc, parts, tc->grad_accum, nc);
        return 0;
    }
    double gnorm;
    if (t->par->ops->grad_norm(t->par, &gnorm, e) != 0)
        return -1;
    ar_step_check_given(&t->opt, tc, loss, gnorm);
    return 0;
}

/* The optimizer's update of this rank's ranges as the step's record
 * decides (none where it skips), passed on to the ranks that need it; then
 * the record on the host (the step's one wait for the device, after
 * everything is queued) and the check that the parameters stayed finite
 * (adamw's flag on one process; over several, every rank checks the whole
 * parameters, so that all agree). */
static int update(trainer *t, long step, double lr, ar_step_rec *rec, ar_err *e)
{
    char kept[AR_PATH_MAX + 128];
    ar_adamw_update(&t->opt, t->m, &t->cfg->train, lr);
    if (t->par->ops->updated(t->par, e) != 0)
        return -1;
    ar_adamw_read(&t->opt, rec);
    int rc = 0, p = -1;
    if (!rec->skip && (!t->device_step || rec->bad_param))
        p = nonfinite_param(t->m);
    if (p >= 0)
        rc = ar_fail(e, "step %ld: the update made tensor '%s' non-finite (train.lr %g too high?); training "
                        "stopped; %s",
                     step + 1, t->m->pt.p[p].name, lr, kept_text(t, kept, sizeof kept));
    return t->par->ops->agree(t->par, rc, e);
}

static int due(long done, long every, long steps) { return done == steps || (every > 0 && done % every == 0); }

/* Rank 0 writes the checkpoint: of the whole state, gathered from every
 * rank where the ranks hold parts of it, so the files are those of one
 * process. */
static int write_checkpoint(trainer *t, long step, const ar_adamw *opt, ar_err *e)
{
    const ar_config *cfg = t->cfg;
    ar_ckpt_state st = {.step = step, .rng_seed = cfg->train.seed, .data_position = t->pos,
                        .bad_steps = t->bad, .threads = t->threads, .data_tokens = (long)t->ds.train.n,
                        .data_fingerprint = t->data_fingerprint, .has_data_fingerprint = 1};
    char kept[AR_PATH_MAX + 128];
    if (ar_ckpt_save_state(t->o->out_dir, cfg, t->m, opt, &st, e) != 0) {
        /* A refusal (AR_ERR_KEPT) already says what was kept; any other
         * failure gets it added here. */
        if (e->kind != AR_ERR_KEPT)
            ar_wrap(e, "checkpoint of step %ld not saved (%s)", step, kept_text(t, kept, sizeof kept));
        return -1;
    }
    if (ar_ckpt_keep(t->o->out_dir, step, cfg->train.keep_checkpoints, e) != 0)
        return -1;
    return ar_train_figures(t->o->out_dir, e);
}

static int save(trainer *t, long step, ar_err *e)
{
    /* the moments (and parameters) of ranks that update parts of the
     * model, gathered (parallel.h): the files of one process */
    ar_adamw full;
    const ar_adamw *opt;
    int rc = ar_parallel_checkpoint_opt(t->par, &t->opt, t->lead ? &full : NULL, &opt, e);
    if (rc == 0 && t->lead)
        rc = write_checkpoint(t, step, opt, e);
    if (opt == &full)
        ar_adamw_free(&full);
    if (ar_comm_agree(t->comm, rc, e) != 0)
        return -1;
    t->saved_step = step;
    return 0;
}

/* The metrics line of a step (every logged step, and every skipped one). */
static int log_step(trainer *t, long step, long tok_per_step, double loss, double lr, double gnorm, double dt,
                    double t0, int do_eval, const char *warning, ar_err *e)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "step");
    ar_jw_int(&w, step);
    ar_jw_key(&w, "tokens");
    ar_jw_int(&w, step * tok_per_step);
    ar_jw_key(&w, "loss");
    ar_jw_num(&w, loss);
    ar_jw_key(&w, "lr");
    ar_jw_num(&w, lr);
    ar_jw_key(&w, "grad_norm");
    ar_jw_num(&w, gnorm);
    ar_jw_key(&w, "tok_per_s");
    ar_jw_num(&w, tok_per_step / dt);
    ar_jw_key(&w, "elapsed_s");
    ar_jw_num(&w, ar_now_s() - t0);
    if (t->par->ops->metrics(t->par, &w, tok_per_step, e) != 0) {
        ar_jw_free(&w);
        return -1;
    }
    if (warning) {
        ar_jw_key(&w, "skipped");
        ar_jw_bool(&w, 1);
        ar_jw_key(&w, "bad_steps");
        ar_jw_int(&w, t->bad);
        ar_jw_key(&w, "warning");
        ar_jw_str(&w, warning);
    }
    int rc = do_eval ? evaluate(t, &w, e) : 0; /* every rank evaluates */
    ar_jw_obj_end(&w);
    if (rc == 0 && t->lead)
        rc = ar_metrics_append(t->metrics, w.s, e);
    ar_jw_free(&w);
    return ar_comm_agree(t->comm, rc, e);
}

int ar_train(const ar_config *cfg, const ar_train_opts *o, ar_train_result *res, ar_err *e)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.o = o;
    t.comm = o->comm ? o->comm : ar_comm_self();
    t.lead = t.comm->rank == 0;
    long start = 0;
    const ar_train_cfg *tc = &cfg->train;
    memset(res, 0, sizeof *res);
    res->final_val_loss = NAN;
    t.made_dir = -1;
    int rc = setup(&t, &start, e);
    int failed_at_start = rc != 0;
    long tok_per_step = (long)tc->batch_size * tc->grad_accum * cfg->model.seq_len;
    double t0 = ar_now_s(), train_time = 0;
    long step = start;
    char kept[AR_PATH_MAX + 128];
    while (rc == 0 && step < tc->steps) {
        /* a device runs ahead of the host: its queue is drained before each
         * clock read, so a step's time is its own */
        t.m->be->sync();
        double lr = ar_lr_at(tc, step), ts = ar_now_s();
        double loss, gnorm;
        ar_step_rec rec = {.loss = NAN, .gnorm = NAN};
        rc = forward_backward(&t, &loss, e);
        if (rc == 0 && o->grad_hook)
            o->grad_hook(t.m, step + 1, o->ud);
        if (rc == 0)
            rc = decide(&t, loss, e);
        if (rc != 0)
            break;
        /* the update is queued before anything of the step is read back */
        rc = update(&t, step, lr, &rec, e);
        loss = rec.loss, gnorm = rec.gnorm;
        char warning[256];
        int bad = rc == 0 && rec.skip;
        if (bad) {
            double what = isfinite(loss) ? gnorm : loss;
            t.bad++;
            res->skipped++;
            snprintf(warning, sizeof warning,
                     "step %ld: non-finite %s (%s): update skipped (%ld in a row, train.max_bad_steps is %d)",
                     step + 1, isfinite(loss) ? "gradient" : "loss", isnan(what) ? "nan" : "inf", t.bad,
                     tc->max_bad_steps);
            warnf(&t, "%s", warning);
        } else if (rc == 0) {
            t.bad = 0;
        }
        t.m->be->sync();
        double dt = ar_now_s() - ts;
        train_time += dt;
        step++;
        if (rc != 0)
            break;
        int interrupted = o->interrupt && *o->interrupt;
        if (t.comm->size > 1) { /* a signal to any rank stops every rank after this step */
            double any = interrupted;
            if ((rc = t.comm->ops->sum_doubles(t.comm, &any, 1, e)) != 0)
                break;
            interrupted = any > 0;
        }
        int give_up = bad && t.bad >= tc->max_bad_steps;
        int do_eval = !give_up && (due(step, tc->eval_every, tc->steps) || interrupted);
        int do_log = due(step, tc->log_every, tc->steps) || do_eval || bad;
        int do_save = !give_up && (due(step, tc->save_every, tc->steps) || interrupted);
        res->final_loss = loss;
        if (do_log)
            rc = log_step(&t, step, tok_per_step, loss, lr, gnorm, dt, t0, do_eval, bad ? warning : NULL, e);
        if (rc == 0 && give_up)
            rc = ar_fail(e, "steps %ld to %ld: %ld steps in a row with a non-finite loss or gradient "
                            "(train.max_bad_steps is %d); training stopped; %s",
                         step - t.bad + 1, step, t.bad, tc->max_bad_steps, kept_text(&t, kept, sizeof kept));
        if (rc == 0 && do_save)
            rc = save(&t, step, e);
        if (rc == 0 && o->progress && t.lead && (do_log || step == start + 1)) {
            double el = ar_now_s() - t0;
            ar_progress p = {.step = step, .steps = tc->steps, .tokens = step * tok_per_step,
                             .loss = loss, .lr = lr, .grad_norm = gnorm,
                             .tok_per_s = (double)(step - start) * tok_per_step / train_time,
                             .val_loss = t.last_val, .elapsed_s = el,
                             .eta_s = el / (double)(step - start) * (double)(tc->steps - step),
                             .is_eval = do_eval};
            o->progress(&p, o->ud);
        }
        if (interrupted && rc == 0) {
            res->interrupted = 1;
            break;
        }
    }
    res->step = step;
    res->final_val_loss = t.last_val;
    res->tok_per_s = train_time > 0 ? (double)(step - start) * tok_per_step / train_time : 0;
    if (failed_at_start)
        undo_run_dir(&t); /* before teardown: while the lock is held */
    teardown(&t);
    return rc;
}
