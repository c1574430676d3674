/*
 * router.c: medha-router (router.h). The main thread serves the clients'
 * socket (medha_srv_next), and owns every request and every decision.
 * Each replica has two threads that only carry messages: a sender that
 * makes the SUBMIT and CANCEL calls queued for it, and asks for STATUS
 * every status_interval; and a poller that keeps a POLL outstanding and
 * hands back the events it brings. What they learn goes into the main
 * thread's inbox (one mutex for the whole router), and medha_srv_wake()
 * makes the main thread look.
 *
 * A client's SUBMIT is answered at once: ERROR if the router is
 * stopping or full, else ACCEPTED with the router's handle (the request
 * is held if no replica is ready), and from then on a record follows
 * whatever happens (a replica's refusal is a "rejected" record),
 * so that a slow or stopped replica never keeps a client waiting for an
 * answer. A replica's events can overtake its ACCEPTED (two threads, two
 * contexts): events for a handle not yet known wait, for up to
 * MEDHA_PROTO_DEAD_MS, for it; then they go, and the request is
 * cancelled there.
 *
 * The main thread also keeps the figures of medha_router_metrics() (what
 * /metrics of the HTTP front door shows) under a mutex of their own, so
 * that a snapshot never waits for the inbox.
 */
#include "serve/router.h"

#include "map.h"
#include "serve/front.h"
#include "net/link.h"
#include "net/proto.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define HB (MEDHA_PROTO_HEARTBEAT_MS / 1e3)

/* ---- state ---- */

/* A request in flight through the router. */
struct rreq {
	uint64_t handle; /* the router's, as the client knows it */
	uint32_t peer;   /* the client's connection */
	char id[MEDHA_ID_MAX];
	double arrival;   /* router clock, s */
	int64_t prompt;   /* prompt tokens (estimated for text) */
	int64_t need;     /* KV tokens it needs: prompt + max_tokens */
	int rep;          /* the replica it was sent to, or -1 */
	uint64_t up;      /* the replica's handle once accepted, else 0 */
	uint64_t *tried;  /* bitmap of replicas tried */
	struct medha_reqspec spec; /* kept until its first event, for a
	                              retry elsewhere */
	int started;               /* an event came: it cannot move */
	int gone;                  /* its client went away */
	int cancel;                /* cancel it once accepted */
	int held;                  /* waiting in r->held for a replica */
	double held_since;         /* router clock when first held, or 0 */
	double sent;               /* router clock when last placed */
};

enum { OP_SUBMIT, OP_CANCEL };

/* A call for a replica's sender thread. */
struct op {
	int kind;
	uint64_t rh;               /* OP_SUBMIT: the router's handle */
	struct medha_reqspec spec; /* OP_SUBMIT: a copy */
	uint64_t up;               /* OP_CANCEL: the replica's handle */
	struct op *next;
};

enum { N_ANSWER, N_EVENTS };

/* What a replica's thread learnt, for the main thread. */
struct note {
	int kind;
	int rep;
	uint64_t rh;           /* N_ANSWER: the request */
	int rc;                /* N_ANSWER: the call's error, or 0 */
	char why[256];         /* its reason */
	uint64_t epoch0, epoch1; /* connection epochs around the call */
	struct medha_msg msg;  /* the answer, or the EVENTS */
	struct note *next;
};

/* An event that came before its request's ACCEPTED. */
struct orphan {
	double since;
	struct medha_msg_event ev;
};

