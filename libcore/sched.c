/*
 * sched.c: the scheduler core. Request state, paged KV-block accounting
 * per KVP group, the four prefill orders, adaptive and fixed chunking,
 * prefill-prefill batching, and the batch-latency model that composes
 * the predictor's operator times for one batch on a tp x spp x kvp grid.
 *
 * Memory: at admission a request reserves the KV blocks for its prompt
 * and all of its output tokens, so a decode can never run out of memory
 * and be preempted; a request that cannot get its blocks waits. Its KV is
 * cut into pieces of at most kvp_max_tokens, one KVP group each, chosen
 * at admission by least pending prefill work; the request enters the next
 * group when its KV passes the previous group's limit, and only its last
 * entered group appends KV.
 */
#include "sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Internal request: the public view plus bookkeeping. */
struct req {
	struct medha_req pub;
	int slot; /* index in s->active, -1 once done */
};

/* Work of one batch per KVP group, as the latency model needs it. */
struct acc {
	int64_t lin[MEDHA_KVP_MAX];    /* tokens whose linear layers run here */
	int64_t dec_n[MEDHA_KVP_MAX];  /* decode sequences attending here */
	int64_t dec_kv[MEDHA_KVP_MAX]; /* KV tokens those decodes read here */
	double attn[MEDHA_KVP_MAX];    /* prefill attention time here, s */
	int64_t merge_tokens; /* query tokens of multi-group requests */
	int merge_groups;     /* most groups one of them spans */
	int64_t n_logits;     /* sequences that need logits */
	int64_t n_tokens;
	int n_items;
};

/* What adding one item changed, so a trial can be undone exactly. */
struct undo {
	struct acc saved_tail; /* merge_tokens .. n_items */
	int ng;
	int g[MEDHA_KVP_MAX];
	int64_t lin[MEDHA_KVP_MAX], dec_n[MEDHA_KVP_MAX], dec_kv[MEDHA_KVP_MAX];
	double attn[MEDHA_KVP_MAX];
};

struct cand {
	int idx;
	double key;     /* policy order, smaller first */
	double urgency; /* 1 - relative slack, clamped to [0, 1] */
	int64_t rem;    /* prompt tokens not yet handed out */
	int packed;
};

struct medha_sched {
	struct medha_sched_config cfg;
	const struct medha_pred *pred;
	int kvp;
	int64_t cap_blocks;         /* per group */
	int64_t glimit;             /* KV tokens of one request per group */
	int64_t res[MEDHA_KVP_MAX]; /* blocks reserved per group */
	int64_t
	    pend[MEDHA_KVP_MAX]; /* prompt tokens still to prefill per group */

	struct req *reqs;
	int nreqs, reqs_cap;
	int *active; /* indices of requests not done */
	int nactive;

	struct medha_record *recs; /* finished, not yet popped (ring) */
	int rec_head, rec_n, rec_cap;

	struct cand *cands;
	int cands_cap;
	struct medha_item *items;
	int items_cap;
	struct acc acc;
	uint64_t seq;
};

static const char *policy_names[] = {"fcfs", "edf", "lrs", "medha"};

int
medha_policy_parse(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(name, policy_names[i]) == 0)
			return i;
	return -1;
}

const char *
medha_policy_name(int policy)
{
	if (policy < 0 || policy > 3)
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
	c->target = 0.05;
	c->share_cap = 0.5;
	c->deadline_mult = 1.5;
	c->deadline_floor = 0.5;
	c->block_size = 16;
	c->kv_blocks = 0;
	c->mem_util = 0.9;
	c->kvp_max_tokens = 0;
	c->max_prefills = 64;
}

/* ---- batch latency model ---- */

static int64_t
overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
	int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
	return hi > lo ? hi - lo : 0;
}

/* Groups a request's KV occupies once it holds `kv` tokens (at least 1). */
static int
groups_entered(const struct medha_sched *s, const struct medha_req *r,
    int64_t kv)
{
	int64_t n = kv <= 0 ? 1 : (kv + s->glimit - 1) / s->glimit;
	return n > r->n_groups ? r->n_groups : (int)n;
}

struct lat {
	double stage, last, latency;
};

