/*
 * cuda_kv.c: the cuda backend's paged KV cache and a batch's
 * descriptors. The blocks live on the device (kernels.h's layout: per
 * layer a K and a V pool of n_blocks blocks of (kv heads, 16, head_dim));
 * which blocks a sequence holds is kvblocks.h's tables on the host, as
 * the cpu cache's (forks share full blocks; a block is copied on the
 * device before a write to it while shared), mirrored to the device with
 * each batch, together with each sequence's and token's positions, in
 * one copy.
 */
#include "cuda/cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t
cuda_kv_block_bytes(const struct medha_cuda *c)
{
	/* K and V of one block, every layer held */
	return (size_t)(c->hi - c->lo) * 2 * (size_t)c->nkv * MEDHA_KV_BLOCK *
	    (size_t)c->c.head_dim * 2;
}

/* Bytes of one block in one pool (one layer's K or V). */
static size_t
run_bytes(const struct medha_cuda *c)
{
	return (size_t)c->nkv * MEDHA_KV_BLOCK * (size_t)c->c.head_dim * 2;
}

/*
 * The tables' copy (a fork's partial block, a write to a shared one):
 * block b's K and V of every layer held into block d, queued on the
 * stream ahead of the batch that writes d. A pool of one layer can pass
 * cudaMemcpy2D's pitch limit, so one copy per pool (2 per layer, 64 for
 * Llama-3-8B: once per fork, not per step).
 */
static int
kv_copy(void *arg, int32_t d, int32_t b)
{
	struct medha_cuda *c = arg;
	const size_t run = run_bytes(c), pool = run * (size_t)c->kv.bt.n_blocks;
	char *base = c->kv.kvmem;
	int e;

	for (int j = 0; j < 2 * (c->hi - c->lo); j++)
		if ((e = cudaMemcpyAsync(base + (size_t)j * pool +
		             (size_t)d * run,
		         base + (size_t)j * pool + (size_t)b * run, run,
		         cudaMemcpyDeviceToDevice, c->st)) != 0)
			return MEDHA_EIO; /* the runtime's last error says why
			                     (cuda_fwd.c's reserve asks it) */
	return 0;
}

int
cuda_kv_init(struct medha_cuda *c, int64_t n_blocks, char *why, size_t whylen)
{
	const size_t pool = (size_t)n_blocks * run_bytes(c);
	/* prefix caching keeps the sequences of requests that ended, each
	   with a block at least: tables for them beyond max_seqs, as the
	   cpu backend has */
	const int tables = c->kv.max_seqs +
	    (int)(n_blocks < (1 << 24) ? n_blocks : 1 << 24);
	int rc, l;

	if ((rc = medha_kvb_init(&c->kv.bt, n_blocks, tables, kv_copy, c)) !=
	        0 ||
	    (c->kv.kvl = calloc((size_t)c->c.n_layers, sizeof(*c->kv.kvl))) ==
	        NULL ||
	    (c->kv.seen = calloc((size_t)tables, 1)) == NULL)
		return medha_why(why, whylen, rc != 0 ? rc : MEDHA_ENOMEM,
		    "the KV cache's tables: %s",
		    medha_strerror(rc != 0 ? rc : MEDHA_ENOMEM));
	if ((rc = cuda_malloc(&c->kv.kvmem, pool * 2 * (size_t)(c->hi - c->lo),
	         why, whylen, "the KV cache")) != 0)
		return rc;
	/* zeros: a block never written (seq_fill) holds finite K/V */
	if ((rc = cuda_ok(cudaMemsetAsync(c->kv.kvmem, 0,
	                      pool * 2 * (size_t)(c->hi - c->lo), c->st),
	         "clearing the KV cache", why, whylen)) != 0)
		return rc;
	for (l = c->lo; l < c->hi; l++) {
		char *base =
		    (char *)c->kv.kvmem + pool * 2 * (size_t)(l - c->lo);
		c->kv.kvl[l] = (struct medha_k_kv_layer){base, base + pool,
		    c->kv.kv_type == MEDHA_KV_F16 ? MEDHA_K_F16 : MEDHA_K_BF16,
		    c->nkv, c->c.head_dim, MEDHA_KV_BLOCK};
	}
	return 0;
}