struct up {
	struct medha_router *r;
	int idx;
	const char *url;
	struct medha_cli *cli;
	pthread_t sender, poller;
	int threads;
	pthread_cond_t cv; /* ops queued, or quit */
	/* under r->mu */
	struct op *ops, *ops_tail;
	double last_ok; /* medha_now() of the last answer it gave */
	struct medha_msg_status st;
	uint64_t st_gen; /* statuses received */
	/* main thread only */
	int alive;          /* counted up (answered within DEAD) */
	int ready;          /* and its workers are all there */
	uint64_t st_seen;   /* the st_gen acted on */
	struct medha_msg_status now; /* the latest status */
	uint64_t epoch;     /* the connection epoch acted on */
	struct medha_map by_up; /* the replica's handle -> struct rreq */
	int64_t live;       /* requests accepted there, not ended */
	int64_t placed;     /* prompt tokens sent since its last status */
	int64_t placed_kv;  /* KV tokens likewise */
	double s_per_tok;   /* predicted prefill seconds per prompt token */
	struct orphan *orph;
	int norph, orph_cap;
};

struct medha_router {
	struct medha_router_config cfg;
	struct medha_front f; /* socket, clients, drain, live requests */
	double t0;
	struct up *up; /* (cfg.nreplicas) */
	int nup;
	pthread_mutex_t mu;
	struct note *in_head, *in_tail; /* under mu */
	int quit;                       /* under mu */
	struct medha_map reqs;          /* the router's handle -> rreq */
	uint64_t next_handle;
	int rr; /* where the tie-break starts */
	int ready;
	struct rreq **held; /* waiting for a replica, in arrival order */
	int64_t nheld, held_cap;
	double held_tried;  /* medha_now() when they were last offered out */
	int64_t served, failed;
	pthread_mutex_t mmu;               /* guards met */
	struct medha_router_metrics met;   /* met.rep: (nup) */
};

const double medha_router_ttft_le[MEDHA_HIST_BUCKETS] = {0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const double medha_router_tpot_le[MEDHA_HIST_BUCKETS] = {0.001, 0.0025,
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};

void
medha_router_config_default(struct medha_router_config *c)
{
	memset(c, 0, sizeof(*c));
	c->drain_timeout = 30;
	c->max_queue = 100000;
	c->status_interval = 0.1;
	c->hold_timeout = 30;
}

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
static void
count_end(struct medha_router *r, const struct medha_record *rec, int status)
{
	pthread_mutex_lock(&r->mmu);
	if (rec == NULL) {
		r->met.requests[status]++;
	} else {
		if (rec->status >= 0 && rec->status < MEDHA_STATUS_COUNT)
			r->met.requests[rec->status]++;
		r->met.prompt_tokens += rec->prompt_tokens;
		r->met.generation_tokens += rec->output_tokens;
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 0)
			medha_hist_add(&r->met.ttft, medha_router_ttft_le,
			    rec->ttft);
		if (rec->status == MEDHA_STATUS_OK && rec->output_tokens > 1)
			medha_hist_add(&r->met.tpot, medha_router_tpot_le,
			    rec->tpot_mean);
	}
	pthread_mutex_unlock(&r->mmu);
}

static void
count_refused(struct medha_router *r)
{
	pthread_mutex_lock(&r->mmu);
	r->met.refused++;
	pthread_mutex_unlock(&r->mmu);
}

