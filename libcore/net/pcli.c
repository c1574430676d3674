/*
 * pcli.c: the protocol's asynchronous client (pcli.h), in the shape of
 * nng's own req.c: every call is a small state machine on an nng
 * context and an aio whose callback moves it on (send, then receive,
 * then finish), so that calls overlap and none waits for another.
 *
 * Sections: the calls (a pool of contexts, reused: a finished call's
 * context and aio go back to the pool, never freed from inside their own
 * callback); what an answer means (finish: correlation by cookie, the
 * handles known, the early events); the client's thread, which starts
 * what a callback must not (a handshake, net/auth.h, blocks for a round
 * trip), re-arms the POLL after a failure and lets early events go; and
 * the caller's side (open, submit, take, close).
 *
 * Locks: p->mu guards the client's state; it is never held across an
 * nng call that can wait, nor while the notify callback runs. The link
 * underneath (struct medha_cli) gives the socket, the connection epoch
 * and the handshake.
 */
#include "net/pcli.h"

#include "map.h"
#include "net/auth.h"
#include "net/link_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define EARLY_MAX (2 * DEAD) /* s an event waits for its ACCEPTED */
#define TICK 0.1             /* s between the thread's looks */
/* s close waits for the answers owed: the POLL's comes within a
   heartbeat (net/proto.h) */
#define QUIET_MAX (MEDHA_PROTO_HEARTBEAT_MS / 1e3 + 0.2)

enum { K_SUBMIT, K_CANCEL, K_STATUS, K_POLL, K_CALL };
enum { S_IDLE, S_QUEUED, S_SEND, S_RECV };

/* One call: a context of its own, its aio, its request. */
struct call {
	struct medha_pcli *p;
	nng_ctx ctx;
	nng_aio *aio;
	int kind;  /* K_* */
	int state; /* S_* */
	int tries; /* sent again after NOAUTH */
	int posted; /* sent, its answer not come: counted in p->owed */
	uint64_t cookie;
	void *req; /* (len) the encoded request, kept for a resend */
	size_t len;
	void *last; /* (lastlen) its last piece, when it goes in pieces
	               (net/link.h, MEDHA_LINK_PIECE): sent in its place */
	size_t lastlen;
	double timeout;
	uint64_t epoch0; /* the connection epoch it was sent in */
	struct call *next; /* the queue to send, or the pool */
};

/* An event that came before its request's ACCEPTED. */
struct early {
	double since;
	struct medha_msg_event ev;
};

struct medha_pcli {
	struct medha_cli *cli;
	void (*notify)(void *);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cv;  /* the thread: calls to send, or closing */
	pthread_cond_t tcv; /* medha_pcli_take: something queued */
	pthread_t thr;
	int started;
	int closing;
	struct call **all; /* (nall) every call made, for close */
	int nall, allcap;
	struct call *pool;          /* idle calls */
	struct call *sq, *sq_tail;  /* for the thread to start */
	struct call *poll;          /* the POLL's call */
	int poll_idle;              /* to be sent again at poll_at */
	double poll_at;
	int poll_warned;
	struct medha_pcli_out *oq, *oq_tail; /* for medha_pcli_take */
	struct medha_map known; /* the server's handle -> cookie, from
	                           ACCEPTED to the record */
	uint64_t known_epoch;   /* the connection they were accepted on */
	struct early *early;    /* (nearly) in arrival order */
	int nearly, early_cap;
	int64_t dropped;
	int nsubmit; /* SUBMITs not answered yet */
	int posting; /* callbacks sending a POLL again: close waits */
	int owed;    /* calls sent and not answered: close waits */
	int redial;  /* the POLL went unanswered: a fresh connection */
	uint64_t redials;
	double last_ok;
};

