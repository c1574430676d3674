/*
 * seqs.h: the workers' sequences, as the replica names them and lets
 * them go (seqs.c). The bottom of serve/replica/: it calls nothing of
 * the replica's. Not for use outside serve/replica/.
 *
 * A request's sequence is called by the core's handle on every worker,
 * except after a preemption (MEDHA_KVOP_MOVE): the old sequence, kept
 * for the prefix cache, is the core's ghost's from then on and the
 * request gets a new name (rep_seqs_move). What a worker is to free (or
 * trim) waits in its queue with the number of the last batch formed
 * when it ended, and goes out with the first message sent to that
 * worker after that batch (rep_seqs_due): batches are numbered here.
 *
 *	struct rep_seqs s;
 *	rep_seqs_init(&s, workers);
 *	rep_seqs_join(&s, i);			(worker i said HELLO)
 *	rep_seqs_free_later(&s, rep_seqs_name(&s, h), 0);
 *	n = rep_seqs_due(&s, i, sent);	(the first n of s.q[i] go out)
 *	rep_seqs_sent(&s, i, n);
 *	rep_seqs_free(&s);
 */
#ifndef MEDHA_REP_SEQS_H
#define MEDHA_REP_SEQS_H

#include "map.h"
#include "sched/sched.h"

#include <stdint.h>

/* A worker's sequences to free, in the order they ended. */
struct rep_frees {
	int on;               /* the worker is there: frees are kept */
	uint64_t *h;          /* (n) the workers' names */
	uint64_t *after;      /* (n) the last batch formed as each ended:
	                         it may still hold its items */
	int64_t *keep;        /* (n) prefix caching: positions each keeps,
	                         0: freed */
	int64_t n, cap;
};

struct rep_seqs {
	struct rep_frees *q; /* (nw) by worker rank */
	int nw;
	/* the workers' name of the sequence the core calls by a key,
	   where it is not the key itself: values are uintptr_t */
	struct medha_map name;
	uint64_t name_next; /* the last name made (generation 0) */
	uint64_t bseq;      /* the last batch formed (its batch_seq) */
	uint64_t bseq_void; /* a batch up to it not sent to a worker yet
	                       was made void: it never will be */
};

/* s for nw workers: 0 or MEDHA_ENOMEM. */
int rep_seqs_init(struct rep_seqs *s, int nw);
void rep_seqs_free(struct rep_seqs *s);
/* Worker i is there (an empty queue) or gone (its queue dropped). */
void rep_seqs_join(struct rep_seqs *s, int i);
void rep_seqs_leave(struct rep_seqs *s, int i);
/* The workers' name of the core's sequence h. */
uint64_t rep_seqs_name(const struct rep_seqs *s, uint64_t h);
/* Free (keep 0) or trim the workers' sequence h on every worker there,
 * once each has been sent the last batch formed. */
void rep_seqs_free_later(struct rep_seqs *s, uint64_t h, int64_t keep);
/* A MOVE: the core's op->req's sequence, kept to op->to, is op->src's
 * (the ghost's) from now on, and op->req gets a new name. 0 or
 * MEDHA_ENOMEM. */
int rep_seqs_move(struct rep_seqs *s, const struct medha_kvop *op);
/* The name of key h let go for good. */
void rep_seqs_forget(struct rep_seqs *s, uint64_t h);
/* Every name let go (a new core: its handles start over). */
void rep_seqs_forget_all(struct rep_seqs *s);
/* The next batch's number. */
uint64_t rep_seqs_next_batch(struct rep_seqs *s);
/* Every batch formed so far made void. */
void rep_seqs_void(struct rep_seqs *s);
/* How many of worker i's frees (at most max) may go with a message
 * after batch sent, the first of s->q[i]; rep_seqs_sent: they went. */
int64_t rep_seqs_due(const struct rep_seqs *s, int i, uint64_t sent,
    int64_t max);
void rep_seqs_sent(struct rep_seqs *s, int i, int64_t n);

#endif
