/*
 * cpu_attn.c: attention of new tokens against the paged KV cache, with
 * its log-sum-exp, and the KVP merge of partial results.
 *
 * A query's keys are taken in partitions of ATTN_PART positions, fixed
 * by position (0..255, 256..511, ...). Over one partition (attn_span),
 * the query heads that share a kv head are done together, so each key
 * and value row is read (and, from an f16 cache, converted) once for
 * all of them: scores come 16 keys at a time from the dimension-major K
 * runs of the cache (kvcache.h), two chains of 16-wide multiply-adds per
 * head over the first and second half of the dimensions, then added;
 * then their max, exp and sum, and the weighted values. The partitions'
 * normalized results and log-sum-exps are folded in order (fold), so a
 * query's result depends only on its position and the cached K/V, not
 * on the chunk it came in, the batch or the thread that ran it.
 *
 * Tasks: (sequence, kv head, up to ATTN_QUERIES queries), walking the
 * partitions outside the queries so that a partition is read from
 * memory once for all of them; a decode (at most ATTN_SPLIT_Q queries)
 * whose keys span partitions gets a task per partition instead (three
 * kv heads would keep most threads idle) and a second region folds the
 * parts. opts.llama_compat swaps in llama.cpp's order (attn_query_compat
 * below).
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define ATTN_AVX2 1 /* eight lanes: every result as with sixteen */
#endif

#define ATTN_QUERIES 8 /* queries per task */
#define ATTN_PART 256  /* keys per partition (a multiple of the KV block) */
#define ATTN_SPLIT_Q 2 /* a sequence of at most this many queries is split
                          across threads by partitions */

/* ---- small vector helpers with a fixed order of operations ---- */

/*
 * Ask for run i (16 keys, or values, of one kv head) ahead of its use:
 * runs are pages of the cache, scattered, so the hardware prefetcher
 * cannot see the next one coming.
 */
#define RUNS_AHEAD 4 /* runs prefetched ahead of the one in use */

static inline void
prefetch_run(const struct medha_kvcache *kv, int seq, int layer, int which,
    int head, int64_t i)
{
	const char *p = medha_kv_run(kv, seq, layer, which, head, i);
	size_t n = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim * kv->elsize, o;

	for (o = 0; o < n; o += 64)
		__builtin_prefetch(p + o, 0, 3);
}

/*
 * Scores of G query heads q (G, hd) against the 16 keys of a K run (hd,
 * 16): out (G, 16), unscaled. Per key and head: two fma chains over the
 * two halves of the dimensions, added.
 */
static inline __attribute__((always_inline)) void
scores_g(const int G, const struct medha_kvcache *kv, const void *run,
    const float *q, float *out)
{
	const int hd = kv->c.head_dim, h2 = hd / 2;
	int g, c;
#if defined(__AVX512F__)
	__m512 a0[8], a1[8], k0, k1;

#pragma GCC unroll 8
	for (g = 0; g < G; g++)
		a0[g] = a1[g] = _mm512_setzero_ps();
	for (c = 0; c < hd - h2; c++) {
		if (kv->c.type == MEDHA_KV_F32) {
			k1 =
			    _mm512_loadu_ps((const float *)run + (c + h2) * 16);
			k0 = _mm512_loadu_ps((const float *)run + c * 16);
		} else {
			k1 = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)((const uint16_t *)run +
			        (c + h2) * 16)));
			k0 = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)((const uint16_t *)run + c * 16)));
		}
#pragma GCC unroll 8
		for (g = 0; g < G; g++) {
			if (c < h2)
				a0[g] = _mm512_fmadd_ps(_mm512_set1_ps(
				                            q[g * hd + c]),
				    k0, a0[g]);
			a1[g] =
			    _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + c + h2]),
			        k1, a1[g]);
		}
	}
#pragma GCC unroll 8
	for (g = 0; g < G; g++)
		_mm512_storeu_ps(out + g * 16, _mm512_add_ps(a0[g], a1[g]));
#elif defined(ATTN_AVX2)
	__m256 a0[4], a1[4], k0, k1;
	int h;

	if (G <= 2) { /* keys 0-15 at once: 8 chains for the fma latency */
		__m256 b0[2], b1[2], k2, k3;
#pragma GCC unroll 2
		for (g = 0; g < G; g++)
			a0[g] = a1[g] = b0[g] = b1[g] = _mm256_setzero_ps();
		for (c = 0; c < hd - h2; c++) {
			if (kv->c.type == MEDHA_KV_F32) {
				const float *kr = (const float *)run;
				k0 = _mm256_loadu_ps(kr + c * 16);
				k2 = _mm256_loadu_ps(kr + c * 16 + 8);
				k1 = _mm256_loadu_ps(kr + (c + h2) * 16);
				k3 = _mm256_loadu_ps(kr + (c + h2) * 16 + 8);
			} else {
				const uint16_t *kr = (const uint16_t *)run;
				k0 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)(kr + c * 16)));
				k2 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)(kr + c * 16 + 8)));
				k1 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)(kr + (c + h2) * 16)));
				k3 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)(kr + (c + h2) * 16 + 8)));
			}
