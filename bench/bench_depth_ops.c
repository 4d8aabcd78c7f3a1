/* Time per training step spent in each depth-attention op and in zero/add
 * and in the RMSNorms (forward and backward) that AttnRes fuses into them
 * (BENCHMARKS.md, "Depth-attention time per step"): wraps the CPU backend's
 * table with timers and trains the medium bench shape on synthetic tokens.
 *
 * usage: bench_depth_ops KIND STEPS [S] [N]
 *   KIND 0 baseline, 1 full, 2 block (block_size S, or num_blocks N if N > 0);
 *   the first step is not counted. */
#include "lib/model.h"
#include "lib/optim.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static const ar_backend *cpu;
static ar_backend W;
static double T[16];
#define WRAP(idx, name, params, args)                                                              \
    static void w_##name params {                                                                  \
        double t = now_s();                                                                        \
        cpu->name args;                                                                            \
        T[idx] += now_s() - t;                                                                     \
    }
WRAP(0, depth_fwd_inter,
     (float *const *o, float *const *lse, float *const *alpha, const int *n, float *const *rs,
      const float *const *src, int k, const float *const *w, const float *const *g, int C,
      const float *ng, float *xn, float *nrstd, int N, int d),
     (o, lse, alpha, n, rs, src, k, w, g, C, ng, xn, nrstd, N, d))
WRAP(1, depth_fwd_merge,
     (float *h, float *lse, float *alpha, int n, int k, float *const *rsi,
      const float *const *intra, const float *w, const float *g, const float *ng, float *xn,
      float *nrstd, int N, int d),
     (h, lse, alpha, n, k, rsi, intra, w, g, ng, xn, nrstd, N, d))
WRAP(3, depth_bwd_intra,
     (float *const *dintra, float *dw, float *dg, float *cdot, float *dh, const float *h,
      const float *dxn, const float *xn, const float *ng, float *dng,
      const float *nrstd, const float *alpha, const float *lse, int n, int k,
      const float *const *rsi, const float *const *src, const float *w, const float *g, int N,
      int d),
     (dintra, dw, dg, cdot, dh, h, dxn, xn, ng, dng, nrstd, alpha, lse, n, k, rsi, src, w,
      g, N, d))
WRAP(4, depth_bwd_inter,
     (float *const *dsrc, float *const *dw, float *const *dg, const float *const *dh,
      const float *const *cdot, const float *const *alpha, const float *const *lse, const int *n,
      const float *const *rs, const float *const *src, int k, const float *const *w,
      const float *const *g, int C, int ow, int N, int d),
     (dsrc, dw, dg, dh, cdot, alpha, lse, n, rs, src, k, w, g, C, ow, N, d))
WRAP(7, rmsnorm_fwd, (float *out, float *rstd, const float *x, const float *g, int N, int d),
     (out, rstd, x, g, N, d))
WRAP(8, rmsnorm_bwd,
     (float *dx, float *dg, const float *dout, const float *x, const float *g, const float *rstd,
      int ow, int N, int d),
     (dx, dg, dout, x, g, rstd, ow, N, d))
static void w_zero(void *p, size_t b) {
    double t = now_s();
    cpu->zero(p, b);
    T[5] += now_s() - t;
}
static void w_add(float *y, const float *x, size_t n) {
    double t = now_s();
    cpu->add(y, x, n);
    T[6] += now_s() - t;
}
int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_depth_ops KIND STEPS [S] [N]\n");
        return 2;
    }
    int kind = atoi(argv[1]);
    int steps = argc > 2 ? atoi(argv[2]) : 1;
    int S = argc > 3 ? atoi(argv[3]) : 2;
    int nb = argc > 4 ? atoi(argv[4]) : 0;
    cpu = ar_backend_cpu();
    W = *cpu;
    W.depth_fwd_inter = w_depth_fwd_inter;
    W.depth_fwd_merge = w_depth_fwd_merge;
    W.depth_bwd_intra = w_depth_bwd_intra;
    W.depth_bwd_inter = w_depth_bwd_inter;
    W.zero = w_zero;
    W.add = w_add;
    W.rmsnorm_fwd = w_rmsnorm_fwd;
    W.rmsnorm_bwd = w_rmsnorm_bwd;
    const ar_backend *be = &W;
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
            for (int i = 0; i < 16; i++)
                T[i] = 0;
            tot = 0;
        }
        double t0 = now_s();
        ar_model_zero_grad(m);
        ar_model_forward(m, in, tg, B, NULL);
        ar_model_backward(m, 1.0f / N);
        tot += now_s() - t0;
    }
    int ns = steps - 1;
    printf("kind %d step %.1f ms | fwd_inter %.1f merge %.1f bwd_intra %.1f "
           "bwd_inter %.1f zero %.1f add %.1f rmsnorm_fwd %.1f rmsnorm_bwd %.1f ms/step\n",
           kind, 1e3 * tot / ns, 1e3 * T[0] / ns, 1e3 * T[1] / ns, 1e3 * T[3] / ns,
           1e3 * T[4] / ns, 1e3 * T[5] / ns, 1e3 * T[6] / ns, 1e3 * T[7] / ns, 1e3 * T[8] / ns);
    return 0;
}
