/*
 * cpu_mm_packk.c: the packed integer kernel for the types whose blocks
 * carry more than four bits a weight or scales inside a super-block:
 * Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and IQ4_NL and IQ4_XS
 * (whose nibbles index a table of levels) (cpu_mm.c describes the
 * kinds of product; cpu_mm_pack.c the kernel for Q8_0, Q4_0 and Q4_1,
 * whose layout this one extends). Where the build has AVX512-VNNI, or
 * AVX2 with FMA and F16C.
 *
 * medha_quant_unpack32 (model/quant.h) gives every 32 weights of a row
 * as unsigned quants u (0..63; IQ4: level + 128), an offset c, one or two integer scales
 * sc and minimums mn (per 16 weights) and the fp16 d and dm of their
 * super-block: w = d*sc*(u - c) - dm*mn. Eight rows are interleaved four
 * bytes at a time as in cpu_mm_pack.c: per super-block the eight rows'
 * d (and dm) as f16, then per block of 32 the rows' int8 scales (and
 * minimums), the bits above the fourth as bit planes (byte i of lane r
 * holds in bit j the bit of element 4j + i), and the low four bits as
 * Q4_1's nibbles. Against Q8 activations (scale dx, quants x, their
 * sums xi over the block and xi16 over its first 16) a block's dot per
 * row and token is exact in int32,
 *
 *	tot = sum_h sc_h * (sum_h u*x - c * sum_h x),  ms = sum_h mn_h * sum_h x
 *
 * then acc = fma(d * dx, tot, acc) and accm = fma(dm * dx, ms, accm),
 * the result acc - accm (with one scale a block, d * sc and dm * mn are
 * made floats once for all tokens instead: acc = fma(d * sc * dx,
 * sum u*x - c * xi, acc), accm = fma(dm * mn, dx * xi, accm)): the order of ggml's K-quant kernels, with Q8
 * activations per 32 (ggml's K kernels quantize the activations per 256
 * instead, so results differ from llama.cpp's in the last bits).
 */
#include "cpu/cpu_mm_impl.h"

#include "model/quant.h"

#include <stdlib.h>
#include <string.h>

/* ---- the layout of each type ---- */

/* 32-element blocks per super-block: 8 for the K-quants, else 1 */
static inline int
pk_g(int type)
{
	return type == MEDHA_GGML_Q5_0 || type == MEDHA_GGML_Q5_1 ||
	        type == MEDHA_GGML_IQ4_NL
	    ? 1
	    : 8;
}

/* the IQ4 types: nibbles index a table of levels */
static inline int
pk_iq(int type)
{
	return type == MEDHA_GGML_IQ4_NL || type == MEDHA_GGML_IQ4_XS;
}

/* scales per block: 2 where they are per 16 weights */
static inline int
pk_s(int type)
{
	return type == MEDHA_GGML_Q6_K || type == MEDHA_GGML_Q3_K ||
	        type == MEDHA_GGML_Q2_K
	    ? 2
	    : 1;
}

/* integer scales stored (else 1) */
static inline int
pk_sc(int type)
{
	return pk_g(type) == 8;
}

/* integer minimums stored (Q5_1: -1, the others without one: none) */
static inline int
pk_mn(int type)
{
	return type == MEDHA_GGML_Q4_K || type == MEDHA_GGML_Q5_K ||
	    type == MEDHA_GGML_Q2_K;
}

/* a minimum term at all */
static inline int
pk_min(int type)
{
	return pk_mn(type) || type == MEDHA_GGML_Q5_1;
}

/* bit planes above the nibbles */
static inline int
pk_nh(int type)
{
	return type == MEDHA_GGML_Q6_K ? 2
	    : type == MEDHA_GGML_Q5_0 || type == MEDHA_GGML_Q5_1 ||
	        type == MEDHA_GGML_Q5_K
	    ? 1
	    : 0;
}

static inline int
pk_c(int type)
{
#ifndef PACK8_VNNI
	if (pk_iq(type)) /* AVX2 multiplies the signed levels */
		return 0;
#endif
	return pk_iq(type)             ? 128
	    : type == MEDHA_GGML_Q5_0 ? 16
	    : type == MEDHA_GGML_Q6_K  ? 32
	    : type == MEDHA_GGML_Q3_K  ? 4
	                               : 0;
}

/* bytes of a super-block's header (d, dm) and of one block, eight rows */
static inline int
pk_hb(int type)
{
	return pk_min(type) ? 32 : 16;
}

static inline int
pk_bb(int type)
{
	return 8 * pk_s(type) * (pk_sc(type) + pk_mn(type)) +
	    32 * pk_nh(type) + 128;
}

int
mm_pk_type(int type)
{
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
	default: return 0;
	}
}

