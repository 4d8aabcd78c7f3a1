/* The linear layers' products of one training step on cuBLAS, at their own
 * shapes, in the three ways a bf16 trainer can store their operands, to
 * tell what storing activations and a weight copy in bf16 would gain over
 * the CUDA backend's products today (lib/cuda/matmul_cuda.cu):
 *
 *   fp32 in   fp32 A, B, C; compute CUBLAS_COMPUTE_32F_FAST_16BF (cuBLAS
 *             rounds A and B to bf16 inside): the backend's bf16 mode
 *   bf16 in   bf16 A, B; fp32 C; compute CUBLAS_COMPUTE_32F
 *   bf16 all  bf16 A, B, C; compute CUBLAS_COMPUTE_32F (llm.c's floatX)
 *
 * and the rounding of an fp32 N x in activation to bf16 on its own (what
 * "bf16 in" costs where the activation is made in fp32).  N = B T rows;
 * per product, as the backend calls it (row-major; matmul_cuda.cu's top
 * comment has the mapping onto column-major cuBLAS):
 *   forward   out = x W^T         N x outd, K = in
 *   dx        dx += dout W        N x in,   K = outd
 *   dW        dW += dout^T x      outd x in, K = N
 * Each is timed with CUDA events, the best of REPS after a warm-up, on
 * random operands; prints TFLOP/s per product and way, then one step's
 * total time of the products (L layers of q|k|v, o, gate|up, down and
 * the output layer) each way.
 *
 * usage: bench_gemm_cuda D F B T L V     (bench-gpt2-small: 768 2048 16 1024 12 50304) */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#define REPS 10

