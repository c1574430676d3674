/*
 * router_up.c: the router's side of its replicas (router.h). Each
 * replica has a client of the protocol (net/pcli.h): the main thread
 * submits, cancels and asks for STATUS every status_interval through
 * it without waiting, and the client, which keeps a POLL outstanding,
 * wakes the main thread (medha_srv_wake()) when answers or events came;
 * the main thread takes them in here (answers, events, statuses,
 * replicas up and down). The client hands a request's events out only
 * after its ACCEPTED, so nothing here waits for one.
 *
 * The main thread also keeps the figures of medha_router_metrics() (what
 * /metrics of the HTTP front door shows) under a mutex of their own, so
 * that a snapshot never waits for the inbox.
 */
#include "serve/router_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const double medha_router_ttft_le[MEDHA_HIST_BUCKETS] = {0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const double medha_router_tpot_le[MEDHA_HIST_BUCKETS] = {0.001, 0.0025,
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
const double medha_router_e2e_le[MEDHA_HIST_BUCKETS] = {0.1, 0.25, 0.5, 1,
    2.5, 5, 10, 20, 40, 60, 120, 300};

/* ---- metrics ---- */

void
medha_hist_add(struct medha_hist *h, const double *le, double v)
{
	int i = 0;

	while (i < MEDHA_HIST_BUCKETS && v > le[i])
		i++;
	h->n[i]++;
	h->count++;
	h->sum += v;
}

/* A request ended with rec (from a replica) or with status (made here). */
void
rt_count_end(struct medha_router *r, const struct medha_record *rec, int status)
{
	pthread_mutex_lock(&r->mmu);
	if (rec == NULL) {
		r->met.requests[status]++;
	} else {
		if (rec->status >= 0 && rec->status < MEDHA_STATUS_COUNT)
			r->met.requests[rec->status]++;
		r->met.prompt_tokens += rec->prompt_tokens;
		r->met.generation_tokens += rec->output_tokens;
		r->met.cached_tokens += rec->cached_tokens;
		r->met.cache_hits += rec->cached_tokens > 0;
		r->met.preemptions += rec->preemptions;
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 0)
			medha_hist_add(&r->met.ttft, medha_router_ttft_le,
			    rec->ttft);
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 1)
			medha_hist_add(&r->met.tpot, medha_router_tpot_le,
			    rec->tpot_mean);
		if (rec->queue_time > 0)
			medha_hist_add(&r->met.queue, medha_router_ttft_le,
			    rec->queue_time);
		if (rec->status == MEDHA_STATUS_OK) {
			medha_hist_add(&r->met.e2e, medha_router_e2e_le,
			    rec->finish - rec->arrival);
			if (rec->finish_reason >= 0 &&
			    rec->finish_reason < MEDHA_FINISH_COUNT)
				r->met.finished[rec->finish_reason]++;
		}
	}
	pthread_mutex_unlock(&r->mmu);
}

void
rt_count_refused(struct medha_router *r)
{
	pthread_mutex_lock(&r->mmu);
	r->met.refused++;
	pthread_mutex_unlock(&r->mmu);
}

/* A replica's STATUS's expert counts taken into its sums: a count that
   went down is a new scheduler, counting from 0. */
static void
count_experts(struct up *u)
{
	const struct medha_msg_status *s = &u->now;
	int e, reset = 0;

	for (e = 0; e < s->n_experts && e < u->nx; e++)
		reset |= s->experts[e] < u->xlast[e];
	for (e = 0; e < s->n_experts; e++) {
		const int64_t was = e < u->nx && !reset ? u->xlast[e] : 0;
		u->xsum[e] += s->experts[e] - was;
		u->xlast[e] = s->experts[e];
	}
	if (s->n_experts > u->nx)
		u->nx = s->n_experts;
}

