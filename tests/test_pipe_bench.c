/* attnres bench --pipeline under mpirun (experiments/pipe_bench.h,
 * cmd/bench_pipeline.c): on a tiny model the bytes every variant moved
 * equal the plan's count exactly, forward and back; caching never moves
 * more than the naive history; the baseline moves C - 1 rows a
 * micro-batch; the formulas and the simulated bubble are the plan's; every
 * rank reports its peak memory.  And the errors: a --micro-batches the
 * schedule cannot run, a world that --pipeline does not divide, and bench
 * without --pipeline under mpirun.  Skipped where this build has no MPI or
 * mpirun is missing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"
#include "mpiutil.h"
#include "parallel/pipe_plan.h"
#include "testutil.h"

/* n_layer 4: L = 8 sublayers, C = 4 chunks of 2 */
#define TINY                                                                                             \
    "--set model.d_model=32 --set model.n_layer=4 --set model.n_head=2 --set model.d_ff=64 "             \
    "--set model.seq_len=16 --set train.batch_size=2 --set train.threads=1"
#define L_TINY 8
#define ROW_BYTES (4.0 * 2 * 16 * 32) /* B T d floats */

static double num(const ar_json *o, const char *key)
{
    const ar_json *v = ar_json_get(o, key);
    cr_assert(v, "no '%s' in the bench JSON", key);
    if (v->type == AR_JSON_NULL)
        return NAN;
    cr_assert_eq(v->type, AR_JSON_NUM, "'%s' is not a number", key);
    return v->num;
}

static const char *str(const ar_json *o, const char *key)
{
    const ar_json *v = ar_json_get(o, key);
    cr_assert(v && v->type == AR_JSON_STR, "no string '%s' in the bench JSON", key);
    return v->str;
}

static int boolean(const ar_json *o, const char *key)
{
    const ar_json *v = ar_json_get(o, key);
    cr_assert(v && v->type == AR_JSON_BOOL, "no boolean '%s' in the bench JSON", key);
    return v->boolean;
}

/* The result of variant `name` with caching `cache`, or NULL. */
static const ar_json *find(const ar_json *res, const char *name, int cache)
{
    for (int i = 0; i < res->n; i++)
        if (strcmp(str(&res->items[i], "name"), name) == 0 && boolean(&res->items[i], "cache_blocks") == cache)
            return &res->items[i];
    return NULL;
}

