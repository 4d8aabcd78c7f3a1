/* A pipeline's measured communication, bubble, step time and memory
 * (pipe_bench.h). */
#include "pipe_bench.h"

#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "../lib/backend.h"
#include "../lib/model.h"
#include "bench.h"
#include "../parallel/pipe.h"
#include "../parallel/pipe_plan.h"

const ar_pipe_bench_variant_def ar_pipe_bench_variants[] = {
    {"baseline", "baseline", AR_RES_BASELINE, 0},
    {"block2", "block S=2", AR_RES_BLOCK, 2},
    {"block4", "block S=4", AR_RES_BLOCK, 4},
    {"block8", "block S=8", AR_RES_BLOCK, 8},
    {"full", "full", AR_RES_FULL, 0},
};
const int ar_pipe_bench_n_variants = (int)(sizeof ar_pipe_bench_variants / sizeof *ar_pipe_bench_variants);

const ar_pipe_bench_variant_def *ar_pipe_bench_find_variant(const char *name)
{
    for (int i = 0; i < ar_pipe_bench_n_variants; i++)
        if (strcmp(ar_pipe_bench_variants[i].name, name) == 0)
            return &ar_pipe_bench_variants[i];
    return NULL;
}

void ar_pipe_bench_apply_variant(ar_config *c, const ar_pipe_bench_variant_def *v, int cache)
{
    int L = ar_cfg_sublayers(&c->model);
    ar_residual_cfg *r = &c->model.residual;
    ar_residual_cfg_of_kind(r, v->kind);
    if (v->kind == AR_RES_BLOCK)
        r->block_size = v->block_size > L ? L : v->block_size;
    c->parallel.cache_blocks = cache != 0;
}

int ar_pipe_bench_fit_micro(int P, int V, int want)
{
    int M = want > P ? want : P;
    if (V > 1 && M % P)
        M += P - M % P;
    return M;
}

int ar_pipe_bench_reset_peak(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

/* splitmix64 */
static uint64_t mix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t seed;
    int n, vocab; /* B T ids a micro-batch */
} sampler;

/* Micro-batch a: ids drawn from a generator seeded by (seed, a), the same
 * on every rank and at every step. */
