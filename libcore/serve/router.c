/*
 * router.c: medha-router (router.h). The main thread serves the clients'
 * socket (serve/front.c's loop) and owns every request and every
 * decision; each replica's client (net/pcli.h) carries the messages to
 * it and back, and wakes the main thread when something came
 * (router_up.c).
 *
 * A client's SUBMIT is answered at once: ERROR if the router is
 * stopping or full, else ACCEPTED with the router's handle (the request
 * is held if no replica is ready), and from then on a record follows
 * whatever happens (a replica's refusal is a "rejected" record),
 * so that a slow or stopped replica never keeps a client waiting for an
 * answer. A request goes to the ready replica with the least predicted
 * work that has the KV memory for it.
 */
#include "serve/router_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void
medha_router_config_default(struct medha_router_config *c)
{
	memset(c, 0, sizeof(*c));
	c->drain_timeout = 30;
	c->max_queue = 100000;
	c->status_interval = 0.1;
	c->hold_timeout = 30;
	c->cache_balance = 1;
}

/* ---- requests ---- */

/* A replica's client, or the tokenizer's thread, has news: the main
 * thread's loop takes it. */
static void
wake_loop(void *arg)
{
	medha_srv_wake(arg);
}

static void
rreq_free(struct rreq *q)
{
	medha_reqspec_clear(&q->spec);
	free(q->tried);
	free(q->keys);
	free(q);
}

/* q waits no more in r->held. */
static void
unhold(struct medha_router *r, struct rreq *q)
{
	int64_t i = 0;

	while (i < r->nheld && r->held[i] != q)
		i++;
	if (i < r->nheld) {
		memmove(&r->held[i], &r->held[i + 1],
		    (size_t)(r->nheld - i - 1) * sizeof(*r->held));
		r->nheld--;
	}
	q->held = 0;
}

/* q waits in r->held for a replica: 0, or -1 (holding is off, or no
 * memory). */
static int
hold(struct medha_router *r, struct rreq *q)
{
	if (!(r->cfg.hold_timeout > 0) || r->f.drain.on)
		return -1;
	if (r->nheld == r->held_cap) {
		int64_t cap = r->held_cap ? 2 * r->held_cap : 64;
		void *n = medha_reallocarray(r->held, (size_t)cap,
		    sizeof(*r->held));
		if (n == NULL)
			return -1;
		r->held = n;
		r->held_cap = cap;
	}
	/* in arrival order (handles are): one put back goes before those
	 * that came after it */
	int64_t i = r->nheld;
	while (i > 0 && r->held[i - 1]->handle > q->handle)
		i--;
	memmove(&r->held[i + 1], &r->held[i],
	    (size_t)(r->nheld - i) * sizeof(*r->held));
	r->held[i] = q;
	r->nheld++;
	q->held = 1;
	q->rep = -1;
	if (q->held_since == 0)
		q->held_since = medha_now() - r->t0;
	return 0;
}

/* q is over: forget it everywhere. */
void
rt_rreq_end(struct medha_router *r, struct rreq *q)
{
	struct medha_client *c;

	if (q->rep >= 0 && q->up != 0 &&
	    medha_map_get(&r->up[q->rep].by_up, q->up) == q) {
		medha_map_del(&r->up[q->rep].by_up, q->up);
		r->up[q->rep].live--;
	}
	if (q->held)
		unhold(r, q);
	if (q->job != NULL && medha_tokq_cancel(r->tokq, &q->job->tj)) {
		r->tok_bytes -= q->job->tj.len; /* not started: never comes */
		free(q->job->text);             /* back */
		free(q->job);
	} /* else it comes back to find its request gone */
	q->job = NULL;
	medha_map_del(&r->reqs, q->handle);
	if ((c = medha_clients_find(&r->f.clients, q->peer, 0)) != NULL)
		c->live--;
	r->f.live--;
	rreq_free(q);
}

/* End q with a record of status and reason made here. */
void
rt_rreq_fail(struct medha_router *r, struct rreq *q, int status,
    const char *reason)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};
	double t = medha_now() - r->t0;

	if (!q->gone && (ev.record = calloc(1, sizeof(*ev.record))) != NULL) {
		struct medha_record *rec = ev.record;
		memcpy(rec->id, q->id, sizeof(rec->id));
		rec->arrival = q->arrival;
		rec->first_token = rec->finish = t;
		rec->ttft = t - q->arrival;
		rec->prompt_tokens = q->prompt;
		rec->status = status;
		snprintf(rec->reason, sizeof(rec->reason), "%s", reason);
		rec->text = strdup("");
		ev.handle = q->handle;
		medha_clients_push(&r->f.clients, q->peer, &ev);
	}
	if (status == MEDHA_STATUS_FAILED)
		r->failed++;
	rt_count_end(r, NULL, status);
	rt_rreq_end(r, q);
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