/* The replicas' states and the gauges, after watch(). */
static void
count_gauges(struct medha_router *r)
{
	const char *model = NULL;

	pthread_mutex_lock(&r->mmu);
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

static void
op_free(struct op *o)
{
	medha_reqspec_clear(&o->spec);
	free(o);
}

static void *
sender_main(void *arg)
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
				op_free(o);
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
			op_free(o);
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

static void *
poller_main(void *arg)
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
static void
enqueue(struct medha_router *r, struct up *u, struct op *o)
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

static void
cancel_upstream(struct medha_router *r, int rep, uint64_t up)
{
	struct op *o = calloc(1, sizeof(*o));

	if (o == NULL) /* the replica cancels it when we go, or it ends */
		return;
	o->kind = OP_CANCEL;
	o->up = up;
	enqueue(r, &r->up[rep], o);
}

/* ---- requests ---- */

static void
rreq_free(struct rreq *q)
{
	medha_reqspec_clear(&q->spec);
	free(q->tried);
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
static void
rreq_end(struct medha_router *r, struct rreq *q)
{
	struct medha_client *c;

	if (q->rep >= 0 && q->up != 0 &&
	    medha_map_get(&r->up[q->rep].by_up, q->up) == q) {
		medha_map_del(&r->up[q->rep].by_up, q->up);
		r->up[q->rep].live--;
	}
	if (q->held)
		unhold(r, q);
	medha_map_del(&r->reqs, q->handle);
	if ((c = medha_clients_find(&r->f.clients, q->peer, 0)) != NULL)
		c->live--;
	r->f.live--;
	rreq_free(q);
}

/* End q with a record of status and reason made here. */
static void
rreq_fail(struct medha_router *r, struct rreq *q, int status,
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
	count_end(r, NULL, status);
	rreq_end(r, q);
}

/*
 * The replica for q: the least predicted pending work among the ready
 * ones not yet tried that have KV memory for it, else among all ready
 * ones not yet tried; ties go round. -1 if none is left.
 */
static int
choose(struct medha_router *r, const struct rreq *q)
{
	int best = -1, best_fits = 0;
	double best_w = 0;

	for (int k = 0; k < r->nup; k++) {
		int i = (r->rr + k) % r->nup;
		struct up *u = &r->up[i];
		if (!u->alive || !u->ready || (q->tried[i / 64] >> (i % 64) & 1))
			continue;
		int64_t free_kv = (u->now.kv_blocks - u->now.kv_used) *
		    u->now.block_size - u->placed_kv;
		int fits = q->need <= free_kv;
		double w = u->now.work + (double)u->placed * u->s_per_tok;
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
	return best;
}

/* Send q to the best replica left: 0, or -1 if none is left. */
static int
place(struct medha_router *r, struct rreq *q)
{
	int i = choose(r, q);
	struct op *o;

	if (i < 0)
		return -1;
	if ((o = calloc(1, sizeof(*o))) == NULL ||
	    medha_reqspec_copy(&o->spec, &q->spec) != 0) {
		free(o);
		return -1;
	}
	o->kind = OP_SUBMIT;
	o->rh = q->handle;
	q->rep = i;
	q->sent = medha_now() - r->t0;
	q->tried[i / 64] |= 1ull << (i % 64);
	r->up[i].placed += q->prompt;
	r->up[i].placed_kv += q->need;
	enqueue(r, &r->up[i], o);
	return 0;
}

/* Place q again after a replica failed it, or end it with why. */
static void
replace(struct medha_router *r, struct rreq *q, int status, const char *why)
{
	if (q->gone || q->cancel) {
		rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
		    q->gone ? "client went away" : "cancelled by its client");
		return;
	}
	if (place(r, q) != 0 && hold(r, q) != 0)
		rreq_fail(r, q, status, why);
}

static void
on_submit(void *arg, struct medha_srv_ev *ev, struct medha_reqspec *rs)
{
	struct medha_router *r = arg;
	struct medha_client *c;
	struct rreq *q = NULL;

	if (r->f.drain.on) {
		count_refused(r);
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "shutting down: not accepting requests");
		return;
	}
	if (r->f.live >= r->cfg.max_queue) {
		count_refused(r);
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
	q->prompt = rs->prompt_tokens > 0 ? rs->prompt_tokens
	    : rs->prompt != NULL          ? (int64_t)strlen(rs->prompt) / 3 + 1
	                                  : 1;
	q->need = q->prompt + rs->max_tokens;
	q->rep = -1;
	q->spec = *rs; /* taken over */
	memset(rs, 0, sizeof(*rs));
	if (place(r, q) != 0 && hold(r, q) != 0) {
		count_refused(r);
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "no replica is ready");
		medha_map_del(&r->reqs, q->handle);
		rreq_free(q);
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
		rec->first_token += d;
		rec->finish += d;
		rec->ttft = rec->first_token - rec->arrival;
		r->served++;
		count_end(r, rec, 0);
	}
	ev->handle = q->handle;
	if (!q->gone)
		medha_clients_push(&r->f.clients, q->peer, ev);
	else
		medha_msg_event_clear(ev);
	if (record)
		rreq_end(r, q);
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
			cancel_upstream(r, n->rep, m->accepted.handle);
			return;
		}
		if (medha_map_put(&u->by_up, m->accepted.handle, q) != 0) {
			cancel_upstream(r, n->rep, m->accepted.handle);
			rreq_fail(r, q, MEDHA_STATUS_FAILED, "out of memory");
			return;
		}
		q->up = m->accepted.handle;
		u->live++;
		if (q->gone || q->cancel) /* its record follows */
			cancel_upstream(r, n->rep, q->up);
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
		rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
		return;
	}
	medha_log(MEDHA_LOG_INFO, "request %s: %s; trying another replica",
	    q->id, why);
	replace(r, q,
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
		op_free(o);
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
		replace(r, qs[i], MEDHA_STATUS_FAILED, why);
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
	/* rreq_end edits by_up: collect first */
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
			rreq_fail(r, q, MEDHA_STATUS_FAILED, reason);
			continue;
		}
		medha_map_del(&u->by_up, q->up);
		u->live--;
		q->up = 0;
		q->rep = -1;
		moved++;
		replace(r, q, MEDHA_STATUS_FAILED, reason);
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

