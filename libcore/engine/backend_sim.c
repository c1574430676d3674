/*
 * backend_sim.c: the sim backend (backend_sim.h). A forward call builds
 * the batch's cost the way the scheduler does (sched/batchcost.h: each
 * sequence's tokens after its cached ones; one token with logits after a
 * cached prefix counts as a decode), sleeps until the predicted latency
 * (divided by the speed-up) has passed since the call began, and hands
 * back placeholder tokens.
 *
 * It holds no K/V, but it keeps the block tables of the cpu backend's
 * paged cache (cpu/kvcache.h, one f16 element a position: 64 bytes a
 * block) so that prefix caching's forks and trims (MEDHA_BACKEND_FORK)
 * share and count blocks exactly as the cpu backend does: a live sim
 * replica caches prefixes, and its free blocks follow the scheduler's.
 */
#include "engine/backend_sim.h"

#include "cpu/kvcache.h"
#include "sched/batchcost.h"
#include "sched/kvplace.h"
#include "sched/pred.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sim {
	struct medha_pred pred;
	struct medha_kvplace pl; /* one group, for the cost model */
	struct medha_kvlease lease;
	double speed;
	int last; /* runs the last stage (spp 1: the only one) */
	int vocab;
	struct medha_kvcache *kv; /* block tables only (see above) */
};

int32_t
medha_backend_sim_token(int64_t pos, int vocab)
{
	uint64_t z = medha_mix64((uint64_t)pos + 0x9e3779b97f4a7c15ULL);

	return (int32_t)(z % (uint64_t)(vocab > 0 ? vocab : 1));
}

static int
sim_seq_alloc(void *impl, int *seq)
{
	return medha_kv_seq_alloc(((struct sim *)impl)->kv, seq);
}

static void
sim_seq_free(void *impl, int seq)
{
	medha_kv_seq_free(((struct sim *)impl)->kv, seq);
}

static int64_t
sim_seq_len(void *impl, int seq)
{
	return medha_kv_seq_len(((struct sim *)impl)->kv, seq);
}

static int64_t
sim_free_blocks(void *impl)
{
	return medha_kv_free_blocks(((struct sim *)impl)->kv);
}

static int
sim_seq_fork(void *impl, int dst, int src, int64_t from, int64_t to)
{
	return medha_kv_seq_fork(((struct sim *)impl)->kv, dst, src, from, to);
}

static int
sim_seq_trim(void *impl, int seq, int64_t n)
{
	struct sim *s = impl;
	int64_t len = medha_kv_seq_len(s->kv, seq);

	if (len < 0 || n > len)
		return MEDHA_EINVAL;
	return medha_kv_set_len(s->kv, seq, n);
}

static int
sim_forward(void *impl, const struct medha_fwd *f, char *why, size_t whylen)
{
	struct sim *s = impl;
	const struct medha_batch *b = f->b;
	struct medha_cost a;
	struct medha_lat lat;
	struct timespec until;
	double t0 = medha_now(), t;
	int64_t need = 0;

	memset(&a, 0, sizeof(a));
	for (int i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *q = &b->seq[i];
		/* KVP: the cache holds this group's piece, from its base */
		int64_t lp = q->pos - (f->kv != NULL ? f->kv[i].base : 0);
		int64_t end = lp + q->n_tokens, len;

		if ((len = medha_kv_seq_len(s->kv, q->seq)) < 0)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d (batch entry %d) is not allocated",
			    q->seq, i);
		if (f->kv != NULL && !f->kv[i].append)
			continue;
		if (lp < 0 || lp > len)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: position %lld but %lld cached",
			    q->seq, (long long)q->pos, (long long)len);
		/* new blocks, and copies of shared ones (copy on write) */
		need += medha_kvb_write_need(&s->kv->bt, q->seq, lp, end);
	}
	if (need > medha_kv_free_blocks(s->kv))
		return medha_why(why, whylen, MEDHA_ENOSPACE,
		    "%lld KV blocks needed, %lld free", (long long)need,
		    (long long)medha_kv_free_blocks(s->kv));
	for (int i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *q = &b->seq[i];
		int decode = q->n_tokens == 1 && q->pos > 0 &&
		    q->logits != MEDHA_LOGITS_NONE;

		medha_cost_add(&a, &s->pred, &s->pl, &s->lease, q->n_tokens,
		    q->pos, decode, q->logits != MEDHA_LOGITS_NONE, NULL);
	}
	for (int i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *q = &b->seq[i];
		int64_t end = q->pos + q->n_tokens, lp = q->pos;

		if (f->samplers != NULL && f->samplers[i] != NULL)
			f->tokens[i] = medha_backend_sim_token(end, s->vocab);
		if (f->kv != NULL) {
			if (!f->kv[i].append)
				continue;
			end -= f->kv[i].base;
			lp -= f->kv[i].base;
		}
		/* counted above: these take no more than the pool has */
		(void)medha_kv_reserve(s->kv, q->seq, end);
		(void)medha_kvb_own(&s->kv->bt, q->seq, lp, end - lp);
		(void)medha_kv_set_len(s->kv, q->seq, end);
	}
	lat = medha_cost_latency(&a, &s->pred, 1);
	t = t0 + (s->pred.spp == 1 ? lat.latency
	              : s->last  ? lat.last
	                         : lat.stage) /
	        s->speed;
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
	    EINTR)
		;
	return 0;
}

