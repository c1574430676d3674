/*
 * measure.c: a roofline "device" for the cpu backend, measured on the
 * machine it runs on: the bandwidth of a streaming read over a buffer
 * far larger than the caches and the rate of fused multiply-adds, each
 * with the given number of threads. The scheduler uses it to size
 * chunks for cpu workers until a profile measured by medha-prof
 * (medha-profile(5)) replaces it. Efficiency factors are the fractions
 * of those two figures the cpu backend's kernels reach: for its
 * products measured on the model's own weights where the caller has
 * them (medha_gpu_measure_products: int8 products run faster than
 * the float FMA rate, and a guess of half that rate put a 32-token
 * chunk of SmolLM2 at 95 ms where medha-prof measures about 44),
 * otherwise a guess; for attention a guess; and a fixed cost per kernel for the
 * thread pool's parallel regions (50 us a layer in all).
 */
#include "engine/measure.h"

#include "cpu/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BW_BYTES (256u << 20) /* per pass, all threads together */
#define FMA_ITERS 2000000     /* per thread */

typedef float v8 __attribute__((vector_size(32)));

struct part {
	const float *p;
	size_t n;
	double out;
	int fma;
};

/* a * x + y as one fused operation where the machine has one */
__attribute__((optimize("fp-contract=fast"))) static void *
part_main(void *arg)
{
	struct part *t = arg;

	if (t->fma) {
		v8 x = {1.0001f, 1.0001f, 1.0001f, 1.0001f, 1.0001f, 1.0001f,
		    1.0001f, 1.0001f};
		v8 y = x * 0.5f;
		v8 a0 = x, a1 = x + 1, a2 = x + 2, a3 = x + 3, a4 = x + 4,
		   a5 = x + 5, a6 = x + 6, a7 = x + 7, a8 = x + 8, a9 = x + 9;
		for (int i = 0; i < FMA_ITERS; i++) {
			a0 = a0 * x + y;
			a1 = a1 * x + y;
			a2 = a2 * x + y;
			a3 = a3 * x + y;
			a4 = a4 * x + y;
			a5 = a5 * x + y;
			a6 = a6 * x + y;
			a7 = a7 * x + y;
			a8 = a8 * x + y;
			a9 = a9 * x + y;
		}
		a0 += a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
		t->out = a0[0];
	} else {
		const v8 *v = (const v8 *)t->p;
		v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
		for (size_t i = 0; i + 4 <= t->n / 8; i += 4) {
			s0 += v[i];
			s1 += v[i + 1];
			s2 += v[i + 2];
			s3 += v[i + 3];
		}
		s0 += s1 + s2 + s3;
		t->out = s0[0];
	}
	return NULL;
}

/* Seconds for `threads` threads to run their parts. */
static double
run(struct part *pt, int threads)
{
	pthread_t th[64];
	double t0 = medha_now();

	for (int i = 1; i < threads; i++)
		pthread_create(&th[i], NULL, part_main, &pt[i]);
	part_main(&pt[0]);
	for (int i = 1; i < threads; i++)
		pthread_join(th[i], NULL);
	return medha_now() - t0;
}

int
medha_gpu_measure_cpu(struct medha_gpu *g, int threads)
{
	struct part pt[64];
	float *buf;
	double t, best = 1e30;
	size_t per;

	if (threads < 1)
		threads = 1;
	if (threads > 64)
		threads = 64;
	if ((buf = aligned_alloc(64, BW_BYTES)) == NULL)
		return MEDHA_ENOMEM;
	memset(buf, 1, BW_BYTES);
	per = BW_BYTES / sizeof(float) / (size_t)threads / 32 * 32;
	for (int i = 0; i < threads; i++)
		pt[i] = (struct part){buf + (size_t)i * per, per, 0, 0};
	for (int r = 0; r < 3; r++)
		if ((t = run(pt, threads)) < best)
			best = t;
	free(buf);
	memset(g, 0, sizeof(*g));
	g->name = "cpu";
	g->tp_uneven = 1;
	g->hbm_bw = (double)per * sizeof(float) * threads / best;
	for (int i = 0; i < threads; i++)
		pt[i] = (struct part){NULL, 0, 0, 1};
	t = run(pt, threads);
	g->peak_flops = 2.0 * 10 * 8 * FMA_ITERS * threads / t;
	g->mem_bytes = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
	g->nvlink_bw = g->hbm_bw; /* workers on one host share memory */
	g->net_bw = 1e9;
	g->gpus_per_node = 1;
	g->eff_flops = 0.5;
	g->gemm_fill = 0; /* no waves of thread blocks to fill */
	g->eff_attn = 0.3;
	g->attn_half = 0;
	g->eff_bw = 0.6;
	g->eff_link = 0.5;
	g->ar_busbw = g->nvlink_bw * g->eff_link;
	g->ar_lat_s = 50e-6;
	g->launch_s = 0; /* no launches: the thread pool runs each kernel */
	g->kernel_s = 50e-6 / 9; /* 50 us a layer over its 9 kernels */
	g->comm_lat_s = 50e-6;
	return 0;
}

int
medha_gpu_measure_products(struct medha_gpu *g,
    const struct medha_tensor *const *w, int nw, int threads, double *rate)
{
	double by_type[64] = {0}, flop = 0, t = 0;

	*rate = 0;
	for (int i = 0; i < nw; i++) {
		double f = 2.0 * (double)w[i]->ne[0] * (double)w[i]->ne[1];
		int ty = w[i]->type, rc;

		if (ty < 0 || ty >= 64)
			return MEDHA_EUNSUP;
		if (by_type[ty] == 0 &&
		    (rc = medha_cpu_mm_rate(w[i], 64, threads, &by_type[ty])) !=
		        0)
			return rc;
		flop += f;
		t += f / by_type[ty];
	}
	if (!(t > 0) || !(g->peak_flops > 0))
		return MEDHA_EINVAL;
	*rate = flop / t;
	g->eff_flops = *rate / g->peak_flops;
	return 0;
}
