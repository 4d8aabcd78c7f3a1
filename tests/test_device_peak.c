/* The GPU's dense bf16 peak, bench's MFU denominator (lib/cuda/device_peak.c):
 * NVIDIA's datasheet figure for the cards it knows by name, whatever clock
 * the device reports; the clock formula for the others.  Plain C: runs
 * without CUDA.
 *
 * Covers: lib/cuda/device_peak.c. */
#include <criterion/criterion.h>

#include "lib/cuda/device_peak.h"

/* the boost clocks the devices report (cudaDevAttrClockRate, kHz) */
#define H100_KHZ 1980000
#define A100_KHZ 1410000

Test(device_peak, known_cards_take_the_datasheet_figure)
{
    /* an H100 SXM reports 1.98 GHz: 132 x 4096 x 1.98e9 = 1070.5 TFLOP/s,
     * where NVIDIA quotes 989.4 (at 1.83 GHz) */
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA H100 80GB HBM3", 9, 0, 132, H100_KHZ), 989.4e12, 1e3);
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA H200", 9, 0, 132, H100_KHZ), 989.4e12, 1e3);
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA GH200 480GB", 9, 0, 132, H100_KHZ), 989.4e12, 1e3);
    /* the longer names first: not the SXM part's figure */
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA H100 PCIe", 9, 0, 114, 1755000), 756e12, 1e3);
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA H100 NVL", 9, 0, 132, 1785000), 835.5e12, 1e3);
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA H200 NVL", 9, 0, 132, 1785000), 835.5e12, 1e3);
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA A100-SXM4-80GB", 8, 0, 108, A100_KHZ), 312e12, 1e3);
}

Test(device_peak, other_cards_take_the_clock_they_report)
{
    /* an Ada card: 128 SMs x 512 x 2.52 GHz */
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520000), 128.0 * 512 * 2.52e9,
                       1e3);
    /* an unnamed Hopper part: its SMs at its clock */
    cr_expect_float_eq(ar_cuda_peak_bf16("NVIDIA Hopper test part", 9, 0, 100, 1500000), 100.0 * 4096 * 1.5e9,
                       1e3);
    /* an architecture whose rate is not known: 0 (bench says "unknown") */
    cr_expect_eq(ar_cuda_peak_bf16("NVIDIA future card", 12, 0, 170, 2000000), 0.0);
    cr_expect_eq(ar_cuda_peak_bf16(NULL, 12, 0, 170, 2000000), 0.0);
}
