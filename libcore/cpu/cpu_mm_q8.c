/*
 * cpu_mm_q8.c: the matrix product's integer dot products, lane-wise
 * (cpu_mm.c describes the three kinds): Q8_0, Q4_0 and Q4_1 weight rows
 * against Q8 activations, in register tiles of 4 rows by 4, 2 or 1
 * tokens (or one row by one token), with VNNI vpdpbusd, AVX2 maddubs or
 * scalar code as the build targets, in the operations of ggml's x86
 * vec_dot kernels.
 */
#include "cpu/cpu_mm_impl.h"

#include <math.h>
#include <string.h>

/* ---- integer dot products: Q8_0, Q4_0, Q4_1 x int8 activations ---- */

static inline uint16_t
u16at(const unsigned char *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return h;
}

#if defined(__AVX2__)

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
 * acc = fma(dw * dx, lanes, acc); mm_hsum8(acc) (+ the Q4_1 sum of m * s,
 * an fma per block).
 *
 * About 175 lines, over the house limit of 150, on purpose: any
 * always_inline helper taken out of it (the block's weight loads, the
 * Q4_1 mins, one body per instruction set: each tried) changes the code
 * GCC 12 makes of q8_rows for AVX2 and VNNI, and with VNNI, Q4_1 with
 * one token ran 1.4% slower (best of 10 rounds); whole, it is the
 * code it was.
 */
ALWAYS_INLINE void
q8_kern(const int R, const int T, const int type, const unsigned char *const *w,
    const struct medha_act *a, const int *tk, float (*out)[4])
{
	/* sizes.sh: long because a helper taken out of it changes the
	   vector code (the comment above) */
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
			    ? mm_hsum8(acc[r][t]) + m[r]
			    : mm_hsum8(acc[r][t]);
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
		T = mm_tile_tokens(tb1 - t0);
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
		mm_store_tile(out, R, T, y + r0, ldy, t0);
	}
}

/* A task's rows, TILE at a time (cpu_mm_impl.h): q8_rows's one caller. */
void
mm_q8_task(const struct medha_act *a, const struct medha_tensor *wt, int r0,
    int r1, float *y, int ldy, int tb0, int tb1)
{
	int r, R;

	for (r = r0; r < r1; r += TILE) {
		R = r1 - r < TILE ? r1 - r : TILE;
		q8_rows(a, wt, r, R, y, ldy, tb0, tb1);
	}
}
