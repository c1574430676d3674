/*
 * attn_bench.c: times medha_k_attn on the shapes of issue 26's
 * acceptance 3, against the GPU's device-to-device copy rate:
 *
 *	decode, one query per sequence, 32 query / 8 kv heads, head_dim
 *	128, paged bf16 cache: 1 and 32 sequences at 32K, 128K, 512K, 1M
 *	a 32-query and a 4096-query chunk against 512K keys (the chunk the
 *	last positions): 4 query heads per kv head (the Llama-3-8B tp 8
 *	shape, 4/1, the targets), and 32/8 besides
 *
 * Each case: random bf16 keys and values (never zeros), several copies
 * of the inputs where memory allows, rotated from run to run so the L2
 * never holds the next run's keys; warm-up, then CUDA events around
 * each run, the median printed. A table: case, time, achieved TB/s (the
 * cache's bytes read once) or TFLOP/s (4 n_q n_heads keys head_dim,
 * causal), and the share of the ceiling: the copy rate measured here,
 * or the bf16 GEMM rate given (-g, TFLOP/s; 715, the H200).
 * contrib/bench-attn-torch.py prints the same table for PyTorch's SDPA.
 *
 *	attn_bench [-d head_dim] [-g gemm_tflops] [-p] [-q]
 *	(-d: 128, or 64; -q: the small cases only; -p: the plan alone)
 *
 * -p times medha_k_attn_plan (plan_kernel's one thread) for 1 to 256
 * decodes at 4K: made once a forward pass (issue 42), it was once a
 * layer before; the figure line says what it costs a forward.
 * Exits 77 with "skip: no CUDA device (...)" without a GPU.
 */
#include "../../kernels/kernels.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                           \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		if (e_ != cudaSuccess) {                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,       \
			    __LINE__, #call, cudaGetErrorString(e_));      \
			exit(1);                                           \
		}                                                          \
	} while (0)

#define CL(call)                                                           \
	do {                                                               \
		int e_ = (call);                                           \
		if (e_ != 0) {                                             \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,       \
			    __LINE__, #call,                               \
			    cudaGetErrorString((cudaError_t)e_));          \
			exit(1);                                           \
		}                                                          \
	} while (0)

#define VARIANTS 3 /* input sets rotated between runs */

static double copy_tbs; /* measured ceiling, TB/s */
static int head_dim = 128; /* -d */
static double gemm_tf = 715;

static int
cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
row(const char *name, double us, double rate, const char *unit,
    double ceil)
{
	printf("%-34s %10.1f us %8.2f %-7s %5.0f%%\n", name, us, rate, unit,
	    100 * rate / ceil);
	fflush(stdout);
}

/* the device-to-device copy: bytes read + written over time */
static void
bench_copy(void)
{
	size_t n = (size_t)1 << 31;
	void *a, *b;
	cudaEvent_t e0, e1;
	double t[10];
	float ms;

	CK(cudaMalloc(&a, n));
	CK(cudaMalloc(&b, n));
	CK(cudaMemset(a, 1, n));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++)
		CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
	for (int i = 0; i < 10; i++) {
		CK(cudaEventRecord(e0, 0));
		CK(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, n,
		    cudaMemcpyDeviceToDevice, 0));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t[i] = ms * 1e3;
	}
	qsort(t, 10, sizeof(t[0]), cmpd);
	copy_tbs = 2.0 * n / (t[5] * 1e-6) / 1e12;
	row("copy d2d 2 GiB (ceiling)", t[5], copy_tbs, "TB/s", copy_tbs);
	CK(cudaFree(a));
	CK(cudaFree(b));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
}

