/*
 * cpu_kernel_test.c: the CPU backend's kernels (libcore/cpu/cpu_mm*.c,
 * cpu_attn*.c) and its thread pool (threadpool.c), each against a
 * float64 reference computed here.
 *  - attention and its log-sum-exp against float64, f32 and f16 caches,
 *    whole and split into 1-4 key ranges merged with medha_attn_merge(),
 *    and ranges a query sees only partly or not at all; llama4's chunked
 *    attention (each query its chunk's keys only, with a KVP base, on the
 *    fast and the llama.cpp-order paths);
 *  - the matrix product of every weight type (F32, F16, BF16, Q8_0, Q4_0,
 *    Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K, IQ4_NL, IQ4_XS) with 1 to 13 tokens, tightly (1e-5 of sum |w x|)
 *    against the same activation rounding redone in float64, and loosely
 *    (2e-2) against the exact activations; the reference mode within
 *    1e-5 of sum |w x| for every type;
 *  - the pool runs every task exactly once, for any count and size.
 * The largest errors seen are printed (stderr) for the record.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/sample.h"
#include "cpu/threadpool.h"
#include "testutil.h"

/* ---- the shape of the test models of cpu_test.c ---- */
#define CHUNK 64

#define NL 2
#define NH 4
#define NKV 2
#define HD 16

/* ---- attention and LSE against float64 ---- */

static void
attn_ref(struct medha_kvcache *kv, int seq, const float *q, int nq,
    int64_t qpos, int64_t lo, int64_t hi, double *out, double *lse)
{
	float krow[HD], vrow[HD];
	double s[1024], m, z;
	int i, h, d;
	int64_t j, e;

	for (i = 0; i < nq; i++)
		for (h = 0; h < NH; h++) {
			const float *qh = q + ((size_t)i * NH + h) * HD;
			double *o = out + ((size_t)i * NH + h) * HD;
			e = hi < qpos + i + 1 ? hi : qpos + i + 1;
			m = -INFINITY;
			for (j = lo; j < e; j++) {
				medha_kv_read(kv, seq, 0, 0, h / (NH / NKV), j,
				    krow);
				s[j - lo] = 0;
				for (d = 0; d < HD; d++)
					s[j - lo] += (double)qh[d] * krow[d];
				s[j - lo] /= sqrt((double)HD);
				m = fmax(m, s[j - lo]);
			}
			z = 0;
			for (d = 0; d < HD; d++)
				o[d] = 0;
			for (j = lo; j < e; j++) {
				double p = exp(s[j - lo] - m);
				z += p;
				medha_kv_read(kv, seq, 0, 1, h / (NH / NKV), j,
				    vrow);
				for (d = 0; d < HD; d++)
					o[d] += p * vrow[d];
			}
			for (d = 0; d < HD; d++)
				o[d] = e > lo ? o[d] / z : 0;
			lse[(size_t)i * NH + h] =
			    e > lo ? m + log(z) : -INFINITY;
		}
}

/*
 * Chunked attention: queries at positions 100..139 of a cache whose key
 * 0 stands for position base (a KVP piece), chunks of CHUNK positions;
 * each query's output and log-sum-exp are float64's over the keys of
 * its own chunk up to it (the chunk boundary at 128 - base crossed), on
 * the fast path and, with base 0, llama.cpp's order.
 */