#pragma GCC unroll 2
			for (g = 0; g < G; g++) {
				const __m256 qa = _mm256_set1_ps(q[g * hd + c]);
				const __m256 qb =
				    _mm256_set1_ps(q[g * hd + c + h2]);
				if (c < h2) {
					a0[g] = _mm256_fmadd_ps(qa, k0, a0[g]);
					b0[g] = _mm256_fmadd_ps(qa, k2, b0[g]);
				}
				a1[g] = _mm256_fmadd_ps(qb, k1, a1[g]);
				b1[g] = _mm256_fmadd_ps(qb, k3, b1[g]);
			}
		}
#pragma GCC unroll 2
		for (g = 0; g < G; g++) {
			_mm256_storeu_ps(out + g * 16,
			    _mm256_add_ps(a0[g], a1[g]));
			_mm256_storeu_ps(out + g * 16 + 8,
			    _mm256_add_ps(b0[g], b1[g]));
		}
		return;
	}
	for (h = 0; h < 16; h += 8) { /* keys 0-7, then 8-15 */
#pragma GCC unroll 4
		for (g = 0; g < G; g++)
			a0[g] = a1[g] = _mm256_setzero_ps();
		for (c = 0; c < hd - h2; c++) {
			if (kv->c.type == MEDHA_KV_F32) {
				k1 = _mm256_loadu_ps(
				    (const float *)run + (c + h2) * 16 + h);
				k0 = _mm256_loadu_ps(
				    (const float *)run + c * 16 + h);
			} else {
				k1 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)((const uint16_t *)run +
				        (c + h2) * 16 + h)));
				k0 = _mm256_cvtph_ps(_mm_loadu_si128(
				    (const __m128i *)((const uint16_t *)run +
				        c * 16 + h)));
			}
#pragma GCC unroll 4
			for (g = 0; g < G; g++) {
				if (c < h2)
					a0[g] = _mm256_fmadd_ps(
					    _mm256_set1_ps(q[g * hd + c]), k0,
					    a0[g]);
				a1[g] = _mm256_fmadd_ps(
				    _mm256_set1_ps(q[g * hd + c + h2]), k1,
				    a1[g]);
			}
		}
#pragma GCC unroll 4
		for (g = 0; g < G; g++)
			_mm256_storeu_ps(out + g * 16 + h,
			    _mm256_add_ps(a0[g], a1[g]));
	}
#else
	float a0, a1, kc;
	int i;

#pragma GCC unroll 8
	for (g = 0; g < G; g++)
		for (i = 0; i < 16; i++) {
			a0 = a1 = 0;
			for (c = 0; c < hd; c++) {
				kc = kv->c.type == MEDHA_KV_F32
				    ? ((const float *)run)[c * 16 + i]
				    : medha_fp16_to_fp32(
				          ((const uint16_t *)run)[c * 16 + i]);
				if (c < h2)
					a0 = fmaf(q[g * hd + c], kc, a0);
				else
					a1 = fmaf(q[g * hd + c], kc, a1);
			}
			out[g * 16 + i] = a0 + a1;
		}
#endif
}

static void
scores(int G, const struct medha_kvcache *kv, const void *run, const float *q,
    float *out)
{
	int g;

	switch (G) { /* constant G: the accumulators stay in registers */
	case 1: scores_g(1, kv, run, q, out); break;
	case 2: scores_g(2, kv, run, q, out); break;
	case 3: scores_g(3, kv, run, q, out); break;
	case 4: scores_g(4, kv, run, q, out); break;
#ifndef ATTN_AVX2 /* (AVX2: sixteen registers hold four heads) */
	case 8: scores_g(8, kv, run, q, out); break;
#endif
	default: /* by fours: the same per-head arithmetic */
		for (g = 0; g + 4 <= G; g += 4)
			scores_g(4, kv, run, q + g * kv->c.head_dim,
			    out + g * 16);
		for (; g < G; g++)
			scores_g(1, kv, run, q + g * kv->c.head_dim,
			    out + g * 16);
	}
}

static inline float
vmax(const float *x, int64_t n)
{
	float m = -INFINITY;
	int64_t i = 0;

#if defined(__AVX512F__)
	__m512 v = _mm512_set1_ps(-INFINITY);
	for (; i + 16 <= n; i += 16)
		v = _mm512_max_ps(v, _mm512_loadu_ps(x + i));
	m = _mm512_reduce_max_ps(v);
#elif defined(ATTN_AVX2)
	__m256 v = _mm256_set1_ps(-INFINITY);
	float l8[8];
	int l;
	for (; i + 8 <= n; i += 8)
		v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
	_mm256_storeu_ps(l8, v);
	for (l = 0; l < 8; l++)
		m = l8[l] > m ? l8[l] : m;
#endif
	for (; i < n; i++)
		m = x[i] > m ? x[i] : m;
	return m;
}

/* x = exp(x - m); returns the sum: lane i % 16 adds x[i], then a tree */
static float
exp_sum(float *x, int64_t n, float m)
{
	float lane[16] = {0};
	int64_t i = 0;
	int l, j;

#if defined(__AVX512F__)
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(x + i,
		    _mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(m)));
#elif defined(ATTN_AVX2)
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i,
		    _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(m)));
#endif
	for (; i < n; i++)
		x[i] -= m;
	medha_cpu_vexp(x, x, n);
	i = 0;
#if defined(__AVX512F__)
	__m512 acc = _mm512_setzero_ps();
	for (; i + 16 <= n; i += 16)
		acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
	_mm512_storeu_ps(lane, acc);
