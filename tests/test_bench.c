/* attnres bench's library side: every variant measures positive, finite
 * throughputs on a tiny model, the variants clamp to small models, and the
 * memory prediction follows its formula; and the machine it names (CPU,
 * BLAS and its kernels, threads) in its table and JSON. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/json.h"
#include "experiments/ablate.h"
#include "experiments/bench.h"
#include "run/machine.h"
#include "lib/backend.h"
#include "testutil.h"

#ifdef AR_BLAS_BLIS
/* BLIS's own (blis.h; arch_t is an enum) */
int bli_arch_query_id(void);
char *bli_arch_string(int id);
#define BLAS_NAME "BLIS "
/* the kernel set this process's BLAS runs, asked of the library itself */
static const char *blas_core_here(void) { return bli_arch_string(bli_arch_query_id()); }
#else
#define BLAS_NAME "OpenBLAS "
static const char *blas_core_here(void) { return openblas_get_corename(); }
#endif

static ar_config tiny(void)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 32;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.d_ff = 64;
    c.model.seq_len = 16;
    c.train.batch_size = 2;
    return c;
}

static void check_finite_pos(double x, const char *what, const char *variant)
{
    cr_assert(isfinite(x) && x > 0, "%s: %s = %g, expected a positive finite number", variant, what, x);
}

Test(bench, every_variant_measures_on_a_tiny_model)
{
    ar_bench_opts o = {.be = NULL, .threads = 2, .steps = 1, .warmup = 0, .repeat = 1};
    cr_assert_eq(ar_bench_n_default, 4);
    cr_assert_eq(ar_bench_n_variants, 4 + ar_ablate_nvariants() - 2); /* baseline, full shared */
    for (int i = 0; i < ar_bench_n_variants; i++) {
        const ar_bench_variant_def *v = &ar_bench_variants[i];
        ar_config c = tiny();
        ar_bench_apply_variant(&c, v);
        ar_err e;
        cr_assert_eq(ar_config_validate(&c, &e), 0, "%s: %s", v->name, e.msg);
        ar_bench_result r;
        cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), 0, "%s: %s", v->name, e.msg);
        check_finite_pos(r.train_tok_per_s, "train_tok_per_s", v->name);
        check_finite_pos(r.infer_tok_per_s, "infer_tok_per_s", v->name);
        check_finite_pos(r.gflops, "gflops", v->name);
        check_finite_pos(r.train_step_ms, "train_step_ms", v->name);
        cr_assert(isfinite(r.loss), "%s: loss %g", v->name, r.loss);
        cr_assert_eq(r.batch, 2);
        cr_assert_eq(r.seq_len, 16);
        cr_assert_eq(r.threads, 2);
        cr_assert_gt(r.peak_rss_bytes, 0, "%s: no peak RSS", v->name);
        cr_assert_gt(r.params, r.nonembed_params);
        cr_assert_eq(r.params - r.nonembed_params, 256 * 32, "the embedding is V*d");
        /* GFLOP/s = tok/s * (6N + 12 n_layer d T) / 1e9 */
        double fpt = 6.0 * r.nonembed_params + 12.0 * 2 * 32 * 16;
        cr_assert_float_eq(r.flops_per_token, fpt, 1e-6 * fpt);
        cr_assert_float_eq(r.gflops, r.train_tok_per_s * fpt / 1e9, 1e-9 * r.gflops);
        /* one repetition: median = min = max */
        cr_assert_eq(r.train_tok_per_s_min, r.train_tok_per_s);
        cr_assert_eq(r.train_tok_per_s_max, r.train_tok_per_s);
    }
}

Test(bench, median_lies_in_the_range)
{
    ar_config c = tiny();
    ar_bench_apply_variant(&c, ar_bench_find_variant("block4"));
    ar_bench_opts o = {.be = NULL, .threads = 2, .steps = 2, .warmup = 1, .repeat = 3};
    ar_bench_result r;
    ar_err e;
    cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_assert_leq(r.train_tok_per_s_min, r.train_tok_per_s);
    cr_assert_leq(r.train_tok_per_s, r.train_tok_per_s_max);
    cr_assert_leq(r.infer_tok_per_s_min, r.infer_tok_per_s);
    cr_assert_leq(r.infer_tok_per_s, r.infer_tok_per_s_max);
}

