/*
 * cpu_ops.c: the CPU backend's element-wise arithmetic: the one exp
 * every part uses, RMSNorm, RoPE, SwiGLU, and the forms activations are
 * rounded to before a matrix product (cpu_mm.c) multiplies them with a
 * weight type:
 *  - Q8 (for Q8_0, Q4_0, Q4_1 weights): quantized per 32 like ggml's
 *    Q8_0/Q8_1 on x86: d = amax/127 (stored rounded to f16), q = the
 *    nearest-even integer of x*127/amax, and s = d*sum(q) (rounded to
 *    f16) for the Q4_1 minimums;
 *  - x rounded through f16 (F16 weights) or bf16 (BF16 weights);
 *  - x itself (F32, the K-quants, and everything in reference mode).
 * A row's forms depend on that row alone, so they never depend on what
 * else is in the batch.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define TILE 4 /* weight rows a thread dequantizes at once (cpu_mm.c) */

/* ---- scalar helpers ---- */

/* f through f16 and back (nearest even): F16C's instructions where the
   build has them (twice a block of every activation row), quant.c's */
static inline float
f16_round(float f)
{
#if defined(__F16C__)
	return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
	return medha_fp16_to_fp32(medha_fp32_to_fp16(f));
#endif
}

/* ---- exp: Cephes' expf, the same operations in every lane ---- */

#define EXP_HI 88.3762626647949f /* 2^127.5: n stays a normal exponent */
#define EXP_LO -87.3365478515625f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

static inline float
exp1(float x)
{
	float n, r, z, p, s;
	int32_t e;

	x = fminf(fmaxf(x, EXP_LO), EXP_HI);
	n = rintf(x * LOG2E);
	r = fmaf(n, -LN2_HI, x);
	r = fmaf(n, -LN2_LO, r);
	z = r * r;
	p = fmaf(P0, r, P1);
	p = fmaf(p, r, P2);
	p = fmaf(p, r, P3);
	p = fmaf(p, r, P4);
	p = fmaf(p, r, P5);
	p = fmaf(p, z, r);
	p = p + 1.0f;
	e = ((int32_t)n + 127) << 23;
	memcpy(&s, &e, sizeof(s));
	return p * s;
}

#ifdef __AVX512F__
static inline __m512
exp16(__m512 x)
{
	__m512 n, r, z, p;
	__m512i e;

	x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)),
	    _mm512_set1_ps(EXP_HI));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
	r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
	z = _mm512_mul_ps(r, r);
	p = _mm512_fmadd_ps(_mm512_set1_ps(P0), r, _mm512_set1_ps(P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
	p = _mm512_fmadd_ps(p, z, r);
	p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
	e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
	                          _mm512_set1_epi32(127)),
	    23);
	return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#elif defined(__AVX2__) && defined(__FMA__)
/* the same, eight lanes */
static inline __m256
exp8(__m256 x)
{
	__m256 n, r, z, p;
	__m256i e;

	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
	    _mm256_set1_ps(EXP_HI));
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
	    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
	z = _mm256_mul_ps(r, r);
	p = _mm256_fmadd_ps(_mm256_set1_ps(P0), r, _mm256_set1_ps(P1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
	p = _mm256_fmadd_ps(p, z, r);
	p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
	                          _mm256_set1_epi32(127)),
	    23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

void
medha_cpu_vexp(const float *src, float *dst, int64_t n)
{
	int64_t i = 0;

#ifdef __AVX512F__
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i, exp16(_mm512_loadu_ps(src + i)));
#elif defined(__AVX2__) && defined(__FMA__)
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, exp8(_mm256_loadu_ps(src + i)));
#endif
	for (; i < n; i++)
		dst[i] = exp1(src[i]);
}

/* ---- exp and SwiGLU in llama.cpp's AVX2 way (opts.llama_compat) ---- */

static inline float
u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t
f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* ggml_v_expf (AVX2), one lane */
static inline float
gexp(float x)
{
	const float r = 0x1.8p23f;
	float z = fmaf(x, 0x1.715476p+0f, r), n = z - r, b, k, u, j, s1, s2;
	uint32_t e, g;

	b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
	e = f2u(z) << 23;
	k = u2f(e + f2u(1.0f));
	u = b * b;
	j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
	             fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
	    u, 0x1.ffffecp-1f * b);
	if (!(fabsf(n) > 126.0f))
		return fmaf(j, k, k);
	g = n <= 0.0f ? 0x82000000u : 0;
	s1 = u2f(g + 0x7f000000u);
	s2 = u2f(e - g);
	if (fabsf(n) > 192.0f)
		return s1 * s1;
	return fmaf(s2, j, s2) * s1;
}

