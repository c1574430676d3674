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
    {MEDHA_GGML_Q5_0, "q5_0", MEDHA_QK, 2 + 4 + MEDHA_QK / 2},
    {MEDHA_GGML_Q5_1, "q5_1", MEDHA_QK, 4 + 4 + MEDHA_QK / 2},
    {MEDHA_GGML_Q8_0, "q8_0", MEDHA_QK, 2 + MEDHA_QK},
    {MEDHA_GGML_Q2_K, "q2_K", MEDHA_QK_K,
        MEDHA_QK_K / 16 + MEDHA_QK_K / 4 + 4},
    {MEDHA_GGML_Q3_K, "q3_K", MEDHA_QK_K,
        MEDHA_QK_K / 8 + MEDHA_QK_K / 4 + 12 + 2},
    {MEDHA_GGML_Q4_K, "q4_K", MEDHA_QK_K, 4 + 12 + MEDHA_QK_K / 2},
    {MEDHA_GGML_Q5_K, "q5_K", MEDHA_QK_K,
        4 + 12 + MEDHA_QK_K / 8 + MEDHA_QK_K / 2},
    {MEDHA_GGML_Q6_K, "q6_K", MEDHA_QK_K,
        MEDHA_QK_K / 2 + MEDHA_QK_K / 4 + MEDHA_QK_K / 16 + 2},
    {MEDHA_GGML_IQ4_NL, "iq4_nl", MEDHA_QK, 2 + MEDHA_QK / 2},
    {MEDHA_GGML_IQ4_XS, "iq4_xs", MEDHA_QK_K, 2 + 2 + 4 + MEDHA_QK_K / 2},
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

/* bit 4 of element j (0..31) of a Q5_0 or Q5_1 block, from its qh */
static int
q5_high(const unsigned char *qh, int j)
{
	return (qh[j / 8] >> (j % 8) & 1) << 4;
}

static void
deq_q5_0(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d;
	int j;

	for (b = 0; b < nb; b++, p += 22, y += MEDHA_QK) {
		d = half_at(p);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			y[j] = (float)(((p[6 + j] & 0x0f) | q5_high(p + 2, j)) -
			           16) *
			    d;
			y[j + 16] = (float)(((p[6 + j] >> 4) |
			                        q5_high(p + 2, j + 16)) -
			                16) *
			    d;
		}
	}
}

static void
deq_q5_1(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d, m;
	int j;

	for (b = 0; b < nb; b++, p += 24, y += MEDHA_QK) {
		d = half_at(p);
		m = half_at(p + 2);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			y[j] = (float)((p[8 + j] & 0x0f) | q5_high(p + 4, j)) *
			        d +
			    m;
			y[j + 16] = (float)((p[8 + j] >> 4) |
			                q5_high(p + 4, j + 16)) *
			        d +
			    m;
		}
	}
}

/*
 * Element e (0..255) of a Q2_K or Q3_K super-block's 2-bit quants:
 * 128-element halves of 32 bytes, element l + 32 * j of a half in bits
 * 2j, 2j+1 of byte l (ggml's dequantize_row_q2_K order).
 */
static int
k2_bits(const unsigned char *qs, int e)
{
	return qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32)) & 3;
}

static void
deq_q2_k(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d, dmin, dl, ml;
	int s, l, e;

	for (b = 0; b < nb; b++, p += 84)
		for (d = half_at(p + 80), dmin = half_at(p + 82), s = 0;
		     s < 16; s++, y += 16) {
			dl = d * (float)(p[s] & 0x0f);
			ml = dmin * (float)(p[s] >> 4);
			for (l = 0; l < 16; l++) {
				e = s * 16 + l;
				y[l] = dl * (float)k2_bits(p + 16, e) - ml;
			}
		}
}

/* Scale s (0..15) of a Q3_K super-block, less 32 (ggml's aux unpacking). */
static int
q3k_scale(const unsigned char *sc, int s)
{
	int lo = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;

	return (lo | (sc[8 + s % 4] >> (2 * (s / 4)) & 3) << 4) - 32;
}