/* The replicas' states and the gauges, after rt_watch(). */
void
rt_count_gauges(struct medha_router *r)
{
	const char *model = NULL;

	pthread_mutex_lock(&r->mmu);
	r->met.cache_evictions = 0;
	r->met.progress_batches = 0;
	r->met.n_experts = 0;
	memset(r->met.experts, 0, sizeof(r->met.experts));
	for (int i = 0; i < r->nup; i++) {
		const struct up *u = &r->up[i];
		struct medha_router_replica_stat *st = &r->met.rep[i];
		st->url = u->url;
		st->up = u->alive;
		st->ready = u->ready;
		st->workers = u->now.workers;
		st->workers_wanted = u->now.workers_wanted;
		st->pending = u->now.pending;
		st->queue = u->now.queue;
		st->kv_blocks = u->now.kv_blocks;
		st->kv_used = u->now.kv_used;
		st->block_size = u->now.block_size;
		st->live = u->live;
		r->met.cache_evictions += u->evicted_sum;
		r->met.progress_batches += u->progress_sum;
		for (int e = 0; e < u->nx; e++)
			r->met.experts[e] += u->xsum[e];
		if (u->nx > r->met.n_experts)
			r->met.n_experts = u->nx;
		if (u->alive && u->now.model[0] != '\0' &&
		    (model == NULL || u->ready))
			model = u->now.model;
	}
	if (model != NULL)
		memcpy(r->met.model, model, sizeof(r->met.model));
	r->met.ready = r->ready && !r->f.drain.on;
	r->met.draining = r->f.drain.on;
	r->met.in_flight = r->f.live;
	r->met.held = r->nheld;
	pthread_mutex_unlock(&r->mmu);
}

int
medha_router_metrics(struct medha_router *r, struct medha_router_metrics *m)
{
	struct medha_router_replica_stat *rep =
	    medha_calloc((size_t)r->nup, sizeof(*rep));

	if (rep == NULL)
		return MEDHA_ENOMEM;
	pthread_mutex_lock(&r->mmu);
	*m = r->met;
	memcpy(rep, r->met.rep, (size_t)r->nup * sizeof(*rep));
	pthread_mutex_unlock(&r->mmu);
	m->rep = rep;
	m->nreplicas = r->nup;
	m->uptime = medha_now() - r->t0;
	return 0;
}

/* ---- the replicas' clients ---- */

int
rt_submit(struct medha_router *r, struct up *u, struct rreq *q)
{
	char why[256];

	(void)r;
	if (medha_pcli_submit(u->pc, &q->spec,
	        q->handle << 16 | (q->placed_n & 0xffffu), DEAD, why,
	        sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "request %s: %s", q->id, why);
		return -1;
	}
	return 0;
}

void
rt_cancel_upstream(struct medha_router *r, int rep, uint64_t up)
{
	medha_pcli_cancel(r->up[rep].pc, up);
}

/* ---- what they bring back ---- */

/* One of a replica's events for q: on to q's client (its record ends q). */
static void
relay(struct medha_router *r, struct rreq *q, struct medha_msg_event *ev)
{
	int record = ev->kind == MEDHA_EVENT_RECORD;

	if (!q->started) { /* the client sees it now: it stays there */
		q->started = 1;
		medha_reqspec_clear(&q->spec);
	}
	if (record) { /* the replica's clock to the router's: it got q
		         when the router sent it (after any hold) */
		struct medha_record *rec = ev->record;
		double d = q->sent - rec->arrival;
		rec->arrival = q->arrival;
		if (rec->queue_time > 0) /* and the time held here */
			rec->queue_time += q->sent - q->arrival;
		rec->first_token += d;
		rec->finish += d;
		rec->ttft = rec->first_token - rec->arrival;
		r->served++;
		rt_count_end(r, rec, 0);
	}
	ev->handle = q->handle;
	if (!q->gone)
		medha_clients_push(&r->f.clients, q->peer, ev);
	else
		medha_msg_event_clear(ev);
	if (record)
		rt_rreq_end(r, q);
}

