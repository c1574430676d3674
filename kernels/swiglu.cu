/*
 * swiglu.cu: y = silu(g) * u = g / (1 + e^-g) * u, rounded to bf16 (the
 * down product's input), as medha_cpu_swiglu; or (gelu) gelu_tanh(g) * u
 * (gemma's), as medha_cpu_geglu's reference mode. g and u are the halves
 * of the fused gate|up product, rows with their own strides.
 */
#include "common.cuh"

template <int GELU>
static __global__ void
swiglu_kernel(uint16_t *y, const float *g, int gs, const float *u, int us,
    int n, int ffn)
{
	int64_t total = (int64_t)n * ffn;

	for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     t < total; t += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = t / ffn;
		int c = (int)(t % ffn);
		float x = g[r * gs + c], a;

		if (GELU)
			a = 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x *
			        (1.0f + 0.044715f * x * x)));
		else
			a = x / (1.0f + expf(-x));
		y[t] = f32_bf16(a * u[r * us + c]);
	}
}

template <int GELU>
static int
glu(uint16_t *y, const float *g, int gs, const float *u, int us, int n,
    int ffn, cudaStream_t stream)
{
	int64_t total = (int64_t)n * ffn;

	if (n < 0 || ffn < 1 || gs < ffn || us < ffn)
		return cudaErrorInvalidValue;
	if (total == 0)
		return 0;
	MEDHA_LAUNCH(swiglu_kernel<GELU>, grid_for(total, 256, 65536), 256, 0,
	    stream)(y, g, gs, u, us, n, ffn);
	return launch_status();
}

extern "C" int
medha_k_swiglu(uint16_t *y, const float *g, int gs, const float *u, int us,
    int n, int ffn, cudaStream_t stream)
{
	return glu<0>(y, g, gs, u, us, n, ffn, stream);
}

extern "C" int
medha_k_geglu(uint16_t *y, const float *g, int gs, const float *u, int us,
    int n, int ffn, cudaStream_t stream)
{
	return glu<1>(y, g, gs, u, us, n, ffn, stream);
}
