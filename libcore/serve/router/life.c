/*
 * life.c: a request's life in the router (impl.h, enum rq_state: below
 * router.c, text.c and up.c, above place.c and metrics.c). rt_move is the
 * one place a request's state changes: it places a request (place.c),
 * holds it at the router for want of a ready replica, takes its
 * replica's answer and events, sends it elsewhere when a replica gives
 * it back before it started, cancels it where it is, and ends it with
 * exactly one record for its client. The requests held wait in
 * r->held, in arrival order, and are offered out again every
 * status_interval (rt_release_held).
 */
#include "serve/router/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the requests held for a replica ---- */

/* r->held without its holes. */
static void
held_compact(struct medha_router *r)
{
	int64_t j = 0;

	for (int64_t i = 0; i < r->held_len; i++)
		if (r->held[i] != NULL) {
			r->held[j] = r->held[i];
			r->held[j]->held_at = j;
			j++;
		}
	r->held_len = j;
}

/* q waits in r->held for a replica: 0, or -1 (holding is off, or no
 * memory). */
static int
hold(struct medha_router *r, struct rreq *q)
{
	if (!(r->cfg.hold_timeout > 0) || r->f.drain.on)
		return -1;
	if (r->held_len == r->held_cap && r->nheld < r->held_len)
		held_compact(r);
	if (r->held_len == r->held_cap) {
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
	int64_t i = r->held_len;
	while (i > 0 &&
	    (r->held[i - 1] == NULL || r->held[i - 1]->handle > q->handle))
		i--;
	memmove(&r->held[i + 1], &r->held[i],
	    (size_t)(r->held_len - i) * sizeof(*r->held));
	r->held[i] = q;
	r->held_len++;
	for (int64_t k = i; k < r->held_len; k++)
		if (r->held[k] != NULL)
			r->held[k]->held_at = k;
	r->nheld++;
	q->rep = -1;
	if (q->held_since == 0)
		q->held_since = medha_now() - r->t0;
	return 0;
}

/* q waits no more in r->held: a hole where it was (held_compact). */
static void
unhold(struct medha_router *r, struct rreq *q)
{
	r->held[q->held_at] = NULL;
	r->nheld--;
}

/* ---- its end ---- */

void
rt_rreq_free(struct rreq *q)
{
	medha_reqspec_clear(&q->spec);
	free(q->tried);
	free(q->keys);
	free(q);
}

/* q's replica forgets it (ACCEPTED, STARTED: it holds it as q->up). */
static void
detach(struct medha_router *r, struct rreq *q)
{
	struct up *u = &r->up[q->rep];

	if (medha_map_get(&u->by_up, q->up) == q) {
		medha_map_del(&u->by_up, q->up);
		u->live--;
	}
	q->up = 0;
}

/* q is over: forgotten everywhere, freed. */
static enum rq_state
forget(struct medha_router *r, struct rreq *q)
{
	struct medha_client *c;

	if (q->up != 0) /* ACCEPTED, STARTED */
		detach(r, q);
	if (q->state == RQ_HELD)
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
	rt_rreq_free(q);
	return RQ_ENDED;
}

/* q ends with a record of status and reason made here (none when
 * status < 0: its SUBMIT is refused). */
static enum rq_state
end(struct medha_router *r, struct rreq *q, int status, const char *reason)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};
	double t = medha_now() - r->t0;

	if (status < 0)
		return forget(r, q);
	if (q->stop != RQ_STOP_GONE &&
	    (ev.record = calloc(1, sizeof(*ev.record))) != NULL) {
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
	return forget(r, q);
}

/* Why a request its client stopped ends. */
static const char *
stop_why(const struct rreq *q)
{
	return q->stop == RQ_STOP_GONE ? "client went away"
	                               : "cancelled by its client";
}

/* One of its replica's events for q: on to q's client; a record, on
 * the router's clock, ends q. */
static enum rq_state
relay(struct medha_router *r, struct rreq *q, struct medha_msg_event *ev)
{
	int record = ev->kind == MEDHA_EVENT_RECORD;

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
	if (q->stop != RQ_STOP_GONE)
		medha_clients_push(&r->f.clients, q->peer, ev);
	else
		medha_msg_event_clear(ev);
	return record ? forget(r, q) : q->state;
}

/* ---- the moves ---- */

/* Where q goes next, into *to: SENT (placed on the best replica left)
 * or HELD (waits here, or still does); -1 when neither. */
static int
next_stop(struct medha_router *r, struct rreq *q, enum rq_state *to)
{
	if (rt_place(r, q) == 0) {
		if (q->state == RQ_HELD)
			unhold(r, q);
		*to = RQ_SENT;
		return 0;
	}
	*to = RQ_HELD;
	return q->state == RQ_HELD || hold(r, q) == 0 ? 0 : -1;
}

