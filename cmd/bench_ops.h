/* attnres bench --ops: where a step's time goes, op by op, and the gap
 * between the step and its counted FLOPs at the ceiling: the sgemm
 * ceiling on the CPU, the bf16 peak on a device (attnres-bench(1) OPS). */
#ifndef AR_CMD_BENCH_OPS_H
#define AR_CMD_BENCH_OPS_H

#include "../formats/json.h"
#include "../experiments/op_timer.h"

/* One variant's tallies over its timed rounds. */
typedef struct {
    const char *label;
    ar_op_tally ops[2];   /* [0] training rounds, [1] forward-only rounds */
    double seconds[2];    /* the rounds' wall time */
    long steps;           /* steps in those rounds (each pass) */
} bench_ops_variant;

/* An op's time less its counted FLOPs at the ceiling (GFLOP/s), in
 * seconds: the time it takes beyond what the ceiling would. */
double bench_ops_gap(const ar_op_tally *t, int op, double ceiling_gflops);

/* The two tables (training, forward-only: ms per step by op, every op any
 * variant called) and the training step's gap to the ceiling by op; what
 * names the ceiling ("the sgemm ceiling", "the device's bf16 peak"). */
void bench_ops_print(const bench_ops_variant *v, int n, double ceiling_gflops, const char *what);

/* The same as JSON: "ops": {"train": {...}, "infer": {...}} for one variant,
 * written as the value of the key the caller has just written. */
void bench_ops_json(ar_jw *w, const bench_ops_variant *v, double ceiling_gflops);

#endif