/* row r (0..7) of block q into the block at blk of a packed group */
static void
pk_put(int type, const struct medha_q32 *q, int r, unsigned char *blk)
{
	const int S = pk_s(type);
	int h, e, pl, off = 0;
	uint8_t u[32];

	memcpy(u, q->u, sizeof(u));
	if (pk_iq(type)) /* the level's index, 0..15 */
		for (e = 0; e < 32; e++)
			for (h = 0; h < 16; h++)
				if (medha_iq4nl_level(h) + 128 == q->u[e])
					u[e] = (uint8_t)h;

	if (pk_sc(type)) {
		for (h = 0; h < S; h++)
			blk[off + 8 * h + r] = (unsigned char)(int8_t)q->sc[h];
		off += 8 * S;
	}
	if (pk_mn(type)) {
		for (h = 0; h < S; h++)
			blk[off + 8 * h + r] = (unsigned char)(int8_t)q->mn[h];
		off += 8 * S;
	}
	for (pl = 0; pl < pk_nh(type); pl++, off += 32)
		for (e = 0; e < 32; e++)
			blk[off + 4 * r + e % 4] |= (unsigned char)((u[e] >>
			                                                (4 + pl) &
			                                            1)
			    << (e / 4));
	for (e = 0; e < 16; e++)
		blk[off + 32 * (e / 4) + 4 * r + e % 4] =
		    (unsigned char)((u[e] & 0x0f) | (u[e + 16] & 0x0f) << 4);
}

int
mm_pk_make(struct medha_pack *p, const struct medha_tensor *w)
{
	const int type = w->type, G = pk_g(type), hb = pk_hb(type);
	const int bb = pk_bb(type);
	int64_t rows = w->ne[1], k = w->ne[0], groups, g, b, r;
	size_t rb, nb, sbb, gb;
	struct medha_q32 q;

	memset(p, 0, sizeof(*p));
	if (!mm_pk_type(type) || w->data == NULL ||
	    k % (G * MEDHA_QK) != 0 || k > INT32_MAX || rows < 1 ||
	    rows > INT32_MAX)
		return MEDHA_EUNSUP;
	rb = medha_ggml_row_bytes(type, k);
	nb = (size_t)k / MEDHA_QK;
	sbb = (size_t)hb + (size_t)G * (size_t)bb;
	gb = nb / (size_t)G * sbb;
	groups = (rows + 7) / 8;
	if ((p->data = medha_calloc((size_t)groups, gb)) == NULL)
		return MEDHA_ENOMEM;
	for (g = 0; g < groups; g++)
		for (r = 0; r < 8 && g * 8 + r < rows; r++) {
			const unsigned char *s = (const unsigned char *)w->data +
			    rb * (size_t)(g * 8 + r);
			for (b = 0; b < (int64_t)nb; b++) {
				unsigned char *sb = p->data + (size_t)g * gb +
				    (size_t)(b / G) * sbb;
				if (medha_quant_unpack32(type, s, b, &q) != 0) {
					medha_pack_free(p);
					return MEDHA_EUNSUP;
				}
				if (b % G == 0) {
					memcpy(sb + 2 * r, &q.d, 2);
					if (pk_min(type))
						memcpy(sb + 16 + 2 * r, &q.dm, 2);
				}
				pk_put(type, &q, (int)r,
				    sb + hb + (size_t)(b % G) * bb);
			}
		}
	p->type = type;
	p->rows = (int)rows;
	p->k = (int)k;
	return 0;
}

#ifdef PACK8
/* ---- the kernel ---- */

/* the IQ4 levels as the kernel multiplies them: + 128 for vpdpbusd */
static const int8_t iq_levels[16] = {
#ifdef PACK8_VNNI
    1, 24, 45, 63, 79, 93, 106, 118, (int8_t)129, (int8_t)141,
    (int8_t)153, (int8_t)166, (int8_t)181, (int8_t)197, (int8_t)217,
    (int8_t)241
#else
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
    113
#endif
};

/*
 * acc + the four-byte dot products of w's lanes with x's four bytes; w
 * unsigned, or with AVX2 alone and sgn, signed (the IQ4 levels)
 */
ALWAYS_INLINE __m256i
pk_dp4(__m256i acc, __m256i w, const int8_t *x, int sgn)
{
#ifdef PACK8_VNNI
	(void)sgn;
	return mm_dpbusd_bcast(acc, w, x);
#else
	int32_t v;
	__m256i xv;

	memcpy(&v, x, sizeof(v));
	xv = _mm256_set1_epi32(v);
	/* u <= 63: a pair is at most 2 * 63 * 128 in size, no saturation;
	   signed levels as |w| against x with w's sign, |w| <= 127 */
	if (sgn) {
		xv = _mm256_sign_epi8(xv, w);
		w = _mm256_sign_epi8(w, w);
	}
	return _mm256_add_epi32(acc,
	    _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv),
	        _mm256_set1_epi16(1)));
