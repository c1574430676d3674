/*
 * sched.c: the scheduler core. Request state, paged KV-block accounting
 * per KVP group, the five prefill orders, adaptive and fixed chunking,
 * prefill-prefill batching, and the batch-latency model that composes
 * the predictor's operator times for one batch on a tp x spp x kvp grid.
 *
 * Memory: at admission a request reserves the KV blocks for its prompt
 * and all of its output tokens, so a decode can never run out of memory
 * and be preempted; a request that cannot get its blocks waits. Its KV is
 * cut into pieces of at most kvp_max_tokens, one KVP group each, chosen
 * at admission by least predicted pending prefill time (kvplace.c); the
 * request enters the next group when its KV passes the previous group's
 * limit, and only its last entered group appends KV.
 */
#include "sched/sched.h"
#include "sched/batchcost.h"

#include <math.h>
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

/* slots start on a cache line, so that a request's hot head takes two */
#define REQ_ALIGN 64
/*
 * The loops over every request of an iteration fetch the hot head of the
 * request this many places ahead (and, in medha_sched_batch_done, the
 * histogram bin of the one half as far ahead), so that these loads,
 * mostly misses with a thousand requests, overlap.
 */
#define PF_REQS 8

/*
 * Internal request: the public view plus bookkeeping. Requests live in a
 * table of slots; a finished request's slot goes on a free list and is
 * reused, with its generation bumped, so a handle (generation << 32 |
 * slot) names one request forever and the table is as large as the most
 * requests ever in flight at once.
 */
struct req {
	_Alignas(REQ_ALIGN) int slot; /* index in s->active, -1 when free */
	uint32_t gen;  /* generation of the slot's current (or last) use */
	int next_free; /* free list link, -1 at the end */
	struct medha_req pub; /* its hot head on the slot's first lines */
};

struct cand {
	int idx;
	double key;     /* policy order, smaller first */
	double urgency; /* 1 - relative slack, clamped to [0, 1] */
	int64_t rem;    /* prompt tokens not yet handed out */
	int packed;     /* 1: dealt with in this batch (2: about to be) */
	int rank; /* medha: place in the short index (s->srank), -1 if not in
	             it (too long for one chunk, or packed) */
};

/* short_index sorts by counting while one chunk <= this x candidates */
#define SHORT_COUNT_MAX 4
/* share_batch walks up to this x its short prefills candidates to order
 * them (else it takes them from a heap) */
#define SHORT_WALK_MAX 8

/* A candidate short enough for one chunk, in the index by its rem. */
struct srank {
	int64_t rem;
	double urgency;
	int pos; /* in s->cands */
};

struct medha_sched {
	struct medha_sched_config cfg;
	const struct medha_pred *pred;
	struct medha_kvplace kv; /* KV blocks per KVP group */

	struct req *reqs; /* (reqs_cap) slots */
	int reqs_cap;
	int free_head; /* first free slot, -1 if none */
	int *active;   /* (reqs_cap) slots of requests not done */
	int nactive;
	int nadmitted; /* requests holding KV (prefill or decode) */

	struct medha_record *recs; /* finished, not yet popped (ring) */
	int rec_head, rec_n, rec_cap;

	struct cand *cands;
	int cands_cap;
	/*
	 * medha's index of one batch's candidates that can finish in one
	 * chunk (short_index), each (cands_cap) but nxt (cands_cap + 1):
	 * srank sorted by rem; nxt, a union-find link from each place to the
	 * next place not packed yet; pick, scratch.
	 */
	struct srank *srank;
	int *nxt, *pick;
	int *count;      /* (SHORT_COUNT_MAX * cands_cap + 1) short_index's */
	int nshort;      /* places in srank */
	int first;       /* short_any */
	uint64_t visits; /* medha_sched_visits() */
	struct medha_sched_item *items;
	int items_cap;
	struct medha_cost acc;
	uint64_t seq;
	int64_t min_chunk; /* adaptive: a batch without decodes holds this */
	double tpot_floor; /* a tpot_slo bounds batches down to this, s */
	int ndec;          /* decodes in the batch being formed */
};

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
}

/* ---- batch latency model ---- */