static struct lat
acc_latency(const struct medha_sched *s, const struct acc *a)
{
	const struct medha_pred *p = s->pred;
	double core = 0;
	struct lat l;

	for (int g = 0; g < s->kvp; g++) {
		double t;
		if (a->lin[g] == 0 && a->dec_n[g] == 0 && a->attn[g] == 0)
			continue;
		t = medha_pred_linear(p, a->lin[g]) + a->attn[g] +
		    medha_pred_attn_decode(p, a->dec_n[g], a->dec_kv[g]);
		if (t > core)
			core = t;
	}
	if (a->merge_groups > 1)
		core +=
		    medha_pred_kvp_merge(p, a->merge_tokens, a->merge_groups);
	l.stage = core + (p->spp > 1 ? medha_pred_spp_send(p, a->n_tokens) : 0);
	l.last = core + medha_pred_lm_head(p, a->n_logits);
	l.latency = (p->spp - 1) * l.stage + l.last;
	return l;
}

static void
save_group(struct undo *u, const struct acc *a, int g)
{
	for (int i = 0; i < u->ng; i++)
		if (u->g[i] == g)
			return;
	u->g[u->ng] = g;
	u->lin[u->ng] = a->lin[g];
	u->dec_n[u->ng] = a->dec_n[g];
	u->dec_kv[u->ng] = a->dec_kv[g];
	u->attn[u->ng] = a->attn[g];
	u->ng++;
}

/* Add t tokens of request r after kv cached tokens; record an undo if u. */
static void
acc_add(const struct medha_sched *s, struct acc *a, const struct medha_req *r,
    int64_t t, int64_t kv, int decode, int last, struct undo *u)
{
	int na = groups_entered(s, r, kv + t);

	if (u != NULL) {
		u->ng = 0;
		u->saved_tail.merge_tokens = a->merge_tokens;
		u->saved_tail.merge_groups = a->merge_groups;
		u->saved_tail.n_logits = a->n_logits;
		u->saved_tail.n_tokens = a->n_tokens;
		u->saved_tail.n_items = a->n_items;
		for (int i = 0; i < na; i++)
			save_group(u, a, r->groups[i]);
	}
	a->lin[r->groups[na - 1]] += t;
	for (int i = 0; i < na; i++) {
		int g = r->groups[i];
		int64_t lo = (int64_t)i * s->glimit, hi = lo + s->glimit;
		if (decode) {
			a->dec_n[g] += 1;
			a->dec_kv[g] += overlap(0, kv + 1, lo, hi);
		} else {
			a->attn[g] += medha_pred_attn_prefill(s->pred, t,
			    overlap(0, kv, lo, hi));
		}
	}
	if (na > 1) {
		a->merge_tokens += t;
		if (na > a->merge_groups)
			a->merge_groups = na;
	}
	a->n_logits += decode || last;
	a->n_tokens += t;
	a->n_items++;
}

static void
acc_undo(struct acc *a, const struct undo *u)
{
	for (int i = 0; i < u->ng; i++) {
		int g = u->g[i];
		a->lin[g] = u->lin[i];
		a->dec_n[g] = u->dec_n[i];
		a->dec_kv[g] = u->dec_kv[i];
		a->attn[g] = u->attn[i];
	}
	a->merge_tokens = u->saved_tail.merge_tokens;
	a->merge_groups = u->saved_tail.merge_groups;
	a->n_logits = u->saved_tail.n_logits;
	a->n_tokens = u->saved_tail.n_tokens;
	a->n_items = u->saved_tail.n_items;
}

/* The cost a chunking mode budgets: latency (adaptive) or tokens (fixed). */
static double
acc_cost(const struct medha_sched *s, const struct acc *a)
{
	if (s->cfg.chunk > 0)
		return (double)a->n_tokens;
	return acc_latency(s, a).latency;
}