/* ---- clients ---- */

static int
on_cancel(void *arg, uint32_t peer, uint64_t h)
{
	struct medha_router *r = arg;
	struct rreq *q = medha_map_get(&r->reqs, h);

	if (q == NULL || q->peer != peer || q->gone)
		return MEDHA_ENOTFOUND;
	if (q->up != 0 && !q->cancel)
		cancel_upstream(r, q->rep, q->up);
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
			cancel_upstream(r, q->rep, q->up);
	}
	return n;
}

/* ---- the main loop ---- */

/* What the replicas' threads learnt: answers, events, statuses. */
static void
take_inbox(struct medha_router *r)
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

/*
 * The requests held at the router: those whose client left, or that
 * waited hold_timeout, end; while a replica is ready the rest go out in
 * arrival order until one finds no replica. Every status_interval.
 */
static void
release_held(struct medha_router *r, double t)
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
			rreq_fail(r, q, MEDHA_STATUS_CANCELLED,
			    q->gone ? "client went away"
			            : "cancelled by its client");
		} else if (now - q->held_since > r->cfg.hold_timeout) {
			q->held = 0;
			snprintf(why, sizeof(why),
			    "no replica ready within %g s", r->cfg.hold_timeout);
			rreq_fail(r, q, MEDHA_STATUS_REJECTED, why);
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

/* Replicas up and down, statuses taken in, stale orphans let go. */
static void
watch(struct medha_router *r)
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
		}
		if (gen != u->st_seen) {
			u->st_seen = gen;
			u->placed = u->placed_kv = 0;
			if (u->now.prefill > 0 && u->now.work > 0)
				u->s_per_tok = u->now.work / u->now.prefill;
		}
		int alive = last_ok > 0 && t - last_ok <= DEAD;
		if (u->alive && !alive) {
			medha_log(MEDHA_LOG_WARN,
			    "replica %s: silent for %.1f s: down", u->url,
			    t - last_ok);
			u->alive = u->ready = 0;
			fail_all(r, u, "silent for too long");
			divert(r, u, "no replica is ready");
		}
		int rdy = alive && u->now.ready;
		if (rdy != u->ready || alive != u->alive)
			medha_log(MEDHA_LOG_WARN, "replica %s: %s (%lld of %lld workers)", u->url,
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
				cancel_upstream(r, i, u->orph[k].ev.handle);
			medha_msg_event_clear(&u->orph[k].ev);
			u->orph[k] = u->orph[--u->norph];
		}
	}
	if (ready > 0 && !r->ready)
		medha_log(MEDHA_LOG_WARN, "ready: %d of %d replicas ready",
		    ready, r->nup);
	else if (ready == 0 && r->ready)
		medha_log(MEDHA_LOG_WARN, "no replica ready");
	r->ready = ready > 0;
	release_held(r, t);
	uint32_t deaf = medha_clients_tick(&r->f.clients, t);
	if (deaf != 0) {
		medha_log(MEDHA_LOG_WARN,
		    "client %u has not collected its events for %d s: "
		    "cancelling its requests", deaf, MEDHA_CLIENT_STALL_S);
		medha_front_gone(&r->f, deaf);
	}
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
			cancel_upstream(r, qs[i]->rep, qs[i]->up);
		rreq_fail(r, qs[i], MEDHA_STATUS_CANCELLED, "router stopped");
	}
	free(qs);
}