/* medha_now()'s time t for a wait on a CLOCK_MONOTONIC condition. */
static struct timespec
ts_at(double t)
{
	return (struct timespec){.tv_sec = (time_t)t,
	    .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
}

/* ---- the calls ---- */

static void call_cb(void *arg);

/* An idle call (mu held): from the pool, or a new context. NULL when
 * out of memory or contexts. */
static struct call *
call_get(struct medha_pcli *p, int kind)
{
	struct call *c = p->pool;

	if (c != NULL) {
		p->pool = c->next;
	} else {
		if (p->nall == p->allcap) {
			int ncap = p->allcap ? 2 * p->allcap : 16;
			void *n = medha_reallocarray(p->all, (size_t)ncap,
			    sizeof(*p->all));
			if (n == NULL)
				return NULL;
			p->all = n;
			p->allcap = ncap;
		}
		if ((c = calloc(1, sizeof(*c))) == NULL)
			return NULL;
		c->p = p;
		if (nng_ctx_open(&c->ctx, p->cli->sock) != 0) {
			free(c);
			return NULL;
		}
		if (nng_aio_alloc(&c->aio, call_cb, c) != 0) {
			nng_ctx_close(c->ctx);
			free(c);
			return NULL;
		}
		p->all[p->nall++] = c;
	}
	c->kind = kind;
	c->state = S_IDLE;
	c->tries = 0;
	c->cookie = 0;
	c->next = NULL;
	return c;
}

/* c back to the pool (mu held). */
static void
call_put(struct medha_pcli *p, struct call *c)
{
	free(c->req);
	free(c->last);
	c->req = NULL;
	c->last = NULL;
	c->len = 0;
	c->state = S_IDLE;
	c->next = p->pool;
	p->pool = c;
}

/* c to the thread, which starts it (mu held). */
static void
call_queue(struct medha_pcli *p, struct call *c)
{
	c->state = S_QUEUED;
	c->next = NULL;
	if (p->sq_tail != NULL)
		p->sq_tail->next = c;
	else
		p->sq = c;
	p->sq_tail = c;
	pthread_cond_signal(&p->cv);
}

static void finish(struct call *c, int rc, const char *why,
    struct medha_msg *rep);

/* Send c's request and let the callback take it on (mu not held). */
static void
call_post(struct call *c)
{
	struct medha_pcli *p = c->p;
	nng_msg *m = NULL;
	int bad = nng_msg_alloc(&m, 0) != 0 ||
	    nng_msg_append(m, c->last != NULL ? c->last : c->req,
	        c->last != NULL ? c->lastlen : c->len) != 0;

	free(c->last);
	c->last = NULL;
	if (bad) {
		if (m != NULL)
			nng_msg_free(m);
		finish(c, MEDHA_ENOMEM, "out of memory", NULL);
		return;
	}
	c->epoch0 = medha_cli_epoch(p->cli);
	pthread_mutex_lock(&p->mu);
	c->posted = 1;
	p->owed++;
	pthread_mutex_unlock(&p->mu);
	nng_aio_set_timeout(c->aio, c->timeout < 0
	        ? NNG_DURATION_INFINITE
	        : (nng_duration)(c->timeout * 1e3));
	nng_aio_set_msg(c->aio, m);
	c->state = S_SEND;
	nng_ctx_send(c->ctx, c->aio);
}

/* Whether a call may go without a handshake first. */
static int
proven(struct medha_pcli *p)
{
	struct medha_cli *cli = p->cli;
	int ok;

	if (!cli->auth)
		return 1;
	pthread_mutex_lock(&cli->mu);
	ok = cli->pipe != 0 && cli->pipe == cli->authed;
	pthread_mutex_unlock(&cli->mu);
	return ok;
}

/* c's answer came, or it ended (mu held): close waits for no more. */
static void
owed_done(struct medha_pcli *p, struct call *c)
{
	if (!c->posted)
		return;
	c->posted = 0;
	if (--p->owed == 0 && p->closing)
		pthread_cond_broadcast(&p->cv);
}

static void
call_cb(void *arg)
{
	struct call *c = arg;
	struct medha_pcli *p = c->p;
	int rv = nng_aio_result(c->aio);
	struct medha_msg rep;
	char why[256];
	nng_msg *m;
	int rc;

	if (c->state == S_SEND) {
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(c->aio));
			nng_aio_set_msg(c->aio, NULL);
			finish(c, medha_link_nng_err(rv), nng_strerror(rv), NULL);
			return;
		}
		c->state = S_RECV;
		nng_ctx_recv(c->ctx, c->aio);
		return;
	}
	if (rv != 0) {
		finish(c, medha_link_nng_err(rv), nng_strerror(rv), NULL);
		return;
	}
	m = nng_aio_get_msg(c->aio);
	nng_aio_set_msg(c->aio, NULL);
	if (medha_auth_kind(nng_msg_body(m), nng_msg_len(m)) ==
	    MEDHA_AUTH_NOAUTH) {
		nng_msg_free(m);
		if (!p->cli->auth) {
			link_cli_tell(p->cli, "the server wants the shared "
			    "secret: give --secret-file FILE (or "
			    "$MEDHA_SECRET_FILE)");
			finish(c, MEDHA_EAUTH, "the server wants the shared "
			    "secret", NULL);
		} else if (c->tries >= 2) {
			finish(c, MEDHA_EAUTH, "the server refused the "
			    "handshake", NULL);
		} else { /* not taken: the connection changed since its
		            handshake; the thread proves it again */
			c->tries++;
			pthread_mutex_lock(&p->mu);
			owed_done(p, c);
			call_queue(p, c);
			pthread_mutex_unlock(&p->mu);
		}
		return;
	}
	rc = medha_msg_decode(&rep, nng_msg_body(m), nng_msg_len(m), why,
	    sizeof(why));
	nng_msg_free(m);
	finish(c, rc, why, rc == 0 ? &rep : NULL);
}