static void
test_attention_chunk(void **state)
{
	enum { LEN = 140, NQ = 40, Q0 = 100 };
	struct medha_threadpool *tp;
	float k[LEN * NKV * HD], v[LEN * NKV * HD], q[NQ * NH * HD];
	float out[NQ * NH * HD], lse[NQ * NH], *scr;
	double ro[NH * HD], rl[NH], eo = 0, el = 0;
	struct medha_kvcache *kv = kv_new(MEDHA_KV_F32, 48, NL, NKV, HD);
	int i, seq, t, compat;
	size_t per;

	(void)state;
	assert_int_equal(medha_threadpool_init(&tp, 2), 0);
	rng_seed(91);
	for (i = 0; i < LEN * NKV * HD; i++) {
		k[i] = 2.0f * frand();
		v[i] = frand();
	}
	for (i = 0; i < NQ * NH * HD; i++)
		q[i] = 2.0f * frand();
	assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
	assert_int_equal(medha_kv_reserve(kv, seq, LEN), 0);
	assert_int_equal(medha_kv_write(kv, seq, 0, 0, LEN, k, v), 0);
	assert_int_equal(medha_kv_set_len(kv, seq, LEN), 0);
	per = medha_attn_scratch(kv, NH, LEN);
	assert_non_null(scr = calloc(per * 2, sizeof(float)));
	for (compat = 0; compat <= 1; compat++)
		for (int64_t base = 0; base <= (compat ? 0 : 40); base += 20) {
			struct medha_attn_seq s = {0};
			s.seq = seq;
			s.q = q;
			s.nq = NQ;
			s.qpos = Q0;
			s.k_hi = LEN;
			s.out = out;
			s.lse = lse;
			s.compat = compat;
			s.chunk = CHUNK;
			s.base = base;
			assert_int_equal(medha_attn_run(tp, kv, 0, NH, &s, 1,
			                     scr, per),
			    0);
			for (t = 0; t < NQ; t++) {
				int64_t p = Q0 + t;
				int64_t lo = (p + base) / CHUNK * CHUNK - base;
				attn_ref(kv, seq, q + (size_t)t * NH * HD, 1, p,
				    lo < 0 ? 0 : lo, LEN, ro, rl);
				for (i = 0; i < NH * HD; i++)
					eo = fmax(eo,
					    fabs(out[(size_t)t * NH * HD + i] -
					        ro[i]));
				for (i = 0; i < NH; i++)
					el = fmax(el,
					    fabs(lse[t * NH + i] - rl[i]) /
					        fmax(1, fabs(rl[i])));
			}
		}
	fprintf(stderr, "chunked attention: out %.2e, lse %.2e\n", eo, el);
	assert_true(eo < 1e-5 && el < 1e-5);
	free(scr);
	medha_kvcache_free(kv);
	medha_threadpool_free(tp);
}