#elif defined(ATTN_AVX2)
	{ /* lanes 0-7 and 8-15 */
		__m256 lo = _mm256_setzero_ps(), hi = lo;
		for (; i + 16 <= n; i += 16) {
			lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + i));
			hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + i + 8));
		}
		_mm256_storeu_ps(lane, lo);
		_mm256_storeu_ps(lane + 8, hi);
	}
#endif
	for (; i < n; i++)
		lane[i & 15] += x[i];
	for (l = 8; l > 0; l /= 2)
		for (j = 0; j < l; j++)
			lane[j] += lane[j + l];
	return lane[0];
}

/*
 * Value row j of kv head kvh, for a pass over keys [lo, lo + nk): a new
 * run is looked up where j starts one (*run keeps the current one), and
 * the first pass (c0 0) prefetches RUNS_AHEAD runs ahead.
 */
static inline __attribute__((always_inline)) const char *
value_row(const struct medha_kvcache *kv, int seq, int layer, int kvh,
    int64_t j, int64_t lo, int64_t nk, int c0, const char **run)
{
	if (j == lo || j % MEDHA_KV_BLOCK == 0) {
		*run = medha_kv_run(kv, seq, layer, 1, kvh, j / MEDHA_KV_BLOCK);
		if (c0 == 0 &&
		    (j / MEDHA_KV_BLOCK + RUNS_AHEAD) * MEDHA_KV_BLOCK < lo + nk)
			prefetch_run(kv, seq, layer, 1, kvh,
			    j / MEDHA_KV_BLOCK + RUNS_AHEAD);
	}
	return *run + (size_t)(j % MEDHA_KV_BLOCK) * kv->c.head_dim * kv->elsize;
}

/*
 * acc (G, hd) = the sum over keys j in [lo, hi) of p[g * nk + j - lo]
 * times value row j: one fma chain per output element, in key order,
 * so any split of the work gives the same bits. W vectors of 16
 * dimensions at a time stay in registers for all G heads.
 */
static inline __attribute__((always_inline)) void
pv_gw(const int G, const int W, const struct medha_kvcache *kv, int seq,
    int layer, int kvh, const float *p, int64_t nk, int64_t lo, float *acc)
{
	const int hd = kv->c.head_dim;
	int64_t j;
	int c0, g;
#if defined(__AVX512F__)
	__m512 a[4][4], v[4], pj;
	int w;
	const char *run = NULL, *row;

	for (c0 = 0; c0 < hd; c0 += 16 * W) {
#pragma GCC unroll 8
		for (g = 0; g < G; g++)
#pragma GCC unroll 4
			for (w = 0; w < W; w++)
				a[g][w] = _mm512_setzero_ps();
		for (j = lo; j < lo + nk; j++) {
			row = value_row(kv, seq, layer, kvh, j, lo, nk, c0,
			    &run);
#pragma GCC unroll 4
			for (w = 0; w < W; w++)
				v[w] = kv->c.type == MEDHA_KV_F32
				    ? _mm512_loadu_ps(
				          (const float *)row + c0 + 16 * w)
				    : _mm512_cvtph_ps(_mm256_loadu_si256(
				          (const __m256i *)((const uint16_t *)
				                                row +
				              c0 + 16 * w)));
#pragma GCC unroll 8
			for (g = 0; g < G; g++) {
				pj = _mm512_set1_ps(p[g * nk + (j - lo)]);
#pragma GCC unroll 4
				for (w = 0; w < W; w++)
					a[g][w] =
					    _mm512_fmadd_ps(pj, v[w], a[g][w]);
			}
		}
#pragma GCC unroll 8
		for (g = 0; g < G; g++)
#pragma GCC unroll 4
			for (w = 0; w < W; w++)
				_mm512_storeu_ps(acc + g * hd + c0 + 16 * w,
				    a[g][w]);
	}
#elif defined(ATTN_AVX2)
	/* 8 * V dimensions a pass: 32 for up to 2 heads (8 chains for the
	   fma latency), else 16 (sixteen registers: 4 heads by 2) */
	const int V = G <= 2 && W >= 2 ? 4 : 2;
	__m256 a[4][4], v, pj[4];
	const char *run = NULL, *row;
	int w;

	for (c0 = 0; c0 < hd; c0 += 8 * V) {
#pragma GCC unroll 4
		for (g = 0; g < G; g++)
#pragma GCC unroll 4
			for (w = 0; w < V; w++)
				a[g][w] = _mm256_setzero_ps();
		for (j = lo; j < lo + nk; j++) {
			row = value_row(kv, seq, layer, kvh, j, lo, nk, c0,
			    &run);
#pragma GCC unroll 4
			for (g = 0; g < G; g++)
				pj[g] = _mm256_set1_ps(p[g * nk + (j - lo)]);
#pragma GCC unroll 4
			for (w = 0; w < V; w++) {
				v = kv->c.type == MEDHA_KV_F32
				    ? _mm256_loadu_ps(
				          (const float *)row + c0 + 8 * w)
				    : _mm256_cvtph_ps(_mm_loadu_si128(
				          (const __m128i *)((const uint16_t *)
				                                row +
				              c0 + 8 * w)));
#pragma GCC unroll 4
				for (g = 0; g < G; g++)
					a[g][w] =
					    _mm256_fmadd_ps(pj[g], v, a[g][w]);
			}
		}
#pragma GCC unroll 4
		for (g = 0; g < G; g++)
#pragma GCC unroll 4
			for (w = 0; w < V; w++)
				_mm256_storeu_ps(acc + g * hd + c0 + 8 * w,
				    a[g][w]);
	}
#else
	const char *run = NULL, *row;
	float vj;

	(void)W;
	memset(acc, 0, sizeof(float) * G * hd);
	for (j = lo; j < lo + nk; j++) {
		if (j == lo || j % MEDHA_KV_BLOCK == 0)
			run = medha_kv_run(kv, seq, layer, 1, kvh,
			    j / MEDHA_KV_BLOCK);
		row = run + (size_t)(j % MEDHA_KV_BLOCK) * hd * kv->elsize;
		for (c0 = 0; c0 < hd; c0++) {
			vj = kv->c.type == MEDHA_KV_F32
			    ? ((const float *)row)[c0]
			    : medha_fp16_to_fp32(((const uint16_t *)row)[c0]);
#pragma GCC unroll 8
			for (g = 0; g < G; g++)
				acc[g * hd + c0] = fmaf(p[g * nk + (j - lo)],
				    vj, acc[g * hd + c0]);
		}
	}
#endif
}

