/* The matrix products of one baseline training step at their own shapes,
 * on the CPU backend's matmul ops (CBLAS sgemm), against the 2048^3 sgemm
 * ceiling that `attnres bench` measures, to tell whether the products' shapes
 * are what keeps the baseline's step below 90% of that ceiling
 * (BENCHMARKS.md, "Where the step goes").
 *
 * A transformer block's products, N = batch x seq_len rows:
 *   q, k, v, o   x W^T with W d x d        (4 of them)
 *   gate, up     x W^T with W F x d        (2)
 *   down         x W^T with W d x F        (1)
 * and the output layer, x W^T with W V x d, once.  The forward is one sgemm
 * per product (matmul_fwd), the backward two (matmul_bwd: dx += dout W,
 * dW += dout^T x), so each product's FLOPs are 2 N in out forward and
 * 4 N in out backward.
 *
 * For every shape it prints the best-of-REPS rate of the forward and the
 * backward, and the same for the fused shapes q|k|v (W 3d x d) and gate|up
 * (W 2F x d), whose weights lie next to each other in the parameter arena.
 * Then the bound.  The step's FLOPs, by bench's formula, are the products'
 * P = 6 N (L (4 d^2 + 3 d F) + V d) and attention's A = 12 L d T N.  At
 * these rates the products take t_mm; attention takes at least A / ceiling;
 * if every other op (norms, SwiGLU, AdamW, ...) took no time at all, the
 * step would run at
 *     ((P + A) / ceiling) / (t_mm + A / ceiling)
 * of the ceiling: the most the baseline can reach with these products,
 * unfused and fused.
 *
 * usage: bench_gemm_shapes D F B T L V THREADS     (N = B T rows)
 *   bench-small:  bench_gemm_shapes 256 688 16 256 6 256 2
 *   bench-medium: see configs/bench-medium.yaml for its shape */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/backend.h"
#include "experiments/bench.h"
#include "core/clock.h"

#define REPS 9

static const ar_backend *be;

static float *rnd(size_t n, unsigned seed)
{
    float *p = be->alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u + seed * 97u) % 1000u) / 1000.0f - 0.5f;
    return p;
}

/* Best seconds of the forward and of the backward of x W^T, W outd x in. */
static void time_product(int N, int in, int outd, double *fwd, double *bwd)
{
    float *x = rnd((size_t)N * in, 1), *W = rnd((size_t)outd * in, 2), *y = rnd((size_t)N * outd, 3);
    float *dx = rnd((size_t)N * in, 4), *dW = rnd((size_t)outd * in, 5);
    *fwd = *bwd = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t = ar_now_s();
        be->matmul_fwd(y, x, W, N, in, outd);
        t = ar_now_s() - t;
        *fwd = t < *fwd ? t : *fwd;
        t = ar_now_s();
        be->matmul_bwd(dx, dW, y, x, W, 0, N, in, outd);
        t = ar_now_s() - t;
        *bwd = t < *bwd ? t : *bwd;
    }
    be->free(x), be->free(W), be->free(y), be->free(dx), be->free(dW);
}

typedef struct {
    const char *name;
    int in, outd, per_block; /* per_block 0: once per step */
} shape;

/* Prints each shape's rates; returns the step's seconds in products. */
static double step_products(const char *title, const shape *s, int ns, int N, int L, double ceil)
{
    printf("%s\n%-10s %6s %6s %9s %9s %10s %9s\n", title, "product", "in", "out", "fwd GF/s", "bwd GF/s",
           "count/step", "ms/step");
    double total = 0, flops = 0;
    for (int i = 0; i < ns; i++) {
        double f, b, fl = 2.0 * N * s[i].in * s[i].outd;
        time_product(N, s[i].in, s[i].outd, &f, &b);
        int count = s[i].per_block ? s[i].per_block * L : 1;
        double t = count * (f + b);
        total += t;
        flops += count * 3 * fl;
        printf("%-10s %6d %6d %9.1f %9.1f %10d %9.2f\n", s[i].name, s[i].in, s[i].outd, fl / f / 1e9,
               2 * fl / b / 1e9, count, 1e3 * t);
    }
    printf("products: %.2f ms a step, %.1f GFLOP/s: %.1f%% of the ceiling\n", 1e3 * total, flops / total / 1e9,
           100 * flops / total / 1e9 / ceil);
    return total;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: bench_gemm_shapes D F B T L V THREADS\n");
        return 2;
    }
    int d = atoi(argv[1]), F = atoi(argv[2]), B = atoi(argv[3]), T = atoi(argv[4]), L = atoi(argv[5]),
        V = atoi(argv[6]), threads = atoi(argv[7]), N = B * T;
    if (d <= 0 || F <= 0 || B <= 0 || T <= 0 || L <= 0 || V <= 0 || threads <= 0) {
        fprintf(stderr, "bench_gemm_shapes: every argument must be a positive integer\n");
        return 2;
    }
    omp_set_num_threads(threads);
    be = ar_backend_cpu();
    be->set_threads(threads); /* OpenBLAS's and BLIS's threads too, as attnres bench sets them */
    const char *ct = getenv("OPENBLAS_CORETYPE");
    double ceil = ar_bench_sgemm_gflops(AR_BENCH_CEILING_N, AR_BENCH_CEILING_REPS); /* as attnres bench */
    printf("threads %d, OPENBLAS_CORETYPE=%s, sgemm ceiling %.1f GFLOP/s (2048^3, best of 5)\n", threads,
           ct ? ct : "(unset)", ceil);
    printf("d %d, d_ff %d, N %d x %d rows, %d blocks, vocab %d; best of %d\n\n", d, F, B, T, L, V, REPS);
    double prod_flops = 6.0 * N * ((4.0 * d * d + 3.0 * d * F) * L + (double)V * d),
           attn_flops = 12.0 * L * d * T * N;
    shape unfused[] = {{"q,k,v,o", d, d, 4}, {"gate,up", d, F, 2}, {"down", F, d, 1}, {"lm_head", d, V, 0}};
    shape fused[] = {{"qkv", d, 3 * d, 1}, {"o", d, d, 1}, {"gate|up", d, 2 * F, 1}, {"down", F, d, 1},
                     {"lm_head", d, V, 0}};
    double tu = step_products("as the model runs them:", unfused, 4, N, L, ceil);
    printf("\n");
    double tf = step_products("q|k|v and gate|up fused:", fused, 5, N, L, ceil);
    double tp = prod_flops / (ceil * 1e9), ta = attn_flops / (ceil * 1e9);
    printf("\nthe step: products %.3g FLOPs, attention %.3g (bench's formula); %.2f ms at the ceiling\n",
           prod_flops, attn_flops, 1e3 * (tp + ta));
    printf("bound with every other op free and attention at the ceiling: %.1f%% of the ceiling unfused, "
           "%.1f%% fused\n",
           100 * (tp + ta) / (tu + ta), 100 * (tp + ta) / (tf + ta));
    return 0;
}