static void
test_attention(void **state)
{
	enum { LEN = 700, NQ = 20 };
	struct medha_threadpool *tp;
	float k[LEN * NKV * HD], v[LEN * NKV * HD], q[NQ * NH * HD];
	float out[4][NQ * NH * HD], lse[4][NQ * NH];
	double ro[NQ * NH * HD], rl[NQ * NH], eo = 0, el = 0;
	const float *po[4], *pl[4];
	int type, i, seq, sh, k_;

	(void)state;
	assert_int_equal(medha_threadpool_init(&tp, 2), 0);
	for (type = MEDHA_KV_F32; type <= MEDHA_KV_F16; type++) {
		struct medha_kvcache *kv = kv_new(type, 48, NL, NKV, HD);
		rng_seed(77 + type);
		for (i = 0; i < LEN * NKV * HD; i++) {
			k[i] = 2.0f * frand();
			v[i] = frand();
		}
		for (i = 0; i < NQ * NH * HD; i++)
			q[i] = 2.0f * frand();
		assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
		assert_int_equal(medha_kv_reserve(kv, seq, LEN), 0);
		assert_int_equal(medha_kv_write(kv, seq, 0, 0, LEN, k, v), 0);
		assert_int_equal(medha_kv_set_len(kv, seq, LEN), 0);
		/* 20 queries at 130..149 over all keys, then 1..4 ranges */
		for (k_ = 1; k_ <= 4; k_++) {
			for (sh = 0; sh < k_; sh++) {
				assert_int_equal(medha_cpu_attn(tp, kv, seq, 0,
				                     NH, q, NQ, LEN - NQ,
				                     (int64_t)LEN * sh / k_,
				                     (int64_t)LEN * (sh + 1) /
				                         k_,
				                     out[sh], lse[sh]),
				    0);
				po[sh] = out[sh];
				pl[sh] = lse[sh];
			}
			medha_attn_merge(k_, po, pl, NQ * NH, HD, out[0],
			    lse[0]);
			attn_ref(kv, seq, q, NQ, LEN - NQ, 0, LEN, ro, rl);
			for (i = 0; i < NQ * NH * HD; i++)
				eo = fmax(eo, fabs(out[0][i] - ro[i]));
			for (i = 0; i < NQ * NH; i++)
				el = fmax(el,
				    fabs(lse[0][i] - rl[i]) /
				        fmax(1, fabs(rl[i])));
		}
		/* past one partition of 256 keys: one and two queries (a
		   decode, split across threads by partition) and the same
		   positions among 20 (one task per query tile): the same
		   bits, within float64's reach */
		for (k_ = 1; k_ <= 2; k_++) {
			assert_int_equal(medha_cpu_attn(tp, kv, seq, 0, NH,
			                     q + (size_t)(NQ - k_) * NH * HD,
			                     k_, LEN - k_, 0, LEN, out[1],
			                     lse[1]),
			    0);
			assert_int_equal(medha_cpu_attn(tp, kv, seq, 0, NH, q,
			                     NQ, LEN - NQ, 0, LEN, out[2],
			                     lse[2]),
			    0);
			assert_memory_equal(out[1],
			    out[2] + (size_t)(NQ - k_) * NH * HD,
			    sizeof(float) * k_ * NH * HD);
			assert_memory_equal(lse[1], lse[2] + (NQ - k_) * NH,
			    sizeof(float) * k_ * NH);
			attn_ref(kv, seq, q + (size_t)(NQ - k_) * NH * HD, k_,
			    LEN - k_, 0, LEN, ro, rl);
			for (i = 0; i < k_ * NH * HD; i++)
				eo = fmax(eo, fabs(out[1][i] - ro[i]));
			for (i = 0; i < k_ * NH; i++)
				el = fmax(el,
				    fabs(lse[1][i] - rl[i]) /
				        fmax(1, fabs(rl[i])));
		}
		/* a range after every query sees nothing */
		assert_int_equal(medha_cpu_attn(tp, kv, seq, 0, NH, q, 2, 10,
		                     100, LEN, out[1], lse[1]),
		    0);
		assert_true(isinf(lse[1][0]) && lse[1][0] < 0);
		assert_true(out[1][5] == 0);
		/* a range that only some queries reach */
		assert_int_equal(medha_cpu_attn(tp, kv, seq, 0, NH, q, NQ, 60,
		                     70, 100, out[1], lse[1]),
		    0);
		attn_ref(kv, seq, q, NQ, 60, 70, 100, ro, rl);
		for (i = 0; i < NQ * NH * HD; i++)
			eo = fmax(eo, fabs(out[1][i] - ro[i]));
		for (i = 0; i < NQ * NH; i++)
			if (isinf(rl[i]))
				assert_true(isinf(lse[1][i]));
			else
				el = fmax(el,
				    fabs(lse[1][i] - rl[i]) /
				        fmax(1, fabs(rl[i])));
		medha_kvcache_free(kv);
	}
	fprintf(stderr,
	    "# attention vs float64: out abs err %g (values in "
	    "[-1,1]), lse rel err %g\n",
	    eo, el);
	assert_true(eo < 1e-5);
	assert_true(el < 1e-5);
	medha_threadpool_free(tp);
}

/* ---- matrix products against float64 ---- */

/*
 * The types the packed kernel of cpu_mm_packk.c multiplies with Q8
 * activations (on builds with AVX2 or AVX512-VNNI; the others take the
 * float path, f32 activations).
 */
static int
q8_packed(int type)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) ||                   \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	switch (type) {
	case MEDHA_GGML_Q5_0:
	case MEDHA_GGML_Q5_1:
	case MEDHA_GGML_Q2_K:
	case MEDHA_GGML_Q3_K:
	case MEDHA_GGML_Q4_K:
	case MEDHA_GGML_Q5_K:
	case MEDHA_GGML_Q6_K:
	case MEDHA_GGML_IQ4_NL:
	case MEDHA_GGML_IQ4_XS: return 1;
	}