static void sample(void *ud, int a, int32_t *in, int32_t *tg)
{
    const sampler *s = ud;
    uint64_t x = s->seed * 0x100000001B3ull + (uint64_t)a;
    for (int i = 0; i < s->n; i++) {
        uint64_t z = mix64(&x);
        in[i] = (int32_t)(z % (uint64_t)s->vocab);
        tg[i] = (int32_t)((z >> 32) % (uint64_t)s->vocab);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The plan's numbers, which need no run. */
static int fill_plan(ar_pipe_bench_result *r, const ar_pipe_plan *pl, ar_err *e)
{
    r->P = pl->P;
    r->V = pl->V;
    r->C = pl->C;
    r->M = pl->M;
    r->A = pl->M * r->D;
    r->L = pl->L;
    r->S = pl->S;
    r->baseline = pl->baseline;
    r->cache = pl->cache;
    r->rows_per_mb = ar_pipe_rows_per_mb(pl);
    r->eq7 = ar_pipe_eq7(pl);
    r->eq8 = ar_pipe_eq8(pl);
    r->pred_bytes = (double)r->rows_per_mb * r->A * r->row_bytes;
    return ar_pipe_simulate(pl, 1.0, 2.0, &r->sim_makespan, &r->sim_bubble, NULL, e);
}

/* This rank's stage of the model on the CPU backend, its pipeline and the
 * plan's numbers into r; this rank's 0 or -1 (e set), for the ranks to
 * agree on.  *m and *pp are the caller's to free, also after a failure. */
static int setup(ar_comm *world, const ar_config *cfg, ar_pipe_bench_result *r, ar_model **m, ar_pipe **pp,
                 ar_err *e)
{
    const ar_backend *be = ar_backend_open("cpu", 0, e);
    if (!be)
        return -1;
    be->set_threads(cfg->train.threads);
    r->threads = omp_get_max_threads();
    unsigned char *runs = ar_xcalloc((size_t)ar_cfg_sublayers(&cfg->model) + 2, 1);
    ar_model_split sp;
    ar_pipe_model_split(cfg, world->rank, runs, &sp); /* this stage's activations only */
    ar_model_cfg mc = ar_cfg_training_model(cfg);
    int rc = ar_model_create_split(m, &mc, be, cfg->train.batch_size, &sp, e);
    free(runs);
    if (rc != 0)
        return rc;
    ar_model_init(*m, cfg->train.seed);
    if (!(*pp = ar_pipe_create(world, cfg, *m, e)))
        return -1;
    return fill_plan(r, ar_pipe_plan_of(*pp), e);
}

/* Runs the warm-up and timed steps: the bytes moved (and whether every
 * step moved the same) into r, the timed steps' times (the slowest rank's)
 * and bubbles into step_ms and bubble, the last step's losses into loss;
 * slot: W doubles of scratch.  0, or -1 with e set on every rank. */
static int run_steps(ar_comm *world, ar_pipe *pp, const ar_config *cfg, const ar_pipe_bench_opts *o,
                     ar_pipe_bench_result *r, double *loss, double *slot, double *step_ms, double *bubble,
                     ar_err *e)
{
    int W = world->size, total = o->warmup + o->steps;
    sampler smp = {.seed = (uint64_t)cfg->train.seed, .n = r->B * r->T, .vocab = cfg->model.vocab};
    r->bytes_steady = 1;
    double f0 = NAN, b0 = NAN;
    for (int s = 0; s < total; s++) {
        int rc = ar_pipe_step(pp, sample, &smp, loss, e);
        if (ar_comm_agree(world, rc, e) != 0)
            return -1;
        ar_pipe_stats st;
        if (ar_pipe_stats_sum(pp, &st, e) != 0)
            return -1; /* a collective failed: MPI's error, on every rank */
        /* the step took as long as its slowest rank */
        memset(slot, 0, (size_t)W * sizeof *slot);
        slot[world->rank] = st.step_s;
        if (world->ops->sum_doubles(world, slot, (size_t)W, e) != 0)
            return -1;
        double slowest = 0;
        for (int k = 0; k < W; k++)
            slowest = slot[k] > slowest ? slot[k] : slowest;
        if (s == 0) {
            f0 = st.fwd_bytes;
            b0 = st.bwd_bytes;
        } else if (st.fwd_bytes != f0 || st.bwd_bytes != b0) {
            r->bytes_steady = 0;
        }
        r->fwd_bytes = st.fwd_bytes;
        r->bwd_bytes = st.bwd_bytes;
        if (s >= o->warmup) {
            step_ms[s - o->warmup] = 1e3 * slowest;
            bubble[s - o->warmup] = st.bubble;
        }
    }
    return 0;
}

/* The mean loss of the step's micro-batches, and the step times' and
 * bubbles' medians (step_ms and bubble are sorted here) and range. */
static void summarise(ar_pipe_bench_result *r, const double *loss, double *step_ms, double *bubble, int steps)
{
    r->loss = 0;
    for (int a = 0; a < r->A; a++)
        r->loss += loss[a] / r->A;
    r->step_ms_min = r->step_ms_max = step_ms[0];
    for (int k = 0; k < steps; k++) {
        r->step_ms_min = step_ms[k] < r->step_ms_min ? step_ms[k] : r->step_ms_min;
        r->step_ms_max = step_ms[k] > r->step_ms_max ? step_ms[k] : r->step_ms_max;
    }
    r->step_ms = median(step_ms, steps);
    r->bubble = median(bubble, steps);
}

/* Every rank's peak into r, and whether every rank could reset it (reset:
 * this rank's); slot: W + 1 doubles of scratch.  0, or -1 with e set. */
static int gather_peaks(ar_comm *world, ar_pipe_bench_result *r, int reset, double *slot, ar_err *e)
{
    int W = world->size;
    long long peak = ar_bench_peak_rss();
    memset(slot, 0, ((size_t)W + 1) * sizeof *slot);
    slot[world->rank] = peak >= 0 ? (double)peak / (1024.0 * 1024.0) : -1;
    slot[W] = reset ? 0 : 1;
    if (world->ops->sum_doubles(world, slot, (size_t)W + 1, e) != 0)
        return -1;
    memcpy(r->rank_peak_mib, slot, (size_t)W * sizeof *slot);
    r->peak_reset = slot[W] == 0;
    return 0;
}

int ar_pipe_bench_variant(ar_comm *world, const ar_config *cfg, const ar_pipe_bench_opts *o,
                          ar_pipe_bench_result *r, ar_err *e)
{
    memset(r, 0, sizeof *r);
    int W = world->size, steps = o->steps;
    r->W = W;
    r->D = cfg->parallel.pipeline > 0 ? W / cfg->parallel.pipeline : W;
    r->B = cfg->train.batch_size;
    r->T = cfg->model.seq_len;
    r->d = cfg->model.d_model;
    r->row_bytes = 4.0 * r->B * r->T * r->d;
    r->fwd_bytes = r->bwd_bytes = r->bubble = r->step_ms = r->loss = NAN;
    r->rank_peak_mib = ar_xcalloc((size_t)W, sizeof(double));
    if (steps < 1 || o->warmup < 0)
        return ar_fail(e, "a pipeline bench needs steps >= 1 and warmup >= 0 (got %d, %d)", steps, o->warmup);

    /* the peak of this variant alone: what the last one freed goes back
     * to the system first, then the high-water mark drops to the present */
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    int reset = ar_pipe_bench_reset_peak();

    ar_model *m = NULL;
    ar_pipe *pp = NULL;
    double *loss = ar_xcalloc((size_t)cfg->train.grad_accum + 1, sizeof(double));
    double *slot = ar_xcalloc((size_t)W + 1, sizeof(double));
    double *step_ms = ar_xcalloc((size_t)steps, sizeof(double));
    double *bubble = ar_xcalloc((size_t)steps, sizeof(double));
    int ret = -1;
    if (ar_comm_agree(world, setup(world, cfg, r, &m, &pp, e), e) != 0)
        goto out;
    if (run_steps(world, pp, cfg, o, r, loss, slot, step_ms, bubble, e) != 0)
        goto out;
    summarise(r, loss, step_ms, bubble, steps);
    if (gather_peaks(world, r, reset, slot, e) != 0)
        goto out;
    ret = 0;
out:
    ar_pipe_free(pp);
    ar_model_free(m);
    free(loss);
    free(slot);
    free(step_ms);
    free(bubble);
    return ret;
}

void ar_pipe_bench_result_free(ar_pipe_bench_result *r)
{
    free(r->rank_peak_mib);
    r->rank_peak_mib = NULL;
}