/* Paired timing on the CPU: every round of every variant has a positive
 * throughput and a matrix-product share strictly between 0 and 1 (the
 * products are timed inside the step, so a share of 0 or 1, or NaN, means
 * the timing is not wired in). */
Test(bench, paired_timing_measures_the_matrix_products)
{
    ar_config c[2] = {tiny(), tiny()};
    ar_bench_apply_variant(&c[1], ar_bench_find_variant("full"));
    ar_bench_opts o = {.be = NULL, .threads = 2, .steps = 1, .warmup = 1, .repeat = 3};
    double train[6], infer[6], tmm[6], imm[6];
    ar_err e;
    cr_assert_eq(ar_bench_paired(c, 2, &o, train, infer, tmm, imm, NULL, &e), 0, "%s", e.msg);
    for (int i = 0; i < 6; i++) {
        check_finite_pos(train[i], "train tok/s", "paired");
        check_finite_pos(infer[i], "infer tok/s", "paired");
        cr_expect(tmm[i] > 0 && tmm[i] < 1, "round %d: training matmul share %g", i, tmm[i]);
        cr_expect(imm[i] > 0 && imm[i] < 1, "round %d: inference matmul share %g", i, imm[i]);
    }
}

/* 100 ((t_v - m_v) - (t_b - m_b)) / t_v with t = 1/tok/s, m = frac t. */
Test(bench, overhead_outside_the_matrix_products)
{
    /* t_v = 0.01, m_v = 0.005; t_b = 1/110, m_b = 0.6/110 */
    double x = ar_bench_overhead_outside_mm(100, 0.5, 110, 0.6);
    cr_assert_float_eq(x, 100 * (0.005 - 0.4 / 110) / 0.01, 1e-9);
    cr_assert_eq(ar_bench_overhead_outside_mm(123, 0.7, 123, 0.7), 0.0);
    /* only the matmul time differs: no overhead outside it */
    double tv = 1.2, tb = 1.0, mv = 0.9, mb = 0.7;
    cr_assert_float_eq(ar_bench_overhead_outside_mm(1 / tv, mv / tv, 1 / tb, mb / tb), 0.0, 1e-9);
}

/* 1000 tokens ((t_v - m_v) - (t_b - m_b)): the percentage's numerator in
 * ms a step */
Test(bench, ms_outside_the_matrix_products)
{
    /* t_v = 0.01, m_v = 0.005; t_b = 1/110, m_b = 0.6/110; 64 tokens a step.
     * Plain double arithmetic on values under 1e4 (a few roundings, about
     * 1e-12 whatever the CPU): 1e-9 is no tighter than the formula. */
    double x = ar_bench_extra_ms_outside_mm(100, 0.5, 110, 0.6, 64);
    cr_assert_float_eq(x, 1e3 * 64 * (0.005 - 0.4 / 110), 1e-9);
    /* the percentage of the variant's step it is */
    cr_assert_float_eq(100 * x / (1e3 * 64 * 0.01), ar_bench_overhead_outside_mm(100, 0.5, 110, 0.6), 1e-9);
    cr_assert_eq(ar_bench_extra_ms_outside_mm(123, 0.7, 123, 0.7, 1024), 0.0);
    /* only the matmul time differs: nothing outside it */
    double tv = 1.2, tb = 1.0, mv = 0.9, mb = 0.7;
    cr_assert_float_eq(ar_bench_extra_ms_outside_mm(1 / tv, mv / tv, 1 / tb, mb / tb, 16), 0.0, 1e-9);
    /* the products alone twice as fast: the variant's t 1.2 -> 0.95 and the
     * baseline's 1.0 -> 0.75 (m 0.5 -> 0.25 in both): the same ms outside
     * them, a larger percentage of the variant's shorter step */
    double slow = ar_bench_extra_ms_outside_mm(1 / 1.2, 0.5 / 1.2, 1 / 1.0, 0.5 / 1.0, 16);
    double fast = ar_bench_extra_ms_outside_mm(1 / 0.95, 0.25 / 0.95, 1 / 0.75, 0.25 / 0.75, 16);
    cr_assert_float_eq(slow, 1e3 * 16 * 0.2, 1e-6);
    cr_assert_float_eq(fast, slow, 1e-6);
    cr_assert_gt(ar_bench_overhead_outside_mm(1 / 0.95, 0.25 / 0.95, 1 / 0.75, 0.25 / 0.75),
                 ar_bench_overhead_outside_mm(1 / 1.2, 0.5 / 1.2, 1 / 1.0, 0.5 / 1.0) + 4.0);
}

