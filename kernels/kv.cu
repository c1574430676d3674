/*
 * kv.cu: K and V rows of a batch into the paged cache (kernels.h has the
 * layout). Row t of sequence s is at position pos[s] + (t - q_start[s]),
 * slot pos - kv_base[s] of its cache: block table entry slot /
 * block_size, row slot % block_size. One block per batch row; the row's
 * sequence is found by bisection of q_start (sequences in batch order).
 */
#include "kv.cuh"

template <int T>
static __global__ void
kv_append_kernel(struct medha_k_kv_layer kv, struct medha_k_seqs s,
    const float *k, int ks, const float *v, int vs)
{
	int t = blockIdx.x, q = seq_of_row(&s, t);
	int64_t slot, blk, off;
	int width = kv.n_kv_heads * kv.head_dim;
	uint16_t *kp = (uint16_t *)kv.k, *vp = (uint16_t *)kv.v;

	if (q < 0 || !s.append[q])
		return;
	slot = s.pos[q] + (t - s.q_start[q]) - s.kv_base[q];
	if (slot < 0 || slot >= s.kv_len[q])
		return; /* outside the cache's claim: the caller's bug */
	blk = s.table[s.table_off[q] + slot / kv.block_size];
	for (int c = threadIdx.x; c < width; c += blockDim.x) {
		int h = c / kv.head_dim, d = c % kv.head_dim;

		off = kv_elem(&kv, blk, h, slot % kv.block_size, d);
		kp[off] = f32_kv<T>(k[(int64_t)t * ks + c]);
		vp[off] = f32_kv<T>(v[(int64_t)t * vs + c]);
	}
}

extern "C" int
medha_k_kv_append(const struct medha_k_kv_layer *kv,
    const struct medha_k_seqs *s, const float *k, int ks, const float *v,
    int vs, cudaStream_t stream)
{
	int width = kv->n_kv_heads * kv->head_dim;

	if (s->n_tokens < 0 || ks < width || vs < width || kv->block_size < 1)
		return cudaErrorInvalidValue;
	if (s->n_tokens == 0)
		return 0;
	if (kv->kv_type == MEDHA_K_BF16)
		MEDHA_LAUNCH(kv_append_kernel<MEDHA_K_BF16>, s->n_tokens, 256,
		    0, stream)(*kv, *s, k, ks, v, vs);
	else if (kv->kv_type == MEDHA_K_F16)
		MEDHA_LAUNCH(kv_append_kernel<MEDHA_K_F16>, s->n_tokens, 256, 0,
		    stream)(*kv, *s, k, ks, v, vs);
	else
		return cudaErrorInvalidValue;
	return launch_status();
}