static double
trial_cost(struct medha_sched *s, const struct medha_req *r, int64_t t)
{
	struct undo u;
	double c;
	int64_t kv = r->kv_tokens;

	acc_add(s, &s->acc, r, t, kv, 0,
	    r->sched_prefill + t == r->spec.prompt_tokens, &u);
	c = acc_cost(s, &s->acc);
	acc_undo(&s->acc, &u);
	return c;
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
	int64_t rem = r->spec.prompt_tokens - r->sched_prefill;
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
static struct lat
lone_latency(const struct medha_sched *s, int64_t c, int64_t kv)
{
	const struct medha_pred *p = s->pred;
	double core =
	    medha_pred_linear(p, c) + medha_pred_attn_prefill(p, c, kv);
	struct lat l;

	l.stage = core + (p->spp > 1 ? medha_pred_spp_send(p, c) : 0);
	l.last = core + medha_pred_lm_head(p, 1);
	l.latency = (p->spp - 1) * l.stage + l.last;
	return l;
}

static int64_t
lone_chunk(const struct medha_sched *s, int64_t kv, int64_t rem)
{
	int64_t lo = 1, hi;

	if (s->cfg.chunk > 0)
		return s->cfg.chunk < rem ? s->cfg.chunk : rem;
	hi = s->cfg.max_chunk / 32;
	if (lone_latency(s, 32, kv).latency > s->cfg.target)
		return 32;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo + 1) / 2;
		if (lone_latency(s, 32 * mid, kv).latency <= s->cfg.target)
			lo = mid;
		else
			hi = mid - 1;
	}
	return 32 * lo;
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
	struct lat l = {0, 0, 0};

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
		l = lone_latency(s, c, kv);
		occ = l.stage > l.last ? l.stage : l.last;
		cum[i + 1] = cum[i] + occ * (double)seg / (double)c;
	}
	return cum[MEDHA_SLACK_SEGS] +
	    (l.latency - (l.stage > l.last ? l.stage : l.last));
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

static double
relative_slack(const struct medha_req *r, double now)
{
	return (r->deadline - now - remaining_time(r)) / r->deadline_dur;
}

/* ---- memory: reservation per KVP group ---- */

static int64_t
blocks_for(const struct medha_sched *s, int64_t tokens)
{
	return (tokens + s->cfg.block_size - 1) / s->cfg.block_size;
}

/* KV tokens a request needs in all: prompt and every output token. */
static int64_t
kv_need(const struct medha_req *r)
{
	return r->spec.prompt_tokens + r->spec.max_tokens;
}

/* 1 if r could be placed on an empty replica. */
static int
fits_ever(const struct medha_sched *s, const struct medha_req *r)
{
	int64_t need = kv_need(r);
	int64_t ng = (need + s->glimit - 1) / s->glimit;

	if (ng < 1)
		ng = 1;
	return ng <= s->kvp &&
	    blocks_for(s, need < s->glimit ? need : s->glimit) <= s->cap_blocks;
}

/* Reserve blocks for r on ceil(need / glimit) groups; 0 or ENOSPACE. */
static int
admit(struct medha_sched *s, struct req *q)
{
	struct medha_req *r = &q->pub;
	int64_t need = kv_need(r), P = r->spec.prompt_tokens;
	int ng = (int)((need + s->glimit - 1) / s->glimit);
	int used[MEDHA_KVP_MAX] = {0};

	if (ng < 1)
		ng = 1;
	for (int i = 0; i < ng; i++) {
		int64_t lo = (int64_t)i * s->glimit;
		int64_t nb =
		    blocks_for(s, overlap(0, need, lo, lo + s->glimit));
		int best = -1;
		for (int g = 0; g < s->kvp; g++) {
			if (used[g] || s->cap_blocks - s->res[g] < nb)
				continue;
			if (best < 0 || s->pend[g] < s->pend[best])
				best = g;
		}
		if (best < 0) {
			for (int j = 0; j < i; j++)
				s->res[r->groups[j]] -= r->res_blocks[j];
			r->n_groups = 0;
			return MEDHA_ENOSPACE;
		}
		used[best] = 1;
		r->groups[i] = best;
		r->res_blocks[i] = nb;
		s->res[best] += nb;
	}
	r->n_groups = ng;
	for (int i = 0; i < ng; i++) {
		int64_t lo = (int64_t)i * s->glimit;
		s->pend[r->groups[i]] += overlap(0, P, lo, lo + s->glimit);
	}
	r->state = MEDHA_REQ_PREFILL;
	return 0;
}

static void
release(struct medha_sched *s, struct medha_req *r)
{
	for (int i = 0; i < r->n_groups; i++)
		s->res[r->groups[i]] -= r->res_blocks[i];
}

/* ---- life cycle ---- */

