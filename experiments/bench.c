#include "bench.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../core/blocks.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "ablate.h"
#include "../core/clock.h"

const ar_bench_variant_def ar_bench_variants[] = {
    {"baseline", "baseline", AR_RES_BASELINE, 0, 0, 0},
    {"block8", "block N=8", AR_RES_BLOCK, 8, 0, 0},
    {"block4", "block S=4", AR_RES_BLOCK, 0, 4, 0},
    {"full", "full", AR_RES_FULL, 0, 0, 0},
    /* attnres ablate's others (baseline and full are the same as above) */
    {"block", "block", AR_RES_BLOCK, 0, 0, 1},
    {"sigmoid", "sigmoid", AR_RES_FULL, 0, 0, 1},
    {"no-key-norm", "no-key-norm", AR_RES_FULL, 0, 0, 1},
    {"input-query", "input-query", AR_RES_FULL, 0, 0, 1},
    {"static", "static", AR_RES_STATIC, 0, 0, 1},
    {"swa", "swa", AR_RES_SWA, 0, 0, 1},
    {"heads", "heads", AR_RES_BLOCK, 0, 0, 1},
    {"block-no-key-norm", "block-no-key-norm", AR_RES_BLOCK, 0, 0, 1},
    {"mhc", "mhc", AR_RES_MHC, 0, 0, 1},
    {"denseformer", "denseformer", AR_RES_DENSEFORMER, 0, 0, 1},
    {"rescaled", "rescaled", AR_RES_RESCALED, 0, 0, 1},
};
const int ar_bench_n_variants = (int)(sizeof ar_bench_variants / sizeof *ar_bench_variants);
const int ar_bench_n_default = 4;

const ar_bench_variant_def *ar_bench_find_variant(const char *name)
{
    for (int i = 0; i < ar_bench_n_variants; i++)
        if (strcmp(ar_bench_variants[i].name, name) == 0)
            return &ar_bench_variants[i];
    return NULL;
}