void
cuda_kv_free(struct medha_cuda *c)
{
	medha_kvb_free(&c->kv.bt);
	free(c->kv.seen);
	free(c->kv.kvl);
	cudaFree(c->kv.kvmem);
	c->kv.seen = NULL;
	c->kv.kvl = NULL;
	c->kv.kvmem = NULL;
}

/* KVP: where entry i's cache starts, whether it appends. */
static int64_t
base_of(const struct medha_cuda_call *f, int i)
{
	return f->kv != NULL ? f->kv[i].base : 0;
}

static int
appends(const struct medha_cuda_call *f, int i)
{
	return f->kv == NULL || f->kv[i].append;
}

/* Keys entry i attends to in its cache (after its append). */
int64_t
cuda_keys_of(const struct medha_cuda *c, const struct medha_cuda_call *f, int i)
{
	const struct medha_batch_seq *s = &f->b->seq[i];

	return appends(f, i) ? s->pos - base_of(f, i) + s->n_tokens
	                     : medha_kvb_len(&c->kv.bt, s->seq);
}

/* medha_batch_check_cache()'s view of the cache */
static int64_t
kv_len(const void *bt, int seq)
{
	return medha_kvb_len(bt, seq);
}

/* The checks of a batch against the cache, as every backend's. */
int
cuda_check_batch(struct medha_cuda *c, const struct medha_cuda_call *f,
    int claim, char *why, size_t whylen)
{
	return medha_batch_check_cache(f->b, f->kv, kv_len, &c->kv.bt,
	    (unsigned char *)c->kv.seen, claim, c->lo, why, whylen);
}

/* Room for a descriptor of n bytes from *at, 16-aligned. */
static size_t
take(size_t *at, size_t n)
{
	size_t o = (*at + 15) & ~(size_t)15;

	*at = o + n;
	return o;
}

/*
 * The batch's descriptors into c->s.desc and onto the device (queued on
 * the stream). kv_cap: the max_kv the kernels are told (0: the batch's
 * own; a graph's bucket otherwise, at least that).
 */
