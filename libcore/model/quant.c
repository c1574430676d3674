/*
 * quant.c: the ggml tensor types (quant.h): their sizes and names, exact
 * fp16 and bf16 conversions, and a dequantizer and quantizer per type.
 *
 * Bit-exactness with ggml's reference code (and with the gguf Python
 * package, which mirrors it in float32 numpy) rests on three things: the
 * half-precision conversions are done on the bits (no hardware
 * instruction that might quiet a NaN or flush a subnormal), every product
 * and sum is one float32 operation in the reference's order, and nothing
 * is fused into an FMA (the pragmas below; -ffp-contract=fast would
 * otherwise let a compiler turn d*q + m into one rounding instead of two).
 *
 * Blocks are read byte by byte (little-endian), so src needs no alignment.
 */
#include "model/quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

struct type_info {
	int type;
	const char *name;
	int elems; /* per block */
	int bytes; /* per block */
};

static const struct type_info types[] = {
    {MEDHA_GGML_F32, "f32", 1, 4},
    {MEDHA_GGML_F16, "f16", 1, 2},
    {MEDHA_GGML_Q4_0, "q4_0", MEDHA_QK, 2 + MEDHA_QK / 2},
    {MEDHA_GGML_Q4_1, "q4_1", MEDHA_QK, 4 + MEDHA_QK / 2},
    {MEDHA_GGML_Q8_0, "q8_0", MEDHA_QK, 2 + MEDHA_QK},
    {MEDHA_GGML_Q4_K, "q4_K", MEDHA_QK_K, 4 + 12 + MEDHA_QK_K / 2},
    {MEDHA_GGML_Q6_K, "q6_K", MEDHA_QK_K,
        MEDHA_QK_K / 2 + MEDHA_QK_K / 4 + MEDHA_QK_K / 16 + 2},
    {MEDHA_GGML_BF16, "bf16", 1, 2},
};

static const struct type_info *
info(int type)
{
	size_t i;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].type == type)
			return &types[i];
	return NULL;
}

int
medha_ggml_block_elems(int type)
{
	const struct type_info *t = info(type);

	return t != NULL ? t->elems : 0;
}

int
medha_ggml_block_bytes(int type)
{
	const struct type_info *t = info(type);

	return t != NULL ? t->bytes : 0;
}

size_t
medha_ggml_row_bytes(int type, int64_t n)
{
	const struct type_info *t = info(type);
	uint64_t blocks;

	if (t == NULL || n < 0 || n % t->elems != 0)
		return 0;
	blocks = (uint64_t)n / (uint64_t)t->elems;
	if (blocks > SIZE_MAX / (uint64_t)t->bytes)
		return 0;
	return (size_t)blocks * (size_t)t->bytes;
}

const char *
medha_ggml_type_name(int type)
{
	const struct type_info *t = info(type);

	return t != NULL ? t->name : "unknown";
}

int
medha_ggml_type_from_name(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcasecmp(types[i].name, name) == 0)
			return types[i].type;
	return -1;
}

/* ---- scalar conversions ---- */

static float
f32_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t
bits_f32(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

float
medha_fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, sig = h & 0x3ff;

	if (exp == 0x1f) /* inf, NaN (payload kept) */
		return f32_bits(sign | 0x7f800000 | sig << 13);
	if (exp != 0)
		return f32_bits(sign | (exp + 112) << 23 | sig << 13);
	if (sig == 0)
		return f32_bits(sign);
	/* subnormal: normalise; the value is sig * 2^-24 */
	exp = 113;
	while ((sig & 0x400) == 0) {
		sig <<= 1;
		exp--;
	}
	return f32_bits(sign | exp << 23 | (sig & 0x3ff) << 13);
}

uint16_t
medha_fp32_to_fp16(float f)
{
	uint32_t u = bits_f32(f), sign = (u >> 16) & 0x8000;
	uint32_t exp = (u >> 23) & 0xff, sig = u & 0x7fffff, shift, half, rest;

	if (exp == 0xff) /* inf; NaN made quiet, top payload bits kept */
		return (uint16_t)(sign | 0x7c00 |
		    (sig != 0 ? 0x200 | sig >> 13 : 0));
	if (exp >= 143) /* 2^16 and up: beyond the largest half, 65504 */
		return (uint16_t)(sign | 0x7c00);
	if (exp >= 113) {
		/* normal half; a carry out of sig rolls into the exponent
		 * and, from 65520 up, to infinity (0x7c00) */
		rest = sig & 0x1fff;
		half = (uint32_t)(exp - 112) << 10 | sig >> 13;
		if (rest > 0x1000 || (rest == 0x1000 && (half & 1) != 0))
			half++;
		return (uint16_t)(sign | half);
	}
	if (exp < 102) /* below half the smallest subnormal: zero */
		return (uint16_t)sign;
	/* subnormal half (or the smallest normal, by rounding up) */
	sig |= 0x800000;
	shift = 126 - exp; /* 14..24 */
	half = sig >> shift;
	rest = sig & ((1u << shift) - 1);
	if (rest > 1u << (shift - 1) ||
	    (rest == 1u << (shift - 1) && (half & 1) != 0))
		half++;
	return (uint16_t)(sign | half);
}