void
medha_cpu_vexp_llama(const float *src, float *dst, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++)
		dst[i] = gexp(src[i]);
}

void
medha_cpu_swiglu_llama(float *g, const float *u, int64_t n)
{
	int64_t i;

	/* ggml_vec_swiglu_f32: x / (1 + ggml_v_expf(0 - x)) * g, 8 at a
	   time; the tail (n % 8) with libm's expf */
	for (i = 0; i < (n & ~(int64_t)7); i++)
		g[i] = g[i] / (1.0f + gexp(0.0f - g[i])) * u[i];
	for (; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/*
 * RoPE as ggml's rotate_pairs compiled by GCC with -ffp-contract=fast
 * (the prebuilt llama.cpp): x0*c - x1*s and x0*s + x1*c each become
 * one fma of the first product into the rounded second.
 */
void
medha_cpu_rope_llama(float *v, int n_heads, int head_dim, int n_rot,
    const float *cs)
{
	float x0, x1;
	int h, i;

	for (h = 0; h < n_heads; h++, v += head_dim)
		for (i = 0; i < n_rot / 2; i++) {
			x0 = v[2 * i];
			x1 = v[2 * i + 1];
			v[2 * i] = fmaf(x0, cs[2 * i], -(x1 * cs[2 * i + 1]));
			v[2 * i + 1] = fmaf(x0, cs[2 * i + 1], x1 * cs[2 * i]);
		}
}

/* ---- norms, rope, swiglu ---- */

void
medha_cpu_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	double sum = 0;
	float scale;
	int i;

	/* as ggml: squares in f32, their sum in f64, then x*scale*w */
	for (i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	scale = 1.0f / sqrtf((float)(sum / n) + eps);
	for (i = 0; i < n; i++)
		y[i] = (x[i] * scale) * w[i];
}

void
medha_cpu_rope_table(float *cs, int64_t pos, int n_rot, float theta_base,
    const float *freqs)
{
	float theta = (float)pos, th;
	float scale = powf(theta_base, -2.0f / (float)n_rot);
	int i;

	/* ggml's rope cache: the angle is multiplied up in f32 */
	for (i = 0; i < n_rot / 2; i++) {
		th = freqs != NULL ? theta / freqs[i] : theta;
		cs[2 * i] = cosf(th);
		cs[2 * i + 1] = sinf(th);
		theta *= scale;
	}
}

void
medha_cpu_rope(float *v, int n_heads, int head_dim, int n_rot, const float *cs)
{
	float x0, x1;
	int h, i;

	for (h = 0; h < n_heads; h++, v += head_dim)
		for (i = 0; i < n_rot / 2; i++) {
			x0 = v[2 * i];
			x1 = v[2 * i + 1];
			v[2 * i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
			v[2 * i + 1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
		}
}

void
medha_cpu_swiglu(float *g, const float *u, int64_t n)
{
	int64_t i = 0;

#ifdef __AVX512F__
	for (; i + 16 <= n; i += 16) {
		__m512 x = _mm512_loadu_ps(g + i);
		__m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
		_mm512_storeu_ps(g + i,
		    _mm512_mul_ps(_mm512_div_ps(x,
		                      _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
		        _mm512_loadu_ps(u + i)));
	}
#elif defined(__AVX2__) && defined(__FMA__)
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(g + i);
		__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
		_mm256_storeu_ps(g + i,
		    _mm256_mul_ps(_mm256_div_ps(x,
		                      _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
		        _mm256_loadu_ps(u + i)));
	}
#endif
	for (; i < n; i++)
		g[i] = g[i] / (1.0f + exp1(-g[i])) * u[i];
}

/*
 * g = gelu_tanh(g) * u (gemma's MLP). table: as ggml's CPU build computes
 * it (GGML_GELU_FP16): g rounded to f16, its gelu in f32 rounded to f16
 * (ggml's lookup table), 0 at or below -10 and g itself at or above 10;
 * else the f32 formula itself (reference mode).
 */
#define GELU_A 0.044715f
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f

static inline float
gelu1(float x)
{
	return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * (1.0f + GELU_A * x * x)));
}

void
medha_cpu_geglu(float *g, const float *u, int64_t n, int table)
{
	int64_t i;

	for (i = 0; i < n; i++) {
		float x = g[i];
		if (!table)
			g[i] = gelu1(x) * u[i];
		else if (x <= -10.0f)
			g[i] = 0.0f;
		else if (x >= 10.0f)
			g[i] = x * u[i];
		else
			g[i] = f16_round(gelu1(f16_round(x))) * u[i];
	}
}

/* x = cap tanh(x / cap) over n (ggml: scale, tanh, scale) */
void
medha_cpu_softcap(float *x, int64_t n, float cap)
{
	int64_t i;

	for (i = 0; i < n; i++)
		x[i] = tanhf(x[i] * (1.0f / cap)) * cap;
}

/* ggml's rope_yarn_ramp: 1 below the ramp, 0 above, linear between */
static float
yarn_ramp(float lo, float hi, int i)
{
	float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);

	return 1 - fminf(1, fmaxf(0, y));
}

void
medha_cpu_rope_table_ext(float *cs, int64_t pos, int n_rot,
    const struct medha_rope *r)
{
	float theta = (float)pos, th, ti, ms;
	float scale = powf(r->base, -2.0f / (float)n_rot);
	int i;

	/* ggml_rope_cache_init and rope_yarn, in f32 */
	for (i = 0; i < n_rot / 2; i++) {
		th = r->freqs != NULL ? theta / r->freqs[i] : theta;
		ti = r->freq_scale * th;
		ms = r->mscale;
		if (r->ext_factor != 0.0f) {
			float mix = yarn_ramp(r->corr[0], r->corr[1], i) *
			    r->ext_factor;
			ti = ti * (1 - mix) + th * mix;
			ms *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
		}
		cs[2 * i] = cosf(ti) * ms;
		cs[2 * i + 1] = sinf(ti) * ms;
		theta *= scale;
	}
}

void
medha_cpu_rope_ext(float *v, int n_heads, int head_dim, int n_rot,
    const float *cs, int neox, int compat)
{
	const int h2 = n_rot / 2, st = neox ? 1 : 2, off = neox ? h2 : 1;
	float x0, x1;
	int h, i;

	for (h = 0; h < n_heads; h++, v += head_dim)
		for (i = 0; i < h2; i++) {
			float *a = v + i * st, *b = a + off;
			x0 = *a;
			x1 = *b;
			if (compat) {
				*a = fmaf(x0, cs[2 * i], -(x1 * cs[2 * i + 1]));
				*b = fmaf(x0, cs[2 * i + 1], x1 * cs[2 * i]);
			} else {
				*a = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
				*b = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
			}
		}
}

/* ---- activations ---- */

void
medha_act_free(struct medha_act *a)
{
	free(a->q);
	free(a->qd);
	free(a->qs);
	free(a->qi);
	free(a->r16);
	free(a->rbf);
	free(a->scratch);
	memset(a, 0, sizeof(*a));
}

int
medha_act_set(struct medha_act *a, const float *x, int n, int k, int n_threads)
{
	/* room for whole tiles of the Q8 form */
	size_t need = ((size_t)n + MEDHA_ACT_TILE - 1) / MEDHA_ACT_TILE *
	    MEDHA_ACT_TILE * (size_t)k,
	       per;

	a->x = x;
	a->n = n;
	a->k = k;
	a->have = 0;
	if (need > a->cap) {
		free(a->q);
		free(a->qd);
		free(a->qs);
		free(a->qi);
		free(a->r16);
		free(a->rbf);
		a->q = malloc(need);
		a->qd = medha_calloc(need / MEDHA_QK + 1, sizeof(float));
		a->qs = medha_calloc(need / MEDHA_QK + 1, sizeof(float));
		a->qi = medha_calloc(need / MEDHA_QK + 1, sizeof(int32_t));
		a->r16 = medha_calloc(need, sizeof(float));
		a->rbf = medha_calloc(need, sizeof(float));
		a->cap = need;
		if (a->q == NULL || a->qd == NULL || a->qs == NULL ||
		    a->qi == NULL || a->r16 == NULL || a->rbf == NULL) {
			medha_act_free(a);
			return MEDHA_ENOMEM;
		}
	}
	/* per thread: TILE dequantized weight rows */
	per = (size_t)TILE * (size_t)k + 64;
	if (per * (size_t)n_threads > a->scratch_cap) {
		free(a->scratch);
		a->scratch =
		    medha_calloc(per * (size_t)n_threads, sizeof(float));
		if (a->scratch == NULL) {
			medha_act_free(a);
			return MEDHA_ENOMEM;
		}
		a->scratch_cap = per * (size_t)n_threads;
	}
	a->scratch_per = per;
	return 0;
}

/*
 * Quantize blocks [b0, b1) of the rows, counted across rows (k is a
 * multiple of MEDHA_QK), in ggml's Q8_0/Q8_1 way (its x86 variant), into
 * the tiled form.
 */
static void
act_q8_blocks(struct medha_act *a, size_t b0, size_t b1)
{
	const int nb = a->k / MEDHA_QK;
	const float *x = a->x + b0 * MEDHA_QK;
	int8_t *const q0 = a->q, *q;
	float *const qd = a->qd, *const qs = a->qs;
	int32_t *const qi = a->qi;
	size_t u, o;
	int j, sum, t = (int)(b0 / (size_t)nb), b = (int)(b0 % (size_t)nb);
	float amax, d, id;

	for (u = b0; u < b1; u++, x += MEDHA_QK) {
		o = medha_act_blk(a, t, b);
		if (++b == nb) {
			b = 0;
			t++;
		}
		q = q0 + o * MEDHA_QK;
#if defined(__AVX512F__)
		/* the same operations, 16 lanes at a time */
		__m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
		__m512i i0, i1;
		amax = _mm512_reduce_max_ps(
		    _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
		if (_mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q) != 0)
			amax = NAN; /* a NaN: the block's scale carries it */
		d = amax / 127.0f;
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
		i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(id)));
		i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(id)));
		_mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(i0));
		_mm_storeu_si128((__m128i *)(q + 16),
		    _mm512_cvtsepi32_epi8(i1));
		sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
		(void)j;
