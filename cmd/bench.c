/* attnres bench: training and inference throughput, GFLOP/s against the
 * sgemm ceiling (cpu) or model FLOPs utilisation against the device's bf16
 * peak (cuda), and peak memory of baseline and AttnRes variants of one
 * config.  Each variant runs in a forked child (so its peak RSS is its own)
 * that sends its numbers back through a pipe; the parent allocates no model
 * and runs no compute, so the children start from a clean process.  With
 * --pipeline it measures a pipeline instead, under mpirun
 * (cmd/bench_pipeline.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../formats/json.h"
#include "../experiments/bench.h"
#include "../experiments/child.h"
#include "../lib/backend.h"
#include "../run/machine.h"
#include "bench_ops.h"
#include "cmds.h"
#include "options.h"

static const char *usage = "attnres bench [CONFIG] [--set KEY=VALUE]... [--steps N] [--warmup N] [--repeat R] "
                           "[--threads N] [--variants LIST] [--device cpu|cuda] [--precision fp32|bf16] "
                           "[--peak-tflops X] [--ops] [--pipeline P [--virtual V] [--micro-batches M]] [--json]";

#define MIB (1024.0 * 1024.0)
#define AR_BENCH_MAX_VARIANTS 16

/* What a child sends back. */
typedef struct {
    int ok;
    ar_bench_result r;
    double ceiling; /* sgemm GFLOP/s in the child, after the variant (cpu; 0 on cuda) */
    double fma_peak; /* the FMA peak's GFLOP/s in the child, after the ceiling (cpu; 0 on cuda) */
    const char *fma_isa; /* a string constant of experiments/fma_peak.c, the same in every process */
    char msg[sizeof(ar_err)];
} report;

typedef struct {
    const ar_bench_variant_def *def;
    ar_config cfg; /* the config with the variant's residual */
    report rep;
    double train_ovh, infer_ovh; /* percent, median over paired rounds; NaN without a baseline */
    double train_nm, infer_nm;   /* the same outside the matrix products (cpu only, else NaN) */
    double train_nm_ms, infer_nm_ms; /* that difference in ms a step (cpu only, else NaN) */
    bench_ops_variant ops;       /* every op's time: over the timed rounds (cpu), in steps of their own (a device) */
} variant_run;

static void valid_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < ar_bench_n_variants && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", ar_bench_variants[i].name);
    if (k < n)
        snprintf(buf + k, n - k, ", or all");
}