int
medha_sched_init(struct medha_sched **sp, const struct medha_sched_config *c,
    const struct medha_pred *p)
{
	struct medha_sched *s;
	int64_t cap;

	*sp = NULL;
	if (c->policy < 0 || c->policy > MEDHA_POLICY_MEDHA || c->chunk < 0 ||
	    c->max_chunk < 32 || c->target <= 0 || c->share_cap < 0 ||
	    c->share_cap > 1 || c->deadline_mult <= 0 ||
	    c->deadline_floor < 0 || c->block_size < 1 || c->kv_blocks < 0 ||
	    c->mem_util <= 0 || c->mem_util > 1 || c->kvp_max_tokens < 0 ||
	    c->max_prefills < 1 || p->kvp < 1 || p->kvp > MEDHA_KVP_MAX)
		return MEDHA_EINVAL;
	if (c->kvp_max_tokens > 0 && c->kvp_max_tokens % c->block_size != 0)
		return MEDHA_EINVAL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return MEDHA_ENOMEM;
	s->cfg = *c;
	s->pred = p;
	s->kvp = p->kvp;
	if (c->kv_blocks > 0)
		s->cap_blocks = c->kv_blocks;
	else {
		cap = medha_pred_kv_capacity(p, c->mem_util);
		s->cap_blocks = cap / c->block_size;
	}
	if (s->cap_blocks <= 0) {
		free(s);
		return MEDHA_ENOSPACE;
	}
	s->glimit = s->cap_blocks * c->block_size;
	if (c->kvp_max_tokens > 0 && c->kvp_max_tokens < s->glimit)
		s->glimit = c->kvp_max_tokens;
	*sp = s;
	return 0;
}

void
medha_sched_free(struct medha_sched *s)
{
	if (s == NULL)
		return;
	free(s->reqs);
	free(s->active);
	free(s->recs);
	free(s->cands);
	free(s->items);
	free(s);
}

static int
push_record(struct medha_sched *s, const struct medha_req *r, int status,
    double now)
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
	rec->arrival = r->spec.arrival;
	rec->prompt_tokens = r->spec.prompt_tokens;
	rec->status = status;
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

static void
deactivate(struct medha_sched *s, struct req *q)
{
	int slot = q->slot;
	int last = s->active[--s->nactive];

	s->active[slot] = last;
	s->reqs[last].slot = slot;
	q->slot = -1;
	q->pub.state = MEDHA_REQ_DONE;
}

static int
finish(struct medha_sched *s, struct req *q, int status, double now)
{
	release(s, &q->pub);
	deactivate(s, q);
	return push_record(s, &q->pub, status, now);
}

int
medha_sched_arrive(struct medha_sched *s, const struct medha_reqspec *spec,
    double now)
{
	struct req *q;
	struct medha_req *r;

	if (s->nreqs == s->reqs_cap) {
		int ncap = s->reqs_cap ? 2 * s->reqs_cap : 256;
		void *n1 = medha_reallocarray(s->reqs, ncap, sizeof(*s->reqs));
		if (n1 == NULL)
			return MEDHA_ENOMEM;
		s->reqs = n1;
		n1 = medha_reallocarray(s->active, ncap, sizeof(*s->active));
		if (n1 == NULL)
			return MEDHA_ENOMEM;
		s->active = n1;
		s->reqs_cap = ncap;
	}
	q = &s->reqs[s->nreqs];
	memset(q, 0, sizeof(*q));
	r = &q->pub;
	r->spec = *spec;
	r->spec.prompt = NULL;
	r->state = MEDHA_REQ_WAITING;
	q->slot = s->nactive;
	s->active[s->nactive++] = s->nreqs;
	s->nreqs++;

	if (spec->prompt_tokens < 1 || spec->max_tokens < 0) {
		medha_log(MEDHA_LOG_WARN,
		    "request %s: no prompt_tokens; rejected", spec->id);
		r->deadline_dur = spec->ttft_slo;
		return finish(s, q, MEDHA_STATUS_REJECTED, now);
	}
	r->deadline_dur = plan_alone(s, spec->prompt_tokens, r->cum);
	r->deadline_dur *= s->cfg.deadline_mult;
	if (r->deadline_dur < s->cfg.deadline_floor)
		r->deadline_dur = s->cfg.deadline_floor;
	if (spec->ttft_slo > 0)
		r->deadline_dur = spec->ttft_slo;
	r->deadline = spec->arrival + r->deadline_dur;
	if (!fits_ever(s, r)) {
		medha_log(MEDHA_LOG_WARN,
		    "request %s: %lld prompt + %lld output tokens exceed the "
		    "replica's KV memory; rejected",
		    spec->id, (long long)spec->prompt_tokens,
		    (long long)spec->max_tokens);
		return finish(s, q, MEDHA_STATUS_REJECTED, now);
	}
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
	struct medha_item *it;

	if (s->acc.n_items >= s->items_cap) {
		int ncap = s->items_cap ? 2 * s->items_cap : 256;
		void *n = medha_reallocarray(s->items, ncap, sizeof(*s->items));
		if (n == NULL)
			return MEDHA_ENOMEM;
		s->items = n;
		s->items_cap = ncap;
	}
	it = &s->items[s->acc.n_items];
	it->req = idx;
	it->tokens = t;
	it->kv = kv;
	it->decode = decode;
	it->last = last;
	acc_add(s, &s->acc, &s->reqs[idx].pub, t, kv, decode, last, NULL);
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

	c->packed = 1;
	if (*npre >= s->cfg.max_prefills)
		return 0;
	if (r->state == MEDHA_REQ_WAITING && admit(s, q) != 0)
		return 0;
	t = choose_chunk(s, r, limit);
	if (t == 0 && s->acc.n_items == 0) /* alone, it must make progress */
		t = s->cfg.chunk > 0 ? s->cfg.chunk : 32;
	if (t > P - r->sched_prefill)
		t = P - r->sched_prefill;
	if (t == 0)
		return 0;
	last = r->sched_prefill + t == P;
	if ((rc = push_item(s, c->idx, t, r->kv_tokens, 0, last)) != 0)
		return rc;
	for (int i = 0; i < r->n_groups; i++) {
		int64_t lo = (int64_t)i * s->glimit;
		s->pend[r->groups[i]] -= overlap(r->sched_prefill,
		    r->sched_prefill + t, lo, lo + s->glimit);
	}
	r->sched_prefill += t;
	r->kv_tokens += t;
	if (last)
		r->busy = 1;
	(*npre)++;
	return 1;
}

