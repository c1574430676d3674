/*
 * cpu_mm_pack.c: the matrix product's packed integer kernel (cpu_mm.c
 * describes the three kinds), where the build has AVX512-VNNI, or AVX2
 * with FMA and F16C: medha_pack_make interleaves eight rows of a Q8_0,
 * Q4_0 or Q4_1 weight four bytes at a time, and one vpdpbusd (AVX2:
 * vpmaddubsw) then makes four products for each of the eight rows; a
 * block's dot is summed exactly in int32 before one conversion, so both
 * instruction sets give the same bits.
 */
#include "cpu/cpu_mm_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- the packed integer kernel (medha_pack: AVX512-VNNI or AVX2) ---- */

/* bytes of one packed block of eight rows: scales (mins), quants */
static int
pack_block_bytes(int type)
{
	switch (type) {
	case MEDHA_GGML_Q8_0: return 16 + 8 * 32;
	case MEDHA_GGML_Q4_0: return 16 + 8 * 16;
	case MEDHA_GGML_Q4_1: return 32 + 8 * 16;
	default: return 0;
	}
}

void
medha_pack_free(struct medha_pack *p)
{
	free(p->data);
	memset(p, 0, sizeof(*p));
}

int
medha_pack_make(struct medha_pack *p, const struct medha_tensor *w)
{
	const int type = w->type, bb = pack_block_bytes(type);
	const int q8 = type == MEDHA_GGML_Q8_0, off = type == MEDHA_GGML_Q4_1
	    ? 4
	    : 2;
	const int sq = type == MEDHA_GGML_Q4_1 ? 32 : 16; /* quants start */
	int64_t rows = w->ne[1], k = w->ne[0], groups, g, b, r, j;
	size_t rb, nb;

	memset(p, 0, sizeof(*p));
#ifndef PACK8
	(void)bb, (void)q8, (void)off, (void)sq, (void)rows, (void)k;
	(void)groups, (void)g, (void)b, (void)r, (void)j;
	(void)rb, (void)nb;
	return MEDHA_EUNSUP;
#else
	if (mm_pk_type(type))
		return mm_pk_make(p, w);
	if (bb == 0 || w->data == NULL || k % MEDHA_QK != 0 || k > INT32_MAX ||
	    rows < 1 || rows > INT32_MAX)
		return MEDHA_EUNSUP;
	rb = medha_ggml_row_bytes(type, k);
	nb = (size_t)k / MEDHA_QK;
	groups = (rows + 7) / 8;
	if ((p->data = medha_calloc((size_t)groups * nb, (size_t)bb)) == NULL)
		return MEDHA_ENOMEM;
	for (g = 0; g < groups; g++)
		for (b = 0; b < (int64_t)nb; b++) {
			unsigned char *d = p->data + ((size_t)g * nb + b) * bb;
			for (r = 0; r < 8 && g * 8 + r < rows; r++) {
				const unsigned char *s =
				    (const unsigned char *)w->data +
				    rb * (size_t)(g * 8 + r) +
				    (size_t)b * (rb / nb);
				memcpy(d + 2 * r, s, 2); /* the scale */
				if (type == MEDHA_GGML_Q4_1)
					memcpy(d + 16 + 2 * r, s + 2, 2);
				/* four bytes of row r at lane r of vector j */
				for (j = 0; j < (q8 ? 8 : 4); j++) {
					uint32_t v;
					memcpy(&v, s + off + 4 * j, 4);
#ifdef PACK8_VNNI
					if (q8) /* unsigned for vpdpbusd */
						v ^= 0x80808080u;
#endif
					memcpy(d + sq + 32 * j + 4 * r, &v, 4);
				}
			}
		}
	p->type = type;
	p->rows = (int)rows;
	p->k = (int)k;
	return 0;
#endif
}

#ifdef PACK8_VNNI
/*
 * One group of eight packed rows (g) times the T activation rows
 * t0 .. t0+T-1, in one tile of the activations: out[t] holds the eight
 * rows' results for token t0 + t. Per block: the eight rows' quants as
 * eight vectors of four bytes a lane, then per token eight vpdpbusd
 * against four bytes of x broadcast (two chains, added), less the
 * offset that made the weights unsigned times the sum of x (Q8_0: 128,
 * Q4_0: 8), converted, and acc = fma(dw * dx, sum, acc) (Q4_1: acc =
 * fma(m, s, acc) after). The same operations for a token whatever T
 * is. The T tokens' quants, scales and sums are at fixed offsets from
 * one pointer each (the tiled form), so the loop keeps its registers
 * for the accumulators.
 */
