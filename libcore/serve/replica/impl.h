/*
 * impl.h: the live replica whole (struct medha_replica), as every file
 * of serve/replica/ sees it. Each part is changed by its own file alone
 * (the others read it, or call its functions), and calls go one way,
 * down this list:
 *
 *	replica.c  the life cycle, the front's ops, STATUS, the loop's pass
 *	intake.c   SUBMIT, the tokenizer's thread, CANCEL, a client gone
 *	workers.c  HELLO, READY, RESULT, HEARTBEAT; a worker lost; faults
 *	flights.c  the batches in flight, each worker's link
 *	out.c      tokens, text and stop strings, records to the clients
 *	reqs.c     the requests: the table, the state and its moves
 *	seqs.c     the workers' names of sequences and their frees
 *	core.c     the scheduler core, predictor, tokenizer from a HELLO
 *
 * Not for use outside serve/replica/.
 */
#ifndef MEDHA_REPLICA_IMPL_H
#define MEDHA_REPLICA_IMPL_H

#include "serve/replica/intake.h"

#include "serve/front.h"

#define HB (MEDHA_PROTO_HEARTBEAT_MS / 1e3)
#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define TAKE_AT_ONCE 256 /* messages taken before a decision, at most */

struct medha_replica {
	struct medha_replica_config cfg;
	struct medha_front f; /* socket, clients, drain, live requests */
	double t0;
	struct rep_intake in;   /* intake.c */
	struct rep_workers ws;  /* workers.c */
	struct rep_flights fl;  /* flights.c */
	int64_t served;         /* out.c: records sent */
	struct rep_reqs reqs;   /* reqs.c */
	struct rep_seqs seqs;   /* seqs.c */
	struct rep_core core;   /* core.c */
};

/* Seconds on the replica's clock (the core's time). */
static inline double
now_s(const struct medha_replica *r)
{
	return medha_now() - r->t0;
}

/* Answer call with a message of type alone (OK, IDLE). */
static inline void
answer_type(struct medha_replica *r, struct medha_srv_call *call, int type)
{
	struct medha_msg m = {.type = type};

	medha_srv_msg(r->f.srv, call, &m);
}

#endif
