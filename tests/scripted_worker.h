/*
 * scripted_worker.h: the two peers of a live replica (its worker and a
 * client), and a replica for a router, played by a test
 * (tests/replica_test.c, tests/router_test.c), over net/link.h and the
 * messages of net/proto.h (man/medha-proto.7). Header-only, for tests:
 * include it after <cmocka.h>.
 *
 * The worker (struct sw) says HELLO as a sim worker of a built-in model
 * would, then a thread of its own asks for batches (READY) and answers
 * each BATCH at once with a RESULT: for each item that asks for a
 * sample, the sim backend's placeholder medha_backend_sim_token(pos +
 * n_ids, vocab). It checks what it is sent as a real worker would need
 * it: each sequence's positions follow on, the first item of a request
 * carries its sampling parameters, a decode feeds back the token sampled
 * last, nothing comes for a sequence after it was freed. The first
 * thing that is not so is kept in sw.error. While sw.hold is set it
 * keeps the batch it has, so that a test can act while requests are
 * surely in flight.
 *
 * The replica (struct sr, below) plays one for a router
 * (tests/router_test.c): ready, and each request served or refused as
 * it is told.
 *
 * The client (struct cl) is the protocol's client (net/pcli.h), which
 * keeps a POLL outstanding: it submits, cancels and asks for STATUS,
 * each call waiting for its answer, and sorts the events it takes by
 * handle: token ids, token events, the record (taken over), and
 * anything that comes after a record; the events the client dropped
 * (for no request of its) are its strays.
 *
 *	struct sw w;
 *	struct medha_msg_hello h;
 *	sw_hello_default(&h);
 *	assert_int_equal(sw_open(&w, url), 0);
 *	assert_int_equal(sw_hello(&w, &h, &rep), MEDHA_MSG_WELCOME);
 *	sw_start(&w);
 *	...
 *	sw_stop(&w);
 */
#ifndef MEDHA_SCRIPTED_WORKER_H
#define MEDHA_SCRIPTED_WORKER_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend_sim.h"
#include "model/model.h"
#include "net/link.h"
#include "net/pcli.h"
#include "net/proto.h"
#include "req.h"
#include "serve/front.h"

#define SW_REQS 64     /* requests a worker or a client follows */
#define SW_PROMPT 256  /* prompt ids a worker keeps per request */
#define SW_OUT 4096    /* output ids a client keeps per request */
#define SW_TIMEOUT 5.0 /* s: any one call */

static double
sw_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
sw_sleep(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	nanosleep(&ts, NULL);
}

/* ---- the worker ---- */

/* One request as the worker sees it. */
struct sw_req {
	uint64_t handle;
	int32_t prompt[SW_PROMPT]; /* its prefill ids (the first SW_PROMPT) */
	int64_t n_prompt;          /* prefill ids seen */
	int64_t chunks;            /* prefill items */
	int64_t next;              /* the position its next item must have */
	int sampled;               /* its last item asked for a sample */
	int32_t last;              /* the token answered then */
	int64_t decodes;           /* decode items */
	int freed;                 /* in a free list */
	int restarts;              /* begun again at 0 after its free (a
	                              request recomputed) */
};

struct sw {
	struct medha_cli *cli;
	int worker_id;
	int vocab;
	pthread_t thr;
	int running;
	atomic_int quit;
	atomic_int hold;    /* while set, a BATCH waits for its answer (keep
	                       it under MEDHA_PROTO_DEAD_MS: no heartbeats) */
	atomic_int bad_token; /* non-zero: the next sampled token is this
	                         one instead (a worker gone wrong) */
	atomic_int drop;      /* n > 0: the n-th BATCH from now is run and
	                         its RESULT dropped: READY instead (a
	                         worker that started over) */
	pthread_mutex_t mu; /* guards what follows */
	struct sw_req req[SW_REQS];
	int nreq;
	int64_t batches, idles, tokens;
	char error[512]; /* the first inconsistency, or "" */
};

/* A HELLO of a sim worker of llama3-8b on an a100, rank 0 of 1, with
 * 10000 KV blocks of 16 and 64 sequences. */