ALWAYS_INLINE void
p8_kern(const int T, const int type, const unsigned char *g,
    const struct medha_act *a, int t0, __m256 *out)
{
	const int nb = a->k / MEDHA_QK, bb = pack_block_bytes(type);
	const int sq = type == MEDHA_GGML_Q4_1 ? 32 : 16;
	const int c = type == MEDHA_GGML_Q8_0 ? 128 : 8;
	const size_t o = medha_act_blk(a, t0, 0);
	const int8_t *xq = a->q + o * MEDHA_QK;
	const float *xd = a->qd + o, *xs = a->qs + o;
	const int32_t *xi = a->qi + o;
	/* chains per token: 8 tokens keep the vector units busy alone */
	const int C = T >= 8 ? 1 : T == 4 ? 2 : 4;
	__m256 acc[8];
	__m256i sum[8];
	int t, b, j;

#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		acc[t] = _mm256_setzero_ps();
	for (b = 0; b < nb; b++, xq += XB, xd += XS, xs += XS, xi += XS) {
		const unsigned char *p = g + (size_t)b * bb;
		__m256i wv[8];
		__m256 dw, mw = _mm256_setzero_ps();

		_mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
		_mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
		if (bb > 128) {
			_mm_prefetch((const char *)p + PF_AHEAD + 128,
			    _MM_HINT_T0);
			if (bb > 192)
				_mm_prefetch((const char *)p + PF_AHEAD + 192,
				    _MM_HINT_T0);
		}
		dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
		if (type == MEDHA_GGML_Q4_1)
			mw = _mm256_cvtph_ps(
			    _mm_loadu_si128((const __m128i *)(p + 16)));
		if (type == MEDHA_GGML_Q8_0) {
#pragma GCC unroll 8
			for (j = 0; j < 8; j++)
				wv[j] = _mm256_loadu_si256(
				    (const __m256i *)(p + sq + 32 * j));
		} else {
			const __m256i lo = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				__m256i v = _mm256_loadu_si256(
				    (const __m256i *)(p + sq + 32 * j));
				wv[j] = _mm256_and_si256(v, lo);
				wv[j + 4] = _mm256_and_si256(
				    _mm256_srli_epi16(v, 4), lo);
			}
		}
		/* C chains of sums per token, side by side, so that
		   consecutive vpdpbusd are independent (integer sums:
		   exact in any order); Q8_0 and Q4_0 start from the
		   offset's share, -c * (sum of x), wrapping as the lanes do
		   (a NaN block's sum is anything; its scale is NaN) */
#pragma GCC unroll 8
		for (t = 0; t < T * C; t++)
			sum[t] = type == MEDHA_GGML_Q4_1 || t % C != 0
			    ? _mm256_setzero_si256()
			    : _mm256_set1_epi32((int32_t)(0u -
			          (uint32_t)c * (uint32_t)xi[t / C]));
#pragma GCC unroll 8
		for (j = 0; j < 8; j++)
#pragma GCC unroll 8
			for (t = 0; t < T; t++)
				sum[t * C + j % C] =
				    mm_dpbusd_bcast(sum[t * C + j % C], wv[j],
				        xq + t * MEDHA_QK + 4 * j);
#pragma GCC unroll 8
		for (t = 0; t < T; t++) {
			if (C == 4) {
				sum[t * C] = _mm256_add_epi32(sum[t * C],
				    sum[t * C + 1]);
				sum[t * C + 2] = _mm256_add_epi32(
				    sum[t * C + 2], sum[t * C + 3]);
			}
			if (C >= 2)
				sum[t * C] = _mm256_add_epi32(sum[t * C],
				    sum[t * C + C / 2]);
		}
#pragma GCC unroll 8
		for (t = 0; t < T; t++) {
			acc[t] = _mm256_fmadd_ps(
			    _mm256_mul_ps(dw, _mm256_set1_ps(xd[t])),
			    _mm256_cvtepi32_ps(sum[t * C]), acc[t]);
			if (type == MEDHA_GGML_Q4_1)
				acc[t] = _mm256_fmadd_ps(mw,
				    _mm256_set1_ps(xs[t]), acc[t]);
		}
	}
