/*
 * sched.c: the scheduler core (sched.h), the requests' side: the policy
 * names and the default configuration; a request's life cycle (arrival,
 * with its deadline from the predicted time of its prefill alone; the
 * record it leaves when it finishes; cancellation; a lost worker); the
 * views and checks. Batches are formed and their results taken in
 * sched_batch.c; what both share is in sched_impl.h.
 */
#include "sched/sched_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Most prompt or output tokens of one request: far more than any KV
 * cache holds, and small enough that the sums and products of token
 * counts below (prompt + output, prompt * MEDHA_SLACK_SEGS) cannot
 * overflow. A request beyond it is rejected at arrival.
 */
#define MAX_REQ_TOKENS ((int64_t)1 << 50)

static const char *policy_names[] = {"fcfs", "edf", "lrs", "medha", "sarathi"};
#define NPOLICY (int)(sizeof(policy_names) / sizeof(policy_names[0]))

int
medha_policy_parse(const char *name)
{
	for (int i = 0; i < NPOLICY; i++)
		if (strcmp(name, policy_names[i]) == 0)
			return i;
	return -1;
}

const char *
medha_policy_name(int policy)
{
	if (policy < 0 || policy >= NPOLICY)
		return "?";
	return policy_names[policy];
}

void
medha_sched_config_default(struct medha_sched_config *c)
{
	memset(c, 0, sizeof(*c));
	c->policy = MEDHA_POLICY_MEDHA;
	c->chunk = 0;
	c->max_chunk = 8192;
	c->min_chunk = 0;
	c->target = 0.05;
	c->share_cap = 0.5;
	c->deadline_mult = 1.5;
	c->deadline_floor = 0.5;
	c->block_size = MEDHA_KV_BLOCK;
	c->kv_blocks = 0;
	c->mem_util = 0.9;
	c->kvp_max_tokens = 0;
	c->max_prefills = 64;
	c->max_seqs = 0;
	c->prefix_cache = 0;
	c->window_kv = 0;
	c->window_exact = 0;
	c->reserve = MEDHA_RESERVE_EST;
	c->preempt_below = 0;
	c->long_tpot = MEDHA_LONG_TPOT;
	c->recover_timeout = MEDHA_RECOVER_TIMEOUT;
}

/* ---- prefill time alone, deadlines ---- */

/* Latency of one chunk alone on one group, no decodes. */
static int64_t
lone_chunk(const struct medha_sched *s, int64_t kv, int64_t rem)
{
	int64_t lo = 1, hi;

	if (s->cfg.chunk > 0)
		return s->cfg.chunk < rem ? s->cfg.chunk : rem;
	hi = s->cfg.max_chunk / 32;
	if (medha_cost_lone(s->pred, 32, kv).latency > s->cfg.target)
		lo = 1;
	else
		while (lo < hi) {
			int64_t mid = lo + (hi - lo + 1) / 2;
			if (medha_cost_lone(s->pred, 32 * mid, kv).latency <=
			    s->cfg.target)
				lo = mid;
			else
				hi = mid - 1;
		}
	/* alone, no decode waits on it: at least the efficient chunk */
	return 32 * lo > s->min_chunk ? 32 * lo : s->min_chunk;
}

/*
 * cum[i]: predicted time to prefill the first i/SEGS of the prompt alone,
 * counting the time each chunk holds the slowest pipeline stage (chunks
 * of one prompt follow each other through the stages). Returns the full
 * prefill time including the last chunk's trip through the pipeline.
 */
double
sched_plan_alone(const struct medha_sched *s, int64_t start, int64_t prompt,
    double *cum)
{
	struct medha_lat l = {0, 0, 0};
	int64_t n = prompt - start; /* a cached prefix is not prefilled */

	cum[0] = 0;
	for (int i = 0; i < MEDHA_SLACK_SEGS; i++) {
		int64_t x0 = start + n * i / MEDHA_SLACK_SEGS;
		int64_t x1 = start + n * (i + 1) / MEDHA_SLACK_SEGS;
		int64_t seg = x1 - x0, c, kv = (x0 + x1) / 2;
		double occ;

		if (seg == 0) {
			cum[i + 1] = cum[i];
			continue;
		}
		c = lone_chunk(s, kv, seg);
		l = medha_cost_lone(s->pred, c, kv);
		occ = l.stage > l.last ? l.stage : l.last;
		cum[i + 1] = cum[i] + occ * (double)seg / (double)c;
	}
	return cum[MEDHA_SLACK_SEGS] +
	    (l.latency - (l.stage > l.last ? l.stage : l.last));
}

