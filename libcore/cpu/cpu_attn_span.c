/*
 * cpu_attn_span.c: the attention of one query over one span of keys
 * (attn_span, cpu_attn_impl.h) and the vector kernels it is built of,
 * each with a fixed order of operations: the scores of the query heads
 * that share a kv head against a K run of 16 keys, their max, exp and
 * sum, and the weighted values. AVX-512 or AVX2 (eight lanes, every
 * result as with sixteen) where the build has them, else plain C in the
 * same order; the order, and why a result depends only on the query's
 * position and the cached K/V, is described in cpu_attn.c.
 */
#include "cpu/cpu_attn_impl.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define ATTN_AVX2 1 /* eight lanes: every result as with sixteen */
#endif

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

/*
 * Keys [lo, hi) (clipped to the query's own position) for query qi of s
 * and the query heads of kv head kvh: o (G, hd) normalized and lse (G).
 * An empty range gives 0s and -INFINITY.
 */
void
attn_span(const struct attn_run *r, const struct medha_attn_seq *s, int kvh,
    int qi, int64_t lo, int64_t hi, float *scr, float *o, float *lse)
{
	const struct medha_kvcache *kv = r->kv;
	const int hd = kv->c.head_dim, G = r->n_heads / kv->c.n_kv_heads;
	const int nh = r->n_heads;
	const float scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)hd);
	int64_t p = s->qpos + qi, nk, j, blk;
	float *sc = scr, *acc = scr + (size_t)G * ATTN_PART;
	float sum[64];
	const float *q = s->q + ((size_t)qi * nh + (size_t)kvh * G) * hd;
	int g;

	if (hi > p + 1)
		hi = p + 1;
	if (lo < 0)
		lo = 0;
	if (lo < medha_attn_first_key(s, p))
		lo = medha_attn_first_key(s, p);
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
	if (s->softcap != 0)
		medha_cpu_softcap(sc, (int64_t)G * nk, s->softcap);
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
