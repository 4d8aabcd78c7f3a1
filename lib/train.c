#include "train.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../formats/atomic.h"
#include "../formats/config.h"
#include "../formats/json.h"
#include "../formats/metrics.h"
#include "checkpoint.h"
#include "data.h"
#include "eval.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: turns (seed, micro-batch counter) into an independent RNG seed,
 * so the batch of any step is known without replaying earlier steps (which
 * is what makes --resume exact). */
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
    int32_t *in, *tg;
    char metrics[AR_PATH_MAX + 64];
    double last_val;
} trainer;

/* One optimizer step: grad_accum micro-batches, clip, AdamW. */
static double train_step(trainer *t, long step, double lr, double *gnorm)
{
    const ar_train_cfg *tc = &t->cfg->train;
    ar_model *m = t->m;
    int B = tc->batch_size, T = m->T;
    double loss = 0;
    float scale = (float)(1.0 / ((double)B * T * tc->grad_accum));
    ar_model_zero_grad(m);
    for (int a = 0; a < tc->grad_accum; a++) {
        gsl_rng_set(t->rng, mix_seed(tc->seed, (uint64_t)step * tc->grad_accum + a));
        ar_sample_batch(t->ds.train, t->ds.ntrain, B, T, t->rng, t->in, t->tg);
        loss += ar_model_forward(m, t->in, t->tg, B, NULL) / tc->grad_accum;
        ar_model_backward(m, scale);
    }
    *gnorm = ar_grad_norm(m);
    ar_adamw_step(&t->opt, m, tc, lr, *gnorm);
    return loss;
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
    grad_rms_by_sublayer(m, grms); /* before eval: eval does not touch grads */
    ar_eval_result r;
    m->collect_stats = 1;
    int rc = ar_evaluate(m, t->ds.val, t->ds.nval, t->cfg->train.eval_windows, 0, &r, e);
    m->collect_stats = 0;
    if (rc != 0) {
        free(grms);
        return -1;
    }
    t->last_val = r.loss;
    ar_jw_key(w, "val_loss");
    ar_jw_num(w, r.loss);
    if (t->cfg->model.vocab_bytes) {
        ar_jw_key(w, "val_bits_per_byte");
        ar_jw_num(w, r.loss / M_LN2);
    }
    write_list(w, "out_rms", m->out_rms, m->L);
    write_list(w, "grad_rms", grms, m->L);
    ar_residual *res = m->res;
    if (res->vt->n_sources(res, 1) > 0) {
        /* depth_attn[l-1] = token-averaged weights of mixer l over its
         * sources (l = L+1 is the final aggregation), first eval batch,
         * the same batch as out_rms. */
        ar_jw_key(w, "depth_attn");
        ar_jw_arr_begin(w);
        for (int l = 1; l <= m->L + 1; l++) {
            const float *a = m->depth_w + (size_t)(l - 1) * (m->L + 1);
            ar_jw_arr_begin(w);
            for (int i = 0; i < res->vt->n_sources(res, l); i++)
                ar_jw_num(w, a[i]);
            ar_jw_arr_end(w);
        }
        ar_jw_arr_end(w);
    }
    free(grms);
    return 0;
}

static int model_cfg_equal(const ar_model_cfg *a, const ar_model_cfg *b)
{
    return a->vocab == b->vocab && a->vocab_bytes == b->vocab_bytes && a->d_model == b->d_model &&
           a->n_layer == b->n_layer && a->n_head == b->n_head && a->d_ff == b->d_ff &&
           a->seq_len == b->seq_len && a->residual.kind == b->residual.kind &&
           ar_cfg_block_size(a) == ar_cfg_block_size(b);
}

