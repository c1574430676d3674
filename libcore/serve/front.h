/*
 * front.h: the loop of a server that takes clients' requests and streams
 * their events back (the replica and the router): one socket (net/
 * link.h), the clients' queues and held POLLs (clients.h), the stop that
 * drains, and the dispatch of every message a client may send. SUBMIT,
 * CANCEL and STATUS go to the server's own ops; POLL is the clients'
 * queue's; anything else goes to ops->other (a replica's workers) or is
 * refused with an ERROR that says why. A peer whose connection closes is
 * offered to ops->peer_gone first (a worker), then its requests are
 * cancelled through ops->client_gone.
 *
 *	static const struct medha_front_ops ops = { .name = "router",
 *	    .submit = on_submit, ... };
 *	medha_front_init(&r->f, &ops, r, srv, drain_timeout);
 *	rc = medha_front_run(&r->f, &stop_flag);	(until stopped, drained)
 *	medha_front_free(&r->f);
 */
#ifndef MEDHA_FRONT_H
#define MEDHA_FRONT_H

#include "serve/clients.h"

#include <signal.h>

struct medha_front_ops {
	const char *name; /* "scheduler", "router": in refusals */
	int take_at_once; /* messages already come taken before a pass (1) */
	/* a client's SUBMIT, answered (ACCEPTED or ERROR) by the server,
	   which may take over what rs holds (set to NULL in rs) */
	void (*submit)(void *arg, struct medha_srv_ev *ev,
	    struct medha_reqspec *rs);
	/* peer's CANCEL of request h: 0 (the loop answers OK) or
	   MEDHA_ENOTFOUND (not in flight for this client) */
	int (*cancel)(void *arg, uint32_t peer, uint64_t h);
	/* a STATUS_REPLY's fields (ready: the server's own; the loop
	   clears it while stopping and sets pending) */
	void (*status)(void *arg, struct medha_msg_status *s);
	/* optional: a message that is not a client's; 0 if taken (and
	   answered), MEDHA_EUNSUP to have it refused */
	int (*other)(void *arg, struct medha_srv_ev *ev, struct medha_msg *m);
	/* optional: a closed connection that is not a client's (a
	   worker's): 1 if it was one */
	int (*peer_gone)(void *arg, uint32_t peer);
	/* a client gone: cancel its requests; how many were */
	int (*client_gone)(void *arg, uint32_t peer);
	/* stopping and the drain is over: cancel every live request */
	void (*cancel_all)(void *arg);
	/* once a pass, after the messages (housekeeping) */
	void (*pass)(void *arg);
	/* a count that moves while work is done (medha_trim_idle) */
	int64_t (*activity)(void *arg);
};

struct medha_front {
	const struct medha_front_ops *ops; /* static */
	void *arg;                         /* the server, for ops */
	struct medha_srv *srv;             /* its socket (owned) */
	struct medha_clients clients;
	struct medha_drain drain;
	struct medha_trim trim;
	int64_t live;         /* requests in flight: the server's count */
	double drain_timeout; /* s a stop waits for live requests */
};

/* f over srv (taken over: closed by medha_front_free). */
void medha_front_init(struct medha_front *f, const struct medha_front_ops *ops,
    void *arg, struct medha_srv *srv, double drain_timeout);

/*
 * Serve until *stop becomes non-zero; then refuse new requests, let
 * the live ones end (cancelled after drain_timeout s) and the clients
 * collect their last events. 0, or MEDHA_ENOMEM.
 */
int medha_front_run(struct medha_front *f, volatile sig_atomic_t *stop);

/* The connection of peer closed, or its client stopped reading. */
void medha_front_gone(struct medha_front *f, uint32_t peer);

/* The clients' queues and the socket. */
void medha_front_free(struct medha_front *f);

#endif
