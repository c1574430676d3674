/*
 * kvcache.c: the paged KV cache (see kvcache.h): a pool of blocks kept
 * on a free stack, a block table per sequence, and the store and load of
 * K/V rows in f32 or f16. Blocks are handed out lowest number first on a
 * fresh cache, so the block tables of a test are easy to read. A block
 * counts the block tables holding it (forks share them); it goes back to
 * the pool when the last lets go, and a write to a shared block copies
 * it first.
 */
#include "cpu/kvcache.h"
#include "model/quant.h"

#include <string.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

#define MAX_SEQS_DEFAULT 256

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

int
medha_kvcache_init(struct medha_kvcache **kvp, const struct medha_kv_config *c)
{
	struct medha_kvcache *kv;
	size_t bytes;
	int64_t i;

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
	if (kv->c.max_seqs == 0)
		kv->c.max_seqs = MAX_SEQS_DEFAULT;
	kv->elsize = c->type == MEDHA_KV_F16 ? 2 : 4;
	kv->block_els = bytes / kv->elsize / (size_t)c->n_blocks;
	kv->data = malloc(bytes);
	kv->free = medha_calloc((size_t)c->n_blocks, sizeof(*kv->free));
	kv->ref = medha_calloc((size_t)c->n_blocks, sizeof(*kv->ref));
	kv->seq = medha_calloc((size_t)kv->c.max_seqs, sizeof(*kv->seq));
	if (kv->data == NULL || kv->free == NULL || kv->seq == NULL ||
	    kv->ref == NULL) {
		medha_kvcache_free(kv);
		return MEDHA_ENOMEM;
	}
	/* the stack pops from the top: put block 0 there */
	for (i = 0; i < c->n_blocks; i++)
		kv->free[i] = (int32_t)(c->n_blocks - 1 - i);
	kv->nfree = c->n_blocks;
	*kvp = kv;
	return 0;
}

void
medha_kvcache_free(struct medha_kvcache *kv)
{
	int i;

	if (kv == NULL)
		return;
	if (kv->seq != NULL)
		for (i = 0; i < kv->c.max_seqs; i++)
			free(kv->seq[i].block);
	free(kv->seq);
	free(kv->free);
	free(kv->ref);
	free(kv->data);
	free(kv);
}

static struct medha_kv_seq *
seq_get(const struct medha_kvcache *kv, int seq)
{
	if (seq < 0 || seq >= kv->c.max_seqs || !kv->seq[seq].used)
		return NULL;
	return &kv->seq[seq];
}

int
medha_kv_seq_alloc(struct medha_kvcache *kv, int *seq)
{
	int i;

	for (i = 0; i < kv->c.max_seqs; i++)
		if (!kv->seq[i].used) {
			kv->seq[i].used = 1;
			kv->seq[i].len = 0;
			kv->seq[i].nblock = 0;
			*seq = i;
			return 0;
		}
	return MEDHA_ENOSPACE;
}

/* Let go of the blocks of s past the first keep: to the pool, unless
 * another table holds them too. */
static void
give_back(struct medha_kvcache *kv, struct medha_kv_seq *s, int64_t keep)
{
	while (s->nblock > keep) {
		int32_t b = s->block[--s->nblock];
		if (--kv->ref[b] == 0)
			kv->free[kv->nfree++] = b;
	}
}

/* Room for n blocks in s's table. 0 or MEDHA_ENOMEM. */
static int
table_room(struct medha_kv_seq *s, int64_t need)
{
	int32_t *nb;
	int64_t cap;

	if (need <= s->cap)
		return 0;
	cap = s->cap ? s->cap : 4;
	while (cap < need)
		cap *= 2;
	if ((nb = medha_reallocarray(s->block, (size_t)cap, sizeof(*nb))) ==
	    NULL)
		return MEDHA_ENOMEM;
	s->block = nb;
	s->cap = cap;
	return 0;
}

/* Block b's K/V, every plane, into block d. */
static void
copy_block(struct medha_kvcache *kv, int32_t d, int32_t b)
{
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim * kv->elsize;
	const int64_t planes = (int64_t)kv->c.n_layers * 2 * kv->c.n_kv_heads;

	for (int64_t p = 0; p < planes; p++)
		memcpy((char *)kv->data +
		        ((size_t)p * kv->c.n_blocks + d) * run,
		    (char *)kv->data + ((size_t)p * kv->c.n_blocks + b) * run,
		    run);
}