/* ---- what an answer means ---- */

/* o to the taker's queue (mu held). */
static void
out_push(struct medha_pcli *p, struct medha_pcli_out *o)
{
	o->next = NULL;
	if (p->oq_tail != NULL)
		p->oq_tail->next = o;
	else
		p->oq = o;
	p->oq_tail = o;
	pthread_cond_signal(&p->tcv);
}

/* The handles known are the connection's: a new one forgot them. */
static void
known_sync(struct medha_pcli *p)
{
	uint64_t e = medha_cli_epoch(p->cli);

	if (e == p->known_epoch)
		return;
	medha_map_free(&p->known);
	memset(&p->known, 0, sizeof(p->known));
	p->known_epoch = e;
}

/* Event ev (taken over) of the request cookie, to the taker (mu held);
 * its record ends what is known of it. 0 or MEDHA_ENOMEM. */
static int
event_out(struct medha_pcli *p, uint64_t cookie, struct medha_msg_event *ev)
{
	struct medha_pcli_out *o = calloc(1, sizeof(*o));

	if (ev->kind == MEDHA_EVENT_RECORD)
		medha_map_del(&p->known, ev->handle);
	if (o == NULL) {
		medha_log(MEDHA_LOG_ERROR, "out of memory: an event of "
		    "request %llx lost", (unsigned long long)ev->handle);
		medha_msg_event_clear(ev);
		return MEDHA_ENOMEM;
	}
	o->kind = MEDHA_PCLI_EVENT;
	o->cookie = cookie;
	o->handle = ev->handle;
	o->ev = *ev;
	memset(ev, 0, sizeof(*ev));
	out_push(p, o);
	return 0;
}

static void cancel_locked(struct medha_pcli *p, uint64_t handle);

/* An event whose ACCEPTED has not come (mu held; taken over). */
static void
early_add(struct medha_pcli *p, struct medha_msg_event *ev)
{
	if (p->nearly == p->early_cap) {
		int ncap = p->early_cap ? 2 * p->early_cap : 16;
		void *n = medha_reallocarray(p->early, (size_t)ncap,
		    sizeof(*p->early));
		if (n == NULL) {
			medha_msg_event_clear(ev);
			p->dropped++;
			return;
		}
		p->early = n;
		p->early_cap = ncap;
	}
	p->early[p->nearly].since = medha_now();
	p->early[p->nearly++].ev = *ev;
	memset(ev, 0, sizeof(*ev));
}

