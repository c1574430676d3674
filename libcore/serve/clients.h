/*
 * clients.h: the clients of a server that streams events (medha-sched
 * and medha-router): each connection's queue of token and record events
 * not yet collected, and its POLL held until there are some. A client
 * is known by its connection (the nng pipe id its requests come on).
 *
 *	struct medha_clients cs = {.srv = srv};
 *	on POLL:	medha_clients_poll(&cs, ev->peer, ev->call, now);
 *	to send:	medha_clients_push(&cs, peer, &event);
 *	each pass:	medha_clients_tick(&cs, now);	(keep-alives)
 *	to send later:	medha_clients_hold(&cs); ... pushes ...
 *			medha_clients_release(&cs);
 *	peer gone:	medha_clients_drop(&cs, peer);
 *	medha_clients_free(&cs);
 */
#ifndef MEDHA_CLIENTS_H
#define MEDHA_CLIENTS_H

#include "map.h"
#include "net/link.h"
#include "net/proto.h"

#include <signal.h>
#include <stdint.h>

/* Events queued for one client before it counts as not reading. */
#define MEDHA_CLIENT_MAX_EVENTS (1 << 20)
/* Seconds a client may leave events uncollected (no POLL) before it
 * counts as not reading. */
#define MEDHA_CLIENT_STALL_S 30

struct medha_client {
	uint32_t peer;
	struct medha_msg_event *q; /* (nq) events not yet polled */
	int64_t nq, qcap;
	struct medha_srv_call *poll; /* its held POLL, or NULL */
	double poll_since;
	double polled; /* when it last polled (or appeared) */
	int64_t live; /* its requests in flight (the caller's count) */
	int held;     /* in its server's list of clients to flush */
};

struct medha_clients {
	struct medha_srv *srv; /* set by the caller */
	struct medha_map by_peer;
	int64_t queued; /* clients with events not collected */
	int hold;       /* pushes only queue (medha_clients_hold) */
	/* optional, the caller's: the events of a client connected over
	   inproc:// (in the server's own process) go to local(local_arg,
	   ev), ev taken over, rather than encoded for its POLL */
	void (*local)(void *arg, struct medha_msg_event *ev);
	void *local_arg;
	uint32_t *held; /* (nheld) clients pushed to while holding */
	int64_t nheld, held_cap;
};

/* The client at peer; with make, a new one if absent (NULL: no memory). */
struct medha_client *
medha_clients_find(struct medha_clients *cs, uint32_t peer, int make);

/* Hold call (a POLL from peer): answered once it has events, or after a
 * heartbeat with none. 0, or MEDHA_ENOMEM (call answered with ERROR). */
int medha_clients_poll(struct medha_clients *cs, uint32_t peer,
    struct medha_srv_call *call, double now);

/* Queue ev (taken over: *ev is zeroed) for peer; dropped, with a
 * warning, if peer is unknown or has stopped reading. */
void
medha_clients_push(struct medha_clients *cs, uint32_t peer,
    struct medha_msg_event *ev);

/*
 * Answer every POLL held MEDHA_PROTO_HEARTBEAT_MS or longer. Returns a
 * client that does not read (events uncollected for MEDHA_CLIENT_STALL_S
 * seconds, or MEDHA_CLIENT_MAX_EVENTS of them), for the caller to treat
 * as gone (cancel its requests, medha_clients_drop), or 0. now is
 * CLOCK_MONOTONIC seconds.
 */
uint32_t medha_clients_tick(struct medha_clients *cs, double now);

/*
 * From hold to release, pushed events only queue; release then answers
 * the POLLs of the clients pushed to meanwhile, one message each for
 * all their events. A server holds while it handles a worker's result,
 * so that the worker's next batch goes out before the clients' tokens
 * and a client gets one message a step for all its requests.
 */
void medha_clients_hold(struct medha_clients *cs);
void medha_clients_release(struct medha_clients *cs);

/* Forget peer and its queue (its held POLL is let go). */
void medha_clients_drop(struct medha_clients *cs, uint32_t peer);

/* Clients that have events not yet collected. */
int64_t medha_clients_pending(const struct medha_clients *cs);

void medha_clients_free(struct medha_clients *cs);

/*
 * A streaming server's stop: once *stop is set it refuses new work
 * (`on`), waits up to timeout seconds for the live requests to end,
 * then for up to two heartbeats for the clients to collect their last
 * events. Called on each pass of the server's loop:
 *
 *	switch (medha_drain_step(&d, stop, live, timeout, &clients, now))
 *	case MEDHA_DRAIN_CANCEL: cancel every live request; break;
 *	case MEDHA_DRAIN_DONE: leave the loop;
 */
struct medha_drain {
	int on;       /* stopping: refuse new requests */
	double until; /* when live requests are cancelled */
	double linger; /* when the loop ends at the latest (0: not yet) */
};

enum { MEDHA_DRAIN_RUN = 0, MEDHA_DRAIN_CANCEL, MEDHA_DRAIN_DONE };

int medha_drain_step(struct medha_drain *d, volatile sig_atomic_t *stop,
    int64_t live, double timeout, const struct medha_clients *cs, double now);

#endif