/*
 * A short prefill is one that can finish in a single chunk and has less
 * left than the prefill it would share with.
 */
static int
is_short(const struct medha_sched *s, const struct cand *d,
    const struct cand *c)
{
	int64_t one = s->cfg.chunk > 0 ? s->cfg.chunk : s->cfg.max_chunk;

	return !d->packed && d->rem < c->rem && d->rem <= one;
}

/*
 * Prefill-prefill batching for candidate i: if it cannot finish in this
 * batch and short prefills wait behind it, they are packed first within
 * share = min(share_cap, the most urgent one's urgency) of the budget
 * left, then i takes what remains. Returns 1 if i was dealt with (packed
 * or found unadmittable), 0 to pack it the ordinary way, or an error.
 */
static int
share_batch(struct medha_sched *s, int i, int nc, double limit, int *npre)
{
	struct cand *c = &s->cands[i];
	struct req *q = &s->reqs[c->idx];
	double u = -1, base, share;
	int rc;

	for (int j = i + 1; j < nc; j++)
		if (is_short(s, &s->cands[j], c) && s->cands[j].urgency > u)
			u = s->cands[j].urgency;
	if (u < 0)
		return 0;
	if (q->pub.state == MEDHA_REQ_WAITING && admit(s, q) != 0) {
		c->packed = 1;
		return 1;
	}
	if (c->rem <= s->cfg.max_chunk &&
	    trial_cost(s, &q->pub, c->rem) <= limit)
		return 0; /* it finishes here anyway */
	share = u < s->cfg.share_cap ? u : s->cfg.share_cap;
	base = acc_cost(s, &s->acc);
	for (int j = i + 1; j < nc; j++) {
		struct cand *d = &s->cands[j];
		if (!is_short(s, d, c))
			continue;
		if ((rc = pack_prefill(s, d, base + share * (limit - base),
		         npre)) < 0)
			return rc;
	}
	if ((rc = pack_prefill(s, c, limit, npre)) < 0)
		return rc;
	return 1;
}

