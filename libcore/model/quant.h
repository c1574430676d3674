/*
 * quant.h: the ggml tensor types a GGUF file stores its weights in, and
 * the conversions between them and float32: block sizes, names, and a
 * dequantizer and quantizer per type that give the same bits as ggml's
 * reference C code (and the gguf Python package).
 *
 * A type packs a row of n floats into n / block_elems blocks of
 * block_bytes bytes each; a row's length must be a multiple of the block
 * size. Quantized blocks are byte arrays (little-endian fields, no
 * alignment needed), so data may come straight from a mapped file.
 *
 *	float row[576];
 *	if (medha_dequant_row(t->type, t->data, row, t->ne[0]) != 0)
 *		...;
 *
 * Layouts (fp16 is IEEE binary16; "d" a scale, "m" a minimum):
 *
 *	F32   4 bytes, F16 2 bytes, BF16 2 bytes (the top half of an F32)
 *	Q8_0  32 elems, 34 bytes: fp16 d, int8 q[32];          x = d*q
 *	Q4_0  32 elems, 18 bytes: fp16 d, u8 qs[16];           x = d*(q-8)
 *	      (element j is qs[j] & 15, element j+16 is qs[j] >> 4)
 *	Q4_1  32 elems, 20 bytes: fp16 d, fp16 m, u8 qs[16];   x = d*q + m
 *	Q5_0  32 elems, 22 bytes: fp16 d, u8 qh[4], u8 qs[16]; x = d*(q-16)
 *	      (low 4 bits as Q4_0's, bit 4 of element j is bit j of qh)
 *	Q5_1  32 elems, 24 bytes: fp16 d, fp16 m, u8 qh[4], u8 qs[16];
 *	      x = d*q + m
 *	IQ4_NL 32 elems, 18 bytes: fp16 d, u8 qs[16] (nibbles as Q4_0's);
 *	      x = d*kvalues[q], kvalues the 16 int8 levels of ggml's table
 *	Q4_K  256 elems, 144 bytes: fp16 d, fp16 dmin, u8 scales[12] (eight
 *	      6-bit scales and mins), u8 qs[128]; eight sub-blocks of 32:
 *	      x = d*sc*q - dmin*mn
 *	Q6_K  256 elems, 210 bytes: u8 ql[128] (low 4 bits), u8 qh[64]
 *	      (high 2 bits), int8 scales[16], fp16 d; sixteen sub-blocks of
 *	      16: x = d*sc*(q-32)
 *	Q5_K  256 elems, 176 bytes: Q4_K's d, dmin, scales[12], then u8
 *	      qh[32] (bit 4: bit j of qh[l] for sub-block j), u8 qs[128]
 *	Q3_K  256 elems, 110 bytes: u8 hmask[32], u8 qs[64] (2 bits),
 *	      u8 scales[12] (sixteen 6-bit scales, less 32), fp16 d; sixteen
 *	      sub-blocks of 16: x = d*sc*(q - (hmask bit ? 0 : 4))
 *	Q2_K  256 elems, 84 bytes: u8 scales[16] (4-bit scale, 4-bit min),
 *	      u8 qs[64] (2 bits), fp16 d, fp16 dmin; sixteen sub-blocks of
 *	      16: x = d*sc*q - dmin*mn
 *	IQ4_XS 256 elems, 136 bytes: fp16 d, u16 scales_h, u8 scales_l[4]
 *	      (eight 6-bit scales, less 32), u8 qs[128]; eight sub-blocks of
 *	      32 as IQ4_NL's: x = d*sc*kvalues[q]
 */
#ifndef MEDHA_QUANT_H
#define MEDHA_QUANT_H

#include "medha.h"

#include <stddef.h>
#include <stdint.h>

/* Tensor types, numbered as ggml and GGUF number them. */
enum medha_ggml_type {
	MEDHA_GGML_F32 = 0,
	MEDHA_GGML_F16 = 1,
	MEDHA_GGML_Q4_0 = 2,
	MEDHA_GGML_Q4_1 = 3,
	MEDHA_GGML_Q5_0 = 6,
	MEDHA_GGML_Q5_1 = 7,
	MEDHA_GGML_Q8_0 = 8,
	MEDHA_GGML_Q2_K = 10,
	MEDHA_GGML_Q3_K = 11,
	MEDHA_GGML_Q4_K = 12,
	MEDHA_GGML_Q5_K = 13,
	MEDHA_GGML_Q6_K = 14,
	MEDHA_GGML_IQ4_NL = 20,
	MEDHA_GGML_IQ4_XS = 23,
	MEDHA_GGML_BF16 = 30,
};

