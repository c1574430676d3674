/*
 * sched_preempt.c: the scheduler core's memory on demand (sched.h,
 * enum medha_reserve). Under reserve est a request is admitted with
 * the blocks of its prompt and of an estimate of its output: SGLang's
 * new_token_ratio times the output tokens it may still produce, a ratio
 * that starts at MEDHA_EST_INIT, falls toward MEDHA_EST_FLOOR with each
 * batch that decodes, and goes back up to MEDHA_EST_INIT when a
 * request is preempted; but at most MEDHA_EST_SPAN times the running
 * mean output of the requests completed so far (MEDHA_EST_COLD tokens
 * before the first), since clients' caps (a chat request without
 * max_tokens gets the whole context) say little of what the model
 * writes. A request whose prompt is preempt_below tokens
 * or more reserves its prompt and all its max_tokens and is never
 * preempted (the Medha paper's promise to long requests: recomputing
 * one costs minutes). Under reserve vllm every request reserves its
 * prompt (and its next token) and any may be preempted, the newest
 * first; under reserve max every request reserves everything and
 * nothing here runs. A request with a presence or frequency penalty
 * (over its output so far, which a recomputation would see as prompt)
 * is never preempted either. A sampled request (temperature > 0) may
 * be: its worker's generator starts again from its seed when it comes
 * back, so its later tokens are drawn as likely, not the same.
 *
 * At the start of each batch every decode that will run takes the
 * block its next token needs (kvplace's grow). Where its group has
 * none, a decoding request that is not in flight and may be preempted,
 * holding blocks on that group, is preempted: the one with the fewest
 * tokens computed (its recomputation costs least), the latest TTFT
 * deadline first among equals (vllm: the latest arrival). The request
 * in need may be that one. A preempted request keeps its handle, its
 * deadline and its arrival (its place in every policy's order), its
 * output so far (spec.prompt_tokens grows by it, resumed says by how
 * much: its next prefill recomputes them and the token of its last
 * chunk is its next output), and with the prefix cache on its KV
 * becomes cache entries (sched_prefix_preempt), so that its admission
 * again recomputes only what was evicted meanwhile.
 */
#include "sched/sched_impl.h"

#include <string.h>

static const char *reserve_names[] = {"est", "max", "vllm"};
#define NRESERVE (int)(sizeof(reserve_names) / sizeof(reserve_names[0]))

int
medha_reserve_parse(const char *name)
{
	for (int i = 0; i < NRESERVE; i++)
		if (strcmp(name, reserve_names[i]) == 0)
			return i;
	return -1;
}

const char *
medha_reserve_name(int reserve)
{
	if (reserve < 0 || reserve >= NRESERVE)
		return "?";
	return reserve_names[reserve];
}

/* Whether r may be preempted (and so reserves by estimate). */
int
sched_preemptible(const struct medha_sched *s, const struct medha_req *r)
{
	if (s->cfg.reserve == MEDHA_RESERVE_MAX)
		return 0;
	/* penalties over the output so far would count its tokens as
	   prompt once they are recomputed: such a request is not cut */
	if (r->spec.sampling.presence_penalty != 0 ||
	    r->spec.sampling.frequency_penalty != 0)
		return 0;
	if (s->cfg.reserve == MEDHA_RESERVE_VLLM)
		return 1;
	return !sched_long(s, r);
}

int
sched_long(const struct medha_sched *s, const struct medha_req *r)
{
	return r->spec.prompt_tokens - r->resumed >= s->preempt_below;
}

int64_t
sched_kv_admit(const struct medha_sched *s, const struct medha_req *r)
{
	int64_t rest = r->spec.max_tokens - r->resumed, est;

	if (!sched_preemptible(s, r) || rest <= 0)
		return sched_kv_need(r);
	if (s->cfg.reserve == MEDHA_RESERVE_VLLM)
		est = 1; /* its next token */
	else {
		double cap = s->out_mean > 0 ? MEDHA_EST_SPAN * s->out_mean
		                             : MEDHA_EST_COLD;
		double e = s->ratio * (double)rest;
		est = (int64_t)((e < cap ? e : cap) + 0.999999);
	}
	est = est < 1 ? 1 : est > rest ? rest : est;
	return r->spec.prompt_tokens + est;
}

void
sched_est_done(struct medha_sched *s, const struct medha_req *r)
{
	double x = (double)r->decoded;

	s->out_mean = s->out_mean > 0
	    ? (1 - MEDHA_EST_NEW) * s->out_mean + MEDHA_EST_NEW * x
	    : (x > 1 ? x : 1);
}

