/*
 * cpu_mm.c: the matrix product of the CPU backend: y (n, rows) = x (n,
 * k) times W transposed, W in its stored type, x in the form cpu_ops.c
 * rounds it to for that type.
 *
 * A product is split into tasks of a few dozen to MM_ROWS_MAX weight
 * rows (about four tasks per thread, so that each thread streams long
 * runs of weights and the hardware prefetchers keep up; software
 * prefetches run PF_AHEAD bytes ahead as well). A task walks its rows
 * against the tokens in blocks of MM_TOKENS tokens, so that the
 * activations stay in cache, with register tiles of 4 rows by 4, 2 or 1
 * tokens (or, for one token, one row at a time where long rows stream
 * better). Every (row, token) dot product does the same operations in
 * the same order whatever tile it falls in: results never depend on the
 * batch or the threads.
 *
 * Two kinds of dot product:
 *  - integer (Q8_0, Q4_0, Q4_1 weights with Q8 activations): a block's
 *    dot is eight int32 lanes of four byte products each (VNNI vpdpbusd
 *    where the compiler targets it, AVX2 maddubs otherwise, or scalar),
 *    converted and accumulated as acc = fma(dw * dx, lanes, acc); the
 *    result is the horizontal sum (plus, for Q4_1, the fma-accumulated
 *    sum of m * s): the operations of ggml's x86 vec_dot kernels;
 *  - packed integer (the same weights where the build has AVX512-VNNI,
 *    or AVX2 with FMA and F16C, outside reference and llama.cpp modes:
 *    medha_pack): eight rows interleaved four bytes at a time, so one
 *    vpdpbusd (AVX2: vpmaddubsw) makes four products for each of eight
 *    rows and a block's dot is summed exactly in int32 before one
 *    conversion, acc = fma(dw * dx, (float)sum, acc) per block; a third
 *    of the vector work of the lane-wise kernel, which converts and
 *    scales eight lanes per block and pair. The sums being exact, both
 *    instruction sets give the same bits;
 *  - float (everything else, and all weights in reference mode): F32,
 *    F16 and BF16 rows are converted as they are loaded, other types are
 *    dequantized a tile at a time with medha_dequant_row(); one 16-wide
 *    (AVX2: 8-wide) fma accumulator per pair, then its horizontal sum.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define MM_ROWS_MIN 16  /* weight rows per task, at least */
#define MM_ROWS_MAX 256 /* and at most */
#define PF_AHEAD 2048   /* bytes of weights prefetched ahead */
#define MM_TOKENS 64    /* tokens per cache block of a task */
#define TILE 4          /* rows (and most tokens) of a register tile */

#define ALWAYS_INLINE static inline __attribute__((always_inline))


/* strides of one block in the tiled Q8 activations: quants, scales */
#define XS MEDHA_ACT_TILE
#define XB (MEDHA_ACT_TILE * MEDHA_QK)

/* ---- integer dot products: Q8_0, Q4_0, Q4_1 x int8 activations ---- */

static inline uint16_t
u16at(const unsigned char *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return h;
}

#if defined(__AVX2__)
static inline float
hsum8(__m256 v)
{
	__m128 r =
	    _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	r = _mm_add_ps(r, _mm_movehl_ps(r, r));
	r = _mm_add_ss(r, _mm_movehdup_ps(r));
	return _mm_cvtss_f32(r);
}

/* 32 nibbles of a block as bytes: element j low nibble, j+16 high */
static inline __m256i
nibbles(const unsigned char *p)
{
	__m128i t = _mm_loadu_si128((const __m128i *)p);

	return _mm256_and_si256(_mm256_set1_epi8(0x0f),
	    _mm256_inserti128_si256(_mm256_castsi128_si256(t),
	        _mm_srli_epi16(t, 4), 1));
}

/* an f16 at p, converted and broadcast */
static inline __m256
bcast_h(const unsigned char *p)
{
#ifdef __F16C__
	return _mm256_cvtph_ps(_mm_set1_epi16((short)u16at(p)));
#else
	return _mm256_set1_ps(medha_fp16_to_fp32(u16at(p)));
#endif
}
#endif