#endif
	(void)type;
	return 0;
}

/* Random blocks of a type the test cannot quantize, scales 0.01. */
static void
random_blocks(int type, unsigned char *p, size_t rb)
{
	const uint16_t h = medha_fp32_to_fp16(0.01f);
	size_t j, bs = (size_t)medha_ggml_block_bytes(type);
	int at[2] = {0, -1}, i;

	for (j = 0; j < rb; j++)
		p[j] = (unsigned char)(frand() * 128 + 128);
	switch (type) {
	case MEDHA_GGML_Q4_K:
	case MEDHA_GGML_Q5_K: at[1] = 2; break;
	case MEDHA_GGML_Q6_K: at[0] = 208; break;
	case MEDHA_GGML_Q3_K: at[0] = 108; break;
	case MEDHA_GGML_Q2_K: at[0] = 80, at[1] = 82; break;
	default: break; /* IQ4_NL, IQ4_XS: d first */
	}
	for (j = 0; j < rb; j += bs)
		for (i = 0; i < 2; i++)
			if (at[i] >= 0) {
				p[j + (size_t)at[i]] = (unsigned char)h;
				p[j + (size_t)at[i] + 1] = h >> 8;
			}
}

/* The activation rounding of the fast path, redone here in float64. */
static void
act_round(int type, const float *x, int k, double *xr, double *xs)
{
	int b, j;

	for (j = 0; j < k; j++)
		xr[j] = x[j];
	if (type == MEDHA_GGML_F16)
		for (j = 0; j < k; j++)
			xr[j] = medha_fp16_to_fp32(medha_fp32_to_fp16(x[j]));
	else if (type == MEDHA_GGML_BF16)
		for (j = 0; j < k; j++)
			xr[j] = medha_bf16_to_fp32(medha_fp32_to_bf16(x[j]));
	else if (type == MEDHA_GGML_Q8_0 || type == MEDHA_GGML_Q4_0 ||
	    type == MEDHA_GGML_Q4_1 || q8_packed(type))
		for (b = 0; b < k / 32; b++) {
			float amax = 0, id, d;
			int sum = 0, q;
			for (j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(x[b * 32 + j]));
			d = amax / 127.0f;
			id = amax != 0 ? 127.0f / amax : 0;
			for (j = 0; j < 32; j++) {
				q = (int)rintf(x[b * 32 + j] * id);
				sum += q;
				xr[b * 32 + j] = q *
				    (double)medha_fp16_to_fp32(
				        medha_fp32_to_fp16(d));
			}
			/* Q4_1 takes d * sum(q) rounded to f16 for the mins */
			xs[b] = medha_fp16_to_fp32(medha_fp32_to_fp16(d * sum));
		}
}

/* a (rows, k) weight of type over data */
static struct medha_tensor
weight(int type, int rows, int k, const void *data)
{
	struct medha_tensor w;

	memset(&w, 0, sizeof(w));
	w.name = "w";
	w.type = type;
	w.n_dims = 2;
	w.ne[0] = k;
	w.ne[1] = rows;
	w.ne[2] = w.ne[3] = 1;
	w.data = data;
	w.nbytes = medha_ggml_row_bytes(type, k) * (size_t)rows;
	return w;
}

/*
 * medha_cpu_mm_rate times real products: a positive, finite rate for
 * each type it multiplies, one and several threads, a matrix larger
 * than its 4M-weight cap; refusals for a type it cannot multiply and
 * for bad shapes.
 */
