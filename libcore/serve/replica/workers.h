/*
 * workers.h: the live replica's workers (workers.c): who they are (a
 * HELLO, checked whole before the core is made from it), their READY,
 * RESULT and HEARTBEAT, and their faults: a worker lost (its connection
 * closed, or silent past MEDHA_PROTO_DEAD_MS), a batch failed or
 * dropped, which make the batches in flight void and the core fail or
 * recompute what depended on them. Calls the batches in flight
 * (flights.h) and what is below them; replica.c calls it. Not for use
 * outside serve/replica/.
 */
#ifndef MEDHA_REP_WORKERS_H
#define MEDHA_REP_WORKERS_H

#include "serve/replica/flights.h"

#include "net/greet.h"

/* A worker's place: slot i holds rank i (net/coll.h's rank). */
struct rep_wslot {
	int present;
	uint32_t peer;
	struct medha_msg_hello hello;
};

struct rep_workers {
	struct rep_wslot *w; /* (cfg.workers) */
	int n;               /* present */
	int ready;           /* all are: batches are formed */
	struct medha_backoff refused; /* HELLOs refused: said rate-limited */
};

/* 0 or MEDHA_ENOMEM. */
int rep_workers_init(struct medha_replica *r);
void rep_workers_free(struct medha_replica *r);
/* A worker's message (front op "other"): HELLO, READY, RESULT,
 * HEARTBEAT; MEDHA_EUNSUP for any other. */
int rep_on_other(void *arg, struct medha_srv_ev *ev, struct medha_msg *m);
/* A connection closed (front op): 1 if it was a worker's (lost). */
int rep_on_peer_gone(void *arg, uint32_t peer);
/* The loop's pass at time t (medha_now): silent workers lost, held
 * calls answered, a lost worker's requests not recomputed in time
 * failed, the next batch formed. */
void rep_workers_tick(struct medha_replica *r, double t);

#endif