int64_t
medha_sched_min_chunk(const struct medha_sched *s)
{
	return s->min_chunk;
}

double
medha_sched_prefill_alone(const struct medha_sched *s, int64_t prompt)
{
	double cum[MEDHA_SLACK_SEGS + 1];

	return sched_plan_alone(s, 0, prompt, cum);
}

/* ---- life cycle ---- */

/*
 * Adaptive chunking's floor (medha_sched_min_chunk): c->min_chunk rounded
 * up to a multiple of 32, or the smallest multiple of 32 whose linear
 * layers cost at most MEDHA_CHUNK_EFF x per token what those of a
 * max_chunk chunk cost; within [32, max_chunk rounded down to 32].
 */
static int64_t
efficient_chunk(const struct medha_sched_config *c, const struct medha_pred *p)
{
	int64_t top = c->max_chunk / 32 * 32, m = c->min_chunk;

	if (m > top)
		m = top;
	if (m == 0) {
		double best = medha_pred_linear(p, top) / (double)top;
		for (m = 32; m < top; m += 32)
			if (medha_pred_linear(p, m) / (double)m <=
			    MEDHA_CHUNK_EFF * best)
				break;
	}
	m = (m + 31) / 32 * 32;
	return m < top ? m : top;
}

int
medha_sched_init(struct medha_sched **sp, const struct medha_sched_config *c,
    const struct medha_pred *p)
{
	struct medha_sched *s;
	int64_t blocks;

	*sp = NULL;
	if (c->policy < 0 || c->policy > MEDHA_POLICY_SARATHI || c->chunk < 0 ||
	    (c->policy == MEDHA_POLICY_SARATHI && c->chunk == 0) ||
	    c->max_chunk < 32 || c->min_chunk < 0 || c->target <= 0 ||
	    c->share_cap < 0 || c->share_cap > 1 || c->deadline_mult <= 0 ||
	    c->deadline_floor < 0 || c->block_size < 1 || c->kv_blocks < 0 ||
	    c->mem_util <= 0 || c->mem_util > 1 || c->kvp_max_tokens < 0 ||
	    c->max_prefills < 1 || c->max_seqs < 0 || p->kvp < 1 ||
	    p->kvp > MEDHA_KVP_MAX || c->reserve < MEDHA_RESERVE_EST ||
	    c->reserve > MEDHA_RESERVE_VLLM || c->preempt_below < 0 ||
	    !(c->long_tpot >= 0 && c->long_tpot < 1e9) ||
	    !(c->recover_timeout >= 0 && c->recover_timeout < 1e9))
		return MEDHA_EINVAL;
	if (c->kvp_max_tokens > 0 && c->kvp_max_tokens % c->block_size != 0)
		return MEDHA_EINVAL;
	blocks = c->kv_blocks;
	if (blocks == 0)
		blocks = medha_pred_kv_capacity(p, c->mem_util) / c->block_size;
	if (blocks <= 0)
		return MEDHA_ENOSPACE;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return MEDHA_ENOMEM;
	s->cfg = *c;
	s->pred = p;
	s->free_head = -1;
	s->min_chunk = c->chunk > 0 ? 0 : efficient_chunk(c, p);
	s->tpot_floor = 2 * medha_cost_lone(p, 32, 0).latency;
	/* est and vllm: long prompts' turns, long decodes' own batches
	   (sched_batch.c); max keeps the order of before */
	s->long_turns = c->reserve != MEDHA_RESERVE_MAX &&
	    (c->policy == MEDHA_POLICY_LRS || c->policy == MEDHA_POLICY_MEDHA);
	s->long_sep = c->reserve != MEDHA_RESERVE_MAX && p->spp > 1 &&
	    c->chunk == 0 && c->long_tpot > 0;
	if (medha_kvplace_init(&s->kv, p->kvp, c->block_size, blocks,
	        c->kvp_max_tokens) != 0) {
		free(s);
		return MEDHA_EINVAL;
	}
	if (c->window_kv && p->window > 0) {
		const struct medha_model_config *mc = &p->model.c;
		int nw = 0;
		for (int l = 0; l < mc->n_layers; l++)
			nw += medha_layer_span(mc, l) > 0;
		if (medha_kvplace_window(&s->kv, mc->n_layers, nw,
		        (int64_t)p->window +
		            (c->chunk > 0 ? c->chunk : c->max_chunk)) != 0) {
			free(s);
			return MEDHA_EINVAL;
		}
	}
	if (c->prefix_cache && medha_prefix_init(&s->px, &s->kv) != 0) {
		free(s);
		return MEDHA_ENOMEM;
	}
	if (c->prefix_cache)
		sched_prefix_init(s);
	s->ratio = MEDHA_EST_INIT;
	s->preempt_below = c->preempt_below > 0 ? c->preempt_below
	                                        : sched_preempt_default(s);
	*sp = s;
	return 0;
}

