#include "sweep.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/atomic.h"
#include "../formats/config.h"
#include "../formats/csv.h"
#include "../formats/json.h"
#include "../formats/metrics.h"
#include "../lib/model.h"
#include "../run/checkpoint.h"
#include "child.h"
#include "../parallel/comm.h"
#include "../run/data.h"
#include "../run/eval.h"

int ar_sweep_compute_of(const ar_sweep_run *r, ar_sweep_compute *c, ar_err *e)
{
    /* The model's own parameter table is the one definition of N; a model
     * for one sequence allocates little and computes nothing. */
    ar_model *m;
    if (ar_model_create(&m, &r->cfg.model, ar_backend_cpu(), 1, e) != 0)
        return -1;
    c->nonembed_params = ar_model_nonembed_params(m);
    c->flops_per_token = ar_model_flops_per_token(m);
    ar_model_free(m);
    c->flops = c->flops_per_token * (double)r->tokens;
    c->pflops_days = c->flops / (1e15 * 86400.0);
    return 0;
}

int ar_sweep_resolve_budgets(ar_sweep *s, ar_err *e)
{
    for (int i = 0; i < s->nruns; i++) {
        ar_sweep_run *r = &s->runs[i];
        if (!(r->flops_budget > 0))
            continue;
        ar_train_cfg *t = &r->cfg.train;
        long per_step = (long)t->batch_size * t->grad_accum * r->cfg.model.seq_len;
        ar_sweep_compute c;
        if (ar_sweep_compute_of(r, &c, e) != 0)
            return -1;
        double steps = llround(r->flops_budget / (c.flops_per_token * (double)per_step));
        if (!(steps < 1e15))
            return ar_fail(e, "size '%s': flops %g is %g steps of %ld tokens: too many", r->size, r->flops_budget,
                           steps, per_step);
        t->steps = steps < 1 ? 1 : (long)steps;
        r->tokens = t->steps * per_step;
        ar_err ve;
        if (ar_config_validate(&r->cfg, &ve) != 0)
            return ar_fail(e, "size '%s', variant '%s': %s", r->size, r->variant, ve.msg);
    }
    return 0;
}

