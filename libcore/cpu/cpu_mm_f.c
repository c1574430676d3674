/*
 * cpu_mm_f.c: the matrix product's float dot products (cpu_mm.c
 * describes the three kinds), for every weight the integer kernels do
 * not take and for all of them in reference mode: F32, F16 and BF16
 * rows converted as they are loaded, other types dequantized a tile at a
 * time with medha_dequant_row(); one 16-wide (AVX2: 8-wide) fma
 * accumulator per (row, token) pair, then its horizontal sum.
 */
#include "cpu/cpu_mm_impl.h"

#include <math.h>
#include <string.h>

/* ---- float dot products ---- */

#if defined(__AVX512F__) || !defined(__AVX2__)
#define F_ROWS1 1
#else
#define F_ROWS1 0
#endif

/*
 * R (1 or 4) weight rows (f32, or f16 / bf16 converted as they are
 * loaded) times T f32 activation rows of length k: out[r][t]; one
 * accumulator per pair, whatever R and T (see q8_kern, cpu_mm_q8.c).
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
			out[r][t] = mm_hsum8(acc[r][t]);
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

/*
 * Rows r0 .. r0+R-1 (R <= 4) of a float-path weight, tokens tb0..tb1.
 * F32, F16 and BF16 rows are read in place; other types (and every type
 * but F32 in reference mode) are dequantized into scr first.
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
		T = mm_tile_tokens(tb1 - t0);
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
		mm_store_tile(out, R, T, y + r0, ldy, t0);
	}
}

/* A task's rows, TILE at a time (cpu_mm_impl.h): f_rows's one caller. */
void
mm_f_task(const struct medha_act *a, const struct medha_tensor *wt, int form,
    int ref, int r0, int r1, float *y, int ldy, int tb0, int tb1, float *scr)
{
	int r, R;

	for (r = r0; r < r1; r += TILE) {
		R = r1 - r < TILE ? r1 - r : TILE;
		f_rows(a, wt, form, ref, r, R, y, ldy, tb0, tb1, scr);
	}
}
