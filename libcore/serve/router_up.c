/*
 * router_up.c: the router's side of its replicas (router.h). Each
 * replica has two threads that only carry messages: a sender that makes
 * the SUBMIT and CANCEL calls queued for it, and asks for STATUS every
 * status_interval; and a poller that keeps a POLL outstanding and hands
 * back the events it brings. What they learn goes into the main
 * thread's inbox (one mutex for the whole router), and medha_srv_wake()
 * makes the main thread look; the main thread takes it in here
 * (answers, events, statuses, replicas up and down). A replica's events
 * can overtake its ACCEPTED (two threads, two contexts): events for a
 * handle not yet known wait, for up to MEDHA_PROTO_DEAD_MS, for it; then
 * they go, and the request is cancelled there.
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

/* The replicas' states and the gauges, after rt_watch(). */
void
rt_count_gauges(struct medha_router *r)
{
	const char *model = NULL;

	pthread_mutex_lock(&r->mmu);
	r->met.cache_evictions = 0;
	r->met.progress_batches = 0;
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

/* ---- the replicas' threads ---- */

static void
post(struct medha_router *r, struct note *n)
{
	pthread_mutex_lock(&r->mu);
	n->next = NULL;
	if (r->in_tail != NULL)
		r->in_tail->next = n;
	else
		r->in_head = n;
	r->in_tail = n;
	pthread_mutex_unlock(&r->mu);
	medha_srv_wake(r->f.srv);
}

void
rt_op_free(struct op *o)
{
	medha_reqspec_clear(&o->spec);
	free(o);
}

void *
rt_sender_main(void *arg)
{
	struct up *u = arg;
	struct medha_router *r = u->r;
	double st_at = 0;
	char why[256];

	pthread_mutex_lock(&r->mu);
	while (!r->quit) {
		struct op *o = u->ops;
		double t = medha_now();
		if (o != NULL) {
			struct medha_msg m = {0};
			struct note *n = calloc(1, sizeof(*n));
			u->ops = o->next;
			if (u->ops == NULL)
				u->ops_tail = NULL;
			pthread_mutex_unlock(&r->mu);
			if (o->kind == OP_SUBMIT) {
				m.type = MEDHA_MSG_SUBMIT;
				m.submit = o->spec;
			} else {
				m.type = MEDHA_MSG_CANCEL;
				m.cancel = o->up;
			}
			if (n == NULL) { /* the request is failed by a timeout */
				medha_log(MEDHA_LOG_ERROR, "out of memory");
				rt_op_free(o);
				pthread_mutex_lock(&r->mu);
				continue;
			}
			n->kind = N_ANSWER;
			n->rep = u->idx;
			n->rh = o->rh;
			n->epoch0 = medha_cli_epoch(u->cli);
			n->rc = medha_cli_msg(u->cli, 0, &m, &n->msg, DEAD,
			    n->why, sizeof(n->why));
			n->epoch1 = medha_cli_epoch(u->cli);
			if (n->rc == 0) {
				pthread_mutex_lock(&r->mu);
				u->last_ok = medha_now();
				pthread_mutex_unlock(&r->mu);
			}
			if (o->kind == OP_SUBMIT)
				post(r, n);
			else {
				medha_msg_clear(&n->msg);
				free(n);
			}
			rt_op_free(o);
			pthread_mutex_lock(&r->mu);
			continue;
		}
		if (t - st_at >= r->cfg.status_interval) {
			struct medha_msg m = {.type = MEDHA_MSG_STATUS}, rep;
			int rc;
			st_at = t;
			pthread_mutex_unlock(&r->mu);
			rc = medha_cli_msg(u->cli, 0, &m, &rep, HB, why,
			    sizeof(why));
			pthread_mutex_lock(&r->mu);
			if (rc == 0 && rep.type == MEDHA_MSG_STATUS_REPLY) {
				u->st = rep.status;
				u->st_gen++;
				u->last_ok = medha_now();
			}
			if (rc == 0)
				medha_msg_clear(&rep);
			continue;
		}
		{ /* u->cv runs on CLOCK_MONOTONIC, as medha_now() */
			double until = st_at + r->cfg.status_interval;
			struct timespec ts = {.tv_sec = (time_t)until,
			    .tv_nsec = (long)((until - (double)(time_t)until) *
			        1e9)};
			pthread_cond_timedwait(&u->cv, &r->mu, &ts);
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

void *
rt_poller_main(void *arg)
{
	struct up *u = arg;
	struct medha_router *r = u->r;
	struct medha_msg m = {.type = MEDHA_MSG_POLL};

	for (;;) {
		struct note *n;
		int quit;

		pthread_mutex_lock(&r->mu);
		quit = r->quit;
		pthread_mutex_unlock(&r->mu);
		if (quit)
			return NULL;
		if ((n = calloc(1, sizeof(*n))) == NULL) {
			struct timespec ts = {0, 100000000};
			nanosleep(&ts, NULL);
			continue;
		}
		n->kind = N_EVENTS;
		n->rep = u->idx;
		n->epoch0 = medha_cli_epoch(u->cli);
		n->rc = medha_cli_msg(u->cli, 1, &m, &n->msg, DEAD, n->why,
		    sizeof(n->why));
		if (n->rc != 0 || n->msg.type != MEDHA_MSG_EVENTS) {
			if (n->rc == 0)
				medha_msg_clear(&n->msg);
			free(n);
			if (!medha_cli_connected(u->cli)) {
				struct timespec ts = {0, 50000000};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		pthread_mutex_lock(&r->mu);
		u->last_ok = medha_now();
		pthread_mutex_unlock(&r->mu);
		if (n->msg.events.n == 0) { /* a keep-alive */
			medha_msg_clear(&n->msg);
			free(n);
			continue;
		}
		post(r, n);
	}
}

/* Queue a call for replica u's sender (taken over). */
void
rt_enqueue(struct medha_router *r, struct up *u, struct op *o)
{
	pthread_mutex_lock(&r->mu);
	o->next = NULL;
	if (u->ops_tail != NULL)
		u->ops_tail->next = o;
	else
		u->ops = o;
	u->ops_tail = o;
	pthread_cond_signal(&u->cv);
	pthread_mutex_unlock(&r->mu);
}

void
rt_cancel_upstream(struct medha_router *r, int rep, uint64_t up)
{
	struct op *o = calloc(1, sizeof(*o));

	if (o == NULL) /* the replica cancels it when we go, or it ends */
		return;
	o->kind = OP_CANCEL;
	o->up = up;
	rt_enqueue(r, &r->up[rep], o);
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

static void
orphan_add(struct up *u, struct medha_msg_event *ev)
{
	if (u->norph == u->orph_cap) {
		int ncap = u->orph_cap ? 2 * u->orph_cap : 16;
		void *n = medha_reallocarray(u->orph, ncap, sizeof(*u->orph));
		if (n == NULL) {
			medha_msg_event_clear(ev);
			return;
		}
		u->orph = n;
		u->orph_cap = ncap;
	}
	u->orph[u->norph].since = medha_now();
	u->orph[u->norph++].ev = *ev;
	memset(ev, 0, sizeof(*ev));
}

/* Events that waited for handle up (now known as q): pass them on. */
static void
orphans_claim(struct medha_router *r, struct up *u, uint64_t up)
{
	for (int i = 0; i < u->norph;) {
		if (u->orph[i].ev.handle != up) {
			i++;
			continue;
		}
		struct medha_msg_event ev = u->orph[i].ev;
		memmove(&u->orph[i], &u->orph[i + 1],
		    (size_t)(u->norph - i - 1) * sizeof(*u->orph));
		u->norph--;
		struct rreq *q = medha_map_get(&u->by_up, up);
		if (q != NULL)
			relay(r, q, &ev);
		else
			medha_msg_event_clear(&ev);
	}
}

static void
on_answer(struct medha_router *r, struct note *n)
{
	struct up *u = &r->up[n->rep];
	struct rreq *q = medha_map_get(&r->reqs, n->rh);
	const struct medha_msg *m = &n->msg;
	char why[512];

	if (q != NULL && q->rep != n->rep)
		q = NULL; /* an answer from a replica given up on */
	if (n->rc == 0 && m->type == MEDHA_MSG_ACCEPTED &&
	    n->epoch0 == n->epoch1 && n->epoch0 == u->epoch) {
		if (q == NULL) { /* ended meanwhile: the replica stops it */
			rt_cancel_upstream(r, n->rep, m->accepted.handle);
			return;
		}
		if (medha_map_put(&u->by_up, m->accepted.handle, q) != 0) {
			rt_cancel_upstream(r, n->rep, m->accepted.handle);
			rt_rreq_fail(r, q, MEDHA_STATUS_FAILED, "out of memory");
			return;
		}
		q->up = m->accepted.handle;
		u->live++;
		if (q->gone || q->cancel) /* its record follows */
			rt_cancel_upstream(r, n->rep, q->up);
		orphans_claim(r, u, q->up);
		return;
	}
	if (q == NULL)
		return;
	/* refused (full, not ready, stopping), or lost on the way: another
	 * replica may take it, or it waits here for one */
	if (n->rc != 0)
		snprintf(why, sizeof(why), "replica %s: %s", u->url, n->why);
	else if (m->type == MEDHA_MSG_ERROR)
		snprintf(why, sizeof(why), "%s", m->error.reason);
	else if (m->type == MEDHA_MSG_ACCEPTED)
		snprintf(why, sizeof(why), "replica %s: connection lost",
		    u->url);
	else
		snprintf(why, sizeof(why), "replica %s: answered %s", u->url,
		    medha_msg_type_name(m->type));
	if (n->rc == 0 && m->type == MEDHA_MSG_ERROR &&
	    m->error.code != MEDHA_ENOSPACE &&
	    strncmp(m->error.reason, "shutting down", 13) != 0) {
		/* the request itself is at fault: every replica says so */
		rt_rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		return;
	}
	medha_log(MEDHA_LOG_INFO, "request %s: %s; trying another replica",
	    q->id, why);
	rt_replace(r, q,
	    n->rc == 0 && m->type == MEDHA_MSG_ERROR ? MEDHA_STATUS_REJECTED
	                                             : MEDHA_STATUS_FAILED,
	    why);
}

static void
on_events(struct medha_router *r, struct note *n)
{
	struct up *u = &r->up[n->rep];

	/*
	 * By handle, whatever the connection: a POLL sent on a connection
	 * that closed may be answered on the next one, and its events are
	 * then the new connection's (those of a connection given up on have
	 * no request left and wait as orphans, then go).
	 */
	for (int64_t i = 0; i < n->msg.events.n; i++) {
		struct medha_msg_event *ev = &n->msg.events.ev[i];
		struct rreq *q = medha_map_get(&u->by_up, ev->handle);
		if (q != NULL)
			relay(r, q, ev);
		else
			orphan_add(u, ev);
	}
}

/*
 * Replica u is down: what was on its way to it goes elsewhere (an
 * answer it gives later is for a request given up on there).
 */
static void
divert(struct medha_router *r, struct up *u, const char *why)
{
	struct op *o, *next;
	struct rreq **qs;
	size_t it = 0;
	uint64_t key;
	void *v;
	int n = 0;

	pthread_mutex_lock(&r->mu);
	o = u->ops;
	u->ops = u->ops_tail = NULL;
	pthread_mutex_unlock(&r->mu);
	for (; o != NULL; o = next) {
		next = o->next;
		rt_op_free(o);
	}
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
	for (int i = 0; i < u->norph; i++)
		medha_msg_event_clear(&u->orph[i].ev);
	u->norph = 0;
}

/* What the replicas' threads learnt: answers, events, statuses. */
void
rt_take_inbox(struct medha_router *r)
{
	struct note *n;

	pthread_mutex_lock(&r->mu);
	n = r->in_head;
	r->in_head = r->in_tail = NULL;
	pthread_mutex_unlock(&r->mu);
	while (n != NULL) {
		struct note *next = n->next;
		if (n->kind == N_ANSWER)
			on_answer(r, n);
		else
			on_events(r, n);
		if (n->rc == 0)
			medha_msg_clear(&n->msg);
		free(n);
		n = next;
	}
}

/* Replicas up and down, statuses taken in, stale orphans let go. */
#define UNREACHABLE 30 /* s */

void
rt_watch(struct medha_router *r)
{
	double t = medha_now();
	int ready = 0;

	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		uint64_t epoch = medha_cli_epoch(u->cli), gen;
		double last_ok;
		pthread_mutex_lock(&r->mu);
		last_ok = u->last_ok;
		gen = u->st_gen;
		if (gen != u->st_seen)
			u->now = u->st;
		pthread_mutex_unlock(&r->mu);
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
		for (int k = 0; k < u->norph;) {
			if (t - u->orph[k].since <= DEAD) {
				k++;
				continue;
			}
			medha_log(MEDHA_LOG_WARN,
			    "replica %s: event for unknown request %llx "
			    "dropped",
			    u->url, (unsigned long long)u->orph[k].ev.handle);
			if (u->orph[k].ev.kind != MEDHA_EVENT_RECORD)
				rt_cancel_upstream(r, i, u->orph[k].ev.handle);
			medha_msg_event_clear(&u->orph[k].ev);
			u->orph[k] = u->orph[--u->norph];
		}
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
