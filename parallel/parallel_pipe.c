/* Pipeline parallelism behind parallel.h: every rank a stage of a replica
 * (pipe.h), updating its own chunks' parameters alone. */
#include "parallel.h"

#include <stdlib.h>
#include <sys/resource.h>

#include "pipe.h"

typedef struct {
    ar_pipe *pp;
    int nchunks; /* C = P V: a whole model for evaluation is split as the stages' */
} pipe_par;

static ar_pipe *pipe_of(const ar_parallel *p) { return ((pipe_par *)p->impl)->pp; }

static int pipe_step(ar_parallel *p, ar_parallel_sample_fn sample, void *ud, double *loss, ar_err *e)
{
    return ar_pipe_step(pipe_of(p), sample, ud, loss, e);
}

static int pipe_grad_norm(ar_parallel *p, double *norm, ar_err *e) { return ar_pipe_grad_norm(pipe_of(p), norm, e); }

static void pipe_opt_ranges(const ar_parallel *p, int *n, const size_t **lo, const size_t **hi)
{
    ar_pipe_opt_ranges(pipe_of(p), n, lo, hi);
}

/* a stage needs only its own chunks' parameters for the next step */
static int pipe_updated(ar_parallel *p, ar_err *e)
{
    (void)p;
    (void)e;
    return 0;
}

/* a stage has updated (and checked) its own chunks alone */
static int pipe_agree(ar_parallel *p, int rc, ar_err *e) { return ar_comm_agree(p->comm, rc, e); }

/* a stage holds its own chunks' parameters and gradients */
static int pipe_gather_model(ar_parallel *p, ar_err *e)
{
    if (ar_pipe_gather(pipe_of(p), p->m->grads, e) != 0)
        return -1;
    return ar_pipe_gather(pipe_of(p), p->m->params, e);
}

/* A stage's model keeps activations for its own sublayers alone: the
 * evaluation runs on a whole copy sharing its parameters. */
static int pipe_eval_model(ar_parallel *p, ar_model **em, ar_err *e)
{
    const ar_model *m = p->m;
    ar_model_split sp = {.nchunks = ((pipe_par *)p->impl)->nchunks, .share = p->m};
    return ar_model_create_split(em, &m->cfg, m->be, m->maxB, &sp, e);
}

static int pipe_full_state(ar_parallel *p, const ar_adamw *o, float *m, float *v, ar_err *e)
{
    if (ar_pipe_gather(pipe_of(p), p->m->params, e) != 0)
        return -1;
    return ar_pipe_full_moments(pipe_of(p), o, m, v, e);
}

static int pipe_measure(ar_parallel *p, ar_err *e)
{
    (void)p;
    (void)e;
    return 0;
}

static void write_list(ar_jw *w, const char *key, const double *x, int n)
{
    ar_jw_key(w, key);
    ar_jw_arr_begin(w);
    for (int i = 0; i < n; i++)
        ar_jw_num(w, x[i]);
    ar_jw_arr_end(w);
}

/* The layout, the rows' bytes moved (the forward's and the gradients';
 * over the world, and per token), the schedule's idle fraction and every
 * rank's peak resident memory. */
static int pipe_metrics(ar_parallel *p, ar_jw *w, long tok_per_step, ar_err *e)
{
    ar_comm *c = p->comm;
    ar_pipe_stats st;
    const ar_pipe_plan *pl = ar_pipe_plan_of(pipe_of(p));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double *rss = ar_xcalloc((size_t)c->size, sizeof(double));
    rss[c->rank] = (double)ru.ru_maxrss / 1024.0; /* KiB -> MiB */
    int rc = ar_pipe_stats_sum(pipe_of(p), &st, e);
    if (rc == 0)
        rc = c->ops->sum_doubles(c, rss, (size_t)c->size, e);
    if (rc == 0) {
        ar_jw_key(w, "ranks");
        ar_jw_int(w, c->size);
        ar_jw_key(w, "pipeline");
        ar_jw_int(w, pl->P);
        ar_jw_key(w, "virtual");
        ar_jw_int(w, pl->V);
        ar_jw_key(w, "cache_blocks");
        ar_jw_bool(w, pl->cache);
        ar_jw_key(w, "pipe_fwd_bytes");
        ar_jw_num(w, st.fwd_bytes);
        ar_jw_key(w, "pipe_bwd_bytes");
        ar_jw_num(w, st.bwd_bytes);
        ar_jw_key(w, "pipe_bytes_per_token");
        ar_jw_num(w, (st.fwd_bytes + st.bwd_bytes) / (double)tok_per_step);
        ar_jw_key(w, "pipe_bubble");
        ar_jw_num(w, st.bubble);
        write_list(w, "rank_peak_rss_mib", rss, c->size);
    }
    free(rss);
    return rc;
}

static void pipe_free(ar_parallel *p)
{
    ar_pipe_free(pipe_of(p));
    free(p->impl);
    free(p);
}

static const ar_parallel_ops pipe_ops = {
    .name = "pipeline",
    .step = pipe_step,
    .grad_norm = pipe_grad_norm,
    .opt_ranges = pipe_opt_ranges,
    .updated = pipe_updated,
    .agree = pipe_agree,
    .gather_model = pipe_gather_model,
    .eval_model = pipe_eval_model,
    .full_state = pipe_full_state,
    .measure = pipe_measure,
    .metrics = pipe_metrics,
    .free = pipe_free,
};

ar_parallel *ar_parallel_pipe(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e)
{
    ar_pipe *pp = ar_pipe_create(c, cfg, m, e);
    if (!pp)
        return NULL;
    pipe_par *d = ar_xcalloc(1, sizeof *d);
    *d = (pipe_par){.pp = pp, .nchunks = ar_pipe_nchunks(cfg)};
    ar_parallel *p = ar_xcalloc(1, sizeof *p);
    *p = (ar_parallel){.ops = &pipe_ops, .comm = c, .m = m, .whole_opt = 0, .impl = d};
    return p;
}