static void
pv(int G, const struct medha_kvcache *kv, int seq, int layer, int kvh,
    const float *p, int64_t nk, int64_t lo, float *acc)
{
	const int hd = kv->c.head_dim;
	int g, n;

#if defined(__AVX512F__) || defined(ATTN_AVX2)
	if (hd % 16 != 0) { /* per element the same chain, done by hand */
		const char *run = NULL, *row;
		int64_t j;
		int c;
		float vj;
		memset(acc, 0, sizeof(float) * G * hd);
		for (j = lo; j < lo + nk; j++) {
			if (j == lo || j % MEDHA_KV_BLOCK == 0)
				run = medha_kv_run(kv, seq, layer, 1, kvh,
				    j / MEDHA_KV_BLOCK);
			row = run +
			    (size_t)(j % MEDHA_KV_BLOCK) * hd * kv->elsize;
			for (c = 0; c < hd; c++) {
				vj = kv->c.type == MEDHA_KV_F32
				    ? ((const float *)row)[c]
				    : medha_fp16_to_fp32(
				          ((const uint16_t *)row)[c]);
				for (g = 0; g < G; g++)
					acc[g * hd + c] =
					    fmaf(p[g * nk + (j - lo)], vj,
					        acc[g * hd + c]);
			}
		}
		return;
	}
#endif
	for (g = 0; g < G; g += n) {
		n = G - g >= 4 ? 4 : G - g;
#define PV(gg)                                                                \
	do {                                                                  \
		if (hd % 64 == 0)                                             \
			pv_gw(gg, 4, kv, seq, layer, kvh, p + g * nk, nk, lo, \
			    acc + g * hd);                                    \
		else if (hd % 32 == 0)                                        \
			pv_gw(gg, 2, kv, seq, layer, kvh, p + g * nk, nk, lo, \
			    acc + g * hd);                                    \
		else                                                          \
			pv_gw(gg, 1, kv, seq, layer, kvh, p + g * nk, nk, lo, \
			    acc + g * hd);                                    \
	} while (0)
		switch (n) {
		case 4: PV(4); break;
		case 3: PV(3); break;
		case 2: PV(2); break;
		default: PV(1); break;
		}
#undef PV
	}
}

/* ---- the region ---- */

struct attn_run {
	const struct medha_kvcache *kv;
	int layer;
	int n_heads;
	const struct medha_attn_seq *s;
	int ns;
	int *first; /* (ns + 1) first task of each sequence */
	float *scratch;
	size_t scratch_per;
	int64_t nk_max; /* longest key range */
	int *np;        /* (ns) partitions of a split sequence, or 0 */
	int *ffirst;    /* (ns + 1) first fold task of each sequence */
	size_t *poff;   /* (ns) where a split sequence's parts start */
	float *part;    /* the parts of the split sequences */
};

size_t
medha_attn_scratch(const struct medha_kvcache *kv, int n_heads, int64_t nkeys)
{
	size_t g = (size_t)(n_heads / kv->c.n_kv_heads);

	size_t hd = (size_t)kv->c.head_dim, part, compat;

	/* a partition's scores and values, a part (attn_queries) */
	part = g * ATTN_PART + 2 * g * hd + g + 16;
	/* the llama_compat order: nkeys + 8 + 33 * head_dim */
	compat = g * (size_t)nkeys + (g + 33) * hd + 72;
	return part > compat ? part : compat;
}

/* ---- llama.cpp's order (opts.llama_compat) ---- */

/*
 * llama.cpp's CPU attention without flash attention, as its AVX2 build
 * (the prebuilt one tests/ref/llamacpp.py drives, checked against its
 * intermediate tensors) orders it, per query row and head. Its KV view
 * is padded to n_kv, a multiple of 256 cells; keys past the query's own
 * position are masked (weight 0) there and skipped here.
 *  - KQ = mul_mat(K, Q): each score is ggml_vec_dot_f32 (4 accumulators
 *    of 8 lanes over steps of 32, then ggml's tree; the tail, head_dim %
 *    32, fma'd into the sum), times the scale.
 *  - soft_max: the max, then ggml_v_expf 8 at a time, each group's
 *    horizontal sum (hsum8) added in double; every weight times
 *    (float)(1 / sum).
 *  - KQV = mul_mat(V^T, KQ): with more than one token in the batch,
 *    llamafile's tinyBLAS: per output element 8 lanes, lane j % 8 an fma
 *    chain over keys j, then hsum8; with one token (a decode, or a
 *    one-token chunk), ggml_vec_dot_f32 over the n_kv cells: 32 lanes,
 *    lane j % 32, then ggml's tree.
 * "Tokens in the batch" is this sequence's nq here (llama.cpp counts the
 * whole ubatch: the same for one sequence per batch, as in the worker).
 */

