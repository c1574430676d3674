/*
 * common.cuh: what every kernel of kernels/ shares: bf16 and f16 bits to
 * and from f32 (round to nearest even, as the cpu side's conversions),
 * warp and block reductions, and the launch check every launcher ends
 * with. Device code only but for the two host helpers at the end.
 */
#ifndef MEDHA_KERNELS_COMMON_CUH
#define MEDHA_KERNELS_COMMON_CUH

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * Launches and shared memory are written with these, never as "k<<<...>>>"
 * or a bare "__shared__ T x[n]", so that the SIMT emulator compiles the
 * same sources as host C++: tests/gpu/simt/simt.h (force-included, with
 * MEDHA_SIMT) defines them its way, as simt_launch(), a pointer to the
 * block's dynamic shared memory and a static array made fresh each
 * block.
 *	MEDHA_LAUNCH(kernel, grid, block, smem, stream)(args);
 *	MEDHA_KERNEL2(k, a, b)		k<a, b> as one macro argument
 *	MEDHA_DYN_SMEM(T, name, align);	the block's dynamic shared memory
 *	MEDHA_SHARED(T, name, n);	__shared__ T name[n]
 */
#define MEDHA_KERNEL2(k, a, b) k<a, b>
#ifndef MEDHA_SIMT
#define MEDHA_LAUNCH(k, g, b, sm, st) k<<<g, b, sm, st>>>
#define MEDHA_DYN_SMEM(T, name, al) extern __shared__ __align__(al) T name[]
#define MEDHA_SHARED(T, name, n) __shared__ T name[n]
#endif

/* ---- conversions (the stored bits are uint16_t) ---- */

/* f32 bits and back, on either side (the host's for attn_emulate) */
static __host__ __device__ __forceinline__ uint32_t
f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
#endif
}

static __host__ __device__ __forceinline__ float
bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, 4);
	return f;
#endif
}

/* bf16 bits to f32: the bits are the f32's upper half */
static __host__ __device__ __forceinline__ float
bf16_f32(uint16_t b)
{
	return bits_f32((uint32_t)b << 16);
}

/* f32 to bf16 bits, round to nearest even; a NaN stays a (quiet) NaN */
static __host__ __device__ __forceinline__ uint16_t
f32_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static __host__ __device__ __forceinline__ float
f16_f32(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

static __host__ __device__ __forceinline__ uint16_t
f32_f16(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

/* a stored element of type T (MEDHA_K_F16 or MEDHA_K_BF16) as f32 */
template <int T>
static __host__ __device__ __forceinline__ float
kv_f32(uint16_t b)
{
	return T == MEDHA_K_BF16 ? bf16_f32(b) : f16_f32(b);
}

template <int T>
static __host__ __device__ __forceinline__ uint16_t
f32_kv(float f)
{
	return T == MEDHA_K_BF16 ? f32_bf16(f) : f32_f16(f);
}

/* ---- reductions ---- */

static __device__ __forceinline__ float
warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ double
warp_sum_f64(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float
warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/*
 * The sum over the block of each thread's v, returned to every thread;
 * sh is 32 elements of shared memory. blockDim.x a multiple of 32.
 * Ends with the block synchronised, so sh may be reused at once.
 */
template <typename F>
static __device__ F
block_sum(F v, F *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads(); /* sh may still be read by a previous call */
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : (F)0;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ float
block_max(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : -INFINITY;
	return warp_max(v);
}

/*
 * The first index of the largest value: (value, index) pairs reduced
 * keeping the larger value, the lower index on equal values. A NaN is
 * never chosen over a number (the comparisons are false), as in
 * medha_sample_greedy; idx is INT32_MAX for "none yet".
 */
static __device__ __forceinline__ void
argmax_pick(float *v, int *i, float ov, int oi)
{
	if (oi == INT32_MAX)
		return;
	if (*i == INT32_MAX || ov > *v || (ov == *v && oi < *i)) {
		*v = ov;
		*i = oi;
	}
}

static __device__ void
block_argmax(float *v, int *i, float *shv, int *shi)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		argmax_pick(v, i, __shfl_xor_sync(0xffffffffu, *v, o),
		    __shfl_xor_sync(0xffffffffu, *i, o));
	__syncthreads();
	if (lane == 0) {
		shv[w] = *v;
		shi[w] = *i;
	}
	__syncthreads();
	*v = lane < nw ? shv[lane] : -INFINITY;
	*i = lane < nw ? shi[lane] : INT32_MAX;
	for (int o = 16; o > 0; o >>= 1)
		argmax_pick(v, i, __shfl_xor_sync(0xffffffffu, *v, o),
		    __shfl_xor_sync(0xffffffffu, *i, o));
}

/* ---- host side ---- */

/* The launcher's return: the launch's error, or 0. */
static inline int
launch_status(void)
{
	return (int)cudaGetLastError();
}

/* Blocks for n items of per each, capped (the kernels then stride). */
static inline unsigned
grid_for(int64_t n, int per, unsigned cap)
{
	int64_t b = (n + per - 1) / per;

	if (b < 1)
		b = 1;
	return b > (int64_t)cap ? cap : (unsigned)b;
}

#endif