/*
 * Whether a replica's refusal of a request (the code and reason of an
 * ERROR answering its SUBMIT, or of its "rejected" record) is the
 * replica's own, which another may not share: full (MEDHA_ENOSPACE: its
 * queue, the ids it holds, not ready), out of memory, or shutting down.
 * Any other (a prompt longer than the model's context, ids outside the
 * vocabulary, an empty prompt, a record without a code) every replica
 * would give.
 */
static int
refusal_is_local(int code, const char *reason)
{
	return code == MEDHA_ENOSPACE || code == MEDHA_ENOMEM ||
	    strncmp(reason, "shutting down", 13) == 0;
}

/* q refused, or lost, by a replica before it started: logged, and
 * placed on another (rt_replace; status and why if none is left). */
static void
retry_elsewhere(struct medha_router *r, struct rreq *q, int status,
    const char *why)
{
	medha_log(MEDHA_LOG_INFO, "request %s: %s; trying another replica",
	    q->id, why);
	rt_replace(r, q, status, why);
}

/*
 * The answer to q's SUBMIT (o: ACCEPTED or REFUSED). The replica's
 * client hands out a request's events only after its ACCEPTED, so q
 * is known by its handle before any comes.
 */
static void
on_answer(struct medha_router *r, struct up *u, struct medha_pcli_out *o)
{
	struct rreq *q = medha_map_get(&r->reqs, o->cookie >> 16);
	const struct medha_msg *m = &o->msg;
	char why[512];

	if (q != NULL && (q->rep != u->idx ||
	                     (q->placed_n & 0xffffu) != (o->cookie & 0xffffu)))
		q = NULL; /* an answer from a replica given up on, or to an
		             earlier placement */
	if (o->kind == MEDHA_PCLI_ACCEPTED && o->epoch == u->epoch) {
		if (q == NULL) { /* ended meanwhile: the replica stops it */
			rt_cancel_upstream(r, u->idx, o->handle);
			return;
		}
		if (medha_map_put(&u->by_up, o->handle, q) != 0) {
			rt_cancel_upstream(r, u->idx, o->handle);
			rt_rreq_fail(r, q, MEDHA_STATUS_FAILED, "out of memory");
			return;
		}
		q->up = o->handle;
		u->live++;
		if (q->gone || q->cancel) /* its record follows */
			rt_cancel_upstream(r, u->idx, q->up);
		return;
	}
	if (q == NULL)
		return;
	/* refused (full, not ready, stopping), or lost on the way: another
	 * replica may take it, or it waits here for one */
	if (o->kind == MEDHA_PCLI_ACCEPTED)
		snprintf(why, sizeof(why), "replica %s: connection lost",
		    u->url);
	else if (o->rc != 0)
		snprintf(why, sizeof(why), "replica %s: %s", u->url, o->why);
	else if (m->type == MEDHA_MSG_ERROR)
		snprintf(why, sizeof(why), "%s", m->error.reason);
	else
		snprintf(why, sizeof(why), "replica %s: answered %s", u->url,
		    medha_msg_type_name(m->type));
	if (o->kind == MEDHA_PCLI_REFUSED && o->rc == 0 &&
	    m->type == MEDHA_MSG_ERROR &&
	    !refusal_is_local(m->error.code, m->error.reason)) {
		/* the request itself is at fault: every replica says so */
		rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		return;
	}
	retry_elsewhere(r, q,
	    o->kind == MEDHA_PCLI_REFUSED && o->rc == 0 &&
	            m->type == MEDHA_MSG_ERROR
	        ? MEDHA_STATUS_REJECTED
	        : MEDHA_STATUS_FAILED,
	    why);
}

/*
 * One of replica u's events: by handle, whatever the connection (a
 * POLL sent on a connection that closed may be answered on the next
 * one). An event of a request given up on here stops it there. A
 * "rejected" record before any token went to q's client (a replica
 * acknowledges a long text before tokenizing it, and refuses it after)
 * for a reason of the replica's own sends q elsewhere, as a refused
 * SUBMIT does; its client sees none of it.
 */
