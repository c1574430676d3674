/*
 * kvcache.c: the paged KV cache (see kvcache.h): the K/V of a pool of
 * blocks in host memory, f32 or f16, and the store and load of their
 * rows. Which blocks a sequence holds, and when one is shared or copied,
 * is kvblocks.c's; it calls copy_block() here for a fork's partial block
 * and before a write to a shared one.
 */
#include "cpu/kvcache.h"
#include "model/quant.h"

#include <string.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

size_t
medha_kvcache_bytes(const struct medha_kv_config *c)
{
	size_t per, el = c->type == MEDHA_KV_F16 ? 2 : 4;

	if (c->n_layers <= 0 || c->n_kv_heads <= 0 || c->head_dim <= 0 ||
	    c->n_blocks <= 0)
		return 0;
	per = (size_t)c->n_layers * 2 * c->n_kv_heads * MEDHA_KV_BLOCK *
	    c->head_dim * el;
	if ((size_t)c->n_blocks > SIZE_MAX / per)
		return 0;
	return per * (size_t)c->n_blocks;
}

/* Block b's K/V, every plane, into block d (the tables' copy). */
static int
copy_block(void *arg, int32_t d, int32_t b)
{
	struct medha_kvcache *kv = arg;
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim * kv->elsize;
	const int64_t planes = (int64_t)kv->c.n_layers * 2 * kv->c.n_kv_heads;

	for (int64_t p = 0; p < planes; p++)
		memcpy((char *)kv->data +
		        ((size_t)p * kv->c.n_blocks + d) * run,
		    (char *)kv->data + ((size_t)p * kv->c.n_blocks + b) * run,
		    run);
	return 0;
}

int
medha_kvcache_init(struct medha_kvcache **kvp, const struct medha_kv_config *c)
{
	struct medha_kvcache *kv;
	size_t bytes;
	int rc;

	*kvp = NULL;
	if (c->type != MEDHA_KV_F32 && c->type != MEDHA_KV_F16)
		return MEDHA_EINVAL;
	if (c->n_layers > 4096 || c->n_kv_heads > 4096 || c->head_dim > 4096 ||
	    c->n_blocks > INT32_MAX || c->max_seqs < 0)
		return MEDHA_EINVAL;
	if ((bytes = medha_kvcache_bytes(c)) == 0)
		return MEDHA_EINVAL;
	if ((kv = calloc(1, sizeof(*kv))) == NULL)
		return MEDHA_ENOMEM;
	kv->c = *c;
	kv->elsize = c->type == MEDHA_KV_F16 ? 2 : 4;
	kv->block_els = bytes / kv->elsize / (size_t)c->n_blocks;
	if ((rc = medha_kvb_init(&kv->bt, c->n_blocks, c->max_seqs,
	         copy_block, kv)) != 0 ||
	    (kv->data = malloc(bytes)) == NULL) {
		medha_kvcache_free(kv);
		return rc != 0 ? rc : MEDHA_ENOMEM;
	}
	kv->c.max_seqs = kv->bt.max_seqs;
	*kvp = kv;
	return 0;
}

void
medha_kvcache_free(struct medha_kvcache *kv)
{
	if (kv == NULL)
		return;
	medha_kvb_free(&kv->bt);
	free(kv->data);
	free(kv);
}

int
medha_kv_seq_alloc(struct medha_kvcache *kv, int *seq)
{
	return medha_kvb_seq_alloc(&kv->bt, seq);
}

int
medha_kv_seq_fork(struct medha_kvcache *kv, int dst, int src, int64_t from,
    int64_t to)
{
	return medha_kvb_fork(&kv->bt, dst, src, from, to);
}

void
medha_kv_seq_free(struct medha_kvcache *kv, int seq)
{
	medha_kvb_seq_free(&kv->bt, seq);
}

int64_t
medha_kv_seq_len(const struct medha_kvcache *kv, int seq)
{
	return medha_kvb_len(&kv->bt, seq);
}

int64_t
medha_kv_free_blocks(const struct medha_kvcache *kv)
{
	return kv->bt.nfree;
}

int
medha_kv_reserve(struct medha_kvcache *kv, int seq, int64_t n)
{
	return medha_kvb_reserve(&kv->bt, seq, n);
}

int
medha_kv_set_len(struct medha_kvcache *kv, int seq, int64_t n)
{
	return medha_kvb_set_len(&kv->bt, seq, n);
}