Test(bench, bad_schedule_is_an_error)
{
    ar_config c = tiny();
    ar_bench_opts o = {.be = NULL, .threads = -1, .steps = 0, .warmup = 0, .repeat = 1};
    ar_bench_result r;
    ar_err e;
    cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), -1);
    cr_assert(strstr(e.msg, "steps") != NULL, "%s", e.msg);
}

/* Every attnres ablate variant is a bench variant of the same name, and
 * gives the model attnres ablate gives (here from a config that sets none of
 * the variants' knobs, and from one that sets them all). */
Test(bench, every_ablate_variant_benchmarks_as_ablate_builds_it)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < ar_ablate_nvariants(); i++) {
            const char *name = ar_ablate_variant_name(i);
            const ar_bench_variant_def *v = ar_bench_find_variant(name);
            cr_assert_not_null(v, "ablate variant '%s' is not a bench variant", name);
            ar_config c = tiny(), want = tiny();
            if (pass) {
                c.model.residual.kind = want.model.residual.kind = AR_RES_BLOCK;
                c.model.residual.block_size = want.model.residual.block_size = 2;
                c.model.residual.window = want.model.residual.window = 3;
                c.model.residual.heads = want.model.residual.heads = 2;
                c.model.residual.streams = want.model.residual.streams = 2;
            }
            ar_model_cfg base = want.model;
            ar_err e = {{0}};
            cr_assert_eq(ar_ablate_apply(&want.model, &base, name, &e), 0, "%s: %s", name, e.msg);
            ar_bench_apply_variant(&c, v);
            cr_expect_eq(memcmp(&c.model.residual, &want.model.residual, sizeof c.model.residual), 0,
                         "bench variant '%s' differs from ablate's", name);
            cr_expect_eq(c.model.residual.kind, v->kind, "%s: table kind", name);
        }
    }
}