static void
sw_hello_default(struct medha_msg_hello *h)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->backend, sizeof(h->backend), "sim");
	snprintf(h->model, sizeof(h->model), "llama3-8b");
	snprintf(h->gpu, sizeof(h->gpu), "a100");
	h->tp = h->spp = h->kvp = 1;
	h->layer_lo = 0;
	h->layer_hi = 32;
	h->block_size = 16;
	h->n_blocks = 10000;
	h->max_seqs = 64;
	h->vocab = 128256;
	h->dim = 4096;
	h->pid = (int)getpid();
	/* the fingerprint a sim worker of llama3-8b says */
	medha_model_fingerprint("llama3-8b", h->fingerprint, NULL, 0);
}

static int
sw_open(struct sw *w, const char *url)
{
	char why[256];

	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->mu, NULL);
	return medha_cli_open(&w->cli, url, 1, why, sizeof(why));
}

/* Say h; returns the answer's type (rep: the caller's to clear), or
 * the call's error. */
static int
sw_hello(struct sw *w, const struct medha_msg_hello *h, struct medha_msg *rep)
{
	struct medha_msg m = {.type = MEDHA_MSG_HELLO};
	char why[256];
	int rc;

	m.hello = *h;
	if ((rc = medha_cli_msg(w->cli, 0, &m, rep, SW_TIMEOUT, why,
	         sizeof(why))) != 0)
		return rc;
	if (rep->type == MEDHA_MSG_WELCOME) {
		w->worker_id = rep->worker_id;
		w->vocab = h->vocab;
	}
	return rep->type;
}

static void sw_fail(struct sw *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sw_fail(struct sw *w, const char *fmt, ...)
{
	va_list ap;

	if (w->error[0] != '\0')
		return;
	va_start(ap, fmt);
	vsnprintf(w->error, sizeof(w->error), fmt, ap);
	va_end(ap);
}

/* The request of handle h (made with make), or NULL. Under mu. */
static struct sw_req *
sw_req_of(struct sw *w, uint64_t h, int make)
{
	for (int i = 0; i < w->nreq; i++)
		if (w->req[i].handle == h)
			return &w->req[i];
	if (!make || w->nreq == SW_REQS)
		return NULL;
	memset(&w->req[w->nreq], 0, sizeof(w->req[0]));
	w->req[w->nreq].handle = h;
	return &w->req[w->nreq++];
}

static void
sw_frees(struct sw *w, const struct medha_msg_batch *b)
{
	for (int64_t i = 0; i < b->n_frees; i++) {
		struct sw_req *q = sw_req_of(w, b->frees[i], 0);
		if (q == NULL)
			sw_fail(w, "free of %llx, which it never ran",
			    (unsigned long long)b->frees[i]);
		else if (q->freed)
			sw_fail(w, "%llx freed twice",
			    (unsigned long long)b->frees[i]);
		else
			q->freed = 1;
	}
}

/* A BATCH's items checked and answered into tok; how many tokens. */
static int64_t
sw_run(struct sw *w, const struct medha_msg_batch *b,
    struct medha_msg_token *tok)
{
	int64_t n = 0;

	for (int64_t i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];
		struct sw_req *q = sw_req_of(w, it->handle, 1);

		if (q == NULL) {
			sw_fail(w, "more than %d requests", SW_REQS);
			continue;
		}
		if (q->freed && it->pos == 0 && it->has_params) {
			/* its sequence begun again under the same name */
			int restarts = q->restarts + 1;
			memset(q, 0, sizeof(*q));
			q->handle = it->handle;
			q->restarts = restarts;
		}
		if (q->freed)
			sw_fail(w, "item of %llx after its free",
			    (unsigned long long)it->handle);
		if (it->pos != q->next)
			sw_fail(w, "item of %llx at %lld, expected %lld",
			    (unsigned long long)it->handle, (long long)it->pos,
			    (long long)q->next);
		if (!it->has_params != (it->pos != 0))
			sw_fail(w, "item of %llx at %lld: params %d",
			    (unsigned long long)it->handle, (long long)it->pos,
			    it->has_params);
		if (q->sampled) { /* a decode: the token answered last */
			if (it->n_ids != 1 || it->ids[0] != q->last)
				sw_fail(w,
				    "decode of %llx: %lld ids, [0] "
				    "%d, the last token was %d",
				    (unsigned long long)it->handle,
				    (long long)it->n_ids, it->ids[0], q->last);
			q->decodes++;
		} else {
			for (int64_t k = 0; k < it->n_ids; k++)
				if (q->n_prompt + k < SW_PROMPT)
					q->prompt[q->n_prompt + k] = it->ids[k];
			q->n_prompt += it->n_ids;
			q->chunks++;
		}
		q->next = it->pos + it->n_ids;
		q->sampled = it->sample;
		if (it->sample) {
			tok[n].handle = it->handle;
			tok[n].token =
			    medha_backend_sim_token(q->next, w->vocab);
			int bad = atomic_exchange(&w->bad_token, 0);
			if (bad != 0)
				tok[n].token = bad;
			q->last = tok[n].token;
			n++;
		}
	}
	return n;
}