/* Table slot i of s on a block of its own (copy on write). 0 or
 * MEDHA_ENOSPACE. */
static int
own_block(struct medha_kvcache *kv, struct medha_kv_seq *s, int64_t i)
{
	int32_t b = s->block[i], d;

	if (kv->ref[b] == 1)
		return 0;
	if (kv->nfree == 0)
		return MEDHA_ENOSPACE;
	d = kv->free[--kv->nfree];
	kv->ref[d] = 1;
	copy_block(kv, d, b);
	kv->ref[b]--;
	s->block[i] = d;
	return 0;
}

int
medha_kv_seq_fork(struct medha_kvcache *kv, int dst, int src, int64_t from,
    int64_t to)
{
	struct medha_kv_seq *d, *s;
	int64_t full = to / MEDHA_KV_BLOCK, i;
	int rc;

	if ((d = seq_get(kv, dst)) == NULL || (s = seq_get(kv, src)) == NULL ||
	    dst == src || from < 0 || from > to || to > s->len ||
	    from % MEDHA_KV_BLOCK != 0 || d->len != from ||
	    d->nblock != from / MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	if ((rc = table_room(d, (to + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK)) !=
	    0)
		return rc;
	if (to % MEDHA_KV_BLOCK != 0 && kv->nfree == 0)
		return MEDHA_ENOSPACE;
	for (i = from / MEDHA_KV_BLOCK; i < full; i++) {
		d->block[d->nblock++] = s->block[i];
		kv->ref[s->block[i]]++;
	}
	if (to % MEDHA_KV_BLOCK != 0) { /* the partial block: copied */
		int32_t b = kv->free[--kv->nfree];
		kv->ref[b] = 1;
		copy_block(kv, b, s->block[full]);
		d->block[d->nblock++] = b;
	}
	d->len = to;
	return 0;
}

void
medha_kv_seq_free(struct medha_kvcache *kv, int seq)
{
	struct medha_kv_seq *s;

	if ((s = seq_get(kv, seq)) == NULL)
		return;
	give_back(kv, s, 0);
	s->used = 0;
	s->len = 0;
}

int64_t
medha_kv_seq_len(const struct medha_kvcache *kv, int seq)
{
	const struct medha_kv_seq *s;

	if ((s = seq_get(kv, seq)) == NULL)
		return MEDHA_EINVAL;
	return s->len;
}

int64_t
medha_kv_free_blocks(const struct medha_kvcache *kv)
{
	return kv->nfree;
}

int
medha_kv_reserve(struct medha_kvcache *kv, int seq, int64_t n)
{
	struct medha_kv_seq *s;
	int64_t need;
	int rc;

	if ((s = seq_get(kv, seq)) == NULL || n < 0)
		return MEDHA_EINVAL;
	need = (n + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK;
	if ((rc = table_room(s, need)) != 0)
		return rc;
	while (s->nblock < need) {
		int32_t b;
		if (kv->nfree == 0)
			return MEDHA_ENOSPACE;
		b = kv->free[--kv->nfree];
		kv->ref[b] = 1;
		s->block[s->nblock++] = b;
	}
	return 0;
}

int
medha_kv_set_len(struct medha_kvcache *kv, int seq, int64_t n)
{
	struct medha_kv_seq *s;

	if ((s = seq_get(kv, seq)) == NULL || n < 0 ||
	    n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	s->len = n;
	give_back(kv, s, (n + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK);
	return 0;
}

int
medha_kv_fill(struct medha_kvcache *kv, int seq, int64_t n)
{
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim;
	const int64_t planes = (int64_t)kv->c.n_layers * 2 * kv->c.n_kv_heads;
	struct medha_kv_seq *s;
	int64_t b, from, p;
	int rc;

	if ((s = seq_get(kv, seq)) == NULL || n < 0)
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

	if ((s = seq_get(kv, seq)) == NULL || layer < 0 ||
	    layer >= kv->c.n_layers || pos < 0 || n < 0 ||
	    pos + n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	/* a block shared with another table is copied before a write */
	for (p = pos / MEDHA_KV_BLOCK;
	     n > 0 && p <= (pos + n - 1) / MEDHA_KV_BLOCK; p++)
		if ((rc = own_block(kv, s, p)) != 0)
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

	if ((s = seq_get(kv, seq)) == NULL || layer < 0 ||
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