/*
 * R (1 or 4) weight rows w[0..R-1] (tails repeat a row) times the T
 * activation rows tk[0..T-1]: out[r][t]. One row at a time streams
 * best when there is one token (decode); four rows share each loaded
 * activation block otherwise. Each (row, token) pair does the same
 * operations whatever R and T are: eight int32 lanes per block, then
 * acc = fma(dw * dx, lanes, acc); hsum8(acc) (+ the Q4_1 sum of m * s,
 * an fma per block).
 */
ALWAYS_INLINE void
q8_kern(const int R, const int T, const int type, const unsigned char *const *w,
    const struct medha_act *a, const int *tk, float (*out)[4])
{
	const int nb = a->k / MEDHA_QK;
	const int bs = type == MEDHA_GGML_Q8_0 ? 34
	    : type == MEDHA_GGML_Q4_0          ? 18
	                                       : 20;
	const int off = type == MEDHA_GGML_Q4_1 ? 4 : 2;
	const int8_t *xq[4];
	const float *xd[4], *xs[4];
	int r, t, b;

	/* token t's block b: xq[t] + b * XB, xd[t][b * XS] (tiled form) */
#pragma GCC unroll 4
	for (t = 0; t < T; t++) {
		size_t o = medha_act_blk(a, tk[t], 0);
		xq[t] = a->q + o * MEDHA_QK;
		xd[t] = a->qd + o;
		xs[t] = a->qs + o;
	}
#if defined(__AVX2__)
	__m256 acc[4][4];
	__m128 sm[4];
#pragma GCC unroll 4
	for (t = 0; t < T; t++) {
		sm[t] = _mm_setzero_ps();
#pragma GCC unroll 4
		for (r = 0; r < R; r++)
			acc[r][t] = _mm256_setzero_ps();
	}
	for (b = 0; b < nb; b++) {
		__m256i wv[4];
		__m256 dwv[4];
		__m128 mv = _mm_setzero_ps();
		/*
		 * The four rows are consecutive in memory (but short), and
		 * the next tile follows them: keep the lines ahead coming.
		 */
		const char *pf =
		    (const char *)w[0] + PF_AHEAD + (size_t)b * R * bs;
		_mm_prefetch(pf, _MM_HINT_T0);
		if (R > 1) {
			_mm_prefetch(pf + 64, _MM_HINT_T0);
			if (type == MEDHA_GGML_Q8_0)
				_mm_prefetch(pf + 128, _MM_HINT_T0);
		}
#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			const unsigned char *p = w[r] + (size_t)b * bs;
			if (type == MEDHA_GGML_Q8_0)
				wv[r] = _mm256_loadu_si256(
				    (const __m256i *)(p + off));
			else
				wv[r] = nibbles(p + off);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
			if (type == MEDHA_GGML_Q8_0) /* w + 128, unsigned */
				wv[r] = _mm256_xor_si256(wv[r],
				    _mm256_set1_epi8((char)0x80));
#else
			if (type == MEDHA_GGML_Q4_0)
				wv[r] =
				    _mm256_sub_epi8(wv[r], _mm256_set1_epi8(8));
#endif
			dwv[r] = bcast_h(p);
		}
		if (type == MEDHA_GGML_Q4_1) {
			const size_t o = (size_t)b * bs + 2;
#ifdef __F16C__
			if (R == 1)
				mv = _mm_cvtph_ps(
				    _mm_cvtsi32_si128(u16at(w[0] + o)));
			else
				mv = _mm_cvtph_ps(
				    _mm_setr_epi16((short)u16at(w[0] + o),
				        (short)u16at(w[1] + o),
				        (short)u16at(w[2] + o),
				        (short)u16at(w[3] + o), 0, 0, 0, 0));
#else
			mv = _mm_setr_ps(medha_fp16_to_fp32(u16at(w[0] + o)),
			    R > 1 ? medha_fp16_to_fp32(u16at(w[1] + o)) : 0,
			    R > 1 ? medha_fp16_to_fp32(u16at(w[2] + o)) : 0,
			    R > 1 ? medha_fp16_to_fp32(u16at(w[3] + o)) : 0);
#endif
		}
#pragma GCC unroll 4
		for (t = 0; t < T; t++) {
			__m256i xv = _mm256_loadu_si256(
			    (const __m256i *)(xq[t] + b * XB));
			__m256 dxv = _mm256_set1_ps(xd[t][b * XS]);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
			/* lanes start at -c * (sum of 4 x), c the offset
			   that made the weights unsigned */
			__m256i init = _mm256_setzero_si256();
			if (type != MEDHA_GGML_Q4_1)
				init = _mm256_sub_epi32(init,
				    _mm256_dpbusd_epi32(init,
				        _mm256_set1_epi8(type == MEDHA_GGML_Q8_0
				                ? (char)0x80
				                : 8),
				        xv));
#pragma GCC unroll 4
			for (r = 0; r < R; r++) {
				__m256i l =
				    _mm256_dpbusd_epi32(init, wv[r], xv);
				acc[r][t] =
				    _mm256_fmadd_ps(_mm256_mul_ps(dwv[r], dxv),
				        _mm256_cvtepi32_ps(l), acc[r][t]);
			}
#else
#pragma GCC unroll 4
			for (r = 0; r < R; r++) {
				__m256i ax = wv[r], sy = xv, l;
				if (type != MEDHA_GGML_Q4_1) {
					ax = _mm256_sign_epi8(wv[r], wv[r]);
					sy = _mm256_sign_epi8(xv, wv[r]);
				}
				l = _mm256_madd_epi16(_mm256_set1_epi16(1),
				    _mm256_maddubs_epi16(ax, sy));
				acc[r][t] =
				    _mm256_fmadd_ps(_mm256_mul_ps(dwv[r], dxv),
				        _mm256_cvtepi32_ps(l), acc[r][t]);
			}
#endif
			if (type == MEDHA_GGML_Q4_1)
				sm[t] = _mm_fmadd_ps(mv,
				    _mm_set1_ps(xs[t][b * XS]), sm[t]);
		}
	}