void
medha_sched_free(struct medha_sched *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < s->nactive; i++) {
		medha_tbt_free(&s->reqs[s->active[i]].pub.tbt);
		free(s->reqs[s->active[i]].keys);
	}
	if (s->cfg.prefix_cache)
		medha_prefix_free(&s->px);
	free(s->pend);
	free(s->ops);
	free(s->punref);
	for (int i = 0; i < s->rec_n; i++)
		medha_record_clear(&s->recs[(s->rec_head + i) % s->rec_cap]);
	free(s->reqs);
	free(s->active);
	free(s->recs);
	free(s->cands);
	free(s->srank);
	free(s->nxt);
	free(s->count);
	free(s->pick);
	free(s->items);
	free(s);
}

static int
push_record(struct medha_sched *s, struct medha_req *r, int status, int finish,
    const char *reason, double now)
{
	struct medha_record *rec;

	if (s->rec_n == s->rec_cap) {
		int ncap = s->rec_cap ? 2 * s->rec_cap : 64;
		struct medha_record *n =
		    medha_reallocarray(NULL, ncap, sizeof(*n));
		if (n == NULL)
			return MEDHA_ENOMEM;
		for (int i = 0; i < s->rec_n; i++)
			n[i] = s->recs[(s->rec_head + i) % s->rec_cap];
		free(s->recs);
		s->recs = n;
		s->rec_cap = ncap;
		s->rec_head = 0;
	}
	rec = &s->recs[(s->rec_head + s->rec_n) % s->rec_cap];
	s->rec_n++;
	memset(rec, 0, sizeof(*rec));
	memcpy(rec->id, r->spec.id, sizeof(rec->id));
	rec->handle = r->handle;
	rec->arrival = r->spec.arrival;
	rec->prompt_tokens = r->spec.prompt_tokens - r->resumed;
	rec->preemptions = r->preempted;
	rec->status = status;
	rec->finish_reason = finish;
	if (reason != NULL)
		snprintf(rec->reason, sizeof(rec->reason), "%s", reason);
	rec->ttft_slo = r->deadline_dur;
	rec->tpot_slo = r->spec.tpot_slo;
	rec->finish = now;
	rec->output_tokens = r->decoded;
	rec->first_token = r->decoded > 0 ? r->first_token : now;
	if (status == MEDHA_STATUS_OK || r->decoded > 0)
		rec->ttft = rec->first_token - rec->arrival;
	if (r->decoded >= 2) {
		rec->tpot_mean =
		    (r->last_token - r->first_token) / (r->decoded - 1);
		rec->tpot_max = r->tpot_max;
	}
	rec->prefill_alone = r->prefill_alone;
	rec->cached_tokens = r->state != MEDHA_REQ_WAITING ? r->cached : 0;
	medha_tbt_move(&rec->tbt, &r->tbt);
	return 0;
}

int
medha_sched_pop_record(struct medha_sched *s, struct medha_record *rec)
{
	if (s->rec_n == 0)
		return 0;
	*rec = s->recs[s->rec_head];
	s->rec_head = (s->rec_head + 1) % s->rec_cap;
	s->rec_n--;
	return 1;
}

/* Take q out of the active list and put its slot on the free list. */
static void
deactivate(struct medha_sched *s, struct req *q)
{
	int slot = q->slot;
	int last = s->active[--s->nactive];

	s->active[slot] = last;
	s->reqs[last].slot = slot;
	q->slot = -1;
	q->pub.state = MEDHA_REQ_DONE;
	q->next_free = s->free_head;
	s->free_head = (int)(q - s->reqs);
}