#endif
}

/* plane hp's bit j of each byte moved to bit `bit` (the rest masked) */
ALWAYS_INLINE __m256i
pk_plane(__m256i hp, int j, int bit)
{
	__m256i v = j < bit ? _mm256_slli_epi16(hp, bit - j)
	    : j > bit       ? _mm256_srli_epi16(hp, j - bit)
	                    : hp;

	return _mm256_and_si256(v, _mm256_set1_epi8((char)(1 << bit)));
}

/*
 * One group of eight packed rows (g) times the T activation rows t0 ..
 * t0+T-1 of one tile: out[t] the eight rows' results for token t0 + t.
 * The same operations for a token whatever T is.
 */
ALWAYS_INLINE void
pk_kern(const int T, const int type, const unsigned char *g,
    const struct medha_act *a, int t0, __m256 *out)
{
	const int G = pk_g(type), S = pk_s(type), SC = pk_sc(type);
	const int MN = pk_mn(type), MIN = pk_min(type), NH = pk_nh(type);
	const int C = pk_c(type), hb = pk_hb(type), bb = pk_bb(type);
	const int IQ = pk_iq(type);
	const int nb = a->k / MEDHA_QK;
	const size_t o = medha_act_blk(a, t0, 0);
	const int8_t *xq = a->q + o * MEDHA_QK;
	const float *xd = a->qd + o;
	const int32_t *xi = a->qi + o, *xh = a->qi16 + o;
	const unsigned char *p = g;
	__m256 acc[8], accm[8], dv = _mm256_setzero_ps(),
	                        dmv = _mm256_setzero_ps(), dsc = dv, dmn = dv;
	int t, b, j, h;

#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		acc[t] = accm[t] = _mm256_setzero_ps();
	for (b = 0; b < nb; b++, xq += XB, xd += XS, xi += XS, xh += XS) {
		__m256i wv[8], scv[2], mnv[2];
		const unsigned char *q;

		if (b % G == 0) {
			dv = _mm256_cvtph_ps(
			    _mm_loadu_si128((const __m128i *)p));
			if (MIN)
				dmv = _mm256_cvtph_ps(
				    _mm_loadu_si128((const __m128i *)(p + 16)));
			p += hb;
		}
		_mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
		_mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
		_mm_prefetch((const char *)p + PF_AHEAD + 128, _MM_HINT_T0);
		if (bb > 192)
			_mm_prefetch((const char *)p + PF_AHEAD + 192,
			    _MM_HINT_T0);
		q = p;
		if (SC) {
			for (h = 0; h < S; h++)
				scv[h] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
				    (const __m128i *)(q + 8 * h)));
			q += 8 * S;
		}
		if (MN) {
			for (h = 0; h < S; h++)
				mnv[h] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
				    (const __m128i *)(q + 8 * h)));
			q += 8 * S;
		}
		{
			const __m256i lo = _mm256_set1_epi8(0x0f);
			const unsigned char *nq = q + 32 * NH;
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				__m256i v = _mm256_loadu_si256(
				    (const __m256i *)(nq + 32 * j));
				wv[j] = _mm256_and_si256(v, lo);
				wv[j + 4] = _mm256_and_si256(
				    _mm256_srli_epi16(v, 4), lo);
			}
			if (IQ) {
				const __m256i tbl = _mm256_broadcastsi128_si256(
				    _mm_loadu_si128((const __m128i *)iq_levels));
#pragma GCC unroll 8
				for (j = 0; j < 8; j++)
					wv[j] = _mm256_shuffle_epi8(tbl, wv[j]);
			}
		}
#pragma GCC unroll 2
		for (h = 0; h < NH; h++) {
			const __m256i hp = _mm256_loadu_si256(
			    (const __m256i *)(q + 32 * h));
#pragma GCC unroll 8
			for (j = 0; j < 8; j++)
				wv[j] = _mm256_or_si256(wv[j],
				    pk_plane(hp, j, 4 + h));
		}
		p += bb;
		/* one scale per block: d * sc and dm * mn as floats, once
		   for every token (exact: an f16 times a small integer) */
		if (S == 1) {
			dsc = SC ? _mm256_mul_ps(dv, _mm256_cvtepi32_ps(scv[0]))
			         : dv;
			if (MIN)
				dmn = MN ? _mm256_mul_ps(dmv,
				               _mm256_cvtepi32_ps(mnv[0]))
				         : _mm256_sub_ps(_mm256_setzero_ps(), dmv);
		}
