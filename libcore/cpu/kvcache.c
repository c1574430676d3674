/*
 * kvcache.c: the paged KV cache (see kvcache.h): the K/V of a pool of
 * blocks in host memory, f32 or f16, and the store and load of their
 * rows; with sliding-window layers, a table per layer and the blocks a
 * window no longer sees given back. Which blocks a sequence holds, and
 * when one is shared or copied, is kvblocks.c's; it calls copy_block()
 * here for a fork's partial block and before a write to a shared one.
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

/* Planes of one block: every layer's, or one layer's (nl). */
static int64_t
planes_of(const struct medha_kvcache *kv)
{
	return (int64_t)(kv->nl ? 1 : kv->c.n_layers) * 2 * kv->c.n_kv_heads;
}

/* Block b's K/V, every plane, into block d (the tables' copy). */
static int
copy_block(void *arg, int32_t d, int32_t b)
{
	struct medha_kvcache *kv = arg;
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim * kv->elsize;
	const int64_t planes = planes_of(kv);

	for (int64_t p = 0; p < planes; p++)
		memcpy((char *)kv->data + ((size_t)p * kv->n_slots + d) * run,
		    (char *)kv->data + ((size_t)p * kv->n_slots + b) * run,
		    run);
	return 0;
}

/* The layers with tables of their own, from c's windows: kv->nl, lo
 * and win (nl stays 0 where none of c's layers has a window). 0 or
 * MEDHA_ENOMEM / MEDHA_EINVAL. */
static int
window_layers(struct medha_kvcache *kv, const struct medha_kv_config *c)
{
	int lo = c->layer_lo, hi = c->layer_hi > 0 ? c->layer_hi : c->n_layers;
	int any = 0;

	if (lo < 0 || lo >= hi || hi > c->n_layers)
		return MEDHA_EINVAL;
	for (int l = lo; c->windows != NULL && l < hi; l++) {
		if (c->windows[l] < 0)
			return MEDHA_EINVAL;
		any |= c->windows[l] > 0;
	}
	if (!any)
		return 0;
	if ((int64_t)(hi - lo) * c->n_blocks > INT32_MAX ||
	    (int64_t)(hi - lo) * (c->max_seqs > 0 ? c->max_seqs : 256) >
	        INT32_MAX)
		return MEDHA_EINVAL;
	if ((kv->win = calloc((size_t)(hi - lo), sizeof(int))) == NULL)
		return MEDHA_ENOMEM;
	for (int l = lo; l < hi; l++)
		kv->win[l - lo] = c->windows[l];
	kv->nl = hi - lo;
	kv->lo = lo;
	return 0;
}

int
medha_kvcache_init(struct medha_kvcache **kvp, const struct medha_kv_config *c)
{
	struct medha_kvcache *kv;
	size_t bytes;
	int rc, seqs;

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
	kv->c.windows = NULL;
	kv->elsize = c->type == MEDHA_KV_F16 ? 2 : 4;
	kv->block_els = bytes / kv->elsize / (size_t)c->n_blocks;
	kv->n_slots = c->n_blocks;
	if ((rc = window_layers(kv, c)) != 0) {
		medha_kvcache_free(kv);
		return rc;
	}
	seqs = c->max_seqs > 0 ? c->max_seqs : 256;
	if (kv->nl) {
		/* the layers used, each its own table: the same bytes or
		   fewer (SPP) */
		kv->n_slots = c->n_blocks * kv->nl;
		bytes = bytes / (size_t)c->n_layers * (size_t)kv->nl;
	}
	if ((rc = medha_kvb_init(&kv->bt, kv->n_slots,
	         kv->nl ? seqs * kv->nl : seqs, copy_block, kv)) != 0 ||
	    (kv->data = malloc(bytes)) == NULL) {
		medha_kvcache_free(kv);
		return rc != 0 ? rc : MEDHA_ENOMEM;
	}
	kv->c.max_seqs = seqs;
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
	free(kv->win);
	free(kv);
}

/* The table of seq's i-th layer (of those the cache keeps). */
static int
tab(const struct medha_kvcache *kv, int seq, int i)
{
	return kv->nl ? seq * kv->nl + i : seq;
}

/* Tables per sequence. */
static int
ntab(const struct medha_kvcache *kv)
{
	return kv->nl ? kv->nl : 1;
}

/* seq's first table, or NULL for a bad handle. */
static struct medha_kv_seq *
seq_of(const struct medha_kvcache *kv, int seq)
{
	if (seq < 0 || seq >= kv->c.max_seqs)
		return NULL;
	return medha_kvb_seq(&kv->bt, tab(kv, seq, 0));
}

int
medha_kv_seq_alloc(struct medha_kvcache *kv, int *seq)
{
	if (!kv->nl)
		return medha_kvb_seq_alloc(&kv->bt, seq);
	for (int s = 0; s < kv->c.max_seqs; s++)
		if (seq_of(kv, s) == NULL) {
			for (int i = 0; i < kv->nl; i++)
				(void)medha_kvb_seq_take(&kv->bt,
				    tab(kv, s, i));
			*seq = s;
			return 0;
		}
	return MEDHA_ENOSPACE;
}