int
medha_kv_fill(struct medha_kvcache *kv, int seq, int64_t n)
{
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim;
	const int64_t planes = (int64_t)kv->c.n_layers * 2 * kv->c.n_kv_heads;
	struct medha_kv_seq *s;
	int64_t b, from, p;
	int rc;

	if ((s = medha_kvb_seq(&kv->bt, seq)) == NULL || n < 0)
		return MEDHA_EINVAL;
	from = s->len < n ? s->len / MEDHA_KV_BLOCK : 0;
	if ((rc = medha_kv_reserve(kv, seq, n)) != 0)
		return rc;
	/* zeros, written: fresh pages are mapped, so that attention reads
	   memory rather than the kernel's one page of zeros */
	for (p = 0; p < planes && s->len < n; p++)
		for (b = from; b < (n + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK; b++)
			memset((char *)kv->data +
			        ((size_t)p * kv->c.n_blocks + s->block[b]) *
			            run * kv->elsize,
			    0, run * kv->elsize);
	return medha_kv_set_len(kv, seq, n);
}

/* head_dim floats of src into the cache's type at dst, stride apart */
static void
store_row(const struct medha_kvcache *kv, void *dst, const float *src,
    size_t stride)
{
	int n = kv->c.head_dim, i = 0;
	uint16_t *d16 = dst;
	float *d32 = dst;

	if (kv->c.type == MEDHA_KV_F32) {
		for (i = 0; i < n; i++)
			d32[i * stride] = src[i];
		return;
	}
#ifdef __F16C__
	for (; i + 8 <= n; i += 8) {
		uint16_t h[8];
		int j;
		_mm_storeu_si128((__m128i *)h,
		    _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
		        _MM_FROUND_TO_NEAREST_INT));
		for (j = 0; j < 8; j++)
			d16[(i + j) * stride] = h[j];
	}
#endif
	for (; i < n; i++)
		d16[i * stride] = medha_fp32_to_fp16(src[i]);
}

int
medha_kv_write(struct medha_kvcache *kv, int seq, int layer, int64_t pos, int n,
    const float *k, const float *v)
{
	struct medha_kv_seq *s;
	int64_t p;
	int h, nkv = kv->c.n_kv_heads, hd = kv->c.head_dim, rc;
	size_t i;
	char *run;

	if ((s = medha_kvb_seq(&kv->bt, seq)) == NULL || layer < 0 ||
	    layer >= kv->c.n_layers || pos < 0 || n < 0 ||
	    pos + n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	/* a block shared with another table is copied before a write */
	if ((rc = medha_kvb_own(&kv->bt, seq, pos, n)) != 0)
		return rc;
	for (p = pos; p < pos + n; p++)
		for (h = 0; h < nkv; h++) {
			i = (size_t)(p % MEDHA_KV_BLOCK);
			/* K: dimension-major within the run */
			run = (char *)medha_kv_run(kv, seq, layer, 0, h,
			    p / MEDHA_KV_BLOCK);
			store_row(kv, run + i * kv->elsize,
			    k + ((p - pos) * nkv + h) * (int64_t)hd,
			    MEDHA_KV_BLOCK);
			/* V: position-major */
			run = (char *)medha_kv_run(kv, seq, layer, 1, h,
			    p / MEDHA_KV_BLOCK);
			store_row(kv, run + i * hd * kv->elsize,
			    v + ((p - pos) * nkv + h) * (int64_t)hd, 1);
		}
	return 0;
}

int
medha_kv_read(const struct medha_kvcache *kv, int seq, int layer, int which,
    int head, int64_t pos, float *dst)
{
	const struct medha_kv_seq *s;
	const char *run;
	const uint16_t *h;
	int i, hd = kv->c.head_dim;
	size_t stride;

	if ((s = medha_kvb_seq(&kv->bt, seq)) == NULL || layer < 0 ||
	    layer >= kv->c.n_layers || which < 0 || which > 1 || head < 0 ||
	    head >= kv->c.n_kv_heads || pos < 0 ||
	    pos >= s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	run = medha_kv_run(kv, seq, layer, which, head, pos / MEDHA_KV_BLOCK);
	if (which == 0) { /* dimension-major */
		run += (size_t)(pos % MEDHA_KV_BLOCK) * kv->elsize;
		stride = MEDHA_KV_BLOCK;
	} else {
		run += (size_t)(pos % MEDHA_KV_BLOCK) * hd * kv->elsize;
		stride = 1;
	}
	h = (const uint16_t *)run;
	for (i = 0; i < hd; i++)
		dst[i] = kv->c.type == MEDHA_KV_F32
		    ? ((const float *)run)[i * stride]
		    : medha_fp16_to_fp32(h[i * stride]);
	return 0;
}