/* tinyBLAS's hsum of 8 lanes */
static inline float
hsum8(const float *l)
{
	float h0 = l[4] + l[0], h1 = l[5] + l[1], h2 = l[6] + l[2],
	      h3 = l[7] + l[3];

	return (h0 + h2) + (h1 + h3);
}

/* ggml_vec_dot_f32's sum of its 4 accumulators of 8 lanes (a[j * 8 + l]) */
static inline float
vec_reduce(const float *a)
{
	float x0[8], t0[4];
	int l;

	for (l = 0; l < 8; l++)
		x0[l] = (a[l] + a[16 + l]) + (a[8 + l] + a[24 + l]);
	for (l = 0; l < 4; l++)
		t0[l] = x0[l] + x0[l + 4];
	return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}

/* ggml_vec_dot_f32 (AVX2) */
static float
dot_vec(const float *x, const float *y, int n)
{
	float a[32] = {0}, sum;
	int np = n & ~31, i, l;

	for (i = 0; i < np; i += 32)
		for (l = 0; l < 32; l++)
			a[l] = fmaf(x[i + l], y[i + l], a[l]);
	sum = vec_reduce(a);
	for (i = np; i < n; i++)
		sum = fmaf(x[i], y[i], sum);
	return sum;
}

static void
attn_query_compat(const struct attn_run *r, const struct medha_attn_seq *s,
    int kvh, int qi, float *scr)
{
	const struct medha_kvcache *kv = r->kv;
	const int hd = kv->c.head_dim, G = r->n_heads / kv->c.n_kv_heads;
	const int nh = r->n_heads, f32 = kv->c.type == MEDHA_KV_F32;
	const float scale = 1.0f / sqrtf((float)hd);
	int64_t p = s->qpos + qi, hi = s->k_hi, nk, n8, j;
	float *w = scr, *lane = scr + r->nk_max + 8, *kj = lane + 32 * hd, *o;
	const float *q = s->q + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	const char *run = NULL, *row;
	int g, d, l, one = s->nq == 1, a;
	double sum;
	float m, inv, vj;

	if (hi > p + 1)
		hi = p + 1;
	nk = hi;
	n8 = (nk + 7) & ~(int64_t)7;
	o = s->out + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	for (g = 0; g < G; g++) {
		const float *qg = q + (size_t)g * hd;
		for (j = 0; j < nk; j++) {
			if (j % MEDHA_KV_BLOCK == 0)
				run = medha_kv_run(kv, s->seq, r->layer, 0, kvh,
				    j / MEDHA_KV_BLOCK);
			for (d = 0; d < hd; d++) {
				size_t at = (size_t)d * 16 + j % 16;
				kj[d] = f32 ? ((const float *)run)[at]
				            : medha_fp16_to_fp32(
				                  ((const uint16_t *)run)[at]);
			}
			w[j] = dot_vec(kj, qg, hd) * scale;
		}
		m = -INFINITY;
		for (j = 0; j < nk; j++)
			m = w[j] > m ? w[j] : m;
		for (j = nk; j < n8; j++)
			w[j] = -INFINITY;
		sum = 0;
		for (j = 0; j < n8; j += 8) {
			for (l = 0; l < 8; l++)
				w[j + l] -= m;
			medha_cpu_vexp_llama(w + j, w + j, 8);
			sum += (double)hsum8(w + j);
		}
		inv = (float)(1.0 / sum);
		for (j = 0; j < nk; j++)
			w[j] *= inv;
		memset(lane, 0, sizeof(float) * 32 * hd);
		for (j = 0; j < nk; j++) {
			if (j % MEDHA_KV_BLOCK == 0)
				run = medha_kv_run(kv, s->seq, r->layer, 1, kvh,
				    j / MEDHA_KV_BLOCK);
			row = run +
			    (size_t)(j % MEDHA_KV_BLOCK) * hd * kv->elsize;
			for (d = 0; d < hd; d++) {
				vj = f32 ? ((const float *)row)[d]
				         : medha_fp16_to_fp32(
				               ((const uint16_t *)row)[d]);
				a = d * 32 + (one ? (int)(j & 31) : (int)(j & 7));
				lane[a] = fmaf(vj, w[j], lane[a]);
			}
		}
		for (d = 0; d < hd; d++)
			o[(size_t)g * hd + d] =
			    one ? vec_reduce(lane + d * 32) : hsum8(lane + d * 32);
		s->lse[(size_t)qi * nh + kvh * G + g] = m + logf((float)sum);
	}
}

/*
 * Keys [lo, hi) (clipped to the query's own position) for query qi of s
 * and the query heads of kv head kvh: o (G, hd) normalized and lse (G).
 * An empty range gives 0s and -INFINITY.
 */