int
sched_finish(struct medha_sched *s, struct req *q, int status, int fin,
    const char *reason, double now)
{
	int rc;

	if (q->keys != NULL)
		sched_prefix_finish(s, q, status);
	/* its sequence: what the index holds of it stays on the workers */
	if (s->cfg.prefix_cache)
		sched_op(s, MEDHA_KVOP_TRIM, q->pub.handle, 0, 0, q->own_end);
	if (q->pub.state != MEDHA_REQ_WAITING)
		s->nadmitted--;
	if (status == MEDHA_STATUS_OK)
		sched_est_done(s, &q->pub);
	medha_kvplace_release(&s->kv, &q->pub.kv);
	rc = push_record(s, &q->pub, status, fin, reason, now);
	medha_tbt_free(&q->pub.tbt); /* moved, or not if that failed */
	deactivate(s, q);
	return rc;
}

/* A free slot, growing the table if none is left; -1 on failure. */
static int
take_slot(struct medha_sched *s)
{
	int i;

	if (s->free_head < 0) {
		int ncap = s->reqs_cap ? 2 * s->reqs_cap : 256;
		void *n1 = NULL;
		if ((size_t)ncap > SIZE_MAX / sizeof(*s->reqs) ||
		    posix_memalign(&n1, REQ_ALIGN, ncap * sizeof(*s->reqs)) !=
		        0)
			return -1;
		if (s->reqs_cap > 0)
			memcpy(n1, s->reqs, s->reqs_cap * sizeof(*s->reqs));
		free(s->reqs);
		s->reqs = n1;
		n1 = medha_reallocarray(s->active, ncap, sizeof(*s->active));
		if (n1 == NULL)
			return -1;
		s->active = n1;
		for (i = ncap - 1; i >= s->reqs_cap; i--) {
			s->reqs[i].slot = -1;
			s->reqs[i].gen = 0;
			s->reqs[i].next_free = s->free_head;
			s->free_head = i;
		}
		s->reqs_cap = ncap;
	}
	i = s->free_head;
	s->free_head = s->reqs[i].next_free;
	return i;
}

int
medha_sched_arrive(struct medha_sched *s, const struct medha_reqspec *spec,
    double now, uint64_t *handle)
{
	struct req *q;
	struct medha_req *r;
	char why[160], reason[256];
	uint32_t gen;
	int i, rc;

	if ((i = take_slot(s)) < 0)
		return MEDHA_ENOMEM;
	q = &s->reqs[i];
	gen = q->gen + 1 ? q->gen + 1 : 1; /* never 0: handle 0 is none */
	memset(q, 0, sizeof(*q));
	q->gen = gen;
	r = &q->pub;
	r->spec = *spec;
	r->spec.prompt = NULL;
	r->spec.prompt_ids = NULL;
	r->spec.prefix = NULL;
	r->spec.n_prefix = 0;
	r->spec.n_stop = 0;
	memset(r->spec.stop, 0, sizeof(r->spec.stop));
	r->handle = (uint64_t)gen << 32 | (uint64_t)i;
	r->state = MEDHA_REQ_WAITING;
	r->max_tokens = spec->max_tokens;
	r->tpot_slo = spec->tpot_slo;
	q->ids = spec->prompt_ids != NULL;
	q->slot = s->nactive;
	s->active[s->nactive++] = i;
	if (handle != NULL)
		*handle = r->handle;

	if (spec->prompt_tokens < 1 || spec->max_tokens < 0) {
		medha_log(MEDHA_LOG_WARN,
		    "request %s: no prompt_tokens; rejected", spec->id);
		r->deadline_dur = spec->ttft_slo;
		return sched_finish(s, q, MEDHA_STATUS_REJECTED,
		    MEDHA_FINISH_NONE, "no prompt tokens", now);
	}
	if (spec->prompt_tokens > MAX_REQ_TOKENS ||
	    spec->max_tokens > MAX_REQ_TOKENS) {
		snprintf(reason, sizeof(reason),
		    "%lld prompt + %lld output tokens: more than any KV cache "
		    "holds",
		    (long long)spec->prompt_tokens,
		    (long long)spec->max_tokens);
		r->deadline_dur = spec->ttft_slo;
		return sched_finish(s, q, MEDHA_STATUS_REJECTED,
		    MEDHA_FINISH_NONE, reason, now);
	}
	if (s->cfg.prefix_cache &&
	    (rc = sched_prefix_arrive(s, q, spec)) != 0) {
		sched_finish(s, q, MEDHA_STATUS_REJECTED, MEDHA_FINISH_NONE,
		    "out of memory", now);
		return rc;
	}
	r->sched_prefill = r->cached;
	r->prefill_alone =
	    sched_plan_alone(s, r->cached, spec->prompt_tokens, r->cum);
	r->deadline_dur = r->prefill_alone * s->cfg.deadline_mult;
	if (r->deadline_dur < s->cfg.deadline_floor)
		r->deadline_dur = s->cfg.deadline_floor;
	if (spec->ttft_slo > 0)
		r->deadline_dur = spec->ttft_slo;
	r->deadline = spec->arrival + r->deadline_dur;
	if (!medha_kvplace_fits_ever(&s->kv, sched_kv_need(r), why,
	        sizeof(why))) {
		snprintf(reason, sizeof(reason),
		    "%lld prompt + %lld output tokens: %s",
		    (long long)spec->prompt_tokens, (long long)spec->max_tokens,
		    why);
		medha_log(MEDHA_LOG_WARN, "request %s: %s; rejected", spec->id,
		    reason);
		return sched_finish(s, q, MEDHA_STATUS_REJECTED,
		    MEDHA_FINISH_NONE, reason, now);
	}
	return 0;
}

