/*
 * quant_k.c: quantizers for Q4_K, Q5_K and Q6_K (quant.h), so that
 * libcore's tools can write K-quant files (contrib/gguf-convert's
 * q4_k_m and q5_k_m mixes for tests and benchmarks). Round to nearest
 * with scales from each sub-block's range: a valid encoding that every
 * reader decodes alike, not ggml's reference quantizer (whose iterative
 * search for the scales, make_qkx2_quants and make_qx_quants, gives
 * smaller errors and other bytes).
 */
#include "model/quant.h"

#include <math.h>
#include <string.h>

static void
put_h(unsigned char *p, float f)
{
	uint16_t h = medha_fp32_to_fp16(f);

	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}

static float
get_h(const unsigned char *p)
{
	return medha_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

/* nearest integer of v clamped to [lo, hi]; NaN gives lo */
static int
near(float v, int lo, int hi)
{
	if (!(v > (float)lo))
		return lo;
	if (v >= (float)hi)
		return hi;
	return (int)lrintf(v);
}

/*
 * One Q4_K (bits 4, 144 bytes) or Q5_K (bits 5, 176 bytes) super-block
 * of x: per sub-block of 32 a scale (max - min) / nmax and a minimum
 * -min (min <= 0), both as 6-bit multiples of the super-block's d, dmin.
 */
static void
q_k45(const float *x, unsigned char *p, int bits)
{
	const int nmax = (1 << bits) - 1;
	float sc[8], mn[8], msc = 0, mmn = 0, d, dmin, s, m;
	int j, l, isc[8], imn[8], q[256];
	unsigned char *qs = p + (bits == 4 ? 16 : 48);

	memset(p, 0, bits == 4 ? 144 : 176);
	for (j = 0; j < 8; j++) {
		float lo = 0, hi = 0;
		for (l = 0; l < 32; l++) {
			lo = fminf(lo, x[32 * j + l]);
			hi = fmaxf(hi, x[32 * j + l]);
		}
		sc[j] = (hi - lo) / (float)nmax;
		mn[j] = -lo;
		msc = fmaxf(msc, sc[j]);
		mmn = fmaxf(mmn, mn[j]);
	}
	put_h(p, msc / 63);
	put_h(p + 2, mmn / 63);
	d = get_h(p);
	dmin = get_h(p + 2);
	for (j = 0; j < 8; j++) {
		isc[j] = d > 0 ? near(sc[j] / d, 0, 63) : 0;
		imn[j] = dmin > 0 ? near(mn[j] / dmin, 0, 63) : 0;
		s = d * (float)isc[j];
		m = dmin * (float)imn[j];
		for (l = 0; l < 32; l++)
			q[32 * j + l] =
			    s > 0 ? near((x[32 * j + l] + m) / s, 0, nmax) : 0;
	}
	for (j = 0; j < 4; j++) {
		p[4 + j] = (unsigned char)(isc[j] | (isc[j + 4] >> 4) << 6);
		p[8 + j] = (unsigned char)(imn[j] | (imn[j + 4] >> 4) << 6);
		p[12 + j] =
		    (unsigned char)((isc[j + 4] & 15) | (imn[j + 4] & 15) << 4);
	}
	for (j = 0; j < 4; j++)
		for (l = 0; l < 32; l++)
			qs[32 * j + l] = (unsigned char)((q[64 * j + l] & 15) |
			    (q[64 * j + 32 + l] & 15) << 4);
	if (bits == 5)
		for (j = 0; j < 8; j++)
			for (l = 0; l < 32; l++)
				p[16 + l] |=
				    (unsigned char)((q[32 * j + l] >> 4) << j);
}

/*
 * One Q6_K super-block (210 bytes): per sub-block of 16 a signed scale
 * (max |x|) / 31 as an int8 multiple of d; quants -32..31.
 */
static void
q_k6(const float *x, unsigned char *p)
{
	float sc[16], msc = 0, d, s;
	int j, l, e, isc[16], u[256];

	memset(p, 0, 210);
	for (j = 0; j < 16; j++) {
		float a = 0;
		for (l = 0; l < 16; l++)
			a = fmaxf(a, fabsf(x[16 * j + l]));
		sc[j] = a / 31;
		msc = fmaxf(msc, sc[j]);
	}
	put_h(p + 208, msc / 127);
	d = get_h(p + 208);
	for (j = 0; j < 16; j++) {
		isc[j] = d > 0 ? near(sc[j] / d, 0, 127) : 0;
		p[192 + j] = (unsigned char)(int8_t)isc[j];
		s = d * (float)isc[j];
		for (l = 0; l < 16; l++)
			u[16 * j + l] =
			    (s > 0 ? near(x[16 * j + l] / s, -32, 31) : 0) + 32;
	}
	for (e = 0; e < 256; e++) {
		int h = e / 128, k = e % 128 / 32, i = e % 32;
		unsigned char *ql = p + 64 * h + i + (k % 2) * 32;
		*ql |= (unsigned char)(k >= 2 ? (u[e] & 15) << 4 : u[e] & 15);
		p[128 + 32 * h + i] |= (unsigned char)((u[e] >> 4) << 2 * k);
	}
}

int
medha_quant_k_row(int type, const float *src, void *dst, int64_t n)
{
	unsigned char *p = dst;
	int64_t b;

	if (type != MEDHA_GGML_Q4_K && type != MEDHA_GGML_Q5_K &&
	    type != MEDHA_GGML_Q6_K)
		return MEDHA_EUNSUP;
	if (n < 0 || n % MEDHA_QK_K != 0)
		return MEDHA_EINVAL;
	for (b = 0; b < n / MEDHA_QK_K; b++, src += MEDHA_QK_K)
		if (type == MEDHA_GGML_Q6_K) {
			q_k6(src, p);
			p += 210;
		} else {
			q_k45(src, p, type == MEDHA_GGML_Q4_K ? 4 : 5);
			p += type == MEDHA_GGML_Q4_K ? 144 : 176;
		}
	return 0;
}
