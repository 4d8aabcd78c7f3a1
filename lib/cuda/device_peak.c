/* The dense bf16 peak of a CUDA device (device_peak.h).  Plain C, no CUDA:
 * the backend passes what the runtime reports, and the tests pass names. */
#include "device_peak.h"

#include <string.h>

/* Dense bf16 TFLOP/s with fp32 accumulation from NVIDIA's datasheets (half
 * the "with sparsity" figure), by a part of the device's name; the first
 * match counts, so a longer name comes before a shorter one inside it. */
static const struct {
    const char *name;
    double tflops;
} datasheet[] = {
    {"H100 PCIe", 756.0},  /* 114 SMs at 1.62 GHz */
    {"H100 NVL", 835.5},
    {"H200 NVL", 835.5},
    {"GH200", 989.4},
    {"H200", 989.4},       /* 132 SMs at 1.83 GHz, as the H100 SXM */
    {"H100", 989.4},       /* "NVIDIA H100 80GB HBM3": the SXM part */
    {"B200", 2250.0},
    {"A100", 312.0},       /* 108 SMs at 1.41 GHz, SXM and PCIe */
};

/* Dense bf16 tensor-core FLOPs per clock per SM (one FMA = 2 FLOPs):
 * A100 (sm_80) 2048; GA10x / Ada (sm_86, sm_89) 512; H100 (sm_90) 4096;
 * B200 (sm_100) 8192; others unknown (0). */
static int flops_per_clock_per_sm(int major, int minor)
{
    if (major == 8 && minor == 0)
        return 2048;
    if (major == 8 && (minor == 6 || minor == 9))
        return 512;
    if (major == 9 && minor == 0)
        return 4096;
    if (major == 10 && minor == 0)
        return 8192;
    return 0;
}

double ar_cuda_peak_bf16(const char *name, int major, int minor, int sms, int khz)
{
    for (size_t i = 0; name && i < sizeof datasheet / sizeof datasheet[0]; i++)
        if (strstr(name, datasheet[i].name))
            return datasheet[i].tflops * 1e12;
    return (double)sms * khz * 1e3 * flops_per_clock_per_sm(major, minor);
}