static void *
sw_main(void *arg)
{
	struct sw *w = arg;
	struct medha_msg m = {.type = MEDHA_MSG_READY}, rep;
	struct medha_msg_token *tok =
	    calloc(MEDHA_PROTO_MAX_ITEMS, sizeof(*tok));
	char why[256];

	m.worker_id = w->worker_id;
	while (!atomic_load(&w->quit) && tok != NULL) {
		int rc = medha_cli_msg(w->cli, 0, &m, &rep, SW_TIMEOUT, why,
		    sizeof(why));
		if (rc != 0) {
			if (!atomic_load(&w->quit)) {
				pthread_mutex_lock(&w->mu);
				sw_fail(w, "call: %s", why);
				pthread_mutex_unlock(&w->mu);
			}
			break;
		}
		pthread_mutex_lock(&w->mu);
		if (rep.type == MEDHA_MSG_IDLE) {
			sw_frees(w, &rep.batch);
			w->idles++;
			m = (struct medha_msg){.type = MEDHA_MSG_READY,
			    .worker_id = w->worker_id};
		} else if (rep.type == MEDHA_MSG_BATCH) {
			pthread_mutex_unlock(&w->mu);
			while (atomic_load(&w->hold) && !atomic_load(&w->quit))
				sw_sleep(0.002);
			pthread_mutex_lock(&w->mu);
			sw_frees(w, &rep.batch); /* before the items */
			m = (struct medha_msg){.type = MEDHA_MSG_RESULT};
			m.result.worker_id = w->worker_id;
			m.result.seq = rep.batch.seq;
			m.result.tokens = tok;
			m.result.n_tokens = sw_run(w, &rep.batch, tok);
			w->batches++;
			w->tokens += m.result.n_tokens;
			int d = atomic_load(&w->drop);
			if (d > 0 && atomic_fetch_sub(&w->drop, 1) == 1)
				m = (struct medha_msg){.type = MEDHA_MSG_READY,
				    .worker_id = w->worker_id};
		} else {
			sw_fail(w, "answered %s (%s)",
			    medha_msg_type_name(rep.type),
			    rep.type == MEDHA_MSG_ERROR ? rep.error.reason
			                                : "");
			pthread_mutex_unlock(&w->mu);
			medha_msg_clear(&rep);
			break;
		}
		pthread_mutex_unlock(&w->mu);
		medha_msg_clear(&rep);
	}
	free(tok);
	return NULL;
}

/* The worker saw nothing amiss (a cmocka failure otherwise). */
static void
sw_assert_ok(struct sw *w)
{
	char e[sizeof(w->error)];

	pthread_mutex_lock(&w->mu);
	memcpy(e, w->error, sizeof(e));
	pthread_mutex_unlock(&w->mu);
	if (e[0] != '\0')
		fail_msg("worker: %s", e);
}

static void
sw_start(struct sw *w)
{
	assert_int_equal(pthread_create(&w->thr, NULL, sw_main, w), 0);
	w->running = 1;
}