int ar_sweep_run_stats(const char *run_dir, double *wall_s, double *val_loss, ar_err *e)
{
    char path[AR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    ar_json **rows;
    int n;
    *wall_s = 0;
    *val_loss = NAN;
    if (ar_metrics_read(path, &rows, &n, e) != 0)
        return -1;
    /* elapsed_s restarts from 0 in every invocation of a resumed run. */
    double seg = 0, prev = -1;
    for (int i = 0; i < n; i++) {
        const ar_json *el = ar_json_get(rows[i], "elapsed_s"), *vl = ar_json_get(rows[i], "val_loss");
        if (el && el->type == AR_JSON_NUM) {
            if (el->num < prev) {
                *wall_s += seg;
                seg = 0;
            }
            seg = fmax(seg, el->num);
            prev = el->num;
        }
        if (vl && vl->type == AR_JSON_NUM)
            *val_loss = vl->num;
    }
    *wall_s += seg;
    ar_metrics_free(rows, n);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The final evaluation                                                */
/* ------------------------------------------------------------------ */

/* A whole number field of the record: 0 and *out, or -1 naming it. */
static int record_long(const ar_json *j, const char *key, const char *path, long *out, ar_err *e)
{
    const ar_json *v = ar_json_get(j, key);
    if (!v || v->type != AR_JSON_NUM || !v->is_int || v->inum < 0)
        return ar_fail_kind(e, AR_ERR_FORMAT,
                            "'%s': '%s' must be a non-negative integer; remove the file to evaluate the run again",
                            path, key);
    *out = (long)v->inum;
    return 0;
}

int ar_final_eval_read(const char *run_dir, long step, long max_windows, ar_final_eval *f, ar_err *e)
{
    char path[AR_PATH_MAX + 2 * AR_SWEEP_NAME_MAX + 64];
    snprintf(path, sizeof path, "%s/" AR_FINAL_EVAL_FILE, run_dir);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, fp);
    int bad = ferror(fp) || !feof(fp);
    fclose(fp);
    if (bad)
        return ar_fail(e, "'%s': unreadable or longer than %zu bytes; remove it to evaluate the run again", path,
                       sizeof buf);
    ar_err pe;
    ar_json *j = ar_json_parse(buf, n, &pe);
    if (!j)
        return ar_fail_kind(e, AR_ERR_FORMAT, "'%s': %s; remove it to evaluate the run again", path, pe.msg);
    int rc = j->type == AR_JSON_OBJ
                 ? 0
                 : ar_fail_kind(e, AR_ERR_FORMAT, "'%s' must hold one JSON object; remove it to evaluate the run again",
                                path);
    const ar_json *loss = ar_json_get(j, "loss");
    if (rc == 0)
        rc = record_long(j, "step", path, &f->step, e);
    if (rc == 0)
        rc = record_long(j, "max_windows", path, &f->max_windows, e);
    if (rc == 0)
        rc = record_long(j, "windows", path, &f->windows, e);
    if (rc == 0)
        rc = record_long(j, "tokens", path, &f->tokens, e);
    if (rc == 0 && (!loss || loss->type != AR_JSON_NUM || !(loss->num >= 0)))
        rc = ar_fail_kind(e, AR_ERR_FORMAT,
                          "'%s': 'loss' must be a non-negative number; remove the file to evaluate the run again",
                          path);
    if (rc == 0)
        f->loss = loss->num;
    ar_json_free(j);
    if (rc != 0)
        return -1;
    return f->step == step && f->max_windows == max_windows;
}

static int fill_final(FILE *fp, void *ud)
{
    const ar_final_eval *f = ud;
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "step");
    ar_jw_int(&w, f->step);
    ar_jw_key(&w, "max_windows");
    ar_jw_int(&w, f->max_windows);
    ar_jw_key(&w, "windows");
    ar_jw_int(&w, f->windows);
    ar_jw_key(&w, "tokens");
    ar_jw_int(&w, f->tokens);
    ar_jw_key(&w, "loss");
    ar_jw_num(&w, f->loss);
    ar_jw_obj_end(&w);
    int ok = ar_jw_ok(&w);
    if (ok)
        fprintf(fp, "%s\n", w.s);
    ar_jw_free(&w);
    return ok && !ferror(fp) ? 0 : -1;
}

int ar_final_eval_run(const char *run_dir, const ar_config *cfg, int threads, ar_final_eval *f, ar_err *e)
{
    char path[AR_PATH_MAX + 2 * AR_SWEEP_NAME_MAX + 64];
    /* fp32, as `attnres eval`: the evaluation's numbers are the reference */
    const ar_backend *be = ar_backend_open(ar_device_name(cfg->train.device), 0, e);
    if (!be)
        return ar_wrap(e, "the final evaluation of '%s'", run_dir);
    be->set_threads(threads);
    snprintf(path, sizeof path, "%s/model.safetensors", run_dir);
    ar_config saved;
    ar_model *m = NULL;
    long step;
    if (ar_ckpt_load_model(path, be, 8, &saved, &m, &step, e) != 0)
        return -1;
    if (step != cfg->train.steps) {
        ar_model_free(m);
        return ar_fail(e, "'%s' is at step %ld, not at the planned %ld: no final evaluation", path, step,
                       cfg->train.steps);
    }
    ar_dataset ds;
    if (ar_dataset_open(&ds, &cfg->data, &cfg->model, e) != 0) {
        ar_model_free(m);
        return ar_wrap(e, "the final evaluation of '%s'", run_dir);
    }
    ar_eval_result r;
    int rc = ar_evaluate_data(m, &ds.eval, cfg->train.final_eval_windows, 0, &r, e);
    ar_dataset_close(&ds);
    ar_model_free(m);
    if (rc != 0)
        return ar_wrap(e, "the final evaluation of '%s'", run_dir);
    *f = (ar_final_eval){.step = step, .max_windows = cfg->train.final_eval_windows, .windows = r.windows,
                         .tokens = r.tokens, .loss = r.loss};
    snprintf(path, sizeof path, "%s/" AR_FINAL_EVAL_FILE, run_dir);
    return ar_write_atomic(path, fill_final, f, e);
}