/* The events that waited for handle, now the request cookie's, in the
 * order they came (mu held). */
static void
early_claim(struct medha_pcli *p, uint64_t handle, uint64_t cookie)
{
	int k = 0;

	for (int i = 0; i < p->nearly; i++) {
		if (p->early[i].ev.handle == handle)
			event_out(p, cookie, &p->early[i].ev);
		else
			p->early[k++] = p->early[i];
	}
	p->nearly = k;
}

/*
 * Early events no SUBMIT can claim any more (none is in flight), or
 * that waited past EARLY_MAX (mu held): dropped, and their requests
 * cancelled unless it was their record (all: every one, on close).
 */
static void
early_prune(struct medha_pcli *p, int all)
{
	double t = medha_now();
	int k = 0;

	for (int i = 0; i < p->nearly; i++) {
		struct early *e = &p->early[i];
		if (!all && p->nsubmit > 0 && t - e->since <= EARLY_MAX) {
			p->early[k++] = *e;
			continue;
		}
		medha_log(MEDHA_LOG_WARN, "event for unknown request %llx "
		    "dropped", (unsigned long long)e->ev.handle);
		if (!all && e->ev.kind != MEDHA_EVENT_RECORD)
			cancel_locked(p, e->ev.handle);
		medha_msg_event_clear(&e->ev);
		p->dropped++;
	}
	p->nearly = k;
}

/* A SUBMIT's answer (mu held): ACCEPTED, and the events that waited,
 * or REFUSED. */
static void
finish_submit(struct medha_pcli *p, struct call *c, int rc, const char *why,
    struct medha_msg *rep)
{
	struct medha_pcli_out *o = calloc(1, sizeof(*o));

	p->nsubmit--;
	if (o == NULL) { /* the caller's request is left to its timeout */
		medha_log(MEDHA_LOG_ERROR, "out of memory: the answer to "
		    "request %llu lost", (unsigned long long)c->cookie);
		if (rep != NULL && rep->type == MEDHA_MSG_ACCEPTED)
			cancel_locked(p, rep->accepted.handle);
		if (rep != NULL)
			medha_msg_clear(rep);
		return;
	}
	o->cookie = c->cookie;
	o->kind = MEDHA_PCLI_REFUSED;
	if (rc != 0) {
		o->rc = rc;
		snprintf(o->why, sizeof(o->why), "%s", why);
	} else if (rep->type == MEDHA_MSG_ACCEPTED) {
		uint64_t h = rep->accepted.handle;
		known_sync(p);
		if (c->epoch0 != p->known_epoch) {
			o->rc = MEDHA_EPEER;
			snprintf(o->why, sizeof(o->why), "connection lost");
		} else if (h == 0 || medha_map_get(&p->known, h) != NULL ||
		    medha_map_put(&p->known, h,
		        (void *)(uintptr_t)c->cookie) != 0) {
			o->rc = h == 0 || medha_map_get(&p->known, h) != NULL
			    ? MEDHA_EFORMAT
			    : MEDHA_ENOMEM;
			snprintf(o->why, sizeof(o->why), "%s",
			    o->rc == MEDHA_ENOMEM ? "out of memory"
			                          : "a handle given twice");
			if (o->rc == MEDHA_ENOMEM)
				cancel_locked(p, h);
		} else {
			o->kind = MEDHA_PCLI_ACCEPTED;
			o->handle = h;
			o->epoch = c->epoch0;
			o->msg = *rep; /* taken over */
			memset(rep, 0, sizeof(*rep));
		}
		medha_msg_clear(rep);
		out_push(p, o);
		if (o->kind == MEDHA_PCLI_ACCEPTED)
			early_claim(p, o->handle, c->cookie);
		return;
	} else {
		o->msg = *rep; /* taken over */
		memset(rep, 0, sizeof(*rep));
	}
	out_push(p, o);
}