#elif defined(__AVX2__)
		/* the same operations, 8 lanes at a time */
		__m256 xv[4], m = _mm256_setzero_ps(), un = m;
		const __m256 sign = _mm256_set1_ps(-0.0f);
		__m256i iv[4], p01, p23, s;
#pragma GCC unroll 4
		for (j = 0; j < 4; j++) {
			xv[j] = _mm256_loadu_ps(x + 8 * j);
			m = _mm256_max_ps(m, _mm256_andnot_ps(sign, xv[j]));
			un = _mm256_or_ps(un,
			    _mm256_cmp_ps(xv[j], xv[j], _CMP_UNORD_Q));
		}
		{
			__m128 h = _mm_max_ps(_mm256_extractf128_ps(m, 1),
			    _mm256_castps256_ps128(m));
			h = _mm_max_ps(h, _mm_movehl_ps(h, h));
			h = _mm_max_ss(h, _mm_movehdup_ps(h));
			amax = _mm_cvtss_f32(h);
		}
		if (_mm256_movemask_ps(un) != 0)
			amax = NAN; /* a NaN: the block's scale carries it */
		d = amax / 127.0f;
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
#pragma GCC unroll 4
		for (j = 0; j < 4; j++) {
			__m256 v = _mm256_mul_ps(xv[j], _mm256_set1_ps(id));
			/* NaN (a NaN or infinite input): 0 */
			v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
			iv[j] = _mm256_cvtps_epi32(v);
		}
		p01 = _mm256_packs_epi32(iv[0], iv[1]);
		p23 = _mm256_packs_epi32(iv[2], iv[3]);
		_mm256_storeu_si256((__m256i *)q,
		    _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
		        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
		s = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]),
		    _mm256_add_epi32(iv[2], iv[3]));
		{
			__m128i h = _mm_add_epi32(_mm256_extracti128_si256(s, 1),
			    _mm256_castsi256_si128(s));
			h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
			h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
			sum = _mm_cvtsi128_si32(h);
		}