/* Element e's 3-bit value of a Q3_K super-block, less 4: -4..3. */
static int
q3k_value(const unsigned char *p, int e)
{
	int hbit = p[e % 32] >> (e / 128 * 4 + e % 128 / 32) & 1;

	return k2_bits(p + 32, e) - (hbit ? 0 : 4);
}

static void
deq_q3_k(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d, dl;
	int s, l;

	for (b = 0; b < nb; b++, p += 110)
		for (d = half_at(p + 108), s = 0; s < 16; s++, y += 16) {
			dl = d * (float)q3k_scale(p + 96, s);
			for (l = 0; l < 16; l++)
				y[l] = dl * (float)q3k_value(p, s * 16 + l);
		}
}

static void
deq_q5_k(const unsigned char *p, float *y, int64_t nb)
{
	const unsigned char *ql, *qh;
	int64_t b;
	float d, dmin, d1, m1, d2, m2;
	int j, l, sc, mn;

	for (b = 0; b < nb; b++, p += 176) {
		d = half_at(p);
		dmin = half_at(p + 2);
		qh = p + 16;
		ql = p + 48;
		for (j = 0; j < 8; j += 2, ql += 32, y += 64) {
			scale_min_k4(j, p + 4, &sc, &mn);
			d1 = d * (float)sc;
			m1 = dmin * (float)mn;
			scale_min_k4(j + 1, p + 4, &sc, &mn);
			d2 = d * (float)sc;
			m2 = dmin * (float)mn;
			for (l = 0; l < 32; l++) {
				y[l] = d1 * (float)((ql[l] & 0x0f) |
				                (qh[l] >> j & 1) << 4) -
				    m1;
				y[l + 32] = d2 * (float)((ql[l] >> 4) |
				                     (qh[l] >> (j + 1) & 1) << 4) -
				    m2;
			}
		}
	}
}

static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22,
    -10, 1, 13, 25, 38, 53, 69, 89, 113};

int
medha_iq4nl_level(int q)
{
	return iq4nl_values[q & 0x0f];
}

static void
deq_iq4_nl(const unsigned char *p, float *y, int64_t nb)
{
	int64_t b;
	float d;
	int j;

	for (b = 0; b < nb; b++, p += 18, y += MEDHA_QK) {
		d = half_at(p);
		for (j = 0; j < MEDHA_QK / 2; j++) {
			y[j] = d * (float)iq4nl_values[p[2 + j] & 0x0f];
			y[j + 16] = d * (float)iq4nl_values[p[2 + j] >> 4];
		}
	}
}

/* Scale s (0..7) of an IQ4_XS super-block, less 32. */
static int
iq4xs_scale(const unsigned char *p, int s)
{
	int h = p[2] | p[3] << 8;

	return ((p[4 + s / 2] >> 4 * (s % 2) & 0x0f) | (h >> 2 * s & 3) << 4) -
	    32;
}