/* The cost a chunking mode budgets: latency (adaptive) or tokens (fixed). */
static double
acc_cost(const struct medha_sched *s, const struct medha_cost *a)
{
	if (s->cfg.chunk > 0)
		return (double)a->n_tokens;
	return medha_cost_latency(a, s->pred, s->kv.kvp).latency;
}

static double
trial_cost(struct medha_sched *s, const struct medha_req *r, int64_t t)
{
	struct medha_cost_undo u;
	double c;
	int64_t kv = r->kv_tokens;

	medha_cost_add(&s->acc, s->pred, &s->kv, &r->kv, t, kv, 0,
	    r->sched_prefill + t == r->spec.prompt_tokens, &u);
	c = acc_cost(s, &s->acc);
	medha_cost_undo(&s->acc, &u);
	return c;
}

/*
 * The most prompt tokens r's next chunk may take: the rest of the
 * prompt, and with KVP no more than is left of its current piece, so
 * that one group appends the whole chunk.
 */
static int64_t
chunk_room(const struct medha_sched *s, const struct medha_req *r)
{
	int64_t rem = r->spec.prompt_tokens - r->sched_prefill, gt, room;

	if (s->kv.kvp > 1) {
		gt = s->kv.group_tokens;
		room = (r->kv_tokens / gt + 1) * gt - r->kv_tokens;
		if (room < rem)
			rem = room;
	}
	return rem;
}

/*
 * Chunk for prefill r against the batch so far, so that the batch cost
 * stays within limit: the whole remainder if it fits, else the largest
 * multiple of 32 (adaptive) or the tokens left in the budget (fixed).
 * 0 if nothing fits.
 */