static void
test_mm_rate(void **state)
{
	static const int types[] = {MEDHA_GGML_F32, MEDHA_GGML_F16,
	    MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_1};
	enum { ROWS = 4104, K = 1024 }; /* 4.2M weights */
	unsigned char *wq = calloc((size_t)ROWS * K, 4);
	float row[K];
	double f;

	(void)state;
	assert_non_null(wq);
	rng_seed(5);
	for (int ti = 0; ti < (int)(sizeof(types) / sizeof(types[0])); ti++) {
		size_t rb = medha_ggml_row_bytes(types[ti], K);
		struct medha_tensor w = weight(types[ti], ROWS, K, wq);
		for (int r = 0; r < ROWS; r++) {
			for (int j = 0; j < K; j++)
				row[j] = frand();
			assert_int_equal(medha_quant_row(types[ti], row,
			                     wq + rb * r, K),
			    0);
		}
		for (int th = 1; th <= 2; th++) {
			f = -1;
			assert_int_equal(medha_cpu_mm_rate(&w, 16, th, &f), 0);
			assert_true(f > 1e6 && isfinite(f));
		}
	}
	{
		struct medha_tensor w = weight(MEDHA_GGML_F32, 8, 64, wq);
		w.type = 99; /* no product */
		assert_int_equal(medha_cpu_mm_rate(&w, 4, 1, &f), MEDHA_EUNSUP);
		assert_true(f == 0);
		w.type = MEDHA_GGML_F32;
		assert_int_equal(medha_cpu_mm_rate(&w, 0, 1, &f), MEDHA_EINVAL);
		w.n_dims = 3;
		assert_int_equal(medha_cpu_mm_rate(&w, 4, 1, &f), MEDHA_EINVAL);
	}
	free(wq);
}

static void
test_matmul(void **state)
{
	static const int types[] = {MEDHA_GGML_F32, MEDHA_GGML_F16,
	    MEDHA_GGML_BF16, MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0, MEDHA_GGML_Q4_1,
	    MEDHA_GGML_Q4_K, MEDHA_GGML_Q6_K, MEDHA_GGML_Q5_0, MEDHA_GGML_Q5_1,
	    MEDHA_GGML_Q2_K, MEDHA_GGML_Q3_K, MEDHA_GGML_Q5_K,
	    MEDHA_GGML_IQ4_NL, MEDHA_GGML_IQ4_XS};
	enum { ROWS = 67, K = 512, N = 13 };
	struct medha_threadpool *tp;
	struct medha_tensor w;
	float *wd = malloc(sizeof(float) * ROWS * K), x[N * K], y[N * ROWS];
	unsigned char *wq = malloc(ROWS * 210 * (K / 256) + ROWS * K * 4);
	double xr[K], xs[K / 32], tight, loose, abs_, e;
	int ti, r, t, j, ref, n;
	size_t rb;

	(void)state;
	assert_non_null(wd);
	assert_non_null(wq);
	assert_int_equal(medha_threadpool_init(&tp, 3), 0);
	rng_seed(99);
	for (j = 0; j < N * K; j++)
		x[j] = frand() * (j % 7 == 0 ? 4.0f : 1.0f);
	for (ti = 0; ti < (int)(sizeof(types) / sizeof(types[0])); ti++) {
		int type = types[ti];
		rb = medha_ggml_row_bytes(type, K);
		for (r = 0; r < ROWS; r++) {
			float row[K];
			for (j = 0; j < K; j++)
				row[j] = 0.5f * frand() + 0.05f;
			if (medha_quant_row(type, row, wq + rb * r, K) != 0)
				/* K-quants: random blocks with sane scales */
				random_blocks(type, wq + rb * r, rb);
			assert_int_equal(medha_dequant_row(type, wq + rb * r,
			                     wd + (size_t)r * K, K),
			    0);
		}
		w = weight(type, ROWS, K, wq);
		for (ref = 0; ref <= 1; ref++)
			for (n = 1; n <= N; n += 4) {
				assert_int_equal(medha_cpu_matmul(ref ? NULL
				                                      : tp,
				                     &w, x, n, y, ref),
				    0);
				tight = loose = 0;
				for (t = 0; t < n; t++) {
					act_round(ref ? MEDHA_GGML_F32 : type,
					    x + t * K, K, xr, xs);
					for (r = 0; r < ROWS; r++) {
						double s = 0, se = 0;
						const float *wr =
						    wd + (size_t)r * K;
						abs_ = 0;
						for (j = 0; j < K; j++) {
							s += (double)wr[j] *
							    xr[j];
							se += (double)wr[j] *
							    x[t * K + j];
							abs_ +=
							    fabs((double)wr[j] *
							        x[t * K + j]);
						}
						if (!ref &&
						    type == MEDHA_GGML_Q4_1) {
							/* the mins times s */
							double sm = 0;
							const unsigned char *p =
							    wq + rb * r;
							s = 0;
							for (j = 0; j < K / 32;
							     j++) {
								double d = medha_fp16_to_fp32(
								    (uint16_t)(p[20 *
								                   j] |
								        p[20 * j +
								            1]
								            << 8));
								double m = medha_fp16_to_fp32((
								    uint16_t)(p[20 * j +
								                  2] |
								    p[20 * j +
								        3]
								        << 8));
								int b2;
								for (b2 = 0;
								     b2 < 32;
								     b2++) {
									int qq =
									    b2 <
									        16
									    ? p[20 * j +
									          4 +
									          b2] &
									        15
									    : p[20 * j +
									          4 +
									          b2 -
									          16] >>
									        4;
									s += d *
									    qq *
									    xr[j * 32 +
									        b2];
								}
								sm += m * xs[j];
							}
							s += sm;
						}
						e = fabs(y[t * ROWS + r] - s) /
						    abs_;
						tight = fmax(tight, e);
						loose = fmax(loose,
						    fabs(y[t * ROWS + r] - se) /
						        abs_);
					}
				}
				if (tight > 1e-5 || loose > 2e-2)
					fail_msg("%s%s n=%d: err %g (exact "
					         "activations %g)",
					    medha_ggml_type_name(type),
					    ref ? " (ref)" : "", n, tight,
					    loose);
				if (n == 13)
					fprintf(stderr,
					    "# matmul %-5s%s: err %.2g of sum "
					    "|w x| (vs exact activations "
					    "%.2g)\n",
					    medha_ggml_type_name(type),
					    ref ? " ref" : "    ", tight,
					    loose);
			}
	}
	medha_threadpool_free(tp);
	free(wd);
	free(wq);
}