static void
deq_iq4_xs(const unsigned char *p, float *y, int64_t nb)
{
	const unsigned char *q;
	int64_t b;
	float d, dl;
	int s, j;

	for (b = 0; b < nb; b++, p += 136)
		for (d = half_at(p), q = p + 8, s = 0; s < 8;
		     s++, q += 16, y += 32) {
			dl = d * (float)iq4xs_scale(p, s);
			for (j = 0; j < 16; j++) {
				y[j] = dl * (float)iq4nl_values[q[j] & 0x0f];
				y[j + 16] = dl * (float)iq4nl_values[q[j] >> 4];
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
	case MEDHA_GGML_Q5_0: deq_q5_0(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_Q5_1: deq_q5_1(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_Q2_K: deq_q2_k(p, dst, n / MEDHA_QK_K); break;
	case MEDHA_GGML_Q3_K: deq_q3_k(p, dst, n / MEDHA_QK_K); break;
	case MEDHA_GGML_Q5_K: deq_q5_k(p, dst, n / MEDHA_QK_K); break;
	case MEDHA_GGML_IQ4_NL: deq_iq4_nl(p, dst, n / MEDHA_QK); break;
	case MEDHA_GGML_IQ4_XS: deq_iq4_xs(p, dst, n / MEDHA_QK_K); break;
	}
	return 0;
}

/* ---- the integers of a block (medha_quant_unpack32) ---- */

static uint16_t
u16_at(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* Q6_K: element e's 6 bits, 0..63 (ggml's dequantize_row_q6_K order) */
static int
q6k_bits(const unsigned char *p, int e)
{
	const unsigned char *ql = p + e / 128 * 64, *qh = p + 128 + e / 128 * 32;
	int k = e % 128 / 32, l = e % 32;
	int lo = k % 2 ? ql[l + 32] : ql[l];

	return (k >= 2 ? lo >> 4 : lo & 0x0f) | (qh[l] >> 2 * k & 3) << 4;
}

int
medha_quant_unpack32(int type, const void *row, int64_t b,
    struct medha_q32 *o)
{
	const unsigned char *p = row, *q;
	int e, s, j, half;

	memset(o, 0, sizeof(*o));
	o->sc[0] = o->sc[1] = 1;
	switch (type) {
	case MEDHA_GGML_Q5_0:
	case MEDHA_GGML_Q5_1:
		p += b * (type == MEDHA_GGML_Q5_0 ? 22 : 24);
		o->d = u16_at(p);
		if (type == MEDHA_GGML_Q5_1) {
			o->dm = u16_at(p + 2);
			o->mn[0] = o->mn[1] = -1;
			p += 2;
		} else
			o->c = 16;
		for (j = 0; j < 16; j++) {
			o->u[j] = (uint8_t)((p[6 + j] & 0x0f) | q5_high(p + 2, j));
			o->u[j + 16] =
			    (uint8_t)((p[6 + j] >> 4) | q5_high(p + 2, j + 16));
		}
		return 0;
	case MEDHA_GGML_Q4_K:
	case MEDHA_GGML_Q5_K:
		p += b / 8 * (type == MEDHA_GGML_Q4_K ? 144 : 176);
		s = (int)(b % 8);
		o->d = u16_at(p);
		o->dm = u16_at(p + 2);
		scale_min_k4(s, p + 4, &o->sc[0], &o->mn[0]);
		o->sc[1] = o->sc[0];
		o->mn[1] = o->mn[0];
		for (j = 0; j < 32; j++) {
			const unsigned char *q = type == MEDHA_GGML_Q4_K
			    ? p + 16
			    : p + 48;
			int v = q[s / 2 * 32 + j];
			v = s % 2 ? v >> 4 : v & 0x0f;
			if (type == MEDHA_GGML_Q5_K)
				v |= (p[16 + j] >> s & 1) << 4;
			o->u[j] = (uint8_t)v;
		}
		return 0;
	case MEDHA_GGML_Q6_K:
	case MEDHA_GGML_Q3_K:
	case MEDHA_GGML_Q2_K:
		p += b / 8 * (type == MEDHA_GGML_Q6_K   ? 210
		                 : type == MEDHA_GGML_Q3_K ? 110
		                                           : 84);
		for (half = 0; half < 2; half++) {
			s = (int)(b % 8) * 2 + half;
			if (type == MEDHA_GGML_Q6_K)
				o->sc[half] = (int8_t)p[192 + s];
			else if (type == MEDHA_GGML_Q3_K)
				o->sc[half] = q3k_scale(p + 96, s);
			else {
				o->sc[half] = p[s] & 0x0f;
				o->mn[half] = p[s] >> 4;
			}
		}
		o->d = u16_at(p + (type == MEDHA_GGML_Q6_K   ? 208
		                      : type == MEDHA_GGML_Q3_K ? 108
		                                                : 80));
		if (type == MEDHA_GGML_Q2_K)
			o->dm = u16_at(p + 82);
		o->c = type == MEDHA_GGML_Q6_K ? 32 : type == MEDHA_GGML_Q3_K;
		o->c *= type == MEDHA_GGML_Q3_K ? 4 : 1;
		for (j = 0; j < 32; j++) {
			e = (int)(b % 8) * 32 + j;
			o->u[j] = (uint8_t)(type == MEDHA_GGML_Q6_K
			        ? q6k_bits(p, e)
			        : type == MEDHA_GGML_Q3_K
			        ? q3k_value(p, e) + 4
			        : k2_bits(p + 16, e));
		}
		return 0;
	case MEDHA_GGML_IQ4_NL:
	case MEDHA_GGML_IQ4_XS:
		/* the levels, + 128: u = kvalues[q] + 128, c = 128 */
		if (type == MEDHA_GGML_IQ4_NL) {
			p += b * 18;
			q = p + 2;
		} else {
			p += b / 8 * 136;
			o->sc[0] = o->sc[1] = iq4xs_scale(p, (int)(b % 8));
			q = p + 8 + b % 8 * 16;
		}
		o->d = u16_at(p);
		o->c = 128;
		for (j = 0; j < 16; j++) {
			o->u[j] = (uint8_t)(iq4nl_values[q[j] & 0x0f] + 128);
			o->u[j + 16] = (uint8_t)(iq4nl_values[q[j] >> 4] + 128);
		}
		return 0;
	default: return MEDHA_EUNSUP;
	}
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

/* the 5-bit quants q[32] of a Q5_0 or Q5_1 block into qh (4 bytes), qs */
static void
put_q5(const int *q, unsigned char *qh, unsigned char *qs)
{
	uint32_t h = 0;
	int j;

	for (j = 0; j < MEDHA_QK / 2; j++) {
		qs[j] = (unsigned char)((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
		h |= (uint32_t)(q[j] >> 4 & 1) << j;
		h |= (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
	}
	for (j = 0; j < 4; j++)
		qh[j] = (unsigned char)(h >> 8 * j);
}

static void
q_q5_0(const float *x, unsigned char *p, int64_t nb)
{
	int64_t b;
	float amax, max, d, id;
	int j, q[MEDHA_QK];

	for (b = 0; b < nb; b++, x += MEDHA_QK, p += 22) {
		amax = 0.0f;
		max = 0.0f;
		for (j = 0; j < MEDHA_QK; j++)
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		d = max / -16;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_half(p, d);
		for (j = 0; j < MEDHA_QK; j++)
			q[j] = trunc_clamp(x[j] * id + 16.5f, 0, 31);
		put_q5(q, p + 2, p + 6);
	}
}

static void
q_q5_1(const float *x, unsigned char *p, int64_t nb)
{
	int64_t b;
	float min, max, d, id;
	int j, q[MEDHA_QK];

	for (b = 0; b < nb; b++, x += MEDHA_QK, p += 24) {
		min = 3.402823466e+38f;
		max = -3.402823466e+38f;
		for (j = 0; j < MEDHA_QK; j++) {
			if (x[j] < min)
				min = x[j];
			if (x[j] > max)
				max = x[j];
		}
		d = (max - min) / 31;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		put_half(p, d);
		put_half(p + 2, min);
		for (j = 0; j < MEDHA_QK; j++)
			q[j] = trunc_clamp((x[j] - min) * id + 0.5f, 0, 31);
		put_q5(q, p + 4, p + 8);
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

	if (t == NULL || (t->elems == MEDHA_QK_K) ||
	    type == MEDHA_GGML_IQ4_NL)
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
	case MEDHA_GGML_Q5_0: q_q5_0(src, p, n / MEDHA_QK); break;
	case MEDHA_GGML_Q5_1: q_q5_1(src, p, n / MEDHA_QK); break;
	}
	return 0;
}