#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		out[t] = acc[t];
}

#elif defined(PACK8)
/*
 * The same products with AVX2 alone (no vpdpbusd): per block and token,
 * vpmaddubsw of the unsigned quants against four bytes of x broadcast
 * gives each row two int16 pairs a group; then
 *  - Q4_0, Q4_1: the eight groups' pairs are added in int16 (each pair
 *    is at most 2 * 15 * 127 in size, eight of them 30480: exact), then
 *    vpmaddwd by 1 to the row's int32 sum, less 8 * (sum of x) for Q4_0;
 *  - Q8_0 (packed signed here: no offset): |w| against x with w's sign
 *    (vpsignb; x is never -128), each group's pairs to int32 at once
 *    (one pair is up to 2 * 128 * 127: two would not fit in int16).
 * The sums are exact, so they equal vpdpbusd's, and the float steps
 * after them are the same: results are those of the VNNI kernel.
 */
ALWAYS_INLINE __m256i
bcast4(const int8_t *x)
{
	int32_t v;

	memcpy(&v, x, sizeof(v));
	return _mm256_set1_epi32(v);
}

ALWAYS_INLINE void
p8_kern(const int T, const int type, const unsigned char *g,
    const struct medha_act *a, int t0, __m256 *out)
{
	const int nb = a->k / MEDHA_QK, bb = pack_block_bytes(type);
	const int sq = type == MEDHA_GGML_Q4_1 ? 32 : 16;
	const size_t o = medha_act_blk(a, t0, 0);
	const int8_t *xq = a->q + o * MEDHA_QK;
	const float *xd = a->qd + o, *xs = a->qs + o;
	const int32_t *xi = a->qi + o;
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[8];
	__m256i sum[8];
	int t, b, j;

#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		acc[t] = _mm256_setzero_ps();
	for (b = 0; b < nb; b++, xq += XB, xd += XS, xs += XS, xi += XS) {
		const unsigned char *p = g + (size_t)b * bb;
		__m256 dw, mw = _mm256_setzero_ps();

		_mm_prefetch((const char *)p + PF_AHEAD, _MM_HINT_T0);
		_mm_prefetch((const char *)p + PF_AHEAD + 64, _MM_HINT_T0);
		if (bb > 128) {
			_mm_prefetch((const char *)p + PF_AHEAD + 128,
			    _MM_HINT_T0);
			if (bb > 192)
				_mm_prefetch((const char *)p + PF_AHEAD + 192,
				    _MM_HINT_T0);
		}
		if (type == MEDHA_GGML_Q8_0) {
#pragma GCC unroll 8
			for (j = 0; j < 8; j++) {
				const __m256i w = _mm256_loadu_si256(
				    (const __m256i *)(p + sq + 32 * j));
				const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
				for (t = 0; t < T; t++) {
					__m256i s = _mm256_madd_epi16(
					    _mm256_maddubs_epi16(aw,
					        _mm256_sign_epi8(bcast4(xq +
					                             t * MEDHA_QK +
					                             4 * j),
					            w)),
					    ones);
					sum[t] = j == 0
					    ? s
					    : _mm256_add_epi32(sum[t], s);
				}
			}
		} else {
			const __m256i lo = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				const __m256i v = _mm256_loadu_si256(
				    (const __m256i *)(p + sq + 32 * j));
				const __m256i wl = _mm256_and_si256(v, lo);
				const __m256i wh = _mm256_and_si256(
				    _mm256_srli_epi16(v, 4), lo);
#pragma GCC unroll 8
				for (t = 0; t < T; t++) {
					const int8_t *x = xq + t * MEDHA_QK;
					__m256i s = _mm256_add_epi16(
					    _mm256_maddubs_epi16(wl,
					        bcast4(x + 4 * j)),
					    _mm256_maddubs_epi16(wh,
					        bcast4(x + 16 + 4 * j)));
					sum[t] = j == 0
					    ? s
					    : _mm256_add_epi16(sum[t], s);
				}
			}
#pragma GCC unroll 8
			for (t = 0; t < T; t++) {
				sum[t] = _mm256_madd_epi16(sum[t], ones);
				if (type == MEDHA_GGML_Q4_0) /* wraps as VNNI's */
					sum[t] = _mm256_sub_epi32(sum[t],
					    _mm256_set1_epi32((int32_t)(8u *
					        (uint32_t)xi[t])));
			}
		}
		dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
		if (type == MEDHA_GGML_Q4_1)
			mw = _mm256_cvtph_ps(
			    _mm_loadu_si128((const __m128i *)(p + 16)));
#pragma GCC unroll 8
		for (t = 0; t < T; t++) {
			acc[t] = _mm256_fmadd_ps(
			    _mm256_mul_ps(dw, _mm256_set1_ps(xd[t])),
			    _mm256_cvtepi32_ps(sum[t]), acc[t]);
			if (type == MEDHA_GGML_Q4_1)
				acc[t] = _mm256_fmadd_ps(mw,
				    _mm256_set1_ps(xs[t]), acc[t]);
		}
	}