static void
sim_close(void *impl)
{
	struct sim *s = impl;

	medha_pred_free(&s->pred);
	medha_kvcache_free(s->kv);
	free(s);
}

static const struct medha_backend_ops sim_ops = {
    .seq_alloc = sim_seq_alloc,
    .seq_free = sim_seq_free,
    .forward = sim_forward,
    .close = sim_close,
    .seq_len = sim_seq_len,
    .free_blocks = sim_free_blocks,
    .seq_fork = sim_seq_fork,
    .seq_trim = sim_seq_trim,
};

int
medha_backend_sim_open(struct medha_backend **be,
    const struct medha_backend_sim_opts *o, char *why, size_t whylen)
{
	const struct medha_gpu *g;
	struct medha_pred_model m;
	struct medha_backend_info info;
	struct medha_kv_config kc = {0};
	struct sim *s;
	int64_t cap;
	int rc, adv;

	*be = NULL;
	if (o->gpu == NULL || (g = medha_gpu_find(o->gpu)) == NULL)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "GPU %s: unknown", o->gpu ? o->gpu : "(none)");
	if (o->model == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL, "no model");
	if ((rc = medha_model_resolve_why(o->model, &m, why, whylen)) != 0)
		return rc;
	if (o->max_seqs < 0 || o->kv_blocks < 0 || o->speed < 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "negative max_seqs, kv_blocks or speed");
	if (o->stage < 0 || o->stage >= (o->spp > 0 ? o->spp : 1))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "stage %d of spp %d", o->stage, o->spp);
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = medha_pred_init(&s->pred, g, &m, o->tp > 0 ? o->tp : 1,
	         o->spp > 0 ? o->spp : 1, o->kvp > 0 ? o->kvp : 1)) != 0) {
		free(s);
		return medha_why(why, whylen, rc,
		    "layout tp %d spp %d kvp %d does not fit %s", o->tp, o->spp,
		    o->kvp, m.name);
	}
	if (o->ep && (rc = medha_pred_set_ep(&s->pred, why, whylen)) != 0) {
		free(s);
		return rc;
	}
	if (o->table != NULL &&
	    (rc = medha_pred_load_table(&s->pred, o->table, why, whylen)) !=
	        0) {
		sim_close(s);
		return rc;
	}
	cap = o->kv_blocks > 0
	    ? o->kv_blocks
	    : medha_pred_kv_capacity(&s->pred, 0.9) / MEDHA_KV_BLOCK;
	if (cap < 1) {
		sim_close(s);
		return medha_why(why, whylen, MEDHA_ENOSPACE,
		    "%s on %s leaves no memory for KV", m.name, g->name);
	}
	s->speed = o->speed > 0 ? o->speed : 1;
	s->vocab = m.c.vocab;
	kc.n_layers = kc.n_kv_heads = kc.head_dim = 1;
	kc.type = MEDHA_KV_F16;
	kc.n_blocks = cap;
	/* sequences kept for prefix caching hold a block at least: room for
	   them beyond the max_seqs announced, as the cpu backend has */
	adv = o->max_seqs > 0 ? o->max_seqs : 1024;
	kc.max_seqs = adv + (cap < INT32_MAX - adv ? (int)cap : 0);
	if (cap > INT32_MAX || kc.max_seqs <= adv ||
	    (rc = medha_kvcache_init(&s->kv, &kc)) != 0) {
		sim_close(s);
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "block tables for %lld KV blocks: out of memory",
		    (long long)cap);
	}
	medha_kvplace_init(&s->pl, 1, MEDHA_KV_BLOCK, (int64_t)1 << 40, 0);
	s->lease.n_groups = 1;
	s->lease.groups[0] = 0;
	memset(&info, 0, sizeof(info));
	info.name = "sim";
	info.shape = m.c;
	medha_stage_layers(m.c.n_layers, s->pred.spp, o->stage, &info.layer_lo,
	    &info.layer_hi);
	s->last = o->stage == s->pred.spp - 1;
	info.block_size = MEDHA_KV_BLOCK;
	info.n_blocks = cap;
	info.max_seqs = adv;
	info.ep = s->pred.ep;
	if ((rc = medha_backend_new(be, &sim_ops, s, &info)) != 0) {
		sim_close(s);
		return medha_why(why, whylen, rc, "out of memory");
	}
	return 0;
}