/* ------------------------------------------------------------------ */
/* State of a run directory                                            */
/* ------------------------------------------------------------------ */

typedef enum { RUN_NEW, RUN_RESUME, RUN_DONE } run_state;

/* The first line where two YAML texts differ, for the message. */
static void first_difference(const char *a, const char *b, char *out, size_t n)
{
    while (*a && *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, n, "'%.*s' there, '%.*s' in the sweep", (int)(la > 120 ? 120 : la), a,
                     (int)(lb > 120 ? 120 : lb), b);
            for (char *p = out; *p; p++)
                if (*p == '\n')
                    *p = ' ';
            return;
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
    snprintf(out, n, "the key lists differ");
}

static int run_state_of(const ar_sweep_run *r, const char *dir, run_state *st, long *step, ar_err *e)
{
    char file[AR_PATH_MAX + 2 * AR_SWEEP_NAME_MAX + 64];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    *step = 0;
    if (access(file, F_OK) != 0) {
        *st = RUN_NEW;
        return 0;
    }
    ar_config saved;
    if (ar_ckpt_read_config(file, &saved, step, e) != 0)
        return -1;
    /* threads and device change how fast a run goes, not what it computes;
     * the final evaluation comes after the run */
    saved.train.threads = r->cfg.train.threads;
    saved.train.device = r->cfg.train.device;
    saved.train.final_eval_windows = r->cfg.train.final_eval_windows;
    char *a = ar_config_to_yaml(&saved), *b = ar_config_to_yaml(&r->cfg);
    int same = strcmp(a, b) == 0;
    char diff[512];
    if (!same)
        first_difference(a, b, diff, sizeof diff);
    free(a);
    free(b);
    if (!same)
        return ar_fail(e, "run directory '%s' holds a run with another configuration (%s); remove it or "
                          "sweep into another --out",
                       dir, diff);
    if (*step > r->cfg.train.steps)
        return ar_fail(e, "run directory '%s' is at step %ld, past the planned %ld", dir, *step, r->cfg.train.steps);
    *st = *step == r->cfg.train.steps ? RUN_DONE : RUN_RESUME;
    return 0;
}

/* ------------------------------------------------------------------ */
/* results.csv                                                         */
/* ------------------------------------------------------------------ */

typedef struct {
    int have;
    ar_sweep_compute c;
    long steps;
    double val_loss, wall_s;
    ar_final_eval fe;
} row;

typedef struct {
    const ar_sweep *s;
    const row *rows;
} table;

static int fill_results(FILE *f, void *ud)
{
    const table *t = ud;
    fprintf(f, "%s\n", AR_SWEEP_COLUMNS);
    for (int i = 0; i < t->s->nruns; i++) {
        const ar_sweep_run *r = &t->s->runs[i];
        const row *w = &t->rows[i];
        if (!w->have)
            continue;
        ar_csv_write_field(f, r->variant);
        fputc(',', f);
        ar_csv_write_field(f, r->size);
        fprintf(f, ",%ld,%ld,%.0f,%.9e,", w->c.nonembed_params, r->tokens, w->c.flops, w->c.pflops_days);
        if (isfinite(w->val_loss))
            fprintf(f, "%.6f", w->val_loss);
        else
            fprintf(f, "nan");
        fprintf(f, ",%.1f,%ld,", w->wall_s, w->steps);
        ar_csv_write_field(f, r->name);
        fprintf(f, ",%.6f,%ld,%ld,%d,%d,%d,%llu\n", w->fe.loss, w->fe.windows, w->fe.tokens, r->cfg.model.n_layer,
                r->cfg.model.d_model, r->cfg.model.n_head, (unsigned long long)r->cfg.train.seed);
    }
    return ferror(f) ? -1 : 0;
}