/* Stop the thread (its call in progress ends) and close. */
static void
sw_stop(struct sw *w)
{
	atomic_store(&w->quit, 1);
	if (w->cli != NULL)
		medha_cli_abort(w->cli);
	if (w->running)
		pthread_join(w->thr, NULL);
	w->running = 0;
	medha_cli_close(w->cli);
	w->cli = NULL;
	pthread_mutex_destroy(&w->mu);
}

/* A copy of what the worker saw of handle h (0 if it saw nothing). */
static int
sw_seen(struct sw *w, uint64_t h, struct sw_req *out)
{
	struct sw_req *q;

	pthread_mutex_lock(&w->mu);
	q = sw_req_of(w, h, 0);
	if (q != NULL)
		*out = *q;
	pthread_mutex_unlock(&w->mu);
	return q != NULL;
}

/* Wait up to timeout s for the worker to have freed h: 1, or 0. */
static int
sw_wait_freed(struct sw *w, uint64_t h, double timeout)
{
	double until = sw_now() + timeout;
	struct sw_req q;

	do {
		if (sw_seen(w, h, &q) && q.freed)
			return 1;
		sw_sleep(0.01);
	} while (sw_now() < until);
	return 0;
}

/* ---- the client ---- */

/* One request as the client sees it. */
struct cl_req {
	uint64_t handle;
	int32_t ids[SW_OUT]; /* ids of its token events (the first SW_OUT) */
	int64_t n_ids;
	int token_events;
	int records;
	int after_record;        /* events after its record */
	struct medha_record rec; /* owned, once records > 0 */
};

struct cl {
	struct medha_pcli *pc;
	struct cl_req req[SW_REQS];
	int nreq;
	int64_t strays; /* events for handles it does not follow */
	int64_t dropped; /* of those, the client's drops counted */
	uint64_t cookie; /* the last call's */
};

static int
cl_open(struct cl *c, const char *url)
{
	char why[256];

	memset(c, 0, sizeof(*c));
	return medha_pcli_open(&c->pc, url, NULL, NULL, why, sizeof(why));
}

static void
cl_close(struct cl *c)
{
	for (int i = 0; i < c->nreq; i++)
		medha_record_clear(&c->req[i].rec);
	medha_pcli_close(c->pc);
	c->pc = NULL;
}

static struct cl_req *
cl_req_of(struct cl *c, uint64_t h)
{
	for (int i = 0; i < c->nreq; i++)
		if (c->req[i].handle == h)
			return &c->req[i];
	return NULL;
}

/* An event for the request it names (taken over where kept). */
static void
cl_sort(struct cl *c, struct medha_msg_event *ev)
{
	struct cl_req *q = cl_req_of(c, ev->handle);

	if (q == NULL) {
		c->strays++;
		return;
	}
	if (q->records > 0)
		q->after_record++;
	if (ev->kind == MEDHA_EVENT_TOKENS) {
		q->token_events++;
		for (int64_t k = 0; k < ev->n_ids; k++)
			if (q->n_ids + k < SW_OUT)
				q->ids[q->n_ids + k] = ev->ids[k];
		q->n_ids += ev->n_ids;
	} else if (ev->kind == MEDHA_EVENT_RECORD) {
		if (q->records++ == 0) { /* taken over */
			q->rec = *ev->record;
			memset(ev->record, 0, sizeof(*ev->record));
		}
	}
}

/*
 * What the client brings, within timeout s, until the answer of kind to
 * call cookie (into *o, the caller's); the events meanwhile sorted. 0,
 * or MEDHA_ETIMEOUT.
 */
static int
cl_until(struct cl *c, int kind, uint64_t cookie, struct medha_pcli_out *o,
    double timeout)
{
	double until = sw_now() + timeout;

	while (sw_now() < until) {
		if (!medha_pcli_take(c->pc, 0.05, o))
			continue;
		if (o->kind == MEDHA_PCLI_EVENT)
			cl_sort(c, &o->ev);
		else if ((o->kind == kind ||
		             (kind == MEDHA_PCLI_ACCEPTED &&
		                 o->kind == MEDHA_PCLI_REFUSED)) &&
		    o->cookie == cookie)
			return 0;
		medha_pcli_out_clear(o);
	}
	return MEDHA_ETIMEOUT;
}