/*
 * The packed integer kernel (builds with AVX2 or AVX512-VNNI) sums each
 * block exactly in int32, then acc = fma(dw * dx, (float)sum, acc) block
 * after block (Q4_1: acc = fma(m, s, acc) after): redone here step by
 * step, its results must be equal bit for bit, for every tile of tokens
 * and rows, on raw quants of every value (Q8_0's -128 as well).
 */
static void
test_matmul_packed(void **state)
{
	static const int types[] = {MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0,
	    MEDHA_GGML_Q4_1};
	enum { ROWS = 67, K = 256, N = 13, NB = K / 32 };
	struct medha_threadpool *tp;
	struct medha_tensor w;
	struct medha_pack pk;
	float x[N * K], y[N * ROWS], dx[N][NB], sx[N][NB];
	int xq[N][K];
	unsigned char *wq = malloc(ROWS * 34 * NB);
	int ti, r, t, b, j, n, bad;

	(void)state;
	assert_non_null(wq);
	assert_int_equal(medha_threadpool_init(&tp, 3), 0);
	rng_seed(7);
	for (j = 0; j < N * K; j++)
		x[j] = frand() * (j % 5 == 0 ? 3.0f : 1.0f);
	/* the activations' Q8 form: q = rint(x * 127 / amax), the scale
	   and d * sum(q) rounded to f16 */
	for (t = 0; t < N; t++)
		for (b = 0; b < NB; b++) {
			const float *xb = x + t * K + b * 32;
			float amax = 0, d, id;
			int sum = 0;
			for (j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(xb[j]));
			d = amax / 127.0f;
			id = amax != 0 ? 127.0f / amax : 0;
			for (j = 0; j < 32; j++)
				sum += xq[t][b * 32 + j] = (int)rintf(xb[j] * id);
			dx[t][b] = medha_fp16_to_fp32(medha_fp32_to_fp16(d));
			sx[t][b] = medha_fp16_to_fp32(
			    medha_fp32_to_fp16(d * (float)sum));
		}
	for (ti = 0; ti < 3; ti++) {
		const int type = types[ti];
		const size_t rb = medha_ggml_row_bytes(type, K), bb = rb / NB;

		for (j = 0; j < (int)(rb * ROWS); j++)
			wq[j] = (unsigned char)(frand() * 128 + 128);
		for (r = 0; r < ROWS; r++)
			for (b = 0; b < NB; b++) {
				unsigned char *p = wq + rb * r + bb * b;
				uint16_t h =
				    medha_fp32_to_fp16(0.02f * frand() + 0.001f);
				p[0] = (unsigned char)h, p[1] = h >> 8;
				if (type == MEDHA_GGML_Q4_1) {
					h = medha_fp32_to_fp16(0.1f * frand());
					p[2] = (unsigned char)h, p[3] = h >> 8;
				} else if (type == MEDHA_GGML_Q8_0 && b == 0)
					p[2 + r % 32] = 0x80; /* -128 */
			}
		w = weight(type, ROWS, K, wq);
		if (medha_pack_make(&pk, &w) == MEDHA_EUNSUP) {
			fprintf(stderr, "# no packed kernel in this build\n");
			break;
		}
		medha_pack_free(&pk);
		for (n = 1, bad = 0; n <= N; n++) {
			assert_int_equal(medha_cpu_matmul(tp, &w, x, n, y, 0), 0);
			for (t = 0; t < n; t++)
				for (r = 0; r < ROWS; r++) {
					float acc = 0;
					for (b = 0; b < NB; b++) {
						const unsigned char *p =
						    wq + rb * r + bb * b;
						float dw = medha_fp16_to_fp32(
						    (uint16_t)(p[0] | p[1] << 8));
						int32_t sum = 0, q;
						for (j = 0; j < 32; j++) {
							q = type == MEDHA_GGML_Q8_0
							    ? (int8_t)p[2 + j]
							    : j < 16
							    ? p[bb - 16 + j] & 15
							    : p[bb - 32 + j] >> 4;
							if (type == MEDHA_GGML_Q4_0)
								q -= 8;
							sum += q * xq[t][b * 32 + j];
						}
						acc = fmaf(dw * dx[t][b], (float)sum,
						    acc);
						if (type == MEDHA_GGML_Q4_1)
							acc = fmaf(medha_fp16_to_fp32(
							        (uint16_t)(p[2] |
							            p[3] << 8)),
							    sx[t][b], acc);
					}
					if (memcmp(&acc, &y[t * ROWS + r],
					        sizeof(acc)) != 0 && bad++ < 3)
						fprintf(stderr,
						    "# %s n=%d token %d row %d: "
						    "%.9g, expected %.9g\n",
						    medha_ggml_type_name(type), n,
						    t, r, y[t * ROWS + r], acc);
				}
		}
		if (bad > 0)
			fail_msg("%s: %d results differ from the exact sums'",
			    medha_ggml_type_name(type), bad);
	}
	medha_threadpool_free(tp);
	free(wq);
}