Test(bench, variants_and_clamping)
{
    cr_assert_str_eq(ar_bench_variants[0].name, "baseline");
    cr_assert_str_eq(ar_bench_find_variant("block8")->label, "block N=8");
    cr_assert_str_eq(ar_bench_find_variant("block4")->label, "block S=4");
    cr_assert_str_eq(ar_bench_find_variant("full")->label, "full");
    cr_assert_null(ar_bench_find_variant("block-s4"));
    cr_assert_null(ar_bench_find_variant("all"));

    ar_config c;
    ar_config_defaults(&c);
    c.model.n_layer = 6; /* L = 12: no clamping */
    ar_bench_apply_variant(&c, ar_bench_find_variant("block8"));
    cr_assert_eq(c.model.residual.kind, AR_RES_BLOCK);
    cr_assert_eq(c.model.residual.num_blocks, 8);
    cr_assert_eq(c.model.residual.block_size, 0);
    cr_assert_eq(ar_cfg_block_size(&c.model), 2);
    ar_bench_apply_variant(&c, ar_bench_find_variant("block4"));
    cr_assert_eq(c.model.residual.num_blocks, 0);
    cr_assert_eq(c.model.residual.block_size, 4);
    ar_bench_apply_variant(&c, ar_bench_find_variant("full"));
    cr_assert_eq(c.model.residual.kind, AR_RES_FULL);

    c.model.n_layer = 1; /* L = 2: N and S clamp to 2 */
    ar_err e;
    ar_bench_apply_variant(&c, ar_bench_find_variant("block8"));
    cr_assert_eq(c.model.residual.num_blocks, 2);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    ar_bench_apply_variant(&c, ar_bench_find_variant("block4"));
    cr_assert_eq(c.model.residual.block_size, 2);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

Test(bench, memory_prediction_formula)
{
    /* d 32, n_layer 2 (L = 4), T 16, B 2: B*T*d = 1024 floats */
    ar_config c = tiny();
    const double btd = 2.0 * 16 * 32;
    ar_bench_apply_variant(&c, ar_bench_find_variant("baseline"));
    cr_assert_eq(ar_bench_num_blocks_effective(&c.model), 0);
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 2), 0);
    ar_bench_apply_variant(&c, ar_bench_find_variant("block4")); /* S = 4: 1 block */
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 2), 1 * btd);
    ar_bench_apply_variant(&c, ar_bench_find_variant("block8")); /* N clamped to 4: S = 1 */
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 2), 4 * btd);
    ar_bench_apply_variant(&c, ar_bench_find_variant("full")); /* L*B*T*d */
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 2), 4 * btd);

    /* bench-small: d 256, n_layer 6 (L = 12), T 256, B 16 */
    ar_config_defaults(&c);
    c.model.d_model = 256;
    c.model.n_layer = 6;
    c.model.seq_len = 256;
    const double btd2 = 16.0 * 256 * 256;
    ar_bench_apply_variant(&c, ar_bench_find_variant("block8")); /* S = ceil(12/8) = 2: 6 blocks */
    cr_assert_eq(ar_bench_num_blocks_effective(&c.model), 6);
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 16), 6 * btd2);
    ar_bench_apply_variant(&c, ar_bench_find_variant("block4")); /* ceil(12/4) = 3 */
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 16), 3 * btd2);
    ar_bench_apply_variant(&c, ar_bench_find_variant("full"));
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 16), 12 * btd2);
    /* S that does not divide L: S = 5, L = 12 -> ceil = 3 */
    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 5;
    c.model.residual.num_blocks = 0;
    cr_assert_eq(ar_bench_predicted_extra_floats(&c.model, 1), 3.0 * 256 * 256);
}

/* The device fields, and MFU = achieved FLOP/s over a peak: unknown (NaN)
 * on the CPU backend, which has no peak. */
Test(bench, device_name_and_mfu)
{
    ar_bench_opts o = {.threads = 2, .steps = 1, .warmup = 0, .repeat = 1};
    ar_config c = tiny();
    ar_bench_apply_variant(&c, ar_bench_find_variant("baseline"));
    ar_bench_result r;
    ar_err e;
    cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), 0, "%s", e.msg);
    cr_assert_str_eq(r.device, "cpu");
    cr_assert_eq(r.peak_flops, 0);
    cr_assert(isnan(ar_bench_mfu(&r, r.peak_flops)));
    double mfu = ar_bench_mfu(&r, 1e12);
    cr_assert_float_eq(mfu, r.gflops * 1e9 / 1e12, 1e-9 * mfu);
}

/* With no be, the config's device is opened; a device this build cannot
 * use is an error before any model exists. */
Test(bench, device_option_opens_the_backend)
{
    ar_config c = tiny();
    ar_bench_apply_variant(&c, ar_bench_find_variant("baseline"));
    ar_bench_result r;
    ar_err e = {{0}};
    ar_bench_opts o = {.threads = 2, .steps = 1, .warmup = 0, .repeat = 1};
    c.train.precision = AR_PREC_BF16;
    cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), -1);
    cr_assert(strstr(e.msg, "'train.precision' bf16 needs 'train.device' cuda"), "%s", e.msg);
    if (ar_cuda_built())
        return;
    c.train.precision = AR_PREC_FP32;
    c.train.device = AR_DEVICE_CUDA;
    cr_assert_eq(ar_bench_variant(&c, &o, &r, &e), -1);
    cr_assert(strstr(e.msg, "'cuda' is not available"), "%s", e.msg);
}