#pragma GCC unroll 4
	for (t = 0; t < T; t++) {
		float m[4];
		_mm_storeu_ps(m, sm[t]);
#pragma GCC unroll 4
		for (r = 0; r < R; r++)
			out[r][t] = type == MEDHA_GGML_Q4_1
			    ? hsum8(acc[r][t]) + m[r]
			    : hsum8(acc[r][t]);
	}
#else
	for (r = 0; r < R; r++)
		for (t = 0; t < T; t++) {
			float acc[8] = {0}, h[4], sm = 0;
			int j, l;
			for (b = 0; b < nb; b++) {
				const unsigned char *p = w[r] + (size_t)b * bs;
				const int8_t *xb = xq[t] + b * XB;
				float sc = medha_fp16_to_fp32(u16at(p)) *
				    xd[t][b * XS];
				for (l = 0; l < 8; l++) {
					int li = 0, wq;
					for (j = 4 * l; j < 4 * l + 4; j++) {
						wq = type == MEDHA_GGML_Q8_0
						    ? (int8_t)p[off + j]
						    : j < 16
						    ? p[off + j] & 0x0f
						    : p[off + j - 16] >> 4;
						if (type == MEDHA_GGML_Q4_0)
							wq -= 8;
						li += wq * xb[j];
					}
					acc[l] = fmaf(sc, (float)li, acc[l]);
				}
				if (type == MEDHA_GGML_Q4_1)
					sm = fmaf(medha_fp16_to_fp32(
					              u16at(p + 2)),
					    xs[t][b * XS], sm);
			}
			for (l = 0; l < 4; l++)
				h[l] = acc[l + 4] + acc[l];
			h[0] += h[2];
			h[1] += h[3];
			out[r][t] = h[0] + h[1];
			if (type == MEDHA_GGML_Q4_1)
				out[r][t] += sm;
		}
