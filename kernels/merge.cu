/*
 * merge.cu: the KVP merge, n_parts partial attention results of the
 * same rows folded into the softmax over the union of their keys, as
 * medha_attn_merge: m = max lse_j, w_j = exp(lse_j - m), out = sum w_j
 * o_j / sum w_j; parts of lse -INFINITY weigh nothing, a row with none
 * is 0. One warp per (row, head); the parts in order, so the bits do
 * not depend on the launch.
 */
#include "common.cuh"

static __global__ void
merge_kernel(uint16_t *out, const float *parts, const float *lses,
    int n_parts, int n, int n_heads, int head_dim)
{
	int64_t rh = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x & 31;
	int64_t rows = (int64_t)n * n_heads, width = (int64_t)n_heads * head_dim;
	float m = -INFINITY, sum = 0;

	if (rh >= rows)
		return;
	int64_t r = rh / n_heads, h = rh % n_heads;
	for (int j = 0; j < n_parts; j++)
		m = fmaxf(m, lses[(int64_t)j * rows + rh]);
	if (m != -INFINITY)
		for (int j = 0; j < n_parts; j++)
			sum += expf(lses[(int64_t)j * rows + rh] - m);
	for (int c = lane; c < head_dim; c += 32) {
		float acc = 0;

		if (m != -INFINITY) {
			for (int j = 0; j < n_parts; j++) {
				float w = expf(lses[(int64_t)j * rows + rh] - m);

				if (w > 0)
					acc += w * parts[((int64_t)j * n + r) *
					    width + h * head_dim + c];
			}
			acc /= sum;
		}
		out[r * width + h * head_dim + c] = f32_bf16(acc);
	}
}

extern "C" int
medha_k_attn_merge(uint16_t *out, const float *parts, const float *lses,
    int n_parts, int n, int n_heads, int head_dim, cudaStream_t stream)
{
	int64_t rows = (int64_t)n * n_heads;

	if (n_parts < 0 || n < 0 || n_heads < 1 || head_dim < 1)
		return cudaErrorInvalidValue;
	if (rows == 0)
		return 0;
	MEDHA_LAUNCH(merge_kernel, (unsigned)((rows + 7) / 8), 256, 0,
	    stream)(out, parts, lses, n_parts, n, n_heads, head_dim);
	return launch_status();
}
