/*
 * front.c: the loop and message dispatch that the replica and the
 * router share (serve/front.h).
 */
#include "serve/front.h"

#include <string.h>

void
medha_front_init(struct medha_front *f, const struct medha_front_ops *ops,
    void *arg, struct medha_srv *srv, double drain_timeout)
{
	memset(f, 0, sizeof(*f));
	f->ops = ops;
	f->arg = arg;
	f->srv = srv;
	f->clients.srv = srv;
	f->drain_timeout = drain_timeout;
}

void
medha_front_gone(struct medha_front *f, uint32_t peer)
{
	struct medha_client *c;
	int n;

	if (f->ops->peer_gone != NULL && f->ops->peer_gone(f->arg, peer))
		return;
	if ((c = medha_clients_find(&f->clients, peer, 0)) == NULL)
		return;
	if (c->live > 0 && (n = f->ops->client_gone(f->arg, peer)) > 0)
		medha_log(MEDHA_LOG_INFO,
		    "client %u went away: %d requests cancelled", peer, n);
	medha_clients_drop(&f->clients, peer);
}

static void
on_status(struct medha_front *f, struct medha_srv_ev *ev)
{
	struct medha_msg m = {.type = MEDHA_MSG_STATUS_REPLY};

	f->ops->status(f->arg, &m.status);
	m.status.ready = m.status.ready && !f->drain.on;
	m.status.pending = f->live;
	medha_srv_msg(f->srv, ev->call, &m);
}

static void
on_call(struct medha_front *f, struct medha_srv_ev *ev)
{
	const char *name = f->ops->name;
	struct medha_msg m;
	char why[256];

	if (medha_msg_decode(&m, ev->data, ev->len, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_WARN, "peer %u: message refused: %s",
		    ev->peer, why);
		medha_srv_error(f->srv, ev->call, MEDHA_EFORMAT, "%s", why);
		return;
	}
	switch (m.type) {
	case MEDHA_MSG_SUBMIT: f->ops->submit(f->arg, ev, &m.submit); break;
	case MEDHA_MSG_POLL:
		medha_clients_poll(&f->clients, ev->peer, ev->call, medha_now());
		break;
	case MEDHA_MSG_CANCEL:
		if (f->ops->cancel(f->arg, ev->peer, m.cancel) != 0)
			medha_srv_error(f->srv, ev->call, MEDHA_ENOTFOUND,
			    "request %llx: not in flight for this client",
			    (unsigned long long)m.cancel);
		else
			medha_srv_msg(f->srv, ev->call,
			    &(struct medha_msg){.type = MEDHA_MSG_OK});
		break;
	case MEDHA_MSG_STATUS: on_status(f, ev); break;
	default:
		if (f->ops->other != NULL && f->ops->other(f->arg, ev, &m) == 0)
			break;
		medha_log(MEDHA_LOG_WARN,
		    "peer %u: message refused: %s is not a request to a %s",
		    ev->peer, medha_msg_type_name(m.type), name);
		medha_srv_error(f->srv, ev->call, MEDHA_EUNSUP,
		    "%s is not a request to a %s", medha_msg_type_name(m.type),
		    name);
	}
	medha_msg_clear(&m);
}

int
medha_front_run(struct medha_front *f, volatile sig_atomic_t *stop)
{
	const int at_once = f->ops->take_at_once > 0 ? f->ops->take_at_once : 1;
	struct medha_srv_ev ev;

	for (;;) {
		int d = medha_drain_step(&f->drain, stop, f->live,
		    f->drain_timeout, &f->clients, medha_now());
		if (d == MEDHA_DRAIN_DONE)
			break;
		if (d == MEDHA_DRAIN_CANCEL)
			f->ops->cancel_all(f->arg);
		if (medha_srv_next(f->srv, 0.1, &ev) != 0)
			return MEDHA_ENOMEM;
		/* every message already here (up to at_once) before the
		   next pass: a replica's requests that come together then
		   share a batch */
		for (int n = 0; ev.kind != MEDHA_SRV_TIMEOUT; n++) {
			if (ev.kind == MEDHA_SRV_GONE)
				medha_front_gone(f, ev.peer);
			else if (ev.kind == MEDHA_SRV_CALL)
				on_call(f, &ev);
			if (n + 1 == at_once ||
			    medha_srv_next(f->srv, 0, &ev) != 0)
				break;
		}
		f->ops->pass(f->arg);
		medha_trim_idle(&f->trim, f->live, f->ops->activity(f->arg),
		    medha_now());
	}
	return 0;
}

void
medha_front_free(struct medha_front *f)
{
	medha_clients_free(&f->clients);
	medha_srv_close(f->srv);
	f->srv = NULL;
}