#define CK(x)                                                                                                   \
    do {                                                                                                        \
        cudaError_t e_ = (x);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "bench_gemm_cuda: %s: %s\n", #x, cudaGetErrorString(e_));                           \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)
#define CB(x)                                                                                                   \
    do {                                                                                                        \
        cublasStatus_t s_ = (x);                                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                      \
            fprintf(stderr, "bench_gemm_cuda: %s: cuBLAS status %d\n", #x, (int)s_);                            \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)

__global__ static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = (float)(h & 0xffff) / 65536.0f - 0.5f;
    }
}

__global__ static void to_bf16(__nv_bfloat16 *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

enum { FP32_IN, BF16_IN, BF16_ALL, WAYS };
static const char *way_name[WAYS] = {"fp32 in", "bf16 in", "bf16 all"};

static cublasHandle_t h;
static cudaEvent_t e0, e1;

/* the operands of the largest product, in both types */
static float *fA, *fB, *fC;
static __nv_bfloat16 *hA, *hB, *hC;

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* row-major C (M x N) = op(A) op(B) (+ C), as matmul_cuda.cu's ar_cu_gemm */
static void gemm(int way, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float beta)
{
    float one = 1.0f;
    int bf = way != FP32_IN;
    CB(cublasGemmEx(h, op(tb), op(ta), N, M, K, &one, bf ? (const void *)hB : fB, bf ? CUDA_R_16BF : CUDA_R_32F,
                    ldb, bf ? (const void *)hA : fA, bf ? CUDA_R_16BF : CUDA_R_32F, lda, &beta,
                    way == BF16_ALL ? (void *)hC : fC, way == BF16_ALL ? CUDA_R_16BF : CUDA_R_32F, ldc,
                    way == FP32_IN ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* best seconds of REPS calls of one product */
static double time_gemm(int way, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float beta)
{
    gemm(way, ta, tb, M, N, K, lda, ldb, ldc, beta);
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        CK(cudaEventRecord(e0));
        gemm(way, ta, tb, M, N, K, lda, ldb, ldc, beta);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms * 1e-3 < best ? ms * 1e-3 : best;
    }
    return best;
}

static double time_round(size_t n)
{
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
        CK(cudaEventRecord(e0));
        to_bf16<<<1024, 256>>>(hA, fA, n);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r)
            best = ms * 1e-3 < best ? ms * 1e-3 : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: bench_gemm_cuda D F B T L V\n");
        return 2;
    }
    int d = atoi(argv[1]), F = atoi(argv[2]), B = atoi(argv[3]), T = atoi(argv[4]), L = atoi(argv[5]),
        V = atoi(argv[6]);
    if (d <= 0 || F <= 0 || B <= 0 || T <= 0 || L <= 0 || V <= 0) {
        fprintf(stderr, "bench_gemm_cuda: D F B T L V must be positive integers\n");
        return 2;
    }
    int N = B * T;
    struct {
        const char *name;
        int in, outd, per_step; /* products of this shape a step */
    } sh[] = {{"q|k|v", d, 3 * d, L}, {"o", d, d, L}, {"gate|up", d, 2 * F, L}, {"down", F, d, L}, {"head", d, V, 1}};
    int ns = sizeof sh / sizeof *sh;
    size_t most = 0;
    for (int s = 0; s < ns; s++) {
        size_t a = (size_t)N * (sh[s].in > sh[s].outd ? sh[s].in : sh[s].outd),
               w = (size_t)sh[s].in * sh[s].outd;
        most = a > most ? a : most;
        most = w > most ? w : most;
    }
    CB(cublasCreate(&h));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMalloc(&fA, most * 4));
    CK(cudaMalloc(&fB, most * 4));
    CK(cudaMalloc(&fC, most * 4));
    CK(cudaMalloc(&hA, most * 2));
    CK(cudaMalloc(&hB, most * 2));
    CK(cudaMalloc(&hC, most * 2));
    fill<<<1024, 256>>>(fA, most, 1u);
    fill<<<1024, 256>>>(fB, most, 2u);
    fill<<<1024, 256>>>(fC, most, 3u);
    to_bf16<<<1024, 256>>>(hA, fA, most);
    to_bf16<<<1024, 256>>>(hB, fB, most);
    to_bf16<<<1024, 256>>>(hC, fC, most);
    CK(cudaDeviceSynchronize());
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s; N = %d rows (B %d x T %d); TFLOP/s, best of %d\n", prop.name, N, B, T, REPS);
    printf("%-8s %-5s %6s %6s %6s", "product", "pass", "M", "N", "K");
    for (int w = 0; w < WAYS; w++)
        printf(" %9s", way_name[w]);
    printf("\n");
    double step[WAYS] = {0};
    double round_s = 0; /* rounding each product's input activation once */
    for (int s = 0; s < ns; s++) {
        int in = sh[s].in, outd = sh[s].outd;
        /* forward, dx, dW as matmul_cuda.cu calls them */
        struct {
            const char *pass;
            int ta, tb, M, Nc, K, lda, ldb, ldc;
            float beta;
        } p[3] = {{"fwd", 0, 1, N, outd, in, in, in, outd, 0.0f},
                  {"dx", 0, 0, N, in, outd, outd, in, in, 1.0f},
                  {"dW", 1, 0, outd, in, N, outd, in, in, 1.0f}};
        for (int k = 0; k < 3; k++) {
            double flop = 2.0 * p[k].M * p[k].Nc * (double)p[k].K;
            printf("%-8s %-5s %6d %6d %6d", sh[s].name, p[k].pass, p[k].M, p[k].Nc, p[k].K);
            for (int w = 0; w < WAYS; w++) {
                double t = time_gemm(w, p[k].ta, p[k].tb, p[k].M, p[k].Nc, p[k].K, p[k].lda, p[k].ldb, p[k].ldc,
                                     p[k].beta);
                step[w] += t * sh[s].per_step;
                printf(" %9.1f", flop / t / 1e12);
            }
            printf("\n");
        }
        round_s += time_round((size_t)N * in) * sh[s].per_step;
    }
    printf("\none step's linear-layer products (ms):");
    for (int w = 0; w < WAYS; w++)
        printf("  %s %.2f", way_name[w], step[w] * 1e3);
    printf("\nrounding each product's fp32 input to bf16 once: %.2f ms a step\n", round_s * 1e3);
    return 0;
}