static void *
dup_to(const void *h, size_t bytes)
{
	void *d;

	CK(cudaMalloc(&d, bytes));
	CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

/*
 * n_seqs sequences of n_q queries at the end of kv_len positions. flop:
 * report TFLOP/s (chunks) rather than TB/s (decode).
 */
static void
bench_case(const char *name, int n_seqs, int n_q, int64_t kv_len,
    int n_heads, int nkv, int flop)
{
	const int hd = head_dim, bs = 16;
	int64_t nb = (kv_len + bs - 1) / bs;
	size_t blk_bytes = (size_t)nkv * bs * hd * 2, free_b, total_b;
	int64_t copies, want = (int64_t)n_seqs * VARIANTS;
	struct medha_k_kv_layer kv = {0};
	struct medha_k_seqs s[VARIANTS];
	void *mem[VARIANTS][8];
	int n_tok = n_seqs * n_q;
	double t[64], flops = 0, bytes;
	int reps;
	cudaEvent_t e0, e1;
	float ms;

	CK(cudaMemGetInfo(&free_b, &total_b));
	copies = (int64_t)((double)free_b * 0.85 / (2.0 * nb * blk_bytes));
	if (copies < 1) {
		printf("%-34s skipped: %.1f GB of cache, %.1f GB free\n", name,
		    2.0 * nb * blk_bytes / 1e9, free_b / 1e9);
		return;
	}
	if (copies > want)
		copies = want;
	kv.kv_type = MEDHA_K_BF16;
	kv.n_kv_heads = nkv;
	kv.head_dim = hd;
	kv.block_size = bs;
	CK(cudaMalloc(&kv.k, (size_t)copies * nb * blk_bytes));
	CK(cudaMalloc(&kv.v, (size_t)copies * nb * blk_bytes));
	CL(medha_k_fill_random(kv.k, (int64_t)(copies * nb * blk_bytes / 2), 1,
	    0, 1.0f, 0));
	CL(medha_k_fill_random(kv.v, (int64_t)(copies * nb * blk_bytes / 2), 2,
	    0, 1.0f, 0));

	/* variant v, sequence i: copy (v * n_seqs + i) % copies, its blocks
	   in order (as a fresh cache hands them out) */
	int32_t *tab = malloc((size_t)n_seqs * nb * 4);
	int32_t *qst = malloc((size_t)n_seqs * 4), *nq = malloc((size_t)n_seqs * 4);
	int32_t *app = malloc((size_t)n_seqs * 4);
	int64_t *pos = malloc((size_t)n_seqs * 8), *base = malloc((size_t)n_seqs * 8);
	int64_t *len = malloc((size_t)n_seqs * 8), *toff = malloc((size_t)n_seqs * 8);
	for (int v = 0; v < VARIANTS; v++) {
		for (int i = 0; i < n_seqs; i++) {
			int64_t c = ((int64_t)v * n_seqs + i) % copies;

			for (int64_t j = 0; j < nb; j++)
				tab[(int64_t)i * nb + j] = (int32_t)(c * nb + j);
			qst[i] = i * n_q;
			nq[i] = n_q;
			app[i] = 1;
			pos[i] = kv_len - n_q;
			base[i] = 0;
			len[i] = kv_len;
			toff[i] = (int64_t)i * nb;
		}
		s[v].q_start = mem[v][0] = dup_to(qst, (size_t)n_seqs * 4);
		s[v].n_q = mem[v][1] = dup_to(nq, (size_t)n_seqs * 4);
		s[v].pos = mem[v][2] = dup_to(pos, (size_t)n_seqs * 8);
		s[v].kv_base = mem[v][3] = dup_to(base, (size_t)n_seqs * 8);
		s[v].kv_len = mem[v][4] = dup_to(len, (size_t)n_seqs * 8);
		s[v].table = mem[v][5] = dup_to(tab, (size_t)n_seqs * nb * 4);
		s[v].table_off = mem[v][6] = dup_to(toff, (size_t)n_seqs * 8);
		s[v].append = mem[v][7] = dup_to(app, (size_t)n_seqs * 4);
		s[v].n_seqs = n_seqs;
		s[v].n_tokens = n_tok;
		s[v].max_q = n_q;
		s[v].max_kv = kv_len;
	}
	free(tab);
	free(qst);
	free(nq);
	free(app);
	free(pos);
	free(base);
	free(len);
	free(toff);

	size_t qn = (size_t)n_tok * n_heads * hd;
	float *hq = malloc(qn * 4), *q;
	uint16_t *out;
	for (size_t i = 0; i < qn; i++)
		hq[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	q = dup_to(hq, qn * 4);
	free(hq);
	CK(cudaMalloc((void **)&out, qn * 2));
	struct medha_k_attn a = {.kv = &kv, .s = &s[0], .q = q,
	    .qs = n_heads * hd, .n_heads = n_heads,
	    .scale = 1.0f / sqrtf((float)hd), .out = out};
	a.work_len = medha_k_attn_workspace(&a);
	CK(cudaMalloc(&a.work, a.work_len));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	for (int i = 0; i < 3; i++) { /* warm-up; the first run's time */
		a.s = &s[i % VARIANTS];
		CK(cudaEventRecord(e0, 0));
		CL(medha_k_attn(&a, 0));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
	}
	CK(cudaEventElapsedTime(&ms, e0, e1));
	reps = ms > 0 ? (int)(300.0 / ms) : 64;
	reps = reps < 5 ? 5 : reps > 64 ? 64 : reps;
	for (int i = 0; i < reps; i++) {
		a.s = &s[i % VARIANTS];
		CK(cudaEventRecord(e0, 0));
		CL(medha_k_attn(&a, 0));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t[i] = ms * 1e3;
	}
	CK(cudaGetLastError());
	qsort(t, (size_t)reps, sizeof(t[0]), cmpd);
	double us = t[reps / 2];
	bytes = 2.0 * n_seqs * kv_len * nkv * hd * 2;
	for (int r = 0; r < n_q; r++) /* causal: row r sees kv - n_q + r + 1 */
		flops += 4.0 * n_heads * hd * (double)(kv_len - n_q + r + 1);
	flops *= n_seqs;
	if (flop) {
		row(name, us, flops / (us * 1e-6) / 1e12, "TFLOP/s", gemm_tf);
		printf("%-34s %10s    floor (cache read once at the copy rate) "
		       "%.1f us\n", "", "", bytes / (copy_tbs * 1e12) * 1e6);
	} else {
		row(name, us, bytes / (us * 1e-6) / 1e12, "TB/s", copy_tbs);
	}
	CK(cudaFree(a.work));
	CK(cudaFree(q));
	CK(cudaFree(out));
	CK(cudaFree(kv.k));
	CK(cudaFree(kv.v));
	for (int v = 0; v < VARIANTS; v++)
		for (int i = 0; i < 8; i++)
			CK(cudaFree(mem[v][i]));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
}

/* the plan alone for n decodes at 4K positions: its median time, us */
static double
bench_plan(int n)
{
	const int64_t kv_len = 4096, nb = kv_len / 16;
	struct medha_k_kv_layer kv = {NULL, NULL, MEDHA_K_BF16, 8, head_dim,
	    16};
	struct medha_k_seqs s = {0};
	int32_t *i32 = malloc((size_t)n * nb * 4);
	int64_t *i64 = malloc((size_t)n * 8);
	void *mem[8];
	double t[32];
	cudaEvent_t e0, e1;
	float ms;

	for (int i = 0; i < n; i++)
		i32[i] = i;
	s.q_start = mem[0] = dup_to(i32, (size_t)n * 4);
	for (int i = 0; i < n; i++)
		i32[i] = 1;
	s.n_q = mem[1] = dup_to(i32, (size_t)n * 4);
	s.append = mem[2] = dup_to(i32, (size_t)n * 4);
	for (int i = 0; i < n; i++)
		i64[i] = kv_len - 1;
	s.pos = mem[3] = dup_to(i64, (size_t)n * 8);
	for (int i = 0; i < n; i++)
		i64[i] = kv_len;
	s.kv_len = mem[4] = dup_to(i64, (size_t)n * 8);
	for (int i = 0; i < n; i++)
		i64[i] = (int64_t)i * nb;
	s.table_off = mem[5] = dup_to(i64, (size_t)n * 8);
	memset(i64, 0, (size_t)n * 8);
	s.kv_base = mem[6] = dup_to(i64, (size_t)n * 8);
	for (int64_t i = 0; i < n * nb; i++)
		i32[i] = (int32_t)i;
	s.table = mem[7] = dup_to(i32, (size_t)n * nb * 4);
	s.n_seqs = n;
	s.n_tokens = n;
	s.max_q = 1;
	s.max_kv = kv_len;
	struct medha_k_attn a = {.kv = &kv, .s = &s, .q = (const float *)mem[0],
	    .qs = 32 * head_dim, .n_heads = 32, .scale = 1.0f,
	    .out = (uint16_t *)mem[0]};
	a.work_len = medha_k_attn_workspace(&a);
	CK(cudaMalloc(&a.work, a.work_len));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 35; i++) {
		CK(cudaEventRecord(e0, 0));
		CL(medha_k_attn_plan(&a, 0));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 3)
			t[i - 3] = ms * 1e3;
	}
	qsort(t, 32, sizeof(t[0]), cmpd);
	CK(cudaFree(a.work));
	for (int i = 0; i < 8; i++)
		CK(cudaFree(mem[i]));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	free(i32);
	free(i64);
	return t[16];
}