int
medha_sched_next_batch(struct medha_sched *s, double now, struct medha_batch *b)
{
	int nc = 0, npre = 0, rc;
	double limit = s->cfg.chunk > 0 ? (double)s->cfg.chunk : s->cfg.target;
	struct lat l;

	memset(&s->acc, 0, sizeof(s->acc));
	if (s->cands_cap < s->nactive) {
		void *n =
		    medha_reallocarray(s->cands, s->nactive, sizeof(*s->cands));
		if (n == NULL)
			return MEDHA_ENOMEM;
		s->cands = n;
		s->cands_cap = s->nactive;
	}
	/* (1) every decode that has its previous token; (2) candidates */
	for (int i = 0; i < s->nactive; i++) {
		int idx = s->active[i];
		struct medha_req *r = &s->reqs[idx].pub;
		struct cand *c;

		if (r->busy)
			continue;
		if (r->state == MEDHA_REQ_DECODE) {
			if ((rc = push_item(s, idx, 1, r->kv_tokens, 1, 0)) !=
			    0)
				return rc;
			r->kv_tokens++;
			r->busy = 1;
			continue;
		}
		c = &s->cands[nc++];
		c->idx = idx;
		c->rem = r->spec.prompt_tokens - r->sched_prefill;
		c->packed = 0;
		c->urgency = 1 - relative_slack(r, now);
		c->urgency = c->urgency < 0 ? 0
		    : c->urgency > 1        ? 1
		                            : c->urgency;
		switch (s->cfg.policy) {
		case MEDHA_POLICY_FCFS: c->key = r->spec.arrival; break;
		case MEDHA_POLICY_EDF: c->key = r->deadline; break;
		default: c->key = relative_slack(r, now); break;
		}
	}
	b->n_decode = s->acc.n_items;
	if (nc > 1)
		qsort(s->cands, nc, sizeof(*s->cands), cand_cmp);

	/* (3) prefills in policy order; medha lets short ones share */
	for (int i = 0; i < nc; i++) {
		struct cand *c = &s->cands[i];
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

	l = acc_latency(s, &s->acc);
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
medha_sched_batch_done(struct medha_sched *s, const struct medha_batch *b,
    double now)
{
	for (int i = 0; i < b->n_items; i++) {
		const struct medha_item *it = &b->items[i];
		struct req *q = &s->reqs[it->req];
		struct medha_req *r = &q->pub;
		int rc;

		if (r->state == MEDHA_REQ_DONE)
			continue;
		if (!it->decode && !it->last)
			continue;
		r->busy = 0;
		if (it->decode) {
			double gap = now - r->last_token;
			if (gap > r->tpot_max)
				r->tpot_max = gap;
			r->decoded++;
			r->last_token = now;
		} else {
			r->state = MEDHA_REQ_DECODE;
			r->first_token = now;
			r->last_token = now;
			if (r->spec.max_tokens > 0)
				r->decoded = 1;
		}
		if (r->decoded >= r->spec.max_tokens &&
		    (rc = finish(s, q, MEDHA_STATUS_OK, now)) != 0)
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

int
medha_sched_nreq(const struct medha_sched *s)
{
	return s->nreqs;
}

const struct medha_req *
medha_sched_req(const struct medha_sched *s, int idx)
{
	if (idx < 0 || idx >= s->nreqs)
		return NULL;
	return &s->reqs[idx].pub;
}

int64_t
medha_sched_group_capacity(const struct medha_sched *s)
{
	return s->cap_blocks;
}

int64_t
medha_sched_group_reserved(const struct medha_sched *s, int group)
{
	if (group < 0 || group >= s->kvp)
		return -1;
	return s->res[group];
}

int
medha_sched_check(const struct medha_sched *s, char *why, size_t whylen)
{
	int64_t sum[MEDHA_KVP_MAX] = {0};

	for (int i = 0; i < s->nactive; i++) {
		const struct medha_req *r = &s->reqs[s->active[i]].pub;
		for (int g = 0; g < r->n_groups; g++) {
			int64_t lo = (int64_t)g * s->glimit;
			int64_t used = blocks_for(s,
			    overlap(0, r->kv_tokens, lo, lo + s->glimit));
			sum[r->groups[g]] += r->res_blocks[g];
			if (used > r->res_blocks[g]) {
				snprintf(why, whylen,
				    "request %s uses %lld blocks of group %d, "
				    "reserved %lld",
				    r->spec.id, (long long)used, r->groups[g],
				    (long long)r->res_blocks[g]);
				return MEDHA_EINVAL;
			}
		}
		if (r->n_groups == 0 && r->kv_tokens > 0) {
			snprintf(why, whylen, "request %s has KV but no group",
			    r->spec.id);
			return MEDHA_EINVAL;
		}
	}
	for (int g = 0; g < s->kvp; g++) {
		if (sum[g] != s->res[g] || s->res[g] > s->cap_blocks) {
			snprintf(why, whylen,
			    "group %d: reserved %lld (sum %lld) of %lld blocks",
			    g, (long long)s->res[g], (long long)sum[g],
			    (long long)s->cap_blocks);
			return MEDHA_EINVAL;
		}
	}
	return 0;
}