#else
		amax = 0.0f;
		for (j = 0; j < MEDHA_QK; j++) {
			float ax = fabsf(x[j]);
			amax = ax > amax || isnan(ax) ? ax : amax;
		}
		d = amax / 127.0f;
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
		sum = 0;
		for (j = 0; j < MEDHA_QK; j++) {
			/* NaN or infinite input: the quants are 0 and the
			   scale (NaN or inf) carries it to the products */
			float v = x[j] * id;
			q[j] = isnan(v) ? 0 : (int8_t)rintf(v);
			sum += q[j];
		}
#endif
		qd[o] = f16_round(d);
		qs[o] = f16_round(d * (float)sum);
		qi[o] = sum;
	}
}

/* elements [i0, i1) of the rows, counted across rows, rounded to f16 */
static void
act_r16_span(struct medha_act *a, size_t i0, size_t i1)
{
	const float *x = a->x;
	float *y = a->r16;
	size_t i = i0;

#if defined(__AVX512F__)
	for (; i + 16 <= i1; i += 16)
		_mm512_storeu_ps(y + i,
		    _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i),
		        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
	for (; i < i1; i++)
		y[i] = f16_round(x[i]);
}

/* the same, to bf16 */
static void
act_rbf_span(struct medha_act *a, size_t i0, size_t i1)
{
	const float *x = a->x;
	float *y = a->rbf;
	size_t i;

	for (i = i0; i < i1; i++)
		y[i] = medha_bf16_to_fp32(medha_fp32_to_bf16(x[i]));
}

