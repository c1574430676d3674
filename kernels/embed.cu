/*
 * embed.cu: the embedding gather, x[i] = table[ids[i]] widened from bf16
 * to f32 (the residual stream's type). One block per row.
 */
#include "common.cuh"

static __global__ void
embed_kernel(float *x, const uint16_t *table, const int32_t *ids, int dim)
{
	int64_t i = blockIdx.x;
	const uint16_t *row = table + (int64_t)ids[i] * dim;
	float *y = x + i * dim;

	for (int c = threadIdx.x; c < dim; c += blockDim.x)
		y[c] = bf16_f32(row[c]);
}

extern "C" int
medha_k_embed(float *x, const uint16_t *table, const int32_t *ids, int n,
    int dim, cudaStream_t stream)
{
	if (n < 0 || dim < 1)
		return cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	MEDHA_LAUNCH(embed_kernel, n, 256, 0, stream)(x, table, ids, dim);
	return launch_status();
}