#pragma GCC unroll 8
		for (t = 0; t < T; t++) {
			const int8_t *x = xq + t * MEDHA_QK;
			const int32_t h0 = xh[t * 1], h1 = xi[t] - h0;
			__m256i s0 = _mm256_set1_epi32(S == 1 ? -C * xi[t] : 0),
				s1 = _mm256_setzero_si256(), tot, ms;
			__m256 dx = _mm256_set1_ps(xd[t]);

#pragma GCC unroll 8
			for (j = 0; j < 8; j++) {
				/* S == 1: two chains side by side; S == 2:
				   one per half */
				if (S == 1 ? j % 2 == 0 : j < 4)
					s0 = pk_dp4(s0, wv[j], x + 4 * j, IQ);
				else
					s1 = pk_dp4(s1, wv[j], x + 4 * j, IQ);
			}
			if (S == 1) {
				s0 = _mm256_add_epi32(s0, s1);
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dsc, dx),
				    _mm256_cvtepi32_ps(s0), acc[t]);
				if (MIN)
					accm[t] = _mm256_fmadd_ps(dmn,
					    _mm256_set1_ps(xd[t] * (float)xi[t]),
					    accm[t]);
				continue;
			} else {
				if (C) {
					s0 = _mm256_sub_epi32(s0,
					    _mm256_set1_epi32(C * h0));
					s1 = _mm256_sub_epi32(s1,
					    _mm256_set1_epi32(C * h1));
				}
				tot = _mm256_add_epi32(
				    _mm256_mullo_epi32(s0, scv[0]),
				    _mm256_mullo_epi32(s1, scv[1]));
			}
			acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, dx),
			    _mm256_cvtepi32_ps(tot), acc[t]);
			if (MIN) { /* Q2_K */
				ms = _mm256_add_epi32(
				    _mm256_mullo_epi32(mnv[0],
				        _mm256_set1_epi32(h0)),
				    _mm256_mullo_epi32(mnv[1],
				        _mm256_set1_epi32(h1)));
				accm[t] = _mm256_fmadd_ps(_mm256_mul_ps(dmv, dx),
				    _mm256_cvtepi32_ps(ms), accm[t]);
			}
		}
	}
#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		out[t] = MIN ? _mm256_sub_ps(acc[t], accm[t]) : acc[t];
}

/* Rows r0 .. r0+R-1 (r0 a multiple of 8, R <= 8) of a packed weight. */
static void
pk_rows(const struct medha_act *a, const struct medha_pack *pk, int r0, int R,
    float *y, int ldy, int tb0, int tb1)
{
	const int type = pk->type, G = pk_g(type);
	const size_t gb = (size_t)(a->k / MEDHA_QK / G) *
	    ((size_t)pk_hb(type) + (size_t)G * (size_t)pk_bb(type));
	const unsigned char *g = pk->data + (size_t)(r0 / 8) * gb;
	__m256 out[8];
	int t0, T;

	for (t0 = tb0; t0 < tb1; t0 += T) {
		T = mm_tile_tokens8(tb1 - t0);
#define PKT(ty)                                                 \
	do {                                                    \
		if (T == 8)                                     \
			pk_kern(8, ty, g, a, t0, out);          \
		else if (T == 4)                                \
			pk_kern(4, ty, g, a, t0, out);          \
		else if (T == 2)                                \
			pk_kern(2, ty, g, a, t0, out);          \
		else                                            \
			pk_kern(1, ty, g, a, t0, out);          \
	} while (0)
		switch (type) {
		case MEDHA_GGML_Q5_0: PKT(MEDHA_GGML_Q5_0); break;
		case MEDHA_GGML_Q5_1: PKT(MEDHA_GGML_Q5_1); break;
		case MEDHA_GGML_Q2_K: PKT(MEDHA_GGML_Q2_K); break;
		case MEDHA_GGML_Q3_K: PKT(MEDHA_GGML_Q3_K); break;
		case MEDHA_GGML_Q4_K: PKT(MEDHA_GGML_Q4_K); break;
		case MEDHA_GGML_Q5_K: PKT(MEDHA_GGML_Q5_K); break;
		case MEDHA_GGML_IQ4_NL: PKT(MEDHA_GGML_IQ4_NL); break;
		case MEDHA_GGML_IQ4_XS: PKT(MEDHA_GGML_IQ4_XS); break;
		default: PKT(MEDHA_GGML_Q6_K); break;
		}
#undef PKT
		mm_store8(out, R, T, y + r0, ldy, t0);
	}
}

/* A task's rows, eight at a time (cpu_mm_impl.h): pk_rows's one caller. */
void
mm_pk_task(const struct medha_act *a, const struct medha_pack *pk, int r0,
    int r1, float *y, int ldy, int tb0, int tb1)
{
	int r;

	for (r = r0; r < r1; r += 8)
		pk_rows(a, pk, r, r1 - r < 8 ? r1 - r : 8, y, ldy, tb0, tb1);
}
#endif
