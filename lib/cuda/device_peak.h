/* The dense bf16 tensor-core peak of a CUDA device, in FLOP/s: the
 * denominator of `attnres bench`'s MFU (lib/backend.h, peak_bf16_flops). */
#ifndef AR_CUDA_DEVICE_PEAK_H
#define AR_CUDA_DEVICE_PEAK_H

#ifdef __cplusplus
extern "C" {
#endif

/* NVIDIA's datasheet figure where the card is known by its name (the
 * figure llm.c and nanoGPT divide by: H100 SXM 989.4 TFLOP/s at the 1.83
 * GHz its tensor rate is quoted at, not the 1.98 GHz boost clock the
 * device reports); else SMs x the architecture's bf16 FLOPs a clock per
 * SM x khz, the clock the device reports (its highest boost clock: an
 * upper bound, so an MFU against it is a lower bound); 0 where the
 * architecture's rate is not known. */
double ar_cuda_peak_bf16(const char *name, int major, int minor, int sms, int khz);

#ifdef __cplusplus
}
#endif

#endif