float
medha_bf16_to_fp32(uint16_t h)
{
	return f32_bits((uint32_t)h << 16);
}

uint16_t
medha_fp32_to_bf16(float f)
{
	uint32_t u = bits_f32(f);

	if ((u & 0x7fffffff) > 0x7f800000) /* NaN: keep it, make it quiet */
		return (uint16_t)(u >> 16 | 0x40);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float
half_at(const unsigned char *p)
{
	return medha_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

static void
put_half(unsigned char *p, float f)
{
	uint16_t h = medha_fp32_to_fp16(f);

	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}

/* ---- dequantization, one function per type ---- */

static void
deq_f32(const unsigned char *p, float *y, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++, p += 4)
		y[i] = f32_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 |
		    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static void
deq_f16(const unsigned char *p, float *y, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++, p += 2)
		y[i] = half_at(p);
}

static void
deq_bf16(const unsigned char *p, float *y, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++, p += 2)
		y[i] = f32_bits((uint32_t)p[0] << 16 | (uint32_t)p[1] << 24);
}

static void
deq_q8_0(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d;
	int j;

	for (b = 0; b < nb; b++, p += 34, y += MEDHA_QK) {
		d = half_at(p);
		for (j = 0; j < MEDHA_QK; j++)
			y[j] = (float)(int8_t)p[2 + j] * d;
	}
}

static void
deq_q4_0(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d;
	int j;

	for (b = 0; b < nb; b++, p += 18, y += MEDHA_QK) {
		d = half_at(p);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			y[j] = (float)((p[2 + j] & 0x0f) - 8) * d;
			y[j + MEDHA_QK / 2] = (float)((p[2 + j] >> 4) - 8) * d;
		}
	}
}

static void
deq_q4_1(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d, m;
	int j;

	for (b = 0; b < nb; b++, p += 20, y += MEDHA_QK) {
		d = half_at(p);
		m = half_at(p + 2);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			y[j] = (float)(p[4 + j] & 0x0f) * d + m;
			y[j + MEDHA_QK / 2] = (float)(p[4 + j] >> 4) * d + m;
		}
	}
}

/*
 * Scale and min of sub-block j (0..7) of a Q4_K super-block: 6 bits
 * each, packed into 12 bytes as ggml's get_scale_min_k4 reads them.
 */
static void
scale_min_k4(int j, const unsigned char *q, int *sc, int *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
		*mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
	}
}

static void
deq_q4_k(const unsigned char *p, float *y, int64_t nb)
{
	const unsigned char *q;
	int64_t b;
	float d, dmin, d1, m1, d2, m2;
	int j, l, sc, mn;

	for (b = 0; b < nb; b++, p += 144) {
		d = half_at(p);
		dmin = half_at(p + 2);
		q = p + 16;
		for (j = 0; j < 8; j += 2, q += 32, y += 64) {
			scale_min_k4(j, p + 4, &sc, &mn);
			d1 = d * (float)sc;
			m1 = dmin * (float)mn;
			scale_min_k4(j + 1, p + 4, &sc, &mn);
			d2 = d * (float)sc;
			m2 = dmin * (float)mn;
			for (l = 0; l < 32; l++) {
				y[l] = d1 * (float)(q[l] & 0x0f) - m1;
				y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
			}
		}
	}
}

static void
deq_q6_k(const unsigned char *p, float *y, int64_t nb)
{
	const unsigned char *ql, *qh;
	const signed char *sc;
	int64_t b;
	float d;
	int h, l, is, q1, q2, q3, q4;

	for (b = 0; b < nb; b++, p += 210) {
		ql = p;
		qh = p + 128;
		sc = (const signed char *)(p + 192);
		d = half_at(p + 208);
		for (h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
			for (l = 0; l < 32; l++) {
				is = l / 16;
				q1 = ((ql[l] & 0x0f) | (qh[l] & 3) << 4) - 32;
				q2 = ((ql[l + 32] & 0x0f) |
				         ((qh[l] >> 2) & 3) << 4) -
				    32;
				q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) -
				    32;
				q4 = ((ql[l + 32] >> 4) |
				         ((qh[l] >> 6) & 3) << 4) -
				    32;
				y[l] = d * (float)sc[is] * (float)q1;
				y[l + 32] = d * (float)sc[is + 2] * (float)q2;
				y[l + 64] = d * (float)sc[is + 4] * (float)q3;
				y[l + 96] = d * (float)sc[is + 6] * (float)q4;
			}
		}
	}
}

