/*
 * measure.h: the cpu backend measured as a predictor "device"
 * (struct medha_gpu, sched/pred.h): this machine's streaming-read
 * bandwidth and fused multiply-add rate, and the rate of the cpu
 * backend's products on a model's own weights. The scheduler uses it
 * to size chunks for cpu workers until a profile measured by medha-prof
 * replaces it. It lives in the engine, not in the scheduler, because it
 * runs the cpu kernels (cpu/cpu.h): the scheduler core stays free of
 * any backend (doc/DESIGN.md, "Rooms").
 */
#ifndef MEDHA_ENGINE_MEASURE_H
#define MEDHA_ENGINE_MEASURE_H

#include "sched/pred.h"

/*
 * The "cpu" device: *g gets the streaming-read bandwidth
 * and fused multiply-add rate of this machine measured with `threads`
 * threads (about half a second), with efficiency factors for the cpu
 * backend. Returns 0 or MEDHA_ENOMEM.
 */
int medha_gpu_measure_cpu(struct medha_gpu *g, int threads);

/*
 * The products of the cpu backend on a model's weights, measured: each
 * weight type's first matrix in w (nw of them: the layers' matrices)
 * times 64 tokens with `threads` threads (medha_cpu_mm_rate), the rates
 * weighted by the FLOPs of every matrix. *rate gets that FLOP/s, and
 * g (measured by medha_gpu_measure_cpu) its GEMM efficiency: *rate
 * over the FMA rate (more than 1 where int8 products beat it). Returns
 * 0, MEDHA_EINVAL (nothing to measure), MEDHA_EUNSUP (a type the
 * backend cannot multiply: g unchanged) or MEDHA_ENOMEM.
 */
struct medha_tensor;
int medha_gpu_measure_products(struct medha_gpu *g,
    const struct medha_tensor *const *w, int nw, int threads, double *rate);

#endif