/* The op timer (attnres bench --ops): a wrapped op gives the inner op's
 * result bit for bit and tallies one call, its FLOPs and a positive time;
 * every compute entry of the table is wrapped (an op added to lib/backend.h
 * without its wrapper in experiments/op_timer.c would go untimed). */
Test(bench, op_timer_wraps_every_op_and_counts_one_call)
{
    const ar_backend *cpu = ar_backend_cpu(), *t = ar_op_timer(cpu);
    cr_assert_not_null(t);
    typedef void (*fn)(void);
    enum { WORDS = sizeof(ar_backend) / sizeof(fn) };
    fn tw[WORDS], cw[WORDS];
    memcpy(tw, t, sizeof tw);
    memcpy(cw, cpu, sizeof cw);
    /* the entries left as they are: name, memory, sync, threads, device, attention state */
    const void *kept[] = {(const void *)&cpu->name,       (const void *)&cpu->alloc, (const void *)&cpu->alloc_act,
                          (const void *)&cpu->act_size,
                          (const void *)&cpu->free,       (const void *)&cpu->upload,
                          (const void *)&cpu->download,   (const void *)&cpu->sync,
                          (const void *)&cpu->set_threads, (const void *)&cpu->set_bf16,
                          (const void *)&cpu->device_name, (const void *)&cpu->peak_bf16_flops,
                          (const void *)&cpu->mem_peak,   (const void *)&cpu->head_floats,
                          (const void *)&cpu->attention_state, (const void *)&cpu->set_weight_copy};
    int wrapped = 0;
    for (int i = 0; i < WORDS; i++) {
        const void *at = (const char *)cpu + i * sizeof(fn);
        int keep = 0;
        for (size_t k = 0; k < sizeof kept / sizeof *kept; k++)
            keep |= kept[k] == at;
        if (keep)
            cr_expect(tw[i] == cw[i], "word %d: a memory or device entry is wrapped", i);
        else
            cr_expect(cw[i] && tw[i] != cw[i], "word %d of ar_backend (lib/backend.h's order) is not timed", i);
        wrapped += !keep;
    }
    cr_assert_eq(wrapped, AR_OP_COUNT, "ar_op_id lists %d ops, the table has %d compute entries", AR_OP_COUNT,
                 wrapped);

    enum { N = 5, IN = 7, OUT = 3 };
    float x[N * IN], W[OUT * IN], a[N * OUT], b[N * OUT];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)((i * 37) % 11) / 7.0f - 0.6f;
    for (int i = 0; i < OUT * IN; i++)
        W[i] = (float)((i * 13) % 9) / 5.0f - 0.8f;
    ar_op_tally tl;
    memset(&tl, 0, sizeof tl);
    ar_op_timer_into(&tl);
    t->matmul_fwd(a, x, W, N, IN, OUT);
    ar_op_timer_into(NULL);
    t->matmul_fwd(a, x, W, N, IN, OUT); /* not tallied */
    cpu->matmul_fwd(b, x, W, N, IN, OUT);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_eq(tl.calls[AR_OP_matmul_fwd], 1);
    cr_assert_eq(tl.flops[AR_OP_matmul_fwd], 2.0 * N * IN * OUT);
    cr_assert(tl.seconds[AR_OP_matmul_fwd] > 0);
    for (int op = 0; op < AR_OP_COUNT; op++)
        if (op != AR_OP_matmul_fwd)
            cr_assert_eq(tl.calls[op], 0, "%s", ar_op_name(op));
    cr_assert_str_eq(ar_op_name(AR_OP_adamw), "adamw");
    cr_assert_str_eq(ar_op_name(AR_OP_matmul_bwd), "matmul_bwd");
}

/* In a paired bench the tally of the baseline's training rounds counts the
 * formula's FLOPs exactly: 6 FLOPs per matrix weight and token (every
 * non-embedding parameter but the RMSNorm gains) plus 12 n_layer d T of
 * attention; the forward-only rounds a third of it; the timed ops take
 * less time than the rounds they ran in. */