/* Send q to the best replica left: 0, or -1 if none is left. */
static int
place(struct medha_router *r, struct rreq *q)
{
	int64_t hit;
	int i = choose(r, q, &hit);
	struct up *u;

	if (i < 0)
		return -1;
	u = &r->up[i];
	q->placed_n++;
	if (rt_submit(r, u, q) != 0)
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

/* Place q again after a replica failed it, or end it with why. */
void
rt_replace(struct medha_router *r, struct rreq *q, int status, const char *why)
{
	if (q->gone || q->cancel) {
		rt_rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
		    q->gone ? "client went away" : "cancelled by its client");
		return;
	}
	if (place(r, q) != 0 && hold(r, q) != 0)
		rt_rreq_fail(r, q, status, why);
}

/* ---- text to tokens (cfg.model) ---- */

/* A text of up to MEDHA_TOKQ_INLINE bytes is tokenized on the loop; a
 * longer one on the tokenizer's thread (tok/tokq.h). */
#define TOK_PENDING_MAX 256 /* texts waiting for the tokenizer */
#define TOK_BYTES_MAX ((size_t)256 << 20) /* and their bytes */

/*
 * q's prompt is n ids (taken over) in place of its text: 0, or a code
 * with why (an empty prompt, or one that with max_tokens exceeds the
 * model's context: what every replica would refuse).
 */
static int
prompt_ids(struct medha_router *r, struct rreq *q, int32_t *ids, size_t n,
    char *why, size_t whylen)
{
	struct medha_reqspec *rs = &q->spec;

	free(rs->prompt);
	rs->prompt = NULL;
	free(rs->prompt_ids);
	rs->prompt_ids = ids;
	rs->prompt_tokens = q->prompt = (int64_t)n;
	if (n == 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "the prompt is empty");
	if (r->ctx_len > 0 && rs->max_tokens > r->ctx_len - (int64_t)n)
		return medha_why(why, whylen, MEDHA_ERANGE,
		    "%lld prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    (long long)n, (long long)rs->max_tokens,
		    (long long)r->ctx_len);
	return 0;
}

/* q's text to the tokenizer's thread: 0, or MEDHA_ENOMEM. */
static int
tok_push(struct medha_router *r, struct rreq *q)
{
	struct rjob *j = calloc(1, sizeof(*j));

	if (j == NULL || (r->tokq == NULL &&
	                     medha_tokq_open(&r->tokq, wake_loop, r->f.srv) != 0))
		goto fail;
	j->handle = q->handle;
	j->text = q->spec.prompt;
	if (medha_tokq_push(r->tokq, &j->tj, r->tok, j->text, strlen(j->text),
	        MEDHA_TOK_DEFAULT) != 0)
		goto fail;
	r->tok_bytes += j->tj.len;
	q->spec.prompt = NULL;
	q->job = j;
	return 0;
fail:
	free(j);
	return MEDHA_ENOMEM;
}

/* q's prompt known (ids, or a text left to the replica): its size, its
 * hashes for cache-aware placement. */
static void
sized(struct medha_router *r, struct rreq *q)
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

/* The texts tokenized since the last pass: their requests placed. */
static void
tok_collect(struct medha_router *r)
{
	struct medha_tokq_job *tj;
	char why[MEDHA_PROTO_REASON_MAX];

	while (r->tokq != NULL && (tj = medha_tokq_take(r->tokq)) != NULL) {
		struct rjob *j = (struct rjob *)tj;
		struct rreq *q = medha_map_get(&r->reqs, j->handle);
		r->tok_bytes -= tj->len;
		free(j->text);
		if (q == NULL || q->job != j) { /* ended meanwhile */
			free(tj->ids);
			free(j);
			continue;
		}
		q->job = NULL;
		if (tj->rc != 0) {
			free(tj->ids);
			snprintf(why, sizeof(why), "tokenizing: %s",
			    medha_strerror(tj->rc));
			rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		} else if (q->gone) {
			free(tj->ids);
			rt_rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
			    "client went away");
		} else if (prompt_ids(r, q, tj->ids, tj->n, why,
		               sizeof(why)) != 0) {
			rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		} else {
			sized(r, q);
			if (place(r, q) != 0 && hold(r, q) != 0)
				rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED,
				    "no replica is ready");
		}
		free(j);
	}
}