#endif
}

/* ---- the packed integer kernel (medha_pack: AVX512-VNNI or AVX2) ---- */

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define PACK8 1
#define PACK8_VNNI 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PACK8 1
#endif

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
 * acc + w times the four bytes at x broadcast to every lane, the
 * broadcast folded into the vpdpbusd as its memory operand ({1to8}).
 * Compilers emit a vpbroadcastd of its own for _mm256_set1_epi32 of a
 * load, a second vector instruction per product, and the packed kernel
 * is bound by its vector instructions (14% slower at eight tokens).
 */
ALWAYS_INLINE __m256i
dpbusd_bcast(__m256i acc, __m256i w, const int8_t *x)
{
	__asm__("vpdpbusd %2%{1to8%}, %1, %0"
	        : "+v"(acc)
	        : "v"(w), "m"(*(const int32_t *)(const void *)x));
	return acc;
}

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
				    dpbusd_bcast(sum[t * C + j % C], wv[j],
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
 * tokens per packed kernel call: 8, 4, 2 or 1 (AVX2 alone: at most 4;
 * its sixteen registers hold eight tokens' sums only by spilling them,
 * 6% slower)
 */
static inline int
tile_tokens8(int left)
{
#ifdef PACK8_VNNI
	if (left >= 8)
		return 8;
#endif
	return left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

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
	int t, t0, T;

	for (t0 = tb0; t0 < tb1; t0 += T) {
		/* whole tiles (tb0 is a multiple of MEDHA_ACT_TILE), then
		   the last tile's 4, 2, 1 */
		T = tile_tokens8(tb1 - t0);
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
		for (t = 0; t < T; t++) {
			float *yt = y + (size_t)(t0 + t) * ldy + r0;
			float tail[8];

			if (R == 8) {
				_mm256_storeu_ps(yt, out[t]);
				continue;
			}
			_mm256_storeu_ps(tail, out[t]);
			memcpy(yt, tail, (size_t)R * sizeof(float));
		}
	}
}
#endif

/* ---- float dot products ---- */

#if defined(__AVX512F__) || !defined(__AVX2__)
#define F_ROWS1 1
#else
#define F_ROWS1 0
#endif

/*
 * R (1 or 4) weight rows (f32, or f16 / bf16 converted as they are
 * loaded) times T f32 activation rows of length k: out[r][t]; one
 * accumulator per pair, whatever R and T (see q8_kern).
 */
ALWAYS_INLINE void
f_kern(const int R, const int T, const int wtype, const void *const *w,
    const float *x, const int *tk, int k, float (*out)[4])
{
	const float *xr[4];
	int r, t, i = 0;

#pragma GCC unroll 4
	for (t = 0; t < T; t++)
		xr[t] = x + (size_t)tk[t] * k;
#if defined(__AVX512F__)
	__m512 acc[4][4];
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (; i < k; i += 16) {
		__mmask16 m =
		    k - i >= 16 ? 0xffff : (__mmask16)((1u << (k - i)) - 1);
		__m512 wv[4], xv;
		{ /* as in q8_kern: 4 rows of 16 elements a step */
			const int eb = wtype == MEDHA_GGML_F32 ? 4 : 2;
			const char *pf =
			    (const char *)w[0] + PF_AHEAD + (size_t)i * R * eb;
			int l;
			for (l = 0; l < 4 * R * eb; l += 64)
				_mm_prefetch(pf + l, _MM_HINT_T0);
		}
#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			if (wtype == MEDHA_GGML_F32)
				wv[r] = _mm512_maskz_loadu_ps(m,
				    (const float *)w[r] + i);
			else if (wtype == MEDHA_GGML_F16)
				wv[r] =
				    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
				        (const uint16_t *)w[r] + i));
			else
				wv[r] = _mm512_castsi512_ps(_mm512_slli_epi32(
				    _mm512_cvtepu16_epi32(
				        _mm256_maskz_loadu_epi16(m,
				            (const uint16_t *)w[r] + i)),
				    16));
		}