enum rq_state
rt_move(struct medha_router *r, struct rreq *q, enum rq_ev ev,
    const struct rq_news *n)
{
	enum rq_state from = q->state, to;

	switch (ev) {
	case RQ_EV_TEXT:
		MEDHA_ASSERT(from == RQ_NEW && q->job != NULL);
		return q->state = RQ_TOKENIZING;
	case RQ_EV_PLACE:
		MEDHA_ASSERT(from == RQ_NEW || from == RQ_TOKENIZING ||
		    from == RQ_HELD);
		if (from == RQ_HELD) /* every replica may be tried again */
			memset(q->tried, 0, (size_t)(r->nup + 63) / 64 *
			    sizeof(*q->tried));
		else
			rt_sized(r, q);
		if (next_stop(r, q, &to) == 0)
			return q->state = to;
		if (from == RQ_NEW) /* its SUBMIT is refused */
			return from;
		return end(r, q, MEDHA_STATUS_REJECTED, "no replica is ready");
	case RQ_EV_ACCEPTED: {
		MEDHA_ASSERT(from == RQ_SENT);
		struct up *u = &r->up[q->rep];
		if (medha_map_put(&u->by_up, n->up, q) != 0) {
			medha_pcli_cancel(u->pc, n->up);
			return end(r, q, MEDHA_STATUS_FAILED, "out of memory");
		}
		q->up = n->up;
		u->live++;
		q->state = RQ_ACCEPTED;
		if (q->stop != RQ_STOP_NONE) /* its record follows */
			medha_pcli_cancel(u->pc, q->up);
		return q->state;
	}
	case RQ_EV_EVENT:
		MEDHA_ASSERT(from == RQ_ACCEPTED || from == RQ_STARTED);
		if (from == RQ_ACCEPTED) { /* its client sees it: it stays */
			q->state = RQ_STARTED;
			medha_reqspec_clear(&q->spec);
		}
		return relay(r, q, n->ev);
	case RQ_EV_BACK:
		MEDHA_ASSERT(from == RQ_SENT || from == RQ_ACCEPTED);
		if (from == RQ_ACCEPTED)
			detach(r, q);
		q->rep = -1;
		if (q->stop != RQ_STOP_NONE)
			return end(r, q, MEDHA_STATUS_CANCELLED, stop_why(q));
		if (next_stop(r, q, &to) == 0)
			return q->state = to;
		return end(r, q, n->status, n->why);
	case RQ_EV_CANCEL:
	case RQ_EV_GONE:
		if (q->stop == RQ_STOP_GONE)
			return from;
		if (ev == RQ_EV_CANCEL && from == RQ_TOKENIZING)
			return end(r, q, MEDHA_STATUS_CANCELLED,
			    "cancelled by its client");
		if (q->up != 0 && q->stop == RQ_STOP_NONE)
			medha_pcli_cancel(r->up[q->rep].pc, q->up);
		q->stop = ev == RQ_EV_GONE ? RQ_STOP_GONE : RQ_STOP_CANCEL;
		return from; /* its record, or the next pass, ends it */
	case RQ_EV_STOP:
		if (q->up != 0)
			medha_pcli_cancel(r->up[q->rep].pc, q->up);
		return end(r, q, MEDHA_STATUS_CANCELLED, "router stopped");
	case RQ_EV_END:
		return end(r, q, n->status, n->why);
	}
	MEDHA_ASSERT(0);
	return from;
}

void
rt_release_held(struct medha_router *r, double t)
{
	double now = t - r->t0;
	int64_t i, k = 0;

	if (r->nheld == 0 || t - r->held_tried < r->cfg.status_interval)
		return;
	r->held_tried = t;
	for (i = 0; i < r->held_len; i++) {
		struct rreq *q = r->held[i];
		char why[128];
		if (q == NULL)
			continue;
		if (q->stop != RQ_STOP_NONE) {
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_CANCELLED,
			    .why = stop_why(q)});
		} else if (now - q->held_since > r->cfg.hold_timeout) {
			snprintf(why, sizeof(why),
			    "no replica ready within %g s", r->cfg.hold_timeout);
			rt_move(r, q, RQ_EV_END, &(struct rq_news){
			    .status = MEDHA_STATUS_REJECTED, .why = why});
		}
	}
	if (r->ready)
		for (i = 0; i < r->held_len; i++) {
			struct rreq *q = r->held[i];
			if (q == NULL)
				continue;
			if (rt_move(r, q, RQ_EV_PLACE, NULL) == RQ_HELD)
				break;
			k++;
		}
	held_compact(r);
	if (k > 0)
		medha_log(MEDHA_LOG_INFO, "%lld held requests sent on",
		    (long long)k);
}