/*
 * exp and SwiGLU give each element the same bits whether it falls in a
 * vector (AVX2, AVX512) or in the scalar tail: one element at a time
 * runs the tail's code. Values across the clamps, NaN and infinities.
 */
static void
test_vexp_lanes(void **state)
{
	enum { N = 203 };
	float x[N], y[N], e1, g[N], u[N], g1;
	int i;

	(void)state;
	rng_seed(5);
	for (i = 0; i < N; i++) {
		x[i] = frand() * (i % 3 == 0 ? 100.0f : 10.0f);
		u[i] = frand();
	}
	x[7] = NAN, x[8] = INFINITY, x[9] = -INFINITY, x[10] = 0.0f;
	medha_cpu_vexp(x, y, N);
	for (i = 0; i < N; i++) {
		medha_cpu_vexp(x + i, &e1, 1);
		if (memcmp(&e1, y + i, sizeof(e1)) != 0)
			fail_msg("exp(%.9g): %.9g in a vector, %.9g alone",
			    x[i], y[i], e1);
	}
	assert_true(fabsf(y[100] - expf(x[100])) <= 2e-7f * expf(x[100]));
	memcpy(g, x, sizeof(g));
	medha_cpu_swiglu(g, u, N);
	for (i = 0; i < N; i++) {
		g1 = x[i];
		medha_cpu_swiglu(&g1, u + i, 1);
		if (memcmp(&g1, g + i, sizeof(g1)) != 0 &&
		    !(isnan(g1) && isnan(g[i])))
			fail_msg("swiglu(%.9g): %.9g in a vector, %.9g alone",
			    x[i], g[i], g1);
	}
}