static void
attn_span(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi, int64_t lo, int64_t hi, float *scr, float *o, float *lse)
{
	const struct medha_kvcache *kv = r->kv;
	const int hd = kv->c.head_dim, G = r->n_heads / kv->c.n_kv_heads;
	const int nh = r->n_heads;
	const float scale = 1.0f / sqrtf((float)hd);
	int64_t p = s->qpos + qi, nk, j, blk;
	float *sc = scr, *acc = scr + (size_t)G * ATTN_PART;
	float sum[64];
	const float *q = s->q + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	int g;

	if (hi > p + 1)
		hi = p + 1;
	if (lo < 0)
		lo = 0;
	nk = hi - lo;
	if (nk <= 0) {
		memset(o, 0, sizeof(float) * G * hd);
		for (g = 0; g < G; g++)
			lse[g] = -INFINITY;
		return;
	}
	/* scores, 16 keys at a time, every head of the group */
	for (blk = lo / MEDHA_KV_BLOCK; blk <= (hi - 1) / MEDHA_KV_BLOCK;
	     blk++) {
		int64_t b0 = blk * MEDHA_KV_BLOCK, j0, j1;
		float bs[64 * 16];
		if (blk + RUNS_AHEAD <= (hi - 1) / MEDHA_KV_BLOCK)
			prefetch_run(kv, s->seq, r->layer, 0, kvh,
			    blk + RUNS_AHEAD);
		else /* the values come next */
			prefetch_run(kv, s->seq, r->layer, 1, kvh,
			    lo / MEDHA_KV_BLOCK + (hi - 1) / MEDHA_KV_BLOCK -
			        blk);
		scores(G, kv, medha_kv_run(kv, s->seq, r->layer, 0, kvh, blk),
		    q, bs);
		j0 = b0 > lo ? b0 : lo;
		j1 = b0 + MEDHA_KV_BLOCK < hi ? b0 + MEDHA_KV_BLOCK : hi;
#if defined(__AVX512F__)
		if (j1 - j0 == 16) { /* the same products, 16 at a time */
			for (g = 0; g < G; g++)
				_mm512_storeu_ps(sc + g * nk + (j0 - lo),
				    _mm512_mul_ps(_mm512_loadu_ps(bs + g * 16),
				        _mm512_set1_ps(scale)));
			continue;
		}
#elif defined(ATTN_AVX2)
		if (j1 - j0 == 16) { /* the same products, 8 at a time */
			for (g = 0; g < G; g++)
				for (j = 0; j < 16; j += 8)
					_mm256_storeu_ps(sc + g * nk + (j0 - lo) + j,
					    _mm256_mul_ps(
					        _mm256_loadu_ps(bs + g * 16 + j),
					        _mm256_set1_ps(scale)));
			continue;
		}
#endif
		for (g = 0; g < G; g++)
			for (j = j0; j < j1; j++)
				sc[g * nk + (j - lo)] =
				    bs[g * 16 + (j - b0)] * scale;
	}
	for (g = 0; g < G; g++) {
		float m = vmax(sc + g * nk, nk);
		sum[g] = exp_sum(sc + g * nk, nk, m);
		lse[g] = m + logf(sum[g]);
	}
	/* the weighted values */
	pv(G, kv, s->seq, r->layer, kvh, sc, nk, lo, acc);
	for (g = 0; g < G; g++) {
		float inv = 1.0f / sum[g];
		int d;
		for (d = 0; d < hd; d++)
			o[g * hd + d] = acc[g * hd + d] * inv;
	}
}

/*
 * Fold the part (po, pl) of keys that come after those of (o, l) into
 * it, G heads of d: m = max, w = exp(l - m) each, o = (wa oa + wb ob) /
 * (wa + wb), l = m + log(wa + wb). A part with no keys changes nothing;
 * first: (o, l) holds nothing yet (the part is copied).
 */
static void
fold(int G, int d, float *o, float *l, const float *po, const float *pl,
    int first)
{
	int g, i;

	for (g = 0; g < G; g++) {
		float m, wa, wb, inv;
		if (first || l[g] == -INFINITY) {
			memcpy(o + g * d, po + g * d, sizeof(float) * d);
			l[g] = pl[g];
			continue;
		}
		if (pl[g] == -INFINITY)
			continue;
		m = l[g] > pl[g] ? l[g] : pl[g];
		wa = expf(l[g] - m);
		wb = expf(pl[g] - m);
		inv = 1.0f / (wa + wb);
		for (i = 0; i < d; i++)
			o[g * d + i] =
			    (wa * o[g * d + i] + wb * po[g * d + i]) * inv;
		l[g] = m + logf(wa + wb);
	}
}

/* the partitions of ATTN_PART keys that query qi of s sees: [*p0, *p1) */
static void
parts_of(const struct medha_attn_seq *s, int qi, int64_t *p0, int64_t *p1)
{
	int64_t lo = s->k_lo > 0 ? s->k_lo : 0, hi = s->k_hi;

	if (hi > s->qpos + qi + 1)
		hi = s->qpos + qi + 1;
	*p0 = lo / ATTN_PART;
	*p1 = hi > lo ? (hi - 1) / ATTN_PART + 1 : *p0 + 1;
}

/* s->out, s->lse of query qi, kv head kvh */
static float *
out_of(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi, float **lse)
{
	const int G = r->n_heads / r->kv->c.n_kv_heads;

	*lse = s->lse + (size_t)qi * r->n_heads + (size_t)kvh * G;
	return s->out + ((size_t)qi * r->n_heads + (size_t)kvh * G) *
	    r->kv->c.head_dim;
}

/* the forms s asks for of query qi's outputs of kv head kvh (finished) */
static void
make_forms(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi)
{
	const int gd = r->n_heads / r->kv->c.n_kv_heads * r->kv->c.head_dim;

	if (s->act != NULL)
		medha_act_make_span(s->act, s->act_need, s->act_t0 + qi,
		    kvh * gd, (kvh + 1) * gd);
}

