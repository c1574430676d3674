/*
 * place.c: where a request goes (impl.h: below life.c, above cache.c).
 * The ready replica not yet tried with the least predicted pending work
 * (the prefill seconds its STATUS reported, plus the prompt tokens
 * placed on it since at its seconds per token) that has the KV memory
 * for the request; cache-aware (cfg.cache_balance > 0), the one of those
 * with the longest recorded prefix of its prompt (cache.c) unless that
 * one is cache_balance seconds busier. The SUBMIT goes out through the
 * replica's client (net/pcli.h) without waiting; its answer comes back
 * through up.c.
 */
#include "serve/router/impl.h"

#include <string.h>

void
rt_sized(struct medha_router *r, struct rreq *q)
{
	const struct medha_reqspec *rs = &q->spec;

	q->prompt = rs->prompt_tokens > 0 ? rs->prompt_tokens
	    : rs->prompt != NULL ? (int64_t)strlen(rs->prompt) / 3 + 1
	                         : 1;
	q->need = q->prompt + rs->max_tokens;
	if (r->cfg.cache_balance > 0) {
		int64_t bs = MEDHA_KV_BLOCK;
		for (int i = 0; i < r->nup; i++)
			if (r->up[i].alive && r->up[i].now.block_size > 0) {
				bs = r->up[i].now.block_size;
				break;
			}
		q->nkeys = rt_cache_keys(rs, bs, &q->keys);
		q->kbs = rs->prompt_ids != NULL ? bs : 0;
		q->bl = rs->prompt_ids != NULL ? bs : 64 / 3;
	}
}

/* Replica u's KV block size, tokens (as its last STATUS said). */
static int64_t
block_of(const struct up *u)
{
	return u->now.block_size > 0 ? u->now.block_size : MEDHA_KV_BLOCK;
}

/* Replica u's predicted pending work, s. */
static double
work_of(const struct up *u)
{
	return u->now.work + (double)u->placed * u->s_per_tok;
}

/*
 * The replica for q: the least predicted pending work among the ready
 * ones not yet tried that have KV memory for it, else among all ready
 * ones not yet tried; ties go round. Cache-aware, the one of those with
 * the longest recorded prefix of q's prompt instead (ties: the least
 * work), unless its work exceeds the least's by more than
 * cache_balance; *hit gets the blocks of that prefix. -1 if none is
 * left.
 */
static int
choose(struct medha_router *r, const struct rreq *q, int64_t *hit)
{
	int best = -1, best_fits = 0, pick;
	double best_w = 0;
	int64_t m, best_m = 0;

	*hit = 0;
	for (int k = 0; k < r->nup; k++) {
		int i = (r->rr + k) % r->nup;
		struct up *u = &r->up[i];
		if (!u->alive || !u->ready || (q->tried[i / 64] >> (i % 64) & 1))
			continue;
		int64_t free_kv = (u->now.kv_blocks - u->now.kv_used) *
		    u->now.block_size - u->placed_kv;
		int fits = q->need <= free_kv;
		double w = work_of(u);
		if (best < 0 || fits > best_fits ||
		    (fits == best_fits &&
		        (w < best_w ||
		            (w == best_w && u->live < r->up[best].live)))) {
			best = i;
			best_fits = fits;
			best_w = w;
		}
	}
	r->rr = (r->rr + 1) % r->nup;
	if (best < 0 || !(r->cfg.cache_balance > 0) || q->nkeys == 0)
		return best;
	pick = best;
	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		if (!u->alive || !u->ready || (q->tried[i / 64] >> (i % 64) & 1))
			continue;
		int64_t free_kv = (u->now.kv_blocks - u->now.kv_used) *
		    u->now.block_size - u->placed_kv;
		double w = work_of(u);
		if ((q->need <= free_kv) != best_fits ||
		    w > best_w + r->cfg.cache_balance ||
		    (q->kbs != 0 && q->kbs != block_of(u)) ||
		    (m = rt_cache_match(&u->cache, q->keys, q->nkeys)) == 0)
			continue;
		if (m > best_m ||
		    (m == best_m && w < work_of(&r->up[pick]))) {
			pick = i;
			best_m = m;
		}
	}
	*hit = best_m;
	return pick;
}

/* q's SUBMIT to replica u (its placed_n counted first): 0, or -1 (not
 * sent: out of memory). */
static int
submit(struct up *u, struct rreq *q)
{
	char why[256];

	q->placed_n++;
	if (medha_pcli_submit(u->pc, &q->spec,
	        q->handle << 16 | (q->placed_n & 0xffffu), DEAD, why,
	        sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "request %s: %s", q->id, why);
		return -1;
	}
	return 0;
}

int
rt_place(struct medha_router *r, struct rreq *q)
{
	int64_t hit;
	int i = choose(r, q, &hit);
	struct up *u;

	if (i < 0)
		return -1;
	u = &r->up[i];
	if (submit(u, q) != 0)
		return -1;
	q->rep = i;
	q->sent = medha_now() - r->t0;
	q->tried[i / 64] |= 1ull << (i % 64);
	/* the replica computes only what its cache does not hold */
	q->cached = hit * q->bl < q->prompt ? hit * q->bl : q->prompt - 1;
	u->placed += q->prompt - q->cached;
	u->placed_kv += q->need;
	if (r->cfg.cache_balance > 0 && q->nkeys > 0 &&
	    (q->kbs == 0 || q->kbs == block_of(u)))
		rt_cache_add(&u->cache, q->keys, q->nkeys, q->kbs != 0
		        ? u->now.kv_blocks /* keys of its own blocks */
		        : u->now.kv_blocks * block_of(u) / MEDHA_KV_BLOCK);
	r->cache_placed += hit > 0;
	return 0;
}
