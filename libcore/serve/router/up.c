/*
 * up.c: the router's side of its replicas (impl.h: below router.c,
 * above life.c). Each replica has a client of the protocol
 * (net/pcli.h): the main thread submits (place.c), cancels and asks for
 * STATUS every status_interval through it without waiting, and the
 * client, which keeps a POLL outstanding, wakes the main thread
 * (medha_srv_wake()) when answers or events came; the main thread takes
 * them in here (answers, events, statuses, replicas up and down) and
 * moves the requests they concern (life.c rt_move). The client hands a
 * request's events out only after its ACCEPTED, so nothing here waits
 * for one.
 */
#include "serve/router/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- what they bring back ---- */

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
 * placed on another (status and why if none is left and it cannot
 * wait). */
static void
retry_elsewhere(struct medha_router *r, struct rreq *q, int status,
    const char *why)
{
	medha_log(MEDHA_LOG_INFO, "request %s: %s; trying another replica",
	    q->id, why);
	rt_move(r, q, RQ_EV_BACK, &(struct rq_news){.status = status,
	    .why = why});
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

	if (q != NULL && (q->state != RQ_SENT || q->rep != u->idx ||
	                     (q->placed_n & 0xffffu) != (o->cookie & 0xffffu)))
		q = NULL; /* an answer from a replica given up on, or to an
		             earlier placement */
	if (o->kind == MEDHA_PCLI_ACCEPTED && o->epoch == u->epoch) {
		if (q == NULL) /* ended meanwhile: the replica stops it */
			medha_pcli_cancel(u->pc, o->handle);
		else
			rt_move(r, q, RQ_EV_ACCEPTED,
			    &(struct rq_news){.up = o->handle});
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
		rt_move(r, q, RQ_EV_END, &(struct rq_news){
		    .status = MEDHA_STATUS_REJECTED, .why = why});
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

	if (q != NULL && q->state == RQ_ACCEPTED &&
	    ev->kind == MEDHA_EVENT_RECORD &&
	    rec->status == MEDHA_STATUS_REJECTED &&
	    refusal_is_local(rec->code, rec->reason))
		retry_elsewhere(r, q, MEDHA_STATUS_REJECTED, rec->reason);
	else if (q != NULL)
		rt_move(r, q, RQ_EV_EVENT, &(struct rq_news){.ev = ev});
	else if (ev->kind != MEDHA_EVENT_RECORD)
		medha_pcli_cancel(u->pc, ev->handle);
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
		if (q->state == RQ_SENT && q->rep == u->idx)
			qs[n++] = q;
	}
	for (int i = 0; i < n; i++)
		rt_move(r, qs[i], RQ_EV_BACK, &(struct rq_news){
		    .status = MEDHA_STATUS_FAILED, .why = why});
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
	/* a request's end or move edits by_up: collect first */
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
		if (q->state == RQ_STARTED) {
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_FAILED, .why = reason});
			continue;
		}
		moved++;
		rt_move(r, q, RQ_EV_BACK, &(struct rq_news){
		    .status = MEDHA_STATUS_FAILED, .why = reason});
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
rt_watch(struct medha_router *r, double t)
{
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
}
