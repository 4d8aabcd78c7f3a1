/* Core training benchmark (issue: "Core ... on the CPU"): training tokens/s
 * and achieved GFLOP/s (docs/reference.md §6.2: 6N + 12 n_layer d T FLOPs per token) of
 * baseline, block (S = 4) and full at d_model 256, n_layer 6, n_head 4,
 * d_ff 688, T 256, batch 16, vocab 256, against the sgemm ceiling measured
 * in the same process with the same threads.
 *
 * usage: bench_core [STEPS] [THREADS]     (meson test --benchmark core) */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/model.h"
#include "lib/optim.h"
#include "core/clock.h"

/* Best of 5 square sgemm of size n: the machine's matrix-multiply ceiling. */
static double sgemm_gflops(int n)
{
    float *a = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float));
    float *c = calloc((size_t)n * n, sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t = ar_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double g = 2.0 * n * n * (double)n / (ar_now_s() - t) / 1e9;
        best = g > best ? g : best;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

typedef struct {
    const char *name;
    ar_res_kind kind;
    int block_size;
} variant;

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 5, threads = argc > 2 ? atoi(argv[2]) : 2;
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    double ceiling = sgemm_gflops(2048);
    printf("threads %d, OPENBLAS_CORETYPE=%s, sgemm ceiling %.1f GFLOP/s (2048^3, best of 5)\n",
           threads, ct ? ct : "(unset)", ceiling);
    printf("%-10s %10s %10s %9s %11s %12s\n", "variant", "tok/s", "GFLOP/s", "%ceiling", "vs baseline",
           "ms/step");
    variant vs[] = {{"baseline", AR_RES_BASELINE, 0}, {"block S=4", AR_RES_BLOCK, 4}, {"full", AR_RES_FULL, 0}};
    double base_tps = 0;
    for (int v = 0; v < 3; v++) {
        ar_config c;
        ar_config_defaults(&c);
        ar_model_cfg mc = c.model;
        mc.d_model = 256;
        mc.n_layer = 6;
        mc.n_head = 4;
        mc.d_ff = 688;
        mc.seq_len = 256;
        mc.residual.kind = vs[v].kind;
        mc.residual.block_size = vs[v].block_size;
        mc.residual.num_blocks = 0;
        int B = 16, N = B * mc.seq_len;
        ar_model *m;
        ar_err e;
        if (ar_model_create(&m, &mc, be, B, &e) != 0) {
            fprintf(stderr, "bench_core: %s\n", e.msg);
            return 1;
        }
        ar_model_init(m, 1);
        ar_adamw o;
        ar_adamw_init(&o, m);
        int32_t *in = malloc((size_t)N * sizeof(int32_t)), *tg = malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++) {
            in[i] = (i * 31 + 7) % 256;
            tg[i] = (i * 17 + 3) % 256;
        }
        double t0 = 0;
        for (int s = -2; s < steps; s++) { /* two warm-up steps */
            if (s == 0)
                t0 = ar_now_s();
            ar_model_zero_grad(m);
            ar_model_forward(m, in, tg, B, NULL);
            ar_model_backward(m, 1.0f / N);
            ar_adamw_step(&o, m, &c.train, 1e-3, ar_grad_norm(m));
        }
        double dt = (ar_now_s() - t0) / steps, tps = N / dt;
        double gf = tps * ar_model_flops_per_token(m) / 1e9;
        if (v == 0)
            base_tps = tps;
        printf("%-10s %10.0f %10.1f %8.1f%% %10.1f%% %12.1f\n", vs[v].name, tps, gf, 100 * gf / ceiling,
               100 * tps / base_tps, dt * 1e3);
        fflush(stdout);
        ar_adamw_free(&o);
        ar_model_free(m);
        free(in);
        free(tg);
    }
    return 0;
}