/* A call of m (not SUBMIT or POLL): the answer's type (rep: the
 * caller's), or the call's error. */
static int
cl_call(struct cl *c, const struct medha_msg *m, struct medha_msg *rep)
{
	struct medha_pcli_out o;
	char why[256];
	int rc;

	if ((rc = medha_pcli_call(c->pc, m, ++c->cookie, SW_TIMEOUT, why,
	         sizeof(why))) != 0 ||
	    (rc = cl_until(c, MEDHA_PCLI_ANSWER, c->cookie, &o,
	         SW_TIMEOUT + 1)) != 0)
		return rc;
	if ((rc = o.rc) == 0) {
		*rep = o.msg;
		memset(&o.msg, 0, sizeof(o.msg));
		rc = rep->type;
	}
	medha_pcli_out_clear(&o);
	return rc;
}

/*
 * SUBMIT rs (borrowed). On ACCEPTED, *h is its handle and the client
 * follows it; returns the answer's type, with an ERROR's code in *code.
 */
static int
cl_submit(struct cl *c, const struct medha_reqspec *rs, uint64_t *h, int *code)
{
	struct medha_pcli_out o;
	char why[256];
	int t;

	*h = 0;
	*code = 0;
	if ((t = medha_pcli_submit(c->pc, rs, ++c->cookie, SW_TIMEOUT, why,
	         sizeof(why))) != 0 ||
	    (t = cl_until(c, MEDHA_PCLI_ACCEPTED, c->cookie, &o,
	         SW_TIMEOUT + 1)) != 0)
		return t;
	if (o.kind == MEDHA_PCLI_ACCEPTED) {
		t = MEDHA_MSG_ACCEPTED;
		assert_string_equal(o.msg.accepted.id, rs->id);
		*h = o.handle;
		assert_null(cl_req_of(c, *h)); /* handles are unique */
		assert_true(c->nreq < SW_REQS);
		memset(&c->req[c->nreq], 0, sizeof(c->req[0]));
		c->req[c->nreq++].handle = *h;
	} else if ((t = o.rc) == 0) {
		t = o.msg.type;
		if (t == MEDHA_MSG_ERROR)
			*code = o.msg.error.code;
	}
	medha_pcli_out_clear(&o);
	return t;
}

/* A reqspec of a made-up prompt of prompt tokens, greedy. */
static struct medha_reqspec
cl_spec(const char *id, int64_t prompt, int64_t max_tokens)
{
	struct medha_reqspec rs;

	memset(&rs, 0, sizeof(rs));
	snprintf(rs.id, sizeof(rs.id), "%s", id);
	rs.prompt_tokens = prompt;
	rs.max_tokens = max_tokens;
	rs.sampling = medha_sampling_greedy;
	return rs;
}

/* CANCEL h: the answer's type, an ERROR's code in *code. */
static int
cl_cancel(struct cl *c, uint64_t h, int *code)
{
	struct medha_msg m = {.type = MEDHA_MSG_CANCEL, .cancel = h}, rep;
	int t;

	*code = 0;
	if ((t = cl_call(c, &m, &rep)) < 0)
		return t;
	if (t == MEDHA_MSG_ERROR)
		*code = rep.error.code;
	medha_msg_clear(&rep);
	return t;
}

/* STATUS into *st: 0, or the call's error, or -1 for another answer. */
static int
cl_status(struct cl *c, struct medha_msg_status *st)
{
	struct medha_msg m = {.type = MEDHA_MSG_STATUS}, rep;
	int t;

	if ((t = cl_call(c, &m, &rep)) < 0)
		return t;
	if (t == MEDHA_MSG_STATUS_REPLY)
		*st = rep.status;
	medha_msg_clear(&rep);
	return t == MEDHA_MSG_STATUS_REPLY ? 0 : -1;
}

/* The events the client has (waiting up to a second for the first),
 * sorted: 0, or MEDHA_ETIMEOUT when none came. */