int
medha_dequant_row(int type, const void *src, float *dst, int64_t n)
{
	const struct type_info *t = info(type);
	const unsigned char *p = src;

	if (t == NULL)
		return MEDHA_EUNSUP;
	if (n < 0 || n % t->elems != 0)
		return MEDHA_EINVAL;
	switch (type) {
	case MEDHA_GGML_F32: deq_f32(p, dst, n); break;
	case MEDHA_GGML_F16: deq_f16(p, dst, n); break;
	case MEDHA_GGML_BF16: deq_bf16(p, dst, n); break;
	case MEDHA_GGML_Q8_0: deq_q8_0(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_Q4_0: deq_q4_0(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_Q4_1: deq_q4_1(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_Q4_K: deq_q4_k(p, dst, n / MEDHA_QK_K); break;
	case MEDHA_GGML_Q6_K: deq_q6_k(p, dst, n / MEDHA_QK_K); break;
	}
	return 0;
}

/* ---- quantization (ggml's reference quantize_row_*_ref) ---- */

/*
 * (int)v truncated toward zero and clamped to [lo, hi], NaN giving lo:
 * the reference's cast for every finite in-range value, and defined for
 * the rest (where the reference's cast is undefined behaviour).
 */
static int
trunc_clamp(float v, int lo, int hi)
{
	if (!(v > (float)lo))
		return lo;
	if (v >= (float)hi)
		return hi;
	return (int)v;
}

static void
q_q8_0(const float *x, unsigned char *p, int64_t nb)
{
	int64_t b;
	float amax, d, id;
	int j;

	for (b = 0; b < nb; b++, x += MEDHA_QK, p += 34) {
		amax = 0.0f;
		for (j = 0; j < MEDHA_QK; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		d = amax / 127;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_half(p, d);
		for (j = 0; j < MEDHA_QK; j++)
			p[2 + j] = (unsigned char)(int8_t)
			    trunc_clamp(roundf(x[j] * id), -128, 127);
	}
}

static void
q_q4_0(const float *x, unsigned char *p, int64_t nb)
{
	int64_t b;
	float amax, max, d, id;
	int j, lo, hi;

	for (b = 0; b < nb; b++, x += MEDHA_QK, p += 18) {
		amax = 0.0f;
		max = 0.0f;
		for (j = 0; j < MEDHA_QK; j++)
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		d = max / -8;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_half(p, d);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			lo = trunc_clamp(x[j] * id + 8.5f, 0, 15);
			hi =
			    trunc_clamp(x[j + MEDHA_QK / 2] * id + 8.5f, 0, 15);
			p[2 + j] = (unsigned char)(lo | hi << 4);
		}
	}
}

static void
q_q4_1(const float *x, unsigned char *p, int64_t nb)
{
	int64_t b;
	float min, max, d, id;
	int j, lo, hi;

	for (b = 0; b < nb; b++, x += MEDHA_QK, p += 20) {
		min = 3.402823466e+38f;
		max = -3.402823466e+38f;
		for (j = 0; j < MEDHA_QK; j++) {
			if (x[j] < min)
				min = x[j];
			if (x[j] > max)
				max = x[j];
		}
		d = (max - min) / 15;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_half(p, d);
		put_half(p + 2, min);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			lo = trunc_clamp((x[j] - min) * id + 0.5f, 0, 15);
			hi =
			    trunc_clamp((x[j + MEDHA_QK / 2] - min) * id + 0.5f,
			        0, 15);
			p[4 + j] = (unsigned char)(lo | hi << 4);
		}
	}
}

int
medha_quant_row(int type, const float *src, void *dst, int64_t n)
{
	const struct type_info *t = info(type);
	unsigned char *p = dst;
	uint32_t u;
	uint16_t h;
	int64_t i;

	if (t == NULL || type == MEDHA_GGML_Q4_K || type == MEDHA_GGML_Q6_K)
		return MEDHA_EUNSUP;
	if (n < 0 || n % t->elems != 0)
		return MEDHA_EINVAL;
	switch (type) {
	case MEDHA_GGML_F32:
		for (i = 0; i < n; i++, p += 4) {
			u = bits_f32(src[i]);
			p[0] = (unsigned char)u;
			p[1] = (unsigned char)(u >> 8);
			p[2] = (unsigned char)(u >> 16);
			p[3] = (unsigned char)(u >> 24);
		}
		break;
	case MEDHA_GGML_F16:
	case MEDHA_GGML_BF16:
		for (i = 0; i < n; i++, p += 2) {
			h = type == MEDHA_GGML_F16 ? medha_fp32_to_fp16(src[i])
			                           : medha_fp32_to_bf16(src[i]);
			p[0] = (unsigned char)h;
			p[1] = (unsigned char)(h >> 8);
		}
		break;
	case MEDHA_GGML_Q8_0: q_q8_0(src, p, n / MEDHA_QK); break;
	case MEDHA_GGML_Q4_0: q_q4_0(src, p, n / MEDHA_QK); break;
	case MEDHA_GGML_Q4_1: q_q4_1(src, p, n / MEDHA_QK); break;
	}
	return 0;
}