int
cuda_desc_build(struct medha_cuda *c, const struct medha_cuda_call *f,
    int64_t kv_cap, char *why, size_t whylen)
{
	const struct medha_batch *b = f->b;
	struct cuda_desc *d = &c->s.desc;
	const size_t S = (size_t)b->n_seqs, T = (size_t)b->n_tokens;
	size_t at = 0, B = 0;
	int64_t max_kv = 0, off = 0;
	int max_q = 0, i, j, t, r, rc;

	for (i = 0; i < b->n_seqs; i++)
		B += (size_t)c->kv.bt.seq[b->seq[i].seq].nblock;
	d->o_qstart = take(&at, 4 * S);
	d->o_nq = take(&at, 4 * S);
	d->o_pos = take(&at, 8 * S);
	d->o_base = take(&at, 8 * S);
	d->o_kvlen = take(&at, 8 * S);
	d->o_toff = take(&at, 8 * S);
	d->o_app = take(&at, 4 * S);
	d->o_tpos = take(&at, 8 * T);
	d->o_tok = take(&at, 4 * T);
	/* room for a row a token, not the rows this batch marks: a decode
	   graph (keyed by the rows the call asks for) must find the block
	   tables at the same offset in every step it replays */
	d->o_rows = take(&at, 4 * T);
	d->o_table = take(&at, 4 * (B > 0 ? B : 1));
	d->len = at;
	if (at > d->cap) {
		size_t cap = at + at / 2 + 4096;
		cudaFreeHost(d->h);
		cudaFree(d->d);
		d->h = d->d = NULL;
		d->cap = 0;
		cuda_graph_free(c); /* they read the old buffer */
		if ((rc = cuda_ok(cudaMallocHost((void **)&d->h, cap),
		         "pinned descriptors", why, whylen)) != 0)
			return rc;
		if (cuda_malloc((void **)&d->d, cap, why, whylen,
		        "descriptors") != 0) {
			cudaFreeHost(d->h);
			d->h = NULL;
			return MEDHA_ENOMEM;
		}
		d->cap = cap;
	}
	/* the last batch's copy reads d->h: wait for it */
	if ((rc = cuda_sync(c, "a batch's descriptors", why, whylen)) != 0)
		return rc;
#define H(o, ty) ((ty *)(d->h + d->o))
	for (i = 0, t = 0, r = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *s = &b->seq[i];
		const struct medha_kv_seq *q = &c->kv.bt.seq[s->seq];
		int64_t kl = cuda_keys_of(c, f, i);
		H(o_qstart, int32_t)[i] = t;
		H(o_nq, int32_t)[i] = s->n_tokens;
		H(o_pos, int64_t)[i] = s->pos;
		H(o_base, int64_t)[i] = base_of(f, i);
		H(o_kvlen, int64_t)[i] = kl;
		H(o_toff, int64_t)[i] = off;
		H(o_app, int32_t)[i] = appends(f, i);
		memcpy(H(o_table, int32_t) + off, q->block,
		    sizeof(int32_t) * (size_t)q->nblock);
		off += q->nblock;
		for (j = 0; j < s->n_tokens; j++, t++) {
			H(o_tpos, int64_t)[t] = s->pos + j;
			H(o_tok, int32_t)[t] =
			    b->tokens != NULL ? b->tokens[t] : 0;
			if (s->logits == MEDHA_LOGITS_ALL ||
			    (s->logits == MEDHA_LOGITS_LAST &&
			        j == s->n_tokens - 1))
				H(o_rows, int32_t)[r++] = t;
		}
		if (s->n_tokens > max_q)
			max_q = s->n_tokens;
		if (kl > max_kv)
			max_kv = kl;
	}
#undef H
	if ((rc = cuda_ok(cudaMemcpyAsync(d->d, d->h, d->len,
	                      cudaMemcpyHostToDevice, c->st),
	         "copying a batch's descriptors", why, whylen)) != 0)
		return rc;
	d->s = (struct medha_k_seqs){(const int32_t *)(d->d + d->o_qstart),
	    (const int32_t *)(d->d + d->o_nq),
	    (const int64_t *)(d->d + d->o_pos),
	    (const int64_t *)(d->d + d->o_base),
	    (const int64_t *)(d->d + d->o_kvlen),
	    (const int32_t *)(d->d + d->o_table),
	    (const int64_t *)(d->d + d->o_toff),
	    (const int32_t *)(d->d + d->o_app), b->n_seqs, b->n_tokens, max_q,
	    kv_cap > max_kv ? kv_cap : max_kv};
	return 0;
}