void ar_bench_apply_variant(ar_config *c, const ar_bench_variant_def *v)
{
    if (v->ablate) {
        ar_model_cfg base = c->model;
        ar_err e = {{0}};
        if (ar_ablate_apply(&c->model, &base, v->name, &e) != 0)
            abort(); /* the names above are ablate's own (tests/test_bench.c) */
        return;
    }
    int L = ar_cfg_sublayers(&c->model);
    ar_residual_cfg *r = &c->model.residual;
    ar_residual_cfg_of_kind(r, v->kind);
    if (v->kind == AR_RES_BLOCK) {
        r->num_blocks = v->num_blocks > L ? L : v->num_blocks;
        r->block_size = v->block_size > L ? L : v->block_size;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ar_bench_summarize(double *v, int n, double *med, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *lo = v[0];
    *hi = v[n - 1];
}

/* One model under test: its optimizer and a fixed batch of pseudo-random
 * ids (the same for every variant of a config). */
typedef struct {
    ar_model *m;
    ar_adamw opt;
    const ar_train_cfg *tc;
    int32_t *in, *tg;
    int B;
    double loss;
} bench_ctx;

static int ctx_open(bench_ctx *c, const ar_config *cfg, const ar_backend *be, ar_err *e)
{
    memset(c, 0, sizeof *c);
    c->B = cfg->train.batch_size;
    c->tc = &cfg->train;
    ar_model_cfg mc = ar_cfg_training_model(cfg);
    if (ar_model_create(&c->m, &mc, be, c->B, e) != 0)
        return -1;
    ar_model_init(c->m, cfg->train.seed);
    ar_adamw_init(&c->opt, c->m);
    size_t N = (size_t)c->B * cfg->model.seq_len;
    c->in = ar_xmalloc(N * sizeof *c->in);
    c->tg = ar_xmalloc(N * sizeof *c->tg);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ cfg->train.seed;
    for (size_t i = 0; i < N; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c->in[i] = (int32_t)(x % (uint64_t)cfg->model.vocab);
        c->tg[i] = (int32_t)((x >> 32) % (uint64_t)cfg->model.vocab);
    }
    return 0;
}

static void ctx_close(bench_ctx *c)
{
    free(c->in);
    free(c->tg);
    ar_adamw_free(&c->opt);
    ar_model_free(c->m);
}

/* A training step as run/train.c runs one on one process: the loss, the
 * norm, the clipping and the update's go-ahead stay on the device, read
 * back once after the update. */
static void train_step(bench_ctx *c)
{
    ar_model_zero_grad(c->m);
    ar_model_set_loss_slot(c->m, 0);
    ar_model_loss_on_device(c->m, 1);
    ar_model_forward_backward(c->m, c->in, c->tg, c->B, 1.0f / (float)(c->B * c->m->T), NULL);
    ar_model_loss_on_device(c->m, 0);
    int nc;
    const double *parts = ar_model_loss_parts(c->m, &nc);
    ar_step_check_device(&c->opt, c->m, c->tc, parts, 1, nc);
    ar_adamw_update(&c->opt, c->m, c->tc, c->tc->lr);
    ar_step_rec r;
    ar_adamw_read(&c->opt, &r);
    c->loss = r.loss;
}

/* The forward with its loss: the output layer is part of inference's cost
 * (a forward without targets stops at the final norm since the head is
 * computed in chunks, lib/model.h). */
static void infer_step(bench_ctx *c) { ar_model_forward_unread(c->m, c->in, c->tg, c->B, NULL); }

/* tok/s of `steps` timed calls of step. */
static double time_steps(bench_ctx *c, void (*step)(bench_ctx *), int steps)
{
    const ar_backend *be = c->m->be;
    be->sync();
    double t0 = ar_now_s();
    for (int s = 0; s < steps; s++)
        step(c);
    be->sync();
    double dt = ar_now_s() - t0;
    return (double)c->B * c->m->T * steps / (dt > 1e-9 ? dt : 1e-9);
}

/* Checks the schedule, opens the backend (o->be, else cfg's train.device
 * and train.precision) and sets the threads; returns it or NULL. */
static const ar_backend *bench_backend(const ar_bench_opts *o, const ar_config *cfg, ar_err *e)
{
    if (o->steps < 1 || o->repeat < 1 || o->warmup < 0) {
        ar_fail(e, "bench needs steps >= 1, repeat >= 1 and warmup >= 0 (got %d, %d, %d)", o->steps,
                o->repeat, o->warmup);
        return NULL;
    }
    const ar_backend *be = o->be;
    if (!be && !(be = ar_backend_open(ar_device_name(cfg->train.device), cfg->train.precision == AR_PREC_BF16, e)))
        return NULL;
    if (o->threads >= 0)
        be->set_threads(o->threads);
    return be;
}

int ar_bench_variant(const ar_config *cfg, const ar_bench_opts *o, ar_bench_result *r, ar_err *e)
{
    memset(r, 0, sizeof *r);
    const ar_backend *be = bench_backend(o, cfg, e);
    bench_ctx c;
    if (!be || ctx_open(&c, cfg, be, e) != 0)
        return -1;
    ar_model *m = c.m;
    r->batch = c.B;
    r->seq_len = m->T;
    r->threads = omp_get_max_threads();
    for (int i = 0; i < m->pt.n; i++)
        r->params += (long)m->pt.p[i].numel;
    r->nonembed_params = ar_model_nonembed_params(m);
    r->flops_per_token = ar_model_flops_per_token(m);

    double *tps = ar_xmalloc((size_t)o->repeat * sizeof *tps);
    for (int pass = 0; pass < 2; pass++) {
        void (*step)(bench_ctx *) = pass == 0 ? train_step : infer_step;
        for (int s = 0; s < o->warmup; s++)
            step(&c);
        for (int k = 0; k < o->repeat; k++)
            tps[k] = time_steps(&c, step, o->steps);
        if (pass == 0)
            ar_bench_summarize(tps, o->repeat, &r->train_tok_per_s, &r->train_tok_per_s_min,
                               &r->train_tok_per_s_max);
        else
            ar_bench_summarize(tps, o->repeat, &r->infer_tok_per_s, &r->infer_tok_per_s_min,
                               &r->infer_tok_per_s_max);
    }
    r->train_step_ms = 1e3 * (double)c.B * m->T / r->train_tok_per_s;
    r->gflops = r->train_tok_per_s * r->flops_per_token / 1e9;
    r->loss = c.loss;
    r->peak_rss_bytes = ar_bench_peak_rss();
    size_t held = be->mem_peak();
    r->peak_device_bytes = held ? (long long)held : -1;
    snprintf(r->device, sizeof r->device, "%s", be->device_name());
    r->peak_flops = be->peak_bf16_flops();
    free(tps);
    ctx_close(&c);
    return 0;
}

static void add_tally(ar_op_tally *sum, const ar_op_tally *t)
{
    for (int op = 0; op < AR_OP_COUNT; op++) {
        sum->seconds[op] += t->seconds[op];
        sum->flops[op] += t->flops[op];
        sum->calls[op] += t->calls[op];
    }
    sum->wall += t->wall;
    sum->steps += t->steps;
}

int ar_bench_paired(const ar_config *cfgs, int nv, const ar_bench_opts *o, double *train,
                    double *infer, double *train_mm, double *infer_mm, ar_op_tally *ops, ar_err *e)
{
    const ar_backend *be = bench_backend(o, &cfgs[0], e);
    if (!be)
        return -1;
    /* every op timed (experiments/op_timer.h): on the CPU in the paired
     * rounds themselves (a clock read costs nothing there); on a device,
     * whose timed ops wait for it, in rounds of their own after them */
    int device = be != ar_backend_cpu();
    const ar_backend *tb = ops || !device ? ar_op_timer(be) : NULL;
    if (ops)
        memset(ops, 0, (size_t)2 * nv * sizeof *ops);
    bench_ctx *c = ar_xcalloc((size_t)nv, sizeof *c);
    int rc = 0, made = 0;
    for (; made < nv && rc == 0; made++)
        if (ctx_open(&c[made], &cfgs[made], tb ? tb : be, e) != 0)
            rc = -1;
    if (rc != 0)
        made--; /* the failed one holds nothing */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        void (*step)(bench_ctx *) = pass == 0 ? train_step : infer_step;
        double *out = pass == 0 ? train : infer, *mm = pass == 0 ? train_mm : infer_mm;
        for (int v = 0; v < nv; v++)
            for (int s = 0; s < o->warmup; s++)
                step(&c[v]);
        /* odd rounds run the variants in reverse (A B C, C B A, ...): a
         * steady drift of the machine's speed then favours none of them */
        for (int k = 0; k < o->repeat; k++)
            for (int q = 0; q < nv; q++) {
                int v = k % 2 ? nv - 1 - q : q;
                size_t at = (size_t)v * o->repeat + k;
                ar_op_tally sample;
                memset(&sample, 0, sizeof sample);
                ar_op_timer_into(device ? NULL : &sample);
                out[at] = time_steps(&c[v], step, o->steps);
                ar_op_timer_into(NULL);
                /* the sample's seconds are its tokens over its tok/s */
                double mm_s = sample.seconds[AR_OP_matmul_fwd] + sample.seconds[AR_OP_matmul_bwd];
                if (mm)
                    mm[at] = device ? NAN : mm_s * out[at] / ((double)c[v].B * c[v].m->T * o->steps);
                if (ops && !device)
                    add_tally(&ops[2 * v + pass], &sample);
            }
        /* a device's op times: each variant's steps once more, every op
         * waited for (op_timer.h) */
        for (int v = 0; ops && device && v < nv; v++) {
            ar_op_tally sample;
            memset(&sample, 0, sizeof sample);
            ar_op_timer_into(&sample);
            double tps = time_steps(&c[v], step, o->steps);
            ar_op_timer_into(NULL);
            sample.steps = o->steps;
            sample.wall = (double)c[v].B * c[v].m->T * o->steps / tps;
            add_tally(&ops[2 * v + pass], &sample);
        }
    }
    for (int v = 0; v < made; v++)
        ctx_close(&c[v]);
    free(c);
    return rc;
}

double ar_bench_overhead_outside_mm(double v_tok_per_s, double v_frac, double b_tok_per_s,
                                    double b_frac)
{
    /* the ratio first: the baseline against itself is then exactly 0 */
    return 100.0 * ((1.0 - v_frac) - (1.0 - b_frac) * (v_tok_per_s / b_tok_per_s));
}

double ar_bench_extra_ms_outside_mm(double v_tok_per_s, double v_frac, double b_tok_per_s, double b_frac,
                                    double tokens_per_step)
{
    /* the percentage of the variant's step, t_v = 1 / v_tok_per_s a token */
    return ar_bench_overhead_outside_mm(v_tok_per_s, v_frac, b_tok_per_s, b_frac) * 10.0 * tokens_per_step /
           v_tok_per_s;
}

double ar_bench_mfu(const ar_bench_result *r, double peak)
{
    return peak > 0 ? r->train_tok_per_s * r->flops_per_token / peak : NAN;
}

double ar_bench_sgemm_gflops(int n, int reps)
{
    size_t nn = (size_t)n * n;
    float *a = ar_xmalloc(nn * sizeof *a), *b = ar_xmalloc(nn * sizeof *b);
    float *c = ar_xcalloc(nn, sizeof *c);
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = ar_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double dt = ar_now_s() - t;
        double g = 2.0 * n * n * (double)n / (dt > 1e-9 ? dt : 1e-9) / 1e9;
        best = g > best ? g : best;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

long long ar_bench_peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        long long kb = -1;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
                break;
        fclose(f);
        if (kb >= 0)
            return kb * 1024;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0)
        return (long long)ru.ru_maxrss * 1024;
    return -1;
}

int ar_bench_num_blocks_effective(const ar_model_cfg *m)
{
    if (m->residual.kind == AR_RES_BASELINE)
        return 0;
    ar_blocks b; /* ceil(L/S) for block size S; the list's length for block_sizes */
    ar_blocks_of_cfg(&b, m);
    int nb = b.nb;
    ar_blocks_free(&b);
    return nb;
}

double ar_bench_predicted_extra_floats(const ar_model_cfg *m, int batch)
{
    ar_res_kind k = m->residual.kind;
    if (k == AR_RES_SWA || k == AR_RES_MHC || k == AR_RES_DENSEFORMER)
        return NAN; /* no stored-summary formula of this kind */
    return (double)ar_bench_num_blocks_effective(m) * batch * m->seq_len * m->d_model;
}
