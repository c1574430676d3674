/*
 * router.c: medha-router (router.h), the top of serve/router/ (impl.h
 * lists its files in the order they call each other). The main thread
 * serves the clients' socket (serve/front.c's loop) and owns every
 * request and every decision; each replica's client (net/pcli.h)
 * carries the messages to it and back, and wakes the main thread when
 * something came (up.c). Here: the public calls, and what the clients
 * ask (SUBMIT, CANCEL, STATUS) or do (go away), each turned into a
 * request's move (life.c).
 *
 * A client's SUBMIT is answered at once: ERROR if the router is
 * stopping or full, else ACCEPTED with the router's handle (the request
 * is held if no replica is ready), and from then on a record follows
 * whatever happens (a replica's refusal is a "rejected" record),
 * so that a slow or stopped replica never keeps a client waiting for an
 * answer. A request goes to the ready replica with the least predicted
 * work that has the KV memory for it (place.c).
 */
#include "serve/router/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

/* ---- the clients ---- */

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
		free(q->tried);
		free(q);
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	q->state = RQ_NEW; /* born; counted live until it ends (life.c) */
	r->f.live++;
	c->live++;
	q->peer = ev->peer;
	memcpy(q->id, rs->id, sizeof(q->id));
	q->arrival = medha_now() - r->t0;
	q->rep = -1;
	q->spec = *rs; /* taken over */
	memset(rs, 0, sizeof(*rs));
	rc = 0;
	if (r->tok != NULL && q->spec.prompt != NULL &&
	    q->spec.prompt_ids == NULL)
		rc = rt_text_tokenize(r, q, why, sizeof(why));
	if (rc == 0 && q->state == RQ_NEW &&
	    rt_move(r, q, RQ_EV_PLACE, NULL) == RQ_NEW)
		rc = medha_why(why, sizeof(why), MEDHA_ENOSPACE,
		    "no replica is ready");
	if (rc != 0) { /* NEW: no job (rt_text_tokenize pushed none) */
		rt_count_refused(r);
		medha_srv_error(r->f.srv, ev->call, rc, "%s", why);
		rt_move(r, q, RQ_EV_END, &(struct rq_news){.status = -1});
		return;
	}
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

	if (q == NULL || q->peer != peer || q->stop == RQ_STOP_GONE)
		return MEDHA_ENOTFOUND;
	rt_move(r, q, RQ_EV_CANCEL, NULL);
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
		if (q->peer != peer || q->stop == RQ_STOP_GONE)
			continue;
		n++;
		rt_move(r, q, RQ_EV_GONE, NULL); /* ends none */
	}
	return n;
}

/* ---- the main loop ---- */

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
	for (i = 0; i < n; i++)
		rt_move(r, qs[i], RQ_EV_STOP, NULL);
	free(qs);
}

/* Once a pass: the replicas watched (first: an answer is judged by the
 * epoch now), the requests held offered out, the clients that collect
 * nothing let go, the replicas' news taken, the texts tokenized taken
 * back, the gauges counted. */
static void
router_pass(void *arg)
{
	struct medha_router *r = arg;
	double t = medha_now();
	uint32_t deaf;

	rt_watch(r, t);
	rt_release_held(r, t);
	if ((deaf = medha_clients_tick(&r->f.clients, t)) != 0) {
		medha_log(MEDHA_LOG_WARN,
		    "client %u has not collected its events for %d s: "
		    "cancelling its requests", deaf, MEDHA_CLIENT_STALL_S);
		medha_front_gone(&r->f, deaf);
	}
	rt_take_inbox(r);
	rt_text_collect(r);
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
		if ((rc = medha_pcli_open(&u->pc, u->url, rt_wake, srv, why,
		         whylen)) != 0) {
			medha_router_close(r);
			return rc;
		}
	}
	*rp = r;
	return 0;
}

void
medha_router_local(struct medha_router *r,
    void (*deliver)(void *arg, struct medha_msg_event *ev), void *arg)
{
	r->f.clients.local = deliver;
	r->f.clients.local_arg = arg;
}

int
medha_router_listen(struct medha_router *r, const char *url, char *why,
    size_t whylen)
{
	return medha_srv_listen(r->f.srv, url, why, whylen);
}

const struct medha_tok *
medha_router_tok(const struct medha_router *r, const char *model,
    int64_t *ctx_len)
{
	*ctx_len = 0;
	if (r->tok == NULL || model == NULL || strcmp(model, r->cfg.model) != 0)
		return NULL;
	*ctx_len = r->ctx_len;
	return r->tok;
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

void
medha_router_close(struct medha_router *r)
{
	size_t it = 0;
	uint64_t key;
	void *v;

	if (r == NULL)
		return;
	rt_text_close(r);
	for (int i = 0; i < r->nup; i++) {
		struct up *u = &r->up[i];
		medha_pcli_close(u->pc);
		medha_map_free(&u->by_up);
		rt_cache_clear(&u->cache);
	}
	while (medha_map_next(&r->reqs, &it, &key, &v))
		rt_rreq_free(v);
	medha_map_free(&r->reqs);
	free(r->held);
	medha_tok_close(r->tok);
	medha_front_free(&r->f);
	pthread_mutex_destroy(&r->mmu);
	free(r->met.rep);
	free(r->up);
	free(r);
}