static void
on_event(struct medha_router *r, struct up *u, struct medha_msg_event *ev)
{
	struct rreq *q = medha_map_get(&u->by_up, ev->handle);
	const struct medha_record *rec = ev->record;

	if (q != NULL && !q->started && ev->kind == MEDHA_EVENT_RECORD &&
	    rec->status == MEDHA_STATUS_REJECTED &&
	    refusal_is_local(rec->code, rec->reason)) {
		medha_map_del(&u->by_up, q->up);
		u->live--;
		q->up = 0;
		q->rep = -1;
		retry_elsewhere(r, q, MEDHA_STATUS_REJECTED, rec->reason);
	} else if (q != NULL)
		relay(r, q, ev);
	else if (ev->kind != MEDHA_EVENT_RECORD)
		rt_cancel_upstream(r, u->idx, ev->handle);
}

/*
 * Replica u is down: what was on its way to it goes elsewhere (an
 * answer it gives later is for a request given up on there).
 */
static void
divert(struct medha_router *r, struct up *u, const char *why)
{
	struct rreq **qs;
	size_t it = 0;
	uint64_t key;
	void *v;
	int n = 0;

	if ((qs = medha_calloc(r->reqs.n ? r->reqs.n : 1, sizeof(*qs))) ==
	    NULL)
		return;
	while (medha_map_next(&r->reqs, &it, &key, &v)) {
		struct rreq *q = v;
		if (q->rep == u->idx && q->up == 0)
			qs[n++] = q;
	}
	for (int i = 0; i < n; i++)
		rt_replace(r, qs[i], MEDHA_STATUS_FAILED, why);
	free(qs);
}

/*
 * Replica u is lost: a request it held that has not started (no event
 * yet: its client has seen nothing) goes to another replica or waits
 * for one; every other ends "failed".
 */
static void
fail_all(struct medha_router *r, struct up *u, const char *why)
{
	char reason[256];
	size_t it = 0;
	uint64_t key;
	void *v;
	int n = 0;

	snprintf(reason, sizeof(reason), "replica %s: %s", u->url, why);
	/* rt_rreq_end edits by_up: collect first */
	struct rreq **qs = medha_calloc(u->by_up.n ? u->by_up.n : 1,
	    sizeof(*qs));
	if (qs == NULL) {
		medha_log(MEDHA_LOG_ERROR, "out of memory failing requests");
		return;
	}
	while (medha_map_next(&u->by_up, &it, &key, &v))
		qs[n++] = v;
	int moved = 0;
	for (int i = 0; i < n; i++) {
		struct rreq *q = qs[i];
		if (q->started) {
			rt_rreq_fail(r, q, MEDHA_STATUS_FAILED, reason);
			continue;
		}
		medha_map_del(&u->by_up, q->up);
		u->live--;
		q->up = 0;
		q->rep = -1;
		moved++;
		rt_replace(r, q, MEDHA_STATUS_FAILED, reason);
	}
	free(qs);
	if (n - moved > 0)
		medha_log(MEDHA_LOG_WARN, "%s: %d requests failed", reason,
		    n - moved);
	if (moved > 0)
		medha_log(MEDHA_LOG_WARN,
		    "%s: %d requests not started there sent elsewhere", reason,
		    moved);
}

/* What the replicas' clients brought: answers, events, statuses. */
void
rt_take_inbox(struct medha_router *r)
{
	struct medha_pcli_out o;

	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		while (medha_pcli_take(u->pc, 0, &o)) {
			if (o.kind == MEDHA_PCLI_EVENT)
				on_event(r, u, &o.ev);
			else if (o.kind == MEDHA_PCLI_STATUS) {
				if (o.rc == 0 &&
				    o.msg.type == MEDHA_MSG_STATUS_REPLY) {
					u->st = o.msg.status;
					u->st_gen++;
				}
			} else
				on_answer(r, u, &o);
			medha_pcli_out_clear(&o);
		}
	}
}