/*
 * q's text, with a tokenizer: a short one tokenized now, a long one
 * pushed to the thread (its request accepted meanwhile, placed when its
 * ids come). 0, or a code with why to refuse the SUBMIT.
 */
static int
tokenize(struct medha_router *r, struct rreq *q, char *why, size_t whylen)
{
	struct medha_reqspec *rs = &q->spec;
	size_t len = strlen(rs->prompt), n = 0;
	int32_t *ids;
	int rc;

	if (len > MEDHA_TOKQ_INLINE) {
		if (r->tokq != NULL &&
		    (medha_tokq_pending(r->tokq) >= TOK_PENDING_MAX ||
		        r->tok_bytes + len > TOK_BYTES_MAX))
			return medha_why(why, whylen, MEDHA_ENOSPACE,
			    "overloaded: %zu text prompts of %zu bytes wait "
			    "for the tokenizer (at most %d, %zu bytes)",
			    medha_tokq_pending(r->tokq), r->tok_bytes,
			    TOK_PENDING_MAX, TOK_BYTES_MAX);
		if (tok_push(r, q) != 0)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		return 0;
	}
	if ((rc = medha_tok_encode(r->tok, rs->prompt, len, MEDHA_TOK_DEFAULT,
	         &ids, &n)) != 0)
		return medha_why(why, whylen, rc, "tokenizing: %s",
		    medha_strerror(rc));
	return prompt_ids(r, q, ids, n, why, whylen);
}

static void
on_submit(void *arg, struct medha_srv_ev *ev, struct medha_reqspec *rs)
{
	struct medha_router *r = arg;
	struct medha_client *c;
	struct rreq *q = NULL;
	char why[MEDHA_PROTO_REASON_MAX];
	int rc;

	if (r->f.drain.on) {
		rt_count_refused(r);
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "shutting down: not accepting requests");
		return;
	}
	if (r->f.live >= r->cfg.max_queue) {
		rt_count_refused(r);
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "overloaded: %lld requests in flight", (long long)r->f.live);
		return;
	}
	if ((c = medha_clients_find(&r->f.clients, ev->peer, 1)) == NULL ||
	    (q = calloc(1, sizeof(*q))) == NULL ||
	    (q->tried = medha_calloc((size_t)(r->nup + 63) / 64,
	         sizeof(*q->tried))) == NULL) {
		free(q);
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	q->handle = ++r->next_handle;
	if (medha_map_put(&r->reqs, q->handle, q) != 0) {
		rreq_free(q);
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	q->peer = ev->peer;
	memcpy(q->id, rs->id, sizeof(q->id));
	q->arrival = medha_now() - r->t0;
	q->rep = -1;
	q->spec = *rs; /* taken over */
	memset(rs, 0, sizeof(*rs));
	rc = 0;
	if (r->tok != NULL && q->spec.prompt != NULL &&
	    q->spec.prompt_ids == NULL)
		rc = tokenize(r, q, why, sizeof(why));
	if (rc == 0 && q->job == NULL) {
		sized(r, q);
		if (place(r, q) != 0 && hold(r, q) != 0)
			rc = medha_why(why, sizeof(why), MEDHA_ENOSPACE,
			    "no replica is ready");
	}
	if (rc != 0) {
		rt_count_refused(r);
		medha_srv_error(r->f.srv, ev->call, rc, "%s", why);
		medha_map_del(&r->reqs, q->handle);
		rreq_free(q); /* no job: tokenize() pushed none */
		return;
	}
	r->f.live++;
	c->live++;
	{
		struct medha_msg a = {.type = MEDHA_MSG_ACCEPTED};
		memcpy(a.accepted.id, q->id, sizeof(a.accepted.id));
		a.accepted.handle = q->handle;
		medha_srv_msg(r->f.srv, ev->call, &a);
	}
}

/* ---- clients ---- */

static int
on_cancel(void *arg, uint32_t peer, uint64_t h)
{
	struct medha_router *r = arg;
	struct rreq *q = medha_map_get(&r->reqs, h);

	if (q == NULL || q->peer != peer || q->gone)
		return MEDHA_ENOTFOUND;
	if (q->job != NULL) { /* its text is being tokenized: ends now */
		rt_rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
		    "cancelled by its client");
		return 0;
	}
	if (q->up != 0 && !q->cancel)
		rt_cancel_upstream(r, q->rep, q->up);
	q->cancel = 1; /* not accepted yet: cancelled when it is */
	return 0;
}

