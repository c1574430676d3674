/*
 * peers.h: a live worker's place in its replica and its links to the
 * other workers (peers.c): the layout (layout.h), the socket the peers
 * reach it at and the ones it dials from the scheduler's peer table
 * (net/coll.h), and the collectives a batch's forward call makes over
 * them (engine/backend.h struct medha_comm). Calls only net/ and the
 * backend. Not for use outside serve/worker/.
 *
 *	struct wk_peers p;
 *	wk_peers_init(&p, &config, why, sizeof(why));	(the layout)
 *	wk_peers_open(&p, &config, &stop, &drop, why, sizeof(why));
 *	(a BATCH with a peer table: wk_peers_take(&p, be, batch.peers))
 *	wk_peers_comm(&p, &call, batch.seq, &comm);	(a forward's collectives)
 *	wk_peers_close(&p);
 */
#ifndef MEDHA_WK_PEERS_H
#define MEDHA_WK_PEERS_H

#include "serve/worker/worker.h"
#include "layout.h"
#include "net/coll.h"
#include "net/proto.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct wk_peers {
	struct medha_layout lay; /* the replica's, this worker's place */
	struct medha_coll *coll; /* NULL in a replica of one worker */
	int64_t kvp_tokens;      /* KV positions per piece (peer table) */
};

/* One batch's collectives: its sequence number makes the tags. */
struct wk_call {
	const struct wk_peers *p;
	uint64_t bseq;
};

/* p with the layout of c: 0, or MEDHA_EINVAL with why for a rank off
 * the grid. */
int wk_peers_init(struct wk_peers *p, const struct medha_worker_config *c,
    char *why, size_t whylen);
/* In a replica of several workers, listen where the others reach this
 * one (c->peer, or beside the scheduler's address); a collective gives
 * up when *stop is set, or *drop (the batch made void: beat.h). 0, or
 * an error with why. */
int wk_peers_open(struct wk_peers *p, const struct medha_worker_config *c,
    volatile sig_atomic_t *stop, volatile sig_atomic_t *drop, char *why,
    size_t whylen);
/* The peers' links closed (nng 1.5 may never return from it: the
   caller arms medha_link_exit_by first). */
void wk_peers_close(struct wk_peers *p);
/* Where the peers reach this worker, for its HELLO ("" alone). */
const char *wk_peers_url(const struct wk_peers *p);
/* Take the scheduler's peer table t (dial the workers this one sends
 * to, a new generation only) and set up be's collectives over it. 0,
 * or -1 (logged): the scheduler is to be greeted again. */
int wk_peers_take(struct wk_peers *p, struct medha_backend *be,
    const struct medha_msg_peers *t);
/* *cm: the collectives of batch bseq, over c (both the caller's, c
 * living as long as cm is used). */
void wk_peers_comm(const struct wk_peers *p, struct wk_call *c, uint64_t bseq,
    struct medha_comm *cm);
/* SPP, on host memory: len bytes of hidden states to the stage after,
 * or from the stage before (the same TP rank and group). */
int wk_peers_send_next(void *call, const void *buf, size_t len, int mem,
    char *why, size_t whylen);
int wk_peers_recv_prev(void *call, void *buf, size_t len, int mem, char *why,
    size_t whylen);

#endif
