/*
 * quant_test.c: the ggml tensor types (libcore/quant.c): sizes and
 * names; fp16 and bf16 conversions, exhaustively over every 16-bit
 * pattern and on the special values (signed zeros, subnormals, the
 * largest finite value, infinities, NaN, ties to even); quantize and
 * dequantize round trips within each type's error bound; K-quant blocks
 * decoded against an independent reading of their layout; the integer
 * form of each linear type (medha_quant_unpack32) against its
 * dequantizer. Bit-exactness
 * with the gguf Python package is checked by tests/sh/gguf-ref.sh.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"

static uint32_t
bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float
fl(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void
test_sizes(void **state)
{
	(void)state;
	assert_int_equal(medha_ggml_block_elems(MEDHA_GGML_F32), 1);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_BF16), 2);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q8_0), 34);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q4_0), 18);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q4_1), 20);
	assert_int_equal(medha_ggml_block_elems(MEDHA_GGML_Q4_K), 256);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q4_K), 144);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q6_K), 210);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q5_0), 22);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q5_1), 24);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q2_K), 84);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q3_K), 110);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_Q5_K), 176);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_IQ4_NL), 18);
	assert_int_equal(medha_ggml_block_elems(MEDHA_GGML_IQ4_XS), 256);
	assert_int_equal(medha_ggml_block_bytes(MEDHA_GGML_IQ4_XS), 136);
	assert_int_equal(medha_ggml_block_elems(9), 0); /* Q8_1: unknown */
	assert_int_equal(medha_ggml_block_bytes(-1), 0);
	assert_int_equal(medha_ggml_row_bytes(MEDHA_GGML_Q4_1, 576), 360);
	assert_int_equal(medha_ggml_row_bytes(MEDHA_GGML_F16, 7), 14);
	assert_int_equal(medha_ggml_row_bytes(MEDHA_GGML_Q8_0, 33), 0);
	assert_int_equal(medha_ggml_row_bytes(MEDHA_GGML_F32, -4), 0);
	assert_int_equal(medha_ggml_row_bytes(MEDHA_GGML_F32, INT64_MAX), 0);
	assert_int_equal(medha_ggml_row_bytes(99, 32), 0);
	assert_string_equal(medha_ggml_type_name(MEDHA_GGML_Q4_K), "q4_K");
	assert_string_equal(medha_ggml_type_name(MEDHA_GGML_BF16), "bf16");
	assert_string_equal(medha_ggml_type_name(9), "unknown");
	assert_string_equal(medha_ggml_type_name(MEDHA_GGML_IQ4_XS), "iq4_xs");
	assert_int_equal(medha_ggml_type_from_name("Q8_0"), MEDHA_GGML_Q8_0);
	assert_int_equal(medha_ggml_type_from_name("q6_k"), MEDHA_GGML_Q6_K);
	assert_int_equal(medha_ggml_type_from_name("q5_k"), MEDHA_GGML_Q5_K);
	assert_int_equal(medha_ggml_type_from_name("q8_1"), -1);
}