/* Once a pass: the replicas watched (first: an answer is judged by the
 * epoch now), their news taken, the gauges counted. */
static void
router_pass(void *arg)
{
	struct medha_router *r = arg;

	watch(r);
	take_inbox(r);
	count_gauges(r);
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
	    !(c->hold_timeout >= 0))
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
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->mmu, NULL);
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
		{
			pthread_condattr_t ca;
			pthread_condattr_init(&ca);
			pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
			pthread_cond_init(&u->cv, &ca);
			pthread_condattr_destroy(&ca);
		}
		r->nup = i + 1;
		if ((rc = medha_cli_open(&u->cli, u->url, 2, why, whylen)) !=
		    0) {
			medha_router_close(r);
			return rc;
		}
		if (pthread_create(&u->sender, NULL, sender_main, u) != 0) {
			medha_router_close(r);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "cannot start a thread");
		}
		u->threads = 1;
		if (pthread_create(&u->poller, NULL, poller_main, u) != 0) {
			medha_router_close(r);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "cannot start a thread");
		}
		u->threads = 2;
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

	medha_log(MEDHA_LOG_INFO, "listening at %s for %d replica%s",
	    r->cfg.listen, r->nup, r->nup > 1 ? "s" : "");
	if ((rc = medha_front_run(&r->f, stop)) != 0)
		return rc;
	medha_log(MEDHA_LOG_WARN, "stopped: %lld requests served, %lld failed",
	    (long long)r->served, (long long)r->failed);
	return 0;
}

void
medha_router_close(struct medha_router *r)
{
	size_t it = 0;
	uint64_t key;
	void *v;
	struct note *n;

	if (r == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	r->quit = 1;
	for (int i = 0; i < r->nup; i++)
		pthread_cond_signal(&r->up[i].cv);
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < r->nup; i++)
		if (r->up[i].cli != NULL)
			medha_cli_abort(r->up[i].cli);
	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		if (u->threads > 0)
			pthread_join(u->sender, NULL);
		if (u->threads > 1)
			pthread_join(u->poller, NULL);
		medha_cli_close(u->cli);
		while (u->ops != NULL) {
			struct op *o = u->ops;
			u->ops = o->next;
			op_free(o);
		}
		for (int k = 0; k < u->norph; k++)
			medha_msg_event_clear(&u->orph[k].ev);
		free(u->orph);
		medha_map_free(&u->by_up);
		pthread_cond_destroy(&u->cv);
	}
	while ((n = r->in_head) != NULL) {
		r->in_head = n->next;
		if (n->rc == 0)
			medha_msg_clear(&n->msg);
		free(n);
	}
	while (medha_map_next(&r->reqs, &it, &key, &v)) {
		rreq_free(v);
	}
	medha_map_free(&r->reqs);
	free(r->held);
	medha_front_free(&r->f);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->mmu);
	free(r->met.rep);
	free(r->up);
	free(r);
}