static int setup(trainer *t, long *start, ar_err *e)
{
    const ar_config *cfg = t->cfg;
    const ar_train_opts *o = t->o;
    const ar_backend *be = o->be ? o->be : ar_backend_cpu();
    if (ar_config_validate(cfg, e) != 0)
        return -1;
    be->set_threads(cfg->train.threads);
    if (o->resume) {
        if (!file_exists(o->out_dir, "model.safetensors"))
            return ar_fail(e, "'%s' holds no checkpoint to resume (no model.safetensors)", o->out_dir);
    } else if (file_exists(o->out_dir, "model.safetensors")) {
        return ar_fail(e, "run directory '%s' already holds a checkpoint; use --resume to continue "
                          "it or --out to choose another directory", o->out_dir);
    }
    if (ar_mkdir_p(o->out_dir, e) != 0)
        return -1;
    if (ar_dataset_open(&t->ds, &cfg->data, &cfg->model, e) != 0)
        return -1;
    if (ar_model_create(&t->m, &cfg->model, be, cfg->train.batch_size, e) != 0)
        return -1;
    ar_adamw_init(&t->opt, t->m);
    snprintf(t->metrics, sizeof t->metrics, "%s/metrics.jsonl", o->out_dir);
    *start = 0;
    if (o->resume) {
        char file[AR_PATH_MAX + 64];
        ar_config saved;
        snprintf(file, sizeof file, "%s/model.safetensors", o->out_dir);
        if (ar_ckpt_read_config(file, &saved, start, e) != 0 ||
            ar_ckpt_load_weights(file, t->m, e) != 0 ||
            ar_ckpt_load_optim(o->out_dir, t->m, &t->opt, *start, e) != 0 ||
            ar_metrics_truncate_after(t->metrics, *start, e) != 0)
            return -1;
        if (!model_cfg_equal(&saved.model, &cfg->model))
            return ar_fail(e, "'%s': the model section differs from the checkpoint's; a resumed run "
                              "must keep its model", o->out_dir);
    } else {
        ar_model_init(t->m, cfg->train.seed);
        unlink(t->metrics);
    }
    t->rng = gsl_rng_alloc(gsl_rng_mt19937);
    size_t N = (size_t)cfg->train.batch_size * cfg->model.seq_len;
    t->in = ar_xmalloc(N * sizeof(int32_t));
    t->tg = ar_xmalloc(N * sizeof(int32_t));
    t->last_val = NAN;
    return 0;
}

static void teardown(trainer *t)
{
    if (t->m) {
        ar_adamw_free(&t->opt);
        ar_model_free(t->m);
    }
    if (t->rng)
        gsl_rng_free(t->rng);
    free(t->in);
    free(t->tg);
    ar_dataset_close(&t->ds);
}

static int due(long done, long every, long steps) { return done == steps || (every > 0 && done % every == 0); }

int ar_train(const ar_config *cfg, const ar_train_opts *o, ar_train_result *res, ar_err *e)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.o = o;
    long start;
    const ar_train_cfg *tc = &cfg->train;
    memset(res, 0, sizeof *res);
    res->final_val_loss = NAN;
    int rc = setup(&t, &start, e);
    long tok_per_step = (long)tc->batch_size * tc->grad_accum * cfg->model.seq_len;
    double t0 = now_s(), train_time = 0;
    long step = start;
    while (rc == 0 && step < tc->steps) {
        double lr = ar_lr_at(tc, step), gnorm, ts = now_s();
        double loss = train_step(&t, step, lr, &gnorm);
        double dt = now_s() - ts;
        train_time += dt;
        step++;
        int interrupted = o->interrupt && *o->interrupt;
        int do_eval = due(step, tc->eval_every, tc->steps) || interrupted;
        int do_log = due(step, tc->log_every, tc->steps) || do_eval;
        int do_save = due(step, tc->save_every, tc->steps) || interrupted;
        res->final_loss = loss;
        if (do_log) {
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
            ar_jw_num(&w, now_s() - t0);
            if (do_eval)
                rc = evaluate(&t, &w, e);
            ar_jw_obj_end(&w);
            if (rc == 0)
                rc = ar_metrics_append(t.metrics, w.s, e);
            ar_jw_free(&w);
        }
        if (rc == 0 && do_save) {
            rc = ar_ckpt_save(o->out_dir, cfg, t.m, &t.opt, step, e);
            if (rc == 0)
                rc = ar_train_figures(o->out_dir, e);
        }
        if (rc == 0 && o->progress && (do_log || step == start + 1)) {
            double el = now_s() - t0;
            ar_progress p = {.step = step, .steps = tc->steps, .tokens = step * tok_per_step,
                             .loss = loss, .lr = lr, .grad_norm = gnorm,
                             .tok_per_s = (double)(step - start) * tok_per_step / train_time,
                             .val_loss = t.last_val, .elapsed_s = el,
                             .eta_s = el / (double)(step - start) * (double)(tc->steps - step),
                             .is_eval = do_eval};
            o->progress(&p, o->ud);
        }
        if (interrupted) {
            res->interrupted = 1;
            break;
        }
    }
    res->step = step;
    res->final_val_loss = t.last_val;
    res->tok_per_s = train_time > 0 ? (double)(step - start) * tok_per_step / train_time : 0;
    teardown(&t);
    return rc;
}