/* Replicas up and down, statuses asked for and taken in. */
#define UNREACHABLE 30 /* s */

void
rt_watch(struct medha_router *r)
{
	double t = medha_now();
	int ready = 0;

	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		uint64_t epoch = medha_pcli_epoch(u->pc), gen = u->st_gen;
		double last_ok = medha_pcli_last_ok(u->pc);
		if (t - u->st_at >= r->cfg.status_interval) {
			medha_pcli_status(u->pc, HB);
			u->st_at = t;
		}
		if (gen != u->st_seen)
			u->now = u->st;
		if (epoch != u->epoch) {
			if (u->live > 0)
				fail_all(r, u, "connection lost");
			u->epoch = epoch;
			rt_cache_clear(&u->cache); /* perhaps a new replica */
		}
		if (gen != u->st_seen) {
			u->st_seen = gen;
			u->placed = u->placed_kv = 0;
			/* a count that went down: a new scheduler, from 0 */
			u->evicted_sum += u->now.evicted >= u->evicted
			    ? u->now.evicted - u->evicted
			    : u->now.evicted;
			u->evicted = u->now.evicted;
			u->progress_sum += u->now.progress >= u->progress
			    ? u->now.progress - u->progress
			    : u->now.progress;
			u->progress = u->now.progress;
			count_experts(u);
			if (u->now.prefill > 0 && u->now.work > 0)
				u->s_per_tok = u->now.work / u->now.prefill;
		}
		int alive = last_ok > 0 && t - last_ok <= DEAD;
		if (u->alive && !alive) {
			medha_log(MEDHA_LOG_WARN,
			    "replica %s: silent for %.1f s: down", u->url,
			    t - last_ok);
			u->alive = u->ready = 0;
			rt_cache_clear(&u->cache);
			fail_all(r, u, "silent for too long");
			divert(r, u, "no replica is ready");
		}
		/* a replica that cannot be reached is said once, when it
		   has been so for UNREACHABLE s (from the start, or since
		   its last answer) */
		double since = last_ok > 0 ? last_ok : r->t0;
		if (alive)
			u->unreach_said = 0;
		else if (!u->unreach_said && t - since >= UNREACHABLE) {
			medha_log(MEDHA_LOG_WARN,
			    "replica %s: unreachable for %.0f s", u->url,
			    t - since);
			u->unreach_said = 1;
		}
		int rdy = alive && u->now.ready;
		/* coming up not yet ready is routine (info); losing
		   readiness or going down is not */
		int coming = alive && !u->alive && !u->ready;
		if (rdy != u->ready || alive != u->alive)
			medha_log(rdy || coming ? MEDHA_LOG_INFO
			                        : MEDHA_LOG_WARN,
			    "replica %s: %s (%lld of %lld workers)", u->url,
			    rdy ? "ready" : alive ? "not ready" : "down",
			    (long long)u->now.workers,
			    (long long)u->now.workers_wanted);
		u->alive = alive;
		u->ready = rdy;
		ready += rdy;
	}
	if (ready > 0 && !r->ready)
		medha_log(MEDHA_LOG_INFO, "ready: %d of %d replicas ready",
		    ready, r->nup);
	else if (ready == 0 && r->ready)
		medha_log(MEDHA_LOG_WARN, "no replica ready");
	r->ready = ready > 0;
	rt_release_held(r, t);
	uint32_t deaf = medha_clients_tick(&r->f.clients, t);
	if (deaf != 0) {
		medha_log(MEDHA_LOG_WARN,
		    "client %u has not collected its events for %d s: "
		    "cancelling its requests", deaf, MEDHA_CLIENT_STALL_S);
		medha_front_gone(&r->f, deaf);
	}
}
