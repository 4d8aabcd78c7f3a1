/* attnres bench --ops (bench_ops.h).
 *
 * With t_op an op's time per step and F_op its counted FLOPs per step
 * (matrix products and attention; experiments/op_timer.h), the gap of an op to
 * the sgemm ceiling R is t_op - F_op / R: all of its time for an op with no
 * counted FLOPs, the shortfall of its rate for one with them.  The gaps of
 * all ops plus the time outside them add up to the step's time less the
 * time its counted FLOPs would take at the ceiling, which is the step's
 * distance from 100% of the ceiling. */
#include "bench_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

double bench_ops_gap(const ar_op_tally *t, int op, double ceiling_gflops)
{
    return t->seconds[op] - (ceiling_gflops > 0 ? t->flops[op] / (ceiling_gflops * 1e9) : 0);
}

static double sum_seconds(const ar_op_tally *t)
{
    double s = 0;
    for (int op = 0; op < AR_OP_COUNT; op++)
        s += t->seconds[op];
    return s;
}

static double sum_flops(const ar_op_tally *t)
{
    double f = 0;
    for (int op = 0; op < AR_OP_COUNT; op++)
        f += t->flops[op];
    return f;
}

static int used(const bench_ops_variant *v, int n, int pass, int op)
{
    for (int i = 0; i < n; i++)
        if (v[i].ops[pass].calls[op] > 0)
            return 1;
    return 0;
}

static double per_step_ms(const bench_ops_variant *v, double seconds) { return 1e3 * seconds / (double)v->steps; }

static void header(const bench_ops_variant *v, int n, const char *first)
{
    printf("%-22s", first);
    for (int i = 0; i < n; i++)
        printf(" %17s", v[i].label);
    printf("\n");
}

static void pass_table(const bench_ops_variant *v, int n, int pass, double ceiling)
{
    printf("\n%s: ms per step by op (mean over the timed rounds), and share of the step\n",
           pass == 0 ? "training step" : "forward-only pass");
    header(v, n, "op");
    for (int op = 0; op < AR_OP_COUNT; op++) {
        if (!used(v, n, pass, op))
            continue;
        printf("%-22s", ar_op_name(op));
        for (int i = 0; i < n; i++) {
            double s = v[i].ops[pass].seconds[op];
            printf(" %9.2f (%4.1f%%)", per_step_ms(&v[i], s), 100.0 * s / v[i].seconds[pass]);
        }
        printf("\n");
    }
    printf("%-22s", "(between the ops)");
    for (int i = 0; i < n; i++) {
        double s = v[i].seconds[pass] - sum_seconds(&v[i].ops[pass]);
        printf(" %9.2f (%4.1f%%)", per_step_ms(&v[i], s), 100.0 * s / v[i].seconds[pass]);
    }
    printf("\n%-22s", "step");
    for (int i = 0; i < n; i++)
        printf(" %9.2f         ", per_step_ms(&v[i], v[i].seconds[pass]));
    printf("\n%-22s", "GFLOP/s of the step");
    for (int i = 0; i < n; i++)
        printf(" %9.1f         ", sum_flops(&v[i].ops[pass]) / v[i].seconds[pass] / 1e9);
    printf("\n");
    if (!(ceiling > 0))
        return;
    printf("%-22s", "% of the ceiling");
    for (int i = 0; i < n; i++)
        printf(" %8.1f%%         ", 100.0 * sum_flops(&v[i].ops[pass]) / v[i].seconds[pass] / (ceiling * 1e9));
    printf("\n");
}

static void gap_table(const bench_ops_variant *v, int n, double ceiling, const char *what)
{
    printf("\ntraining step: gap to %s (%.1f GFLOP/s) by op, ms per step and share of the step:\n"
           "an op's time less its counted FLOPs at the ceiling\n",
           what, ceiling);
    header(v, n, "op");
    for (int op = 0; op < AR_OP_COUNT; op++) {
        if (!used(v, n, 0, op))
            continue;
        printf("%-22s", ar_op_name(op));
        for (int i = 0; i < n; i++) {
            double g = bench_ops_gap(&v[i].ops[0], op, ceiling);
            printf(" %9.2f (%4.1f%%)", per_step_ms(&v[i], g), 100.0 * g / v[i].seconds[0]);
        }
        printf("\n");
    }
    printf("%-22s", "(between the ops)");
    for (int i = 0; i < n; i++) {
        double s = v[i].seconds[0] - sum_seconds(&v[i].ops[0]);
        printf(" %9.2f (%4.1f%%)", per_step_ms(&v[i], s), 100.0 * s / v[i].seconds[0]);
    }
    printf("\n%-22s", "gap, all");
    for (int i = 0; i < n; i++) {
        double g = v[i].seconds[0] - sum_flops(&v[i].ops[0]) / (ceiling * 1e9);
        printf(" %9.2f (%4.1f%%)", per_step_ms(&v[i], g), 100.0 * g / v[i].seconds[0]);
    }
    printf("\n");
}

void bench_ops_print(const bench_ops_variant *v, int n, double ceiling_gflops, const char *what)
{
    pass_table(v, n, 0, ceiling_gflops);
    pass_table(v, n, 1, ceiling_gflops);
    if (ceiling_gflops > 0)
        gap_table(v, n, ceiling_gflops, what);
    printf("\ncounted FLOPs: matrix products (2 per multiply-add, dx and dW in the backward) and attention\n"
           "(4 B nh T^2 hd forward, twice that backward); GFLOP/s of the step counts only those\n");
}

static void pass_json(ar_jw *w, const bench_ops_variant *v, int pass, double ceiling)
{
    const ar_op_tally *t = &v->ops[pass];
    ar_jw_obj_begin(w);
    ar_jw_key(w, "step_ms");
    ar_jw_num(w, per_step_ms(v, v->seconds[pass]));
    ar_jw_key(w, "between_ops_ms");
    ar_jw_num(w, per_step_ms(v, v->seconds[pass] - sum_seconds(t)));
    ar_jw_key(w, "counted_gflop_per_step");
    ar_jw_num(w, sum_flops(t) / 1e9 / (double)v->steps);
    ar_jw_key(w, "ops");
    ar_jw_arr_begin(w);
    for (int op = 0; op < AR_OP_COUNT; op++) {
        if (t->calls[op] == 0)
            continue;
        ar_jw_obj_begin(w);
        ar_jw_key(w, "op");
        ar_jw_str(w, ar_op_name(op));
        ar_jw_key(w, "calls_per_step");
        ar_jw_num(w, (double)t->calls[op] / (double)v->steps);
        ar_jw_key(w, "ms_per_step");
        ar_jw_num(w, per_step_ms(v, t->seconds[op]));
        ar_jw_key(w, "gflop_per_step");
        ar_jw_num(w, t->flops[op] / 1e9 / (double)v->steps);
        ar_jw_key(w, "gap_ms_per_step");
        if (ceiling > 0)
            ar_jw_num(w, per_step_ms(v, bench_ops_gap(t, op, ceiling)));
        else
            ar_jw_null(w);
        ar_jw_obj_end(w);
    }
    ar_jw_arr_end(w);
    ar_jw_obj_end(w);
}

void bench_ops_json(ar_jw *w, const bench_ops_variant *v, double ceiling_gflops)
{
    ar_jw_obj_begin(w);
    ar_jw_key(w, "train");
    pass_json(w, v, 0, ceiling_gflops);
    ar_jw_key(w, "infer");
    pass_json(w, v, 1, ceiling_gflops);
    ar_jw_obj_end(w);
}