Test(bench, op_tally_counts_the_formulas_flops)
{
    ar_config c[1] = {tiny()};
    ar_bench_apply_variant(&c[0], ar_bench_find_variant("baseline"));
    ar_bench_opts o = {.be = NULL, .threads = 1, .steps = 2, .warmup = 1, .repeat = 2};
    double train[2], infer[2];
    ar_op_tally ops[2];
    ar_err e;
    cr_assert_eq(ar_bench_paired(c, 1, &o, train, infer, NULL, NULL, ops, &e), 0, "%s", e.msg);
    ar_bench_result r;
    o.repeat = o.steps = 1, o.warmup = 0;
    cr_assert_eq(ar_bench_variant(&c[0], &o, &r, &e), 0, "%s", e.msg);
    const ar_model_cfg *m = &c[0].model;
    double tokens = 2.0 * 2 * c[0].train.batch_size * m->seq_len; /* repeat x steps x B x T */
    double gains = (2.0 * m->n_layer + 1) * m->d_model;
    double want = 6.0 * ((double)r.nonembed_params - gains) + 12.0 * m->n_layer * m->d_model * m->seq_len;
    double got = 0, got_inf = 0, secs = 0;
    for (int op = 0; op < AR_OP_COUNT; op++) {
        got += ops[0].flops[op];
        got_inf += ops[1].flops[op];
        secs += ops[0].seconds[op];
    }
    cr_assert_float_eq(got / tokens, want, 1e-6 * want, "training: %.1f FLOPs per token counted, %.1f by the formula",
                       got / tokens, want);
    cr_assert_float_eq(got_inf / tokens, want / 3, 1e-6 * want, "forward: %.1f per token, want %.1f", got_inf / tokens,
                       want / 3);
    cr_assert(ops[0].calls[AR_OP_adamw] > 0 && ops[1].calls[AR_OP_adamw] == 0);
    double round_s = tokens / 2 / train[0] + tokens / 2 / train[1];
    cr_assert(secs > 0 && secs < round_s, "ops %g s, rounds %g s", secs, round_s);
}

/* ---- the machine: CPU model, BLAS kernels, threads ---- */

/* The first "model name" of a cpuinfo, trimmed; "unknown" without one or
 * without the file; a short buffer is cut, never overrun. */
Test(bench, machine_cpu_reads_the_first_model_name)
{
    const char *dir = tu_tmpdir();
    char path[4096], buf[128];
    snprintf(path, sizeof path, "%s/cpuinfo", dir);
    const char *two = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"
                      "model name\t:  Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz \nflags\t\t: fpu\n\n"
                      "processor\t: 1\nmodel name\t: Other CPU\n";
    tu_write_file(path, two, strlen(two));
    ar_machine_cpu(path, buf, sizeof buf);
    cr_assert_str_eq(buf, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz");
    char small[6];
    ar_machine_cpu(path, small, sizeof small);
    cr_assert_str_eq(small, "Intel");
    const char *none = "processor\t: 0\nCPU implementer\t: 0x41\nmodel name\t:\n";
    tu_write_file(path, none, strlen(none));
    ar_machine_cpu(path, buf, sizeof buf);
    cr_assert_str_eq(buf, "unknown");
    snprintf(path, sizeof path, "%s/no-such-file", dir);
    ar_machine_cpu(path, buf, sizeof buf);
    cr_assert_str_eq(buf, "unknown");
    ar_machine_cpu(NULL, buf, sizeof buf); /* this machine's */
    cr_assert(buf[0] && strchr(buf, '\n') == NULL, "'%s'", buf);
}

/* The BLAS is OpenBLAS or, with -Dblas=blis, BLIS (meson.build links it),
 * named with its version and the kernels this process runs. */
Test(bench, machine_blas_names_the_kernels_in_use)
{
    const char *core = blas_core_here();
    cr_assert_str_eq(ar_machine_blas_core(), core);
    char buf[160], want[160];
    ar_machine_blas(buf, sizeof buf);
    size_t nb = strlen(BLAS_NAME);
    cr_assert(strncmp(buf, BLAS_NAME, nb) == 0, "'%s'", buf);
    /* last, where the large products run on BLIS, " + BLIS ..." */
    const char *large = ar_cpu_large_products();
    char *last = strrchr(buf, '+');
    if (large) {
        cr_assert(last && last > buf && last[-1] == ' ' && strcmp(last + 2, large) == 0,
                  "'%s' does not end in ' + %s'", buf, large);
        last[-1] = '\0';
    }
    /* before it, where the small products run on libxsmm, " + libxsmm ..." */
    const char *small = ar_cpu_small_products();
    char *plus = strstr(buf, " + ");
    if (small) {
        cr_assert(plus && strcmp(plus + 3, small) == 0, "'%s' does not end in ' + %s'", buf, small);
        *plus = '\0';
    } else {
        cr_assert(!plus, "'%s' names a second library in a build without one", buf);
    }
    snprintf(want, sizeof want, " %s", core);
    size_t n = strlen(buf), k = strlen(want);
    cr_assert(n > nb + k && strcmp(buf + n - k, want) == 0, "'%s' does not end in the kernels '%s'", buf, core);
    /* the version: "OpenBLAS 0.3.21 Cooperlake", "BLIS 0.9.0 zen3" */
    cr_assert(buf[nb] >= '0' && buf[nb] <= '9', "no version in '%s'", buf);
}

/* `attnres bench` with the environment assignments env (shell text) and
 * ARGS, in an empty directory (it reads no data file): stdout only. */
static char *run_bench(const char *env, int *status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *run_bench(const char *env, int *status, const char *fmt, ...)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN is not set");
    char args[2048], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "{ cd '%s' && %s '%s' bench %s 2>/dev/null; }", tu_tmpdir(), env, bin, args);
    return tu_run(cmd, status);
}

