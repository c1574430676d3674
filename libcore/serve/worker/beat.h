/*
 * beat.h: a live worker's heartbeats (beat.c): while a batch runs, a
 * thread of its own sends HEARTBEAT every second on the scheduler's
 * link (a context of its own, 1), so the scheduler can tell a long batch
 * from a dead worker. The scheduler's answer may say that the batch was
 * made void (a worker of the replica lost): dropped is then set until the
 * next batch starts, and the collectives' waits watch it
 * (medha_coll_drop_on), so the batch fails at once instead of waiting
 * for peers that have given it up. Calls only net/. Not for use outside
 * serve/worker/.
 *
 *	wk_beat_start(&hb, cli);
 *	wk_beat_batch(&hb, id, seq, 1); (run the batch)
 *	wk_beat_batch(&hb, id, seq, 0);
 *	wk_beat_stop(&hb);
 */
#ifndef MEDHA_WK_BEAT_H
#define MEDHA_WK_BEAT_H

#include "net/link.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

struct wk_beat {
	struct medha_cli *cli; /* the caller's */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running;           /* a batch runs: beat */
	int id;                /* the worker id the beats say */
	uint64_t seq;          /* the batch that runs */
	int quit;
	volatile sig_atomic_t dropped; /* the batch seq was made void */
};

/* Start b's thread on link cli (the caller's, open until wk_beat_stop). */
void wk_beat_start(struct wk_beat *b, struct medha_cli *cli);
/* Whether batch seq runs now (on), on worker id's behalf; on clears
 * dropped. */
void wk_beat_batch(struct wk_beat *b, int id, uint64_t seq, int on);
/* Stop and join the thread. */
void wk_beat_stop(struct wk_beat *b);

#endif
