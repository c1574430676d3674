/*
 * norm.cu: RMSNorm of rows, y = x / sqrt(mean(x^2) + eps) * w, with a
 * bf16 output (the next matrix product's input) or an f32 one (in place
 * too: gemma's post-norms), and of each head of a row in place (the Q/K
 * norms of qwen3 and gemma3). As the cpu twin (medha_cpu_rmsnorm):
 * squares in f32, their sum in f64, then (x * scale) * w. One block per
 * row (or head): block b norms the dim floats at (b / per) * stride +
 * (b % per) * dim, written at the same place of y.
 */
#include "common.cuh"

template <typename O>
static __device__ __forceinline__ void
put(O *y, int64_t i, float v);

template <>
__device__ __forceinline__ void
put<uint16_t>(uint16_t *y, int64_t i, float v)
{
	y[i] = f32_bf16(v);
}

template <>
__device__ __forceinline__ void
put<float>(float *y, int64_t i, float v)
{
	y[i] = v;
}

template <typename O>
static __global__ void
rmsnorm_kernel(O *y, const float *x, const float *w, int dim, float eps,
    int per, int stride)
{
	MEDHA_SHARED(double, sh, 32);
	const int64_t o = (int64_t)(blockIdx.x / per) * stride +
	    (int64_t)(blockIdx.x % per) * dim;
	const float *r = x + o;
	double sum = 0;
	float scale;

	for (int c = threadIdx.x; c < dim; c += blockDim.x)
		sum += (double)(r[c] * r[c]);
	sum = block_sum<double>(sum, sh);
	scale = 1.0f / sqrtf((float)(sum / dim) + eps);
	/* in place: each thread reads its own elements before writing */
	for (int c = threadIdx.x; c < dim; c += blockDim.x)
		put<O>(y, o + c, (r[c] * scale) * w[c]);
}

template <typename O>
static int
rmsnorm(O *y, const float *x, const float *w, int n, int dim, float eps,
    cudaStream_t stream)
{
	if (n < 0 || dim < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(rmsnorm_kernel<O>, n, 256, 0, stream)(y, x, w, dim, eps, 1,
	    dim);
	return launch_status();
}

extern "C" int
medha_k_rmsnorm(uint16_t *y, const float *x, const float *w, int n, int dim,
    float eps, cudaStream_t stream)
{
	return rmsnorm<uint16_t>(y, x, w, n, dim, eps, stream);
}

extern "C" int
medha_k_rmsnorm_f32(float *y, const float *x, const float *w, int n, int dim,
    float eps, cudaStream_t stream)
{
	return rmsnorm<float>(y, x, w, n, dim, eps, stream);
}

extern "C" int
medha_k_rmsnorm_heads(float *x, int row_stride, int n, int n_heads,
    int head_dim, const float *w, float eps, cudaStream_t stream)
{
	if (n < 0 || n_heads < 1 || head_dim < 1 ||
	    row_stride < n_heads * head_dim)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(rmsnorm_kernel<float>, n * n_heads, 128, 0, stream)(x, x,
	    w, head_dim, eps, n_heads, row_stride);
	return launch_status();
}