#define BENCH_TINY                                                                                   \
    "--variants baseline --steps 1 --repeat 1 --warmup 0 --set model.d_model=32 --set model.n_layer=2 " \
    "--set model.n_head=2 --set model.d_ff=64 --set model.seq_len=16 --set train.batch_size=2"

/* bench --json's machine fields: cpu, blas and threads at the top level. */
static ar_json *bench_json(const char *env, int threads, const char **cpu, const char **blas, int *th,
                           const char **coretype)
{
    int st;
    char *out = run_bench(env, &st, "--json --threads %d " BENCH_TINY, threads);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j != NULL && j->type == AR_JSON_OBJ, "bench --json printed invalid JSON (%s):\n%s", e.msg, out);
    free(out);
    const ar_json *c = ar_json_get(j, "cpu"), *b = ar_json_get(j, "blas"), *t = ar_json_get(j, "threads"),
                  *ct = ar_json_get(j, "openblas_coretype");
    cr_assert(c && c->type == AR_JSON_STR && c->str[0], "no non-empty string 'cpu' in the bench JSON");
    cr_assert(b && b->type == AR_JSON_STR && b->str[0], "no non-empty string 'blas' in the bench JSON");
    cr_assert(t && t->type == AR_JSON_NUM, "no number 'threads' in the bench JSON");
    cr_assert(ct && (ct->type == AR_JSON_STR || ct->type == AR_JSON_NULL), "no 'openblas_coretype'");
    *cpu = c->str;
    *blas = b->str;
    *th = (int)t->num;
    *coretype = ct->type == AR_JSON_STR ? ct->str : NULL;
    return j;
}

/* Whether the OpenBLAS part of a "blas" string (before " + libxsmm ...",
 * the small products' library where built with it) ends in word. */
static int ends_with_word(const char *s, const char *word)
{
    const char *plus = strstr(s, " + ");
    size_t n = plus ? (size_t)(plus - s) : strlen(s), k = strlen(word);
    return n > k && s[n - k - 1] == ' ' && strncmp(s + n - k, word, k) == 0;
}

/* The JSON names this machine's CPU, the kernels OpenBLAS runs under the
 * same environment as this process, and the threads asked for; the table
 * prints the same. */