#pragma GCC unroll 4
		for (t = 0; t < T; t++) {
			xv = _mm512_maskz_loadu_ps(m, xr[t] + i);
#pragma GCC unroll 4
			for (r = 0; r < R; r++)
				acc[r][t] =
				    _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
		}
	}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
	/* eight lanes; a tail shorter than eight is read through tmp,
	   zero-filled (f_rows asks for T <= 2: 8 accumulators) */
	__m256 acc[4][4];
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			acc[r][t] = _mm256_setzero_ps();
	for (; i < k; i += 8) {
		__m256 wv[4], xv;
		const int full = k - i >= 8;
		{ /* as in q8_kern: 4 rows of 8 elements a step */
			const int eb = wtype == MEDHA_GGML_F32 ? 4 : 2;
			const char *pf =
			    (const char *)w[0] + PF_AHEAD + (size_t)i * R * eb;
			int l;
			for (l = 0; l < 2 * R * eb; l += 64)
				_mm_prefetch(pf + l, _MM_HINT_T0);
		}
#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			if (wtype == MEDHA_GGML_F32) {
				const float *src = (const float *)w[r] + i;
				float tmp[8] = {0};
				if (!full) {
					memcpy(tmp, src,
					    (size_t)(k - i) * sizeof(float));
					src = tmp;
				}
				wv[r] = _mm256_loadu_ps(src);
			} else {
				const uint16_t *src = (const uint16_t *)w[r] + i;
				uint16_t tmp[8] = {0};
				__m128i h;
				if (!full) {
					memcpy(tmp, src,
					    (size_t)(k - i) * sizeof(uint16_t));
					src = tmp;
				}
				h = _mm_loadu_si128((const __m128i *)src);
				wv[r] = wtype == MEDHA_GGML_F16
				    ? _mm256_cvtph_ps(h)
				    : _mm256_castsi256_ps(_mm256_slli_epi32(
				          _mm256_cvtepu16_epi32(h), 16));
			}
		}
#pragma GCC unroll 4
		for (t = 0; t < T; t++) {
			const float *src = xr[t] + i;
			float tmp[8] = {0};
			if (!full) {
				memcpy(tmp, src, (size_t)(k - i) * sizeof(float));
				src = tmp;
			}
			xv = _mm256_loadu_ps(src);
#pragma GCC unroll 4
			for (r = 0; r < R; r++)
				acc[r][t] =
				    _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
		}
	}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			out[r][t] = hsum8(acc[r][t]);
#else
	for (r = 0; r < R; r++)
		for (t = 0; t < T; t++) {
			float s = 0;
			for (i = 0; i < k; i++) {
				float wi = wtype == MEDHA_GGML_F32
				    ? ((const float *)w[r])[i]
				    : wtype == MEDHA_GGML_F16
				    ? medha_fp16_to_fp32(
				          ((const uint16_t *)w[r])[i])
				    : medha_bf16_to_fp32(
				          ((const uint16_t *)w[r])[i]);
				s = fmaf(wi, xr[t][i], s);
			}
			out[r][t] = s;
		}
#endif
}

/* ---- the product: tasks of MM_ROWS rows over every job ---- */

struct mm_run {
	struct medha_act *a;
	const struct medha_mm *mm;
	int nmm;
	int ref;
	int first[8]; /* first task of each job, and the total at [nmm] */
	int rows[8];  /* rows per task of each job */
};