#define MEDHA_QK 32    /* elements in a Q8_0, Q4_*, Q5_* or IQ4_NL block */
#define MEDHA_QK_K 256 /* elements in a K-quant super-block */

/*
 * Elements per block and bytes per block of a type; both 0 for a type
 * this build does not know (the way to ask "is it supported").
 */
int medha_ggml_block_elems(int type);
int medha_ggml_block_bytes(int type);
/*
 * Bytes of a row of n elements; 0 if the type is unknown, n is negative
 * or not a multiple of the block size, or the size overflows size_t.
 */
size_t medha_ggml_row_bytes(int type, int64_t n);
/* "f32", "q4_K", ...; "unknown" for a type this build does not know. */
const char *medha_ggml_type_name(int type);
/* The type named name (as medha_ggml_type_name spells it, any case), or -1. */
int medha_ggml_type_from_name(const char *name);

/*
 * Dequantize one row: n elements (a multiple of the block size) from src
 * (medha_ggml_row_bytes(type, n) bytes) into dst (n floats, the
 * caller's). Bit-exact with ggml's reference code. Returns 0, MEDHA_EUNSUP
 * (unknown type) or MEDHA_EINVAL (bad n).
 */
int medha_dequant_row(int type, const void *src, float *dst, int64_t n);
/*
 * Quantize one row: the inverse, with ggml's reference round-to-nearest
 * quantizers for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1; F16 and BF16 round to nearest even
 * (NaN stays NaN, overflow gives infinity). The K-quants, the IQ4 types
 * and unknown types give MEDHA_EUNSUP; bad n MEDHA_EINVAL. Non-finite input to the
 * block types gives defined (but useless) blocks.
 */
int medha_quant_row(int type, const float *src, void *dst, int64_t n);

/*
 * Quantize one row to Q4_K, Q5_K or Q6_K (quant_k.c): round to nearest
 * with scales from each sub-block's range, a valid encoding but not
 * ggml's reference quantizer (other bytes, larger errors). 0,
 * MEDHA_EUNSUP (another type), MEDHA_EINVAL (bad n).
 */
int medha_quant_k_row(int type, const float *src, void *dst, int64_t n);

/*
 * The integers of 32 elements of a linear block type, for kernels that
 * multiply them: element j of the row's 32-element block b (a K-quant
 * super-block holds eight) is, computed in float32 in this order,
 *
 *	x = (d * sc[j / 16]) * (u[j] - c) - dm * mn[j / 16]
 *
 * with d and dm the fp16 fields below (dm 0 where the type has no
 * minimum), giving the same bits as medha_dequant_row (IQ4_NL and
 * IQ4_XS: u is the level kvalues[q] + 128, c 128). For Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS: 0; other types
 * MEDHA_EUNSUP.
 */
struct medha_q32 {
	uint16_t d, dm;   /* fp16 bits: scale, scale of the minimum */
	int c;            /* offset: 16 (Q5_0), 32 (Q6_K), 4 (Q3_K),
	                     128 (IQ4), else 0 */
	int sc[2], mn[2]; /* the two 16-element halves' scales and minimums */
	uint8_t u[32];    /* unsigned quants, 0 .. 63 (IQ4: 1 .. 241) */
};
int medha_quant_unpack32(int type, const void *row, int64_t b,
    struct medha_q32 *o);

/*
 * Level q (0..15) of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). A
 * function, not the table: libmedha.a is linked into shared objects (the
 * cuda mocks), where non-PIC code cannot reach a global's data.
 */
int medha_iq4nl_level(int q);

/*
 * Scalar conversions, exact: fp16 -> fp32 keeps subnormals, infinities
 * and NaN payloads; fp32 -> fp16 and fp32 -> bf16 round to nearest even
 * and keep NaN a (quiet) NaN.
 */
float medha_fp16_to_fp32(uint16_t h);
uint16_t medha_fp32_to_fp16(float f);
float medha_bf16_to_fp32(uint16_t h);
uint16_t medha_fp32_to_bf16(float f);

#endif
