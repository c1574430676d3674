/*
 * kv.cuh: the paged cache's addressing and a batch row's sequence,
 * shared by kv.cu (the append) and attn*.cu (the readers).
 */
#ifndef MEDHA_KERNELS_KV_CUH
#define MEDHA_KERNELS_KV_CUH

#include "common.cuh"

/* element (block b, head h, row i, column c) of a pool */
static __host__ __device__ __forceinline__ int64_t
kv_elem(const struct medha_k_kv_layer *kv, int64_t b, int h, int i, int c)
{
	return ((b * kv->n_kv_heads + h) * kv->block_size + i) *
	    (int64_t)kv->head_dim + c;
}

/* the sequence whose rows hold batch row t, or -1 */
static __host__ __device__ __forceinline__ int
seq_of_row(const struct medha_k_seqs *s, int t)
{
	int lo = 0, hi = s->n_seqs - 1;

	while (lo < hi) { /* the last sequence starting at or before t */
		int mid = (lo + hi + 1) / 2;

		if (s->q_start[mid] <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (s->n_seqs < 1 || t < s->q_start[lo] ||
	    t >= s->q_start[lo] + s->n_q[lo])
		return -1;
	return lo;
}

#endif