static void
test_fp16(void **state)
{
	static const struct {
		uint16_t h;
		uint32_t f;
	} known[] = {
	    {0x0000, 0x00000000}, /* +0 */
	    {0x8000, 0x80000000}, /* -0 */
	    {0x0001, 0x33800000}, /* smallest subnormal, 2^-24 */
	    {0x03ff, 0x387fc000}, /* largest subnormal */
	    {0x0400, 0x38800000}, /* smallest normal, 2^-14 */
	    {0x3c00, 0x3f800000}, /* 1 */
	    {0xc000, 0xc0000000}, /* -2 */
	    {0x7bff, 0x477fe000}, /* 65504 */
	    {0x7c00, 0x7f800000}, /* +inf */
	    {0xfc00, 0xff800000}, /* -inf */
	    {0x7e00, 0x7fc00000}, /* quiet NaN */
	    {0x7c01, 0x7f802000}, /* signalling NaN, payload kept */
	};
	uint32_t h;
	size_t i;
	float f;

	(void)state;
	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		assert_int_equal(bits(medha_fp16_to_fp32(known[i].h)),
		    known[i].f);
	/* every half: to float and back is the identity (NaN stays NaN) */
	for (h = 0; h < 65536; h++) {
		f = medha_fp16_to_fp32((uint16_t)h);
		if (isnan(f)) {
			assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
			assert_true((medha_fp32_to_fp16(f) & 0x7fff) > 0x7c00);
			assert_int_equal(medha_fp32_to_fp16(f) & 0x8000,
			    h & 0x8000);
			continue;
		}
		assert_int_equal(medha_fp32_to_fp16(f), h);
	}
	/* rounding to nearest, ties to even */
	assert_int_equal(medha_fp32_to_fp16(65519.0f), 0x7bff);
	assert_int_equal(medha_fp32_to_fp16(65520.0f), 0x7c00); /* tie up */
	assert_int_equal(medha_fp32_to_fp16(-1e10f), 0xfc00);
	assert_int_equal(medha_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(medha_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
	assert_int_equal(medha_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f),
	    0x3c01);
	assert_int_equal(medha_fp32_to_fp16(0x1p-25f), 0x0000); /* tie: 0 */
	assert_int_equal(medha_fp32_to_fp16(0x1.0002p-25f), 0x0001);
	assert_int_equal(medha_fp32_to_fp16(3 * 0x1p-25f), 0x0002);
	assert_int_equal(medha_fp32_to_fp16(-0x1p-26f), 0x8000);
	assert_int_equal(medha_fp32_to_fp16(0x1.ffcp-15f), 0x0400);
	assert_int_equal(medha_fp32_to_fp16(1e-40f), 0x0000); /* subnormal */
	assert_true((medha_fp32_to_fp16(fl(0xffc00001)) & 0xfe00) == 0xfe00);
}

static void
test_bf16(void **state)
{
	uint32_t h;
	float f;

	(void)state;
	for (h = 0; h < 65536; h++) {
		f = medha_bf16_to_fp32((uint16_t)h);
		assert_int_equal(bits(f), h << 16);
		if (isnan(f)) /* quiet, sign and payload top kept */
			assert_int_equal(medha_fp32_to_bf16(f), h | 0x40);
		else
			assert_int_equal(medha_fp32_to_bf16(f), h);
	}
	assert_int_equal(medha_fp32_to_bf16(fl(0x3f808000)), 0x3f80); /* tie */
	assert_int_equal(medha_fp32_to_bf16(fl(0x3f818000)), 0x3f82); /* tie */
	assert_int_equal(medha_fp32_to_bf16(fl(0x3f808001)), 0x3f81);
	assert_int_equal(medha_fp32_to_bf16(fl(0x7f7fffff)), 0x7f80); /* inf */
	assert_int_equal(medha_fp32_to_bf16(fl(0x00018000)), 0x0002); /* sub */
	assert_int_equal(medha_fp32_to_bf16(fl(0x7f800001)), 0x7fc0);
	assert_int_equal(medha_fp32_to_bf16(fl(0xff800000)), 0xff80);
}

/* F16 and BF16 rows: quant_row and dequant_row agree with the scalars. */
static void
test_half_rows(void **state)
{
	float x[8] = {0.0f, -0.0f, 1.0f / 3, 65520.0f, 1e-7f, -INFINITY, NAN,
	    3.14159f};
	unsigned char q[16];
	float y[8];
	int i;

	(void)state;
	assert_int_equal(medha_quant_row(MEDHA_GGML_F16, x, q, 8), 0);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_F16, q, y, 8), 0);
	for (i = 0; i < 8; i++) {
		assert_int_equal(q[2 * i] | q[2 * i + 1] << 8,
		    medha_fp32_to_fp16(x[i]));
		if (!isnan(x[i]))
			assert_int_equal(bits(y[i]),
			    bits(medha_fp16_to_fp32(medha_fp32_to_fp16(x[i]))));
	}
	assert_true(isnan(y[6]));
	assert_int_equal(medha_quant_row(MEDHA_GGML_BF16, x, q, 8), 0);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_BF16, q, y, 8), 0);
	for (i = 0; i < 8; i++)
		if (!isnan(x[i]))
			assert_int_equal(bits(y[i]),
			    (uint32_t)medha_fp32_to_bf16(x[i]) << 16);
	assert_true(isnan(y[6]));
	assert_int_equal(medha_quant_row(MEDHA_GGML_F32, x, q, 4), 0);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_F32, q, y, 4), 0);
	assert_memory_equal(x, y, 4 * sizeof(float));
}

static uint64_t seed = 88172645463325252ull;

static float
rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return (float)(seed >> 11) * 0x1p-53f * 2 - 1;
}

/*
 * Quantize n random values of each scale, dequantize, and hold every
 * block's error within bound (in units of the block's largest |x|).
 */
