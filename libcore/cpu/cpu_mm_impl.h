/*
 * cpu_mm_impl.h: what the parts of the CPU matrix product share and
 * nothing else includes. cpu_mm.c splits a product into tasks and runs
 * them; a task hands its rows to one kernel family: cpu_mm_q8.c (integer
 * dot products, lane-wise), cpu_mm_pack.c (the packed integer kernel,
 * medha_pack) or cpu_mm_f.c (float dot products). Each family's kernel
 * is always inlined into its rows function, once per tile shape and
 * weight type; the rows function stays static beside it with its one
 * caller, a task's loop over its rows, so that the compiler knows the
 * range of R as it did when the product was one file (an extern rows
 * function loses it, and the float path some 3% of its speed). Internal
 * names carry an mm_ prefix; the public API is cpu/cpu.h.
 */
#ifndef MEDHA_CPU_MM_IMPL_H
#define MEDHA_CPU_MM_IMPL_H

#include "cpu/cpu.h"

#include <string.h>

#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define PF_AHEAD 2048   /* bytes of weights prefetched ahead */
#define TILE 4          /* rows (and most tokens) of a register tile */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* strides of one block in the tiled Q8 activations: quants, scales */
#define XS MEDHA_ACT_TILE
#define XB (MEDHA_ACT_TILE * MEDHA_QK)

/* the packed integer kernel's instruction set (cpu_mm_pack.c) */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define PACK8 1
#define PACK8_VNNI 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PACK8 1
#endif

#if defined(__AVX2__)
static inline float
mm_hsum8(__m256 v)
{
	__m128 r =
	    _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
	r = _mm_add_ps(r, _mm_movehl_ps(r, r));
	r = _mm_add_ss(r, _mm_movehdup_ps(r));
	return _mm_cvtss_f32(r);
}
#endif

#ifdef PACK8_VNNI
/*
 * acc + w times the four bytes at x broadcast to every lane, the
 * broadcast folded into the vpdpbusd as its memory operand ({1to8}).
 * Compilers emit a vpbroadcastd of its own for _mm256_set1_epi32 of a
 * load, a second vector instruction per product, and the packed kernel
 * is bound by its vector instructions (14% slower at eight tokens).
 */
ALWAYS_INLINE __m256i
mm_dpbusd_bcast(__m256i acc, __m256i w, const int8_t *x)
{
	__asm__("vpdpbusd %2%{1to8%}, %1, %0"
	        : "+v"(acc)
	        : "v"(w), "m"(*(const int32_t *)(const void *)x));
	return acc;
}

#endif

/* tokens per kernel call: 4, 2 or 1 */
static inline int
mm_tile_tokens(int left)
{
	return left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

/* out[r][t] (R rows, T tokens) into y: token t0 + t's row at ldy floats */
static inline void
mm_store_tile(float (*out)[4], int R, int T, float *y, int ldy, int t0)
{
	int r, t;

	for (t = 0; t < T; t++)
		for (r = 0; r < R; r++)
			y[(size_t)(t0 + t) * ldy + r] = out[r][t];
}

#ifdef PACK8
/*
 * tokens per packed kernel call: 8, 4, 2 or 1 (AVX2 alone: at most 4;
 * its sixteen registers hold eight tokens' sums only by spilling them,
 * 6% slower)
 */
static inline int
mm_tile_tokens8(int left)
{
#ifdef PACK8_VNNI
	if (left >= 8)
		return 8;
#endif
	return left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

/* out[t] (eight rows, T tokens) into y: token t0 + t's first R floats */
static inline void
mm_store8(const __m256 *out, int R, int T, float *y, int ldy, int t0)
{
	int t;

	for (t = 0; t < T; t++) {
		float *yt = y + (size_t)(t0 + t) * ldy;
		float tail[8];

		if (R == 8) {
			_mm256_storeu_ps(yt, out[t]);
			continue;
		}
		_mm256_storeu_ps(tail, out[t]);
		memcpy(yt, tail, (size_t)R * sizeof(float));
	}
}
#endif

/*
 * The rows r0 .. r1-1 of a task against the tokens tb0 .. tb1-1 (one
 * block of MM_TOKENS), into y (tokens, ldy): integer-path weights, TILE
 * rows at a time (cpu_mm_q8.c); packed weights, eight rows at a time
 * (cpu_mm_pack.c); the float path, TILE rows at a time, scr the
 * thread's scratch (cpu_mm_f.c).
 */
void mm_q8_task(const struct medha_act *a, const struct medha_tensor *wt,
    int r0, int r1, float *y, int ldy, int tb0, int tb1);
#ifdef PACK8
void mm_p8_task(const struct medha_act *a, const struct medha_pack *pk,
    int r0, int r1, float *y, int ldy, int tb0, int tb1);
#endif
/*
 * The types of the packed kernel of cpu_mm_packk.c (1 or 0), its
 * medha_pack_make, and a task's rows on it, eight at a time.
 */
int mm_pk_type(int type);
int mm_pk_make(struct medha_pack *p, const struct medha_tensor *w);
#ifdef PACK8
void mm_pk_task(const struct medha_act *a, const struct medha_pack *pk,
    int r0, int r1, float *y, int ldy, int tb0, int tb1);
#endif
void mm_f_task(const struct medha_act *a, const struct medha_tensor *wt,
    int form, int ref, int r0, int r1, float *y, int ldy, int tb0, int tb1,
    float *scr);

#endif