/* ---- the thread pool ---- */

struct count {
	int hits[1000];
};

static void
count_task(void *arg, int i, int thread)
{
	struct count *c = arg;

	(void)thread;
	__atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

/* a worker's task outlasts the caller's spin: the caller sleeps until
   the last task's finisher wakes it (a lost wake-up hangs here); the
   caller's own tasks take a while, so that a sleeping worker is up and
   claims some before the caller has taken them all */
static void
slow_task(void *arg, int i, int thread)
{
	struct count *c = arg;

	usleep(thread != 0 ? 2000 : 300);
	__atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

static void
test_threadpool(void **state)
{
	struct medha_threadpool *tp;
	struct count c;
	int n, i, nt;

	(void)state;
	for (nt = 1; nt <= 4; nt++) {
		assert_int_equal(medha_threadpool_init(&tp, nt), 0);
		for (n = 0; n <= 1000; n += 37) {
			memset(&c, 0, sizeof(c));
			if (n % 2 == 0) /* sleeping workers wake for a region */
				medha_threadpool_nap(tp);
			medha_threadpool_run(tp, n, count_task, &c);
			for (i = 0; i < 1000; i++)
				assert_int_equal(c.hits[i], i < n ? 1 : 0);
		}
		for (n = 2; n <= 12 && nt > 1; n++) {
			memset(&c, 0, sizeof(c));
			medha_threadpool_run(tp, n, slow_task, &c);
			for (i = 0; i < n; i++) /* all done on return */
				assert_int_equal(c.hits[i], 1);
		}
		medha_threadpool_free(tp);
	}
	assert_int_equal(medha_threadpool_init(&tp, 0), MEDHA_EINVAL);
	/* never more threads than CPUs to run them (-t 256 on 2 cores ran
	   20x slower than -t 2), and the tasks all run */
	{
		cpu_set_t cs;
		int cpus;
		assert_int_equal(sched_getaffinity(0, sizeof(cs), &cs), 0);
		cpus = CPU_COUNT(&cs);
		assert_int_equal(
		    medha_threadpool_init(&tp, MEDHA_THREADS_MAX), 0);
		assert_int_equal(medha_threadpool_size(tp),
		    cpus < MEDHA_THREADS_MAX ? cpus : MEDHA_THREADS_MAX);
		memset(&c, 0, sizeof(c));
		medha_threadpool_run(tp, 1000, count_task, &c);
		for (i = 0; i < 1000; i++)
			assert_int_equal(c.hits[i], 1);
		medha_threadpool_free(tp);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_threadpool),
	    cmocka_unit_test(test_matmul),
	    cmocka_unit_test(test_matmul_packed),
	    cmocka_unit_test(test_mm_rate),
	    cmocka_unit_test(test_vexp_lanes),
	    cmocka_unit_test(test_attention),
	    cmocka_unit_test(test_attention_chunk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