/* tokens per kernel call: 4, 2 or 1 */
static inline int
tile_tokens(int left)
{
	return left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

static void
store_tile(float (*out)[4], int R, int T, float *y, int ldy, int t0)
{
	int r, t;

	for (t = 0; t < T; t++)
		for (r = 0; r < R; r++)
			y[(size_t)(t0 + t) * ldy + r] = out[r][t];
}

/* Rows r0 .. r0+R-1 (R <= 4) of an integer-path weight, tokens tb0..tb1. */
static void
q8_rows(const struct medha_act *a, const struct medha_tensor *wt, int r0, int R,
    float *y, int ldy, int tb0, int tb1)
{
	size_t rb = medha_ggml_row_bytes(wt->type, a->k);
	const unsigned char *w[4];
	float out[4][4];
	int r, t0, T, tk[4];

	for (r = 0; r < 4; r++)
		w[r] = (const unsigned char *)wt->data +
		    rb * (size_t)(r0 + (r < R ? r : R - 1));
	for (t0 = tb0; t0 < tb1; t0 += T) {
		T = tile_tokens(tb1 - t0);
		for (r = 0; r < T; r++)
			tk[r] = t0 + r;
#define Q8K(ty)                                                           \
	do {                                                              \
		if (T == 4)                                               \
			q8_kern(4, 4, ty, w, a, tk, out);                 \
		else if (T == 2)                                          \
			q8_kern(4, 2, ty, w, a, tk, out);                 \
		else if (ty != MEDHA_GGML_Q8_0)                           \
			q8_kern(4, 1, ty, w, a, tk, out);                 \
		else /* long rows stream better one by one */             \
			for (r = 0; r < R; r++)                           \
				q8_kern(1, 1, ty, w + r, a, tk, out + r); \
	} while (0)
		switch (wt->type) {
		case MEDHA_GGML_Q8_0: Q8K(MEDHA_GGML_Q8_0); break;
		case MEDHA_GGML_Q4_0: Q8K(MEDHA_GGML_Q4_0); break;
		default: Q8K(MEDHA_GGML_Q4_1); break;
		}
#undef Q8K
		store_tile(out, R, T, y + r0, ldy, t0);
	}
}

/*
 * The same for the float path. F32, F16 and BF16 rows are read in
 * place; other types (and every type but F32 in reference mode) are
 * dequantized into scr first.
 */
static void
f_rows(const struct medha_act *a, const struct medha_tensor *wt, int form,
    int ref, int r0, int R, float *y, int ldy, int tb0, int tb1, float *scr)
{
	size_t rb = medha_ggml_row_bytes(wt->type, a->k);
	const void *w[4];
	const float *x = form == MEDHA_ACT_F16 ? a->r16
	    : form == MEDHA_ACT_BF16           ? a->rbf
	                                       : a->x;
	float out[4][4];
	int r, t0, T, tk[4], k = a->k, wtype = wt->type;

	if (wtype != MEDHA_GGML_F32 &&
	    (ref || (wtype != MEDHA_GGML_F16 && wtype != MEDHA_GGML_BF16))) {
		for (r = 0; r < R; r++)
			medha_dequant_row(wtype,
			    (const char *)wt->data + rb * (size_t)(r0 + r),
			    scr + (size_t)r * k, k);
		for (r = 0; r < 4; r++)
			w[r] = scr + (size_t)(r < R ? r : R - 1) * k;
		wtype = MEDHA_GGML_F32;
	} else
		for (r = 0; r < 4; r++)
			w[r] = (const char *)wt->data +
			    rb * (size_t)(r0 + (r < R ? r : R - 1));
	for (t0 = tb0; t0 < tb1; t0 += T) {
		T = tile_tokens(tb1 - t0);
#if !defined(__AVX512F__)
		T = T > 2 ? 2 : T; /* sixteen registers: 4 rows by 2 */
#endif
		/* one token: rows one by one (long rows stream better), but
		   with AVX2's eight lanes, one chain of fma waits on itself:
		   four rows at once */
		for (r = 0; r < T; r++)
			tk[r] = t0 + r;
#define FK(ty)                                                              \
	do {                                                                \
		if (T == 4)                                                 \
			f_kern(4, 4, ty, w, x, tk, k, out);                 \
		else if (T == 2)                                            \
			f_kern(4, 2, ty, w, x, tk, k, out);                 \
		else if (F_ROWS1)                                           \
			for (r = 0; r < R; r++)                             \
				f_kern(1, 1, ty, w + r, x, tk, k, out + r); \
		else                                                        \
			f_kern(4, 1, ty, w, x, tk, k, out);                 \
	} while (0)
		switch (wtype) {
		case MEDHA_GGML_F16: FK(MEDHA_GGML_F16); break;
		case MEDHA_GGML_BF16: FK(MEDHA_GGML_BF16); break;
		default: FK(MEDHA_GGML_F32); break;
		}
#undef FK
		store_tile(out, R, T, y + r0, ldy, t0);
	}
}

static void
mm_task(void *arg, int i, int thread)
{
	struct mm_run *m = arg;
	const struct medha_act *a = m->a;
	const struct medha_mm *job;
	float *scr = a->scratch + a->scratch_per * (size_t)thread;
	int j = 0, rows, r0, r1, r, R, tb0, tb1, form;

	while (i >= m->first[j + 1])
		j++;
	job = &m->mm[j];
	rows = (int)job->w->ne[1];
	r0 = (i - m->first[j]) * m->rows[j];
	r1 = r0 + m->rows[j] < rows ? r0 + m->rows[j] : rows;
	form = medha_act_form(job->w->type, m->ref);
	for (tb0 = 0; tb0 < a->n; tb0 = tb1) {
		tb1 = tb0 + MM_TOKENS < a->n ? tb0 + MM_TOKENS : a->n;
#ifdef PACK8
		if (job->pk != NULL && form == MEDHA_ACT_Q8) {
			for (r = r0; r < r1; r += 8)
				p8_rows(a, job->pk, r, r1 - r < 8 ? r1 - r : 8,
				    job->y, rows, tb0, tb1);
			continue;
		}
#endif
		for (r = r0; r < r1; r += TILE) {
			R = r1 - r < TILE ? r1 - r : TILE;
			if (form == MEDHA_ACT_Q8)
				q8_rows(a, job->w, r, R, job->y, rows, tb0,
				    tb1);
			else
				f_rows(a, job->w, form, m->ref, r, R, job->y,
				    rows, tb0, tb1, scr);
		}
	}
}

int
medha_mm_forms(const struct medha_mm *mm, int nmm, int ref)
{
	int j, need = 0;

	for (j = 0; j < nmm; j++)
		need |= medha_act_form(mm[j].w->type, ref);
	return need;
}

int
medha_mm_run(struct medha_threadpool *tp, struct medha_act *a,
    const struct medha_mm *mm, int nmm, int ref)
{
	struct mm_run run;
	int j, need = 0, form, nt;

	if (nmm < 1 || nmm > 7)
		return MEDHA_EINVAL;
	for (j = 0; j < nmm; j++) {
		if (mm[j].w->ne[0] != a->k ||
		    medha_ggml_row_bytes(mm[j].w->type, a->k) == 0)
			return MEDHA_EINVAL;
		form = medha_act_form(mm[j].w->type, ref);
		if (form == 0 && mm[j].w->type != MEDHA_GGML_F32 &&
		    medha_ggml_block_elems(mm[j].w->type) == 0)
			return MEDHA_EUNSUP;
		need |= form & ~a->have;
	}
	medha_act_prepare(tp, a, need);
	run.a = a;
	run.mm = mm;
	run.nmm = nmm;
	run.ref = ref;
	run.first[0] = 0;
	nt = tp != NULL ? medha_threadpool_size(tp) : 1;
	for (j = 0; j < nmm; j++) {
		int64_t rows = mm[j].w->ne[1], per = rows / (4 * nt);
		per = (per + MM_ROWS_MIN - 1) / MM_ROWS_MIN * MM_ROWS_MIN;
		per = per < MM_ROWS_MIN ? MM_ROWS_MIN
		    : per > MM_ROWS_MAX ? MM_ROWS_MAX
		                        : per;
		run.rows[j] = (int)per;
		run.first[j + 1] = run.first[j] + (int)((rows + per - 1) / per);
	}
	if (tp != NULL)
		medha_threadpool_run(tp, run.first[nmm], mm_task, &run);
	else
		for (j = 0; j < run.first[nmm]; j++)
			mm_task(&run, j, 0);
	return 0;
}

int
medha_cpu_matmul(struct medha_threadpool *tp, const struct medha_tensor *w,
    const float *x, int n, float *y, int ref)
{
	struct medha_act a;
	struct medha_pack pk;
	struct medha_mm mm = {w, y, NULL};
	int rc;

	memset(&a, 0, sizeof(a));
	if (n < 1 || w->ne[0] < 1 || w->ne[0] > INT32_MAX)
		return MEDHA_EINVAL;
	if (!ref && (rc = medha_pack_make(&pk, w)) != MEDHA_EUNSUP) {
		if (rc != 0)
			return rc;
		mm.pk = &pk;
	}
	if ((rc = medha_act_set(&a, x, n, (int)w->ne[0],
	         tp != NULL ? medha_threadpool_size(tp) : 1)) == 0)
		rc = medha_mm_run(tp, &a, &mm, 1, ref);
	medha_act_free(&a);
	if (mm.pk != NULL)
		medha_pack_free(&pk);
	return rc;
}

/*
 * The rate of the products the forward pass runs, measured: the first
 * rows of w (at most 4M weights: a layer's share of the caches, as in a
 * prefill the weights are reused by every token of a chunk) times n
 * made-up activations, repacked as the backend repacks it, the
 * activations' Q8 form made anew each time (as each product group of a
 * forward pass makes it), best of three.
 */
int
medha_cpu_mm_rate(const struct medha_tensor *w, int n, int threads,
    double *flops)
{
	struct medha_tensor v = *w;
	struct medha_threadpool *tp = NULL;
	struct medha_act a;
	struct medha_pack pk;
	struct medha_mm mm = {&v, NULL, NULL};
	float *x = NULL;
	double best = 1e30;
	int64_t rows;
	int rc;

	*flops = 0;
	memset(&a, 0, sizeof(a));
	if (n < 1 || w->n_dims != 2 || w->ne[0] < 1 || w->ne[0] > INT32_MAX ||
	    w->ne[1] < 1 || w->data == NULL)
		return MEDHA_EINVAL;
	if (medha_ggml_row_bytes(w->type, w->ne[0]) == 0)
		return MEDHA_EUNSUP; /* a type (or row length) it has not */
	rows = ((int64_t)1 << 22) / w->ne[0];
	rows = rows < 8 ? 8 : rows / 8 * 8;
	if (rows < v.ne[1])
		v.ne[1] = rows;
	v.nbytes = medha_ggml_row_bytes(v.type, v.ne[0]) * (size_t)v.ne[1];
	if ((rc = medha_pack_make(&pk, &v)) == 0)
		mm.pk = &pk;
	else if (rc != MEDHA_EUNSUP)
		return rc;
	x = medha_reallocarray(NULL, (size_t)n * (size_t)v.ne[0], sizeof(*x));
	mm.y = medha_reallocarray(NULL, (size_t)n * (size_t)v.ne[1],
	    sizeof(float));
	if (x == NULL || mm.y == NULL ||
	    (threads > 1 && medha_threadpool_init(&tp, threads) != 0)) {
		rc = MEDHA_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < (size_t)n * (size_t)v.ne[0]; i++)
		x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	for (int r = 0; r < 4; r++) { /* the first one warms up */
		double t0 = medha_now();
		if ((rc = medha_act_set(&a, x, n, (int)v.ne[0],
		         tp != NULL ? medha_threadpool_size(tp) : 1)) != 0 ||
		    (rc = medha_mm_run(tp, &a, &mm, 1, 0)) != 0)
			goto out;
		t0 = medha_now() - t0;
		if (r > 0 && t0 < best)
			best = t0;
	}
	*flops = 2.0 * n * (double)v.ne[0] * (double)v.ne[1] / best;
out:
	medha_act_free(&a);
	medha_threadpool_free(tp);
	free(x);
	free(mm.y);
	if (mm.pk != NULL)
		medha_pack_free(&pk);
	return rc;
}
