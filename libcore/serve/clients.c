/* clients.c: the clients' event queues and held polls (clients.h). */
#include "serve/clients.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct medha_client *
medha_clients_find(struct medha_clients *cs, uint32_t peer, int make)
{
	struct medha_client *c = medha_map_get(&cs->by_peer, peer);

	if (c != NULL || !make || peer == 0)
		return c;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->peer = peer;
	c->polled = medha_now();
	if (medha_map_put(&cs->by_peer, peer, c) != 0) {
		free(c);
		return NULL;
	}
	return c;
}

/* Answer c's held POLL with its queued events (or none). */
static void
flush(struct medha_clients *cs, struct medha_client *c)
{
	struct medha_msg m = {.type = MEDHA_MSG_EVENTS};
	int64_t n =
	    c->nq < MEDHA_PROTO_MAX_EVENTS ? c->nq : MEDHA_PROTO_MAX_EVENTS;

	if (c->poll == NULL)
		return;
	m.events.ev = c->q;
	m.events.n = n;
	medha_srv_msg(cs->srv, c->poll, &m);
	c->poll = NULL;
	for (int64_t i = 0; i < n; i++)
		medha_msg_event_clear(&c->q[i]);
	if (c->nq > n)
		memmove(c->q, c->q + n, (size_t)(c->nq - n) * sizeof(*c->q));
	else if (n > 0)
		cs->queued--;
	c->nq -= n;
}

int
medha_clients_poll(struct medha_clients *cs, uint32_t peer,
    struct medha_srv_call *call, double now)
{
	struct medha_client *c = medha_clients_find(cs, peer, 1);

	if (c == NULL) {
		medha_srv_error(cs->srv, call, MEDHA_ENOMEM, "out of memory");
		return MEDHA_ENOMEM;
	}
	if (c->poll != NULL) /* one poll at a time: the old one ends */
		flush(cs, c);
	c->poll = call;
	c->poll_since = c->polled = now;
	if (c->nq > 0)
		flush(cs, c);
	return 0;
}

void
medha_clients_push(struct medha_clients *cs, uint32_t peer,
    struct medha_msg_event *ev)
{
	struct medha_client *c;

	if (cs->local != NULL && medha_srv_peer_local(cs->srv, peer)) {
		cs->local(cs->local_arg, ev);
		return;
	}
	c = medha_clients_find(cs, peer, 0);
	if (c == NULL || c->nq >= MEDHA_CLIENT_MAX_EVENTS) {
		if (c != NULL)
			medha_log(MEDHA_LOG_WARN,
			    "client %u: %lld events not collected; dropping",
			    peer, (long long)c->nq);
		medha_msg_event_clear(ev);
		return;
	}
	if (c->nq == c->qcap) {
		int64_t ncap = c->qcap ? 2 * c->qcap : 64;
		void *n = medha_reallocarray(c->q, (size_t)ncap, sizeof(*ev));
		if (n == NULL) {
			medha_log(MEDHA_LOG_ERROR, "out of memory: event lost");
			medha_msg_event_clear(ev);
			return;
		}
		c->q = n;
		c->qcap = ncap;
	}
	if (c->nq == 0)
		cs->queued++;
	c->q[c->nq++] = *ev;
	memset(ev, 0, sizeof(*ev));
	if (!cs->hold) {
		flush(cs, c);
		return;
	}
	if (c->held)
		return;
	if (cs->nheld == cs->held_cap) {
		int64_t ncap = cs->held_cap ? 2 * cs->held_cap : 16;
		void *n = medha_reallocarray(cs->held, (size_t)ncap,
		    sizeof(*cs->held));
		if (n == NULL) { /* no room to remember it: send now */
			flush(cs, c);
			return;
		}
		cs->held = n;
		cs->held_cap = ncap;
	}
	cs->held[cs->nheld++] = peer;
	c->held = 1;
}

void
medha_clients_hold(struct medha_clients *cs)
{
	cs->hold = 1;
}

void
medha_clients_release(struct medha_clients *cs)
{
	cs->hold = 0;
	for (int64_t i = 0; i < cs->nheld; i++) {
		struct medha_client *c =
		    medha_clients_find(cs, cs->held[i], 0);
		if (c != NULL) { /* (gone meanwhile: dropped with its queue) */
			c->held = 0;
			flush(cs, c);
		}
	}
	cs->nheld = 0;
}

uint32_t
medha_clients_tick(struct medha_clients *cs, double now)
{
	uint32_t stalled = 0;
	size_t it = 0;
	uint64_t key;
	void *v;

	while (medha_map_next(&cs->by_peer, &it, &key, &v)) {
		struct medha_client *c = v;
		if (c->poll != NULL &&
		    now - c->poll_since >= MEDHA_PROTO_HEARTBEAT_MS / 1e3)
			flush(cs, c);
		if (c->poll == NULL && c->nq > 0 && stalled == 0 &&
		    (now - c->polled > MEDHA_CLIENT_STALL_S ||
		        c->nq >= MEDHA_CLIENT_MAX_EVENTS))
			stalled = c->peer;
	}
	return stalled;
}

static void
client_free(struct medha_clients *cs, struct medha_client *c)
{
	for (int64_t i = 0; i < c->nq; i++)
		medha_msg_event_clear(&c->q[i]);
	if (c->nq > 0)
		cs->queued--;
	free(c->q);
	if (c->poll != NULL)
		medha_srv_drop(cs->srv, c->poll);
	free(c);
}

void
medha_clients_drop(struct medha_clients *cs, uint32_t peer)
{
	struct medha_client *c = medha_map_del(&cs->by_peer, peer);

	if (c != NULL)
		client_free(cs, c);
}

int64_t
medha_clients_pending(const struct medha_clients *cs)
{
	return cs->queued;
}

void
medha_clients_free(struct medha_clients *cs)
{
	size_t it = 0;
	uint64_t key;
	void *v;

	while (medha_map_next(&cs->by_peer, &it, &key, &v))
		client_free(cs, v);
	medha_map_free(&cs->by_peer);
	free(cs->held);
	cs->held = NULL;
	cs->nheld = cs->held_cap = 0;
}

int
medha_drain_step(struct medha_drain *d, volatile sig_atomic_t *stop,
    int64_t live, double timeout, const struct medha_clients *cs, double now)
{
	if (*stop && !d->on) {
		d->on = 1;
		d->until = now + timeout;
		medha_log(MEDHA_LOG_INFO,
		    "stopping: %lld requests in flight, waiting up to %.0f s",
		    (long long)live, timeout);
	}
	if (!d->on)
		return MEDHA_DRAIN_RUN;
	if (live > 0)
		return now >= d->until ? MEDHA_DRAIN_CANCEL : MEDHA_DRAIN_RUN;
	if (d->linger == 0)
		d->linger = now + 2 * MEDHA_PROTO_HEARTBEAT_MS / 1e3;
	return medha_clients_pending(cs) == 0 || now >= d->linger
	    ? MEDHA_DRAIN_DONE
	    : MEDHA_DRAIN_RUN;
}