/*
 * The forms are made in tasks of units of MEDHA_QK elements counted
 * across rows (every element's result is its own, so any split gives
 * the same bits): at least PREP_UNITS a task, about 8 tasks a thread,
 * so that the few rows of a batch of decodes are shared by the threads
 * too (one thread quantizing eight tokens while the other waited cost
 * a tenth of a decode step of eight).
 */
#define PREP_UNITS 64

struct prep {
	struct medha_act *a;
	int need;   /* MEDHA_ACT_* */
	size_t per; /* units per task */
	size_t units;
};

static void
prep_task(void *arg, int i, int thread)
{
	struct prep *p = arg;
	size_t u0 = (size_t)i * p->per, u1 = u0 + p->per;
	size_t e = (size_t)p->a->n * (size_t)p->a->k;

	(void)thread;
	if (u1 > p->units)
		u1 = p->units;
	if (p->need & MEDHA_ACT_Q8)
		act_q8_blocks(p->a, u0, u1);
	u1 = u1 * MEDHA_QK < e ? u1 * MEDHA_QK : e;
	if (p->need & MEDHA_ACT_F16)
		act_r16_span(p->a, u0 * MEDHA_QK, u1);
	if (p->need & MEDHA_ACT_BF16)
		act_rbf_span(p->a, u0 * MEDHA_QK, u1);
}

/* the forms in need of elements [i0, i1) counted across rows: whole
   blocks where Q8 is made (k a multiple of MEDHA_QK, else refused) */
static void
make_elems(struct medha_act *a, int need, size_t i0, size_t i1)
{
	if (i0 >= i1)
		return;
	if ((need & MEDHA_ACT_Q8) && a->k % MEDHA_QK == 0)
		act_q8_blocks(a, i0 / MEDHA_QK, i1 / MEDHA_QK);
	if (need & MEDHA_ACT_F16)
		act_r16_span(a, i0, i1);
	if (need & MEDHA_ACT_BF16)
		act_rbf_span(a, i0, i1);
}

void
medha_act_make_span(struct medha_act *a, int need, int t, int e0, int e1)
{
	const size_t row = (size_t)t * (size_t)a->k;

	make_elems(a, need, row + (size_t)e0, row + (size_t)e1);
}

void
medha_act_make_rows(struct medha_act *a, int need, int t0, int t1)
{
	make_elems(a, need, (size_t)t0 * (size_t)a->k,
	    (size_t)t1 * (size_t)a->k);
}

int
medha_act_form(int type, int ref)
{
	if (ref)
		return 0;
	switch (type) {
	case MEDHA_GGML_Q8_0:
	case MEDHA_GGML_Q4_0:
	case MEDHA_GGML_Q4_1: return MEDHA_ACT_Q8;
	case MEDHA_GGML_F16: return MEDHA_ACT_F16;
	case MEDHA_GGML_BF16: return MEDHA_ACT_BF16;
	default: return 0;
	}
}

void
medha_act_prepare(struct medha_threadpool *tp, struct medha_act *a, int need)
{
	struct prep p;
	int i, n, nt = tp != NULL ? medha_threadpool_size(tp) : 1;
	size_t per;

	need &= ~a->have;
	if (need == 0)
		return;
	p.a = a;
	p.need = need;
	p.units = ((size_t)a->n * (size_t)a->k + MEDHA_QK - 1) / MEDHA_QK;
	per = (p.units + 8 * (size_t)nt - 1) / (8 * (size_t)nt);
	p.per = per > PREP_UNITS ? per : PREP_UNITS;
	n = (int)((p.units + p.per - 1) / p.per);
	if (tp != NULL)
		medha_threadpool_run(tp, n, prep_task, &p);
	else
		for (i = 0; i < n; i++)
			prep_task(&p, i, 0);
	a->have |= need;
}