static int
cl_poll(struct cl *c)
{
	struct medha_pcli_out o;
	int64_t dropped;
	int n = 0;

	while (medha_pcli_take(c->pc, n == 0 ? 1 : 0, &o)) {
		n++;
		if (o.kind == MEDHA_PCLI_EVENT)
			cl_sort(c, &o.ev);
		medha_pcli_out_clear(&o);
	}
	medha_pcli_early(c->pc, &dropped);
	c->strays += dropped - c->dropped;
	c->dropped = dropped;
	return n > 0 ? 0 : MEDHA_ETIMEOUT;
}

/* Poll until h has its record (or timeout s): it, or NULL. */
static struct cl_req *
cl_wait_record(struct cl *c, uint64_t h, double timeout)
{
	double until = sw_now() + timeout;
	struct cl_req *q = cl_req_of(c, h);

	assert_non_null(q);
	while (q->records == 0 && sw_now() < until)
		if (cl_poll(c) != 0)
			sw_sleep(0.01);
	return q->records > 0 ? q : NULL;
}

/* Poll until h has at least n output ids (or timeout s): 1, or 0. */
static int
cl_wait_ids(struct cl *c, uint64_t h, int64_t n, double timeout)
{
	double until = sw_now() + timeout;
	struct cl_req *q = cl_req_of(c, h);

	assert_non_null(q);
	while (q->n_ids < n && q->records == 0 && sw_now() < until)
		if (cl_poll(c) != 0)
			sw_sleep(0.01);
	return q->n_ids >= n;
}

/* ---- the replica (a router's) ---- */

/*
 * A replica played for a router (struct sr), on the servers' shared
 * loop (serve/front.h): STATUS says ready, one worker of one, 10000 KV
 * blocks of 16 and sr.work s of predicted work (the router sends a
 * request to the least), and each SUBMIT is ACCEPTED, then at once
 * followed as sr.act says: SR_SERVE, max_tokens token events (the sim
 * backend's placeholders, one a token) and an "ok" record; SR_REFUSE, a
 * "rejected" record of sr.code and sr.reason and no token (as a live
 * replica refuses a long text it acknowledged before tokenizing it);
 * SR_TOKEN_REFUSE, one token, then that record. Its requests end as
 * they come, so a CANCEL finds none. Set work, act, code and reason
 * while no SUBMIT is on its way. It serves until the test ends (no
 * stop: see tests/router_test.c's test_rejected_after_accepted).
 *
 *	static struct sr a = {.act = SR_REFUSE, .code = MEDHA_ENOSPACE};
 *	assert_int_equal(sr_start(&a, url), 0);
 *	... a.submits ...
 */
enum { SR_SERVE, SR_REFUSE, SR_TOKEN_REFUSE };

struct sr {
	struct medha_front f;
	pthread_t thr;
	volatile sig_atomic_t stop; /* never set */
	double work;
	int act, code;
	char reason[128];
	atomic_int submits; /* SUBMITs taken */
	uint64_t next;      /* handles given */
};

/* A prompt's tokens as the scripted replica counts them: the ids or
 * tokens given, else a token for every 4 bytes of text. */
static int64_t
sr_prompt_tokens(const struct medha_reqspec *rs)
{
	if (rs->prompt_tokens > 0 || rs->prompt == NULL)
		return rs->prompt_tokens;
	return (int64_t)strlen(rs->prompt) / 4 + 1;
}