static void
round_trip(int type, double bound)
{
	float x[4096], y[4096], amax;
	unsigned char q[4096 * 2];
	double worst = 0, e;
	int s, i, b;

	/* scales whose fp16 block scale is normal (from 2^-14 up) */
	for (s = -5; s <= 10; s += 5) {
		for (i = 0; i < 4096; i++)
			x[i] = ldexpf(rnd(), s) +
			    (i % 7 == 0 ? ldexpf(0.3f, s) : 0);
		assert_int_equal(medha_quant_row(type, x, q, 4096), 0);
		assert_int_equal(medha_dequant_row(type, q, y, 4096), 0);
		for (b = 0; b < 4096; b += 32) {
			amax = 0;
			for (i = b; i < b + 32; i++)
				amax = fmaxf(amax, fabsf(x[i]));
			for (i = b; i < b + 32; i++) {
				e = fabs((double)x[i] - y[i]) / amax;
				if (e > worst)
					worst = e;
			}
		}
	}
	if (worst > bound)
		fail_msg("%s: worst error %g of the block's max, bound %g",
		    medha_ggml_type_name(type), worst, bound);
}

static void
test_round_trip(void **state)
{
	float x[32], y[32];
	unsigned char q[64];
	int i, t;

	(void)state;
	/* half a step, plus the fp16 rounding of the scale (and min) */
	round_trip(MEDHA_GGML_Q8_0, 0.5 / 127 + 0x1p-10);
	/* Q4_0 maps -max to 7/8 of it: a whole step at worst */
	round_trip(MEDHA_GGML_Q4_0, 1.0 / 8 + 0x1p-9);
	/* Q4_1: a step is (max - min) / 15 <= 2 max / 15 */
	round_trip(MEDHA_GGML_Q4_1, 0.5 * 2 / 15 + 0x1p-8);

	/* zeros stay zeros; non-finite input is defined, not a crash */
	memset(x, 0, sizeof(x));
	for (t = 0; t < 3; t++) {
		static const int ty[] = {MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0,
		    MEDHA_GGML_Q4_1};

		assert_int_equal(medha_quant_row(ty[t], x, q, 32), 0);
		assert_int_equal(medha_dequant_row(ty[t], q, y, 32), 0);
		for (i = 0; i < 32; i++)
			assert_true(y[i] == 0.0f);
	}
	x[3] = NAN;
	x[5] = INFINITY;
	x[7] = -3.4e38f;
	x[9] = 3.4e38f;
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q8_0, x, q, 32), 0);
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q4_0, x, q, 32), 0);
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q4_1, x, q, 32), 0);

	/* blocks on their grid come back exactly */
	for (i = 0; i < 32; i++)
		x[i] = -4.0f + (float)(i % 16) * 0.5f; /* m = -4, d = 0.5 */
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q4_1, x, q, 32), 0);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_Q4_1, q, y, 32), 0);
	assert_memory_equal(x, y, sizeof(x));
	for (i = 0; i < 32; i++)
		x[i] = (float)(i % 16 - 8) * 2;
	x[0] = -16; /* max |x| is -16: d = 2, every value on the grid */
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q4_0, x, q, 32), 0);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_Q4_0, q, y, 32), 0);
	assert_memory_equal(x, y, sizeof(x));

	/* bad arguments */
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q4_K, x, q, 256),
	    MEDHA_EUNSUP);
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q6_K, x, q, 256),
	    MEDHA_EUNSUP);
	assert_int_equal(medha_quant_row(77, x, q, 32), MEDHA_EUNSUP);
	assert_int_equal(medha_quant_row(MEDHA_GGML_Q8_0, x, q, 31),
	    MEDHA_EINVAL);
	assert_int_equal(medha_dequant_row(77, q, y, 32), MEDHA_EUNSUP);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_Q4_1, q, y, 16),
	    MEDHA_EINVAL);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_F32, q, y, -1),
	    MEDHA_EINVAL);
}

static void
put16(unsigned char *p, float f)
{
	uint16_t h = medha_fp32_to_fp16(f);

	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}

/*
 * Q4_K: scales and mins written by a 6-bit packer of our own (the
 * inverse of ggml's get_scale_min_k4), then every element checked.
 */
