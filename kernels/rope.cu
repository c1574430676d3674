/*
 * rope.cu: RoPE in place, the GGUF llama layout (adjacent pairs (2i,
 * 2i+1) rotate), as medha_cpu_rope_table + medha_cpu_rope: pair i of a
 * row at position p turns by p * theta_base^(-2i / n_rot) / freqs[i].
 * The angle is made as the cpu twin makes it, so that the two agree at
 * any position (at position 1M an f32 angle's last bit is 0.06 rad, and
 * another order of roundings would turn high pairs by that much): the
 * factor powf(theta_base, -2 / n_rot) on the host (the same libm as the
 * twin), then p multiplied up by it i times in f32. sinf and cosf are
 * CUDA's (2 ulp). One thread per (row, head, pair).
 */
#include "common.cuh"

static __global__ void
rope_kernel(float *x, const int64_t *pos, int n, int row_stride, int n_heads,
    int head_dim, int n_rot, float scale, const float *freqs)
{
	int half = n_rot / 2;
	int64_t total = (int64_t)n * n_heads * half;

	for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     t < total; t += (int64_t)gridDim.x * blockDim.x) {
		int i = (int)(t % half);
		int h = (int)((t / half) % n_heads);
		int64_t r = t / ((int64_t)half * n_heads);
		float *v = x + r * row_stride + (int64_t)h * head_dim + 2 * i;
		float th = (float)pos[r], s, c, x0, x1;

		for (int j = 0; j < i; j++)
			th *= scale;
		if (freqs != NULL)
			th = th / freqs[i];
		sincosf(th, &s, &c);
		x0 = v[0];
		x1 = v[1];
		v[0] = x0 * c - x1 * s;
		v[1] = x0 * s + x1 * c;
	}
}

extern "C" int
medha_k_rope(float *x, const int64_t *pos, int n, int row_stride, int n_heads,
    int head_dim, int n_rot, float theta_base, const float *freqs,
    cudaStream_t stream)
{
	int64_t total;

	if (n < 0 || n_heads < 1 || head_dim < 2 || n_rot < 0 ||
	    n_rot > head_dim || (n_rot & 1) ||
	    row_stride < n_heads * head_dim)
		return cudaErrorInvalidValue;
	total = (int64_t)n * n_heads * (n_rot / 2);
	if (total == 0)
		return 0;
	rope_kernel<<<grid_for(total, 256, 65536), 256, 0, stream>>>(x, pos, n,
	    row_stride, n_heads, head_dim, n_rot,
	    powf(theta_base, -2.0f / (float)n_rot), freqs);
	return launch_status();
}