/* Event ev (taken over) to its request, or to wait for its ACCEPTED
 * (mu held). */
static void
take_event(struct medha_pcli *p, struct medha_msg_event *ev)
{
	void *v = medha_map_get(&p->known, ev->handle);

	if (v != NULL)
		event_out(p, (uint64_t)(uintptr_t)v, ev);
	else
		early_add(p, ev);
}

/* A POLL's answer (mu held): events to their requests, or to wait. */
static void
finish_poll(struct medha_pcli *p, struct medha_msg *rep)
{
	known_sync(p);
	for (int64_t i = 0; i < rep->events.n; i++)
		take_event(p, &rep->events.ev[i]);
	medha_msg_clear(rep);
}

/*
 * Call c is over (from its callback; mu not held): rc and why, or the
 * answer rep (taken over). What it means is queued; c goes back to the
 * pool, but the POLL, which is sent again at once or, after a failure,
 * by the thread a little later.
 */
static void
finish(struct call *c, int rc, const char *why, struct medha_msg *rep)
{
	struct medha_pcli *p = c->p;
	int queued, again = 0;

	pthread_mutex_lock(&p->mu);
	queued = p->oq != NULL;
	owed_done(p, c);
	if (rc == 0)
		p->last_ok = medha_now();
	switch (c->kind) {
	case K_SUBMIT:
		finish_submit(p, c, rc, why, rep);
		break;
	case K_STATUS:
	case K_CALL: {
		struct medha_pcli_out *o = calloc(1, sizeof(*o));
		if (o == NULL) {
			if (rep != NULL)
				medha_msg_clear(rep);
			break;
		}
		o->kind = c->kind == K_STATUS ? MEDHA_PCLI_STATUS
		                              : MEDHA_PCLI_ANSWER;
		o->cookie = c->cookie;
		o->rc = rc;
		if (rc != 0)
			snprintf(o->why, sizeof(o->why), "%s", why);
		else
			o->msg = *rep;
		out_push(p, o);
		break;
	}
	case K_POLL:
		if (rc == 0 && rep->type == MEDHA_MSG_EVENTS) {
			finish_poll(p, rep);
			again = !p->closing;
			break;
		}
		if (rc == 0) {
			if (!p->poll_warned++)
				medha_log(MEDHA_LOG_WARN, "POLL answered with "
				    "%s%s%s", medha_msg_type_name(rep->type),
				    rep->type == MEDHA_MSG_ERROR ? ": " : "",
				    rep->type == MEDHA_MSG_ERROR
				        ? rep->error.reason
				        : "");
			medha_msg_clear(rep);
		} else if (rc == MEDHA_ETIMEOUT && !p->closing &&
		    medha_cli_connected(p->cli)) {
			/* the server silent past DEAD on a connection
			   that looks up: it may be one a partition left
			   for TCP to give up on (minutes); the thread
			   dials a fresh one (not connected: the dialer
			   tries already, every 0.5 s at most) */
			p->redial = 1;
		} else if (rc != MEDHA_EPEER && rc != MEDHA_ETIMEOUT &&
		    !p->poll_warned++) {
			/* a malformed answer is said once, not retried mute */
			medha_log(MEDHA_LOG_WARN, "POLL: %s", why);
		}
		/* not connected: the dialer's next try; refused: a while */
		p->poll_at = medha_now() + (rc == 0 ? 0.1 : 0.05);
		p->poll_idle = 1;
		c->state = S_IDLE;
		pthread_cond_signal(&p->cv);
		break;
	default: /* K_CANCEL: the record says what it did */
		if (rep != NULL)
			medha_msg_clear(rep);
		break;
	}
	if (c->kind != K_POLL)
		call_put(p, c);
	else if (again && !proven(p)) {
		call_queue(p, c);
		again = 0;
	}
	queued = !queued && p->oq != NULL;
	if (again)
		p->posting++;
	pthread_mutex_unlock(&p->mu);
	if (queued && p->notify != NULL)
		p->notify(p->arg);
	if (!again)
		return;
	/* nothing is sent on a socket being closed: close waits for this
	   send to be posted before it closes the socket (issue 39, 10) */
	call_post(c);
	pthread_mutex_lock(&p->mu);
	if (--p->posting == 0)
		pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

/* ---- the client's thread ---- */

/* Start c (mu not held): the handshake first if the connection has not
 * had it. */
static void
start(struct medha_pcli *p, struct call *c)
{
	int rc;

	if (p->cli->auth &&
	    (rc = link_cli_auth(p->cli, c->timeout < 0 ? DEAD : c->timeout,
	         c->tries > 0)) != 0) {
		char why[320];
		link_cli_why(p->cli, rc, why, sizeof(why));
		finish(c, rc, why, NULL);
		return;
	}
	/* larger than a piece: all but the last on the handshake's
	   context, the last as the call */
	free(c->last);
	c->last = NULL;
	if ((rc = link_cli_pieces(p->cli, p->cli->nctx, c->req, c->len,
	         c->timeout < 0 ? DEAD : c->timeout, &c->last,
	         &c->lastlen)) != 0) {
		finish(c, rc, medha_strerror(rc), NULL);
		return;
	}
	call_post(c);
}

static void *
thread_main(void *arg)
{
	struct medha_pcli *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->closing) {
		struct call *c = p->sq;
		double t = medha_now(), until;
		if (c != NULL) {
			if ((p->sq = c->next) == NULL)
				p->sq_tail = NULL;
			pthread_mutex_unlock(&p->mu);
			start(p, c);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		if (p->redial) {
			p->redial = 0;
			p->redials++;
			pthread_mutex_unlock(&p->mu);
			medha_log(MEDHA_LOG_WARN, "%s silent for %.0f s: "
			    "dialling it again", p->cli->url, DEAD);
			(void)medha_cli_redial(p->cli);
			pthread_mutex_lock(&p->mu);
			continue;
		}
		if (p->poll_idle && t >= p->poll_at) {
			p->poll_idle = 0;
			call_queue(p, p->poll);
			continue;
		}
		if (p->nearly > 0)
			early_prune(p, 0);
		until = t + TICK;
		if (p->poll_idle && p->poll_at < until)
			until = p->poll_at;
		struct timespec ts = ts_at(until);
		pthread_cond_timedwait(&p->cv, &p->mu, &ts);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* ---- the caller's side ---- */

/* A call of kind with the encoded m, to the thread: 0 or MEDHA_ENOMEM,
 * or the codec's error, with why. */
static int
call_new(struct medha_pcli *p, int kind, const struct medha_msg *m,
    uint64_t cookie, double timeout, char *why, size_t whylen)
{
	struct call *c;
	void *buf;
	size_t len;
	int rc;

	if ((rc = medha_msg_encode(m, &buf, &len, why, whylen)) != 0)
		return rc;
	pthread_mutex_lock(&p->mu);
	if (p->closing || (c = call_get(p, kind)) == NULL) {
		pthread_mutex_unlock(&p->mu);
		free(buf);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	c->req = buf;
	c->len = len;
	c->cookie = cookie;
	c->timeout = timeout;
	if (kind == K_SUBMIT)
		p->nsubmit++;
	call_queue(p, c);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

static void
cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

int
medha_pcli_open(struct medha_pcli **pp, const char *url,
    void (*notify)(void *), void *arg, char *why, size_t whylen)
{
	struct medha_msg poll = {.type = MEDHA_MSG_POLL};
	struct medha_pcli *p;
	int rc;

	*pp = NULL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = medha_cli_open(&p->cli, url, 1, why, whylen)) != 0) {
		free(p);
		return rc;
	}
	p->notify = notify;
	p->arg = arg;
	pthread_mutex_init(&p->mu, NULL);
	cond_init_mono(&p->cv);
	cond_init_mono(&p->tcv);
	p->known_epoch = medha_cli_epoch(p->cli);
	pthread_mutex_lock(&p->mu);
	if ((p->poll = call_get(p, K_POLL)) == NULL ||
	    medha_msg_encode(&poll, &p->poll->req, &p->poll->len, why,
	        whylen) != 0) {
		pthread_mutex_unlock(&p->mu);
		medha_pcli_close(p);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	p->poll->timeout = DEAD;
	call_queue(p, p->poll);
	pthread_mutex_unlock(&p->mu);
	if (pthread_create(&p->thr, NULL, thread_main, p) != 0) {
		medha_pcli_close(p);
		return medha_why(why, whylen, MEDHA_ENOMEM, "cannot start "
		    "a thread");
	}
	p->started = 1;
	*pp = p;
	return 0;
}

void
medha_pcli_deliver(struct medha_pcli *p, struct medha_msg_event *ev)
{
	int queued;

	pthread_mutex_lock(&p->mu);
	if (p->closing) {
		pthread_mutex_unlock(&p->mu);
		medha_msg_event_clear(ev);
		return;
	}
	queued = p->oq != NULL;
	known_sync(p);
	take_event(p, ev);
	queued = !queued && p->oq != NULL;
	pthread_mutex_unlock(&p->mu);
	if (queued && p->notify != NULL)
		p->notify(p->arg);
}

void
medha_pcli_close(struct medha_pcli *p)
{
	struct medha_pcli_out *o, *next;

	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->closing = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_cond_broadcast(&p->tcv);
	pthread_mutex_unlock(&p->mu);
	if (p->started)
		pthread_join(p->thr, NULL);
	/*
	 * No callback is between deciding to send and sending (closing
	 * stops new ones). Then the answers owed, within QUIET_MAX: nng
	 * 1.5.2 closing a connection while a message comes in can leave
	 * its ipc/tcp pipe's receive posted on a reader already closed
	 * (ipc_pipe_recv_cb reads the body after ipc_pipe_close; the
	 * begin is refused without a word), and nng_close, then every
	 * close in the process (the reaper waits on it), hangs for ever.
	 * A server sends nothing unasked: once every call is answered,
	 * nothing comes in while the socket closes (nor with no
	 * connection: a server down costs close nothing).
	 */
	pthread_mutex_lock(&p->mu);
	while (p->posting > 0)
		pthread_cond_wait(&p->cv, &p->mu);
	double until = medha_now() + QUIET_MAX;
	while (p->owed > 0 && medha_now() < until &&
	    medha_cli_connected(p->cli)) {
		struct timespec ts = ts_at(until);
		pthread_cond_timedwait(&p->cv, &p->mu, &ts);
	}
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nall; i++)
		nng_aio_stop(p->all[i]->aio); /* its callback is over, and
		                                 none starts again */
	medha_cli_abort(p->cli);
	for (int i = 0; i < p->nall; i++) {
		nng_aio_free(p->all[i]->aio);
		free(p->all[i]->req);
		free(p->all[i]->last);
		free(p->all[i]);
	}
	free(p->all);
	for (o = p->oq; o != NULL; o = next) {
		next = o->next;
		medha_pcli_out_clear(o);
		free(o);
	}
	early_prune(p, 1);
	free(p->early);
	medha_map_free(&p->known);
	medha_cli_close(p->cli);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	pthread_cond_destroy(&p->tcv);
	free(p);
}

int
medha_pcli_submit(struct medha_pcli *p, const struct medha_reqspec *rs,
    uint64_t cookie, double timeout, char *why, size_t whylen)
{
	struct medha_msg m = {.type = MEDHA_MSG_SUBMIT};

	MEDHA_ASSERT(cookie != 0);
	m.submit = *rs; /* borrowed */
	return call_new(p, K_SUBMIT, &m, cookie, timeout, why, whylen);
}

/* CANCEL handle (mu held). */
static void
cancel_locked(struct medha_pcli *p, uint64_t handle)
{
	struct medha_msg m = {.type = MEDHA_MSG_CANCEL, .cancel = handle};
	struct call *c;
	char why[128];

	if (p->closing || (c = call_get(p, K_CANCEL)) == NULL)
		return; /* the server cancels it when we go, or it ends */
	if (medha_msg_encode(&m, &c->req, &c->len, why, sizeof(why)) != 0) {
		call_put(p, c);
		return;
	}
	c->timeout = DEAD;
	call_queue(p, c);
}

void
medha_pcli_cancel(struct medha_pcli *p, uint64_t handle)
{
	pthread_mutex_lock(&p->mu);
	cancel_locked(p, handle);
	pthread_mutex_unlock(&p->mu);
}

void
medha_pcli_status(struct medha_pcli *p, double timeout)
{
	struct medha_msg m = {.type = MEDHA_MSG_STATUS};
	char why[128];

	if (call_new(p, K_STATUS, &m, 0, timeout, why, sizeof(why)) != 0)
		medha_log(MEDHA_LOG_ERROR, "STATUS: %s", why);
}

int
medha_pcli_call(struct medha_pcli *p, const struct medha_msg *m,
    uint64_t cookie, double timeout, char *why, size_t whylen)
{
	if (m->type == MEDHA_MSG_SUBMIT || m->type == MEDHA_MSG_POLL)
		return medha_why(why, whylen, MEDHA_EINVAL, "%s: the client's "
		    "own", medha_msg_type_name(m->type));
	return call_new(p, K_CALL, m, cookie, timeout, why, whylen);
}

int
medha_pcli_take(struct medha_pcli *p, double timeout,
    struct medha_pcli_out *o)
{
	double until = medha_now() + timeout;
	struct medha_pcli_out *x;

	memset(o, 0, sizeof(*o));
	pthread_mutex_lock(&p->mu);
	while (p->oq == NULL && !p->closing && timeout > 0) {
		double t = medha_now();
		if (t >= until)
			break;
		struct timespec ts = ts_at(until);
		pthread_cond_timedwait(&p->tcv, &p->mu, &ts);
	}
	if ((x = p->oq) != NULL && (p->oq = x->next) == NULL)
		p->oq_tail = NULL;
	pthread_mutex_unlock(&p->mu);
	if (x == NULL)
		return 0;
	*o = *x;
	o->next = NULL;
	free(x);
	return 1;
}

void
medha_pcli_out_clear(struct medha_pcli_out *o)
{
	medha_msg_clear(&o->msg);
	medha_msg_event_clear(&o->ev);
	memset(o, 0, sizeof(*o));
}

double
medha_pcli_last_ok(struct medha_pcli *p)
{
	double t;

	pthread_mutex_lock(&p->mu);
	t = p->last_ok;
	pthread_mutex_unlock(&p->mu);
	return t;
}

uint64_t
medha_pcli_epoch(struct medha_pcli *p)
{
	return medha_cli_epoch(p->cli);
}

int
medha_pcli_connected(struct medha_pcli *p)
{
	return medha_cli_connected(p->cli);
}

uint64_t
medha_pcli_redials(struct medha_pcli *p)
{
	uint64_t n;

	pthread_mutex_lock(&p->mu);
	n = p->redials;
	pthread_mutex_unlock(&p->mu);
	return n;
}

int64_t
medha_pcli_early(struct medha_pcli *p, int64_t *dropped)
{
	int64_t n;

	pthread_mutex_lock(&p->mu);
	n = p->nearly;
	if (dropped != NULL)
		*dropped = p->dropped;
	pthread_mutex_unlock(&p->mu);
	return n;
}
