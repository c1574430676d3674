/*
 * flights.h: the batches on their way through the live replica's
 * workers (flights.c): each batch the core forms goes to every worker
 * as a flight, answered by all; it lands (its tokens into the core and
 * out to the clients) when all have answered, and stage 0 is free for
 * the next one when the first stage's workers have (SPP pipelining).
 * Also each worker's link: its held READY or RESULT, the batches it was
 * sent and answered, when it was last heard. Calls the output (out.h)
 * and what is below it, nothing above: a failure comes back to the
 * caller (workers.c), which faults. Not for use outside serve/replica/.
 */
#ifndef MEDHA_REP_FLIGHTS_H
#define MEDHA_REP_FLIGHTS_H

#include "serve/replica/out.h"

#include "net/link.h"

/*
 * A batch on its way through the workers: every worker gets it and
 * answers it; it is done when all have, and stage 0 is free for the
 * next one when the first stage's workers have.
 */
struct flight {
	uint64_t seq;               /* its batch_seq */
	struct medha_sched_batch b; /* as the core formed it (items copied) */
	struct medha_msg_item *mi;  /* (b.n_items) as sent */
	int32_t *ids;               /* the items' ids, copied */
	struct medha_msg_fork *fk;  /* the items' forks, copied */
	int32_t *tok;               /* (b.n_items) sampled, -1 none yet */
	struct medha_token_lp **lp; /* (b.n_items) their logprobs, or NULL */
	int left;                   /* workers yet to answer */
	int left0;                  /* of them, stage 0's */
};

/* A worker's link: what it was sent and answered. */
struct rep_link {
	struct medha_srv_call *call; /* its held READY / RESULT */
	double call_since;
	double seen;       /* last heard from or spoken to (medha_now) */
	uint64_t sent;     /* the last batch_seq sent to it */
	uint64_t done;     /* the last batch_seq it answered */
	uint64_t gen_sent; /* the peer table generation it has */
	int talked;        /* a READY or RESULT since its WELCOME: no
	                      batch is formed before every worker's, and
	                      its HELLO again before it is no loss */
};

struct rep_flights {
	struct flight *ring; /* (nring: the core's spp) in flight */
	int nring, head, n;
	struct rep_link *w;  /* (cfg.workers) by worker rank */
	struct medha_msg_peers peers; /* urls: (cfg.workers); the table
	                                 the workers get next */
	int64_t batches;     /* formed */
	int n_experts;       /* a mixture of experts: tokens its workers
	                        routed to each expert (their RESULTs), for
	                        STATUS */
	int64_t experts[MEDHA_PROTO_MAX_EXPERTS];
};

/* 0 or MEDHA_ENOMEM. */
int rep_flights_init(struct medha_replica *r);
/* Held calls dropped, flights void, all freed. */
void rep_flights_free(struct medha_replica *r);
/* The ring for a core of spp stages (fresh: a new core, a new ring):
 * 0 or MEDHA_ENOMEM. */
int rep_flights_ring(struct medha_replica *r, int spp, int fresh);
/* Every batch in flight is void (the core was told). */
void rep_flights_void(struct medha_replica *r);
/* Worker i joined at url (its link new), or left (its call dropped). */
void rep_flights_join(struct medha_replica *r, int i, const char *url);
void rep_flights_leave(struct medha_replica *r, int i);
/* All the workers are there: the peer table they get next. */
void rep_flights_ready(struct medha_replica *r);
/* Worker i's READY or RESULT call held, a former one dropped. */
void rep_flights_hold(struct medha_replica *r, int i,
    struct medha_srv_call *call);
/* Worker i spoke. */
void rep_flights_heard(struct medha_replica *r, int i);
/* Whether the batch worker i runs was made void (a HEARTBEAT's IDLE). */
int rep_flights_void_batch(const struct medha_replica *r, int i);
/* Whether worker i said READY or RESULT since its WELCOME. */
int rep_flights_talked(const struct medha_replica *r, int i);
/* Worker i asked for work with its batch out (it started over): 1 where
 * that batch is still in flight (the caller recovers its requests), 0
 * else; the batch counts as answered either way. */
int rep_flights_dropped(struct medha_replica *r, int i);
/*
 * Worker i's RESULT (stage0: i is one of the first stage's): its tokens
 * into their flight, and every flight all have answered landed. 0, or
 * -1 with why when the batches in flight must be made void (the batch
 * failed, a token outside the vocabulary, out of memory): the caller
 * faults.
 */
int rep_flights_result(struct medha_replica *r, int i, int stage0,
    const struct medha_msg_result *res, char *why, size_t whylen);
/* The next batch formed when stage 0 is free and fewer than spp fly,
 * and sent to the workers whose calls are held: 0, or MEDHA_ENOMEM
 * when it could not be (the caller faults). */
int rep_flights_fill(struct medha_replica *r);
/* Answer worker i's held call with its next batch, or with IDLE when
 * idle_ok or when it has sequences to free (seqs.h). */
void rep_flights_dispatch(struct medha_replica *r, int i, int idle_ok);

#endif