static void
test_q4_k(void **state)
{
	unsigned char blk[144];
	int sc[8], mn[8], j, l, q;
	float y[256], want;

	(void)state;
	memset(blk, 0, sizeof(blk));
	put16(blk, 0.5f);
	put16(blk + 2, 0.25f);
	for (j = 0; j < 8; j++) {
		sc[j] = (j * 9 + 5) & 63;
		mn[j] = (j * 23 + 40) & 63;
	}
	for (j = 0; j < 8; j++) {
		if (j < 4) {
			blk[4 + j] =
			    (unsigned char)(sc[j] | (sc[j + 4] >> 4) << 6);
			blk[8 + j] =
			    (unsigned char)(mn[j] | (mn[j + 4] >> 4) << 6);
		} else {
			blk[8 + j] =
			    (unsigned char)((sc[j] & 15) | (mn[j] & 15) << 4);
		}
	}
	for (l = 0; l < 128; l++)
		blk[16 + l] = (unsigned char)(l * 37 + 11);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_Q4_K, blk, y, 256), 0);
	for (j = 0; j < 8; j++)
		for (l = 0; l < 32; l++) {
			/* sub-block j: low nibbles of bytes 32*(j/2).. for
			 * even j, high nibbles for odd j */
			q = blk[16 + 32 * (j / 2) + l];
			q = j % 2 == 0 ? q & 15 : q >> 4;
			want = 0.5f * (float)sc[j] * (float)q -
			    0.25f * (float)mn[j];
			assert_true(y[32 * j + l] == want);
		}
}

