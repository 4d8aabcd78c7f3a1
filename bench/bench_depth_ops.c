/* Time per training step spent in each depth-attention op and in zero/add
 * and in the RMSNorms (forward and backward) that AttnRes fuses into them
 * (BENCHMARKS.md, "Depth-attention time per step"): the CPU backend's table
 * under the op timer of `attnres bench --ops` (experiments/op_timer.h), training
 * the medium bench shape on synthetic tokens.
 *
 * usage: bench_depth_ops KIND STEPS [S] [N]
 *   KIND 0 baseline, 1 full, 2 block (block_size S, or num_blocks N if N > 0);
 *   the first step is not counted. */
#include "lib/model.h"
#include "lib/optim.h"
#include "experiments/op_timer.h"
#include "core/clock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static ar_op_tally T;

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_depth_ops KIND STEPS [S] [N]\n");
        return 2;
    }
    int kind = atoi(argv[1]);
    int steps = argc > 2 ? atoi(argv[2]) : 1;
    int S = argc > 3 ? atoi(argv[3]) : 2;
    int nb = argc > 4 ? atoi(argv[4]) : 0;
    const ar_backend *be = ar_op_timer(ar_backend_cpu()); /* experiments/op_timer.h */
    ar_op_timer_into(&T);
    be->set_threads(2);
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg mc = c.model;
    mc.d_model = 512;
    mc.n_layer = 8;
    mc.n_head = 8;
    mc.d_ff = 1376;
    mc.seq_len = 512;
    mc.residual.kind = kind;
    mc.residual.block_size = nb ? 0 : S;
    mc.residual.num_blocks = nb;
    int B = 8, N = B * mc.seq_len;
    ar_model *m;
    ar_err e;
    if (steps < 2 || ar_model_create(&m, &mc, be, B, &e)) {
        fprintf(stderr, "bench_depth_ops: %s\n", steps < 2 ? "STEPS must be >= 2" : e.msg);
        return 1;
    }
    ar_model_init(m, 1);
    int32_t *in = malloc(N * 4), *tg = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        in[i] = (i * 31 + 7) % 256;
        tg[i] = (i * 17 + 3) % 256;
    }
    double tot = 0;
    for (int s = 0; s < steps; s++) {
        if (s == 1) {
            memset(&T, 0, sizeof T);
            tot = 0;
        }
        double t0 = ar_now_s();
        ar_model_zero_grad(m);
        ar_model_forward(m, in, tg, B, NULL);
        ar_model_backward(m, 1.0f / N);
        tot += ar_now_s() - t0;
    }
    /* the depth ops that ran (every depth_* op of lib/ops.def, so a new
     * one is timed too), then zero/add and the RMSNorms */
    int ns = steps - 1;
    printf("kind %d step %.1f ms |", kind, 1e3 * tot / ns);
    for (int op = 0; op < AR_OP_COUNT; op++)
        if (strncmp(ar_op_name(op), "depth_", 6) == 0 && T.calls[op] > 0)
            printf(" %s %.1f", ar_op_name(op) + 6, 1e3 * T.seconds[op] / ns);
    const int other[] = {AR_OP_zero, AR_OP_add, AR_OP_rmsnorm_fwd, AR_OP_rmsnorm_bwd};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        printf(" %s %.1f", ar_op_name(other[i]), 1e3 * T.seconds[other[i]] / ns);
    printf(" ms/step\n");
    return 0;
}