Test(bench, json_and_table_name_the_machine)
{
    char cpu_here[256], blas_here[160], build_here[64];
    ar_machine_cpu(NULL, cpu_here, sizeof cpu_here);
    ar_machine_blas(blas_here, sizeof blas_here);
    ar_machine_build(build_here, sizeof build_here);
    const char *core = blas_core_here();
    for (int threads = 1; threads <= 2; threads++) {
        const char *cpu, *blas, *ct;
        int th;
        ar_json *j = bench_json("", threads, &cpu, &blas, &th, &ct);
        const ar_json *build = ar_json_get(j, "build");
        cr_expect(build && build->type == AR_JSON_STR && !strcmp(build->str, build_here),
                  "JSON 'build' is not this build's '%s'", build_here);
        cr_expect_str_eq(cpu, cpu_here);
        cr_expect_str_eq(blas, blas_here);
        cr_expect(ends_with_word(blas, core), "blas '%s': not the kernels of this process, '%s'", blas, core);
        cr_expect_eq(th, threads, "--threads %d: JSON threads %d", threads, th);
        ar_json_free(j);
    }
    int st;
    char *out = run_bench("", &st, "--threads 2 " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    char want[512];
    snprintf(want, sizeof want, "machine: %s, %s, 2 threads, OPENBLAS_CORETYPE=", cpu_here, blas_here);
    cr_expect(strstr(out, want) != NULL, "no '%s' in the table:\n%s", want, out);
    snprintf(want, sizeof want, ", built for %s\n", build_here);
    cr_expect(strstr(out, want) != NULL, "no '%s' in the table:\n%s", want, out);
    free(out);
}

/* OPENBLAS_CORETYPE in bench's environment picks the kernels it reports: a
 * set other than this process's (Sandybridge, or Haswell where this
 * process already runs Sandybridge), so that a bench that named any other
 * kernels than its own would fail here. */
Test(bench, json_names_the_kernels_openblas_coretype_picks)
{
#if !defined(__x86_64__)
    cr_skip_test("OPENBLAS_CORETYPE=Sandybridge is an x86-64 kernel set");
#endif
#ifdef AR_BLAS_BLIS
    cr_skip_test("built with -Dblas=blis: OPENBLAS_CORETYPE picks nothing");
#else
    if (!strstr(openblas_get_config(), "DYNAMIC_ARCH"))
        cr_skip_test("OpenBLAS without DYNAMIC_ARCH runs the kernels it was built for");
    const char *forced = strcmp(openblas_get_corename(), "Sandybridge") ? "Sandybridge" : "Haswell";
    char env[64];
    snprintf(env, sizeof env, "OPENBLAS_CORETYPE=%s", forced);
    const char *cpu, *blas, *ct;
    int th;
    ar_json *j = bench_json(env, 2, &cpu, &blas, &th, &ct);
    cr_expect(ends_with_word(blas, forced), "%s: blas '%s'", env, blas);
    cr_expect(ct && !strcmp(ct, forced), "%s: openblas_coretype '%s'", env, ct ? ct : "null");
    cr_expect_eq(th, 2);
    ar_json_free(j);
#endif
}

/* The build's vector instructions, from the compiler's own macros: a
 * native build on this machine names its widest vector set, and a build
 * without FMA does not claim it. */
Test(bench, machine_build_names_the_compiled_instructions)
{
    char b[64];
    ar_machine_build(b, sizeof b);
#if defined(__x86_64__)
    cr_assert(!strncmp(b, "x86-64 ", 7), "'%s'", b);
#if defined(__AVX512F__)
    cr_expect(strstr(b, " avx512f") != NULL, "'%s'", b);
#elif defined(__AVX2__)
    cr_expect(strstr(b, " avx2") != NULL, "'%s'", b);
#elif !defined(__AVX__)
    cr_expect(strstr(b, " sse2") != NULL, "'%s'", b);
#endif
#ifdef __FMA__
    cr_expect(strstr(b, " fma") != NULL, "'%s'", b);
#else
    cr_expect(strstr(b, "fma") == NULL, "'%s'", b);
#endif
#endif
    char small[5];
    ar_machine_build(small, sizeof small);
    cr_expect_eq(strlen(small), 4, "cut to the buffer: '%s'", small);
}