static void
sr_submit(void *arg, struct medha_srv_ev *ev, struct medha_reqspec *rs)
{
	struct sr *s = arg;
	struct medha_msg m = {.type = MEDHA_MSG_ACCEPTED};
	struct medha_msg_event e;
	struct medha_record *rec = calloc(1, sizeof(*rec));
	int64_t n = s->act == SR_SERVE ? rs->max_tokens
	                               : s->act == SR_TOKEN_REFUSE,
	        np = sr_prompt_tokens(rs);
	uint64_t h = ++s->next;

	atomic_fetch_add(&s->submits, 1);
	if (rec == NULL ||
	    medha_clients_find(&s->f.clients, ev->peer, 1) == NULL ||
	    (rec->token_ids = calloc((size_t)n + 1, sizeof(int32_t))) ==
	        NULL) {
		free(rec);
		medha_srv_error(s->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	memcpy(m.accepted.id, rs->id, sizeof(m.accepted.id));
	m.accepted.handle = h;
	medha_srv_msg(s->f.srv, ev->call, &m);
	for (int64_t i = 0; i < n; i++) {
		e = (struct medha_msg_event){.kind = MEDHA_EVENT_TOKENS,
		    .handle = h, .n_ids = 1};
		rec->token_ids[i] = medha_backend_sim_token(np + i, 128256);
		if ((e.ids = malloc(sizeof(*e.ids))) == NULL)
			break;
		e.ids[0] = rec->token_ids[i];
		medha_clients_push(&s->f.clients, ev->peer, &e);
	}
	memcpy(rec->id, rs->id, sizeof(rec->id));
	rec->arrival = rec->first_token = rec->finish = sw_now();
	rec->prompt_tokens = np;
	rec->output_tokens = rec->n_token_ids = n;
	rec->text = strdup("");
	if (s->act == SR_SERVE) {
		rec->status = MEDHA_STATUS_OK;
		rec->finish_reason = MEDHA_FINISH_LENGTH;
	} else {
		rec->status = MEDHA_STATUS_REJECTED;
		rec->code = s->code;
		snprintf(rec->reason, sizeof(rec->reason), "%s", s->reason);
	}
	e = (struct medha_msg_event){.kind = MEDHA_EVENT_RECORD, .handle = h,
	    .record = rec};
	medha_clients_push(&s->f.clients, ev->peer, &e);
}

static int
sr_cancel(void *arg, uint32_t peer, uint64_t h)
{
	(void)arg, (void)peer, (void)h;
	return MEDHA_ENOTFOUND; /* each ended as it came */
}

static void
sr_status(void *arg, struct medha_msg_status *st)
{
	const struct sr *s = arg;

	st->ready = 1;
	st->workers = st->workers_wanted = 1;
	st->kv_blocks = 10000;
	st->block_size = 16;
	st->work = s->work;
	snprintf(st->model, sizeof(st->model), "llama3-8b");
	snprintf(st->backend, sizeof(st->backend), "sim");
}

static int
sr_client_gone(void *arg, uint32_t peer)
{
	(void)arg, (void)peer;
	return 0;
}

static void
sr_cancel_all(void *arg)
{
	(void)arg;
}

static void
sr_pass(void *arg)
{
	struct sr *s = arg;

	medha_clients_tick(&s->f.clients, medha_now()); /* keep-alives */
}

static int64_t
sr_activity(void *arg)
{
	return (int64_t)((struct sr *)arg)->next;
}

static const struct medha_front_ops sr_ops = {
    .name = "scripted replica",
    .take_at_once = 1,
    .submit = sr_submit,
    .cancel = sr_cancel,
    .status = sr_status,
    .client_gone = sr_client_gone,
    .cancel_all = sr_cancel_all,
    .pass = sr_pass,
    .activity = sr_activity,
};

static void *
sr_main(void *arg)
{
	struct sr *s = arg;

	medha_front_run(&s->f, &s->stop);
	return NULL;
}

/* Listen at url and serve in a thread of its own: 0, or -1. (unused:
 * replica_test has no replica to play) */
__attribute__((unused)) static int
sr_start(struct sr *s, const char *url)
{
	struct medha_srv *srv;
	char why[256];

	if (medha_srv_open(&srv, url, why, sizeof(why)) != 0) {
		print_error("scripted replica: %s\n", why);
		return -1;
	}
	medha_front_init(&s->f, &sr_ops, s, srv, 1);
	if (pthread_create(&s->thr, NULL, sr_main, s) != 0) {
		medha_front_free(&s->f);
		return -1;
	}
	return 0;
}

/* A temporary directory for sockets (TMPDIR, else /tmp) into dir. */
static void
sw_tmpdir(char *dir, size_t len, const char *name)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, len, "%s/medha-%s-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp", name);
	assert_non_null(mkdtemp(dir));
}

#endif