int
medha_sched_cancel(struct medha_sched *s, uint64_t handle, const char *reason,
    double now)
{
	struct req *q = sched_lookup(s, handle);

	if (q == NULL)
		return MEDHA_ENOTFOUND;
	return sched_finish(s, q, MEDHA_STATUS_CANCELLED, MEDHA_FINISH_NONE,
	    reason != NULL ? reason : "cancelled", now);
}

/* Whether r, which held KV on a lost worker, is recomputed: a penalty
 * over its output would count its tokens as prompt once recomputed. */
static int
recoverable(const struct medha_sched *s, const struct medha_req *r)
{
	return s->cfg.recover_timeout > 0 &&
	    r->spec.sampling.presence_penalty == 0 &&
	    r->spec.sampling.frequency_penalty == 0;
}

/* A worker lost (recover: its requests may be recomputed) or a batch
 * failed (they fail): medha_sched_worker_lost, medha_sched_fault. */
static int
lost(struct medha_sched *s, const char *reason, double now, int recover)
{
	int n = 0, rc;

	snprintf(s->lost_reason, sizeof(s->lost_reason), "%s", reason);
	/* those that held KV fail, or let go of the index to be
	   recomputed (still admitted: recover_by marks them) */
	for (int i = 0; i < s->nactive;) {
		struct req *q = &s->reqs[s->active[i]];
		struct medha_req *r = &q->pub;

		if (r->state == MEDHA_REQ_WAITING) {
			i++;
			continue;
		}
		if (recover && recoverable(s, r)) {
			if (q->keys != NULL)
				sched_prefix_forget(s, q);
			/* lost again before a token since its last loss: that
			   loss's deadline stands (a worker that keeps dropping
			   the batch buys it no time) */
			if (r->lost_at <= 0 || r->decoded != r->lost_decoded) {
				r->lost_at = now;
				r->lost_decoded = r->decoded;
			}
			r->recover_by = r->lost_at + s->cfg.recover_timeout;
			i++;
			continue;
		}
		/* sched_finish() moves the last active request into slot i */
		if ((rc = sched_finish(s, q, MEDHA_STATUS_FAILED,
		         MEDHA_FINISH_NONE, reason, now)) != 0)
			return rc;
		n++;
	}
	/* the workers' KV is gone, the cached blocks with it */
	if (s->cfg.prefix_cache)
		sched_prefix_lost(s);
	/* the recomputed wait again, their sequences freed on the workers
	   that are left (after the index's TRIMs of them); a waiting
	   request's match (at arrival, or at its preemption) was of the
	   index: its prefill starts at 0 now */
	for (int i = 0; i < s->nactive; i++) {
		struct req *q = &s->reqs[s->active[i]];
		struct medha_req *r = &q->pub;
		if (r->state != MEDHA_REQ_WAITING) {
			sched_op(s, MEDHA_KVOP_TRIM, r->handle, 0, 0, 0);
			sched_fold_outputs(r);
			sched_requeue(s, q);
			medha_log(MEDHA_LOG_DEBUG,
			    "request %s: to be recomputed (%lld tokens)",
			    r->spec.id, (long long)r->spec.prompt_tokens);
		} else if (s->cfg.prefix_cache && r->cached > 0) {
			r->cached = 0;
			r->sched_prefill = 0;
			r->prefill_alone = sched_plan_alone(s, 0,
			    r->spec.prompt_tokens, r->cum);
		}
	}
	return s->oom ? MEDHA_ENOMEM : n;
}

int
medha_sched_worker_lost(struct medha_sched *s, const char *reason, double now)
{
	return lost(s, reason, now, 1);
}

