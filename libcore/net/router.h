/*
 * router.h: medha-router, the front door of several replicas. It speaks
 * the client half of the wire protocol (net/proto.h) on its own
 * listening socket, exactly as a replica's scheduler does, so clients
 * (medha-trace replay, the HTTP front door) cannot tell the two apart,
 * and is itself a client of every replica.
 *
 * Each request goes to the replica with the least predicted pending
 * work (the prefill seconds its STATUS reports, plus what was placed on
 * it since) among those that are ready and have free KV memory for the
 * prompt and its output; when none has the memory, to the least loaded
 * ready one, which queues it. A replica that refuses a request as not
 * ready or overloaded, or cannot be reached, is passed over for the
 * next. Tokens and records stream back to the client unchanged but for
 * the handle (the router's own) and the times (the router's clock, so
 * that TTFT includes the router).
 *
 * A replica whose connection closes, or that answers nothing for
 * MEDHA_PROTO_DEAD_MS, is down: every request it held ends with a
 * "failed" record, and nothing is placed on it until it answers again.
 * Every request ends with exactly one record.
 *
 *	struct medha_router_config c;
 *	medha_router_config_default(&c);
 *	c.listen = "ipc:///tmp/router.sock";
 *	c.replicas = urls; c.nreplicas = 2;
 *	if (medha_router_open(&r, &c, why, sizeof(why)) != 0) ...
 *	medha_router_run(r, &stop_flag);	(until *stop_flag, drained)
 *	medha_router_close(r);
 */
#ifndef MEDHA_ROUTER_H
#define MEDHA_ROUTER_H

#include "medha.h"

#include <signal.h>
#include <stdint.h>

#define MEDHA_ROUTER_MAX_REPLICAS 1024

struct medha_router_config {
	const char *listen;            /* url to listen at */
	const char *const *replicas;   /* (nreplicas) their urls */
	int nreplicas;                 /* 1 .. MEDHA_ROUTER_MAX_REPLICAS */
	double drain_timeout;          /* s a stop waits for requests (30) */
	int64_t max_queue;             /* requests in flight at most;
	                                  more are refused (100000) */
	double status_interval;        /* s between STATUS calls to each
	                                  replica (0.1) */
};

void medha_router_config_default(struct medha_router_config *c);

struct medha_router;

/* Listen at c->listen and dial every replica. Returns 0, MEDHA_EINVAL,
 * MEDHA_EIO (cannot listen) or MEDHA_ENOMEM, with why. */
int medha_router_open(struct medha_router **r,
    const struct medha_router_config *c, char *why, size_t whylen);

/*
 * Serve until *stop becomes non-zero; then refuse new requests, let
 * those in flight finish for up to drain_timeout seconds, cancel the
 * rest, and return 0 (or MEDHA_ENOMEM if it had to give up).
 */
int medha_router_run(struct medha_router *r, volatile sig_atomic_t *stop);

void medha_router_close(struct medha_router *r);

#endif