static int write_results(const ar_sweep *s, const row *rows, const char *out_dir, ar_err *e)
{
    char path[AR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.csv", out_dir);
    table t = {s, rows};
    return ar_write_atomic(path, fill_results, &t, e);
}

/* A finished run's row; its final evaluation must be recorded. */
static int collect(const ar_sweep_run *r, const char *dir, row *w, ar_err *e)
{
    if (ar_sweep_compute_of(r, &w->c, e) != 0 || ar_sweep_run_stats(dir, &w->wall_s, &w->val_loss, e) != 0)
        return -1;
    int have = ar_final_eval_read(dir, r->cfg.train.steps, r->cfg.train.final_eval_windows, &w->fe, e);
    if (have < 0)
        return -1;
    if (!have)
        return ar_fail(e, "run directory '%s' holds no final evaluation ('%s')", dir, AR_FINAL_EVAL_FILE);
    w->steps = r->cfg.train.steps;
    w->have = 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Training one run                                                    */
/* ------------------------------------------------------------------ */

typedef struct {
    const ar_sweep_opts *o;
    const ar_sweep_run *r;
} prog_ctx;

static void on_progress(const ar_progress *p, void *ud)
{
    prog_ctx *c = ud;
    if (c->o->progress)
        c->o->progress(c->r, p, c->o->ud);
}

static int interrupted(const ar_sweep_opts *o);

/* Trains a run (unless eval_only: it is trained already) and gives it its
 * final evaluation.  0 finished, 130 interrupted (an interrupt before the
 * final evaluation leaves it to the next invocation), 1 failed (message in
 * e). */
static int train_one(const ar_sweep_run *r, const char *dir, int resume, int eval_only, int threads,
                     const ar_sweep_opts *o, ar_err *e)
{
    ar_config cfg = r->cfg;
    cfg.train.threads = threads;
    if (!eval_only) {
        prog_ctx pc = {o, r};
        ar_train_opts to = {.out_dir = dir, .resume = resume, .progress = on_progress, .ud = &pc,
                            .interrupt = o->interrupt};
        ar_train_result res;
        if (ar_train(&cfg, &to, &res, e) != 0)
            return 1;
        if (res.interrupted)
            return 130;
    }
    if (interrupted(o))
        return 130;
    ar_final_eval f;
    return ar_final_eval_run(dir, &cfg, threads, &f, e) != 0 ? 1 : 0;
}

/* A run trained in a child process (jobs > 1). */
typedef struct {
    ar_child c;
    int run, eval_only;
} kid;

typedef struct {
    const ar_sweep_run *r;
    const char *dir;
    int resume, eval_only, threads;
    const ar_sweep_opts *o;
} kid_job;

/* The child's work: train_one's status as the exit status; the message of
 * a failure through the pipe. */
static int train_kid(void *ud, int fd)
{
    const kid_job *j = ud;
    ar_err te = {{0}};
    int st = train_one(j->r, j->dir, j->resume, j->eval_only, j->threads, j->o, &te);
    if (st == 1)
        (void)ar_write_all(fd, te.msg, strlen(te.msg));
    return st;
}

static void emit(const ar_sweep_opts *o, const ar_sweep_run *r, ar_sweep_event ev, const char *detail)
{
    if (o->event)
        o->event(r, ev, detail, o->ud);
}

static int interrupted(const ar_sweep_opts *o)
{
    return o->interrupt && *o->interrupt;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* returns early on a signal: what we want */
}

/* The detail of a finished run's event. */
static void finished_detail(const row *w, char *buf, size_t n)
{
    snprintf(buf, n, "val_loss %.4f, final_val_loss %.4f (%ld windows)", w->val_loss, w->fe.loss, w->fe.windows);
}

/* Records how run idx ended: code 0 finished (eval_only: it was trained
 * earlier and has now had its final evaluation: reused), 130 interrupted,
 * else failed with msg (the first failure goes into first_fail). */
static int settle(const ar_sweep *s, int idx, int eval_only, int code, const char *msg, const ar_sweep_opts *o,
                  row *rows, ar_sweep_result *res, ar_err *first_fail, ar_err *e)
{
    const ar_sweep_run *r = &s->runs[idx];
    char dir[AR_PATH_MAX + 2 * AR_SWEEP_NAME_MAX + 8], detail[128];
    snprintf(dir, sizeof dir, "%s/%s", o->out_dir, r->name);
    if (code == 0) {
        if (collect(r, dir, &rows[idx], e) != 0 || write_results(s, rows, o->out_dir, e) != 0)
            return -1;
        if (eval_only)
            res->skipped++;
        else
            res->trained++;
        res->finished++;
        finished_detail(&rows[idx], detail, sizeof detail);
        emit(o, r, eval_only ? AR_SWEEP_SKIPPED : AR_SWEEP_FINISHED, detail);
    } else if (code == 130) {
        res->interrupted = 1;
        emit(o, r, AR_SWEEP_INTERRUPTED, NULL);
    } else {
        if (!res->failed)
            ar_fail(first_fail, "run '%s': %s", r->name, msg);
        res->failed++;
        emit(o, r, AR_SWEEP_FAILED, msg);
    }
    return 0;
}

/* What ar_sweep_run_all keeps between its steps: the rows so far and the
 * children still running. */
typedef struct {
    const ar_sweep *s;
    const ar_sweep_opts *o;
    int jobs;
    row *rows;
    kid *kids; /* [jobs] */
    int nkids, forwarded;
    ar_sweep_result *res;
    ar_err first_fail;
} sched;

/* Starts run idx: a finished run with its final evaluation is reused; any
 * other is trained (or only finally evaluated) here when jobs is 1, else in
 * a child.  0, or -1 with e set. */
static int start_run(sched *q, int idx, ar_err *e)
{
    const ar_sweep *s = q->s;
    const ar_sweep_opts *o = q->o;
    const ar_sweep_run *r = &s->runs[idx];
    char dir[AR_PATH_MAX + 2 * AR_SWEEP_NAME_MAX + 8], detail[128];
    snprintf(dir, sizeof dir, "%s/%s", o->out_dir, r->name);
    run_state st;
    long step;
    if (run_state_of(r, dir, &st, &step, e) != 0)
        return -1;
    int eval_only = 0;
    if (st == RUN_DONE) {
        ar_final_eval fe;
        int have = ar_final_eval_read(dir, r->cfg.train.steps, r->cfg.train.final_eval_windows, &fe, e);
        if (have < 0)
            return -1;
        if (have) {
            if (collect(r, dir, &q->rows[idx], e) != 0 || write_results(s, q->rows, o->out_dir, e) != 0)
                return -1;
            q->res->skipped++;
            q->res->finished++;
            finished_detail(&q->rows[idx], detail, sizeof detail);
            emit(o, r, AR_SWEEP_SKIPPED, detail);
            return 0;
        }
        eval_only = 1; /* trained, not yet finally evaluated: a job of its own */
    } else {
        snprintf(detail, sizeof detail, "step %ld", step);
        emit(o, r, st == RUN_RESUME ? AR_SWEEP_RESUMED : AR_SWEEP_STARTED, st == RUN_RESUME ? detail : NULL);
    }
    int threads = r->cfg.train.threads;
    if (q->jobs > 1) {
        long total = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(total / q->jobs > 1 ? total / q->jobs : 1);
    }
    if (q->jobs == 1) {
        ar_err te;
        int code = train_one(r, dir, st == RUN_RESUME, eval_only, threads, o, &te);
        return settle(s, idx, eval_only, code, te.msg, o, q->rows, q->res, &q->first_fail, e);
    }
    kid_job j = {r, dir, st == RUN_RESUME, eval_only, threads, o};
    kid *k = &q->kids[q->nkids];
    if (ar_child_start(&k->c, train_kid, &j, AR_CHILD_OWN_GROUP, "the training process", e) != 0)
        return -1;
    k->eval_only = eval_only;
    k->run = idx;
    q->nkids++;
    return 0;
}

/* Waits for a child to end, forwarding an interrupt to them all once;
 * its index in q->kids, or -1 with e set. */
static int wait_kid(sched *q, ar_err *e)
{
    int k = -1;
    while (k < 0) {
        if (interrupted(q->o) && !q->forwarded) {
            for (int i = 0; i < q->nkids; i++)
                kill(q->kids[i].c.pid, SIGINT);
            q->forwarded = 1;
        }
        for (int i = 0; i < q->nkids && k < 0; i++) {
            int ended = ar_child_ended(&q->kids[i].c, e);
            if (ended < 0)
                return -1;
            if (ended)
                k = i;
        }
        if (k < 0)
            sleep_ms(100);
    }
    return k;
}

/* Takes ended child k off the list and records how its run ended; 0, or -1
 * with e set. */
static int reap_kid(sched *q, int k, ar_err *e)
{
    kid c = q->kids[k];
    q->kids[k] = q->kids[--q->nkids];
    ar_err te = {{0}};
    size_t got;
    if (ar_child_finish(&c.c, te.msg, sizeof te.msg - 1, &got, e) != 0)
        return -1;
    te.msg[got] = '\0';
    int code = WIFEXITED(c.c.status) ? WEXITSTATUS(c.c.status) : -1;
    if (code != 0 && code != 130 && !te.msg[0])
        ar_child_check(&c.c, &te);
    return settle(q->s, c.run, c.eval_only, code, te.msg, q->o, q->rows, q->res, &q->first_fail, e);
}

int ar_sweep_run_all(const ar_sweep *s, const ar_sweep_opts *o, ar_sweep_result *res, ar_err *e)
{
    memset(res, 0, sizeof *res);
    int jobs = o->jobs > 1 ? o->jobs : 1;
    if (ar_mkdir_p(o->out_dir, e) != 0)
        return -1;
    sched q = {.s = s, .o = o, .jobs = jobs, .res = res};
    q.rows = ar_xcalloc((size_t)s->nruns, sizeof *q.rows);
    q.kids = ar_xcalloc((size_t)jobs, sizeof *q.kids);
    int next = 0, rc = 0;
    for (;;) {
        /* Start runs while there is room. */
        while (q.nkids < jobs && next < s->nruns && !interrupted(o) && !res->failed) {
            int idx = next++;
            if (o->nranks > 1 && idx % o->nranks != o->rank)
                continue; /* another rank's */
            if (start_run(&q, idx, e) != 0) {
                rc = -1;
                goto out;
            }
        }
        if (q.nkids == 0)
            break;
        int k = wait_kid(&q, e);
        if (k < 0 || reap_kid(&q, k, e) != 0) {
            rc = -1;
            goto out;
        }
    }
    if (interrupted(o))
        res->interrupted = 1;
    if (write_results(s, q.rows, o->out_dir, e) != 0)
        rc = -1;
    else if (res->failed)
        rc = ar_fail(e, "%s", q.first_fail.msg);
out:
    /* Only reached early on an error of the parent: stop the children. */
    for (int k = 0; k < q.nkids; k++)
        ar_child_stop(&q.kids[k].c, SIGINT);
    free(q.kids);
    free(q.rows);
    return rc;
}

int ar_sweep_run_ranks(const ar_sweep *s, const ar_sweep_opts *o, ar_comm *c, ar_sweep_result *res, ar_err *e)
{
    if (!c || c->size == 1)
        return ar_sweep_run_all(s, o, res, e);
    ar_sweep_opts mine = *o;
    mine.rank = c->rank;
    mine.nranks = c->size;
    int rc = ar_sweep_run_all(s, &mine, res, e);
    if (ar_comm_agree(c, rc, e) != 0)
        return -1;
    double counts[4] = {res->finished, res->skipped, res->trained, res->interrupted};
    double *all = ar_xcalloc(4 * (size_t)c->size, sizeof(double));
    rc = c->ops->allgather(c, counts, all, sizeof counts, e);
    memset(res, 0, sizeof *res);
    for (int r = 0; rc == 0 && r < c->size; r++) {
        res->finished += (int)all[4 * r];
        res->skipped += (int)all[4 * r + 1];
        res->trained += (int)all[4 * r + 2];
        res->interrupted |= all[4 * r + 3] > 0;
    }
    free(all);
    /* every run has finished: rank 0 reads them all back into results.csv,
     * quietly (no events: each was reported by the rank that trained it) */
    if (rc == 0 && c->rank == 0 && !res->interrupted) {
        ar_sweep_opts collect = {.out_dir = o->out_dir, .jobs = 1};
        ar_sweep_result all_runs;
        rc = ar_sweep_run_all(s, &collect, &all_runs, e);
    }
    return ar_comm_agree(c, rc, e);
}
