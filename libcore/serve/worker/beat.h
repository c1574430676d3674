/*
 * beat.h: a live worker's heartbeats (beat.c): while a batch runs, a
 * thread of its own sends HEARTBEAT every second on the scheduler's
 * link (a context of its own, 1), so the scheduler can tell a long batch
 * from a dead worker. Calls only net/. Not for use outside
 * serve/worker/.
 *
 *	wk_beat_start(&hb, cli);
 *	wk_beat_batch(&hb, id, 1); (run the batch) wk_beat_batch(&hb, id, 0);
 *	wk_beat_stop(&hb);
 */
#ifndef MEDHA_WK_BEAT_H
#define MEDHA_WK_BEAT_H

#include "net/link.h"

#include <pthread.h>

struct wk_beat {
	struct medha_cli *cli; /* the caller's */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running;           /* a batch runs: beat */
	int id;                /* the worker id the beats say */
	int quit;
};

/* Start b's thread on link cli (the caller's, open until wk_beat_stop). */
void wk_beat_start(struct wk_beat *b, struct medha_cli *cli);
/* Whether a batch runs now (on), on worker id's behalf. */
void wk_beat_batch(struct wk_beat *b, int id, int on);
/* Stop and join the thread. */
void wk_beat_stop(struct wk_beat *b);

#endif