/*
 * Queries [q0, q1) of s, kv head kvh: each over its keys a partition of
 * ATTN_PART at a time (partitions fixed by position, so the arithmetic
 * of a query depends only on its position, whatever the chunk, the
 * batch or the threads), the partitions folded in order; the partition
 * loop outside the query loop, so that a partition's keys and values are
 * read from memory once for all the queries of the task.
 */
static void
attn_queries(const struct attn_run *r, const struct medha_attn_seq *s,
    int kvh, int q0, int q1, float *scr)
{
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	float *po = scr + (size_t)G * ATTN_PART + (size_t)G * hd, *pl = po +
	    (size_t)G * hd, *o, *l;
	int64_t p, p0, p1, lo, hi, pa, pb;
	int qi;

	if (s->compat && s->k_lo <= 0) {
		for (qi = q0; qi < q1; qi++) {
			attn_query_compat(r, s, kvh, qi, scr);
			make_forms(r, s, kvh, qi);
		}
		return;
	}
	parts_of(s, q0, &p0, &pb);
	parts_of(s, q1 - 1, &pa, &p1);
	lo = s->k_lo > 0 ? s->k_lo : 0;
	for (p = p0; p < p1; p++)
		for (qi = q0; qi < q1; qi++) {
			parts_of(s, qi, &pa, &pb);
			if (p >= pb)
				continue;
			o = out_of(r, s, kvh, qi, &l);
			hi = (p + 1) * ATTN_PART < s->k_hi ? (p + 1) * ATTN_PART
			                                    : s->k_hi;
			if (pb - pa == 1) { /* one partition: straight out */
				attn_span(r, s, kvh, qi, lo, hi, scr, o, l);
				continue;
			}
			attn_span(r, s, kvh, qi,
			    p * ATTN_PART > lo ? p * ATTN_PART : lo, hi, scr, po,
			    pl);
			fold(G, hd, o, l, po, pl, p == pa);
		}
	for (qi = q0; qi < q1; qi++)
		make_forms(r, s, kvh, qi);
}

/*
 * Tasks: a sequence of few queries (a decode) whose keys span several
 * partitions has a task per (kv head, query, partition), each writing
 * its part (o (G, hd), then lse (G)) to r->part, folded in order by a
 * second region; any other has a task per (kv head, ATTN_QUERIES
 * queries). The same arithmetic either way.
 */
static int
split_parts(const struct medha_attn_seq *s)
{
	int64_t p0, p1;

	if (s->nq < 1 || s->nq > ATTN_SPLIT_Q || (s->compat && s->k_lo <= 0))
		return 0;
	parts_of(s, s->nq - 1, &p0, &p1);
	return p1 - p0 > 1 ? (int)(p1 - p0) : 0;
}