int
main(int argc, char **argv)
{
	int ndev = 0, small = 0, plan = 0, c;
	cudaError_t e;
	struct cudaDeviceProp p;
	static const int64_t ctx[] = {32768, 131072, 524288, 1048576};
	char name[64];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-g") && i + 1 < argc)
			gemm_tf = atof(argv[++i]);
		else if (!strcmp(argv[i], "-d") && i + 1 < argc)
			head_dim = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-q"))
			small = 1;
		else if (!strcmp(argv[i], "-p"))
			plan = 1;
		else {
			fprintf(stderr, "usage: attn_bench [-d head_dim] "
			                "[-g gemm_tflops] [-p] [-q]\n");
			return 2;
		}
	}
	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev < 1) {
		printf("skip: no CUDA device (%s)\n", e != cudaSuccess ?
		    cudaGetErrorString(e) : "none found");
		return 77;
	}
	CK(cudaGetDeviceProperties(&p, 0));
	printf("attn_bench: %s, %d SMs, %.0f GB; head_dim %d; GEMM ceiling "
	       "%.0f TFLOP/s (given)\n", p.name, p.multiProcessorCount,
	    p.totalGlobalMem / 1e9, head_dim, gemm_tf);
	if (plan) {
		double us = 0;
		for (int n = 1; n <= 256; n *= 4) {
			us = bench_plan(n);
			printf("plan of %3d decodes at 4K: %8.1f us\n", n, us);
		}
		printf("figure: attention plan of 256 decodes %.1f us, once a "
		       "forward (per layer it was %.2f ms for 32 layers)\n",
		    us, us * 32 / 1e3);
		return 0;
	}
	printf("%-34s %13s %16s %6s\n", "case", "time", "rate", "%ceil");
	bench_copy();
	for (c = 0; c < 4 && (!small || c < 1); c++) {
		snprintf(name, sizeof(name), "decode 1 x %lldK 32/8",
		    (long long)(ctx[c] / 1024));
		bench_case(name, 1, 1, ctx[c], 32, 8, 0);
	}
	for (c = 0; c < 4 && (!small || c < 1); c++) {
		snprintf(name, sizeof(name), "decode 32 x %lldK 32/8",
		    (long long)(ctx[c] / 1024));
		bench_case(name, 32, 1, ctx[c], 32, 8, 0);
	}
	bench_case("chunk 32 x 512K 4/1", 1, 32, 524288, 4, 1, 1);
	bench_case("chunk 32 x 512K 32/8", 1, 32, 524288, 32, 8, 1);
	bench_case("chunk 4096 x 512K 4/1", 1, 4096, 524288, 4, 1, 1);
	if (!small)
		bench_case("chunk 4096 x 512K 32/8", 1, 4096, 524288, 32, 8, 1);
	return 0;
}