int64_t
sched_preempt_default(const struct medha_sched *s)
{
	int64_t lo = 1, hi = s->kv.cap_blocks * s->cfg.block_size * s->kv.kvp;

	if (medha_sched_prefill_alone(s, hi) < MEDHA_PREEMPT_SECS)
		return hi + 1; /* every prompt that fits is short */
	while (lo < hi) {      /* the least prompt whose prefill takes that */
		int64_t mid = lo + (hi - lo) / 2;
		if (medha_sched_prefill_alone(s, mid) >= MEDHA_PREEMPT_SECS)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Whether preempting r frees room for needy: r holds a piece on group
 * g, or (g < 0: needy needs a new group) on a group needy does not use,
 * or r is needy. */
static int
frees_room(const struct medha_req *r, const struct medha_req *needy, int g)
{
	if (r == needy)
		return 1;
	for (int i = 0; i < r->kv.n_groups; i++) {
		int k = r->kv.groups[i], mine = 0;
		if (g >= 0) {
			if (k == g)
				return 1;
			continue;
		}
		for (int j = 0; j < needy->kv.n_groups; j++)
			mine |= needy->kv.groups[j] == k;
		if (!mine)
			return 1;
	}
	return 0;
}

/* The request to preempt for needy's block on group g, or NULL. */
static struct req *
victim(struct medha_sched *s, const struct medha_req *needy, int g)
{
	struct req *best = NULL;

	for (int i = 0; i < s->nactive; i++) {
		struct req *q = &s->reqs[s->active[i]];
		const struct medha_req *r = &q->pub, *b;
		if (r->state != MEDHA_REQ_DECODE || r->busy == 1 ||
		    !sched_preemptible(s, r) || !frees_room(r, needy, g))
			continue;
		if (best == NULL) {
			best = q;
			continue;
		}
		b = &best->pub;
		if (s->cfg.reserve == MEDHA_RESERVE_VLLM) {
			if (r->spec.arrival > b->spec.arrival ||
			    (r->spec.arrival == b->spec.arrival &&
			        r->handle > b->handle))
				best = q;
		} else if (r->kv_tokens < b->kv_tokens ||
		    (r->kv_tokens == b->kv_tokens &&
		        (r->deadline > b->deadline ||
		            (r->deadline == b->deadline &&
		                r->handle > b->handle))))
			best = q;
	}
	return best;
}

/* r's outputs so far join its prompt: its next prefill recomputes them */
void
sched_fold_outputs(struct medha_req *r)
{
	r->spec.prompt_tokens += r->decoded - r->resumed;
	r->resumed = r->decoded;
}

/* q (admitted, its outputs folded, its KV let go on the workers' side)
 * waits again, its prefill planned from what the index holds of it;
 * its handle, deadline and arrival stay. */
void
sched_requeue(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t P = r->spec.prompt_tokens;
	int full, part;

	medha_kvplace_release(&s->kv, &r->kv);
	s->nadmitted--;
	r->state = MEDHA_REQ_WAITING;
	r->busy = 0;
	r->kv_tokens = 0;
	r->cached = 0;
	if (q->keys != NULL)
		r->cached = medha_prefix_match(&s->px, r->spec.cache_salt,
		    q->keys, q->nkeys < P - 1 ? q->nkeys : P - 1,
		    s->kv.group_tokens, &full, &part);
	r->sched_prefill = r->cached;
	r->prefill_alone = sched_plan_alone(s, r->cached, P, r->cum);
}

/* Preempt q (decoding, not in flight): back to waiting, as above. */
static int
preempt(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t kv = r->kv_tokens;
	int rc = 0;

	s->preemptions++;
	r->preempted++;
	sched_fold_outputs(r);
	if (s->cfg.prefix_cache)
		rc = sched_prefix_preempt(s, q, kv);
	else
		sched_op(s, MEDHA_KVOP_TRIM, r->handle, 0, 0, 0);
	sched_requeue(s, q);
	if (s->ratio < MEDHA_EST_INIT)
		s->ratio = MEDHA_EST_INIT;
	medha_log(MEDHA_LOG_DEBUG,
	    "request %s preempted (%d): %lld tokens computed, %lld of them "
	    "cached",
	    r->spec.id, r->preempted, (long long)kv, (long long)r->cached);
	return rc;
}

int
sched_grow(struct medha_sched *s, double now)
{
	int64_t before = s->preemptions;
	int ndec = 0, rc, g;

	(void)now;
	if (s->cfg.reserve == MEDHA_RESERVE_MAX)
		return 0;
	for (int i = 0; i < s->nactive; i++) {
		struct req *q = &s->reqs[s->active[i]];
		struct medha_req *r = &q->pub;

		if (r->busy == 2) /* it waited for a block last batch */
			r->busy = 0;
		if (r->state != MEDHA_REQ_DECODE || r->busy)
			continue;
		ndec++;
		for (;;) {
			struct req *v;
			if (medha_kvplace_grow(&s->kv, &r->kv, r->kv_tokens + 1,
			        &g) == 0) {
				if (s->cfg.prefix_cache) /* room it counted */
					sched_prefix_evict(s);
				break;
			}
			if ((v = victim(s, r, g)) == NULL) {
				r->busy = 2; /* no block: it waits a batch */
				break;
			}
			if ((rc = preempt(s, v)) != 0)
				return rc;
			if (v == q)
				break;
		}
	}
	/* the estimate decays while nothing is preempted */
	if (s->cfg.reserve == MEDHA_RESERVE_EST && ndec > 0 &&
	    s->preemptions == before) {
		s->ratio -=
		    (MEDHA_EST_INIT - MEDHA_EST_FLOOR) / MEDHA_EST_DECAY_STEPS;
		if (s->ratio < MEDHA_EST_FLOOR)
			s->ratio = MEDHA_EST_FLOOR;
	}
	return 0;
}

int64_t
medha_sched_preemptions(const struct medha_sched *s)
{
	return s->preemptions;
}

int64_t
medha_sched_preempt_below(const struct medha_sched *s)
{
	return s->preempt_below;
}

double
medha_sched_est_ratio(const struct medha_sched *s)
{
	return s->ratio;
}