/* Scratch for n_tokens rows and nrows logits rows. */
int
cuda_grow(struct medha_cuda *c, int n_tokens, int nrows, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const size_t T = (size_t)n_tokens, d = (size_t)mc->dim;
	int rc;

	if (n_tokens > c->s.cap_t) {
		cuda_graph_free(c);
		cudaFree(c->s.x), cudaFree(c->s.qkv), cudaFree(c->s.y);
		cudaFree(c->s.gu), cudaFree(c->s.attf), cudaFree(c->s.lse);
		cudaFree(c->s.xn), cudaFree(c->s.att), cudaFree(c->s.act);
		c->s.x = c->s.qkv = c->s.y = c->s.gu = c->s.attf = c->s.lse =
		    NULL;
		c->s.xn = c->s.att = c->s.act = NULL;
		c->s.cap_t = 0;
		if ((rc = cuda_malloc((void **)&c->s.x, T * d * 4, why, whylen,
		         "the residual stream")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.y, T * d * 4, why, whylen,
		         "products")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.qkv,
		         T * (size_t)c->qkvd * 4, why, whylen, "Q, K and V")) !=
		        0 ||
		    (rc = cuda_malloc((void **)&c->s.gu, T * (size_t)c->gw * 8,
		         why, whylen, "gate and up")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.attf,
		         T * (size_t)c->qd * 4, why, whylen,
		         "attention parts")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.lse, T * (size_t)c->nh * 4,
		         why, whylen, "attention lse")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.xn, T * d * 2, why, whylen,
		         "norms")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.att, T * (size_t)c->qd * 2,
		         why, whylen, "attention")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.act, T * (size_t)c->gw * 2,
		         why, whylen, "SwiGLU")) != 0 ||
		    (rc = cuda_moe_grow(c, n_tokens, why, whylen)) != 0)
			return rc;
		c->s.cap_t = n_tokens;
	}
	if (nrows > c->s.cap_r) {
		cuda_graph_free(c);
		cudaFree(c->s.hrows), cudaFree(c->s.hn), cudaFree(c->s.logits);
		cudaFree(c->s.ids);
		cudaFreeHost(c->s.hids);
		c->s.hrows = c->s.logits = NULL;
		c->s.hn = NULL;
		c->s.ids = c->s.hids = NULL;
		c->s.cap_r = 0;
		if ((rc = cuda_malloc((void **)&c->s.hrows,
		         (size_t)nrows * d * 4, why, whylen, "logits rows")) !=
		        0 ||
		    (rc = cuda_malloc((void **)&c->s.hn, (size_t)nrows * d * 2,
		         why, whylen, "logits rows")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.logits,
		         (size_t)nrows * (size_t)mc->vocab * 4, why, whylen,
		         "logits")) != 0 ||
		    (rc = cuda_malloc((void **)&c->s.ids, (size_t)nrows * 4,
		         why, whylen, "argmax")) != 0)
			return rc;
		if ((rc = cuda_ok(cudaMallocHost((void **)&c->s.hids,
		                      (size_t)nrows * 4),
		         "pinned argmax", why, whylen)) != 0)
			return rc;
		c->s.cap_r = nrows;
	}
	return 0;
}

/* ---- the sequences (cuda.h) ---- */

int
medha_cuda_seq_alloc(struct medha_cuda *c, int *seq)
{
	return medha_kvb_seq_alloc(&c->kv.bt, seq);
}

void
medha_cuda_seq_free(struct medha_cuda *c, int seq)
{
	medha_kvb_seq_free(&c->kv.bt, seq);
}

int64_t
medha_cuda_seq_len(struct medha_cuda *c, int seq)
{
	return medha_kvb_len(&c->kv.bt, seq);
}

int64_t
medha_cuda_free_blocks(struct medha_cuda *c)
{
	return c->kv.bt.nfree;
}

/* The cache was cleared at open and only ever holds finite K/V: a
   profiler's positions need blocks and a length, nothing written. */
int
medha_cuda_seq_fill(struct medha_cuda *c, int seq, int64_t n)
{
	int rc;

	if (medha_kvb_len(&c->kv.bt, seq) < 0 || n < 0)
		return MEDHA_EINVAL;
	if ((rc = medha_kvb_reserve(&c->kv.bt, seq, n)) != 0)
		return rc;
	return medha_kvb_set_len(&c->kv.bt, seq, n);
}

/* Prefix caching: the tables share dst's full blocks with src and copy
   the partial one on the device (kv_copy, on the stream: the next
   batch, queued after it, reads it). */
int
medha_cuda_seq_fork(struct medha_cuda *c, int dst, int src, int64_t from,
    int64_t to)
{
	if (cudaSetDevice(c->dev) != 0)
		return MEDHA_EIO;
	return medha_kvb_fork(&c->kv.bt, dst, src, from, to);
}

int
medha_cuda_seq_trim(struct medha_cuda *c, int seq, int64_t n)
{
	int64_t len = medha_kvb_len(&c->kv.bt, seq);

	if (len < 0 || n > len)
		return MEDHA_EINVAL;
	return medha_kvb_set_len(&c->kv.bt, seq, n);
}