static void
on_status(void *arg, struct medha_msg_status *s)
{
	struct medha_router *r = arg;

	for (int i = 0; i < r->nup; i++) {
		const struct up *u = &r->up[i];
		if (!u->alive)
			continue;
		s->workers += u->now.workers;
		s->workers_wanted += u->now.workers_wanted;
		s->queue += u->now.queue;
		s->kv_blocks += u->now.kv_blocks;
		s->kv_used += u->now.kv_used;
		s->prefill += u->now.prefill;
		s->work += u->now.work;
		s->evicted += u->now.evicted;
		s->progress += u->now.progress;
		for (int e = 0; e < u->now.n_experts; e++)
			s->experts[e] += u->now.experts[e];
		if (u->now.n_experts > s->n_experts)
			s->n_experts = u->now.n_experts;
		if (s->block_size == 0 || (u->ready && s->model[0] == '\0')) {
			s->block_size = u->now.block_size;
			memcpy(s->model, u->now.model, sizeof(s->model));
			memcpy(s->backend, u->now.backend, sizeof(s->backend));
		}
	}
	s->ready = r->ready;
}

/* A client went away: its requests cancelled. */
static int
on_client_gone(void *arg, uint32_t peer)
{
	struct medha_router *r = arg;
	size_t it = 0;
	uint64_t key;
	void *v;
	int n = 0;

	while (medha_map_next(&r->reqs, &it, &key, &v)) {
		struct rreq *q = v;
		if (q->peer != peer || q->gone)
			continue;
		q->gone = 1;
		n++;
		if (q->up != 0 && !q->cancel)
			rt_cancel_upstream(r, q->rep, q->up);
	}
	return n;
}

/* ---- the main loop ---- */


/*
 * The requests held at the router: those whose client left, or that
 * waited hold_timeout, end; while a replica is ready the rest go out in
 * arrival order until one finds no replica. Every status_interval.
 */
void
rt_release_held(struct medha_router *r, double t)
{
	double now = t - r->t0;
	int64_t i, j, k;

	if (r->nheld == 0 || t - r->held_tried < r->cfg.status_interval)
		return;
	r->held_tried = t;
	for (i = j = 0; i < r->nheld; i++) {
		struct rreq *q = r->held[i];
		char why[128];
		if (q->gone || q->cancel) {
			q->held = 0;
			rt_rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
			    q->gone ? "client went away"
			            : "cancelled by its client");
		} else if (now - q->held_since > r->cfg.hold_timeout) {
			q->held = 0;
			snprintf(why, sizeof(why),
			    "no replica ready within %g s", r->cfg.hold_timeout);
			rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		} else {
			r->held[j++] = q;
		}
	}
	r->nheld = j;
	if (!r->ready)
		return;
	for (k = 0; k < r->nheld; k++) {
		struct rreq *q = r->held[k];
		memset(q->tried, 0, (size_t)(r->nup + 63) / 64 *
		    sizeof(*q->tried));
		if (place(r, q) != 0)
			break;
		q->held = 0;
	}
	if (k > 0)
		medha_log(MEDHA_LOG_INFO, "%lld held requests sent on",
		    (long long)k);
	memmove(r->held, r->held + k,
	    (size_t)(r->nheld - k) * sizeof(*r->held));
	r->nheld -= k;
}


/* Stop waiting: cancel what is left, ending each with a record. */
static void
cancel_all(void *arg)
{
	struct medha_router *r = arg;
	size_t it = 0;
	uint64_t key;
	void *v;
	int64_t n = 0, i = 0;
	struct rreq **qs = medha_calloc(r->reqs.n ? r->reqs.n : 1,
	    sizeof(*qs));

	if (qs == NULL)
		return;
	while (medha_map_next(&r->reqs, &it, &key, &v))
		qs[n++] = v;
	for (i = 0; i < n; i++) {
		if (qs[i]->up != 0)
			rt_cancel_upstream(r, qs[i]->rep, qs[i]->up);
		rt_rreq_fail(r, qs[i], MEDHA_STATUS_CANCELLED, "router stopped");
	}
	free(qs);
}

/* Once a pass: the replicas watched (first: an answer is judged by the
 * epoch now), their news taken, the gauges counted. */