/* the sequence whose first task (r->first) is the last <= i */
static int
seq_of(const struct attn_run *r, const int *first, int i)
{
	int lo = 0, hi = r->ns - 1, mid;

	while (lo < hi) {
		mid = (lo + hi + 1) / 2;
		if (first[mid] <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static void
attn_task(void *arg, int i, int thread)
{
	const struct attn_run *r = arg;
	const struct medha_attn_seq *s;
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	int si, local, nch, kvh, c, q1;
	float *scr = r->scratch + r->scratch_per * (size_t)thread;

	si = seq_of(r, r->first, i);
	s = &r->s[si];
	local = i - r->first[si];
	if (r->np[si] > 0) { /* one partition of one query */
		int np = r->np[si], pi = local % np, qi = local / np % s->nq;
		int64_t p0, p1, lo = s->k_lo > 0 ? s->k_lo : 0, p, hi;
		float *po = r->part + r->poff[si] +
		    (size_t)local * G * (hd + 1);
		kvh = local / np / s->nq;
		parts_of(s, 0, &p0, &p1);
		p = p0 + pi;
		hi = (p + 1) * ATTN_PART < s->k_hi ? (p + 1) * ATTN_PART
		                                    : s->k_hi;
		attn_span(r, s, kvh, qi, p * ATTN_PART > lo ? p * ATTN_PART : lo,
		    hi, scr, po, po + (size_t)G * hd);
		return;
	}
	nch = (s->nq + ATTN_QUERIES - 1) / ATTN_QUERIES;
	kvh = local / nch;
	c = local % nch;
	q1 = (c + 1) * ATTN_QUERIES < s->nq ? (c + 1) * ATTN_QUERIES : s->nq;
	attn_queries(r, s, kvh, c * ATTN_QUERIES, q1, scr);
}

/* the second region: fold the parts of (split sequence, kv head, query) */
static void
fold_task(void *arg, int i, int thread)
{
	const struct attn_run *r = arg;
	const int hd = r->kv->c.head_dim, G = r->n_heads / r->kv->c.n_kv_heads;
	int si = seq_of(r, r->ffirst, i), local = i - r->ffirst[si], pi, np;
	const struct medha_attn_seq *s = &r->s[si];
	int qi = local % s->nq, kvh = local / s->nq;
	float *o, *l;

	(void)thread;
	np = r->np[si];
	o = out_of(r, s, kvh, qi, &l);
	for (pi = 0; pi < np; pi++) {
		const float *po = r->part + r->poff[si] +
		    ((size_t)local * np + pi) * G * (hd + 1);
		fold(G, hd, o, l, po, po + (size_t)G * hd, pi == 0);
	}
	make_forms(r, s, kvh, qi);
}

int
medha_attn_run(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int layer, int n_heads, const struct medha_attn_seq *s, int ns,
    float *scratch, size_t scratch_per)
{
	struct attn_run r;
	const size_t G = (size_t)(n_heads / kv->c.n_kv_heads);
	const size_t per = G * ((size_t)kv->c.head_dim + 1);
	size_t nparts = 0;
	int i, n, nf;

	if (ns <= 0)
		return 0;
	memset(&r, 0, sizeof(r));
	r.first = medha_calloc((size_t)ns + 1, sizeof(int));
	r.ffirst = medha_calloc((size_t)ns + 1, sizeof(int));
	r.np = medha_calloc((size_t)ns, sizeof(int));
	r.poff = medha_calloc((size_t)ns, sizeof(size_t));
	if (r.first == NULL || r.ffirst == NULL || r.np == NULL ||
	    r.poff == NULL)
		goto nomem;
	r.kv = kv;
	r.layer = layer;
	r.n_heads = n_heads;
	r.s = s;
	r.ns = ns;
	r.scratch = scratch;
	r.scratch_per = scratch_per;
	r.nk_max = 0;
	for (i = 0; i < ns; i++) {
		int64_t nk = s[i].k_hi - (s[i].k_lo > 0 ? s[i].k_lo : 0);
		int units = kv->c.n_kv_heads * s[i].nq;
		if (nk > r.nk_max)
			r.nk_max = nk;
		r.np[i] = split_parts(&s[i]);
		r.poff[i] = nparts * per;
		if (r.np[i] > 0) {
			nparts += (size_t)units * r.np[i];
			r.first[i + 1] = r.first[i] + units * r.np[i];
			r.ffirst[i + 1] = r.ffirst[i] + units;
		} else {
			r.first[i + 1] = r.first[i] +
			    kv->c.n_kv_heads *
			        ((s[i].nq + ATTN_QUERIES - 1) / ATTN_QUERIES);
			r.ffirst[i + 1] = r.ffirst[i];
		}
	}
	if (nparts > 0 &&
	    (r.part = malloc(nparts * per * sizeof(float))) == NULL)
		goto nomem;
	n = r.first[ns];
	nf = r.ffirst[ns];
	if (tp != NULL) {
		medha_threadpool_run(tp, n, attn_task, &r);
		medha_threadpool_run(tp, nf, fold_task, &r);
	} else {
		for (i = 0; i < n; i++)
			attn_task(&r, i, 0);
		for (i = 0; i < nf; i++)
			fold_task(&r, i, 0);
	}
	free(r.first);
	free(r.ffirst);
	free(r.np);
	free(r.poff);
	free(r.part);
	return 0;
nomem:
	free(r.first);
	free(r.ffirst);
	free(r.np);
	free(r.poff);
	return MEDHA_ENOMEM;
}

int
medha_cpu_attn(struct medha_threadpool *tp, const struct medha_kvcache *kv,
    int seq, int layer, int n_heads, const float *q, int nq, int64_t qpos,
    int64_t k_lo, int64_t k_hi, float *out, float *lse)
{
	struct medha_attn_seq s = {
	    seq, q, nq, qpos, k_lo, k_hi, out, lse, 0, NULL, 0, 0};
	int64_t len = medha_kv_seq_len(kv, seq);
	size_t per;
	float *scr;
	int nt = tp != NULL ? medha_threadpool_size(tp) : 1, rc;

	if (len < 0 || layer < 0 || layer >= kv->c.n_layers || n_heads < 1 ||
	    n_heads % kv->c.n_kv_heads != 0 ||
	    n_heads / kv->c.n_kv_heads > 64 || nq < 0 || qpos < 0 ||
	    k_hi > len || k_hi > kv->seq[seq].nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	if (k_hi < k_lo)
		k_hi = k_lo;
	per = medha_attn_scratch(kv, n_heads, k_hi - (k_lo > 0 ? k_lo : 0));
	if ((scr = medha_calloc(per * (size_t)nt, sizeof(float))) == NULL)
		return MEDHA_ENOMEM;
	rc = medha_attn_run(tp, kv, layer, n_heads, &s, 1, scr, per);
	free(scr);
	return rc;
}

void
medha_attn_merge(int k, const float *const *o, const float *const *lse, int n,
    int d, float *out, float *out_lse)
{
	float m, w, sum, acc;
	int i, r, j;

	for (r = 0; r < n; r++) {
		m = -INFINITY;
		for (i = 0; i < k; i++)
			m = fmaxf(m, lse[i][r]);
		if (m == -INFINITY) {
			for (j = 0; j < d; j++)
				out[(size_t)r * d + j] = 0;
			out_lse[r] = -INFINITY;
			continue;
		}
		sum = 0;
		for (i = 0; i < k; i++)
			sum += lse[i][r] == -INFINITY ? 0 : expf(lse[i][r] - m);
		for (j = 0; j < d; j++) {
			acc = 0;
			for (i = 0; i < k; i++) {
				if (lse[i][r] == -INFINITY)
					continue;
				w = expf(lse[i][r] - m);
				acc += w * o[i][(size_t)r * d + j];
			}
			out[(size_t)r * d + j] = acc / sum;
		}
		out_lse[r] = m + logf(sum);
	}
}