Test(pipe_bench, measured_bytes_equal_the_plan_for_every_variant, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = tu_tmpdir();
    int st;
    char *o = mu_sh(dir, &st,
                    "(" MPIRUN "2 '%s' bench --pipeline 2 --virtual 2 --json --steps 1 --warmup 0 " TINY
                    " > pb.json 2> pb.err)",
                    mu_bin());
    size_t n;
    char *err = tu_read_file(tu_path(dir, "pb.err"), &n);
    cr_assert_eq(st, 0, "bench --pipeline exited %d:\n%s%s", st, o, err);
    char *text = tu_read_file(tu_path(dir, "pb.json"), &n);
    ar_err e;
    ar_json *j = ar_json_parse(text, n, &e);
    cr_assert(j, "bench --pipeline --json printed invalid JSON (%s):\n%s", e.msg, text);

    cr_expect_str_eq(str(j, "mode"), "pipeline");
    cr_expect_eq(num(j, "ranks"), 2);
    cr_expect_eq(num(j, "pipeline"), 2);
    cr_expect_eq(num(j, "virtual"), 2);
    int C = (int)num(j, "chunks"), A = (int)num(j, "micro_batches_per_step"), M = (int)num(j, "micro_batches");
    cr_expect_eq(C, 4);
    cr_expect_eq(num(j, "data_parallel"), 1);
    cr_expect_eq(A, M);
    cr_expect(M >= 2 && M % 2 == 0, "%d micro-batches do not fit P = 2, V = 2", M);
    cr_expect_eq(num(j, "row_bytes"), ROW_BYTES);
    double tokens = num(j, "tokens_per_step");
    cr_expect_eq(tokens, (double)A * 2 * 16);

    const ar_json *res = ar_json_get(j, "results");
    cr_assert(res && res->type == AR_JSON_ARR);
    /* baseline once; block2, block4, block8, full cached and naive */
    cr_assert_eq(res->n, 9, "%d results, expected 9", res->n);
    for (int i = 0; i < res->n; i++) {
        const ar_json *r = &res->items[i];
        const char *name = str(r, "name");
        int cache = boolean(r, "cache_blocks");
        double pred = num(r, "predicted_bytes");
        cr_expect_eq(num(r, "fwd_bytes"), pred, "%s (cache %d): forward %.0f bytes, predicted %.0f", name, cache,
                     num(r, "fwd_bytes"), pred);
        cr_expect_eq(num(r, "bwd_bytes"), pred, "%s (cache %d): backward %.0f bytes, predicted %.0f", name, cache,
                     num(r, "bwd_bytes"), pred);
        cr_expect(boolean(r, "match"), "%s (cache %d): no match", name, cache);
        double rows = num(r, "predicted_rows_per_mb");
        cr_expect_eq(num(r, "rows_per_mb"), rows, "%s: measured rows", name);
        cr_expect_eq(pred, rows * A * ROW_BYTES, "%s: predicted bytes are not rows x micro-batches x row", name);
        cr_expect_eq(num(r, "fwd_bytes_per_token"), pred / tokens, "%s: bytes per token", name);

        /* the plan's own numbers */
        int base = strcmp(name, "baseline") == 0;
        int S = base ? 0 : (int)num(r, "block_size");
        ar_pipe_plan pl;
        cr_assert_eq(ar_pipe_plan_make(&pl, L_TINY, S, base, 2, 2, M, cache, AR_PIPE_1F1B, &e), 0, "%s", e.msg);
        cr_expect_eq(rows, (double)ar_pipe_rows_per_mb(&pl), "%s: rows per micro-batch", name);
        double mk, bub;
        cr_assert_eq(ar_pipe_simulate(&pl, 1, 2, &mk, &bub, NULL, &e), 0, "%s", e.msg);
        cr_expect_eq(num(r, "simulated_bubble"), bub, "%s: simulated bubble", name);
        if (base) {
            cr_expect_eq(rows, C - 1, "the baseline moves %g rows a micro-batch, expected C - 1 = %d", rows, C - 1);
            cr_expect(isnan(num(r, "eq7_rows_per_mb")) && isnan(num(r, "eq8_rows_per_mb")));
        } else {
            cr_expect_eq(num(r, "eq7_rows_per_mb"), ar_pipe_eq7(&pl), "%s: eq. 7", name);
            cr_expect_eq(num(r, "eq8_rows_per_mb"), ar_pipe_eq8(&pl), "%s: eq. 8", name);
            cr_expect_str_eq(str(r, "formula"), cache ? "eq8" : "eq7");
        }
        ar_pipe_plan_free(&pl);

        double b = num(r, "bubble");
        cr_expect(b >= 0 && b <= 1, "%s: bubble %g", name, b);
        cr_expect(num(r, "step_ms") > 0, "%s: step time", name);
        const ar_json *peak = ar_json_get(r, "rank_peak_rss_mib");
        cr_assert(peak && peak->type == AR_JSON_ARR && peak->n == 2, "%s: not one peak per rank", name);
        for (int k = 0; k < 2; k++)
            cr_expect(peak->items[k].type == AR_JSON_NUM && peak->items[k].num > 1, "%s: rank %d's peak", name, k);
    }
    /* caching never moves more than the whole history */
    const char *attn[] = {"block2", "block4", "block8", "full"};
    for (int i = 0; i < 4; i++) {
        const ar_json *c = find(res, attn[i], 1), *nv = find(res, attn[i], 0);
        cr_assert(c && nv, "%s: cached or naive missing", attn[i]);
        cr_expect_leq(num(c, "rows_per_mb"), num(nv, "rows_per_mb"), "%s: cached moves more than naive", attn[i]);
    }
    cr_expect_lt(num(find(res, "full", 1), "rows_per_mb"), num(find(res, "full", 0), "rows_per_mb"));
    cr_expect(!find(res, "baseline", 0), "the baseline runs once");
    ar_json_free(j);
    free(text);
    free(err);
    free(o);
}

/* One failing command: its exit status, and the message once. */
static void refused(const char *dir, const char *launch, const char *opts, int status, const char *want)
{
    int st;
    char *o = mu_sh(dir, &st, "%s'%s' bench %s " TINY " 2>&1", launch, mu_bin(), opts);
    cr_expect_eq(st, status, "%s: exit %d, expected %d\n%s", opts, st, status, o);
    const char *first = strstr(o, want);
    cr_expect(first, "%s: the error does not say \"%s\":\n%s", opts, want, o);
    cr_expect(!first || !strstr(first + 1, want), "%s: the error is printed more than once:\n%s", opts, o);
    cr_expect(strstr(o, "attnres: error: "), "%s:\n%s", opts, o);
    free(o);
}

Test(pipe_bench, errors_name_what_is_wrong, .timeout = 300)
{
    mu_need_mpi();
    const char *dir = tu_tmpdir();
    refused(dir, MPIRUN_REFUSED "2 ", "--pipeline 2 --virtual 2 --micro-batches 3", 2,
            "'--micro-batches' 3 does not fit the interleaved schedule of 2 stages");
    refused(dir, MPIRUN_REFUSED "2 ", "--pipeline 2 --micro-batches 1", 2, "'--micro-batches' 1 is too few for 2 stages");
    refused(dir, MPIRUN_REFUSED "2 ", "", 2, "'attnres bench' runs in one process: start it without mpirun");
    refused(dir, MPIRUN_REFUSED "2 ", "--pipeline 4", 1, "'--pipeline' 4 does not divide the 2 ranks mpirun started");
    refused(dir, "", "--pipeline 2", 1, "'--pipeline' 2 does not divide the 1 rank of this process");
    refused(dir, "", "--virtual 2", 2, "'--virtual' goes with '--pipeline P'");
    refused(dir, MPIRUN_REFUSED "2 ", "--pipeline 2 --variants baseline,block8x", 2, "unknown variant 'block8x'");
    refused(dir, MPIRUN_REFUSED "2 ", "--pipeline 2 --repeat 3", 2, "'--repeat' is an option of the one-process bench");
}