static void
router_pass(void *arg)
{
	struct medha_router *r = arg;

	rt_watch(r);
	rt_take_inbox(r);
	tok_collect(r);
	rt_count_gauges(r);
}

static int64_t
activity(void *arg)
{
	const struct medha_router *r = arg;

	return (int64_t)r->next_handle;
}

static const struct medha_front_ops ops = {
    .name = "router",
    .take_at_once = 1,
    .submit = on_submit,
    .cancel = on_cancel,
    .status = on_status,
    .client_gone = on_client_gone,
    .cancel_all = cancel_all,
    .pass = router_pass,
    .activity = activity,
};

int
medha_router_open(struct medha_router **rp,
    const struct medha_router_config *c, char *why, size_t whylen)
{
	struct medha_router *r;
	struct medha_srv *srv;
	int rc;

	*rp = NULL;
	if (c->listen == NULL || c->nreplicas < 1 ||
	    c->nreplicas > MEDHA_ROUTER_MAX_REPLICAS || c->drain_timeout < 0 ||
	    c->max_queue < 1 || !(c->status_interval > 0) ||
	    !(c->hold_timeout >= 0) || !(c->cache_balance >= 0))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "bad router configuration");
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->up = medha_calloc(c->nreplicas, sizeof(*r->up))) == NULL ||
	    (r->met.rep = medha_calloc(c->nreplicas, sizeof(*r->met.rep))) ==
	        NULL) {
		if (r != NULL)
			free(r->up);
		free(r);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	r->cfg = *c;
	r->t0 = medha_now();
	pthread_mutex_init(&r->mmu, NULL);
	if (c->model != NULL &&
	    (rc = medha_tok_open_file(&r->tok, c->model, &r->ctx_len, why,
	         whylen)) != 0) {
		medha_router_close(r);
		return rc;
	}
	if ((rc = medha_srv_open(&srv, c->listen, why, whylen)) != 0) {
		medha_router_close(r);
		return rc;
	}
	medha_front_init(&r->f, &ops, r, srv, c->drain_timeout);
	for (int i = 0; i < c->nreplicas; i++) {
		struct up *u = &r->up[i];
		u->r = r;
		u->idx = i;
		u->url = c->replicas[i];
		r->met.rep[i].url = u->url;
		u->s_per_tok = 1e-3;
		r->nup = i + 1;
		if ((rc = medha_pcli_open(&u->pc, u->url, wake_loop, srv, why,
		         whylen)) != 0) {
			medha_router_close(r);
			return rc;
		}
	}
	*rp = r;
	return 0;
}

int
medha_router_listen(struct medha_router *r, const char *url, char *why,
    size_t whylen)
{
	return medha_srv_listen(r->f.srv, url, why, whylen);
}

int
medha_router_run(struct medha_router *r, volatile sig_atomic_t *stop)
{
	int rc;

	medha_log(MEDHA_LOG_INFO, "listening at %s for %d replica%s%s%s",
	    r->cfg.listen, r->nup, r->nup > 1 ? "s" : "",
	    r->tok != NULL ? "; text tokenized here, with " : "",
	    r->tok != NULL ? r->cfg.model : "");
	if ((rc = medha_front_run(&r->f, stop)) != 0)
		return rc;
	medha_log(MEDHA_LOG_INFO,
	    "stopped: %lld requests served, %lld failed, %lld placed on a "
	    "cached prefix",
	    (long long)r->served, (long long)r->failed,
	    (long long)r->cache_placed);
	return 0;
}

/* A job the thread never gave back (closing): its text let go. */
static void
tok_drop(void *arg, struct medha_tokq_job *tj)
{
	struct rjob *j = (struct rjob *)tj;

	(void)arg;
	free(j->text);
	free(j);
}

void
medha_router_close(struct medha_router *r)
{
	size_t it = 0;
	uint64_t key;
	void *v;

	if (r == NULL)
		return;
	medha_tokq_close(r->tokq, tok_drop, NULL);
	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		medha_pcli_close(u->pc);
		medha_map_free(&u->by_up);
		rt_cache_clear(&u->cache);
	}
	while (medha_map_next(&r->reqs, &it, &key, &v)) {
		rreq_free(v);
	}
	medha_map_free(&r->reqs);
	free(r->held);
	medha_tok_close(r->tok);
	medha_front_free(&r->f);
	pthread_mutex_destroy(&r->mmu);
	free(r->met.rep);
	free(r->up);
	free(r);
}