/* Q6_K: the 6-bit values and int8 scales, checked the same way. */
static void
test_q6_k(void **state)
{
	unsigned char blk[210];
	int i, h, r, q, lo, hi, sub;
	float y[256], want;
	signed char sc;

	(void)state;
	for (i = 0; i < 192; i++)
		blk[i] = (unsigned char)(i * 53 + 7);
	for (i = 0; i < 16; i++)
		blk[192 + i] = (unsigned char)(int8_t)(i * 17 - 128);
	put16(blk + 208, -0.125f);
	assert_int_equal(medha_dequant_row(MEDHA_GGML_Q6_K, blk, y, 256), 0);
	for (i = 0; i < 256; i++) {
		h = i / 128; /* half of the block */
		r = i % 128;
		/* quarter r/32: low nibble of ql[r%64] for r < 64 ... */
		lo = blk[64 * h + r % 64];
		lo = r < 64 ? lo & 15 : lo >> 4;
		hi = (blk[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
		q = (lo | hi << 4) - 32;
		sub = 8 * h + (r / 32) * 2 + (r % 32) / 16;
		sc = (signed char)blk[192 + sub];
		want = -0.125f * (float)sc * (float)q;
		if (y[i] != want)
			fail_msg("element %d: %g, want %g", i, y[i], want);
	}
}

/*
 * The K-quant quantizers (quant_k.c, round to nearest): random rows come
 * back within a bound of each super-block's max |x|: half a step of
 * the widest sub-block (Q4_K, Q5_K: 2 max / nmax; Q6_K: max / 31) and
 * the 6-bit (Q6_K: 8-bit) rounding of the sub-block scales and mins.
 */
static void
test_quant_k(void **state)
{
	static const int types[] = {MEDHA_GGML_Q4_K, MEDHA_GGML_Q5_K,
	    MEDHA_GGML_Q6_K};
	static const double bound[] = {1.0 / 15 + 2.0 / 63 + 1.0 / 126,
	    1.0 / 31 + 2.0 / 63 + 1.0 / 126, 1.0 / 62 + 1.0 / 127};
	static float x[4096], y[4096];
	static unsigned char q[4096];
	double worst, e, amax;
	uint32_t r = 7;
	int t, i, b;

	(void)state;
	for (t = 0; t < 3; t++) {
		worst = 0;
		for (i = 0; i < 4096; i++) {
			r = r * 1103515245u + 12345u;
			x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) *
			    (i % 64 < 32 ? 1.0f : 0.05f);
		}
		assert_int_equal(medha_quant_k_row(types[t], x, q, 4096), 0);
		assert_int_equal(medha_dequant_row(types[t], q, y, 4096), 0);
		for (b = 0; b < 4096; b += 256) {
			amax = 0;
			for (i = b; i < b + 256; i++)
				amax = fmax(amax, fabs(x[i]));
			for (i = b; i < b + 256; i++) {
				e = fabs((double)x[i] - y[i]) / amax;
				worst = fmax(worst, e);
			}
		}
		if (worst > bound[t])
			fail_msg("%s: worst error %g of the max, bound %g",
			    medha_ggml_type_name(types[t]), worst, bound[t]);
	}
	assert_int_equal(medha_quant_k_row(MEDHA_GGML_Q4_K, x, q, 255),
	    MEDHA_EINVAL);
	assert_int_equal(medha_quant_k_row(MEDHA_GGML_Q3_K, x, q, 256),
	    MEDHA_EUNSUP);
}

/*
 * medha_quant_unpack32 (the integers the packed kernels multiply):
 * for every linear type, random blocks with finite fp16 fields,
 * (d * sc) * (u - c) - dm * mn gives every element's dequantized bits,
 * the quants are in range and the offsets are the layout's.
 */
static void
test_unpack32(void **state)
{
	static const int types[] = {MEDHA_GGML_Q5_0, MEDHA_GGML_Q5_1,
	    MEDHA_GGML_Q2_K, MEDHA_GGML_Q3_K, MEDHA_GGML_Q4_K, MEDHA_GGML_Q5_K,
	    MEDHA_GGML_Q6_K, MEDHA_GGML_IQ4_NL, MEDHA_GGML_IQ4_XS};
	static const int bits_of[] = {5, 5, 2, 3, 4, 5, 6, 8, 8};
	unsigned char row[2 * 210];
	float y[512], x, d, dm;
	struct medha_q32 q;
	uint32_t r = 12345;
	int i, n, b, j, k, rep, bs, be;

	(void)state;
	for (i = 0; i < 9; i++)
		for (rep = 0; rep < 50; rep++) {
			be = medha_ggml_block_elems(types[i]);
			bs = medha_ggml_block_bytes(types[i]);
			n = 2 * be;
			for (j = 0; j < 2 * bs; j++) {
				r = r * 1103515245u + 12345u;
				row[j] = (unsigned char)(r >> 16);
			}
			/* finite fp16 fields: clear the top exponent bit */
			for (b = 0; b < 2; b++) {
				unsigned char *p = row + b * bs;
				int at[2] = {be == 32 ? 0 : 0, 2}, na = 2;
				if (types[i] == MEDHA_GGML_Q5_0 ||
				    types[i] == MEDHA_GGML_IQ4_NL ||
				    types[i] == MEDHA_GGML_IQ4_XS)
					na = 1;
				if (types[i] == MEDHA_GGML_Q2_K)
					at[0] = 80, at[1] = 82;
				if (types[i] == MEDHA_GGML_Q3_K)
					at[0] = 108, na = 1;
				if (types[i] == MEDHA_GGML_Q6_K)
					at[0] = 208, na = 1;
				for (k = 0; k < na; k++)
					p[at[k] + 1] &= 0xbf;
			}
			assert_int_equal(
			    medha_dequant_row(types[i], row, y, n), 0);
			for (b = 0; b < n / 32; b++) {
				assert_int_equal(medha_quant_unpack32(types[i],
				                     row, b, &q),
				    0);
				assert_true(q.c == (types[i] == MEDHA_GGML_Q5_0
				                           ? 16
				                           : types[i] ==
				                               MEDHA_GGML_Q6_K
				                           ? 32
				                           : types[i] ==
				                               MEDHA_GGML_Q3_K
				                           ? 4
				                           : bits_of[i] == 8
				                           ? 128
				                           : 0));
				d = medha_fp16_to_fp32(q.d);
				dm = medha_fp16_to_fp32(q.dm);
				for (j = 0; j < 32; j++) {
					assert_true(q.u[j] < 1 << bits_of[i]);
					x = d * (float)q.sc[j / 16] *
					        (float)(q.u[j] - q.c) -
					    dm * (float)q.mn[j / 16];
					if (bits(x) != bits(y[b * 32 + j]))
						fail_msg("%s block %d elem %d: "
						         "%g, want %g",
						    medha_ggml_type_name(
						        types[i]),
						    b, j, x, y[b * 32 + j]);
				}
			}
		}
	assert_int_equal(medha_quant_unpack32(MEDHA_GGML_Q4_0, row, 0, &q),
	    MEDHA_EUNSUP);
	assert_int_equal(medha_quant_unpack32(MEDHA_GGML_BF16, row, 0, &q),
	    MEDHA_EUNSUP);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_fp16),
	    cmocka_unit_test(test_bf16),
	    cmocka_unit_test(test_half_rows),
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_q4_k),
	    cmocka_unit_test(test_q6_k),
	    cmocka_unit_test(test_unpack32),
	    cmocka_unit_test(test_quant_k),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