/* "baseline,full" -> sel[i] = 1 for the named variants. */
static int parse_variants(const char *list, int *sel)
{
    char names[512];
    valid_names(names, sizeof names);
    memset(sel, 0, (size_t)ar_bench_n_variants * sizeof *sel);
    if (!strcmp(list, "all")) {
        for (int i = 0; i < ar_bench_n_variants; i++)
            sel[i] = 1;
        return 0;
    }
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        char name[64];
        if (len == 0 || len >= sizeof name) {
            cli_error("'--variants' expects a comma-separated list of %s, got '%s'", names, list);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = 0;
        const ar_bench_variant_def *d = ar_bench_find_variant(name);
        if (!d) {
            cli_error("unknown variant '%s' in '--variants' (valid: %s)", name, names);
            return -1;
        }
        int i = (int)(d - ar_bench_variants);
        if (sel[i]) {
            cli_error("variant '%s' is named twice in '--variants'", name);
            return -1;
        }
        sel[i] = 1;
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

/* Runs work(ud, buf) in a child process (experiments/child.h), which fills the
 * n bytes of buf, a report first; what names the process in errors. */
static int run_child(void (*work)(void *ud, void *buf), void *ud, void *buf, size_t n, const char *what,
                     ar_err *e)
{
    if (ar_child_run(work, ud, buf, n, what, e) != 0)
        return -1;
    const report *rep = buf;
    if (!rep->ok)
        return ar_fail(e, "%s: %s", what, rep->msg);
    return 0;
}

typedef struct {
    const variant_run *v;
    const ar_bench_opts *o;
} variant_job;

/* A variant's process: its numbers (peak memory), then the sgemm ceiling. */
static void variant_work(void *ud, void *buf)
{
    const variant_job *j = ud;
    report *rep = buf;
    ar_err e = {{0}};
    if (ar_bench_variant(&j->v->cfg, j->o, &rep->r, &e) == 0) {
        /* the sgemm ceiling is the CPU's; a GPU's is its bf16 peak (MFU) */
        if (j->v->cfg.train.device == AR_DEVICE_CPU) {
            rep->ceiling = ar_bench_sgemm_gflops(AR_BENCH_CEILING_N, AR_BENCH_CEILING_REPS);
            rep->fma_peak = ar_bench_fma_peak_gflops(AR_BENCH_FMA_REPS, &rep->fma_isa);
        }
        rep->ok = 1;
    } else {
        snprintf(rep->msg, sizeof rep->msg, "%s", e.msg);
    }
}

static int run_variant(variant_run *v, const ar_bench_opts *o, ar_err *e)
{
    variant_job j = {v, o};
    char what[96];
    snprintf(what, sizeof what, "variant '%s'", v->def->label);
    return run_child(variant_work, &j, &v->rep, sizeof v->rep, what, e);
}

/* ---- paired timing: all variants in one child, round-robin ---- */

typedef struct {
    const ar_config *cfgs;
    int n;
    const ar_bench_opts *o;
} paired_job;

/* The timing process: a report, then train[n*repeat], infer[n*repeat],
 * the matrix-product fractions train_mm[n*repeat], infer_mm[n*repeat] and
 * the op tallies ops[2n]. */
static void paired_work(void *ud, void *buf)
{
    const paired_job *j = ud;
    report *rep = buf;
    double *v = (double *)(rep + 1);
    size_t nd = (size_t)j->n * j->o->repeat;
    ar_err e = {{0}};
    ar_op_tally *ops = (ar_op_tally *)(v + 4 * nd);
    rep->ok = ar_bench_paired(j->cfgs, j->n, j->o, v, v + nd, v + 2 * nd, v + 3 * nd, ops, &e) == 0;
    if (!rep->ok)
        snprintf(rep->msg, sizeof rep->msg, "%s", e.msg);
}

/* Runs ar_bench_paired in a child; fills each run's tok/s (median and range
 * over rounds) and overheads (median over rounds of the round's ratio to the
 * baseline, measured seconds apart), end to end and outside the matrix
 * products. */
static int run_paired(variant_run *runs, int n, const variant_run *base, const ar_bench_opts *o, ar_err *e)
{
    int R = o->repeat, bi = base ? (int)(base - runs) : -1;
    size_t nd = (size_t)n * R, bytes = sizeof(report) + 4 * nd * sizeof(double) + 2 * (size_t)n * sizeof(ar_op_tally);
    report *rep = calloc(1, bytes);
    ar_config *cfgs = calloc((size_t)n, sizeof *cfgs);
    double *tmp = calloc((size_t)R, sizeof *tmp);
    if (!rep || !cfgs || !tmp) {
        free(rep), free(cfgs), free(tmp);
        return ar_fail(e, "out of memory");
    }
    for (int i = 0; i < n; i++)
        cfgs[i] = runs[i].cfg;
    paired_job j = {cfgs, n, o};
    int rc = run_child(paired_work, &j, rep, bytes, "the timing process (all variants at once)", e);
    const double *buf = (const double *)(rep + 1);
    const ar_op_tally *ops = (const ar_op_tally *)(buf + 4 * nd);
    for (int i = 0; i < n && rc == 0; i++) {
        ar_bench_result *r = &runs[i].rep.r;
        bench_ops_variant *ov = &runs[i].ops;
        ov->label = runs[i].def->label;
        ov->steps = (long)R * o->steps;
        for (int pass = 0; pass < 2; pass++) {
            const double *v = buf + (size_t)pass * nd + (size_t)i * R;
            const double *vm = buf + (size_t)(2 + pass) * nd + (size_t)i * R;
            double med, lo, hi, ovh = NAN, nm = NAN, nm_ms = NAN, olo, ohi;
            ov->ops[pass] = ops[2 * i + pass];
            ov->seconds[pass] = 0;
            for (int k = 0; k < R; k++) /* a round's seconds are its tokens over its tok/s */
                ov->seconds[pass] += (double)r->batch * r->seq_len * o->steps / v[k];
            if (ops[2 * i + pass].steps > 0) /* a device's ops, timed in steps of their own */
                ov->seconds[pass] = ops[2 * i + pass].wall, ov->steps = ops[2 * i + pass].steps;
            memcpy(tmp, v, (size_t)R * sizeof *tmp);
            ar_bench_summarize(tmp, R, &med, &lo, &hi);
            if (bi >= 0) {
                const double *b = buf + (size_t)pass * nd + (size_t)bi * R;
                const double *bm = buf + (size_t)(2 + pass) * nd + (size_t)bi * R;
                for (int k = 0; k < R; k++)
                    tmp[k] = 100.0 * (1.0 - v[k] / b[k]);
                ar_bench_summarize(tmp, R, &ovh, &olo, &ohi);
                if (isfinite(vm[0]) && isfinite(bm[0])) {
                    for (int k = 0; k < R; k++)
                        tmp[k] = ar_bench_overhead_outside_mm(v[k], vm[k], b[k], bm[k]);
                    ar_bench_summarize(tmp, R, &nm, &olo, &ohi);
                    for (int k = 0; k < R; k++)
                        tmp[k] = ar_bench_extra_ms_outside_mm(v[k], vm[k], b[k], bm[k],
                                                              (double)r->batch * r->seq_len);
                    ar_bench_summarize(tmp, R, &nm_ms, &olo, &ohi);
                }
            }
            if (pass == 0) {
                r->train_tok_per_s = med, r->train_tok_per_s_min = lo, r->train_tok_per_s_max = hi;
                r->train_step_ms = 1e3 * (double)r->batch * r->seq_len / med;
                r->gflops = med * r->flops_per_token / 1e9;
                runs[i].train_ovh = ovh;
                runs[i].train_nm = nm;
                runs[i].train_nm_ms = nm_ms;
            } else {
                r->infer_tok_per_s = med, r->infer_tok_per_s_min = lo, r->infer_tok_per_s_max = hi;
                runs[i].infer_ovh = ovh;
                runs[i].infer_nm = nm;
                runs[i].infer_nm_ms = nm_ms;
            }
        }
    }
    free(rep), free(cfgs), free(tmp);
    return rc;
}

/* The best FMA peak over the variants' processes (0 where none measured
 * one: on a GPU). */
static double fma_peak_max(const variant_run *runs, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = runs[i].rep.fma_peak > m ? runs[i].rep.fma_peak : m;
    return m;
}

/* ---- derived numbers ---- */

typedef struct {
    double train_ovh, infer_ovh;   /* percent; NaN without a baseline */
    double extra, pred, ratio;     /* bytes; ratio NaN where undefined */
    double ceil_pct, fma_pct;      /* of the sgemm ceiling, of the FMA peak (cpu) */
    double peak, mfu;              /* FLOP/s (0 unknown) and fraction (NaN unknown) */
} derived;

/* peak_tflops: --peak-tflops, 0 when not given (then the backend's peak) */
/* The MFU denominator in FLOP/s: --peak-tflops, else the backend's (0: unknown) */
static double peak_flops(const variant_run *v, double peak_tflops)
{
    return peak_tflops > 0 ? peak_tflops * 1e12 : v->rep.r.peak_flops;
}

/* A variant's peak memory in bytes: its process's resident set on the
 * CPU, the device's buffers on a device; -1 where unknown. */
static long long peak_memory(const variant_run *v, const ar_bench_result *r)
{
    return v->cfg.train.device == AR_DEVICE_CPU ? r->peak_rss_bytes : r->peak_device_bytes;
}

static derived derive(const variant_run *v, const variant_run *base, double peak_tflops)
{
    const ar_bench_result *r = &v->rep.r;
    derived d = {NAN, NAN, NAN, 0, NAN, NAN, NAN, 0, NAN};
    d.pred = 4.0 * ar_bench_predicted_extra_floats(&v->cfg.model, r->batch);
    if (v->rep.ceiling > 0)
        d.ceil_pct = 100.0 * r->gflops / v->rep.ceiling;
    if (v->rep.fma_peak > 0)
        d.fma_pct = 100.0 * r->gflops / v->rep.fma_peak;
    d.peak = peak_flops(v, peak_tflops);
    d.mfu = ar_bench_mfu(r, d.peak);
    if (v->cfg.train.device != AR_DEVICE_CPU)
        d.ceil_pct = 100.0 * d.mfu; /* a GPU's ceiling is its peak */
    if (base) {
        const ar_bench_result *b = &base->rep.r;
        d.train_ovh = v->train_ovh;
        d.infer_ovh = v->infer_ovh;
        /* on a device the activations live in its memory, which RSS does not
         * see: there the backend's own count of its buffers */
        long long rm = peak_memory(v, r), bm = peak_memory(base, b);
        if (rm >= 0 && bm >= 0)
            d.extra = (double)(rm - bm);
        if (isfinite(d.extra) && d.pred > 0)
            d.ratio = d.extra / d.pred;
    }
    return d;
}

static void json_num_or_null(ar_jw *w, const char *key, double x)
{
    ar_jw_key(w, key);
    if (isfinite(x))
        ar_jw_num(w, x);
    else
        ar_jw_null(w);
}

/* The "config" object: the model's shape and the batch. */
static void json_config(ar_jw *w, const char *config, const ar_config *cfg)
{
    const ar_model_cfg *m = &cfg->model;
    ar_jw_key(w, "config");
    ar_jw_obj_begin(w);
    ar_jw_key(w, "file");
    if (config)
        ar_jw_str(w, config);
    else
        ar_jw_null(w);
    ar_jw_key(w, "d_model");
    ar_jw_int(w, m->d_model);
    ar_jw_key(w, "n_layer");
    ar_jw_int(w, m->n_layer);
    ar_jw_key(w, "n_head");
    ar_jw_int(w, m->n_head);
    ar_jw_key(w, "d_ff");
    ar_jw_int(w, m->d_ff);
    ar_jw_key(w, "seq_len");
    ar_jw_int(w, m->seq_len);
    ar_jw_key(w, "batch_size");
    ar_jw_int(w, cfg->train.batch_size);
    ar_jw_key(w, "vocab");
    ar_jw_int(w, m->vocab);
    ar_jw_key(w, "sublayers");
    ar_jw_int(w, ar_cfg_sublayers(m));
    ar_jw_obj_end(w);
}

/* key: x, or null where the value is missing (have == 0). */
static void json_int_or_null(ar_jw *w, const char *key, int have, long long x)
{
    ar_jw_key(w, key);
    if (have)
        ar_jw_int(w, x);
    else
        ar_jw_null(w);
}

/* One element of "results": a variant's throughput, overheads and memory. */
static void json_result(ar_jw *w, const variant_run *v, const variant_run *base, int gpu, double ceil_max,
                        double peak_tflops, int with_ops)
{
    const ar_bench_result *r = &v->rep.r;
    derived d = derive(v, base, peak_tflops);
    ar_jw_obj_begin(w);
    ar_jw_key(w, "variant");
    ar_jw_str(w, v->def->label);
    ar_jw_key(w, "name");
    ar_jw_str(w, v->def->name);
    ar_jw_key(w, "kind");
    ar_jw_str(w, ar_res_kind_name(v->cfg.model.residual.kind));
    /* null: baseline, or blocks of different sizes */
    json_int_or_null(w, "block_size",
                     !(v->cfg.model.residual.kind == AR_RES_BASELINE || ar_cfg_block_size(&v->cfg.model) == 0),
                     ar_cfg_block_size(&v->cfg.model));
    ar_jw_key(w, "num_blocks");
    ar_jw_int(w, ar_bench_num_blocks_effective(&v->cfg.model));
    ar_jw_key(w, "params");
    ar_jw_int(w, r->params);
    ar_jw_key(w, "nonembed_params");
    ar_jw_int(w, r->nonembed_params);
    ar_jw_key(w, "flops_per_token");
    ar_jw_num(w, r->flops_per_token);
    ar_jw_key(w, "train_tok_per_s");
    ar_jw_num(w, r->train_tok_per_s);
    ar_jw_key(w, "train_tok_per_s_min");
    ar_jw_num(w, r->train_tok_per_s_min);
    ar_jw_key(w, "train_tok_per_s_max");
    ar_jw_num(w, r->train_tok_per_s_max);
    ar_jw_key(w, "train_step_ms");
    ar_jw_num(w, r->train_step_ms);
    ar_jw_key(w, "infer_tok_per_s");
    ar_jw_num(w, r->infer_tok_per_s);
    ar_jw_key(w, "infer_tok_per_s_min");
    ar_jw_num(w, r->infer_tok_per_s_min);
    ar_jw_key(w, "infer_tok_per_s_max");
    ar_jw_num(w, r->infer_tok_per_s_max);
    ar_jw_key(w, "gflops");
    ar_jw_num(w, r->gflops);
    json_num_or_null(w, "ceiling_gflops", gpu ? (d.peak > 0 ? d.peak / 1e9 : NAN) : v->rep.ceiling);
    json_num_or_null(w, "ceiling_percent", d.ceil_pct);
    json_num_or_null(w, "fma_peak_gflops", gpu ? NAN : v->rep.fma_peak);
    json_num_or_null(w, "fma_peak_percent", d.fma_pct);
    json_num_or_null(w, "mfu", d.mfu);
    json_num_or_null(w, "train_overhead", d.train_ovh);
    json_num_or_null(w, "infer_overhead", d.infer_ovh);
    json_num_or_null(w, "train_overhead_outside_matmul", base ? v->train_nm : NAN);
    json_num_or_null(w, "infer_overhead_outside_matmul", base ? v->infer_nm : NAN);
    json_num_or_null(w, "train_ms_outside_matmul", base ? v->train_nm_ms : NAN);
    json_num_or_null(w, "infer_ms_outside_matmul", base ? v->infer_nm_ms : NAN);
    json_int_or_null(w, "peak_rss_bytes", r->peak_rss_bytes >= 0, r->peak_rss_bytes);
    json_int_or_null(w, "peak_device_bytes", r->peak_device_bytes >= 0, r->peak_device_bytes);
    int dev_mem = v->cfg.train.device != AR_DEVICE_CPU, ex = isfinite(d.extra);
    json_int_or_null(w, "extra_rss_bytes", ex && !dev_mem, ex ? (long long)d.extra : 0);
    json_int_or_null(w, "extra_device_bytes", ex && dev_mem, ex ? (long long)d.extra : 0);
    json_int_or_null(w, "predicted_extra_bytes", isfinite(d.pred), isfinite(d.pred) ? (long long)d.pred : 0);
    json_num_or_null(w, "extra_ratio", d.ratio);
    json_num_or_null(w, "loss", r->loss);
    if (with_ops) {
        ar_jw_key(w, "ops");
        bench_ops_json(w, &v->ops, gpu ? d.peak / 1e9 : ceil_max);
    }
    ar_jw_obj_end(w);
}

/* The document: the config, the machine and the options, then "results",
 * one object a variant. */
static void print_json(const char *config, const ar_config *cfg, const ar_bench_opts *o, variant_run *runs,
                       int n, const variant_run *base, double ceil_max, double peak_tflops, int with_ops)
{
    int gpu = cfg->train.device != AR_DEVICE_CPU;
    derived d0 = derive(&runs[0], base, peak_tflops);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    json_config(&w, config, cfg);
    ar_jw_key(&w, "device");
    ar_jw_str(&w, ar_device_name(cfg->train.device));
    ar_jw_key(&w, "device_name");
    ar_jw_str(&w, runs[0].rep.r.device);
    ar_jw_key(&w, "precision");
    ar_jw_str(&w, ar_precision_name(cfg->train.precision));
    json_num_or_null(&w, "peak_tflops", d0.peak > 0 ? d0.peak / 1e12 : NAN);
    ar_jw_key(&w, "peak_source");
    ar_jw_str(&w, peak_tflops > 0 ? "option" : d0.peak > 0 ? "device" : "unknown");
    ar_machine mach;
    ar_machine_describe(&mach);
    ar_machine_json(&w, &mach);
    ar_jw_key(&w, "threads");
    ar_jw_int(&w, runs[0].rep.r.threads);
    ar_jw_key(&w, "openblas_coretype");
    if (ct)
        ar_jw_str(&w, ct);
    else
        ar_jw_null(&w);
    ar_jw_key(&w, "steps");
    ar_jw_int(&w, o->steps);
    ar_jw_key(&w, "warmup");
    ar_jw_int(&w, o->warmup);
    ar_jw_key(&w, "repeat");
    ar_jw_int(&w, o->repeat);
    json_num_or_null(&w, "ceiling_gflops", gpu ? (d0.peak > 0 ? d0.peak / 1e9 : NAN) : ceil_max);
    double fma_max = fma_peak_max(runs, n);
    json_num_or_null(&w, "fma_peak_gflops", gpu || fma_max <= 0 ? NAN : fma_max);
    ar_jw_key(&w, "small_products");
    if (ar_cpu_small_products())
        ar_jw_str(&w, ar_cpu_small_products());
    else
        ar_jw_null(&w);
    ar_jw_key(&w, "large_products");
    if (ar_cpu_large_products())
        ar_jw_str(&w, ar_cpu_large_products());
    else
        ar_jw_null(&w);
    ar_jw_key(&w, "results");
    ar_jw_arr_begin(&w);
    for (int i = 0; i < n; i++)
        json_result(&w, &runs[i], base, gpu, ceil_max, peak_tflops, with_ops);
    ar_jw_arr_end(&w);
    ar_jw_obj_end(&w);
    printf("%s\n", w.s);
    ar_jw_free(&w);
}

static void fmt_pct(char *buf, size_t n, double x)
{
    if (isfinite(x))
        snprintf(buf, n, "%.1f%%", x);
    else
        snprintf(buf, n, "-");
}

static void fmt_mib(char *buf, size_t n, double bytes)
{
    if (isfinite(bytes))
        snprintf(buf, n, "%.1f", bytes / MIB);
    else
        snprintf(buf, n, "-");
}

static void print_table(const char *config, const ar_config *cfg, const ar_bench_opts *o, variant_run *runs,
                        int n, const variant_run *base, double ceil_min, double ceil_max, double peak_tflops)
{
    const char *ct = getenv("OPENBLAS_CORETYPE");
    const ar_model_cfg *m = &cfg->model;
    int L = ar_cfg_sublayers(m);
    int gpu = cfg->train.device != AR_DEVICE_CPU, mfu = gpu || peak_tflops > 0;
    derived d0 = derive(&runs[0], base, peak_tflops);
    double fma_max = fma_peak_max(runs, n);
    ar_machine mach;
    ar_machine_describe(&mach);
    printf("machine: %s, %s, %d thread%s, OPENBLAS_CORETYPE=%s, built for %s\n", mach.cpu, mach.blas,
           runs[0].rep.r.threads, runs[0].rep.r.threads == 1 ? "" : "s", ct ? ct : "(unset)", mach.build);
    if (gpu)
        printf("device %s (%s, %s matrix products)", runs[0].rep.r.device, ar_device_name(cfg->train.device),
               ar_precision_name(cfg->train.precision));
    else
        printf("sgemm ceiling %.1f GFLOP/s (%d^3, best of %d; %.1f..%.1f over the variants' processes)", ceil_max,
               AR_BENCH_CEILING_N, AR_BENCH_CEILING_REPS, ceil_min, ceil_max);
    if (!gpu && fma_max > 0)
        printf("\nFMA peak %.1f GFLOP/s (%s chains on every thread, best of %d)", fma_max,
               runs[0].rep.fma_isa ? runs[0].rep.fma_isa : "?", AR_BENCH_FMA_REPS);
    if (d0.peak > 0)
        printf(", peak %.1f TFLOP/s (%s)\n", d0.peak / 1e12, peak_tflops > 0 ? "--peak-tflops" : "bf16, the device's");
    else if (gpu)
        printf(", peak unknown: MFU needs --peak-tflops\n");
    else
        printf("\n");
    printf("config %s: d_model %d, n_layer %d (L = %d), n_head %d, d_ff %d, T %d, batch %d, vocab %d\n",
           config ? config : "(built-in default)", m->d_model, m->n_layer, L, m->n_head, m->d_ff, m->seq_len,
           cfg->train.batch_size, m->vocab);
    printf("all variants in one process, timed round-robin: median of %d round%s of %d step%s each, after %d "
           "warm-up step%s\n\n",
           o->repeat, o->repeat == 1 ? "" : "s", o->steps, o->steps == 1 ? "" : "s", o->warmup,
           o->warmup == 1 ? "" : "s");
    int lw = 10; /* the variant column: its longest label */
    for (int i = 0; i < n; i++)
        lw = (int)strlen(runs[i].def->label) > lw ? (int)strlen(runs[i].def->label) : lw;
    int cw = mfu ? 7 : 6; /* "unknown" */
    printf("%-*s %11s %19s %8s %*s %6s %8s %11s %8s %9s %9s %9s %9s\n", lw, "variant", "train tok/s", "min..max",
           "GFLOP/s", cw, mfu ? "MFU" : "%ceil", "%peak", "overhead", "infer tok/s", "overhead", "peak MiB",
           "extra MiB", "pred MiB", "meas/pred");
    for (int i = 0; i < n; i++) {
        const variant_run *v = &runs[i];
        const ar_bench_result *r = &v->rep.r;
        derived d = derive(v, base, peak_tflops);
        char range[48], cp[16], fp[16], to[16], io[16], peak[24], extra[24], pred[24], ratio[24];
        fmt_pct(fp, sizeof fp, d.fma_pct);
        snprintf(range, sizeof range, "%.0f..%.0f", r->train_tok_per_s_min, r->train_tok_per_s_max);
        fmt_pct(cp, sizeof cp, mfu ? 100.0 * d.mfu : d.ceil_pct);
        if (mfu && !isfinite(d.mfu))
            snprintf(cp, sizeof cp, "unknown");
        fmt_pct(to, sizeof to, d.train_ovh);
        fmt_pct(io, sizeof io, d.infer_ovh);
        long long pm = peak_memory(v, r);
        fmt_mib(peak, sizeof peak, pm >= 0 ? (double)pm : NAN);
        fmt_mib(extra, sizeof extra, d.extra);
        fmt_mib(pred, sizeof pred, d.pred);
        if (isfinite(d.ratio))
            snprintf(ratio, sizeof ratio, "%.2f", d.ratio);
        else
            snprintf(ratio, sizeof ratio, "-");
        printf("%-*s %11.0f %19s %8.1f %*s %6s %8s %11.0f %8s %9s %9s %9s %9s\n", lw, v->def->label,
               r->train_tok_per_s, range, r->gflops, cw, cp, fp, to, r->infer_tok_per_s, io, peak, extra, pred,
               ratio);
    }
    if (base && isfinite(runs[0].train_nm)) {
        printf("\n%-*s %25s %25s\n", lw, "", "train overhead outside", "infer overhead outside");
        printf("%-*s %25s %25s\n", lw, "variant", "the matrix products", "the matrix products");
        for (int i = 0; i < n; i++) {
            char tp[16], ip[16], to[40], io[40];
            fmt_pct(tp, sizeof tp, runs[i].train_nm);
            fmt_pct(ip, sizeof ip, runs[i].infer_nm);
            snprintf(to, sizeof to, "%s (%.2f ms)", tp, runs[i].train_nm_ms);
            snprintf(io, sizeof io, "%s (%.2f ms)", ip, runs[i].infer_nm_ms);
            printf("%-*s %25s %25s\n", lw, runs[i].def->label, to, io);
        }
    }
    printf("\noverhead = median over rounds of 100*(1 - tok/s / baseline tok/s of the same round), the\n"
           "variants of odd rounds in reverse order;%s\n",
           base && isfinite(runs[0].train_nm)
               ? "\noutside the matrix products: the same, less the round's difference in matmul time, and\n"
                 "that difference in ms a step (it does not grow where the products alone run faster)"
               : "");
    if (mfu)
        printf("MFU = GFLOP/s (6N + 12 n_layer d T per token) / peak; ");
    else
        printf("%%ceil, %%peak: GFLOP/s against the sgemm ceiling and the FMA peak measured in the variant's\n"
               "own process; ");
    printf("peak MiB %s;\n"
           "pred MiB = ceil(L/S)*B*T*d floats of stored block summaries (full: S = 1)\n",
           gpu ? "of the device's buffers in that process (not the CUDA context's or cuBLAS's workspace)"
               : "in that process (resident set)");
    for (int i = 0; i < n; i++) {
        const ar_bench_variant_def *d = runs[i].def;
        const ar_residual_cfg *rc = &runs[i].cfg.model.residual;
        if ((d->num_blocks && rc->num_blocks != d->num_blocks) || (d->block_size && rc->block_size != d->block_size))
            printf("note: the model has only L = %d sublayers, so '%s' runs with %s = %d\n", L, d->label,
                   d->num_blocks ? "N" : "S", d->num_blocks ? rc->num_blocks : rc->block_size);
    }
}

/* The command line, as parsed. */
typedef struct {
    const char *config, *variants;
    int json, with_ops;
    double peak_tflops;
    ar_bench_opts o;
} bench_args;

/* The command's own options and CONFIG into a, the variants to run into
 * sel; 0, or -1 after the usage error. */
static int parse_args(cli_opts *so, bench_args *a, int *sel)
{
    for (const char *o, *v; (o = cli_opts_next(so, &v));) {
        int bad = 0;
        if (!strcmp(o, "--variants"))
            a->variants = v;
        else if (!strcmp(o, "--peak-tflops"))
            bad = cli_parse_positive(usage, o, v, &a->peak_tflops) != 0;
        else if (!strcmp(o, "--steps"))
            bad = cli_parse_int(o, v, 1, &a->o.steps) != 0;
        else if (!strcmp(o, "--warmup"))
            bad = cli_parse_int(o, v, 0, &a->o.warmup) != 0;
        else if (!strcmp(o, "--repeat"))
            bad = cli_parse_int(o, v, 1, &a->o.repeat) != 0;
        else if (!strcmp(o, "--json"))
            a->json = 1;
        else if (!strcmp(o, "--ops"))
            a->with_ops = 1;
        else if (!strcmp(o, "--virtual") || !strcmp(o, "--micro-batches"))
            bad = cli_usage_error(usage, "'%s' goes with '--pipeline P'", o) != 0;
        else
            bad = cli_opts_argument(so, o, &a->config) != 0;
        if (bad)
            return -1;
    }
    if (so->bad)
        return -1;
    for (int i = 0; i < ar_bench_n_variants; i++)
        sel[i] = i < ar_bench_n_default;
    if (a->variants && parse_variants(a->variants, sel) != 0)
        return -1;
    return 0;
}

/* The selected variants into runs[0..*n), each with its config validated
 * here, before any child runs (the config's own residual is replaced, so
 * it need not be valid); *base: the baseline's, or NULL.  0, or -1 with e
 * set. */
static int plan_variants(const ar_config *cfg, const int *sel, variant_run *runs, int *n,
                         const variant_run **base, ar_err *e)
{
    *n = 0;
    *base = NULL;
    for (int i = 0; i < ar_bench_n_variants; i++) {
        if (!sel[i])
            continue;
        variant_run *v = &runs[(*n)++];
        memset(v, 0, sizeof *v);
        v->def = &ar_bench_variants[i];
        v->cfg = *cfg;
        ar_bench_apply_variant(&v->cfg, v->def);
        if (ar_config_validate(&v->cfg, e) != 0)
            return -1;
        if (v->def->kind == AR_RES_BASELINE)
            *base = v;
    }
    return 0;
}

static void clear_status(int tty)
{
    if (tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* Each variant's memory in its own child, then the timing of all of them
 * paired; the sgemm ceilings' range over the children into *ceil_min and
 * *ceil_max.  0, or -1 with e set. */
static int measure(variant_run *runs, int n, const variant_run *base, const ar_bench_opts *o, double *ceil_min,
                   double *ceil_max, ar_err *e)
{
    int tty = isatty(STDERR_FILENO);
    *ceil_min = INFINITY;
    *ceil_max = 0;
    for (int i = 0; i < n; i++) {
        if (tty) {
            fprintf(stderr, "\r\033[Kmeasuring '%s' (%d/%d)...", runs[i].def->label, i + 1, n);
            fflush(stderr);
        }
        /* memory only: peak RSS is reached by one training step and one
         * forward; the timing is done below with all variants paired */
        ar_bench_opts mem = *o;
        mem.steps = mem.repeat = mem.warmup = 1;
        int r = run_variant(&runs[i], &mem, e);
        clear_status(tty);
        if (r != 0)
            return -1;
        double c = runs[i].rep.ceiling;
        *ceil_min = c < *ceil_min ? c : *ceil_min;
        *ceil_max = c > *ceil_max ? c : *ceil_max;
    }
    if (tty) {
        fprintf(stderr, "\r\033[Ktiming all %d variants round-robin...", n);
        fflush(stderr);
    }
    int pr = run_paired(runs, n, base, o, e);
    clear_status(tty);
    return pr != 0 ? -1 : 0;
}

/* Every op's time, a table a variant (--ops without --json); 0, or -1
 * with e set. */
static int print_ops(const variant_run *runs, int n, double ceiling, const char *what, ar_err *e)
{
    bench_ops_variant *ov = calloc((size_t)n, sizeof *ov);
    if (!ov) {
        ar_fail(e, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++)
        ov[i] = runs[i].ops;
    bench_ops_print(ov, n, ceiling, what);
    free(ov);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a = {.o = {.be = NULL, .threads = 0, .steps = 5, .warmup = 2, .repeat = 3}};
    int rc = AR_EXIT_USAGE;
    variant_run *runs = NULL;
    /* a pipeline runs on the ranks of an mpirun launch, with none of the
     * forked processes below */
    if (cli_bench_pipelined(argc, argv))
        return cmd_bench_pipeline(argc, argv, usage);
    static const char *const own[] = {"--steps",   "--warmup",        "--repeat", "--peak-tflops", "--variants",
                                      "--virtual", "--micro-batches", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_THREADS | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    int sel[AR_BENCH_MAX_VARIANTS];
    if (parse_args(&so, &a, sel) != 0)
        goto out;

    rc = AR_EXIT_FAIL;
    ar_err e = {{0}};
    ar_config cfg;
    ar_config_defaults(&cfg);
    if ((a.config && ar_config_load(&cfg, a.config, &e) != 0) || cli_opts_apply(&so, &cfg, &e) != 0)
        goto fail;
    a.o.threads = cfg.train.threads;
    /* the backend is opened in the children, which fork from a process
     * without a CUDA context */
    if (cli_check_device(&cfg, &e) != 0)
        goto fail;
    runs = calloc((size_t)ar_bench_n_variants, sizeof *runs);
    int n;
    const variant_run *base;
    if (plan_variants(&cfg, sel, runs, &n, &base, &e) != 0)
        goto fail;
    double ceil_min, ceil_max;
    if (measure(runs, n, base, &a.o, &ceil_min, &ceil_max, &e) != 0)
        goto fail;
    if (a.json)
        print_json(a.config, &cfg, &a.o, runs, n, base, ceil_max, a.peak_tflops, a.with_ops);
    else
        print_table(a.config, &cfg, &a.o, runs, n, base, ceil_min, ceil_max, a.peak_tflops);
    /* the ops' ceiling: a device's is its bf16 peak (--peak-tflops or the backend's) */
    int gpu = cfg.train.device != AR_DEVICE_CPU;
    double ops_ceil = gpu ? peak_flops(&runs[0], a.peak_tflops) / 1e9 : ceil_max;
    if (a.with_ops && !a.json &&
        print_ops(runs, n, ops_ceil, gpu ? "the device's bf16 peak" : "the sgemm ceiling", &e) != 0)
        goto fail;
    rc = AR_EXIT_OK;
    goto out;
fail:
    cli_error("%s", e.msg);
out:
    free(runs);
    cli_opts_free(&so);
    return rc;
}