static int64_t
choose_chunk(struct medha_sched *s, const struct medha_req *r, double limit)
{
	int64_t rem = chunk_room(s, r);
	int64_t lo, hi;

	if (s->cfg.chunk > 0) {
		int64_t room = (int64_t)limit - s->acc.n_tokens;
		return room <= 0 ? 0 : (rem < room ? rem : room);
	}
	if (rem <= s->cfg.max_chunk && trial_cost(s, r, rem) <= limit)
		return rem;
	hi = (rem < s->cfg.max_chunk ? rem : s->cfg.max_chunk) / 32;
	if (hi == 0 || trial_cost(s, r, 32) > limit)
		return 0;
	lo = 1; /* invariant: 32*lo fits, 32*(hi+1) does not (or is too big) */
	while (lo < hi) {
		int64_t mid = lo + (hi - lo + 1) / 2;
		if (trial_cost(s, r, 32 * mid) <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	return 32 * lo;
}

/* ---- prefill time alone, deadlines, slack ---- */

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
static double
plan_alone(const struct medha_sched *s, int64_t prompt, double *cum)
{
	struct medha_lat l = {0, 0, 0};

	cum[0] = 0;
	for (int i = 0; i < MEDHA_SLACK_SEGS; i++) {
		int64_t x0 = prompt * i / MEDHA_SLACK_SEGS;
		int64_t x1 = prompt * (i + 1) / MEDHA_SLACK_SEGS;
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

	return plan_alone(s, prompt, cum);
}

/* Predicted prefill time still ahead of r, alone. */
static double
remaining_time(const struct medha_req *r)
{
	int64_t P = r->spec.prompt_tokens;
	double x = (double)r->sched_prefill * MEDHA_SLACK_SEGS / (double)P;
	int i = (int)x;
	double done;

	if (i >= MEDHA_SLACK_SEGS)
		return 0;
	done = r->cum[i] + (x - i) * (r->cum[i + 1] - r->cum[i]);
	return r->cum[MEDHA_SLACK_SEGS] - done;
}

double
medha_sched_pending_work(const struct medha_sched *s, int64_t *tokens)
{
	double w = 0;
	int64_t n = 0;

	for (int i = 0; i < s->nactive; i++) {
		const struct medha_req *r = &s->reqs[s->active[i]].pub;
		if (r->state == MEDHA_REQ_DONE)
			continue;
		w += remaining_time(r);
		n += r->spec.prompt_tokens - r->sched_prefill;
	}
	if (tokens != NULL)
		*tokens = n;
	return w;
}

static double
relative_slack(const struct medha_req *r, double now)
{
	return (r->deadline - now - remaining_time(r)) / r->deadline_dur;
}

/* ---- memory: a lease of KV blocks per KVP group (kvplace.c) ---- */

/* KV tokens a request needs in all: prompt and every output token. */
static int64_t
kv_need(const struct medha_req *r)
{
	return r->spec.prompt_tokens + r->spec.max_tokens;
}

/*
 * The prefill time each piece of r's KV brings its KVP group, in ns (the
 * load balancer's unit): the linear layers and causal attention of the
 * prompt tokens in the piece, and the attention of the prompt's later
 * tokens (queries that every group holding a piece serves) against it.
 */
static void
piece_work(const struct medha_sched *s, const struct medha_req *r,
    int64_t *work)
{
	const struct medha_pred *p = s->pred;
	int64_t P = r->spec.prompt_tokens, gt = s->kv.group_tokens;

	for (int i = 0; i < s->kv.kvp; i++) {
		int64_t n = medha_kvplace_in_piece(&s->kv, i, 0, P);
		int64_t after = P - n - (int64_t)i * gt;
		double w, cross = 0;

		work[i] = 0;
		if (n <= 0)
			continue; /* output tokens only */
		if (after > 0) {
			cross = medha_pred_attn_prefill(p, after, n) -
			    medha_pred_attn_prefill(p, after, 0);
			cross = cross > 0 ? cross : 0;
		}
		w = (medha_pred_linear(p, n) +
		        medha_pred_attn_prefill(p, n, 0) + cross) *
		    1e9;
		work[i] = w < 4e15 ? (int64_t)w : (int64_t)4e15; /* < 2^53 */
	}
}

/* Reserve r's KV; it then starts its prefill. 0 or MEDHA_ENOSPACE. */
static int
admit(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t work[MEDHA_KVP_MAX];
	int rc;

	if (s->cfg.max_seqs > 0 && s->nadmitted >= s->cfg.max_seqs)
		return MEDHA_ENOSPACE;
	if (s->kv.kvp > 1)
		piece_work(s, r, work);
	rc = medha_kvplace_admit_work(&s->kv, &r->kv, kv_need(r),
	    r->spec.prompt_tokens, s->kv.kvp > 1 ? work : NULL);
	if (rc == 0) {
		r->state = MEDHA_REQ_PREFILL;
		s->nadmitted++;
	}
	return rc;
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
	    p->kvp > MEDHA_KVP_MAX)
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
	if (medha_kvplace_init(&s->kv, p->kvp, c->block_size, blocks,
	        c->kvp_max_tokens) != 0) {
		free(s);
		return MEDHA_EINVAL;
	}
	*sp = s;
	return 0;
}

void
medha_sched_free(struct medha_sched *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < s->nactive; i++)
		medha_tbt_free(&s->reqs[s->active[i]].pub.tbt);
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
	rec->prompt_tokens = r->spec.prompt_tokens;
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

static int
finish(struct medha_sched *s, struct req *q, int status, int fin,
    const char *reason, double now)
{
	int rc;

	if (q->pub.state != MEDHA_REQ_WAITING)
		s->nadmitted--;
	medha_kvplace_release(&s->kv, &q->pub.kv);
	rc = push_record(s, &q->pub, status, fin, reason, now);
	medha_tbt_free(&q->pub.tbt); /* moved, or not if that failed */
	deactivate(s, q);
	return rc;
}

/* Fetch the hot head of slot i's request. */
static inline void
prefetch_req(const struct medha_sched *s, int i)
{
	const char *p = (const char *)&s->reqs[i];

	__builtin_prefetch(p);
	__builtin_prefetch(p + 64);
}

/* The live request of handle h, or NULL. */
static struct req *
lookup(const struct medha_sched *s, uint64_t h)
{
	uint64_t slot = h & 0xffffffffu;
	struct req *q;

	if (slot >= (uint64_t)s->reqs_cap)
		return NULL;
	q = &s->reqs[slot];
	if (q->slot < 0 || q->gen != (uint32_t)(h >> 32))
		return NULL;
	return q;
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
	int i;

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
	r->spec.n_stop = 0;
	memset(r->spec.stop, 0, sizeof(r->spec.stop));
	r->handle = (uint64_t)gen << 32 | (uint64_t)i;
	r->state = MEDHA_REQ_WAITING;
	r->max_tokens = spec->max_tokens;
	r->tpot_slo = spec->tpot_slo;
	q->slot = s->nactive;
	s->active[s->nactive++] = i;
	if (handle != NULL)
		*handle = r->handle;

	if (spec->prompt_tokens < 1 || spec->max_tokens < 0) {
		medha_log(MEDHA_LOG_WARN,
		    "request %s: no prompt_tokens; rejected", spec->id);
		r->deadline_dur = spec->ttft_slo;
		return finish(s, q, MEDHA_STATUS_REJECTED, MEDHA_FINISH_NONE,
		    "no prompt tokens", now);
	}
	if (spec->prompt_tokens > MAX_REQ_TOKENS ||
	    spec->max_tokens > MAX_REQ_TOKENS) {
		snprintf(reason, sizeof(reason),
		    "%lld prompt + %lld output tokens: more than any KV cache "
		    "holds",
		    (long long)spec->prompt_tokens,
		    (long long)spec->max_tokens);
		r->deadline_dur = spec->ttft_slo;
		return finish(s, q, MEDHA_STATUS_REJECTED, MEDHA_FINISH_NONE,
		    reason, now);
	}
	r->prefill_alone = plan_alone(s, spec->prompt_tokens, r->cum);
	r->deadline_dur = r->prefill_alone * s->cfg.deadline_mult;
	if (r->deadline_dur < s->cfg.deadline_floor)
		r->deadline_dur = s->cfg.deadline_floor;
	if (spec->ttft_slo > 0)
		r->deadline_dur = spec->ttft_slo;
	r->deadline = spec->arrival + r->deadline_dur;
	if (!medha_kvplace_fits_ever(&s->kv, kv_need(r), why, sizeof(why))) {
		snprintf(reason, sizeof(reason),
		    "%lld prompt + %lld output tokens: %s",
		    (long long)spec->prompt_tokens, (long long)spec->max_tokens,
		    why);
		medha_log(MEDHA_LOG_WARN, "request %s: %s; rejected", spec->id,
		    reason);
		return finish(s, q, MEDHA_STATUS_REJECTED, MEDHA_FINISH_NONE,
		    reason, now);
	}
	return 0;
}

int
medha_sched_cancel(struct medha_sched *s, uint64_t handle, const char *reason,
    double now)
{
	struct req *q = lookup(s, handle);

	if (q == NULL)
		return MEDHA_ENOTFOUND;
	return finish(s, q, MEDHA_STATUS_CANCELLED, MEDHA_FINISH_NONE,
	    reason != NULL ? reason : "cancelled", now);
}

int
medha_sched_worker_lost(struct medha_sched *s, const char *reason, double now)
{
	int n = 0, rc;

	for (int i = 0; i < s->nactive;) {
		struct req *q = &s->reqs[s->active[i]];
		struct medha_req *r = &q->pub;

		if (r->state == MEDHA_REQ_WAITING) {
			i++;
			continue;
		}
		/* finish() moves the last active request into slot i */
		if ((rc = finish(s, q, MEDHA_STATUS_FAILED, MEDHA_FINISH_NONE,
		         reason, now)) != 0)
			return rc;
		n++;
	}
	return n;
}

/* ---- medha: the index of short candidates ---- */

/*
 * Prefill-prefill batching (share_batch) asks, for each candidate in
 * policy order, about the short prefills behind it: those not packed yet
 * that can finish in one chunk and have less left than it. Asked by
 * scanning, that was every candidate behind each candidate, n^2 / 2
 * visits a batch, and with thousands of requests waiting for memory the
 * scans were the scheduler's whole time. Instead, once a batch, the
 * candidates that can finish in one chunk are sorted by what they have
 * left (srank): a candidate's short prefills are then the unpacked
 * places of a prefix of srank. A union-find link skips packed places;
 * whether there is any short prefill at all is one comparison with the
 * first unpacked place; and a prefix is walked only when its prefills
 * are packed, so each place is walked once. A batch costs O(n log n) in
 * all (sorting, and putting the short prefills that share back in policy
 * order), never n^2.
 */

static int
srank_cmp(const void *a, const void *b)
{
	const struct srank *x = a, *y = b;

	if (x->rem != y->rem)
		return x->rem < y->rem ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Restore the min-heap s->pick of n places below place k. */
static void
heap_down(struct medha_sched *s, int n, int k)
{
	int *h = s->pick;

	for (;; s->visits++) {
		int m = k, l = 2 * k + 1, t;
		if (l < n && h[l] < h[m])
			m = l;
		if (l + 1 < n && h[l + 1] < h[m])
			m = l + 1;
		if (m == k)
			return;
		t = h[k];
		h[k] = h[m];
		h[m] = t;
		k = m;
	}
}

/*
 * Index the nc candidates (in policy order, none packed yet). srank is
 * in (rem, pos) order; with many candidates against the most a chunk
 * holds (one), a counting sort on rem gets it in O(nc + one).
 */
static void
short_index(struct medha_sched *s, int nc)
{
	int64_t one = s->cfg.chunk > 0 ? s->cfg.chunk : s->cfg.max_chunk;
	int n = 0, bycount = one <= SHORT_COUNT_MAX * (int64_t)nc;
	int *at = s->count;

	if (bycount) {
		memset(at, 0, (size_t)(one + 1) * sizeof(*at));
		for (int i = 0; i < nc; i++)
			if (s->cands[i].rem <= one)
				at[s->cands[i].rem]++;
		for (int64_t r = 0, sum = 0; r <= one; r++) {
			int c = at[r];
			at[r] = (int)sum;
			sum += c;
		}
	}
	for (int i = 0; i < nc; i++) {
		struct cand *c = &s->cands[i];
		int k = n++;
		if (c->rem > one) {
			n--;
			continue;
		}
		if (bycount)
			k = at[c->rem]++;
		s->srank[k].rem = c->rem;
		s->srank[k].urgency = c->urgency;
		s->srank[k].pos = i;
	}
	if (!bycount && n > 1)
		qsort(s->srank, n, sizeof(*s->srank), srank_cmp);
	for (int k = 0; k < n; k++) {
		s->cands[s->srank[k].pos].rank = k;
		s->nxt[k] = k;
	}
	s->nxt[n] = n;
	s->nshort = n;
	s->first = 0;
	s->visits += (uint64_t)n;
}

/* The first place at or after k not packed yet (nshort if none). */
static int
short_next(struct medha_sched *s, int k)
{
	while (s->nxt[k] != k) {
		s->nxt[k] = s->nxt[s->nxt[k]];
		k = s->nxt[k];
		s->visits++;
	}
	return k;
}

/*
 * Whether a candidate with rem left has a short prefill that counts for
 * its urgency: an unpacked one with less left whose urgency is a number
 * (the scan this replaces never took a NaN as the highest urgency).
 * s->first, the first such place in all of srank, only moves forward.
 */
static int
short_any(struct medha_sched *s, int64_t rem)
{
	int k = short_next(s, s->first);

	while (k < s->nshort && !(s->srank[k].urgency >= 0))
		k = short_next(s, k + 1);
	s->first = k;
	return k < s->nshort && s->srank[k].rem < rem;
}

/* Candidate c is dealt with in this batch: out of the index. */
static void
set_packed(struct medha_sched *s, struct cand *c)
{
	c->packed = 1;
	if (c->rank >= 0) {
		s->nxt[c->rank] = c->rank + 1;
		c->rank = -1;
	}
}

/*
 * Make room for n candidates (and medha's index of them). 0 or
 * MEDHA_ENOMEM.
 */
static int
grow_cands(struct medha_sched *s, int n)
{
	void *p;

	if (s->cands_cap >= n)
		return 0;
	if ((p = medha_reallocarray(s->cands, n, sizeof(*s->cands))) == NULL)
		return MEDHA_ENOMEM;
	s->cands = p;
	if (s->cfg.policy == MEDHA_POLICY_MEDHA) {
		if ((p = medha_reallocarray(s->srank, n, sizeof(*s->srank))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->srank = p;
		if ((p = medha_reallocarray(s->count,
		         SHORT_COUNT_MAX * (size_t)n + 1, sizeof(*s->count))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->count = p;
		if ((p = medha_reallocarray(s->nxt, (size_t)n + 1,
		         sizeof(*s->nxt))) == NULL)
			return MEDHA_ENOMEM;
		s->nxt = p;
		if ((p = medha_reallocarray(s->pick, n, sizeof(*s->pick))) ==
		    NULL)
			return MEDHA_ENOMEM;
		s->pick = p;
	}
	s->cands_cap = n;
	return 0;
}

/* ---- forming a batch ---- */

static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->key < y->key)
		return -1;
	if (x->key > y->key)
		return 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

static int
push_item(struct medha_sched *s, int idx, int64_t t, int64_t kv, int decode,
    int last)
{
	/* idx: the request's slot; the item carries its handle */
	struct medha_sched_item *it;

	if (s->acc.n_items >= s->items_cap) {
		int ncap = s->items_cap ? 2 * s->items_cap : 256;
		void *n = medha_reallocarray(s->items, ncap, sizeof(*s->items));
		if (n == NULL)
			return MEDHA_ENOMEM;
		s->items = n;
		s->items_cap = ncap;
	}
	it = &s->items[s->acc.n_items];
	it->req = s->reqs[idx].pub.handle;
	it->tokens = t;
	it->kv = kv;
	it->decode = decode;
	it->last = last;
	medha_cost_add(&s->acc, s->pred, &s->kv, &s->reqs[idx].pub.kv, t, kv,
	    decode, last, NULL);
	return 0;
}

/*
 * Pack prefill candidate c within limit; admits it first if it waits for
 * memory. Returns 1 if packed, 0 if not, or a negative error.
 */
static int
pack_prefill(struct medha_sched *s, struct cand *c, double limit, int *npre)
{
	struct req *q = &s->reqs[c->idx];
	struct medha_req *r = &q->pub;
	int64_t t, P = r->spec.prompt_tokens;
	int last, rc;

	set_packed(s, c);
	if (*npre >= s->cfg.max_prefills)
		return 0;
	if (r->state == MEDHA_REQ_WAITING && admit(s, q) != 0)
		return 0;
	t = choose_chunk(s, r, limit);
	if (t == 0 && s->acc.n_items == 0) /* alone, it must make progress */
		t = s->cfg.chunk > 0 ? s->cfg.chunk : 32;
	/* adaptive, and no decode waits on this batch: fill it to the
	   efficient chunk, however long that takes */
	if (s->cfg.chunk == 0 && s->ndec == 0 &&
	    s->acc.n_tokens + t < s->min_chunk)
		t = (s->min_chunk - s->acc.n_tokens + 31) / 32 * 32;
	if (t > chunk_room(s, r))
		t = chunk_room(s, r);
	if (t == 0)
		return 0;
	last = r->sched_prefill + t == P;
	if ((rc = push_item(s, c->idx, t, r->kv_tokens, 0, last)) != 0)
		return rc;
	medha_kvplace_prefilled(&s->kv, &r->kv, r->sched_prefill,
	    r->sched_prefill + t);
	r->sched_prefill += t;
	r->kv_tokens += t;
	/* sarathi: the next chunk waits until this one left the last stage */
	if (last || s->cfg.policy == MEDHA_POLICY_SARATHI)
		r->busy = 1;
	(*npre)++;
	return 1;
}

/*
 * Prefill-prefill batching for candidate i: if it cannot finish in this
 * batch and short prefills wait behind it, they are packed first (in
 * policy order) within share = min(share_cap, the most urgent one's
 * urgency) of the budget left, then i takes what remains. A short
 * prefill is one not packed yet that can finish in a single chunk and
 * has less left than i. Returns 1 if i was dealt with (packed or found
 * unadmittable), 0 to pack it the ordinary way, or an error.
 *
 * The short prefills are found in the index: when i's turn comes every
 * candidate before it in policy order has been dealt with (packed), and
 * i is not short against itself, so the index's unpacked candidates with
 * less left than i are exactly the short ones behind i; u is the highest
 * of their urgencies, as one pass over them in any order finds it.
 */
static int
share_batch(struct medha_sched *s, int i, int nc, double limit, int *npre)
{
	struct cand *c = &s->cands[i];
	struct req *q = &s->reqs[c->idx];
	int n = 0, rc;
	double u = -1, base, share, lim;

	if (!short_any(s, c->rem))
		return 0;
	if (q->pub.state == MEDHA_REQ_WAITING && admit(s, q) != 0) {
		set_packed(s, c);
		return 1;
	}
	if (c->rem <= s->cfg.max_chunk &&
	    trial_cost(s, &q->pub, c->rem) <= limit)
		return 0; /* it finishes here anyway */
	for (int k = short_next(s, 0);
	     k < s->nshort && s->srank[k].rem < c->rem;
	     k = short_next(s, k + 1)) {
		if (s->srank[k].urgency > u)
			u = s->srank[k].urgency;
		s->pick[n++] = s->srank[k].pos;
	}
	s->visits += (uint64_t)n;
	share = u < s->cfg.share_cap ? u : s->cfg.share_cap;
	base = acc_cost(s, &s->acc);
	lim = base + share * (limit - base);
	/*
	 * Pack them in policy order: by walking the candidates behind i when
	 * they are few against the short ones, else through a heap, only
	 * while the batch may take prefills (past that, pack_prefill would
	 * only mark them packed, in any order).
	 */
	if (nc - i - 1 <= SHORT_WALK_MAX * n) {
		for (int k = 0; k < n; k++)
			s->cands[s->pick[k]].packed = 2;
		for (int j = i + 1; j < nc; j++)
			if (s->cands[j].packed == 2 &&
			    (rc = pack_prefill(s, &s->cands[j], lim, npre)) < 0)
				return rc;
		s->visits += (uint64_t)(nc - i - 1);
	} else {
		for (int k = n / 2 - 1; k >= 0; k--)
			heap_down(s, n, k);
		while (n > 0 && *npre < s->cfg.max_prefills) {
			int pos = s->pick[0];
			s->pick[0] = s->pick[--n];
			heap_down(s, n, 0);
			if ((rc = pack_prefill(s, &s->cands[pos], lim, npre)) <
			    0)
				return rc;
		}
		while (n > 0)
			set_packed(s, &s->cands[s->pick[--n]]);
	}
	if ((rc = pack_prefill(s, c, limit, npre)) < 0)
		return rc;
	return 1;
}

int
medha_sched_next_batch(struct medha_sched *s, double now,
    struct medha_sched_batch *b)
{
	int nc = 0, npre = 0, rc;
	double limit = s->cfg.chunk > 0 ? (double)s->cfg.chunk : s->cfg.target;
	double tight = INFINITY; /* the decodes' tightest tpot_slo */
	struct medha_lat l;

	memset(&s->acc, 0, sizeof(s->acc));
	if ((rc = grow_cands(s, s->nactive)) != 0)
		return rc;
	/* (1) every decode that has its previous token; (2) candidates */
	for (int i = 0; i < s->nactive; i++) {
		int idx = s->active[i];
		struct medha_req *r = &s->reqs[idx].pub;
		struct cand *c;

		if (i + PF_REQS < s->nactive)
			prefetch_req(s, s->active[i + PF_REQS]);
		if (r->busy)
			continue;
		if (r->state == MEDHA_REQ_DECODE) {
			if ((rc = push_item(s, idx, 1, r->kv_tokens, 1, 0)) !=
			    0)
				return rc;
			r->kv_tokens++;
			r->busy = 1;
			if (r->tpot_slo > 0 && r->tpot_slo < tight)
				tight = r->tpot_slo;
			continue;
		}
		c = &s->cands[nc++];
		c->idx = idx;
		c->rem = r->spec.prompt_tokens - r->sched_prefill;
		c->packed = 0;
		c->rank = -1;
		c->urgency = 1 - relative_slack(r, now);
		c->urgency = c->urgency < 0 ? 0
		    : c->urgency > 1        ? 1
		                            : c->urgency;
		switch (s->cfg.policy) {
		case MEDHA_POLICY_FCFS:
		case MEDHA_POLICY_SARATHI: c->key = r->spec.arrival; break;
		case MEDHA_POLICY_EDF: c->key = r->deadline; break;
		default: c->key = relative_slack(r, now); break;
		}
	}
	b->n_decode = s->ndec = s->acc.n_items;
	/*
	 * Adaptive: the batch is a token of each of its decodes, so their
	 * tightest TPOT SLO bounds it where that is below the target; but
	 * not below twice a 32-token chunk's time alone, where prefills
	 * could not join at all (the SLO cannot be kept then anyway).
	 */
	if (s->cfg.chunk == 0 && tight < limit)
		limit = tight > s->tpot_floor ? tight
		    : s->tpot_floor < limit   ? s->tpot_floor
		                              : limit;
	if (nc > 1)
		qsort(s->cands, nc, sizeof(*s->cands), cand_cmp);
	if (s->cfg.policy == MEDHA_POLICY_MEDHA && nc > 0)
		short_index(s, nc);

	/* (3) prefills in policy order; medha lets short ones share */
	for (int i = 0; i < nc; i++) {
		struct cand *c = &s->cands[i];
		s->visits++;
		if (c->packed)
			continue;
		if (s->cfg.policy == MEDHA_POLICY_MEDHA &&
		    (rc = share_batch(s, i, nc, limit, &npre)) != 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		if ((rc = pack_prefill(s, c, limit, &npre)) < 0)
			return rc;
	}
	if (s->acc.n_items == 0)
		return 0;

	l = medha_cost_latency(&s->acc, s->pred, s->kv.kvp);
	b->seq = s->seq++;
	b->start = now;
	b->stage_time = l.stage;
	b->last_time = l.last;
	b->latency = l.latency;
	b->n_items = s->acc.n_items;
	b->n_tokens = s->acc.n_tokens;
	b->items = s->items;
	return 1;
}

int
medha_sched_batch_done(struct medha_sched *s, const struct medha_sched_batch *b,
    const struct medha_sched_result *res, double now)
{
	/* most decodes of a batch had their last token at the same time:
	   their gap's bucket is found once */
	double gap_seen = -1;
	int bucket_seen = 0;

	for (int i = 0; i < b->n_items; i++) {
		const struct medha_sched_item *it = &b->items[i];
		struct req *q = lookup(s, it->req);
		struct medha_req *r;
		int rc, stop = res != NULL && res[i].stop != 0;

		if (i + PF_REQS < b->n_items) {
			uint64_t slot = b->items[i + PF_REQS].req & 0xffffffffu;
			if (slot < (uint64_t)s->reqs_cap)
				prefetch_req(s, (int)slot);
		}
		if (i + PF_REQS / 2 < b->n_items) {
			/* its head was fetched PF_REQS / 2 items ago */
			const struct req *n =
			    lookup(s, b->items[i + PF_REQS / 2].req);
			if (n != NULL && n->pub.tbt.bin != NULL)
				__builtin_prefetch(
				    &n->pub.tbt.bin[n->pub.tbt.last]);
		}

		if (q == NULL) /* cancelled or failed meanwhile */
			continue;
		r = &q->pub;
		if (!it->decode && !it->last) {
			if (s->cfg.policy == MEDHA_POLICY_SARATHI)
				r->busy = 0; /* its next chunk may go */
			continue;
		}
		r->busy = 0;
		if (stop) {
			/* the stopping token is not output */
			if (!it->decode) {
				r->first_token = now;
				r->last_token = now;
			}
			if ((rc = finish(s, q, MEDHA_STATUS_OK,
			         MEDHA_FINISH_STOP, NULL, now)) != 0)
				return rc;
			continue;
		}
		if (it->decode) {
			double gap = now - r->last_token;
			if (gap > r->tpot_max)
				r->tpot_max = gap;
			/* a caller's clock that steps back counts no gap */
			gap = gap > 0 ? gap : 0;
			if (gap != gap_seen) {
				gap_seen = gap;
				bucket_seen = medha_tbt_bucket(gap);
			}
			if ((rc = medha_tbt_add_n(&r->tbt, bucket_seen, 1)) !=
			    0)
				return rc;
			r->decoded++;
			r->last_token = now;
		} else {
			r->state = MEDHA_REQ_DECODE;
			r->first_token = now;
			r->last_token = now;
			if (r->max_tokens > 0)
				r->decoded = 1;
		}
		if (r->decoded >= r->max_tokens &&
		    (rc = finish(s, q, MEDHA_STATUS_OK, MEDHA_FINISH_LENGTH,
		         NULL, now)) != 0)
			return rc;
	}
	return 0;
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
	const struct req *q = lookup(s, handle);

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
	return medha_kvplace_check(&s->kv, sum, why, whylen);
}