int
medha_kv_seq_fork(struct medha_kvcache *kv, int dst, int src, int64_t from,
    int64_t to)
{
	const struct medha_kv_seq *s;
	int rc = 0, i;

	if (!kv->nl)
		return medha_kvb_fork(&kv->bt, dst, src, from, to);
	if (seq_of(kv, dst) == NULL || (s = seq_of(kv, src)) == NULL ||
	    to > s->len || from > to || from < 0)
		return MEDHA_EINVAL;
	/* a window layer must hold what dst's next query sees of [from,
	   to): a fork is exact or refused */
	for (i = 0; i < kv->nl; i++) {
		int64_t first = to - kv->win[i] + 1, b;
		if (kv->win[i] == 0)
			continue;
		first = first > from ? first : from;
		s = medha_kvb_seq(&kv->bt, tab(kv, src, i));
		for (b = first / MEDHA_KV_BLOCK; b * MEDHA_KV_BLOCK < to; b++)
			if (s->block[b] < 0)
				return MEDHA_EINVAL;
	}
	if (kv->bt.nfree < kv->nl) /* each layer's partial block */
		return MEDHA_ENOSPACE;
	for (i = 0; i < kv->nl && rc == 0; i++)
		rc = medha_kvb_fork(&kv->bt, tab(kv, dst, i), tab(kv, src, i),
		    from, to);
	if (rc != 0) /* dst as it was */
		while (--i > 0)
			(void)medha_kvb_set_len(&kv->bt, tab(kv, dst, i - 1),
			    from);
	return rc;
}

void
medha_kv_seq_free(struct medha_kvcache *kv, int seq)
{
	if (seq_of(kv, seq) == NULL)
		return;
	for (int i = 0; i < ntab(kv); i++)
		medha_kvb_seq_free(&kv->bt, tab(kv, seq, i));
}

int64_t
medha_kv_seq_len(const struct medha_kvcache *kv, int seq)
{
	const struct medha_kv_seq *s = seq_of(kv, seq);

	return s != NULL ? s->len : MEDHA_EINVAL;
}

int64_t
medha_kv_free_blocks(const struct medha_kvcache *kv)
{
	return kv->bt.nfree / ntab(kv);
}

int
medha_kv_reserve(struct medha_kvcache *kv, int seq, int64_t n)
{
	int rc = 0;

	if (seq_of(kv, seq) == NULL)
		return MEDHA_EINVAL;
	for (int i = 0; i < ntab(kv) && rc == 0; i++)
		rc = medha_kvb_reserve(&kv->bt, tab(kv, seq, i), n);
	return rc;
}

int
medha_kv_set_len(struct medha_kvcache *kv, int seq, int64_t n)
{
	int rc = 0;

	if (seq_of(kv, seq) == NULL)
		return MEDHA_EINVAL;
	/* (every table has the room, or the first says no) */
	for (int i = 0; i < ntab(kv) && rc == 0; i++)
		rc = medha_kvb_set_len(&kv->bt, tab(kv, seq, i), n);
	return rc;
}

void
medha_kv_window_drop(struct medha_kvcache *kv, int seq, int64_t qpos)
{
	if (seq_of(kv, seq) == NULL)
		return;
	for (int i = 0; i < kv->nl; i++) {
		int64_t first = qpos - kv->win[i] + 1;
		if (kv->win[i] > 0 && first >= MEDHA_KV_BLOCK)
			medha_kvb_drop(&kv->bt, tab(kv, seq, i),
			    first / MEDHA_KV_BLOCK);
	}
}

int64_t
medha_kv_held(const struct medha_kvcache *kv, int seq)
{
	int64_t n = 0;

	if (seq_of(kv, seq) == NULL)
		return 0;
	for (int i = 0; i < ntab(kv); i++)
		n += medha_kvb_held(&kv->bt, tab(kv, seq, i));
	return kv->nl ? n : n * kv->c.n_layers;
}

int
medha_kv_fill(struct medha_kvcache *kv, int seq, int64_t n)
{
	const size_t run = (size_t)MEDHA_KV_BLOCK * kv->c.head_dim;
	const int64_t planes = planes_of(kv);
	struct medha_kv_seq *s;
	int64_t b, from, p;
	int rc;

	if ((s = seq_of(kv, seq)) == NULL || n < 0)
		return MEDHA_EINVAL;
	from = s->len < n ? s->len / MEDHA_KV_BLOCK : 0;
	if ((rc = medha_kv_reserve(kv, seq, n)) != 0)
		return rc;
	/* zeros, written: fresh pages are mapped, so that attention reads
	   memory rather than the kernel's one page of zeros */
	for (int i = 0; i < ntab(kv) && s->len < n; i++) {
		const struct medha_kv_seq *t =
		    medha_kvb_seq(&kv->bt, tab(kv, seq, i));
		for (p = 0; p < planes; p++)
			for (b = from;
			     b < (n + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK; b++)
				if (t->block[b] >= 0)
					memset((char *)kv->data +
					        ((size_t)p * kv->n_slots +
					            t->block[b]) *
					            run * kv->elsize,
					    0, run * kv->elsize);
	}
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

	if (seq_of(kv, seq) == NULL || layer < 0 || layer >= kv->c.n_layers ||
	    (kv->nl && (layer < kv->lo || layer >= kv->lo + kv->nl)))
		return MEDHA_EINVAL;
	s = (struct medha_kv_seq *)medha_kv_table(kv, seq, layer);
	if (pos < 0 || n < 0 || pos + n > s->nblock * MEDHA_KV_BLOCK)
		return MEDHA_EINVAL;
	/* a block shared with another table is copied before a write */
	if ((rc = medha_kvb_own(&kv->bt, (int)(s - kv->bt.seq), pos, n)) != 0)
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

	if (seq_of(kv, seq) == NULL || layer < 0 || layer >= kv->c.n_layers ||
	    (kv->nl && (layer < kv->lo || layer >= kv->lo + kv->nl)) ||
	    which < 0 || which > 1 || head < 0 || head >= kv->c.n_kv_heads ||
	    pos < 0)
		return MEDHA_EINVAL;
	s = medha_kv_table(kv, seq, layer);
	if (pos >= s->nblock * MEDHA_KV_BLOCK ||
	    s->block[pos / MEDHA_KV_BLOCK] < 0)
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
