/*
 * add.cu: the residual add x += y, the other elementwise operators (a
 * bias on rows, a scale, the soft-cap, llama4's attention temperature),
 * the f32 <-> bf16 conversions, and
 * the seeded generator of random weights (counter-based: value i of a
 * seed depends on (seed, offset + i) alone, so a tensor filled in parts
 * or on another GPU has the same bits; medha_k_fill_random_ref() in
 * tests/gpu/kernels_test.c is its cpu twin).
 */
#include "common.cuh"

#define GRID_CAP 65536

static __global__ void
add_kernel(float *x, const float *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		x[i] += y[i];
}

extern "C" int
medha_k_add(float *x, const float *y, int64_t n, cudaStream_t stream)
{
	if (n < 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(add_kernel, grid_for(n, 256, GRID_CAP), 256, 0, stream)(x,
	    y, n);
	return launch_status();
}

static __global__ void
bias_kernel(float *x, int stride, int n, const float *b, int width)
{
	int64_t total = (int64_t)n * width;

	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < total; i += (int64_t)gridDim.x * blockDim.x)
		x[(i / width) * stride + i % width] += b[i % width];
}

extern "C" int
medha_k_bias_add(float *x, int row_stride, int n, const float *b, int width,
    cudaStream_t stream)
{
	int64_t total = (int64_t)n * width;

	if (n < 0 || width < 0 || row_stride < width)
		return cudaErrorInvalidValue;
	if (total == 0)
		return 0;
	MEDHA_LAUNCH(bias_kernel, grid_for(total, 256, GRID_CAP), 256, 0,
	    stream)(x, row_stride, n, b, width);
	return launch_status();
}

/* llama4's temperature: row t times its position's factor */
static __global__ void
temp_kernel(float *x, int stride, int n, int width, const int64_t *pos,
    float scale, int fl)
{
	int64_t total = (int64_t)n * width;

	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t t = i / width;
		const float f = (float)(log((double)floorf(
		    ((float)pos[t] + 1.0f) / (float)fl) + 1.0) *
		    (double)scale + 1.0);
		x[t * stride + i % width] *= f;
	}
}

extern "C" int
medha_k_attn_temp(float *x, int row_stride, int n, int width,
    const int64_t *pos, float scale, int floor, cudaStream_t stream)
{
	int64_t total = (int64_t)n * width;

	if (n < 0 || width < 0 || row_stride < width || floor < 1)
		return cudaErrorInvalidValue;
	if (total == 0)
		return 0;
	MEDHA_LAUNCH(temp_kernel, grid_for(total, 256, GRID_CAP), 256, 0,
	    stream)(x, row_stride, n, width, pos, scale, floor);
	return launch_status();
}

/* cap 0: x *= s; else x = tanh(x * s) * cap (s = 1 / cap) */
static __global__ void
scale_kernel(float *x, int64_t n, float s, float cap)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		x[i] = cap != 0.0f ? tanhf(x[i] * s) * cap : x[i] * s;
}

extern "C" int
medha_k_scale(float *x, int64_t n, float s, cudaStream_t stream)
{
	if (n < 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(scale_kernel, grid_for(n, 256, GRID_CAP), 256, 0,
	    stream)(x, n, s, 0.0f);
	return launch_status();
}

extern "C" int
medha_k_softcap(float *x, int64_t n, float cap, cudaStream_t stream)
{
	if (n < 0 || !(cap > 0))
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(scale_kernel, grid_for(n, 256, GRID_CAP), 256, 0,
	    stream)(x, n, 1.0f / cap, cap);
	return launch_status();
}

static __global__ void
to_bf16_kernel(uint16_t *y, const float *x, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = f32_bf16(x[i]);
}

static __global__ void
from_bf16_kernel(float *y, const uint16_t *x, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = bf16_f32(x[i]);
}

extern "C" int
medha_k_f32_to_bf16(uint16_t *y, const float *x, int64_t n, cudaStream_t stream)
{
	if (n < 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(to_bf16_kernel, grid_for(n, 256, GRID_CAP), 256, 0,
	    stream)(y, x, n);
	return launch_status();
}

extern "C" int
medha_k_bf16_to_f32(float *y, const uint16_t *x, int64_t n, cudaStream_t stream)
{
	if (n < 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(from_bf16_kernel, grid_for(n, 256, GRID_CAP), 256, 0,
	    stream)(y, x, n);
	return launch_status();
}

/*
 * Value number i: splitmix64's finaliser of seed + (i + 1) * golden
 * ratio, its top 24 bits u as (u * 2^-23 - 1) (exact: a multiple of
 * 2^-23 in [-1, 1)) times scale (one rounding), rounded to bf16. Every
 * step is exact or one IEEE rounding, so the cpu twin gives the same
 * bits (no contraction into an fma: __fmul_rn).
 */
static __global__ void
fill_kernel(uint16_t *y, int64_t n, uint64_t seed, uint64_t offset,
    float scale)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		uint64_t z = seed + (offset + (uint64_t)i + 1) *
		    0x9e3779b97f4a7c15ull;
		float f;

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		f = __fsub_rn(__fmul_rn((float)(uint32_t)(z >> 40),
		        1.0f / 8388608.0f), 1.0f);
		y[i] = f32_bf16(__fmul_rn(f, scale));
	}
}

extern "C" int
medha_k_fill_random(uint16_t *y, int64_t n, uint64_t seed, uint64_t offset,
    float scale, cudaStream_t stream)
{
	if (n < 0)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(fill_kernel, grid_for(n, 256, GRID_CAP), 256, 0, stream)(y,
	    n, seed, offset, scale);
	return launch_status();
}