#pragma GCC unroll 8
	for (t = 0; t < T; t++)
		out[t] = acc[t];
}
#endif

#ifdef PACK8
/*
 * Rows r0 .. r0+R-1 (r0 a multiple of 8, R <= 8) of a packed weight.
 *
 * The AVX2 kernel asks GCC to schedule its instructions before register
 * allocation, minding register pressure (off by default on x86): the
 * multiplies (vpmaddubsw, vpmaddwd, vmulps, vfmadd) share two ports on
 * the AVX2 machine measured (Zen 3: 8 maddubs alone take 4 cycles, with
 * 8 fma beside them 7.2), so where the other instructions go between
 * them decides how busy those ports stay. One core, 1536x576 Q4_1 in
 * L1, 4-token tiles (/tmp microbenchmark, medians of 15 rounds): 64.2
 * -> 80.9 GMAC/s; a version keeping a block's quants in registers for
 * 8-token tiles gave 72.5 without it, 62.2 with it.
 */
#if !defined(PACK8_VNNI) && defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("schedule-insns", "sched-pressure")))
#endif
static void
p8_rows(const struct medha_act *a, const struct medha_pack *pk, int r0, int R,
    float *y, int ldy, int tb0, int tb1)
{
	const unsigned char *g = pk->data +
	    (size_t)(r0 / 8) * (size_t)(a->k / MEDHA_QK) *
	        (size_t)pack_block_bytes(pk->type);
	__m256 out[8];
	int t0, T;

	for (t0 = tb0; t0 < tb1; t0 += T) {
		/* whole tiles (tb0 is a multiple of MEDHA_ACT_TILE), then
		   the last tile's 4, 2, 1 */
		T = mm_tile_tokens8(tb1 - t0);
#define P8K(ty)                                                 \
	do {                                                    \
		if (T == 8)                                     \
			p8_kern(8, ty, g, a, t0, out);          \
		else if (T == 4)                                \
			p8_kern(4, ty, g, a, t0, out);          \
		else if (T == 2)                                \
			p8_kern(2, ty, g, a, t0, out);          \
		else                                            \
			p8_kern(1, ty, g, a, t0, out);          \
	} while (0)
		switch (pk->type) {
		case MEDHA_GGML_Q8_0: P8K(MEDHA_GGML_Q8_0); break;
		case MEDHA_GGML_Q4_0: P8K(MEDHA_GGML_Q4_0); break;
		default: P8K(MEDHA_GGML_Q4_1); break;
		}
#undef P8K
		mm_store8(out, R, T, y + r0, ldy, t0);
	}
}

/* A task's rows, eight at a time (cpu_mm_impl.h): p8_rows's one caller. */
void
mm_p8_task(const struct medha_act *a, const struct medha_pack *pk, int r0,
    int r1, float *y, int ldy, int tb0, int tb1)
{
	int r;

	for (r = r0; r < r1; r += 8)
		p8_rows(a, pk, r, r1 - r < 8 ? r1 - r : 8, y, ldy, tb0, tb1);
}
#endif