int
medha_sched_fault(struct medha_sched *s, const char *reason, double now)
{
	return lost(s, reason, now, 0);
}

int
medha_sched_recover_expire(struct medha_sched *s, double now)
{
	int n = 0, rc;

	for (int i = 0; i < s->nactive;) {
		struct req *q = &s->reqs[s->active[i]];
		struct medha_req *r = &q->pub;

		if (r->state != MEDHA_REQ_WAITING || r->recover_by <= 0 ||
		    now < r->recover_by) {
			i++;
			continue;
		}
		if ((rc = sched_finish(s, q, MEDHA_STATUS_FAILED,
		         MEDHA_FINISH_NONE, s->lost_reason, now)) != 0)
			return rc;
		n++;
	}
	return n;
}

int64_t
medha_sched_recovering(const struct medha_sched *s)
{
	int64_t n = 0;

	for (int i = 0; i < s->nactive; i++)
		n += s->reqs[s->active[i]].pub.recover_by > 0;
	return n;
}

/* ---- views and checks ---- */

int64_t
medha_sched_pending(const struct medha_sched *s)
{
	return s->nactive;
}

const struct medha_req *
medha_sched_req(const struct medha_sched *s, uint64_t handle)
{
	const struct req *q = sched_lookup(s, handle);

	return q != NULL ? &q->pub : NULL;
}

const struct medha_req *
medha_sched_active(const struct medha_sched *s, int i)
{
	if (i < 0 || i >= s->nactive)
		return NULL;
	return &s->reqs[s->active[i]].pub;
}

uint64_t
medha_sched_visits(const struct medha_sched *s)
{
	return s->visits;
}

size_t
medha_sched_footprint(const struct medha_sched *s)
{
	size_t cand = sizeof(*s->cands), extra = 0;

	if (s->srank != NULL) { /* medha's index */
		cand += sizeof(*s->srank) + sizeof(*s->nxt) + sizeof(*s->pick) +
		    SHORT_COUNT_MAX * sizeof(*s->count);
		extra = sizeof(*s->nxt) + sizeof(*s->count);
	}
	return sizeof(*s) +
	    (size_t)s->reqs_cap * (sizeof(*s->reqs) + sizeof(*s->active)) +
	    (size_t)s->rec_cap * sizeof(*s->recs) +
	    (size_t)s->cands_cap * cand + extra +
	    (size_t)s->items_cap * sizeof(*s->items);
}

int64_t
medha_sched_group_capacity(const struct medha_sched *s)
{
	return s->kv.cap_blocks;
}

int
medha_sched_block_size(const struct medha_sched *s)
{
	return s->cfg.block_size;
}

int64_t
medha_sched_group_tokens(const struct medha_sched *s)
{
	return s->kv.group_tokens;
}

int64_t
medha_sched_group_reserved(const struct medha_sched *s, int group)
{
	if (group < 0 || group >= s->kv.kvp)
		return -1;
	return s->kv.res[group];
}

int64_t
medha_sched_group_cached(const struct medha_sched *s, int group)
{
	if (group < 0 || group >= s->kv.kvp)
		return -1;
	return s->kv.cached[group];
}

int64_t
medha_sched_group_used(const struct medha_sched *s, int group)
{
	if (group < 0 || group >= s->kv.kvp)
		return -1;
	return s->kv.res[group] + s->kv.held[group];
}

int64_t
medha_sched_group_pending(const struct medha_sched *s, int group)
{
	if (group < 0 || group >= s->kv.kvp)
		return -1;
	return s->kv.pend[group];
}

int
medha_sched_check(const struct medha_sched *s, char *why, size_t whylen)
{
	int64_t sum[MEDHA_KVP_MAX] = {0};
	char msg[200];

	for (int i = 0; i < s->nactive; i++) {
		const struct medha_req *r = &s->reqs[s->active[i]].pub;
		if (medha_kvplace_check_lease(&s->kv, &r->kv, r->kv_tokens, sum,
		        msg, sizeof(msg)) != 0)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "request %s: %s", r->spec.id, msg);
	}
	if (s->cfg.prefix_cache &&
	    medha_prefix_check(&s->px, why, whylen) != 0)
		return MEDHA_EINVAL;
	return medha_kvplace_check(&s->kv, sum, why, whylen);
}

void
medha_sched_prefix_stats(const struct medha_sched *s,
    struct medha_prefix_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (s->cfg.prefix_cache)
		*st = s->px.st;
}
